use super::*;

fn uniffle(text: &str) -> Input {
    Input::new(Kind::Uniffle, "server.conf", text)
}

fn coordinator(text: &str) -> Input {
    Input::new(Kind::Coordinator, "coordinator.conf", text)
}

fn celeborn(text: &str) -> Input {
    Input::new(Kind::Celeborn, "celeborn-defaults.conf", text)
}

/// Imports, renders, and loads the result as check-config would.
fn run(inputs: &[Input]) -> (Import, String, GatewayConfig) {
    let import = import(inputs).unwrap_or_else(|e| panic!("{e}"));
    let text = render(&import, inputs);
    let config = check(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    (import, text, config)
}

fn value<'a>(import: &'a Import, target: &str) -> Option<&'a toml::Value> {
    import.get(target).map(|m| &m.value)
}

fn notes(import: &Import) -> Vec<String> {
    import.live_notes().map(|n| n.text.clone()).collect()
}

fn ignored<'a>(import: &'a Import, key: &str) -> &'a Ignored {
    import
        .ignored
        .iter()
        .find(|i| i.origin.key == key)
        .unwrap_or_else(|| panic!("{key} not ignored: {import:#?}"))
}

#[test]
fn uniffle_units_convert() {
    let (import, text, c) = run(&[uniffle(
        "rss.server.buffer.capacity 40g\n\
         rss.server.read.buffer.capacity=20gb\n\
         rss.server.memory.shuffle.highWaterMark.percentage 80.0\n\
         rss.server.memory.shuffle.lowWaterMark.percentage 20\n\
         rss.server.app.expired.withoutHeartbeat 120000\n\
         rss.server.disk.capacity 1t\n\
         rss.server.single.buffer.flush.threshold 129m\n\
         rss.server.commit.timeout 600000\n\
         rss.server.preAllocation.expired 120000\n\
         rss.rpc.message.max.size 1073741824\n\
         rss.server.tags ssd, rack-1\n\
         rss.storage.basePath /data1/rssdata,/data2/rssdata\n\
         rss.server.netty.port 17000\n",
    )]);
    let m = &c.storage.memory;
    assert_eq!(m.capacity.as_u64(), 40 << 30);
    assert_eq!(m.read_capacity.as_u64(), 20 << 30);
    assert_eq!(m.high_watermark, 0.8);
    assert_eq!(m.low_watermark, 0.2);
    assert_eq!(m.single_buffer_threshold.as_u64(), 129 << 20);
    assert_eq!(c.storage.apps.expiry, std::time::Duration::from_secs(120));
    assert_eq!(c.storage.disks.capacity.map(|b| b.as_u64()), Some(1 << 40));
    assert_eq!(
        c.storage.commit_timeout,
        std::time::Duration::from_secs(600)
    );
    assert_eq!(
        c.uniffle.ticket_timeout,
        std::time::Duration::from_secs(120)
    );
    assert_eq!(c.uniffle.max_message_size.as_u64(), 1 << 30);
    assert_eq!(
        c.uniffle.tags,
        vec!["ssd".to_string(), "rack-1".to_string()]
    );
    assert_eq!(
        c.storage.disks.dirs,
        vec![
            PathBuf::from("/data1/rssdata"),
            PathBuf::from("/data2/rssdata")
        ]
    );
    assert_eq!(
        c.uniffle.server_netty_listen,
        Some("127.0.0.1:17000".parse().unwrap())
    );
    // Binary units written out, never "40g" (which bytesize reads as 10^9).
    assert!(text.contains("capacity = \"40 GiB\""), "{text}");
    assert!(
        text.contains("# from rss.server.buffer.capacity (server.conf)\ncapacity = \"40 GiB\""),
        "{text}"
    );
    assert!(text.contains("[storage.memory]"), "{text}");
    assert!(!text.contains("[celeborn]"), "{text}");
    assert_eq!(
        value(&import, "storage.apps.expiry"),
        Some(&toml::Value::String("2m".into()))
    );
}

#[test]
fn celeborn_units_and_dirs_convert() {
    let (import, _, c) = run(&[celeborn(
        "celeborn.master.port 9097\n\
         celeborn.worker.rpc.port 9200\n\
         celeborn.worker.push.port 9201\n\
         celeborn.worker.fetch.port 9202\n\
         celeborn.worker.replicate.port 0\n\
         celeborn.worker.storage.dirs /mnt/disk1:disktype=SSD:capacity=1t:flushthread=8,/mnt/disk2:capacity=1t:flushthread=8:disktype=SSD\n\
         celeborn.worker.storage.disk.reserve.size 10gb\n\
         celeborn.shuffle.chunk.size 16m\n\
         celeborn.master.heartbeat.application.timeout 10min\n\
         celeborn.worker.commitFiles.timeout 240s\n\
         celeborn.worker.commitFiles.fsync true\n\
         celeborn.worker.monitor.disk.check.timeout 1h\n\
         celeborn.auth.enabled true\n\
         celeborn.ssl.rpc_service.enabled true\n",
    )]);
    let at = |s: &str| -> SocketAddr { s.parse().unwrap() };
    assert_eq!(c.celeborn.master_listen, at("127.0.0.1:9097"));
    assert_eq!(c.celeborn.worker_rpc_listen, at("127.0.0.1:9200"));
    assert_eq!(c.celeborn.worker_push_listen, at("127.0.0.1:9201"));
    assert_eq!(c.celeborn.worker_fetch_listen, at("127.0.0.1:9202"));
    assert_eq!(c.celeborn.worker_replicate_listen, at("127.0.0.1:0"));
    let d = &c.storage.disks;
    assert_eq!(
        d.dirs,
        vec![PathBuf::from("/mnt/disk1"), PathBuf::from("/mnt/disk2")]
    );
    assert_eq!(d.capacity.map(|b| b.as_u64()), Some(1 << 40));
    assert_eq!(d.write_concurrency, 8);
    assert_eq!(d.min_free.as_u64(), 10 << 30);
    assert!(d.sync);
    assert_eq!(d.io_timeout, std::time::Duration::from_secs(3600));
    assert_eq!(c.celeborn.chunk_size.as_u64(), 16 << 20);
    assert_eq!(c.celeborn.app_timeout, std::time::Duration::from_secs(600));
    assert_eq!(
        c.storage.commit_timeout,
        std::time::Duration::from_secs(240)
    );
    assert!(c.celeborn.auth_enabled);
    // TLS is served from PEM files, not keystores: the report says how.
    let tls = ignored(&import, "celeborn.ssl.rpc_service.enabled");
    assert_eq!(tls.why, Why::Handled);
    assert!(tls.detail.contains("[celeborn.tls]"), "{}", tls.detail);
    assert!(notes(&import)
        .iter()
        .any(|n| n.contains("disktype= (SSD, SSD) is not kept")));
}

#[test]
fn mixed_per_directory_attributes_are_not_guessed() {
    let (import, _, c) = run(&[celeborn(
        "celeborn.worker.storage.dirs /a:capacity=1t:flushthread=4,/b:capacity=2t,/c\n",
    )]);
    assert_eq!(c.storage.disks.dirs.len(), 3);
    assert_eq!(c.storage.disks.capacity, None);
    assert_eq!(c.storage.disks.write_concurrency, 2, "the default stays");
    assert!(value(&import, "storage.disks.capacity").is_none());
    assert!(notes(&import)
        .iter()
        .any(|n| n.contains("capacity= is not the same")));
    assert!(notes(&import)
        .iter()
        .any(|n| n.contains("flushthread= is not the same")));
}

#[test]
fn the_first_file_wins_a_conflict_and_says_so() {
    let inputs = [
        celeborn("celeborn.worker.commitFiles.timeout 240s\nceleborn.worker.storage.disk.reserve.size 5G\n"),
        uniffle("rss.server.commit.timeout 600000\nrss.server.disk.capacity -1\n"),
    ];
    let (import, text, c) = run(&inputs);
    // server.conf comes first whatever the order of the inputs.
    assert_eq!(
        c.storage.commit_timeout,
        std::time::Duration::from_secs(600)
    );
    assert_eq!(import.conflicts.len(), 1, "{:#?}", import.conflicts);
    let conflict = &import.conflicts[0];
    assert_eq!(conflict.target, "storage.commit_timeout");
    assert_eq!(conflict.kept.1.key, "rss.server.commit.timeout");
    assert_eq!(
        conflict.dropped.1.key,
        "celeborn.worker.commitFiles.timeout"
    );
    let report = report(&import, &inputs);
    assert!(
        report.contains("storage.commit_timeout: kept \"10m\" from rss.server.commit.timeout (server.conf); dropped \"4m\" from celeborn.worker.commitFiles.timeout (celeborn-defaults.conf) (server.conf comes first)"),
        "{report}"
    );
    assert!(report.contains("precedence: when two files set one Switchyard key differently, the first of server.conf, then celeborn-defaults.conf is kept"), "{report}");
    // Not set by server.conf (-1 is "derived"): Celeborn's reserve comes through.
    assert_eq!(c.storage.disks.min_free.as_u64(), 5 << 30);
    assert!(
        text.contains("# from celeborn.worker.storage.disk.reserve.size (celeborn-defaults.conf)")
    );
    assert_eq!(
        ignored(&import, "rss.server.disk.capacity").why,
        Why::Handled
    );
}

#[test]
fn the_same_value_twice_is_no_conflict() {
    let (import, text, _) = run(&[
        uniffle("rss.server.commit.timeout 120000\n"),
        celeborn("celeborn.worker.commitFiles.timeout 2min\n"),
    ]);
    assert!(import.conflicts.is_empty());
    let m = import.get("storage.commit_timeout").unwrap();
    assert_eq!(m.also.len(), 1);
    assert!(
        text.contains("# from rss.server.commit.timeout (server.conf), also celeborn.worker.commitFiles.timeout (celeborn-defaults.conf)"),
        "{text}"
    );
}

#[test]
fn a_current_key_wins_over_its_old_name_in_any_line_order() {
    let (import, _, c) = run(&[celeborn(
        "celeborn.application.heartbeat.timeout 60s\n\
         celeborn.master.heartbeat.application.timeout 120s\n",
    )]);
    assert_eq!(c.celeborn.app_timeout, std::time::Duration::from_secs(120));
    assert_eq!(import.conflicts.len(), 1);
    assert_eq!(
        import.conflicts[0].dropped.1.key,
        "celeborn.application.heartbeat.timeout"
    );
    let report = report(&import, &[]);
    assert!(
        report.contains("the current key before its older alternative"),
        "{report}"
    );
}

#[test]
fn a_shuffle_server_port_that_another_listener_has_keeps_its_default() {
    // Upstream's example runs the coordinator and the shuffle server on
    // 19999, on different hosts.
    let (import, _, c) = run(&[
        uniffle("rss.rpc.server.port 19999\n"),
        coordinator("rss.rpc.server.port 19999\n"),
    ]);
    assert_eq!(
        c.uniffle.coordinator_listen,
        "127.0.0.1:19999".parse().unwrap()
    );
    assert_eq!(
        c.uniffle.server_grpc_listen,
        "127.0.0.1:19997".parse().unwrap()
    );
    let i = ignored(&import, "rss.rpc.server.port");
    assert_eq!(i.origin.kind, Kind::Uniffle);
    assert!(
        i.detail.contains("uniffle.coordinator_listen")
            && i.detail.contains("keeps its default 127.0.0.1:19997"),
        "{}",
        i.detail
    );
    // Even without coordinator.conf, 19999 is the coordinator's default.
    let (import, _, c) = run(&[uniffle("rss.rpc.server.port 19999\n")]);
    assert_eq!(
        c.uniffle.server_grpc_listen,
        "127.0.0.1:19997".parse().unwrap()
    );
    assert!(ignored(&import, "rss.rpc.server.port")
        .detail
        .contains("its default"));
    // A free port is taken.
    let (_, _, c) = run(&[uniffle("rss.rpc.server.port 18000\n")]);
    assert_eq!(
        c.uniffle.server_grpc_listen,
        "127.0.0.1:18000".parse().unwrap()
    );
}

#[test]
fn a_clash_of_client_facing_ports_fails_the_check() {
    let inputs = [
        coordinator("rss.rpc.server.port 9097\n"),
        celeborn("celeborn.master.port 9097\n"),
    ];
    let import = import(&inputs).unwrap();
    let err = check(&render(&import, &inputs)).unwrap_err().to_string();
    assert!(
        err.contains("celeborn.master_listen") && err.contains("uniffle.coordinator_listen"),
        "{err}"
    );
}

#[test]
fn the_cold_tier_from_hdfs_and_what_needs_it() {
    let (import, text, c) = run(&[
        uniffle("rss.server.huge-partition.size.threshold 10g\n"),
        celeborn(
            "celeborn.storage.availableTypes HDD,HDFS\n\
             celeborn.storage.hdfs.dir hdfs://namenode:9000/celeborn/\n",
        ),
    ]);
    let cold = c.storage.cold.expect("a cold tier");
    assert_eq!(
        serde_json::to_value(&cold.backend).unwrap(),
        serde_json::json!({"service": "hdfs", "name_node": "hdfs://namenode:9000", "root": "/celeborn"})
    );
    assert_eq!(cold.huge_partition_threshold.as_u64(), 10 << 30);
    assert!(text.contains("[storage.cold]"), "{text}");
    assert_eq!(
        ignored(&import, "celeborn.storage.availableTypes").why,
        Why::Handled
    );

    // Without a tier, its threshold cannot be set.
    let (import, text, c) = run(&[uniffle("rss.server.huge-partition.size.threshold 10g\n")]);
    assert!(c.storage.cold.is_none());
    assert!(!text.contains("storage.cold"), "{text}");
    assert!(ignored(&import, "rss.server.huge-partition.size.threshold")
        .detail
        .contains("no cold tier was imported"));

    // HDFS not among Celeborn's types: Celeborn never wrote there.
    let (import, _, c) = run(&[celeborn(
        "celeborn.storage.availableTypes HDD\nceleborn.storage.hdfs.dir hdfs://nn/x\n",
    )]);
    assert!(c.storage.cold.is_none());
    assert!(ignored(&import, "celeborn.storage.hdfs.dir")
        .detail
        .contains("without HDFS"));

    // HDFS alone: no local disks.
    let (_, _, c) = run(&[celeborn(
        "celeborn.storage.availableTypes HDFS\nceleborn.storage.hdfs.dir hdfs://nn:8020/rss\n",
    )]);
    assert!(c.storage.disks.dirs.is_empty());
    assert!(c.storage.cold.is_some());

    // A Uniffle coordinator's remote storage, with server.conf saying HDFS.
    let (_, _, c) = run(&[
        uniffle("rss.storage.type MEMORY_LOCALFILE_HDFS\n"),
        coordinator("rss.coordinator.remote.storage.path hdfs://ns1/rss\n"),
    ]);
    assert_eq!(
        serde_json::to_value(&c.storage.cold.unwrap().backend).unwrap(),
        serde_json::json!({"service": "hdfs", "name_node": "hdfs://ns1", "root": "/rss"})
    );
    let (import, _, c) = run(&[
        uniffle("rss.storage.type MEMORY_LOCALFILE\n"),
        coordinator("rss.coordinator.remote.storage.path hdfs://ns1/rss\n"),
    ]);
    assert!(c.storage.cold.is_none());
    assert!(ignored(&import, "rss.coordinator.remote.storage.path")
        .detail
        .contains("without HDFS"));
    let (import, _, _) = run(&[coordinator(
        "rss.coordinator.remote.storage.path s3a://bucket/rss\n",
    )]);
    assert!(ignored(&import, "rss.coordinator.remote.storage.path")
        .detail
        .contains("not hdfs://"));
}

#[test]
fn hdfs_uris_split_into_name_node_and_root() {
    let s = |u: &str| split_hdfs_uri(u);
    let pair = |a: &str, b: &str| Some((a.to_string(), b.to_string()));
    assert_eq!(
        s("hdfs://nn:9000/celeborn"),
        pair("hdfs://nn:9000", "/celeborn")
    );
    assert_eq!(s("HDFS://nn/a/b/"), pair("hdfs://nn", "/a/b"));
    assert_eq!(s("hdfs://nn"), pair("hdfs://nn", "/"));
    assert_eq!(s("hdfs:///x"), None);
    assert_eq!(s("s3a://b/x"), None);
    assert_eq!(s("/local"), None);
}

#[test]
fn sentinels_and_ignored_keys_carry_reasons() {
    let (import, _, c) = run(&[
        uniffle(
            "rss.server.buffer.capacity -1\n\
             rss.server.netty.port -1\n\
             rss.coordinator.quorum c1:19999,c2:19999\n\
             rss.server.flush.localfile.threadPool.size 10\n\
             rss.rpc.executor.size 2000\n\
             rss.server.bogus.key 1\n\
             rss.coordinator.app.expired 60000\n\
             celeborn.master.port 9097\n",
        ),
        celeborn(
            "celeborn.master.endpoints clb-1:9097\n\
             celeborn.worker.directMemoryRatioToPauseReceive 0.85\n\
             celeborn.worker.flusher.buffer.size 256k\n\
             celeborn.rpc.io.mode NIO\n\
             something.else 1\n",
        ),
    ]);
    assert_eq!(
        c.storage.memory.capacity.as_u64(),
        1 << 30,
        "the default stays"
    );
    let why = |k| ignored(&import, k).why;
    assert_eq!(why("rss.server.buffer.capacity"), Why::Handled);
    assert_eq!(why("rss.server.netty.port"), Why::Handled);
    assert_eq!(why("rss.coordinator.quorum"), Why::ClientOrCluster);
    assert_eq!(
        why("rss.server.flush.localfile.threadPool.size"),
        Why::Handled
    );
    assert_eq!(why("rss.rpc.executor.size"), Why::JvmTuning);
    assert_eq!(why("rss.server.bogus.key"), Why::Unknown);
    assert_eq!(why("celeborn.master.endpoints"), Why::ClientOrCluster);
    assert_eq!(
        why("celeborn.worker.directMemoryRatioToPauseReceive"),
        Why::JvmTuning
    );
    assert_eq!(why("celeborn.worker.flusher.buffer.size"), Why::Handled);
    assert_eq!(why("celeborn.rpc.io.mode"), Why::JvmTuning);
    assert_eq!(why("something.else"), Why::Unknown);
    // Another file's key says which file takes it.
    let i = ignored(&import, "rss.coordinator.app.expired");
    assert!(i.detail.contains("--uniffle-coordinator"), "{}", i.detail);
    let i = import
        .ignored
        .iter()
        .find(|i| i.origin.key == "celeborn.master.port")
        .unwrap();
    assert!(i.detail.contains("--celeborn"), "{}", i.detail);
    assert!(import.mapped.is_empty(), "{:#?}", import.mapped);
}

#[test]
fn every_bad_value_is_named() {
    let err = import(&[
        uniffle(
            "# a comment\nrss.server.buffer.capacity abc\n\
             rss.server.memory.shuffle.highWaterMark.percentage 150\n\
             rss.server.app.expired.withoutHeartbeat 0\n",
        ),
        celeborn("celeborn.worker.storage.dirs /mnt/a:speed=fast\nceleborn.master.port 70000\n"),
    ])
    .unwrap_err();
    let ImportError::Values(values) = &err else {
        panic!("{err}")
    };
    let keys: Vec<&str> = values.iter().map(|v| v.key.as_str()).collect();
    assert_eq!(
        keys,
        vec![
            "rss.server.buffer.capacity",
            "rss.server.memory.shuffle.highWaterMark.percentage",
            "rss.server.app.expired.withoutHeartbeat",
            "celeborn.master.port",
            "celeborn.worker.storage.dirs",
        ]
    );
    let message = err.to_string();
    assert!(
        message.starts_with("5 values cannot be converted"),
        "{message}"
    );
    assert!(
        message.contains(
            "rss.server.buffer.capacity = \"abc\" (server.conf line 2), for storage.memory.capacity: not a size"
        ),
        "{message}"
    );
    assert!(
        message.contains("illegal attribute \"speed=fast\""),
        "{message}"
    );
}

#[test]
fn strings_are_escaped_as_toml() {
    let (_, text, c) = run(&[uniffle(
        "rss.storage.basePath /data/it's \"quoted\"\\\\dir,/data/ü\n",
    )]);
    assert_eq!(
        c.storage.disks.dirs,
        vec![
            PathBuf::from("/data/it's \"quoted\"\\dir"),
            PathBuf::from("/data/ü")
        ]
    );
    assert!(text.contains("dirs = ["), "{text}");
}

#[test]
fn file_labels_cannot_break_out_of_a_comment() {
    let inputs = [Input::new(
        Kind::Uniffle,
        "evil\n[admin]\nlisten = \"0.0.0.0:1\"",
        "rss.server.buffer.capacity 2g\n",
    )];
    let import = import(&inputs).unwrap();
    let text = render(&import, &inputs);
    let c = check(&text).unwrap();
    assert_eq!(c.admin.listen, "127.0.0.1:19990".parse().unwrap(), "{text}");
    assert_eq!(c.storage.memory.capacity.as_u64(), 2 << 30);
}

#[test]
fn duplicates_are_noted() {
    let (import, _, c) = run(&[uniffle(
        "rss.server.buffer.capacity 2g\nrss.server.buffer.capacity 3g\n",
    )]);
    assert_eq!(c.storage.memory.capacity.as_u64(), 3 << 30);
    assert!(
        notes(&import)
            .iter()
            .any(|n| n
                .contains("rss.server.buffer.capacity is set 2 times in server.conf (lines 1, 2)")),
        "{:#?}",
        notes(&import)
    );
}

/// Every key the tables can write is a real Switchyard key of the right
/// type: a sample of each, rendered and loaded, sets it.
#[test]
fn every_target_loads() {
    let sample = |target: &str| -> toml::Value {
        use toml::Value::*;
        match target {
            "storage.memory.high_watermark" => Float(0.9),
            "storage.memory.low_watermark" => Float(0.1),
            "storage.disks.dirs" => Array(vec![String("/d".into())]),
            "uniffle.tags" => Array(vec![String("t".into())]),
            "storage.disks.write_concurrency" | "uniffle.max_servers_per_shuffle" => Integer(3),
            "storage.disks.sync" | "celeborn.auth_enabled" => Boolean(true),
            "storage.cold.service" => String("hdfs".into()),
            "storage.cold.name_node" => String("hdfs://nn:1".into()),
            "storage.cold.root" => String("/r".into()),
            t if t.ends_with("_listen") => {
                let port = 30000 + rules::TARGETS.iter().position(|x| *x == t).unwrap();
                String(format!("127.0.0.1:{port}"))
            }
            t if t.contains("timeout") || t.contains("expiry") || t.ends_with("interval") => {
                String("7s".into())
            }
            _ => String("3 MiB".into()),
        }
    };
    let mut import = Import::default();
    for target in rules::TARGETS {
        import.merge(
            target,
            sample(target),
            Origin {
                kind: Kind::Uniffle,
                label: "x".into(),
                key: "k".into(),
                raw: "v".into(),
                line: 1,
            },
        );
    }
    let text = render(&import, &[]);
    let c = check(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    // And each one took: compare with the defaults' rendering.
    let mine = toml::Value::try_from(&c).unwrap();
    let defaults = toml::Value::try_from(GatewayConfig::default()).unwrap();
    for target in rules::TARGETS {
        let get = |v: &toml::Value| {
            target
                .split('.')
                .try_fold(v.clone(), |v, k| v.get(k).cloned())
        };
        assert_ne!(
            get(&mine),
            get(&defaults),
            "{target} did not change:\n{text}"
        );
    }
}

#[test]
fn notes_about_a_value_that_lost_a_conflict_are_dropped() {
    let inputs = [
        uniffle("rss.storage.basePath /data1/rss\n"),
        celeborn("celeborn.worker.storage.dirs /mnt/disk1:disktype=SSD\n"),
    ];
    let (import, _, c) = run(&inputs);
    assert_eq!(c.storage.disks.dirs, vec![PathBuf::from("/data1/rss")]);
    let notes = notes(&import);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("rss.server.leak.shuffledata.check.interval")),
        "{notes:#?}"
    );
    assert!(!notes.iter().any(|n| n.contains("disktype=")), "{notes:#?}");
    assert!(!report(&import, &inputs).contains("disktype="));
}
