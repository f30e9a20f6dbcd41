//! Hang detection: the [`DiskCalls`] layer that runs a disk's blocking
//! calls on tokio's blocking pool, never on a runtime thread, and waits at
//! most `disks.io_timeout` for each.
//!
//! A call that outlives the timeout marks the disk hung and fails with
//! `TimedOut`: its flush gives up on the disk and goes elsewhere, while the
//! call itself, which no one can cancel (a thread in uninterruptible
//! sleep), is left to return on its own, counted as stuck until it does.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::health::{DiskHealth, Health};
use super::io::{DiskCalls, DiskIo, DiskOp, ReadAt, SegmentWrite, Space, Written};
use super::metrics::DiskFigures;

pub(crate) struct Timeout {
    inner: Arc<dyn DiskIo>,
    timeout: Duration,
    /// The runtime whose blocking pool runs the calls (the disk's NUMA
    /// node's); None: the current runtime's.
    pool: Option<tokio::runtime::Handle>,
    dir: PathBuf,
    health: Arc<Health>,
    figures: Arc<DiskFigures>,
    /// Set while a statvfs runs (until its thread returns, even after a
    /// timeout), so that a hung mount costs one thread, not one per check.
    statvfs_running: Arc<AtomicBool>,
}

impl Timeout {
    pub(crate) fn new(
        inner: Arc<dyn DiskIo>,
        timeout: Duration,
        pool: Option<tokio::runtime::Handle>,
        dir: PathBuf,
        health: Arc<Health>,
        figures: Arc<DiskFigures>,
    ) -> Self {
        Timeout {
            inner,
            timeout,
            pool,
            dir,
            health,
            figures,
            statvfs_running: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Runs `call` on the blocking pool and waits at most the timeout for
    /// it; a call that outlives it is counted stuck until its thread
    /// returns.
    async fn call<T: Send + 'static>(
        &self,
        op: DiskOp,
        call: impl FnOnce(&dyn DiskIo) -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        self.call_touching(op, Vec::new(), call).await
    }

    /// [`Self::call`] for a call that writes `files`: if it returns after
    /// its timeout, they are handed to the disk's health as late writes.
    async fn call_touching<T: Send + 'static>(
        &self,
        op: DiskOp,
        files: Vec<PathBuf>,
        call: impl FnOnce(&dyn DiskIo) -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        const RUNNING: u8 = 0;
        const RETURNED: u8 = 1;
        const ABANDONED: u8 = 2;
        let state = Arc::new(AtomicU8::new(RUNNING));
        let (st, health, io) = (state.clone(), self.health.clone(), self.inner.clone());
        let work = move || {
            let out = call(&*io);
            if st.swap(RETURNED, Ordering::AcqRel) == ABANDONED {
                health.late_write_returned(files);
            }
            out
        };
        let mut handle = match &self.pool {
            Some(runtime) => runtime.spawn_blocking(work),
            None => tokio::task::spawn_blocking(work),
        };
        let joined = match tokio::time::timeout(self.timeout, &mut handle).await {
            Ok(joined) => joined,
            Err(_) => {
                // Counted before it is marked abandoned, so the thread's
                // decrement can never come first.
                self.health.stuck_added();
                if state.swap(ABANDONED, Ordering::AcqRel) == RETURNED {
                    // It returned right at the deadline: not a hang.
                    self.health.stuck_returned();
                    handle.await
                } else {
                    self.mark_hung(op);
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "{op:?} on {} did not return within {:?}",
                            self.dir.display(),
                            self.timeout
                        ),
                    ));
                }
            }
        };
        joined.map_err(io::Error::other)?
    }

    fn mark_hung(&self, op: DiskOp) {
        self.figures.timed_out(op);
        tracing::error!(
            dir = %self.dir.display(),
            op = op.label(),
            timeout = ?self.timeout,
            stuck = self.health.stuck_calls(),
            "disk call hung; the disk takes no writes or reads until it returns"
        );
        self.health.failed_now();
        self.health.set(DiskHealth::Hung);
    }
}

impl DiskCalls for Timeout {
    async fn write(&self, w: SegmentWrite) -> io::Result<Written> {
        let mut files = vec![w.data.clone()];
        files.extend(w.index.as_ref().map(|i| i.path.clone()));
        let tail = self
            .call_touching(DiskOp::Write, files, move |io| io.write(w))
            .await?;
        Ok(Written {
            tail,
            throttled: Duration::ZERO,
        })
    }

    async fn read(&self, r: ReadAt) -> io::Result<Bytes> {
        self.call(DiskOp::Read, move |io| io.read(r)).await
    }

    async fn probe(&self) -> io::Result<()> {
        self.call(DiskOp::Probe, |io| io.probe()).await
    }

    async fn statvfs(&self) -> io::Result<Option<Space>> {
        if self.statvfs_running.swap(true, Ordering::AcqRel) {
            return Ok(None);
        }
        let running = self.statvfs_running.clone();
        let space = self
            .call(DiskOp::Statvfs, move |io| {
                let space = io.statvfs();
                // On the blocking thread: cleared when the call returns,
                // however long after its timeout that is.
                running.store(false, Ordering::Release);
                space
            })
            .await?;
        Ok(Some(space))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiers::disk::fake::{self, FakeIo, ReleaseOnDrop};

    fn layer(below: &Arc<FakeIo>, timeout: Duration) -> (Timeout, Arc<Health>, Arc<DiskFigures>) {
        let health = Arc::new(Health::new("/d".into(), Default::default()));
        let figures = Arc::new(DiskFigures::new("/d".as_ref()));
        let layer = Timeout::new(
            Arc::new(below.clone()),
            timeout,
            None,
            "/d".into(),
            health.clone(),
            figures.clone(),
        );
        (layer, health, figures)
    }

    /// Polls `cond` until it holds, for at most 20 s.
    async fn wait_for(what: &str, cond: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !cond() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not within 20 s"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn calls_that_return_in_time_pass_through() {
        let below = Arc::new(FakeIo::default());
        let (layer, health, figures) = layer(&below, Duration::from_secs(30));
        let written = layer.write(fake::write(3, 10)).await.unwrap();
        assert!(written.tail.is_none());
        assert_eq!(layer.read(fake::read(4)).await.unwrap().len(), 4);
        layer.probe().await.unwrap();
        below.fail(true);
        assert_eq!(
            layer.probe().await.unwrap_err().kind(),
            io::ErrorKind::Other,
            "the disk's own error, unchanged"
        );
        assert_eq!(below.calls(), ["write 3 index", "read", "probe", "probe"]);
        assert_eq!(health.get(), DiskHealth::Healthy);
        assert_eq!(figures.io_timeouts(), 0);
    }

    /// A call blocked past the timeout fails with TimedOut and marks the
    /// disk hung; its thread counts as stuck until it returns.
    #[tokio::test]
    async fn a_call_past_the_timeout_marks_the_disk_hung_and_counts_as_stuck() {
        let below = Arc::new(FakeIo::default());
        let _release = ReleaseOnDrop(below.clone());
        let (layer, health, figures) = layer(&below, Duration::from_millis(50));
        below.hold(DiskOp::Write);
        let err = layer.write(fake::write(1, 10)).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert_eq!(health.get(), DiskHealth::Hung);
        assert_eq!(health.stuck_calls(), 1);
        assert_eq!(figures.io_timeouts(), 1);
        assert!(!health.rested(Duration::from_secs(3600)), "failed just now");
        // Other calls still run meanwhile (the layer itself refuses none).
        layer.read(fake::read(1)).await.unwrap();
        assert!(health.take_late_writes().is_empty(), "still stuck");
        below.release();
        wait_for("the stuck write returns", || health.stuck_calls() == 0).await;
        assert_eq!(below.calls(), ["read", "write 1 index"]);
        assert_eq!(health.get(), DiskHealth::Hung, "only a probe ends it");
        assert_eq!(
            health.take_late_writes(),
            [PathBuf::from("seg.data"), PathBuf::from("seg.index")],
            "what the late write touched, for the store to check"
        );
        assert!(health.take_late_writes().is_empty(), "taken once");
    }

    /// A hung statvfs holds one thread: later ones are skipped until it
    /// returns.
    #[tokio::test]
    async fn statvfs_runs_one_at_a_time_even_past_the_timeout() {
        let below = Arc::new(FakeIo::default());
        let _release = ReleaseOnDrop(below.clone());
        let (layer, health, _) = layer(&below, Duration::from_millis(50));
        assert!(layer.statvfs().await.unwrap().is_some());
        below.hold(DiskOp::Statvfs);
        let err = layer.statvfs().await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(layer.statvfs().await.unwrap(), None, "skipped");
        below.release();
        wait_for("the stuck statvfs returns", || health.stuck_calls() == 0).await;
        assert!(layer.statvfs().await.unwrap().is_some());
        assert_eq!(below.calls(), ["statvfs"; 3]);
    }
}
