//! The plain [`DiskIo`]: one data directory's files through the kernel,
//! pwritev for buffered writes and [`super::direct`] for O_DIRECT ones.

use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::io::{DiskIo, IndexAppend, ReadAt, SegmentWrite, Space};
use super::{direct, open};

/// The files of one disk, under `root`.
pub(crate) struct Fs {
    root: PathBuf,
    /// `disks.sync`: fsync data, index and the directories of new files.
    sync: bool,
}

impl Fs {
    pub(crate) fn new(root: PathBuf, sync: bool) -> Self {
        Fs { root, sync }
    }
}

impl DiskIo for Fs {
    fn write(&self, w: SegmentWrite) -> io::Result<Option<Bytes>> {
        write_segment(w, self.sync.then_some(self.root.as_path()))
    }

    fn read(&self, r: ReadAt) -> io::Result<Bytes> {
        if r.direct {
            return direct::read(&r.path, r.offset, r.len);
        }
        let file = open::to_read(&r.path, 0)?;
        let mut buf = vec![0u8; r.len as usize];
        file.read_exact_at(&mut buf, r.offset)?;
        Ok(Bytes::from(buf))
    }

    fn probe(&self) -> io::Result<()> {
        let path = self.root.join(".switchyard-probe");
        fs::write(&path, [0u8; 4096])?;
        let back = fs::read(&path)?;
        fs::remove_file(&path)?;
        if back.len() != 4096 {
            return Err(io::Error::other("probe read back a different length"));
        }
        Ok(())
    }

    fn statvfs(&self) -> io::Result<Space> {
        statvfs(&self.root)
    }
}

/// Used and available bytes of the filesystem holding `dir`, as df counts
/// them.
pub(crate) fn statvfs(dir: &Path) -> io::Result<Space> {
    let s = nix::sys::statvfs::statvfs(dir).map_err(io::Error::from)?;
    let frag = s.fragment_size();
    Ok(Space {
        used: s.blocks().saturating_sub(s.blocks_free()) * frag,
        available: s.blocks_available() * frag,
    })
}

/// `sync_below`: the disk's root when `disks.sync` is on.
fn write_segment(w: SegmentWrite, sync_below: Option<&Path>) -> io::Result<Option<Bytes>> {
    let sync = sync_below.is_some() && w.index.is_some();
    let data = open_data(&w.data)?;
    let slices: Vec<&[u8]> = w.blocks.iter().map(|b| &b.data[..]).collect();
    let new_tail = match w.direct {
        Some(tail) => {
            drop(data);
            let tail = match tail {
                Some(t) => t,
                None => direct::read_tail(&w.data, w.data_offset)?,
            };
            let new_tail = direct::write(&w.data, w.data_offset, &tail, &slices, None)?;
            if sync {
                File::open(&w.data)?.sync_data()?;
            }
            Some(new_tail)
        }
        None => {
            pwrite_all(&data, &slices, w.data_offset)?;
            // Data goes first: an index record never points past written data.
            if sync {
                data.sync_data()?;
            }
            None
        }
    };
    let Some(index) = w.index else {
        return Ok(new_tail);
    };
    append_index(&index, sync)?;
    if let Some(root) = sync_below {
        if w.data_offset == 0 {
            // New files (a segment's first write): their directory entries,
            // and any directory create_dir_all just made, are durable only
            // once the directories holding them are synced.
            sync_dirs(&w.data, root)?;
        }
    }
    Ok(new_tail)
}

/// Opens (creating it and its directories) a segment's data file.
fn open_data(path: &Path) -> io::Result<File> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    let open = || {
        OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(path)
    };
    match open() {
        // The orphan sweep removes empty directories of applications it
        // does not know; one may have gone between create_dir_all and here.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent)?;
            }
            open()
        }
        other => other,
    }
}

fn append_index(index: &IndexAppend, sync: bool) -> io::Result<()> {
    let idx = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(&index.path)?;
    idx.write_all_at(&index.records, index.offset)?;
    if sync {
        idx.sync_data()?;
    }
    Ok(())
}

/// fsyncs each directory from `file`'s parent up to `root` (included), or
/// only the parent when `file` is not below `root`. Returns how many.
fn sync_dirs(file: &Path, root: &Path) -> io::Result<usize> {
    let mut synced = 0;
    let mut dir = file.parent();
    while let Some(d) = dir {
        File::open(d)?.sync_all()?;
        synced += 1;
        if d == root || !d.starts_with(root) {
            break;
        }
        dir = d.parent();
    }
    Ok(synced)
}

/// Writes every slice back to back at `offset` with as few syscalls as the
/// kernel allows (pwritev), without copying the blocks into one buffer.
fn pwrite_all(file: &File, slices: &[&[u8]], mut offset: u64) -> io::Result<()> {
    const MAX_IOV: usize = 512;
    let mut pending: Vec<&[u8]> = slices.iter().copied().filter(|s| !s.is_empty()).collect();
    let mut start = 0;
    while start < pending.len() {
        let end = (start + MAX_IOV).min(pending.len());
        let iov: Vec<IoSlice<'_>> = pending[start..end]
            .iter()
            .map(|s| IoSlice::new(s))
            .collect();
        let written = match nix::sys::uio::pwritev(file, &iov, offset as i64) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "pwritev wrote nothing",
                ))
            }
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        };
        offset += written as u64;
        let mut left = written;
        while left > 0 {
            let first = pending[start];
            if left >= first.len() {
                left -= first.len();
                start += 1;
            } else {
                pending[start] = &first[left..];
                left = 0;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::block::{Block, BlockMeta};

    fn block(data: &'static [u8]) -> Block {
        Block {
            meta: BlockMeta {
                block_id: 1,
                map_id: 0,
                batch_id: None,
                crc: 0,
                uncompressed_len: data.len() as i32,
            },
            data: Bytes::from_static(data),
        }
    }

    fn append(data: &Path, index: &Path, at: (u64, u64), records: &'static [u8]) -> SegmentWrite {
        SegmentWrite {
            data: data.to_path_buf(),
            data_offset: at.0,
            blocks: Arc::from(vec![block(b"abc")]),
            index: Some(IndexAppend {
                path: index.to_path_buf(),
                offset: at.1,
                records: Bytes::from_static(records),
            }),
            direct: None,
        }
    }

    /// With sync on, a segment's first write makes the new files durable:
    /// every directory from theirs up to the disk's root is synced, and only
    /// then; later writes to the same files sync none.
    #[test]
    fn sync_mode_syncs_the_directories_of_new_files() {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("app/0/1-0-p.7.data");
        let index = root.path().join("app/0/1-0-p.7.index");
        assert_eq!(
            sync_dirs(&data, root.path()).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        let fs = Fs::new(root.path().to_path_buf(), true);
        fs.write(append(&data, &index, (0, 0), &[7; 40])).unwrap();
        assert_eq!(fs::read(&data).unwrap(), b"abc");
        assert_eq!(fs::read(&index).unwrap(), [7; 40]);
        // app/0, app and the root itself.
        assert_eq!(sync_dirs(&data, root.path()).unwrap(), 3);
        // A file outside the root: only its own directory.
        let other = tempfile::tempdir().unwrap();
        assert_eq!(sync_dirs(&other.path().join("f"), root.path()).unwrap(), 1);
        fs.write(append(&data, &index, (3, 40), &[8; 40])).unwrap();
        assert_eq!(fs::read(&data).unwrap(), b"abcabc");
        assert_eq!(fs::read(&index).unwrap()[40..], [8; 40]);
    }

    /// A write without index records (a torn one) leaves the index file
    /// untouched.
    #[test]
    fn a_data_only_write_writes_no_index() {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("a/1.data");
        let index = root.path().join("a/1.index");
        let fs = Fs::new(root.path().to_path_buf(), true);
        let mut w = append(&data, &index, (0, 0), &[7; 40]);
        w.index = None;
        fs.write(w).unwrap();
        assert_eq!(fs::read(&data).unwrap(), b"abc");
        assert!(!index.exists());
    }

    #[test]
    fn reads_probes_and_statvfs() {
        let root = tempfile::tempdir().unwrap();
        let fs = Fs::new(root.path().to_path_buf(), false);
        let path = root.path().join("f");
        fs::write(&path, b"0123456789").unwrap();
        let read = |offset, len| {
            fs.read(ReadAt {
                path: path.clone(),
                offset,
                len,
                direct: false,
            })
        };
        assert_eq!(&read(3, 4).unwrap()[..], b"3456");
        assert_eq!(read(8, 4).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        fs.probe().unwrap();
        assert!(!root.path().join(".switchyard-probe").exists());
        let space = fs.statvfs().unwrap();
        assert!(space.used + space.available > 0);
    }

    #[test]
    fn pwrite_all_writes_slices_contiguously() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let many: Vec<Vec<u8>> = (0..2000u32)
            .map(|i| vec![(i % 251) as u8; (i % 7) as usize])
            .collect();
        let slices: Vec<&[u8]> = many.iter().map(|v| &v[..]).collect();
        pwrite_all(&file, &slices, 3).unwrap();
        let expected: Vec<u8> = many.concat();
        let got = fs::read(&path).unwrap();
        assert_eq!(&got[3..], &expected[..]);
    }
}
