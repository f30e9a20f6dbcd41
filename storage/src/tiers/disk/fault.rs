//! Fault injection for local disks, so tests can show that a failing or
//! hanging disk loses no acknowledged block. Production stores run without
//! it: the [`Faults`] layer is in a disk's stack only when the store was
//! opened with a [`DiskFaults`]. [`SwitchedFaults`] is the one a running
//! node's admin HTTP switches (soak and chaos tests of a fleet).

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

pub use super::io::DiskOp;
use super::io::{DiskIo, ReadAt, SegmentWrite, Space};

/// Consulted before each flush write and probe. Returning an error makes the
/// disk write part of the data and then fail with that error, like a device
/// that dies or fills up mid-flush.
pub trait DiskFaults: Send + Sync + 'static {
    fn before_write(&self, dir: &Path, bytes: u64) -> Option<io::Error>;

    /// Called on the blocking I/O thread right before the call, where a
    /// device in uninterruptible sleep (D state) would stop a real one:
    /// blocking here is how a test hangs a disk. Default: nothing.
    fn on_io_thread(&self, _dir: &Path, _op: DiskOp) {}
}

/// What a switched disk does.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum DiskFaultMode {
    /// Works.
    Off,
    /// Writes and probes fail with an I/O error (after tearing the write,
    /// as a dying device does).
    Error,
    /// Every call blocks on its I/O thread until the mode changes, as a
    /// device in uninterruptible sleep.
    Hang,
}

/// Faults switched per data directory while the store runs.
#[derive(Default)]
pub struct SwitchedFaults {
    modes: Mutex<HashMap<PathBuf, DiskFaultMode>>,
    changed: Condvar,
}

impl SwitchedFaults {
    /// Puts the disk under `dir` (as configured) in `mode`; a hung disk's
    /// calls go on once it leaves `Hang`.
    pub fn set(&self, dir: &Path, mode: DiskFaultMode) {
        let mut modes = self.modes.lock();
        match mode {
            DiskFaultMode::Off => modes.remove(dir),
            _ => modes.insert(dir.to_path_buf(), mode),
        };
        self.changed.notify_all();
    }

    /// Every disk not `Off`, with its mode.
    pub fn modes(&self) -> Vec<(PathBuf, DiskFaultMode)> {
        let mut out: Vec<_> = self
            .modes
            .lock()
            .iter()
            .map(|(d, m)| (d.clone(), *m))
            .collect();
        out.sort();
        out
    }
}

impl DiskFaults for SwitchedFaults {
    fn before_write(&self, dir: &Path, _bytes: u64) -> Option<io::Error> {
        (self.modes.lock().get(dir) == Some(&DiskFaultMode::Error))
            .then(|| io::Error::other("injected disk error (admin fault injection)"))
    }

    fn on_io_thread(&self, dir: &Path, _op: DiskOp) {
        let mut modes = self.modes.lock();
        while modes.get(dir) == Some(&DiskFaultMode::Hang) {
            self.changed.wait(&mut modes);
        }
    }
}

/// The [`DiskIo`] layer that consults a [`DiskFaults`] before each call of
/// the disk under `dir`.
pub(crate) struct Faults<I> {
    inner: I,
    faults: Arc<dyn DiskFaults>,
    dir: PathBuf,
}

impl<I: DiskIo> Faults<I> {
    pub(crate) fn new(inner: I, faults: Arc<dyn DiskFaults>, dir: PathBuf) -> Self {
        Faults { inner, faults, dir }
    }
}

impl<I: DiskIo> DiskIo for Faults<I> {
    fn write(&self, w: SegmentWrite) -> io::Result<Option<Bytes>> {
        let fault = self.faults.before_write(&self.dir, w.bytes());
        self.faults.on_io_thread(&self.dir, DiskOp::Write);
        let Some(err) = fault else {
            return self.inner.write(w);
        };
        // Write about half the blocks and no index, then fail, as a dying
        // or filling device would.
        let half = w.blocks.len() / 2;
        let torn = SegmentWrite {
            blocks: w.blocks[..half].into(),
            index: None,
            ..w
        };
        self.inner.write(torn)?;
        Err(err)
    }

    fn read(&self, r: ReadAt) -> io::Result<Bytes> {
        self.faults.on_io_thread(&self.dir, DiskOp::Read);
        self.inner.read(r)
    }

    fn probe(&self) -> io::Result<()> {
        self.faults.on_io_thread(&self.dir, DiskOp::Probe);
        if let Some(e) = self.faults.before_write(&self.dir, 4096) {
            return Err(e);
        }
        self.inner.probe()
    }

    fn statvfs(&self) -> io::Result<Space> {
        self.faults.on_io_thread(&self.dir, DiskOp::Statvfs);
        self.inner.statvfs()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use parking_lot::Mutex;

    use super::*;
    use crate::tiers::disk::fake::{self, FakeIo};

    /// Fails the next `fail` writes and probes, and records every hook call.
    #[derive(Default)]
    struct Script {
        fail: AtomicU64,
        seen: Mutex<Vec<String>>,
    }

    impl DiskFaults for Script {
        fn before_write(&self, dir: &Path, bytes: u64) -> Option<io::Error> {
            self.seen
                .lock()
                .push(format!("before_write {} {bytes}", dir.display()));
            let fail = self
                .fail
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| c.checked_sub(1))
                .is_ok();
            fail.then(|| io::Error::new(io::ErrorKind::StorageFull, "injected"))
        }

        fn on_io_thread(&self, _dir: &Path, op: DiskOp) {
            self.seen
                .lock()
                .push(format!("on_io_thread {}", op.label()));
        }
    }

    #[test]
    fn switched_faults_fail_hang_and_recover_per_dir() {
        let switched = Arc::new(SwitchedFaults::default());
        let (a, b) = (Path::new("/disk0"), Path::new("/disk1"));
        switched.set(a, DiskFaultMode::Error);
        assert!(switched.before_write(a, 1).is_some());
        assert!(switched.before_write(b, 1).is_none());
        switched.set(b, DiskFaultMode::Hang);
        assert_eq!(
            switched.modes(),
            vec![
                (a.into(), DiskFaultMode::Error),
                (b.into(), DiskFaultMode::Hang)
            ]
        );
        let hung = {
            let switched = switched.clone();
            std::thread::spawn(move || switched.on_io_thread(Path::new("/disk1"), DiskOp::Read))
        };
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!hung.is_finished(), "a hung disk's call returned");
        switched.on_io_thread(a, DiskOp::Read); // another disk is not held
        switched.set(b, DiskFaultMode::Off);
        hung.join().unwrap();
        switched.set(a, DiskFaultMode::Off);
        assert!(switched.before_write(a, 1).is_none());
        assert!(switched.modes().is_empty());
    }

    #[test]
    fn an_injected_write_error_tears_the_write_then_fails() {
        let below = Arc::new(FakeIo::default());
        let script = Arc::new(Script::default());
        let faults = Faults::new(below.clone(), script.clone(), "/disk0".into());
        faults.write(fake::write(5, 10)).unwrap();
        script.fail.store(1, Ordering::SeqCst);
        let err = faults.write(fake::write(5, 10)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        assert_eq!(below.calls(), ["write 5 index", "write 2 torn"]);
        assert_eq!(
            *script.seen.lock(),
            [
                "before_write /disk0 50",
                "on_io_thread write",
                "before_write /disk0 50",
                "on_io_thread write",
            ]
        );
        // The torn write's own error comes first, as the device's would.
        below.fail(true);
        script.fail.store(1, Ordering::SeqCst);
        let err = faults.write(fake::write(5, 10)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::Other);
    }

    #[test]
    fn probes_fail_without_touching_the_disk_and_every_call_is_announced() {
        let below = Arc::new(FakeIo::default());
        let script = Arc::new(Script::default());
        let faults = Faults::new(below.clone(), script.clone(), "/disk0".into());
        script.fail.store(1, Ordering::SeqCst);
        assert_eq!(
            faults.probe().unwrap_err().kind(),
            io::ErrorKind::StorageFull
        );
        faults.probe().unwrap();
        faults.read(fake::read(3)).unwrap();
        assert_eq!(
            faults.statvfs().unwrap(),
            Space {
                used: 1,
                available: 2
            }
        );
        assert_eq!(below.calls(), ["probe", "read", "statvfs"]);
        assert_eq!(
            *script.seen.lock(),
            [
                "on_io_thread probe",
                "before_write /disk0 4096",
                "on_io_thread probe",
                "before_write /disk0 4096",
                "on_io_thread read",
                "on_io_thread statvfs",
            ]
        );
    }
}
