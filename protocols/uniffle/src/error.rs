//! Errors of the Uniffle adapter, each mapped to the status code a client
//! understands. Only codes 0–10 are sent to any client, since 0.9 clients
//! cannot parse 11–14; the one exception, [`UniffleError::Draining`], goes
//! only to drivers that sent their 0.10+ SparkConf.

use switchyard_storage::StorageError;

use crate::proto::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum UniffleError {
    /// The application is unknown or expired (`NO_REGISTER`: not retried).
    #[error("application {0} is not registered")]
    NoRegister(String),
    /// The shuffle or partition was never registered by this application.
    #[error("shuffle {shuffle} of {app} is not registered")]
    ShuffleNotRegistered { app: String, shuffle: i32 },
    /// Memory is full: the client backs off and retries.
    #[error("no buffer: {0}")]
    NoBuffer(String),
    /// The buffer ticket is unknown, used or expired: the client requires a
    /// new one and resends.
    #[error("can't find requireBufferId[{0}]")]
    UnknownTicket(i64),
    /// The shuffle died with its application (expired or unregistered): its
    /// data is gone, so the client must fail rather than read part of it.
    #[error("shuffle {shuffle} of {app} was removed with its application")]
    ShuffleRemoved { app: String, shuffle: i32 },
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The application or its user holds its quota (`storage.apps.max_*`):
    /// ACCESS_DENIED, which the client does not retry.
    #[error("{0}")]
    Quota(String),
    /// This server is decommissioning and the application's writers
    /// reassign refused partitions (`spark.rss.client.reassign.enabled`):
    /// INTERNAL_NOT_RETRY_ERROR, on which the 0.10 client asks its driver
    /// for another server at once instead of retrying here. Only such
    /// applications get it; 0.10 is the first client to parse code 14.
    #[error(
        "this shuffle server is decommissioning and takes no new blocks; reassign the partition"
    )]
    Draining,
    #[error(transparent)]
    Storage(StorageError),
}

impl From<StorageError> for UniffleError {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::NoBuffer { .. } | StorageError::OverShare { .. } => {
                UniffleError::NoBuffer(e.to_string())
            }
            StorageError::UnknownApp(app) => UniffleError::NoRegister(app),
            StorageError::ShuffleRemoved { app, shuffle } => {
                UniffleError::ShuffleRemoved { app, shuffle }
            }
            e @ StorageError::QuotaExceeded { .. } => UniffleError::Quota(e.to_string()),
            other => UniffleError::Storage(other),
        }
    }
}

impl UniffleError {
    pub fn status(&self) -> StatusCode {
        match self {
            // NO_REGISTER is not retried by the client: it fails the task.
            UniffleError::NoRegister(_)
            | UniffleError::ShuffleNotRegistered { .. }
            | UniffleError::ShuffleRemoved { .. } => StatusCode::NoRegister,
            UniffleError::NoBuffer(_) => StatusCode::NoBuffer,
            UniffleError::InvalidRequest(_) => StatusCode::InvalidRequest,
            UniffleError::Quota(_) => StatusCode::AccessDenied,
            UniffleError::Draining => StatusCode::InternalNotRetryError,
            UniffleError::UnknownTicket(_) | UniffleError::Storage(_) => StatusCode::InternalError,
        }
    }
}

pub type Result<T, E = UniffleError> = std::result::Result<T, E>;
