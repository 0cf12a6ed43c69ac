locals {
  tags = merge({ "levee.io/cluster" = var.name, "managed-by" = "terraform" }, var.tags)

  vpc_id     = var.create_vpc ? aws_vpc.this[0].id : var.vpc_id
  subnet_ids = var.create_vpc ? aws_subnet.private[*].id : var.subnet_ids

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

  groups = {
    for k, g in var.node_groups : k => merge(g, {
      instance_types = coalesce(g.instance_types, local.default_instance_types[g.profile])
      subnet_ids     = coalesce(g.subnet_ids, local.subnet_ids)
      labels         = merge(g.labels, { "levee.io/storage" = g.profile })
    })
  }
}
