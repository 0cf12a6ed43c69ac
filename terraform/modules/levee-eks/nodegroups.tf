# One launch template + managed node group per entry of var.node_groups. The launch template's user
# data prepares the instance-store disks before the node joins (see templates/userdata.sh.tftpl).

resource "aws_launch_template" "group" {
  for_each               = local.groups
  name_prefix            = "${var.name}-${each.key}-"
  update_default_version = true
  vpc_security_group_ids = [aws_security_group.node.id, aws_eks_cluster.this.vpc_config[0].cluster_security_group_id]

  # EKS merges this MIME part with its own bootstrap part.
  user_data = base64encode(templatefile("${path.module}/templates/userdata.mime.tftpl", {
    script = templatefile("${path.module}/templates/userdata.sh.tftpl", {
      profile      = each.value.profile
      mount_path   = var.data_mount_path
      io_scheduler = local.io_scheduler[each.value.profile]
    })
  }))

  block_device_mappings {
    device_name = "/dev/xvda"
    ebs {
      volume_size           = each.value.disk_size_gb
      volume_type           = "gp3"
      encrypted             = true
      delete_on_termination = true
    }
  }

  # d2/h1 (Xen): their instance-store disks are not NVMe, and EC2 attaches them only when mapped as
  # ephemeral0..N-1; they appear as /dev/xvdb, /dev/xvdc, ... NVMe instance stores need no mapping.
  dynamic "block_device_mappings" {
    for_each = range(each.value.ephemeral_volumes)
    content {
      device_name  = "/dev/sd${substr("bcdefghijklmnopqrstuvwxy", block_device_mappings.value, 1)}"
      virtual_name = "ephemeral${block_device_mappings.value}"
    }
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 2
  }

  tag_specifications {
    resource_type = "instance"
    tags          = merge(local.tags, { Name = "${var.name}-${each.key}", "levee.io/storage" = each.value.profile })
  }
  tags = local.tags
}

resource "aws_eks_node_group" "group" {
  for_each        = local.groups
  cluster_name    = aws_eks_cluster.this.name
  node_group_name = "${var.name}-${each.key}"
  node_role_arn   = aws_iam_role.node.arn
  subnet_ids      = each.value.subnet_ids
  instance_types  = each.value.instance_types
  ami_type        = each.value.ami_type
  capacity_type   = "ON_DEMAND"
  labels          = each.value.labels

  scaling_config {
    min_size     = each.value.min_size
    max_size     = each.value.max_size
    desired_size = each.value.desired_size
  }

  update_config {
    # Storage nodes hold data: replace one at a time (the KVCluster PDB allows one member down).
    max_unavailable = 1
  }

  launch_template {
    id      = aws_launch_template.group[each.key].id
    version = aws_launch_template.group[each.key].latest_version
  }

  dynamic "taint" {
    for_each = each.value.taint ? [each.value.profile] : []
    content {
      key    = "levee.io/storage"
      value  = taint.value
      effect = "NO_SCHEDULE"
    }
  }

  tags = local.tags

  lifecycle {
    ignore_changes = [scaling_config[0].desired_size]
  }

  depends_on = [aws_iam_role_policy_attachment.node]
}
