//! Codec tests.
//!
//! The hex fixtures were produced by the real upstream encoder: the 0.5.4
//! `celeborn-client-spark-3-shaded_2.12` jar, each message written through
//! `MessageEncoder.INSTANCE` in a Netty `EmbeddedChannel` (header from
//! `MessageEncoder.encode`, fields from each class's `encode(ByteBuf)`). The wire format of
//! these classes is identical in v0.5.1-v0.7.0 (only `toString` changed).

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use switchyard_frame::WireError;
use tokio_util::codec::{Decoder, Encoder};

use super::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn encode(message: &Message) -> Vec<u8> {
    let mut dst = BytesMut::new();
    CelebornCodec::default().encode(message, &mut dst).unwrap();
    dst.to_vec()
}

fn decode_one(bytes: &[u8]) -> Result<Option<Message>, FrameError> {
    let mut src = BytesMut::from(bytes);
    let out = CelebornCodec::default().decode(&mut src);
    if let Ok(Some(_)) = out {
        assert!(src.is_empty(), "frame not fully consumed");
    }
    out
}

/// A frame assembled by hand: header (`MessageEncoder.encode`) + fields + body.
fn frame(type_id: u8, fields: &[u8], body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.put_i32(fields.len() as i32);
    f.put_u8(type_id);
    f.put_i32(body.len() as i32);
    f.extend_from_slice(fields);
    f.extend_from_slice(body);
    f
}

fn s(v: &str) -> String {
    v.to_string()
}

/// A predicate on the error a malformed input must produce.
type ErrorCheck = fn(&FrameError) -> bool;

const BATCH: &[u8] = &[
    5, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef,
];

/// (name, bytes from the 0.5.4 `MessageEncoder`, the message they decode to).
fn java_fixtures() -> Vec<(&'static str, Vec<u8>, Message)> {
    vec![
        (
            "PushData",
            hex("0000001b0b00000014000000000000002a00000000076170702d312d3000000003332d30
                 05000000000000000100000004000000deadbeef"),
            Message::PushData(PushData {
                request_id: 42,
                mode: Mode::Primary,
                shuffle_key: s("app-1-0"),
                partition_unique_id: s("3-0"),
                body: Bytes::from_static(BATCH),
            }),
        ),
        (
            "RpcResponse (empty)",
            hex("0000000c0400000000000000000000002a00000000"),
            Message::RpcResponse {
                request_id: 42,
                body: Bytes::new(),
            },
        ),
        (
            "RpcResponse (HARD_SPLIT)",
            hex("0000000c0400000001000000000000002a0000000115"),
            Message::RpcResponse {
                request_id: 42,
                body: Bytes::from_static(&[0x15]),
            },
        ),
        (
            "RpcRequest (PbChunkFetchRequest)",
            hex("0000000c03000000130000000000000007000000130000003f0000000b0a0908e80720ffffffff07"),
            Message::RpcRequest {
                request_id: 7,
                body: Bytes::from(hex("0000003f0000000b0a0908e80720ffffffff07")),
            },
        ),
        (
            "ChunkFetchSuccess",
            hex("00000014010000000300000000000003e800000000000000007fffffff616263"),
            Message::ChunkFetchSuccess {
                slice: StreamChunkSlice::whole_chunk(1000, 0),
                body: Bytes::from_static(b"abc"),
            },
        ),
        (
            "ChunkFetchFailure",
            hex("0000001c020000000000000000000003e800000002000000007fffffff00000004626f6f6d"),
            Message::ChunkFetchFailure {
                slice: StreamChunkSlice::whole_chunk(1000, 2),
                error: s("boom"),
            },
        ),
        (
            "ChunkFetchRequest (legacy raw)",
            hex("0000001400000000000000000000000009000000010000000200000003"),
            Message::ChunkFetchRequest(StreamChunkSlice {
                stream_id: 9,
                chunk_index: 1,
                offset: 2,
                len: 3,
            }),
        ),
        (
            "RpcFailure",
            hex("0000002e0500000000000000000000000500000022505553485f444154415f4641494c5f
                 504152544954494f4e5f4e4f545f464f554e44"),
            Message::RpcFailure {
                request_id: 5,
                error: s("PUSH_DATA_FAIL_PARTITION_NOT_FOUND"),
            },
        ),
        (
            "OneWayMessage",
            hex("00000004090000000300000003010203"),
            Message::OneWayMessage {
                body: Bytes::from_static(&[1, 2, 3]),
            },
        ),
        (
            "PushMergedData",
            hex("000000320c00000028000000000000002b01000000076170702d312d300000000200000003
                 302d3000000003312d3000000002000000000000001400000000000000000000000000000000000000000000000000000000000000000000000000000000"),
            Message::PushMergedData(PushMergedData {
                request_id: 43,
                mode: Mode::Replica,
                shuffle_key: s("app-1-0"),
                partition_unique_ids: vec![s("0-0"), s("1-0")].into(),
                batch_offsets: vec![0, 20],
                body: Bytes::from(vec![0u8; 40]),
            }),
        ),
        (
            "RegionStart",
            hex("0000001c0d0000000000000000076170702d312d3000000003332d30000000010000000201"),
            Message::RegionStart(RegionStart {
                mode: Mode::Primary,
                shuffle_key: s("app-1-0"),
                partition_unique_id: s("3-0"),
                attempt_id: 1,
                current_region_index: 2,
                is_broadcast: true,
            }),
        ),
        (
            "RegionFinish",
            hex("000000170e0000000001000000076170702d312d3000000003332d3000000001"),
            Message::RegionFinish(RegionFinish {
                mode: Mode::Replica,
                shuffle_key: s("app-1-0"),
                partition_unique_id: s("3-0"),
                attempt_id: 1,
            }),
        ),
        (
            "PushDataHandShake",
            hex("0000001f0f0000000000000000076170702d312d3000000003332d30000000010000000a00008000"),
            Message::PushDataHandShake(PushDataHandShake {
                mode: Mode::Primary,
                shuffle_key: s("app-1-0"),
                partition_unique_id: s("3-0"),
                attempt_id: 1,
                num_partitions: 10,
                buffer_size: 32768,
            }),
        ),
        (
            "ReadAddCredit",
            hex("0000000c1000000000000000000000004d00000005"),
            Message::ReadAddCredit {
                stream_id: 77,
                credit: 5,
            },
        ),
        (
            "ReadData",
            hex("000000081100000003000000000000004d090807"),
            Message::ReadData {
                stream_id: 77,
                body: Bytes::from_static(&[9, 8, 7]),
            },
        ),
        (
            "OpenStream",
            hex("0000001c0600000000000000076170702d312d3000000005332d302d30000000007fffffff"),
            Message::OpenStream(OpenStream {
                shuffle_key: s("app-1-0"),
                file_name: s("3-0-0"),
                start_map_index: 0,
                end_map_index: i32::MAX,
            }),
        ),
        (
            "StreamHandle",
            hex("0000000c0700000000000000000000004d00000004"),
            Message::StreamHandle {
                stream_id: 77,
                num_chunks: 4,
            },
        ),
        (
            "OpenStreamWithCredit",
            hex("000000201200000000000000076170702d312d3000000005332d302d30000000000000000500000002"),
            Message::OpenStreamWithCredit(OpenStreamWithCredit {
                shuffle_key: s("app-1-0"),
                file_name: s("3-0-0"),
                start_index: 0,
                end_index: 5,
                initial_credit: 2,
            }),
        ),
        (
            "BacklogAnnouncement",
            hex("0000000c1300000000000000000000004d00000003"),
            Message::BacklogAnnouncement {
                stream_id: 77,
                backlog: 3,
            },
        ),
        (
            "TransportableError",
            hex("0000000f1400000000000000000000004d00000003626164"),
            Message::TransportableError {
                stream_id: 77,
                message: s("bad"),
            },
        ),
        (
            "BufferStreamEnd",
            hex("000000081500000000000000000000004d"),
            Message::BufferStreamEnd { stream_id: 77 },
        ),
        (
            "Heartbeat",
            hex("00000001160000000000"),
            Message::Heartbeat,
        ),
    ]
}

#[test]
fn java_encoder_output_decodes_and_reencodes_byte_exactly() {
    for (name, bytes, message) in java_fixtures() {
        assert_eq!(
            decode_one(&bytes).unwrap().as_ref(),
            Some(&message),
            "{name}"
        );
        assert_eq!(encode(&message), bytes, "{name}");
        let (head, body) = message.frame_parts().unwrap();
        assert_eq!([&head[..], &body[..]].concat(), bytes, "{name} frame_parts");
    }
}

/// SubPartitionReadData (25) exists only in 0.6+, so it is not in the 0.5.4 fixtures:
/// `ReadData.encode` (i64 streamId) then `buf.writeInt(subPartitionId)`.
#[test]
fn sub_partition_read_data_layout() {
    let message = Message::SubPartitionReadData {
        stream_id: 77,
        sub_partition_id: 6,
        body: Bytes::from_static(b"rec"),
    };
    let expected = frame(25, &hex("000000000000004d 00000006"), b"rec");
    assert_eq!(encode(&message), expected);
    assert_eq!(decode_one(&expected).unwrap(), Some(message));
}

/// §10 of our notes, field by field.
#[test]
fn worked_examples_from_the_notes() {
    let push = hex("0000001B 0B 00000014
         000000000000002A 00
         00000007 6170702d312d30 00000003 332d30
         05000000 00000000 01000000 04000000
         DEADBEEF");
    assert_eq!(push, java_fixtures()[0].1);
    assert_eq!(
        encode(&Message::RpcResponse {
            request_id: 42,
            body: Bytes::new()
        }),
        hex("0000000C 04 00000000 000000000000002A 00000000")
    );
    assert_eq!(
        encode(&Message::RpcResponse {
            request_id: 42,
            body: Bytes::from_static(&[0x15])
        }),
        hex("0000000C 04 00000001 000000000000002A 00000001 15")
    );
    assert_eq!(
        encode(&Message::ChunkFetchSuccess {
            slice: StreamChunkSlice::whole_chunk(1000, 0),
            body: Bytes::from_static(b"abc"),
        }),
        hex("00000014 01 00000003 00000000000003E8 00000000 00000000 7FFFFFFF 616263")
    );
}

#[test]
fn byte_by_byte_streaming_yields_every_message() {
    let fixtures = java_fixtures();
    let all: Vec<u8> = fixtures.iter().flat_map(|(_, b, _)| b.clone()).collect();
    let mut codec = CelebornCodec::default();
    let mut src = BytesMut::new();
    let mut out = Vec::new();
    for byte in all {
        src.put_u8(byte);
        while let Some(message) = codec.decode(&mut src).unwrap() {
            out.push(message);
        }
    }
    assert!(src.is_empty());
    let expected: Vec<Message> = fixtures.into_iter().map(|(_, _, m)| m).collect();
    assert_eq!(out, expected);
}

#[test]
fn header_errors() {
    let cases: Vec<(Vec<u8>, ErrorCheck)> = vec![
        (hex("FFFFFFFF 04 00000000"), |e| {
            matches!(
                e,
                FrameError::Wire(WireError::NegativeLength {
                    field: "message length",
                    value: -1
                })
            )
        }),
        (hex("0000000C 04 80000000"), |e| {
            matches!(
                e,
                FrameError::Wire(WireError::NegativeLength {
                    field: "body length",
                    ..
                })
            )
        }),
        (hex("00000000 16 00000000"), |e| {
            matches!(e, FrameError::Wire(WireError::EmptyFrame))
        }),
        (hex("00000001 08 00000000 00"), |e| {
            matches!(e, FrameError::Wire(WireError::UnknownMessageType(8)))
        }),
        (hex("00000001 0A 00000000 00"), |e| {
            matches!(e, FrameError::Wire(WireError::UnknownMessageType(10)))
        }),
        (hex("00000001 1A 00000000 00"), |e| {
            matches!(e, FrameError::Wire(WireError::UnknownMessageType(26)))
        }),
        (hex("00000001 FF 00000000 00"), |e| {
            matches!(e, FrameError::Wire(WireError::UnknownMessageType(255)))
        }),
        (hex("00000001 17 00000000 00"), |e| {
            matches!(e, FrameError::UnsupportedMessageType { id: 23, .. })
        }),
        (hex("00000001 18 00000000 00"), |e| {
            matches!(e, FrameError::UnsupportedMessageType { id: 24, .. })
        }),
    ];
    for (bytes, check) in cases {
        // The header alone is enough to fail: nothing is awaited for a bad frame.
        let err = decode_one(&bytes[..HEADER_LEN]).unwrap_err();
        assert!(check(&err), "{bytes:02x?}: {err}");
    }
}

#[test]
fn oversized_frames_are_rejected_from_the_header() {
    let mut codec = CelebornCodec::new(100);
    let mut src = BytesMut::from(&hex("0000000C 03 00000059")[..]); // 12 + 89 = 101
    assert!(matches!(
        codec.decode(&mut src),
        Err(FrameError::Wire(WireError::FrameTooLarge {
            size: 101,
            max: 100
        }))
    ));
    let mut src = BytesMut::from(&hex("0000000C 03 00000058")[..]); // exactly 100: waits
    assert!(CelebornCodec::new(100).decode(&mut src).unwrap().is_none());
    // The limit never exceeds what Java accepts.
    assert_eq!(
        CelebornCodec::new(usize::MAX).max_frame_size(),
        i32::MAX as usize - 1
    );
}

#[test]
fn malformed_message_parts() {
    let cases: Vec<(Vec<u8>, ErrorCheck)> = vec![
        // RpcRequest whose message part is too short for requestId + bodyLength.
        (frame(3, &hex("0000000000000007"), b""), |e| {
            matches!(e, FrameError::Wire(WireError::Truncated { field: "bodyLength" }))
        }),
        // StreamHandle with a byte too many.
        (frame(7, &hex("000000000000004d 00000004 00"), b""), |e| {
            matches!(e, FrameError::TrailingBytes { unread: 1, .. })
        }),
        // Heartbeat with an empty message part but a body (Java sends one 0 byte, no body).
        (frame(22, b"", b"x"), |e| matches!(e, FrameError::UnexpectedBody { len: 1, .. })),
        // BufferStreamEnd with a body.
        (frame(21, &hex("000000000000004d"), b"zz"), |e| {
            matches!(e, FrameError::UnexpectedBody { len: 2, .. })
        }),
        // PushData with mode 2.
        (frame(11, &hex("000000000000002a 02 00000001 61 00000001 62"), b"x"), |e| {
            matches!(e, FrameError::InvalidMode(2))
        }),
        // PushData whose shuffle key length runs past the message part.
        (frame(11, &hex("000000000000002a 00 00000010 61"), b""), |e| {
            matches!(e, FrameError::Wire(WireError::Truncated { field: "shuffleKey" }))
        }),
        // Negative string length.
        (frame(5, &hex("0000000000000005 FFFFFFFE"), b""), |e| {
            matches!(e, FrameError::Wire(WireError::NegativeLength { field: "errorString", value: -2 }))
        }),
        // Invalid UTF-8.
        (frame(5, &hex("0000000000000005 00000002 C328"), b""), |e| {
            matches!(e, FrameError::Wire(WireError::InvalidUtf8 { field: "errorString" }))
        }),
        // PushMergedData announcing a billion ids in a few bytes.
        (frame(12, &hex("000000000000002b 00 00000001 61 3B9ACA00"), b""), |e| {
            matches!(e, FrameError::Wire(WireError::CountTooLarge { field: "partitionUniqueIds", .. }))
        }),
        // PushMergedData with 1 id but 2 offsets.
        (
            frame(12, &hex("000000000000002b 00 00000001 61 00000001 00000001 62 00000002 00000000 00000001"), b"ab"),
            |e| matches!(e, FrameError::MismatchedBatchCounts { ids: 1, offsets: 2 }),
        ),
        // Negative batch offset count.
        (frame(12, &hex("000000000000002b 00 00000001 61 FFFFFFFF"), b""), |e| {
            matches!(e, FrameError::Wire(WireError::NegativeLength { field: "partitionUniqueIds", .. }))
        }),
    ];
    for (bytes, check) in cases {
        let err = decode_one(&bytes).unwrap_err();
        assert!(check(&err), "{bytes:02x?}: {err}");
    }
}

#[test]
fn a_bad_frame_does_not_misalign_the_stream() {
    let mut src = BytesMut::new();
    src.extend_from_slice(&frame(7, &hex("000000000000004d 00000004 00"), b""));
    src.extend_from_slice(&java_fixtures()[1].1);
    let mut codec = CelebornCodec::default();
    assert!(codec.decode(&mut src).is_err());
    assert_eq!(
        codec.decode(&mut src).unwrap(),
        Some(Message::RpcResponse {
            request_id: 42,
            body: Bytes::new()
        })
    );
}

#[test]
fn bodies_are_zero_copy_slices_of_the_frame() {
    let bytes = java_fixtures()[0].1.clone();
    let mut src = BytesMut::from(&bytes[..]);
    let start = src.as_ptr() as usize;
    let Some(Message::PushData(push)) = CelebornCodec::default().decode(&mut src).unwrap() else {
        panic!("not a PushData");
    };
    assert_eq!(
        push.body.as_ptr() as usize,
        start + bytes.len() - BATCH.len()
    );
}

/// Legacy bodies from the 0.5.4 jar's `Message.toByteBuffer()`: type byte + fields.
#[test]
fn legacy_in_body_form() {
    let open = hex("06 00000007 6170702d312d30 00000005 332d302d30 00000000 7fffffff");
    let message = Message::decode_legacy(Bytes::from(open.clone())).unwrap();
    assert_eq!(message, java_fixtures()[15].2);
    assert_eq!(message.to_legacy_bytes().unwrap(), open);

    let handle = Message::StreamHandle {
        stream_id: 77,
        num_chunks: 4,
    };
    assert_eq!(
        handle.to_legacy_bytes().unwrap(),
        hex("07 000000000000004d 00000004")
    );

    assert!(matches!(
        Message::decode_legacy(Bytes::from(hex("03 0000000000000007 00000000"))),
        Err(FrameError::NotALegacyBody(MessageType::RpcRequest))
    ));
    assert!(matches!(
        Message::decode_legacy(Bytes::from(hex("07 000000000000004d 00000004 01"))),
        Err(FrameError::TrailingBytes { unread: 1, .. })
    ));
    assert!(Message::Heartbeat.to_legacy_bytes().is_ok());
    assert!(java_fixtures()[0].2.to_legacy_bytes().is_err());
}

#[test]
fn push_merged_data_batches() {
    let Message::PushMergedData(mut m) = java_fixtures()[9].2.clone() else {
        panic!()
    };
    m.body = Bytes::from((0u8..40).collect::<Vec<_>>());
    let batches = m.batches().unwrap();
    assert_eq!(batches.len(), 2);
    assert_eq!(&batches[0][..], &(0u8..20).collect::<Vec<_>>()[..]);
    assert_eq!(&batches[1][..], &(20u8..40).collect::<Vec<_>>()[..]);

    for bad in [vec![0, 41], vec![20, 10], vec![-1, 0]] {
        m.batch_offsets = bad;
        assert!(matches!(
            m.batches(),
            Err(FrameError::BadBatchOffset { .. })
        ));
    }
}

fn arb_string() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_-]{0,12}"
}

fn arb_bytes() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from)
}

fn arb_mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Primary), Just(Mode::Replica)]
}

fn arb_slice() -> impl Strategy<Value = StreamChunkSlice> {
    (any::<i64>(), any::<i32>(), any::<i32>(), any::<i32>()).prop_map(|(a, b, c, d)| {
        StreamChunkSlice {
            stream_id: a,
            chunk_index: b,
            offset: c,
            len: d,
        }
    })
}

fn arb_message() -> impl Strategy<Value = Message> {
    prop_oneof![
        arb_slice().prop_map(Message::ChunkFetchRequest),
        (arb_slice(), arb_bytes())
            .prop_map(|(slice, body)| Message::ChunkFetchSuccess { slice, body }),
        (arb_slice(), arb_string())
            .prop_map(|(slice, error)| Message::ChunkFetchFailure { slice, error }),
        (any::<i64>(), arb_bytes())
            .prop_map(|(request_id, body)| Message::RpcRequest { request_id, body }),
        (any::<i64>(), arb_bytes())
            .prop_map(|(request_id, body)| Message::RpcResponse { request_id, body }),
        (any::<i64>(), arb_string())
            .prop_map(|(request_id, error)| Message::RpcFailure { request_id, error }),
        arb_bytes().prop_map(|body| Message::OneWayMessage { body }),
        (
            any::<i64>(),
            arb_mode(),
            arb_string(),
            arb_string(),
            arb_bytes()
        )
            .prop_map(
                |(request_id, mode, shuffle_key, partition_unique_id, body)| {
                    Message::PushData(PushData {
                        request_id,
                        mode,
                        shuffle_key,
                        partition_unique_id,
                        body,
                    })
                }
            ),
        (
            any::<i64>(),
            arb_mode(),
            arb_string(),
            prop::collection::vec((arb_string(), any::<i32>()), 0..5),
            arb_bytes()
        )
            .prop_map(|(request_id, mode, shuffle_key, batches, body)| {
                Message::PushMergedData(PushMergedData {
                    request_id,
                    mode,
                    shuffle_key,
                    partition_unique_ids: batches.iter().map(|(id, _)| id.clone()).collect(),
                    batch_offsets: batches.iter().map(|(_, o)| *o).collect(),
                    body,
                })
            }),
        (
            arb_mode(),
            arb_string(),
            arb_string(),
            any::<i32>(),
            any::<i32>(),
            any::<bool>()
        )
            .prop_map(
                |(
                    mode,
                    shuffle_key,
                    partition_unique_id,
                    attempt_id,
                    current_region_index,
                    is_broadcast,
                )| {
                    Message::RegionStart(RegionStart {
                        mode,
                        shuffle_key,
                        partition_unique_id,
                        attempt_id,
                        current_region_index,
                        is_broadcast,
                    })
                }
            ),
        (any::<i64>(), any::<i32>())
            .prop_map(|(stream_id, credit)| Message::ReadAddCredit { stream_id, credit }),
        (any::<i64>(), arb_bytes())
            .prop_map(|(stream_id, body)| Message::ReadData { stream_id, body }),
        (any::<i64>(), arb_string())
            .prop_map(|(stream_id, message)| Message::TransportableError { stream_id, message }),
        (any::<i64>(), any::<i32>(), arb_bytes()).prop_map(
            |(stream_id, sub_partition_id, body)| {
                Message::SubPartitionReadData {
                    stream_id,
                    sub_partition_id,
                    body,
                }
            }
        ),
        Just(Message::Heartbeat),
    ]
}

proptest! {
    #[test]
    fn encode_then_decode_is_identity(messages in prop::collection::vec(arb_message(), 1..8), split in 1usize..64) {
        let mut wire = BytesMut::new();
        let mut codec = CelebornCodec::default();
        for m in &messages {
            codec.encode(m, &mut wire).unwrap();
        }
        // Feed in pieces of `split` bytes.
        let mut src = BytesMut::new();
        let mut out = Vec::new();
        for piece in wire.chunks(split) {
            src.extend_from_slice(piece);
            while let Some(m) = codec.decode(&mut src).unwrap() {
                out.push(m);
            }
        }
        prop_assert_eq!(out, messages);
    }

    #[test]
    fn arbitrary_input_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let mut codec = CelebornCodec::new(1 << 16);
        let mut src = BytesMut::from(&bytes[..]);
        while let Ok(Some(_)) = codec.decode(&mut src) {}
        let _ = Message::decode_legacy(Bytes::from(bytes));
    }
}

/// Found by the fuzzer (tests/fuzz.rs): a header alone made the codec
/// reserve the whole announced frame (here 200 MiB) before any of it came.
/// A pending frame's buffer now grows with the bytes that arrive, and the
/// frame still decodes whole once they all have.
#[test]
fn a_pending_frame_buffers_what_arrived_not_what_was_announced() {
    let body = vec![5u8; 3 << 20];
    let mut wire = BytesMut::new();
    CelebornCodec::new(256 << 20)
        .encode(
            Message::PushData(PushData {
                request_id: 1,
                mode: Mode::Primary,
                shuffle_key: "app-1-0".into(),
                partition_unique_id: "0-0".into(),
                body: Bytes::from(body.clone()),
            }),
            &mut wire,
        )
        .unwrap();
    let mut codec = CelebornCodec::new(256 << 20);
    let mut header = (200i32 << 20).to_be_bytes().to_vec();
    header.extend([11, 0, 0, 0, 0]);
    let mut src = BytesMut::from(&header[..]);
    src.extend_from_slice(&[0; 100]);
    assert!(codec.decode(&mut src).unwrap().is_none());
    assert!(
        src.capacity() < 1 << 20,
        "reserved {} bytes",
        src.capacity()
    );

    let mut codec = CelebornCodec::new(256 << 20);
    let mut src = BytesMut::new();
    let mut peak = 0;
    let mut decoded = None;
    for piece in wire.chunks(100_000) {
        src.extend_from_slice(piece);
        if let Some(m) = codec.decode(&mut src).unwrap() {
            decoded = Some(m);
        }
        peak = peak.max(src.capacity());
    }
    assert!(peak <= 2 * wire.len() + (128 << 10), "peak buffer {peak}");
    let Some(Message::PushData(p)) = decoded else {
        panic!("not decoded")
    };
    assert_eq!(&p.body[..], &body[..]);
}
