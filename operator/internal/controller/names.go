// Package controller reconciles KVCluster objects. Desired child objects are
// built by pure functions (one file per child kind, each with a table test);
// kvcluster_controller.go only diffs and applies them.
package controller

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// Ports and paths of the levee node (contract with engine/crates/node).
const (
	GRPCPort        int32 = 8087
	GRPCPortName          = "grpc"
	MetricsPort     int32 = 8098
	MetricsPortName       = "metrics"
	ConfigFileName        = "levee.toml"
	MembersFileName       = "members"
	ConfigDir             = "/etc/levee"
	DataRoot              = "/var/lib/levee"
	DataDir               = DataRoot + "/data"
	TLSDir                = ConfigDir + "/tls"
	// TLSCAKey is the CA certificate key of the TLS Secret (cert-manager's name for it).
	TLSCAKey       = "ca.crt"
	ContainerName  = "levee"
	DataVolumeName = "data"

	// MembersJSONFileName is the versioned member list built from the settled membership in
	// status (docs/cluster.md, "Member list"; members.go), next to the older MembersFileName
	// (one address per line from spec.replicas, the node's `members_file`).
	MembersJSONFileName = "members.json"

	// ConfigHashAnnotation on the pod template restarts members when engine settings change
	// (membership changes do not restart pods: members and members.json are re-read from the
	// mounted ConfigMap, which the kubelet updates in place).
	ConfigHashAnnotation = "kv.levee.io/config-hash"

	labelName      = "app.kubernetes.io/name"
	labelInstance  = "app.kubernetes.io/instance"
	labelComponent = "app.kubernetes.io/component"
	labelManagedBy = "app.kubernetes.io/managed-by"
	labelPartOf    = "app.kubernetes.io/part-of"
	// LabelService tells the headless Service from the client Service (ServiceMonitor selects it).
	LabelService = "kv.levee.io/service"
	// LabelMaintenance marks maintenance CronJobs: compaction or aae-rebuild.
	LabelMaintenance = "kv.levee.io/maintenance"

	fieldOwner = "levee-operator"
)

// DefaultStorageClass returns the storage class used when spec.storage.storageClassName is empty.
func DefaultStorageClass(p kvv1.StorageProfile) string {
	if p == kvv1.StorageHDD {
		return "levee-hdd"
	}
	return "levee-nvme"
}

// HeadlessServiceName is the governing Service of the StatefulSet (stable pod DNS names).
func HeadlessServiceName(c *kvv1.KVCluster) string { return c.Name + "-headless" }

// ClientServiceName is the load-balanced Service clients use.
func ClientServiceName(c *kvv1.KVCluster) string { return c.Name }

// ConfigMapName holds levee.toml and the member list.
func ConfigMapName(c *kvv1.KVCluster) string { return c.Name + "-config" }

// StatefulSetName is the StatefulSet of the members.
func StatefulSetName(c *kvv1.KVCluster) string { return c.Name }

// TLSSecretName is the Secret holding the member certificate (tls.crt, tls.key, ca.crt).
func TLSSecretName(c *kvv1.KVCluster) string { return c.Name + "-tls" }

// CommonLabels are set on every child object.
func CommonLabels(c *kvv1.KVCluster) map[string]string {
	return map[string]string{
		labelName:      "levee",
		labelInstance:  c.Name,
		labelManagedBy: "levee-operator",
		labelPartOf:    "levee",
	}
}

// SelectorLabels select the member pods of a cluster.
func SelectorLabels(c *kvv1.KVCluster) map[string]string {
	return map[string]string{
		labelName:      "levee",
		labelInstance:  c.Name,
		labelComponent: "node",
	}
}

// Selector is the /scale selector string of the member pods.
func Selector(c *kvv1.KVCluster) string {
	return labels.SelectorFromSet(SelectorLabels(c)).String()
}

func labelsWith(c *kvv1.KVCluster, extra map[string]string) map[string]string {
	l := CommonLabels(c)
	for k, v := range extra {
		l[k] = v
	}
	return l
}

// MemberAddress is the gRPC address of member i through the headless Service.
func MemberAddress(c *kvv1.KVCluster, i int32) string {
	return fmt.Sprintf("%s-%d.%s.%s.svc:%d", StatefulSetName(c), i, HeadlessServiceName(c), c.Namespace, GRPCPort)
}

// MemberAddresses lists the addresses of members 0..n-1.
func MemberAddresses(c *kvv1.KVCluster, n int32) []string {
	out := make([]string, 0, n)
	for i := int32(0); i < n; i++ {
		out = append(out, MemberAddress(c, i))
	}
	return out
}
