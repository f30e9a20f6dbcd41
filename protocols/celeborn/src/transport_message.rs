//! `TransportMessage`: a `MessageType` number plus a protobuf payload, the unit of every
//! Celeborn control message (upstream
//! `common/src/main/java/org/apache/celeborn/common/network/protocol/TransportMessage.java`).
//!
//! It travels in two forms:
//! - on the master/worker RPC ports, Java-serialized inside the NettyRpcEnv envelope (see
//!   [`crate::rpc`]);
//! - on the push and fetch ports, as raw bytes in an RpcRequest/RpcResponse body:
//!   `i32 BE type, i32 BE payload length, payload` (`toByteBuffer` / `fromByteBuffer`).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::frame::{FrameError, Message};
use crate::proto::MessageType;

/// The Java enum `org.apache.celeborn.common.network.protocol.SerdeVersion` (0.6+).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SerdeVersion {
    /// Java serialization (first content byte 0xAC).
    V1,
    /// Language-agnostic `0xFF, i32 type, i32 length, payload` (only the C++ client uses
    /// it, towards the LifecycleManager).
    V2,
}

impl SerdeVersion {
    /// The Java enum constant name.
    pub fn constant_name(self) -> &'static str {
        match self {
            SerdeVersion::V1 => "V1",
            SerdeVersion::V2 => "V2",
        }
    }
}

/// Why a control message's payload did not decode.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error(transparent)]
    Decode(#[from] prost::DecodeError),
    /// Refused unread: it would decode into more than [`MAX_DECODE_COST`].
    #[error("it would decode into about {cost_mib} MiB, more than the {limit_mib} MiB allowed")]
    TooLarge { cost_mib: u64, limit_mib: u64 },
}

/// The most a control message may decode into: twice the default RPC
/// frame limit. The stock clients' largest (packed slot lists, commit id
/// lists of 100,000s of partitions) stay far below.
pub const MAX_DECODE_COST: u64 = 128 << 20;

/// One control message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportMessage {
    /// A [`MessageType`] number; kept raw so that a newer client's type is not lost.
    pub message_type: i32,
    /// Protobuf bytes; `None` is Java `null` (e.g. `ONE_WAY_MESSAGE_RESPONSE`).
    pub payload: Option<Bytes>,
    /// Only 0.6+ clients send this field; 0.4/0.5 classes do not have it.
    pub serde_version: Option<SerdeVersion>,
}

impl TransportMessage {
    /// A message with an encoded protobuf payload and no serde version (the form every
    /// client accepts in a reply).
    pub fn new(message_type: MessageType, payload: &impl prost::Message) -> Self {
        Self {
            message_type: message_type as i32,
            payload: Some(payload.encode_to_vec().into()),
            serde_version: None,
        }
    }

    /// A message whose payload is Java `null`.
    pub fn without_payload(message_type: MessageType) -> Self {
        Self {
            message_type: message_type as i32,
            payload: None,
            serde_version: None,
        }
    }

    /// The type, if this build knows the number.
    pub fn kind(&self) -> Option<MessageType> {
        MessageType::try_from(self.message_type).ok()
    }

    /// Its type's name, as metrics label requests (`REQUEST_SLOTS`).
    pub fn name(&self) -> &'static str {
        self.kind().map_or("UNKNOWN", |k| k.as_str_name())
    }

    /// Decodes the payload as `M` (a null payload decodes as the default message).
    /// Decodes the payload, refusing one that would decode into more than
    /// [`MAX_DECODE_COST`] (`switchyard_frame::proto_cost`): a control
    /// message of many empty repeated elements must not allocate gigabytes.
    pub fn decode_payload<M: prost::Message + Default>(&self) -> Result<M, PayloadError> {
        let payload = self.payload.clone().unwrap_or_default();
        let cost = switchyard_frame::proto_cost::decode_cost(&payload);
        if cost > MAX_DECODE_COST {
            metrics::counter!("switchyard_decode_refused_total", "protocol" => "celeborn")
                .increment(1);
            return Err(PayloadError::TooLarge {
                cost_mib: cost >> 20,
                limit_mib: MAX_DECODE_COST >> 20,
            });
        }
        Ok(M::decode(payload)?)
    }

    /// The push/fetch-port form: `i32 type, i32 length, payload` (a null payload is
    /// written with length 0, as 0.6+ `toByteBuffer` does).
    pub fn to_bytes(&self) -> Bytes {
        let payload = self.payload.as_deref().unwrap_or_default();
        let mut dst = BytesMut::with_capacity(8 + payload.len());
        dst.put_i32(self.message_type);
        // Protobuf payloads are far below 2 GiB; prost itself refuses larger messages.
        dst.put_i32(payload.len() as i32);
        dst.put_slice(payload);
        dst.freeze()
    }

    /// Parses the push/fetch-port form. Like Java's `fromByteBuffer`, a first `i32` that
    /// is not a known type number means "not a TransportMessage" (a legacy body), reported
    /// as `Ok(None)`.
    pub fn from_bytes(mut bytes: Bytes) -> Result<Option<Self>, FrameError> {
        if bytes.len() < 4 {
            return Err(FrameError::BadTransportMessage(
                "shorter than its type field",
            ));
        }
        let message_type = bytes.get_i32();
        if MessageType::try_from(message_type).is_err() {
            return Ok(None);
        }
        if bytes.len() < 4 {
            return Err(FrameError::BadTransportMessage("truncated payload length"));
        }
        let len = bytes.get_i32();
        let len = usize::try_from(len)
            .map_err(|_| FrameError::BadTransportMessage("negative payload length"))?;
        if len != bytes.len() {
            return Err(FrameError::BadTransportMessage(
                "payload length disagrees with the body length",
            ));
        }
        Ok(Some(Self {
            message_type,
            payload: Some(bytes),
            serde_version: None,
        }))
    }
}

/// What an RpcRequest body on the push or fetch port holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataPlaneBody {
    /// The normal form since 0.3: a TransportMessage.
    Transport(TransportMessage),
    /// The pre-protobuf form: a legacy OpenStream, OpenStreamWithCredit,
    /// PushDataHandShake, RegionStart or RegionFinish.
    Legacy(Message),
}

impl DataPlaneBody {
    /// Decodes an RpcRequest body the way the JVM worker does (`FetchHandler` /
    /// `PushDataHandler`): TransportMessage first, the legacy form as a fallback.
    pub fn decode(body: Bytes) -> Result<Self, FrameError> {
        match TransportMessage::from_bytes(body.clone())? {
            Some(message) => Ok(DataPlaneBody::Transport(message)),
            None => Message::decode_legacy(body).map(DataPlaneBody::Legacy),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::OpenStream;
    use crate::proto::{PbBufferStreamEnd, StreamType};

    #[test]
    fn data_plane_form_matches_java_to_byte_buffer() {
        // TransportMessage(BUFFER_STREAM_END, PbBufferStreamEnd{ChunkStream, 77}).toByteBuffer()
        let tm = TransportMessage::new(
            MessageType::BufferStreamEnd,
            &PbBufferStreamEnd {
                stream_type: StreamType::ChunkStream as i32,
                stream_id: 77,
            },
        );
        let bytes = tm.to_bytes();
        assert_eq!(&bytes[..], &[0, 0, 0, 60, 0, 0, 0, 2, 0x10, 77]);
        let back = TransportMessage::from_bytes(bytes).unwrap().unwrap();
        assert_eq!(back, tm);
        let pb: PbBufferStreamEnd = back.decode_payload().unwrap();
        assert_eq!(pb.stream_id, 77);
    }

    #[test]
    fn amplifying_payloads_are_refused_before_decoding() {
        use crate::proto::{PbPartitionLocation, PbReserveSlots};
        // ReserveSlots with 2M empty primary locations (field 3): 4 MB on
        // the wire, about 0.5 GB once decoded.
        let mut payload = vec![0x0a, 0x01, b'a'];
        for _ in 0..2_000_000 {
            payload.extend_from_slice(&[0x1a, 0x00]);
        }
        let tm = TransportMessage {
            message_type: MessageType::ReserveSlots as i32,
            payload: Some(Bytes::from(payload)),
            serde_version: None,
        };
        let e = tm.decode_payload::<PbReserveSlots>().unwrap_err();
        assert!(matches!(e, PayloadError::TooLarge { .. }), "{e}");
        assert!(e.to_string().contains("MiB allowed"), "{e}");
        // The same message with a realistic list decodes.
        let ok = PbReserveSlots {
            application_id: "a".into(),
            primary_locations: (0..10_000)
                .map(|id| PbPartitionLocation {
                    id,
                    host: "10.0.0.1".into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let tm = TransportMessage::new(MessageType::ReserveSlots, &ok);
        assert_eq!(tm.decode_payload::<PbReserveSlots>().unwrap(), ok);
    }

    #[test]
    fn null_payload_is_written_as_empty() {
        let tm = TransportMessage::without_payload(MessageType::OneWayMessageResponse);
        assert_eq!(&tm.to_bytes()[..], &[0, 0, 0, 40, 0, 0, 0, 0]);
    }

    #[test]
    fn legacy_body_falls_back() {
        // OpenStream("app-1-0", "3-0-0", 0, MAX).toByteBuffer() from the 0.5.4 jar: the first
        // i32 is 0x06000000, not a MessageType number.
        let legacy = Bytes::from_static(
            b"\x06\x00\x00\x00\x07app-1-0\x00\x00\x00\x053-0-0\x00\x00\x00\x00\x7f\xff\xff\xff",
        );
        assert_eq!(
            DataPlaneBody::decode(legacy).unwrap(),
            DataPlaneBody::Legacy(Message::OpenStream(OpenStream {
                shuffle_key: "app-1-0".into(),
                file_name: "3-0-0".into(),
                start_map_index: 0,
                end_map_index: i32::MAX,
            }))
        );
    }

    #[test]
    fn malformed_bodies_are_errors() {
        for bad in [
            &b"\x00\x00"[..],                             // short type
            &b"\x00\x00\x00\x3c\x00\x00"[..],             // short length
            &b"\x00\x00\x00\x3c\xff\xff\xff\xff"[..],     // negative length
            &b"\x00\x00\x00\x3c\x00\x00\x00\x05\x01"[..], // truncated payload
        ] {
            assert!(
                DataPlaneBody::decode(Bytes::copy_from_slice(bad)).is_err(),
                "{bad:02x?}"
            );
        }
    }
}
