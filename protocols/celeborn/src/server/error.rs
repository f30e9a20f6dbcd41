//! Why a Celeborn request failed, and what the client is told.
//!
//! Every handler of the Master and Worker ports returns a [`CelebornError`].
//! Each variant knows the [`StatusCode`] the client sees ([`CelebornError::status`])
//! and the text it gets ([`CelebornError::client_text`]); the edge of each port
//! turns it into the reply its protocol uses (an `RpcFailure`, a failed
//! `PbStreamHandlerOpt`, a `ChunkFetchFailure`) and counts it in
//! `switchyard_celeborn_errors_total{port,status}`.
//!
//! Push failures are the one place where clients read the text: they classify
//! an `RpcFailure` of a push with `startsWith(status name)`, so a Spark push
//! failure is sent as the bare status name.

use switchyard_storage::{PartitionKey, StorageError};

use super::worker::map_partition::MapPartitionError;
use crate::status::StatusCode;

/// The map-partition (Flink) request a [`CelebornError::MapPartition`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapStage {
    HandShake,
    RegionStart,
    RegionFinish,
    /// Hybrid shuffle's SEGMENT_START.
    SegmentStart,
    /// A record pushed into a region.
    Data,
}

#[derive(Debug, thiserror::Error)]
pub enum CelebornError {
    /// A frame body, RPC envelope or data-plane body that does not decode.
    #[error("cannot decode the request: {0}")]
    Undecodable(String),
    /// A control message of a known type whose protobuf does not decode.
    #[error("bad payload for message type {message_type}: {source}")]
    BadPayload {
        message_type: i32,
        #[source]
        source: crate::transport_message::PayloadError,
    },
    /// A message type this port or endpoint does not serve.
    #[error("{handler} does not handle message type {message_type}")]
    Unsupported {
        handler: &'static str,
        message_type: i32,
    },
    /// A pre-0.3 frame form this port does not serve.
    #[error("legacy request {0} is not supported")]
    UnsupportedLegacy(String),
    /// A reply type (Boolean) sent as a request.
    #[error("a Boolean is a reply, not a request")]
    NotARequest,
    #[error("no endpoint {0} here")]
    NoEndpoint(String),
    #[error("cannot encode the reply: {0}")]
    Encode(String),
    /// The task placing a shuffle's slots panicked or was cancelled.
    #[error("slot placement did not finish: {0}")]
    Placement(String),
    /// A shuffle key, file name or application id that does not parse.
    #[error("bad {what} {value:?}")]
    BadName { what: &'static str, value: String },
    /// A request whose fields contradict each other.
    #[error("invalid request: {0}")]
    Invalid(String),

    /// A push batch whose header or offsets are malformed.
    #[error("{code}: bad batch {0}", code = StatusCode::PushDataFailNonCriticalCausePrimary)]
    BadBatch(&'static str),
    /// The shuffle or location a push names is not reserved here, or is
    /// already committed.
    #[error("{code}: {0}", code = StatusCode::PushDataFailPartitionNotFound)]
    PartitionNotFound(String),
    /// The shuffle died with its application (expired, lost, unregistered):
    /// the client must fail or recompute, never read part of it.
    #[error("shuffle {shuffle} of application {app} was removed")]
    ShuffleRemoved { app: String, shuffle: i32 },
    /// The partition is sealed (committed): the client revives to a new epoch.
    #[error("partition {0} is sealed")]
    Sealed(PartitionKey),
    /// A map-partition request on a shuffle of reduce partitions.
    #[error("shuffle {0} has reduce partitions, not map partitions")]
    NotMapPartitions(String),
    /// A Flink handshake, region or record refused by the partition's state.
    #[error("{location}: {source}")]
    MapPartition {
        location: String,
        stage: MapStage,
        replica: bool,
        #[source]
        source: MapPartitionError,
    },
    /// Storing a pushed batch failed (not backpressure, not a seal).
    #[error("{code}: {source}", code = if *replica { StatusCode::PushDataWriteFailReplica } else { StatusCode::PushDataWriteFailPrimary })]
    Write {
        replica: bool,
        #[source]
        source: StorageError,
    },
    /// Forwarding a push to the replica's worker failed: the client revives
    /// (`code` is one of the `*_REPLICA` push statuses).
    #[error("{code}: replicating to {peer}: {detail}")]
    Replicate {
        code: StatusCode,
        peer: String,
        detail: String,
    },

    /// OpenStream of a map partition this worker does not hold.
    #[error("unknown map partition {0}")]
    UnknownMapPartition(String),
    /// OpenStream of a sub-partition range outside the map partition.
    #[error("sub-partition range [{start}, {end}] is outside [0, {count}) of {file}")]
    SubPartitionRange {
        start: i32,
        end: i32,
        count: i32,
        file: String,
    },
    /// OpenStream before the partition was committed.
    #[error("{0} is not committed yet")]
    NotCommitted(String),
    /// The store could not open a partition for reading.
    #[error("cannot open {file}: {source}")]
    Open {
        file: String,
        #[source]
        source: StorageError,
    },
    /// A chunk fetch of a stream that never existed or has ended.
    #[error("unknown stream {0}")]
    UnknownStream(i64),
    /// A chunk slice with a negative index or offset.
    #[error("negative {0}")]
    BadSlice(&'static str),
    /// A master of a fleet that started moments ago and has not heard from
    /// the workers yet: the driver moves to the next master.
    #[error("this master is warming up (waiting for worker heartbeats); try another master")]
    WarmingUp,
    /// The connection closed while the request waited: nothing to answer.
    #[error("the connection is closed")]
    Closed,

    /// Authentication is on and this connection has not authenticated
    /// (upstream's text, which clients log).
    #[error("The app is not registered and the connection is not authenticated")]
    NotAuthenticated,
    /// An authenticated connection named another application.
    #[error("Client for {bound} not authorized for application {app}.")]
    NotAuthorized { bound: String, app: String },
    /// A handshake step failed: an unexpected step or mechanism, a digest
    /// that does not verify, an application registered with another secret.
    #[error("{0}")]
    AuthFailed(String),
    /// Any other refusal of the store.
    #[error(transparent)]
    Storage(StorageError),
}

impl From<StorageError> for CelebornError {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::Sealed(key) => CelebornError::Sealed(key),
            StorageError::ShuffleRemoved { app, shuffle } => {
                CelebornError::ShuffleRemoved { app, shuffle }
            }
            StorageError::UnknownPartition(key) => {
                CelebornError::PartitionNotFound(key.to_string())
            }
            other => CelebornError::Storage(other),
        }
    }
}

impl CelebornError {
    /// The batch was not taken because its location split (sealed here, or
    /// refused by the replica): answered HARD_SPLIT, so the client revives.
    pub fn is_split(&self) -> bool {
        matches!(
            self,
            CelebornError::Sealed(_)
                | CelebornError::Replicate {
                    code: StatusCode::HardSplit,
                    ..
                }
        )
    }

    /// A store refusal of a pushed batch, as the push port answers it.
    pub fn write(e: StorageError, replica: bool) -> Self {
        match CelebornError::from(e) {
            CelebornError::Storage(source) => CelebornError::Write { replica, source },
            other => other,
        }
    }

    /// The store refused to open `file` for reading.
    pub fn open(file: String, e: StorageError) -> Self {
        match CelebornError::from(e) {
            CelebornError::Storage(source) => CelebornError::Open { file, source },
            other => other,
        }
    }

    /// The status the client sees: the first bytes of a push failure's text,
    /// the `status` of a failed stream handler, the label of the error count.
    pub fn status(&self) -> StatusCode {
        use CelebornError::*;
        match self {
            Undecodable(_)
            | BadPayload { .. }
            | Unsupported { .. }
            | UnsupportedLegacy(_)
            | NotARequest
            | NoEndpoint(_)
            | WarmingUp
            | Closed
            | Encode(_)
            | Placement(_)
            | BadName { .. }
            | Invalid(_)
            | NotMapPartitions(_)
            | UnknownStream(_)
            | BadSlice(_)
            | NotAuthenticated
            | NotAuthorized { .. }
            | AuthFailed(_)
            | Storage(_) => StatusCode::RequestFailed,
            BadBatch(_) => StatusCode::PushDataFailNonCriticalCausePrimary,
            PartitionNotFound(_) | ShuffleRemoved { .. } => {
                StatusCode::PushDataFailPartitionNotFound
            }
            Sealed(_) => StatusCode::HardSplit,
            MapPartition { stage, replica, .. } => match (stage, replica) {
                (MapStage::HandShake, false) => StatusCode::PushDataHandshakeFailPrimary,
                (MapStage::HandShake, true) => StatusCode::PushDataHandshakeFailReplica,
                (MapStage::RegionStart, false) => StatusCode::RegionStartFailPrimary,
                (MapStage::RegionStart, true) => StatusCode::RegionStartFailReplica,
                (MapStage::RegionFinish, false) => StatusCode::RegionFinishFailPrimary,
                (MapStage::RegionFinish, true) => StatusCode::RegionFinishFailReplica,
                (MapStage::SegmentStart, false) => StatusCode::SegmentStartFailPrimary,
                (MapStage::SegmentStart, true) => StatusCode::SegmentStartFailReplica,
                (MapStage::Data, false) => StatusCode::PushDataFailNonCriticalCausePrimary,
                (MapStage::Data, true) => StatusCode::PushDataFailNonCriticalCauseReplica,
            },
            Write { replica: false, .. } => StatusCode::PushDataWriteFailPrimary,
            Write { replica: true, .. } => StatusCode::PushDataWriteFailReplica,
            Replicate { code, .. } => *code,
            UnknownMapPartition(_) | SubPartitionRange { .. } | NotCommitted(_) | Open { .. } => {
                StatusCode::OpenStreamFailed
            }
        }
    }

    /// The text sent to the client: the message without the server's file
    /// paths or object keys.
    pub fn client_text(&self) -> String {
        match self {
            CelebornError::Write { source, .. } => {
                format!("{}: {}", self.status(), sanitized(source))
            }
            CelebornError::Open { file, source } => {
                format!("cannot open {file}: {}", sanitized(source))
            }
            CelebornError::Storage(source) => sanitized(source),
            other => other.to_string(),
        }
    }

    /// Counts the error by port and status.
    pub fn count(&self, port: &'static str) {
        metrics::counter!(
            "switchyard_celeborn_errors_total",
            "port" => port,
            "status" => self.status().name(),
        )
        .increment(1);
    }
}

/// A storage error as a client may read it: I/O and cold-tier errors say what
/// failed, not where on the server.
fn sanitized(e: &StorageError) -> String {
    match e {
        StorageError::Io { source, .. } => format!("i/o error: {}", source.kind()),
        StorageError::Cold(source) => format!("cold tier error: {}", source.kind()),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_errors_become_the_status_a_push_client_acts_on() {
        let key = PartitionKey::new("app", 1, 2);
        let sealed = CelebornError::write(StorageError::Sealed(key.clone()), false);
        assert_eq!(sealed.status(), StatusCode::HardSplit);
        let removed = CelebornError::write(
            StorageError::ShuffleRemoved {
                app: "app".into(),
                shuffle: 1,
            },
            false,
        );
        assert_eq!(removed.status(), StatusCode::PushDataFailPartitionNotFound);
        let full = || StorageError::TooLarge {
            requested: 10,
            capacity: 1,
        };
        assert_eq!(
            CelebornError::write(full(), false).status(),
            StatusCode::PushDataWriteFailPrimary
        );
        assert_eq!(
            CelebornError::write(full(), true).status(),
            StatusCode::PushDataWriteFailReplica
        );
        // Outside a push, the same refusal is a plain failed request.
        assert_eq!(
            CelebornError::from(full()).status(),
            StatusCode::RequestFailed
        );
        assert_eq!(
            CelebornError::open("0-0-0".into(), full()).status(),
            StatusCode::OpenStreamFailed
        );
    }

    #[test]
    fn push_texts_start_with_the_status_name() {
        // The client matches these prefixes (ShuffleClientImpl).
        let e = CelebornError::PartitionNotFound("app-1/0-0".into());
        assert!(e
            .client_text()
            .starts_with("PUSH_DATA_FAIL_PARTITION_NOT_FOUND"));
        let e = CelebornError::write(
            StorageError::TooLarge {
                requested: 10,
                capacity: 1,
            },
            true,
        );
        assert!(e
            .client_text()
            .starts_with("PUSH_DATA_WRITE_FAIL_REPLICA: "));
        assert!(CelebornError::BadBatch("offsets")
            .client_text()
            .starts_with("PUSH_DATA_FAIL_NON_CRITICAL_CAUSE_PRIMARY"));
    }

    #[test]
    fn client_text_holds_no_server_path() {
        let io = || StorageError::Io {
            path: "/data/disk1/app/0/0-0-p.data".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        for e in [
            CelebornError::write(io(), false),
            CelebornError::open("0-0-0".into(), io()),
            CelebornError::from(io()),
        ] {
            let text = e.client_text();
            assert!(!text.contains("/data/disk1"), "{text}");
            assert!(text.contains("permission denied"), "{text}");
            // The log line (Display) keeps the path for the operator.
            assert!(e.to_string().contains("/data/disk1"));
        }
    }

    #[test]
    fn map_partition_refusals_carry_their_stage() {
        let e = |stage, replica| CelebornError::MapPartition {
            location: "app-1/0-0".into(),
            stage,
            replica,
            source: MapPartitionError::NoHandshake,
        };
        assert_eq!(
            e(MapStage::HandShake, false).status(),
            StatusCode::PushDataHandshakeFailPrimary
        );
        assert_eq!(
            e(MapStage::RegionStart, true).status(),
            StatusCode::RegionStartFailReplica
        );
        assert_eq!(
            e(MapStage::RegionFinish, false).status(),
            StatusCode::RegionFinishFailPrimary
        );
        assert_eq!(
            e(MapStage::HandShake, false).client_text(),
            "app-1/0-0: no handshake yet for this map partition"
        );
    }
}
