locals {
  tags = merge({ "levee.io/cluster" = var.name, "managed-by" = "terraform" }, var.tags)

  vpc_id     = var.create_vpc ? aws_vpc.this[0].id : var.vpc_id
  subnet_ids = var.create_vpc ? aws_subnet.private[*].id : var.subnet_ids

  storage_class = {
    nvme = "levee-nvme"
    hdd  = "levee-hdd"
  }
  # I/O scheduler per profile: NVMe does its own queueing; HDDs benefit from mq-deadline.
  io_scheduler = {
    nvme = "none"
    hdd  = "mq-deadline"
  }

  # Private subnet of the new VPC in each zone, for groups pinned to zones.
  subnet_by_zone = var.create_vpc ? zipmap(var.availability_zones, aws_subnet.private[*].id) : {}

  # Each group with its defaults filled in. Sizes left out follow the ones given, so that defaults never
  # contradict them: min_size 3 (or less, to fit a smaller desired_size or max_size), desired_size =
  # min_size, max_size = the larger of 6 and desired_size. The validation of var.node_groups repeats
  # these three expressions (it cannot refer to a local computed from the variable it checks).
  groups = {
    for k, g in var.node_groups : k => merge(g, {
      instance_types = coalesce(g.instance_types, local.default_instance_types[g.profile])
      min_size       = coalesce(g.min_size, min(3, coalesce(g.desired_size, g.max_size, 3)))
      desired_size   = coalesce(g.desired_size, g.min_size, min(3, coalesce(g.max_size, 3)))
      max_size       = coalesce(g.max_size, max(6, coalesce(g.desired_size, g.min_size, 3)))
      # d2/h1: instance-store disks to map as ephemeral0..N-1 (validation keeps a group on one shape).
      ephemeral_volumes = max(0, [
        for t in coalesce(g.instance_types, local.default_instance_types[g.profile]) :
        contains(local.ephemeral_mapped_families, split(".", t)[0]) ? try(local.instance_shapes[t].disks, 0) : 0
      ]...)
      subnet_ids = (
        g.subnet_ids != null ? g.subnet_ids :
        g.availability_zones != null ? [for z in g.availability_zones : local.subnet_by_zone[z]] :
        local.subnet_ids
      )
      labels = merge(g.labels, { "levee.io/storage" = g.profile })
      # AL2023 EKS-optimised AMI matching the group's architecture (validation keeps a group on one).
      ami_type = (
        anytrue([for t in coalesce(g.instance_types, lookup(local.default_instance_types, g.profile, ["i4i.2xlarge"])) : contains(local.arm64_families, split(".", t)[0])])
        ? "AL2023_ARM_64_STANDARD" : "AL2023_x86_64_STANDARD"
      )
    })
  }
}
