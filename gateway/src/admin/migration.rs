//! The migration report (`GET /api/v1/migration`, `switchyard ctl
//! migration`): which protocol and client each application used and how many
//! bytes it moved, live and recently removed ones, and the bytes per protocol
//! per hour, so that a team moving from Celeborn to Uniffle (or back)
//! through Switchyard can watch the move.

use std::collections::BTreeMap;

use serde::Serialize;
use switchyard_ident::{Protocol, ScopedApp};
use switchyard_storage::{AppRecord, Removal, Store};

use super::throughput::{Hour, ThroughputHistory};

/// The protocol an application used and the client's own id, from the
/// store's id and what the front end said of the client
/// ([`ScopedApp::protocol`]); `other` for an id of no front end.
pub fn protocol_of<'a>(store_id: &'a str, client: Option<&str>) -> (&'static str, &'a str) {
    match ScopedApp::parse(store_id) {
        Some(app) => (app.protocol(client).as_str(), app.id),
        None => (
            "other",
            store_id.split_once('/').map_or(store_id, |(_, id)| id),
        ),
    }
}

#[derive(Debug, Serialize)]
pub struct AppRow {
    pub protocol: &'static str,
    pub id: String,
    pub client: Option<String>,
    pub written_bytes: u64,
    pub read_bytes: u64,
    /// The most data bytes it held in this node's memory at once.
    pub peak_memory_bytes: u64,
    pub registered_unix_ms: u64,
    pub last_seen_unix_ms: u64,
    pub removed: Option<Removal>,
}

#[derive(Debug, Default, Serialize)]
pub struct ProtocolSummary {
    pub applications: u64,
    pub live: u64,
    pub written_bytes: u64,
    pub read_bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct MigrationReport {
    /// How far back removed applications are kept (`storage.apps.history_retention`).
    pub retention_seconds: u64,
    /// Per protocol, over the applications below.
    pub protocols: BTreeMap<&'static str, ProtocolSummary>,
    /// Bytes per protocol per clock hour, oldest first (since this process started).
    pub hours: Vec<Hour>,
    /// Live applications, then removed ones (oldest removal first).
    pub applications: Vec<AppRow>,
}

pub(super) fn row(r: AppRecord) -> AppRow {
    let (protocol, id) = protocol_of(&r.id, r.client.as_deref());
    AppRow {
        protocol,
        id: id.to_string(),
        client: r.client,
        written_bytes: r.written_bytes,
        read_bytes: r.read_bytes,
        peak_memory_bytes: r.peak_memory_bytes,
        registered_unix_ms: r.registered_unix_ms,
        last_seen_unix_ms: r.last_seen_unix_ms,
        removed: r.removed,
    }
}

pub fn report(store: &Store, throughput: &ThroughputHistory) -> MigrationReport {
    let applications: Vec<AppRow> = store.app_history().into_iter().map(row).collect();
    let mut protocols: BTreeMap<&'static str, ProtocolSummary> = Protocol::ALL
        .into_iter()
        .map(|p| (p.as_str(), ProtocolSummary::default()))
        .collect();
    for a in &applications {
        let s = protocols.entry(a.protocol).or_default();
        s.applications += 1;
        s.live += u64::from(a.removed.is_none());
        s.written_bytes += a.written_bytes;
        s.read_bytes += a.read_bytes;
    }
    MigrationReport {
        retention_seconds: store.config().apps.history_retention.as_secs(),
        protocols,
        hours: throughput.hours(),
        applications,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_from_ids_and_clients() {
        assert_eq!(protocol_of("uniffle/app-1", None), ("uniffle", "app-1"));
        assert_eq!(
            protocol_of("celeborn/app-1", Some("spark client 0.5.x-0.6.0")),
            ("celeborn", "app-1")
        );
        assert_eq!(
            protocol_of("celeborn/app-2", Some("flink client 0.6.1+")),
            ("flink", "app-2")
        );
        assert_eq!(protocol_of("celeborn/a/b", None), ("celeborn", "a/b"));
        assert_eq!(protocol_of("bare", None), ("other", "bare"));
        assert_eq!(protocol_of("spark/app-3", None), ("other", "app-3"));
    }
}
