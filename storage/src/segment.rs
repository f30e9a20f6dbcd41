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
/// `<stem>.index`. One stem, not two paths: at a million partitions held,
/// the second path was 100 MB.
#[derive(Debug, Clone)]
pub(crate) enum SegmentLocation {
    Disk { disk: usize, stem: Box<Path> },
    Cold { stem: Box<str> },
}

impl SegmentLocation {
    /// A disk segment whose files are `data` and `index`; None unless they
    /// share a stem (as every segment this store names does).
    pub(crate) fn disk_files(disk: usize, data: &Path, index: &Path) -> Option<Self> {
        let stem = data.to_str()?.strip_suffix(".data")?;
        (index.to_str()? == format!("{stem}.index")).then(|| SegmentLocation::Disk {
            disk,
            stem: Path::new(stem).into(),
        })
    }

    /// A cold segment whose objects are `data` and `index`; None unless they
    /// share a stem.
    pub(crate) fn cold_objects(data: &str, index: &str) -> Option<Self> {
        let stem = data.strip_suffix(".data")?;
        (index == format!("{stem}.index")).then(|| SegmentLocation::Cold { stem: stem.into() })
    }
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
