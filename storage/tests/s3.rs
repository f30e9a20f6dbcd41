//! The cold tier on a real S3-protocol server: s3s-fs, in process, on
//! 127.0.0.1, spoken to by OpenDAL's S3 service with signed requests.
mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytesize::ByteSize;
use common::*;
use hyper::body::Incoming;
use hyper::service::{service_fn, Service};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;
use switchyard_storage::{ColdBackend, ColdConfig, PartitionKey, Store, StoreConfig};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinSet;

const ACCESS_KEY: &str = "switchyard-test";
const SECRET_KEY: &str = "switchyard-test-secret";
const BUCKET: &str = "shuffle";

/// An s3s-fs server over a directory. `stop` closes the listener and every
/// open connection; `start_on` the same address and directory brings the
/// same objects back.
struct S3Server {
    addr: SocketAddr,
    root: PathBuf,
    /// "METHOD uri" of every request, in arrival order.
    log: Arc<Mutex<Vec<String>>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl S3Server {
    /// A server on a free port over a new directory holding an empty bucket.
    async fn start(root: &Path) -> S3Server {
        // s3s-fs keeps a bucket as a directory below its root.
        std::fs::create_dir_all(root.join(BUCKET)).unwrap();
        Self::start_on(root, "127.0.0.1:0".parse().unwrap(), Default::default()).await
    }

    async fn start_on(root: &Path, addr: SocketAddr, log: Arc<Mutex<Vec<String>>>) -> S3Server {
        let listener = bind(addr).await;
        let addr = listener.local_addr().unwrap();
        let service = {
            let mut b = S3ServiceBuilder::new(s3s_fs::FileSystem::new(root).unwrap());
            b.set_auth(SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
            b.build()
        };
        let (stop, mut stopped) = oneshot::channel::<()>();
        let requests = log.clone();
        let task = tokio::spawn(async move {
            let http = Builder::new(TokioExecutor::new());
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((socket, _)) = accepted else { continue };
                        let s3 = service.clone();
                        let requests = requests.clone();
                        let svc = service_fn(move |req: hyper::Request<Incoming>| {
                            requests
                                .lock()
                                .unwrap()
                                .push(format!("{} {}", req.method(), req.uri()));
                            let s3 = s3.clone();
                            async move { Service::call(&s3, req).await }
                        });
                        let conn = http
                            .serve_connection(TokioIo::new(socket), svc)
                            .into_owned();
                        connections.spawn(async move {
                            let _ = conn.await;
                        });
                    }
                    _ = &mut stopped => break,
                }
            }
            // Aborts every open connection: in-flight requests fail.
            connections.shutdown().await;
        });
        S3Server {
            addr,
            root: root.to_path_buf(),
            log,
            stop: Some(stop),
            task: Some(task),
        }
    }

    async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap();
        }
    }

    /// The same server again: same address, same directory.
    async fn restart(&mut self) {
        self.stop().await;
        *self = Self::start_on(&self.root.clone(), self.addr, self.log.clone()).await;
    }

    fn requests(&self, pred: impl Fn(&str) -> bool) -> usize {
        self.log.lock().unwrap().iter().filter(|r| pred(r)).count()
    }

    /// Object files in the bucket directory.
    fn bucket_files(&self) -> Vec<PathBuf> {
        walk_files(&self.root.join(BUCKET))
    }

    fn cold_config(&self, huge: u64) -> ColdConfig {
        let mut c = ColdConfig::new(ColdBackend::S3 {
            bucket: BUCKET.into(),
            endpoint: Some(format!("http://{}", self.addr)),
            region: "us-east-1".into(),
            access_key_id: Some(ACCESS_KEY.into()),
            secret_access_key: Some(SECRET_KEY.into()),
            path_style: true,
        });
        c.prefix = "sy".into();
        c.huge_partition_threshold = ByteSize::b(huge);
        c.retries = 1;
        c.io_timeout = Duration::from_secs(10);
        c
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

async fn bind(addr: SocketAddr) -> TcpListener {
    // Rebinding a port just closed can take a moment.
    for _ in 0..100 {
        match TcpListener::bind(addr).await {
            Ok(l) => return l,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("bind {addr}: {e}"),
        }
    }
    panic!("{addr} stayed in use");
}

fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    entries
        .flatten()
        .flat_map(|e| {
            let p = e.path();
            if p.is_dir() {
                walk_files(&p)
            } else {
                vec![p]
            }
        })
        .collect()
}

fn with_s3(mut c: StoreConfig, cold: ColdConfig) -> StoreConfig {
    c.cold = Some(cold);
    c
}

fn bytes_of(blocks: &[switchyard_storage::Block]) -> Vec<u8> {
    blocks.iter().flat_map(|b| b.data.to_vec()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_partitions_continue_on_s3_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let s3 = S3Server::start(&dir.path().join("s3")).await;
    let mut cold = s3.cold_config(5_000);
    // S3's smallest part: a 18 MiB segment is a 4-part multipart upload.
    cold.upload_part_size = ByteSize::mib(5);
    let mut c = with_s3(config(dir.path(), 1, 64 << 20), cold);
    c.memory.single_buffer_threshold = ByteSize::mib(60);
    let store = Store::open(c).await.unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    let mut blocks: Vec<_> = (0..12).map(|i| block(i, 0, 1000)).collect();
    for chunk in blocks.chunks(3) {
        store.append(&key, chunk.to_vec(), None).await.unwrap();
        store.flush_shuffle("a", 0).await.unwrap();
    }
    let stats = store.partition_stats(&key).unwrap();
    assert_eq!(
        (stats.disk_bytes, stats.cold_bytes),
        (6000, 6000),
        "the first 5000+ bytes on disk, then S3"
    );
    assert_eq!(s3.bucket_files().len(), 4, "two cold flushes, data + index");
    assert_eq!(
        s3.requests(|r| r.contains("uploadId=")),
        0,
        "small: one PUT"
    );

    // One large flush: a multipart upload, read back byte for byte.
    let big: Vec<_> = (12..18).map(|i| block(i, 1, 3 << 20)).collect();
    store.append(&key, big.clone(), None).await.unwrap();
    store.flush_shuffle("a", 0).await.unwrap();
    blocks.extend(big);
    let parts = s3.requests(|r| r.starts_with("PUT ") && r.contains("partNumber="));
    assert_eq!(parts, 4, "18 MiB in 5 MiB parts");
    assert_eq!(
        s3.requests(|r| r.starts_with("POST ") && r.contains("uploadId=")),
        1,
        "one CompleteMultipartUpload"
    );
    let stats = store.partition_stats(&key).unwrap();
    assert_eq!(stats.cold_bytes, 6000 + (18 << 20));
    assert_eq!(stats.memory_bytes, 0);

    let got = read_all(&store, &key).await;
    assert_same(&got, &blocks);
    let ids: Vec<i64> = got.iter().map(|b| b.meta.block_id).collect();
    assert_eq!(ids, (0..18).collect::<Vec<_>>(), "order across tiers");
    let expected = bytes_of(&blocks);
    // Reads spanning disk/S3 and S3/S3 segment boundaries.
    for (at, len) in [(5500, 1000), (11_000, 2 << 20), (5 << 20, 7 << 20)] {
        let got = store.read_data(&key, at, len).await.unwrap();
        assert!(
            got[..] == expected[at as usize..(at + len) as usize],
            "bytes [{at}, +{len})"
        );
    }
    let objects = store.cold_objects("a").await.unwrap();
    assert_eq!(objects.len(), 6, "{objects:?}");
    let on_disk = s3.bucket_files();
    assert_eq!(on_disk.len(), 6);
    let sizes: u64 = on_disk
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "data"))
        .map(|p| p.metadata().unwrap().len())
        .sum();
    assert_eq!(sizes, 6000 + (18 << 20));

    store.remove_app("a").await.unwrap();
    assert!(s3.bucket_files().is_empty(), "{:?}", s3.bucket_files());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disks_spill_to_s3_and_removal_deletes_the_objects() {
    let dir = tempfile::tempdir().unwrap();
    let s3 = S3Server::start(&dir.path().join("s3")).await;
    let mut c = with_s3(config(dir.path(), 2, 1 << 20), s3.cold_config(1 << 40));
    // No filesystem has this much free: both disks start Full.
    c.disks.min_free = ByteSize::b(u64::MAX);
    let store = Store::open(c).await.unwrap();
    store.register_app("a");
    let mut all = Vec::new();
    for shuffle in 0..2 {
        let key = PartitionKey::new("a", shuffle, 0);
        let blocks: Vec<_> = (0..10)
            .map(|i| block(shuffle as i64 * 100 + i, 0, 1000))
            .collect();
        for half in blocks.chunks(5) {
            append_retry(&store, &key, half.to_vec()).await;
            store.flush_shuffle("a", shuffle).await.unwrap();
        }
        let stats = store.partition_stats(&key).unwrap();
        assert_eq!((stats.disk_bytes, stats.cold_bytes), (0, 10_000));
        assert_same(&read_all(&store, &key).await, &blocks);
        all.push((key, blocks));
    }
    let files = s3.bucket_files();
    assert_eq!(files.len(), 8, "2 shuffles x 2 flushes x (data, index)");
    assert!(files
        .iter()
        .all(|p| p.starts_with(s3.root.join(BUCKET).join("sy/a"))));

    store.remove_shuffle("a", 0).await.unwrap();
    let left = store.cold_objects("a").await.unwrap();
    assert_eq!(left.len(), 4, "{left:?}");
    assert!(left.iter().all(|p| p.starts_with("sy/a/1/")), "{left:?}");
    assert_eq!(s3.bucket_files().len(), 4);
    assert_same(&read_all(&store, &all[1].0).await, &all[1].1);

    store.remove_app("a").await.unwrap();
    assert!(s3.bucket_files().is_empty(), "{:?}", s3.bucket_files());
    assert!(s3.requests(|r| r.starts_with("DELETE ")) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_applications_leave_nothing_on_s3() {
    let dir = tempfile::tempdir().unwrap();
    let s3 = S3Server::start(&dir.path().join("s3")).await;
    let mut c = with_s3(config(dir.path(), 0, 1 << 20), s3.cold_config(1 << 40));
    c.apps.expiry = Duration::from_millis(600);
    c.apps.expiry_check_interval = Duration::from_millis(50);
    let store = Store::open(c).await.unwrap();
    store.register_app("gone");
    let key = PartitionKey::new("gone", 3, 1);
    let blocks: Vec<_> = (0..4).map(|i| block(i, 0, 2000)).collect();
    store.append(&key, blocks.clone(), None).await.unwrap();
    store.flush_shuffle("gone", 3).await.unwrap();
    assert_eq!(s3.bucket_files().len(), 2);
    assert_same(&read_all(&store, &key).await, &blocks);
    // No heartbeat from here on.
    wait_until("expiry", || !store.has_app("gone")).await;
    for _ in 0..100 {
        if s3.bucket_files().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(s3.bucket_files().is_empty(), "{:?}", s3.bucket_files());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_outage_keeps_acknowledged_blocks_until_flushes_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let mut s3 = S3Server::start(&dir.path().join("s3")).await;
    // No disks: S3 is the only tier.
    let c = with_s3(config(dir.path(), 0, 1 << 20), s3.cold_config(1 << 40));
    let store = Store::open(c).await.unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    let blocks: Vec<_> = (0..10).map(|i| block(i, 0, 1000)).collect();
    store
        .append(&key, blocks[..5].to_vec(), None)
        .await
        .unwrap();
    store.flush_shuffle("a", 0).await.unwrap();
    assert_same(&read_all(&store, &key).await, &blocks[..5]);

    s3.stop().await;
    // Acknowledged while S3 is down.
    store
        .append(&key, blocks[5..].to_vec(), None)
        .await
        .unwrap();
    let flusher = {
        let store = store.clone();
        tokio::spawn(async move { store.flush_shuffle("a", 0).await })
    };
    // Each attempt fails after OpenDAL's own retry; the store tries again.
    for _ in 0..300 {
        if store.status().cold.unwrap().write_errors >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(store.status().cold.unwrap().write_errors >= 2);
    assert!(!flusher.is_finished(), "the flush waits for S3");
    let stats = store.partition_stats(&key).unwrap();
    assert_eq!((stats.memory_bytes, stats.cold_bytes), (5000, 5000));
    // The unflushed blocks are readable from memory...
    let memory = store
        .read_memory(&key, None, u64::MAX, &|_| true)
        .unwrap()
        .blocks;
    assert_same(&memory, &blocks[5..]);
    // ...and the S3 part, read before the outage, from the caches.
    assert_same(&read_all(&store, &key).await, &blocks);
    assert_eq!(s3.bucket_files().len(), 2, "no partial objects");

    s3.restart().await;
    tokio::time::timeout(Duration::from_secs(60), flusher)
        .await
        .expect("the flush completes once S3 is back")
        .unwrap()
        .unwrap();
    assert_eq!(store.budget().used(), 0);
    let stats = store.partition_stats(&key).unwrap();
    assert_eq!((stats.memory_bytes, stats.cold_bytes), (0, 10_000));
    assert_same(&read_all(&store, &key).await, &blocks);
    assert_eq!(s3.bucket_files().len(), 4);
    store.remove_app("a").await.unwrap();
    assert!(s3.bucket_files().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_reads_of_an_s3_segment_are_served_by_read_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let s3 = S3Server::start(&dir.path().join("s3")).await;
    let mut cold = s3.cold_config(1 << 40);
    cold.readahead = ByteSize::kib(256);
    let c = with_s3(config(dir.path(), 0, 8 << 20), cold);
    let store = Store::open(c).await.unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    let blocks: Vec<_> = (0..64).map(|i| block(i, 0, 16 << 10)).collect();
    store.append(&key, blocks.clone(), None).await.unwrap();
    store.flush_shuffle("a", 0).await.unwrap();
    let expected = bytes_of(&blocks);
    let gets = || s3.requests(|r| r.starts_with("GET ") && r.contains(".data"));
    assert_eq!(gets(), 0);
    // A reducer's sequential reads, 16 KiB at a time.
    let mut at = 0;
    while at < expected.len() {
        let got = store.read_data(&key, at as u64, 16 << 10).await.unwrap();
        assert!(got[..] == expected[at..at + (16 << 10)]);
        at += 16 << 10;
    }
    assert_eq!(gets(), 4, "1 MiB in 256 KiB windows: 4 requests, not 64");
    let cold = store.status().cold.unwrap();
    assert!(cold.read_cache_hits >= 56, "{cold:?}");
    assert_eq!(cold.read_bytes, 1 << 20, "each byte fetched once");
}
