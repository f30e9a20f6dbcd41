//! The Uniffle coordinator: knows the shuffle servers from their heartbeats
//! and assigns partitions to them. Stateless beyond that, so several
//! coordinators can run side by side, as in Uniffle.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use tonic::{Request, Response, Status};

use crate::config::UniffleConfig;
use crate::proto::coordinator_server_server::CoordinatorServer;
use crate::proto::*;

/// Tag every 0.9/0.10 client requires of a server.
pub const VERSION_TAG: &str = "ss_v5";

struct Node {
    id: ShuffleServerId,
    tags: HashSet<String>,
    available_memory: i64,
    healthy: bool,
    last_seen: Instant,
    /// Partitions this coordinator assigned to the server lately, halved
    /// at each of its heartbeats: its reported memory does not show a
    /// shuffle's data until the data arrives, so without this every
    /// assignment between two heartbeats went to the same servers.
    recent: u64,
}

/// A live server as placement sees it.
struct Live {
    id: ShuffleServerId,
    tags: HashSet<String>,
    available_memory: i64,
    recent: u64,
}

impl Live {
    /// Free memory per partition lately given, as Uniffle's partition
    /// balance strategy weighs servers: higher goes first.
    fn score(&self) -> f64 {
        self.available_memory.max(0) as f64 / (1 + self.recent) as f64
    }
}

/// The gRPC metadata key that carries the registration secret.
pub const SECRET_HEADER: &str = "x-switchyard-cluster-secret";

/// Why a heartbeat was not taken.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("heartbeats of remote shuffle servers need the cluster's registration secret")]
    NoSecret,
    #[error("{0} is this coordinator's own shuffle server, which only it reports")]
    LocalId(String),
}

/// Shuffle servers this coordinator knows.
pub struct NodeRegistry {
    nodes: DashMap<String, Node>,
    timeout: Duration,
    /// This process's own shuffle server: only the in-process heartbeat
    /// updates it.
    local: parking_lot::RwLock<Option<String>>,
    /// When silent servers were last dropped: a walk of every server on
    /// every heartbeat made an interval's heartbeats cost servers squared.
    pruned: parking_lot::Mutex<Instant>,
}

impl NodeRegistry {
    pub fn new(timeout: Duration) -> Self {
        NodeRegistry {
            nodes: DashMap::new(),
            timeout,
            local: parking_lot::RwLock::new(None),
            pruned: parking_lot::Mutex::new(Instant::now()),
        }
    }

    /// Records this process's own shuffle server.
    pub fn upsert_local(
        &self,
        id: ShuffleServerId,
        tags: Vec<String>,
        available_memory: i64,
        healthy: bool,
    ) {
        *self.local.write() = Some(id.id.clone());
        self.upsert(id, tags, available_memory, healthy);
    }

    /// Records a remote server's heartbeat, unless it claims the local id.
    /// Servers silent for the node timeout are forgotten, so made-up ids do
    /// not pile up.
    pub fn upsert_remote(
        &self,
        id: ShuffleServerId,
        tags: Vec<String>,
        available_memory: i64,
        healthy: bool,
    ) -> Result<(), Refusal> {
        if self.local.read().as_deref() == Some(id.id.as_str()) {
            return Err(Refusal::LocalId(id.id));
        }
        self.prune();
        self.upsert(id, tags, available_memory, healthy);
        Ok(())
    }

    /// Forgets servers silent for the node timeout (the local one stays),
    /// at most once per timeout; [`NodeRegistry::live`] skips them meanwhile.
    fn prune(&self) {
        {
            let mut last = self.pruned.lock();
            if last.elapsed() < self.timeout {
                return;
            }
            *last = Instant::now();
        }
        let local = self.local.read().clone();
        self.nodes.retain(|k, n| {
            Some(k.as_str()) == local.as_deref() || n.last_seen.elapsed() < self.timeout
        });
    }

    fn upsert(&self, id: ShuffleServerId, tags: Vec<String>, available_memory: i64, healthy: bool) {
        let recent = self.nodes.get(&id.id).map_or(0, |n| n.recent / 2);
        self.nodes.insert(
            id.id.clone(),
            Node {
                id,
                tags: tags.into_iter().collect(),
                available_memory,
                healthy,
                last_seen: Instant::now(),
                recent,
            },
        );
    }

    fn live(&self) -> Vec<Live> {
        let mut out: Vec<_> = self
            .nodes
            .iter()
            .filter(|n| n.healthy && n.last_seen.elapsed() < self.timeout)
            .map(|n| Live {
                id: n.id.clone(),
                tags: n.tags.clone(),
                available_memory: n.available_memory,
                recent: n.recent,
            })
            .collect();
        out.sort_by(|a, b| a.id.id.cmp(&b.id.id));
        out
    }

    /// Counts what an assignment gave each server.
    fn assigned(&self, assignments: &[PartitionRangeAssignment]) {
        for a in assignments {
            let n = (a.end_partition - a.start_partition + 1).max(0) as u64;
            for s in &a.server {
                if let Some(mut node) = self.nodes.get_mut(&s.id) {
                    node.recent = node.recent.saturating_add(n);
                }
            }
        }
    }

    /// Live servers, counted without copying them.
    pub fn len(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.healthy && n.last_seen.elapsed() < self.timeout)
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub struct CoordinatorService {
    nodes: Arc<NodeRegistry>,
    /// Until then, assignments and access are refused (warm-up).
    warm_at: Instant,
    config: UniffleConfig,
    /// This node's store, told what clients say of themselves.
    store: Option<Arc<switchyard_storage::Store>>,
}

impl CoordinatorService {
    pub fn new(
        nodes: Arc<NodeRegistry>,
        config: UniffleConfig,
        store: Option<Arc<switchyard_storage::Store>>,
    ) -> Self {
        CoordinatorService {
            nodes,
            warm_at: Instant::now() + config.warmup,
            config,
            store,
        }
    }

    /// Whether a heartbeat carries the configured registration secret (never,
    /// when none is configured), compared in constant time.
    fn secret_matches(&self, metadata: &tonic::metadata::MetadataMap) -> bool {
        let Some(secret) = &self.config.registration_secret else {
            return false;
        };
        let Some(sent) = metadata.get(SECRET_HEADER) else {
            return false;
        };
        secret.matches(sent.as_bytes())
    }

    fn client_conf(&self) -> FetchClientConfResponse {
        FetchClientConfResponse {
            status: StatusCode::Success as i32,
            ret_msg: String::new(),
            client_conf: self
                .config
                .client_conf
                .iter()
                .map(|(k, v)| ClientConfItem {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
        }
    }
}

/// Splits partitions `0..n` into contiguous ranges over the chosen servers,
/// each range on `replicas` servers. Every partition is covered (the client
/// fails on a missing one).
pub fn assign(
    partitions: i32,
    servers: &[ShuffleServerId],
    replicas: usize,
) -> Vec<PartitionRangeAssignment> {
    if partitions <= 0 || servers.is_empty() {
        return Vec::new();
    }
    let groups = servers.len().min(partitions as usize);
    let per = partitions as usize / groups;
    let extra = partitions as usize % groups;
    let mut out = Vec::with_capacity(groups);
    let mut start = 0usize;
    for g in 0..groups {
        let len = per + usize::from(g < extra);
        let server = (0..replicas.max(1))
            .map(|r| servers[(g + r) % servers.len()].clone())
            .collect();
        out.push(PartitionRangeAssignment {
            start_partition: start as i32,
            end_partition: (start + len - 1) as i32,
            server,
        });
        start += len;
    }
    out
}

fn success<T>(f: impl FnOnce(i32, String) -> T) -> Result<Response<T>, Status> {
    Ok(Response::new(f(StatusCode::Success as i32, String::new())))
}

#[tonic::async_trait]
impl CoordinatorServer for CoordinatorService {
    async fn get_shuffle_server_list(
        &self,
        _request: Request<()>,
    ) -> Result<Response<GetShuffleServerListResponse>, Status> {
        Ok(Response::new(GetShuffleServerListResponse {
            servers: self.nodes.live().into_iter().map(|n| n.id).collect(),
        }))
    }

    async fn get_shuffle_server_num(
        &self,
        _request: Request<()>,
    ) -> Result<Response<GetShuffleServerNumResponse>, Status> {
        Ok(Response::new(GetShuffleServerNumResponse {
            num: self.nodes.len() as i32,
        }))
    }

    async fn get_shuffle_assignments(
        &self,
        request: Request<GetShuffleServerRequest>,
    ) -> Result<Response<GetShuffleAssignmentsResponse>, Status> {
        let r = request.into_inner();
        if Instant::now() < self.warm_at {
            return Ok(Response::new(GetShuffleAssignmentsResponse {
                status: StatusCode::InternalError as i32,
                assignments: Vec::new(),
                ret_msg: "this coordinator is warming up (waiting for shuffle server heartbeats); try another".into(),
            }));
        }
        let required: HashSet<&str> = r.require_tags.iter().map(String::as_str).collect();
        let faulty: HashSet<&str> = r.faulty_server_ids.iter().map(String::as_str).collect();
        let mut candidates: Vec<Live> = self
            .nodes
            .live()
            .into_iter()
            .filter(|n| {
                required.iter().all(|t| n.tags.contains(*t)) && !faulty.contains(n.id.id.as_str())
            })
            .collect();
        let replicas = r.data_replica.max(1) as usize;
        if candidates.len() < replicas {
            tracing::warn!(app = %r.application_id, shuffle = r.shuffle_id, tags = ?r.require_tags, found = candidates.len(), "not enough shuffle servers for assignment");
            return Ok(Response::new(GetShuffleAssignmentsResponse {
                status: StatusCode::InternalError as i32,
                assignments: Vec::new(),
                ret_msg: format!(
                    "There isn't enough shuffle servers: need {replicas} with tags {:?}, have {}",
                    r.require_tags,
                    candidates.len()
                ),
            }));
        }
        // Most free memory per partition lately given first (equal: most
        // free memory, then by id).
        candidates.sort_by(|a, b| {
            b.score()
                .total_cmp(&a.score())
                .then(b.available_memory.cmp(&a.available_memory))
        });
        let limit = match r.assignment_shuffle_server_number {
            n if n > 0 => (n as usize).min(self.config.max_servers_per_shuffle),
            _ => self.config.max_servers_per_shuffle,
        }
        .max(replicas);
        let servers: Vec<ShuffleServerId> =
            candidates.into_iter().take(limit).map(|c| c.id).collect();
        let assignments = assign(r.partition_num, &servers, replicas);
        self.nodes.assigned(&assignments);
        tracing::info!(app = %r.application_id, shuffle = r.shuffle_id, partitions = r.partition_num, servers = servers.len(), "assigned shuffle");
        Ok(Response::new(GetShuffleAssignmentsResponse {
            status: StatusCode::Success as i32,
            assignments,
            ret_msg: String::new(),
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<ShuffleServerHeartBeatRequest>,
    ) -> Result<Response<ShuffleServerHeartBeatResponse>, Status> {
        let metadata = request.metadata().clone();
        let r = request.into_inner();
        let Some(id) = r.server_id else {
            return Ok(Response::new(ShuffleServerHeartBeatResponse {
                status: StatusCode::InvalidRequest as i32,
                ret_msg: "heartbeat without serverId".into(),
            }));
        };
        // Absent status means ACTIVE; the legacy isHealthy flag overrides it.
        let healthy = match r.is_healthy {
            Some(h) => h,
            None => r.status.unwrap_or(0) == ServerStatus::Active as i32,
        };
        let taken = if self.secret_matches(&metadata) {
            self.nodes
                .upsert_remote(id, r.tags, r.available_memory, healthy)
        } else {
            Err(Refusal::NoSecret)
        };
        if let Err(refusal) = taken {
            metrics::counter!("switchyard_uniffle_heartbeats_refused_total").increment(1);
            tracing::debug!(%refusal, "shuffle server heartbeat refused");
            return Ok(Response::new(ShuffleServerHeartBeatResponse {
                status: StatusCode::AccessDenied as i32,
                ret_msg: refusal.to_string(),
            }));
        }
        success(|status, ret_msg| ShuffleServerHeartBeatResponse { status, ret_msg })
    }

    async fn get_shuffle_data_storage_info(
        &self,
        _request: Request<()>,
    ) -> Result<Response<GetShuffleDataStorageInfoResponse>, Status> {
        Ok(Response::new(GetShuffleDataStorageInfoResponse::default()))
    }

    async fn check_service_available(
        &self,
        _request: Request<()>,
    ) -> Result<Response<CheckServiceAvailableResponse>, Status> {
        Ok(Response::new(CheckServiceAvailableResponse {
            status: StatusCode::Success as i32,
            available: !self.nodes.is_empty(),
        }))
    }

    async fn app_heartbeat(
        &self,
        _request: Request<AppHeartBeatRequest>,
    ) -> Result<Response<AppHeartBeatResponse>, Status> {
        success(|status, ret_msg| AppHeartBeatResponse { status, ret_msg })
    }

    async fn report_client_operation(
        &self,
        _request: Request<ReportShuffleClientOpRequest>,
    ) -> Result<Response<ReportShuffleClientOpResponse>, Status> {
        success(|status, ret_msg| ReportShuffleClientOpResponse { status, ret_msg })
    }

    async fn register_application_info(
        &self,
        request: Request<ApplicationInfoRequest>,
    ) -> Result<Response<ApplicationInfoResponse>, Status> {
        let r = request.into_inner();
        tracing::debug!(app = %r.app_id, user = %r.user, version = ?r.version, "application info");
        // The only place a Uniffle client tells its version (0.10+); this
        // node's shuffle server shows it for the application.
        if let (Some(store), Some(version)) = (&self.store, r.version.as_deref()) {
            if !r.app_id.is_empty() && !version.is_empty() && version.len() <= 64 {
                store.set_app_client(
                    &crate::server::stored_app(&r.app_id),
                    &switchyard_ident::Protocol::Uniffle.client_description(version),
                );
            }
        }
        success(|status, ret_msg| ApplicationInfoResponse { status, ret_msg })
    }

    async fn access_cluster(
        &self,
        _request: Request<AccessClusterRequest>,
    ) -> Result<Response<AccessClusterResponse>, Status> {
        let uuid = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis().to_string())
            .unwrap_or_default();
        Ok(Response::new(AccessClusterResponse {
            status: StatusCode::Success as i32,
            ret_msg: String::new(),
            uuid,
        }))
    }

    async fn fetch_client_conf(
        &self,
        _request: Request<()>,
    ) -> Result<Response<FetchClientConfResponse>, Status> {
        Ok(Response::new(self.client_conf()))
    }

    async fn fetch_client_conf_v2(
        &self,
        _request: Request<FetchClientConfRequest>,
    ) -> Result<Response<FetchClientConfResponse>, Status> {
        Ok(Response::new(self.client_conf()))
    }

    async fn fetch_remote_storage(
        &self,
        _request: Request<FetchRemoteStorageRequest>,
    ) -> Result<Response<FetchRemoteStorageResponse>, Status> {
        Ok(Response::new(FetchRemoteStorageResponse {
            status: StatusCode::Success as i32,
            remote_storage: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(i: i32) -> ShuffleServerId {
        ShuffleServerId {
            id: format!("s{i}"),
            ip: "127.0.0.1".into(),
            port: 1000 + i,
            netty_port: 2000 + i,
            jetty_port: 0,
        }
    }

    #[test]
    fn assignment_covers_every_partition_once_per_replica() {
        for partitions in [1, 2, 7, 100] {
            for n in 1..5 {
                let servers: Vec<_> = (0..n).map(server).collect();
                let replicas = 2.min(n as usize);
                let a = assign(partitions, &servers, replicas);
                let mut next = 0;
                for r in &a {
                    assert_eq!(r.start_partition, next);
                    assert!(r.end_partition >= r.start_partition);
                    assert_eq!(r.server.len(), replicas);
                    let ids: HashSet<_> = r.server.iter().map(|s| &s.id).collect();
                    assert_eq!(ids.len(), replicas, "replicas on distinct servers");
                    next = r.end_partition + 1;
                }
                assert_eq!(next, partitions);
            }
        }
        assert!(assign(0, &[server(1)], 1).is_empty());
    }

    /// Assignments between two heartbeats spread instead of all going to
    /// the servers with the most free memory (issue 43's simulation: a
    /// tenth of the servers got every partition); a server with more free
    /// memory still gets more.
    #[tokio::test]
    async fn assignments_between_heartbeats_spread_by_free_memory() {
        let nodes = Arc::new(NodeRegistry::new(Duration::from_secs(60)));
        for (i, free) in [(0, 200), (1, 100), (2, 100)] {
            nodes
                .upsert_remote(server(i), Vec::new(), free, true)
                .unwrap();
        }
        let service = CoordinatorService::new(nodes.clone(), UniffleConfig::default(), None);
        let mut given = std::collections::HashMap::<String, i32>::new();
        for shuffle in 0..40 {
            let r = service
                .get_shuffle_assignments(Request::new(GetShuffleServerRequest {
                    application_id: "app".into(),
                    shuffle_id: shuffle,
                    partition_num: 10,
                    data_replica: 1,
                    assignment_shuffle_server_number: 1,
                    ..Default::default()
                }))
                .await
                .unwrap()
                .into_inner();
            assert_eq!(r.status, StatusCode::Success as i32, "{}", r.ret_msg);
            *given
                .entry(r.assignments[0].server[0].id.clone())
                .or_default() += 10;
        }
        // Twice the memory, about twice the partitions; nobody starved.
        assert!((180..=220).contains(&given["s0"]), "{given:?}");
        assert!((80..=120).contains(&given["s1"]), "{given:?}");
        assert!((80..=120).contains(&given["s2"]), "{given:?}");
        // A heartbeat halves what the server was lately given.
        let before = nodes.nodes.get("s1").unwrap().recent;
        nodes
            .upsert_remote(server(1), Vec::new(), 100, true)
            .unwrap();
        assert_eq!(nodes.nodes.get("s1").unwrap().recent, before / 2);
    }
}
