//! `switchyard import-config`, run as the built binary on config files
//! written the way upstream's own examples write them, then its output
//! through `switchyard check-config`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;
use common::clear_switchyard_env;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

/// Modelled on Apache Celeborn's docs/deploy.md ("EXAMPLE: single master
/// cluster", celeborn-defaults.conf) and conf/celeborn-defaults.conf.template,
/// with the worker ports, disk reserve, chunk size and the pre-0.3 name of
/// the application heartbeat timeout added.
const CELEBORN_DEFAULTS: &str = "\
# used by client and worker to connect to master
celeborn.master.endpoints clb-master:9097

# used by master to bootstrap
celeborn.master.host clb-master
celeborn.master.port 9097

celeborn.metrics.enabled true
celeborn.worker.flusher.buffer.size 256k

# If Celeborn workers have local disks and HDFS. Following configs should be added.
# Disk type is HDD by defaut.
celeborn.worker.storage.dirs /mnt/disk1:disktype=SSD,/mnt/disk2:disktype=SSD
celeborn.storage.activeTypes HDD,HDFS
celeborn.worker.sortPartition.threads 64
celeborn.worker.commitFiles.timeout 240s
celeborn.worker.commitFiles.threads 128
celeborn.master.slot.assign.policy roundrobin
celeborn.rpc.askTimeout 240s
celeborn.worker.flusher.hdfs.buffer.size 4m
celeborn.storage.hdfs.dir hdfs://namenode:9000/celeborn
celeborn.worker.replicate.fastFail.duration 240s

# If your hosts have disk raid or use lvm, set celeborn.worker.monitor.disk.enabled to false
celeborn.worker.monitor.disk.enabled false

celeborn.rpc.io.mode                             NIO
celeborn.push.io.threads                         8
celeborn.push.replicate.enabled                  true
celeborn.worker.directMemoryRatioToPauseReceive  0.85

celeborn.worker.rpc.port 9100
celeborn.worker.push.port 9101
celeborn.worker.fetch.port 9102
celeborn.worker.replicate.port 9103
celeborn.worker.storage.disk.reserve.size 10gb
celeborn.shuffle.chunk.size 16m
celeborn.application.heartbeat.timeout 10min
";

/// Modelled on Apache Uniffle's docs/server_guide.md (the server.conf of
/// "Deploy", step 3, and "Example of server conf" under Huge Partition
/// Optimization), with the Netty port, the memory watermarks (written as
/// key=value) and conf/server.conf's disk capacity added.
const SERVER_CONF: &str = "\
rss.rpc.server.port 19999
rss.jetty.http.port 19998
rss.rpc.executor.size 2000
# it should be configed the same as in coordinator
rss.storage.type MEMORY_LOCALFILE_HDFS
rss.coordinator.quorum coordinator1:19999,coordinator2:19999
# local storage path for shuffle server
rss.storage.basePath /data1/rssdata,/data2/rssdata
# it's better to config thread num according to local disk num
rss.server.flush.thread.alive 5
rss.server.flush.localfile.threadPool.size 10
rss.server.flush.hadoop.threadPool.size 10
rss.server.buffer.capacity 40g
rss.server.read.buffer.capacity 20g
rss.server.heartbeat.interval 10000
rss.rpc.message.max.size 1073741824
rss.server.preAllocation.expired 120000
rss.server.commit.timeout 600000
rss.server.app.expired.withoutHeartbeat 120000

# For huge partitions
rss.server.flush.cold.storage.threshold.size 128m
rss.server.single.buffer.flush.threshold 129m
rss.server.max.concurrency.of.per-partition.write 20
rss.server.huge-partition.size.threshold 20g
rss.server.huge-partition.memory.limit.ratio 0.2

rss.server.netty.port=17000
rss.server.memory.shuffle.highWaterMark.percentage=80.0
rss.server.memory.shuffle.lowWaterMark.percentage=20.0
rss.server.disk.capacity 1t
";

/// Apache Uniffle's conf/coordinator.conf, as shipped.
const COORDINATOR_CONF: &str = "\
rss.rpc.server.port 19999
rss.jetty.http.port 19998
rss.coordinator.server.heartbeat.timeout 30000
rss.coordinator.app.expired 60000
rss.coordinator.shuffle.nodes.max 13
rss.coordinator.exclude.nodes.file.path file:///xxx
";

fn switchyard(args: &[&str], cwd: &Path) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args).current_dir(cwd).stdin(Stdio::null());
    clear_switchyard_env(&mut cmd);
    cmd.output().expect("run switchyard")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

/// `table.key` of a TOML document.
fn get<'a>(doc: &'a toml::Value, dotted: &str) -> &'a toml::Value {
    dotted
        .split('.')
        .try_fold(doc, |v, k| v.get(k))
        .unwrap_or_else(|| panic!("{dotted} missing in:\n{doc}"))
}

fn s(v: &str) -> toml::Value {
    toml::Value::String(v.into())
}

#[test]
fn upstream_example_files_import_and_pass_check_config() {
    let dir = tempfile::tempdir().unwrap();
    let celeborn = write(dir.path(), "celeborn-defaults.conf", CELEBORN_DEFAULTS);
    let server = write(dir.path(), "server.conf", SERVER_CONF);
    let coordinator = write(dir.path(), "coordinator.conf", COORDINATOR_CONF);
    let out_path = dir.path().join("switchyard.toml");
    let out = switchyard(
        &[
            "import-config",
            "--celeborn",
            celeborn.to_str().unwrap(),
            "--uniffle",
            server.to_str().unwrap(),
            "--uniffle-coordinator",
            coordinator.to_str().unwrap(),
            "-o",
            out_path.to_str().unwrap(),
        ],
        dir.path(),
    );
    let (stdout, report) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{report}");
    assert!(
        stdout.is_empty(),
        "with -o the TOML goes to the file: {stdout}"
    );

    let toml_text = std::fs::read_to_string(&out_path).unwrap();
    let doc: toml::Value = toml::from_str(&toml_text).unwrap();
    for (key, value) in [
        // server.conf: sizes in explicit binary units, ms as durations,
        // percentages as fractions.
        ("storage.memory.capacity", s("40 GiB")),
        ("storage.memory.read_capacity", s("20 GiB")),
        ("storage.memory.high_watermark", toml::Value::Float(0.8)),
        ("storage.memory.low_watermark", toml::Value::Float(0.2)),
        ("storage.memory.single_buffer_threshold", s("129 MiB")),
        ("storage.apps.expiry", s("2m")),
        ("storage.disks.capacity", s("1 TiB")),
        ("storage.commit_timeout", s("10m")),
        ("uniffle.ticket_timeout", s("2m")),
        ("uniffle.max_message_size", s("1 GiB")),
        ("uniffle.server_netty_listen", s("127.0.0.1:17000")),
        // coordinator.conf
        ("uniffle.coordinator_listen", s("127.0.0.1:19999")),
        ("uniffle.node_timeout", s("30s")),
        ("uniffle.max_servers_per_shuffle", toml::Value::Integer(13)),
        // celeborn-defaults.conf
        ("celeborn.master_listen", s("127.0.0.1:9097")),
        ("celeborn.worker_rpc_listen", s("127.0.0.1:9100")),
        ("celeborn.worker_push_listen", s("127.0.0.1:9101")),
        ("celeborn.worker_fetch_listen", s("127.0.0.1:9102")),
        ("celeborn.worker_replicate_listen", s("127.0.0.1:9103")),
        ("celeborn.chunk_size", s("16 MiB")),
        ("celeborn.app_timeout", s("10m")),
        ("storage.disks.min_free", s("10 GiB")),
        ("storage.cold.service", s("hdfs")),
        ("storage.cold.name_node", s("hdfs://namenode:9000")),
        ("storage.cold.root", s("/celeborn")),
        ("storage.cold.huge_partition_threshold", s("20 GiB")),
    ] {
        assert_eq!(get(&doc, key), &value, "{key} in:\n{toml_text}");
    }
    // server.conf comes first: its directories, not Celeborn's.
    assert_eq!(
        get(&doc, "storage.disks.dirs"),
        &toml::Value::Array(vec![s("/data1/rssdata"), s("/data2/rssdata")])
    );
    // The shuffle server's 19999 is the coordinator's here: it keeps 19997.
    assert!(
        get(&doc, "uniffle").get("server_grpc_listen").is_none(),
        "{toml_text}"
    );
    // Only mapped keys: no admin, log or connection limits.
    for absent in ["admin", "log", "node"] {
        assert!(doc.get(absent).is_none(), "{absent} in:\n{toml_text}");
    }
    assert!(get(&doc, "celeborn").get("connections").is_none());
    assert!(
        toml_text
            .contains("# from rss.server.buffer.capacity (server.conf)\ncapacity = \"40 GiB\"\n"),
        "{toml_text}"
    );
    assert!(
        toml_text.contains("# from celeborn.shuffle.chunk.size (celeborn-defaults.conf)\nchunk_size = \"16 MiB\"\n"),
        "{toml_text}"
    );

    // The real check-config takes it, in a clean working directory.
    let cwd = tempfile::tempdir().unwrap();
    let check = switchyard(&["check-config", out_path.to_str().unwrap()], cwd.path());
    assert!(check.status.success(), "{}", text(&check.stderr));
    let effective = text(&check.stdout);
    assert!(effective.contains("capacity = \"40.0 GiB\""), "{effective}");
    assert!(
        effective.contains("server_grpc_listen = \"127.0.0.1:19997\""),
        "{effective}"
    );

    // The report: mapped, conflicts with the precedence, ignored with reasons.
    for line in [
        "precedence: when two files set one Switchyard key differently, the first of server.conf, then coordinator.conf, then celeborn-defaults.conf is kept",
        "rss.server.buffer.capacity = 40g (server.conf line 13) -> storage.memory.capacity = \"40 GiB\"",
        "rss.server.memory.shuffle.highWaterMark.percentage = 80.0 (server.conf line 29) -> storage.memory.high_watermark = 0.8",
        "rss.server.app.expired.withoutHeartbeat = 120000 (server.conf line 19) -> storage.apps.expiry = \"2m\"",
        "rss.rpc.server.port = 19999 (coordinator.conf line 1) -> uniffle.coordinator_listen = \"127.0.0.1:19999\"",
        "celeborn.worker.storage.disk.reserve.size = 10gb (celeborn-defaults.conf line 36) -> storage.disks.min_free = \"10 GiB\"",
        "celeborn.application.heartbeat.timeout = 10min (celeborn-defaults.conf line 38) -> celeborn.app_timeout = \"10m\"",
        "storage.disks.dirs: kept [\"/data1/rssdata\", \"/data2/rssdata\"] from rss.storage.basePath (server.conf); dropped [\"/mnt/disk1\", \"/mnt/disk2\"] from celeborn.worker.storage.dirs (celeborn-defaults.conf) (server.conf comes first)",
        "storage.commit_timeout: kept \"10m\" from rss.server.commit.timeout (server.conf); dropped \"4m\" from celeborn.worker.commitFiles.timeout (celeborn-defaults.conf) (server.conf comes first)",
        "rss.coordinator.quorum = coordinator1:19999,coordinator2:19999 (server.conf line 6): belongs to the client or to clustering",
        "rss.rpc.server.port = 19999 (server.conf line 1): handled differently: uniffle.server_grpc_listen not set: port 19999 is uniffle.coordinator_listen",
        "rss.server.flush.localfile.threadPool.size = 10 (server.conf line 11): handled differently",
        "rss.rpc.executor.size = 2000 (server.conf line 3): JVM/Netty-only tuning",
        "rss.server.huge-partition.memory.limit.ratio = 0.2 (server.conf line 26): no counterpart in Switchyard",
        "rss.coordinator.app.expired = 60000 (coordinator.conf line 4): handled differently",
        "celeborn.master.endpoints = clb-master:9097 (celeborn-defaults.conf line 2): belongs to the client or to clustering",
        "celeborn.worker.directMemoryRatioToPauseReceive = 0.85 (celeborn-defaults.conf line 30): JVM/Netty-only tuning",
        "celeborn.worker.flusher.buffer.size = 256k (celeborn-defaults.conf line 9): handled differently",
        "celeborn.rpc.io.mode = NIO (celeborn-defaults.conf line 27): JVM/Netty-only tuning",
        "wrote ",
    ] {
        assert!(report.contains(line), "{line:?} missing in:\n{report}");
    }
    // Every key of the three files is accounted for: mapped, ignored with a
    // reason, or the loser of a conflict.
    for conf in [CELEBORN_DEFAULTS, SERVER_CONF, COORDINATOR_CONF] {
        for line in conf
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        {
            let key = line
                .split(|c: char| c == '=' || c.is_whitespace())
                .next()
                .unwrap();
            assert!(
                report.contains(&format!("\n  {key} = "))
                    || report.contains(&format!("from {key} (")),
                "{key} is not in the report:\n{report}"
            );
        }
    }
}

#[test]
fn without_output_the_toml_goes_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let celeborn = write(
        dir.path(),
        "celeborn-defaults.conf",
        "celeborn.master.port=19097\nceleborn.worker.storage.dirs /mnt/disk1:capacity=1t:flushthread=4\n",
    );
    let out = switchyard(
        &["import-config", "--celeborn", celeborn.to_str().unwrap()],
        dir.path(),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let doc: toml::Value = toml::from_str(&stdout).unwrap();
    assert_eq!(get(&doc, "celeborn.master_listen"), &s("127.0.0.1:19097"));
    assert_eq!(get(&doc, "storage.disks.capacity"), &s("1 TiB"));
    assert_eq!(
        get(&doc, "storage.disks.write_concurrency"),
        &toml::Value::Integer(4)
    );
    assert!(
        stderr.contains("the TOML is on standard output"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("precedence"),
        "one file has no precedence: {stderr}"
    );
    // Nothing but the TOML was written anywhere.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn a_value_that_cannot_be_converted_fails_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let server = write(
        dir.path(),
        "server.conf",
        "rss.rpc.server.port 19999\nrss.server.buffer.capacity abc\n",
    );
    let out_path = dir.path().join("out.toml");
    let out = switchyard(
        &[
            "import-config",
            "--uniffle",
            server.to_str().unwrap(),
            "-o",
            out_path.to_str().unwrap(),
        ],
        dir.path(),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(
        stderr.contains(
            "switchyard: error: 1 value cannot be converted (nothing was written):\n  rss.server.buffer.capacity = \"abc\" (server.conf line 2), for storage.memory.capacity: not a size"
        ),
        "{stderr}"
    );
    assert!(
        !out_path.exists(),
        "a failed import wrote {}",
        out_path.display()
    );
}

#[test]
fn settings_that_do_not_load_fail_and_write_nothing() {
    // Both client-facing ports on 9097: each file is fine, together they
    // clash, and the check that check-config makes says so.
    let dir = tempfile::tempdir().unwrap();
    let coordinator = write(dir.path(), "coordinator.conf", "rss.rpc.server.port 9097\n");
    let celeborn = write(
        dir.path(),
        "celeborn-defaults.conf",
        "celeborn.master.port 9097\n",
    );
    let out = switchyard(
        &[
            "import-config",
            "--uniffle-coordinator",
            coordinator.to_str().unwrap(),
            "--celeborn",
            celeborn.to_str().unwrap(),
        ],
        dir.path(),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    assert!(
        stderr.contains("do not pass the checks `switchyard check-config` makes")
            && stderr.contains("celeborn.master_listen")
            && stderr.contains("uniffle.coordinator_listen"),
        "{stderr}"
    );
}

#[test]
fn inputs_are_required_and_must_be_readable() {
    let dir = tempfile::tempdir().unwrap();
    let out = switchyard(&["import-config"], dir.path());
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--celeborn"),
        "{}",
        text(&out.stderr)
    );

    let missing = dir.path().join("nope.conf");
    let out = switchyard(
        &["import-config", "--uniffle", missing.to_str().unwrap()],
        dir.path(),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot read") && stderr.contains("nope.conf"),
        "{stderr}"
    );
}
