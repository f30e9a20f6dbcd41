//! Generated protobuf types for the Celeborn messages (`proto/celeborn.proto`).
//!
//! Names follow upstream converted to Rust case by prost, e.g.
//! `PbRequestSlots::partition_id_list`; the nested `PbPartitionLocation.Mode` is
//! `pb_partition_location::Mode`. The enum carried in `TransportMessage` is [`MessageType`].

#![allow(missing_docs, clippy::all, clippy::pedantic)]

include!(concat!(env!("OUT_DIR"), "/celeborn.rs"));

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn message_type_numbers_match_upstream() {
        let numbers = [
            (MessageType::RequestSlots, 6),
            (MessageType::RequestSlotsResponse, 9),
            (MessageType::HeartbeatFromApplication, 20),
            (MessageType::CheckQuota, 23),
            (MessageType::ReserveSlots, 28),
            (MessageType::CommitFiles, 30),
            (MessageType::Destroy, 32),
            (MessageType::OneWayMessageResponse, 40),
            (MessageType::HeartbeatFromApplicationResponse, 49),
            (MessageType::OpenStream, 51),
            (MessageType::StreamHandler, 52),
            (MessageType::CheckWorkersAvailable, 53),
            (MessageType::PushDataHandShake, 56),
            (MessageType::BufferStreamEnd, 60),
            (MessageType::ChunkFetchRequest, 63),
            (MessageType::BatchOpenStream, 80),
            (MessageType::BatchOpenStreamResponse, 81),
            (MessageType::BatchUnregisterShuffleResponse, 88),
            (MessageType::PushMergedDataSplitPartitionInfo, 91),
            (MessageType::RegisterApplicationInfo, 96),
        ];
        for (ty, n) in numbers {
            assert_eq!(ty as i32, n, "{ty:?}");
        }
        // Numbers removed upstream must not decode.
        for gone in [21, 22, 27, 34, 38, 97] {
            assert!(MessageType::try_from(gone).is_err(), "{gone}");
        }
    }

    /// `PbChunkFetchRequest{streamChunkSlice{streamId=1000, len=Integer.MAX_VALUE}}` as
    /// Java protobuf writes it (bytes taken from the 0.5.4 client jar): defaults omitted,
    /// fields in number order.
    #[test]
    fn chunk_fetch_request_matches_java_bytes() {
        let pb = PbChunkFetchRequest {
            stream_chunk_slice: Some(PbStreamChunkSlice {
                stream_id: 1000,
                chunk_index: 0,
                offset: 0,
                len: i32::MAX,
            }),
        };
        assert_eq!(
            pb.encode_to_vec(),
            [0x0a, 0x09, 0x08, 0xe8, 0x07, 0x20, 0xff, 0xff, 0xff, 0xff, 0x07]
        );
    }

    #[test]
    fn commit_files_response_fields_encode_in_number_order() {
        // Upstream declares mapIdBitmap (10) before totalWritten (8); we declare in number
        // order so that prost writes 8, 9, 10 like Java does.
        let pb = PbCommitFilesResponse {
            total_written: 1,
            file_count: 2,
            map_id_bitmap: [("0-0".to_string(), bytes::Bytes::from_static(b"x"))].into(),
            ..Default::default()
        };
        let bytes = pb.encode_to_vec();
        assert_eq!(&bytes[..4], &[0x40, 0x01, 0x48, 0x02]);
        assert_eq!(bytes[4], 0x52);
    }
}
