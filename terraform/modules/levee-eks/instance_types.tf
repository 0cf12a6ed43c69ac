# What the module knows about instance types, without asking AWS at plan time: which families carry
# instance-store disks of each profile's kind, which are Graviton, which expose their disks without NVMe,
# and the shape (vCPUs, memory, disks) of the types that may share a node group.

locals {
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
  # Xen-based families whose instance-store disks are not NVMe: EC2 attaches them only when the launch
  # template maps them as ephemeral0..N, so every type of these families must be in instance_shapes.
  ephemeral_mapped_families = ["d2", "h1"]

  # One instance type per profile, so that a default group is of one shape (see instance_shapes).
  default_instance_types = {
    nvme = ["i4i.2xlarge"]
    hdd  = ["d3en.2xlarge"]
  }

  # Shape of the instance types a group may mix: a group with several instance types must list types of
  # one shape, all of them here, so that one KVCluster volume size fits every node and one more node
  # adds the same capacity. A group of a single instance type needs no entry (except d2/h1, whose disk
  # count comes from here). disks = number of instance-store disks, disk_gb = size of each.
  instance_shapes = {
    "i3.large"      = { vcpus = 2, memory_gib = 15.25, disks = 1, disk_gb = 475 }
    "i3.xlarge"     = { vcpus = 4, memory_gib = 30.5, disks = 1, disk_gb = 950 }
    "i3.2xlarge"    = { vcpus = 8, memory_gib = 61, disks = 1, disk_gb = 1900 }
    "i3.4xlarge"    = { vcpus = 16, memory_gib = 122, disks = 2, disk_gb = 1900 }
    "i3.8xlarge"    = { vcpus = 32, memory_gib = 244, disks = 4, disk_gb = 1900 }
    "i3.16xlarge"   = { vcpus = 64, memory_gib = 488, disks = 8, disk_gb = 1900 }
    "i3en.large"    = { vcpus = 2, memory_gib = 16, disks = 1, disk_gb = 1250 }
    "i3en.xlarge"   = { vcpus = 4, memory_gib = 32, disks = 1, disk_gb = 2500 }
    "i3en.2xlarge"  = { vcpus = 8, memory_gib = 64, disks = 2, disk_gb = 2500 }
    "i3en.3xlarge"  = { vcpus = 12, memory_gib = 96, disks = 1, disk_gb = 7500 }
    "i3en.6xlarge"  = { vcpus = 24, memory_gib = 192, disks = 2, disk_gb = 7500 }
    "i3en.12xlarge" = { vcpus = 48, memory_gib = 384, disks = 4, disk_gb = 7500 }
    "i3en.24xlarge" = { vcpus = 96, memory_gib = 768, disks = 8, disk_gb = 7500 }
    "i3en.metal"    = { vcpus = 96, memory_gib = 768, disks = 8, disk_gb = 7500 }
    "i4i.large"     = { vcpus = 2, memory_gib = 16, disks = 1, disk_gb = 468 }
    "i4i.xlarge"    = { vcpus = 4, memory_gib = 32, disks = 1, disk_gb = 937 }
    "i4i.2xlarge"   = { vcpus = 8, memory_gib = 64, disks = 1, disk_gb = 1875 }
    "i4i.4xlarge"   = { vcpus = 16, memory_gib = 128, disks = 1, disk_gb = 3750 }
    "i4i.8xlarge"   = { vcpus = 32, memory_gib = 256, disks = 2, disk_gb = 3750 }
    "i4i.12xlarge"  = { vcpus = 48, memory_gib = 384, disks = 3, disk_gb = 3750 }
    "i4i.16xlarge"  = { vcpus = 64, memory_gib = 512, disks = 4, disk_gb = 3750 }
    "i4i.24xlarge"  = { vcpus = 96, memory_gib = 768, disks = 6, disk_gb = 3750 }
    "i4i.32xlarge"  = { vcpus = 128, memory_gib = 1024, disks = 8, disk_gb = 3750 }
    "i4i.metal"     = { vcpus = 128, memory_gib = 1024, disks = 8, disk_gb = 3750 }
    # m5d/m5dn and r5d/r5dn: same shape size for size, only the network differs.
    "m5d.large"     = { vcpus = 2, memory_gib = 8, disks = 1, disk_gb = 75 }
    "m5d.xlarge"    = { vcpus = 4, memory_gib = 16, disks = 1, disk_gb = 150 }
    "m5d.2xlarge"   = { vcpus = 8, memory_gib = 32, disks = 1, disk_gb = 300 }
    "m5d.4xlarge"   = { vcpus = 16, memory_gib = 64, disks = 2, disk_gb = 300 }
    "m5d.8xlarge"   = { vcpus = 32, memory_gib = 128, disks = 2, disk_gb = 600 }
    "m5d.12xlarge"  = { vcpus = 48, memory_gib = 192, disks = 2, disk_gb = 900 }
    "m5d.16xlarge"  = { vcpus = 64, memory_gib = 256, disks = 4, disk_gb = 600 }
    "m5d.24xlarge"  = { vcpus = 96, memory_gib = 384, disks = 4, disk_gb = 900 }
    "m5dn.large"    = { vcpus = 2, memory_gib = 8, disks = 1, disk_gb = 75 }
    "m5dn.xlarge"   = { vcpus = 4, memory_gib = 16, disks = 1, disk_gb = 150 }
    "m5dn.2xlarge"  = { vcpus = 8, memory_gib = 32, disks = 1, disk_gb = 300 }
    "m5dn.4xlarge"  = { vcpus = 16, memory_gib = 64, disks = 2, disk_gb = 300 }
    "m5dn.8xlarge"  = { vcpus = 32, memory_gib = 128, disks = 2, disk_gb = 600 }
    "m5dn.12xlarge" = { vcpus = 48, memory_gib = 192, disks = 2, disk_gb = 900 }
    "m5dn.16xlarge" = { vcpus = 64, memory_gib = 256, disks = 4, disk_gb = 600 }
    "m5dn.24xlarge" = { vcpus = 96, memory_gib = 384, disks = 4, disk_gb = 900 }
    "r5d.large"     = { vcpus = 2, memory_gib = 16, disks = 1, disk_gb = 75 }
    "r5d.xlarge"    = { vcpus = 4, memory_gib = 32, disks = 1, disk_gb = 150 }
    "r5d.2xlarge"   = { vcpus = 8, memory_gib = 64, disks = 1, disk_gb = 300 }
    "r5d.4xlarge"   = { vcpus = 16, memory_gib = 128, disks = 2, disk_gb = 300 }
    "r5d.8xlarge"   = { vcpus = 32, memory_gib = 256, disks = 2, disk_gb = 600 }
    "r5d.12xlarge"  = { vcpus = 48, memory_gib = 384, disks = 2, disk_gb = 900 }
    "r5d.16xlarge"  = { vcpus = 64, memory_gib = 512, disks = 4, disk_gb = 600 }
    "r5d.24xlarge"  = { vcpus = 96, memory_gib = 768, disks = 4, disk_gb = 900 }
    "r5dn.large"    = { vcpus = 2, memory_gib = 16, disks = 1, disk_gb = 75 }
    "r5dn.xlarge"   = { vcpus = 4, memory_gib = 32, disks = 1, disk_gb = 150 }
    "r5dn.2xlarge"  = { vcpus = 8, memory_gib = 64, disks = 1, disk_gb = 300 }
    "r5dn.4xlarge"  = { vcpus = 16, memory_gib = 128, disks = 2, disk_gb = 300 }
    "r5dn.8xlarge"  = { vcpus = 32, memory_gib = 256, disks = 2, disk_gb = 600 }
    "r5dn.12xlarge" = { vcpus = 48, memory_gib = 384, disks = 2, disk_gb = 900 }
    "r5dn.16xlarge" = { vcpus = 64, memory_gib = 512, disks = 4, disk_gb = 600 }
    "r5dn.24xlarge" = { vcpus = 96, memory_gib = 768, disks = 4, disk_gb = 900 }
    "d2.xlarge"     = { vcpus = 4, memory_gib = 30.5, disks = 3, disk_gb = 2000 }
    "d2.2xlarge"    = { vcpus = 8, memory_gib = 61, disks = 6, disk_gb = 2000 }
    "d2.4xlarge"    = { vcpus = 16, memory_gib = 122, disks = 12, disk_gb = 2000 }
    "d2.8xlarge"    = { vcpus = 36, memory_gib = 244, disks = 24, disk_gb = 2000 }
    "d3.xlarge"     = { vcpus = 4, memory_gib = 32, disks = 3, disk_gb = 1980 }
    "d3.2xlarge"    = { vcpus = 8, memory_gib = 64, disks = 6, disk_gb = 1980 }
    "d3.4xlarge"    = { vcpus = 16, memory_gib = 128, disks = 12, disk_gb = 1980 }
    "d3.8xlarge"    = { vcpus = 32, memory_gib = 256, disks = 24, disk_gb = 1980 }
    "d3en.xlarge"   = { vcpus = 4, memory_gib = 16, disks = 2, disk_gb = 13980 }
    "d3en.2xlarge"  = { vcpus = 8, memory_gib = 32, disks = 4, disk_gb = 13980 }
    "d3en.4xlarge"  = { vcpus = 16, memory_gib = 64, disks = 8, disk_gb = 13980 }
    "d3en.6xlarge"  = { vcpus = 24, memory_gib = 96, disks = 12, disk_gb = 13980 }
    "d3en.8xlarge"  = { vcpus = 32, memory_gib = 128, disks = 16, disk_gb = 13980 }
    "d3en.12xlarge" = { vcpus = 48, memory_gib = 192, disks = 24, disk_gb = 13980 }
    "h1.2xlarge"    = { vcpus = 8, memory_gib = 32, disks = 1, disk_gb = 2000 }
    "h1.4xlarge"    = { vcpus = 16, memory_gib = 64, disks = 2, disk_gb = 2000 }
    "h1.8xlarge"    = { vcpus = 32, memory_gib = 128, disks = 4, disk_gb = 2000 }
    "h1.16xlarge"   = { vcpus = 64, memory_gib = 256, disks = 8, disk_gb = 2000 }
  }
}
