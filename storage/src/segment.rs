//! Persisted segments: where a partition's flushed blocks live.
//!
//! A partition's persisted data is one logical byte stream: its segments in
//! order, each a data file (or object) plus an index of 40-byte records. A
//! partition grows by appending to its last disk segment, or by starting a new
//! segment when it moves to another disk or to the cold tier. Readers see the
//! logical stream: index offsets are rebased and reads may span segments.
//!
//! A segment's `len` and `records` only grow after both its data and index
//! writes succeeded, so readers never see an index record without its data.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Where a segment's two files (or objects) are: `<stem>.data` and
/// `<stem>.index`. The stem of a segment this store names is
/// `<app>/<shuffle>/<partition stem>.<uid>` under its disk's directory or
/// the cold prefix, derived when needed ([`crate::tiers::Durable::segment_files`])
/// rather than kept: at a million partitions held, the kept stems were some
/// 80 MB. A recovered segment named otherwise keeps its stem.
#[derive(Debug, Clone)]
pub(crate) enum SegmentLocation {
    Disk {
        disk: usize,
        stem: Option<Box<Path>>,
    },
    Cold {
        stem: Option<Box<str>>,
    },
}

impl SegmentLocation {
    /// A new disk segment, named by the store.
    pub(crate) fn new_disk(disk: usize) -> Self {
        SegmentLocation::Disk { disk, stem: None }
    }

    /// A new cold segment, named by the store.
    pub(crate) fn new_cold() -> Self {
        SegmentLocation::Cold { stem: None }
    }

    /// A disk segment whose files are `data` and `index`; None unless they
    /// share a stem (as every segment this store names does). `named` is
    /// the stem the store would give it: then none is kept.
    pub(crate) fn disk_files(disk: usize, data: &Path, index: &Path, named: &Path) -> Option<Self> {
        let stem = data.to_str()?.strip_suffix(".data")?;
        (index.to_str()? == format!("{stem}.index")).then(|| SegmentLocation::Disk {
            disk,
            stem: (Path::new(stem) != named).then(|| Path::new(stem).into()),
        })
    }

    /// A cold segment whose objects are `data` and `index`; None unless they
    /// share a stem. `named` as for [`SegmentLocation::disk_files`].
    pub(crate) fn cold_objects(data: &str, index: &str, named: Option<&str>) -> Option<Self> {
        let stem = data.strip_suffix(".data")?;
        (index == format!("{stem}.index")).then(|| SegmentLocation::Cold {
            stem: (Some(stem) != named).then(|| stem.into()),
        })
    }
}

/// A segment's data and index files (or objects), named in full.
pub(crate) enum SegmentFiles {
    Disk {
        disk: usize,
        data: PathBuf,
        index: PathBuf,
    },
    Cold {
        data: String,
        index: String,
    },
}

/// A disk segment's data and index files.
pub(crate) fn disk_files(stem: &Path) -> (PathBuf, PathBuf) {
    let with = |ext: &str| {
        let mut p = stem.as_os_str().to_owned();
        p.push(ext);
        PathBuf::from(p)
    };
    (with(".data"), with(".index"))
}

/// A cold segment's data and index objects.
pub(crate) fn cold_objects(stem: &str) -> (String, String) {
    (format!("{stem}.data"), format!("{stem}.index"))
}

#[derive(Debug)]
pub(crate) struct Segment {
    /// Unique per store; keys the index cache.
    pub uid: u64,
    pub location: SegmentLocation,
    /// Offset of this segment's first byte in the partition's logical stream.
    pub logical_start: u64,
    len: AtomicU64,
    records: AtomicU64,
    /// A disk segment takes appends until a write to it fails.
    open: AtomicBool,
    /// Written and read with O_DIRECT (`direct.rs`): decided when the
    /// segment is created, from its disk and its first flush's size.
    pub direct: bool,
    /// For a direct segment, the data file's bytes from the aligned block
    /// holding the segment's end to its end: the next append rewrites them.
    /// None when not known (read from the file then). Boxed, and only for
    /// direct segments: the others, nearly all of a node's at scale, never
    /// use it.
    tail: Option<Box<parking_lot::Mutex<Option<bytes::Bytes>>>>,
}

/// What a reader may use of a segment at one moment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentExtent {
    pub len: u64,
    pub records: u64,
}

impl Segment {
    pub(crate) fn new(uid: u64, location: SegmentLocation, logical_start: u64) -> Self {
        let open = matches!(location, SegmentLocation::Disk { .. });
        Segment {
            uid,
            location,
            logical_start,
            len: AtomicU64::new(0),
            records: AtomicU64::new(0),
            open: AtomicBool::new(open),
            direct: false,
            tail: None,
        }
    }

    pub(crate) fn extent(&self) -> SegmentExtent {
        // records is published after len (Release), so loading it first
        // (Acquire) guarantees len covers every record read.
        let records = self.records.load(Ordering::Acquire);
        let len = self.len.load(Ordering::Acquire);
        SegmentExtent { len, records }
    }

    pub(crate) fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    /// The segment written and read with O_DIRECT.
    pub(crate) fn with_direct(mut self, direct: bool) -> Self {
        self.direct = direct;
        // A new segment's tail is known: it is empty.
        self.tail = direct.then(|| Box::new(parking_lot::Mutex::new(Some(bytes::Bytes::new()))));
        self
    }

    /// The tail a direct append starts from (see the field).
    pub(crate) fn tail(&self) -> Option<bytes::Bytes> {
        self.tail.as_ref()?.lock().clone()
    }

    pub(crate) fn set_tail(&self, tail: Option<bytes::Bytes>) {
        if let Some(t) = &self.tail {
            *t.lock() = tail;
        }
    }

    pub(crate) fn commit(&self, bytes: u64, records: u64) {
        self.len.fetch_add(bytes, Ordering::AcqRel);
        self.records.fetch_add(records, Ordering::Release);
    }

    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    pub(crate) fn close(&self) {
        self.open.store(false, Ordering::Release);
    }

    pub(crate) fn is_cold(&self) -> bool {
        matches!(self.location, SegmentLocation::Cold { .. })
    }

    pub(crate) fn disk(&self) -> Option<usize> {
        match self.location {
            SegmentLocation::Disk { disk, .. } => Some(disk),
            SegmentLocation::Cold { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recovered_stem_is_kept_only_when_the_store_would_name_it_otherwise() {
        let named = Path::new("/d/a/0/3-0-p.7");
        let (data, index) = disk_files(named);
        let ours = SegmentLocation::disk_files(1, &data, &index, named).unwrap();
        assert!(matches!(
            ours,
            SegmentLocation::Disk {
                disk: 1,
                stem: None
            }
        ));
        let (data, index) = disk_files(Path::new("/d/old/0/3-0-p.7"));
        let other = SegmentLocation::disk_files(1, &data, &index, named).unwrap();
        match other {
            SegmentLocation::Disk { stem: Some(s), .. } => {
                assert_eq!(&*s, Path::new("/d/old/0/3-0-p.7"))
            }
            o => panic!("{o:?}"),
        }
        assert!(SegmentLocation::disk_files(1, &data, Path::new("/d/x.index"), named).is_none());
        let cold = SegmentLocation::cold_objects("p/a/0/1.data", "p/a/0/1.index", Some("p/a/0/1"));
        assert!(matches!(cold, Some(SegmentLocation::Cold { stem: None })));
        let moved = SegmentLocation::cold_objects("q/a/0/1.data", "q/a/0/1.index", Some("p/a/0/1"));
        assert!(matches!(
            moved,
            Some(SegmentLocation::Cold { stem: Some(_) })
        ));
    }
}
