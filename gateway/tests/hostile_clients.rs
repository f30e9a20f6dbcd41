//! Probes of the hardening review against the real binary: half-sent huge
//! frames and idle connections. Each asserts that the process stays up, its
//! RSS stays bounded, the hostile connections are closed, and well-behaved
//! clients are served meanwhile.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::cluster::{Cluster, ClusterOptions, Node};
use switchyard_clients::celeborn::Connection;
use switchyard_clients::uniffle::Coordinator;

/// VmRSS of a process, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kib << 10
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
    let (_, body) = node.get("/metrics").unwrap();
    body.lines()
        .filter(|l| l.starts_with(line_prefix))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn half_sent_frames_and_idle_connections_are_bounded() {
    let options = ClusterOptions {
        memory: "64MiB".into(),
        extra_toml: "[celeborn.connections]\nidle_timeout = \"2s\"\nframe_timeout = \"3s\"\n"
            .into(),
        ..ClusterOptions::default()
    };
    let cluster = Cluster::start_with(1, options);
    let node = cluster.node(1);
    let pid = node.pid().unwrap();
    well_behaved_clients_are_served(node);
    let before = rss(pid);

    // Four connections each announce a 200 MiB RpcRequest on the push port
    // and send 48 MiB of it. Before the byte pools this cost +197 MB of RSS
    // with a 64 MiB budget; now one connection at a time (32 MiB of the
    // pool each) is read.
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
    // Meanwhile the node serves others, Celeborn's own ports included.
    well_behaved_clients_are_served(node);
    let grown = during.saturating_sub(before);
    assert!(
        grown < 100 << 20,
        "RSS grew by {} MiB with 4 half-sent frames (sent {:?} bytes)",
        grown >> 20,
        sent
    );
    // Each stalled frame is cut off after frame_timeout (3 s), one after the
    // other as each gets room.
    for (i, s) in hostile.iter_mut().enumerate() {
        assert!(
            closed_within(s, common::PATIENCE),
            "half-sent frame {i} kept its connection"
        );
    }
    assert!(metric(node, "switchyard_connection_timeouts_total{") >= 1.0);

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

/// A control message of empty repeated elements (two bytes each on the
/// wire, a few hundred decoded): 32 MiB of ReserveSlots locations would
/// decode into about 4 GB. It is refused before decoding, with a clear
/// error, and the node's RSS does not move.
#[test]
fn amplifying_control_messages_are_refused_unread() {
    let cluster = Cluster::start_with(1, ClusterOptions::default());
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

    let cluster = Cluster::start_with(1, ClusterOptions::default());
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
