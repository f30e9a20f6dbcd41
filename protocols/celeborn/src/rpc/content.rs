//! The content of an RPC request or reply: what `JavaSerializerInstance.serialize` /
//! `deserialize` (upstream `common/.../serializer/JavaSerializer.scala`) produce and read.
//!
//! - 0.4/0.5 clients: a Java stream holding a `TransportMessage` with fields
//!   `messageTypeValue` and `payload`, or a `CheckExistence`, or (replies) a `Boolean`.
//! - 0.6+ clients: the same, and `TransportMessage` also has `serdeVersion` (V1). A content
//!   starting with `0xFF` is the V2 form `0xFF, i32 type, i32 length, payload`
//!   (`deserialize` checks that first byte before handing the rest to Java).
//!
//! Replies use the two-field `TransportMessage` form ([`encode_reply`]): a 0.6+ class reads
//! it with `serdeVersion = null` (Java treats the missing field as a compatible change),
//! while a 0.4/0.5 client cannot load `SerdeVersion` at all.

use bytes::{Buf, Bytes, BytesMut};

use super::error::RpcError;
use super::javaser::classes;
use super::javaser::read::{read_single_object, Object, Value};
use super::javaser::write;
use crate::proto::MessageType;
use crate::transport_message::{SerdeVersion, TransportMessage};

/// First byte of a V2 content (`SerdeVersion.V2.getMarker`).
const V2_MARKER: u8 = 0xFF;

/// A decoded RPC content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpcContent {
    /// Every Celeborn control message.
    TransportMessage(TransportMessage),
    /// The endpoint-verifier request: does endpoint `name` exist?
    CheckExistence {
        /// Endpoint name, e.g. `MasterEndpoint`.
        name: String,
    },
    /// The endpoint-verifier reply.
    Boolean(bool),
}

impl RpcContent {
    /// Decodes a content (the rest of an RPC_REQUEST/ONE_WAY body after the envelope, or a
    /// whole RPC_RESPONSE body).
    pub fn decode(content: Bytes) -> Result<Self, RpcError> {
        match content.first() {
            Some(&V2_MARKER) => decode_v2(content.slice(1..)).map(RpcContent::TransportMessage),
            Some(_) => from_java(read_single_object(content)?),
            None => Err(RpcError::Truncated { what: "content" }),
        }
    }

    /// Encodes the content the way a JVM peer of the matching version would: a
    /// `TransportMessage` without `serde_version` in the 0.4/0.5 form, with `V1` in the
    /// 0.6+ form, with `V2` in the V2 form.
    pub fn encode(&self) -> Result<Bytes, RpcError> {
        let mut dst = BytesMut::new();
        match self {
            RpcContent::TransportMessage(tm) => match tm.serde_version {
                Some(SerdeVersion::V2) => return Ok(encode_v2(tm)),
                version => write::transport_message(
                    &mut dst,
                    tm.message_type,
                    tm.payload.as_deref(),
                    version,
                )?,
            },
            RpcContent::CheckExistence { name } => write::check_existence(&mut dst, name),
            RpcContent::Boolean(value) => write::boolean(&mut dst, *value),
        }
        Ok(dst.freeze())
    }
}

/// The RPC_RESPONSE body for a control-message reply, in the two-field form every client
/// version accepts (`serde_version` is not sent).
pub fn encode_reply(reply: &TransportMessage) -> Result<Bytes, RpcError> {
    let mut dst = BytesMut::new();
    write::transport_message(&mut dst, reply.message_type, reply.payload.as_deref(), None)?;
    Ok(dst.freeze())
}

/// The RPC_RESPONSE body answering `CheckExistence`.
pub fn encode_boolean(value: bool) -> Bytes {
    let mut dst = BytesMut::new();
    write::boolean(&mut dst, value);
    dst.freeze()
}

fn decode_v2(mut bytes: Bytes) -> Result<TransportMessage, RpcError> {
    if bytes.len() < 8 {
        return Err(RpcError::Truncated {
            what: "V2 type and length",
        });
    }
    let message_type = bytes.get_i32();
    let len = bytes.get_i32();
    let n = usize::try_from(len)
        .ok()
        .filter(|&n| n <= bytes.len())
        .ok_or(RpcError::BadLength {
            what: "V2 payload",
            len: i64::from(len),
        })?;
    let payload = bytes.split_to(n);
    if !bytes.is_empty() {
        return Err(RpcError::TrailingBytes(bytes.len()));
    }
    Ok(TransportMessage {
        message_type,
        payload: Some(payload),
        serde_version: Some(SerdeVersion::V2),
    })
}

fn encode_v2(tm: &TransportMessage) -> Bytes {
    let body = tm.to_bytes();
    let mut dst = BytesMut::with_capacity(1 + body.len());
    dst.extend_from_slice(&[V2_MARKER]);
    dst.extend_from_slice(&body);
    dst.freeze()
}

/// Maps a deserialized object onto the classes the RPC layer exchanges.
fn from_java(value: Value) -> Result<RpcContent, RpcError> {
    let Value::Object(object) = value else {
        return Err(RpcError::UnexpectedClass(describe(&value)));
    };
    let class = object.class.name.as_str();
    match class {
        classes::TRANSPORT_MESSAGE => {
            check_suid(&object, classes::TRANSPORT_MESSAGE_SUID)?;
            transport_message(&object).map(RpcContent::TransportMessage)
        }
        classes::CHECK_EXISTENCE => {
            check_suid(&object, classes::CHECK_EXISTENCE_SUID)?;
            match object.field("name") {
                Some(Value::String(name)) => Ok(RpcContent::CheckExistence {
                    name: name.to_string(),
                }),
                _ => Err(RpcError::BadField {
                    class: classes::CHECK_EXISTENCE,
                    field: "name",
                }),
            }
        }
        classes::BOOLEAN => {
            check_suid(&object, classes::BOOLEAN_SUID)?;
            match object.field("value") {
                Some(Value::Bool(b)) => Ok(RpcContent::Boolean(*b)),
                _ => Err(RpcError::BadField {
                    class: classes::BOOLEAN,
                    field: "value",
                }),
            }
        }
        other => Err(RpcError::UnexpectedClass(other.to_string())),
    }
}

fn check_suid(object: &Object, expected: i64) -> Result<(), RpcError> {
    if object.class.suid != expected {
        return Err(RpcError::SuidMismatch {
            class: object.class.name.clone(),
            expected,
            actual: object.class.suid,
        });
    }
    Ok(())
}

fn transport_message(object: &Object) -> Result<TransportMessage, RpcError> {
    let bad = |field| RpcError::BadField {
        class: classes::TRANSPORT_MESSAGE,
        field,
    };
    let mut message_type = match object.field("messageTypeValue") {
        Some(Value::Int(v)) => *v,
        _ => return Err(bad("messageTypeValue")),
    };
    // 0.3 also serialized the enum itself; upstream falls back to it when the number is 0.
    if message_type == MessageType::UnknownMessage as i32 {
        if let Some(Value::Enum { class, constant }) = object.field("type") {
            if class.name == classes::MESSAGE_TYPE {
                message_type = MessageType::from_str_name(constant)
                    .map(|t| t as i32)
                    .unwrap_or(message_type);
            }
        }
    }
    let payload = match object.field("payload") {
        Some(Value::ByteArray(bytes)) => Some(bytes.clone()),
        Some(Value::Null) => None,
        _ => return Err(bad("payload")),
    };
    let serde_version = match object.field("serdeVersion") {
        None | Some(Value::Null) => None,
        Some(Value::Enum { class, constant }) if class.name == classes::SERDE_VERSION => {
            Some(match &**constant {
                "V1" => SerdeVersion::V1,
                "V2" => SerdeVersion::V2,
                other => {
                    return Err(RpcError::UnknownEnumConstant {
                        class: class.name.clone(),
                        constant: other.to_string(),
                    })
                }
            })
        }
        Some(_) => return Err(bad("serdeVersion")),
    };
    Ok(TransportMessage {
        message_type,
        payload,
        serde_version,
    })
}

fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::String(_) => "java.lang.String".into(),
        Value::ByteArray(_) => "[B".into(),
        Value::Enum { class, .. } => class.name.clone(),
        Value::Object(object) => object.class.name.clone(),
        _ => "a primitive".into(),
    }
}
