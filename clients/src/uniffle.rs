//! A Rust client of the Uniffle protocol, for tests and benchmarks. It does
//! what the Java client does, call for call: assignment from the coordinator,
//! register, requireBuffer + send (gRPC or Netty), report, then reads memory,
//! index and data segments, keeping only reported blocks and checking CRCs.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use parking_lot::Mutex;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::Framed;
use tonic::transport::{Channel, Endpoint};

use switchyard_uniffle::bitmap::IdBitmap;
use switchyard_uniffle::netty::{self, Message, UniffleCodec};
use switchyard_uniffle::proto::coordinator_server_client::CoordinatorServerClient;
use switchyard_uniffle::proto::shuffle_server_client::ShuffleServerClient;
use switchyard_uniffle::proto::*;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("rpc: {0}")]
    Rpc(#[from] tonic::Status),
    #[error("{op} answered {status:?}: {msg}")]
    Status {
        op: &'static str,
        status: StatusCode,
        msg: String,
    },
    #[error("netty: {0}")]
    Netty(String),
    #[error("bad data: {0}")]
    BadData(String),
}

pub type Result<T, E = ClientError> = std::result::Result<T, E>;

fn check(op: &'static str, status: i32, msg: String) -> Result<()> {
    let status = StatusCode::try_from(status).unwrap_or(StatusCode::InternalError);
    if status == StatusCode::Success {
        Ok(())
    } else {
        Err(ClientError::Status { op, status, msg })
    }
}

async fn channel(addr: &str) -> Result<Channel> {
    Ok(Endpoint::from_shared(format!("http://{addr}"))
        .map_err(ClientError::Transport)?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .initial_stream_window_size(8 << 20)
        .initial_connection_window_size(64 << 20)
        .connect()
        .await?)
}

const MAX_MESSAGE: usize = 1 << 30;

pub struct Coordinator {
    inner: CoordinatorServerClient<Channel>,
}

impl Coordinator {
    pub async fn connect(addr: &str) -> Result<Self> {
        Ok(Coordinator {
            inner: CoordinatorServerClient::new(channel(addr).await?)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        })
    }

    pub async fn client_conf(&mut self) -> Result<Vec<(String, String)>> {
        let r = self.inner.fetch_client_conf(()).await?.into_inner();
        Ok(r.client_conf
            .into_iter()
            .map(|c| (c.key, c.value))
            .collect())
    }

    /// registerApplicationInfo, as 0.10+ clients send it (with their version).
    pub async fn register_application_info(
        &mut self,
        app: &str,
        user: &str,
        version: Option<&str>,
    ) -> Result<()> {
        let r = self
            .inner
            .register_application_info(ApplicationInfoRequest {
                app_id: app.into(),
                user: user.into(),
                version: version.map(Into::into),
                git_commit_id: None,
            })
            .await?
            .into_inner();
        check("registerApplicationInfo", r.status, r.ret_msg)
    }

    pub async fn assignments(
        &mut self,
        app: &str,
        shuffle: i32,
        partitions: i32,
        transport: Transport,
    ) -> Result<Vec<PartitionRangeAssignment>> {
        self.assignments_replicated(app, shuffle, partitions, transport, 1)
            .await
    }

    /// As [`Coordinator::assignments`], `replicas` distinct servers per
    /// partition range (the client's `rss.data.replica`).
    pub async fn assignments_replicated(
        &mut self,
        app: &str,
        shuffle: i32,
        partitions: i32,
        transport: Transport,
        replicas: i32,
    ) -> Result<Vec<PartitionRangeAssignment>> {
        let r = self
            .inner
            .get_shuffle_assignments(GetShuffleServerRequest {
                application_id: app.into(),
                shuffle_id: shuffle,
                partition_num: partitions,
                partition_num_per_range: 1,
                data_replica: replicas,
                require_tags: vec!["ss_v5".into(), transport.tag().into()],
                assignment_shuffle_server_number: -1,
                ..Default::default()
            })
            .await?
            .into_inner();
        check("getShuffleAssignments", r.status, r.ret_msg)?;
        Ok(r.assignments)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Grpc,
    GrpcNetty,
}

impl Transport {
    pub fn tag(self) -> &'static str {
        match self {
            Transport::Grpc => "GRPC",
            Transport::GrpcNetty => "GRPC_NETTY",
        }
    }
}

/// A block as the client builds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientBlock {
    pub block_id: i64,
    pub task_attempt_id: i64,
    pub uncompress_length: i32,
    pub crc: i64,
    pub data: Bytes,
}

impl ClientBlock {
    pub fn new(block_id: i64, task_attempt_id: i64, data: Bytes) -> Self {
        ClientBlock {
            block_id,
            task_attempt_id,
            uncompress_length: data.len() as i32,
            crc: crc32fast::hash(&data) as i64,
            data,
        }
    }
}

/// Tunables of the read path, as the Java client's.
#[derive(Debug, Clone, Copy)]
pub struct ReadOptions {
    /// `spark.rss.client.read.buffer.size` (14 MiB).
    pub read_buffer_size: i32,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            read_buffer_size: 14 << 20,
        }
    }
}

pub struct ShuffleServer {
    grpc: ShuffleServerClient<Channel>,
    netty: Option<NettyConnection>,
}

impl ShuffleServer {
    pub async fn connect(server: &ShuffleServerId, transport: Transport) -> Result<Self> {
        let grpc =
            ShuffleServerClient::new(channel(&format!("{}:{}", server.ip, server.port)).await?)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE);
        let netty = match transport {
            Transport::Grpc => None,
            Transport::GrpcNetty => {
                let addr: SocketAddr = format!("{}:{}", server.ip, server.netty_port)
                    .parse()
                    .map_err(|e| ClientError::Netty(format!("netty address: {e}")))?;
                Some(NettyConnection::connect(addr).await?)
            }
        };
        Ok(ShuffleServer { grpc, netty })
    }

    pub fn grpc(&mut self) -> &mut ShuffleServerClient<Channel> {
        &mut self.grpc
    }

    pub async fn register_shuffle(
        &mut self,
        app: &str,
        shuffle: i32,
        ranges: &[(i32, i32)],
    ) -> Result<()> {
        let r = self
            .grpc
            .register_shuffle(ShuffleRegisterRequest {
                app_id: app.into(),
                shuffle_id: shuffle,
                partition_ranges: ranges
                    .iter()
                    .map(|&(start, end)| ShufflePartitionRange { start, end })
                    .collect(),
                remote_storage: Some(RemoteStorage::default()),
                user: "test".into(),
                ..Default::default()
            })
            .await?
            .into_inner();
        check("registerShuffle", r.status, r.ret_msg)
    }

    /// requireBuffer, retried while the server answers NO_BUFFER.
    pub async fn require_buffer(
        &mut self,
        app: &str,
        shuffle: i32,
        size: i32,
        partitions: Vec<i32>,
    ) -> Result<i64> {
        let mut backoff = Duration::from_millis(5);
        for _ in 0..200 {
            let r = self
                .grpc
                .require_buffer(RequireBufferRequest {
                    require_size: size,
                    app_id: app.into(),
                    shuffle_id: shuffle,
                    partition_ids: partitions.clone(),
                    partition_require_sizes: Vec::new(),
                })
                .await?
                .into_inner();
            match StatusCode::try_from(r.status) {
                Ok(StatusCode::Success) => return Ok(r.require_buffer_id),
                Ok(StatusCode::NoBuffer) | Ok(StatusCode::NoBufferForHugePartition) => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                _ => return check("requireBuffer", r.status, r.ret_msg).map(|_| -1),
            }
        }
        Err(ClientError::Status {
            op: "requireBuffer",
            status: StatusCode::NoBuffer,
            msg: "still no buffer after 200 tries".into(),
        })
    }

    /// requireBuffer + sendShuffleData for blocks of several partitions. Asks
    /// for the buffer the stock clients ask for: each block's size plus 32
    /// bytes of its fields (`ShuffleBlockInfo.getSize`), and over Netty also
    /// the request's encoded length, which the JVM server releases when the
    /// frame is decoded (`ShuffleServerGrpcNettyClient.sendShuffleData`).
    pub async fn send(
        &mut self,
        app: &str,
        shuffle: i32,
        blocks: Vec<(i32, Vec<ClientBlock>)>,
    ) -> Result<()> {
        let size: i64 = blocks
            .iter()
            .flat_map(|(_, b)| b.iter())
            .map(|b| b.data.len() as i64 + 32)
            .sum();
        let partitions: Vec<i32> = blocks.iter().map(|(p, _)| *p).collect();
        let Some(netty) = &self.netty else {
            let ticket = self
                .require_buffer(app, shuffle, size.min(i32::MAX as i64) as i32, partitions)
                .await?;
            let r = self
                .grpc
                .send_shuffle_data(SendShuffleDataRequest {
                    app_id: app.into(),
                    shuffle_id: shuffle,
                    require_buffer_id: ticket,
                    shuffle_data: blocks
                        .into_iter()
                        .map(|(partition_id, blocks)| ShuffleData {
                            partition_id,
                            block: blocks
                                .into_iter()
                                .map(|b| ShuffleBlock {
                                    block_id: b.block_id,
                                    length: b.data.len() as i32,
                                    uncompress_length: b.uncompress_length,
                                    crc: b.crc,
                                    data: b.data,
                                    task_attempt_id: b.task_attempt_id,
                                })
                                .collect(),
                        })
                        .collect(),
                    timestamp: 0,
                    stage_attempt_number: 0,
                })
                .await?
                .into_inner();
            return check("sendShuffleData", r.status, r.ret_msg);
        };
        let mut request = netty::SendShuffleDataRequest {
            request_id: netty.next_id(),
            app_id: app.into(),
            shuffle_id: shuffle,
            require_buffer_id: 0,
            partitions: blocks
                .into_iter()
                .map(|(partition_id, blocks)| netty::PartitionBlocks {
                    partition_id,
                    blocks: blocks
                        .into_iter()
                        .map(|b| netty::ShuffleBlock {
                            partition_id,
                            block_id: b.block_id,
                            length: b.data.len() as i32,
                            shuffle_id: shuffle,
                            crc: b.crc,
                            task_attempt_id: b.task_attempt_id,
                            data: b.data,
                            replicas: Vec::new(),
                            uncompress_length: b.uncompress_length,
                            free_memory: 0,
                        })
                        .collect(),
                })
                .collect(),
            timestamp: 0,
        };
        let size = size + request.encoded_len() as i64;
        request.require_buffer_id = self
            .require_buffer(app, shuffle, size.min(i32::MAX as i64) as i32, partitions)
            .await?;
        let netty = self.netty.as_ref().expect("checked above");
        match netty.call(Message::SendShuffleData(request)).await? {
            Message::RpcResponse(h) => check(
                "sendShuffleData(netty)",
                h.status,
                h.ret_message.unwrap_or_default(),
            ),
            other => Err(ClientError::Netty(format!(
                "unexpected reply {:?}",
                other.message_type()
            ))),
        }
    }

    pub async fn report(
        &mut self,
        app: &str,
        shuffle: i32,
        task: i64,
        ids: HashMap<i32, Vec<i64>>,
    ) -> Result<()> {
        let r = self
            .grpc
            .report_shuffle_result(ReportShuffleResultRequest {
                app_id: app.into(),
                shuffle_id: shuffle,
                task_attempt_id: task,
                bitmap_num: 1,
                partition_to_block_ids: ids
                    .into_iter()
                    .map(|(partition_id, block_ids)| PartitionToBlockIds {
                        partition_id,
                        block_ids,
                    })
                    .collect(),
                partition_stats: Vec::new(),
            })
            .await?
            .into_inner();
        check("reportShuffleResult", r.status, r.ret_msg)
    }

    pub async fn shuffle_result(
        &mut self,
        app: &str,
        shuffle: i32,
        partitions: Vec<i32>,
    ) -> Result<IdBitmap> {
        let r = self
            .grpc
            .get_shuffle_result_for_multi_part(GetShuffleResultForMultiPartRequest {
                app_id: app.into(),
                shuffle_id: shuffle,
                partitions,
                block_id_layout: Some(BlockIdLayout {
                    sequence_no_bits: 21,
                    partition_id_bits: 20,
                    task_attempt_id_bits: 22,
                }),
            })
            .await?
            .into_inner();
        check("getShuffleResultForMultiPart", r.status, r.ret_msg)?;
        IdBitmap::from_java_bytes(&r.serialized_bitmap)
            .map_err(|e| ClientError::BadData(e.to_string()))
    }

    async fn memory(
        &mut self,
        app: &str,
        shuffle: i32,
        partition: i32,
        last: i64,
        opts: ReadOptions,
    ) -> Result<(Vec<ShuffleDataBlockSegment>, Bytes)> {
        match &self.netty {
            None => {
                let r = self
                    .grpc
                    .get_memory_shuffle_data(GetMemoryShuffleDataRequest {
                        app_id: app.into(),
                        shuffle_id: shuffle,
                        partition_id: partition,
                        last_block_id: last,
                        read_buffer_size: opts.read_buffer_size,
                        timestamp: 0,
                        serialized_expected_task_ids_bitmap: Some(Bytes::new()),
                    })
                    .await?
                    .into_inner();
                check("getMemoryShuffleData", r.status, r.ret_msg)?;
                Ok((r.shuffle_data_block_segments, r.data))
            }
            Some(netty) => {
                let request = netty::GetMemoryShuffleDataRequest {
                    request_id: netty.next_id(),
                    app_id: app.into(),
                    shuffle_id: shuffle,
                    partition_id: partition,
                    last_block_id: last,
                    read_buffer_size: opts.read_buffer_size,
                    timestamp: 0,
                    expected_task_ids_bitmap: None,
                };
                match netty.call(Message::GetMemoryShuffleData(request)).await? {
                    Message::GetMemoryShuffleDataResponse(r) => {
                        check(
                            "getMemoryShuffleData(netty)",
                            r.head.status,
                            r.head.ret_message.unwrap_or_default(),
                        )?;
                        let segments = r
                            .segments
                            .iter()
                            .map(|s| ShuffleDataBlockSegment {
                                block_id: s.block_id,
                                offset: s.offset as i64,
                                length: s.length,
                                uncompress_length: s.uncompress_length,
                                crc: s.crc,
                                task_attempt_id: s.task_attempt_id,
                            })
                            .collect();
                        Ok((segments, r.data))
                    }
                    other => Err(ClientError::Netty(format!(
                        "unexpected reply {:?}",
                        other.message_type()
                    ))),
                }
            }
        }
    }

    pub async fn index(&mut self, app: &str, shuffle: i32, partition: i32) -> Result<(Bytes, i64)> {
        match &self.netty {
            None => {
                let r = self
                    .grpc
                    .get_local_shuffle_index(GetLocalShuffleIndexRequest {
                        app_id: app.into(),
                        shuffle_id: shuffle,
                        partition_id: partition,
                        partition_num_per_range: 1,
                        partition_num: partition + 1,
                    })
                    .await?
                    .into_inner();
                check("getLocalShuffleIndex", r.status, r.ret_msg)?;
                Ok((r.index_data, r.data_file_len))
            }
            Some(netty) => {
                let request = netty::GetLocalShuffleIndexRequest {
                    request_id: netty.next_id(),
                    app_id: app.into(),
                    shuffle_id: shuffle,
                    partition_id: partition,
                    partition_num_per_range: 1,
                    partition_num: partition + 1,
                };
                let r = match netty.call(Message::GetLocalShuffleIndex(request)).await? {
                    Message::GetLocalShuffleIndexResponse(r) => r,
                    // The JVM 0.10 server answers index requests with type 23;
                    // its storage ids matter only when a partition
                    // spans several disks, which this client does not read.
                    Message::GetLocalShuffleIndexV2Response(r) => {
                        let mut ids = r.storage_ids.clone();
                        ids.dedup();
                        if ids.len() > 1 {
                            return Err(ClientError::Netty(format!(
                                "partition {partition} spans storages {:?}: not read by this client",
                                r.storage_ids
                            )));
                        }
                        r.base
                    }
                    other => {
                        return Err(ClientError::Netty(format!(
                            "unexpected reply {:?}",
                            other.message_type()
                        )))
                    }
                };
                check(
                    "getLocalShuffleIndex(netty)",
                    r.head.status,
                    r.head.ret_message.unwrap_or_default(),
                )?;
                Ok((r.index_data, r.data_file_len))
            }
        }
    }

    pub async fn data(
        &mut self,
        app: &str,
        shuffle: i32,
        partition: i32,
        offset: i64,
        length: i32,
    ) -> Result<Bytes> {
        let data = match &self.netty {
            None => {
                let r = self
                    .grpc
                    .get_local_shuffle_data(GetLocalShuffleDataRequest {
                        app_id: app.into(),
                        shuffle_id: shuffle,
                        partition_id: partition,
                        partition_num_per_range: 1,
                        partition_num: partition + 1,
                        offset,
                        length,
                        timestamp: 0,
                        storage_id: -1,
                        next_read_segments: Vec::new(),
                    })
                    .await?
                    .into_inner();
                check("getLocalShuffleData", r.status, r.ret_msg)?;
                r.data
            }
            Some(netty) => {
                let request = netty::GetLocalShuffleDataRequest {
                    request_id: netty.next_id(),
                    app_id: app.into(),
                    shuffle_id: shuffle,
                    partition_id: partition,
                    partition_num_per_range: 1,
                    partition_num: partition + 1,
                    offset,
                    length,
                    timestamp: 0,
                };
                match netty.call(Message::GetLocalShuffleData(request)).await? {
                    Message::GetLocalShuffleDataResponse(r) => {
                        check(
                            "getLocalShuffleData(netty)",
                            r.head.status,
                            r.head.ret_message.unwrap_or_default(),
                        )?;
                        r.data
                    }
                    other => {
                        return Err(ClientError::Netty(format!(
                            "unexpected reply {:?}",
                            other.message_type()
                        )))
                    }
                }
            }
        };
        if data.len() != length as usize {
            return Err(ClientError::BadData(format!(
                "Wrong data length: asked {length}, got {}",
                data.len()
            )));
        }
        Ok(data)
    }

    /// Reads a partition as the Java reader does: memory pages, then the
    /// index and data segments. Keeps blocks in `expected` once each, checks
    /// every CRC, and fails if an expected block is missing.
    pub async fn read_partition(
        &mut self,
        app: &str,
        shuffle: i32,
        partition: i32,
        expected: &IdBitmap,
        opts: ReadOptions,
    ) -> Result<Vec<ClientBlock>> {
        let mut seen: HashSet<i64> = HashSet::new();
        let mut out = Vec::new();
        let mut keep = |id: i64,
                        task: i64,
                        uncompress: i32,
                        crc: i64,
                        data: Bytes,
                        out: &mut Vec<ClientBlock>|
         -> Result<()> {
            if !expected.contains_i64(id) || !seen.insert(id) {
                return Ok(());
            }
            if crc32fast::hash(&data) as i64 != crc {
                return Err(ClientError::BadData(format!("crc mismatch in block {id}")));
            }
            out.push(ClientBlock {
                block_id: id,
                task_attempt_id: task,
                uncompress_length: uncompress,
                crc,
                data,
            });
            Ok(())
        };
        let mut last = -1;
        loop {
            let (segments, data) = self.memory(app, shuffle, partition, last, opts).await?;
            if segments.is_empty() {
                break;
            }
            for s in &segments {
                let end = s.offset as usize + s.length as usize;
                if end > data.len() {
                    return Err(ClientError::BadData("memory segment past its data".into()));
                }
                keep(
                    s.block_id,
                    s.task_attempt_id,
                    s.uncompress_length,
                    s.crc,
                    data.slice(s.offset as usize..end),
                    &mut out,
                )?;
            }
            last = segments.last().unwrap().block_id;
        }
        let (index, data_len) = self.index(app, shuffle, partition).await?;
        let mut records = switchyard_storage::IndexRecord::decode_all(&index);
        let mut total = 0;
        records.retain(|r| {
            total += r.length as i64;
            data_len < 0 || total <= data_len
        });
        let mut i = 0;
        while i < records.len() {
            let start = records[i].offset as i64;
            let mut j = i;
            let mut len = 0i64;
            while j < records.len() && len < opts.read_buffer_size as i64 {
                len += records[j].length as i64;
                j += 1;
            }
            let data = self
                .data(app, shuffle, partition, start, len as i32)
                .await?;
            let mut at = 0usize;
            for r in &records[i..j] {
                let end = at + r.length as usize;
                keep(
                    r.block_id,
                    r.map_id,
                    r.uncompressed_len,
                    r.crc,
                    data.slice(at..end),
                    &mut out,
                )?;
                at = end;
            }
            i = j;
        }
        let missing: Vec<i64> = expected
            .iter_i64()
            .filter(|id| !seen.contains(id))
            .take(5)
            .collect();
        if !missing.is_empty() {
            return Err(ClientError::BadData(format!(
                "Blocks read inconsistent: missing {missing:?}"
            )));
        }
        Ok(out)
    }

    pub async fn unregister_app(&mut self, app: &str) -> Result<()> {
        let r = self
            .grpc
            .unregister_shuffle_by_app_id(ShuffleUnregisterByAppIdRequest { app_id: app.into() })
            .await?
            .into_inner();
        check("unregisterShuffleByAppId", r.status, r.ret_msg)
    }
}

/// One Netty connection; requests are multiplexed and matched by id.
pub struct NettyConnection {
    next: AtomicI64,
    pending: Arc<Mutex<HashMap<i64, oneshot::Sender<Message>>>>,
    /// Set by the reader once the connection closed, before it fails the
    /// callers waiting: a call registered after that fails at once instead
    /// of waiting out its timeout.
    closed: Arc<std::sync::atomic::AtomicBool>,
    tx: mpsc::Sender<Message>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for NettyConnection {
    /// Closes the socket: the reader task holds its other half, and would
    /// keep the connection open until the server hung up.
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl NettyConnection {
    pub async fn connect(addr: SocketAddr) -> Result<Self> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| ClientError::Netty(format!("connect {addr}: {e}")))?;
        stream.set_nodelay(true).ok();
        let (mut sink, mut frames) = Framed::new(stream, UniffleCodec::default()).split();
        let (tx, mut rx) = mpsc::channel::<Message>(64);
        let pending: Arc<Mutex<HashMap<i64, oneshot::Sender<Message>>>> = Default::default();
        tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                if sink.send(m).await.is_err() {
                    return;
                }
            }
        });
        let p = pending.clone();
        let closed: Arc<std::sync::atomic::AtomicBool> = Default::default();
        let c = closed.clone();
        let reader = tokio::spawn(async move {
            while let Some(Ok(m)) = frames.next().await {
                if let Some(tx) = p.lock().remove(&m.request_id()) {
                    let _ = tx.send(m);
                }
            }
            // Connection closed: callers waiting get an error.
            c.store(true, Ordering::SeqCst);
            p.lock().clear();
        });
        Ok(NettyConnection {
            next: AtomicI64::new(1),
            pending,
            closed,
            tx,
            reader,
        })
    }

    pub fn next_id(&self) -> i64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    pub async fn call(&self, request: Message) -> Result<Message> {
        let (tx, rx) = oneshot::channel();
        let id = request.request_id();
        self.pending.lock().insert(id, tx);
        if self.closed.load(Ordering::SeqCst) {
            self.pending.lock().remove(&id);
            return Err(ClientError::Netty("connection closed".into()));
        }
        self.tx
            .send(request)
            .await
            .map_err(|_| ClientError::Netty("connection closed".into()))?;
        tokio::time::timeout(Duration::from_secs(60), rx)
            .await
            .map_err(|_| ClientError::Netty("timed out".into()))?
            .map_err(|_| ClientError::Netty("connection closed before the reply".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A dropped connection closes its socket at once; before, its reader
    /// task kept the socket open until the server hung up, and a client
    /// that connects per request ran a server into its per-peer limit.
    #[tokio::test]
    async fn a_dropped_netty_connection_closes_its_socket() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connection = NettyConnection::connect(addr).await.unwrap();
        let (mut server_side, _) = listener.accept().await.unwrap();
        drop(connection);
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(5), server_side.read(&mut buf))
            .await
            .expect("the socket was not closed within 5 s");
        assert_eq!(read.unwrap(), 0, "EOF");
    }

    /// A call on a connection the server closed fails at once.
    #[tokio::test]
    async fn a_call_after_the_server_hung_up_fails_at_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connection = NettyConnection::connect(addr).await.unwrap();
        drop(listener.accept().await.unwrap());
        // The reader sees the close.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !connection.closed.load(Ordering::SeqCst) {
            assert!(std::time::Instant::now() < deadline, "close not seen");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let request = Message::GetMemoryShuffleData(netty::GetMemoryShuffleDataRequest {
            request_id: connection.next_id(),
            app_id: "app".into(),
            shuffle_id: 0,
            partition_id: 0,
            last_block_id: -1,
            read_buffer_size: 1024,
            timestamp: 0,
            expected_task_ids_bitmap: None,
        });
        let started = std::time::Instant::now();
        assert!(connection.call(request).await.is_err());
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
}
