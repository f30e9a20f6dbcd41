//! Identity of stored data: application → shuffle → partition.
//!
//! `epoch` and `replica` give room for Celeborn's split locations
//! (`partitionId-epoch`) and primary/replica copies; Uniffle uses epoch 0 and
//! names a partition range by its first partition.

use std::fmt;
use std::sync::Arc;

/// An application id as the client sends it (Spark's app id plus a suffix).
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

/// Turns an application id into a safe single path component.
pub(crate) fn path_component(app: &str) -> String {
    let cleaned: String = app
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    match cleaned.as_str() {
        "" | "." | ".." => format!("_{cleaned}"),
        _ => cleaned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_component_is_safe() {
        assert_eq!(path_component("local-123_456"), "local-123_456");
        assert_eq!(path_component("../etc"), ".._etc");
        assert_eq!(path_component(".."), "_..");
        assert_eq!(path_component("a/b\\c d"), "a_b_c_d");
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
