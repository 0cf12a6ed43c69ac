//! The member list: its file format and versions ([`members`]), and what a new list means for the
//! ring ([`change`]). Kubernetes is the consensus: the operator writes the list, every node
//! computes the same claim from it. Watching the file and the `SetMembers` RPC live in the node.

pub mod change;
pub mod members;
