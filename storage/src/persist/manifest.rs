//! The manifest: the durable record of what clients were told is committed,
//! so that a restarted node serves it again.
//!
//! One [redb] database per node (`recovery.path`). redb is a single file,
//! pure Rust with no dependencies, ACID with copy-on-write B-trees, and a
//! stable file format; the store writes it only at commit points and reads
//! it whole at start, which is what a B-tree file does well. (fjall's LSM
//! tree shines at sustained random writes we do not have; RocksDB bindings
//! need a C++ toolchain and minutes of build.)
//!
//! Tables, every value JSON (readable with any redb tool, small next to the
//! data it describes):
//! - `apps`: application id → [`AppEntry`];
//! - `partitions`: partition key → [`PartitionEntry`], its durable segments;
//! - `notes`: (application, shuffle, name) → bytes a front end keeps beside
//!   a shuffle (Uniffle's reported block ids, Celeborn's map regions).
//!
//! Order: a partition is recorded only after the bytes its segments cover
//! are written (fsynced too with `disks.sync`), and removed from here before
//! its files are deleted. So a crash leaves at worst files that nothing here
//! owns (swept at start), never an entry pointing at bytes that were not
//! written. Every commit is fsynced (`Durability::Immediate`); concurrent
//! commits share one transaction and one fsync (group commit).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::error::StorageError;
use crate::id::{AppId, PartitionKey};

const APPS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("apps");
const PARTITIONS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("partitions");
const NOTES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("notes");
const INFO: TableDefinition<&str, u64> = TableDefinition::new("info");
/// Bumped when an entry's meaning changes; a newer file is refused.
const FORMAT: u64 = 1;
/// Most jobs one transaction takes (bounds a transaction's size).
const GROUP_MAX: usize = 4096;
/// What the writer thread and [`Manifest::apply`] share.
#[derive(Default)]
struct WriterState {
    /// Jobs sent and not yet answered by the writer.
    pending: AtomicUsize,
    /// A wait timed out and the writer has not finished a transaction since:
    /// later changes are queued without waiting (each would only time out).
    stalled: AtomicBool,
    /// The file's size after the last transaction (read by the writer, so
    /// that a status request never touches a hung disk).
    file_bytes: AtomicU64,
}

/// Why the manifest could not be opened, read or written. Each turns into
/// [`StorageError::Manifest`] (or [`StorageError::Io`]) with the same text
/// at the store's boundary, so the public error stays what it was.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ManifestError {
    /// Its directory could not be created.
    #[error("i/o error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// redb failed opening or writing the file.
    #[error("{path}: {source}")]
    Db {
        path: String,
        #[source]
        source: redb::Error,
    },
    /// redb failed reading the file at open.
    #[error("reading: {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: redb::Error,
    },
    /// Written by a newer build whose entries may mean something else.
    #[error("{path} has format {found}; this build reads up to {FORMAT}")]
    NewerFormat { path: String, found: u64 },
    /// Too many changes wait for a writer that does not return.
    #[error("{path}: {PENDING_MAX} changes wait for a write that has not returned")]
    Backlog { path: String },
    /// A write outlived the timeout (this one, or an earlier one that still
    /// has not returned); the change stays queued.
    #[error(
        "{path}: a write has not returned within {timeout:?} (a hung metadata disk?); \
         the change is queued"
    )]
    Stalled {
        path: String,
        timeout: std::time::Duration,
    },
    #[error("manifest closed")]
    Closed,
    #[error("manifest writer stopped")]
    WriterStopped,
    /// The group transaction holding the change failed (shared by every
    /// change in the group).
    #[error(transparent)]
    Commit(Arc<redb::Error>),
}

impl From<ManifestError> for StorageError {
    fn from(e: ManifestError) -> Self {
        match e {
            ManifestError::Io { path, source } => StorageError::Io { path, source },
            other => StorageError::Manifest(other.to_string()),
        }
    }
}

type Result<T, E = ManifestError> = std::result::Result<T, E>;

/// Most jobs waiting for the writer. Past it (a metadata disk that stopped
/// answering while commits go on) changes are refused at once rather than
/// queued without bound.
const PENDING_MAX: usize = 65_536;

/// An application, as recorded with its first committed partition.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct AppEntry {
    pub lease_ms: u64,
    pub registered_unix_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// A partition's durable state at its last commit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct PartitionEntry {
    /// Committed as final (Celeborn): no appends after recovery either.
    pub sealed: bool,
    pub segments: Vec<SegmentEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct SegmentEntry {
    pub uid: u64,
    /// Offset of its first byte in the partition's logical stream.
    pub start: u64,
    /// Data bytes and index records that were durable at the commit.
    pub len: u64,
    pub records: u64,
    pub at: Place,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Place {
    /// Files below a data dir (the dir as configured, the files relative to it).
    Disk {
        dir: PathBuf,
        data: PathBuf,
        index: PathBuf,
    },
    /// Objects of the cold tier, as the tier names them.
    Cold { data: String, index: String },
}

/// A front end's note beside a shuffle, as recovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredNote {
    pub app: AppId,
    pub shuffle: i32,
    pub name: String,
    pub value: Vec<u8>,
}

/// One change to the manifest.
#[derive(Debug)]
pub(crate) enum Change {
    PutApp(AppId, AppEntry),
    PutPartition(PartitionKey, PartitionEntry),
    PutNote {
        app: AppId,
        shuffle: i32,
        name: String,
        value: Vec<u8>,
    },
    RemoveShuffle(AppId, i32),
    RemoveApp(AppId),
}

/// Everything the manifest held at open.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub apps: Vec<(AppId, AppEntry)>,
    pub partitions: Vec<(PartitionKey, PartitionEntry)>,
    pub notes: Vec<RecoveredNote>,
    /// Entries that did not decode (a damaged or foreign value): skipped.
    pub undecodable: u64,
}

struct Job {
    changes: Vec<Change>,
    done: tokio::sync::oneshot::Sender<Result<(), Arc<redb::Error>>>,
}

pub(crate) struct Manifest {
    path: PathBuf,
    db: Arc<Database>,
    /// How long [`Manifest::apply`] waits for its transaction: the disks'
    /// `io_timeout`, so that a hung metadata disk costs a commit that long
    /// and no more (the change stays queued and lands if the disk recovers).
    timeout: std::time::Duration,
    /// The writer's state, shared with its thread.
    shared: Arc<WriterState>,
    /// Taken on drop, which ends the writer.
    jobs: Option<mpsc::Sender<Job>>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Manifest {
    /// Waits for the writer to finish what it was given and close the file,
    /// so that the same path can be opened again at once (redb locks it).
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

impl Manifest {
    /// Opens (or creates) the manifest at `path` and starts its writer
    /// thread; [`Manifest::apply`] waits at most `timeout` for a write, and
    /// redb caches at most `cache_bytes` of its pages.
    pub(crate) fn open(
        path: &Path,
        timeout: std::time::Duration,
        cache_bytes: usize,
    ) -> Result<Manifest> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| ManifestError::Io {
                path: parent.display().to_string(),
                source,
            })?;
        }
        let db = redb::Builder::new()
            .set_cache_size(cache_bytes)
            .create(path)
            .map_err(|e| manifest_error(path, e))?;
        let txn = db.begin_write().map_err(|e| manifest_error(path, e))?;
        {
            let mut info = txn.open_table(INFO).map_err(|e| manifest_error(path, e))?;
            let format = info
                .get("format")
                .map_err(|e| manifest_error(path, e))?
                .map(|v| v.value());
            match format {
                Some(f) if f > FORMAT => {
                    return Err(ManifestError::NewerFormat {
                        path: path.display().to_string(),
                        found: f,
                    })
                }
                Some(_) => {}
                None => {
                    info.insert("format", FORMAT)
                        .map_err(|e| manifest_error(path, e))?;
                }
            }
            // Create every table, so that reads of a fresh file find them.
            txn.open_table(APPS).map_err(|e| manifest_error(path, e))?;
            txn.open_table(PARTITIONS)
                .map_err(|e| manifest_error(path, e))?;
            txn.open_table(NOTES).map_err(|e| manifest_error(path, e))?;
        }
        txn.commit().map_err(|e| manifest_error(path, e))?;
        let db = Arc::new(db);
        let (jobs, rx) = mpsc::channel();
        let writer_db = db.clone();
        let writer_path = path.to_path_buf();
        let shared = Arc::new(WriterState::default());
        shared.file_bytes.store(file_len(path), Ordering::Relaxed);
        let writer_shared = shared.clone();
        let writer = std::thread::Builder::new()
            .name("manifest-writer".into())
            .spawn(move || write_loop(&writer_db, &writer_path, rx, &writer_shared))
            .map_err(|source| ManifestError::Io {
                path: path.display().to_string(),
                source,
            })?;
        Ok(Manifest {
            path: path.to_path_buf(),
            db,
            timeout,
            shared,
            jobs: Some(jobs),
            writer: Some(writer),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes the manifest file took after its last transaction.
    pub(crate) fn file_bytes(&self) -> u64 {
        self.shared.file_bytes.load(Ordering::Relaxed)
    }

    /// Whether a write has outlived the timeout and not returned yet.
    pub(crate) fn stalled(&self) -> bool {
        self.shared.stalled.load(Ordering::Acquire)
    }

    /// Applies the changes in one durable transaction (shared with whatever
    /// else is waiting), and returns once it is on disk, or with an error
    /// after the timeout (the change still lands if the writer gets to it).
    pub(crate) async fn apply(&self, changes: Vec<Change>) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let state = &self.shared;
        if state.pending.load(Ordering::Acquire) >= PENDING_MAX {
            return Err(ManifestError::Backlog {
                path: self.path.display().to_string(),
            });
        }
        let (done, wait) = tokio::sync::oneshot::channel();
        state.pending.fetch_add(1, Ordering::AcqRel);
        let sent = self
            .jobs
            .as_ref()
            .ok_or(ManifestError::Closed)
            .and_then(|jobs| {
                jobs.send(Job { changes, done })
                    .map_err(|_| ManifestError::WriterStopped)
            });
        if let Err(e) = sent {
            state.pending.fetch_sub(1, Ordering::AcqRel);
            return Err(e);
        }
        let stuck = || ManifestError::Stalled {
            path: self.path.display().to_string(),
            timeout: self.timeout,
        };
        if state.stalled.load(Ordering::Acquire) {
            return Err(stuck());
        }
        match tokio::time::timeout(self.timeout, wait).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(ManifestError::Commit(e)),
            Ok(Err(_)) => Err(ManifestError::WriterStopped),
            Err(_) => {
                state.stalled.store(true, Ordering::Release);
                Err(stuck())
            }
        }
    }

    /// Reads every entry (at open, before the store serves).
    pub(crate) fn load(&self) -> Result<Loaded> {
        let err = |source: redb::Error| ManifestError::Read {
            path: self.path.display().to_string(),
            source,
        };
        let txn = self.db.begin_read().map_err(|e| err(e.into()))?;
        let mut loaded = Loaded::default();
        for row in txn
            .open_table(APPS)
            .map_err(|e| err(e.into()))?
            .iter()
            .map_err(|e| err(e.into()))?
        {
            let (k, v) = row.map_err(|e| err(e.into()))?;
            let (Ok(app), Ok(entry)) = (
                std::str::from_utf8(k.value()),
                serde_json::from_slice::<AppEntry>(v.value()),
            ) else {
                loaded.undecodable += 1;
                continue;
            };
            loaded.apps.push((AppId::from(app), entry));
        }
        for row in txn
            .open_table(PARTITIONS)
            .map_err(|e| err(e.into()))?
            .iter()
            .map_err(|e| err(e.into()))?
        {
            let (k, v) = row.map_err(|e| err(e.into()))?;
            match (
                decode_partition_key(k.value()),
                serde_json::from_slice::<PartitionEntry>(v.value()),
            ) {
                (Some(key), Ok(entry)) => loaded.partitions.push((key, entry)),
                _ => loaded.undecodable += 1,
            }
        }
        for row in txn
            .open_table(NOTES)
            .map_err(|e| err(e.into()))?
            .iter()
            .map_err(|e| err(e.into()))?
        {
            let (k, v) = row.map_err(|e| err(e.into()))?;
            match decode_note_key(k.value()) {
                Some((app, shuffle, name)) => loaded.notes.push(RecoveredNote {
                    app,
                    shuffle,
                    name,
                    value: v.value().to_vec(),
                }),
                None => loaded.undecodable += 1,
            }
        }
        Ok(loaded)
    }
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn manifest_error(path: &Path, e: impl Into<redb::Error>) -> ManifestError {
    ManifestError::Db {
        path: path.display().to_string(),
        source: e.into(),
    }
}

/// Takes the jobs waiting, applies them in one transaction, answers each.
fn write_loop(db: &Database, path: &Path, rx: mpsc::Receiver<Job>, state: &WriterState) {
    // `db` is the writer's clone; it is dropped when this returns.
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        while jobs.len() < GROUP_MAX {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        let started = std::time::Instant::now();
        let result = write_group(db, &jobs).map_err(|e| {
            tracing::error!(path = %path.display(), error = %e, "manifest commit failed");
            Arc::new(e)
        });
        metrics::histogram!("switchyard_manifest_commit_seconds")
            .record(started.elapsed().as_secs_f64());
        metrics::counter!("switchyard_manifest_commits_total").increment(1);
        state.file_bytes.store(file_len(path), Ordering::Relaxed);
        state.pending.fetch_sub(jobs.len(), Ordering::AcqRel);
        state.stalled.store(false, Ordering::Release);
        for j in jobs {
            let _ = j.done.send(result.clone());
        }
    }
}

fn write_group(db: &Database, jobs: &[Job]) -> std::result::Result<(), redb::Error> {
    let txn = db.begin_write()?;
    {
        let mut apps = txn.open_table(APPS)?;
        let mut partitions = txn.open_table(PARTITIONS)?;
        let mut notes = txn.open_table(NOTES)?;
        for change in jobs.iter().flat_map(|j| &j.changes) {
            match change {
                Change::PutApp(app, entry) => {
                    apps.insert(app.as_bytes(), json(entry).as_slice())?;
                }
                Change::PutPartition(key, entry) => {
                    partitions.insert(partition_key(key).as_slice(), json(entry).as_slice())?;
                }
                Change::PutNote {
                    app,
                    shuffle,
                    name,
                    value,
                } => {
                    let mut k = shuffle_prefix(app, *shuffle);
                    k.extend_from_slice(name.as_bytes());
                    notes.insert(k.as_slice(), value.as_slice())?;
                }
                Change::RemoveShuffle(app, shuffle) => {
                    let prefix = shuffle_prefix(app, *shuffle);
                    remove_prefix(&mut partitions, &prefix)?;
                    remove_prefix(&mut notes, &prefix)?;
                }
                Change::RemoveApp(app) => {
                    let prefix = app_prefix(app);
                    remove_prefix(&mut partitions, &prefix)?;
                    remove_prefix(&mut notes, &prefix)?;
                    apps.remove(app.as_bytes())?;
                }
            }
        }
    }
    txn.commit()?;
    Ok(())
}

fn json(v: &impl Serialize) -> Vec<u8> {
    // Plain structs of numbers and strings: serialising cannot fail.
    serde_json::to_vec(v).expect("manifest entries serialise")
}

fn remove_prefix(
    table: &mut redb::Table<&[u8], &[u8]>,
    prefix: &[u8],
) -> std::result::Result<(), redb::Error> {
    match prefix_end(prefix) {
        Some(end) => table.retain_in::<&[u8], _>(prefix..end.as_slice(), |_, _| false)?,
        None => table.retain_in::<&[u8], _>(prefix.., |_, _| false)?,
    }
    Ok(())
}

/// The smallest key above every key that starts with `prefix`.
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

// Keys: the application id length-prefixed (so no id is a prefix of
// another's keys), then big-endian fields with the sign bit flipped (so
// keys sort as the numbers do).

fn app_prefix(app: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + app.len() + 16);
    k.extend_from_slice(&(app.len() as u32).to_be_bytes());
    k.extend_from_slice(app.as_bytes());
    k
}

fn push_i32(k: &mut Vec<u8>, v: i32) {
    k.extend_from_slice(&((v as u32) ^ 0x8000_0000).to_be_bytes());
}

fn shuffle_prefix(app: &str, shuffle: i32) -> Vec<u8> {
    let mut k = app_prefix(app);
    push_i32(&mut k, shuffle);
    k
}

pub(crate) fn partition_key(key: &PartitionKey) -> Vec<u8> {
    let mut k = shuffle_prefix(&key.app, key.shuffle);
    push_i32(&mut k, key.partition);
    push_i32(&mut k, key.epoch);
    k.push(key.replica as u8);
    k
}

/// Splits `len app shuffle` off a key; returns them and the rest.
fn split_shuffle_prefix(k: &[u8]) -> Option<(AppId, i32, &[u8])> {
    let len = u32::from_be_bytes(k.get(..4)?.try_into().ok()?) as usize;
    let app = std::str::from_utf8(k.get(4..4 + len)?).ok()?;
    let rest = &k[4 + len..];
    let (shuffle, rest) = take_i32(rest)?;
    Some((AppId::from(app), shuffle, rest))
}

fn take_i32(k: &[u8]) -> Option<(i32, &[u8])> {
    let v = u32::from_be_bytes(k.get(..4)?.try_into().ok()?) ^ 0x8000_0000;
    Some((v as i32, &k[4..]))
}

fn decode_partition_key(k: &[u8]) -> Option<PartitionKey> {
    let (app, shuffle, rest) = split_shuffle_prefix(k)?;
    let (partition, rest) = take_i32(rest)?;
    let (epoch, rest) = take_i32(rest)?;
    let replica = match rest {
        [0] => false,
        [1] => true,
        _ => return None,
    };
    Some(
        PartitionKey::new(app, shuffle, partition)
            .with_epoch(epoch)
            .with_replica(replica),
    )
}

fn decode_note_key(k: &[u8]) -> Option<(AppId, i32, String)> {
    let (app, shuffle, rest) = split_shuffle_prefix(k)?;
    Some((app, shuffle, String::from_utf8(rest.to_vec()).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: std::time::Duration = std::time::Duration::from_secs(10);
    const TEST_CACHE: usize = 4 << 20;

    fn entry(len: u64) -> PartitionEntry {
        PartitionEntry {
            sealed: true,
            segments: vec![SegmentEntry {
                uid: 7,
                start: 0,
                len,
                records: 1,
                at: Place::Disk {
                    dir: "/d".into(),
                    data: "a/0/1-0-p.7.data".into(),
                    index: "a/0/1-0-p.7.index".into(),
                },
            }],
        }
    }

    #[test]
    fn keys_round_trip_and_keep_apps_apart() {
        let k = PartitionKey::new("a/b", -3, 7)
            .with_epoch(2)
            .with_replica(true);
        assert_eq!(decode_partition_key(&partition_key(&k)), Some(k));
        // "a" is a prefix of "ab" as a string, not as a key prefix.
        let a = app_prefix("a");
        assert!(!partition_key(&PartitionKey::new("ab", 0, 0)).starts_with(&a));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
        // Negative shuffles sort below positive ones.
        assert!(shuffle_prefix("x", -1) < shuffle_prefix("x", 0));
    }

    #[tokio::test]
    async fn changes_survive_reopen_and_removals_are_scoped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m/manifest.redb");
        let app = AppEntry {
            lease_ms: 1000,
            registered_unix_ms: 5,
            client: Some("spark".into()),
            user: None,
        };
        {
            let m = Manifest::open(&path, T, TEST_CACHE).unwrap();
            let mut changes = vec![
                Change::PutApp("a".into(), app.clone()),
                Change::PutApp("ab".into(), app.clone()),
            ];
            for (a, s, p) in [("a", 0, 0), ("a", 0, 1), ("a", 1, 0), ("ab", 0, 0)] {
                changes.push(Change::PutPartition(
                    PartitionKey::new(a, s, p),
                    entry(p as u64 + 10),
                ));
                changes.push(Change::PutNote {
                    app: a.into(),
                    shuffle: s,
                    name: format!("n{p}"),
                    value: vec![p as u8],
                });
            }
            m.apply(changes).await.unwrap();
            m.apply(vec![Change::RemoveShuffle("a".into(), 0)])
                .await
                .unwrap();
        }
        let m = Manifest::open(&path, T, TEST_CACHE).unwrap();
        let loaded = m.load().unwrap();
        assert_eq!(loaded.apps.len(), 2);
        let mut keys: Vec<String> = loaded
            .partitions
            .iter()
            .map(|(k, _)| k.to_string())
            .collect();
        keys.sort();
        assert_eq!(keys, ["a/1/0-0", "ab/0/0-0"]);
        assert_eq!(loaded.partitions[0].1, entry(10));
        assert_eq!(loaded.notes.len(), 2);
        m.apply(vec![Change::RemoveApp("a".into())]).await.unwrap();
        let loaded = m.load().unwrap();
        assert_eq!(loaded.apps.len(), 1);
        assert_eq!(loaded.partitions.len(), 1);
        assert_eq!(loaded.partitions[0].0.app.as_ref(), "ab");
        assert_eq!(
            loaded.notes,
            vec![RecoveredNote {
                app: "ab".into(),
                shuffle: 0,
                name: "n0".into(),
                value: vec![0]
            }]
        );
    }

    #[tokio::test]
    async fn concurrent_commits_share_transactions() {
        let dir = tempfile::tempdir().unwrap();
        let m = Arc::new(Manifest::open(&dir.path().join("manifest.redb"), T, TEST_CACHE).unwrap());
        let mut tasks = Vec::new();
        for p in 0..200 {
            let m = m.clone();
            tasks.push(tokio::spawn(async move {
                m.apply(vec![Change::PutPartition(
                    PartitionKey::new("a", 0, p),
                    entry(1),
                )])
                .await
            }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        assert_eq!(m.load().unwrap().partitions.len(), 200);
    }

    #[test]
    fn a_newer_format_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("manifest.redb");
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(INFO)
                .unwrap()
                .insert("format", FORMAT + 1)
                .unwrap();
            txn.commit().unwrap();
        }
        let err = Manifest::open(&path, T, TEST_CACHE).err().expect("refused");
        assert!(err.to_string().contains("format"), "{err}");
    }

    #[tokio::test]
    async fn a_stuck_write_costs_a_commit_the_timeout_and_lands_later() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("manifest.redb");
        let m = Manifest::open(&path, std::time::Duration::from_millis(300), TEST_CACHE).unwrap();
        // A write transaction held elsewhere stalls the writer as a hung
        // disk would (redb has one writer at a time).
        let blocker = m.db.begin_write().unwrap();
        let key = PartitionKey::new("app", 1, 2);
        let started = std::time::Instant::now();
        let err = m
            .apply(vec![Change::PutPartition(key.clone(), entry(5))])
            .await
            .expect_err("the write is stuck");
        assert!(err.to_string().contains("has not returned within"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert!(m.stalled());
        // While stalled, a change is queued without waiting.
        let started = std::time::Instant::now();
        let key2 = PartitionKey::new("app", 1, 3);
        m.apply(vec![Change::PutPartition(key2.clone(), entry(6))])
            .await
            .expect_err("still stuck");
        assert!(started.elapsed() < std::time::Duration::from_millis(200));
        // The stuck writer gets its transaction once the disk answers, and
        // the queued change lands.
        drop(blocker);
        let waited = std::time::Instant::now();
        while m.stalled() {
            assert!(
                waited.elapsed() < std::time::Duration::from_secs(10),
                "writer still stuck"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        m.apply(vec![Change::PutApp(
            AppId::from("app"),
            AppEntry {
                lease_ms: 1,
                registered_unix_ms: 2,
                client: None,
                user: None,
            },
        )])
        .await
        .unwrap();
        let loaded = m.load().unwrap();
        let keys: Vec<_> = loaded.partitions.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(keys, vec![key, key2]);
        assert_eq!(m.shared.pending.load(Ordering::Acquire), 0);
        assert!(m.file_bytes() > 0);
    }
}
