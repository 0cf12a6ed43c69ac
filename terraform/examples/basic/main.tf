# Three i4i NVMe nodes across three zones in a new VPC: the smallest production-shaped levee fleet.

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
  default     = "eu-west-1"
}

module "levee" {
  source = "../../modules/levee-eks"

  name               = "levee-basic"
  kubernetes_version = "1.31"
  availability_zones = ["${var.region}a", "${var.region}b", "${var.region}c"]

  node_groups = {
    nvme = {
      profile        = "nvme"
      instance_types = ["i4i.2xlarge"]
      min_size       = 3
      desired_size   = 3
      max_size       = 6
    }
  }
}

output "kubeconfig_command" {
  value = module.levee.kubeconfig_command
}

output "storage" {
  value = module.levee.storage
}

output "storage_class_manifests" {
  value = module.levee.storage_class_manifests
}
