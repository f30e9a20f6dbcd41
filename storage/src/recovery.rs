//! Restart without losing committed data: recording commits in the
//! [manifest](crate::manifest), rebuilding them at open, and sweeping what
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
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::block::INDEX_RECORD_LEN;
use crate::error::{Result, StorageError};
use crate::id::{path_component, AppId};
use crate::manifest::{AppEntry, Change, Loaded, PartitionEntry, Place, SegmentEntry};
use crate::partition::{App, Partition, Shuffle};
use crate::segment::{Segment, SegmentLocation};
use crate::store::Store;

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

impl Store {
    /// Rebuilds the partitions the manifest records (at open, before the
    /// store serves anything).
    pub(crate) fn recover(&self, loaded: Loaded) {
        let started = Instant::now();
        let mut status = self.recovery.lock().clone();
        status.undecodable_entries = loaded.undecodable;
        let now = self.now_ms();
        for (id, entry) in loaded.apps {
            let mut app = App::new(id.clone(), now, entry.lease_ms);
            app.registered_unix_ms = entry.registered_unix_ms;
            *app.client.get_mut() = entry.client;
            *app.user.get_mut() = entry.user;
            self.apps.insert(id, Arc::new(app));
        }
        let dirs: HashMap<&Path, usize> = self
            .disks
            .iter()
            .map(|d| (d.dir.as_path(), d.index))
            .collect();
        for (key, entry) in loaded.partitions {
            let recorded: u64 = entry.segments.iter().map(|s| s.len).sum();
            let Some(app) = self.apps.get(&key.app).map(|a| a.clone()) else {
                status.discarded_partitions += 1;
                status.discarded_bytes += recorded;
                continue;
            };
            let segments = match self.rebuild_segments(&entry, &dirs) {
                Ok(s) => s,
                Err(why) => {
                    tracing::warn!(partition = %key, why, "recorded partition not recovered");
                    status.discarded_partitions += 1;
                    status.discarded_bytes += recorded;
                    continue;
                }
            };
            let p = Partition::new(key.clone(), app.tally.clone());
            p.sealed.store(entry.sealed, Ordering::Release);
            p.received_bytes.store(recorded, Ordering::Relaxed);
            p.received_blocks.store(
                segments.iter().map(|s| s.extent().records).sum(),
                Ordering::Relaxed,
            );
            for s in &segments {
                match s.disk() {
                    Some(d) => self.disks[d]
                        .stored_bytes
                        .fetch_add(s.len(), Ordering::Relaxed),
                    None => self
                        .cold
                        .as_ref()
                        .map(|c| c.stored_bytes.fetch_add(s.len(), Ordering::Relaxed))
                        .unwrap_or(0),
                };
            }
            *p.segments.write() = segments;
            app.tally.held.fetch_add(recorded, Ordering::Relaxed);
            app.tally.written.fetch_add(recorded, Ordering::Relaxed);
            app.tally.partitions.fetch_add(1, Ordering::Relaxed);
            app.shuffles
                .entry(key.shuffle)
                .or_insert_with(|| Arc::new(Shuffle::default()))
                .partitions
                .insert(key.local(), Arc::new(p));
            status.partitions += 1;
            status.bytes += recorded;
        }
        // Applications whose every partition was discarded hold nothing.
        self.apps.retain(|_, a| !a.shuffles.is_empty());
        status.apps = self.apps.len() as u64;
        let apps: HashSet<AppId> = self.apps.iter().map(|a| a.key().clone()).collect();
        let notes: Vec<_> = loaded
            .notes
            .into_iter()
            .filter(|n| apps.contains(&n.app))
            .collect();
        status.notes = notes.len() as u64;
        *self.recovered_notes.lock() = notes;
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
        *self.recovery.lock() = status;
    }

    fn rebuild_segments(
        &self,
        entry: &PartitionEntry,
        dirs: &HashMap<&Path, usize>,
    ) -> std::result::Result<Vec<Arc<Segment>>, String> {
        let mut out = Vec::with_capacity(entry.segments.len());
        let mut expected_start = 0;
        for s in &entry.segments {
            if s.start != expected_start {
                return Err(format!(
                    "segment {} starts at {}, not {expected_start}",
                    s.uid, s.start
                ));
            }
            expected_start += s.len;
            let location = match &s.at {
                Place::Disk { dir, data, index } => {
                    let disk = *dirs
                        .get(dir.as_path())
                        .ok_or_else(|| format!("data dir {} is not configured", dir.display()))?;
                    let (data, index) = (dir.join(data), dir.join(index));
                    check_len(&data, s.len)?;
                    check_len(&index, s.records * INDEX_RECORD_LEN as u64)?;
                    SegmentLocation::Disk { disk, data, index }
                }
                Place::Cold { data, index } => {
                    if self.cold.is_none() {
                        return Err("the cold tier is not configured".into());
                    }
                    SegmentLocation::Cold {
                        data: data.clone(),
                        index: index.clone(),
                    }
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

    /// Records the partitions as they stand (their flushes done) and the
    /// notes, durably, before returning.
    pub(crate) async fn record(
        &self,
        partitions: &[Arc<Partition>],
        mut extra: Vec<Change>,
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
            if apps_done.insert(p.key.app.clone()) {
                if let Some(a) = self.apps.get(&p.key.app) {
                    changes.push(Change::PutApp(a.id.clone(), app_entry(&a)));
                }
            }
            let segments: Vec<SegmentEntry> = p
                .segments_snapshot()
                .iter()
                .map(|s| self.segment_entry(s))
                .collect();
            if segments.is_empty() {
                continue;
            }
            changes.push(Change::PutPartition(
                p.key.clone(),
                PartitionEntry {
                    sealed: p.sealed.load(Ordering::Acquire),
                    segments,
                },
            ));
        }
        changes.append(&mut extra);
        manifest.apply(changes).await
    }

    /// Forgets a removed shuffle or application in the manifest (before its
    /// files go). A failure is logged: the files are deleted anyway, and an
    /// entry left behind is discarded at the next start (its files gone).
    pub(crate) async fn forget_recorded(&self, change: Change) {
        if let Some(m) = &self.manifest {
            if let Err(e) = m.apply(vec![change]).await {
                tracing::warn!(error = %e, "manifest removal failed");
            }
        }
    }

    fn segment_entry(&self, s: &Segment) -> SegmentEntry {
        let extent = s.extent();
        let at = match &s.location {
            SegmentLocation::Disk { disk, data, index } => {
                let dir = &self.disks[*disk].dir;
                let rel = |p: &PathBuf| p.strip_prefix(dir).unwrap_or(p).to_path_buf();
                Place::Disk {
                    dir: dir.clone(),
                    data: rel(data),
                    index: rel(index),
                }
            }
            SegmentLocation::Cold { data, index } => Place::Cold {
                data: data.clone(),
                index: index.clone(),
            },
        };
        SegmentEntry {
            uid: s.uid,
            start: s.logical_start,
            len: extent.len,
            records: extent.records,
            at,
        }
    }

    /// Removes files and cold objects of segments created before this open
    /// that no partition owns, then empty directories of applications the
    /// store does not hold.
    pub(crate) async fn sweep_orphans(&self) {
        let mut owned_files: HashSet<PathBuf> = HashSet::new();
        let mut owned_objects: HashSet<String> = HashSet::new();
        for p in self.all_partitions() {
            for s in p.segments_snapshot() {
                match &s.location {
                    SegmentLocation::Disk { data, index, .. } => {
                        owned_files.insert(data.clone());
                        owned_files.insert(index.clone());
                    }
                    SegmentLocation::Cold { data, index } => {
                        owned_objects.insert(data.clone());
                        owned_objects.insert(index.clone());
                    }
                }
            }
        }
        let live_dirs: HashSet<String> =
            self.apps.iter().map(|a| path_component(a.key())).collect();
        let before = self.uid_start;
        let (mut files, mut bytes, mut errors) = (0u64, 0u64, 0u64);
        for d in &self.disks {
            let root = d.dir.clone();
            let owned = owned_files.clone();
            let live = live_dirs.clone();
            let swept =
                tokio::task::spawn_blocking(move || sweep_dir(&root, &owned, &live, before)).await;
            match swept {
                Ok(s) => {
                    files += s.files;
                    bytes += s.bytes;
                    errors += s.errors;
                }
                Err(e) => {
                    errors += 1;
                    tracing::warn!(dir = %d.dir.display(), error = %e, "orphan sweep failed");
                }
            }
        }
        if let Some(cold) = &self.cold {
            match cold.list_with_sizes("").await {
                Ok(objects) => {
                    for (path, len) in objects {
                        let created_before = segment_uid(&path).is_some_and(|uid| uid < before);
                        if !created_before || owned_objects.contains(&path) {
                            continue;
                        }
                        match cold.delete(&path, len).await {
                            Ok(()) => {
                                files += 1;
                                bytes += len;
                            }
                            Err(e) => {
                                errors += 1;
                                tracing::warn!(path, error = %e, "orphan delete failed");
                            }
                        }
                    }
                }
                Err(e) => {
                    errors += 1;
                    tracing::warn!(error = %e, "listing the cold tier for orphans failed");
                }
            }
        }
        let mut status = self.recovery.lock();
        status.swept = true;
        status.orphan_files = files;
        status.orphan_bytes = bytes;
        status.orphan_errors = errors;
        metrics::counter!("switchyard_orphan_files_removed_total").increment(files);
        metrics::counter!("switchyard_orphan_bytes_removed_total").increment(bytes);
        if files > 0 || errors > 0 {
            tracing::info!(files, bytes, errors, "orphaned files and objects removed");
        }
    }

    /// Front-end notes recovered for the applications of `front_end`; each
    /// is handed out once.
    pub fn take_recovered_notes(
        &self,
        front_end: switchyard_ident::FrontEnd,
    ) -> Vec<crate::RecoveredNote> {
        let mut all = self.recovered_notes.lock();
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut *all)
            .into_iter()
            .partition(|n| front_end.own_id(&n.app).is_some());
        *all = rest;
        mine
    }

    /// What the last start recovered and removed.
    pub fn recovery_status(&self) -> RecoveryStatus {
        let mut s = self.recovery.lock().clone();
        if let Some(m) = &self.manifest {
            s.manifest_bytes = m.file_bytes();
            s.manifest_stalled = m.stalled();
        }
        s
    }
}

fn app_entry(a: &App) -> AppEntry {
    AppEntry {
        lease_ms: a.lease_ms.load(Ordering::Relaxed),
        registered_unix_ms: a.registered_unix_ms,
        client: a.client.lock().clone(),
        user: a.user.lock().clone(),
    }
}

fn check_len(path: &Path, at_least: u64) -> std::result::Result<(), String> {
    match std::fs::metadata(path) {
        Ok(m) if m.len() >= at_least => Ok(()),
        Ok(m) => Err(format!(
            "{} has {} bytes, {at_least} recorded",
            path.display(),
            m.len()
        )),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The uid in a segment file or object name (`<stem>.<uid>.data|index`).
fn segment_uid(path: &str) -> Option<u64> {
    let name = path.rsplit('/').next()?;
    let rest = name
        .strip_suffix(".data")
        .or_else(|| name.strip_suffix(".index"))?;
    rest.rsplit_once('.')?.1.parse().ok()
}

#[derive(Default)]
struct Swept {
    files: u64,
    bytes: u64,
    errors: u64,
}

/// `<root>/<app>/<shuffle>/<segment files>`: removes segment files created
/// before `before` that are not owned, then empty shuffle and app dirs of
/// apps not live. Anything else (the manifest's `.switchyard`, foreign
/// files) is left alone.
fn sweep_dir(root: &Path, owned: &HashSet<PathBuf>, live: &HashSet<String>, before: u64) -> Swept {
    let mut out = Swept::default();
    let Ok(apps) = std::fs::read_dir(root) else {
        return out;
    };
    for app in apps.flatten() {
        let name = app.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !app.path().is_dir() {
            continue;
        }
        let Ok(shuffles) = std::fs::read_dir(app.path()) else {
            continue;
        };
        for shuffle in shuffles.flatten() {
            let Ok(files) = std::fs::read_dir(shuffle.path()) else {
                continue;
            };
            for f in files.flatten() {
                let path = f.path();
                let fname = f.file_name().to_string_lossy().into_owned();
                let created_before = segment_uid(&fname).is_some_and(|uid| uid < before);
                if !created_before || owned.contains(&path) {
                    continue;
                }
                let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                match std::fs::remove_file(&path) {
                    Ok(()) => {
                        out.files += 1;
                        out.bytes += len;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        out.errors += 1;
                        tracing::warn!(path = %path.display(), error = %e, "orphan delete failed");
                    }
                }
            }
            if !live.contains(&name) {
                // Fails, harmlessly, when not empty.
                let _ = std::fs::remove_dir(shuffle.path());
            }
        }
        if !live.contains(&name) {
            let _ = std::fs::remove_dir(app.path());
        }
    }
    out
}

/// Opens the manifest the config names and reads it (at store open).
pub(crate) fn open_manifest(
    config: &crate::config::StoreConfig,
) -> Result<Option<(crate::manifest::Manifest, Loaded)>> {
    let Some(path) = config.recovery.manifest_path(&config.disks) else {
        if config.recovery.enabled {
            tracing::info!("recovery off: no data dir or recovery.path for the manifest");
        }
        return Ok(None);
    };
    let manifest = crate::manifest::Manifest::open(&path, config.disks.io_timeout)?;
    let loaded = manifest.load().map_err(|e| match e {
        StorageError::Manifest(m) => StorageError::Manifest(format!("reading: {m}")),
        other => other,
    })?;
    Ok(Some((manifest, loaded)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_uids_come_from_names() {
        assert_eq!(
            segment_uid("a/0/3-0-p.1700000000000001.data"),
            Some(1700000000000001)
        );
        assert_eq!(segment_uid("3-0-r.42.index"), Some(42));
        assert_eq!(segment_uid("manifest.redb"), None);
        assert_eq!(segment_uid("x.data"), None);
    }
}
