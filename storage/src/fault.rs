//! Fault injection for local disks, so tests can show that a failing or
//! hanging disk loses no acknowledged block. Production stores run without it.

use std::io;
use std::path::Path;

/// A blocking filesystem call of a disk, as [`DiskFaults::on_io_thread`]
/// sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskOp {
    /// A flush's data and index writes (and their fsyncs).
    Write,
    /// A read of a data or index file.
    Read,
    /// The health probe of a faulted disk.
    Probe,
    /// The free-space check (statvfs).
    Statvfs,
}

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
