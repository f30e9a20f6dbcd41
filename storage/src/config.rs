//! Store configuration. Every field has a default that runs a single node on
//! one machine; `config/switchyard.toml` documents the same keys.

use std::path::PathBuf;
use std::time::Duration;

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    pub memory: MemoryConfig,
    pub disks: DiskConfig,
    /// The cold tier; none by default.
    pub cold: Option<ColdConfig>,
    pub apps: AppConfig,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// The one budget every protocol's buffered blocks share. Default 1 GiB.
    pub capacity: ByteSize,
    /// Spill starts when unflushed memory passes this fraction of the capacity.
    pub high_watermark: f64,
    /// Spill picks partitions, largest first, until unflushed memory would fall
    /// to this fraction.
    pub low_watermark: f64,
    /// A partition buffering more than this spills at once. Default 64 MiB.
    pub single_buffer_threshold: ByteSize,
    /// How often the spill check also runs on a timer.
    #[serde(with = "humantime_serde")]
    pub spill_check_interval: Duration,
    /// Cache of recently read index data (bytes). Default 64 MiB.
    pub index_cache: ByteSize,
    /// Bytes that reads of persisted data may hold at once; further reads
    /// wait. Default 256 MiB.
    pub read_capacity: ByteSize,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            capacity: ByteSize::gib(1),
            high_watermark: 0.75,
            low_watermark: 0.25,
            single_buffer_threshold: ByteSize::mib(64),
            spill_check_interval: Duration::from_millis(200),
            index_cache: ByteSize::mib(64),
            read_capacity: ByteSize::mib(256),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiskConfig {
    /// Data directories, one per disk. Default `./data/switchyard`.
    pub dirs: Vec<PathBuf>,
    /// Concurrent flushes per disk.
    pub write_concurrency: usize,
    /// Concurrent reads per disk.
    pub read_concurrency: usize,
    /// Write bandwidth limit per disk, bytes per second; off when absent.
    pub write_rate_limit: Option<ByteSize>,
    /// Read bandwidth limit per disk, bytes per second; off when absent.
    pub read_rate_limit: Option<ByteSize>,
    /// A disk whose filesystem is fuller than this fraction takes no new writes...
    pub high_watermark: f64,
    /// ...until it falls below this fraction.
    pub low_watermark: f64,
    /// After an I/O error a disk rests this long, then a probe write decides
    /// whether it takes writes again.
    #[serde(with = "humantime_serde")]
    pub error_cooldown: Duration,
    /// How often capacity and faulted disks are checked.
    #[serde(with = "humantime_serde")]
    pub health_check_interval: Duration,
    /// fdatasync data and index after each flush. Off by default, as in
    /// Uniffle and Celeborn: the page cache survives a process restart.
    pub sync: bool,
}

impl Default for DiskConfig {
    fn default() -> Self {
        DiskConfig {
            dirs: vec![PathBuf::from("data/switchyard")],
            write_concurrency: 2,
            read_concurrency: 8,
            write_rate_limit: None,
            read_rate_limit: None,
            high_watermark: 0.95,
            low_watermark: 0.85,
            error_cooldown: Duration::from_secs(30),
            health_check_interval: Duration::from_secs(5),
            sync: false,
        }
    }
}

/// The cold tier: an OpenDAL service.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ColdConfig {
    #[serde(flatten)]
    pub backend: ColdBackend,
    /// Key prefix inside the service.
    #[serde(default = "default_cold_prefix")]
    pub prefix: String,
    /// A partition holding more than this sends its further spills to the cold
    /// tier (a "huge" partition). Default 20 GiB, Uniffle's default.
    #[serde(default = "default_huge_threshold")]
    pub huge_partition_threshold: ByteSize,
    /// Concurrent cold uploads.
    #[serde(default = "default_cold_concurrency")]
    pub write_concurrency: usize,
}

fn default_cold_prefix() -> String {
    "switchyard".into()
}
fn default_huge_threshold() -> ByteSize {
    ByteSize::gib(20)
}
fn default_cold_concurrency() -> usize {
    4
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "service", rename_all = "lowercase", deny_unknown_fields)]
pub enum ColdBackend {
    /// A directory, through OpenDAL's `fs` service (tests, NFS mounts).
    Fs { root: PathBuf },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AppConfig {
    /// An application with no heartbeat or request for this long is removed
    /// with all its data. Default 60 s, as in Uniffle.
    #[serde(with = "humantime_serde")]
    pub expiry: Duration,
    /// How often expiry is checked.
    #[serde(with = "humantime_serde")]
    pub expiry_check_interval: Duration,
}

impl Default for AppConfig {
    fn default() -> Self {
        AppConfig {
            expiry: Duration::from_secs(60),
            expiry_check_interval: Duration::from_secs(10),
        }
    }
}

impl StoreConfig {
    pub fn validate(&self) -> Result<(), String> {
        let m = &self.memory;
        if m.capacity.as_u64() == 0 {
            return Err("memory.capacity must be > 0".into());
        }
        if m.read_capacity.as_u64() < 1024 {
            return Err("memory.read_capacity must be at least 1 KiB".into());
        }
        if !(0.0 < m.low_watermark && m.low_watermark < m.high_watermark && m.high_watermark <= 1.0)
        {
            return Err("memory watermarks need 0 < low_watermark < high_watermark <= 1".into());
        }
        let d = &self.disks;
        if d.dirs.is_empty() && self.cold.is_none() {
            return Err("configure at least one disks.dirs entry or a cold tier".into());
        }
        if !(0.0 < d.low_watermark
            && d.low_watermark <= d.high_watermark
            && d.high_watermark <= 1.0)
        {
            return Err("disk watermarks need 0 < low_watermark <= high_watermark <= 1".into());
        }
        if d.write_concurrency == 0 || d.read_concurrency == 0 {
            return Err("disks.write_concurrency and disks.read_concurrency must be > 0".into());
        }
        Ok(())
    }
}
