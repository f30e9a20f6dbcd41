//! Codec tests: byte layouts written out by hand from the upstream Java encoders, round
//! trips for every message type, streaming, and malformed input.

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use switchyard_frame::WireError;
use tokio_util::codec::{Decoder, Encoder};

use super::*;
use crate::bitmap::IdBitmap;
use crate::proto::StatusCode;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn encode(message: &Message) -> BytesMut {
    let mut dst = BytesMut::new();
    UniffleCodec::default().encode(message, &mut dst).unwrap();
    dst
}

fn decode_one(bytes: &[u8]) -> Result<Option<Message>, CodecError> {
    let mut src = BytesMut::from(bytes);
    let out = UniffleCodec::default().decode(&mut src);
    if let Ok(Some(_)) = out {
        assert!(src.is_empty(), "frame not fully consumed");
    }
    out
}

/// A frame assembled field by field, in the order of the Java `encode` methods.
fn java_frame(type_id: u8, fields: &[u8], body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.put_i32(fields.len() as i32);
    f.put_u8(type_id);
    f.put_i32(body.len() as i32);
    f.extend_from_slice(fields);
    f.extend_from_slice(body);
    f
}

fn java_string(out: &mut Vec<u8>, s: &str) {
    out.put_i32(s.len() as i32);
    out.extend_from_slice(s.as_bytes());
}

fn block(block_id: i64, data: &'static [u8]) -> ShuffleBlock {
    ShuffleBlock {
        partition_id: 2,
        block_id,
        length: data.len() as i32,
        shuffle_id: 1,
        crc: 0xDEAD_BEEF,
        task_attempt_id: 5,
        data: Bytes::from_static(data),
        replicas: vec![ReplicaServer {
            id: "127.0.0.1-19999-21000".into(),
            host: "127.0.0.1".into(),
            grpc_port: 19999,
            netty_port: 21000,
        }],
        uncompress_length: 100,
        free_memory: 0,
    }
}

fn local_data_request() -> GetLocalShuffleDataRequest {
    GetLocalShuffleDataRequest {
        request_id: 11,
        app_id: "app_1".into(),
        shuffle_id: 1,
        partition_id: 3,
        partition_num_per_range: 1,
        partition_num: 10,
        offset: 4096,
        length: 1024,
        timestamp: 1_700_000_000_000,
    }
}

fn memory_response(request_id: i64) -> GetMemoryShuffleDataResponse {
    GetMemoryShuffleDataResponse {
        head: ResponseHead::new(request_id, StatusCode::Success, None),
        segments: vec![
            BufferSegment {
                block_id: 1,
                offset: 0,
                length: 3,
                uncompress_length: 9,
                crc: 1,
                task_attempt_id: 2,
            },
            BufferSegment {
                block_id: 2,
                offset: 3,
                length: 2,
                uncompress_length: 4,
                crc: 3,
                task_attempt_id: 4,
            },
        ],
        data: Bytes::from_static(b"abcde"),
    }
}

/// One message of every type the codec carries.
fn every_message() -> Vec<Message> {
    let index_response = GetLocalShuffleIndexResponse {
        head: ResponseHead::new(12, StatusCode::Success, "OK".to_string()),
        data_file_len: 80,
        index_data: Bytes::from(vec![7u8; 80]),
    };
    vec![
        Message::RpcResponse(ResponseHead::new(
            7,
            StatusCode::NoBuffer,
            "busy".to_string(),
        )),
        Message::SendShuffleData(SendShuffleDataRequest {
            request_id: 1,
            app_id: "local-1712345678901_1712345679000".into(),
            shuffle_id: 1,
            require_buffer_id: 42,
            partitions: vec![
                PartitionBlocks {
                    partition_id: 2,
                    blocks: vec![block(100, b"hello"), block(101, b"")],
                },
                PartitionBlocks {
                    partition_id: 3,
                    blocks: vec![],
                },
            ],
            timestamp: 1_700_000_000_000,
        }),
        Message::GetLocalShuffleIndex(GetLocalShuffleIndexRequest {
            request_id: 2,
            app_id: "app_1".into(),
            shuffle_id: 1,
            partition_id: 3,
            partition_num_per_range: 1,
            partition_num: 10,
        }),
        Message::GetLocalShuffleData(local_data_request()),
        Message::GetMemoryShuffleData(GetMemoryShuffleDataRequest {
            request_id: 3,
            app_id: "app_1".into(),
            shuffle_id: 1,
            partition_id: 3,
            last_block_id: -1,
            read_buffer_size: 14 << 20,
            timestamp: 5,
            expected_task_ids_bitmap: Some(Bytes::from(
                [0u64, 4, 9]
                    .into_iter()
                    .collect::<IdBitmap>()
                    .to_java_bytes(),
            )),
        }),
        Message::GetLocalShuffleIndexResponse(index_response.clone()),
        Message::GetLocalShuffleDataResponse(GetLocalShuffleDataResponse {
            head: ResponseHead::new(13, StatusCode::Success, None),
            data: Bytes::from_static(b"0123456789"),
        }),
        Message::GetMemoryShuffleDataResponse(memory_response(14)),
        Message::GetSortedShuffleData(GetSortedShuffleDataRequest {
            request_id: 15,
            app_id: "app_1".into(),
            shuffle_id: 1,
            partition_id: 3,
            merged_block_id: 77,
            length: 0,
            timestamp: 6,
        }),
        Message::GetSortedShuffleDataResponse(GetSortedShuffleDataResponse {
            head: ResponseHead::new(15, StatusCode::Success, String::new()),
            next_block_id: 78,
            merge_state: 2,
            data: Bytes::from_static(b"sorted"),
        }),
        Message::GetLocalShuffleIndexV2Response(GetLocalShuffleIndexV2Response {
            base: index_response,
            storage_ids: vec![0, 1, 3],
        }),
        Message::GetLocalShuffleDataV2(GetLocalShuffleDataV2Request {
            base: local_data_request(),
            storage_id: 1,
        }),
        Message::GetLocalShuffleDataV3(GetLocalShuffleDataV3Request {
            base: local_data_request(),
            storage_id: 2,
            next_read_segments: vec![
                ReadSegment {
                    offset: 5120,
                    length: 1024,
                },
                ReadSegment {
                    offset: 6144,
                    length: 10,
                },
            ],
            task_attempt_id: 99,
        }),
        Message::GetMemoryShuffleDataV2Response(GetMemoryShuffleDataV2Response {
            base: memory_response(16),
            is_end: true,
        }),
    ]
}

#[test]
fn rpc_response_matches_documented_bytes() {
    let message = Message::RpcResponse(ResponseHead::new(7, StatusCode::Success, "OK".to_string()));
    let expected = hex("00000012 00 00000000 0000000000000007 00000000 00000002 4f4b");
    assert_eq!(&encode(&message)[..], &expected[..]);
    assert_eq!(decode_one(&expected).unwrap(), Some(message));
}

#[test]
fn send_request_matches_java_layout_and_slices_block_data() {
    // Field order of SendShuffleDataRequest.encode + Encoders.encodeShuffleBlockInfo.
    let mut f = Vec::new();
    f.put_i64(1); // requestId
    java_string(&mut f, "app");
    f.put_i32(1); // shuffleId
    f.put_i64(42); // requireBufferId
    f.put_i32(1); // partitions
    f.put_i32(2); // partitionId
    f.put_i32(1); // blocks
    f.put_i32(2); // block partitionId
    f.put_i64(100); // blockId
    f.put_i32(5); // length
    f.put_i32(1); // shuffleId
    f.put_i64(0xDEAD_BEEF); // crc
    f.put_i64(5); // taskAttemptId
    f.put_i32(5); // data length
    f.extend_from_slice(b"hello");
    f.put_i32(1); // replica count
    java_string(&mut f, "127.0.0.1-19999-21000");
    java_string(&mut f, "127.0.0.1");
    f.put_i32(19999);
    f.put_i32(21000);
    f.put_i32(100); // uncompressLength
    f.put_i64(0); // freeMemory
    f.put_i64(1_700_000_000_000); // timestamp
    let frame = java_frame(3, &f, &[]);

    let expected = Message::SendShuffleData(SendShuffleDataRequest {
        request_id: 1,
        app_id: "app".into(),
        shuffle_id: 1,
        require_buffer_id: 42,
        partitions: vec![PartitionBlocks {
            partition_id: 2,
            blocks: vec![block(100, b"hello")],
        }],
        timestamp: 1_700_000_000_000,
    });
    assert_eq!(&encode(&expected)[..], &frame[..]);

    let mut src = BytesMut::from(&frame[..]);
    let range = src.as_ptr() as usize..src.as_ptr() as usize + src.len();
    let decoded = UniffleCodec::default().decode(&mut src).unwrap().unwrap();
    assert_eq!(decoded, expected);
    let Message::SendShuffleData(request) = decoded else {
        unreachable!()
    };
    // 5 bytes of a 120-byte frame: copied out, so a stored block never
    // pins the rest of its frame.
    let data = &request.partitions[0].blocks[0].data;
    assert!(
        !range.contains(&(data.as_ptr() as usize)),
        "a small block was kept as a slice of its frame"
    );

    // A block that is most of its frame is sliced, not copied.
    let big = Message::SendShuffleData(SendShuffleDataRequest {
        partitions: vec![PartitionBlocks {
            partition_id: 2,
            blocks: vec![block(100, &[9u8; 4096])],
        }],
        ..match expected {
            Message::SendShuffleData(r) => r,
            _ => unreachable!(),
        }
    });
    let mut src = BytesMut::from(&encode(&big)[..]);
    let range = src.as_ptr() as usize..src.as_ptr() as usize + src.len();
    let Some(Message::SendShuffleData(request)) = UniffleCodec::default().decode(&mut src).unwrap()
    else {
        panic!("not a send request")
    };
    let data = &request.partitions[0].blocks[0].data;
    assert_eq!(&data[..], &[9u8; 4096][..]);
    assert!(
        range.contains(&(data.as_ptr() as usize)),
        "block data was copied instead of sliced from the frame"
    );
}

#[test]
fn read_messages_match_java_layout() {
    // GetLocalShuffleIndexRequest.encode
    let mut f = Vec::new();
    f.put_i64(2);
    java_string(&mut f, "app_1");
    for v in [1, 3, 1, 10] {
        f.put_i32(v);
    }
    assert_eq!(
        &encode(&every_message()[2])[..],
        &java_frame(4, &f, &[])[..]
    );

    // GetLocalShuffleDataV3Request.encode: type-5 fields, storageId, segments, taskAttemptId.
    let mut f = Vec::new();
    f.put_i64(11);
    java_string(&mut f, "app_1");
    for v in [1, 3, 1, 10] {
        f.put_i32(v);
    }
    f.put_i64(4096);
    f.put_i32(1024);
    f.put_i64(1_700_000_000_000);
    f.put_i32(2);
    f.put_i32(2);
    for v in [5120, 1024, 6144, 10] {
        f.put_i64(v);
    }
    f.put_i64(99);
    assert_eq!(
        &encode(&every_message()[12])[..],
        &java_frame(25, &f, &[])[..]
    );

    // GetMemoryShuffleDataResponse: RpcResponse fields, segments (36 bytes each), body.
    let mut f = Vec::new();
    f.put_i64(14);
    f.put_i32(0);
    f.put_i32(-1); // null retMessage
    f.put_i32(2);
    for (id, off, len, ulen, crc, task) in [(1i64, 0, 3, 9, 1i64, 2i64), (2, 3, 2, 4, 3, 4)] {
        f.put_i64(id);
        f.put_i32(off);
        f.put_i32(len);
        f.put_i32(ulen);
        f.put_i64(crc);
        f.put_i64(task);
    }
    assert_eq!(
        &encode(&every_message()[7])[..],
        &java_frame(16, &f, b"abcde")[..]
    );

    // GetLocalShuffleIndexV2Response: type-14 fields, then the storage ids; index as body.
    let mut f = Vec::new();
    f.put_i64(12);
    f.put_i32(0);
    java_string(&mut f, "OK");
    f.put_i64(80);
    f.put_i32(3);
    for v in [0, 1, 3] {
        f.put_i32(v);
    }
    assert_eq!(
        &encode(&every_message()[10])[..],
        &java_frame(23, &f, &[7u8; 80])[..]
    );
}

#[test]
fn every_type_round_trips() {
    for message in every_message() {
        let bytes = encode(&message);
        assert_eq!(bytes[4], message.message_type().id());
        let decoded = decode_one(&bytes)
            .unwrap_or_else(|e| panic!("{}: {e}", message.message_type()))
            .unwrap();
        assert_eq!(decoded, message);
        assert_eq!(decoded.request_id(), message.request_id());
    }
}

#[test]
fn frame_parts_match_encoder_output() {
    for message in every_message() {
        let (head, body) = message.frame_parts().unwrap();
        let mut joined = head.to_vec();
        joined.extend_from_slice(&body);
        assert_eq!(&joined[..], &encode(&message)[..]);
    }
}

#[test]
fn decodes_a_stream_fed_byte_by_byte() {
    let messages = every_message();
    let stream: Vec<u8> = messages.iter().flat_map(|m| encode(m).to_vec()).collect();
    let mut codec = UniffleCodec::default();
    let mut src = BytesMut::new();
    let mut out = Vec::new();
    for byte in stream {
        src.put_u8(byte);
        while let Some(message) = codec.decode(&mut src).unwrap() {
            out.push(message);
        }
    }
    assert_eq!(out, messages);
    assert!(src.is_empty());
}

#[tokio::test]
async fn works_with_framed_read() {
    use futures::StreamExt;
    let messages = every_message();
    let stream: Vec<u8> = messages.iter().flat_map(|m| encode(m).to_vec()).collect();
    let mut framed = tokio_util::codec::FramedRead::new(&stream[..], UniffleCodec::default());
    let mut out = Vec::new();
    while let Some(message) = framed.next().await {
        out.push(message.unwrap());
    }
    assert_eq!(out, messages);
}

#[test]
fn every_prefix_is_incomplete_not_an_error() {
    for message in every_message() {
        let bytes = encode(&message);
        for cut in 0..bytes.len() {
            assert!(
                matches!(decode_one(&bytes[..cut]), Ok(None)),
                "{} cut at {cut}",
                message.message_type()
            );
        }
    }
}

#[test]
fn memory_request_exposes_the_task_filter() {
    let Message::GetMemoryShuffleData(mut request) = every_message().swap_remove(4) else {
        unreachable!()
    };
    let filter = request.expected_task_ids().unwrap().unwrap();
    assert_eq!(filter.iter().collect::<Vec<_>>(), vec![0, 4, 9]);
    request.expected_task_ids_bitmap = None;
    assert!(request.expected_task_ids().unwrap().is_none());
    // -1 on the wire for "no filter".
    let bytes = encode(&Message::GetMemoryShuffleData(request));
    assert_eq!(&bytes[bytes.len() - 4..], &(-1i32).to_be_bytes());
}

#[test]
fn status_codes_survive_unknown_values() {
    let head = ResponseHead {
        request_id: 1,
        status: 13,
        ret_message: None,
    };
    assert_eq!(head.status_code(), Some(StatusCode::AppNotFound));
    let unknown = ResponseHead { status: 99, ..head };
    assert_eq!(unknown.status_code(), None);
    let message = Message::RpcResponse(unknown);
    assert_eq!(decode_one(&encode(&message)).unwrap(), Some(message));
}

// ---------------------------------------------------------------------------------------
// Malformed input
// ---------------------------------------------------------------------------------------

fn header(message_len: i32, type_id: u8, body_len: i32) -> Vec<u8> {
    let mut h = Vec::new();
    h.put_i32(message_len);
    h.put_u8(type_id);
    h.put_i32(body_len);
    h
}

#[test]
fn bad_headers_are_rejected_before_buffering() {
    assert!(matches!(
        decode_one(&header(-1, 3, 0)),
        Err(CodecError::Wire(WireError::NegativeLength {
            field: "message length",
            value: -1
        }))
    ));
    assert!(matches!(
        decode_one(&header(10, 16, i32::MIN)),
        Err(CodecError::Wire(WireError::NegativeLength {
            field: "body length",
            ..
        }))
    ));
    assert!(matches!(
        decode_one(&header(0, 0, 0)),
        Err(CodecError::Wire(WireError::EmptyFrame))
    ));
    assert!(matches!(
        decode_one(&header(10, 99, 0)),
        Err(CodecError::Wire(WireError::UnknownMessageType(99)))
    ));
    assert!(matches!(
        decode_one(&header(10, 255, 0)),
        Err(CodecError::Wire(WireError::UnknownMessageType(255)))
    ));
    assert!(matches!(
        decode_one(&header(10, 12, 0)),
        Err(CodecError::UnsupportedMessageType {
            id: 12,
            name: "REQUIRE_BUFFER_REQUEST"
        })
    ));
    // i32::MAX + i32::MAX must not overflow and must hit the limit.
    assert!(matches!(
        decode_one(&header(i32::MAX, 3, i32::MAX)),
        Err(CodecError::Wire(WireError::FrameTooLarge { .. }))
    ));
}

#[test]
fn max_frame_size_is_enforced() {
    let bytes = encode(&every_message()[6]); // 15: RpcResponse fields + 10-byte body
    let frame_len = bytes.len() - HEADER_LEN;
    let mut exact = UniffleCodec::new(frame_len);
    assert!(exact
        .decode(&mut BytesMut::from(&bytes[..]))
        .unwrap()
        .is_some());
    let mut small = UniffleCodec::new(frame_len - 1);
    assert_eq!(small.max_frame_size(), frame_len - 1);
    // Rejected from the header alone, before the frame arrives.
    assert!(matches!(
        small.decode(&mut BytesMut::from(&bytes[..HEADER_LEN])),
        Err(CodecError::Wire(WireError::FrameTooLarge { size, max })) if size == frame_len as u64 && max == frame_len - 1
    ));
}

#[test]
fn message_length_must_match_the_fields() {
    // An index request whose message part is 2 bytes short of its fields.
    let full = encode(&every_message()[2]);
    let fields = &full[HEADER_LEN..full.len() - 2];
    assert!(matches!(
        decode_one(&java_frame(4, fields, &[])),
        Err(CodecError::Wire(WireError::Truncated {
            field: "partitionNum"
        }))
    ));
    // ... or 3 bytes too long.
    let mut long = full[HEADER_LEN..].to_vec();
    long.extend_from_slice(&[0, 0, 0]);
    assert!(matches!(
        decode_one(&java_frame(4, &long, &[])),
        Err(CodecError::TrailingBytes { unread: 3, .. })
    ));
    // A request with a body.
    assert!(matches!(
        decode_one(&java_frame(4, &full[HEADER_LEN..], b"xx")),
        Err(CodecError::UnexpectedBody { len: 2, .. })
    ));
}

#[test]
fn bad_fields_are_typed_errors() {
    let mut f = Vec::new();
    f.put_i64(1);
    f.put_i32(-1); // null appId
    f.extend_from_slice(&[0; 16]);
    assert!(matches!(
        decode_one(&java_frame(4, &f, &[])),
        Err(CodecError::Wire(WireError::NullString { field: "appId" }))
    ));

    let mut f = Vec::new();
    f.put_i64(1);
    f.put_i32(2);
    f.extend_from_slice(&[0xff, 0xfe]); // not UTF-8
    f.extend_from_slice(&[0; 16]);
    assert!(matches!(
        decode_one(&java_frame(4, &f, &[])),
        Err(CodecError::Wire(WireError::InvalidUtf8 { field: "appId" }))
    ));

    let mut f = Vec::new();
    f.put_i64(1);
    f.put_i32(-2); // only -1 means null
    assert!(matches!(
        decode_one(&java_frame(4, &f, &[])),
        Err(CodecError::Wire(WireError::NegativeLength {
            field: "appId",
            value: -2
        }))
    ));

    // A send request announcing 2^31-1 partitions in a few bytes: refused, not allocated.
    let mut f = Vec::new();
    f.put_i64(1);
    java_string(&mut f, "a");
    f.put_i32(1);
    f.put_i64(1);
    f.put_i32(i32::MAX);
    f.put_i64(0);
    assert!(matches!(
        decode_one(&java_frame(3, &f, &[])),
        Err(CodecError::Wire(WireError::CountTooLarge {
            field: "partition",
            ..
        }))
    ));

    // A negative block count.
    let mut f = Vec::new();
    f.put_i64(1);
    java_string(&mut f, "a");
    f.put_i32(1);
    f.put_i64(1);
    f.put_i32(1);
    f.put_i32(0);
    f.put_i32(-5);
    assert!(matches!(
        decode_one(&java_frame(3, &f, &[])),
        Err(CodecError::Wire(WireError::NegativeLength {
            field: "block",
            value: -5
        }))
    ));

    // Block data length beyond the frame.
    let good = encode(&every_message()[1]);
    let mut fields = good[HEADER_LEN..].to_vec();
    let data_len_at = fields
        .windows(9)
        .position(|w| w == [0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o'])
        .unwrap();
    fields[data_len_at..data_len_at + 4].copy_from_slice(&1000i32.to_be_bytes());
    assert!(matches!(
        decode_one(&java_frame(3, &fields, &[])),
        Err(CodecError::Wire(WireError::Truncated {
            field: "block data"
        }))
    ));
}

#[test]
fn a_bad_frame_does_not_desynchronize_the_stream() {
    // Field errors are reported after the frame is consumed: the next frame still decodes.
    let mut f = Vec::new();
    f.put_i64(1);
    f.put_i32(-1);
    f.extend_from_slice(&[0; 16]);
    let mut src = BytesMut::from(&java_frame(4, &f, &[])[..]);
    let next = every_message().swap_remove(0);
    src.extend_from_slice(&encode(&next));
    let mut codec = UniffleCodec::default();
    assert!(codec.decode(&mut src).is_err());
    assert_eq!(codec.decode(&mut src).unwrap(), Some(next));
}

/// Decodes `frame` as the server reads a frame split: the message part walked
/// by its splitter, fields in one buffer, each array in its own.
fn decode_split(frame: &[u8]) -> Result<Message, CodecError> {
    use switchyard_frame::{FieldReader, FrameMessage, Next};
    let kind = MessageType::from_id(frame[4])?;
    let message_len = i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    let part = &frame[HEADER_LEN..HEADER_LEN + message_len];
    let mut splitter = Message::splitter(kind).expect("a splitter for this kind");
    let (mut fields, mut arrays, mut pos) = (Vec::new(), Vec::new(), 0);
    loop {
        let left = part.len() - pos;
        match splitter.next(&fields) {
            Next::Fields(upto) if upto > fields.len() && upto - fields.len() <= left => {
                let n = upto - fields.len();
                fields.extend_from_slice(&part[pos..pos + n]);
                pos += n;
            }
            Next::Array(n) if n <= left => {
                arrays.push(Bytes::copy_from_slice(&part[pos..pos + n]));
                pos += n;
            }
            _ => break,
        }
    }
    fields.extend_from_slice(&part[pos..]);
    let body = Bytes::copy_from_slice(&frame[HEADER_LEN + message_len..]);
    Message::decode_frame(kind, FieldReader::split(fields.into(), arrays), body)
}

#[test]
fn only_send_requests_are_read_split() {
    use switchyard_frame::FrameMessage;
    for kind in every_message().iter().map(Message::message_type) {
        let split = Message::splitter(kind).is_some();
        assert_eq!(
            split,
            kind == MessageType::SendShuffleDataRequest,
            "{kind:?}"
        );
    }
}

proptest! {
    #[test]
    fn send_requests_decode_the_same_split_or_whole(
        app_id in "[a-z0-9_-]{0,20}",
        partitions in proptest::collection::vec(
            proptest::collection::vec(
                (
                    proptest::collection::vec(any::<u8>(), 0..300),
                    proptest::collection::vec(("[a-z0-9.-]{0,12}", "[a-z0-9.]{0,12}"), 0..3),
                ),
                0..4,
            ),
            0..4,
        ),
    ) {
        let message = Message::SendShuffleData(SendShuffleDataRequest {
            request_id: 11,
            app_id,
            shuffle_id: 3,
            require_buffer_id: 9,
            partitions: partitions
                .into_iter()
                .enumerate()
                .map(|(p, blocks)| PartitionBlocks {
                    partition_id: p as i32,
                    blocks: blocks
                        .into_iter()
                        .enumerate()
                        .map(|(b, (data, replicas))| ShuffleBlock {
                            partition_id: p as i32,
                            block_id: b as i64,
                            length: data.len() as i32,
                            shuffle_id: 3,
                            crc: 7,
                            task_attempt_id: 1,
                            data: Bytes::from(data),
                            replicas: replicas
                                .into_iter()
                                .map(|(id, host)| ReplicaServer {
                                    id,
                                    host,
                                    grpc_port: 1,
                                    netty_port: 2,
                                })
                                .collect(),
                            uncompress_length: 5,
                            free_memory: -1,
                        })
                        .collect(),
                })
                .collect(),
            timestamp: 42,
        });
        let frame = encode(&message);
        let Message::SendShuffleData(request) = &message else { unreachable!() };
        prop_assert_eq!(request.encoded_len(), frame.len() - HEADER_LEN);
        prop_assert_eq!(decode_split(&frame).unwrap(), message);
    }

    #[test]
    fn split_send_requests_with_random_fields_never_panic(
        fields in proptest::collection::vec(any::<u8>(), 1..400),
    ) {
        let _ = decode_split(&java_frame(3, &fields, &[]));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut codec = UniffleCodec::new(1 << 16);
        let mut src = BytesMut::from(&bytes[..]);
        // Decode until the codec asks for more bytes or reports an error.
        while let Ok(Some(_)) = codec.decode(&mut src) {}
    }

    #[test]
    fn valid_headers_with_random_fields_never_panic(
        type_id in prop::sample::select(vec![0u8, 3, 4, 5, 6, 14, 15, 16, 21, 22, 23, 24, 25, 26]),
        fields in proptest::collection::vec(any::<u8>(), 1..300),
        body in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let _ = decode_one(&java_frame(type_id, &fields, &body));
    }

    #[test]
    fn send_requests_round_trip(
        request_id in any::<i64>(),
        app_id in "[a-zA-Z0-9_-]{0,40}",
        blocks in proptest::collection::vec(
            (any::<i64>(), proptest::collection::vec(any::<u8>(), 0..64), any::<i64>()),
            0..8,
        ),
    ) {
        let message = Message::SendShuffleData(SendShuffleDataRequest {
            request_id,
            app_id,
            shuffle_id: 3,
            require_buffer_id: 9,
            partitions: vec![PartitionBlocks {
                partition_id: 1,
                blocks: blocks
                    .into_iter()
                    .map(|(block_id, data, crc)| ShuffleBlock {
                        partition_id: 1,
                        block_id,
                        length: data.len() as i32,
                        shuffle_id: 3,
                        crc,
                        task_attempt_id: 0,
                        data: Bytes::from(data),
                        replicas: vec![],
                        uncompress_length: 0,
                        free_memory: -1,
                    })
                    .collect(),
            }],
            timestamp: 0,
        });
        prop_assert_eq!(decode_one(&encode(&message)).unwrap(), Some(message));
    }
}
