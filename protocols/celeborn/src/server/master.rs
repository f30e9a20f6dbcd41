//! `MasterEndpoint`: applications, slots and quota for the LifecycleManager.
//! It places partitions on the workers its [`Fleet`] knows (this process's
//! own worker when the node is alone) and passes the drivers' lifetime
//! calls on to the fleet, which tells the workers that hold the data.

use std::sync::Arc;

use prost::Message;

use super::error::CelebornError;
use super::fleet::{place, Candidate, Fleet, Slots};
use super::rpc::{decode, Endpoint};
use super::slot_reply;
use super::tags::TagsExpr;
use super::worker::WorkerState;
use crate::proto::*;
use crate::rpc::endpoint;
use crate::status::StatusCode;
use crate::transport_message::TransportMessage;

pub struct MasterEndpoint {
    worker: Arc<WorkerState>,
    fleet: Arc<dyn Fleet>,
}

/// Slot requests refused, by the status answered.
pub const SLOT_REQUESTS_FAILED: &str = "switchyard_celeborn_slot_requests_failed_total";
/// Shuffles and applications that drivers report running on the engine's
/// own shuffle (their heartbeats' fallback counts), by `kind`.
pub const FALLBACKS: &str = "switchyard_celeborn_fallbacks_total";

impl MasterEndpoint {
    pub fn new(worker: Arc<WorkerState>, fleet: Arc<dyn Fleet>) -> Arc<Self> {
        // Zero before the first event: the upstream dashboard's panels over
        // them show 0 rather than no data.
        for status in [StatusCode::SlotNotAvailable, StatusCode::WorkerExcluded] {
            metrics::counter!(SLOT_REQUESTS_FAILED, "status" => status.name()).increment(0);
        }
        for kind in ["shuffle", "application"] {
            metrics::counter!(FALLBACKS, "kind" => kind).increment(0);
        }
        Arc::new(MasterEndpoint { worker, fleet })
    }

    /// Answers a RequestSlots, counting its failures by status (Celeborn's
    /// RequestSlotsFailed).
    fn answer_request_slots(&self, r: PbRequestSlots) -> TransportMessage {
        let payload = match self.request_slots(r) {
            Ok(placement) => {
                slot_reply::encode(placement.placed, placement.types, placement.packed)
            }
            Err(status) => {
                metrics::counter!(SLOT_REQUESTS_FAILED, "status" => status.name()).increment(1);
                PbRequestSlotsResponse {
                    status: status.as_i32(),
                    ..Default::default()
                }
                .encode_to_vec()
            }
        };
        TransportMessage {
            message_type: MessageType::RequestSlotsResponse as i32,
            payload: Some(payload.into()),
            serde_version: None,
        }
    }
}

/// Where a RequestSlots' partitions went, and the form the client reads.
struct Placement {
    placed: Vec<(Candidate, Slots)>,
    /// The storage types the client asked for.
    types: i32,
    /// A 0.5+ client asks for the packed form, a fraction of the plain
    /// one's size for a big shuffle; older ones read only the plain form.
    packed: bool,
}

impl Endpoint for MasterEndpoint {
    fn name(&self) -> &'static str {
        endpoint::MASTER
    }

    async fn receive(
        self: Arc<Self>,
        tm: TransportMessage,
    ) -> Result<TransportMessage, CelebornError> {
        if self.fleet.warming() {
            return Err(CelebornError::WarmingUp);
        }
        let success = StatusCode::Success.as_i32();
        match tm.kind() {
            Some(MessageType::RegisterApplicationInfo) => {
                self.register_application_info(decode(&tm)?);
                Ok(TransportMessage::without_payload(
                    MessageType::OneWayMessageResponse,
                ))
            }
            Some(MessageType::HeartbeatFromApplication) => Ok(self.heartbeat(decode(&tm)?)),
            Some(MessageType::RequestSlots) => {
                let ask: PbRequestSlots = decode(&tm)?;
                // Placing and encoding 10^5 partitions takes milliseconds:
                // off the runtime, so other calls keep being answered.
                tokio::task::spawn_blocking(move || self.answer_request_slots(ask))
                    .await
                    .map_err(|e| CelebornError::Placement(e.to_string()))
            }
            Some(MessageType::CheckQuota) => Ok(TransportMessage::new(
                MessageType::CheckQuotaResponse,
                &self.check_quota(decode(&tm)?),
            )),
            Some(MessageType::CheckWorkersAvailable) => Ok(TransportMessage::new(
                MessageType::CheckWorkersAvailableResponse,
                &PbCheckWorkersAvailableResponse {
                    available: !self.fleet.workers().is_empty(),
                },
            )),
            Some(MessageType::UnregisterShuffle) => {
                let r: PbUnregisterShuffle = decode(&tm)?;
                self.unregister_shuffle(&r.app_id, r.shuffle_id).await;
                Ok(TransportMessage::new(
                    MessageType::UnregisterShuffleResponse,
                    &PbUnregisterShuffleResponse { status: success },
                ))
            }
            Some(MessageType::BatchUnregisterShuffles) => {
                let r: PbBatchUnregisterShuffles = decode(&tm)?;
                for &s in &r.shuffle_ids {
                    self.unregister_shuffle(&r.app_id, s).await;
                }
                Ok(TransportMessage::new(
                    MessageType::BatchUnregisterShuffleResponse,
                    &PbBatchUnregisterShuffleResponse {
                        status: success,
                        shuffle_ids: r.shuffle_ids,
                    },
                ))
            }
            Some(MessageType::ApplicationLost) => {
                let r: PbApplicationLost = decode(&tm)?;
                tracing::info!(app = %r.app_id, "application lost: removing its data");
                self.fleet.app_lost(&r.app_id);
                self.worker.remove_app_later(&r.app_id);
                Ok(TransportMessage::new(
                    MessageType::ApplicationLostResponse,
                    &PbApplicationLostResponse { status: success },
                ))
            }
            Some(MessageType::ReviseLostShuffles) => Ok(TransportMessage::new(
                MessageType::ReviseLostShufflesResponse,
                &self.revise_lost_shuffles(decode(&tm)?),
            )),
            Some(MessageType::ReleaseSlots) => Ok(TransportMessage::new(
                MessageType::ReleaseSlotsResponse,
                &PbReleaseSlotsResponse { status: success },
            )),
            _ => Err(CelebornError::Unsupported {
                handler: "MasterEndpoint",
                message_type: tm.message_type,
            }),
        }
    }
}

impl MasterEndpoint {
    /// A 0.6.1+ LifecycleManager's first word: the application, its user,
    /// and that its merged pushes can take per-partition split replies.
    fn register_application_info(&self, r: PbRegisterApplicationInfo) {
        self.worker.register_app(&r.app_id);
        self.fleet.app_seen(&r.app_id);
        if let Some(id) = &r.user_identifier {
            self.fleet.app_info(
                &r.app_id,
                &id.tenant_id,
                &id.name,
                r.extra_info.clone().into_iter().collect(),
            );
        }
        self.worker.split_info_apps.insert(r.app_id);
    }

    /// A driver's heartbeat keeps its application alive; when it asks for a
    /// reply, it learns which workers are unknown or shutting down and which
    /// of its shuffles the fleet knows.
    fn heartbeat(&self, r: PbHeartbeatFromApplication) -> TransportMessage {
        // Registers the app again if it expired; its old shuffles stay dead
        // (storage's lifecycle), so nothing reads short.
        self.worker.register_app(&r.app_id);
        self.fleet.app_seen(&r.app_id);
        // The shuffles and applications the driver ran on the engine's own
        // shuffle instead, since its last heartbeat (by fallback policy).
        for (kind, counts) in [
            ("shuffle", &r.shuffle_fallback_counts),
            ("application", &r.application_fallback_counts),
        ] {
            let n: i64 = counts.values().filter(|&&v| v > 0).sum();
            if n > 0 {
                metrics::counter!(FALLBACKS, "kind" => kind).increment(n as u64);
            }
        }
        if !r.should_response {
            return TransportMessage::without_payload(MessageType::OneWayMessageResponse);
        }
        // Workers the client asks about that heartbeat no coordinator are
        // unknown (lost ones included).
        let unknown_workers = r
            .need_checked_worker_list
            .into_iter()
            .filter(|w| {
                !self.fleet.knows(&super::worker::WorkerAddr {
                    host: w.host.clone(),
                    rpc_port: w.rpc_port,
                    push_port: w.push_port,
                    fetch_port: w.fetch_port,
                    replicate_port: w.replicate_port,
                })
            })
            .collect();
        let shutting_workers = self.fleet.shutting().iter().map(worker_info).collect();
        TransportMessage::new(
            MessageType::HeartbeatFromApplicationResponse,
            &PbHeartbeatFromApplicationResponse {
                status: StatusCode::Success.as_i32(),
                unknown_workers,
                shutting_workers,
                // From every coordinator's book: a driver that moved here
                // from another master finds its shuffles known.
                registered_shuffles: self.fleet.registered_shuffles(&r.app_id),
                check_quota_response: Some(self.app_quota(&r.app_id)),
                ..Default::default()
            },
        )
    }

    /// The user's quota (`storage.apps.max_user_bytes`); the client fails
    /// (or falls back) on `available: false`.
    fn check_quota(&self, r: PbCheckQuota) -> PbCheckQuotaResponse {
        match user_key(r.user_identifier.as_ref())
            .map_or(Ok(()), |user| self.worker.store.check_user_quota(&user))
        {
            Ok(()) => PbCheckQuotaResponse {
                available: true,
                reason: String::new(),
            },
            Err(e) => PbCheckQuotaResponse {
                available: false,
                reason: e.to_string(),
            },
        }
    }

    /// Whether the application, and its user, are below their quotas: the
    /// heartbeat reply's `checkQuotaResponse`. A 0.6+ driver with
    /// `celeborn.quota.interruptShuffle.enabled` cancels its running stages
    /// on `available: false` (older ones ignore the field), so a shuffle
    /// that grows past `storage.apps.max_user_bytes`, which refuses no push,
    /// is stopped within a heartbeat.
    fn app_quota(&self, app: &str) -> PbCheckQuotaResponse {
        match self
            .worker
            .store
            .check_quota(&super::worker::stored_app(app))
        {
            Ok(()) => PbCheckQuotaResponse {
                available: true,
                reason: String::new(),
            },
            Err(e) => {
                tracing::warn!(app, error = %e, "heartbeat: application over quota");
                PbCheckQuotaResponse {
                    available: false,
                    reason: e.to_string(),
                }
            }
        }
    }

    /// A shuffle its driver is done with: the fleet forgets it, and this
    /// node's worker removes its data.
    async fn unregister_shuffle(&self, app: &str, shuffle_id: i32) {
        self.fleet.shuffle_removed(app, shuffle_id);
        self.worker.remove_shuffle(app, shuffle_id).await;
    }

    /// A 0.6+ driver (reviseLostShuffles.enabled) names the shuffles a
    /// heartbeat reply did not list.
    fn revise_lost_shuffles(&self, r: PbReviseLostShuffles) -> PbReviseLostShufflesResponse {
        self.fleet.app_seen(&r.app_id);
        for &s in &r.lost_shuffles {
            self.fleet.shuffle_registered(&r.app_id, s);
        }
        tracing::info!(app = %r.app_id, shuffles = ?r.lost_shuffles, "shuffles revised by their driver");
        PbReviseLostShufflesResponse {
            success: true,
            message: String::new(),
        }
    }
}

impl MasterEndpoint {
    fn request_slots(&self, r: PbRequestSlots) -> Result<Placement, StatusCode> {
        let app = super::worker::stored_app(&r.application_id);
        if let Some(user) = user_key(r.user_identifier.as_ref()) {
            self.worker.store.set_app_user(&app, &user);
        }
        // An application (or user) at its quota gets no more slots.
        if let Err(e) = self.worker.store.check_quota(&app) {
            tracing::warn!(app = %r.application_id, error = %e, "no slots: quota");
            return Err(StatusCode::SlotNotAvailable);
        }
        self.fleet.app_seen(&r.application_id);
        let Some(candidates) = self.tagged_workers(&r) else {
            return Err(StatusCode::WorkerExcluded);
        };
        if r.should_replicate && candidates.len() < 2 {
            tracing::warn!(app = %r.application_id, workers = candidates.len(), "replication asked, but fewer than two workers take partitions: primaries only");
        }
        let placed = place(
            &r.partition_id_list,
            candidates,
            r.should_replicate,
            r.should_rack_aware,
        );
        if placed.is_empty() {
            tracing::warn!(app = %r.application_id, shuffle = r.shuffle_id, "no slots: no worker takes partitions");
            return Err(StatusCode::SlotNotAvailable);
        }
        let workers = placed
            .iter()
            .filter(|(_, s)| !s.primaries.is_empty() || !s.replicas.is_empty())
            .count();
        let spares = placed.len() - workers;
        self.fleet
            .shuffle_registered(&r.application_id, r.shuffle_id);
        tracing::info!(app = %r.application_id, shuffle = r.shuffle_id, partitions = r.partition_id_list.len(), workers, spares, "slots assigned");
        Ok(Placement {
            placed,
            types: r.available_storage_types,
            packed: r.packed,
        })
    }
}

impl MasterEndpoint {
    /// The workers a slot request may use: all of them, or with
    /// `tags_enabled` and a tags expression, those carrying its tags; none
    /// matching is `None` (upstream answers WORKER_EXCLUDED, and the client
    /// fails the shuffle or falls back to Spark's own).
    fn tagged_workers(&self, r: &PbRequestSlots) -> Option<Vec<Candidate>> {
        let workers = self.fleet.workers();
        let expr = TagsExpr::parse(&r.tags_expr);
        if !self.worker.config.tags_enabled || expr.is_empty() {
            return Some(workers);
        }
        let all = workers.len();
        let tagged = expr.select(workers);
        if tagged.is_empty() {
            tracing::warn!(app = %r.application_id, shuffle = r.shuffle_id, tags = %r.tags_expr, workers = all, "no slots: no worker carries the tags");
            metrics::counter!("switchyard_celeborn_tags_unmatched_total").increment(1);
            return None;
        }
        Some(tagged)
    }
}

/// A worker as the driver's heartbeat reply lists it.
fn worker_info(a: &super::worker::WorkerAddr) -> PbWorkerInfo {
    PbWorkerInfo {
        host: a.host.clone(),
        rpc_port: a.rpc_port,
        push_port: a.push_port,
        fetch_port: a.fetch_port,
        replicate_port: a.replicate_port,
        ..Default::default()
    }
}

/// A Celeborn user as the quota counts it: `tenant.name`, as upstream's
/// UserIdentifier prints it; none when the client sends no name.
fn user_key(id: Option<&PbUserIdentifier>) -> Option<String> {
    let id = id?;
    if id.name.is_empty() || id.name.len() + id.tenant_id.len() > 256 {
        return None;
    }
    Some(format!("{}.{}", id.tenant_id, id.name))
}
