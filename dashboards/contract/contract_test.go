// Package contract holds the metric contract test: a real `levee serve`, real requests, a real scrape.
package contract

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/levee-io/levee/dashboards/internal/exprs"
)

// levee is the node binary: $LEVEE_BIN, or the release build of the engine workspace
// (`make dashboards-test` builds it).
func levee(t *testing.T, root string) string {
	bin := os.Getenv("LEVEE_BIN")
	if bin == "" {
		bin = filepath.Join(root, "..", "engine", "target", "release", "levee")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no levee binary at %s (build it: cd engine && cargo build --release -p levee-node --bin levee; or set LEVEE_BIN): %v", bin, err)
	}
	return bin
}

type node struct {
	bin, grpc, metrics string
	tls                *serverPKI
}

// serverPKI is a CA and a server certificate for localhost it signed, written as PEM files.
type serverPKI struct {
	ca, cert, key string
	notAfter      time.Time
}

// newPKI makes a CA and a server certificate (localhost, 127.0.0.1) valid until notAfter.
func newPKI(t *testing.T, notAfter time.Time) *serverPKI {
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "contract CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter,
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := &serverPKI{ca: filepath.Join(dir, "ca.crt"), cert: filepath.Join(dir, "tls.crt"),
		key: filepath.Join(dir, "tls.key"), notAfter: notAfter}
	for path, b := range map[string]*pem.Block{
		p.ca: {Type: "CERTIFICATE", Bytes: caDER}, p.cert: {Type: "CERTIFICATE", Bytes: der},
		p.key: {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// start runs `levee serve` on port 0 with data in a temporary folder (TLS on the gRPC port with
// pki's certificate, when given) and reads the bound addresses from its startup line:
// `levee: serving gRPC on ADDR, metrics on ADDR, N vnodes in DIR`.
func start(t *testing.T, bin string, pki *serverPKI) *node {
	ctx, cancel := context.WithCancel(context.Background())
	args := []string{"serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--ring-size", "8", "--aae-segments", "1024", "--data-dir", t.TempDir()}
	if pki != nil {
		args = append(args, "--tls-cert", pki.cert, "--tls-key", pki.key)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	log, err := os.Create(filepath.Join(t.TempDir(), "levee.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = log
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	var l string
	select {
	case l = <-line:
	case <-time.After(30 * time.Second):
	}
	grab := func(after string) string {
		_, rest, ok := strings.Cut(l, after)
		if !ok {
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("no %q in the startup line %q; log:\n%s", after, l, b)
		}
		return strings.FieldsFunc(rest, func(r rune) bool { return r == ',' || r == ' ' })[0]
	}
	return &node{bin: bin, grpc: grab("gRPC on "), metrics: grab("metrics on "), tls: pki}
}

// cli runs a `levee` client command against the node; failure is fatal unless allowFail.
func (n *node) cli(t *testing.T, allowFail bool, args ...string) {
	args = append(args, "--addr", n.grpc)
	if n.tls != nil {
		args = append(args, "--tls-ca", n.tls.ca, "--tls-domain", "localhost")
	}
	out, err := exec.Command(n.bin, args...).CombinedOutput()
	if err != nil && !allowFail {
		t.Fatalf("levee %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (n *node) scrape(t *testing.T) map[string]*dto.MetricFamily {
	resp, err := http.Get("http://" + n.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics is not valid Prometheus text: %v", err)
	}
	return fams
}

// gauge is the value of a family's one unlabelled gauge (NaN when there is not exactly one).
func gauge(f *dto.MetricFamily) float64 {
	if f == nil || len(f.GetMetric()) != 1 {
		return math.NaN()
	}
	return f.GetMetric()[0].GetGauge().GetValue()
}

func counter(f *dto.MetricFamily, lbl map[string]string) float64 {
	sum := 0.0
	for _, m := range f.GetMetric() {
		ok := true
		for k, v := range lbl {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || (lp.GetName() == k && lp.GetValue() == v)
			}
			ok = ok && found
		}
		if ok {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestMetricContract, both directions, against a running node under a little load:
//   - every metric a dashboard panel, dashboard variable or alert/recording rule reads is exported
//     by the node (or is `up`, or a name the rules record);
//   - every levee_* metric the node exports is documented in docs/metrics.md, and every documented
//     metric is exported.
func TestMetricContract(t *testing.T) {
	root, err := exprs.Root()
	if err != nil {
		t.Fatal(err)
	}
	// TLS on, so the certificate's expiry is exported too; a whole second, as a certificate holds it.
	pki := newPKI(t, time.Now().Add(90*24*time.Hour).Truncate(time.Second))
	n := start(t, levee(t, root), pki)
	const keys = 20
	for i := 0; i < keys; i++ {
		k := fmt.Sprintf("k%02d", i)
		n.cli(t, false, "put", "contract", k, strings.Repeat("v", 100+i))
		n.cli(t, false, "get", "contract", k)
	}
	n.cli(t, false, "head", "contract", "k00")
	n.cli(t, false, "delete", "contract", "k01")
	n.cli(t, true, "get", "contract", "k01") // not found
	n.cli(t, false, "admin", "compact-journal")
	n.cli(t, false, "admin", "aae-rebuild")

	fams := n.scrape(t)
	if reqs := fams["levee_requests_total"]; reqs == nil || counter(reqs, map[string]string{"op": "put", "result": "ok"}) < keys ||
		counter(reqs, map[string]string{"op": "get", "result": "ok"}) < keys {
		t.Fatalf("the scrape does not show the %d puts and gets just made: %v", keys, reqs)
	}

	// The node's own facts, as exported: what a dashboard or alert built on them would show.
	if got, want := gauge(fams["levee_tls_cert_expiry_timestamp_seconds"]), float64(pki.notAfter.Unix()); got != want {
		t.Errorf("levee_tls_cert_expiry_timestamp_seconds = %v, want the served certificate's NotAfter %v", got, want)
	}
	if gauge(fams["levee_members"]) != 1 || gauge(fams["levee_member_list_version"]) != 0 {
		t.Errorf("a node alone: levee_members %v (want 1), levee_member_list_version %v (want 0)",
			gauge(fams["levee_members"]), gauge(fams["levee_member_list_version"]))
	}
	size, avail := gauge(fams["levee_data_filesystem_size_bytes"]), gauge(fams["levee_data_filesystem_avail_bytes"])
	if !(size > 0 && avail > 0 && avail <= size) {
		t.Errorf("data filesystem: size %v, avail %v bytes: want 0 < avail <= size", size, avail)
	}
	vnodes := map[string]float64{}
	for _, m := range fams["levee_vnodes"].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "state" {
				vnodes[lp.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	if vnodes["active"] != 8 || vnodes["handoff"] != 0 || vnodes["idle"] != 0 {
		t.Errorf("levee_vnodes of a node alone with a ring of 8: %v, want active 8, handoff 0, idle 0", vnodes)
	}

	doc, err := exprs.Documented(filepath.Join(root, "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	all, recorded, err := exprs.All(root)
	if err != nil {
		t.Fatal(err)
	}
	rec := map[string]bool{}
	for _, r := range recorded {
		rec[r] = true
	}
	exported := func(name string) bool { return fams[name] != nil }
	opDoc, err := exprs.DocumentedOperator(filepath.Join(root, "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}

	// Direction 1: used ⊆ exported.
	used := map[string][]string{}
	for _, e := range all {
		ast, err := exprs.Parse(e.Query)
		if err != nil {
			t.Errorf("%s does not parse: %v", e.Where, err)
			continue
		}
		for _, name := range exprs.MetricNames(ast) {
			used[name] = append(used[name], e.Where)
		}
	}
	if len(used) < 15 {
		t.Fatalf("only %d metric names used by dashboards and rules: the check would be nearly vacuous", len(used))
	}
	for name, where := range used {
		if exprs.Synthetic[name] || rec[name] {
			continue
		}
		if strings.HasPrefix(name, exprs.OperatorPrefix) {
			// The operator's metric: documented in its section, which the operator's own test
			// holds to what it registers.
			if !opDoc[name] {
				t.Errorf("%s is not an operator metric of docs/metrics.md, but is used by:\n  %s", name, strings.Join(where, "\n  "))
			}
			continue
		}
		fam := exprs.Family(name, exported)
		if !exported(fam) {
			t.Errorf("%s is not exported by levee serve, but is used by:\n  %s", name, strings.Join(where, "\n  "))
			continue
		}
		if fam != name && fams[fam].GetType() != dto.MetricType_HISTOGRAM {
			t.Errorf("%s is read as a series of histogram %s, which is a %s", name, fam, fams[fam].GetType())
		}
	}

	// Direction 2: exported levee_* ⊆ documented, and documented ⊆ exported.
	var names []string
	for name := range fams {
		names = append(names, name)
	}
	sort.Strings(names)
	levee := 0
	for _, name := range names {
		if strings.HasPrefix(name, "levee_") {
			levee++
			if !doc[name] {
				t.Errorf("levee serve exports %s, which docs/metrics.md does not document", name)
			}
		}
	}
	if levee < 15 {
		t.Errorf("only %d levee_* families exported: %v", levee, names)
	}
	for name := range doc {
		if !exported(name) {
			t.Errorf("docs/metrics.md documents %s, which levee serve does not export", name)
		}
	}
}
