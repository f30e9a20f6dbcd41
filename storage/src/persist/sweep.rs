//! The orphan sweep: `recovery.orphan_grace` after open, files and cold
//! objects of segments created before this open that no partition owns
//! (uncommitted data, applications removed while the node was down) are
//! deleted. Segment names carry their uid, and uids start at the open's
//! clock, so "created before this open" needs no clock on the file.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use crate::id::path_component;
use crate::tiers::partition::Partition;
use crate::tiers::Durable;

/// Removes files and cold objects of segments created before this open
/// that no partition (of `partitions`) owns, then empty directories of
/// applications not in `live_apps`.
pub(crate) async fn sweep_orphans(
    partitions: Vec<Arc<Partition>>,
    live_apps: Vec<String>,
    durable: &Durable,
) -> Swept {
    // Segments are known by their uids (unique per store, and in their file
    // and object names), and only those created before this open can be
    // orphans: the set is 8 bytes a recovered segment, where the paths of
    // both its files were some 300.
    let before = durable.first_uid();
    let owned: HashSet<u64> = partitions
        .iter()
        .flat_map(|p| p.segments_snapshot())
        .map(|s| s.uid)
        .filter(|&uid| uid < before)
        .collect();
    drop(partitions);
    let live_dirs: HashSet<String> = live_apps.iter().map(|a| path_component(a)).collect();
    let owned = Arc::new(owned);
    let mut swept = sweep_disks(durable, &owned, &live_dirs, before).await;
    swept.add(sweep_cold(durable, &owned, before).await);
    metrics::counter!("switchyard_orphan_files_removed_total").increment(swept.files);
    metrics::counter!("switchyard_orphan_bytes_removed_total").increment(swept.bytes);
    let (files, bytes, errors) = (swept.files, swept.bytes, swept.errors);
    if files > 0 || errors > 0 {
        tracing::info!(files, bytes, errors, "orphaned files and objects removed");
    }
    swept
}

async fn sweep_disks(
    durable: &Durable,
    owned: &Arc<HashSet<u64>>,
    live_dirs: &HashSet<String>,
    before: u64,
) -> Swept {
    let mut out = Swept::default();
    for dir in durable.dirs() {
        let root = dir.to_path_buf();
        let owned = owned.clone();
        let live = live_dirs.clone();
        let swept =
            tokio::task::spawn_blocking(move || sweep_dir(&root, &owned, &live, before)).await;
        match swept {
            Ok(s) => out.add(s),
            Err(e) => {
                out.errors += 1;
                tracing::warn!(dir = %dir.display(), error = %e, "orphan sweep failed");
            }
        }
    }
    out
}

async fn sweep_cold(durable: &Durable, owned: &HashSet<u64>, before: u64) -> Swept {
    let mut out = Swept::default();
    let Some(cold) = durable.cold() else {
        return out;
    };
    match cold.list_with_sizes("").await {
        Ok(objects) => {
            for (path, len) in objects {
                if !is_orphan(&path, owned, before) {
                    continue;
                }
                match cold.delete(&path, len).await {
                    Ok(()) => {
                        out.files += 1;
                        out.bytes += len;
                    }
                    Err(e) => {
                        out.errors += 1;
                        tracing::warn!(path, error = %e, "orphan delete failed");
                    }
                }
            }
        }
        Err(e) => {
            out.errors += 1;
            tracing::warn!(error = %e, "listing the cold tier for orphans failed");
        }
    }
    out
}

/// The uid in a segment file or object name (`<stem>.<uid>.data|index`).
fn segment_uid(path: &str) -> Option<u64> {
    let name = path.rsplit('/').next()?;
    let rest = name
        .strip_suffix(".data")
        .or_else(|| name.strip_suffix(".index"))?;
    rest.rsplit_once('.')?.1.parse().ok()
}

/// Whether a file or object is a segment's, created before this open
/// (`before`), that no partition owns.
fn is_orphan(name: &str, owned: &HashSet<u64>, before: u64) -> bool {
    segment_uid(name).is_some_and(|uid| uid < before && !owned.contains(&uid))
}

/// What a sweep removed.
#[derive(Default)]
pub(crate) struct Swept {
    pub(super) files: u64,
    pub(super) bytes: u64,
    pub(super) errors: u64,
}

impl Swept {
    fn add(&mut self, other: Swept) {
        self.files += other.files;
        self.bytes += other.bytes;
        self.errors += other.errors;
    }
}

/// `<root>/<app>/<shuffle>/<segment files>`: removes segment files created
/// before `before` that are not owned, then empty shuffle and app dirs of
/// apps not live. Anything else (the manifest's `.switchyard`, foreign
/// files) is left alone.
fn sweep_dir(root: &Path, owned: &HashSet<u64>, live: &HashSet<String>, before: u64) -> Swept {
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
                if !is_orphan(&fname, owned, before) {
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
