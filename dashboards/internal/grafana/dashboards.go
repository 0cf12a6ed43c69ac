package grafana

import "fmt"

// All returns levee's dashboards by file name (under dashboards/grafana/).
func All() map[string]*Dashboard {
	return map[string]*Dashboard{
		"levee-overview.json":    Overview(),
		"levee-resources.json":   Resources(),
		"levee-maintenance.json": Maintenance(),
		"levee-autoscaler.json":  Autoscaler(),
	}
}

// quantile is histogram_quantile(q) of the request-duration histogram, grouped by `by`.
func quantile(q float64, by string) string {
	return fmt.Sprintf(`histogram_quantile(%g, sum by (%s, le) (rate(levee_request_duration_seconds_bucket{SEL}[$__rate_interval])))`, q, by)
}

// Overview: what clients see — throughput, errors, latency.
func Overview() *Dashboard {
	l := &layout{}
	l.row("Summary")
	l.add(6, 4, stat("Requests/s", "Client requests per second served by the chosen members, all operations.", "reqps",
		Q{Expr: `sum(rate(levee_requests_total{SEL}[$__rate_interval]))`}))
	l.add(6, 4, stat("Error ratio", "Share of requests that ended in an error (not_found is not an error).", "percentunit",
		Q{Expr: `(sum(rate(levee_requests_total{SEL, result="error"}[$__rate_interval])) or vector(0)) / sum(rate(levee_requests_total{SEL}[$__rate_interval]))`},
		Step{Color: "orange", Value: f(0.001)}, Step{Color: "red", Value: f(0.01)}))
	l.add(6, 4, stat("GET p99", "99th percentile latency of GET across the chosen members.", "s",
		Q{Expr: `histogram_quantile(0.99, sum by (le) (rate(levee_request_duration_seconds_bucket{SEL, op="get"}[$__rate_interval])))`}))
	l.add(6, 4, stat("Members down", "Members Prometheus could not scrape at the last attempt (a member that has no target at all is not counted: see the LeveeMemberMissing alert).", "none",
		Q{Expr: `count(up{SEL} == 0) or vector(0)`}, Step{Color: "red", Value: f(1)}))

	l.row("Requests")
	l.add(12, 8, timeseries("Requests/s by op and result", "Client requests per second by operation and result (ok, not_found, error).", "reqps",
		Q{`sum by (op, result) (rate(levee_requests_total{SEL}[$__rate_interval]))`, "{{op}} {{result}}"}))
	l.add(12, 8, timeseries("Requests/s by member", "Client requests per second served by each member.", "reqps",
		Q{`sum by (pod) (rate(levee_requests_total{SEL}[$__rate_interval]))`, "{{pod}}"}))
	// `or ... * 0`: an op without errors draws 0 instead of leaving the panel empty.
	l.add(12, 8, timeseries("Errors/s by op", "Requests per second that ended in an error, by operation.", "reqps",
		Q{`sum by (op) (rate(levee_requests_total{SEL, result="error"}[$__rate_interval])) or (sum by (op) (rate(levee_requests_total{SEL}[$__rate_interval])) * 0)`, "{{op}}"}))
	l.add(12, 8, withRange(timeseries("Error ratio by member", "Share of each member's requests that ended in an error.", "percentunit",
		Q{`(sum by (pod) (rate(levee_requests_total{SEL, result="error"}[$__rate_interval])) or (sum by (pod) (rate(levee_requests_total{SEL}[$__rate_interval])) * 0)) / sum by (pod) (rate(levee_requests_total{SEL}[$__rate_interval]))`, "{{pod}}"}), f(0), nil))

	l.row("Latency (node-side, from levee_request_duration_seconds)")
	for _, q := range []struct {
		q    float64
		name string
	}{{0.5, "p50"}, {0.95, "p95"}, {0.99, "p99"}} {
		l.add(6, 8, timeseries("Latency "+q.name+" by op", fmt.Sprintf("%gth percentile of request latency by operation, interpolated within histogram buckets.", q.q*100), "s",
			Q{quantile(q.q, "op"), "{{op}}"}))
	}
	l.add(6, 8, timeseries("Latency max by op", "Upper bound of the highest histogram bucket that received a request (histogram_quantile(1, ...)): the histogram keeps no exact maximum.", "s",
		Q{quantile(1, "op"), "{{op}}"}))
	l.add(12, 8, timeseries("Mean latency by op", "Average request latency by operation (sum / count of the histogram).", "s",
		Q{`sum by (op) (rate(levee_request_duration_seconds_sum{SEL}[$__rate_interval])) / sum by (op) (rate(levee_request_duration_seconds_count{SEL}[$__rate_interval]))`, "{{op}}"}))
	l.add(12, 8, timeseries("Latency p99 by member", "99th percentile latency of all operations on each member: a slow member stands out here.", "s",
		Q{quantile(0.99, "pod"), "{{pod}}"}))
	return dashboard("levee-overview", "levee / Overview",
		"Client traffic of levee clusters: requests per second by operation and result, errors, latency percentiles.", l)
}

// Resources: what each member spends — the autoscaler's CPU-versus-disk view, write
// amplification, bytes on disk, stalls and merge debt.
func Resources() *Dashboard {
	l := &layout{}
	l.row("CPU versus disk busyness (the autoscaler's view)")
	l.add(24, 9, rightAxis(withRange(timeseries("CPU and disk busyness per member",
		"Left axis: CPU cores each member's process uses. Right axis: share of time the device holding its data directory was busy (1 = saturated). A member limited by CPU shows high cores with a calm disk; a disk-bound member the reverse.",
		"none",
		Q{`sum by (pod) (rate(process_cpu_seconds_total{SEL}[$__rate_interval]))`, "{{pod}} CPU cores"},
		Q{`max by (pod) (rate(levee_disk_io_time_seconds_total{SEL}[$__rate_interval]))`, "{{pod}} disk busy"}), f(0), nil),
		"B", "percentunit", f(0), f(1)))
	l.add(8, 8, withRange(timeseries("CPU cores per member", "CPU seconds per second of each member's process.", "none",
		Q{`sum by (pod) (rate(process_cpu_seconds_total{SEL}[$__rate_interval]))`, "{{pod}}"}), f(0), nil))
	l.add(8, 8, withRange(timeseries("Disk busy per member", "Share of time the data directory's device was busy (from /proc/diskstats io_ticks).", "percentunit",
		Q{`max by (pod) (rate(levee_disk_io_time_seconds_total{SEL}[$__rate_interval]))`, "{{pod}}"}), f(0), f(1)))
	l.add(8, 8, withRange(timeseries("Disk queue depth per member", "Average number of requests in flight on the data device (weighted io_ticks per second).", "none",
		Q{`max by (pod) (rate(levee_disk_io_weighted_seconds_total{SEL}[$__rate_interval]))`, "{{pod}}"}), f(0), nil))

	l.row("Writes")
	l.add(12, 8, withRange(timeseries("Write amplification per member",
		"Bytes written to journal and ledger per byte accepted from clients.", "none",
		Q{`(sum by (pod) (rate(levee_journal_bytes_written_total{SEL}[$__rate_interval])) + sum by (pod) (rate(levee_ledger_bytes_written_total{SEL}[$__rate_interval]))) / sum by (pod) (rate(levee_user_bytes_written_total{SEL}[$__rate_interval]))`, "{{pod}}"}), f(0), nil))
	l.add(12, 8, timeseries("Bytes written/s: user, journal, ledger", "Client bytes accepted and the bytes the engine wrote for them, summed over the chosen members.", "Bps",
		Q{`sum(rate(levee_user_bytes_written_total{SEL}[$__rate_interval]))`, "user"},
		Q{`sum(rate(levee_journal_bytes_written_total{SEL}[$__rate_interval]))`, "journal"},
		Q{`sum(rate(levee_ledger_bytes_written_total{SEL}[$__rate_interval]))`, "ledger"}))
	l.add(12, 8, withRange(timeseries("Write stalls per member", "Seconds per second writers waited for ledger merges, summed over writers (0.05 = 5% of the time for one writer).", "percentunit",
		Q{`sum by (pod) (rate(levee_write_stall_seconds_total{SEL}[$__rate_interval]))`, "{{pod}}"}), f(0), nil))
	l.add(12, 8, withRange(timeseries("Journal fdatasync time per member", "Seconds per second the member's vnodes spent in journal fdatasync. With sync on write a write waits for one or two of these syncs: divided by levee_journal_fsyncs_total's rate it is the mean sync.", "percentunit",
		Q{`sum by (pod) (rate(levee_journal_fsync_seconds_total{SEL}[$__rate_interval]))`, "{{pod}}"}), f(0), nil))
	l.add(12, 8, withRange(timeseries("Journal fdatasync p99 per member", "99th percentile of the member's journal fdatasync calls. With sync on write a write waits for one or two of them, so this bounds the synced write tail; spikes that follow journal compactions point at the disk (docs/benchmarks.md, discards of removed segments).", "s",
		Q{`histogram_quantile(0.99, sum by (pod, le) (rate(levee_journal_fsync_duration_seconds_bucket{SEL}[$__rate_interval])))`, "{{pod}}"}), f(0), nil))
	l.add(12, 8, withRange(timeseries("Ledger merge backlog per member", "Ledger files over their level targets, summed over the member's vnodes (merge debt).", "none",
		Q{`sum by (pod) (levee_ledger_merge_backlog{SEL})`, "{{pod}}"}), f(0), nil))

	l.row("Data on disk")
	l.add(8, 8, withRange(timeseries("Journal bytes per member", "Bytes of journal segments (the values) on disk.", "bytes",
		Q{`sum by (pod) (levee_journal_disk_bytes{SEL})`, "{{pod}}"}), f(0), nil))
	l.add(8, 8, withRange(timeseries("Ledger bytes per member", "Bytes of ledger SST files (keys and metadata) on disk.", "bytes",
		Q{`sum by (pod) (levee_ledger_disk_bytes{SEL})`, "{{pod}}"}), f(0), nil))
	l.add(8, 8, withRange(timeseries("Vnodes per member by state", "Vnodes each member hosts: active (owned), handoff (holding objects for their owner), idle.", "none",
		Q{`sum by (pod, state) (levee_vnodes{SEL})`, "{{pod}} {{state}}"}), f(0), nil))
	l.add(12, 8, withRange(timeseries("Data filesystem used per member", "Share of the filesystem holding each member's data directory that is used (1 - available/size). LeveeDiskNearlyFull fires above 90%.", "percentunit",
		Q{`1 - sum by (pod) (levee_data_filesystem_avail_bytes{SEL}) / sum by (pod) (levee_data_filesystem_size_bytes{SEL})`, "{{pod}}"}), f(0), f(1)))
	l.add(12, 8, withRange(timeseries("Data filesystem available per member", "Bytes of the data filesystem available to each member.", "bytes",
		Q{`sum by (pod) (levee_data_filesystem_avail_bytes{SEL})`, "{{pod}}"}), f(0), nil))
	return dashboard("levee-resources", "levee / Node resources",
		"Per-member resources of levee clusters: CPU versus disk busyness, write amplification, bytes on disk, write stalls and merge backlog.", l)
}

// Maintenance: journal compaction, AAE and handoff.
func Maintenance() *Dashboard {
	l := &layout{}
	l.row("Summary over the time range")
	l.add(6, 4, stat("Compaction runs", "Journal compaction runs completed in the dashboard's time range.", "none",
		Q{Expr: `sum(increase(levee_journal_compaction_runs_total{SEL}[$__range]))`}))
	l.add(6, 4, stat("Bytes reclaimed", "Journal bytes freed by compaction in the dashboard's time range.", "bytes",
		Q{Expr: `sum(increase(levee_journal_compaction_reclaimed_bytes_total{SEL}[$__range]))`}))
	l.add(6, 4, stat("Compactions running", "Members with a journal compaction running now.", "none",
		Q{Expr: `sum(levee_journal_compaction_active{SEL})`}))
	l.add(6, 4, stat("AAE rebuilds", "AAE tree rebuilds completed in the dashboard's time range.", "none",
		Q{Expr: `sum(increase(levee_aae_rebuilds_total{SEL}[$__range]))`}))

	l.row("Journal compaction")
	l.add(12, 8, bars(timeseries("Compaction runs per hour", "Journal compaction runs completed per member in the hour before each point.", "none",
		Q{`sum by (pod) (increase(levee_journal_compaction_runs_total{SEL}[1h]))`, "{{pod}}"})))
	l.add(12, 8, withRange(timeseries("Compaction running", "1 while a journal compaction runs on the member.", "none",
		Q{`max by (pod) (levee_journal_compaction_active{SEL})`, "{{pod}}"}), f(0), f(1)))
	l.add(12, 8, timeseries("Bytes reclaimed/s per member", "Journal bytes freed by compaction per second.", "Bps",
		Q{`sum by (pod) (rate(levee_journal_compaction_reclaimed_bytes_total{SEL}[$__rate_interval]))`, "{{pod}}"}))
	l.add(12, 8, withRange(timeseries("Journal size per member", "Bytes of journal segments on disk: grows with writes, drops when compaction reclaims.", "bytes",
		Q{`sum by (pod) (levee_journal_disk_bytes{SEL})`, "{{pod}}"}), f(0), nil))

	l.row("Anti-entropy and handoff")
	l.add(8, 8, bars(timeseries("AAE rebuilds per hour", "AAE tree rebuilds completed per member in the hour before each point.", "none",
		Q{`sum by (pod) (increase(levee_aae_rebuilds_total{SEL}[1h]))`, "{{pod}}"})))
	l.add(8, 8, withRange(timeseries("Last AAE rebuild duration", "Duration of the longest last AAE rebuild among each member's vnodes.", "s",
		Q{`max by (pod) (levee_aae_rebuild_duration_seconds{SEL})`, "{{pod}}"}), f(0), nil))
	l.add(8, 8, timeseries("AAE exchanges/s by result", "Tree exchanges with replicas per second, by result.", "ops",
		Q{`sum by (result) (rate(levee_aae_exchanges_total{SEL}[$__rate_interval]))`, "{{result}}"}))
	l.add(12, 8, timeseries("AAE repairs/s per member", "Keys repaired by anti-entropy per second.", "ops",
		Q{`sum by (pod) (rate(levee_aae_repairs_total{SEL}[$__rate_interval]))`, "{{pod}}"}))
	l.add(12, 8, timeseries("Handoff bytes/s per member", "Bytes streamed to other members in hinted or ownership handoff.", "Bps",
		Q{`sum by (pod) (rate(levee_handoff_bytes_total{SEL}[$__rate_interval]))`, "{{pod}}"}))
	l.add(12, 8, withRange(timeseries("Members marked down, as each member sees them", "Other members each member has marked down: its calls to them failed, or they said they were shutting down (a rolling restart shows each member in turn). A member stays down until its health check answers SERVING or it says it serves again.", "none",
		Q{`max by (pod) (levee_members_down{SEL})`, "{{pod}}"}), f(0), nil))
	l.add(12, 8, timeseries("Hints written/s per member", "Hints a member's coordinator stored on another member for a primary that failed the write (unreachable, or too busy), kept until hinted handoff gives them back. Writes routed to a fallback because their primary was already marked down are not counted here.", "ops",
		Q{`sum by (pod) (rate(levee_hints_written_total{SEL}[$__rate_interval]))`, "{{pod}}"}))
	return dashboard("levee-maintenance", "levee / Maintenance",
		"Background work of levee clusters: journal compaction, journal size, AAE rebuilds and exchanges, repairs, members marked down, hints, handoff.", l)
}

// Autoscaler: the operator's verdicts next to the signals they come from.
func Autoscaler() *Dashboard {
	l := &layout{}
	l.row("Verdict (from the operator's metrics; clusters with autoscaling enabled)")
	l.add(12, 8, timeseries("Members: wanted by the autoscaler versus desired, current and ready",
		"The autoscaler's latest verdict (autoscaler wants) next to spec.replicas (desired), the pods the StatefulSet runs (current), the ready ones and the members in the published member list (listed).", "none",
		Q{`max(levee_operator_autoscaler_desired_replicas{OPSEL})`, "autoscaler wants"},
		Q{`max by (kind) (levee_operator_kvcluster_replicas{OPSEL})`, "{{kind}}"}))
	l.add(12, 8, withRange(timeseries("Bottleneck", "1 for the bottleneck of the latest verdict: cpu, disk, none, or unknown (signals missing: the AutoscalerReady condition names them).", "none",
		Q{`max by (bottleneck) (levee_operator_autoscaler_bottleneck{OPSEL})`, "{{bottleneck}}"}), f(0), f(1)))
	l.add(12, 8, withRange(timeseries("Utilisation the verdict measured", "Mean CPU use over the CPU request (cpu) and mean disk busy fraction (disk) across members, as the autoscaler read them; compare with spec.autoscaling.cpuTarget and diskBusyTarget.", "percentunit",
		Q{`max by (resource) (levee_operator_autoscaler_utilisation_ratio{OPSEL})`, "{{resource}}"}), f(0), nil))
	l.add(12, 8, bars(timeseries("Scale steps per hour", "Steps the autoscaler made in the hour before each point, by direction.", "none",
		Q{`sum by (direction) (increase(levee_operator_autoscaler_steps_total{OPSEL}[1h]))`, "{{direction}}"})))

	l.row("Signals per member (the autoscaler's inputs)")
	l.add(12, 8, withRange(timeseries("CPU cores per member", "CPU seconds per second of each member's process; the autoscaler divides by the CPU request.", "none",
		Q{`sum by (pod) (rate(process_cpu_seconds_total{SEL}[$__rate_interval]))`, "{{pod}}"}), f(0), nil))
	l.add(12, 8, withRange(timeseries("Disk busy per member", "Share of time each member's data device was busy; on nvme the queue depth decides (Node resources dashboard).", "percentunit",
		Q{`max by (pod) (rate(levee_disk_io_time_seconds_total{SEL}[$__rate_interval]))`, "{{pod}}"}), f(0), f(1)))
	return dashboard("levee-autoscaler", "levee / Autoscaler",
		"The operator's autoscaling of levee clusters: verdicts, wanted versus actual members, the utilisation it measured and its steps, beside the per-member signals.", l)
}
