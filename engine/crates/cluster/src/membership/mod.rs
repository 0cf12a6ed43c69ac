//! The member list: its file format and versions ([`members`]), what a new list means for the
//! ring ([`change`]), and ring transitions as a node holds them ([`transition`]). Kubernetes is the consensus: the operator writes the list, every node
//! computes the same claim from it. Watching the file and the `SetMembers` RPC live in the node.

pub mod change;
pub mod members;
pub mod transition;
