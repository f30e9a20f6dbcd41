//! Restart without losing committed data: recording commits in the
//! [manifest](super::manifest), rebuilding them at open, and sweeping what
//! no commit owns.
//!
//! - A commit (seal, `flush_shuffle`, `commit_partitions`) flushes first,
//!   then records each partition's segments as they stand: only bytes
//!   already written are ever recorded.
//! - At open, every recorded partition whose files still hold its recorded
//!   lengths comes back (appends go to new segments; sealed ones stay
//!   sealed), and every application with a fresh lease: one that never
//!   heartbeats again expires as usual.
//! - `recovery.orphan_grace` later, files and cold objects of segments this
//!   process did not create and no partition owns (uncommitted data, apps
//!   removed while the node was down) are deleted. Segment names carry
//!   their uid, and uids start at the open's clock, so "created before this
//!   open" needs no clock on the file.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

use super::manifest::{
    AppEntry, Change, Loaded, Manifest, PartitionEntry, Place, RecoveredNote, SegmentEntry,
};
use super::sweep::Swept;
use crate::apps::{App, Apps};
use crate::block::INDEX_RECORD_LEN;
use crate::config::StoreConfig;
use crate::error::{Result, StorageError};
use crate::id::{AppId, PartitionKey};
use crate::segment::{Segment, SegmentFiles, SegmentLocation};
use crate::tiers::partition::Partition;
use crate::tiers::Durable;

/// What the last start recovered, discarded and removed.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RecoveryStatus {
    /// Whether commits are recorded (`recovery.enabled` and a place for it).
    pub enabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    pub manifest_bytes: u64,
    pub apps: u64,
    pub partitions: u64,
    pub bytes: u64,
    /// Front-end notes handed back (reported block ids, map regions).
    pub notes: u64,
    /// Recorded partitions whose files were missing or short, or whose disk
    /// or cold tier is no longer configured: not served.
    pub discarded_partitions: u64,
    pub discarded_bytes: u64,
    /// Manifest entries that did not decode.
    pub undecodable_entries: u64,
    /// Milliseconds from reading the manifest to serving.
    pub duration_ms: u64,
    /// Commits the manifest could not record within the disks' `io_timeout`
    /// since start (a full, failing or hung metadata disk): served until the
    /// next restart, and after it only if the queued write landed meanwhile.
    pub record_failures: u64,
    /// A manifest write has outlived `io_timeout` and not returned: commits
    /// are answered without waiting for it, and are not yet durable.
    pub manifest_stalled: bool,
    /// Whether the orphan sweep has run.
    pub swept: bool,
    /// Files and objects no committed partition owned, removed by the sweep.
    pub orphan_files: u64,
    pub orphan_bytes: u64,
    pub orphan_errors: u64,
}

/// What survives restarts, at run time: the manifest commits are recorded
/// in, the status of the last recovery, and the front ends' notes found at
/// open until they take them.
pub(crate) struct Recovery {
    /// Where commits are recorded; none with recovery off.
    manifest: Option<Manifest>,
    status: Mutex<RecoveryStatus>,
    notes: Mutex<Vec<RecoveredNote>>,
    commit_timeout: Duration,
}

impl Recovery {
    /// Opens the manifest the config names (if recovery is on) and reads it:
    /// what it held is returned, for [`Recovery::recover`].
    pub(crate) fn open(config: &StoreConfig) -> Result<(Recovery, Option<Loaded>)> {
        let opened = open_manifest(config)?;
        let status = RecoveryStatus {
            enabled: opened.is_some(),
            manifest: opened.as_ref().map(|(m, _)| m.path().display().to_string()),
            ..Default::default()
        };
        let (manifest, loaded) = match opened {
            Some((m, l)) => (Some(m), Some(l)),
            None => (None, None),
        };
        let recovery = Recovery {
            manifest,
            status: Mutex::new(status),
            notes: Mutex::default(),
            commit_timeout: config.commit_timeout,
        };
        Ok((recovery, loaded))
    }

    pub(crate) fn is_enabled(&self) -> bool {
        self.manifest.is_some()
    }

    /// Rebuilds the partitions the manifest records into `apps` (at open,
    /// before the store serves anything).
    pub(crate) fn recover(&self, loaded: Loaded, apps: &Apps, durable: &Durable) {
        let started = Instant::now();
        let mut status = self.status.lock().clone();
        status.undecodable_entries = loaded.undecodable;
        for (id, entry) in loaded.apps {
            apps.restore(
                id,
                entry.lease_ms,
                entry.registered_unix_ms,
                entry.client,
                entry.user,
            );
        }
        let restored = restore_partitions(&loaded.partitions, apps, durable);
        status.partitions = restored.partitions;
        status.bytes = restored.bytes;
        status.discarded_partitions = restored.discarded_partitions;
        status.discarded_bytes = restored.discarded_bytes;
        drop(loaded.partitions);
        // Applications whose every partition was discarded hold nothing.
        apps.drop_empty();
        status.apps = apps.len() as u64;
        let live: HashSet<String> = apps.ids().into_iter().collect();
        let notes: Vec<_> = loaded
            .notes
            .into_iter()
            .filter(|n| live.contains(n.app.as_ref()))
            .collect();
        status.notes = notes.len() as u64;
        *self.notes.lock() = notes;
        status.duration_ms = started.elapsed().as_millis() as u64;
        if status.partitions > 0 || status.discarded_partitions > 0 {
            tracing::info!(
                apps = status.apps,
                partitions = status.partitions,
                bytes = status.bytes,
                discarded = status.discarded_partitions,
                elapsed_ms = status.duration_ms,
                "recovered committed partitions"
            );
        }
        metrics::gauge!("switchyard_recovered_partitions").set(status.partitions as f64);
        metrics::gauge!("switchyard_recovered_bytes").set(status.bytes as f64);
        metrics::gauge!("switchyard_recovery_discarded_partitions")
            .set(status.discarded_partitions as f64);
        metrics::gauge!("switchyard_recovery_seconds").set(started.elapsed().as_secs_f64());
        *self.status.lock() = status;
    }

    /// Records committed partitions (and notes) in the manifest, waiting at
    /// most until `deadline`. A failure does not fail the commit: the blocks
    /// are durable in their tier and readable until the next restart, which
    /// then does not recover them. It is logged and counted
    /// (`recovery.record_failures`), so that a full or broken metadata disk
    /// degrades restarts instead of failing every job.
    pub(crate) async fn record_until(
        &self,
        partitions: &[Arc<Partition>],
        notes: Vec<Change>,
        deadline: tokio::time::Instant,
        apps: &Apps,
        durable: &Durable,
    ) -> Result<()> {
        let record = self.record(partitions, notes, apps, durable);
        let result = match tokio::time::timeout_at(deadline, record).await {
            Ok(r) => r,
            Err(_) => Err(StorageError::Manifest(format!(
                "commit not recorded within {:?}",
                self.commit_timeout
            ))),
        };
        if let Err(e) = result {
            let failures = {
                let mut r = self.status.lock();
                r.record_failures += 1;
                r.record_failures
            };
            metrics::counter!("switchyard_manifest_failures_total").increment(1);
            if failures == 1 || failures.is_power_of_two() {
                tracing::error!(error = %e, failures, "commit not recorded: a restart will not recover it");
            }
        }
        Ok(())
    }

    /// Records the partitions as they stand (their flushes done) and the
    /// notes, durably, before returning.
    async fn record(
        &self,
        partitions: &[Arc<Partition>],
        mut extra: Vec<Change>,
        apps: &Apps,
        durable: &Durable,
    ) -> Result<()> {
        let Some(manifest) = &self.manifest else {
            return Ok(());
        };
        let mut changes = Vec::with_capacity(partitions.len() + extra.len() + 1);
        let mut apps_done: HashSet<AppId> = HashSet::new();
        for p in partitions {
            if p.is_removed() {
                continue;
            }
            if apps_done.insert(p.key().app.clone()) {
                if let Some(a) = apps.get(&p.key().app) {
                    changes.push(Change::PutApp(a.id().clone(), app_entry(&a)));
                }
            }
            let segments: Vec<SegmentEntry> = p
                .segments_snapshot()
                .iter()
                .filter_map(|s| segment_entry(p.key(), s, durable))
                .collect();
            if segments.is_empty() {
                continue;
            }
            changes.push(Change::PutPartition(
                p.key().clone(),
                PartitionEntry {
                    sealed: p.is_sealed(),
                    segments,
                },
            ));
        }
        changes.append(&mut extra);
        Ok(manifest.apply(changes).await?)
    }

    /// Forgets a removed shuffle or application in the manifest (before its
    /// files go). A failure is logged: the files are deleted anyway, and an
    /// entry left behind is discarded at the next start (its files gone).
    pub(crate) async fn forget(&self, change: Change) {
        if let Some(m) = &self.manifest {
            if let Err(e) = m.apply(vec![change]).await {
                let e = StorageError::from(e);
                tracing::warn!(error = %e, "manifest removal failed");
            }
        }
    }

    /// A front end's notes on a shuffle, as manifest changes.
    pub(crate) fn note_changes(
        app: &AppId,
        shuffle: i32,
        notes: Vec<(String, Vec<u8>)>,
    ) -> Vec<Change> {
        notes
            .into_iter()
            .map(|(name, value)| Change::PutNote {
                app: app.clone(),
                shuffle,
                name,
                value,
            })
            .collect()
    }

    /// See [`crate::Store::take_recovered_notes`].
    pub(crate) fn take_notes(&self, front_end: switchyard_ident::FrontEnd) -> Vec<RecoveredNote> {
        let mut all = self.notes.lock();
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut *all)
            .into_iter()
            .partition(|n| front_end.own_id(&n.app).is_some());
        *all = rest;
        mine
    }

    /// What the last start recovered and removed.
    pub(crate) fn status(&self) -> RecoveryStatus {
        let mut s = self.status.lock().clone();
        if let Some(m) = &self.manifest {
            s.manifest_bytes = m.file_bytes();
            s.manifest_stalled = m.stalled();
        }
        s
    }

    /// Keeps what the orphan sweep removed.
    pub(crate) fn swept(&self, swept: Swept) {
        let mut status = self.status.lock();
        status.swept = true;
        status.orphan_files = swept.files;
        status.orphan_bytes = swept.bytes;
        status.orphan_errors = swept.errors;
    }
}

/// A segment's manifest entry; None only for a cold segment of a store
/// without a cold tier, which no store has.
fn segment_entry(key: &PartitionKey, s: &Segment, durable: &Durable) -> Option<SegmentEntry> {
    let extent = s.extent();
    let at = match durable.segment_files(key, s).ok()? {
        SegmentFiles::Disk { disk, data, index } => {
            let dir = durable.disk_dir(disk);
            let rel = |p: PathBuf| p.strip_prefix(dir).map(Path::to_path_buf).unwrap_or(p);
            Place::Disk {
                dir: dir.to_path_buf(),
                data: rel(data),
                index: rel(index),
            }
        }
        SegmentFiles::Cold { data, index } => Place::Cold { data, index },
    };
    Some(SegmentEntry {
        uid: s.uid,
        start: s.logical_start,
        len: extent.len,
        records: extent.records,
        at,
    })
}

/// A recorded partition's segments, each checked against its file.
/// What [`restore_partitions`] brought back and left out.
#[derive(Default)]
struct Restored {
    partitions: u64,
    bytes: u64,
    discarded_partitions: u64,
    discarded_bytes: u64,
}

/// Threads that check recorded files at start. Checking is two `stat`s per
/// segment, mostly waiting on the filesystem's metadata when its caches are
/// cold; a million partitions checked one at a time took most of a 25 s
/// restart.
const RESTORE_THREADS: usize = 16;

/// Rebuilds recorded partitions into `apps`, their files checked on several
/// threads.
fn restore_partitions(
    partitions: &[(PartitionKey, PartitionEntry)],
    apps: &Apps,
    durable: &Durable,
) -> Restored {
    let dirs = durable.dir_indexes();
    let chunk = partitions.len().div_ceil(RESTORE_THREADS).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = partitions
            .chunks(chunk)
            .map(|part| scope.spawn(|| restore_chunk(part, apps, durable, &dirs)))
            .collect();
        workers.into_iter().fold(Restored::default(), |mut all, w| {
            let r = w.join().expect("restore thread panicked");
            all.partitions += r.partitions;
            all.bytes += r.bytes;
            all.discarded_partitions += r.discarded_partitions;
            all.discarded_bytes += r.discarded_bytes;
            all
        })
    })
}

fn restore_chunk(
    partitions: &[(PartitionKey, PartitionEntry)],
    apps: &Apps,
    durable: &Durable,
    dirs: &HashMap<&Path, usize>,
) -> Restored {
    let mut out = Restored::default();
    for (key, entry) in partitions {
        let recorded: u64 = entry.segments.iter().map(|s| s.len).sum();
        let restored = apps.contains(&key.app)
            && match rebuild_segments(key, entry, dirs, durable) {
                Ok(segments) => apps.restore_partition(key, |app, tally| {
                    for s in &segments {
                        durable.count_recovered(s);
                    }
                    // Keyed by the application's one id (see partition_or_create).
                    let key = PartitionKey { app, ..key.clone() };
                    Partition::recovered(key, tally, entry.sealed, segments)
                }),
                Err(why) => {
                    tracing::warn!(partition = %key, why = %why, "recorded partition not recovered");
                    false
                }
            };
        if restored {
            out.partitions += 1;
            out.bytes += recorded;
        } else {
            out.discarded_partitions += 1;
            out.discarded_bytes += recorded;
        }
    }
    out
}

fn rebuild_segments(
    key: &PartitionKey,
    entry: &PartitionEntry,
    dirs: &HashMap<&Path, usize>,
    durable: &Durable,
) -> std::result::Result<Vec<Arc<Segment>>, Unrecoverable> {
    let mut out = Vec::with_capacity(entry.segments.len());
    let mut expected_start = 0;
    for s in &entry.segments {
        if s.start != expected_start {
            return Err(Unrecoverable::Gap {
                uid: s.uid,
                start: s.start,
                expected: expected_start,
            });
        }
        expected_start += s.len;
        let location = match &s.at {
            Place::Disk { dir, data, index } => {
                let disk = *dirs
                    .get(dir.as_path())
                    .ok_or_else(|| Unrecoverable::UnknownDir(dir.clone()))?;
                let (data, index) = (dir.join(data), dir.join(index));
                check_len(&data, s.len)?;
                check_len(&index, s.records * INDEX_RECORD_LEN as u64)?;
                let named = durable.disk_stem(disk, key, s.uid);
                SegmentLocation::disk_files(disk, &data, &index, &named)
                    .ok_or(Unrecoverable::Names(s.uid))?
            }
            Place::Cold { data, index } => {
                let Some(named) = durable.cold_stem(key, s.uid) else {
                    return Err(Unrecoverable::NoColdTier);
                };
                SegmentLocation::cold_objects(data, index, Some(&named))
                    .ok_or(Unrecoverable::Names(s.uid))?
            }
        };
        let seg = Segment::new(s.uid, location, s.start);
        seg.commit(s.len, s.records);
        // Appends after a restart start a new segment: bytes past the
        // recorded length were never committed.
        seg.close();
        seg.set_tail(None);
        out.push(Arc::new(seg));
    }
    Ok(out)
}

fn app_entry(a: &App) -> AppEntry {
    AppEntry {
        lease_ms: a.lease_ms(),
        registered_unix_ms: a.registered_unix_ms(),
        client: a.client(),
        user: a.user(),
    }
}

/// Why a recorded partition is not served after a restart.
#[derive(Debug, thiserror::Error)]
enum Unrecoverable {
    /// Its data and index are not `<stem>.data` and `<stem>.index`, as
    /// every segment this store writes is named.
    #[error("segment {0}'s data and index are not named <stem>.data and <stem>.index")]
    Names(u64),
    #[error("segment {uid} starts at {start}, not {expected}")]
    Gap { uid: u64, start: u64, expected: u64 },
    #[error("data dir {} is not configured", .0.display())]
    UnknownDir(PathBuf),
    #[error("the cold tier is not configured")]
    NoColdTier,
    /// A file shorter than what was recorded: bytes were lost.
    #[error("{} has {found} bytes, {recorded} recorded", path.display())]
    Short {
        path: PathBuf,
        found: u64,
        recorded: u64,
    },
    #[error("{}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn check_len(path: &Path, at_least: u64) -> std::result::Result<(), Unrecoverable> {
    match std::fs::metadata(path) {
        Ok(m) if m.len() >= at_least => Ok(()),
        Ok(m) => Err(Unrecoverable::Short {
            path: path.to_path_buf(),
            found: m.len(),
            recorded: at_least,
        }),
        Err(source) => Err(Unrecoverable::Unreadable {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Opens the manifest the config names and reads it (at store open).
fn open_manifest(config: &StoreConfig) -> Result<Option<(Manifest, Loaded)>> {
    let Some(path) = config.recovery.manifest_path(&config.disks) else {
        if config.recovery.enabled {
            tracing::info!("recovery off: no data dir or recovery.path for the manifest");
        }
        return Ok(None);
    };
    let cache = config.recovery.cache_size.as_u64().max(1 << 20) as usize;
    let manifest = Manifest::open(&path, config.disks.io_timeout, cache)?;
    // Read errors say "reading: " before the path (see ManifestError::Read).
    let loaded = manifest.load()?;
    Ok(Some((manifest, loaded)))
}
