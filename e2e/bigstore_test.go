//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// fillScenario writes 64 KiB values over 16,384 keys (1 GiB of distinct data), overwriting them
// for the rest of the run, so every member's journal grows and most of it becomes garbage for
// compaction. The first round preloads every key once.
func fillScenario(cluster string, seconds int, preload bool) string {
	keys := 0
	if preload {
		keys = 16384
	}
	return grpcScenario("e2e big store: 64 KiB values over 16,384 keys, overwritten, through the client Service.",
		cluster, seconds, `[["put", 1]]`, "uniform_int", 16384, 65536, keys)
}

// fillStore runs fill rounds (90 s each, at most 10) until every member's journal holds at
// least E2E_BIG_STORE_GIB GiB; progress per round in the log and in out/fill.txt.
func (e *env) fillStore(out, cluster string, members int) {
	t := e.t
	t.Helper()
	want := float64(e.bigStoreGiB) * (1 << 30)
	var report []string
	for round := 0; round < 10; round++ {
		r := e.runLoad(out, fmt.Sprintf("fill-%d", round), fillScenario(cluster, 90, round == 0), 20*time.Minute, "put")
		least := -1.0
		var sizes []string
		for i := 0; i < members; i++ {
			b := e.memberStats(fmt.Sprintf("%s-%d", cluster, i))["journal_disk_bytes"]
			sizes = append(sizes, fmt.Sprintf("%.2f", b/(1<<30)))
			if least < 0 || b < least {
				least = b
			}
		}
		line := fmt.Sprintf("round %d: %.0f puts/s (%.0f MiB/s of values); journal GiB per member %s", round, r.whole, r.whole/16, strings.Join(sizes, " "))
		t.Log(line)
		report = append(report, line)
		_ = os.WriteFile(filepath.Join(out, "fill.txt"), []byte(strings.Join(report, "\n")+"\n"), 0o644)
		if least >= want {
			return
		}
	}
	t.Fatalf("after 10 rounds the smallest journal is below %d GiB:\n%s", e.bigStoreGiB, strings.Join(report, "\n"))
}

var reclaimedRE = regexp.MustCompile(`(\d+) of (\d+) partition\(s\) done, (\d+) compaction run\(s\), (\d+) bytes reclaimed`)

// reclaimed checks that every member's compaction summary (one per pod log) did all its
// partitions and reclaimed bytes.
func (e *env) reclaimed(logs string, members int) {
	t := e.t
	t.Helper()
	ms := reclaimedRE.FindAllStringSubmatch(logs, -1)
	if len(ms) != members {
		t.Fatalf("want %d compaction summaries, found %d:\n%s", members, len(ms), logs)
	}
	for _, m := range ms {
		bytes, _ := strconv.ParseInt(m[4], 10, 64)
		if m[1] != m[2] || bytes <= 0 {
			t.Fatalf("a member did not compact every partition or reclaimed nothing: %q\n%s", m[0], logs)
		}
	}
}
