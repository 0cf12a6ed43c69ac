//! The local-cluster harness (hack/local-cluster.sh) from the tests: run its commands with this
//! build's `levee`, and stop the cluster however a test ends.

use std::path::{Path, PathBuf};
use std::process::Command;

fn harness() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../hack/local-cluster.sh")
}

/// Runs `local-cluster.sh args...`; its stdout (for `up`/`start`: one "name address metrics pid"
/// line per node). Panics with its output when it fails.
pub fn run(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(harness())
        .args(args)
        .env("LEVEE_BIN", env!("CARGO_BIN_EXE_levee"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "local-cluster.sh {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Stops the cluster in this directory when dropped.
pub struct Down(pub PathBuf);
impl Drop for Down {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(harness())
            .args(["down", self.0.to_str().unwrap()])
            .status();
    }
}
