//! App-book exchange between coordinators carries what changed, not the
//! whole book (issue 43: at 10,000 applications every round sent every
//! record), and a restarted coordinator still gets everything.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard_cluster::proto::cluster_client::ClusterClient;
use switchyard_cluster::proto::cluster_server::ClusterServer;
use switchyard_cluster::proto::{AppSync, WorkerHeartbeat};
use switchyard_cluster::{
    AppBook, AppSyncer, ClusterConfig, ClusterService, Directory, WorkerListener, PROTOCOL_VERSION,
    SECRET_HEADER,
};
use tokio_util::sync::CancellationToken;

const SECRET: &str = "sync-deltas-secret";

struct NoListener;

impl WorkerListener for NoListener {
    fn worker_seen(&self, _heartbeat: &WorkerHeartbeat) {}
}

/// A coordinator's cluster service on `addr` (port 0: any) serving `book`;
/// its address.
async fn serve(
    id: &str,
    book: Arc<AppBook>,
    addr: SocketAddr,
    stop: CancellationToken,
) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = ClusterService::new(
        id.to_string(),
        Arc::new(Directory::new(Duration::from_secs(30))),
        book,
        SECRET.into(),
        Arc::new(NoListener),
    );
    tokio::spawn(async move {
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let _ = tonic::transport::Server::builder()
            .add_service(ClusterServer::new(service))
            .serve_with_incoming_shutdown(incoming, stop.cancelled())
            .await;
    });
    addr
}

fn book_of(apps: usize) -> Arc<AppBook> {
    let book = Arc::new(AppBook::new(Duration::from_secs(300)));
    for i in 0..apps {
        let app = format!("app-{i}");
        book.seen(&app);
        book.shuffle_registered(&app, 0);
    }
    book
}

async fn ask(addr: SocketAddr, ack: (u64, u64)) -> AppSync {
    let mut client = ClusterClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut request = tonic::Request::new(AppSync {
        protocol_version: PROTOCOL_VERSION,
        coordinator_id: "asker".into(),
        apps: Vec::new(),
        epoch: 7,
        seq: 0,
        ack_epoch: ack.0,
        ack_seq: ack.1,
    });
    request
        .metadata_mut()
        .insert(SECRET_HEADER, SECRET.parse().unwrap());
    client.sync_apps(request).await.unwrap().into_inner()
}

#[tokio::test]
async fn a_reply_holds_only_what_changed_since_the_acknowledged_change() {
    let stop = CancellationToken::new();
    let book = book_of(1_000);
    let addr = serve(
        "c1",
        book.clone(),
        "127.0.0.1:0".parse().unwrap(),
        stop.clone(),
    )
    .await;

    let first = ask(addr, (0, 0)).await;
    assert_eq!(
        first.apps.len(),
        1_000,
        "nothing acknowledged: the whole book"
    );
    assert_ne!(first.epoch, 0);
    let ack = (first.epoch, first.seq);
    assert!(
        ask(addr, ack).await.apps.is_empty(),
        "no change, nothing sent"
    );

    book.shuffle_registered("app-5", 1);
    // A driver heartbeat a moment later moves last-seen by less than a
    // tenth of the timeout: no change worth sending.
    book.seen("app-6");
    let next = ask(addr, ack).await;
    let names: Vec<_> = next.apps.iter().map(|r| r.app.as_str()).collect();
    assert_eq!(names, ["app-5"]);
    assert_eq!(next.apps[0].registered_shuffles, [0, 1]);

    // Another incarnation's acknowledgement (the book restarted): all.
    assert_eq!(ask(addr, (ack.0 + 1, ack.1)).await.apps.len(), 1_000);
    stop.cancel();
}

fn config(peers: &[SocketAddr]) -> ClusterConfig {
    ClusterConfig {
        coordinators: peers.iter().map(ToString::to_string).collect(),
        secret: Some(SECRET.into()),
        heartbeat_interval: Duration::from_millis(100),
        request_timeout: Duration::from_secs(2),
        ..ClusterConfig::default()
    }
}

async fn until(what: &str, f: impl Fn() -> bool) {
    let started = Instant::now();
    while !f() {
        assert!(started.elapsed() < Duration::from_secs(20), "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_restarted_peer_gets_the_whole_book_and_changes_keep_flowing() {
    let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
    let a = book_of(500);
    let b = Arc::new(AppBook::new(Duration::from_secs(300)));
    let addr_a = serve(
        "a",
        a.clone(),
        "127.0.0.1:0".parse().unwrap(),
        stop_a.clone(),
    )
    .await;
    let addr_b = serve(
        "b",
        b.clone(),
        "127.0.0.1:0".parse().unwrap(),
        stop_b.clone(),
    )
    .await;
    let peers = [addr_a, addr_b];
    let sync_a = AppSyncer::start(&config(&peers), "a".into(), a.clone(), stop_a.clone()).unwrap();
    let sync_b = AppSyncer::start(&config(&peers), "b".into(), b.clone(), stop_b.clone()).unwrap();
    until("b learns a's book", || b.len() == 500).await;

    // A change on either side reaches the other.
    a.shuffle_removed("app-1", 0);
    b.app_lost("app-2");
    until("changes cross", || {
        a.registered_shuffles("app-2").is_empty()
            && b.news_for(&["app-1".to_string()]).removed_shuffles.len() == 1
    })
    .await;

    // b restarts: a new process with an empty book on the same address.
    stop_b.cancel();
    sync_b.stop().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stop_b = CancellationToken::new();
    let b = Arc::new(AppBook::new(Duration::from_secs(300)));
    serve("b", b.clone(), addr_b, stop_b.clone()).await;
    let sync_b = AppSyncer::start(&config(&peers), "b".into(), b.clone(), stop_b.clone()).unwrap();
    until("the restarted b has the whole book", || b.len() == 500).await;
    assert!(
        b.registered_shuffles("app-2").is_empty(),
        "the tombstone came back too"
    );
    // And what the restarted b hears reaches a.
    b.shuffle_registered("app-3", 9);
    until("b's change reaches a", || {
        a.registered_shuffles("app-3").contains(&9)
    })
    .await;
    stop_a.cancel();
    stop_b.cancel();
    sync_a.stop().await;
    sync_b.stop().await;
}
