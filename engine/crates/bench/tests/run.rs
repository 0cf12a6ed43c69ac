//! End-to-end checks of levee-bench: short runs against every embedded driver produce
//! basho_bench-compatible, self-consistent CSVs and charts that decode as PNGs.

use std::path::Path;

use levee_bench::generators::{random_buffer, value_buffer, ValueGen, VALUE_BUFFER_BYTES};
use levee_bench::scenario::{Scenario, ValueGenSpec};
use levee_bench::{charts, drivers, runner};

// basho_bench's own lines and file names (src/basho_bench_stats_writer_csv.erl), written out here
// rather than taken from the runner, so a wrong constant in the runner fails these tests.
const BASHO_SUMMARY_HEADER: &str = "elapsed, window, total, successful, failed\n";
const BASHO_LATENCY_HEADER: &str =
    "elapsed, window, n, min, mean, median, 95th, 99th, 99_9th, max, errors\n";
const BASHO_ERRORS_HEADER: &str = "\"error\",\"count\"\n";
/// The latency files basho_bench writes for the operations `get`, `update`, `head`, `put`,
/// `delete`: `<label>_latencies.csv`, the label being the operation's name.
const FIVE_OP_FILES: [&str; 5] = [
    "delete_latencies.csv",
    "get_latencies.csv",
    "head_latencies.csv",
    "put_latencies.csv",
    "update_latencies.csv",
];

/// Every operation the grpc driver has, and the latency files a run of them writes.
const GRPC_OPS: &str = r#"[["get", 5], ["update", 1], ["head", 1], ["put", 1], ["delete", 1], ["update_with_2i", 1], ["put_unique", 1], ["get_unique", 1], ["postcode_query", 1], ["dob_query", 1]]"#;
const GRPC_OP_FILES: [&str; 10] = [
    "delete_latencies.csv",
    "dob-query_latencies.csv",
    "get-unique_latencies.csv",
    "get_latencies.csv",
    "head_latencies.csv",
    "postcode-query_latencies.csv",
    "put-unique_latencies.csv",
    "put_latencies.csv",
    "update-with-2i_latencies.csv",
    "update_latencies.csv",
];

fn scenario(driver: &str, ops: &str) -> Scenario {
    scenario_with(driver, ops, "")
}

/// `scenario` with extra top-level TOML lines (e.g. the grpc driver's `address`).
fn scenario_with(driver: &str, ops: &str, extra: &str) -> Scenario {
    Scenario::from_toml(&format!(
        r#"
        {extra}
        driver = "{driver}"
        concurrent = 4
        duration = "1500ms"
        report_interval = "500ms"
        operations = {ops}
        [key_generator]
        type = "pareto_int"
        n = 2000
        [value_generator]
        type = "fixed_bin"
        size = 4096
        [preload]
        keys = 500
        [index]
        entries = 4
        max_results = 50
        dob_regex = "[0-9]{{8}}...[a-d]"
        "#
    ))
    .unwrap()
}

/// Rows of a CSV as numbers, after checking its header line byte for byte (newline included).
fn rows(path: &Path, header: &str) -> Vec<Vec<f64>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        text.starts_with(header),
        "header of {}: expected {header:?}, file starts {:?}",
        path.display(),
        text.lines().next()
    );
    text[header.len()..]
        .lines()
        .map(|l| l.split(", ").map(|v| v.parse().unwrap()).collect())
        .collect()
}

/// The `*_latencies.csv` files of a run directory, sorted.
fn latency_files(out: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("_latencies.csv"))
        .collect();
    names.sort();
    names
}

fn png_size(path: &Path) -> (u32, u32) {
    let decoder = png::Decoder::new(std::fs::File::open(path).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    // Not a blank image: a chart has more than one colour.
    let first = &buf[..3];
    assert!(
        buf.chunks(3).any(|px| px != first),
        "{} is a blank image",
        path.display()
    );
    (info.width, info.height)
}

/// Run `s` into `out` and check everything basho_bench's tooling relies on. `files` are the
/// latency files basho_bench would write for the scenario's operations, sorted: exactly these
/// must exist.
fn run_and_check(s: &Scenario, out: &Path, files: &[&str]) -> runner::RunResult {
    let data = tempfile::tempdir().unwrap();
    let driver = drivers::open(s, data.path()).unwrap();
    let r = runner::run(s, driver, out, true).unwrap();
    assert_eq!(
        latency_files(out),
        files,
        "{}: latency file names",
        s.driver
    );
    let summary = rows(&out.join("summary.csv"), BASHO_SUMMARY_HEADER);
    assert!(
        summary.len() >= 2,
        "{}: expected several windows, got {summary:?}",
        s.driver
    );
    for row in &summary {
        assert_eq!(row.len(), 5);
        assert_eq!(
            row[2],
            row[3] + row[4],
            "total = successful + failed in {row:?}"
        );
    }
    let successful: f64 = summary.iter().map(|r| r[3]).sum();
    let failed: f64 = summary.iter().map(|r| r[4]).sum();
    assert!(successful > 0.0, "{}: no successful operations", s.driver);
    assert_eq!(successful as u64, r.successful);
    let mut per_op_n = 0.0;
    let mut per_op_errors = 0.0;
    for op in files {
        let lat = rows(&out.join(op), BASHO_LATENCY_HEADER);
        assert_eq!(lat.len(), summary.len(), "one row per window in {op}");
        for row in &lat {
            assert_eq!(row.len(), 11);
            if row[2] > 0.0 {
                let (min, mean, median, p95, p99, p999, max) =
                    (row[3], row[4], row[5], row[6], row[7], row[8], row[9]);
                assert!(
                    min >= 1.0 && min <= median && median <= p95 && p95 <= p99 && p99 <= p999,
                    "{op}: {row:?}"
                );
                assert!(
                    p999 <= max * 1.001 + 1.0 && mean <= max && mean >= min,
                    "{op}: {row:?}"
                );
            }
        }
        per_op_n += lat.iter().map(|r| r[2]).sum::<f64>();
        per_op_errors += lat.iter().map(|r| r[10]).sum::<f64>();
    }
    assert_eq!(per_op_n, successful, "sum of per-op n = summary successful");
    assert_eq!(
        per_op_errors, failed,
        "sum of per-op errors = summary failed"
    );
    let errors = std::fs::read_to_string(out.join("errors.csv")).unwrap();
    assert!(
        errors.starts_with(BASHO_ERRORS_HEADER),
        "errors.csv header: {errors:?}"
    );
    let counted: u64 = errors[BASHO_ERRORS_HEADER.len()..]
        .lines()
        .map(|l| l.rsplit(',').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(counted as f64, failed);
    // Resources: device bytes written per window are recorded, and the data set uses disk.
    let res = rows(
        &out.join("resources.csv"),
        &format!("{}\n", runner::RESOURCES_HEADER),
    );
    assert_eq!(res.len(), summary.len());
    // (The grpc driver's data lives in the node's process, not under the bench's data dir.)
    assert!(
        s.driver == "grpc" || res.iter().any(|r| r[3] > 0.0),
        "{}: disk usage never measured",
        s.driver
    );
    assert!(res.iter().all(|r| r[4] > 0.0), "{}: RSS missing", s.driver);
    assert!(
        res.last().unwrap()[5] > 0.0,
        "{}: no CPU seconds counted",
        s.driver
    );
    let png = charts::summary_png(out).unwrap();
    assert_eq!(png_size(&png), (charts::WIDTH, charts::PANEL_HEIGHT * 5));
    r
}

fn five_get_one_update(driver: &str) {
    let out = tempfile::tempdir().unwrap();
    let s = scenario(
        driver,
        r#"[["get", 5], ["update", 1], ["head", 1], ["put", 1], ["delete", 1]]"#,
    );
    let r = run_and_check(&s, out.path(), &FIVE_OP_FILES);
    assert_eq!(
        r.failed,
        0,
        "{driver}: {}",
        std::fs::read_to_string(out.path().join("errors.csv")).unwrap()
    );
    assert!(
        r.user_bytes_written > 500 * 4096,
        "preload and updates are counted as user bytes"
    );
    // Where the kernel reports free pages to a hypervisor, the run says so (it moves results).
    let meta = std::fs::read_to_string(out.path().join("meta.txt")).unwrap();
    let reporting = Path::new("/sys/module/page_reporting/parameters/reported_kib").exists();
    assert_eq!(
        meta.contains("\npage_reporting_order=") && meta.contains("\npage_reporting_kib="),
        reporting,
        "{driver}: {meta}"
    );
    // levee's runs say how large its journal segments were, how many spares it kept and how
    // often it compacted.
    assert_eq!(
        meta.contains(
            "\njournal_segment_mb=256\njournal_spare_segments=2\ncompact_journal_every=off\n"
        ),
        driver == "levee",
        "{driver}: {meta}"
    );
}

#[test]
fn levee_run_writes_consistent_basho_bench_csvs() {
    five_get_one_update("levee");
}

#[test]
fn rocksdb_run_writes_consistent_basho_bench_csvs() {
    five_get_one_update("rocksdb");
}

#[test]
fn rocksdb_blobdb_run_writes_consistent_basho_bench_csvs() {
    five_get_one_update("rocksdb-blob");
}

#[test]
fn fjall_run_writes_consistent_basho_bench_csvs() {
    five_get_one_update("fjall");
}

#[test]
fn leveldb_run_writes_consistent_basho_bench_csvs() {
    five_get_one_update("leveldb");
}

#[test]
fn record_ops_run_on_every_embedded_driver() {
    let ops = r#"[["get", 10], ["update", 2], ["update_with_2i", 4], ["put_unique", 2], ["get_unique", 2], ["postcode_query", 2], ["dob_query", 2]]"#;
    // basho_bench names files by label, `_` written as `-`.
    let files = [
        "dob-query_latencies.csv",
        "get-unique_latencies.csv",
        "get_latencies.csv",
        "postcode-query_latencies.csv",
        "put-unique_latencies.csv",
        "update-with-2i_latencies.csv",
        "update_latencies.csv",
    ];
    for driver in ["levee", "rocksdb", "fjall", "leveldb"] {
        let out = tempfile::tempdir().unwrap();
        let r = run_and_check(&scenario(driver, ops), out.path(), &files);
        assert_eq!(
            r.failed,
            0,
            "{driver}: {}",
            std::fs::read_to_string(out.path().join("errors.csv")).unwrap()
        );
        for f in ["postcode-query_latencies.csv", "dob-query_latencies.csv"] {
            let q = rows(&out.path().join(f), BASHO_LATENCY_HEADER);
            assert!(q.iter().map(|r| r[2]).sum::<f64>() > 0.0, "{driver}: {f}");
        }
        // Queries find what updates indexed: 500 preloaded keys have no entries, the updates
        // add four per record, and a run reports the mean results per query in meta.txt.
        let meta = std::fs::read_to_string(out.path().join("meta.txt")).unwrap();
        let mean = |op: &str| -> f64 {
            let line = meta
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{op}_mean_results=")))
                .unwrap_or_else(|| panic!("{driver}: no {op} mean in {meta}"));
            line.parse().unwrap()
        };
        assert!(mean("dob_query") > 0.0, "{driver}: {meta}");
        // Postcode ranges are narrow: a mean of zero is possible, but the line must be there
        // (`mean` panics without it).
        mean("postcode_query");
    }
}

#[test]
fn index_entries_follow_puts_updates_and_deletes_on_every_driver() {
    use levee_bench::records::{Entry, RangeQuery, DATE_OF_BIRTH, POSTCODE};
    let q = |field, lo: &str, hi: &str, max_results, re: Option<&str>| RangeQuery {
        field,
        lo: lo.into(),
        hi: hi.into(),
        regex: re.map(|r| regex::bytes::Regex::new(r).unwrap()),
        max_results,
    };
    let district = q(POSTCODE, "AB1|a", "AB1|h", 100, None);
    let pc = |t: &str| Entry::new(POSTCODE, t);
    for driver in ["levee", "rocksdb", "rocksdb-blob", "fjall", "leveldb"] {
        let data = tempfile::tempdir().unwrap();
        let s = scenario(driver, r#"[["update_with_2i", 1]]"#);
        let d = drivers::open(&s, data.path()).unwrap();
        let count = |q: &RangeQuery| d.index_query(q).unwrap();
        d.put(
            b"k1",
            b"v1",
            &[pc("AB1|aaa"), Entry::new(DATE_OF_BIRTH, "19700105|x")],
        )
        .unwrap();
        d.put(b"k2", b"v2", &[pc("AB1|bbb")]).unwrap();
        d.put(b"k3", b"v3", &[pc("AB1|zzz")]).unwrap();
        d.put(b"k4", b"v4", &[pc("AB10|ccc")]).unwrap();
        assert_eq!(count(&district), 2, "{driver}: bounds are inclusive");
        assert_eq!(
            count(&q(POSTCODE, "AB1|a", "AB1|h", 1, None)),
            1,
            "{driver}"
        );
        assert_eq!(
            count(&q(POSTCODE, "AB1|a", "AB1|h", 100, Some("b{3}"))),
            1,
            "{driver}: term_regex filters"
        );
        assert_eq!(
            count(&q(DATE_OF_BIRTH, "19700101", "19700110", 100, None)),
            1,
            "{driver}: fields are separate"
        );
        // An update with entries replaces the object's: the old ones are gone.
        d.update(b"k1", b"v1b", Some(&[pc("AB1|ddd")])).unwrap();
        assert_eq!(count(&district), 2, "{driver}");
        assert_eq!(
            count(&q(POSTCODE, "AB1|aaa", "AB1|aaa", 100, None)),
            0,
            "{driver}: a replaced term is removed"
        );
        assert_eq!(
            count(&q(DATE_OF_BIRTH, "19700101", "19700110", 100, None)),
            0,
            "{driver}: a replaced field is removed"
        );
        // An update without entries keeps the object's.
        d.update(b"k2", b"v2b", None).unwrap();
        assert_eq!(
            count(&q(POSTCODE, "AB1|bbb", "AB1|bbb", 100, None)),
            1,
            "{driver}"
        );
        d.update(b"k2", b"v2c", Some(&[pc("AB1|ddd")])).unwrap();
        assert_eq!(
            count(&q(POSTCODE, "AB1|bbb", "AB1|bbb", 100, None)),
            0,
            "{driver}"
        );
        assert_eq!(count(&district), 2, "{driver}: two keys share one term");
        // A delete removes the object and its entries.
        d.delete(b"k2").unwrap();
        assert_eq!(count(&district), 1, "{driver}");
        assert!(
            !d.get(b"k2").unwrap() && !d.head(b"k2").unwrap(),
            "{driver}"
        );
        assert!(d.get(b"k1").unwrap() && d.head(b"k4").unwrap(), "{driver}");
        assert!(!d.get(b"nope").unwrap(), "{driver}");
        d.close().unwrap();
    }
}

#[test]
fn compare_draws_runs_side_by_side_with_a_ratio_table() {
    let base = tempfile::tempdir().unwrap();
    let ops = r#"[["get", 5], ["update", 1]]"#;
    let a = base.path().join("levee");
    let b = base.path().join("rocksdb");
    let files = ["get_latencies.csv", "update_latencies.csv"];
    run_and_check(&scenario("levee", ops), &a, &files);
    run_and_check(&scenario("rocksdb", ops), &b, &files);
    let png = base.path().join("compare.png");
    let table = charts::compare(&[a.clone(), b.clone()], &png, "get").unwrap();
    assert_eq!(png_size(&png), (charts::WIDTH, charts::PANEL_HEIGHT * 5));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(
        lines[2].starts_with("| levee |") && lines[2].contains("| 1.00× |"),
        "{table}"
    );
    assert!(lines[3].starts_with("| rocksdb |"), "{table}");
    assert!(
        charts::compare(&[base.path().join("levee")], &png, "get").is_err(),
        "one run is no comparison"
    );
    // Throughput against accumulated operations: a chart and a row per run.
    let acc = base.path().join("accumulated.png");
    let t = levee_bench::accumulated::compare(&[a, b], &acc).unwrap();
    assert_eq!(png_size(&acc), (charts::WIDTH, charts::PANEL_HEIGHT * 2));
    assert!(
        t.lines().nth(2).unwrap().starts_with("| levee |")
            && t.lines().nth(3).unwrap().starts_with("| rocksdb |"),
        "{t}"
    );
}

#[test]
fn fixed_bin_values_are_incompressible() {
    let buf = random_buffer(VALUE_BUFFER_BYTES, 3);
    let mut g = ValueGen::new(&ValueGenSpec::FixedBin { size: 8192 }, buf, 5);
    let ratio = |data: &[u8]| data.len() as f64 / zstd::encode_all(data, 3).unwrap().len() as f64;
    // One value alone, and 64 consecutive values as a block compressor would see them.
    let one = g.next_value(0).to_vec();
    assert!(
        ratio(&one) < 1.01,
        "zstd ratio of one value {}",
        ratio(&one)
    );
    let mut block = Vec::new();
    for _ in 0..64 {
        block.extend_from_slice(g.next_value(0));
    }
    assert!(
        ratio(&block) < 1.01,
        "zstd ratio of 64 values {}",
        ratio(&block)
    );
    // The check can fail: repeated values compress.
    let repeated: Vec<u8> = one.iter().cycle().take(block.len()).copied().collect();
    assert!(ratio(&repeated) > 20.0);
}

/// The peers' cache and writeback settings follow levee's defaults (docs/benchmarks.md, "Drivers
/// and fair settings"): a change to either side shows here.
#[test]
fn peers_get_levee_s_memory_budget_and_background_sync() {
    let c = levee_store::Config::default();
    assert_eq!(
        levee_bench::drivers::CACHE_BYTES,
        c.memtable_bytes * (1 + c.max_immutable_memtables)
    );
    assert_eq!(
        levee_bench::drivers::BYTES_PER_SYNC,
        c.journal_bytes_per_sync
    );
}

#[test]
fn compressible_values_hold_their_share_of_text() {
    let ratio = |data: &[u8]| data.len() as f64 / zstd::encode_all(data, 3).unwrap().len() as f64;
    // (compressible, lowest and highest zstd ratio of an 8 KB value)
    for (share, lo, hi) in [
        (0.0, 0.0, 1.01),
        (0.5, 1.5, 2.2),
        (0.75, 2.2, 4.5),
        (1.0, 4.0, 40.0),
    ] {
        let buf = value_buffer(16 << 20, 3, share);
        let mut g = ValueGen::new(&ValueGenSpec::FixedBin { size: 8192 }, buf, 5);
        for _ in 0..20 {
            let r = ratio(g.next_value(0));
            assert!(
                (lo..hi).contains(&r),
                "compressible {share}: zstd ratio {r}"
            );
        }
    }
}

#[test]
fn scenario_library_files_all_parse() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../e2e/scenarios");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            Scenario::load(&p).unwrap_or_else(|e| panic!("{}: {e:#}", p.display()));
            n += 1;
        }
    }
    assert!(n >= 7, "expected the scenario library in {}", dir.display());
}

#[test]
fn levee_maintenance_runs_on_schedule_and_peers_skip_it() {
    use levee_bench::maintenance::{self, Kind};
    for (driver, expect_rows) in [("levee", true), ("rocksdb", false)] {
        let out = tempfile::tempdir().unwrap();
        let mut s = scenario(driver, r#"[["get", 1], ["update", 4]]"#);
        s.compact_journal_every = Some("300ms".into());
        s.rebuild_aae_every = Some("400ms".into());
        s.rebuild_aae_journal_check = true;
        s.validate().unwrap();
        let r = run_and_check(
            &s,
            out.path(),
            &["get_latencies.csv", "update_latencies.csv"],
        );
        assert_eq!(r.failed, 0, "{driver}");
        let text = std::fs::read_to_string(out.path().join("maintenance.csv")).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(maintenance::HEADER));
        let rows: Vec<&str> = lines.collect();
        assert_eq!(!rows.is_empty(), expect_rows, "{driver}: {text}");
        for row in &rows {
            let f: Vec<&str> = row.split(", ").collect();
            assert_eq!(f.len(), 6, "{row}");
            assert_eq!(f[5], "", "{driver}: maintenance failed: {row}");
        }
        let calls = maintenance::parse_calls(&text).unwrap();
        if expect_rows {
            for kind in [Kind::JournalCompaction, Kind::AaeRebuildJournalCheck] {
                assert!(calls.iter().any(|c| c.kind == kind), "no {kind:?}: {text}");
            }
            let table = maintenance::report(out.path()).unwrap();
            assert!(table.contains("| journal_compaction |"), "{table}");
            assert!(table.contains("| aae_rebuild_journal_check |"), "{table}");
        } else {
            assert!(maintenance::report(out.path()).is_err());
        }
    }
    let mut s = scenario("levee", r#"[["get", 1]]"#);
    s.compact_journal_every = Some("0s".into());
    assert!(s.validate().is_err());
    let mut s = scenario("levee", r#"[["get", 1]]"#);
    s.rebuild_aae_journal_check = true;
    let e = format!("{:#}", s.validate().unwrap_err());
    assert!(e.contains("needs rebuild_aae_every"), "{e}");
}

/// The `levee` node binary: `LEVEE_NODE_BIN` when set (`make engine-test` points it at the binary its
/// `cargo test --workspace` has just built, so no second cargo runs inside the test), otherwise
/// built by this test with the test's own profile and target directory (`target/<profile>/levee`),
/// so `cargo test -p levee-bench` needs no earlier build.
/// A server process (node or anchor), killed however the test ends so a failed assertion does not
/// leave it running.
struct KillOnDrop(std::process::Child);

impl KillOnDrop {
    /// Start `cmd`; the process and the first line it printed (its address is in it).
    fn start(cmd: &mut std::process::Command) -> (KillOnDrop, String) {
        use std::io::BufRead;
        let mut p = KillOnDrop(cmd.stdout(std::process::Stdio::piped()).spawn().unwrap());
        let mut line = String::new();
        std::io::BufReader::new(p.0.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        (p, line)
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn levee_binary() -> std::path::PathBuf {
    if let Some(bin) = std::env::var_os("LEVEE_NODE_BIN") {
        let bin = std::path::PathBuf::from(bin);
        assert!(
            bin.is_file(),
            "LEVEE_NODE_BIN={} is not a file",
            bin.display()
        );
        return bin;
    }
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/run-<hash> → target/<profile>
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let profile = match profile_dir.file_name().unwrap().to_str().unwrap() {
        "debug" => "dev",
        other => other,
    };
    let target_dir = profile_dir.parent().unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    // The variables cargo set for this test (CARGO_PKG_*, CARGO_MANIFEST_*, ...) would look like a
    // changed environment to build scripts that watch them, and rebuild dependencies the outer
    // build already made. Keep only cargo's own configuration.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        let config = ["CARGO_HOME", "CARGO_TARGET_DIR"].contains(&k.as_str())
            || [
                "CARGO_BUILD_",
                "CARGO_PROFILE_",
                "CARGO_NET_",
                "CARGO_REGISTRIES_",
                "CARGO_TERM_",
            ]
            .iter()
            .any(|p| k.starts_with(p));
        if (k.starts_with("CARGO_") && !config) || k == "OUT_DIR" || k == "RUSTC_BOOTSTRAP" {
            cmd.env_remove(&k);
        }
    }
    let status = cmd
        .args(["build", "--quiet", "-p", "levee-node", "--bin", "levee"])
        .args(["--profile", profile, "--target-dir"])
        .arg(target_dir)
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml"))
        .status()
        .expect("running cargo to build the levee node");
    assert!(
        status.success(),
        "cargo build -p levee-node failed: {status}"
    );
    let bin = profile_dir.join("levee");
    assert!(bin.exists(), "{} not found after the build", bin.display());
    bin
}

#[test]
fn grpc_driver_loads_a_running_levee_node() {
    let node_dir = tempfile::tempdir().unwrap();
    let (node, line) = KillOnDrop::start(
        std::process::Command::new(levee_binary())
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
            ])
            .args(["--ring-size", "8", "--data-dir"])
            .arg(node_dir.path())
            .stderr(std::process::Stdio::null()),
    );
    let addr = line
        .split("gRPC on ")
        .nth(1)
        .and_then(|r| r.split([',', ' ']).next())
        .unwrap_or_else(|| panic!("no address in the node's startup line {line:?}"))
        .to_string();
    let out = tempfile::tempdir().unwrap();
    let s = scenario_with("grpc", GRPC_OPS, &format!("address = \"http://{addr}\""));
    let r = run_and_check(&s, out.path(), &GRPC_OP_FILES);
    drop(node);
    assert_eq!(
        r.failed,
        0,
        "grpc: {}",
        std::fs::read_to_string(out.path().join("errors.csv")).unwrap()
    );
    // The node really stored the preload: its data dir holds journal bytes.
    let mut bytes = 0u64;
    let mut stack = vec![node_dir.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else {
                bytes += m.len();
            }
        }
    }
    assert!(bytes > 500 * 4096, "node data dir holds only {bytes} bytes");
}

/// The node-path anchor answers the grpc driver from memory: what is put is found, what is not
/// is not, and a scenario of every KV operation runs on it without errors.
#[test]
fn grpc_driver_loads_the_anchor() {
    let (_anchor, line) = KillOnDrop::start(
        std::process::Command::new(env!("CARGO_BIN_EXE_levee-bench")).args([
            "anchor",
            "--listen",
            "127.0.0.1:0",
            "--threads",
            "2",
        ]),
    );
    let addr = line
        .strip_prefix("anchor listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .trim()
        .to_string();
    let s = scenario_with("grpc", GRPC_OPS, &format!("address = \"http://{addr}\""));
    let data = tempfile::tempdir().unwrap();
    let d = drivers::open(&s, data.path()).unwrap();
    d.put(b"anchor-key", b"value", &[]).unwrap();
    assert!(d.get(b"anchor-key").unwrap(), "a put key is found");
    assert!(d.head(b"anchor-key").unwrap());
    assert!(!d.get(b"never-put").unwrap(), "an absent key is not");
    d.delete(b"anchor-key").unwrap();
    assert!(!d.get(b"anchor-key").unwrap(), "a deleted key is gone");
    drop(d);
    let out = tempfile::tempdir().unwrap();
    let r = run_and_check(&s, out.path(), &GRPC_OP_FILES);
    assert_eq!(r.failed, 0);
}

/// `--out` names a directory that is not an earlier run: refused, and nothing in it is touched.
#[test]
fn run_refuses_to_delete_a_directory_that_is_not_an_earlier_run() {
    let dir = tempfile::tempdir().unwrap();
    let precious = dir.path().join("precious.txt");
    std::fs::write(&precious, "keep me").unwrap();
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../e2e/scenarios/demo.toml"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_levee-bench"))
        .args(["run", scenario, "--quiet", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "levee-bench ran over {}",
        dir.path().display()
    );
    assert!(stderr.contains("refusing to delete"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me");
}

/// An earlier run in `--out` is kept unless `--force` asks for it to be replaced.
#[test]
fn run_replaces_an_earlier_run_only_with_force() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("tiny.toml");
    std::fs::write(
        &scenario,
        r#"
        driver = "levee"
        concurrent = 1
        duration = "300ms"
        report_interval = "100ms"
        operations = [["put", 1]]
        [key_generator]
        type = "uniform_int"
        n = 100
        [value_generator]
        type = "fixed_bin"
        size = 100
        "#,
    )
    .unwrap();
    let out = dir.path().join("run");
    let run = |force: bool| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_levee-bench"));
        c.arg("run")
            .arg(&scenario)
            .arg("--quiet")
            .arg("--out")
            .arg(&out);
        if force {
            c.arg("--force");
        }
        c.output().unwrap()
    };
    let first = run(false);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let note = out.join("note.txt");
    std::fs::write(&note, "results worth keeping").unwrap();
    let again = run(false);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success(), "replaced without --force");
    assert!(stderr.contains("--force"), "{stderr}");
    assert!(note.is_file() && out.join("summary.csv").is_file());
    let forced = run(true);
    assert!(
        forced.status.success(),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );
    assert!(!note.exists() && out.join("summary.csv").is_file());
}

/// `run --check` accepts a valid cell and refuses a misspelt driver without running or writing
/// anything (`make bench` checks its whole matrix this way before the first run).
#[test]
fn run_check_refuses_an_unknown_driver_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../e2e/scenarios/demo.toml"
    );
    let check = |driver: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_levee-bench"))
            .args(["run", scenario, "--check", "--driver", driver, "--out"])
            .arg(dir.path().join(driver))
            .output()
            .unwrap()
    };
    let ok = check("rocksdb-blob");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let bad = check("blobdb");
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success(), "blobdb accepted");
    assert!(stderr.contains("driver must be one of"), "{stderr}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "a check wrote a run directory"
    );
}
