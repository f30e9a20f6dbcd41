//! Fuzzing of the decoders the Uniffle Netty port runs on client bytes: its
//! frames and messages, and the Roaring64NavigableMap bitmaps inside memory
//! reads. A short run is part of `cargo test`; see
//! `protocols/frame/tests/support/fuzz.rs` and the "Fuzzing" section of
//! docs/benchmarks.md for longer runs.

#[path = "../../frame/tests/support/fuzz.rs"]
mod harness;

use bytes::{Bytes, BytesMut};
use harness::{fuzz, label, Counting, Target};
use switchyard_uniffle::bitmap::IdBitmap;
use switchyard_uniffle::netty::{
    GetLocalShuffleDataRequest, GetLocalShuffleDataV3Request, GetMemoryShuffleDataRequest, Message,
    PartitionBlocks, ReadSegment, ReplicaServer, SendShuffleDataRequest, ShuffleBlock,
    UniffleCodec,
};
use tokio_util::codec::{Decoder, Encoder};

#[global_allocator]
static ALLOC: Counting = Counting;

const DIR: &str = env!("CARGO_MANIFEST_DIR");

fn frame(m: Message) -> Vec<u8> {
    let mut dst = BytesMut::new();
    UniffleCodec::default().encode(m, &mut dst).unwrap();
    dst.to_vec()
}

fn bitmap(ids: &[u64]) -> Vec<u8> {
    let mut b = IdBitmap::new();
    for &id in ids {
        b.insert(id);
    }
    b.to_java_bytes()
}

fn block(id: i64, data: &[u8], replicas: usize) -> ShuffleBlock {
    ShuffleBlock {
        partition_id: 2,
        block_id: id,
        length: data.len() as i32,
        shuffle_id: 1,
        crc: 7,
        task_attempt_id: 5,
        data: Bytes::copy_from_slice(data),
        replicas: (0..replicas)
            .map(|i| ReplicaServer {
                id: format!("10.0.0.{i}-19999-21000"),
                host: format!("10.0.0.{i}"),
                grpc_port: 19999,
                netty_port: 21000,
            })
            .collect(),
        uncompress_length: data.len() as i32 * 2,
        free_memory: 0,
    }
}

fn netty_seeds() -> Vec<Vec<u8>> {
    let read = GetLocalShuffleDataRequest {
        request_id: 3,
        app_id: "app".into(),
        shuffle_id: 1,
        partition_id: 2,
        partition_num_per_range: 1,
        partition_num: 10,
        offset: 0,
        length: 4096,
        timestamp: 1,
    };
    vec![
        frame(Message::SendShuffleData(SendShuffleDataRequest {
            request_id: 1,
            app_id: "app".into(),
            shuffle_id: 1,
            require_buffer_id: 42,
            partitions: vec![
                PartitionBlocks {
                    partition_id: 2,
                    blocks: vec![block(1, b"hello", 1), block(2, &[3; 40], 2)],
                },
                PartitionBlocks {
                    partition_id: 3,
                    blocks: vec![block(3, b"", 0)],
                },
            ],
            timestamp: 1_700_000_000_000,
        })),
        frame(Message::GetMemoryShuffleData(GetMemoryShuffleDataRequest {
            request_id: 2,
            app_id: "app".into(),
            shuffle_id: 1,
            partition_id: 2,
            last_block_id: -1,
            read_buffer_size: 1 << 20,
            timestamp: 1,
            expected_task_ids_bitmap: Some(Bytes::from(bitmap(&[1, 5, 1 << 40]))),
        })),
        frame(Message::GetLocalShuffleData(read.clone())),
        frame(Message::GetLocalShuffleDataV3(
            GetLocalShuffleDataV3Request {
                base: read,
                storage_id: 1,
                next_read_segments: vec![ReadSegment {
                    offset: 4096,
                    length: 4096,
                }],
                task_attempt_id: 9,
            },
        )),
    ]
}

/// What the Netty port does with bytes: frames until the buffer runs out,
/// and the task-id bitmap of a memory read.
fn decode_netty(input: &[u8]) -> String {
    let mut codec = UniffleCodec::default();
    let mut buf = BytesMut::from(input);
    let mut labels = String::new();
    loop {
        match codec.decode(&mut buf) {
            Ok(Some(m)) => {
                labels += &label::<_, String>(&Ok(&m));
                if let Message::GetMemoryShuffleData(r) = &m {
                    labels += &label(&r.expected_task_ids().map(|b| b.map(|b| b.len())));
                }
            }
            Ok(None) => return labels + "incomplete",
            Err(e) => return labels + &e.to_string(),
        }
    }
}

#[test]
fn fuzz_uniffle_netty_messages() {
    let execs = fuzz(
        DIR,
        Target {
            name: "uniffle_netty",
            seeds: netty_seeds(),
            // Empty PartitionBlocks: 32 bytes decoded from 8 on the wire.
            per_input_byte: 8,
            constant: 256 << 10,
            run: &decode_netty,
        },
    );
    assert!(execs > 0);
}

#[test]
fn fuzz_roaring_bitmaps() {
    let execs = fuzz(
        DIR,
        Target {
            name: "roaring",
            seeds: vec![
                bitmap(&[]),
                bitmap(&[0, 1, 2, 65536, 1 << 33]),
                bitmap(&(0..5000).map(|i| i * 3).collect::<Vec<_>>()),
            ],
            // croaring allocates with C malloc, which this count does not
            // see; what Rust allocates around it is checked.
            per_input_byte: 8,
            constant: 256 << 10,
            run: &|input| label(&IdBitmap::from_java_bytes(input).map(|b| b.len())),
        },
    );
    assert!(execs > 0);
}

/// A send request announcing as many partitions as its bytes could hold,
/// whose first partition is bad: it fails without allocating more than its
/// own size (a `Vec::with_capacity(count)` of 32-byte entries took 4×).
#[test]
fn announced_partition_counts_allocate_no_more_than_the_frame() {
    use bytes::BufMut;
    let mut fields = BytesMut::new();
    fields.put_i64(1);
    fields.put_i32(3);
    fields.put_slice(b"app");
    fields.put_i32(1);
    fields.put_i64(42);
    let room = 256 * 1024;
    fields.put_i32((room / 8) as i32); // partitions
    fields.put_i32(7); // partition id
    fields.put_i32(-5); // block count: refused
    fields.put_slice(&vec![0u8; room - 8]);
    let mut wire = (fields.len() as i32).to_be_bytes().to_vec();
    wire.push(3); // SEND_SHUFFLE_DATA_REQUEST
    wire.extend(0i32.to_be_bytes());
    wire.extend_from_slice(&fields);
    let mut src = BytesMut::from(&wire[..]);
    let (result, peak) = harness::peak_during(|| UniffleCodec::default().decode(&mut src));
    let err = result.unwrap_err().to_string();
    assert!(err.contains("block"), "{err}");
    assert!(
        peak <= wire.len() + (64 << 10),
        "{peak} bytes for {}",
        wire.len()
    );
}
