//! Huge partition split, as Uniffle 0.10's shuffle server does it: once the
//! bytes a partition received on this server, plus what a `requireBuffer`
//! asks for it, pass `uniffle.huge_partition_split_limit`, the (successful)
//! answer names the partition in `needSplitPartitionIds`. A 0.10 client with
//! `spark.rss.client.reassign.enabled=true` then asks its driver for other
//! servers and sends the partition's later blocks there (`PIPELINE`: one
//! server after another; `LOAD_BALANCE`: spread over several at once); its
//! readers read every server the partition went to. Older clients ignore
//! the field, so for them the limit changes nothing.
//!
//! Unlike the JVM server, which names the partition in every answer past the
//! limit, this one names it once: the 0.10.0 writer fails its task when it
//! is told again about a partition it already spread (`LOAD_BALANCE`: its
//! `TaskAttemptAssignment` puts `ShuffleServerInfo`, not `Comparable`, in a
//! sorted set; Uniffle #2622, fixed after 0.10.0), which its own requests in
//! flight to this server would otherwise do. A writer that did not get the
//! notice keeps writing here, so the limit is soft, as in Uniffle.

use super::apps::ShuffleState;

/// The partitions of one `requireBuffer` that pass `limit` and were not
/// named before. `sizes` is the request's `partitionRequireSizes`, in the
/// order of `ids`; a client that sends none (0.9) or a list of another
/// length gets no split, as from the JVM server.
/// `received` is the data bytes a partition received here.
pub(crate) fn newly_past_limit(
    state: &ShuffleState,
    received: impl Fn(i32) -> u64,
    limit: u64,
    ids: &[i32],
    sizes: &[i32],
) -> Vec<i32> {
    if ids.len() != sizes.len() {
        return Vec::new();
    }
    ids.iter()
        .zip(sizes)
        .filter(|&(&p, &size)| received(p) + size.max(0) as u64 > limit)
        .filter(|&(&p, _)| state.first_split_notice(p))
        .map(|(&p, _)| p)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_partitions_past_the_limit_once() {
        let s = ShuffleState::default();
        let received = |p: i32| match p {
            1 => 90,
            2 => 10,
            _ => 0,
        };
        let named = |ids: &[i32], sizes: &[i32]| newly_past_limit(&s, received, 100, ids, sizes);
        assert!(named(&[1], &[10]).is_empty(), "at the limit exactly");
        assert!(named(&[1, 2], &[]).is_empty(), "0.9 sends no sizes");
        assert_eq!(named(&[1, 2, 3], &[20, 20, 20]), vec![1]);
        assert!(named(&[1, 2, 3], &[20, 20, 20]).is_empty(), "named once");
        assert_eq!(named(&[1, 2], &[10, 91]), vec![2]);
    }
}
