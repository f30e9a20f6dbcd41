//! Simulated drivers of both protocols against the real coordinators.
//!
//! A population of applications, half Celeborn and half Uniffle, each
//! living `app_life` and then replaced by a new one (so applications are
//! registered and end at the rate the population and the lifetime give):
//! Celeborn drivers heartbeat their master (`HeartbeatFromApplication`, the
//! reply asked for, as a LifecycleManager does) and end with
//! `ApplicationLost`; Uniffle drivers send `registerApplicationInfo` and
//! `appHeartbeat` to every coordinator, as the Java client does. Shuffles
//! come at `shuffle_rate` per second, each for a random live application:
//! `RequestSlots` or `getShuffleAssignments` with a partition count drawn
//! from `sizes` (small ones more often), timed per size; after
//! `shuffle_life` a Celeborn shuffle is unregistered. Both clients ask the
//! first coordinator in their list and move down it on a failure, so the
//! first coordinator takes the placement load, as in a real fleet.
//!
//! Heartbeats, registrations and unregistrations go over pooled
//! connections (a few per coordinator) rather than one per driver: the
//! coordinators' cost per call is what is measured there. A placement goes
//! over a connection no other call uses meanwhile and is timed on threads
//! of its own, as a real driver on its own machine asks
//! ([`PlacementConnections`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use rand::Rng;
use switchyard_celeborn::proto::*;
use switchyard_celeborn::rpc::endpoint;
use switchyard_celeborn::TransportMessage;
use switchyard_clients::celeborn::{decode, Connection};
use switchyard_uniffle::proto::coordinator_server_client::CoordinatorServerClient;
use switchyard_uniffle::proto::{
    AppHeartBeatRequest, ApplicationInfoRequest, GetShuffleServerRequest, StatusCode,
};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::coordinators::{self, COUNT};
use super::workers::SimFleet;

/// The live servers a Uniffle coordinator lists (`getShuffleServerList`):
/// what it may place on.
pub async fn server_list(
    mut client: CoordinatorServerClient<Channel>,
) -> anyhow::Result<Vec<String>> {
    let r = client.get_shuffle_server_list(()).await?.into_inner();
    Ok(r.servers.into_iter().map(|s| s.id).collect())
}

/// Connections per coordinator and protocol.
const POOL: usize = 4;
/// Shuffle requests in flight at most; past it a request is counted as
/// skipped (the coordinators fell behind the offered rate).
const IN_FLIGHT: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Protocol {
    Celeborn,
    Uniffle,
}

#[derive(Debug, Clone)]
pub struct DriverSettings {
    pub apps: usize,
    pub app_heartbeat: Duration,
    pub app_life: Duration,
    pub shuffle_rate: f64,
    pub shuffle_life: Duration,
    pub sizes: Vec<i32>,
}

/// The pools to every coordinator.
pub struct Clients {
    masters: Vec<Vec<Connection>>,
    uniffle: Vec<CoordinatorServerClient<Channel>>,
}

impl Clients {
    pub async fn connect() -> anyhow::Result<Clients> {
        let mut masters = Vec::new();
        let mut uniffle = Vec::new();
        for i in 1..=COUNT {
            let mut pool = Vec::new();
            for _ in 0..POOL {
                pool.push(connect_master(i).await?);
            }
            masters.push(pool);
            uniffle.push(uniffle_client(i)?);
        }
        Ok(Clients { masters, uniffle })
    }

    /// A pooled connection to master `i` (1-based).
    pub fn master(&self, i: usize) -> &Connection {
        let pool = &self.masters[i - 1];
        &pool[rand::rng().random_range(0..pool.len())]
    }

    pub fn uniffle(&self, i: usize) -> CoordinatorServerClient<Channel> {
        self.uniffle[i - 1].clone()
    }

    /// Replaces the pool of master `i` (after that coordinator restarted).
    pub async fn reconnect(&mut self, i: usize) -> anyhow::Result<()> {
        let mut pool = Vec::new();
        for _ in 0..POOL {
            pool.push(connect_master(i).await?);
        }
        self.masters[i - 1] = pool;
        Ok(())
    }
}

pub async fn connect_master(i: usize) -> anyhow::Result<Connection> {
    let addr = coordinators::master(i).parse().context("master address")?;
    Ok(Connection::connect(addr).await?)
}

/// A lazily connecting gRPC client; a 200k-partition reply is large.
pub fn uniffle_client(i: usize) -> anyhow::Result<CoordinatorServerClient<Channel>> {
    let channel = uniffle_endpoint(i)?.connect_lazy();
    Ok(CoordinatorServerClient::new(channel).max_decoding_message_size(1 << 30))
}

/// A gRPC client connected now, as a driver's is before it asks.
async fn uniffle_connected(i: usize) -> anyhow::Result<CoordinatorServerClient<Channel>> {
    let channel = uniffle_endpoint(i)?.connect().await?;
    Ok(CoordinatorServerClient::new(channel).max_decoding_message_size(1 << 30))
}

fn uniffle_endpoint(i: usize) -> anyhow::Result<tonic::transport::Endpoint> {
    Ok(
        tonic::transport::Endpoint::from_shared(format!("http://{}", coordinators::uniffle(i)))?
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .tcp_nodelay(true),
    )
}

/// What a placement named: partitions per worker (Celeborn unique id or
/// Uniffle server id).
pub type Placement = HashMap<String, u64>;

/// RequestSlots on master `i`: the time to the reply, and the reply's
/// primaries per worker.
pub async fn request_slots(
    master: &Connection,
    app: &str,
    shuffle: i32,
    partitions: i32,
) -> anyhow::Result<(Duration, Placement)> {
    let ask = PbRequestSlots {
        application_id: app.to_string(),
        shuffle_id: shuffle,
        partition_id_list: (0..partitions).collect(),
        // As every 0.5+ LifecycleManager asks.
        packed: true,
        available_storage_types: 2,
        max_workers: 10_000,
        user_identifier: Some(PbUserIdentifier {
            tenant_id: "default".into(),
            name: "fleet-scale".into(),
        }),
        hostname: "127.0.6.100".into(),
        request_id: format!("{app}#{shuffle}"),
        ..Default::default()
    };
    let started = Instant::now();
    let reply = master
        .ask(
            endpoint::MASTER,
            TransportMessage::new(MessageType::RequestSlots, &ask),
        )
        .await?;
    let took = started.elapsed();
    // Decoding 10^5 locations takes milliseconds: off the runtime, so that
    // it does not delay the timing of the other drivers' calls.
    let slots: PbRequestSlotsResponse = tokio::task::spawn_blocking(move || decode(&reply))
        .await
        .context("decoding the slot reply")??;
    ensure!(slots.status == 0, "RequestSlots status {}", slots.status);
    ensure!(
        slots.worker_resource.is_empty(),
        "a packed ask answered in the plain form"
    );
    let placed = slots
        .packed_worker_resource
        .into_iter()
        .map(|(id, r)| (id, packed_primaries(&r)))
        .collect();
    Ok((took, placed))
}

/// The primaries a packed worker resource gives its worker: among the
/// input entries (the rest are their peers elsewhere), those in mode 0.
fn packed_primaries(r: &PbPackedWorkerResource) -> u64 {
    let Some(pair) = &r.location_pairs else {
        return 0;
    };
    let modes = pair.locations.as_ref().map_or(&[][..], |l| &l.modes[..]);
    let inputs = (pair.input_location_size.max(0) as usize).min(modes.len());
    modes[..inputs].iter().filter(|&&m| m == 0).count() as u64
}

/// getShuffleAssignments on a Uniffle coordinator, `servers` servers at
/// most (-1: the coordinator's default, 9): the time to the reply and the
/// partitions per server.
pub async fn assignments(
    mut client: CoordinatorServerClient<Channel>,
    app: &str,
    shuffle: i32,
    partitions: i32,
    servers: i32,
) -> anyhow::Result<(Duration, Placement)> {
    let started = Instant::now();
    let r = client
        .get_shuffle_assignments(GetShuffleServerRequest {
            application_id: app.into(),
            shuffle_id: shuffle,
            partition_num: partitions,
            partition_num_per_range: 1,
            data_replica: 1,
            require_tags: vec!["ss_v5".into(), "GRPC_NETTY".into()],
            assignment_shuffle_server_number: servers,
            ..Default::default()
        })
        .await?
        .into_inner();
    let took = started.elapsed();
    ensure!(
        r.status == StatusCode::Success as i32,
        "getShuffleAssignments: {} {}",
        r.status,
        r.ret_msg
    );
    let mut placed = Placement::new();
    for a in r.assignments {
        let n = (a.end_partition - a.start_partition + 1) as u64;
        for s in a.server {
            *placed.entry(s.id).or_default() += n;
        }
    }
    Ok((took, placed))
}

async fn celeborn_call<M: prost::Message>(
    master: &Connection,
    kind: MessageType,
    message: &M,
) -> anyhow::Result<TransportMessage> {
    Ok(master
        .ask(endpoint::MASTER, TransportMessage::new(kind, message))
        .await?)
}

/// Latencies per protocol and shuffle size, with failures.
#[derive(Default)]
pub struct Tally {
    latency: Mutex<HashMap<(Protocol, i32), Histogram<u64>>>,
    failures: Mutex<HashMap<(Protocol, i32), u64>>,
    /// The first failure of each kind, for the report.
    first_error: Mutex<HashMap<(Protocol, i32), String>>,
    /// Partitions each worker was given, per protocol, over the run.
    given: Mutex<HashMap<Protocol, Vec<u64>>>,
    pub skipped: AtomicU64,
    pub app_calls: AtomicU64,
    pub app_call_failures: AtomicU64,
    /// The first driver call that failed, for the report.
    pub first_app_call_error: Mutex<Option<String>>,
    pub apps_started: AtomicU64,
}

/// One row of the latency table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LatencyRow {
    pub protocol: Protocol,
    pub partitions: i32,
    pub count: u64,
    pub failures: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub first_error: Option<String>,
}

impl Tally {
    fn app_call_failed(&self, error: &dyn std::fmt::Display) {
        self.app_call_failures.fetch_add(1, Ordering::Relaxed);
        self.first_app_call_error
            .lock()
            .get_or_insert_with(|| error.to_string());
    }

    fn record(&self, protocol: Protocol, size: i32, took: Duration) {
        self.latency
            .lock()
            .entry((protocol, size))
            .or_insert_with(|| Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds"))
            .saturating_record(took.as_micros() as u64);
    }

    fn failed(&self, protocol: Protocol, size: i32, error: &anyhow::Error) {
        *self.failures.lock().entry((protocol, size)).or_default() += 1;
        self.first_error
            .lock()
            .entry((protocol, size))
            .or_insert_with(|| format!("{error:#}"));
    }

    fn given(&self, protocol: Protocol, workers: usize, index: usize, partitions: u64) {
        let mut g = self.given.lock();
        let v = g.entry(protocol).or_insert_with(|| vec![0; workers]);
        v[index] += partitions;
    }

    pub fn rows(&self) -> Vec<LatencyRow> {
        let latency = self.latency.lock();
        let failures = self.failures.lock();
        let errors = self.first_error.lock();
        let mut keys: Vec<_> = latency.keys().chain(failures.keys()).copied().collect();
        keys.sort();
        keys.dedup();
        keys.into_iter()
            .map(|k| {
                let h = latency.get(&k);
                let q = |q: f64| h.map_or(0.0, |h| h.value_at_quantile(q) as f64 / 1000.0);
                LatencyRow {
                    protocol: k.0,
                    partitions: k.1,
                    count: h.map_or(0, Histogram::len),
                    failures: failures.get(&k).copied().unwrap_or(0),
                    p50_ms: q(0.5),
                    p99_ms: q(0.99),
                    max_ms: h.map_or(0.0, |h| h.max() as f64 / 1000.0),
                    first_error: errors.get(&k).cloned(),
                }
            })
            .collect()
    }

    /// Max over mean of the partitions each worker was given (every
    /// worker counts, those given none too); 0 without placements.
    pub fn balance(&self, protocol: Protocol) -> f64 {
        let g = self.given.lock();
        let Some(v) = g.get(&protocol) else {
            return 0.0;
        };
        let total: u64 = v.iter().sum();
        if total == 0 {
            return 0.0;
        }
        let mean = total as f64 / v.len() as f64;
        *v.iter().max().unwrap_or(&0) as f64 / mean
    }
}

/// One application slot of the population: the application that runs in
/// it now.
#[derive(Default)]
struct AppSlot {
    app: String,
    next_shuffle: i32,
}

struct Ctx {
    settings: DriverSettings,
    clients: tokio::sync::RwLock<Arc<Clients>>,
    fleet: Arc<SimFleet>,
    tally: Arc<Tally>,
    slots: Vec<Mutex<AppSlot>>,
    placing: PlacementConnections,
    cancel: CancellationToken,
}

pub struct Drivers {
    ctx: Arc<Ctx>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    _placements: PlacementRuntime,
}

/// The threads placements are asked and timed on, apart from the
/// heartbeats of the thousand simulated workers and drivers: in a real
/// fleet the driver that asks runs on its own machine, and a burst of
/// other simulated calls must not delay when its reply is seen.
struct PlacementRuntime(Option<tokio::runtime::Runtime>);

impl PlacementRuntime {
    fn new() -> anyhow::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("placements")
            .enable_all()
            .build()
            .context("the placements' runtime")?;
        Ok(PlacementRuntime(Some(rt)))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("running until dropped").handle()
    }
}

impl Drop for PlacementRuntime {
    /// Dropped from async code: a runtime may not block there.
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

fn protocol_of(slot: usize) -> Protocol {
    if slot.is_multiple_of(2) {
        Protocol::Celeborn
    } else {
        Protocol::Uniffle
    }
}

impl Drivers {
    /// Starts the population (spread over one heartbeat interval) and the
    /// shuffle stream, whose placements run on their own threads.
    pub fn start(
        settings: DriverSettings,
        clients: Arc<Clients>,
        fleet: Arc<SimFleet>,
        tally: Arc<Tally>,
    ) -> anyhow::Result<Drivers> {
        let placements = PlacementRuntime::new()?;
        let ctx = Arc::new(Ctx {
            slots: (0..settings.apps).map(|_| Mutex::default()).collect(),
            settings,
            clients: tokio::sync::RwLock::new(clients),
            fleet,
            tally,
            placing: PlacementConnections::default(),
            cancel: CancellationToken::new(),
        });
        let mut tasks: Vec<_> = (0..ctx.settings.apps)
            .map(|slot| tokio::spawn(app_slot(ctx.clone(), slot)))
            .collect();
        tasks.push(placements.handle().spawn(shuffle_stream(ctx.clone())));
        Ok(Drivers {
            ctx,
            tasks,
            _placements: placements,
        })
    }

    /// New connections to master `i` for every later call.
    pub async fn reconnect(&self, i: usize) -> anyhow::Result<()> {
        let mut clients = self.ctx.clients.write().await;
        let mut fresh = Clients {
            masters: clients.masters.iter().map(|_| Vec::new()).collect(),
            uniffle: clients.uniffle.clone(),
        };
        for j in 1..=COUNT {
            if j == i {
                fresh.reconnect(j).await?;
            } else {
                for _ in 0..POOL {
                    fresh.masters[j - 1].push(connect_master(j).await?);
                }
            }
        }
        *clients = Arc::new(fresh);
        Ok(())
    }

    /// Stops every driver where it is (no ApplicationLost: the books keep
    /// what they heard).
    pub async fn stop(self) {
        self.ctx.cancel.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Random in `[d/2, 3d/2)`: drivers do not move in lockstep.
fn jitter(d: Duration) -> Duration {
    d.mul_f64(rand::rng().random_range(0.5..1.5))
}

/// Runs applications in one slot, one after the other.
async fn app_slot(ctx: Arc<Ctx>, slot: usize) {
    let protocol = protocol_of(slot);
    // Spread the population's start over one heartbeat interval.
    let offset = ctx
        .settings
        .app_heartbeat
        .mul_f64(slot as f64 / ctx.settings.apps.max(1) as f64);
    tokio::select! {
        _ = ctx.cancel.cancelled() => return,
        _ = tokio::time::sleep(offset) => {}
    }
    for generation in 0.. {
        let app = format!("fleet-{}-{slot}-{generation}", protocol_tag(protocol));
        *ctx.slots[slot].lock() = AppSlot {
            app: app.clone(),
            next_shuffle: 0,
        };
        ctx.tally.apps_started.fetch_add(1, Ordering::Relaxed);
        // The first generation lives a random part of its life, so that the
        // population turns over steadily from the start.
        let life = if generation == 0 {
            ctx.settings
                .app_life
                .mul_f64(rand::rng().random_range(0.0..1.0))
        } else {
            jitter(ctx.settings.app_life)
        };
        let ends = Instant::now() + life;
        register(&ctx, protocol, &app).await;
        while Instant::now() < ends {
            tokio::select! {
                _ = ctx.cancel.cancelled() => return,
                _ = tokio::time::sleep(jitter(ctx.settings.app_heartbeat)) => {}
            }
            heartbeat(&ctx, protocol, &app).await;
        }
        if protocol == Protocol::Celeborn {
            let lost = PbApplicationLost {
                app_id: app.clone(),
                request_id: String::new(),
            };
            app_call(&ctx, |c| {
                let lost = lost.clone();
                async move { celeborn_call(c.master(1), MessageType::ApplicationLost, &lost).await }
            })
            .await;
        }
    }
}

fn protocol_tag(p: Protocol) -> &'static str {
    match p {
        Protocol::Celeborn => "celeborn",
        Protocol::Uniffle => "uniffle",
    }
}

/// One driver call against the first coordinator, then the next ones on a
/// failure (what both clients do); counted.
async fn app_call<F, Fut, T>(ctx: &Ctx, call: F)
where
    F: Fn(Arc<Clients>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let clients = ctx.clients.read().await.clone();
    ctx.tally.app_calls.fetch_add(1, Ordering::Relaxed);
    if let Err(e) = call(clients).await {
        ctx.tally.app_call_failed(&e);
    }
}

async fn register(ctx: &Ctx, protocol: Protocol, app: &str) {
    match protocol {
        Protocol::Celeborn => heartbeat(ctx, protocol, app).await,
        Protocol::Uniffle => {
            let clients = ctx.clients.read().await.clone();
            for i in 1..=COUNT {
                let request = ApplicationInfoRequest {
                    app_id: app.into(),
                    user: "fleet-scale".into(),
                    version: Some("0.10.0".into()),
                    git_commit_id: None,
                };
                let mut c = clients.uniffle(i);
                ctx.tally.app_calls.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = c.register_application_info(request).await {
                    ctx.tally.app_call_failed(&format!("coordinator {i}: {e}"));
                }
            }
        }
    }
}

async fn heartbeat(ctx: &Ctx, protocol: Protocol, app: &str) {
    match protocol {
        Protocol::Celeborn => {
            let hb = PbHeartbeatFromApplication {
                app_id: app.to_string(),
                should_response: true,
                ..Default::default()
            };
            app_call(ctx, |c| {
                let hb = hb.clone();
                async move {
                    for i in 1..=COUNT {
                        let r =
                            celeborn_call(c.master(i), MessageType::HeartbeatFromApplication, &hb)
                                .await;
                        if r.is_ok() || i == COUNT {
                            return r;
                        }
                    }
                    unreachable!("the last master returns")
                }
            })
            .await;
        }
        Protocol::Uniffle => {
            // The Java client heartbeats every coordinator.
            let clients = ctx.clients.read().await.clone();
            for i in 1..=COUNT {
                let mut c = clients.uniffle(i);
                ctx.tally.app_calls.fetch_add(1, Ordering::Relaxed);
                let r = c
                    .app_heartbeat(AppHeartBeatRequest { app_id: app.into() })
                    .await;
                if let Err(e) = r {
                    ctx.tally.app_call_failed(&format!("coordinator {i}: {e}"));
                }
            }
        }
    }
}

/// A partition count from `sizes`, a size s drawn with weight 1/sqrt(s):
/// small shuffles are the common case, big ones still come often enough
/// for a p99.
fn draw_size(sizes: &[i32]) -> i32 {
    let weights: Vec<f64> = sizes.iter().map(|&s| 1.0 / (s as f64).sqrt()).collect();
    let mut x = rand::rng().random_range(0.0..weights.iter().sum::<f64>());
    for (s, w) in sizes.iter().zip(&weights) {
        if x < *w {
            return *s;
        }
        x -= w;
    }
    *sizes.last().expect("sizes is not empty")
}

async fn shuffle_stream(ctx: Arc<Ctx>) {
    let gate = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut tick = tokio::time::interval(Duration::from_secs_f64(
        1.0 / ctx.settings.shuffle_rate.max(0.001),
    ));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = ctx.cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Ok(permit) = gate.clone().try_acquire_owned() else {
            ctx.tally.skipped.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move { one_shuffle(&ctx, permit).await });
    }
}

/// Connections that placements are asked over, each used by one call at a
/// time as a driver uses its own, and kept open between calls as a driver
/// keeps its connection from registration on. A pooled connection shared
/// with other calls would make a reply queue behind theirs, which no real
/// driver sees; a fresh one per call would pay a cold socket's growth on
/// every 2 MB reply, which no real driver pays either.
#[derive(Default)]
struct PlacementConnections {
    masters: [Idle<Connection>; COUNT],
    uniffle: [Idle<CoordinatorServerClient<Channel>>; COUNT],
}

impl PlacementConnections {
    /// One placement on coordinator `i` (1-based); the connection goes
    /// back to the pool only when the call succeeded.
    async fn place_on(
        &self,
        i: usize,
        protocol: Protocol,
        app: &str,
        shuffle: i32,
        size: i32,
    ) -> anyhow::Result<(Duration, Placement)> {
        match protocol {
            Protocol::Celeborn => {
                let pool = &self.masters[i - 1];
                let master = pool.take(connect_master(i)).await?;
                let placed = request_slots(&master, app, shuffle, size).await?;
                pool.give_back(master);
                Ok(placed)
            }
            Protocol::Uniffle => {
                let pool = &self.uniffle[i - 1];
                let client = pool.take(uniffle_connected(i)).await?;
                let placed = assignments(client.clone(), app, shuffle, size, -1).await?;
                pool.give_back(client);
                Ok(placed)
            }
        }
    }
}

/// Idle connections to one coordinator.
struct Idle<C>(Mutex<Vec<C>>);

impl<C> Default for Idle<C> {
    fn default() -> Self {
        Idle(Mutex::new(Vec::new()))
    }
}

impl<C> Idle<C> {
    /// An idle connection, or a new one from `connect`.
    async fn take(
        &self,
        connect: impl std::future::Future<Output = anyhow::Result<C>>,
    ) -> anyhow::Result<C> {
        // Popped before awaiting: the lock is not held across a connect.
        let idle = self.0.lock().pop();
        match idle {
            Some(c) => Ok(c),
            None => connect.await,
        }
    }

    fn give_back(&self, c: C) {
        self.0.lock().push(c);
    }
}

/// One shuffle of a random live application: placement, timed; the
/// partitions go onto the simulated workers' load; after the shuffle's
/// life they leave (and a Celeborn driver unregisters it).
async fn one_shuffle(ctx: &Arc<Ctx>, permit: tokio::sync::OwnedSemaphorePermit) {
    let slot = rand::rng().random_range(0..ctx.slots.len());
    let protocol = protocol_of(slot);
    let (app, shuffle) = {
        let mut s = ctx.slots[slot].lock();
        if s.app.is_empty() {
            return;
        }
        s.next_shuffle += 1;
        (s.app.clone(), s.next_shuffle)
    };
    let size = draw_size(&ctx.settings.sizes);
    let mut outcome = Err(anyhow::anyhow!("no coordinator"));
    for i in 1..=COUNT {
        outcome = ctx.placing.place_on(i, protocol, &app, shuffle, size).await;
        if outcome.is_ok() {
            break;
        }
    }
    // In flight counts placement calls only, not the shuffle's life.
    drop(permit);
    let (took, placed) = match outcome {
        Ok(o) => o,
        Err(e) => {
            ctx.tally.failed(protocol, size, &e);
            return;
        }
    };
    ctx.tally.record(protocol, size, took);
    let celeborn_app = (protocol == Protocol::Celeborn).then_some(app.as_str());
    let mut on = Vec::new();
    for (id, n) in &placed {
        let worker = match protocol {
            Protocol::Celeborn => ctx.fleet.by_celeborn(id),
            Protocol::Uniffle => ctx.fleet.by_uniffle(id),
        };
        if let Some(w) = worker {
            w.place(celeborn_app, *n);
            ctx.tally
                .given(protocol, ctx.fleet.workers.len(), w.index, *n);
            on.push((w.clone(), *n));
        }
    }
    tokio::select! {
        _ = ctx.cancel.cancelled() => {}
        _ = tokio::time::sleep(jitter(ctx.settings.shuffle_life)) => {}
    }
    for (w, n) in on {
        w.release(celeborn_app, n);
    }
    if protocol == Protocol::Celeborn && !ctx.cancel.is_cancelled() {
        let unregister = PbUnregisterShuffle {
            app_id: app.clone(),
            shuffle_id: shuffle,
            request_id: String::new(),
        };
        app_call(ctx, |c| {
            let unregister = unregister.clone();
            async move {
                celeborn_call(c.master(1), MessageType::UnregisterShuffle, &unregister).await
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_shuffles_are_drawn_more_often_than_big_ones() {
        let sizes = [1_000, 100_000];
        let small = (0..10_000).filter(|_| draw_size(&sizes) == 1_000).count();
        // Weights 1/sqrt: 10 to 1.
        assert!((8_500..9_500).contains(&small), "{small}");
    }

    #[test]
    fn balance_is_max_over_mean_of_every_worker() {
        let t = Tally::default();
        t.given(Protocol::Celeborn, 4, 0, 30);
        t.given(Protocol::Celeborn, 4, 1, 10);
        // Mean 10 over 4 workers (two got none), max 30.
        assert_eq!(t.balance(Protocol::Celeborn), 3.0);
        assert_eq!(t.balance(Protocol::Uniffle), 0.0);
    }
}
