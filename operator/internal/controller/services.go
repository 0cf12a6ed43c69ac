package controller

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

func servicePorts() []corev1.ServicePort {
	return []corev1.ServicePort{
		{Name: GRPCPortName, Port: GRPCPort, TargetPort: intstr.FromString(GRPCPortName), Protocol: corev1.ProtocolTCP, AppProtocol: ptr("grpc")},
		{Name: MetricsPortName, Port: MetricsPort, TargetPort: intstr.FromString(MetricsPortName), Protocol: corev1.ProtocolTCP, AppProtocol: ptr("http")},
	}
}

// BuildHeadlessService returns the governing Service of the StatefulSet. It publishes
// not-ready addresses so members can find each other while the ring forms.
func BuildHeadlessService(c *kvv1.KVCluster) *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      HeadlessServiceName(c),
			Namespace: c.Namespace,
			Labels:    labelsWith(c, map[string]string{labelComponent: "node", LabelService: "headless"}),
		},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 SelectorLabels(c),
			Ports:                    servicePorts(),
		},
	}
}

// BuildClientService returns the ClusterIP Service clients connect to (ready members only).
func BuildClientService(c *kvv1.KVCluster) *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      ClientServiceName(c),
			Namespace: c.Namespace,
			Labels:    labelsWith(c, map[string]string{labelComponent: "node", LabelService: "client"}),
		},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: SelectorLabels(c),
			Ports:    servicePorts()[:1],
		},
	}
}

func ptr[T any](v T) *T { return &v }
