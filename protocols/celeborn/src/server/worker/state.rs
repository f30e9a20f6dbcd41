//! What the Worker remembers per shuffle: its live locations (partition
//! epochs and copies), split settings, commits and map attempts, and the open
//! read streams. The bytes themselves live in the store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use parking_lot::{Mutex, RwLock};
use switchyard_ident::{FrontEnd, Protocol};
use switchyard_storage::{AppId, AppListener, AppRemoved, PartitionKey, PartitionView, Store};

use super::credit::CreditStream;
use super::hybrid_budget::{HybridBudget, ShuffleHold};
use super::map_partition::{MapPartition, SealedMap};
use crate::config::CelebornConfig;
use crate::modes::{PartitionType, SplitMode};
use crate::proto::PbCommitFilesResponse;
use crate::ShuffleKey;

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

/// The store's id of a Celeborn application.
pub fn stored_app(app: &str) -> AppId {
    FrontEnd::Celeborn.stored(app)
}

/// Prefix of the store note that keeps a location live at a graceful stop:
/// `live/<id>-<epoch>/<p|r>`.
const LIVE_NOTE: &str = "live/";

/// A store note: its name and bytes.
type Note = (String, Vec<u8>);

fn live_note_name(uid: &str, replica: bool) -> String {
    location_note_name(LIVE_NOTE, uid, replica)
}

/// `<prefix><id>-<epoch>/<p|r>`: the name of a note about one location.
fn location_note_name(prefix: &str, uid: &str, replica: bool) -> String {
    format!("{prefix}{uid}/{}", if replica { 'r' } else { 'p' })
}

/// (id, epoch, replica) of a [`location_note_name`] with its prefix taken off.
fn parse_location_note(rest: &str) -> Option<(i32, i32, bool)> {
    let (uid, mode) = rest.rsplit_once('/')?;
    let (id, epoch) = parse_unique_id(uid)?;
    let replica = match mode {
        "p" => false,
        "r" => true,
        _ => return None,
    };
    Some((id, epoch, replica))
}

/// What a live location needs beyond its blocks: its replica's address and
/// its shuffle's split settings. Encoded as three lines of text.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LiveNote {
    peer: Option<String>,
    split_threshold: u64,
    split_mode: SplitMode,
}

impl LiveNote {
    fn encode(&self) -> Vec<u8> {
        format!(
            "{}\n{}\n{}",
            self.peer.as_deref().unwrap_or(""),
            self.split_threshold,
            self.split_mode as u8
        )
        .into_bytes()
    }

    fn decode(bytes: &[u8]) -> Option<LiveNote> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut lines = text.split('\n');
        let peer = lines.next()?;
        let split_threshold = lines.next()?.parse().ok()?;
        let split_mode = SplitMode::from_u8(lines.next()?.parse().ok()?);
        lines.next().is_none().then(|| LiveNote {
            peer: (!peer.is_empty()).then(|| peer.to_string()),
            split_threshold,
            split_mode,
        })
    }
}

/// The store note that keeps a committed map partition's regions:
/// `map/<id>-<epoch>/<p|r>`.
const MAP_NOTE: &str = "map/";

pub(crate) fn map_note_name(uid: &str, replica: bool) -> String {
    location_note_name(MAP_NOTE, uid, replica)
}

/// Parses `"<id>-<epoch>"`.
pub fn parse_unique_id(uid: &str) -> Option<(i32, i32)> {
    let (id, epoch) = uid.split_once('-')?;
    Some((id.parse().ok()?, epoch.parse().ok()?))
}

/// A location's key within its shuffle: its unique id `"id-epoch"` parsed,
/// and which copy. Twelve bytes inline, where the id as a `String` cost a
/// heap allocation per location.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LocationKey {
    pub id: i32,
    pub epoch: i32,
    pub replica: bool,
}

impl LocationKey {
    /// None for an id that is not `"id-epoch"`: no location has it.
    pub(crate) fn parse(uid: &str, replica: bool) -> Option<Self> {
        let (id, epoch) = parse_unique_id(uid)?;
        Some(LocationKey { id, epoch, replica })
    }

    /// The key in 8 bytes (id, epoch, copy), for maps that hold one per
    /// partition. Celeborn's epochs count up from 0; a negative one (no
    /// stock client sends it) shares the key of its low 31 bits, within its
    /// own shuffle.
    fn packed(self) -> u64 {
        (u64::from(self.id as u32) << 32)
            | (u64::from(self.epoch as u32 & 0x7fff_ffff) << 1)
            | u64::from(self.replica)
    }

    /// The unique id as clients write it.
    pub(crate) fn uid(&self) -> String {
        format!("{}-{}", self.id, self.epoch)
    }
}

/// One reserved location: a partition epoch, primary or replica.
pub struct Location {
    pub key: PartitionKey,
    pub bytes: AtomicU64,
    next_block: AtomicI64,
    pub committed: AtomicBool,
    /// A primary's replica: `host:replicatePort` of the peer worker, which
    /// every push to it is forwarded to (an `Arc<str>`: each push takes a
    /// copy, and it is 8 bytes smaller than a `String`).
    pub peer: parking_lot::RwLock<Option<Arc<str>>>,
    /// A map partition's state (Flink), made at its first use: a reduce
    /// partition, nearly every location of a large node, never has one.
    map: std::sync::OnceLock<Box<MapState>>,
}

/// What a map-partition location keeps beside its blocks.
#[derive(Default)]
pub struct MapState {
    /// Its regions.
    pub regions: Mutex<MapPartition>,
    /// Woken when its readable part grows (a region finished) or it is
    /// committed: hybrid streams follow it while it is written.
    pub grown: tokio::sync::Notify,
}

impl Location {
    pub(crate) fn next_block_id(&self) -> i64 {
        self.next_block.fetch_add(1, Ordering::Relaxed)
    }

    /// Its map-partition state, made now if it has none.
    pub fn map(&self) -> &MapState {
        self.map.get_or_init(Box::default)
    }

    /// A committed map partition to read, rebuilt from its sealed regions
    /// ([`ShuffleState::readable_location`]); it takes no pushes.
    fn sealed(key: PartitionKey, map: MapPartition) -> Location {
        let loc = Location {
            key,
            bytes: AtomicU64::new(0),
            next_block: AtomicI64::new(map.records_end()),
            committed: AtomicBool::new(true),
            peer: parking_lot::RwLock::new(None),
            map: std::sync::OnceLock::new(),
        };
        *loc.map().regions.lock() = map;
        loc
    }

    /// Wakes the streams that follow it, if any ever did.
    pub(crate) fn notify_grown(&self) {
        if let Some(m) = self.map.get() {
            m.grown.notify_waiters();
        }
    }

    /// The block id the next appended block gets.
    pub(crate) fn peek_block_id(&self) -> i64 {
        self.next_block.load(Ordering::Relaxed)
    }
}

/// A commit's reply kept for a repeated CommitFiles of its epoch, encoded:
/// a reduce shuffle's one commit names every partition, and encoded each
/// costs its id and storage info's few tens of bytes instead of their
/// structs and map entries (some 250 bytes).
#[derive(Clone, Debug)]
pub struct KeptReply(bytes::Bytes);

impl KeptReply {
    pub(crate) fn keep(reply: &PbCommitFilesResponse) -> Self {
        KeptReply(prost::Message::encode_to_vec(reply).into())
    }

    pub(crate) fn reply(&self) -> PbCommitFilesResponse {
        prost::Message::decode(self.0.clone()).expect("a reply this worker encoded decodes")
    }
}

/// Commit replies a shuffle keeps for repeated CommitFiles (retries come
/// within seconds, each with its own epoch's).
pub(crate) const KEPT_COMMITS: usize = 32;

/// Commits by epoch, each a reply once finished.
type Commits = HashMap<i64, Arc<tokio::sync::OnceCell<KeptReply>>>;

/// Removes the oldest finished commits until `keep` are left (or only
/// unfinished ones are older).
fn trim_kept(commits: &mut Commits, keep: usize) {
    while commits.len() > keep {
        let oldest = commits
            .iter()
            .filter(|(_, cell)| cell.initialized())
            .map(|(epoch, _)| *epoch)
            .min();
        match oldest {
            Some(epoch) => commits.remove(&epoch),
            None => break,
        };
    }
    if commits.capacity() > 4 * keep.max(1) {
        commits.shrink_to_fit();
    }
}

pub struct ShuffleState {
    pub app: String,
    /// The store's id of its application, made once: each location's key
    /// shares it (made per location, it was a 48-byte allocation apiece).
    stored_app: switchyard_storage::AppId,
    pub shuffle_id: i32,
    pub split_threshold: AtomicU64,
    /// A [`SplitMode`], as set by the last ReserveSlots.
    split_mode: AtomicU8,
    /// A [`PartitionType`], as set by the last ReserveSlots.
    partition_type: AtomicU8,
    /// Its locations, by unique id and copy.
    pub locations: DashMap<LocationKey, Arc<Location>>,
    /// Committed map partitions (Flink's blocking shuffle), each kept as its
    /// regions (a [`SealedMap`], 40 bytes with its key) instead of a whole
    /// [`Location`] (some 350 bytes with its map state and entry): a node
    /// holds one for every committed map partition until its shuffle goes.
    /// See [`ShuffleState::seal_maps`].
    sealed_maps: RwLock<HashMap<u64, SealedMap>>,
    /// Commit replies by commit epoch: a repeated CommitFiles gets the same
    /// answer. The last [`KEPT_COMMITS`] are kept ([`ShuffleState::trim_commits`]).
    pub commits: Mutex<Commits>,
    /// Successful attempt per map index from the last commit; -1 = unfinished.
    pub map_attempts: RwLock<Option<Vec<i32>>>,
    /// Hybrid-shuffle bytes of this shuffle counted as in memory.
    pub(crate) hybrid: ShuffleHold,
}

impl ShuffleState {
    /// This shuffle's key, as clients name it.
    pub(crate) fn key(&self) -> ShuffleKey<'_> {
        ShuffleKey::new(&self.app, self.shuffle_id)
    }

    pub(crate) fn location(&self, uid: &str, replica: bool) -> Option<Arc<Location>> {
        let key = LocationKey::parse(uid, replica)?;
        self.locations.get(&key).map(|l| l.clone())
    }

    pub(crate) fn add_location(
        &self,
        id: i32,
        epoch: i32,
        replica: bool,
        peer: Option<String>,
    ) -> Arc<Location> {
        let key = LocationKey { id, epoch, replica };
        let loc = self
            .locations
            .entry(key)
            .or_insert_with(|| {
                Arc::new(Location {
                    key: self.partition_key(key),
                    bytes: AtomicU64::new(0),
                    next_block: AtomicI64::new(0),
                    committed: AtomicBool::new(false),
                    peer: parking_lot::RwLock::new(None),
                    map: std::sync::OnceLock::new(),
                })
            })
            .clone();
        if peer.is_some() {
            *loc.peer.write() = peer.map(Arc::from);
        }
        loc
    }

    /// The store's key of a location of this shuffle.
    pub(crate) fn partition_key(&self, key: LocationKey) -> PartitionKey {
        PartitionKey::new(self.stored_app.clone(), self.shuffle_id, key.id)
            .with_epoch(key.epoch)
            .with_replica(key.replica)
    }

    /// Forgets committed reduce locations (`"id-epoch"`, replica): a push to
    /// one is answered as to a location never reserved here (the map ended,
    /// or HARD_SPLIT), which is what a committed location answers, and
    /// their bytes are read from the store by name. So a node holding a
    /// million committed partitions keeps no location (some 170 bytes with
    /// its map entry) for each, as after a restart. Map partitions are
    /// sealed instead ([`ShuffleState::seal_maps`]): reads need their regions.
    pub(crate) fn drop_committed<'a>(&self, committed: impl Iterator<Item = (&'a String, bool)>) {
        let mut dropped = false;
        for (uid, replica) in committed {
            if let Some(key) = LocationKey::parse(uid, replica) {
                dropped |= self.locations.remove(&key).is_some();
            }
        }
        if dropped {
            // A shuffle's map keeps its table's size after removals.
            self.locations.shrink_to_fit();
        }
    }

    /// Moves committed map partitions (`"id-epoch"`, replica) from the
    /// live locations into [`ShuffleState::sealed_maps`]: once committed a
    /// map partition only serves reads, which need its regions alone. A
    /// hybrid producer's partitions (streams follow their segments) and
    /// ones that never got a handshake (read as empty) stay live.
    pub(crate) fn seal_maps<'a>(&self, committed: impl Iterator<Item = (&'a String, bool)>) {
        let mut sealed = self.sealed_maps.write();
        let before = sealed.len();
        for (uid, replica) in committed {
            let Some(key) = LocationKey::parse(uid, replica) else {
                continue;
            };
            let Some(loc) = self.locations.get(&key).map(|l| l.clone()) else {
                continue;
            };
            let Some(map) = loc.map().regions.lock().seal() else {
                continue;
            };
            self.locations.remove(&key);
            sealed.insert(key.packed(), map);
        }
        if sealed.len() != before {
            self.locations.shrink_to_fit();
        }
    }

    /// A location to read: a live one, or a sealed map partition rebuilt
    /// (committed, with its regions) from its [`SealedMap`].
    pub(crate) fn readable_location(&self, uid: &str, replica: bool) -> Option<Arc<Location>> {
        let key = LocationKey::parse(uid, replica)?;
        if let Some(loc) = self.locations.get(&key) {
            return Some(loc.clone());
        }
        let map = self.sealed_maps.read().get(&key.packed())?.unseal();
        Some(Arc::new(Location::sealed(self.partition_key(key), map)))
    }

    /// Whether a committed map partition of this shuffle is sealed.
    pub(crate) fn is_sealed(&self, key: LocationKey) -> bool {
        self.sealed_maps.read().contains_key(&key.packed())
    }

    /// Keeps a committed map partition's regions as sealed: a restarted
    /// worker's, from their note. False if they cannot be.
    pub(crate) fn add_sealed(&self, key: LocationKey, map: &MapPartition) -> bool {
        let Some(sealed) = map.seal() else {
            return false;
        };
        self.sealed_maps.write().insert(key.packed(), sealed);
        true
    }

    /// Its locations held: live ones and sealed map partitions.
    pub(crate) fn held(&self) -> usize {
        self.locations.len() + self.sealed_maps.read().len()
    }

    /// Forgets locations (DestroyWorkerSlots), live or sealed.
    pub(crate) fn forget(&self, key: &LocationKey) {
        self.locations.remove(key);
        self.sealed_maps.write().remove(&key.packed());
    }

    /// Forgets the oldest finished commit replies past [`KEPT_COMMITS`]. A
    /// Flink job commits each map partition in its own epoch, so keeping
    /// every reply cost a reply per partition held; a retry of an epoch no
    /// longer kept commits again, which answers the same (committed
    /// locations are reported again from the store).
    pub(crate) fn trim_commits(&self) {
        trim_kept(&mut self.commits.lock(), KEPT_COMMITS);
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
    pub(crate) store: Arc<Store>,
    pub(crate) config: CelebornConfig,
    pub(crate) addr: WorkerAddr,
    pub(crate) shuffles: DashMap<String, Arc<ShuffleState>>,
    pub(crate) streams: DashMap<i64, Arc<Stream>>,
    /// Credit-based streams over map partitions (Flink readers).
    pub(crate) credit_streams: DashMap<i64, Arc<CreditStream>>,
    /// Applications whose LifecycleManager sent REGISTER_APPLICATION_INFO,
    /// so are 0.6.1 or newer: their merged pushes get per-partition split
    /// replies, which 0.5 clients cannot read.
    pub(crate) split_info_apps: dashmap::DashSet<String>,
    /// Applications' secrets, registered on the master port (with
    /// `auth_enabled`); the node's master and worker ports share them.
    pub(crate) secrets: Arc<crate::auth::Secrets>,
    /// Set while the node decommissions: a master alone places nothing new
    /// on it (existing locations keep working). Public: the node's
    /// decommission sets it.
    pub draining: Arc<std::sync::atomic::AtomicBool>,
    /// Set at a graceful stop ([`WorkerState::drain`]): primaries answer
    /// every push HARD_SPLIT (not written; the client moves the partition
    /// to another worker without counting this one failed) and ReserveSlots
    /// WORKER_SHUTDOWN, so that no client is pushing here when the ports
    /// close.
    pub(crate) stopping: AtomicBool,
    /// When the last push arrived, in ms since `started` (drain's clock).
    last_push_ms: AtomicU64,
    started: std::time::Instant,
    /// Connections to the workers that hold this worker's replicas.
    pub(crate) replicator: super::replicate::Replicator,
    /// Whether pushes are answered congested (`[celeborn.congestion]`).
    pub(crate) congestion: super::congestion::Congestion,
    /// Flink hybrid-shuffle bytes in memory (`hybrid_memory`).
    pub(crate) hybrid: Arc<HybridBudget>,
}

impl WorkerState {
    /// A worker whose per-application state follows the store's removals
    /// (expired, lost or unregistered applications): see [`AppListener`].
    pub fn new(store: Arc<Store>, config: CelebornConfig, addr: WorkerAddr) -> Arc<Self> {
        let replicator = super::replicate::Replicator::new(config.source_address);
        let congestion = super::congestion::Congestion::new(config.congestion.clone());
        // Inside the node's budget: never more than all of it.
        let hybrid =
            HybridBudget::new(config.hybrid_memory.as_u64().min(store.budget().capacity()));
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
            stopping: AtomicBool::new(false),
            last_push_ms: AtomicU64::new(0),
            started: std::time::Instant::now(),
            replicator,
            congestion,
            hybrid,
        });
        let listener: Arc<dyn AppListener> = state.clone();
        state.store.subscribe(Arc::downgrade(&listener));
        state.recover();
        // Zero before the first event, so that panels show 0, not no data.
        metrics::counter!(super::push::HARD_SPLITS).increment(0);
        metrics::counter!(super::rpc::SLOTS_ALLOCATED).increment(0);
        metrics::counter!(super::rpc::COMMIT_FAILURES).increment(0);
        let _ = metrics::histogram!(super::fetch::CHUNK_BYTES);
        state.publish_location_gauge();
        state.publish_stream_gauges();
        state
    }

    /// Whether a push just written is answered congested.
    pub(crate) fn congested(&self) -> bool {
        let b = self.store.budget();
        self.congestion.check(b.used(), b.capacity())
    }

    /// Notes that a push arrived (drain waits for them to stop).
    pub(crate) fn push_arrived(&self) {
        self.last_push_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// The first step of a graceful stop, while the ports still serve:
    /// primaries refuse pushes with HARD_SPLIT and ReserveSlots with
    /// WORKER_SHUTDOWN until no push has come for `quiet`, or `max` passed.
    /// Clients thereby move their partitions to other workers before the
    /// ports close, instead of failing to connect (which the
    /// LifecycleManager punishes by excluding the worker for minutes).
    /// Fetches and commits are served throughout.
    pub async fn drain(&self, quiet: std::time::Duration, max: std::time::Duration) {
        if quiet.is_zero() {
            return;
        }
        self.stopping.store(true, Ordering::Release);
        // A master of its own places nothing more here either.
        self.draining.store(true, Ordering::Relaxed);
        self.push_arrived();
        let begun = std::time::Instant::now();
        loop {
            let now = self.started.elapsed().as_millis() as u64;
            let idle = now.saturating_sub(self.last_push_ms.load(Ordering::Relaxed));
            if idle >= quiet.as_millis() as u64 || begun.elapsed() >= max {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        tracing::info!(took = ?begun.elapsed(), "celeborn pushes drained");
    }

    /// Rebuilds the committed map partitions (Flink) the store recovered
    /// from their notes: a restarted worker serves their credit streams
    /// again. Reduce partitions need nothing here: their reads go to the
    /// store by partition key.
    fn recover(&self) {
        let (mut recovered, mut live_locations, mut damaged) = (0u64, 0u64, 0u64);
        for note in self.store.take_recovered_notes(FrontEnd::Celeborn) {
            let Some(app) = FrontEnd::Celeborn.own_id(&note.app) else {
                continue;
            };
            let ok = if let Some(rest) = note.name.strip_prefix(LIVE_NOTE) {
                let done = self.recover_live_location(app, note.shuffle, rest, &note.value);
                live_locations += u64::from(done);
                done
            } else if let Some(rest) = note.name.strip_prefix(MAP_NOTE) {
                let done = self.recover_map_location(app, note.shuffle, rest, &note.value);
                recovered += u64::from(done);
                done
            } else {
                false
            };
            if !ok {
                damaged += 1;
                tracing::error!(
                    app,
                    shuffle = note.shuffle,
                    note = note.name,
                    "damaged note not recovered"
                );
            }
        }
        if recovered + live_locations + damaged > 0 {
            tracing::info!(
                map_partitions = recovered,
                live_locations,
                damaged,
                "celeborn locations recovered"
            );
        }
    }

    /// A committed map partition (Flink), from its [`MAP_NOTE`]: its regions
    /// serve credit streams again.
    fn recover_map_location(&self, app: &str, shuffle_id: i32, rest: &str, value: &[u8]) -> bool {
        let (Some((id, epoch, replica)), Some(map)) =
            (parse_location_note(rest), MapPartition::from_note(value))
        else {
            return false;
        };
        let Some(shuffle) = self.shuffle_or_create(&ShuffleKey::new(app, shuffle_id).to_string())
        else {
            return false;
        };
        shuffle.set_modes(shuffle.split_mode(), PartitionType::Map);
        shuffle.add_sealed(LocationKey { id, epoch, replica }, &map)
    }

    /// A location that was live (reserved, not committed) at the last
    /// graceful stop, from its [`LIVE_NOTE`]: it takes pushes again and the
    /// LifecycleManager's CommitFiles finds it, with the blocks pushed
    /// before the stop (which the store recorded then).
    fn recover_live_location(&self, app: &str, shuffle_id: i32, rest: &str, value: &[u8]) -> bool {
        let (Some((id, epoch, replica)), Some(live)) =
            (parse_location_note(rest), LiveNote::decode(value))
        else {
            return false;
        };
        let Some(shuffle) = self.shuffle_or_create(&ShuffleKey::new(app, shuffle_id).to_string())
        else {
            return false;
        };
        shuffle.set_modes(live.split_mode, shuffle.partition_type());
        shuffle
            .split_threshold
            .store(live.split_threshold, Ordering::Relaxed);
        let loc = shuffle.add_location(id, epoch, replica, live.peer);
        let stats = self.store.partition_stats(&loc.key).unwrap_or_default();
        loc.bytes.store(stats.received_bytes, Ordering::Relaxed);
        // Block ids go on after the recovered blocks'.
        loc.next_block
            .store(stats.received_blocks as i64, Ordering::Relaxed);
        true
    }

    /// Records every live reduce location (reserved, not yet committed) as
    /// a note, at a graceful stop once no push is in flight, so that the
    /// restarted worker resumes the running jobs' shuffles. Map partitions
    /// (Flink) are not kept while uncommitted: their open regions are not
    /// readable, and Flink reruns the producer.
    pub async fn record_live_locations(&self) {
        let mut by_shuffle: HashMap<(String, i32), Vec<Note>> = HashMap::new();
        for s in self.shuffles.iter() {
            if s.is_map() {
                continue;
            }
            for entry in s.locations.iter() {
                let (key, loc) = (entry.key(), entry.value());
                if loc.committed.load(Ordering::Acquire) {
                    continue;
                }
                let note = LiveNote {
                    peer: loc.peer.read().as_deref().map(str::to_string),
                    split_threshold: s.split_threshold.load(Ordering::Relaxed),
                    split_mode: s.split_mode(),
                };
                by_shuffle
                    .entry((s.app.clone(), s.shuffle_id))
                    .or_default()
                    .push((live_note_name(&key.uid(), key.replica), note.encode()));
            }
        }
        let count: usize = by_shuffle.values().map(Vec::len).sum();
        for ((app, shuffle), notes) in by_shuffle {
            if let Err(e) = self
                .store
                .record_notes(&stored_app(&app), shuffle, notes)
                .await
            {
                tracing::warn!(app, shuffle, error = %e, "live locations not recorded");
            }
        }
        if count > 0 {
            tracing::info!(
                locations = count,
                "live celeborn locations recorded for the restart"
            );
        }
    }

    /// Registers (or refreshes) an application in the store with Celeborn's
    /// application lease; silent past it, the application is *lost*, as
    /// Celeborn's master calls it.
    pub(crate) fn register_app(&self, app: &str) {
        self.store.register_app_lapsing(
            &stored_app(app),
            self.config.app_timeout,
            switchyard_storage::RemovalReason::Lost,
        );
    }

    /// Tells the store what the wire says of an application's client: Flink
    /// (map partitions) or Spark (reduce partitions), and whether it is 0.6.1
    /// or later (it sent RegisterApplicationInfo) or older.
    pub(crate) fn describe_client(&self, app: &str, partition_type: PartitionType) {
        let protocol = match partition_type {
            PartitionType::Map => Protocol::Flink,
            _ => Protocol::Celeborn,
        };
        let version = if self.split_info_apps.contains(app) {
            "0.6.1+"
        } else {
            "0.5.x-0.6.0"
        };
        self.store
            .set_app_client(&stored_app(app), &protocol.client_description(version));
    }

    /// The address this worker is reached at, as the master hands it out.
    pub fn addr(&self) -> &WorkerAddr {
        &self.addr
    }

    /// This worker's tags (`node.tags`), which its heartbeat carries to
    /// every coordinator.
    pub fn tags(&self) -> &[String] {
        &self.config.worker_tags
    }

    /// How many chunk streams (Spark readers) are open.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// The ids of the open credit streams (Flink readers).
    pub fn credit_stream_ids(&self) -> Vec<i64> {
        self.credit_streams.iter().map(|s| *s.key()).collect()
    }

    /// The secrets connections authenticate against, when authentication is on.
    pub fn auth(&self) -> Option<&crate::auth::Secrets> {
        self.config.auth_enabled.then_some(&*self.secrets)
    }

    /// Whether this worker holds shuffle `shuffle_id` of `app` (slots were
    /// reserved here and it was not removed since).
    pub fn has_shuffle(&self, app: &str, shuffle_id: i32) -> bool {
        self.shuffles
            .contains_key(&ShuffleKey::new(app, shuffle_id).to_string())
    }

    pub(crate) fn shuffle(&self, shuffle_key: &str) -> Option<Arc<ShuffleState>> {
        self.shuffles.get(shuffle_key).map(|s| s.clone())
    }

    pub(crate) fn shuffle_or_create(&self, shuffle_key: &str) -> Option<Arc<ShuffleState>> {
        let ShuffleKey { app, shuffle_id } = ShuffleKey::parse(shuffle_key)?;
        Some(
            self.shuffles
                .entry(shuffle_key.to_string())
                .or_insert_with(|| {
                    Arc::new(ShuffleState {
                        app: app.to_string(),
                        stored_app: stored_app(app),
                        shuffle_id,
                        split_threshold: AtomicU64::new(u64::MAX),
                        split_mode: AtomicU8::new(SplitMode::default() as u8),
                        partition_type: AtomicU8::new(PartitionType::default() as u8),
                        locations: switchyard_storage::small_map(),
                        sealed_maps: RwLock::new(HashMap::new()),
                        commits: Mutex::new(HashMap::new()),
                        map_attempts: RwLock::new(None),
                        hybrid: ShuffleHold::new(self.hybrid.clone()),
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

    /// Partition locations held (reserved and not yet destroyed or gone
    /// with their shuffle): Celeborn's active slots. A walk of the
    /// shuffles, not of the partitions, at each change of them.
    /// Locations held: reserved and not yet committed (reduce), or map
    /// partitions until their shuffle goes.
    pub fn live_locations(&self) -> usize {
        self.shuffles.iter().map(|s| s.held()).sum()
    }

    pub(crate) fn publish_location_gauge(&self) {
        metrics::gauge!("switchyard_celeborn_locations").set(self.live_locations() as f64);
    }

    pub(crate) fn publish_stream_gauges(&self) {
        metrics::gauge!("switchyard_celeborn_streams").set(self.streams.len() as f64);
        metrics::gauge!("switchyard_celeborn_credit_streams").set(self.credit_streams.len() as f64);
        // Map partitions with a reader now (Celeborn's active map partitions).
        let read: std::collections::HashSet<PartitionKey> =
            self.credit_streams.iter().map(|s| s.key.clone()).collect();
        metrics::gauge!("switchyard_celeborn_credit_partitions").set(read.len() as f64);
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
        self.shuffles
            .remove(&ShuffleKey::new(app, shuffle_id).to_string());
        self.publish_location_gauge();
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

    /// [`WorkerState::remove_app`] for a master answering ApplicationLost:
    /// the application is gone for clients at once, its data is deleted in
    /// a task of the store, and the driver's stop does not wait for it.
    pub fn remove_app_later(&self, app: &str) {
        self.forget_app(app);
        self.store.remove_app_later(
            &stored_app(app),
            switchyard_storage::RemovalReason::Unregistered,
        );
    }

    /// Drops every location, stream and flag of an application: later pushes
    /// get PUSH_DATA_FAIL_PARTITION_NOT_FOUND, commits SHUFFLE_UNREGISTERED.
    fn forget_app(&self, app: &str) {
        self.shuffles.retain(|_, s| s.app != app);
        self.publish_location_gauge();
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
        let Some(app) = FrontEnd::Celeborn.own_id(&event.app) else {
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
    fn only_the_last_finished_commits_are_kept() {
        let reply = KeptReply::keep(&PbCommitFilesResponse::default());
        let mut commits = Commits::new();
        for epoch in 0..10 {
            let cell = tokio::sync::OnceCell::new();
            // Epoch 2 is still running: it stays, however old.
            if epoch != 2 {
                cell.set(reply.clone()).unwrap();
            }
            commits.insert(epoch, Arc::new(cell));
        }
        trim_kept(&mut commits, 4);
        let mut left: Vec<i64> = commits.keys().copied().collect();
        left.sort();
        assert_eq!(left, vec![2, 7, 8, 9]);
    }

    #[test]
    fn unique_ids_are_id_dash_epoch() {
        assert_eq!(parse_unique_id("7-2"), Some((7, 2)));
        assert_eq!(parse_unique_id("7"), None);
    }

    #[test]
    fn restart_notes_round_trip() {
        let map = map_note_name("3-1", true);
        assert_eq!(
            parse_location_note(map.strip_prefix(MAP_NOTE).unwrap()),
            Some((3, 1, true))
        );
        assert_eq!(parse_location_note("3-1/x"), None);
        assert_eq!(live_note_name("3-1", false), "live/3-1/p");
        for note in [
            LiveNote {
                peer: Some("127.0.0.3:9103".into()),
                split_threshold: 1 << 30,
                split_mode: SplitMode::Hard,
            },
            LiveNote {
                peer: None,
                split_threshold: u64::MAX,
                split_mode: SplitMode::Soft,
            },
        ] {
            assert_eq!(LiveNote::decode(&note.encode()), Some(note));
        }
        assert_eq!(LiveNote::decode(b"peer\nnot a number\n0"), None);
        assert_eq!(LiveNote::decode(b"peer\n1\n0\nextra"), None);
        assert_eq!(LiveNote::decode(&[0xff, 0xfe]), None);
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    /// A node holds a million locations (issue 43): each `Arc<Location>`
    /// allocation must stay within jemalloc's 112-byte size class (the
    /// next is 128), and a location's map key inline.
    #[test]
    fn a_location_fits_the_112_byte_class() {
        let arc = std::mem::size_of::<Location>() + 2 * std::mem::size_of::<usize>();
        assert!(arc <= 112, "Arc<Location> is {arc} bytes");
        assert!(std::mem::size_of::<LocationKey>() <= 12);
    }

    #[test]
    fn location_keys_parse_unique_ids_and_write_them_back() {
        let k = LocationKey::parse("17-3", true).unwrap();
        assert_eq!((k.id, k.epoch, k.replica), (17, 3, true));
        assert_eq!(k.uid(), "17-3");
        assert_eq!(LocationKey::parse("17", false), None);
        assert_eq!(LocationKey::parse("a-1", false), None);
    }
}
