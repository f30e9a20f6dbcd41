//! What a disk does, as two small traits: [`DiskIo`], one disk's raw
//! filesystem calls, which block, and [`DiskCalls`], the same calls as the
//! runtime awaits them. Each layer of a disk implements one of them around
//! an inner one, as OpenDAL's layers wrap an accessor:
//!
//! ```text
//! Metrics<Throttle<Limit<Timeout>>>   DiskCalls: awaited on the runtime
//!   Timeout ── Arc<dyn DiskIo> moved onto the blocking pool, bounded
//!     [Faults<Fs>] | Fs        DiskIo: runs on an I/O thread
//! ```
//!
//! A call is one [`DiskOp`]: what hang detection bounds and fault injection
//! names.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::block::Block;

/// A blocking filesystem call of a disk, as [`DiskFaults::on_io_thread`]
/// sees it.
///
/// [`DiskFaults::on_io_thread`]: super::fault::DiskFaults::on_io_thread
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

impl DiskOp {
    /// The `op` label of this call in metrics and logs.
    pub(crate) fn label(self) -> &'static str {
        match self {
            DiskOp::Write => "write",
            DiskOp::Read => "read",
            DiskOp::Probe => "probe",
            DiskOp::Statvfs => "statvfs",
        }
    }
}

/// One flush of a batch into a segment: its blocks appended to the data
/// file, then their index records to the index file. The offsets are the
/// segment's committed lengths, so a retried or failed write never leaves a
/// gap that is read.
pub(crate) struct SegmentWrite {
    pub(crate) data: PathBuf,
    pub(crate) data_offset: u64,
    pub(crate) blocks: Arc<[Block]>,
    /// The index records of `blocks`, written after them (an index record
    /// never points past written data). None: the data only, nothing
    /// synced: the torn write of a device that fails mid-flush, as fault
    /// injection makes it.
    pub(crate) index: Option<IndexAppend>,
    /// Write the data with O_DIRECT from this tail (the data file's bytes
    /// from the aligned block at `data_offset` on; None: read them from the
    /// file). None: a buffered write.
    pub(crate) direct: Option<Option<Bytes>>,
}

impl SegmentWrite {
    /// Bytes of block data this write carries.
    pub(crate) fn bytes(&self) -> u64 {
        self.blocks.iter().map(Block::len).sum()
    }
}

/// Index records appended at `offset` of a segment's index file.
pub(crate) struct IndexAppend {
    pub(crate) path: PathBuf,
    pub(crate) offset: u64,
    pub(crate) records: Bytes,
}

/// Exactly `len` bytes at `offset` of a file.
pub(crate) struct ReadAt {
    pub(crate) path: PathBuf,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    /// With O_DIRECT (a data file written so, on a disk that takes it).
    pub(crate) direct: bool,
}

/// The filesystem's own figures, as df counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Space {
    pub(crate) used: u64,
    pub(crate) available: u64,
}

/// One disk's raw filesystem calls. Each blocks its thread, possibly for
/// ever (a device in uninterruptible sleep): only the timeout layer calls
/// them, on the blocking pool.
pub(crate) trait DiskIo: Send + Sync + 'static {
    /// Appends a batch (and its index records) to a segment, with the
    /// fsyncs `disks.sync` asks for. Returns the new O_DIRECT tail of a
    /// direct write, None for a buffered one.
    fn write(&self, w: SegmentWrite) -> io::Result<Option<Bytes>>;
    fn read(&self, r: ReadAt) -> io::Result<Bytes>;
    /// Writes, reads back and removes a small file in the disk's root: does
    /// the disk work again?
    fn probe(&self) -> io::Result<()>;
    fn statvfs(&self) -> io::Result<Space>;
}

/// What a write did, as the layers above the blocking pool report it.
#[derive(Debug, Default)]
pub(crate) struct Written {
    /// The new O_DIRECT tail of a direct write.
    pub(crate) tail: Option<Bytes>,
    /// Time the write waited on the disk's rate limit.
    pub(crate) throttled: Duration,
}

/// A disk's calls as the runtime awaits them: never on a runtime thread.
pub(crate) trait DiskCalls: Send + Sync {
    fn write(&self, w: SegmentWrite) -> impl Future<Output = io::Result<Written>> + Send;
    fn read(&self, r: ReadAt) -> impl Future<Output = io::Result<Bytes>> + Send;
    fn probe(&self) -> impl Future<Output = io::Result<()>> + Send;
    /// None: skipped, an earlier statvfs has not returned yet (a hung mount
    /// costs one thread, not one per check).
    fn statvfs(&self) -> impl Future<Output = io::Result<Option<Space>>> + Send;
}
