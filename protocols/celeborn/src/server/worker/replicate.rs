//! Replication, primary side: a push to a primary location that has a peer
//! is forwarded, as the same frame with mode REPLICA, to the peer worker's
//! replicate port, and the client is answered after both copies are held
//! (Celeborn's PushDataHandler). One connection per peer, opened on first
//! use and again after it breaks.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::Mutex;

use super::super::error::CelebornError;
use crate::frame::{Message, Mode, PushData, PushMergedData};
use crate::peer::{next_request_id, ClientError, Connection};
use crate::status::StatusCode;

/// A replica that does not answer within this fails the push (below the
/// client's own 120 s push timeout, so it revives instead of timing out).
const REPLICA_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Replicator {
    /// Per peer `host:replicatePort`; the mutex makes concurrent first uses
    /// open one connection.
    peers: DashMap<String, Arc<Mutex<Option<Arc<Connection>>>>>,
    /// Where the connections leave from (`CelebornConfig::source_address`).
    source: Option<std::net::IpAddr>,
}

impl Replicator {
    pub fn new(source: Option<std::net::IpAddr>) -> Self {
        // Every outcome from the start, so that the upstream dashboard's
        // replication failure panels show 0 rather than no data.
        metrics::counter!(REPLICATED, "result" => "ok").increment(0);
        for cause in CAUSES {
            metrics::counter!(REPLICATED, "result" => "failed", "cause" => cause).increment(0);
        }
        Replicator {
            peers: DashMap::new(),
            source,
        }
    }

    async fn connection(&self, peer: &str) -> Result<Arc<Connection>, CelebornError> {
        let slot = self.peers.entry(peer.to_string()).or_default().clone();
        let mut slot = slot.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let addr: SocketAddr = tokio::net::lookup_host(peer)
            .await
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                fail(
                    StatusCode::PushDataCreateConnectionFailReplica,
                    peer,
                    "cannot resolve".into(),
                )
            })?;
        let c = tokio::time::timeout(
            Duration::from_secs(10),
            Connection::connect_from(addr, self.source),
        )
        .await
        .map_err(|_| {
            fail(
                StatusCode::PushDataCreateConnectionFailReplica,
                peer,
                "connect timed out".into(),
            )
        })?
        .map_err(|e| {
            fail(
                StatusCode::PushDataCreateConnectionFailReplica,
                peer,
                e.to_string(),
            )
        })?;
        let c = Arc::new(c);
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Drops `conn` from the pool unless another push already replaced it.
    async fn discard(&self, peer: &str, conn: &Arc<Connection>) {
        if let Some(slot) = self.peers.get(peer).map(|s| s.clone()) {
            let mut slot = slot.lock().await;
            if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
                *slot = None;
            }
        }
    }

    /// Forwards a PushData to the replica; Ok once the replica holds it.
    pub async fn push(&self, peer: &str, p: &PushData) -> Result<(), CelebornError> {
        let id = next_request_id();
        let frame = Message::PushData(PushData {
            request_id: id,
            mode: Mode::Replica,
            shuffle_key: p.shuffle_key.clone(),
            partition_unique_id: p.partition_unique_id.clone(),
            body: p.body.clone(),
        });
        self.forward(peer, id, frame).await
    }

    /// Forwards a PushMergedData (every batch) to the replica.
    pub async fn push_merged(&self, peer: &str, p: &PushMergedData) -> Result<(), CelebornError> {
        let id = next_request_id();
        let frame = Message::PushMergedData(PushMergedData {
            request_id: id,
            mode: Mode::Replica,
            shuffle_key: p.shuffle_key.clone(),
            partition_unique_ids: p.partition_unique_ids.clone(),
            batch_offsets: p.batch_offsets.clone(),
            body: p.body.clone(),
        });
        self.forward(peer, id, frame).await
    }

    async fn forward(&self, peer: &str, id: i64, frame: Message) -> Result<(), CelebornError> {
        let result = self.forward_once(peer, id, frame).await;
        match &result {
            Ok(()) => metrics::counter!(REPLICATED, "result" => "ok").increment(1),
            Err(e) => metrics::counter!(REPLICATED, "result" => "failed", "cause" => cause(e))
                .increment(1),
        }
        result
    }

    async fn forward_once(&self, peer: &str, id: i64, frame: Message) -> Result<(), CelebornError> {
        let conn = self.connection(peer).await?;
        let reply = tokio::time::timeout(REPLICA_TIMEOUT, conn.call(id, frame)).await;
        let result = match reply {
            Err(_) => {
                // A silent peer (cut off, not closed) would hold every later
                // push on this connection too: the next one connects anew.
                self.discard(peer, &conn).await;
                Err(fail(
                    StatusCode::PushDataTimeoutReplica,
                    peer,
                    "no reply".into(),
                ))
            }
            Ok(Err(ClientError::Failure(text))) => {
                Err(fail(StatusCode::PushDataWriteFailReplica, peer, text))
            }
            Ok(Err(e)) => Err(fail(
                StatusCode::PushDataConnectionExceptionReplica,
                peer,
                e.to_string(),
            )),
            // A replica that could not take the batch (its location split or
            // is gone, or its worker is stopping): the primary answers
            // HARD_SPLIT, so the client revives both copies without
            // counting either worker failed.
            Ok(Ok(body)) if body.first() == Some(&StatusCode::HardSplit.value()) => Err(fail(
                StatusCode::HardSplit,
                peer,
                "the replica location refused the batch".into(),
            )),
            Ok(Ok(_)) => Ok(()),
        };
        result
    }
}

/// Pushes forwarded to a replica, by `result`, and a failure's `cause`.
const REPLICATED: &str = "switchyard_celeborn_replicated_pushes_total";

/// A failed replication's causes, as Celeborn counts them apart:
/// connecting to the peer, the connection failing, no reply in time, the
/// replica's write failing; and the replica refusing the batch (its
/// location split or its worker stopping), which the client revives.
const CAUSES: [&str; 5] = ["connect", "connection", "timeout", "write", "hard_split"];

fn cause(e: &CelebornError) -> &'static str {
    match e {
        CelebornError::Replicate { code, .. } => match code {
            StatusCode::PushDataCreateConnectionFailReplica => "connect",
            StatusCode::PushDataTimeoutReplica => "timeout",
            StatusCode::PushDataWriteFailReplica => "write",
            StatusCode::HardSplit => "hard_split",
            _ => "connection",
        },
        _ => "connection",
    }
}

fn fail(code: StatusCode, peer: &str, detail: String) -> CelebornError {
    CelebornError::Replicate {
        code,
        peer: peer.to_string(),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_counted_by_the_cause_celeborn_names() {
        let cause_of = |code| cause(&fail(code, "peer:1", String::new()));
        assert_eq!(
            cause_of(StatusCode::PushDataCreateConnectionFailReplica),
            "connect"
        );
        assert_eq!(cause_of(StatusCode::PushDataTimeoutReplica), "timeout");
        assert_eq!(cause_of(StatusCode::PushDataWriteFailReplica), "write");
        assert_eq!(cause_of(StatusCode::HardSplit), "hard_split");
        assert_eq!(
            cause_of(StatusCode::PushDataConnectionExceptionReplica),
            "connection"
        );
        // Every cause is one the counters start at 0 with.
        for code in [
            StatusCode::PushDataCreateConnectionFailReplica,
            StatusCode::PushDataTimeoutReplica,
            StatusCode::PushDataWriteFailReplica,
            StatusCode::HardSplit,
            StatusCode::PushDataConnectionExceptionReplica,
        ] {
            assert!(CAUSES.contains(&cause_of(code)));
        }
    }
}
