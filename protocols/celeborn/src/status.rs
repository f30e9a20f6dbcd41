//! `StatusCode`: the one-byte statuses of Celeborn replies.
//!
//! Values and names from upstream `common/.../protocol/message/StatusCode.java`, v0.7.0.
//! The name matters on the wire too: push failures are sent as `RpcFailure` text starting
//! with the name, and the client classifies them with `startsWith(name)`.
//!
//! Version differences: 0.5.x knows only 0..=51 (`Utils.toStatusCode` maps anything else
//! to `null`), and names 4 `SHUFFLE_NOT_REGISTERED` and 23 `STAGE_END_TIME_OUT`; 0.6+
//! rejects unknown values with `IllegalArgumentException` (`StatusCode.fromValue`).

use std::fmt;

macro_rules! status_codes {
    ($($variant:ident = $value:literal => $name:literal,)*) => {
        /// A Celeborn status code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum StatusCode {
            $(
                #[doc = $name]
                $variant = $value,
            )*
        }

        impl StatusCode {
            /// The status for a wire value, if it is one.
            pub fn from_u8(value: u8) -> Option<Self> {
                match value {
                    $($value => Some(StatusCode::$variant),)*
                    _ => None,
                }
            }

            /// The upstream (0.6+) enum name.
            pub fn name(self) -> &'static str {
                match self {
                    $(StatusCode::$variant => $name,)*
                }
            }
        }
    };
}

status_codes! {
    Success = 0 => "SUCCESS",
    PartialSuccess = 1 => "PARTIAL_SUCCESS",
    RequestFailed = 2 => "REQUEST_FAILED",
    ShuffleAlreadyRegistered = 3 => "SHUFFLE_ALREADY_REGISTERED",
    ShuffleUnregistered = 4 => "SHUFFLE_UNREGISTERED",
    ReserveSlotsFailed = 5 => "RESERVE_SLOTS_FAILED",
    SlotNotAvailable = 6 => "SLOT_NOT_AVAILABLE",
    WorkerNotFound = 7 => "WORKER_NOT_FOUND",
    PartitionNotFound = 8 => "PARTITION_NOT_FOUND",
    ReplicaPartitionNotFound = 9 => "REPLICA_PARTITION_NOT_FOUND",
    DeleteFilesFailed = 10 => "DELETE_FILES_FAILED",
    PartitionExists = 11 => "PARTITION_EXISTS",
    ReviveFailed = 12 => "REVIVE_FAILED",
    ReplicateDataFailed = 13 => "REPLICATE_DATA_FAILED",
    NumMapperZero = 14 => "NUM_MAPPER_ZERO",
    MapEnded = 15 => "MAP_ENDED",
    StageEnded = 16 => "STAGE_ENDED",
    PushDataFailNonCriticalCausePrimary = 17 => "PUSH_DATA_FAIL_NON_CRITICAL_CAUSE_PRIMARY",
    PushDataWriteFailReplica = 18 => "PUSH_DATA_WRITE_FAIL_REPLICA",
    PushDataWriteFailPrimary = 19 => "PUSH_DATA_WRITE_FAIL_PRIMARY",
    PushDataFailPartitionNotFound = 20 => "PUSH_DATA_FAIL_PARTITION_NOT_FOUND",
    HardSplit = 21 => "HARD_SPLIT",
    SoftSplit = 22 => "SOFT_SPLIT",
    StageEndTimeout = 23 => "STAGE_END_TIMEOUT",
    ShuffleDataLost = 24 => "SHUFFLE_DATA_LOST",
    WorkerShutdown = 25 => "WORKER_SHUTDOWN",
    NoAvailableWorkingDir = 26 => "NO_AVAILABLE_WORKING_DIR",
    WorkerExcluded = 27 => "WORKER_EXCLUDED",
    WorkerUnknown = 28 => "WORKER_UNKNOWN",
    CommitFileException = 29 => "COMMIT_FILE_EXCEPTION",
    PushDataSuccessPrimaryCongested = 30 => "PUSH_DATA_SUCCESS_PRIMARY_CONGESTED",
    PushDataSuccessReplicaCongested = 31 => "PUSH_DATA_SUCCESS_REPLICA_CONGESTED",
    PushDataHandshakeFailReplica = 32 => "PUSH_DATA_HANDSHAKE_FAIL_REPLICA",
    PushDataHandshakeFailPrimary = 33 => "PUSH_DATA_HANDSHAKE_FAIL_PRIMARY",
    RegionStartFailReplica = 34 => "REGION_START_FAIL_REPLICA",
    RegionStartFailPrimary = 35 => "REGION_START_FAIL_PRIMARY",
    RegionFinishFailReplica = 36 => "REGION_FINISH_FAIL_REPLICA",
    RegionFinishFailPrimary = 37 => "REGION_FINISH_FAIL_PRIMARY",
    PushDataCreateConnectionFailPrimary = 38 => "PUSH_DATA_CREATE_CONNECTION_FAIL_PRIMARY",
    PushDataCreateConnectionFailReplica = 39 => "PUSH_DATA_CREATE_CONNECTION_FAIL_REPLICA",
    PushDataConnectionExceptionPrimary = 40 => "PUSH_DATA_CONNECTION_EXCEPTION_PRIMARY",
    PushDataConnectionExceptionReplica = 41 => "PUSH_DATA_CONNECTION_EXCEPTION_REPLICA",
    PushDataTimeoutPrimary = 42 => "PUSH_DATA_TIMEOUT_PRIMARY",
    PushDataTimeoutReplica = 43 => "PUSH_DATA_TIMEOUT_REPLICA",
    PushDataPrimaryWorkerExcluded = 44 => "PUSH_DATA_PRIMARY_WORKER_EXCLUDED",
    PushDataReplicaWorkerExcluded = 45 => "PUSH_DATA_REPLICA_WORKER_EXCLUDED",
    FetchDataTimeout = 46 => "FETCH_DATA_TIMEOUT",
    ReviveInitialized = 47 => "REVIVE_INITIALIZED",
    DestroySlotsMockFailure = 48 => "DESTROY_SLOTS_MOCK_FAILURE",
    CommitFilesMockFailure = 49 => "COMMIT_FILES_MOCK_FAILURE",
    PushDataFailNonCriticalCauseReplica = 50 => "PUSH_DATA_FAIL_NON_CRITICAL_CAUSE_REPLICA",
    OpenStreamFailed = 51 => "OPEN_STREAM_FAILED",
    SegmentStartFailReplica = 52 => "SEGMENT_START_FAIL_REPLICA",
    SegmentStartFailPrimary = 53 => "SEGMENT_START_FAIL_PRIMARY",
    NoSplit = 54 => "NO_SPLIT",
    WorkerUnresponsive = 55 => "WORKER_UNRESPONSIVE",
    ReadReducerPartitionEndFailed = 56 => "READ_REDUCER_PARTITION_END_FAILED",
}

impl StatusCode {
    /// The highest value a 0.5.x client understands.
    pub const MAX_KNOWN_TO_0_5: u8 = 51;

    /// The wire value.
    pub fn value(self) -> u8 {
        self as u8
    }

    /// The value as the `int32 status` of a protobuf reply.
    pub fn as_i32(self) -> i32 {
        i32::from(self as u8)
    }
}

impl fmt::Display for StatusCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_are_dense() {
        for v in 0..=56u8 {
            let code = StatusCode::from_u8(v).expect("0..=56 are all defined");
            assert_eq!(code.value(), v);
        }
        assert_eq!(StatusCode::from_u8(57), None);
    }

    #[test]
    fn reply_bytes_and_names_used_on_the_push_path() {
        assert_eq!(StatusCode::MapEnded.value(), 0x0F);
        assert_eq!(StatusCode::HardSplit.value(), 0x15);
        assert_eq!(StatusCode::SoftSplit.value(), 0x16);
        assert_eq!(StatusCode::PushDataSuccessPrimaryCongested.value(), 0x1E);
        assert_eq!(StatusCode::PushDataSuccessReplicaCongested.value(), 0x1F);
        assert_eq!(
            StatusCode::PushDataFailPartitionNotFound.name(),
            "PUSH_DATA_FAIL_PARTITION_NOT_FOUND"
        );
        assert_eq!(StatusCode::OpenStreamFailed.as_i32(), 51);
    }
}
