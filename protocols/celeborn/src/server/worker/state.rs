//! What the Worker remembers per shuffle: its live locations (partition
//! epochs and copies), split settings, commits and map attempts, and the open
//! read streams. The bytes themselves live in the store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use parking_lot::{Mutex, RwLock};
use switchyard_storage::{
    scoped_app, unscoped_app, AppId, AppListener, AppRemoved, PartitionKey, PartitionView, Store,
};

use super::credit::CreditStream;
use super::map_partition::MapPartition;
use crate::config::CelebornConfig;
use crate::modes::{PartitionType, SplitMode};
use crate::proto::PbCommitFilesResponse;

/// The five-part identity the Master hands to clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerAddr {
    pub host: String,
    pub rpc_port: i32,
    pub push_port: i32,
    pub fetch_port: i32,
    pub replicate_port: i32,
}

impl WorkerAddr {
    /// `host:rpc:push:fetch:replicate`, Celeborn's `WorkerInfo.toUniqueId`.
    pub fn unique_id(&self) -> String {
        format!(
            "{}:{}:{}:{}:{}",
            self.host, self.rpc_port, self.push_port, self.fetch_port, self.replicate_port
        )
    }
}

/// Celeborn's applications in the store, apart from every other front end's.
pub const NAMESPACE: &str = "celeborn";

/// The store's id of a Celeborn application.
pub fn stored_app(app: &str) -> AppId {
    scoped_app(NAMESPACE, app)
}

/// Splits a shuffle key `"<appUniqueId>-<shuffleId>"` on its last `-`.
pub fn split_shuffle_key(key: &str) -> Option<(&str, i32)> {
    let (app, shuffle) = key.rsplit_once('-')?;
    if app.is_empty() {
        return None;
    }
    Some((app, shuffle.parse().ok()?))
}

/// The store note that keeps a committed map partition's regions:
/// `map/<id>-<epoch>/<p|r>`.
pub(crate) fn map_note_name(uid: &str, replica: bool) -> String {
    format!("map/{uid}/{}", if replica { 'r' } else { 'p' })
}

/// (id, epoch, replica) of a [`map_note_name`].
fn parse_map_note_name(name: &str) -> Option<(i32, i32, bool)> {
    let (uid, mode) = name.strip_prefix("map/")?.rsplit_once('/')?;
    let (id, epoch) = parse_unique_id(uid)?;
    let replica = match mode {
        "p" => false,
        "r" => true,
        _ => return None,
    };
    Some((id, epoch, replica))
}

/// Parses `"<id>-<epoch>"`.
pub fn parse_unique_id(uid: &str) -> Option<(i32, i32)> {
    let (id, epoch) = uid.split_once('-')?;
    Some((id.parse().ok()?, epoch.parse().ok()?))
}

/// One reserved location: a partition epoch, primary or replica.
pub struct Location {
    pub key: PartitionKey,
    pub bytes: AtomicU64,
    next_block: AtomicI64,
    pub committed: AtomicBool,
    /// A primary's replica: `host:replicatePort` of the peer worker, which
    /// every push to it is forwarded to.
    pub peer: parking_lot::RwLock<Option<String>>,
    /// Regions of a map partition (Flink); unused for reduce partitions.
    pub map: Mutex<MapPartition>,
}

impl Location {
    pub(crate) fn next_block_id(&self) -> i64 {
        self.next_block.fetch_add(1, Ordering::Relaxed)
    }

    /// The block id the next appended block gets.
    pub(crate) fn peek_block_id(&self) -> i64 {
        self.next_block.load(Ordering::Relaxed)
    }
}

pub struct ShuffleState {
    pub app: String,
    pub shuffle_id: i32,
    pub split_threshold: AtomicU64,
    /// A [`SplitMode`], as set by the last ReserveSlots.
    split_mode: AtomicU8,
    /// A [`PartitionType`], as set by the last ReserveSlots.
    partition_type: AtomicU8,
    /// (unique id "id-epoch", replica) → location.
    pub locations: DashMap<(String, bool), Arc<Location>>,
    /// Commit replies by commit epoch: a repeated CommitFiles gets the same answer.
    pub commits: Mutex<HashMap<i64, Arc<tokio::sync::OnceCell<PbCommitFilesResponse>>>>,
    /// Successful attempt per map index from the last commit; -1 = unfinished.
    pub map_attempts: RwLock<Option<Vec<i32>>>,
}

impl ShuffleState {
    pub(crate) fn location(&self, uid: &str, replica: bool) -> Option<Arc<Location>> {
        self.locations
            .get(&(uid.to_string(), replica))
            .map(|l| l.clone())
    }

    pub(crate) fn add_location(
        &self,
        id: i32,
        epoch: i32,
        replica: bool,
        peer: Option<String>,
    ) -> Arc<Location> {
        let uid = format!("{id}-{epoch}");
        let loc = self
            .locations
            .entry((uid, replica))
            .or_insert_with(|| {
                Arc::new(Location {
                    key: PartitionKey::new(stored_app(&self.app), self.shuffle_id, id)
                        .with_epoch(epoch)
                        .with_replica(replica),
                    bytes: AtomicU64::new(0),
                    next_block: AtomicI64::new(0),
                    committed: AtomicBool::new(false),
                    peer: parking_lot::RwLock::new(None),
                    map: Mutex::new(MapPartition::default()),
                })
            })
            .clone();
        if peer.is_some() {
            *loc.peer.write() = peer;
        }
        loc
    }

    /// Whether this shuffle's locations are map partitions (Flink).
    pub(crate) fn is_map(&self) -> bool {
        self.partition_type() == PartitionType::Map
    }

    pub(crate) fn partition_type(&self) -> PartitionType {
        PartitionType::from_u8(self.partition_type.load(Ordering::Relaxed))
    }

    pub(crate) fn split_mode(&self) -> SplitMode {
        SplitMode::from_u8(self.split_mode.load(Ordering::Relaxed))
    }

    pub(crate) fn set_modes(&self, split: SplitMode, partition_type: PartitionType) {
        self.split_mode.store(split as u8, Ordering::Relaxed);
        self.partition_type
            .store(partition_type as u8, Ordering::Relaxed);
    }

    /// Whether a map task already ended, per the last commit's attempts.
    pub(crate) fn map_ended(&self, map_id: i32) -> bool {
        self.map_attempts
            .read()
            .as_ref()
            .and_then(|a| a.get(map_id as usize).copied())
            .is_some_and(|attempt| attempt != -1)
    }
}

/// An open read stream and when it was last used.
pub struct Stream {
    pub view: Arc<PartitionView>,
    last_used: parking_lot::Mutex<std::time::Instant>,
}

impl Stream {
    pub(crate) fn touch(&self) {
        *self.last_used.lock() = std::time::Instant::now();
    }
}

pub struct WorkerState {
    pub store: Arc<Store>,
    pub config: CelebornConfig,
    pub addr: WorkerAddr,
    pub shuffles: DashMap<String, Arc<ShuffleState>>,
    pub streams: DashMap<i64, Arc<Stream>>,
    /// Credit-based streams over map partitions (Flink readers).
    pub credit_streams: DashMap<i64, Arc<CreditStream>>,
    /// Applications whose LifecycleManager sent REGISTER_APPLICATION_INFO,
    /// so are 0.6.1 or newer: their merged pushes get per-partition split
    /// replies, which 0.5 clients cannot read.
    pub split_info_apps: dashmap::DashSet<String>,
    /// Applications' secrets, registered on the master port (with
    /// `auth_enabled`); the node's master and worker ports share them.
    pub secrets: Arc<crate::auth::Secrets>,
    /// Set while the node decommissions: a master alone places nothing new
    /// on it (existing locations keep working).
    pub draining: Arc<std::sync::atomic::AtomicBool>,
    /// Connections to the workers that hold this worker's replicas.
    pub replicator: super::replicate::Replicator,
}

impl WorkerState {
    /// A worker whose per-application state follows the store's removals
    /// (expired, lost or unregistered applications): see [`AppListener`].
    pub fn new(store: Arc<Store>, config: CelebornConfig, addr: WorkerAddr) -> Arc<Self> {
        let replicator = super::replicate::Replicator::new(config.source_address);
        let state = Arc::new(WorkerState {
            store,
            config,
            addr,
            shuffles: DashMap::new(),
            streams: DashMap::new(),
            credit_streams: DashMap::new(),
            split_info_apps: dashmap::DashSet::new(),
            secrets: Default::default(),
            draining: Default::default(),
            replicator,
        });
        let listener: Arc<dyn AppListener> = state.clone();
        state.store.subscribe(Arc::downgrade(&listener));
        state.recover();
        state
    }

    /// Rebuilds the committed map partitions (Flink) the store recovered
    /// from their notes: a restarted worker serves their credit streams
    /// again. Reduce partitions need nothing here: their reads go to the
    /// store by partition key.
    fn recover(&self) {
        let (mut recovered, mut damaged) = (0u64, 0u64);
        for note in self.store.take_recovered_notes(NAMESPACE) {
            let Some(app) = unscoped_app(NAMESPACE, &note.app) else {
                continue;
            };
            let parsed = parse_map_note_name(&note.name).and_then(|(id, epoch, replica)| {
                Some((id, epoch, replica, MapPartition::from_note(&note.value)?))
            });
            let Some((id, epoch, replica, map)) = parsed else {
                damaged += 1;
                tracing::error!(
                    app,
                    shuffle = note.shuffle,
                    note = note.name,
                    "damaged note not recovered"
                );
                continue;
            };
            let Some(shuffle) = self.shuffle_or_create(&format!("{app}-{}", note.shuffle)) else {
                continue;
            };
            shuffle.set_modes(shuffle.split_mode(), PartitionType::Map);
            let loc = shuffle.add_location(id, epoch, replica, None);
            loc.next_block.store(map.records_end(), Ordering::Relaxed);
            *loc.map.lock() = map;
            loc.committed.store(true, Ordering::Release);
            recovered += 1;
        }
        if recovered + damaged > 0 {
            tracing::info!(
                map_partitions = recovered,
                damaged,
                "celeborn map partitions recovered"
            );
        }
    }

    /// Registers (or refreshes) an application in the store with Celeborn's
    /// application lease.
    pub(crate) fn register_app(&self, app: &str) {
        self.store
            .register_app_leased(&stored_app(app), self.config.app_timeout);
    }

    /// Tells the store what the wire says of an application's client: Flink
    /// (map partitions) or Spark (reduce partitions), and whether it is 0.6.1
    /// or later (it sent RegisterApplicationInfo) or older.
    pub(crate) fn describe_client(&self, app: &str, partition_type: PartitionType) {
        let kind = match partition_type {
            PartitionType::Map => "flink",
            _ => "spark",
        };
        let version = if self.split_info_apps.contains(app) {
            "0.6.1+"
        } else {
            "0.5.x-0.6.0"
        };
        self.store
            .set_app_client(&stored_app(app), &format!("{kind} client {version}"));
    }

    /// The secrets connections authenticate against, when authentication is on.
    pub(crate) fn auth(&self) -> Option<&crate::auth::Secrets> {
        self.config.auth_enabled.then_some(&*self.secrets)
    }

    pub(crate) fn shuffle(&self, shuffle_key: &str) -> Option<Arc<ShuffleState>> {
        self.shuffles.get(shuffle_key).map(|s| s.clone())
    }

    pub(crate) fn shuffle_or_create(&self, shuffle_key: &str) -> Option<Arc<ShuffleState>> {
        let (app, shuffle_id) = split_shuffle_key(shuffle_key)?;
        Some(
            self.shuffles
                .entry(shuffle_key.to_string())
                .or_insert_with(|| {
                    Arc::new(ShuffleState {
                        app: app.to_string(),
                        shuffle_id,
                        split_threshold: AtomicU64::new(u64::MAX),
                        split_mode: AtomicU8::new(SplitMode::default() as u8),
                        partition_type: AtomicU8::new(PartitionType::default() as u8),
                        locations: DashMap::new(),
                        commits: Mutex::new(HashMap::new()),
                        map_attempts: RwLock::new(None),
                    })
                })
                .clone(),
        )
    }

    pub(crate) fn add_stream(&self, view: PartitionView) -> i64 {
        let id = self.next_stream_id();
        self.streams.insert(
            id,
            Arc::new(Stream {
                view: Arc::new(view),
                last_used: parking_lot::Mutex::new(std::time::Instant::now()),
            }),
        );
        metrics::gauge!("switchyard_celeborn_streams").set(self.streams.len() as f64);
        id
    }

    /// A random positive stream id no open stream has: a client cannot read
    /// another's stream by counting ids up (any positive long is a valid id to
    /// the Java client).
    pub(crate) fn next_stream_id(&self) -> i64 {
        loop {
            let id = rand::random::<i64>() & i64::MAX;
            if id != 0 && !self.streams.contains_key(&id) && !self.credit_streams.contains_key(&id)
            {
                return id;
            }
        }
    }

    pub(crate) fn end_stream(&self, id: i64) {
        self.streams.remove(&id);
        if let Some((_, s)) = self.credit_streams.remove(&id) {
            s.cancel();
        }
        self.publish_stream_gauges();
    }

    pub(crate) fn publish_stream_gauges(&self) {
        metrics::gauge!("switchyard_celeborn_streams").set(self.streams.len() as f64);
        metrics::gauge!("switchyard_celeborn_credit_streams").set(self.credit_streams.len() as f64);
    }

    /// Cancels and forgets the credit streams `drop` selects.
    fn drop_credit_streams(&self, drop: impl Fn(&CreditStream) -> bool) -> usize {
        let before = self.credit_streams.len();
        self.credit_streams.retain(|_, s| {
            let dropped = drop(s);
            if dropped {
                s.cancel();
            }
            !dropped
        });
        before - self.credit_streams.len()
    }

    /// Closes streams unused for `idle` (a reader that died without
    /// BUFFER_STREAM_END); returns how many.
    pub fn expire_streams(&self, idle: std::time::Duration) -> usize {
        let before = self.streams.len();
        self.streams
            .retain(|_, s| s.last_used.lock().elapsed() < idle);
        let closed = before - self.streams.len() + self.drop_credit_streams(|s| s.idle() >= idle);
        if closed > 0 {
            tracing::info!(closed, "idle read streams closed");
            self.publish_stream_gauges();
        }
        closed
    }

    /// Forgets a shuffle and removes its data.
    pub async fn remove_shuffle(&self, app: &str, shuffle_id: i32) {
        self.shuffles.remove(&format!("{app}-{shuffle_id}"));
        let stored = stored_app(app);
        self.streams
            .retain(|_, v| !(v.view.key().app == stored && v.view.key().shuffle == shuffle_id));
        self.drop_credit_streams(|s| s.key.app == stored && s.key.shuffle == shuffle_id);
        if let Err(e) = self.store.remove_shuffle(&stored, shuffle_id).await {
            tracing::warn!(app, shuffle_id, error = %e, "removing a shuffle failed");
        }
    }

    /// Forgets an application and removes its data (ApplicationLost).
    pub async fn remove_app(&self, app: &str) {
        // The store tells us too, but only of applications it holds.
        self.forget_app(app);
        if let Err(e) = self.store.remove_app(&stored_app(app)).await {
            tracing::warn!(app, error = %e, "removing an application failed");
        }
    }

    /// Drops every location, stream and flag of an application: later pushes
    /// get PUSH_DATA_FAIL_PARTITION_NOT_FOUND, commits SHUFFLE_UNREGISTERED.
    fn forget_app(&self, app: &str) {
        self.shuffles.retain(|_, s| s.app != app);
        let stored = stored_app(app);
        self.streams.retain(|_, v| v.view.key().app != stored);
        self.drop_credit_streams(|s| s.key.app == stored);
        self.split_info_apps.remove(app);
        self.secrets.remove(app);
        self.publish_stream_gauges();
    }
}

impl AppListener for WorkerState {
    fn app_removed(&self, event: &AppRemoved) {
        let Some(app) = unscoped_app(NAMESPACE, &event.app) else {
            return;
        };
        tracing::debug!(
            app,
            reason = event.reason.as_str(),
            "celeborn: forgetting application"
        );
        self.forget_app(app);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_keys_split_on_the_last_dash() {
        assert_eq!(split_shuffle_key("local-1700-0"), Some(("local-1700", 0)));
        assert_eq!(split_shuffle_key("app-1-12"), Some(("app-1", 12)));
        assert_eq!(split_shuffle_key("nodash"), None);
        assert_eq!(split_shuffle_key("-3"), None);
        assert_eq!(split_shuffle_key("app-x"), None);
        assert_eq!(parse_unique_id("7-2"), Some((7, 2)));
        assert_eq!(parse_unique_id("7"), None);
    }
}
