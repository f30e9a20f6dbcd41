//! The message types of the Netty data plane and their dispatch.
//!
//! Type ids are upstream `Message.Type` (`common/.../netty/protocol/Message.java`).

use std::fmt;

use bytes::{Bytes, BytesMut};

use super::error::CodecError;
use super::requests::{
    GetLocalShuffleDataRequest, GetLocalShuffleDataV2Request, GetLocalShuffleDataV3Request,
    GetLocalShuffleIndexRequest, GetMemoryShuffleDataRequest, GetSortedShuffleDataRequest,
    SendShuffleDataRequest,
};
use super::responses::{
    GetLocalShuffleDataResponse, GetLocalShuffleIndexResponse, GetLocalShuffleIndexV2Response,
    GetMemoryShuffleDataResponse, GetMemoryShuffleDataV2Response, GetSortedShuffleDataResponse,
    ResponseHead,
};
use switchyard_frame::{FieldReader as Reader, WireError};

/// The message types this codec carries, with their wire ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageType {
    /// Status reply to a send request.
    RpcResponse = 0,
    /// Block upload.
    SendShuffleDataRequest = 3,
    /// Index file read.
    GetLocalShuffleIndexRequest = 4,
    /// Data file range read.
    GetLocalShuffleDataRequest = 5,
    /// Memory read.
    GetMemoryShuffleDataRequest = 6,
    /// Index reply.
    GetLocalShuffleIndexResponse = 14,
    /// Data file reply.
    GetLocalShuffleDataResponse = 15,
    /// Memory reply.
    GetMemoryShuffleDataResponse = 16,
    /// Sorted (remote merge) read, 0.10+.
    GetSortedShuffleDataRequest = 21,
    /// Sorted (remote merge) reply, 0.10+.
    GetSortedShuffleDataResponse = 22,
    /// Index reply with storage ids, 0.10+.
    GetLocalShuffleIndexV2Response = 23,
    /// Data read with a storage id, 0.10+.
    GetLocalShuffleDataV2Request = 24,
    /// Data read with read-ahead hints, 0.10.0.
    GetLocalShuffleDataV3Request = 25,
    /// Memory reply with an end flag, post-0.10 master.
    GetMemoryShuffleDataV2Response = 26,
}

impl MessageType {
    /// The name a request of this type has in metrics.
    pub fn name(self) -> &'static str {
        use MessageType::*;
        match self {
            SendShuffleDataRequest => "sendShuffleData",
            GetLocalShuffleIndexRequest => "getLocalShuffleIndex",
            GetLocalShuffleDataRequest => "getLocalShuffleData",
            GetMemoryShuffleDataRequest => "getMemoryShuffleData",
            GetSortedShuffleDataRequest => "getSortedShuffleData",
            GetLocalShuffleDataV2Request => "getLocalShuffleDataV2",
            GetLocalShuffleDataV3Request => "getLocalShuffleDataV3",
            _ => "other",
        }
    }

    /// The type for a header's type byte.
    pub fn from_id(id: u8) -> Result<Self, CodecError> {
        use MessageType::*;
        Ok(match id {
            0 => RpcResponse,
            3 => SendShuffleDataRequest,
            4 => GetLocalShuffleIndexRequest,
            5 => GetLocalShuffleDataRequest,
            6 => GetMemoryShuffleDataRequest,
            14 => GetLocalShuffleIndexResponse,
            15 => GetLocalShuffleDataResponse,
            16 => GetMemoryShuffleDataResponse,
            21 => GetSortedShuffleDataRequest,
            22 => GetSortedShuffleDataResponse,
            23 => GetLocalShuffleIndexV2Response,
            24 => GetLocalShuffleDataV2Request,
            25 => GetLocalShuffleDataV3Request,
            26 => GetMemoryShuffleDataV2Response,
            _ => {
                return Err(match unsupported_type_name(id) {
                    Some(name) => CodecError::UnsupportedMessageType { id, name },
                    None => WireError::UnknownMessageType(id).into(),
                })
            }
        })
    }

    /// The wire id.
    pub fn id(self) -> u8 {
        self as u8
    }

    /// Whether frames of this type carry a body after the message part.
    pub fn has_body(self) -> bool {
        use MessageType::*;
        matches!(
            self,
            GetLocalShuffleIndexResponse
                | GetLocalShuffleDataResponse
                | GetMemoryShuffleDataResponse
                | GetSortedShuffleDataResponse
                | GetLocalShuffleIndexV2Response
                | GetMemoryShuffleDataV2Response
        )
    }
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}({})", self, self.id())
    }
}

/// Upstream declares these ids but sends the calls over gRPC; naming them makes the error
/// say "wrong transport" rather than "garbage".
fn unsupported_type_name(id: u8) -> Option<&'static str> {
    Some(match id {
        1 => "SHUFFLE_REGISTER_REQUEST",
        2 => "SHUFFLE_UNREGISTER_REQUEST",
        7 => "SHUFFLE_COMMIT_REQUEST",
        8 => "REPORT_SHUFFLE_RESULT_REQUEST",
        9 => "GET_SHUFFLE_RESULT_REQUEST",
        10 => "GET_SHUFFLE_RESULT_FOR_MULTI_PART_REQUEST",
        11 => "FINISH_SHUFFLE_REQUEST",
        12 => "REQUIRE_BUFFER_REQUEST",
        13 => "APP_HEART_BEAT_REQUEST",
        17 => "SHUFFLE_COMMIT_RESPONSE",
        18 => "GET_SHUFFLE_RESULT_RESPONSE",
        19 => "GET_SHUFFLE_RESULT_FOR_MULTI_PART_RESPONSE",
        20 => "REQUIRE_BUFFER_RESPONSE",
        _ => return None,
    })
}

/// One decoded frame.
///
/// A server must answer each request with the response type the client casts to
/// (3 → `RpcResponse`; 4 → 14, or 23 for 0.10+ clients; 5/24/25 → 15; 6 → 16), echoing
/// the request id; an `RpcResponse` sent for a read request makes the Java client throw.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // variants are moved, not stored in bulk
pub enum Message {
    /// Type 0.
    RpcResponse(ResponseHead),
    /// Type 3.
    SendShuffleData(SendShuffleDataRequest),
    /// Type 4.
    GetLocalShuffleIndex(GetLocalShuffleIndexRequest),
    /// Type 5.
    GetLocalShuffleData(GetLocalShuffleDataRequest),
    /// Type 6.
    GetMemoryShuffleData(GetMemoryShuffleDataRequest),
    /// Type 14.
    GetLocalShuffleIndexResponse(GetLocalShuffleIndexResponse),
    /// Type 15.
    GetLocalShuffleDataResponse(GetLocalShuffleDataResponse),
    /// Type 16.
    GetMemoryShuffleDataResponse(GetMemoryShuffleDataResponse),
    /// Type 21.
    GetSortedShuffleData(GetSortedShuffleDataRequest),
    /// Type 22.
    GetSortedShuffleDataResponse(GetSortedShuffleDataResponse),
    /// Type 23.
    GetLocalShuffleIndexV2Response(GetLocalShuffleIndexV2Response),
    /// Type 24.
    GetLocalShuffleDataV2(GetLocalShuffleDataV2Request),
    /// Type 25.
    GetLocalShuffleDataV3(GetLocalShuffleDataV3Request),
    /// Type 26.
    GetMemoryShuffleDataV2Response(GetMemoryShuffleDataV2Response),
}

impl Message {
    /// The wire type of this message.
    pub fn message_type(&self) -> MessageType {
        match self {
            Message::RpcResponse(_) => MessageType::RpcResponse,
            Message::SendShuffleData(_) => MessageType::SendShuffleDataRequest,
            Message::GetLocalShuffleIndex(_) => MessageType::GetLocalShuffleIndexRequest,
            Message::GetLocalShuffleData(_) => MessageType::GetLocalShuffleDataRequest,
            Message::GetMemoryShuffleData(_) => MessageType::GetMemoryShuffleDataRequest,
            Message::GetLocalShuffleIndexResponse(_) => MessageType::GetLocalShuffleIndexResponse,
            Message::GetLocalShuffleDataResponse(_) => MessageType::GetLocalShuffleDataResponse,
            Message::GetMemoryShuffleDataResponse(_) => MessageType::GetMemoryShuffleDataResponse,
            Message::GetSortedShuffleData(_) => MessageType::GetSortedShuffleDataRequest,
            Message::GetSortedShuffleDataResponse(_) => MessageType::GetSortedShuffleDataResponse,
            Message::GetLocalShuffleIndexV2Response(_) => {
                MessageType::GetLocalShuffleIndexV2Response
            }
            Message::GetLocalShuffleDataV2(_) => MessageType::GetLocalShuffleDataV2Request,
            Message::GetLocalShuffleDataV3(_) => MessageType::GetLocalShuffleDataV3Request,
            Message::GetMemoryShuffleDataV2Response(_) => {
                MessageType::GetMemoryShuffleDataV2Response
            }
        }
    }

    /// The request id (of the request, or of the request a response answers).
    pub fn request_id(&self) -> i64 {
        match self {
            Message::RpcResponse(m) => m.request_id,
            Message::SendShuffleData(m) => m.request_id,
            Message::GetLocalShuffleIndex(m) => m.request_id,
            Message::GetLocalShuffleData(m) => m.request_id,
            Message::GetMemoryShuffleData(m) => m.request_id,
            Message::GetLocalShuffleIndexResponse(m) => m.head.request_id,
            Message::GetLocalShuffleDataResponse(m) => m.head.request_id,
            Message::GetMemoryShuffleDataResponse(m) => m.head.request_id,
            Message::GetSortedShuffleData(m) => m.request_id,
            Message::GetSortedShuffleDataResponse(m) => m.head.request_id,
            Message::GetLocalShuffleIndexV2Response(m) => m.base.head.request_id,
            Message::GetLocalShuffleDataV2(m) => m.base.request_id,
            Message::GetLocalShuffleDataV3(m) => m.base.request_id,
            Message::GetMemoryShuffleDataV2Response(m) => m.base.head.request_id,
        }
    }

    /// The frame body (the bulk payload of data-carrying responses), if this type has one.
    pub fn body(&self) -> Option<&Bytes> {
        match self {
            Message::GetLocalShuffleIndexResponse(m) => Some(&m.index_data),
            Message::GetLocalShuffleDataResponse(m) => Some(&m.data),
            Message::GetMemoryShuffleDataResponse(m) => Some(&m.data),
            Message::GetSortedShuffleDataResponse(m) => Some(&m.data),
            Message::GetLocalShuffleIndexV2Response(m) => Some(&m.base.index_data),
            Message::GetMemoryShuffleDataV2Response(m) => Some(&m.base.data),
            _ => None,
        }
    }

    /// Writes the message part (everything between the header and the body).
    pub(crate) fn encode_fields(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        match self {
            Message::RpcResponse(m) => m.encode(dst),
            Message::SendShuffleData(m) => m.encode(dst),
            Message::GetLocalShuffleIndex(m) => m.encode(dst),
            Message::GetLocalShuffleData(m) => m.encode(dst),
            Message::GetMemoryShuffleData(m) => m.encode(dst),
            Message::GetLocalShuffleIndexResponse(m) => m.encode(dst),
            Message::GetLocalShuffleDataResponse(m) => m.encode(dst),
            Message::GetMemoryShuffleDataResponse(m) => m.encode(dst),
            Message::GetSortedShuffleData(m) => m.encode(dst),
            Message::GetSortedShuffleDataResponse(m) => m.encode(dst),
            Message::GetLocalShuffleIndexV2Response(m) => m.encode(dst),
            Message::GetLocalShuffleDataV2(m) => m.encode(dst),
            Message::GetLocalShuffleDataV3(m) => m.encode(dst),
            Message::GetMemoryShuffleDataV2Response(m) => m.encode(dst),
        }
    }

    /// Decodes one frame whose header said `kind`, from its message part and body.
    ///
    /// The message part must be consumed exactly: the Java encoder refuses to send a frame
    /// whose declared message length differs from what it wrote, so a mismatch here means
    /// a corrupt or foreign stream, and for responses it would shift the body.
    pub(crate) fn decode(
        kind: MessageType,
        mut fields: Reader,
        body: Bytes,
    ) -> Result<Self, CodecError> {
        if !kind.has_body() && !body.is_empty() {
            return Err(CodecError::UnexpectedBody {
                message: kind,
                len: body.len(),
            });
        }
        let r = &mut fields;
        let message = match kind {
            MessageType::RpcResponse => Message::RpcResponse(ResponseHead::decode(r)?),
            MessageType::SendShuffleDataRequest => {
                Message::SendShuffleData(SendShuffleDataRequest::decode(r)?)
            }
            MessageType::GetLocalShuffleIndexRequest => {
                Message::GetLocalShuffleIndex(GetLocalShuffleIndexRequest::decode(r)?)
            }
            MessageType::GetLocalShuffleDataRequest => {
                Message::GetLocalShuffleData(GetLocalShuffleDataRequest::decode(r)?)
            }
            MessageType::GetMemoryShuffleDataRequest => {
                Message::GetMemoryShuffleData(GetMemoryShuffleDataRequest::decode(r)?)
            }
            MessageType::GetLocalShuffleIndexResponse => Message::GetLocalShuffleIndexResponse(
                GetLocalShuffleIndexResponse::decode(r, body)?,
            ),
            MessageType::GetLocalShuffleDataResponse => {
                Message::GetLocalShuffleDataResponse(GetLocalShuffleDataResponse::decode(r, body)?)
            }
            MessageType::GetMemoryShuffleDataResponse => Message::GetMemoryShuffleDataResponse(
                GetMemoryShuffleDataResponse::decode(r, body)?,
            ),
            MessageType::GetSortedShuffleDataRequest => {
                Message::GetSortedShuffleData(GetSortedShuffleDataRequest::decode(r)?)
            }
            MessageType::GetSortedShuffleDataResponse => Message::GetSortedShuffleDataResponse(
                GetSortedShuffleDataResponse::decode(r, body)?,
            ),
            MessageType::GetLocalShuffleIndexV2Response => Message::GetLocalShuffleIndexV2Response(
                GetLocalShuffleIndexV2Response::decode(r, body)?,
            ),
            MessageType::GetLocalShuffleDataV2Request => {
                Message::GetLocalShuffleDataV2(GetLocalShuffleDataV2Request::decode(r)?)
            }
            MessageType::GetLocalShuffleDataV3Request => {
                Message::GetLocalShuffleDataV3(GetLocalShuffleDataV3Request::decode(r)?)
            }
            MessageType::GetMemoryShuffleDataV2Response => Message::GetMemoryShuffleDataV2Response(
                GetMemoryShuffleDataV2Response::decode(r, body)?,
            ),
        };
        // Arrays read apart and not taken would be bytes the decoder skipped.
        if r.remaining() != 0 || r.arrays_left() != 0 {
            return Err(CodecError::TrailingBytes {
                message: kind,
                unread: r.remaining(),
            });
        }
        Ok(message)
    }
}
