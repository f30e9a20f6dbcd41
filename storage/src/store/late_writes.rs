//! Files a hung disk's stuck writes leave behind.
//!
//! A flush whose write outlives `disks.io_timeout` gives up on the disk and
//! goes elsewhere, but the write itself cannot be cancelled: when the disk
//! comes back it finishes, and if its application or shuffle was removed
//! meanwhile it recreates the directory the removal deleted. Nothing owns
//! those files; without this they would stay until the next restart's
//! orphan sweep.

use std::path::{Component, Path};

use super::Store;
use crate::id::path_component;

/// Where a segment file sits under its disk's directory.
struct FilePlace<'a> {
    app_dir: &'a str,
    shuffle: i32,
}

impl<'a> FilePlace<'a> {
    /// `<disk>/<app>/<shuffle>/<file>`, or None for anything else.
    fn of(disk: &Path, file: &'a Path) -> Option<Self> {
        let rel = file.strip_prefix(disk).ok()?;
        let mut parts = rel.components().map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        });
        let app_dir = parts.next()??;
        let shuffle = parts.next()??.parse().ok()?;
        parts.next()??;
        parts
            .next()
            .is_none()
            .then_some(FilePlace { app_dir, shuffle })
    }
}

impl Store {
    /// Deletes the files late writes touched whose shuffle is no longer
    /// held, then their shuffle and application directories if that left
    /// them empty. A file of a held shuffle stays: it may be a segment that
    /// shuffle still reads, and it goes with the shuffle.
    pub(crate) async fn remove_late_orphans(&self) {
        let late = self.durable.take_late_writes();
        if late.is_empty() {
            return;
        }
        let apps = self.apps.all();
        let held = |place: &FilePlace| {
            apps.iter().any(|a| {
                path_component(a.id()) == place.app_dir
                    && a.shuffle_partitions(place.shuffle, None).is_some()
            })
        };
        let mut orphans = Vec::new();
        for (disk, file) in &late {
            match FilePlace::of(disk, file) {
                Some(place) if !held(&place) => orphans.push(file.clone()),
                Some(_) => {}
                None => tracing::warn!(file = %file.display(), "late write outside a shuffle dir"),
            }
        }
        if orphans.is_empty() {
            return;
        }
        let removed = tokio::task::spawn_blocking(move || remove_with_empty_dirs(&orphans)).await;
        match removed {
            Ok(n) if n > 0 => {
                metrics::counter!("switchyard_orphan_files_removed_total").increment(n);
                tracing::info!(
                    files = n,
                    "removed files a hung disk's late writes left behind"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "removing late writes' files failed"),
        }
    }
}

/// Removes each file, then its directory and that one's parent if empty
/// (a directory still holding files stays). Returns the files removed.
fn remove_with_empty_dirs(files: &[std::path::PathBuf]) -> u64 {
    let mut removed = 0;
    for f in files {
        match std::fs::remove_file(f) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(file = %f.display(), error = %e, "late write's file stays"),
        }
    }
    for f in files {
        let shuffle_dir = f.parent();
        for dir in [shuffle_dir, shuffle_dir.and_then(Path::parent)]
            .into_iter()
            .flatten()
        {
            // Fails, harmlessly, while it holds anything.
            let _ = std::fs::remove_dir(dir);
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_segment_files_under_a_disk() {
        let disk = Path::new("/d");
        let f = Path::new("/d/app-1/3/0-0-r.17.data");
        let p = FilePlace::of(disk, f).unwrap();
        assert_eq!((p.app_dir, p.shuffle), ("app-1", 3));
        for other in [
            "/e/app-1/3/x.data",
            "/d/app-1/x.data",
            "/d/app-1/s/x.data",
            "/d/a/3/b/x.data",
        ] {
            assert!(FilePlace::of(disk, Path::new(other)).is_none(), "{other}");
        }
    }
}
