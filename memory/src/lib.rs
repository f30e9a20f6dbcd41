//! The node's one memory number (`storage.memory.capacity`) and the part of it
//! that bytes on the network may hold.
//!
//! The store keeps its blocks in its share (`capacity - network`); every
//! protocol's frames being read and replies being written take from the
//! network share ([`NodeMemory::take`]) before the bytes are read or queued.
//! So stored blocks, frames in flight and replies together stay within the one
//! number, and a node that has no room left stops reading sockets instead of
//! growing (as the JVM Celeborn worker pauses receiving when its direct
//! memory is full).
//!
//! The store owns the [`NodeMemory`] (it knows the number); the frame server
//! takes from it. Neither imports the other: both see this crate.

mod fair;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use fair::{FairBytes, FairPool, Holder};

/// Frames and replies up to this size (control messages and their answers,
/// ordinary pushes) may use the part of the network share that large ones
/// leave free, so a burst of half-sent large frames or unread chunks never
/// stops them.
pub const SMALL: usize = 64 << 10;

/// The share of the network share that small frames and replies keep for
/// themselves: a quarter of it.
const SMALL_KEPT_DIVISOR: u64 = 4;

/// What bytes on the network are taken for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// A frame being read and not yet handled.
    InFlight,
    /// A reply reserved and not yet written.
    Reply,
}

/// The node's memory: its one number, the store's share and the network share
/// with what it holds now.
#[derive(Debug)]
pub struct NodeMemory {
    capacity: u64,
    store_share: u64,
    /// Every byte on the network. Both pools serve waiters by holder
    /// (connection), least-holding first, so one heavy connection's queue
    /// cannot sit in front of everyone else's frames and replies.
    network: FairPool,
    /// What large frames and replies may hold: the network share but the part
    /// small ones keep.
    large: FairPool,
    in_flight: AtomicU64,
    replies: AtomicU64,
}

/// Why bytes cannot be taken at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooLarge {
    pub requested: usize,
    /// The most one take may have.
    pub limit: u64,
}

impl NodeMemory {
    /// `capacity` is the node's one number, `network` the part of it kept for
    /// bytes on the network (less than `capacity`, checked by the config).
    pub fn new(capacity: u64, network: u64) -> Arc<Self> {
        let network = network.min(capacity).max(1);
        let small_kept = network / SMALL_KEPT_DIVISOR;
        Arc::new(NodeMemory {
            capacity,
            store_share: capacity - network,
            network: FairPool::new(network),
            large: FairPool::new(network - small_kept),
            in_flight: AtomicU64::new(0),
            replies: AtomicU64::new(0),
        })
    }

    /// A store whose network bytes are not charged to its number (an embedded
    /// store, a test): the store has all of `capacity`, the network share is as
    /// large as a pool can be.
    pub fn unbounded(capacity: u64) -> Arc<Self> {
        let network = u64::from(u32::MAX);
        Arc::new(NodeMemory {
            capacity,
            store_share: capacity,
            network: FairPool::new(network),
            large: FairPool::new(network),
            in_flight: AtomicU64::new(0),
            replies: AtomicU64::new(0),
        })
    }

    /// The one number.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The part kept for bytes on the network.
    pub fn network(&self) -> u64 {
        self.network.size()
    }

    /// What the store may hold: the rest.
    pub fn store_share(&self) -> u64 {
        self.store_share
    }

    /// The most one take of `bytes` (a frame or a reply) may have: one larger would
    /// pass the number whatever else the node holds, so it is refused, not
    /// waited for.
    pub fn largest(&self, bytes: usize) -> u64 {
        match goes_large(bytes) {
            true => self.large.size(),
            false => self.network(),
        }
    }

    /// Whether `bytes` (a frame or a reply) can ever be taken.
    pub fn check(&self, bytes: usize) -> Result<(), TooLarge> {
        self.permits(bytes).map(|_| ())
    }

    /// Bytes held now for `part`.
    pub fn in_use(&self, part: Part) -> u64 {
        self.counter(part).load(Ordering::Acquire)
    }

    fn counter(&self, part: Part) -> &AtomicU64 {
        match part {
            Part::InFlight => &self.in_flight,
            Part::Reply => &self.replies,
        }
    }

    /// Takes `bytes` for `part`, held by `holder` (its connection), if they
    /// fit now. `Err(None)`: not now; `Err(Some(_))`: never.
    pub fn try_take(
        self: &Arc<Self>,
        holder: Holder,
        part: Part,
        bytes: usize,
    ) -> Result<NetworkBytes, Option<TooLarge>> {
        let permits = self.permits(bytes).map_err(Some)?;
        let large = match goes_large(bytes) {
            true => Some(self.large.try_take(holder, permits).ok_or(None)?),
            false => None,
        };
        let network = self.network.try_take(holder, permits).ok_or(None)?;
        Ok(self.held(part, bytes, large, network))
    }

    /// Takes `bytes` for `part`, held by `holder`, waiting for room and for
    /// the holders that hold less; `Err` if they never can. Large frames and
    /// replies take from the large pool first, always in that order, so two
    /// waiters never hold one pool each.
    pub async fn take(
        self: &Arc<Self>,
        holder: Holder,
        part: Part,
        bytes: usize,
    ) -> Result<NetworkBytes, TooLarge> {
        let permits = self.permits(bytes)?;
        let large = match goes_large(bytes) {
            true => Some(self.large.take(holder, permits).await),
            false => None,
        };
        let network = self.network.take(holder, permits).await;
        Ok(self.held(part, bytes, large, network))
    }

    fn permits(&self, bytes: usize) -> Result<u64, TooLarge> {
        let limit = self.largest(bytes);
        match bytes as u64 <= limit {
            true => Ok((bytes as u64).max(1)),
            false => Err(TooLarge {
                requested: bytes,
                limit,
            }),
        }
    }

    fn held(
        self: &Arc<Self>,
        part: Part,
        bytes: usize,
        large: Option<FairBytes>,
        network: FairBytes,
    ) -> NetworkBytes {
        self.counter(part).fetch_add(bytes as u64, Ordering::AcqRel);
        NetworkBytes {
            memory: self.clone(),
            part,
            bytes: bytes as u64,
            _large: large,
            _network: network,
        }
    }
}

/// Large frames and replies take from the large pool too.
fn goes_large(bytes: usize) -> bool {
    bytes > SMALL
}

/// Bytes taken from the network share, given back on drop.
#[derive(Debug)]
pub struct NetworkBytes {
    memory: Arc<NodeMemory>,
    part: Part,
    bytes: u64,
    _large: Option<FairBytes>,
    _network: FairBytes,
}

impl Drop for NetworkBytes {
    fn drop(&mut self) {
        self.memory
            .counter(self.part)
            .fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_the_number() {
        let m = NodeMemory::new(64 << 20, 16 << 20);
        assert_eq!(m.store_share() + m.network(), 64 << 20);
        let large = m.largest(1 << 20);
        assert_eq!(large, 12 << 20, "large frames leave a quarter");
        assert_eq!(m.largest(SMALL), 16 << 20, "frames and replies alike");
    }

    #[test]
    fn takes_count_by_part_and_give_back_on_drop() {
        let m = NodeMemory::new(64 << 20, 16 << 20);
        let a = m.try_take(Holder::next(), Part::InFlight, 8 << 20).unwrap();
        let b = m.try_take(Holder::next(), Part::Reply, 4 << 20).unwrap();
        assert_eq!(m.in_use(Part::InFlight), 8 << 20);
        assert_eq!(m.in_use(Part::Reply), 4 << 20);
        // The large pool (12 MiB) is full; small frames still get in.
        assert!(matches!(
            m.try_take(Holder::next(), Part::InFlight, 1 << 20),
            Err(None)
        ));
        let small = m.try_take(Holder::next(), Part::InFlight, SMALL).unwrap();
        drop((a, b, small));
        assert_eq!(m.in_use(Part::InFlight) + m.in_use(Part::Reply), 0);
        assert!(m.try_take(Holder::next(), Part::InFlight, 12 << 20).is_ok());
    }

    #[test]
    fn more_than_the_share_is_refused_not_awaited() {
        let m = NodeMemory::new(64 << 20, 16 << 20);
        let err = m
            .try_take(Holder::next(), Part::InFlight, 200 << 20)
            .unwrap_err();
        assert_eq!(
            err,
            Some(TooLarge {
                requested: 200 << 20,
                limit: 12 << 20
            })
        );
    }

    #[tokio::test]
    async fn a_waiter_gets_in_once_room_is_given_back() {
        let m = NodeMemory::new(64 << 20, 16 << 20);
        let held = m
            .try_take(Holder::next(), Part::InFlight, 12 << 20)
            .unwrap();
        let waiter = tokio::spawn({
            let m = m.clone();
            async move {
                m.take(Holder::next(), Part::InFlight, 1 << 20)
                    .await
                    .map(|_| ())
            }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(held);
        waiter.await.unwrap().unwrap();
    }
}
