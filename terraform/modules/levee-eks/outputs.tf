output "cluster_name" {
  description = "EKS cluster name."
  value       = aws_eks_cluster.this.name
}

output "cluster_endpoint" {
  description = "Kubernetes API endpoint."
  value       = aws_eks_cluster.this.endpoint
}

output "cluster_certificate_authority_data" {
  description = "Base64 CA certificate of the API endpoint."
  value       = aws_eks_cluster.this.certificate_authority[0].data
}

output "node_group_names" {
  description = "Managed node group names by key."
  value       = { for k, g in aws_eks_node_group.group : k => g.node_group_name }
}

output "node_security_group_id" {
  description = "Security group of the levee nodes."
  value       = aws_security_group.node.id
}

output "operator_role_arn" {
  description = "IAM role for the levee operator's service account (annotate it with eks.amazonaws.com/role-arn)."
  value       = var.operator_irsa.enabled ? aws_iam_role.operator[0].arn : null
}

output "kubeconfig_command" {
  description = "Command that writes a kubeconfig entry for the cluster (the API endpoint must be reachable: see endpoint_public_access_cidrs)."
  value       = "aws eks update-kubeconfig --region ${data.aws_region.current.name} --name ${aws_eks_cluster.this.name}"
}

output "storage" {
  description = "What to put in a KVCluster for each node group: spec.storage.profile, the storage class to create for its local volumes, the node label, and spec.scheduling.tolerations (non-empty for a tainted group: its KVClusters, and the local static provisioner's DaemonSet, need them to run there)."
  value = {
    for k, g in local.groups : k => {
      profile          = g.profile
      storageClassName = local.storage_class[g.profile]
      nodeLabel        = "levee.io/storage=${g.profile}"
      mountPath        = var.data_mount_path
      discoveryDir     = "${var.data_mount_path}-disks/${g.profile}"
      # Kubernetes toleration objects, as spec.scheduling.tolerations of a KVCluster takes them.
      tolerations = [for p in compact([g.taint ? g.profile : ""]) : {
        key      = "levee.io/storage"
        operator = "Equal"
        value    = p
        effect   = "NoSchedule"
      }]
    }
  }
}

output "storage_class_manifests" {
  description = "StorageClass objects for the profiles in use (kubectl apply -f -): local volumes, WaitForFirstConsumer."
  value = join("---\n", [for p in distinct([for g in values(local.groups) : g.profile]) : <<-EOT
    apiVersion: storage.k8s.io/v1
    kind: StorageClass
    metadata:
      name: ${local.storage_class[p]}
      labels:
        levee.io/storage: ${p}
    provisioner: kubernetes.io/no-provisioner
    volumeBindingMode: WaitForFirstConsumer
    reclaimPolicy: Retain
  EOT
  ])
}
