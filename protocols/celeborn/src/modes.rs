//! The two per-shuffle modes a LifecycleManager sets in ReserveSlots, as
//! upstream's `PartitionSplitMode` and `PartitionType` enums (by ordinal).

/// What a primary does when its partition passes the split threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum SplitMode {
    /// Keep writing and answer SOFT_SPLIT: the client moves to a new epoch
    /// when it can (up to `SPLIT_MAX`, then HARD).
    #[default]
    Soft = 0,
    /// Refuse the batch with HARD_SPLIT: the client revives and resends.
    Hard = 1,
}

/// How a shuffle's partitions are written and read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum PartitionType {
    /// Spark: one file per reduce partition, every mapper appends to it.
    #[default]
    Reduce = 0,
    /// Flink: one file per map task, read by sub-partition ranges.
    Map = 1,
    /// Upstream reserves it and no stock client sends it.
    MapGroup = 2,
}

impl SplitMode {
    pub fn from_i32(value: i32) -> Option<Self> {
        match value {
            0 => Some(SplitMode::Soft),
            1 => Some(SplitMode::Hard),
            _ => None,
        }
    }

    pub(crate) fn from_u8(value: u8) -> Self {
        Self::from_i32(value.into()).unwrap_or_default()
    }
}

impl PartitionType {
    pub fn from_i32(value: i32) -> Option<Self> {
        match value {
            0 => Some(PartitionType::Reduce),
            1 => Some(PartitionType::Map),
            2 => Some(PartitionType::MapGroup),
            _ => None,
        }
    }

    pub(crate) fn from_u8(value: u8) -> Self {
        Self::from_i32(value.into()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_follow_the_upstream_ordinals() {
        assert_eq!(SplitMode::from_i32(0), Some(SplitMode::Soft));
        assert_eq!(SplitMode::from_i32(1), Some(SplitMode::Hard));
        assert_eq!(SplitMode::from_i32(2), None);
        assert_eq!(PartitionType::from_i32(0), Some(PartitionType::Reduce));
        assert_eq!(PartitionType::from_i32(1), Some(PartitionType::Map));
        assert_eq!(PartitionType::from_i32(2), Some(PartitionType::MapGroup));
        assert_eq!(PartitionType::from_i32(-1), None);
        for m in [SplitMode::Soft, SplitMode::Hard] {
            assert_eq!(SplitMode::from_u8(m as u8), m);
        }
        for t in [
            PartitionType::Reduce,
            PartitionType::Map,
            PartitionType::MapGroup,
        ] {
            assert_eq!(PartitionType::from_u8(t as u8), t);
        }
    }
}
