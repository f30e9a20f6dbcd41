//! Authentication on the worker's data ports (push, fetch), when it is on:
//! a connection not bound to an application yet may only run the SASL
//! handshake; its pushes and fetches are refused.

use super::state::WorkerState;
use crate::auth::{self, Answer};
use crate::frame::{Message, StreamChunkSlice};
use crate::proto::{MessageType, PbChunkFetchRequest};
use crate::server::conn::Replier;
use crate::server::error::CelebornError;
use crate::transport_message::TransportMessage;

/// Answers `message` when the connection has not authenticated yet: a
/// handshake step, or a refusal. False when the message may go on (auth
/// off, or the connection is bound).
pub(crate) async fn unauthenticated(
    state: &WorkerState,
    port: &'static str,
    message: &Message,
    replier: &Replier,
) -> bool {
    let Some(secrets) = state.auth() else {
        return false;
    };
    let session = replier.session();
    if session.identity().is_some() {
        return false;
    }
    let refused = CelebornError::NotAuthenticated;
    let frame = match message {
        // A 0.5+ chunk fetch rides in an RPC request, but is answered with a
        // chunk frame.
        Message::RpcRequest { body, .. } if chunk_fetch(body).is_some() => {
            Some(Message::ChunkFetchFailure {
                slice: chunk_fetch(body).expect("just checked"),
                error: refused.client_text(),
            })
        }
        Message::RpcRequest { request_id, body } => {
            secrets.prefetch_for(body).await;
            match auth::handshake(session, secrets, false, body.clone()) {
                Answer::Reply(body) => Some(Message::RpcResponse {
                    request_id: *request_id,
                    body,
                }),
                Answer::Fail(e) => {
                    e.count(port);
                    Some(Message::RpcFailure {
                        request_id: *request_id,
                        error: e.client_text(),
                    })
                }
            }
        }
        // Upstream drops these unanswered; an answer lets the client fail now.
        Message::PushData(p) => Some(Message::RpcFailure {
            request_id: p.request_id,
            error: refused.client_text(),
        }),
        Message::PushMergedData(p) => Some(Message::RpcFailure {
            request_id: p.request_id,
            error: refused.client_text(),
        }),
        Message::ChunkFetchRequest(slice) => Some(Message::ChunkFetchFailure {
            slice: *slice,
            error: refused.client_text(),
        }),
        _ => None,
    };
    if !matches!(message, Message::RpcRequest { body, .. } if chunk_fetch(body).is_none()) {
        refused.count(port);
    }
    if let Some(frame) = frame {
        replier.send(frame).await;
    }
    true
}

/// The slice of a TransportMessage-form chunk fetch, if `body` is one.
fn chunk_fetch(body: &bytes::Bytes) -> Option<StreamChunkSlice> {
    let tm = TransportMessage::from_bytes(body.clone()).ok()??;
    if tm.kind() != Some(MessageType::ChunkFetchRequest) {
        return None;
    }
    let s = tm
        .decode_payload::<PbChunkFetchRequest>()
        .ok()?
        .stream_chunk_slice
        .unwrap_or_default();
    Some(StreamChunkSlice {
        stream_id: s.stream_id,
        chunk_index: s.chunk_index,
        offset: s.offset,
        len: s.len,
    })
}
