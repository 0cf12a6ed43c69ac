//! Engine errors → gRPC status codes, with the engine's human message.

use levee_store::Error;
use tonic::{Code, Status};

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
