//! Engine errors → gRPC status codes, with the engine's human message.

use levee_store::Error;
use tonic::{Code, Status};

/// Stable label for metrics and logs.
pub fn label(e: &Error) -> &'static str {
    match e {
        Error::InvalidKey(_) => "invalid_key",
        Error::InvalidBucket(_) => "invalid_bucket",
        Error::InvalidIndex(_) => "invalid_index",
        Error::InvalidQuery(_) => "invalid_query",
        Error::ValueTooLarge { .. } => "value_too_large",
        Error::MetadataTooLarge { .. } => "metadata_too_large",
        Error::InvalidConfig(_) => "invalid_config",
        Error::Closed => "closed",
        Error::Locked { .. } => "locked",
        Error::Io { .. } => "io",
        Error::Corruption(_) => "corruption",
        Error::Poisoned(_) => "poisoned",
        Error::SnapshotExpired { .. } => "snapshot_expired",
        Error::Busy(_) => "busy",
        _ => "other",
    }
}

pub fn to_status(e: Error) -> Status {
    let code = match &e {
        Error::InvalidKey(_)
        | Error::InvalidBucket(_)
        | Error::InvalidIndex(_)
        | Error::InvalidQuery(_)
        | Error::InvalidConfig(_) => Code::InvalidArgument,
        Error::ValueTooLarge { .. } | Error::MetadataTooLarge { .. } => Code::ResourceExhausted,
        Error::Closed | Error::Poisoned(_) | Error::Locked { .. } => Code::Unavailable,
        Error::Busy(_) => Code::Aborted,
        Error::SnapshotExpired { .. } => Code::DeadlineExceeded,
        Error::Corruption(_) => Code::DataLoss,
        Error::Io { .. } => Code::Internal,
        _ => Code::Internal,
    };
    Status::new(code, e.to_string())
}
