//! Probes of the hardening review against the real binary: half-sent huge
//! frames, huge Java-serialized RPCs, idle connections, slow readers and an
//! overload of both protocols. Each asserts that the process stays up, the hostile
//! connections are closed, and well-behaved clients are served meanwhile;
//! and that the process's peak RSS stays within the one memory number plus
//! the read budget plus 64 MiB ([`bound`]).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::cluster::{Cluster, ClusterOptions, Node};
use switchyard_clients::celeborn::{chunk_fetch_request, Connection};
use switchyard_clients::uniffle::Coordinator;

/// A size field of a process's /proc status (VmRSS, VmHWM), in bytes.
fn proc_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{field} of {pid}"));
    kib << 10
}

/// VmRSS of a process, in bytes.
fn rss(pid: u32) -> u64 {
    proc_bytes(pid, "VmRSS:")
}

/// VmHWM (peak RSS) of a process, in bytes.
fn peak_rss(pid: u32) -> u64 {
    proc_bytes(pid, "VmHWM:")
}

/// The node's memory number the tests run with, its read budget, and what
/// the process may hold beyond them (docs/configuration.md, "Sizing a
/// container"; the tests keep the index cache small, so it is inside).
const CAPACITY: u64 = 64 << 20;
const READ_CAPACITY: u64 = 16 << 20;
const OVERHEAD: u64 = 64 << 20;

/// What the peak RSS of a node may reach: capacity + read budget + 64 MiB.
fn bound() -> u64 {
    CAPACITY + READ_CAPACITY + OVERHEAD
}

/// A node with the tests' memory number and read budget, and `extra` TOML.
fn bounded_node(extra: &str) -> Cluster {
    let options = ClusterOptions {
        // The fixture writes `capacity = "<memory>"` into [storage.memory];
        // the read budget and a small index cache go on in the same table.
        memory: format!(
            "{}MiB\"\nread_capacity = \"{}MiB\"\nindex_cache = \"4MiB",
            CAPACITY >> 20,
            READ_CAPACITY >> 20
        ),
        extra_toml: extra.into(),
        ..ClusterOptions::default()
    };
    Cluster::start_with(1, options)
}

/// Fails unless the node's peak RSS stayed within [`bound`].
fn assert_within_bound(pid: u32, what: &str) {
    let peak = peak_rss(pid);
    eprintln!(
        "{what}: peak RSS {} MiB, bound {} MiB",
        peak >> 20,
        bound() >> 20
    );
    assert!(
        peak <= bound(),
        "{what}: peak RSS {} MiB passed capacity + read budget + 64 MiB = {} MiB",
        peak >> 20,
        bound() >> 20
    );
}

/// Both protocols answer a well-behaved client.
fn well_behaved_clients_are_served(node: &Node) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let master = Connection::connect(node.celeborn_master()).await.unwrap();
        let found = tokio::time::timeout(Duration::from_secs(5), master.verify("MasterEndpoint"))
            .await
            .expect("the Celeborn master answers within 5 s")
            .unwrap();
        assert!(found);
        let mut c = Coordinator::connect(&node.uniffle_coordinator().to_string())
            .await
            .unwrap();
        let conf = tokio::time::timeout(Duration::from_secs(5), c.client_conf())
            .await
            .expect("the Uniffle coordinator answers within 5 s")
            .unwrap();
        assert!(!conf.is_empty());
    });
}

/// Whether the server answered on `s` or closed it within `within`.
fn answered_or_closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        // An answer (any bytes) or the end of the connection.
        Ok(_n) => true,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// Whether the server closed `s` (EOF or reset) within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

fn metric(node: &Node, line_prefix: &str) -> f64 {
    metric_with(node, line_prefix, &[])
}

/// As [`metric`], of the lines that carry every one of `labels`.
fn metric_with(node: &Node, line_prefix: &str, labels: &[&str]) -> f64 {
    let (_, body) = node.get("/metrics").unwrap();
    body.lines()
        .filter(|l| l.starts_with(line_prefix) && labels.iter().all(|k| l.contains(k)))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn half_sent_frames_and_idle_connections_are_bounded() {
    let cluster =
        bounded_node("[celeborn.connections]\nidle_timeout = \"2s\"\nframe_timeout = \"3s\"\n");
    let node = cluster.node(1);
    let pid = node.pid().unwrap();
    well_behaved_clients_are_served(node);
    let before = rss(pid);

    // Four connections each announce a 200 MiB RpcRequest on the push port
    // and send 48 MiB of it. Before the byte pools this cost +197 MB of RSS
    // with a 64 MiB budget, and +155 MiB with the pools outside the number;
    // now a frame larger than the node's network share (16 MiB of the 64)
    // is refused at its header.
    const ANNOUNCED: i32 = 200 << 20;
    const SENT: usize = 48 << 20;
    let push: SocketAddr = node.addr(9101);
    let mut hostile: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(push).unwrap();
            s.set_write_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let mut head = Vec::new();
            head.extend_from_slice(&8i32.to_be_bytes()); // request id
            head.push(3); // RpcRequest
            head.extend_from_slice(&(ANNOUNCED - 8).to_be_bytes());
            s.write_all(&head).unwrap();
            s
        })
        .collect();
    let chunk = vec![0u8; 1 << 20];
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut sent = [0usize; 4];
    // Write what each socket takes (a connection not being read fills its
    // socket buffers and then blocks), for at most 3 s.
    while Instant::now() < deadline && sent.iter().any(|&n| n < SENT) {
        for (s, n) in hostile.iter_mut().zip(sent.iter_mut()) {
            if *n < SENT {
                if let Ok(k) = s.write(&chunk) {
                    *n += k;
                }
            }
        }
    }
    let during = rss(pid);
    eprintln!(
        "half-sent frames: RSS before {} MiB, during {} MiB, peak {} MiB",
        before >> 20,
        during >> 20,
        peak_rss(pid) >> 20
    );
    // Meanwhile the node serves others, Celeborn's own ports included.
    well_behaved_clients_are_served(node);
    let grown = during.saturating_sub(before);
    assert!(
        grown < 100 << 20,
        "RSS grew by {} MiB with 4 half-sent frames (sent {:?} bytes)",
        grown >> 20,
        sent
    );
    assert_within_bound(pid, "4 half-sent 200 MiB frames");
    // Each frame is refused at its header: more than the node's network
    // share (12 MiB for large frames) could ever hold.
    for (i, s) in hostile.iter_mut().enumerate() {
        assert!(
            closed_within(s, common::PATIENCE),
            "half-sent frame {i} kept its connection"
        );
    }
    assert!(metric(node, "switchyard_bad_frames_total{") >= 4.0);

    // 200 idle connections on the master port are closed after idle_timeout
    // (2 s); before, they were kept for ever.
    let mut idle: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(node.celeborn_master()).unwrap())
        .collect();
    let start = Instant::now();
    for (i, s) in idle.iter_mut().enumerate() {
        assert!(
            closed_within(s, common::PATIENCE),
            "idle connection {i} still open after {:?}",
            start.elapsed()
        );
    }
    assert!(metric(node, "switchyard_connection_timeouts_total{") >= 200.0);
    assert!(node.is_running(), "{}", node.log_tail(40));
    well_behaved_clients_are_served(node);
}

/// An RpcRequest frame of `len` body bytes that open like a Java-serialized
/// object stream (a chain of class descriptors), the rest filler.
fn java_serialized_rpc(id: i64, len: usize) -> Vec<u8> {
    let mut body = vec![0xAC, 0xED, 0x00, 0x05];
    while body.len() + 16 < len {
        // TC_OBJECT, TC_CLASSDESC, a name of 8 bytes, ...
        body.extend_from_slice(&[0x73, 0x72, 0x00, 0x08]);
        body.extend_from_slice(b"Amplify!");
        body.extend_from_slice(&[0u8; 4]);
    }
    body.resize(len, 0);
    let mut frame = Vec::with_capacity(len + 21);
    frame.extend_from_slice(&12i32.to_be_bytes()); // message length
    frame.push(3); // RpcRequest
    frame.extend_from_slice(&(len as i32).to_be_bytes()); // body length
    frame.extend_from_slice(&id.to_be_bytes()); // request id
    frame.extend_from_slice(&(len as i32).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// Sixteen clients at once each send a 10 MiB Java-serialized RPC to the
/// master port and a 40 MiB one to the worker's RPC port (within the 64 MiB
/// RPC frame limit): the 40 MiB ones are refused at their header (more
/// than the node's network share), the others are read a few at a time,
/// and the peak RSS stays within the bound.
#[test]
fn huge_java_serialized_rpcs_stay_within_the_number() {
    let cluster = bounded_node("");
    let node = cluster.node(1);
    let pid = node.pid().unwrap();
    well_behaved_clients_are_served(node);
    let targets = [
        (node.celeborn_master(), 10 << 20),
        (node.addr(9100), 40 << 20),
    ];
    let senders: Vec<_> = (0..16)
        .map(|i| {
            let (addr, len) = targets[i % 2];
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
                // The server closes a refused frame's connection: a failed
                // write is part of the probe, not of the test.
                let _ = s.write_all(&java_serialized_rpc(i as i64, len));
                answered_or_closed_within(&mut s, common::PATIENCE)
            })
        })
        .collect();
    for (i, t) in senders.into_iter().enumerate() {
        assert!(
            t.join().unwrap(),
            "RPC connection {i} was never answered or closed"
        );
    }
    assert!(node.is_running(), "{}", node.log_tail(40));
    well_behaved_clients_are_served(node);
    assert!(metric(node, "switchyard_bad_frames_total{") >= 8.0);
    assert_within_bound(pid, "16 huge Java-serialized RPCs");
}

/// `switchyard-bench overload` at 10x the node's memory number through both
/// protocols at once (Uniffle over its Netty data plane): every byte is read
/// back, and the bench fails if the node's peak RSS passes the bound.
#[test]
fn overload_at_ten_times_the_number_stays_within_it() {
    let cluster = bounded_node("");
    let node = cluster.node(1);
    let pid = node.pid().unwrap();
    let (master, coordinator, admin) = (
        node.celeborn_master().to_string(),
        node.uniffle_coordinator().to_string(),
        node.admin().to_string(),
    );
    let pid_arg = pid.to_string();
    let args = [
        "overload",
        "--admin",
        &admin,
        "--celeborn-master",
        &master,
        "--uniffle-coordinator",
        &coordinator,
        "--clients",
        "16",
        "--times-budget",
        "10",
        "--server-pid",
        &pid_arg,
    ];
    if let Err(e) = switchyard_bench::run_args(args) {
        panic!(
            "switchyard-bench {args:?} failed: {e}\n{}",
            node.log_tail(40)
        );
    }
    assert_within_bound(pid, "overload at 10x");
    assert!(node.is_running(), "{}", node.log_tail(40));
}

/// A control message of empty repeated elements (two bytes each on the
/// wire, a few hundred decoded): 32 MiB of ReserveSlots locations would
/// decode into about 4 GB. It is refused before decoding, with a clear
/// error, and the node's RSS does not move.
#[test]
fn amplifying_control_messages_are_refused_unread() {
    // A number large enough that the message is read (its network share,
    // 64 MiB, holds it) and refused by the decoder, not at its header.
    let cluster = Cluster::start_with(
        1,
        ClusterOptions {
            memory: "256MiB".into(),
            ..ClusterOptions::default()
        },
    );
    let node = cluster.node(1);
    let pid = node.pid().unwrap();
    let before = rss(pid);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = rt.block_on(async {
        let rpc = Connection::connect(node.addr(9100)).await.unwrap();
        let mut payload = Vec::with_capacity(32 << 20);
        payload.extend_from_slice(&[0x0a, 0x03, b'a', b'p', b'p']);
        while payload.len() < 32 << 20 {
            payload.extend_from_slice(&[0x1a, 0x00]); // primaryLocations: {}
        }
        let tm = switchyard_celeborn::TransportMessage {
            message_type: switchyard_celeborn::proto::MessageType::ReserveSlots as i32,
            payload: Some(bytes::Bytes::from(payload)),
            serde_version: None,
        };
        tokio::time::timeout(Duration::from_secs(30), rpc.ask("WorkerEndpoint", tm))
            .await
            .expect("answered in time")
            .unwrap_err()
            .to_string()
    });
    assert!(err.contains("MiB allowed"), "{err}");
    let grown = rss(pid).saturating_sub(before);
    // The 32 MiB frame itself is read; nothing is decoded from it.
    assert!(grown < 100 << 20, "RSS grew by {} MiB", grown >> 20);
    assert!(metric(node, "switchyard_decode_refused_total{") >= 1.0);
    well_behaved_clients_are_served(node);
}

/// A Uniffle sendShuffleData of millions of empty blocks (16 MB on the wire,
/// gigabytes once decoded) is refused before prost decodes it, while real
/// block data of the same size is not mistaken for such fields.
#[test]
fn amplifying_grpc_requests_are_refused_undecoded() {
    use switchyard_uniffle::proto::shuffle_server_client::ShuffleServerClient;
    use switchyard_uniffle::proto::{SendShuffleDataRequest, ShuffleBlock, ShuffleData};

    // A number large enough that the message is read (its network share,
    // 64 MiB, holds it) and refused by the decoder, not at its header.
    let cluster = Cluster::start_with(
        1,
        ClusterOptions {
            memory: "256MiB".into(),
            ..ClusterOptions::default()
        },
    );
    let node = cluster.node(1);
    let pid = node.pid().unwrap();
    let before = rss(pid);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = rt.block_on(async {
        let mut client = ShuffleServerClient::connect(format!("http://{}", node.addr(19997)))
            .await
            .unwrap()
            .max_encoding_message_size(256 << 20);
        let request = SendShuffleDataRequest {
            app_id: "hostile".into(),
            shuffle_data: vec![ShuffleData {
                partition_id: 0,
                block: vec![ShuffleBlock::default(); 8 << 20],
            }],
            ..Default::default()
        };
        tokio::time::timeout(Duration::from_secs(60), client.send_shuffle_data(request))
            .await
            .expect("answered in time")
            .unwrap_err()
    });
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status}");
    assert!(status.message().contains("would decode into"), "{status}");
    let grown = rss(pid).saturating_sub(before);
    // The 16 MB message itself is read; nothing is decoded from it.
    assert!(grown < 100 << 20, "RSS grew by {} MiB", grown >> 20);
    assert!(metric(node, "switchyard_decode_refused_total{") >= 1.0);
    well_behaved_clients_are_served(node);
}

/// Opens a stream of `file_name` on a fetch port as the Spark client does
/// (an OpenStream RpcRequest, its StreamHandler read back) on a raw socket:
/// the socket, the stream id and its chunk count.
fn open_stream_raw(fetch: SocketAddr, shuffle_key: &str, file_name: &str) -> (TcpStream, i64, i32) {
    use switchyard_celeborn::frame::{CelebornCodec, Message, DEFAULT_MAX_FRAME_SIZE};
    use switchyard_celeborn::proto::{MessageType, PbOpenStream, PbStreamHandler};
    use switchyard_celeborn::TransportMessage;
    use tokio_util::codec::Decoder;

    let mut s = TcpStream::connect(fetch).unwrap();
    s.set_read_timeout(Some(common::PATIENCE)).unwrap();
    let open = TransportMessage::new(
        MessageType::OpenStream,
        &PbOpenStream {
            shuffle_key: shuffle_key.into(),
            file_name: file_name.into(),
            start_index: 0,
            end_index: i32::MAX,
            ..Default::default()
        },
    );
    write_frame(
        &mut s,
        &Message::RpcRequest {
            request_id: 1,
            body: open.to_bytes(),
        },
    );
    let mut codec = CelebornCodec::new(DEFAULT_MAX_FRAME_SIZE);
    let mut buf = bytes::BytesMut::new();
    let reply = loop {
        if let Some(m) = codec.decode(&mut buf).unwrap() {
            break m;
        }
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "the fetch port closed before answering OpenStream");
        buf.extend_from_slice(&chunk[..n]);
    };
    let Message::RpcResponse { body, .. } = reply else {
        panic!("OpenStream answered {reply:?}");
    };
    let tm = TransportMessage::from_bytes(body).unwrap().unwrap();
    let h: PbStreamHandler = tm.decode_payload().unwrap();
    (s, h.stream_id, h.num_chunks)
}

/// Writes one Celeborn frame, encoded by the crate's codec.
fn write_frame(s: &mut TcpStream, message: &switchyard_celeborn::frame::Message) {
    let (head, body) = message.frame_parts().unwrap();
    s.write_all(&head).unwrap();
    s.write_all(&body).unwrap();
}

/// Slow readers: a 40 MiB partition is pushed and committed through the
/// Celeborn protocol; then eight connections to the fetch port each open a
/// stream of it and ask for every chunk 20 times over (6.4 GB in all, 100
/// times the number) and never read their sockets. The node reads a chunk
/// only once its reply room is reserved, so what it holds for them stays
/// within its network share; a reply not taken within `frame_timeout`
/// closes its connection; meanwhile the node serves others and its peak RSS
/// stays within the bound.
#[test]
fn slow_readers_stay_within_the_number() {
    const READERS: usize = 8;
    const ROUNDS: i32 = 20;
    let cluster = bounded_node("[celeborn.connections]\nframe_timeout = \"2s\"\n");
    let node = cluster.node(1);
    let pid = node.pid().unwrap();
    let app = "slow-readers";
    let master = node.celeborn_master().to_string();
    let args = [
        "celeborn",
        "--master",
        &master,
        "--size",
        "40MiB",
        "--mappers",
        "4",
        "--partitions",
        "1",
        "--app",
        app,
        "--keep-app",
    ];
    if let Err(e) = switchyard_bench::run_args(args) {
        panic!(
            "switchyard-bench {args:?} failed: {e}\n{}",
            node.log_tail(40)
        );
    }
    let shuffle_key = switchyard_celeborn::ShuffleKey::new(app, 0).to_string();
    let mut slow: Vec<TcpStream> = Vec::new();
    for _ in 0..READERS {
        let (mut s, stream, chunks) = open_stream_raw(node.addr(9102), &shuffle_key, "0-0-0");
        assert!(chunks >= 4, "a 40 MiB partition in {chunks} chunks");
        for round in 0..ROUNDS {
            for c in 0..chunks {
                write_frame(
                    &mut s,
                    &chunk_fetch_request((round * chunks + c) as i64, stream, c),
                );
            }
        }
        slow.push(s);
    }
    // Replies are held for the slow readers (reserved and unwritten) while
    // their socket buffers are full, and never more than the node's network
    // share (a quarter of the number): sampled for 1 s.
    let mut held = Vec::new();
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(100));
        held.push(
            node.status()["storage"]["memory"]["replies"]
                .as_u64()
                .unwrap(),
        );
    }
    eprintln!(
        "slow readers: replies held {:?} KiB",
        held.iter().map(|b| b >> 10).collect::<Vec<_>>()
    );
    assert!(
        held.iter().any(|&b| b > 0),
        "no reply held for {READERS} slow readers"
    );
    assert!(
        held.iter().all(|&b| b <= CAPACITY / 4),
        "more replies held than the network share: {held:?}"
    );
    well_behaved_clients_are_served(node);
    let what = format!("{READERS} slow readers of {} MiB each", ROUNDS * 40);
    assert_within_bound(pid, &what);
    // A reply not taken within frame_timeout (2 s) closes its connection.
    common::wait_for("a slow reader cut off", || {
        metric_with(
            node,
            "switchyard_connection_timeouts_total{",
            &["kind=\"write\"", "port=\"fetch\""],
        ) >= 1.0
    });
    assert!(node.is_running(), "{}", node.log_tail(40));
    drop(slow);
    // Once they are gone their room is given back.
    common::wait_for("the slow readers' reply room given back", || {
        node.status()["storage"]["memory"]["replies"].as_u64() == Some(0)
    });
    well_behaved_clients_are_served(node);
    assert_within_bound(pid, &what);
}
