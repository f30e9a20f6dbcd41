//! Fuzzing of every decoder the Celeborn ports run on client bytes: frames,
//! RPC envelopes (with their Java serialization), the Java serialization
//! subset alone, and Flink's map-partition messages and records. A short
//! run is part of `cargo test`; see `protocols/frame/tests/support/fuzz.rs`
//! and the "Fuzzing" section of docs/benchmarks.md for longer runs.

#[path = "../../frame/tests/support/fuzz.rs"]
mod harness;

use bytes::{Bytes, BytesMut};
use harness::{fuzz, label, Counting, Target};
use switchyard_celeborn::frame::{
    CelebornCodec, Message, Mode, PushData, PushMergedData, RegionStart,
};
use switchyard_celeborn::proto::{MessageType, PbPushDataHandShake, PbRequestSlots};
use switchyard_celeborn::rpc::{RequestMessage, RpcAddress, RpcContent};
use switchyard_celeborn::server::worker::map_partition::{split_records, MapPartition};
use switchyard_celeborn::TransportMessage;
use switchyard_storage::IndexRecord;
use tokio_util::codec::{Decoder, Encoder};

#[global_allocator]
static ALLOC: Counting = Counting;

const DIR: &str = env!("CARGO_MANIFEST_DIR");

fn frame(m: Message) -> Vec<u8> {
    let mut dst = BytesMut::new();
    CelebornCodec::default().encode(m, &mut dst).unwrap();
    dst.to_vec()
}

fn request(content: RpcContent) -> Bytes {
    RequestMessage {
        sender: Some(RpcAddress {
            host: "10.0.0.1".into(),
            port: 41000,
        }),
        receiver: Some(RpcAddress {
            host: "127.0.0.1".into(),
            port: 9097,
        }),
        endpoint: "MasterEndpoint".into(),
        content,
    }
    .encode()
    .unwrap()
}

fn rpc_seeds() -> Vec<Vec<u8>> {
    let slots = PbRequestSlots {
        application_id: "app-1".into(),
        shuffle_id: 3,
        partition_id_list: (0..40).collect(),
        ..Default::default()
    };
    vec![
        request(RpcContent::TransportMessage(TransportMessage::new(
            MessageType::RequestSlots,
            &slots,
        )))
        .to_vec(),
        request(RpcContent::CheckExistence {
            name: "WorkerEndpoint".into(),
        })
        .to_vec(),
        request(RpcContent::Boolean(true)).to_vec(),
    ]
}

/// The content part of each envelope seed (Java serialization alone).
fn javaser_seeds() -> Vec<Vec<u8>> {
    [
        RpcContent::TransportMessage(TransportMessage::new(
            MessageType::PushDataHandShake,
            &PbPushDataHandShake {
                num_partitions: 8,
                ..Default::default()
            },
        )),
        RpcContent::CheckExistence {
            name: "MasterEndpoint".into(),
        },
        RpcContent::Boolean(false),
    ]
    .iter()
    .map(|c| c.encode().unwrap().to_vec())
    .collect()
}

fn frame_seeds() -> Vec<Vec<u8>> {
    let mut batches = Vec::new();
    for i in 0..3u8 {
        batches.extend_from_slice(&[i; 20]);
    }
    vec![
        frame(Message::PushData(PushData {
            request_id: 7,
            mode: Mode::Primary,
            shuffle_key: "app-1-0".into(),
            partition_unique_id: "0-0".into(),
            body: Bytes::from(vec![1u8; 32]),
        })),
        frame(Message::PushMergedData(PushMergedData {
            request_id: 8,
            mode: Mode::Replica,
            shuffle_key: "app-1-0".into(),
            partition_unique_ids: ["0-0", "1-0", "2-1"].into_iter().collect(),
            batch_offsets: vec![0, 20, 40],
            body: Bytes::from(batches),
        })),
        frame(Message::RpcRequest {
            request_id: 9,
            body: request(RpcContent::Boolean(true)),
        }),
        frame(Message::RpcRequest {
            request_id: 10,
            body: TransportMessage::new(
                MessageType::PushDataHandShake,
                &PbPushDataHandShake {
                    num_partitions: 4,
                    buffer_size: 32768,
                    ..Default::default()
                },
            )
            .to_bytes(),
        }),
        frame(Message::RegionStart(RegionStart {
            mode: Mode::Primary,
            shuffle_key: "app-1-0".into(),
            partition_unique_id: "3-0".into(),
            attempt_id: 1,
            current_region_index: 2,
            is_broadcast: true,
        })),
        frame(Message::Heartbeat),
    ]
}

/// What the ports do with a frame's bytes: decode frames until the buffer
/// runs out, then what the handlers decode next (merged batches, RPC
/// envelopes, TransportMessages).
fn decode_frames(input: &[u8]) -> String {
    let mut codec = CelebornCodec::default();
    let mut buf = BytesMut::from(input);
    let mut labels = String::new();
    loop {
        match codec.decode(&mut buf) {
            Ok(Some(m)) => {
                labels += &label::<_, String>(&Ok(&m));
                match m {
                    Message::PushMergedData(p) => labels += &label(&p.batches()),
                    Message::RpcRequest { body, .. } | Message::OneWayMessage { body } => {
                        labels += &label(&RequestMessage::decode(body.clone()));
                        labels += &label(&TransportMessage::from_bytes(body));
                    }
                    _ => {}
                }
            }
            Ok(None) => return labels + "incomplete",
            Err(e) => return labels + &e.to_string(),
        }
    }
}

#[test]
fn fuzz_celeborn_frames() {
    let execs = fuzz(
        DIR,
        Target {
            name: "celeborn_frame",
            seeds: frame_seeds(),
            per_input_byte: 8,
            constant: 2 << 20,
            run: &decode_frames,
        },
    );
    assert!(execs > 0);
}

#[test]
fn fuzz_celeborn_rpc_envelopes() {
    let execs = fuzz(
        DIR,
        Target {
            name: "celeborn_rpc",
            seeds: rpc_seeds(),
            // The Java serialization budget (1 MiB built) plus its vectors.
            per_input_byte: 8,
            constant: 3 << 20,
            run: &|input| label(&RequestMessage::decode(Bytes::copy_from_slice(input))),
        },
    );
    assert!(execs > 0);
}

#[test]
fn fuzz_java_serialization() {
    let execs = fuzz(
        DIR,
        Target {
            name: "javaser",
            seeds: javaser_seeds(),
            per_input_byte: 8,
            constant: 3 << 20,
            run: &|input| label(&RpcContent::decode(Bytes::copy_from_slice(input))),
        },
    );
    assert!(execs > 0);
}

/// Flink's map-partition state driven by a script: each op byte picks a
/// handshake, region start, record, region finish or reader selection, with
/// its arguments from the bytes after it. Checks what the worker relies on:
/// a selection never holds more records than were stored, whatever range a
/// reader asks for.
fn flink_script(input: &[u8]) -> String {
    let mut m = MapPartition::default();
    let mut stored: Vec<IndexRecord> = Vec::new();
    let mut rest = input;
    // `n` bytes of arguments (zeros past the end), at least 4.
    let take = |n: usize, rest: &mut &[u8]| -> Vec<u8> {
        let (a, b) = rest.split_at(n.min(rest.len()));
        *rest = b;
        let mut v = a.to_vec();
        v.resize(n.max(4), 0);
        v
    };
    let word = |v: &[u8]| i32::from_be_bytes([v[0], v[1], v[2], v[3]]);
    let mut labels = String::new();
    while let Some((&op, after)) = rest.split_first() {
        rest = after;
        match op % 5 {
            0 => labels += &label(&m.handshake(word(&take(4, &mut rest)), 32768)),
            1 => {
                let index = word(&take(4, &mut rest));
                let broadcast = take(1, &mut rest)[0] & 1 == 1;
                labels += &label(&m.region_start(index, broadcast, stored.len() as i64));
            }
            2 => {
                let len = take(1, &mut rest)[0] as usize;
                let record = take(len, &mut rest);
                let record = &record[..len.min(record.len())];
                let accepted = m.accept(record);
                if let Ok(h) = &accepted {
                    stored.push(IndexRecord {
                        offset: stored.len() as u64 * 16,
                        length: record.len() as u32,
                        uncompressed_len: 0,
                        crc: 0,
                        block_id: stored.len() as i64,
                        map_id: h.sub_partition as i64,
                    });
                }
                labels += &label(&accepted);
            }
            3 => {
                m.region_finish(stored.len() as i64);
            }
            _ => {
                let v = take(8, &mut rest);
                let (start, end) = (word(&v[..4]), word(&v[4..]));
                let subs = m.num_sub_partitions();
                // The fetch port's range check, then the selection.
                if subs > 0 && start >= 0 && end >= start && end < subs {
                    let s = m.select(stored.clone(), start, end);
                    assert!(
                        s.records.len() <= stored.len(),
                        "a selection copied records"
                    );
                    assert!(s.runs.len() <= m.regions());
                    for r in s.iter().take(1024) {
                        assert!(r.map_id == 0 || (start as i64..=end as i64).contains(&r.map_id));
                    }
                }
            }
        }
    }
    labels + &label(&split_records(Bytes::copy_from_slice(input)).map(|r| r.len()))
}

#[test]
fn fuzz_flink_map_partitions() {
    let mut script = vec![0, 0, 0, 0x80, 0, 1, 0, 0, 0, 0, 1];
    for sub in [0u8, 0, 5, 200] {
        script.extend([2, 19, 0, 0, 0, sub, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3]);
        script.extend([7, 7, 7]);
    }
    script.extend([
        3, 1, 0, 0, 0, 1, 1, 2, 16, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0,
    ]);
    script.extend([
        3, 4, 0, 0, 0, 0, 0, 0, 0x7f, 0xff, 4, 0, 0, 0, 5, 0, 0, 0, 5,
    ]);
    let execs = fuzz(
        DIR,
        Target {
            name: "flink",
            seeds: vec![script],
            per_input_byte: 64,
            constant: 256 << 10,
            run: &flink_script,
        },
    );
    assert!(execs > 0);
}

/// PushMergedData announcing as many empty ids as its bytes could hold: it
/// used to become one 24-byte `String` per 4-byte id (6×, 12× while the
/// vector doubled); now the ids cost about what they take on the wire.
#[test]
fn announced_empty_ids_allocate_about_their_wire_size() {
    use bytes::BufMut;
    let ids = 64 * 1024;
    let mut fields = BytesMut::new();
    fields.put_i64(1);
    fields.put_u8(0);
    fields.put_i32(7);
    fields.put_slice(b"app-1-0");
    fields.put_i32(ids);
    for _ in 0..ids {
        fields.put_i32(0);
    }
    fields.put_i32(1); // one offset for 65536 ids: refused
    fields.put_i32(0);
    let mut wire = (fields.len() as i32).to_be_bytes().to_vec();
    wire.push(12); // PUSH_MERGED_DATA
    wire.extend(0i32.to_be_bytes());
    wire.extend_from_slice(&fields);
    let mut src = BytesMut::from(&wire[..]);
    let (result, peak) = harness::peak_during(|| CelebornCodec::default().decode(&mut src));
    let err = result.unwrap_err().to_string();
    assert!(err.contains("ids"), "{err}");
    assert!(
        peak <= wire.len() * 3 / 2 + (64 << 10),
        "{peak} bytes for {}",
        wire.len()
    );
}
