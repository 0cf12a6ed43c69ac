//! The node crate's integration tests, one module per area, built as one test binary
//! (each file as its own binary compiled the shared helpers and client code again and linked
//! again: that was most of `make test`'s Rust build time).

mod aae_exchange;
mod cluster_faults;
mod cluster_kv;
mod cluster_tls;
mod common;
mod fault_tools;
mod local_cluster;
mod membership;
mod node;
mod overload;
mod replacement;
mod replication;
mod ring_settle;
mod ring_size;
mod ring_transitions;
mod tls;
