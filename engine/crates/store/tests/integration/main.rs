//! The store crate's integration tests, one module per area, built as one test binary
//! (each file as its own binary compiled the shared helpers and client code again and linked
//! again: that was most of `make test`'s Rust build time).
//! The SIGKILL crash test and the power-loss test stay separate binaries (`crash`, `power_loss`):
//! `make crash-soak` runs them alone with many more cases.

mod api;
mod compression;
mod corruption;
mod disk_full;
mod fault_regressions;
mod features;
mod format_fixture;
mod idle_threads;
mod io_faults;
mod journal_reserve;
mod lazy_journal_index;
mod model;
mod reads_without_waiting;
mod regressions;
#[path = "../sim/mod.rs"]
mod sim;
