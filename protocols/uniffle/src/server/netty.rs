//! The Netty data plane (`GRPC_NETTY` clients): a TCP server speaking
//! [`UniffleCodec`] frames. Requests on one connection run concurrently and
//! are answered in completion order, matched by request id.

use std::net::SocketAddr;
use std::sync::Arc;

use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use super::core::{IncomingBlock, ShuffleServerCore};
use crate::error::UniffleError;
use crate::netty::{
    BufferSegment, GetLocalShuffleDataResponse, GetLocalShuffleIndexResponse,
    GetMemoryShuffleDataResponse, Message, ResponseHead, UniffleCodec,
};
use crate::proto::StatusCode;

/// Accepts connections until `cancel` fires.
pub async fn serve(
    listener: TcpListener,
    core: Arc<ShuffleServerCore>,
    max_frame_size: usize,
    cancel: CancellationToken,
) {
    loop {
        let (stream, peer) = tokio::select! {
            _ = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "netty accept failed");
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let core = core.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(stream, peer, core, max_frame_size, cancel).await {
                tracing::debug!(%peer, error = %e, "netty connection closed");
            }
        });
    }
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    core: Arc<ShuffleServerCore>,
    max_frame_size: usize,
    cancel: CancellationToken,
) -> Result<(), crate::netty::CodecError> {
    let (read, mut write) = stream.into_split();
    let mut frames = FramedRead::new(read, UniffleCodec::new(max_frame_size));
    let (tx, mut rx) = mpsc::channel::<Message>(64);
    // Replies are written as header + body straight from the data's own
    // buffer: a 14 MiB read is never copied into a frame buffer.
    let writer = tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            let (head, body) = match m.frame_parts() {
                Ok(parts) => parts,
                Err(e) => {
                    tracing::error!(error = %e, "cannot encode a netty reply");
                    return;
                }
            };
            let written = async {
                write.write_all(&head).await?;
                if !body.is_empty() {
                    write.write_all(&body).await?;
                }
                Ok::<_, std::io::Error>(())
            };
            if let Err(e) = written.await {
                tracing::debug!(error = %e, "netty write failed");
                return;
            }
        }
    });
    loop {
        let frame = tokio::select! {
            _ = cancel.cancelled() => break,
            f = frames.next() => f,
        };
        let message = match frame {
            None => break,
            Some(Ok(m)) => m,
            Some(Err(e)) => {
                // A malformed frame leaves the stream unsynchronised: close it.
                tracing::warn!(%peer, error = %e, "bad netty frame; closing connection");
                metrics::counter!("switchyard_uniffle_netty_bad_frames_total").increment(1);
                break;
            }
        };
        let core = core.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            if let Some(reply) = handle(&core, message).await {
                let _ = tx.send(reply).await;
            }
        });
    }
    drop(tx);
    let _ = writer.await;
    Ok(())
}

fn head(request_id: i64, r: &Result<impl Sized, UniffleError>) -> ResponseHead {
    match r {
        Ok(_) => ResponseHead::new(request_id, StatusCode::Success, None),
        Err(e) => {
            tracing::debug!(error = %e, "netty request failed");
            ResponseHead::new(request_id, e.status(), Some(e.to_string()))
        }
    }
}

async fn handle(core: &ShuffleServerCore, message: Message) -> Option<Message> {
    match message {
        Message::SendShuffleData(r) => {
            let partitions = r
                .partitions
                .into_iter()
                .map(|p| {
                    let blocks = p
                        .blocks
                        .into_iter()
                        .map(|b| IncomingBlock {
                            block_id: b.block_id,
                            length: b.length,
                            uncompress_length: b.uncompress_length,
                            crc: b.crc,
                            task_attempt_id: b.task_attempt_id,
                            data: b.data,
                        })
                        .collect();
                    (p.partition_id, blocks)
                })
                .collect();
            let result = core
                .send_shuffle_data(&r.app_id, r.shuffle_id, r.require_buffer_id, partitions)
                .await;
            Some(Message::RpcResponse(head(r.request_id, &result)))
        }
        Message::GetLocalShuffleIndex(r) => {
            let result = core
                .local_index(&r.app_id, r.shuffle_id, r.partition_id)
                .await;
            let head = head(r.request_id, &result);
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
            let head = head(r.request_id, &result);
            let data = result.unwrap_or_default();
            Some(Message::GetMemoryShuffleDataResponse(
                GetMemoryShuffleDataResponse {
                    head,
                    segments: data
                        .segments
                        .iter()
                        .map(|s| BufferSegment {
                            block_id: s.block_id,
                            offset: s.offset as i32,
                            length: s.length,
                            uncompress_length: s.uncompress_length,
                            crc: s.crc,
                            task_attempt_id: s.task_attempt_id,
                        })
                        .collect(),
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
        head: head(r.request_id, &result),
        data: result.unwrap_or_default(),
    })
}
