//! The [`DiskCalls`] layer that bounds how many writes and how many reads
//! of a disk run at once (`disks.write_concurrency`,
//! `disks.read_concurrency`). It sits under the throttle: a request still
//! waiting for its bytes to pass holds no slot, so a small flush or read
//! that the throttle lets through at once does not then queue for a slot
//! that big requests hold while they wait there.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Semaphore;

use super::health::{DiskHealth, Health};
use super::io::{DiskCalls, ReadAt, SegmentWrite, Space, Written};

pub(crate) struct Limit<I> {
    inner: I,
    write: Semaphore,
    read: Semaphore,
    health: Arc<Health>,
    /// `disks.io_timeout`, named in a hung disk's error.
    io_timeout: Duration,
}

impl<I: DiskCalls> Limit<I> {
    pub(crate) fn new(
        inner: I,
        writes: usize,
        reads: usize,
        health: Arc<Health>,
        io_timeout: Duration,
    ) -> Self {
        Limit {
            inner,
            write: Semaphore::new(writes.max(1)),
            read: Semaphore::new(reads.max(1)),
            health,
            io_timeout,
        }
    }
}

fn closed() -> io::Error {
    io::Error::other("disk closed")
}

impl<I: DiskCalls> DiskCalls for Limit<I> {
    async fn write(&self, w: SegmentWrite) -> io::Result<Written> {
        let _slot = self.write.acquire().await.map_err(|_| closed())?;
        if self.health.get() == DiskHealth::Hung {
            // Placed before the disk hung, queued behind the call that did.
            return Err(self.health.hung_error(self.io_timeout));
        }
        self.inner.write(w).await
    }

    async fn read(&self, r: ReadAt) -> io::Result<Bytes> {
        let _slot = self.read.acquire().await.map_err(|_| closed())?;
        self.inner.read(r).await
    }

    fn probe(&self) -> impl std::future::Future<Output = io::Result<()>> + Send {
        self.inner.probe()
    }

    fn statvfs(&self) -> impl std::future::Future<Output = io::Result<Option<Space>>> + Send {
        self.inner.statvfs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiers::disk::fake::{self, FakeCalls};
    use crate::tiers::disk::io::DiskOp;

    /// One write at a time: the second starts when the first ends; a read
    /// has slots of its own.
    #[tokio::test(start_paused = true)]
    async fn writes_beyond_the_limit_wait_for_a_slot() {
        let health = Arc::new(Health::new("/d".into(), Default::default()));
        let limit = Arc::new(Limit::new(
            FakeCalls::default(),
            1,
            1,
            health.clone(),
            Duration::from_secs(1),
        ));
        let held = limit.write.try_acquire().unwrap();
        let queued = {
            let l = limit.clone();
            tokio::spawn(async move { l.write(fake::write(1, 10)).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!queued.is_finished(), "a write passed a held slot");
        limit.read(fake::read(10)).await.unwrap();
        // The disk hung while the write was queued: it fails at once.
        health.set(DiskHealth::Hung);
        drop(held);
        let err = queued.await.unwrap().unwrap_err();
        assert!(err.to_string().contains("hung"), "{err}");
        let ops: Vec<DiskOp> = limit.inner.calls().iter().map(|c| c.0).collect();
        assert_eq!(
            ops,
            [DiskOp::Read],
            "the queued write never reached the disk"
        );
    }
}
