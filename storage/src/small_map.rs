//! The concurrent maps a node keeps one of per application or per shuffle
//! (here and in the protocol crates).
//!
//! dashmap's default is four shards per CPU, each a cache-line-padded lock
//! and table: on a 64-CPU node some 32 KiB per map before its first entry,
//! which thousands of shuffles held turn into gigabytes. These maps see a
//! few writers at a time (one application's tasks), so a fixed handful of
//! shards keeps their locks uncontended at any core count.

use std::hash::Hash;

use dashmap::DashMap;

/// Shards of each map [`small_map`] makes.
pub const SHARDS: usize = 8;

/// An empty per-application or per-shuffle map.
pub fn small_map<K: Eq + Hash, V>() -> DashMap<K, V> {
    DashMap::with_shard_amount(SHARDS)
}
