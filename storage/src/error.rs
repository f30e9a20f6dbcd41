//! Errors of the block API. Variants are what a protocol adapter needs to pick
//! its own status code: "no buffer" means back off and retry, "unknown" means the
//! caller is confused, I/O means the server is.

use std::io;

use crate::id::PartitionKey;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The memory budget cannot take the request now. Backpressure: retry later.
    #[error("no buffer: requested {requested} bytes, {available} available of {capacity}")]
    NoBuffer {
        requested: u64,
        available: u64,
        capacity: u64,
    },
    /// The memory budget is contended and the application holds more than
    /// its fair share of it (`memory.fair_share_from`). Backpressure: its
    /// flushes make room; others are admitted meanwhile.
    #[error("application {app} holds {holds} bytes of memory, past its fair share of {share} ({applications} applications hold memory); retry after its flushes")]
    OverShare {
        app: String,
        holds: u64,
        share: u64,
        applications: u64,
    },
    /// A single request larger than the whole memory budget can never succeed.
    #[error("request of {requested} bytes exceeds the memory budget of {capacity} bytes")]
    TooLarge { requested: u64, capacity: u64 },
    /// A quota (`storage.apps.max_*`) would be passed: the write or the new
    /// shuffle is refused, nothing else changes.
    #[error("{who} is at its quota of {limit} {what} ({used} held)")]
    QuotaExceeded {
        who: String,
        what: &'static str,
        limit: u64,
        used: u64,
    },
    #[error("unknown application {0}")]
    UnknownApp(String),
    #[error("unknown partition {0}")]
    UnknownPartition(PartitionKey),
    /// The shuffle was removed (unregistered or its application expired).
    #[error("shuffle {shuffle} of application {app} was removed")]
    ShuffleRemoved { app: String, shuffle: i32 },
    /// Appends to a sealed (committed) partition are refused.
    #[error("partition {0} is sealed")]
    Sealed(PartitionKey),
    /// A read outside what the partition holds.
    #[error("read of [{offset}, {offset}+{len}) is outside the {size} persisted bytes of {key}")]
    OutOfRange {
        key: PartitionKey,
        offset: u64,
        len: u64,
        size: u64,
    },
    #[error("chunk {index} out of range: the view has {count} chunks")]
    NoSuchChunk { index: usize, count: usize },
    #[error("i/o error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("cold tier error: {0}")]
    Cold(#[from] opendal::Error),
    /// A read failed in a way shared by several waiting readers.
    #[error("read failed: {0}")]
    ReadFailed(String),
    /// A commit or flush waited `commit_timeout` and its blocks are still
    /// not durable (no tier took them). They stay in memory, readable, and
    /// their flush goes on; only this wait ended.
    #[error("{what} is not durable after {timeout:?}: no disk or cold tier took its blocks")]
    FlushTimeout {
        what: String,
        timeout: std::time::Duration,
    },
    /// The cold store returned fewer bytes than the object was written with
    /// (a truncated or misbehaving store).
    #[error("cold object {path} returned {got} bytes at offset {offset}, expected {expected}")]
    ColdShortRead {
        path: String,
        offset: u64,
        expected: u64,
        got: u64,
    },
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The manifest (durable metadata) could not be read or written: the
    /// commit that needed it is not durable.
    #[error("manifest: {0}")]
    Manifest(String),
    #[error("the store is shutting down")]
    ShuttingDown,
}

impl StorageError {
    pub(crate) fn io(path: impl AsRef<std::path::Path>, source: io::Error) -> Self {
        StorageError::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }

    /// True for errors a client should answer by retrying later.
    pub fn is_backpressure(&self) -> bool {
        matches!(
            self,
            StorageError::NoBuffer { .. } | StorageError::OverShare { .. }
        )
    }
}

/// Errors from a cache loader are shared by every waiting reader; rebuild an
/// owned one for each.
pub(crate) fn clone_error(e: &StorageError) -> StorageError {
    match e {
        StorageError::Io { path, source } => StorageError::Io {
            path: path.clone(),
            source: io::Error::new(source.kind(), source.to_string()),
        },
        other => StorageError::ReadFailed(other.to_string()),
    }
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;
