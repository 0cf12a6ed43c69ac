# Security groups. levee's node ports (gRPC, metrics/health) and the operator's webhook port are
# reachable only from inside the cluster: from other nodes and from the control plane. Nothing is
# opened to 0.0.0.0/0 except egress.

resource "aws_security_group" "cluster" {
  name        = "${var.name}-cluster"
  description = "EKS control plane of ${var.name}"
  vpc_id      = local.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-cluster" })
}

# Nodes carry this group and the EKS-managed cluster security group. Only the latter is tagged
# kubernetes.io/cluster/<name> (EKS tags it): the AWS Load Balancer Controller and the in-tree service
# controller expect exactly one tagged group per node and fail LoadBalancer Services and Ingresses when
# they find two, so this group must never carry the tag.
resource "aws_security_group" "node" {
  name        = "${var.name}-node"
  description = "levee nodes of ${var.name}"
  vpc_id      = local.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-node" })
}

resource "aws_vpc_security_group_egress_rule" "node_all" {
  security_group_id = aws_security_group.node.id
  description       = "nodes reach the internet through the NAT gateway (images, AWS APIs)"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_vpc_security_group_egress_rule" "cluster_all" {
  security_group_id = aws_security_group.cluster.id
  description       = "control plane to nodes (kubelet, webhooks)"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
}

# Node to node: everything (pod networking, kubelet, CNI) between members of the node group.
resource "aws_vpc_security_group_ingress_rule" "node_self" {
  security_group_id            = aws_security_group.node.id
  referenced_security_group_id = aws_security_group.node.id
  description                  = "node to node"
  ip_protocol                  = "-1"
}

resource "aws_vpc_security_group_ingress_rule" "levee_from_cluster" {
  for_each = {
    grpc    = var.levee_ports.grpc
    metrics = var.levee_ports.metrics
    webhook = 9443
    kubelet = 10250
  }
  security_group_id            = aws_security_group.node.id
  referenced_security_group_id = aws_security_group.cluster.id
  description                  = "control plane to nodes: ${each.key}"
  ip_protocol                  = "tcp"
  from_port                    = each.value
  to_port                      = each.value
}

resource "aws_vpc_security_group_ingress_rule" "api_from_nodes" {
  security_group_id            = aws_security_group.cluster.id
  referenced_security_group_id = aws_security_group.node.id
  description                  = "nodes to the Kubernetes API"
  ip_protocol                  = "tcp"
  from_port                    = 443
  to_port                      = 443
}
