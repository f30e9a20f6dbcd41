//! Identity of stored data: application → shuffle → partition.
//!
//! `epoch` and `replica` give room for Celeborn's split locations
//! (`partitionId-epoch`) and primary/replica copies; Uniffle uses epoch 0 and
//! names a partition range by its first partition.

use std::fmt;
use std::sync::Arc;

/// An application id as the store knows it: a front end's own id, scoped
/// by its front end (`switchyard_ident::ScopedApp`, `<namespace>/<id>`). The
/// store gives the namespace no meaning: it only hands each front end the
/// notes of its own applications back at a restart.
pub type AppId = Arc<str>;

/// One stored partition: the unit of append, index and read.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionKey {
    pub app: AppId,
    pub shuffle: i32,
    pub partition: i32,
    /// Celeborn's partition epoch (a new one per split); 0 for Uniffle.
    pub epoch: i32,
    /// Celeborn replica copy; false for primaries and for Uniffle.
    pub replica: bool,
}

impl PartitionKey {
    pub fn new(app: impl Into<AppId>, shuffle: i32, partition: i32) -> Self {
        PartitionKey {
            app: app.into(),
            shuffle,
            partition,
            epoch: 0,
            replica: false,
        }
    }

    pub fn with_epoch(mut self, epoch: i32) -> Self {
        self.epoch = epoch;
        self
    }

    pub fn with_replica(mut self, replica: bool) -> Self {
        self.replica = replica;
        self
    }

    /// The part of the key below its shuffle, used inside a shuffle's map.
    pub(crate) fn local(&self) -> LocalPartition {
        LocalPartition {
            partition: self.partition,
            epoch: self.epoch,
            replica: self.replica,
        }
    }

    /// File stem of this partition, unique within its shuffle directory.
    pub(crate) fn file_stem(&self) -> String {
        format!(
            "{}-{}-{}",
            self.partition,
            self.epoch,
            if self.replica { 'r' } else { 'p' }
        )
    }
}

impl fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}-{}{}",
            self.app,
            self.shuffle,
            self.partition,
            self.epoch,
            if self.replica { "-replica" } else { "" }
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct LocalPartition {
    pub partition: i32,
    pub epoch: i32,
    pub replica: bool,
}

/// Encoded ids longer than this are cut and hashed (file names may have 255
/// bytes; the rest of a path needs room too).
const MAX_COMPONENT: usize = 200;
/// How much of a long encoded id is kept before its hash.
const LONG_PREFIX: usize = 160;

/// Turns an application id into a single path component, injectively: two
/// different ids never share a directory or cold prefix, so removing one
/// application never touches another's files.
///
/// The mapping is stable and part of the on-disk layout:
/// - ASCII letters, digits, `-` and `.` stay as they are, except a leading
///   `.` (so no component is `.`, `..` or hidden);
/// - every other byte of the id's UTF-8, `_` included, becomes `_` and two
///   upper-case hex digits (`a_b` → `a_5Fb`, `a b` → `a_20b`, `a/b` →
///   `a_2Fb`), so a `_` in the output always starts an escape and the
///   encoding decodes uniquely;
/// - the empty id is `_` (no escape is a lone `_`);
/// - an encoding longer than 200 bytes keeps its first 160 (cut between
///   escapes), then `~` and the 128-bit FNV-1a hash of the id in hex. `~`
///   appears in no short encoding, so long and short ids never meet; two
///   long ones only on a 128-bit hash collision.
pub(crate) fn path_component(app: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(app.len());
    // Where each escape or kept byte starts, to cut long ones cleanly.
    let mut starts = Vec::new();
    for (i, &b) in app.as_bytes().iter().enumerate() {
        starts.push(out.len());
        let keep = b.is_ascii_alphanumeric() || b == b'-' || (b == b'.' && i > 0);
        if keep {
            out.push(b as char);
        } else {
            let _ = write!(out, "_{b:02X}");
        }
    }
    if out.is_empty() {
        return "_".into();
    }
    if out.len() > MAX_COMPONENT {
        let cut = starts
            .iter()
            .copied()
            .take_while(|&s| s <= LONG_PREFIX)
            .last()
            .unwrap_or(0);
        out.truncate(cut);
        let _ = write!(out, "~{:032x}", fnv1a_128(app.as_bytes()));
    }
    out
}

/// FNV-1a, 128 bits: a fixed, documented hash (std's hashers may change
/// between Rust releases; directory names must not).
fn fnv1a_128(bytes: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u128::from(b)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scoped_ids_keep_front_ends_apart() {
        use switchyard_ident::FrontEnd;
        let (u, c) = (
            FrontEnd::Uniffle.stored("app-1"),
            FrontEnd::Celeborn.stored("app-1"),
        );
        assert_ne!(path_component(&u), path_component(&c));
        // The directory names of scoped ids stay what they were.
        assert_eq!(path_component(&u), "uniffle_2Fapp-1");
        assert_eq!(
            path_component(&FrontEnd::Celeborn.stored("a/b")),
            "celeborn_2Fa_2Fb"
        );
    }

    #[test]
    fn path_component_is_safe_and_stable() {
        // Spark's ids keep their shape, apart from `_`.
        assert_eq!(
            path_component("application_1700000000000_0001"),
            "application_5F1700000000000_5F0001"
        );
        assert_eq!(path_component("local-123.4"), "local-123.4");
        assert_eq!(path_component("../etc"), "_2E._2Fetc");
        assert_eq!(path_component(".."), "_2E.");
        assert_eq!(path_component("."), "_2E");
        assert_eq!(path_component(""), "_");
        assert_eq!(path_component("a/b\\c d"), "a_2Fb_5Cc_20d");
        assert_eq!(path_component("é"), "_C3_A9");
        for id in ["a/b", "../x", "..", ".", "", "a\0b", "x\ny"] {
            let c = path_component(id);
            assert!(!c.contains('/') && !c.contains('\0') && c != "." && c != "..");
            assert!(!c.starts_with('.'), "{c}");
        }
    }

    #[test]
    fn path_component_is_injective() {
        let ids = [
            "a b", "a/b", "a_b", "a\\b", "a_20b", "a_2Fb", "a_5Fb", "a.b", "ab", "a", "_", "", ".",
            "..", "_2E", "_2E.", "a~b",
        ];
        let mut seen = std::collections::HashMap::new();
        for id in ids {
            if let Some(other) = seen.insert(path_component(id), id) {
                panic!("{id:?} and {other:?} share {}", path_component(id));
            }
        }
    }

    #[test]
    fn long_ids_are_cut_and_hashed() {
        let a = "x".repeat(300);
        let b = format!("{}y", "x".repeat(299));
        let (ca, cb) = (path_component(&a), path_component(&b));
        assert_ne!(ca, cb);
        assert!(ca.len() <= MAX_COMPONENT, "{}", ca.len());
        assert!(ca.starts_with(&"x".repeat(LONG_PREFIX)) && ca.contains('~'));
        // An escape is never cut in half.
        let c = path_component(&"/".repeat(100));
        let (prefix, _) = c.split_once('~').unwrap();
        assert_eq!(prefix.len() % 3, 0, "{c}");
        assert!(prefix.len() <= LONG_PREFIX);
        // Stable across runs and releases.
        assert_eq!(path_component(&a), ca);
        assert_eq!(fnv1a_128(b""), 0x6c62272e07bb014262b821756295c58d);
        assert_eq!(fnv1a_128(b"a"), 0xd228cb696f1a8caf78912b704e4a8964);
    }

    #[test]
    fn file_stem_distinguishes_epoch_and_replica() {
        let k = PartitionKey::new("a", 1, 7);
        assert_eq!(k.file_stem(), "7-0-p");
        assert_eq!(
            k.clone().with_epoch(3).with_replica(true).file_stem(),
            "7-3-r"
        );
    }
}
