variable "name" {
  description = "Name of the EKS cluster; prefixes every resource the module creates."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,38}[a-z0-9]$", var.name))
    error_message = "name must be 3-40 characters of lowercase letters, digits and dashes, starting with a letter."
  }
}

variable "kubernetes_version" {
  description = "EKS Kubernetes version (e.g. \"1.31\")."
  type        = string
  default     = "1.31"

  validation {
    condition     = can(regex("^1\\.[0-9]{2}$", var.kubernetes_version))
    error_message = "kubernetes_version must look like \"1.31\"."
  }
}

variable "create_vpc" {
  description = "Create a new VPC (private subnets with one NAT gateway, public subnets for it). When false, pass vpc_id and subnet_ids."
  type        = bool
  default     = true
}

variable "vpc_cidr" {
  description = "CIDR block of the new VPC (create_vpc = true)."
  type        = string
  default     = "10.42.0.0/16"

  validation {
    condition     = can(cidrnetmask(var.vpc_cidr))
    error_message = "vpc_cidr must be an IPv4 CIDR block such as 10.42.0.0/16."
  }
}

variable "availability_zones" {
  description = "Availability zones for the new VPC's subnets, one private and one public subnet each. Required (at least two) with create_vpc = true, the default; unused with an existing VPC."
  type        = list(string)
  default     = []

  validation {
    condition     = !var.create_vpc || length(var.availability_zones) >= 2
    error_message = "With create_vpc = true, availability_zones must list at least two zones (EKS needs subnets in two)."
  }
}

variable "vpc_id" {
  description = "Existing VPC (create_vpc = false)."
  type        = string
  default     = null

  validation {
    condition     = var.create_vpc || var.vpc_id != null
    error_message = "With create_vpc = false, vpc_id must name the existing VPC."
  }
}

variable "subnet_ids" {
  description = "Existing private subnets, one or more per zone, for the cluster and the node groups (create_vpc = false)."
  type        = list(string)
  default     = []

  validation {
    condition     = var.create_vpc || length(var.subnet_ids) > 0
    error_message = "With create_vpc = false, subnet_ids must list at least one existing subnet (in two zones or more)."
  }
}

variable "node_groups" {
  description = <<-EOT
    Managed node groups, keyed by a short name. `profile` is nvme (local NVMe instance store, e.g. i4i/i3en)
    or hdd (dense HDD instance store, e.g. d3/d3en); nodes get the label levee.io/storage=<profile> that
    a KVCluster's spec.storage.profile selects. A group runs in every subnet unless pinned to some zones
    with `availability_zones` (new VPC) or to some subnets with `subnet_ids` (existing VPC). Sizes left out
    follow the ones given: min_size 3 (capped by a smaller desired_size or max_size), desired_size =
    min_size, max_size = max(6, desired_size). The instance types of a group must be of one shape (see
    local.instance_shapes); put other shapes in groups of their own.
  EOT
  type = map(object({
    profile            = string
    instance_types     = optional(list(string))
    min_size           = optional(number)
    max_size           = optional(number)
    desired_size       = optional(number)
    availability_zones = optional(list(string))
    subnet_ids         = optional(list(string))
    labels             = optional(map(string), {})
    taint              = optional(bool, false)
    disk_size_gb       = optional(number, 50)
  }))

  validation {
    condition     = length(var.node_groups) > 0
    error_message = "node_groups needs at least one group."
  }
  validation {
    condition     = alltrue([for g in values(var.node_groups) : contains(["nvme", "hdd"], g.profile)])
    error_message = "Each node group's profile must be \"nvme\" or \"hdd\"."
  }
  validation {
    # The defaults of left-out sizes, as in local.groups.
    condition = alltrue([
      for g in values(var.node_groups) : (
        coalesce(g.min_size, min(3, coalesce(g.desired_size, g.max_size, 3))) >= 0 &&
        coalesce(g.min_size, min(3, coalesce(g.desired_size, g.max_size, 3))) <= coalesce(g.desired_size, g.min_size, min(3, coalesce(g.max_size, 3))) &&
        coalesce(g.desired_size, g.min_size, min(3, coalesce(g.max_size, 3))) <= coalesce(g.max_size, max(6, coalesce(g.desired_size, g.min_size, 3))) &&
        coalesce(g.max_size, max(6, coalesce(g.desired_size, g.min_size, 3))) >= 1
      )
    ])
    error_message = "Each node group needs 0 <= min_size <= desired_size <= max_size and max_size >= 1 (sizes left out follow the ones given)."
  }
  validation {
    # Root EBS volume: integral GiB, no smaller than the EKS AL2023 AMI's 20 GiB snapshot, at most gp3's 16 TiB.
    condition     = alltrue([for g in values(var.node_groups) : g.disk_size_gb >= 20 && g.disk_size_gb <= 16384 && floor(g.disk_size_gb) == g.disk_size_gb])
    error_message = "A node group's disk_size_gb (root EBS volume) must be a whole number of GiB from 20 (the EKS AMI's snapshot) to 16384 (gp3's maximum)."
  }
  validation {
    condition     = alltrue([for g in values(var.node_groups) : g.instance_types == null || length(coalesce(g.instance_types, ["x"])) > 0])
    error_message = "A node group's instance_types, when given, must list at least one instance type (leave it out for the profile's defaults)."
  }
  validation {
    # Families are matched on the part before the dot (i4i.2xlarge -> i4i); see local.instance_store_families.
    condition = alltrue([
      for g in values(var.node_groups) : alltrue([
        for t in coalesce(g.instance_types, lookup(local.default_instance_types, g.profile, ["i4i.2xlarge"])) :
        contains(lookup(local.instance_store_families, g.profile, local.instance_store_families.nvme), split(".", t)[0])
      ])
    ])
    error_message = "Every instance type must have instance-store disks of its group's profile: nvme groups need an NVMe instance-store family (i3, i3en, i4i, i4g, i7ie, im4gn, is4gen, c5d, m5d, r5d, c6id, m6id, r6id, c6gd, m6gd, r6gd, m7gd, r7gd, x2idn, x2iedn); hdd groups need d2, d3, d3en or h1."
  }
  validation {
    # A managed node group runs one AMI type, so its instance types must share a CPU architecture.
    condition = alltrue([
      for g in values(var.node_groups) :
      length(distinct([for t in coalesce(g.instance_types, lookup(local.default_instance_types, g.profile, ["i4i.2xlarge"])) : contains(local.arm64_families, split(".", t)[0])])) <= 1
    ])
    error_message = "A node group's instance types must all be x86_64 or all be arm64 (Graviton: i4g, im4gn, is4gen, c6gd, m6gd, r6gd, m7gd, r7gd); put them in separate groups."
  }
  validation {
    # One shape per group: one KVCluster volume size fits every node, and one more node adds one node's
    # worth. Several types must all be in local.instance_shapes with equal vCPUs, memory and disks; d2/h1
    # types must be there even alone, since their disks are mapped by count (see ephemeral_volumes).
    condition = alltrue([
      for g in values(var.node_groups) : alltrue([
        for t in coalesce(g.instance_types, lookup(local.default_instance_types, g.profile, ["i4i.2xlarge"])) :
        contains(keys(local.instance_shapes), t) || (
          length(coalesce(g.instance_types, ["x"])) <= 1 && !contains(local.ephemeral_mapped_families, split(".", t)[0])
        )
        ]) && length(distinct([
          for t in coalesce(g.instance_types, lookup(local.default_instance_types, g.profile, ["i4i.2xlarge"])) :
          try(jsonencode(local.instance_shapes[t]), t)
      ])) <= 1
    ])
    error_message = "A node group's instance types must be of one shape (same vCPUs, memory and instance-store disks, from local.instance_shapes): put each shape in a group of its own, e.g. nvme-i4i and nvme-i3en. d2 and h1 types must be sizes that exist (d2.xlarge-8xlarge, h1.2xlarge-16xlarge)."
  }
  validation {
    condition = alltrue([
      for g in values(var.node_groups) : g.subnet_ids == null || length(coalesce(g.subnet_ids, ["x"])) > 0
    ])
    error_message = "A node group's subnet_ids, when given, must list at least one subnet (leave it out to use all of the cluster's subnets)."
  }
  validation {
    condition = alltrue([
      for g in values(var.node_groups) : g.availability_zones == null || (
        var.create_vpc && g.subnet_ids == null && length(coalesce(g.availability_zones, [])) > 0 &&
        length(setsubtract(coalesce(g.availability_zones, []), var.availability_zones)) == 0
      )
    ])
    error_message = "A node group's availability_zones pins it to zones of the module's new VPC: it needs create_vpc = true, must be a non-empty subset of availability_zones, and excludes subnet_ids (use subnet_ids with an existing VPC)."
  }
}

variable "data_mount_path" {
  description = "Where the node's instance-store array is mounted. The local-volume discovery directory is <path>-disks/<profile>/."
  type        = string
  default     = "/mnt/levee"

  validation {
    condition     = can(regex("^/[A-Za-z0-9/_-]+$", var.data_mount_path)) && !endswith(var.data_mount_path, "/")
    error_message = "data_mount_path must be an absolute path without a trailing slash."
  }
}

variable "levee_ports" {
  description = "levee's gRPC and metrics/health ports on the nodes: they change only the rules admitting the EKS control plane's security group. Between nodes every port is open already (the node security group admits itself)."
  type = object({
    grpc    = optional(number, 8087)
    metrics = optional(number, 8098)
  })
  default = {}
}

variable "operator_irsa" {
  description = "Create an IAM role for the levee operator's service account (IRSA)."
  type = object({
    enabled         = optional(bool, true)
    namespace       = optional(string, "levee-system")
    service_account = optional(string, "levee-operator")
  })
  default = {}
}

variable "oidc_thumbprints" {
  description = "Thumbprints for the cluster's OIDC provider. AWS no longer checks them for EKS issuers, but the API still requires one; the default is the root CA thumbprint in common use."
  type        = list(string)
  default     = ["9e99a48a9960b14926bb7f3b02e22da2b0ab7280"]
}

variable "endpoint_public_access_cidrs" {
  description = "CIDRs allowed to reach the public Kubernetes API endpoint, e.g. [\"203.0.113.7/32\"] for the workstation running kubectl. Empty: the endpoint is private only, reachable from inside the VPC (a bastion or an SSM session on a host there)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.endpoint_public_access_cidrs : can(cidrnetmask(c))])
    error_message = "endpoint_public_access_cidrs must be IPv4 CIDR blocks such as 203.0.113.7/32."
  }
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
