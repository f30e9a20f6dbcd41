//! Per-application accounting for operators (the migration report): what
//! each application wrote and had read back, which client it was (as its
//! front end describes it), when it came and went. Live applications are
//! read off the store; removed ones are kept here for
//! `apps.history_retention`, at most `apps.history_max_apps` of them.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::Serialize;

/// Client descriptions of applications not registered yet, remembered at most.
const MAX_PENDING_CLIENTS: u64 = 10_000;

pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One application's figures.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct AppRecord {
    /// The store's id (`<protocol>/<client's id>`).
    pub id: String,
    /// What its front end knows of the client (such as its version), if anything.
    pub client: Option<String>,
    /// Data bytes appended.
    pub written_bytes: u64,
    /// Data bytes read back (from memory, disks and the cold tier).
    pub read_bytes: u64,
    /// The most data bytes it held in this node's memory at once.
    pub peak_memory_bytes: u64,
    pub registered_unix_ms: u64,
    /// Its last heartbeat or request.
    pub last_seen_unix_ms: u64,
    /// None while it lives.
    pub removed: Option<Removal>,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Removal {
    pub unix_ms: u64,
    /// `unregistered`, `lost` or `expired` ([`crate::RemovalReason`]).
    pub reason: &'static str,
}

/// Client descriptions of applications not registered here yet (a Uniffle
/// coordinator hears of an application before its shuffle server does),
/// kept at most this long.
const PENDING_CLIENT_TTL: Duration = Duration::from_secs(3600);

#[derive(Debug)]
pub(crate) struct Ledger {
    removed: Mutex<VecDeque<AppRecord>>,
    /// Removed applications remembered at most (the oldest go first).
    max_removed: usize,
    pending_clients: moka::sync::Cache<String, String>,
}

impl Ledger {
    pub(crate) fn new(max_removed: usize) -> Self {
        Ledger {
            removed: Mutex::default(),
            max_removed,
            pending_clients: moka::sync::Cache::builder()
                .max_capacity(MAX_PENDING_CLIENTS)
                .time_to_live(PENDING_CLIENT_TTL)
                .build(),
        }
    }

    pub(crate) fn remember_client(&self, app: &str, client: &str) {
        self.pending_clients
            .insert(app.to_string(), client.to_string());
    }

    pub(crate) fn take_client(&self, app: &str) -> Option<String> {
        self.pending_clients.remove(app)
    }

    pub(crate) fn record_removal(&self, record: AppRecord) {
        let mut removed = self.removed.lock();
        while removed.len() >= self.max_removed.max(1) {
            removed.pop_front();
        }
        removed.push_back(record);
    }

    /// The removed applications still within `retention`, oldest first;
    /// older ones are forgotten.
    pub(crate) fn removed(&self, retention: Duration) -> Vec<AppRecord> {
        let cutoff = unix_ms().saturating_sub(retention.as_millis() as u64);
        let mut removed = self.removed.lock();
        while removed
            .front()
            .is_some_and(|r| r.removed.as_ref().is_some_and(|x| x.unix_ms < cutoff))
        {
            removed.pop_front();
        }
        removed.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, removed_ms: u64) -> AppRecord {
        AppRecord {
            id: id.into(),
            client: None,
            written_bytes: 1,
            read_bytes: 2,
            peak_memory_bytes: 3,
            registered_unix_ms: 0,
            last_seen_unix_ms: 0,
            removed: Some(Removal {
                unix_ms: removed_ms,
                reason: "expired",
            }),
        }
    }

    #[test]
    fn keeps_removed_apps_within_retention_and_a_bound() {
        const MAX: usize = 100;
        let ledger = Ledger::new(MAX);
        let now = unix_ms();
        ledger.record_removal(record("old", now - 7_200_000));
        ledger.record_removal(record("new", now));
        let kept = ledger.removed(Duration::from_secs(3600));
        assert_eq!(
            kept.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["new"]
        );
        for i in 0..MAX + 3 {
            ledger.record_removal(record(&i.to_string(), now));
        }
        let kept = ledger.removed(Duration::from_secs(3600));
        assert_eq!(kept.len(), MAX);
        assert_eq!(kept[0].id, "3");
    }
}
