//! Which upstream key becomes which Switchyard key, and why the others do
//! not. One table per input file; upstream's key names, defaults and units
//! are from Celeborn's `CelebornConf.scala` and `docs/configuration/*.md`,
//! and Uniffle's `ShuffleServerConf.java`, `CoordinatorConf.java`,
//! `RssBaseConf.java` and `docs/server_guide.md`.
//!
//! A rule matches a key exactly, or by prefix (`prefix: true`); an exact
//! rule wins over any prefix, a longer prefix over a shorter one. Keys that
//! match nothing are reported as unknown.

/// Why a key was not mapped. Shown in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// Switchyard has no such setting.
    NoCounterpart,
    /// Switchyard does the same thing another way (or from another key).
    Handled,
    /// It configures the client, or a cluster of nodes, not one node.
    ClientOrCluster,
    /// JVM, Netty or thread-pool tuning with no meaning outside the JVM.
    JvmTuning,
    /// The importer does not know the key.
    Unknown,
}

impl Why {
    pub fn label(self) -> &'static str {
        match self {
            Why::NoCounterpart => "no counterpart in Switchyard",
            Why::Handled => "handled differently",
            Why::ClientOrCluster => "belongs to the client or to clustering",
            Why::JvmTuning => "JVM/Netty-only tuning",
            Why::Unknown => "unknown key",
        }
    }
}

/// How a mapped value is converted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conv {
    /// A port: the listen address keeps its default host, takes this port.
    Listen,
    /// A size that must be above zero.
    Size,
    /// A size where zero is meaningful (a reserve of nothing).
    SizeOrZero,
    /// A Uniffle capacity where a negative number means "derived from the
    /// JVM heap or the disk"; the text says what Switchyard does instead.
    SizeOrDerived(&'static str),
    /// A positive duration.
    Duration,
    /// A percentage that becomes a fraction.
    Percent,
    /// A positive whole number.
    Count,
    /// `true` / `false`.
    Bool,
    /// A comma list of directories (at least one).
    Dirs,
    /// A comma list of strings (possibly empty).
    List,
}

/// Conversions that look at the value's structure or at other keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    /// `celeborn.worker.storage.dirs`: `dir[:capacity=][:disktype=][:flushthread=],...`
    CelebornDirs,
    /// `celeborn.storage.hdfs.dir`: an `hdfs://` URI, the cold tier.
    CelebornHdfsDir,
    /// `celeborn.storage.availableTypes`: HDFS alone means no local disks.
    CelebornTypes,
    /// `rss.server.netty.port`: -1 is Uniffle's "no Netty server".
    UniffleNettyPort,
    /// `rss.coordinator.remote.storage.path`: the cold tier when one hdfs:// path.
    UniffleRemoteStorage,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Map(&'static str, Conv),
    Special(Special),
    Ignore(Why, &'static str),
}

#[derive(Clone, Copy, Debug)]
pub struct Rule {
    pub key: &'static str,
    pub prefix: bool,
    pub action: Action,
}

const fn map(key: &'static str, target: &'static str, conv: Conv) -> Rule {
    Rule {
        key,
        prefix: false,
        action: Action::Map(target, conv),
    }
}

const fn special(key: &'static str, s: Special) -> Rule {
    Rule {
        key,
        prefix: false,
        action: Action::Special(s),
    }
}

const fn ignore(key: &'static str, why: Why, detail: &'static str) -> Rule {
    Rule {
        key,
        prefix: false,
        action: Action::Ignore(why, detail),
    }
}

const fn ignore_prefix(key: &'static str, why: Why, detail: &'static str) -> Rule {
    Rule {
        key,
        prefix: true,
        action: Action::Ignore(why, detail),
    }
}

use Conv::*;
use Why::*;

const MEMORY_RATIO: &str = "a fraction of the JVM's direct (off-heap) memory; Switchyard's one \
    budget is storage.memory.capacity, in bytes: set it to what the worker had \
    (CELEBORN_WORKER_OFFHEAP_MEMORY)";
const NETTY: &str = "Netty transport tuning (threads, buffers, connections per peer, \
    timeouts); Switchyard's connections are bounded by [celeborn.connections]";
const SINGLE_NODE: &str = "several Celeborn workers under one Master; Switchyard's nodes join \
    a fleet through [cluster] (docs/cluster.md), and every coordinator's Master places \
    partitions on every live worker, least loaded first";
const FLEET_COORDINATORS: &str = "Master high availability (Ratis); Switchyard's coordinators \
    are equals that share what drivers tell them without consensus: list every one in \
    [cluster] coordinators, and the clients' master endpoints (docs/cluster.md)";
const QUOTAS: &str = "Switchyard's quotas are storage.apps.max_app_bytes, max_app_partitions \
    and max_user_bytes (docs/security.md#quotas): set them by hand";
const ADMIN_HTTP: &str = "Switchyard's admin HTTP (admin.listen, 127.0.0.1:19990) serves \
    /metrics, health and status for every role; the upstream REST APIs are on [admin.vendor]'s \
    listeners (docs/vendor-apis.md)";

/// `celeborn-defaults.conf`: the Master's and the Worker's settings.
pub const CELEBORN: &[Rule] = &[
    map("celeborn.master.port", "celeborn.master_listen", Listen),
    map("celeborn.worker.rpc.port", "celeborn.worker_rpc_listen", Listen),
    map("celeborn.worker.push.port", "celeborn.worker_push_listen", Listen),
    map("celeborn.worker.fetch.port", "celeborn.worker_fetch_listen", Listen),
    map(
        "celeborn.worker.replicate.port",
        "celeborn.worker_replicate_listen",
        Listen,
    ),
    special("celeborn.worker.storage.dirs", Special::CelebornDirs),
    map(
        "celeborn.worker.storage.disk.reserve.size",
        "storage.disks.min_free",
        SizeOrZero,
    ),
    // The pre-0.3 name, an alternative upstream: the current name wins.
    map(
        "celeborn.worker.disk.reserve.size",
        "storage.disks.min_free",
        SizeOrZero,
    ),
    map("celeborn.shuffle.chunk.size", "celeborn.chunk_size", Size),
    map(
        "celeborn.master.heartbeat.application.timeout",
        "celeborn.app_timeout",
        Duration,
    ),
    map(
        "celeborn.application.heartbeat.timeout",
        "celeborn.app_timeout",
        Duration,
    ),
    map(
        "celeborn.worker.commitFiles.timeout",
        "storage.commit_timeout",
        Duration,
    ),
    map(
        "celeborn.worker.shuffle.commit.timeout",
        "storage.commit_timeout",
        Duration,
    ),
    map("celeborn.worker.commitFiles.fsync", "storage.disks.sync", Bool),
    map("celeborn.auth.enabled", "celeborn.auth_enabled", Bool),
    map(
        "celeborn.worker.monitor.disk.check.timeout",
        "storage.disks.io_timeout",
        Duration,
    ),
    map(
        "celeborn.worker.disk.check.timeout",
        "storage.disks.io_timeout",
        Duration,
    ),
    map(
        "celeborn.worker.monitor.disk.check.interval",
        "storage.disks.health_check_interval",
        Duration,
    ),
    map(
        "celeborn.worker.monitor.disk.checkInterval",
        "storage.disks.health_check_interval",
        Duration,
    ),
    special("celeborn.storage.hdfs.dir", Special::CelebornHdfsDir),
    special("celeborn.storage.availableTypes", Special::CelebornTypes),
    special("celeborn.storage.activeTypes", Special::CelebornTypes),
    // Exact keys ignored.
    ignore(
        "celeborn.master.endpoints",
        ClientOrCluster,
        "where clients and workers find the Master: point the clients' \
         spark.celeborn.master.endpoints at this node's celeborn.master_listen (port 9097 by default)",
    ),
    ignore(
        "celeborn.master.internal.endpoints",
        ClientOrCluster,
        SINGLE_NODE,
    ),
    ignore(
        "celeborn.master.host",
        Handled,
        "the Master's bind host: imported listen addresses keep their default host \
         127.0.0.1; set node.host to this node's IP (or write the listen addresses)",
    ),
    ignore(
        "celeborn.worker.flusher.buffer.size",
        Handled,
        "Celeborn writes each partition through a flush buffer of this size; Switchyard \
         buffers partitions in the shared memory budget and spills them by watermark and \
         storage.memory.single_buffer_threshold, so it has no per-partition write buffer",
    ),
    ignore(
        "celeborn.worker.storage.disk.reserve.ratio",
        Handled,
        "Switchyard's reserve is absolute: storage.disks.min_free (from \
         celeborn.worker.storage.disk.reserve.size)",
    ),
    ignore(
        "celeborn.worker.storage.workingDir",
        Handled,
        "Switchyard writes in each data directory itself, not in a working subdirectory; \
         Celeborn's data under <dir>/celeborn-worker/shuffle_data is left alone",
    ),
    ignore(
        "celeborn.worker.monitor.disk.enabled",
        Handled,
        "disks are always watched: I/O errors, hung calls (storage.disks.io_timeout) and \
         free space (storage.disks.min_free)",
    ),
    ignore(
        "celeborn.worker.monitor.disk.checklist",
        Handled,
        "disks are always watched: I/O errors, hung calls (storage.disks.io_timeout) and \
         free space (storage.disks.min_free)",
    ),
    ignore(
        "celeborn.push.replicate.enabled",
        ClientOrCluster,
        "replication is the client's choice (spark.celeborn.client.push.replicate.enabled); \
         a fleet's workers forward pushes to a replica on another node (docs/cluster.md): \
         nothing to set on the server",
    ),
    ignore(
        "celeborn.storage.s3.dir",
        Handled,
        "write [storage.cold] with service = \"s3\" by hand (bucket, endpoint, region, credentials)",
    ),
    ignore(
        "celeborn.storage.oss.dir",
        NoCounterpart,
        "Switchyard's cold tier is fs, S3 or HDFS",
    ),
    ignore(
        "celeborn.master.heartbeat.worker.timeout",
        ClientOrCluster,
        SINGLE_NODE,
    ),
    ignore("celeborn.worker.register.timeout", ClientOrCluster, SINGLE_NODE),
    ignore(
        "celeborn.worker.commitFiles.threads",
        JvmTuning,
        "a JVM thread pool; Switchyard's commits wait on its flushes",
    ),
    ignore(
        "celeborn.worker.closeIdleConnections",
        Handled,
        "idle connections are always closed after [celeborn.connections] idle_timeout",
    ),
    ignore(
        "celeborn.worker.activeConnection.max",
        Handled,
        "connections are capped by [celeborn.connections] max_connections",
    ),
    ignore(
        "celeborn.shuffle.io.maxChunksBeingTransferred",
        Handled,
        "reply bytes in flight are bounded by [celeborn.connections] max_reply_bytes",
    ),
    ignore(
        "celeborn.port.maxRetries",
        NoCounterpart,
        "Switchyard binds the configured port or fails",
    ),
    ignore(
        "celeborn.cluster.name",
        ClientOrCluster,
        "a fleet is the nodes sharing [cluster] coordinators and secret (docs/cluster.md)",
    ),
    ignore("celeborn.logConf.enabled", NoCounterpart, "check-config prints the effective configuration"),
    // Prefixes.
    ignore_prefix(
        "celeborn.client.",
        ClientOrCluster,
        "a client setting: it belongs in the job's spark.celeborn.client.* configuration",
    ),
    ignore_prefix("celeborn.master.ha.", ClientOrCluster, FLEET_COORDINATORS),
    ignore_prefix("celeborn.ha.", ClientOrCluster, FLEET_COORDINATORS),
    ignore_prefix("celeborn.master.slot.assign.", ClientOrCluster, SINGLE_NODE),
    ignore_prefix("celeborn.slots.", ClientOrCluster, SINGLE_NODE),
    ignore_prefix(
        "celeborn.master.estimatedPartitionSize.",
        ClientOrCluster,
        SINGLE_NODE,
    ),
    ignore_prefix("celeborn.master.excludeWorker.", ClientOrCluster, SINGLE_NODE),
    ignore_prefix(
        "celeborn.master.userResourceConsumption.",
        NoCounterpart,
        "per-user accounting; the migration report (/api/v1/migration) counts per application",
    ),
    ignore_prefix(
        "celeborn.worker.flusher.",
        Handled,
        "flush threads and buffers per disk type; Switchyard has one \
         storage.disks.write_concurrency for every disk (the flushthread= of \
         celeborn.worker.storage.dirs maps to it) and storage.cold.write_concurrency for the cold tier",
    ),
    ignore_prefix("celeborn.worker.directMemoryRatio", JvmTuning, MEMORY_RATIO),
    ignore_prefix("celeborn.worker.pinnedMemoryRatio", JvmTuning, MEMORY_RATIO),
    ignore_prefix(
        "celeborn.worker.partitionSorter.directMemoryRatio",
        JvmTuning,
        MEMORY_RATIO,
    ),
    ignore_prefix("celeborn.worker.memoryFileStorage.", JvmTuning, MEMORY_RATIO),
    ignore_prefix(
        "celeborn.worker.monitor.memory.",
        JvmTuning,
        "the JVM's direct-memory tracker; Switchyard accounts its budget exactly",
    ),
    ignore_prefix(
        "celeborn.worker.monitor.pinnedMemory.",
        JvmTuning,
        "the JVM's direct-memory tracker; Switchyard accounts its budget exactly",
    ),
    ignore_prefix(
        "celeborn.worker.readBuffer",
        JvmTuning,
        "the JVM's read buffers; Switchyard's reads are bounded by storage.memory.read_capacity",
    ),
    ignore_prefix(
        "celeborn.worker.partition.initial.readBuffers",
        JvmTuning,
        "the JVM's read buffers; Switchyard's reads are bounded by storage.memory.read_capacity",
    ),
    ignore_prefix("celeborn.worker.monitor.disk.", Handled, "disks are always watched: I/O errors, hung calls (storage.disks.io_timeout) and free space (storage.disks.min_free)"),
    ignore_prefix("celeborn.rpc.", JvmTuning, NETTY),
    ignore_prefix("celeborn.rpc_app.", JvmTuning, NETTY),
    ignore_prefix("celeborn.rpc_service.", JvmTuning, NETTY),
    ignore_prefix("celeborn.push.", JvmTuning, NETTY),
    ignore_prefix("celeborn.fetch.", JvmTuning, NETTY),
    ignore_prefix("celeborn.replicate.", JvmTuning, NETTY),
    ignore_prefix("celeborn.data.", JvmTuning, NETTY),
    ignore_prefix("celeborn.network.", JvmTuning, NETTY),
    ignore_prefix("celeborn.io.", JvmTuning, NETTY),
    ignore_prefix("celeborn.master.rpc.", JvmTuning, NETTY),
    ignore_prefix("celeborn.worker.rpc.", JvmTuning, NETTY),
    ignore_prefix("celeborn.worker.push.", JvmTuning, NETTY),
    ignore_prefix("celeborn.worker.fetch.", JvmTuning, NETTY),
    ignore_prefix("celeborn.serializer.", JvmTuning, "Java deserialization filters"),
    ignore_prefix(
        "celeborn.worker.jvmQuake.",
        JvmTuning,
        "a JVM garbage-collection watchdog",
    ),
    ignore_prefix("celeborn.worker.jvmProfiler.", JvmTuning, "a JVM profiler"),
    ignore_prefix(
        "celeborn.worker.replicate.",
        JvmTuning,
        "Netty tuning of the replicate port; a fleet's workers forward replicated pushes on \
         celeborn.worker_replicate_listen (docs/cluster.md)",
    ),
    ignore_prefix(
        "celeborn.metrics.",
        NoCounterpart,
        "metrics are always on: admin.listen serves /metrics",
    ),
    ignore_prefix(
        "celeborn.master.metrics.",
        NoCounterpart,
        "metrics are always on: admin.listen serves /metrics",
    ),
    ignore_prefix(
        "celeborn.worker.metrics.",
        NoCounterpart,
        "metrics are always on: admin.listen serves /metrics",
    ),
    map(
        "celeborn.master.http.port",
        "admin.vendor.celeborn_master_listen",
        Listen,
    ),
    map(
        "celeborn.worker.http.port",
        "admin.vendor.celeborn_worker_listen",
        Listen,
    ),
    ignore_prefix("celeborn.master.http.", NoCounterpart, ADMIN_HTTP),
    ignore_prefix("celeborn.worker.http.", NoCounterpart, ADMIN_HTTP),
    ignore_prefix(
        "celeborn.worker.graceful.shutdown.",
        Handled,
        "on SIGTERM Switchyard flushes every buffered block and exits; there is no \
         recovery database to restart from",
    ),
    ignore_prefix("celeborn.worker.decommission.", ClientOrCluster, "decommissioning arrives with clustering"),
    ignore_prefix(
        "celeborn.worker.sortPartition.",
        NoCounterpart,
        "Switchyard does not sort partition files; reads use its own index",
    ),
    ignore_prefix(
        "celeborn.worker.congestionControl.",
        Handled,
        "backpressure comes from the shared memory budget: pushes wait for memory, then \
         connections stop being read ([celeborn.connections])",
    ),
    ignore_prefix(
        "celeborn.worker.shuffle.partitionSplit.",
        NoCounterpart,
        "no such setting in Switchyard",
    ),
    ignore_prefix("celeborn.shuffle.partitionSplit.", NoCounterpart, "no such setting in Switchyard"),
    ignore_prefix("celeborn.worker.writer.", JvmTuning, "file-writer retries and thread pools"),
    ignore_prefix("celeborn.worker.storage.checkDirsEmpty.", NoCounterpart, "no such setting in Switchyard"),
    ignore_prefix("celeborn.worker.storage.expireDirs.", Handled, "a removed application's data is deleted at once"),
    ignore_prefix("celeborn.worker.storage.baseDir.", Handled, "give the directories in storage.disks.dirs"),
    ignore_prefix("celeborn.worker.storage.storagePolicy.", Handled, "Switchyard's tiers are memory, then storage.disks, then [storage.cold]"),
    ignore_prefix("celeborn.quota.", Handled, QUOTAS),
    ignore_prefix("celeborn.dynamicConfig.", NoCounterpart, "no dynamic configuration in Switchyard"),
    ignore_prefix(
        "celeborn.auth.",
        Handled,
        "Celeborn's authentication is on with celeborn.auth_enabled = true (docs/security.md); \
         the applications' secrets come from their drivers",
    ),
    ignore_prefix(
        "celeborn.ssl.",
        Handled,
        "Switchyard's TLS takes PEM files, [celeborn.tls] cert and key (docs/security.md): \
         export the keystore's certificate and key (keytool, then openssl)",
    ),
    ignore_prefix("celeborn.internal.port.", NoCounterpart, "no internal ports in Switchyard"),
    ignore_prefix("celeborn.tags.", NoCounterpart, "worker tags have no counterpart"),
    ignore_prefix(
        "celeborn.hadoop.",
        Handled,
        "Hadoop client settings: Switchyard's HDFS client (hdfs-native) reads HADOOP_CONF_DIR",
    ),
    ignore_prefix("celeborn.storage.hdfs.kerberos.", NoCounterpart, "no Kerberos settings in Switchyard"),
    ignore_prefix("celeborn.storage.s3.", Handled, "write [storage.cold] with service = \"s3\" by hand (bucket, endpoint, region, credentials)"),
    ignore_prefix("celeborn.storage.oss.", NoCounterpart, "Switchyard's cold tier is fs, S3 or HDFS"),
    ignore_prefix("celeborn.worker.clean.", JvmTuning, "a JVM thread pool"),
    ignore_prefix("celeborn.worker.disk.clean.", JvmTuning, "a JVM thread pool"),
    ignore_prefix("celeborn.worker.bufferStream.", JvmTuning, "a JVM thread pool"),
    ignore_prefix("celeborn.columnarShuffle.", ClientOrCluster, "a client setting"),
    ignore_prefix("celeborn.identity.", NoCounterpart, "no user identities in Switchyard"),
];

const FLUSH_POOL: &str = "a JVM thread pool shared by every disk; Switchyard's flushes are \
    bounded per disk by storage.disks.write_concurrency (2) and storage.cold.write_concurrency";
const UNIFFLE_HEARTBEAT: &str = "the shuffle server's heartbeat to its coordinators; in \
    Switchyard the shuffle server registers with the coordinator in the same process";

/// `server.conf`: a Uniffle shuffle server.
pub const UNIFFLE: &[Rule] = &[
    map("rss.rpc.server.port", "uniffle.server_grpc_listen", Listen),
    special("rss.server.netty.port", Special::UniffleNettyPort),
    map("rss.storage.basePath", "storage.disks.dirs", Dirs),
    map(
        "rss.server.buffer.capacity",
        "storage.memory.capacity",
        SizeOrDerived(
            "negative: Uniffle takes JVM heap x rss.server.buffer.capacity.ratio; Switchyard \
             needs the budget in bytes and keeps its default (1 GiB) until you set \
             storage.memory.capacity",
        ),
    ),
    map(
        "rss.server.read.buffer.capacity",
        "storage.memory.read_capacity",
        SizeOrDerived(
            "negative: Uniffle takes JVM heap x rss.server.read.buffer.capacity.ratio; \
             Switchyard keeps storage.memory.read_capacity at its default (256 MiB)",
        ),
    ),
    map(
        "rss.server.memory.shuffle.highWaterMark.percentage",
        "storage.memory.high_watermark",
        Percent,
    ),
    map(
        "rss.server.memory.shuffle.lowWaterMark.percentage",
        "storage.memory.low_watermark",
        Percent,
    ),
    map(
        "rss.server.single.buffer.flush.threshold",
        "storage.memory.single_buffer_threshold",
        Size,
    ),
    map(
        "rss.server.app.expired.withoutHeartbeat",
        "storage.apps.expiry",
        Duration,
    ),
    map(
        "rss.server.disk.capacity",
        "storage.disks.capacity",
        SizeOrDerived(
            "negative: Uniffle takes the disk's size x rss.server.disk.capacity.ratio; \
             Switchyard sets no capacity and stops a disk at storage.disks.min_free",
        ),
    ),
    map(
        "rss.server.huge-partition.size.threshold",
        "storage.cold.huge_partition_threshold",
        Size,
    ),
    map(
        "rss.server.huge-partition.split.limit",
        "uniffle.huge_partition_split_limit",
        Size,
    ),
    map("rss.server.commit.timeout", "storage.commit_timeout", Duration),
    map("rss.server.preAllocation.expired", "uniffle.ticket_timeout", Duration),
    map("rss.server.tags", "uniffle.tags", List),
    // Exact keys ignored.
    ignore(
        "rss.coordinator.quorum",
        ClientOrCluster,
        "the coordinators this shuffle server reports to; Switchyard's shuffle server \
         registers with its own coordinator in the same process. Clients keep \
         spark.rss.coordinator.quorum, pointed at this node's uniffle.coordinator_listen",
    ),
    ignore(
        "rss.storage.type",
        Handled,
        "Switchyard's tiers are memory, storage.disks.dirs and the optional [storage.cold] \
         (the HDFS of MEMORY_LOCALFILE_HDFS maps from the coordinator's \
         rss.coordinator.remote.storage.path); clients are told MEMORY_LOCALFILE \
         ([uniffle.client_conf]) and read every tier through this node",
    ),
    ignore(
        "rss.server.buffer.capacity.ratio",
        JvmTuning,
        "a fraction of the JVM heap; Switchyard's budget is storage.memory.capacity, in bytes",
    ),
    ignore(
        "rss.server.read.buffer.capacity.ratio",
        JvmTuning,
        "a fraction of the JVM heap; Switchyard's read budget is storage.memory.read_capacity, in bytes",
    ),
    ignore(
        "rss.server.disk.capacity.ratio",
        Handled,
        "Switchyard's disk limits are absolute: storage.disks.capacity and storage.disks.min_free",
    ),
    ignore(
        "rss.server.high.watermark.write",
        Handled,
        "disk-usage watermarks: a Switchyard disk stops taking writes at storage.disks.min_free \
         (or storage.disks.capacity) and resumes storage.disks.resume_margin later",
    ),
    ignore(
        "rss.server.low.watermark.write",
        Handled,
        "disk-usage watermarks: a Switchyard disk stops taking writes at storage.disks.min_free \
         (or storage.disks.capacity) and resumes storage.disks.resume_margin later",
    ),
    ignore(
        "rss.server.single.buffer.flush.enabled",
        Handled,
        "Switchyard always spills a partition that buffers more than \
         storage.memory.single_buffer_threshold",
    ),
    ignore(
        "rss.server.flush.cold.storage.threshold.size",
        Handled,
        "Uniffle sends flushes larger than this to HDFS; Switchyard sends a partition's \
         spills to [storage.cold] once it holds storage.cold.huge_partition_threshold \
         (from rss.server.huge-partition.size.threshold), or when every disk is full",
    ),
    ignore(
        "rss.server.huge-partition.memory.limit.ratio",
        NoCounterpart,
        "huge partitions share the memory budget like any other",
    ),
    ignore(
        "rss.server.netty.handler.idle.timeout",
        NoCounterpart,
        "Uniffle declares this key but its server never reads it",
    ),
    ignore("rss.server.heartbeat.interval", ClientOrCluster, UNIFFLE_HEARTBEAT),
    ignore("rss.server.heartbeat.delay", ClientOrCluster, UNIFFLE_HEARTBEAT),
    ignore("rss.server.heartbeat.threadNum", ClientOrCluster, UNIFFLE_HEARTBEAT),
    ignore(
        "rss.server.heartbeatReportOnUnregisterEnabled",
        ClientOrCluster,
        UNIFFLE_HEARTBEAT,
    ),
    ignore("rss.server.flush.localfile.threadPool.size", Handled, FLUSH_POOL),
    ignore("rss.server.flush.hadoop.threadPool.size", Handled, FLUSH_POOL),
    ignore("rss.server.flush.threadPool.size", Handled, FLUSH_POOL),
    ignore("rss.server.flush.threadPool.queue.size", JvmTuning, "a JVM thread pool's queue"),
    ignore("rss.server.flush.thread.alive", JvmTuning, "idle time of a JVM thread pool's threads"),
    ignore(
        "rss.server.leak.shuffledata.check.interval",
        Handled,
        "a removed application's data is deleted at once; expiry is storage.apps.expiry",
    ),
    ignore("rss.server.id", Handled, "the node id is node.id (or persisted in the first data directory)"),
    // Prefixes.
    ignore_prefix(
        "rss.server.huge-partition.",
        NoCounterpart,
        "Switchyard does not cap huge partitions; they go to the cold tier, or are split \
         (uniffle.huge_partition_split_limit)",
    ),
    ignore_prefix(
        "rss.server.netty.",
        JvmTuning,
        "Netty server tuning (threads, epoll, backlog, socket buffers); Switchyard's Netty \
         connections are bounded by [uniffle.connections]",
    ),
    ignore_prefix(
        "rss.server.decommission.",
        ClientOrCluster,
        "decommissioning arrives with clustering",
    ),
    ignore_prefix(
        "rss.server.health.",
        Handled,
        "disks are always watched: I/O errors, hung calls, free space; /readyz tells",
    ),
    ignore_prefix(
        "rss.server.hybrid.storage.",
        Handled,
        "Switchyard's tiers are memory, then storage.disks, then [storage.cold]",
    ),
    ignore_prefix(
        "rss.server.multistorage.",
        Handled,
        "Switchyard's tiers are memory, then storage.disks, then [storage.cold]",
    ),
    ignore_prefix(
        "rss.server.hadoop.",
        Handled,
        "Hadoop client settings: Switchyard's HDFS client (hdfs-native) reads HADOOP_CONF_DIR",
    ),
    ignore_prefix("rss.server.merge.", NoCounterpart, "Uniffle's remote merge is not served yet"),
    ignore_prefix(
        "rss.server.max.concurrency.",
        NoCounterpart,
        "Switchyard writes one file per partition and segment",
    ),
    ignore_prefix("rss.server.summary.metric.", JvmTuning, "a JVM thread pool for metrics"),
    ignore_prefix("rss.server.metrics.", NoCounterpart, "metrics are always on: admin.listen serves /metrics"),
    ignore_prefix("rss.server.topN.", NoCounterpart, "metrics are always on: admin.listen serves /metrics"),
    ignore_prefix("rss.server.event.size.threshold.", NoCounterpart, "metrics of flush sizes"),
    ignore_prefix("rss.server.rpc.audit.log.", NoCounterpart, "no audit log in Switchyard"),
    ignore_prefix("rss.server.storage.audit.log.", NoCounterpart, "no audit log in Switchyard"),
    ignore_prefix(
        "rss.server.",
        Unknown,
        "a rss.server.* key this importer does not know: check it by hand",
    ),
];

/// `coordinator.conf`: a Uniffle coordinator.
pub const COORDINATOR: &[Rule] = &[
    map("rss.rpc.server.port", "uniffle.coordinator_listen", Listen),
    map(
        "rss.coordinator.server.heartbeat.timeout",
        "uniffle.node_timeout",
        Duration,
    ),
    map(
        "rss.coordinator.shuffle.nodes.max",
        "uniffle.max_servers_per_shuffle",
        Count,
    ),
    special(
        "rss.coordinator.remote.storage.path",
        Special::UniffleRemoteStorage,
    ),
    ignore(
        "rss.coordinator.app.expired",
        Handled,
        "applications expire once, in the store: storage.apps.expiry (from server.conf's \
         rss.server.app.expired.withoutHeartbeat)",
    ),
    ignore(
        "rss.coordinator.quorum",
        ClientOrCluster,
        "the clients' setting: spark.rss.coordinator.quorum, pointed at this node's \
         uniffle.coordinator_listen",
    ),
    ignore_prefix(
        "rss.coordinator.dynamicClientConf.",
        Handled,
        "the client configuration handed out by fetchClientConf is [uniffle.client_conf]: \
         copy the entries of that file there by hand",
    ),
    ignore_prefix(
        "rss.coordinator.client.",
        Handled,
        "the client configuration handed out by fetchClientConf is [uniffle.client_conf]",
    ),
    ignore_prefix(
        "rss.coordinator.remote.storage.",
        Handled,
        "one cold tier, [storage.cold]: its HDFS settings come from HADOOP_CONF_DIR",
    ),
    ignore_prefix(
        "rss.coordinator.exclude.nodes.",
        Handled,
        "to take a node out of placement, decommission it (switchyard ctl decommission, \
         docs/cluster.md)",
    ),
    ignore_prefix("rss.coordinator.assignment.", ClientOrCluster, SINGLE_NODE),
    ignore_prefix(
        "rss.coordinator.select.partition.",
        ClientOrCluster,
        SINGLE_NODE,
    ),
    ignore_prefix(
        "rss.coordinator.startup-silent-period.",
        ClientOrCluster,
        "waiting for shuffle servers to register; this node's own registers at once",
    ),
    ignore_prefix(
        "rss.coordinator.server.",
        ClientOrCluster,
        "logging of the registered shuffle servers",
    ),
    ignore_prefix(
        "rss.coordinator.access.",
        NoCounterpart,
        "admission checks (cluster load, quotas); Switchyard admits every application",
    ),
    ignore_prefix("rss.coordinator.quota.", Handled, QUOTAS),
    ignore_prefix(
        "rss.coordinator.nodes.",
        JvmTuning,
        "a cache of the coordinator's JVM client",
    ),
    ignore_prefix(
        "rss.coordinator.rpc.",
        NoCounterpart,
        "no audit log in Switchyard",
    ),
    ignore_prefix(
        "rss.coordinator.",
        Unknown,
        "a rss.coordinator.* key this importer does not know: check it by hand",
    ),
];

/// `RssBaseConf`: keys both Uniffle processes read.
pub const UNIFFLE_COMMON: &[Rule] = &[
    map("rss.rpc.message.max.size", "uniffle.max_message_size", Size),
    // Shuffle-server keys (mapped from server.conf) found in coordinator.conf.
    ignore(
        "rss.storage.type",
        Handled,
        "the shuffle server's storage type (server.conf); clients are told \
         MEMORY_LOCALFILE by [uniffle.client_conf]",
    ),
    ignore(
        "rss.storage.basePath",
        Handled,
        "the shuffle server's directories: give server.conf with --uniffle",
    ),
    ignore(
        "rss.rpc.server.type",
        Handled,
        "Switchyard serves gRPC and the Netty data plane (GRPC_NETTY) side by side",
    ),
    ignore("rss.jetty.http.port", NoCounterpart, ADMIN_HTTP),
    ignore(
        "rss.storage.data.replica",
        ClientOrCluster,
        "the client writes its replicas itself (spark.rss.data.replica); a fleet's \
         coordinators give it distinct servers (docs/cluster.md)",
    ),
    ignore(
        "rss.metrics.reporter.class",
        NoCounterpart,
        "metrics are always on: admin.listen serves /metrics",
    ),
    ignore(
        "rss.test.mode.enable",
        NoCounterpart,
        "no test mode in Switchyard",
    ),
    ignore(
        "rss.reconfigure.interval.sec",
        NoCounterpart,
        "Switchyard reads its configuration at start",
    ),
    ignore(
        "rss.port.max.retry",
        NoCounterpart,
        "Switchyard binds the configured port or fails",
    ),
    ignore_prefix(
        "rss.rpc.",
        JvmTuning,
        "gRPC executor and Netty allocator tuning",
    ),
    ignore_prefix("rss.jetty.", NoCounterpart, ADMIN_HTTP),
    ignore_prefix("rss.jvm.", JvmTuning, "JVM metrics"),
    ignore_prefix(
        "rss.metrics.",
        NoCounterpart,
        "metrics are always on: admin.listen serves /metrics",
    ),
    ignore_prefix(
        "rss.security.",
        NoCounterpart,
        "no Kerberos settings in Switchyard",
    ),
    ignore_prefix(
        "rss.random.port.",
        NoCounterpart,
        "Switchyard binds the configured port or fails",
    ),
    ignore_prefix("rss.kryo.", JvmTuning, "Java serialization"),
    ignore_prefix("rss.io.", JvmTuning, "Java serialization"),
    ignore_prefix("rss.http.", NoCounterpart, ADMIN_HTTP),
    ignore_prefix(
        "rss.storage.",
        JvmTuning,
        "write-buffer sizes and writer classes of the JVM's file writers",
    ),
];

/// Every Switchyard key the importer can write, in the order of
/// config/switchyard.toml: the output follows it.
pub const TARGETS: &[&str] = &[
    "storage.commit_timeout",
    "storage.memory.capacity",
    "storage.memory.high_watermark",
    "storage.memory.low_watermark",
    "storage.memory.single_buffer_threshold",
    "storage.memory.read_capacity",
    "storage.disks.dirs",
    "storage.disks.write_concurrency",
    "storage.disks.min_free",
    "storage.disks.capacity",
    "storage.disks.health_check_interval",
    "storage.disks.io_timeout",
    "storage.disks.sync",
    "storage.cold.service",
    "storage.cold.name_node",
    "storage.cold.root",
    "storage.cold.huge_partition_threshold",
    "storage.apps.expiry",
    "uniffle.coordinator_listen",
    "uniffle.server_grpc_listen",
    "uniffle.server_netty_listen",
    "uniffle.tags",
    "uniffle.max_message_size",
    "uniffle.ticket_timeout",
    "uniffle.node_timeout",
    "uniffle.max_servers_per_shuffle",
    "uniffle.huge_partition_split_limit",
    "admin.vendor.celeborn_master_listen",
    "admin.vendor.celeborn_worker_listen",
    "celeborn.master_listen",
    "celeborn.worker_rpc_listen",
    "celeborn.worker_push_listen",
    "celeborn.worker_fetch_listen",
    "celeborn.worker_replicate_listen",
    "celeborn.chunk_size",
    "celeborn.app_timeout",
    "celeborn.auth_enabled",
];

/// The rule for `key` in `tables` (searched in order): the first exact
/// match, else the longest prefix. Returns the rule and a rank (table index
/// and position) that orders the report and the processing, so that a
/// current key is handled before its older alternative.
pub fn find<'a>(tables: &[&'a [Rule]], key: &str) -> Option<(usize, &'a Rule)> {
    let mut rank = 0;
    let mut best_prefix: Option<(usize, &Rule)> = None;
    for table in tables {
        for rule in table.iter() {
            if !rule.prefix && rule.key == key {
                return Some((rank, rule));
            }
            if rule.prefix
                && key.starts_with(rule.key)
                && best_prefix.is_none_or(|(_, b)| rule.key.len() > b.key.len())
            {
                best_prefix = Some((rank, rule));
            }
            rank += 1;
        }
    }
    best_prefix
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<(&'static str, &'static Rule)> {
        let mut v = Vec::new();
        for (name, table) in [
            ("celeborn", CELEBORN),
            ("uniffle", UNIFFLE),
            ("coordinator", COORDINATOR),
            ("common", UNIFFLE_COMMON),
        ] {
            for r in table {
                v.push((name, r));
            }
        }
        v
    }

    #[test]
    fn every_target_is_listed_and_keys_are_unique() {
        for (table, rule) in all() {
            if let Action::Map(target, _) = rule.action {
                assert!(
                    TARGETS.contains(&target),
                    "{table}: {target} not in TARGETS"
                );
            }
        }
        for table in [CELEBORN, UNIFFLE, COORDINATOR, UNIFFLE_COMMON] {
            for (i, a) in table.iter().enumerate() {
                for b in &table[i + 1..] {
                    assert!(!(a.key == b.key && a.prefix == b.prefix), "{} twice", a.key);
                }
            }
        }
    }

    #[test]
    fn exact_beats_prefix_and_longer_prefix_wins() {
        let t: &[&[Rule]] = &[UNIFFLE, UNIFFLE_COMMON];
        let (_, r) = find(t, "rss.server.netty.port").unwrap();
        assert_eq!(r.action, Action::Special(Special::UniffleNettyPort));
        let (_, r) = find(t, "rss.server.netty.worker.thread").unwrap();
        assert!(matches!(r.action, Action::Ignore(Why::JvmTuning, _)));
        let (_, r) = find(t, "rss.server.huge-partition.size.threshold").unwrap();
        assert!(matches!(r.action, Action::Map(_, Conv::Size)));
        let (_, r) = find(t, "rss.server.huge-partition.split.limit").unwrap();
        assert!(matches!(r.action, Action::Map(_, Conv::Size)));
        let (_, r) = find(t, "rss.server.huge-partition.hard.limit").unwrap();
        assert!(matches!(r.action, Action::Ignore(Why::NoCounterpart, _)));
        let (_, r) = find(t, "rss.server.no.such.key").unwrap();
        assert!(matches!(r.action, Action::Ignore(Why::Unknown, _)));
        assert!(find(t, "spark.rss.storage.type").is_none());
        // The common table is searched too, after the server's own.
        let (_, r) = find(t, "rss.rpc.message.max.size").unwrap();
        assert_eq!(
            r.action,
            Action::Map("uniffle.max_message_size", Conv::Size)
        );
        // server.conf's port is the shuffle server's, coordinator.conf's the coordinator's.
        let (_, r) = find(&[COORDINATOR, UNIFFLE_COMMON], "rss.rpc.server.port").unwrap();
        assert_eq!(
            r.action,
            Action::Map("uniffle.coordinator_listen", Conv::Listen)
        );
        let (_, r) = find(&[CELEBORN], "celeborn.worker.rpc.port").unwrap();
        assert_eq!(
            r.action,
            Action::Map("celeborn.worker_rpc_listen", Conv::Listen)
        );
        let (_, r) = find(&[CELEBORN], "celeborn.worker.rpc.io.threads").unwrap();
        assert!(matches!(r.action, Action::Ignore(Why::JvmTuning, _)));
    }

    #[test]
    fn a_current_key_ranks_before_its_old_alternative() {
        let rank = |k| find(&[CELEBORN], k).unwrap().0;
        assert!(
            rank("celeborn.master.heartbeat.application.timeout")
                < rank("celeborn.application.heartbeat.timeout")
        );
        assert!(
            rank("celeborn.worker.storage.disk.reserve.size")
                < rank("celeborn.worker.disk.reserve.size")
        );
    }
}
