//! Generated gRPC types and tonic stubs for the Uniffle protocol (`proto/uniffle.proto`).
//!
//! Message and field names follow the upstream Java names converted to Rust case by prost,
//! e.g. `ShuffleRegisterRequest::app_id`. Servers are
//! `shuffle_server_server::ShuffleServerServer` and
//! `coordinator_server_server::CoordinatorServerServer`.
//!
//! Remember to raise tonic's 4 MiB decode limit (`max_decoding_message_size`) when serving:
//! `sendShuffleData` requests of 16 MiB and more are normal.

#![allow(missing_docs, clippy::all, clippy::pedantic)]

tonic::include_proto!("rss.common");

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use prost::Message;

    #[test]
    fn status_codes_keep_upstream_numbers() {
        let codes = [
            (StatusCode::Success, 0),
            (StatusCode::NoBuffer, 2),
            (StatusCode::NoRegister, 4),
            (StatusCode::InternalError, 6),
            (StatusCode::NoBufferForHugePartition, 10),
            (StatusCode::StageRetryIgnore, 11),
            (StatusCode::AppNotFound, 13),
            (StatusCode::InternalNotRetryError, 14),
            (StatusCode::HardSplitFromServer, 15),
        ];
        for (code, number) in codes {
            assert_eq!(code as i32, number, "{code:?}");
        }
    }

    #[test]
    fn service_names_form_the_upstream_paths() {
        use tonic::server::NamedService;
        type Shuffle = shuffle_server_server::ShuffleServerServer<()>;
        type Coordinator = coordinator_server_server::CoordinatorServerServer<()>;
        assert_eq!(<Shuffle as NamedService>::NAME, "rss.common.ShuffleServer");
        assert_eq!(
            <Coordinator as NamedService>::NAME,
            "rss.common.CoordinatorServer"
        );
    }

    #[test]
    fn register_request_uses_released_0_10_numbers() {
        // 0.10.0: mergeContext = 8 (LEN), properties = 9 (map entries, LEN).
        let request = ShuffleRegisterRequest {
            merge_context: Some(MergeContext::default()),
            properties: [("k".to_string(), "v".to_string())].into(),
            ..Default::default()
        };
        let bytes = request.encode_to_vec();
        assert_eq!(
            bytes,
            [0x42, 0x00, 0x4a, 0x06, 0x0a, 0x01, b'k', 0x12, 0x01, b'v']
        );
    }

    #[test]
    fn block_data_is_sliced_not_copied() {
        let request = SendShuffleDataRequest {
            app_id: "app".into(),
            shuffle_data: vec![ShuffleData {
                partition_id: 1,
                block: vec![ShuffleBlock {
                    block_id: 7,
                    length: 4,
                    data: Bytes::from_static(b"data"),
                    ..Default::default()
                }],
            }],
            ..Default::default()
        };
        let wire = Bytes::from(request.encode_to_vec());
        let decoded = SendShuffleDataRequest::decode(wire.clone()).unwrap();
        assert_eq!(decoded, request);
        let data = &decoded.shuffle_data[0].block[0].data;
        let range = wire.as_ptr() as usize..wire.as_ptr() as usize + wire.len();
        assert!(range.contains(&(data.as_ptr() as usize)));
    }

    #[test]
    fn memory_read_filter_keeps_presence() {
        // The Java client always sets field 7, as empty bytes when it has no filter.
        let with_empty = GetMemoryShuffleDataRequest {
            serialized_expected_task_ids_bitmap: Some(Bytes::new()),
            ..Default::default()
        };
        let decoded = GetMemoryShuffleDataRequest::decode(&with_empty.encode_to_vec()[..]).unwrap();
        assert_eq!(
            decoded.serialized_expected_task_ids_bitmap,
            Some(Bytes::new())
        );
    }
}
