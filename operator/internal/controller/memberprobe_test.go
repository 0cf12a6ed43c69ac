package controller

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/levee-io/levee/operator/internal/metricsdoc"
)

const reportText = `# TYPE levee_member_list_version gauge
levee_member_list_version 7
# TYPE levee_ring_routing_list_version gauge
levee_ring_routing_list_version 6
# TYPE levee_transition_partitions_to_send gauge
levee_transition_partitions_to_send 3
# TYPE levee_transition_bytes_sent gauge
levee_transition_bytes_sent 123456
# TYPE levee_vnodes gauge
levee_vnodes{state="active"} 12
levee_vnodes{state="handoff"} 2
levee_vnodes{state="idle"} 50
# TYPE levee_rebuild_partitions_pending gauge
levee_rebuild_partitions_pending 4
`

func TestParseMemberReport(t *testing.T) {
	r, err := ParseMemberReport(strings.NewReader(reportText))
	if err != nil {
		t.Fatal(err)
	}
	want := MemberReport{ListVersion: 7, RoutingVersion: 6, VnodesActive: 12, VnodesHandoff: 2, PartitionsToSend: 3, BytesSent: 123456, RebuildPending: 4}
	if r != want {
		t.Errorf("report %+v, want %+v", r, want)
	}
	// A node without one of the metrics is not taken for one that finished its transition.
	for _, drop := range []string{"levee_ring_routing_list_version 6", "levee_transition_bytes_sent 123456", `levee_vnodes{state="handoff"} 2`, "levee_rebuild_partitions_pending 4"} {
		_, err := ParseMemberReport(strings.NewReader(strings.Replace(reportText, drop, "", 1)))
		name, _, _ := strings.Cut(drop, " ")
		name, _, _ = strings.Cut(name, "{")
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("without %q: err %v, want one naming %s", drop, err, name)
		}
	}
	if _, err := ParseMemberReport(strings.NewReader("levee_vnodes{state=\"active\" 1\n")); err == nil || !strings.Contains(err.Error(), "do not parse") {
		t.Errorf("garbage: err %v", err)
	}
}

// Every metric the operator reads from members is in the metric contract (docs/metrics.md).
func TestReportMetricsAreDocumented(t *testing.T) {
	names, err := metricsdoc.Names("../../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ReportMetrics {
		if !names[m] {
			t.Errorf("%s is not in docs/metrics.md", m)
		}
	}
}

// The prober against a real `levee serve` (LEVEE_BIN, or the engine's release build: the
// operator's `make test` builds it): a lone node reports a settled provisional ring, every
// vnode active, nothing to send; a closed port is reported unreachable.
func TestMetricsProberReadsARealNode(t *testing.T) {
	bin := leveeBin(t)
	grpcPort, metricsPort := freePort(t), freePort(t)
	cmd := exec.Command(bin, "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", grpcPort), "--metrics-listen", fmt.Sprintf("127.0.0.1:%d", metricsPort),
		"--ring-size", "8", "--aae-segments", "1024", "--data-dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The node is up within a second; a member that is not yet answering reads as an error.
	prober := MetricsProber{Port: int32(metricsPort), Timeout: 5 * time.Second}
	addr := fmt.Sprintf("127.0.0.1:%d", grpcPort)
	var got MemberReport
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if got = prober.Probe(context.Background(), []string{addr})[addr]; got.Err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("levee serve not answering on its metrics port after 30 s: %v", got.Err)
		}
	}
	want := MemberReport{VnodesActive: 8}
	if got != want {
		t.Errorf("report of a lone node: %+v, want %+v", got, want)
	}
	down := MetricsProber{Port: int32(freePort(t)), Timeout: 2 * time.Second}.Probe(context.Background(), []string{"127.0.0.1:8087"})["127.0.0.1:8087"]
	if down.Err == nil || !strings.Contains(down.Err.Error(), "connection refused") {
		t.Errorf("closed port: %+v", down)
	}
}

// freePort is a TCP port nothing listens on (now).
// leveeBin is the levee node binary the tests run: LEVEE_BIN, or the engine's release build
// (the operator's `make test` builds it).
func leveeBin(t *testing.T) string {
	bin := os.Getenv("LEVEE_BIN")
	if bin == "" {
		bin = filepath.Join("..", "..", "..", "engine", "target", "release", "levee")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no levee binary at %s (build it: cd engine && cargo build --release -p levee-node --bin levee; or set LEVEE_BIN): %v", bin, err)
	}
	return bin
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
