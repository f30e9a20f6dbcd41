//! Direct I/O (O_DIRECT) for segment data files: flushes go from memory to the
//! device without a copy into the page cache, and reads come from the device
//! into memory the same way.
//!
//! The page cache costs a shuffle server twice: every byte flushed is copied
//! into it (on the 2-core benchmark machine that copy was 40-55 % of the
//! gateway's CPU, and buffered writes ran at a quarter of O_DIRECT's rate),
//! and the copies compete with the memory tier for RAM. Shuffle data is
//! written once and read once, so the cache buys nothing back.
//!
//! O_DIRECT needs the buffer, the file offset and the length aligned to the
//! device's block size ([`ALIGN`]). Data files stay contiguous as before (a
//! segment's byte at logical offset `o` is at `o` in its file): a write
//! starts at the aligned block that holds the segment's end, rewriting that
//! block's bytes (the segment's *tail*, kept in memory), and ends padded to
//! the next aligned offset. The padding past the segment's length is never
//! read; recovery reads the recorded length only.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use bytes::Bytes;

/// Alignment of direct I/O: the largest logical block size of common devices.
pub(crate) const ALIGN: u64 = 4096;

/// A segment is written with O_DIRECT only when its first flush is at least
/// this large (on a disk that takes it). A direct write waits for the device,
/// which small flushes (a map task's report or a commit of small partitions:
/// a few KiB each, many per request) would pay once each, where the page
/// cache takes them in microseconds; large flushes are where the page cache's
/// copy costs CPU and throughput. Partitions that grow past
/// `single_buffer_threshold` flush that much at a time, so their segments
/// are direct.
pub(crate) const MIN_FLUSH: u64 = 1 << 20;

/// The staging buffer a write copies blocks into, written at most this much
/// at a time (bounds the memory a flush holds beyond its blocks).
const STAGE: usize = 8 << 20;

/// Staging buffers kept for the next write once a write is done: at most
/// this many (so at most `STAGE_POOL * STAGE` bytes idle). A fresh 8 MiB
/// buffer is zeroed and faulted in page by page on every flush; in the
/// Celeborn bench's profile that was about a seventh of the server's CPU.
const STAGE_POOL: usize = 4;

static STAGES: std::sync::Mutex<Vec<AlignedBuf>> = std::sync::Mutex::new(Vec::new());

/// A staging buffer of [`STAGE`] bytes, from the pool when one is there.
/// Its contents are whatever an earlier write left: writers zero what they
/// pad.
fn take_stage() -> AlignedBuf {
    let pooled = STAGES.lock().unwrap_or_else(|e| e.into_inner()).pop();
    pooled.unwrap_or_else(|| AlignedBuf::zeroed(STAGE))
}

fn return_stage(buf: AlignedBuf) {
    let mut pool = STAGES.lock().unwrap_or_else(|e| e.into_inner());
    if pool.len() < STAGE_POOL {
        pool.push(buf);
    }
}

pub(crate) fn align_down(x: u64) -> u64 {
    x & !(ALIGN - 1)
}

pub(crate) fn align_up(x: u64) -> u64 {
    align_down(x + ALIGN - 1)
}

/// A zeroed, [`ALIGN`]-aligned heap buffer.
pub(crate) struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

// The buffer is plain memory owned by this value.
unsafe impl Send for AlignedBuf {}
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    pub(crate) fn zeroed(len: usize) -> AlignedBuf {
        let len = len.max(ALIGN as usize);
        let layout = Layout::from_size_align(len, ALIGN as usize).expect("aligned layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, len }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes for the life of self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl AsMut<[u8]> for AlignedBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and self is borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len, ALIGN as usize).expect("aligned layout");
        // SAFETY: allocated in zeroed() with this layout.
        unsafe { dealloc(self.ptr, layout) }
    }
}

fn open_direct(path: &Path, write: bool) -> io::Result<File> {
    if !write {
        return super::open::to_read(path, nix::libc::O_DIRECT);
    }
    OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .custom_flags(nix::libc::O_DIRECT)
        .open(path)
}

/// Whether the filesystem of `dir` takes direct I/O (tmpfs, for one, does
/// not): writes and reads back one aligned block in a probe file.
pub(crate) fn supported(dir: &Path) -> bool {
    let probe = dir.join(format!(".direct-io-probe-{}", std::process::id()));
    let works = (|| -> io::Result<bool> {
        let f = open_direct(&probe, true)?;
        let mut buf = AlignedBuf::zeroed(ALIGN as usize);
        buf.as_mut()[..5].copy_from_slice(b"probe");
        f.write_all_at(buf.as_ref(), 0)?;
        let r = open_direct(&probe, false)?;
        let mut back = AlignedBuf::zeroed(ALIGN as usize);
        r.read_exact_at(back.as_mut(), 0)?;
        Ok(back.as_ref()[..5] == *b"probe")
    })();
    let _ = std::fs::remove_file(&probe);
    works.unwrap_or(false)
}

/// The bytes of a data file from the aligned block holding `len` up to `len`:
/// what a direct write at the segment's end must rewrite. Read when the
/// segment's tail is not in memory (a segment written before a restart).
pub(crate) fn read_tail(path: &Path, len: u64) -> io::Result<Bytes> {
    let start = align_down(len);
    if start == len {
        return Ok(Bytes::new());
    }
    read(path, start, len - start)
}

/// Writes `tail` (the bytes of the file from `align_down(offset)` to `offset`)
/// followed by `slices` with O_DIRECT, from `align_down(offset)` on, the last
/// block padded with zeros. `limit`: stop after this many bytes of `slices`
/// (a fault test's half write). Returns the new tail: the bytes from the last
/// aligned offset to the end of what was written.
pub(crate) fn write(
    path: &Path,
    offset: u64,
    tail: &[u8],
    slices: &[&[u8]],
    limit: Option<u64>,
) -> io::Result<Bytes> {
    debug_assert_eq!(align_down(offset) + tail.len() as u64, offset);
    let file = open_direct(path, true)?;
    let total: u64 =
        tail.len() as u64 + limit.unwrap_or(slices.iter().map(|s| s.len() as u64).sum());
    // A small write touches only the start of the stage (a fresh one is
    // faulted in only as far as it is written).
    let mut stage = take_stage();
    let result = fill_and_write(&file, offset, tail, slices, total, &mut stage);
    return_stage(stage);
    result
}

fn fill_and_write(
    file: &File,
    offset: u64,
    tail: &[u8],
    slices: &[&[u8]],
    total: u64,
    stage: &mut AlignedBuf,
) -> io::Result<Bytes> {
    let mut at = align_down(offset);
    let mut filled = 0usize;
    let mut left = total;
    let mut pieces = std::iter::once(tail).chain(slices.iter().copied());
    let mut current: &[u8] = &[];
    let mut new_tail = Bytes::new();
    while left > 0 {
        // Fill the stage from the pieces.
        while filled < stage.len && left > 0 {
            if current.is_empty() {
                match pieces.next() {
                    Some(p) => current = p,
                    None => break,
                }
                continue;
            }
            let n = current.len().min(stage.len - filled).min(left as usize);
            stage.as_mut()[filled..filled + n].copy_from_slice(&current[..n]);
            current = &current[n..];
            filled += n;
            left -= n as u64;
        }
        let last = left == 0;
        let whole = if last {
            align_up(filled as u64) as usize
        } else {
            filled
        };
        if last {
            // Zero the padding (the stage may hold an earlier round's bytes).
            stage.as_mut()[filled..whole].fill(0);
            let tail_start = align_down(filled as u64) as usize;
            new_tail = Bytes::copy_from_slice(&stage.as_ref()[tail_start..filled]);
        }
        file.write_all_at(&stage.as_ref()[..whole], at)?;
        at += whole as u64;
        filled = 0;
    }
    Ok(new_tail)
}

/// Reads `len` bytes at `offset` with O_DIRECT: the aligned range around
/// them into an aligned buffer, handed out without a copy.
pub(crate) fn read(path: &Path, offset: u64, len: u64) -> io::Result<Bytes> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    let start = align_down(offset);
    let end = align_up(offset + len);
    let file = open_direct(path, false)?;
    let mut buf = AlignedBuf::zeroed((end - start) as usize);
    let want = (offset + len - start) as usize;
    let mut got = 0usize;
    // A file written buffered may end unpadded: a short read at its end is
    // fine as long as it covers the bytes asked for.
    while got < want {
        match file.read_at(&mut buf.as_mut()[got..], start + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        // Reads past the first must stay aligned; a short read ended the file.
        if !got.is_multiple_of(ALIGN as usize) {
            break;
        }
    }
    if got < want {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "{}: {} bytes at {offset}, file shorter",
                path.display(),
                len
            ),
        ));
    }
    let skip = (offset - start) as usize;
    Ok(Bytes::from_owner(buf).slice(skip..skip + len as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_rewrite_the_tail_and_read_back_exactly() {
        let dir = tempfile::tempdir().unwrap();
        if !supported(dir.path()) {
            eprintln!("SKIPPED: the temp dir's filesystem takes no O_DIRECT");
            return;
        }
        let path = dir.path().join("seg.data");
        let mut expected = Vec::new();
        let mut tail = Bytes::new();
        // Lengths that cross, end on and fall short of block boundaries,
        // and one larger than the stage.
        for (i, len) in [1usize, 4095, 4096, 10_000, 3, STAGE + 123, 7]
            .into_iter()
            .enumerate()
        {
            let a: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8).collect();
            let b: Vec<u8> = vec![i as u8; len / 3];
            let offset = expected.len() as u64;
            tail = write(&path, offset, &tail, &[&a, &b], None).unwrap();
            expected.extend_from_slice(&a);
            expected.extend_from_slice(&b);
            assert_eq!(tail.len() as u64, expected.len() as u64 % ALIGN);
            assert_eq!(
                &tail[..],
                &expected[align_down(expected.len() as u64) as usize..]
            );
        }
        let file_len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(
            file_len,
            align_up(expected.len() as u64),
            "padded to a block"
        );
        for (off, len) in [
            (0u64, 1u64),
            (4095, 2),
            (5000, 70_000),
            (0, expected.len() as u64),
        ] {
            let got = read(&path, off, len).unwrap();
            assert_eq!(&got[..], &expected[off as usize..(off + len) as usize]);
        }
        assert_eq!(
            read_tail(&path, expected.len() as u64).unwrap(),
            tail,
            "the tail as read back"
        );
        // Past the end: an error, not short data.
        assert!(read(&path, expected.len() as u64, ALIGN * 3).is_err());
        // A half write (fault test) stops where asked.
        let offset = expected.len() as u64;
        let half = write(&path, offset, &tail, &[b"abcdef"], Some(3)).unwrap();
        expected.extend_from_slice(b"abc");
        assert_eq!(
            &half[..],
            &expected[align_down(expected.len() as u64) as usize..]
        );
        assert_eq!(&read(&path, offset, 3).unwrap()[..], b"abc");
    }

    #[test]
    fn alignment_helpers() {
        assert_eq!(align_down(4097), 4096);
        assert_eq!(align_up(4097), 8192);
        assert_eq!(align_up(4096), 4096);
        assert_eq!(align_up(0), 0);
    }
}
