//! The Netty data plane (`GRPC_NETTY` clients): its port on the shared frame server
//! (`switchyard_frame::server`), which runs the requests of a connection concurrently
//! and answers them in completion order, matched by request id. This turns requests
//! into core calls and results into replies.

use std::sync::Arc;

use switchyard_frame::server::{Handler, Replier};

use super::core::ShuffleServerCore;
use super::wire::{self, Transport};
use crate::error::UniffleError;
use crate::netty::{
    GetLocalShuffleDataResponse, GetLocalShuffleIndexResponse, GetMemoryShuffleDataResponse,
    Message, ResponseHead,
};
use crate::proto::StatusCode;

/// The handler of the Netty port.
pub struct NettyPort {
    core: Arc<ShuffleServerCore>,
}

impl NettyPort {
    pub fn new(core: Arc<ShuffleServerCore>) -> Arc<Self> {
        Arc::new(NettyPort { core })
    }
}

impl Handler<Message> for NettyPort {
    fn port(&self) -> &'static str {
        "netty"
    }

    async fn handle(self: Arc<Self>, message: Message, replier: Replier<Message>) {
        // Data reads take their reply room before they read, so a client that does
        // not read its socket stops getting data read for it.
        let room = match &message {
            Message::GetLocalShuffleData(r) => Some(r.length),
            Message::GetMemoryShuffleData(r) => Some(r.read_buffer_size),
            _ => None,
        };
        let reserved = match room {
            Some(len) => match replier.reserve(usize::try_from(len).unwrap_or(0)).await {
                Some(bytes) => Some(bytes),
                None => return, // the connection is gone
            },
            None => None,
        };
        if let Some(reply) = handle(&self.core, message).await {
            match reserved {
                Some(bytes) => replier.send_reserved(reply, bytes).await,
                None => replier.send(reply).await,
            };
        }
    }
}

fn head(request_id: i64, op: &'static str, r: &Result<impl Sized, UniffleError>) -> ResponseHead {
    match r {
        Ok(_) => ResponseHead::new(request_id, StatusCode::Success, None),
        Err(e) => ResponseHead::new(
            request_id,
            wire::failed(Transport::Netty, op, e),
            Some(e.to_string()),
        ),
    }
}

async fn handle(core: &ShuffleServerCore, message: Message) -> Option<Message> {
    match message {
        Message::SendShuffleData(r) => {
            let partitions = r
                .partitions
                .into_iter()
                .map(wire::netty_partition)
                .collect();
            let result = core
                .send_shuffle_data(&r.app_id, r.shuffle_id, r.require_buffer_id, partitions)
                .await;
            Some(Message::RpcResponse(head(
                r.request_id,
                "sendShuffleData",
                &result,
            )))
        }
        Message::GetLocalShuffleIndex(r) => {
            let result = core
                .local_index(&r.app_id, r.shuffle_id, r.partition_id)
                .await;
            let head = head(r.request_id, "getLocalShuffleIndex", &result);
            let index = result.unwrap_or_default();
            Some(Message::GetLocalShuffleIndexResponse(
                GetLocalShuffleIndexResponse {
                    head,
                    data_file_len: index.data_len as i64,
                    index_data: index.index,
                },
            ))
        }
        Message::GetLocalShuffleData(r) => Some(local_data(core, r).await),
        // Our index carries no storage ids, so 0.10 clients send type 5; a
        // type 24/25 names the one logical stream all the same.
        Message::GetLocalShuffleDataV2(r) => Some(local_data(core, r.base).await),
        Message::GetLocalShuffleDataV3(r) => Some(local_data(core, r.base).await),
        Message::GetMemoryShuffleData(r) => {
            let result = r
                .expected_task_ids()
                .map_err(|e| UniffleError::InvalidRequest(format!("expected task ids bitmap: {e}")))
                .and_then(|filter| {
                    core.memory_data(
                        &r.app_id,
                        r.shuffle_id,
                        r.partition_id,
                        r.last_block_id,
                        r.read_buffer_size as i64,
                        filter.as_ref(),
                    )
                });
            let head = head(r.request_id, "getMemoryShuffleData", &result);
            let data = result.unwrap_or_default();
            Some(Message::GetMemoryShuffleDataResponse(
                GetMemoryShuffleDataResponse {
                    head,
                    segments: data.segments.iter().map(Into::into).collect(),
                    data: data.data,
                },
            ))
        }
        Message::GetSortedShuffleData(r) => Some(Message::RpcResponse(ResponseHead::new(
            r.request_id,
            StatusCode::InternalError,
            Some("remote merge is not supported".to_string()),
        ))),
        // Responses are for clients; a peer that sends one is confused.
        other => {
            tracing::warn!(kind = ?other.message_type(), "unexpected netty message from a client");
            None
        }
    }
}

async fn local_data(
    core: &ShuffleServerCore,
    r: crate::netty::GetLocalShuffleDataRequest,
) -> Message {
    let result = core
        .local_data(&r.app_id, r.shuffle_id, r.partition_id, r.offset, r.length)
        .await;
    Message::GetLocalShuffleDataResponse(GetLocalShuffleDataResponse {
        head: head(r.request_id, "getLocalShuffleData", &result),
        data: result.unwrap_or_default(),
    })
}
