locals {
  tags = merge({ "levee.io/cluster" = var.name, "managed-by" = "terraform" }, var.tags)

  vpc_id     = var.create_vpc ? aws_vpc.this[0].id : var.vpc_id
  subnet_ids = var.create_vpc ? aws_subnet.private[*].id : var.subnet_ids

  # Instance families with local instance-store disks of each profile's kind (the part of the type
  # before the dot: i4i.2xlarge -> i4i). Instance types outside these are refused by validation.
  instance_store_families = {
    nvme = [
      "i3", "i3en", "i4i", "i4g", "i7ie", "im4gn", "is4gen",
      "c5d", "m5d", "m5dn", "r5d", "r5dn", "c6id", "m6id", "r6id", "c6gd", "m6gd", "r6gd", "m7gd", "r7gd",
      "x2idn", "x2iedn",
    ]
    hdd = ["d2", "d3", "d3en", "h1"]
  }
  # Graviton families among them: their groups run the arm64 EKS AMI.
  arm64_families = ["i4g", "im4gn", "is4gen", "c6gd", "m6gd", "r6gd", "m7gd", "r7gd"]

  default_instance_types = {
    nvme = ["i4i.2xlarge", "i3en.2xlarge"]
    hdd  = ["d3.2xlarge", "d3en.2xlarge"]
  }
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

  groups = {
    for k, g in var.node_groups : k => merge(g, {
      instance_types = coalesce(g.instance_types, local.default_instance_types[g.profile])
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
