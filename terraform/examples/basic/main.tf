# Three i4i NVMe nodes across three zones in a new VPC: the smallest production-shaped levee fleet.
# kubectl runs from the workstation, so the API endpoint is opened to api_access_cidrs (its address).

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

variable "api_access_cidrs" {
  description = "CIDRs that may reach the Kubernetes API endpoint, e.g. [\"203.0.113.7/32\"] for the workstation running kubectl; [] keeps the endpoint private (run kubectl from inside the VPC then)."
  type        = list(string)
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

  endpoint_public_access_cidrs = var.api_access_cidrs
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
