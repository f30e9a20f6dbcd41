//! Fault injection for local disks, so tests can show that a failing disk
//! loses no acknowledged block. Production stores run without it.

use std::io;
use std::path::Path;

/// Consulted before each flush write and probe. Returning an error makes the
/// disk write part of the data and then fail with that error, like a device
/// that dies or fills up mid-flush.
pub trait DiskFaults: Send + Sync + 'static {
    fn before_write(&self, dir: &Path, bytes: u64) -> Option<io::Error>;
}
