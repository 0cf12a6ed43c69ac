# Plan-only tests with a mocked AWS provider: no credentials, no network. They check what the module
# would create and that bad input is refused with its message.

mock_provider "aws" {
  # Policy documents are computed by the provider; give the mock a valid one so roles plan.
  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}"
    }
  }
  mock_data "aws_region" {
    defaults = {
      name = "eu-west-1"
    }
  }
}

variables {
  name               = "levee-test"
  availability_zones = ["eu-west-1a", "eu-west-1b", "eu-west-1c"]
  node_groups = {
    nvme = {
      profile = "nvme"
    }
    hdd = {
      profile        = "hdd"
      instance_types = ["d3en.2xlarge"]
      min_size       = 2
      desired_size   = 4
      max_size       = 8
      taint          = true
      labels         = { tier = "cold" }
    }
  }
}

run "node_groups_per_profile" {
  command = plan

  assert {
    condition     = aws_eks_node_group.group["nvme"].instance_types == tolist(["i4i.2xlarge"])
    error_message = "nvme groups default to one instance type, i4i.2xlarge (one shape per group)"
  }
  assert {
    condition     = aws_eks_node_group.group["hdd"].instance_types == tolist(["d3en.2xlarge"])
    error_message = "explicit instance types are used as given"
  }
  assert {
    condition     = aws_eks_node_group.group["nvme"].labels["levee.io/storage"] == "nvme" && aws_eks_node_group.group["hdd"].labels["levee.io/storage"] == "hdd"
    error_message = "nodes carry levee.io/storage=<profile>, the label a KVCluster selects"
  }
  assert {
    condition     = aws_eks_node_group.group["hdd"].labels["tier"] == "cold"
    error_message = "extra labels are kept"
  }
  assert {
    condition     = length(aws_eks_node_group.group["nvme"].taint) == 0
    error_message = "groups are untainted unless asked"
  }
  assert {
    condition     = one(aws_eks_node_group.group["hdd"].taint).key == "levee.io/storage" && one(aws_eks_node_group.group["hdd"].taint).value == "hdd" && one(aws_eks_node_group.group["hdd"].taint).effect == "NO_SCHEDULE"
    error_message = "taint = true adds levee.io/storage=hdd:NoSchedule"
  }
  assert {
    condition     = aws_eks_node_group.group["nvme"].scaling_config[0].min_size == 3 && aws_eks_node_group.group["nvme"].scaling_config[0].desired_size == 3 && aws_eks_node_group.group["nvme"].scaling_config[0].max_size == 6
    error_message = "default sizes are 3/3/6"
  }
  assert {
    condition     = aws_eks_node_group.group["hdd"].scaling_config[0].min_size == 2 && aws_eks_node_group.group["hdd"].scaling_config[0].desired_size == 4 && aws_eks_node_group.group["hdd"].scaling_config[0].max_size == 8
    error_message = "sizes are passed through"
  }
  assert {
    condition     = aws_eks_node_group.group["nvme"].ami_type == "AL2023_x86_64_STANDARD" && aws_eks_node_group.group["hdd"].ami_type == "AL2023_x86_64_STANDARD"
    error_message = "i4i/i3en/d3en groups run the x86_64 AL2023 EKS AMI"
  }
  assert {
    condition     = aws_eks_node_group.group["hdd"].update_config[0].max_unavailable == 1
    error_message = "storage nodes are replaced one at a time"
  }
  assert {
    condition     = length(aws_subnet.private) == 3 && length(aws_subnet.public) == 3 && length(aws_nat_gateway.this) == 1
    error_message = "a new VPC gets a private and a public subnet per zone and one NAT gateway"
  }
  assert {
    condition     = output.storage["hdd"].storageClassName == "levee-hdd" && output.storage["nvme"].storageClassName == "levee-nvme" && output.storage["nvme"].nodeLabel == "levee.io/storage=nvme" && output.storage["hdd"].discoveryDir == "/mnt/levee-disks/hdd" && output.storage["nvme"].mountPath == "/mnt/levee"
    error_message = "the storage output tells what to put in a KVCluster"
  }
  assert {
    condition     = output.storage["hdd"].tolerations == [{ key = "levee.io/storage", operator = "Equal", value = "hdd", effect = "NoSchedule" }] && length(output.storage["nvme"].tolerations) == 0
    error_message = "the storage output carries the tolerations a KVCluster on a tainted group needs, and none for an untainted one"
  }
  assert {
    condition     = strcontains(output.storage_class_manifests, "name: levee-nvme") && strcontains(output.storage_class_manifests, "name: levee-hdd") && strcontains(output.storage_class_manifests, "WaitForFirstConsumer")
    error_message = "storage classes for the local volumes are rendered"
  }
  assert {
    condition     = output.kubeconfig_command == "aws eks update-kubeconfig --region eu-west-1 --name levee-test"
    error_message = "kubeconfig command names the cluster and its region"
  }
}

run "user_data_prepares_the_disks" {
  command = plan

  assert {
    condition = alltrue([for step in [
      "Amazon_EC2_NVMe_Instance_Storage",
      "mdadm --create",
      "--level=0",
      "mkfs.xfs",
      "mount -o noatime",
      "DISCOVERY=\"/mnt/levee-disks/nvme\"",
      "mount --bind",
      "echo none >",
      "transparent_hugepage/enabled",
    ] : strcontains(base64decode(aws_launch_template.group["nvme"].user_data), step)])
    error_message = "nvme user data finds the instance-store disks, builds RAID0, formats XFS, mounts noatime, exposes the mount, sets the none scheduler and turns THP off"
  }
  assert {
    condition     = strcontains(base64decode(aws_launch_template.group["hdd"].user_data), "echo mq-deadline >") && !strcontains(base64decode(aws_launch_template.group["hdd"].user_data), "echo none >") && strcontains(base64decode(aws_launch_template.group["hdd"].user_data), "DISCOVERY=\"/mnt/levee-disks/hdd\"")
    error_message = "hdd nodes use the mq-deadline scheduler"
  }
  assert {
    condition     = startswith(base64decode(aws_launch_template.group["nvme"].user_data), "MIME-Version: 1.0")
    error_message = "EKS launch-template user data must be MIME multipart"
  }
  assert {
    condition     = aws_launch_template.group["nvme"].metadata_options[0].http_tokens == "required"
    error_message = "IMDSv2 only"
  }
}

run "security_groups_are_scoped_to_the_cluster" {
  command = plan

  assert {
    condition     = aws_vpc_security_group_ingress_rule.levee_from_cluster["grpc"].from_port == 8087 && aws_vpc_security_group_ingress_rule.levee_from_cluster["metrics"].from_port == 8098 && aws_vpc_security_group_ingress_rule.levee_from_cluster["webhook"].from_port == 9443
    error_message = "levee gRPC, metrics and webhook ports are opened"
  }
  assert {
    condition     = alltrue([for r in values(aws_vpc_security_group_ingress_rule.levee_from_cluster) : r.cidr_ipv4 == null && r.cidr_ipv6 == null])
    error_message = "node ports admit security groups only, never CIDR ranges"
  }
  assert {
    condition     = aws_vpc_security_group_ingress_rule.node_self.cidr_ipv4 == null && aws_vpc_security_group_ingress_rule.api_from_nodes.cidr_ipv4 == null
    error_message = "node-to-node and node-to-API rules are scoped to security groups"
  }
  assert {
    condition     = aws_eks_cluster.this.vpc_config[0].endpoint_public_access == false
    error_message = "the API endpoint is private unless public CIDRs are given"
  }
  assert {
    condition     = length(aws_iam_role.operator) == 1 && length(aws_iam_openid_connect_provider.this) == 1
    error_message = "IRSA role for the operator is created by default"
  }
}

run "existing_vpc" {
  command = plan

  variables {
    create_vpc = false
    vpc_id     = "vpc-0123"
    subnet_ids = ["subnet-a", "subnet-b"]
    node_groups = {
      nvme = {
        profile    = "nvme"
        subnet_ids = ["subnet-a"]
      }
    }
    operator_irsa = { enabled = false }
  }

  assert {
    condition     = length(aws_vpc.this) == 0 && length(aws_subnet.private) == 0
    error_message = "no VPC is created when one is given"
  }
  assert {
    condition     = aws_eks_cluster.this.vpc_config[0].subnet_ids == toset(["subnet-a", "subnet-b"])
    error_message = "the cluster uses the given subnets"
  }
  assert {
    condition     = aws_eks_node_group.group["nvme"].subnet_ids == toset(["subnet-a"])
    error_message = "a group can be pinned to some zones"
  }
  assert {
    condition     = length(aws_iam_role.operator) == 0
    error_message = "IRSA can be turned off"
  }
}

run "groups_pinned_to_zones" {
  command = plan

  # Give the new VPC's private subnets known ids at plan time so the node groups' subnets can be compared.
  override_resource {
    target          = aws_subnet.private[0]
    override_during = plan
    values          = { id = "subnet-1a" }
  }
  override_resource {
    target          = aws_subnet.private[1]
    override_during = plan
    values          = { id = "subnet-1b" }
  }
  override_resource {
    target          = aws_subnet.private[2]
    override_during = plan
    values          = { id = "subnet-1c" }
  }

  variables {
    node_groups = {
      nvme = { profile = "nvme" }
      hdd  = { profile = "hdd", availability_zones = ["eu-west-1a", "eu-west-1c"], min_size = 2, desired_size = 2 }
    }
  }

  assert {
    condition     = aws_eks_node_group.group["nvme"].subnet_ids == toset(["subnet-1a", "subnet-1b", "subnet-1c"])
    error_message = "an unpinned group spans every zone of the new VPC"
  }
  assert {
    condition     = aws_eks_node_group.group["hdd"].subnet_ids == toset(["subnet-1a", "subnet-1c"])
    error_message = "a group pinned to zones gets the private subnets of those zones only"
  }
  assert {
    condition     = aws_eks_cluster.this.vpc_config[0].subnet_ids == toset(["subnet-1a", "subnet-1b", "subnet-1c"])
    error_message = "the control plane uses every private subnet"
  }
}

run "graviton_group_runs_arm64_ami" {
  command = plan
  variables {
    node_groups = { arm = { profile = "nvme", instance_types = ["im4gn.2xlarge"] } }
  }
  assert {
    condition     = aws_eks_node_group.group["arm"].ami_type == "AL2023_ARM_64_STANDARD"
    error_message = "Graviton instance-store families run the arm64 AL2023 EKS AMI"
  }
}

run "unknown_profile_is_rejected" {
  command = plan
  variables {
    node_groups = { ssd = { profile = "ssd" } }
  }
  expect_failures = [var.node_groups]
}

run "min_above_max_is_rejected" {
  command = plan
  variables {
    node_groups = { nvme = { profile = "nvme", min_size = 5, desired_size = 5, max_size = 3 } }
  }
  expect_failures = [var.node_groups]
}

run "nvme_group_without_instance_store_is_rejected" {
  command = plan
  variables {
    node_groups = { nvme = { profile = "nvme", instance_types = ["m5.2xlarge"] } }
  }
  expect_failures = [var.node_groups]
}

run "hdd_group_on_nvme_instances_is_rejected" {
  command = plan
  variables {
    node_groups = { hdd = { profile = "hdd", instance_types = ["i4i.2xlarge"] } }
  }
  expect_failures = [var.node_groups]
}

run "empty_subnets_are_rejected" {
  command = plan
  variables {
    create_vpc = false
    vpc_id     = "vpc-0123"
    subnet_ids = []
  }
  expect_failures = [var.subnet_ids]
}

run "new_vpc_needs_two_zones" {
  command = plan
  variables {
    availability_zones = ["eu-west-1a"]
  }
  expect_failures = [var.availability_zones]
}

run "bad_name_is_rejected" {
  command = plan
  variables {
    name = "Levee_Prod"
  }
  expect_failures = [var.name]
}

run "mixed_architectures_are_rejected" {
  command = plan
  variables {
    node_groups = { nvme = { profile = "nvme", instance_types = ["i4i.2xlarge", "im4gn.2xlarge"] } }
  }
  expect_failures = [var.node_groups]
}

run "empty_instance_types_are_rejected" {
  command = plan
  variables {
    node_groups = { nvme = { profile = "nvme", instance_types = [] } }
  }
  expect_failures = [var.node_groups]
}

run "empty_group_subnets_are_rejected" {
  command = plan
  variables {
    create_vpc  = false
    vpc_id      = "vpc-0123"
    subnet_ids  = ["subnet-a", "subnet-b"]
    node_groups = { nvme = { profile = "nvme", subnet_ids = [] } }
  }
  expect_failures = [var.node_groups]
}

run "zones_outside_the_vpc_are_rejected" {
  command = plan
  variables {
    node_groups = { nvme = { profile = "nvme", availability_zones = ["eu-west-1d"] } }
  }
  expect_failures = [var.node_groups]
}

# Issue 18, 1: nodes carry this group and the EKS cluster security group, which EKS tags
# kubernetes.io/cluster/<name>; a second tagged group breaks LoadBalancer Services and Ingresses.
run "node_security_group_leaves_the_cluster_tag_to_eks" {
  command = plan

  assert {
    condition     = !contains(keys(aws_security_group.node.tags), "kubernetes.io/cluster/levee-test")
    error_message = "the node security group must not be tagged kubernetes.io/cluster/<name>: the EKS cluster security group on the same nodes already is"
  }
  assert {
    condition     = !contains(keys(aws_security_group.cluster.tags), "kubernetes.io/cluster/levee-test")
    error_message = "the module's control-plane security group is not tagged for the cluster either"
  }
}

# Issue 18, 2: d2/h1 instance stores are not NVMe and attach only when mapped as ephemeralN.
run "xen_instance_store_is_mapped_as_ephemeral" {
  command = plan
  variables {
    node_groups = {
      d2   = { profile = "hdd", instance_types = ["d2.8xlarge"] }
      h1   = { profile = "hdd", instance_types = ["h1.4xlarge"], disk_size_gb = 100 }
      d3en = { profile = "hdd" }
      nvme = { profile = "nvme" }
    }
  }

  assert {
    condition     = [for m in aws_launch_template.group["d2"].block_device_mappings : m.virtual_name if m.virtual_name != null] == [for i in range(24) : "ephemeral${i}"]
    error_message = "a d2.8xlarge group maps its 24 instance-store disks as ephemeral0..ephemeral23"
  }
  assert {
    condition     = [for m in aws_launch_template.group["d2"].block_device_mappings : m.device_name] == concat(["/dev/xvda"], [for c in split("", "bcdefghijklmnopqrstuvwxy") : "/dev/sd${c}"])
    error_message = "the ephemeral disks take /dev/sdb../dev/sdy after the root volume /dev/xvda"
  }
  assert {
    condition     = [for m in aws_launch_template.group["h1"].block_device_mappings : m.virtual_name if m.virtual_name != null] == ["ephemeral0", "ephemeral1"]
    error_message = "an h1.4xlarge group maps its 2 instance-store disks"
  }
  assert {
    condition     = length(aws_launch_template.group["nvme"].block_device_mappings) == 1 && length(aws_launch_template.group["d3en"].block_device_mappings) == 1
    error_message = "NVMe instance stores (i4i, d3en) need no mapping: only the root volume is mapped"
  }
  assert {
    condition     = aws_launch_template.group["h1"].block_device_mappings[0].ebs[0].volume_size == 100 && aws_launch_template.group["d2"].block_device_mappings[0].ebs[0].volume_size == 50
    error_message = "disk_size_gb sizes the root volume (default 50 GiB)"
  }
}

# Issue 18, 3: a node whose disks failed to prepare must not join with its storage label.
run "failed_disk_preparation_keeps_the_node_out" {
  command = plan

  assert {
    condition = alltrue([for p in ["nvme", "hdd"] : alltrue([for line in [
      "/etc/systemd/system/kubelet.service.d/90-levee-data-volume.conf",
      "RequiresMountsFor=$MOUNT $DISCOVERY/vol0",
      "AssertPathIsMountPoint=$MOUNT\n",
      "AssertPathIsMountPoint=$DISCOVERY/vol0\n",
      "DISCOVERY=\"/mnt/levee-disks/${p}\"",
    ] : strcontains(base64decode(aws_launch_template.group[p].user_data), line)])])
    error_message = "the user data installs a kubelet drop-in that refuses to start the kubelet unless the data volume and its discovery bind mount are mounted"
  }
  assert {
    # The gate goes in (and systemd reloads) before the first step that can fail: disk discovery.
    condition = alltrue([for p in ["nvme", "hdd"] :
      length(split("systemctl daemon-reload", base64decode(aws_launch_template.group[p].user_data))[0]) >
      length(split("90-levee-data-volume.conf", base64decode(aws_launch_template.group[p].user_data))[0]) &&
      length(split("systemctl daemon-reload", base64decode(aws_launch_template.group[p].user_data))[0]) <
      length(split("mapfile -t DISKS", base64decode(aws_launch_template.group[p].user_data))[0])
    ])
    error_message = "the kubelet drop-in must be in place, and systemd reloaded, before the disk steps that can fail"
  }
}

# Issue 18, 4: a bad root volume size fails at plan, not at apply.
run "negative_root_volume_is_rejected" {
  command = plan
  variables {
    node_groups = { nvme = { profile = "nvme", disk_size_gb = -50 } }
  }
  expect_failures = [var.node_groups]
}

run "root_volume_smaller_than_the_ami_is_rejected" {
  command = plan
  variables {
    node_groups = { nvme = { profile = "nvme", disk_size_gb = 10 } }
  }
  expect_failures = [var.node_groups]
}

# Issue 18, 5: the I/O scheduler survives reboots (the user data runs once per instance).
run "io_scheduler_survives_reboots" {
  command = plan

  assert {
    condition = alltrue([for p in ["nvme", "hdd"] : alltrue([for s in [
      "> /etc/udev/rules.d/90-levee-disks.rules",
      "ATTRS{model}==\"Amazon EC2 NVMe Instance Storage\", ATTR{queue/scheduler}=\"${p == "hdd" ? "mq-deadline" : "none"}\", ATTR{queue/read_ahead_kb}=\"128\"",
      "KERNEL==\\\"$name\\\", ATTR{queue/scheduler}=\\\"${p == "hdd" ? "mq-deadline" : "none"}\\\"",
    ] : strcontains(base64decode(aws_launch_template.group[p].user_data), s)])])
    error_message = "a udev rule sets the profile's I/O scheduler and read-ahead on the instance-store disks at every boot (NVMe by model, Xen disks by name)"
  }
  assert {
    condition     = !strcontains(base64decode(aws_launch_template.group["hdd"].user_data), "ATTR{queue/scheduler}=\"none\"")
    error_message = "the hdd rule does not set the none scheduler"
  }
}

# Issue 18, 6: one shape per node group.
run "hdd_types_of_different_shapes_are_rejected" {
  command = plan
  variables {
    # d3.2xlarge: 8 vCPU, 64 GiB, 6 x 2 TB; d3en.2xlarge: 8 vCPU, 32 GiB, 4 x 14 TB.
    node_groups = { hdd = { profile = "hdd", instance_types = ["d3.2xlarge", "d3en.2xlarge"] } }
  }
  expect_failures = [var.node_groups]
}

run "nvme_types_of_different_shapes_are_rejected" {
  command = plan
  variables {
    # i4i.2xlarge: 1 x 1,875 GB; i3en.2xlarge: 2 x 2,500 GB (same vCPUs and memory).
    node_groups = { nvme = { profile = "nvme", instance_types = ["i4i.2xlarge", "i3en.2xlarge"] } }
  }
  expect_failures = [var.node_groups]
}

run "types_of_unknown_shape_cannot_share_a_group" {
  command = plan
  variables {
    node_groups = { nvme = { profile = "nvme", instance_types = ["c6id.2xlarge", "m6id.2xlarge"] } }
  }
  expect_failures = [var.node_groups]
}

run "unknown_xen_size_is_rejected" {
  command = plan
  variables {
    node_groups = { hdd = { profile = "hdd", instance_types = ["d2.16xlarge"] } }
  }
  expect_failures = [var.node_groups]
}

run "types_of_one_shape_share_a_group" {
  command = plan
  variables {
    node_groups = {
      m5d  = { profile = "nvme", instance_types = ["m5d.2xlarge", "m5dn.2xlarge"] }
      c6id = { profile = "nvme", instance_types = ["c6id.2xlarge"] }
      hdd  = { profile = "hdd" }
    }
  }
  assert {
    condition     = aws_eks_node_group.group["m5d"].instance_types == tolist(["m5d.2xlarge", "m5dn.2xlarge"]) && aws_eks_node_group.group["c6id"].instance_types == tolist(["c6id.2xlarge"])
    error_message = "types of one shape may share a group, and a single type needs no shape entry"
  }
  assert {
    condition     = aws_eks_node_group.group["hdd"].instance_types == tolist(["d3en.2xlarge"])
    error_message = "hdd groups default to one instance type, d3en.2xlarge"
  }
}

# Issue 18, 7: sizes left out follow the ones given instead of contradicting them.
run "left_out_sizes_follow_the_given_ones" {
  command = plan
  variables {
    node_groups = {
      small   = { profile = "nvme", min_size = 1, max_size = 2 }
      capped  = { profile = "nvme", max_size = 2 }
      big     = { profile = "nvme", desired_size = 10 }
      dormant = { profile = "hdd", min_size = 0 }
    }
  }
  assert {
    condition     = [for k in ["small", "capped", "big", "dormant"] : [aws_eks_node_group.group[k].scaling_config[0].min_size, aws_eks_node_group.group[k].scaling_config[0].desired_size, aws_eks_node_group.group[k].scaling_config[0].max_size]] == [[1, 1, 2], [2, 2, 2], [3, 10, 10], [0, 0, 6]]
    error_message = "min 1/max 2 -> 1/1/2; max 2 -> 2/2/2; desired 10 -> 3/10/10; min 0 -> 0/0/6"
  }
}

# Issue 18, 7: the README walkthrough runs kubectl from a workstation, through the public endpoint.
run "public_endpoint_for_a_workstation" {
  command = plan
  variables {
    endpoint_public_access_cidrs = ["203.0.113.7/32"]
  }
  assert {
    condition     = aws_eks_cluster.this.vpc_config[0].endpoint_public_access && aws_eks_cluster.this.vpc_config[0].public_access_cidrs == toset(["203.0.113.7/32"]) && aws_eks_cluster.this.vpc_config[0].endpoint_private_access
    error_message = "endpoint_public_access_cidrs opens the public endpoint to those CIDRs only; nodes keep the private endpoint"
  }
}

run "bad_endpoint_cidr_is_rejected" {
  command = plan
  variables {
    endpoint_public_access_cidrs = ["203.0.113.7"]
  }
  expect_failures = [var.endpoint_public_access_cidrs]
}
