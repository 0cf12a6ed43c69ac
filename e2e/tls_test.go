//go:build e2e

package e2e

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// platformIssuer makes the ClusterIssuer the HDD sample names (platform-ca): a CA kept in a
// Secret of cert-manager's namespace, itself issued by a self-signed ClusterIssuer — what a
// platform team runs.
func (e *env) platformIssuer() {
	e.kubectlIn(`apiVersion: cert-manager.io/v1
kind: ClusterIssuer
metadata: {name: platform-selfsigned}
spec: {selfSigned: {}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: platform-ca, namespace: `+certNS+`}
spec:
  isCA: true
  commonName: levee-e2e platform CA
  secretName: platform-ca
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {name: platform-selfsigned, kind: ClusterIssuer}
---
apiVersion: cert-manager.io/v1
kind: ClusterIssuer
metadata: {name: platform-ca}
spec: {ca: {secretName: platform-ca}}
`, "apply", "-f", "-")
	e.kubectl("-n", certNS, "wait", "certificate/platform-ca", "--for=condition=Ready", "--timeout=3m")
	e.kubectl("wait", "clusterissuer/platform-ca", "--for=condition=Ready", "--timeout=3m")
}

// mtlsTraffic writes through the client Service and reads every write back through each member's
// pod, all over mTLS with the member certificate cert-manager issued (Secret <cluster>-tls); a
// plaintext client and a TLS client without a certificate are refused.
func (e *env) mtlsTraffic(out, cluster string, members int) {
	t := e.t
	t.Helper()
	dir := filepath.Join(out, "tls")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
		b64 := e.kubectl("-n", clusterNS, "get", "secret", cluster+"-tls", "-o", "jsonpath={.data."+strings.ReplaceAll(k, ".", `\.`)+"}")
		pem, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(pem) == 0 {
			t.Fatalf("Secret %s-tls has no usable %s (%v)", cluster, k, err)
		}
		if err := os.WriteFile(filepath.Join(dir, k), pem, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tlsArgs := func(domain string) []string {
		return []string{"--tls-ca", filepath.Join(dir, "ca.crt"), "--tls-cert", filepath.Join(dir, "tls.crt"),
			"--tls-key", filepath.Join(dir, "tls.key"), "--tls-domain", domain, "--timeout", "10"}
	}
	svcIP := strings.TrimSpace(e.kubectl("-n", clusterNS, "get", "svc", cluster, "-o", "jsonpath={.spec.clusterIP}"))
	svcName := cluster + "." + clusterNS + ".svc"
	const writes = 60
	for i := 0; i < writes; i++ {
		e.run(e.cli(), append([]string{"put", "e2e-tls", fmt.Sprintf("k%03d", i), fmt.Sprintf("v%d", i), "--addr", svcIP + ":8087"}, tlsArgs(svcName)...)...)
	}
	missing := 0
	for m := 0; m < members; m++ {
		pod := fmt.Sprintf("%s-%d", cluster, m)
		ip := strings.TrimSpace(e.kubectl("-n", clusterNS, "get", "pod", pod, "-o", "jsonpath={.status.podIP}"))
		domain := pod + "." + cluster + "-headless." + clusterNS + ".svc"
		for i := 0; i < writes; i++ {
			got, err := e.exec("", e.cli(), append([]string{"get", "e2e-tls", fmt.Sprintf("k%03d", i), "--addr", ip + ":8087"}, tlsArgs(domain)...)...)
			if err != nil || strings.TrimSpace(got) != fmt.Sprintf("v%d", i) {
				missing++
				t.Logf("k%03d through %s: %q %v", i, pod, strings.TrimSpace(got), err)
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d reads over mTLS did not return the acknowledged write", missing, writes*members)
	}
	// Refusals: no TLS at all; TLS without a client certificate.
	if o, err := e.exec("", e.cli(), "get", "e2e-tls", "k000", "--addr", svcIP+":8087", "--timeout", "5"); err == nil {
		t.Fatalf("a plaintext client was served: %q", o)
	}
	if o, err := e.exec("", e.cli(), "get", "e2e-tls", "k000", "--addr", svcIP+":8087", "--timeout", "5",
		"--tls-ca", filepath.Join(dir, "ca.crt"), "--tls-domain", svcName); err == nil {
		t.Fatalf("a client without a certificate was served: %q", o)
	}
	msg := fmt.Sprintf("%d writes through the client Service and %d reads through each of %d members over mTLS; plaintext and certificate-less clients refused", writes, writes, members)
	_ = os.WriteFile(filepath.Join(out, "tls.txt"), []byte(msg+"\n"), 0o644)
	t.Log(msg)
}
