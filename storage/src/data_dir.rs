//! What Switchyard keeps in its data directories besides shuffle data, and
//! the one way it replaces such a file.
//!
//! The first data directory (`disks.dirs[0]`) holds the node's state:
//! - `node-id`: the node's id, one line (the gateway decides it; this
//!   module only says where it lives);
//! - `.switchyard/manifest.redb`: the recovery manifest, unless
//!   `recovery.path` puts it elsewhere.
//!
//! Both names start outside what an application directory can be called
//! (`id::path_component` never yields a leading `.`, and `node-id` is a
//! file, not a directory), so the orphan sweep never takes them for
//! shuffle data.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The file in the first data directory that holds the node id.
pub const NODE_ID_FILE: &str = "node-id";
/// The directory in the first data directory for the store's own state.
pub const STATE_DIR: &str = ".switchyard";
/// The manifest's file name inside [`STATE_DIR`].
pub const MANIFEST_FILE: &str = "manifest.redb";

/// The first data directory, where the node's state lives; none on a
/// cold-tier-only node.
pub fn state_dir(dirs: &[PathBuf]) -> Option<&Path> {
    dirs.first().map(PathBuf::as_path)
}

/// `<first dir>/node-id`.
pub fn node_id_path(dirs: &[PathBuf]) -> Option<PathBuf> {
    state_dir(dirs).map(|d| d.join(NODE_ID_FILE))
}

/// `<first dir>/.switchyard/manifest.redb`: the manifest's default place.
pub fn default_manifest_path(dirs: &[PathBuf]) -> Option<PathBuf> {
    state_dir(dirs).map(|d| d.join(STATE_DIR).join(MANIFEST_FILE))
}

/// The temporary name [`write_atomic`] writes `file` under first: `file`
/// with its extension replaced by `tmp`.
pub fn temp_path(file: &Path) -> PathBuf {
    file.with_extension("tmp")
}

/// Replaces `file` with `bytes` so that a crash leaves the old content or
/// the new, never a torn file: writes a temporary file beside it, syncs
/// it, renames it over `file`, then syncs the directory so the rename
/// itself survives. On an error the temporary file is removed.
pub fn write_atomic(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = temp_path(file);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, file)?;
        let dir = match file.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        std::fs::File::open(dir)?.sync_all()
    };
    write().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_dir_holds_the_state() {
        let dirs = [PathBuf::from("/d1"), PathBuf::from("/d2")];
        assert_eq!(node_id_path(&dirs), Some(PathBuf::from("/d1/node-id")));
        assert_eq!(
            default_manifest_path(&dirs),
            Some(PathBuf::from("/d1/.switchyard/manifest.redb"))
        );
        assert_eq!(node_id_path(&[]), None);
        assert_eq!(default_manifest_path(&[]), None);
    }

    #[test]
    fn write_atomic_replaces_and_leaves_no_temporary() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("f");
        write_atomic(&file, b"one\n").unwrap();
        write_atomic(&file, b"two\n").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"two\n");
        assert!(!temp_path(&file).exists());

        // A directory that does not exist: an error, nothing left behind.
        let missing = root.path().join("no").join("f");
        assert!(write_atomic(&missing, b"x").is_err());
        assert!(!temp_path(&missing).exists());
    }
}
