//! Store configuration. Every field has a default that runs a single node on
//! one machine; `config/switchyard.toml` documents the same keys.

use std::path::PathBuf;
use std::time::Duration;

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};

pub use crate::secret::Secret;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Longest a commit (`Store::seal`, Celeborn's CommitFiles) or a
    /// `Store::flush_shuffle` (Uniffle's finishShuffle) waits for its blocks
    /// to become durable before it fails with `StorageError::FlushTimeout`.
    /// The flush itself goes on in the background, so nothing acknowledged
    /// is dropped; the caller only stops waiting. Default 120 s, Celeborn's
    /// `celeborn.worker.commitFiles.timeout`. (Uniffle's client gives up on
    /// its own after `rss.client.rpc.timeout.ms`, 60 s by default.)
    #[serde(with = "humantime_serde")]
    pub commit_timeout: Duration,
    pub memory: MemoryConfig,
    pub disks: DiskConfig,
    /// The cold tier; none by default.
    pub cold: Option<ColdConfig>,
    pub apps: AppConfig,
    pub recovery: RecoveryConfig,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            commit_timeout: Duration::from_secs(120),
            memory: MemoryConfig::default(),
            disks: DiskConfig::default(),
            cold: None,
            apps: AppConfig::default(),
            recovery: RecoveryConfig::default(),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// The node's one memory number: every protocol's buffered blocks, frames
    /// being read and replies being written share it. Default 1 GiB.
    pub capacity: ByteSize,
    /// The part of `capacity` kept for bytes on the network (frames being read,
    /// replies being written, every protocol's); the store's blocks get the
    /// rest. The `switchyard` binary sets it to a quarter of `capacity` when it
    /// is not given; unset in an embedded store, network bytes are not charged
    /// and the store has all of `capacity`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<ByteSize>,
    /// Spill starts when unflushed memory passes this fraction of the capacity.
    pub high_watermark: f64,
    /// Spill picks partitions, largest first, until unflushed memory would fall
    /// to this fraction.
    pub low_watermark: f64,
    /// A partition buffering more than this is flushed at once, while its
    /// pushes go on: a commit then only flushes what came since, so its cost
    /// does not grow with the data (the JVM Celeborn worker flushes each
    /// partition in 256 KiB pieces). Default 8 MiB, large enough for
    /// efficient writes.
    pub single_buffer_threshold: ByteSize,
    /// How often the spill check also runs on a timer.
    #[serde(with = "humantime_serde")]
    pub spill_check_interval: Duration,
    /// Cache of recently read index data: its bytes plus 256 bytes per
    /// entry, what moka and the key cost beside them (a small partition's
    /// index is a single 40-byte record). Default 16 MiB: a reduce task
    /// reads a partition's index once, so the cache serves retries and
    /// re-reads; at 64 MiB it was, full, some 300 bytes a partition of a
    /// node holding 2x10^5.
    pub index_cache: ByteSize,
    /// Bytes that reads of persisted data may hold at once; further reads
    /// wait. Default 256 MiB.
    pub read_capacity: ByteSize,
    /// Past this fraction of the store's memory, an application holding
    /// more than its fair share (the memory divided among the applications
    /// holding some, by their users' weights) is admitted no further until
    /// its flushes bring it under (Celeborn pushes wait, Uniffle gets
    /// NO_BUFFER and retries), while applications under their share are
    /// admitted up to the whole capacity: a small job does not wait behind
    /// a big one. 1.0: no shares, first come first served. Default 0.8.
    pub fair_share_from: f64,
    /// Weights of users' applications in the fair shares (users the client
    /// names; default 1), e.g. `{ etl = 2.0 }`.
    pub user_weights: std::collections::HashMap<String, f64>,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            capacity: ByteSize::gib(1),
            network: None,
            high_watermark: 0.75,
            low_watermark: 0.25,
            single_buffer_threshold: ByteSize::mib(8),
            spill_check_interval: Duration::from_millis(200),
            index_cache: ByteSize::mib(16),
            read_capacity: ByteSize::mib(256),
            fair_share_from: 0.8,
            user_weights: Default::default(),
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
    /// Small writes pass first and large ones share it in 10 ms steps (see
    /// docs/operations.md, "Sharing a node").
    pub write_rate_limit: Option<ByteSize>,
    /// Read bandwidth limit per disk, bytes per second; off when absent.
    pub read_rate_limit: Option<ByteSize>,
    /// A disk whose filesystem has less space available than this (df's
    /// "Avail") takes no new writes, as Celeborn's
    /// `celeborn.worker.disk.reserve.size`. An absolute reserve rather than a
    /// fraction: filesystems with quotas or root reserves report totals that
    /// say little about what is left. Default 2 GiB.
    pub min_free: ByteSize,
    /// Most bytes of shuffle data Switchyard keeps on each disk (Uniffle's
    /// `rss.server.disk.capacity`, Celeborn's `capacity=` per dir); none by
    /// default. Flushes already under way when it is reached still complete,
    /// so a disk can pass it by up to `write_concurrency` flushes.
    pub capacity: Option<ByteSize>,
    /// A full disk takes writes again once it has this much room past
    /// `min_free` (and below `capacity`), so it does not flap. Default 1 GiB.
    pub resume_margin: ByteSize,
    /// After an I/O error a disk rests this long, then a probe write decides
    /// whether it takes writes again.
    #[serde(with = "humantime_serde")]
    pub error_cooldown: Duration,
    /// How often capacity and faulted disks are checked.
    #[serde(with = "humantime_serde")]
    pub health_check_interval: Duration,
    /// A disk write, fsync, read, probe or statvfs that has not returned
    /// after this long marks the disk hung (Celeborn's DeviceMonitor calls
    /// it IO_HANG): the flush stops waiting for it and goes to another disk
    /// or the cold tier, and the disk takes no writes or reads until the
    /// stuck call returns and a probe succeeds. Default 30 s, Celeborn's
    /// `celeborn.worker.monitor.disk.check.timeout`: far above what one flush
    /// of a spill batch (tens of MiB) takes on a busy disk, so a slow disk
    /// is not mistaken for a hung one.
    #[serde(with = "humantime_serde")]
    pub io_timeout: Duration,
    /// fsync (fdatasync) data and index after each flush, and the
    /// directories of newly created files. Off by default, as in Uniffle and
    /// Celeborn: a commit is then acknowledged once its blocks are in the
    /// kernel's page cache, which survives a crash of this process but not
    /// of the machine (power loss, kernel panic).
    pub sync: bool,
    /// Whether segment data files are written and read with O_DIRECT,
    /// bypassing the page cache: `auto` (default) where the filesystem takes
    /// it (tmpfs does not), `on`, `off`. Shuffle data is written once and
    /// read once, so the page cache's copy buys nothing back; on the 2-core
    /// benchmark machine it was half of the gateway's CPU and buffered
    /// writes ran at a quarter of O_DIRECT's rate (docs/benchmarks.md).
    /// Index files, and segments whose first flush is under 1 MiB, stay
    /// buffered.
    pub direct_io: DirectIo,
}

/// `storage.disks.direct_io`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DirectIo {
    /// Where the filesystem takes it.
    #[default]
    Auto,
    /// Wanted: a disk whose filesystem refuses it logs a warning and goes
    /// buffered.
    On,
    Off,
}

impl Default for DiskConfig {
    fn default() -> Self {
        DiskConfig {
            dirs: vec![PathBuf::from("data/switchyard")],
            write_concurrency: 2,
            read_concurrency: 8,
            write_rate_limit: None,
            read_rate_limit: None,
            min_free: ByteSize::gib(2),
            capacity: None,
            resume_margin: ByteSize::gib(1),
            error_cooldown: Duration::from_secs(30),
            health_check_interval: Duration::from_secs(5),
            io_timeout: Duration::from_secs(30),
            sync: false,
            direct_io: DirectIo::Auto,
        }
    }
}

/// The cold tier: an OpenDAL service.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ColdConfig {
    #[serde(flatten)]
    pub backend: ColdBackend,
    /// Key prefix inside the service (below the fs/hdfs `root`, or at the top
    /// of the S3 bucket).
    #[serde(default = "default_cold_prefix")]
    pub prefix: String,
    /// A partition holding more than this sends its further spills to the cold
    /// tier (a "huge" partition). Default 20 GiB, Uniffle's default.
    #[serde(default = "default_huge_threshold")]
    pub huge_partition_threshold: ByteSize,
    /// Concurrent cold uploads (segments being written at once).
    #[serde(default = "default_cold_concurrency")]
    pub write_concurrency: usize,
    /// Requests in flight to the cold service at once, over all reads, writes
    /// and deletes (OpenDAL's concurrent-limit layer). Default 32.
    #[serde(default = "default_cold_max_requests")]
    pub max_requests: usize,
    /// A segment is uploaded in parts of this size (S3 multipart upload; at
    /// least 5 MiB on S3, OpenDAL raises smaller values). A segment smaller
    /// than one part is one PUT. Default 8 MiB.
    #[serde(default = "default_cold_upload_part")]
    pub upload_part_size: ByteSize,
    /// Parts of one segment uploaded at once. Default 4.
    #[serde(default = "default_cold_upload_concurrency")]
    pub upload_part_concurrency: usize,
    /// Timeout of one cold request (a part, a ranged read, a delete).
    /// Default 60 s.
    #[serde(default = "default_cold_io_timeout", with = "humantime_serde")]
    pub io_timeout: Duration,
    /// A failed cold request is retried this many times (with backoff) before
    /// the flush or read fails; a failed flush is then retried by the store.
    /// Default 4.
    #[serde(default = "default_cold_retries")]
    pub retries: usize,
    /// Cache of cold data read back through this node, in bytes; only durable
    /// cold data is cached, never acknowledged blocks still in memory. 0 turns
    /// the cache and read-ahead off. Default 256 MiB.
    #[serde(default = "default_cold_read_cache")]
    pub read_cache: ByteSize,
    /// Cold data is fetched and cached in aligned windows of this size: a
    /// read fetches the windows it touches in one request each, and a reader
    /// nearing a window's end has the next one fetched ahead. Default 4 MiB.
    #[serde(default = "default_cold_readahead")]
    pub readahead: ByteSize,
    /// After a failed cold write, huge partitions spill to a healthy disk
    /// instead for this long; the first flush after it tries the cold tier
    /// again. The cold tier has no probe of its own: that flush is the
    /// probe. Default 30 s, as `disks.error_cooldown`.
    #[serde(default = "default_cold_error_cooldown", with = "humantime_serde")]
    pub error_cooldown: Duration,
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
fn default_cold_max_requests() -> usize {
    32
}
fn default_cold_upload_part() -> ByteSize {
    ByteSize::mib(8)
}
fn default_cold_upload_concurrency() -> usize {
    4
}
fn default_cold_io_timeout() -> Duration {
    Duration::from_secs(60)
}
fn default_cold_retries() -> usize {
    4
}
fn default_cold_read_cache() -> ByteSize {
    ByteSize::mib(256)
}
fn default_cold_readahead() -> ByteSize {
    ByteSize::mib(4)
}
fn default_cold_error_cooldown() -> Duration {
    Duration::from_secs(30)
}

impl ColdConfig {
    /// A cold tier on `backend` with every other setting at its default.
    pub fn new(backend: ColdBackend) -> Self {
        ColdConfig {
            backend,
            prefix: default_cold_prefix(),
            huge_partition_threshold: default_huge_threshold(),
            write_concurrency: default_cold_concurrency(),
            max_requests: default_cold_max_requests(),
            upload_part_size: default_cold_upload_part(),
            upload_part_concurrency: default_cold_upload_concurrency(),
            io_timeout: default_cold_io_timeout(),
            retries: default_cold_retries(),
            read_cache: default_cold_read_cache(),
            readahead: default_cold_readahead(),
            error_cooldown: default_cold_error_cooldown(),
        }
    }
}

/// Which OpenDAL service holds the cold tier (`service = "..."`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "service", rename_all = "lowercase", deny_unknown_fields)]
pub enum ColdBackend {
    /// A directory, through OpenDAL's `fs` service (tests, NFS mounts).
    Fs { root: PathBuf },
    /// An S3-compatible object store.
    S3 {
        bucket: String,
        /// `https://s3.<region>.amazonaws.com` when absent; set it for other
        /// stores (`http://127.0.0.1:9000`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        endpoint: Option<String>,
        /// Signing region. Default `us-east-1`; stores such as Garage need
        /// their own configured region here.
        #[serde(default = "default_s3_region")]
        region: String,
        /// Static credentials. When absent, OpenDAL looks for credentials
        /// the AWS way: `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, the
        /// shared config files, web identity, then EC2/ECS instance metadata.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        access_key_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secret_access_key: Option<Secret>,
        /// Path-style requests (`endpoint/bucket/key`), which every
        /// S3-compatible store accepts. false: virtual-hosted style
        /// (`bucket.endpoint/key`). Default true.
        #[serde(default = "default_true")]
        path_style: bool,
    },
    /// HDFS through OpenDAL's `hdfs-native` service: a pure-Rust client of
    /// the namenode and datanode protocols, no JVM or Hadoop jars.
    Hdfs {
        /// `hdfs://host:port`, or `hdfs://nameservice` with the HA settings
        /// in the Hadoop config files that `HADOOP_CONF_DIR` points at.
        name_node: String,
        /// Directory for the tier's files. Default `/`.
        #[serde(default = "default_hdfs_root")]
        root: String,
    },
}

fn default_s3_region() -> String {
    "us-east-1".into()
}
fn default_true() -> bool {
    true
}
fn default_hdfs_root() -> String {
    "/".into()
}

impl ColdBackend {
    pub fn service(&self) -> &'static str {
        match self {
            ColdBackend::Fs { .. } => "fs",
            ColdBackend::S3 { .. } => "s3",
            ColdBackend::Hdfs { .. } => "hdfs",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AppConfig {
    /// An application with no heartbeat or request for this long is removed
    /// with all its data. Default 60 s, as in Uniffle
    /// (`rss.server.app.expired.withoutHeartbeat`). A protocol may register
    /// its applications with a lease of its own (Celeborn: 300 s).
    #[serde(with = "humantime_serde")]
    pub expiry: Duration,
    /// How often expiry is checked.
    #[serde(with = "humantime_serde")]
    pub expiry_check_interval: Duration,
    /// How long the shuffles of a removed application stay dead: appends and
    /// reads of them fail even if the application registers again. Default
    /// 1 h, far longer than any client retries a request.
    #[serde(with = "humantime_serde")]
    pub tombstone_retention: Duration,
    /// How long the figures of a removed application (bytes written and
    /// read, peak memory, client, times, how it ended) stay in the
    /// migration report (`/api/v1/migration`), `/api/v1/apps` and the
    /// status page's finished applications. Default 24 h.
    #[serde(with = "humantime_serde")]
    pub history_retention: Duration,
    /// The most removed applications kept for `history_retention` (the
    /// oldest go first), so the history's memory stays bounded whatever
    /// the rate of applications: about 300 bytes each. Default 10,000.
    pub history_max_apps: usize,
    /// Quota: the most shuffle data one application may hold (in every
    /// tier, until its shuffles are removed). Beyond it its writes are
    /// refused through the protocol's own channel. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_app_bytes: Option<ByteSize>,
    /// Quota: the most partitions one application may hold. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_app_partitions: Option<u64>,
    /// Quota: the most shuffle data the applications of one user may hold
    /// together (the user a client names: Uniffle's registerShuffle,
    /// Celeborn's user identifier). Checked when a shuffle is set up
    /// (Uniffle's registerShuffle and requireBuffer, Celeborn's CheckQuota).
    /// Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_user_bytes: Option<ByteSize>,
}

impl Default for AppConfig {
    fn default() -> Self {
        AppConfig {
            expiry: Duration::from_secs(60),
            expiry_check_interval: Duration::from_secs(10),
            tombstone_retention: Duration::from_secs(3600),
            history_retention: Duration::from_secs(24 * 3600),
            history_max_apps: 10_000,
            max_app_bytes: None,
            max_app_partitions: None,
            max_user_bytes: None,
        }
    }
}

/// What survives a restart: committed partitions are recorded in a
/// manifest and served again after a restart; everything else found in the
/// data dirs and the cold prefix is removed.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecoveryConfig {
    /// Record committed partitions (Celeborn's CommitFiles, Uniffle's
    /// reportShuffleResult and finishShuffle) and recover them at start. On
    /// by default. Off, a restart starts empty: the data dirs and the cold
    /// prefix are still swept, so nothing is left behind.
    pub enabled: bool,
    /// The manifest file. Default `<first disks.dirs entry>/.switchyard/manifest.redb`
    /// (a name no application directory can take). With no disk and no
    /// path, nothing is recorded (a cold-only store starts empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// Files and cold objects that no recovered partition owns (data that
    /// was never committed, an application removed while the node was down)
    /// are removed this long after start, so that recovery and the first
    /// requests do not wait for the deletes. Only what existed before the
    /// start is touched. Default 30 s.
    #[serde(with = "humantime_serde")]
    pub orphan_grace: Duration,
    /// Memory the manifest's reader and writer keep of its pages. redb's own
    /// default, 1 GiB, would let a manifest of a million partitions (some
    /// 300 MB) sit whole in the process after a start or a busy hour: the
    /// manifest is read once at start and written at commits, so a small
    /// cache costs little. Default 8 MiB, at least 1 MiB.
    pub cache_size: ByteSize,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        RecoveryConfig {
            enabled: true,
            path: None,
            orphan_grace: Duration::from_secs(30),
            cache_size: ByteSize::mib(8),
        }
    }
}

impl RecoveryConfig {
    /// Where the manifest lives, if recovery is on and it has a place.
    pub fn manifest_path(&self, disks: &DiskConfig) -> Option<PathBuf> {
        if !self.enabled {
            return None;
        }
        self.path
            .clone()
            .or_else(|| crate::data_dir::default_manifest_path(&disks.dirs))
    }
}

/// Why a store configuration is refused. Each text names the keys
/// (relative to `[storage]`) and what they must be.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A value outside what its key takes.
    #[error("{key} must {rule}")]
    Invalid {
        key: &'static str,
        rule: &'static str,
    },
    #[error("memory watermarks need 0 < low_watermark < high_watermark <= 1")]
    Watermarks,
    #[error("configure at least one disks.dirs entry or a cold tier")]
    NowhereToStore,
    /// Two keys set one without the other.
    #[error("{0} and {1} go together")]
    Together(&'static str, &'static str),
    #[error("cold.name_node must be an hdfs:// address, not {0:?}")]
    NameNode(String),
}

fn invalid(key: &'static str, rule: &'static str) -> ConfigError {
    ConfigError::Invalid { key, rule }
}

impl StoreConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let m = &self.memory;
        if m.capacity.as_u64() == 0 {
            return Err(invalid("memory.capacity", "be > 0"));
        }
        if m.network
            .is_some_and(|n| n.as_u64() < 1 << 20 || n >= m.capacity)
        {
            return Err(invalid(
                "memory.network",
                "be at least 1 MiB and less than memory.capacity",
            ));
        }
        if m.read_capacity.as_u64() < 1024 {
            return Err(invalid("memory.read_capacity", "be at least 1 KiB"));
        }
        if !(0.0 < m.low_watermark && m.low_watermark < m.high_watermark && m.high_watermark <= 1.0)
        {
            return Err(ConfigError::Watermarks);
        }
        if !(m.fair_share_from > 0.0 && m.fair_share_from <= 1.0) {
            return Err(invalid("memory.fair_share_from", "be in (0, 1]"));
        }
        if m.user_weights
            .values()
            .any(|w| !(*w > 0.0 && w.is_finite()))
        {
            return Err(invalid("memory.user_weights", "be finite numbers > 0"));
        }
        let d = &self.disks;
        if d.dirs.is_empty() && self.cold.is_none() {
            return Err(ConfigError::NowhereToStore);
        }
        if d.capacity.is_some_and(|c| c.as_u64() == 0) {
            return Err(invalid("disks.capacity", "be > 0 when set"));
        }
        if d.write_concurrency == 0 || d.read_concurrency == 0 {
            return Err(invalid(
                "disks.write_concurrency and disks.read_concurrency",
                "be > 0",
            ));
        }
        if d.io_timeout.is_zero() {
            return Err(invalid("disks.io_timeout", "be > 0"));
        }
        if self.commit_timeout.is_zero() {
            return Err(invalid("commit_timeout", "be > 0"));
        }
        if let Some(c) = &self.cold {
            c.validate()?;
        }
        Ok(())
    }
}

impl ColdConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.write_concurrency == 0
            || self.max_requests == 0
            || self.upload_part_concurrency == 0
        {
            return Err(invalid(
                "cold.write_concurrency, cold.max_requests and cold.upload_part_concurrency",
                "be > 0",
            ));
        }
        if self.upload_part_size.as_u64() < 1024 * 1024 {
            return Err(invalid("cold.upload_part_size", "be at least 1 MiB"));
        }
        if self.io_timeout.is_zero() {
            return Err(invalid("cold.io_timeout", "be > 0"));
        }
        if self.read_cache.as_u64() > 0 && self.readahead.as_u64() < 4096 {
            return Err(invalid(
                "cold.readahead",
                "be at least 4 KiB while cold.read_cache is on",
            ));
        }
        match &self.backend {
            ColdBackend::Fs { .. } => {}
            ColdBackend::S3 {
                bucket,
                access_key_id,
                secret_access_key,
                ..
            } => {
                if bucket.is_empty() {
                    return Err(invalid("cold.bucket", "not be empty"));
                }
                if access_key_id.is_some() != secret_access_key.is_some() {
                    return Err(ConfigError::Together(
                        "cold.access_key_id",
                        "cold.secret_access_key",
                    ));
                }
            }
            ColdBackend::Hdfs { name_node, .. } => {
                if !name_node.starts_with("hdfs://") {
                    return Err(ConfigError::NameNode(name_node.clone()));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cold(text: &str) -> Result<ColdConfig, String> {
        let c: ColdConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }

    #[test]
    fn s3_and_hdfs_parse_with_defaults() {
        let c = cold(
            r#"
            service = "s3"
            bucket = "shuffle"
            endpoint = "http://127.0.0.1:9000"
            access_key_id = "ak"
            secret_access_key = "sk"
            read_cache = "1 GiB"
            "#,
        )
        .unwrap();
        match &c.backend {
            ColdBackend::S3 {
                bucket,
                endpoint,
                region,
                access_key_id,
                secret_access_key,
                path_style,
            } => {
                assert_eq!(bucket, "shuffle");
                assert_eq!(endpoint.as_deref(), Some("http://127.0.0.1:9000"));
                assert_eq!(region, "us-east-1");
                assert_eq!(access_key_id.as_deref(), Some("ak"));
                assert_eq!(secret_access_key.as_ref().unwrap().expose(), "sk");
                assert!(*path_style);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(c.read_cache, ByteSize::gib(1));
        assert_eq!(c.readahead, ByteSize::mib(4));
        assert_eq!(c.upload_part_size, ByteSize::mib(8));
        assert!(!format!("{c:?}").contains("\"sk\""), "secret printed");

        let c = cold("service = \"hdfs\"\nname_node = \"hdfs://nn:9000\"").unwrap();
        match &c.backend {
            ColdBackend::Hdfs { name_node, root } => {
                assert_eq!((name_node.as_str(), root.as_str()), ("hdfs://nn:9000", "/"))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(c.backend.service(), "hdfs");
    }

    #[test]
    fn bad_cold_settings_are_rejected() {
        for (text, what) in [
            ("service = \"s3\"", "missing field `bucket`"),
            (
                "service = \"s3\"\nbucket = \"b\"\nname_node = \"x\"",
                "unknown field",
            ),
            ("service = \"hdfs\"\nname_node = \"nn:9000\"", "hdfs://"),
            (
                "service = \"s3\"\nbucket = \"b\"\naccess_key_id = \"ak\"",
                "go together",
            ),
            ("service = \"gcs\"\nbucket = \"b\"", "unknown variant"),
            (
                "service = \"fs\"\nroot = \"/x\"\nupload_part_size = \"4 KiB\"",
                "upload_part_size",
            ),
            (
                "service = \"fs\"\nroot = \"/x\"\nmax_requests = 0",
                "max_requests",
            ),
            (
                "service = \"fs\"\nroot = \"/x\"\nreadahead = 0",
                "readahead",
            ),
        ] {
            let err = cold(text).unwrap_err();
            assert!(err.contains(what), "{text:?}: {err}");
        }
        cold("service = \"fs\"\nroot = \"/x\"\nread_cache = 0\nreadahead = 0").unwrap();
    }

    /// The S3 and HDFS examples in config/switchyard.toml (indented comment
    /// blocks under `[storage.cold]`) parse, and name only real keys.
    #[test]
    fn documented_backend_examples_parse() {
        let doc = include_str!("../../config/switchyard.toml");
        let mut blocks: Vec<String> = Vec::new();
        let mut current = String::new();
        for line in doc.lines() {
            match line.strip_prefix("#   ") {
                Some(rest) if !rest.starts_with('#') => {
                    current.push_str(rest);
                    current.push('\n');
                }
                Some(_) => {}
                None if !current.is_empty() => blocks.push(std::mem::take(&mut current)),
                None => {}
            }
        }
        blocks.retain(|b| b.starts_with("service = "));
        let services: Vec<&str> = blocks
            .iter()
            .map(|b| {
                cold(b)
                    .unwrap_or_else(|e| panic!("{b}: {e}"))
                    .backend
                    .service()
            })
            .collect();
        assert_eq!(services, ["s3", "hdfs"]);
    }
}
