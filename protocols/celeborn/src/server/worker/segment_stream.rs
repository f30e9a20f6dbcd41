//! Hybrid-shuffle streams: a credit stream over a map partition that a
//! Flink 1.20 hybrid producer writes segment by segment
//! ([`super::segments`]), which follows the partition while it is still
//! being written and sends each sub-partition's records only as far as the
//! segment its reader asked for.
//!
//! Same store path as [`super::credit`]: a view of the finished regions the
//! reader's range selects ([`MapPartition::select_after`]), read in batches.
//! When the stream has sent every finished region and the partition is not
//! committed yet, it waits for the next region finish or the commit
//! ([`Location::grown`]), then opens a view of the regions after those it
//! sent. Each record goes out as SUBPARTITION_READ_DATA once the reader's
//! required segment of its sub-partition has reached the record's segment
//! and one unit of credit is there. The reader opens with no credit and
//! grants it against BACKLOG_ANNOUNCEMENTs, which name only records that
//! may be sent now, so no reader reserves buffers for a segment it may read
//! from another tier, and each record once: the client adds every backlog
//! to the buffers it wants and keeps them reserved until the records come,
//! so a record announced twice would hold a buffer for nothing, and with
//! enough of them the readers of one task take the whole buffer pool and
//! wait for each other.

use std::sync::Arc;

use bytes::Bytes;
use switchyard_frame::traffic::{self, Protocol};
use switchyard_storage::{SelectedView, Store};

use super::credit::{self, split_records, CreditStream, End, StreamError, CREDIT_BATCH_BYTES};
use super::map_partition::{FlinkHeader, MapPartition};
use super::state::{Location, WorkerState};
use crate::frame::Message;
use crate::server::conn::Replier;

/// Streams sub-partitions `[start, end]` of `loc` on `stream` (a
/// [`CreditStream::segmented`] one); called after the OpenStream reply is
/// queued.
pub async fn run(
    state: Arc<WorkerState>,
    stream: Arc<CreditStream>,
    loc: Arc<Location>,
    range: (i32, i32),
    replier: Replier,
) {
    let mut reader = Reader {
        store: &state.store,
        stream: &stream,
        replier: &replier,
        first: range.0,
        sent: vec![0; usize::try_from(range.1 - range.0 + 1).unwrap_or(0)],
        sent_total: 0,
        announced: 0,
    };
    let result = reader.follow(&loc, range).await;
    credit::finish(state, stream, result, replier).await;
}

struct Reader<'a> {
    store: &'a Arc<Store>,
    stream: &'a CreditStream,
    replier: &'a Replier,
    first: i32,
    /// Records of each sub-partition of the range sent so far: the index of
    /// the next one, which finds its segment.
    sent: Vec<i64>,
    /// Records sent, and records announced as backlog, in stream order.
    sent_total: u64,
    announced: u64,
}

impl Reader<'_> {
    /// Sends region after region until the partition is committed and all
    /// of it is sent.
    async fn follow(
        &mut self,
        loc: &Location,
        (start, end): (i32, i32),
    ) -> Result<End, StreamError> {
        let mut regions_sent = 0;
        loop {
            // Armed before the state is looked at, so no wake-up is lost.
            let grown = loc.map().grown.notified();
            tokio::pin!(grown);
            grown.as_mut().enable();
            let committed = loc.committed.load(std::sync::atomic::Ordering::Acquire);
            let meta = loc.map().regions.lock().clone();
            if meta.regions() > regions_sent {
                let skip = regions_sent;
                let view = self
                    .store
                    .open_selected_view(
                        &loc.key,
                        |records| meta.select_after(records, start, end, skip),
                        CREDIT_BATCH_BYTES,
                    )
                    .await?;
                regions_sent = meta.regions();
                if let End::Abandoned = self.send_view(&view, &meta).await? {
                    return Ok(End::Abandoned);
                }
                continue;
            }
            if committed {
                return Ok(End::Finished);
            }
            tokio::select! {
                _ = self.stopped() => return Ok(End::Abandoned),
                _ = grown => {}
            }
        }
    }

    async fn send_view(
        &mut self,
        view: &SelectedView,
        meta: &MapPartition,
    ) -> Result<End, StreamError> {
        for chunk in view.chunks() {
            let bytes = tokio::select! {
                _ = self.stopped() => return Ok(End::Abandoned),
                b = self.store.read_selected_chunk(view, &chunk) => b?,
            };
            let records = split_records(bytes)?
                .into_iter()
                .map(|r| {
                    let sub = FlinkHeader::parse(&r).map_or(self.first, |h| h.sub_partition);
                    (sub, r)
                })
                .collect::<Vec<_>>();
            if let End::Abandoned = self.send_batch(&records, meta).await {
                return Ok(End::Abandoned);
            }
        }
        Ok(End::Finished)
    }

    /// The slot of `sub` in `sent`; the view holds only the range's
    /// sub-partitions (their map ids), so a header outside it is clamped.
    fn slot(&self, sub: i32) -> usize {
        usize::try_from(sub - self.first)
            .unwrap_or(0)
            .min(self.sent.len().saturating_sub(1))
    }

    /// The segment of the next record of `sub`.
    fn next_segment(&self, meta: &MapPartition, sub: i32) -> i32 {
        meta.segment_of(sub, self.sent[self.slot(sub)])
    }

    async fn send_batch(&mut self, records: &[(i32, Bytes)], meta: &MapPartition) -> End {
        for (i, (sub, body)) in records.iter().enumerate() {
            let segment = self.next_segment(meta, *sub);
            if !self.wait_required(*sub, segment).await {
                return End::Abandoned;
            }
            if !self.take_credit(&records[i..], meta).await {
                return End::Abandoned;
            }
            self.stream.touch();
            traffic::fetched(Protocol::Flink, body.len() as u64);
            let sent = self
                .replier
                .send(Message::SubPartitionReadData {
                    stream_id: self.stream.id,
                    sub_partition_id: *sub,
                    body: body.clone(),
                })
                .await;
            if !sent {
                return End::Abandoned;
            }
            let slot = self.slot(*sub);
            self.sent[slot] += 1;
            self.sent_total += 1;
        }
        End::Finished
    }

    /// Waits until the reader asked for `segment` (or a later one) of `sub`;
    /// false when the stream stopped.
    async fn wait_required(&self, sub: i32, segment: i32) -> bool {
        let Some(required) = &self.stream.required else {
            return true;
        };
        loop {
            let changed = required.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let asked = required.get(sub);
            if asked >= segment {
                return true;
            }
            tracing::debug!(
                stream = self.stream.id,
                sub,
                segment,
                asked,
                "waiting for the reader to ask for a segment"
            );
            tokio::select! {
                _ = self.stopped() => return false,
                _ = changed => {}
            }
        }
    }

    /// Takes one unit of credit. Without any, first announces as backlog
    /// the records from `rest`'s head on that may be sent now and were not
    /// announced yet (the reader grants credit only against a backlog).
    async fn take_credit(&mut self, rest: &[(i32, Bytes)], meta: &MapPartition) -> bool {
        if let Ok(permit) = self.stream.credit.try_acquire() {
            permit.forget();
            return true;
        }
        let until = self.sent_total + self.sendable(rest, meta) as u64;
        if until > self.announced {
            let backlog = i32::try_from(until - self.announced).unwrap_or(i32::MAX);
            self.announced = until;
            let announced = self
                .replier
                .send(Message::BacklogAnnouncement {
                    stream_id: self.stream.id,
                    backlog,
                })
                .await;
            if !announced {
                return false;
            }
        }
        tokio::select! {
            _ = self.stopped() => false,
            permit = self.stream.credit.acquire() => match permit {
                Ok(p) => { p.forget(); true }
                Err(_) => false,
            },
        }
    }

    /// How many records from `rest`'s head on are within their
    /// sub-partition's required segment (at least the head, which is).
    fn sendable(&self, rest: &[(i32, Bytes)], meta: &MapPartition) -> i32 {
        let mut ahead = vec![0i64; self.sent.len()];
        let mut n = 0;
        for (sub, _) in rest {
            let i = self.slot(*sub);
            let segment = meta.segment_of(*sub, self.sent[i] + ahead[i]);
            let required = self
                .stream
                .required
                .as_ref()
                .map_or(i32::MAX, |r| r.get(*sub));
            if segment > required {
                break;
            }
            ahead[i] += 1;
            n += 1;
        }
        n.max(1)
    }

    async fn stopped(&self) {
        tokio::select! {
            _ = self.stream.cancel.cancelled() => {}
            _ = self.replier.closed().cancelled() => {}
        }
    }
}
