package controller

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// cert-manager kinds (cert-manager.io/v1), handled as unstructured objects.
var (
	IssuerGVK      = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Issuer"}
	CertificateGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}
)

// CertificateName is the member certificate (its Secret is TLSSecretName).
func CertificateName(c *kvv1.KVCluster) string { return c.Name + "-tls" }

func selfSignedIssuerName(c *kvv1.KVCluster) string { return c.Name + "-selfsigned" }
func caIssuerName(c *kvv1.KVCluster) string         { return c.Name + "-ca" }
func caCertificateName(c *kvv1.KVCluster) string    { return c.Name + "-ca" }

// MemberDNSNames are the names the member certificate is valid for.
func MemberDNSNames(c *kvv1.KVCluster) []interface{} {
	ns, h := c.Namespace, HeadlessServiceName(c)
	return []interface{}{
		ClientServiceName(c),
		ClientServiceName(c) + "." + ns + ".svc",
		ClientServiceName(c) + "." + ns + ".svc.cluster.local",
		"*." + h + "." + ns + ".svc",
		"*." + h + "." + ns + ".svc.cluster.local",
	}
}

// BuildTLSObjects returns the cert-manager objects for tls.enabled. With an
// issuerRef only the member Certificate is created; without one the operator
// bootstraps a per-cluster CA: self-signed Issuer -> CA Certificate -> CA Issuer.
// Returns nil when TLS is disabled.
func BuildTLSObjects(c *kvv1.KVCluster) []*unstructured.Unstructured {
	if !c.Spec.TLS.Enabled {
		return nil
	}
	lbl := map[string]string{labelComponent: "tls"}
	var out []*unstructured.Unstructured
	issuer := map[string]interface{}{"name": caIssuerName(c), "kind": "Issuer", "group": "cert-manager.io"}
	if r := c.Spec.TLS.IssuerRef; r != nil {
		issuer = map[string]interface{}{"name": r.Name, "kind": r.Kind, "group": r.Group}
	} else {
		self := newUnstructured(IssuerGVK, c, selfSignedIssuerName(c), lbl)
		self.Object["spec"] = map[string]interface{}{"selfSigned": map[string]interface{}{}}
		ca := newUnstructured(CertificateGVK, c, caCertificateName(c), lbl)
		ca.Object["spec"] = map[string]interface{}{
			"isCA":       true,
			"commonName": c.Name + "-ca",
			"secretName": caCertificateName(c),
			"duration":   "87600h",
			"privateKey": map[string]interface{}{"algorithm": "ECDSA", "size": int64(256)},
			"issuerRef":  map[string]interface{}{"name": selfSignedIssuerName(c), "kind": "Issuer", "group": "cert-manager.io"},
		}
		caIssuer := newUnstructured(IssuerGVK, c, caIssuerName(c), lbl)
		caIssuer.Object["spec"] = map[string]interface{}{"ca": map[string]interface{}{"secretName": caCertificateName(c)}}
		out = append(out, self, ca, caIssuer)
	}
	cert := newUnstructured(CertificateGVK, c, CertificateName(c), lbl)
	cert.Object["spec"] = map[string]interface{}{
		"secretName":  TLSSecretName(c),
		"commonName":  ClientServiceName(c) + "." + c.Namespace + ".svc",
		"dnsNames":    MemberDNSNames(c),
		"duration":    "2160h",
		"renewBefore": "360h",
		"usages":      []interface{}{"server auth", "client auth", "digital signature", "key encipherment"},
		"privateKey":  map[string]interface{}{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
		"issuerRef":   issuer,
	}
	return append(out, cert)
}
