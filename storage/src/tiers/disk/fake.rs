//! Stand-ins for the layers below the one a unit test exercises: they
//! record the calls that reach them, fail on demand, and (the blocking one)
//! block like a device in D state until released.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use bytes::Bytes;
use tokio::time::Instant;

use super::io::{DiskCalls, DiskIo, DiskOp, IndexAppend, ReadAt, SegmentWrite, Space, Written};
use crate::block::{Block, BlockMeta};

/// A write of `blocks` blocks of `each` bytes (one shared buffer).
pub(crate) fn write(blocks: usize, each: u64) -> SegmentWrite {
    let data = Bytes::from(vec![7u8; each as usize]);
    let block = Block {
        meta: BlockMeta {
            block_id: 1,
            map_id: 0,
            batch_id: None,
            crc: 0,
            uncompressed_len: each as i32,
        },
        data,
    };
    SegmentWrite {
        data: "seg.data".into(),
        data_offset: 0,
        blocks: vec![block; blocks].into(),
        index: Some(IndexAppend {
            path: "seg.index".into(),
            offset: 0,
            records: Bytes::new(),
        }),
        direct: None,
    }
}

pub(crate) fn read(len: u64) -> ReadAt {
    ReadAt {
        path: "seg.data".into(),
        offset: 0,
        len,
        direct: false,
    }
}

fn injected() -> io::Error {
    io::Error::other("injected by the fake")
}

/// A [`DiskCalls`] that answers at once.
#[derive(Default)]
pub(crate) struct FakeCalls {
    fail: AtomicBool,
    calls: Mutex<Vec<(DiskOp, Instant)>>,
}

impl FakeCalls {
    pub(crate) fn fail(&self, fail: bool) {
        self.fail.store(fail, Ordering::SeqCst);
    }

    /// The calls that reached it, and when.
    pub(crate) fn calls(&self) -> Vec<(DiskOp, Instant)> {
        self.calls.lock().unwrap().clone()
    }

    fn call(&self, op: DiskOp) -> io::Result<()> {
        self.calls.lock().unwrap().push((op, Instant::now()));
        match self.fail.load(Ordering::SeqCst) {
            true => Err(injected()),
            false => Ok(()),
        }
    }
}

impl DiskCalls for FakeCalls {
    async fn write(&self, _: SegmentWrite) -> io::Result<Written> {
        self.call(DiskOp::Write).map(|()| Written::default())
    }
    async fn read(&self, r: ReadAt) -> io::Result<Bytes> {
        self.call(DiskOp::Read)?;
        Ok(Bytes::from(vec![0; r.len as usize]))
    }
    async fn probe(&self) -> io::Result<()> {
        self.call(DiskOp::Probe)
    }
    async fn statvfs(&self) -> io::Result<Option<Space>> {
        self.call(DiskOp::Statvfs)?;
        Ok(Some(Space {
            used: 1,
            available: 2,
        }))
    }
}

/// A [`DiskIo`] that records its calls (writes as "write <blocks> index",
/// or "torn" without index) and blocks those of one op while held.
#[derive(Default)]
pub(crate) struct FakeIo {
    fail: AtomicBool,
    calls: Mutex<Vec<String>>,
    /// The op whose calls block, until released.
    held: Mutex<Option<DiskOp>>,
    released: Condvar,
}

impl FakeIo {
    pub(crate) fn fail(&self, fail: bool) {
        self.fail.store(fail, Ordering::SeqCst);
    }

    pub(crate) fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    /// Calls of `op` block from now on, until [`FakeIo::release`].
    pub(crate) fn hold(&self, op: DiskOp) {
        *self.held.lock().unwrap() = Some(op);
    }

    pub(crate) fn release(&self) {
        *self.held.lock().unwrap() = None;
        self.released.notify_all();
    }

    fn call(&self, op: DiskOp, what: String) -> io::Result<()> {
        let mut held = self.held.lock().unwrap();
        while *held == Some(op) {
            held = self.released.wait(held).unwrap();
        }
        drop(held);
        self.calls.lock().unwrap().push(what);
        match self.fail.load(Ordering::SeqCst) {
            true => Err(injected()),
            false => Ok(()),
        }
    }
}

impl DiskIo for Arc<FakeIo> {
    fn write(&self, w: SegmentWrite) -> io::Result<Option<Bytes>> {
        let index = if w.index.is_some() { "index" } else { "torn" };
        let what = format!("write {} {index}", w.blocks.len());
        self.call(DiskOp::Write, what).map(|()| None)
    }
    fn read(&self, r: ReadAt) -> io::Result<Bytes> {
        self.call(DiskOp::Read, "read".into())?;
        Ok(Bytes::from(vec![0; r.len as usize]))
    }
    fn probe(&self) -> io::Result<()> {
        self.call(DiskOp::Probe, "probe".into())
    }
    fn statvfs(&self) -> io::Result<Space> {
        self.call(DiskOp::Statvfs, "statvfs".into())?;
        Ok(Space {
            used: 1,
            available: 2,
        })
    }
}

/// Releases a [`FakeIo`] when a test ends, passed or failed, so no
/// blocking thread stays stuck (the runtime waits for them at exit).
pub(crate) struct ReleaseOnDrop(pub(crate) Arc<FakeIo>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.0.release();
    }
}
