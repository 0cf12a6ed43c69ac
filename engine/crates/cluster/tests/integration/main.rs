//! The cluster crate's integration tests, one module per area, built as one test binary
//! (each file as its own binary compiled the shared helpers and client code again and linked
//! again: that was most of `make test`'s Rust build time).

mod causality_properties;
mod claim_properties;
mod coverage_properties;
mod handoff_properties;
mod operator_members_fixture;
mod preflist_properties;
mod quorum_table;
