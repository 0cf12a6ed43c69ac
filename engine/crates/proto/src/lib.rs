//! levee.v1 protocol: generated tonic/prost code for the `KV`, `Node` and `Admin` services.

#![allow(clippy::all, missing_docs)]

pub mod v1 {
    tonic::include_proto!("levee.v1");

    /// Encoded file descriptor set, for gRPC server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("levee_v1_descriptor");
}
