//! The ring size is recorded in the data directory at first start; a later start with another
//! ring size is refused, and so is a directory written before the size was recorded whose
//! partition directories say another size.

use crate::common;

use std::path::Path;
use std::process::Command;

/// Runs `levee serve` with `--ring-size ring` on `dir` and expects it to refuse to start.
fn refused(dir: &Path, ring: u32) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_levee"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .args([
            "--ring-size",
            &ring.to_string(),
            "--aae-segments",
            "1024",
            "--data-dir",
        ])
        .arg(dir)
        .output()
        .unwrap();
    assert!(!out.status.success(), "started with ring_size {ring}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn restarting_with_another_ring_size_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    // First start records ring_size 8 (common::Node starts with --ring-size 8) and opens the
    // vnodes on one thread per core, at most 8 (vnodes.rs, `open_threads`), not one per
    // ring_size / cores partitions.
    let node = common::Node::start(&dir, &[]);
    node.wait_for_log(" threads\n");
    let log = std::fs::read_to_string(&node.stderr).unwrap();
    let threads: usize = log
        .split("opened 8 vnodes in ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .and_then(|line| line.split(" on ").nth(1))
        .and_then(|t| t.strip_suffix(" threads"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no vnode open line in the log:\n{log}"));
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    assert_eq!(threads, cores.min(8), "{log}");
    drop(node);
    assert_eq!(
        std::fs::read_to_string(dir.join("RING_SIZE")).unwrap(),
        "8\n"
    );

    let err = refused(&dir, 16);
    assert!(
        err.contains("ring_size 8") && err.contains("ring_size 16"),
        "{err}"
    );
    assert!(err.contains(&dir.display().to_string()), "{err}");
    // Nothing was changed by the refusal: no partition of the other ring was created, the
    // record is intact, and the node starts again with its own size.
    assert!(!dir.join("p0008").exists());
    assert_eq!(
        std::fs::read_to_string(dir.join("RING_SIZE")).unwrap(),
        "8\n"
    );
    drop(common::Node::start(&dir, &[]));
}

#[test]
fn a_directory_from_before_the_record_is_checked_by_its_partitions() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    drop(common::Node::start(&dir, &[]));
    // As an older levee left it: partitions p0000..p0007, no record.
    std::fs::remove_file(dir.join("RING_SIZE")).unwrap();
    let err = refused(&dir, 64);
    assert!(
        err.contains("p0007") && err.contains("ring_size 8") && err.contains("ring_size 64"),
        "{err}"
    );
    assert!(!dir.join("RING_SIZE").exists());
    // With the size it was written with, it starts and records it.
    drop(common::Node::start(&dir, &[]));
    assert_eq!(
        std::fs::read_to_string(dir.join("RING_SIZE")).unwrap(),
        "8\n"
    );
}
