//! The gRPC codec of both Uniffle services (set in `build.rs`): prost's,
//! with a bound on what a request may decode into. Protobuf amplifies (an
//! empty element of a repeated message is two bytes on the wire and a
//! struct of tens of bytes decoded: 256 MiB of empty `ShuffleBlock`s would
//! decode into about 8 GB), so before prost runs, the message is walked
//! against its schema (`switchyard_frame::proto_cost::shaped_cost`, which
//! never looks into block data) and refused with RESOURCE_EXHAUSTED when the
//! bound passes the limit ([`set_limit`]: `uniffle.max_message_size`).

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;

use prost::Message;
use switchyard_frame::proto_cost::{shaped_cost, FieldShape, Shape};
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::ProstEncoder;

static LIMIT: AtomicU64 = AtomicU64::new(256 << 20);

/// The most a message may decode into; the node sets its
/// `uniffle.max_message_size`.
pub fn set_limit(bytes: u64) {
    LIMIT.store(bytes, Ordering::Relaxed);
}

/// Every message of `uniffle.proto` (and its imports) as a [`Shape`], by
/// the simple name of its generated Rust type.
struct Schema {
    shapes: Vec<Shape>,
    by_name: HashMap<String, usize>,
}

static SCHEMA: LazyLock<Schema> = LazyLock::new(|| {
    let bytes = include_bytes!(concat!(env!("OUT_DIR"), "/uniffle_descriptor.bin"));
    let set =
        prost_types::FileDescriptorSet::decode(&bytes[..]).expect("the build's own descriptors");
    build_schema(&set)
});

fn build_schema(set: &prost_types::FileDescriptorSet) -> Schema {
    use prost_types::field_descriptor_proto::{Label, Type};
    // Full names (".pkg.Outer.Inner") first, so fields can point at any message.
    let mut messages: Vec<(String, &prost_types::DescriptorProto)> = Vec::new();
    fn collect<'a>(
        prefix: &str,
        m: &'a prost_types::DescriptorProto,
        out: &mut Vec<(String, &'a prost_types::DescriptorProto)>,
    ) {
        let name = format!("{prefix}.{}", m.name());
        for n in &m.nested_type {
            collect(&name, n, out);
        }
        out.push((name, m));
    }
    for f in &set.file {
        let prefix = if f.package().is_empty() {
            String::new()
        } else {
            format!(".{}", f.package())
        };
        for m in &f.message_type {
            collect(&prefix, m, &mut messages);
        }
    }
    let index: HashMap<&str, usize> = messages
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (n.as_str(), i))
        .collect();
    let shapes = messages
        .iter()
        .map(|(_, m)| Shape {
            fields: m
                .field
                .iter()
                .filter_map(|f| {
                    let shape = match f.r#type() {
                        Type::Message => FieldShape::Message(*index.get(f.type_name())?),
                        Type::String | Type::Bytes => FieldShape::Leaf,
                        _ if f.label() == Label::Repeated => FieldShape::Packed,
                        // A scalar is never length-delimited.
                        _ => return None,
                    };
                    Some((f.number() as u32, shape))
                })
                .collect(),
        })
        .collect();
    // Generated types are named after the message (nested ones live in a
    // module of the outer one, with the same simple name).
    let by_name = messages
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (n.rsplit('.').next().unwrap_or(n).to_string(), i))
        .collect();
    Schema { shapes, by_name }
}

/// What decoding `buf` as the message named `type_name` (a Rust type name)
/// may allocate; None for a type outside the schema (such as `()`).
pub fn decode_bound(type_name: &str, buf: &[u8]) -> Option<u64> {
    let simple = type_name.rsplit("::").next().unwrap_or(type_name);
    let root = *SCHEMA.by_name.get(simple)?;
    Some(shaped_cost(&SCHEMA.shapes, root, buf))
}

#[derive(Debug, Clone)]
pub struct BoundedCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for BoundedCodec<T, U> {
    fn default() -> Self {
        BoundedCodec(PhantomData)
    }
}

impl<T, U> Codec for BoundedCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = BoundedDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        BoundedDecoder(PhantomData)
    }
}

#[derive(Debug, Clone)]
pub struct BoundedDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for BoundedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        use bytes::Buf;
        // The message is one contiguous buffer by the time it is decoded.
        let chunk = buf.chunk();
        if chunk.len() == buf.remaining() {
            let name = std::any::type_name::<U>();
            if let Some(bound) = decode_bound(name, chunk) {
                let limit = LIMIT.load(Ordering::Relaxed);
                if bound > limit {
                    metrics::counter!("switchyard_decode_refused_total", "protocol" => "uniffle")
                        .increment(1);
                    let simple = name.rsplit("::").next().unwrap_or(name);
                    return Err(Status::resource_exhausted(format!(
                        "{simple} of {} bytes would decode into about {bound} bytes, over the limit of {limit}",
                        chunk.len()
                    )));
                }
            }
        }
        U::decode(buf)
            .map(Some)
            .map_err(|e| Status::internal(format!("cannot decode the request: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::*;
    use bytes::Bytes;

    #[test]
    fn real_data_costs_its_size_and_empty_blocks_what_they_decode_into() {
        // Block data that looks like millions of tiny fields is not read.
        let data = Bytes::from(
            std::iter::repeat_n([0x0au8, 0x00], 1 << 20)
                .flatten()
                .collect::<Vec<u8>>(),
        );
        let real = SendShuffleDataRequest {
            app_id: "app".into(),
            shuffle_data: vec![ShuffleData {
                partition_id: 1,
                block: (0..8)
                    .map(|i| ShuffleBlock {
                        block_id: i,
                        length: data.len() as i32,
                        data: data.clone(),
                        ..Default::default()
                    })
                    .collect(),
            }],
            ..Default::default()
        }
        .encode_to_vec();
        let bound = decode_bound(std::any::type_name::<SendShuffleDataRequest>(), &real).unwrap();
        assert!(
            bound < real.len() as u64 + 64 * 1024,
            "{bound} for {} wire bytes",
            real.len()
        );

        let hostile = SendShuffleDataRequest {
            shuffle_data: vec![ShuffleData {
                partition_id: 1,
                block: vec![ShuffleBlock::default(); 100_000],
            }],
            ..Default::default()
        }
        .encode_to_vec();
        let bound =
            decode_bound(std::any::type_name::<SendShuffleDataRequest>(), &hostile).unwrap();
        assert!(
            bound >= 100_000 * 64,
            "{bound} for {} wire bytes",
            hostile.len()
        );
        assert_eq!(decode_bound("()", &[]), None);
    }
}
