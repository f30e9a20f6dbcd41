//! The fetch port: open a stream over a committed partition (all of it, or a
//! map range in map order), then serve its chunks. Map partitions (Flink)
//! get credit-based streams instead ([`super::credit`]).

use std::sync::Arc;

use bytes::Bytes;
use switchyard_frame::traffic::{self, Protocol, Request};
use switchyard_ident::FrontEnd;

use super::credit::{self, CreditStream, CREDIT_BATCH_BYTES};
use super::segment_stream;
use super::state::{parse_unique_id, Location, WorkerState};
use crate::auth;
use crate::frame::{Message, StreamChunkSlice};
use crate::proto::*;
use crate::server::conn::{Handler, Replier};
use crate::server::error::CelebornError;
use crate::status::StatusCode;
use crate::transport_message::{DataPlaneBody, TransportMessage};
use crate::ShuffleKey;

/// Bytes of each chunk sent (Celeborn's FetchChunkTransferSize).
pub const CHUNK_BYTES: &str = "switchyard_celeborn_chunk_bytes";

pub struct FetchPort {
    state: Arc<WorkerState>,
}

impl FetchPort {
    pub fn new(state: Arc<WorkerState>) -> Arc<Self> {
        Arc::new(FetchPort { state })
    }

    /// The location a file name ("id-epoch-mode") of a map-partition shuffle
    /// names, or None when the shuffle is not a map-partition one.
    fn map_location(
        &self,
        shuffle_key: &str,
        file_name: &str,
    ) -> Result<Option<Arc<Location>>, CelebornError> {
        let Some(shuffle) = self.state.shuffle(shuffle_key).filter(|s| s.is_map()) else {
            return Ok(None);
        };
        let (uid, mode) = file_name
            .rsplit_once('-')
            .ok_or_else(|| bad_file(file_name))?;
        shuffle
            .readable_location(uid, mode == "1")
            .map(Some)
            .ok_or_else(|| CelebornError::UnknownMapPartition(format!("{shuffle_key}/{file_name}")))
    }

    /// Opens a credit stream over sub-partitions `[start, end]` of a map
    /// partition, replies with its id, then streams it.
    async fn open_credit(
        &self,
        request_id: i64,
        loc: Arc<Location>,
        r: PbOpenStream,
        replier: &Replier,
    ) {
        let mut request = Request::start(Protocol::Flink, "open_stream");
        let meta = loc.map().regions.lock().clone();
        let opened = async {
            let (start, end) = (r.start_index, r.end_index);
            let subs = meta.num_sub_partitions();
            // A location without a handshake never got data: an empty stream.
            let file = || format!("{}/{}", r.shuffle_key, r.file_name);
            if subs > 0 && (start < 0 || end < start || end >= subs) {
                return Err(CelebornError::SubPartitionRange {
                    start,
                    end,
                    count: subs,
                    file: file(),
                });
            }
            // A hybrid producer's partition is read while it is written.
            if !meta.has_segments() && !loc.committed.load(std::sync::atomic::Ordering::Acquire) {
                return Err(CelebornError::NotCommitted(file()));
            }
            if meta.has_segments() {
                return Ok(None);
            }
            self.state
                .store
                .open_selected_view(
                    &loc.key,
                    |records| meta.select(records, start, end),
                    CREDIT_BATCH_BYTES,
                )
                .await
                .map(Some)
                .map_err(|e| CelebornError::open(file(), e))
        }
        .await;
        let view = match opened {
            Ok(v) => v,
            Err(e) => {
                e.count("fetch");
                tracing::warn!(status = %e.status(), error = %e, "credit stream not opened");
                replier
                    .send(Message::RpcFailure {
                        request_id,
                        error: e.client_text(),
                    })
                    .await;
                return;
            }
        };
        request.ok();
        drop(request);
        let id = self.state.next_stream_id();
        let (start, end) = (r.start_index, r.end_index);
        let stream = match &view {
            Some(_) => CreditStream::new(id, loc.key.clone(), r.initial_credit),
            None => CreditStream::segmented(id, loc.key.clone(), r.initial_credit, start, end),
        };
        self.state.credit_streams.insert(id, stream.clone());
        self.state.publish_stream_gauges();
        tracing::debug!(
            shuffle_key = r.shuffle_key,
            file_name = r.file_name,
            start = r.start_index,
            end = r.end_index,
            initial_credit = r.initial_credit,
            stream = id,
            records = view.as_ref().map(|v| v.blocks),
            hybrid = view.is_none(),
            "credit stream opened"
        );
        // The reader registers the stream when this reply arrives and drops
        // frames of unknown streams: the reply goes out before any data.
        let handler = PbStreamHandler {
            stream_id: id,
            num_chunks: 0,
            chunk_offsets: Vec::new(),
            full_path: String::new(),
        };
        let sent = replier
            .send(Message::RpcResponse {
                request_id,
                body: TransportMessage::new(MessageType::StreamHandler, &handler).to_bytes(),
            })
            .await;
        if sent {
            let state = self.state.clone();
            match view {
                Some(view) => tokio::spawn(credit::run(state, stream, view, replier.clone())),
                None => tokio::spawn(segment_stream::run(
                    state,
                    stream,
                    loc,
                    (start, end),
                    replier.clone(),
                )),
            };
        } else {
            self.state.end_stream(id);
        }
    }

    /// NOTIFY_REQUIRED_SEGMENT of a hybrid reader (answered empty, as
    /// Celeborn does, whatever it names).
    fn require_segment(&self, r: PbNotifyRequiredSegment) {
        let (stream_id, sub, segment) = (r.stream_id, r.sub_partition_id, r.required_segment_id);
        match self.state.credit_streams.get(&stream_id) {
            Some(s) => {
                if !s.require_segment(sub, segment) {
                    tracing::warn!(stream_id, sub, segment, "required segment ignored");
                }
            }
            None => tracing::debug!(
                stream_id,
                sub,
                segment,
                "required segment of an unknown stream"
            ),
        }
    }

    fn add_credit(&self, stream_id: i64, credit: i32) {
        match self.state.credit_streams.get(&stream_id) {
            Some(s) => {
                if !s.add_credit(credit) {
                    tracing::warn!(stream_id, credit, "credit grant ignored");
                }
            }
            // A stream that just ended: its reader may still grant.
            None => tracing::debug!(stream_id, credit, "credit for an unknown stream"),
        }
    }

    /// Opens a stream over `file_name` ("id-epoch-mode") of a shuffle,
    /// counted as one `open_stream` request (Celeborn's OpenStream counts
    /// and times), whether it came alone or in a batch.
    async fn open(
        &self,
        shuffle_key: &str,
        file_name: &str,
        start: i32,
        end: i32,
        with_offsets: bool,
    ) -> Result<PbStreamHandler, CelebornError> {
        let mut request = Request::start(Protocol::Celeborn, "open_stream");
        let opened = self
            .open_stream(shuffle_key, file_name, start, end, with_offsets)
            .await;
        if opened.is_ok() {
            request.ok();
        }
        opened
    }

    async fn open_stream(
        &self,
        shuffle_key: &str,
        file_name: &str,
        start: i32,
        end: i32,
        with_offsets: bool,
    ) -> Result<PbStreamHandler, CelebornError> {
        let ShuffleKey { app, shuffle_id } =
            ShuffleKey::parse(shuffle_key).ok_or_else(|| CelebornError::BadName {
                what: "shuffle key",
                value: shuffle_key.to_string(),
            })?;
        let (uid, mode) = file_name
            .rsplit_once('-')
            .ok_or_else(|| bad_file(file_name))?;
        let (id, epoch) = parse_unique_id(uid).ok_or_else(|| bad_file(file_name))?;
        let key =
            switchyard_storage::PartitionKey::new(super::state::stored_app(app), shuffle_id, id)
                .with_epoch(epoch)
                .with_replica(mode == "1");
        // Celeborn's rule: a bounded, ordered range reads only those maps, in
        // map order; [0, MAX) or an inverted range reads the file as written.
        let maps =
            (end != i32::MAX && end != -1 && end >= start).then_some(start as i64..end as i64);
        let view = self
            .state
            .store
            .open_view(&key, maps, self.state.config.chunk_size.as_u64())
            .await
            .map_err(|e| CelebornError::open(format!("{shuffle_key}/{file_name}"), e))?;
        let chunk_offsets = if with_offsets {
            view.chunk_offsets()
                .unwrap_or_default()
                .into_iter()
                .map(|o| o as i64)
                .collect()
        } else {
            Vec::new()
        };
        let num_chunks = view.chunks.len() as i32;
        let stream_id = self.state.add_stream(view);
        tracing::debug!(
            shuffle_key,
            file_name,
            start,
            end,
            stream_id,
            num_chunks,
            "stream opened"
        );
        Ok(PbStreamHandler {
            stream_id,
            num_chunks,
            chunk_offsets,
            full_path: String::new(),
        })
    }

    /// Answers one chunk fetch. The chunk's bytes are reserved on the connection
    /// before the chunk is read and given back once it is written, so a client that
    /// fetches without reading its socket stops getting chunks read for it.
    async fn chunk(&self, slice: StreamChunkSlice, replier: &Replier) {
        let mut request = Request::start(Protocol::Celeborn, "fetch_chunk");
        let mut reserved = None;
        let result = async {
            let stream = self
                .state
                .streams
                .get(&slice.stream_id)
                .map(|v| v.clone())
                .ok_or(CelebornError::UnknownStream(slice.stream_id))?;
            // Streams are not bound to a connection (a reader reconnects and
            // fetches on), but to their application.
            if let Some(app) = FrontEnd::Celeborn.own_id(&stream.view.key().app) {
                auth::check_app(replier.session(), app)?;
            }
            stream.touch();
            let view = &stream.view;
            let index = usize::try_from(slice.chunk_index)
                .map_err(|_| CelebornError::BadSlice("chunk index"))?;
            if let Some(chunk) = view.chunks.get(index) {
                let len = usize::try_from(chunk.len).unwrap_or(usize::MAX);
                reserved = Some(replier.reserve(len).await.ok_or(CelebornError::Closed)?);
            }
            let data = self.state.store.read_chunk(view, index).await?;
            let offset = usize::try_from(slice.offset)
                .map_err(|_| CelebornError::BadSlice("offset"))?
                .min(data.len());
            let len = usize::try_from(slice.len)
                .unwrap_or(0)
                .min(data.len() - offset);
            Ok::<Bytes, CelebornError>(data.slice(offset..offset + len))
        }
        .await;
        let reply = match result {
            Ok(body) => {
                traffic::fetched(Protocol::Celeborn, body.len() as u64);
                metrics::histogram!(CHUNK_BYTES).record(body.len() as f64);
                request.ok();
                Message::ChunkFetchSuccess { slice, body }
            }
            Err(CelebornError::Closed) => return,
            Err(e) => {
                e.count("fetch");
                tracing::warn!(stream = slice.stream_id, chunk = slice.chunk_index, error = %e, "chunk fetch failed");
                Message::ChunkFetchFailure {
                    slice,
                    error: e.client_text(),
                }
            }
        };
        match reserved {
            Some(bytes) => replier.send_reserved(reply, bytes).await,
            None => replier.send(reply).await,
        };
    }

    async fn rpc(&self, request_id: i64, tm: TransportMessage, replier: &Replier) {
        let bad = |source| CelebornError::BadPayload {
            message_type: tm.message_type,
            source,
        };
        let reply: Result<Option<TransportMessage>, CelebornError> = match tm.kind() {
            Some(MessageType::OpenStream) => match tm.decode_payload::<PbOpenStream>() {
                Ok(r) => match auth::check_shuffle_key(replier.session(), &r.shuffle_key)
                    .and_then(|()| self.map_location(&r.shuffle_key, &r.file_name))
                {
                    Ok(Some(loc)) => return self.open_credit(request_id, loc, r, replier).await,
                    Ok(None) => self
                        .open(
                            &r.shuffle_key,
                            &r.file_name,
                            r.start_index,
                            r.end_index,
                            r.read_local_shuffle,
                        )
                        .await
                        .map(|h| Some(TransportMessage::new(MessageType::StreamHandler, &h))),
                    Err(e) => Err(e),
                },
                Err(e) => Err(bad(e)),
            },
            Some(MessageType::ReadAddCredit) => match tm.decode_payload::<PbReadAddCredit>() {
                Ok(r) => {
                    self.add_credit(r.stream_id, r.credit);
                    Ok(None)
                }
                Err(e) => Err(bad(e)),
            },
            Some(MessageType::NotifyRequiredSegment) => {
                match tm.decode_payload::<PbNotifyRequiredSegment>() {
                    Ok(r) => {
                        self.require_segment(r);
                        Ok(None)
                    }
                    Err(e) => Err(bad(e)),
                }
            }
            Some(MessageType::BatchOpenStream) => match tm
                .decode_payload::<PbOpenStreamList>()
                .map_err(bad)
                .and_then(|r| {
                    auth::check_shuffle_key(replier.session(), &r.shuffle_key).map(|()| r)
                }) {
                Ok(r) => {
                    // Exactly one entry per file name: the client indexes
                    // into this list without checking its length.
                    let mut opts = Vec::with_capacity(r.file_name.len());
                    for (i, name) in r.file_name.iter().enumerate() {
                        let start = r.start_index.get(i).copied().unwrap_or(0);
                        let end = r.end_index.get(i).copied().unwrap_or(i32::MAX);
                        let local = r.read_local_shuffle.get(i).copied().unwrap_or(false);
                        opts.push(
                            match self.open(&r.shuffle_key, name, start, end, local).await {
                                Ok(h) => PbStreamHandlerOpt {
                                    status: StatusCode::Success.as_i32(),
                                    stream_handler: Some(h),
                                    error_msg: String::new(),
                                },
                                Err(e) => {
                                    e.count("fetch");
                                    PbStreamHandlerOpt {
                                        status: StatusCode::OpenStreamFailed.as_i32(),
                                        stream_handler: None,
                                        error_msg: e.client_text(),
                                    }
                                }
                            },
                        );
                    }
                    Ok(Some(TransportMessage::new(
                        MessageType::BatchOpenStreamResponse,
                        &PbOpenStreamListResponse {
                            stream_handler_opt: opts,
                        },
                    )))
                }
                Err(e) => Err(e),
            },
            Some(MessageType::ChunkFetchRequest) => {
                // Answered with a chunk frame, never an RpcResponse.
                match tm.decode_payload::<PbChunkFetchRequest>() {
                    Ok(r) => {
                        let s = r.stream_chunk_slice.unwrap_or_default();
                        let slice = StreamChunkSlice {
                            stream_id: s.stream_id,
                            chunk_index: s.chunk_index,
                            offset: s.offset,
                            len: s.len,
                        };
                        self.chunk(slice, replier).await;
                    }
                    Err(e) => tracing::warn!(error = %e, "bad chunk fetch request"),
                }
                return;
            }
            Some(MessageType::BufferStreamEnd) => {
                if let Ok(r) = tm.decode_payload::<PbBufferStreamEnd>() {
                    self.state.end_stream(r.stream_id);
                }
                return; // fire-and-forget
            }
            _ => Err(CelebornError::Unsupported {
                handler: "the fetch port",
                message_type: tm.message_type,
            }),
        };
        let frame = match reply {
            Ok(Some(tm)) => Message::RpcResponse {
                request_id,
                body: tm.to_bytes(),
            },
            Ok(None) => Message::RpcResponse {
                request_id,
                body: Bytes::new(),
            },
            Err(e) => {
                e.count("fetch");
                tracing::warn!(status = %e.status(), error = %e, "fetch request failed");
                Message::RpcFailure {
                    request_id,
                    error: e.client_text(),
                }
            }
        };
        replier.send(frame).await;
    }
}

fn bad_file(file_name: &str) -> CelebornError {
    CelebornError::BadName {
        what: "file name",
        value: file_name.to_string(),
    }
}

impl Handler<Message> for FetchPort {
    fn port(&self) -> &'static str {
        "fetch"
    }

    async fn handle(self: Arc<Self>, message: Message, replier: Replier) {
        if super::gate::unauthenticated(&self.state, "fetch", &message, &replier).await {
            return;
        }
        match message {
            Message::RpcRequest { request_id, body } => {
                let e = match DataPlaneBody::decode(body) {
                    Ok(DataPlaneBody::Transport(tm)) => {
                        replier.label(tm.name());
                        return self.rpc(request_id, tm, &replier).await;
                    }
                    Ok(DataPlaneBody::Legacy(m)) => {
                        CelebornError::UnsupportedLegacy(format!("{:?}", m.message_type()))
                    }
                    Err(e) => CelebornError::Undecodable(e.to_string()),
                };
                e.count("fetch");
                replier
                    .send(Message::RpcFailure {
                        request_id,
                        error: e.client_text(),
                    })
                    .await;
            }
            // ≤0.3 clients fetch with a raw frame.
            Message::ChunkFetchRequest(slice) => {
                self.chunk(slice, &replier).await;
            }
            Message::BufferStreamEnd { stream_id } => self.state.end_stream(stream_id),
            // Old Flink clients grant credit with a raw frame, unanswered.
            Message::ReadAddCredit { stream_id, credit } => self.add_credit(stream_id, credit),
            other => {
                tracing::warn!(kind = ?other.message_type(), "unexpected frame on the fetch port")
            }
        }
    }
}
