# An existing VPC with an NVMe group for latency-sensitive clusters and a tainted HDD group for
# dense, colder data (KVClusters with spec.storage.profile: hdd tolerate the taint).

terraform {
  required_version = ">= 1.9"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.40, < 6.0"
    }
  }
}

provider "aws" {
  region = var.region
}

variable "region" {
  description = "AWS region."
  type        = string
  default     = "us-east-1"
}

variable "vpc_id" {
  description = "Existing VPC."
  type        = string
  default     = "vpc-0123456789abcdef0"
}

variable "private_subnet_ids" {
  description = "Existing private subnets, one per zone."
  type        = list(string)
  default     = ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0bbbbbbbbbbbbbbb2", "subnet-0ccccccccccccccc3"]
}

module "levee" {
  source = "../../modules/levee-eks"

  name       = "levee-mixed"
  create_vpc = false
  vpc_id     = var.vpc_id
  subnet_ids = var.private_subnet_ids

  node_groups = {
    # One instance type per group: a group's nodes must be of one shape (vCPUs, memory, disks).
    nvme = {
      profile        = "nvme"
      instance_types = ["i4i.4xlarge"]
      min_size       = 3
      desired_size   = 3
      max_size       = 9
    }
    hdd = {
      profile        = "hdd"
      instance_types = ["d3en.2xlarge"]
      min_size       = 3
      desired_size   = 3
      max_size       = 6
      taint          = true
    }
  }

  endpoint_public_access_cidrs = ["203.0.113.0/24"]
  tags                         = { team = "storage" }
}

output "storage" {
  value = module.levee.storage
}
