//! A Rust client of the Celeborn protocol, for tests and benchmarks. It plays
//! the parts of the LifecycleManager (master and worker RPCs) and of the
//! executors (push, fetch), following the Spark client's calls, on the
//! server's own outgoing connection ([`switchyard_celeborn::peer`]).

use std::net::SocketAddr;
use std::ops::Deref;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::mpsc;

use switchyard_celeborn::frame::{Message, Mode, PushData, PushMergedData, StreamChunkSlice};
use switchyard_celeborn::peer::{self, next_request_id};
pub use switchyard_celeborn::peer::{ClientError, Result};
use switchyard_celeborn::proto::*;
use switchyard_celeborn::rpc::{endpoint, RequestMessage, RpcAddress, RpcContent};
use switchyard_celeborn::TransportMessage;

/// What a credit stream delivered.
#[derive(Debug, Default)]
pub struct CreditStreamRead {
    /// One record per READ_DATA, in order.
    pub records: Vec<Bytes>,
    /// Credit granted (initial included).
    pub granted: i64,
}

/// One connection to any Celeborn port, with the protocol's calls. The
/// frame-level calls (`call`, `send`, `subscribe`, `is_closed`) are those of
/// the underlying [`peer::Connection`].
pub struct Connection(peer::Connection);

impl Deref for Connection {
    type Target = peer::Connection;

    fn deref(&self) -> &peer::Connection {
        &self.0
    }
}

impl Connection {
    pub async fn connect(addr: SocketAddr) -> Result<Self> {
        peer::Connection::connect(addr).await.map(Self)
    }

    /// As [`Connection::connect`], leaving from `source` (port chosen by
    /// the kernel) when given.
    pub async fn connect_from(addr: SocketAddr, source: Option<std::net::IpAddr>) -> Result<Self> {
        peer::Connection::connect_from(addr, source).await.map(Self)
    }

    /// An ask to a NettyRpcEnv endpoint; the reply's TransportMessage.
    pub async fn ask(
        &self,
        endpoint_name: &str,
        message: TransportMessage,
    ) -> Result<TransportMessage> {
        let body = RequestMessage {
            sender: None,
            receiver: Some(RpcAddress {
                host: self.addr().ip().to_string(),
                port: self.addr().port() as i32,
            }),
            endpoint: endpoint_name.to_string(),
            content: RpcContent::TransportMessage(message),
        }
        .encode()
        .map_err(|e| ClientError::BadReply(e.to_string()))?;
        let id = next_request_id();
        let reply = self
            .call(
                id,
                Message::RpcRequest {
                    request_id: id,
                    body,
                },
            )
            .await?;
        match RpcContent::decode(reply).map_err(|e| ClientError::BadReply(e.to_string()))? {
            RpcContent::TransportMessage(tm) => Ok(tm),
            other => Err(ClientError::BadReply(format!("{other:?}"))),
        }
    }

    /// The endpoint-verifier handshake: does `name` exist on this port?
    pub async fn verify(&self, name: &str) -> Result<bool> {
        let body = RequestMessage {
            sender: None,
            receiver: None,
            endpoint: endpoint::VERIFIER.to_string(),
            content: RpcContent::CheckExistence {
                name: name.to_string(),
            },
        }
        .encode()
        .map_err(|e| ClientError::BadReply(e.to_string()))?;
        let id = next_request_id();
        let reply = self
            .call(
                id,
                Message::RpcRequest {
                    request_id: id,
                    body,
                },
            )
            .await?;
        match RpcContent::decode(reply).map_err(|e| ClientError::BadReply(e.to_string()))? {
            RpcContent::Boolean(b) => Ok(b),
            other => Err(ClientError::BadReply(format!("{other:?}"))),
        }
    }

    /// Reads one credit stream of a map partition (sub-partitions
    /// `[start, end]`) as the Flink client does: open with `initial_credit`,
    /// grant as much credit as each backlog announces, until the worker's
    /// BUFFER_STREAM_END. `events` is this connection's [`peer::Connection::subscribe`]
    /// receiver; one stream at a time per connection.
    pub async fn read_credit_stream(
        &self,
        events: &mut mpsc::UnboundedReceiver<Message>,
        shuffle_key: &str,
        file_name: &str,
        (start, end): (i32, i32),
        initial_credit: i32,
    ) -> Result<CreditStreamRead> {
        let open = TransportMessage::new(
            MessageType::OpenStream,
            &PbOpenStream {
                shuffle_key: shuffle_key.into(),
                file_name: file_name.into(),
                start_index: start,
                end_index: end,
                initial_credit,
                read_local_shuffle: false,
            },
        );
        let reply = TransportMessage::from_bytes(self.data_rpc(&open).await?)
            .map_err(|e| ClientError::BadReply(e.to_string()))?
            .ok_or_else(|| ClientError::BadReply("empty open reply".into()))?;
        let stream = decode::<PbStreamHandler>(&reply)?.stream_id;
        let mut out = CreditStreamRead {
            records: Vec::new(),
            granted: initial_credit as i64,
        };
        loop {
            let m = tokio::time::timeout(Duration::from_secs(120), events.recv())
                .await
                .map_err(|_| ClientError::Timeout)?
                .ok_or(ClientError::Closed)?;
            match m {
                Message::ReadData { stream_id, body } if stream_id == stream => {
                    if out.records.len() as i64 >= out.granted {
                        return Err(ClientError::BadReply(
                            "data beyond the granted credit".into(),
                        ));
                    }
                    out.records.push(body);
                }
                Message::BacklogAnnouncement { stream_id, backlog } if stream_id == stream => {
                    out.granted += backlog as i64;
                    let grant = TransportMessage::new(
                        MessageType::ReadAddCredit,
                        &PbReadAddCredit {
                            stream_id: stream,
                            credit: backlog,
                        },
                    );
                    self.data_rpc(&grant).await?;
                }
                Message::TransportableError { stream_id, message } if stream_id == stream => {
                    return Err(ClientError::Failure(message));
                }
                Message::RpcRequest { body, .. } => {
                    let tm = TransportMessage::from_bytes(body)
                        .map_err(|e| ClientError::BadReply(e.to_string()))?
                        .ok_or_else(|| ClientError::BadReply("empty request".into()))?;
                    if tm.message_type != MessageType::BufferStreamEnd as i32 {
                        return Err(ClientError::BadReply(format!(
                            "request of type {}",
                            tm.message_type
                        )));
                    }
                    let end: PbBufferStreamEnd = decode(&tm)?;
                    if end.stream_id != stream || end.stream_type != StreamType::CreditStream as i32
                    {
                        return Err(ClientError::BadReply(format!(
                            "{end:?} ends another stream"
                        )));
                    }
                    return Ok(out);
                }
                other => {
                    return Err(ClientError::BadReply(format!(
                        "unexpected frame {:?}",
                        other.message_type()
                    )));
                }
            }
        }
    }

    /// A data-plane RPC (push or fetch port): TransportMessage bytes in, raw reply body out.
    pub async fn data_rpc(&self, message: &TransportMessage) -> Result<Bytes> {
        let id = next_request_id();
        self.call(
            id,
            Message::RpcRequest {
                request_id: id,
                body: message.to_bytes(),
            },
        )
        .await
    }

    /// Registers an application's secret on a master port, as a driver's
    /// first master connection does with `celeborn.auth.enabled`; the
    /// connection then acts for that application.
    pub async fn register_application(&self, app: &str, secret: &str) -> Result<()> {
        let init = TransportMessage::new(
            MessageType::AuthenticationInitiationRequest,
            &PbAuthenticationInitiationRequest {
                version: "1.0".into(),
                auth_enabled: true,
                sasl_mechanisms: Vec::new(),
            },
        );
        let r = TransportMessage::from_bytes(self.data_rpc(&init).await?)
            .ok()
            .flatten()
            .ok_or_else(|| ClientError::BadReply("authentication-init reply".into()))?;
        let _: PbAuthenticationInitiationResponse = decode(&r)?;
        let anonymous = TransportMessage::new(
            MessageType::SaslRequest,
            &PbSaslRequest {
                method: "ANONYMOUS".into(),
                auth_type: PbAuthType::ClientAuth as i32,
                payload: Bytes::new(),
            },
        );
        self.data_rpc(&anonymous).await?;
        let register = TransportMessage::new(
            MessageType::RegisterApplicationRequest,
            &PbRegisterApplicationRequest {
                id: app.into(),
                secret: secret.into(),
            },
        );
        let r = TransportMessage::from_bytes(self.data_rpc(&register).await?)
            .ok()
            .flatten()
            .ok_or_else(|| ClientError::BadReply("registration reply".into()))?;
        let r: PbRegisterApplicationResponse = decode(&r)?;
        if !r.status {
            return Err(ClientError::BadReply("registration refused".into()));
        }
        Ok(())
    }

    /// Authenticates the connection as `app` with SASL DIGEST-MD5, as every
    /// connection but a driver's first does with `celeborn.auth.enabled`.
    pub async fn authenticate(&self, app: &str, secret: &str) -> Result<()> {
        let sasl = |method: &str, payload: Bytes| {
            TransportMessage::new(
                MessageType::SaslRequest,
                &PbSaslRequest {
                    method: method.into(),
                    auth_type: PbAuthType::ConnectionAuth as i32,
                    payload,
                },
            )
        };
        let challenge = self.data_rpc(&sasl("DIGEST-MD5", Bytes::new())).await?;
        let (response, rspauth) =
            switchyard_celeborn::auth::digest::client_response(app, secret.as_bytes(), &challenge)
                .map_err(|e| ClientError::BadReply(e.to_string()))?;
        let got = self.data_rpc(&sasl("", Bytes::from(response))).await?;
        if got != rspauth {
            return Err(ClientError::BadReply(
                "the server's rspauth does not match".into(),
            ));
        }
        Ok(())
    }

    /// Pushes one batch; the reply body (empty = written, else a status byte).
    pub async fn push(&self, shuffle_key: &str, unique_id: &str, batch: Bytes) -> Result<Bytes> {
        self.push_queued(shuffle_key, unique_id, batch).await?.await
    }

    /// Sends one push and returns its reply as a future, so that several can
    /// be in flight: pushes queued one after another go out in that order.
    pub async fn push_queued(
        &self,
        shuffle_key: &str,
        unique_id: &str,
        batch: Bytes,
    ) -> Result<impl std::future::Future<Output = Result<Bytes>> + Send + 'static> {
        let id = next_request_id();
        let frame = Message::PushData(PushData {
            request_id: id,
            mode: Mode::Primary,
            shuffle_key: shuffle_key.into(),
            partition_unique_id: unique_id.into(),
            body: batch,
        });
        self.call_queued(id, frame).await
    }

    /// Pushes several batches of one map to partitions on this worker.
    pub async fn push_merged(
        &self,
        shuffle_key: &str,
        batches: &[(String, Bytes)],
    ) -> Result<Bytes> {
        self.push_merged_as(Mode::Primary, shuffle_key, batches)
            .await
    }

    /// As [`Connection::push_merged`], to the primary or (as a primary
    /// worker forwards its pushes, on the replicate port) the replica copies.
    pub async fn push_merged_as(
        &self,
        mode: Mode,
        shuffle_key: &str,
        batches: &[(String, Bytes)],
    ) -> Result<Bytes> {
        let mut body = BytesMut::new();
        let mut offsets = Vec::new();
        for (_, b) in batches {
            offsets.push(body.len() as i32);
            body.extend_from_slice(b);
        }
        let id = next_request_id();
        self.call(
            id,
            Message::PushMergedData(PushMergedData {
                request_id: id,
                mode,
                shuffle_key: shuffle_key.into(),
                partition_unique_ids: batches.iter().map(|(u, _)| u.clone()).collect(),
                batch_offsets: offsets,
                body: body.freeze(),
            }),
        )
        .await
    }

    /// Fetches one whole chunk of a stream.
    pub async fn fetch_chunk(&self, stream_id: i64, chunk_index: i32) -> Result<Bytes> {
        let id = next_request_id();
        let frame = chunk_fetch_request(id, stream_id, chunk_index);
        self.call_chunk((stream_id, chunk_index), frame).await
    }

    /// Closes a chunk stream as a 0.4+ reader does when it is done with a
    /// partition: PbBufferStreamEnd(ChunkStream), no reply.
    pub async fn end_stream(&self, stream_id: i64) -> Result<()> {
        let end = TransportMessage::new(
            MessageType::BufferStreamEnd,
            &PbBufferStreamEnd {
                stream_type: StreamType::ChunkStream as i32,
                stream_id,
            },
        );
        self.send(Message::RpcRequest {
            request_id: next_request_id(),
            body: end.to_bytes(),
        })
        .await
    }
}

/// The frame of a whole-chunk fetch as a 0.6 client sends it: a
/// PbChunkFetchRequest in an RpcRequest.
pub fn chunk_fetch_request(request_id: i64, stream_id: i64, chunk_index: i32) -> Message {
    let s = StreamChunkSlice::whole_chunk(stream_id, chunk_index);
    let request = TransportMessage::new(
        MessageType::ChunkFetchRequest,
        &PbChunkFetchRequest {
            stream_chunk_slice: Some(PbStreamChunkSlice {
                stream_id: s.stream_id,
                chunk_index: s.chunk_index,
                offset: s.offset,
                len: s.len,
            }),
        },
    );
    Message::RpcRequest {
        request_id,
        body: request.to_bytes(),
    }
}

/// A batch as the Spark client builds it: 16-byte little-endian header
/// (mapId, attemptId, batchId, length) and the data.
pub fn batch(map_id: i32, attempt_id: i32, batch_id: i32, data: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(16 + data.len());
    b.put_i32_le(map_id);
    b.put_i32_le(attempt_id);
    b.put_i32_le(batch_id);
    b.put_i32_le(data.len() as i32);
    b.extend_from_slice(data);
    b.freeze()
}

/// Splits a chunk back into batches: (mapId, attemptId, batchId, data).
pub fn parse_batches(mut chunk: &[u8]) -> Result<Vec<(i32, i32, i32, Bytes)>> {
    let mut out = Vec::new();
    while !chunk.is_empty() {
        if chunk.len() < 16 {
            return Err(ClientError::BadReply("truncated batch header".into()));
        }
        let i = |o: usize| i32::from_le_bytes(chunk[o..o + 4].try_into().unwrap());
        let (map, attempt, batch_id, len) = (i(0), i(4), i(8), i(12) as usize);
        if chunk.len() < 16 + len {
            return Err(ClientError::BadReply("truncated batch".into()));
        }
        out.push((
            map,
            attempt,
            batch_id,
            Bytes::copy_from_slice(&chunk[16..16 + len]),
        ));
        chunk = &chunk[16 + len..];
    }
    Ok(out)
}

/// Decodes a TransportMessage reply payload.
pub fn decode<M: prost::Message + Default>(tm: &TransportMessage) -> Result<M> {
    tm.decode_payload()
        .map_err(|e| ClientError::BadReply(e.to_string()))
}
