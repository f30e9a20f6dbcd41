//! A byte pool that serves its waiters by who holds least, not by who came
//! first. Each take names its [`Holder`] (a connection); when room is given
//! back, the waiter whose holder holds the fewest bytes goes next (the
//! earliest among equals). So a heavy reader with a queue of chunk replies,
//! or a heavy writer with a queue of frames, cannot sit in front of a light
//! one: the light one's next reservation goes at the first room freed, where
//! a FIFO semaphore would serve the whole heavy queue first.
//!
//! The chosen waiter is served only once its bytes fit; nobody overtakes it
//! meanwhile, so a large take is never starved by small ones.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// Whoever holds bytes of a pool: one per connection, unique in the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Holder(u64);

impl Holder {
    /// A holder no other has been given.
    pub fn next() -> Holder {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Holder(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The holder for a connection known only by its peer's address (a gRPC
    /// call's): the same for every call on that connection. Kept apart from
    /// [`Holder::next`]'s by the top bit.
    pub fn of_peer(peer: std::net::SocketAddr) -> Holder {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        peer.hash(&mut h);
        Holder(h.finish() | 1 << 63)
    }
}

#[derive(Debug)]
struct Waiter {
    seq: u64,
    holder: Holder,
    bytes: u64,
    granted: oneshot::Sender<()>,
}

#[derive(Debug, Default)]
struct State {
    available: u64,
    held: HashMap<Holder, u64>,
    waiters: Vec<Waiter>,
    next_seq: u64,
}

impl State {
    fn hold(&mut self, holder: Holder, bytes: u64) {
        self.available -= bytes;
        *self.held.entry(holder).or_default() += bytes;
    }

    fn give_back(&mut self, holder: Holder, bytes: u64) {
        self.available += bytes;
        if let Some(h) = self.held.get_mut(&holder) {
            *h -= bytes;
            if *h == 0 {
                self.held.remove(&holder);
            }
        }
    }

    fn holds(&self, holder: Holder) -> u64 {
        self.held.get(&holder).copied().unwrap_or(0)
    }

    /// Serves waiters, least-holding first, while the next one fits.
    fn serve(&mut self) {
        loop {
            let next = self
                .waiters
                .iter()
                .enumerate()
                .min_by_key(|(_, w)| (self.holds(w.holder), w.seq))
                .map(|(i, w)| (i, w.bytes));
            let Some((i, bytes)) = next else { return };
            if bytes > self.available {
                return;
            }
            let w = self.waiters.swap_remove(i);
            self.hold(w.holder, w.bytes);
            // Its receiver lives until its `Waiting` has taken this lock
            // (see its Drop), so the grant cannot be lost.
            let _ = w.granted.send(());
        }
    }
}

/// A pool of `size` bytes shared fairly by holders.
#[derive(Clone, Debug)]
pub struct FairPool {
    size: u64,
    state: Arc<Mutex<State>>,
}

impl FairPool {
    pub fn new(size: u64) -> Self {
        let size = size.max(1);
        FairPool {
            size,
            state: Arc::new(Mutex::new(State {
                available: size,
                ..State::default()
            })),
        }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes held now.
    pub fn in_use(&self) -> u64 {
        self.size - self.lock().available
    }

    /// Takes `bytes` (at most the pool's size) if they fit now and nobody
    /// waits.
    pub fn try_take(&self, holder: Holder, bytes: u64) -> Option<FairBytes> {
        let bytes = self.clamp(bytes);
        let mut state = self.lock();
        if !state.waiters.is_empty() || bytes > state.available {
            return None;
        }
        state.hold(holder, bytes);
        Some(self.taken(holder, bytes))
    }

    /// Takes `bytes` (at most the pool's size), waiting for its turn.
    /// Cancel-safe: dropped while waiting, it takes nothing.
    pub async fn take(&self, holder: Holder, bytes: u64) -> FairBytes {
        let bytes = self.clamp(bytes);
        let (granted, rx) = oneshot::channel();
        let seq = {
            let mut state = self.lock();
            let seq = state.next_seq;
            state.next_seq += 1;
            state.waiters.push(Waiter {
                seq,
                holder,
                bytes,
                granted,
            });
            state.serve();
            seq
        };
        let mut waiting = Waiting {
            pool: self,
            seq,
            holder,
            bytes,
            rx: Some(rx),
        };
        let rx = waiting.rx.as_mut().expect("set above");
        rx.await
            .expect("a waiter's sender is only dropped when granted");
        waiting.rx = None;
        self.taken(holder, bytes)
    }

    fn clamp(&self, bytes: u64) -> u64 {
        bytes.clamp(1, self.size)
    }

    fn taken(&self, holder: Holder, bytes: u64) -> FairBytes {
        FairBytes {
            state: self.state.clone(),
            holder,
            bytes,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // Nothing panics while holding it; a poisoned lock's state is whole.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// A take still waiting; dropped before its grant was seen, it leaves the
/// queue or gives the granted bytes back.
struct Waiting<'a> {
    pool: &'a FairPool,
    seq: u64,
    holder: Holder,
    bytes: u64,
    rx: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.rx.is_none() {
            return;
        }
        let mut state = self.pool.lock();
        match state.waiters.iter().position(|w| w.seq == self.seq) {
            Some(i) => {
                state.waiters.swap_remove(i);
            }
            // Granted under the lock before we took it: give it back.
            None => state.give_back(self.holder, self.bytes),
        }
        state.serve();
    }
}

/// Bytes taken from a [`FairPool`], given back on drop.
#[derive(Debug)]
pub struct FairBytes {
    state: Arc<Mutex<State>>,
    holder: Holder,
    bytes: u64,
}

impl FairBytes {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for FairBytes {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        state.give_back(self.holder, self.bytes);
        state.serve();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Spawns a take and returns what it got once granted, in grant order.
    fn waiter(
        pool: &FairPool,
        holder: Holder,
        bytes: u64,
        order: &Arc<Mutex<Vec<(Holder, u64)>>>,
    ) -> tokio::task::JoinHandle<FairBytes> {
        let (pool, order) = (pool.clone(), order.clone());
        tokio::spawn(async move {
            let got = pool.take(holder, bytes).await;
            order.lock().unwrap().push((holder, bytes));
            got
        })
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_light_holder_goes_before_a_heavy_holders_queue() {
        let pool = FairPool::new(100);
        let (heavy, light) = (Holder::next(), Holder::next());
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = pool.try_take(heavy, 100).unwrap();
        let mut queued = Vec::new();
        for _ in 0..3 {
            queued.push(waiter(&pool, heavy, 50, &order));
            settle().await;
        }
        let light_take = waiter(&pool, light, 50, &order);
        settle().await;
        assert!(order.lock().unwrap().is_empty(), "the pool is full");
        drop(first);
        let light_bytes = tokio::time::timeout(Duration::from_secs(5), light_take)
            .await
            .expect("the light holder waited behind the heavy one's queue")
            .unwrap();
        settle().await;
        // FIFO would have given the freed 100 bytes to two of the heavy
        // holder's queue and left the light one waiting; fairly, the
        // light one gets in beside the heavy one's first.
        let mut served = order.lock().unwrap().clone();
        served.sort_by_key(|&(h, _)| h == light);
        assert_eq!(served, vec![(heavy, 50), (light, 50)], "{served:?}");
        assert_eq!(pool.in_use(), 100);
        drop(light_bytes);
        settle().await;
        assert_eq!(order.lock().unwrap().len(), 3);
        for q in queued {
            drop(q.await.unwrap());
        }
        assert_eq!(pool.in_use(), 0);
    }

    #[tokio::test]
    async fn the_chosen_waiter_is_not_overtaken_by_smaller_ones() {
        let pool = FairPool::new(100);
        let (a, b) = (Holder::next(), Holder::next());
        let order = Arc::new(Mutex::new(Vec::new()));
        let held = pool.try_take(a, 60).unwrap();
        let big = waiter(&pool, b, 80, &order);
        settle().await;
        // 40 bytes are free, but b (holding nothing) waits for 80 first.
        let small = waiter(&pool, a, 10, &order);
        settle().await;
        assert!(order.lock().unwrap().is_empty());
        assert!(
            pool.try_take(Holder::next(), 10).is_none(),
            "nobody jumps the queue"
        );
        drop(held);
        drop(big.await.unwrap());
        drop(small.await.unwrap());
        assert_eq!(order.lock().unwrap()[0], (b, 80));
    }

    #[tokio::test]
    async fn a_cancelled_take_leaves_nothing_held() {
        let pool = FairPool::new(10);
        let h = Holder::next();
        let held = pool.try_take(h, 10).unwrap();
        let cancelled = tokio::time::timeout(Duration::from_millis(20), pool.take(h, 5)).await;
        assert!(cancelled.is_err());
        drop(held);
        assert_eq!(pool.in_use(), 0);
        assert_eq!(pool.take(h, 25).await.bytes(), 10, "clamped to the size");
    }
}
