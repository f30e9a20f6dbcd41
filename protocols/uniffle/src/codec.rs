//! The gRPC codec of the Uniffle services: tonic-prost's, with what a
//! request may decode into bounded before prost runs
//! (`switchyard_frame::proto_cost`). A message of many empty repeated
//! elements (a sendShuffleData of empty blocks, say) is two bytes per element
//! on the wire and a struct of a hundred bytes or more decoded; refused, it
//! costs nothing.

use std::marker::PhantomData;

use prost::bytes::Buf;
use prost::Message;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// A request may decode into twice its size, plus this: blocks and strings
/// decode into about their wire size, small ones into less than twice.
const DECODE_SLACK: u64 = 16 << 20;

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
        ProstCodec::<T, U>::raw_encoder(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        BoundedDecoder(ProstCodec::<T, U>::raw_decoder(BufferSettings::default()))
    }
}

pub struct BoundedDecoder<U>(ProstDecoder<U>);

/// Whether `wire` may be decoded: its decoded size stays within twice its
/// size plus [`DECODE_SLACK`].
pub fn within_bound(wire: &[u8]) -> bool {
    switchyard_frame::proto_cost::decode_cost(wire)
        <= (wire.len() as u64)
            .saturating_mul(2)
            .saturating_add(DECODE_SLACK)
}

impl<U: Message + Default> Decoder for BoundedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        // tonic hands a whole message in one contiguous buffer.
        let chunk = buf.chunk();
        if chunk.len() == buf.remaining() && !within_bound(chunk) {
            metrics::counter!("switchyard_decode_refused_total", "protocol" => "uniffle")
                .increment(1);
            return Err(Status::resource_exhausted(format!(
                "a {} byte message that would decode into far more is refused",
                chunk.len()
            )));
        }
        self.0.decode(buf)
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_elements_are_out_of_bounds_and_real_blocks_in() {
        use crate::proto::{ShuffleBlock, ShuffleData};
        let empty: Vec<u8> = std::iter::repeat_n([0x12u8, 0x00], 10_000_000)
            .flatten()
            .collect();
        assert!(!within_bound(&empty));
        let real = ShuffleData {
            partition_id: 1,
            block: (0..20_000)
                .map(|i| ShuffleBlock {
                    block_id: i,
                    length: 1024,
                    uncompress_length: 2048,
                    crc: 7,
                    data: vec![1u8; 1024].into(),
                    task_attempt_id: 3,
                })
                .collect(),
        };
        assert!(within_bound(&real.encode_to_vec()));
    }
}
