//! Credit-based streams (Flink readers of map partitions).
//!
//! After the OpenStream reply, the stream announces its records batch by
//! batch (BACKLOG_ANNOUNCEMENT: how many records the next batch holds, taken
//! from the index, so the reader reserves that many network buffers), reads a
//! batch through the store once the reader has granted credit, and sends one
//! READ_DATA per record, each only against one unit of credit (the initial
//! credit, then READ_ADD_CREDIT grants). At the end the worker sends
//! BUFFER_STREAM_END as an RPC request of its own; a failure goes to the
//! reader as TRANSPORTABLE_ERROR. The next batch is read while the current one
//! is sent, so a reader granting credit promptly never waits for the disk;
//! a stream whose reader grants nothing holds no data (Flink opens every input
//! channel at once with zero credit).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use switchyard_frame::traffic::{self, Protocol};
use switchyard_storage::{Chunk, PartitionKey, SelectedView, StorageError, Store};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use super::map_partition::{FlinkHeader, FLINK_HEADER_LEN};
use super::state::WorkerState;
use crate::frame::Message;
use crate::proto::{MessageType, PbBufferStreamEnd, StreamType};
use crate::server::conn::Replier;
use crate::transport_message::TransportMessage;

/// Bytes read from the store per batch (whole records; the last record may
/// overshoot by less than one Flink buffer).
pub const CREDIT_BATCH_BYTES: u64 = 512 * 1024;

/// Largest credit one grant may add: a bound against a corrupt or hostile
/// grant, far above what any Flink reader holds in buffers.
const MAX_GRANT: i32 = 1 << 20;

/// Ids of the RPC requests the worker sends (BUFFER_STREAM_END); negative so
/// that they never collide with a client's own ids in its logs.
static NEXT_SERVER_REQUEST: AtomicI64 = AtomicI64::new(-1);

pub struct CreditStream {
    pub id: i64,
    pub key: PartitionKey,
    pub(super) credit: Semaphore,
    pub(super) cancel: CancellationToken,
    last_used: Mutex<Instant>,
    /// Hybrid shuffle: the segment each sub-partition's reader asked for.
    pub(super) required: Option<RequiredSegments>,
}

/// What NOTIFY_REQUIRED_SEGMENT told a hybrid stream, per sub-partition of
/// its range; -1 until the reader asked (nothing is sent before).
pub(super) struct RequiredSegments {
    first: i32,
    ids: Mutex<Vec<i32>>,
    pub(super) changed: Notify,
}

impl RequiredSegments {
    pub(super) fn get(&self, sub: i32) -> i32 {
        let i = (sub - self.first) as usize;
        self.ids.lock().get(i).copied().unwrap_or(-1)
    }
}

impl CreditStream {
    pub fn new(id: i64, key: PartitionKey, initial_credit: i32) -> Arc<Self> {
        Self::build(id, key, initial_credit, None)
    }

    /// A hybrid stream over sub-partitions `[start, end]`.
    pub fn segmented(
        id: i64,
        key: PartitionKey,
        initial_credit: i32,
        start: i32,
        end: i32,
    ) -> Arc<Self> {
        let width = usize::try_from(end - start + 1).unwrap_or(0);
        let required = RequiredSegments {
            first: start,
            ids: Mutex::new(vec![-1; width]),
            changed: Notify::new(),
        };
        Self::build(id, key, initial_credit, Some(required))
    }

    fn build(
        id: i64,
        key: PartitionKey,
        initial_credit: i32,
        required: Option<RequiredSegments>,
    ) -> Arc<Self> {
        let s = Arc::new(CreditStream {
            id,
            key,
            credit: Semaphore::new(0),
            cancel: CancellationToken::new(),
            last_used: Mutex::new(Instant::now()),
            required,
        });
        s.add_credit(initial_credit);
        s
    }

    /// NOTIFY_REQUIRED_SEGMENT; false for a stream that is not a hybrid one
    /// or a sub-partition outside its range.
    pub fn require_segment(&self, sub: i32, segment: i32) -> bool {
        let Some(r) = &self.required else {
            return false;
        };
        let Some(i) = usize::try_from(sub - r.first).ok() else {
            return false;
        };
        match r.ids.lock().get_mut(i) {
            Some(id) => *id = segment,
            None => return false,
        }
        r.changed.notify_waiters();
        self.touch();
        true
    }

    /// Adds credit; non-positive or oversized grants are ignored.
    pub fn add_credit(&self, credit: i32) -> bool {
        if credit <= 0 || credit > MAX_GRANT {
            return false;
        }
        self.credit.add_permits(credit as usize);
        self.touch();
        true
    }

    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    pub(super) fn touch(&self) {
        *self.last_used.lock() = Instant::now();
    }

    pub fn idle(&self) -> Duration {
        self.last_used.lock().elapsed()
    }
}

/// How a stream ended.
pub(super) enum End {
    /// Every record sent.
    Finished,
    /// The reader closed it, its connection went away, or it was expired.
    Abandoned,
}

/// Sends `view` on `stream` to `replier`'s connection; called after the
/// OpenStream reply is queued on that connection.
pub async fn run(
    state: Arc<WorkerState>,
    stream: Arc<CreditStream>,
    view: SelectedView,
    replier: Replier,
) {
    let started = Instant::now();
    let result = send_all(&state.store, &stream, &view, &replier).await;
    if let Ok(End::Finished) = result {
        tracing::debug!(
            stream = stream.id,
            partition = %stream.key,
            records = view.blocks,
            bytes = view.total_bytes(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "credit stream finished"
        );
    }
    finish(state, stream, result, replier).await;
}

/// Ends a stream: BUFFER_STREAM_END after its last record, or its failure
/// as TRANSPORTABLE_ERROR; then forgets it.
pub(super) async fn finish(
    state: Arc<WorkerState>,
    stream: Arc<CreditStream>,
    result: Result<End, StreamError>,
    replier: Replier,
) {
    match result {
        Ok(End::Finished) => {
            let end = PbBufferStreamEnd {
                stream_type: StreamType::CreditStream as i32,
                stream_id: stream.id,
            };
            replier
                .send(Message::RpcRequest {
                    request_id: NEXT_SERVER_REQUEST.fetch_sub(1, Ordering::Relaxed),
                    body: TransportMessage::new(MessageType::BufferStreamEnd, &end).to_bytes(),
                })
                .await;
        }
        Ok(End::Abandoned) => {
            tracing::debug!(stream = stream.id, partition = %stream.key, "credit stream abandoned");
        }
        Err(e) => {
            let message = e.to_string();
            tracing::warn!(stream = stream.id, partition = %stream.key, %message, "credit stream failed");
            metrics::counter!("switchyard_celeborn_credit_stream_failures_total").increment(1);
            replier
                .send(Message::TransportableError {
                    stream_id: stream.id,
                    message,
                })
                .await;
        }
    }
    state.end_stream(stream.id);
}

async fn send_all(
    store: &Arc<Store>,
    stream: &CreditStream,
    view: &SelectedView,
    replier: &Replier,
) -> Result<End, StreamError> {
    let read = |chunk: &Chunk| {
        let chunk = chunk.clone();
        async move {
            let bytes = store.read_selected_chunk(view, &chunk).await?;
            Ok::<_, StreamError>(split_records(bytes)?)
        }
    };
    let stopped = || {
        let s = stream.cancel.clone();
        let c = replier.closed().clone();
        async move {
            tokio::select! {
                _ = s.cancelled() => {}
                _ = c.cancelled() => {}
            }
        }
    };
    // Each chunk is announced from the index before anything is read: Flink
    // opens every input channel at once with no credit, and a stream must not
    // hold data for a reader that is not ready for it. The chunk is read once
    // the reader grants credit; the next one is read while this one is sent.
    // Chunks are cut one at a time as the stream reaches them: a broadcast
    // region read by many sub-partitions is never expanded up front.
    let mut prefetched = None;
    let mut chunks = view.chunks();
    let mut next = chunks.next();
    while let Some(chunk) = next.take() {
        let announced = replier
            .send(Message::BacklogAnnouncement {
                stream_id: stream.id,
                backlog: chunk.records as i32,
            })
            .await;
        if !announced {
            return Ok(End::Abandoned);
        }
        let batch = match prefetched.take() {
            Some(batch) => batch,
            None => {
                tokio::select! {
                    _ = stopped() => return Ok(End::Abandoned),
                    credit = stream.credit.acquire() => {
                        // Only waited for; each record takes its own unit.
                        if credit.is_err() {
                            return Ok(End::Abandoned);
                        }
                    }
                }
                tokio::select! {
                    _ = stopped() => return Ok(End::Abandoned),
                    b = read(&chunk) => b?,
                }
            }
        };
        next = chunks.next();
        let send = send_batch(stream, batch, replier);
        let prefetch = async {
            match &next {
                Some(c) => read(c).await.map(Some),
                None => Ok(None),
            }
        };
        let (sent, fetched) = tokio::select! {
            _ = stopped() => return Ok(End::Abandoned),
            both = async { tokio::join!(send, prefetch) } => both,
        };
        if !sent {
            return Ok(End::Abandoned);
        }
        prefetched = fetched?;
    }
    Ok(End::Finished)
}

/// Sends records, each against one unit of credit; false when the
/// connection is gone.
async fn send_batch(stream: &CreditStream, records: Vec<Bytes>, replier: &Replier) -> bool {
    for body in records {
        match stream.credit.acquire().await {
            Ok(permit) => permit.forget(),
            Err(_) => return false,
        }
        stream.touch();
        traffic::fetched(Protocol::Flink, body.len() as u64);
        if !replier
            .send(Message::ReadData {
                stream_id: stream.id,
                body,
            })
            .await
        {
            return false;
        }
    }
    true
}

/// Why a credit stream failed; its text goes to the reader as
/// TRANSPORTABLE_ERROR.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Store(#[from] StorageError),
    #[error(transparent)]
    Corrupt(#[from] CorruptPartition),
}

/// Stored bytes of a map partition that do not cut into whole records.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CorruptPartition {
    /// Fewer bytes left than a record header.
    #[error("corrupted map partition: {0} trailing bytes")]
    Trailing(usize),
    /// A header naming more bytes than are left (or a negative length).
    #[error("corrupted map partition: record of {len} bytes with {left} left")]
    Record { len: i32, left: usize },
}

/// Cuts stored bytes into the records they hold (each a 16-byte Flink
/// header and the length it names), without copying.
pub fn split_records(mut bytes: Bytes) -> Result<Vec<Bytes>, CorruptPartition> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let header = FlinkHeader::parse(&bytes).ok_or(CorruptPartition::Trailing(bytes.len()))?;
        let len = usize::try_from(header.len)
            .ok()
            .map(|l| l + FLINK_HEADER_LEN)
            .filter(|&l| l <= bytes.len())
            .ok_or(CorruptPartition::Record {
                len: header.len,
                left: bytes.len(),
            })?;
        out.push(bytes.split_to(len));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::map_partition::test_record as record;
    use super::*;

    #[test]
    fn stored_bytes_split_into_records() {
        let mut all = record(0, b"hello");
        all.extend(record(3, b""));
        all.extend(record(3, &[7; 100]));
        let records = split_records(Bytes::from(all)).unwrap();
        assert_eq!(records.len(), 3);
        assert_eq!(&records[0][16..], b"hello");
        assert_eq!(records[1].len(), 16);
        assert_eq!(records[2].len(), 116);

        let mut cut = record(0, b"hello");
        cut.pop();
        assert!(split_records(Bytes::from(cut)).is_err());
        assert!(split_records(Bytes::from_static(&[0; 5])).is_err());
    }

    #[test]
    fn grants_add_up_and_bad_grants_are_ignored() {
        let s = CreditStream::new(1, PartitionKey::new("a", 0, 0), 2);
        assert!(s.add_credit(3));
        assert!(!s.add_credit(0));
        assert!(!s.add_credit(-4));
        assert!(!s.add_credit(MAX_GRANT + 1));
        assert_eq!(s.credit.available_permits(), 5);
    }
}
