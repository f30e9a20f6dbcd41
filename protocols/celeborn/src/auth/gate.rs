//! The per-connection gate of Celeborn's authentication, as the stock 0.5.x
//! to 0.7.x clients speak it when `celeborn.auth.enabled` is on.
//!
//! Until a connection is bound to an application, every RPC request on an
//! authenticating port is a handshake step whose body is a bare
//! TransportMessage (`i32 type, i32 length, protobuf`; no RPC envelope):
//! - master port, the driver's first connection (registration):
//!   authentication-init (72 → 73), SASL `ANONYMOUS` (71, empty token → empty
//!   reply), RegisterApplicationRequest (74 → 75) with the secret; the
//!   connection is then bound to that application;
//! - every other connection (the master again, worker rpc, push, fetch):
//!   SASL DIGEST-MD5 (71 twice: empty → challenge, response → `rspauth`),
//!   against the secret registered on the master ([`Secrets`]).
//!
//! Anything else before the binding is refused. Once bound, requests that
//! name an application must name this one ([`check_app`]). The connection
//! is bound before the final reply is queued: the client pipelines its
//! requests as soon as it has that reply.

use bytes::Bytes;
use dashmap::DashMap;
use switchyard_frame::server::Session;
use switchyard_storage::Secret;

use super::digest::Challenge;
use crate::proto::{
    MessageType, PbAuthType, PbAuthenticationInitiationResponse, PbRegisterApplicationRequest,
    PbRegisterApplicationResponse, PbSaslMechanism, PbSaslRequest,
};
use crate::server::error::CelebornError;
use crate::transport_message::TransportMessage;

const ANONYMOUS: &str = "ANONYMOUS";
const DIGEST_MD5: &str = "DIGEST-MD5";
/// The registration protocol's version, which the client checks.
const VERSION: &str = "1.0";
/// Secrets kept at most: registration is open to anyone who reaches the
/// master port (as upstream), so it must not grow without bound.
const MAX_SECRETS: usize = 100_000;
/// The longest secret taken (the stock client's are 32 random bytes decoded
/// as UTF-8, at most 96 bytes).
const MAX_SECRET: usize = 1024;

/// Where a worker asks for the secret of an application that registered
/// on another node's master: the fleet's coordinators.
#[async_trait::async_trait]
pub trait RemoteSecrets: Send + Sync + 'static {
    async fn fetch(&self, app: &str) -> Option<Vec<u8>>;
}

/// How long an application no coordinator knows is not asked about again:
/// a client naming made-up applications costs one lookup each per window.
const UNKNOWN_FOR: std::time::Duration = std::time::Duration::from_secs(5);
/// Unknown applications remembered at most.
const MAX_UNKNOWN: usize = 10_000;

/// Applications' secrets, registered on the master port. One per node:
/// its master and worker ports share it. In a fleet, a secret registered
/// on another node's master is fetched from the coordinators when a client
/// of that application first authenticates here ([`Secrets::ensure`]).
#[derive(Default)]
pub struct Secrets {
    by_app: DashMap<String, Secret>,
    remote: std::sync::OnceLock<std::sync::Arc<dyn RemoteSecrets>>,
    /// Applications recently asked about and unknown everywhere.
    unknown: DashMap<String, std::time::Instant>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("apps", &self.by_app.len())
            .field("remote", &self.remote.get().is_some())
            .finish()
    }
}

impl Secrets {
    /// Registers an application's secret. The same secret again is accepted
    /// (a client that retried); another one is refused, so nobody can take
    /// over an application that registered first.
    pub fn register(&self, app: &str, secret: &str) -> Result<(), CelebornError> {
        let taken =
            || CelebornError::AuthFailed(format!("Application is already registered {app}"));
        if let Some(existing) = self.by_app.get(app) {
            return if existing.equals(secret.as_bytes()) {
                Ok(())
            } else {
                Err(taken())
            };
        }
        // Outside any entry guard: len() locks every shard.
        if self.by_app.len() >= MAX_SECRETS {
            return Err(CelebornError::AuthFailed(format!(
                "{MAX_SECRETS} applications are registered already"
            )));
        }
        let inserted = match self.by_app.entry(app.to_string()) {
            dashmap::Entry::Occupied(e) => e.get().equals(secret.as_bytes()),
            dashmap::Entry::Vacant(v) => {
                v.insert(Secret::from(secret));
                true
            }
        };
        if !inserted {
            return Err(taken());
        }
        metrics::gauge!("switchyard_celeborn_auth_secrets").set(self.by_app.len() as f64);
        Ok(())
    }

    /// The registered secret's bytes, for the digest check and for a
    /// coordinator answering another node's lookup.
    pub fn get(&self, app: &str) -> Option<Vec<u8>> {
        self.by_app.get(app).map(|s| s.expose().as_bytes().to_vec())
    }

    /// Sets where unknown applications' secrets are fetched from (once).
    pub fn set_remote(&self, remote: std::sync::Arc<dyn RemoteSecrets>) {
        let _ = self.remote.set(remote);
    }

    /// Makes sure `app`'s secret is here if any coordinator has it: a
    /// secret registered on another node's master is fetched and kept.
    pub async fn ensure(&self, app: &str) {
        let Some(remote) = self.remote.get() else {
            return;
        };
        if self.by_app.contains_key(app) || app.is_empty() || app.len() > 256 {
            return;
        }
        if let Some(at) = self.unknown.get(app).map(|e| *e) {
            if at.elapsed() < UNKNOWN_FOR {
                return;
            }
        }
        // Every secret was registered on some master from a protobuf
        // `string`, so it is UTF-8; anything else is no secret of ours.
        let fetched = remote
            .fetch(app)
            .await
            .filter(|s| !s.is_empty() && s.len() <= MAX_SECRET)
            .and_then(|s| String::from_utf8(s).ok());
        match fetched {
            Some(secret) => {
                self.unknown.remove(app);
                outcome("fetched");
                // A secret registered here meanwhile wins; they are equal
                // anyway, as no master takes a second secret.
                let _ = self.register(app, &secret);
            }
            None => {
                if self.unknown.len() >= MAX_UNKNOWN {
                    self.unknown.retain(|_, at| at.elapsed() < UNKNOWN_FOR);
                }
                if self.unknown.len() < MAX_UNKNOWN {
                    self.unknown
                        .insert(app.to_string(), std::time::Instant::now());
                }
            }
        }
    }

    /// Before [`handshake`] on a connection of a fleet worker: when `body`
    /// is a DIGEST-MD5 response, fetches its application's secret if this
    /// node does not have it.
    pub async fn prefetch_for(&self, body: &Bytes) {
        if self.remote.get().is_none() {
            return;
        }
        let Ok(Some(tm)) = TransportMessage::from_bytes(body.clone()) else {
            return;
        };
        if tm.kind() != Some(MessageType::SaslRequest) {
            return;
        }
        let Ok(sasl) = tm.decode_payload::<PbSaslRequest>() else {
            return;
        };
        if let Some(app) = Challenge::app_id(&sasl.payload) {
            self.ensure(&app).await;
        }
    }

    /// Forgets an application's secret (it was lost, or expired).
    pub fn remove(&self, app: &str) {
        if self.by_app.remove(app).is_some() {
            metrics::gauge!("switchyard_celeborn_auth_secrets").set(self.by_app.len() as f64);
        }
    }

    pub fn len(&self) -> usize {
        self.by_app.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_app.is_empty()
    }
}

/// Where a connection's handshake is.
#[derive(Default)]
enum Step {
    #[default]
    Start,
    /// Registration: authentication-init answered.
    Initiated,
    /// Registration: ANONYMOUS done; the secret comes next.
    Anonymous,
    /// DIGEST-MD5: challenged.
    Challenged(Challenge),
    Failed,
}

/// What a port answers to a handshake step.
pub enum Answer {
    /// The RPC_RESPONSE body.
    Reply(Bytes),
    /// An RPC_FAILURE; the connection cannot authenticate any more.
    Fail(CelebornError),
}

fn outcome(result: &'static str) {
    metrics::counter!("switchyard_celeborn_auth_total", "result" => result).increment(1);
}

/// One handshake step of a connection not bound yet. `registration`: the
/// master port, where a driver's first connection registers its secret.
pub fn handshake(session: &Session, secrets: &Secrets, registration: bool, body: Bytes) -> Answer {
    match step(session, secrets, registration, body) {
        Ok(reply) => Answer::Reply(reply),
        Err(e) => {
            session.with_state(|s: &mut Step| *s = Step::Failed);
            outcome("failed");
            if let Some(suppressed) = FAILED_LOG.allow() {
                tracing::warn!(error = %e, suppressed, "celeborn authentication failed");
            }
            Answer::Fail(e)
        }
    }
}

static FAILED_LOG: switchyard_frame::log_limit::LogLimiter =
    switchyard_frame::log_limit::client_caused();

fn step(
    session: &Session,
    secrets: &Secrets,
    registration: bool,
    body: Bytes,
) -> Result<Bytes, CelebornError> {
    let tm = match TransportMessage::from_bytes(body) {
        Ok(Some(tm)) => tm,
        // An RPC envelope (a client without auth) or garbage.
        _ => return Err(CelebornError::NotAuthenticated),
    };
    let bad = |what: &str| {
        CelebornError::AuthFailed(format!("unexpected {what} in the authentication handshake"))
    };
    let current = session.with_state(|s: &mut Step| std::mem::take(s));
    let set = |next: Step| session.with_state(|s: &mut Step| *s = next);
    match (tm.kind(), current) {
        (_, Step::Failed) => Err(CelebornError::AuthFailed(
            "authentication already failed on this connection".into(),
        )),
        (Some(MessageType::AuthenticationInitiationRequest), Step::Start) if registration => {
            set(Step::Initiated);
            Ok(TransportMessage::new(
                MessageType::AuthenticationInitiationResponse,
                &PbAuthenticationInitiationResponse {
                    version: VERSION.into(),
                    auth_enabled: true,
                    sasl_mechanisms: mechanisms(),
                },
            )
            .to_bytes())
        }
        (Some(MessageType::SaslRequest), current) => {
            let sasl: PbSaslRequest = tm
                .decode_payload()
                .map_err(|e| CelebornError::AuthFailed(format!("bad SASL request: {e}")))?;
            match current {
                Step::Initiated if sasl.method == ANONYMOUS => {
                    set(Step::Anonymous);
                    Ok(Bytes::new())
                }
                Step::Start
                    if sasl.method == DIGEST_MD5
                        || sasl.auth_type == PbAuthType::ConnectionAuth as i32 =>
                {
                    let challenge = Challenge::new();
                    let token = Bytes::from(challenge.token());
                    set(Step::Challenged(challenge));
                    Ok(token)
                }
                Step::Challenged(challenge) => {
                    let ok = challenge
                        .verify(&sasl.payload, |app| secrets.get(app))
                        .map_err(|e| CelebornError::AuthFailed(e.to_string()))?;
                    bind(session, &ok.app_id)?;
                    outcome("digest");
                    tracing::debug!(app = %ok.app_id, "celeborn connection authenticated (DIGEST-MD5)");
                    Ok(Bytes::from(ok.rspauth))
                }
                _ => Err(bad(&format!("SASL mechanism {:?}", sasl.method))),
            }
        }
        (Some(MessageType::RegisterApplicationRequest), Step::Anonymous) if registration => {
            let r: PbRegisterApplicationRequest = tm
                .decode_payload()
                .map_err(|e| CelebornError::AuthFailed(format!("bad registration: {e}")))?;
            if r.id.is_empty() || r.secret.is_empty() || r.secret.len() > MAX_SECRET {
                return Err(CelebornError::AuthFailed(
                    "registration needs an application id and a secret of at most 1 KiB".into(),
                ));
            }
            secrets.register(&r.id, &r.secret)?;
            bind(session, &r.id)?;
            outcome("registered");
            tracing::info!(app = %r.id, "celeborn application registered its secret");
            Ok(TransportMessage::new(
                MessageType::RegisterApplicationResponse,
                &PbRegisterApplicationResponse { status: true },
            )
            .to_bytes())
        }
        (kind, _) => Err(bad(&format!(
            "message type {:?}",
            kind.map_or(tm.message_type, |k| k as i32)
        ))),
    }
}

fn bind(session: &Session, app: &str) -> Result<(), CelebornError> {
    session.clear_state();
    if session.bind(app) || session.identity() == Some(app) {
        Ok(())
    } else {
        Err(CelebornError::AuthFailed(
            "the connection is bound already".into(),
        ))
    }
}

/// What the registration protocol offers, as upstream's server does.
fn mechanisms() -> Vec<PbSaslMechanism> {
    vec![
        PbSaslMechanism {
            mechanism: ANONYMOUS.into(),
            auth_types: vec![PbAuthType::ClientAuth as i32],
        },
        PbSaslMechanism {
            mechanism: DIGEST_MD5.into(),
            auth_types: vec![PbAuthType::ConnectionAuth as i32],
        },
    ]
}

/// On an authenticated connection, a request naming `app` must name the
/// connection's own application. Passes when the connection is not bound
/// (authentication off).
pub fn check_app(session: &Session, app: &str) -> Result<(), CelebornError> {
    match session.identity() {
        Some(bound) if bound != app => {
            outcome("refused");
            Err(CelebornError::NotAuthorized {
                bound: bound.to_string(),
                app: app.to_string(),
            })
        }
        _ => Ok(()),
    }
}

/// The application a control message acts for, when it names one: the
/// messages the stock clients send to the master and worker rpc ports.
/// Messages that name none (quota, worker availability) return None.
pub fn app_of(tm: &TransportMessage) -> Result<Option<String>, CelebornError> {
    use crate::proto::*;
    fn app<M: prost::Message + Default>(
        tm: &TransportMessage,
        field: impl FnOnce(M) -> String,
    ) -> Result<Option<String>, CelebornError> {
        let m: M = crate::server::rpc::decode(tm)?;
        Ok(Some(field(m)))
    }
    let shuffle_app = |key: String| {
        key.rsplit_once('-')
            .map_or(key.clone(), |(a, _)| a.to_string())
    };
    match tm.kind() {
        Some(MessageType::HeartbeatFromApplication) => {
            app(tm, |m: PbHeartbeatFromApplication| m.app_id)
        }
        Some(MessageType::RequestSlots) => app(tm, |m: PbRequestSlots| m.application_id),
        Some(MessageType::UnregisterShuffle) => app(tm, |m: PbUnregisterShuffle| m.app_id),
        Some(MessageType::BatchUnregisterShuffles) => {
            app(tm, |m: PbBatchUnregisterShuffles| m.app_id)
        }
        Some(MessageType::ApplicationLost) => app(tm, |m: PbApplicationLost| m.app_id),
        Some(MessageType::RegisterApplicationInfo) => {
            app(tm, |m: PbRegisterApplicationInfo| m.app_id)
        }
        Some(MessageType::ReserveSlots) => app(tm, |m: PbReserveSlots| m.application_id),
        Some(MessageType::CommitFiles) => app(tm, |m: PbCommitFiles| m.application_id),
        Some(MessageType::Destroy) => app(tm, |m: PbDestroyWorkerSlots| shuffle_app(m.shuffle_key)),
        Some(MessageType::ApplicationMetaRequest) => {
            app(tm, |m: PbApplicationMetaRequest| m.app_id)
        }
        _ => Ok(None),
    }
}

/// The application of a shuffle key `<app>-<shuffle>` (all but the last part).
pub fn check_shuffle_key(session: &Session, shuffle_key: &str) -> Result<(), CelebornError> {
    match session.identity() {
        None => Ok(()),
        Some(_) => {
            let app = shuffle_key
                .rsplit_once('-')
                .map_or(shuffle_key, |(app, _)| app);
            check_app(session, app)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{PbAuthenticationInitiationRequest, PbRegisterApplicationRequest};

    fn tm(kind: MessageType, payload: &impl prost::Message) -> Bytes {
        TransportMessage::new(kind, payload).to_bytes()
    }

    fn reply(a: Answer) -> Bytes {
        match a {
            Answer::Reply(b) => b,
            Answer::Fail(e) => panic!("failed: {e}"),
        }
    }

    fn register(session: &Session, secrets: &Secrets, app: &str, secret: &str) -> Answer {
        let init = tm(
            MessageType::AuthenticationInitiationRequest,
            &PbAuthenticationInitiationRequest {
                version: VERSION.into(),
                auth_enabled: true,
                sasl_mechanisms: mechanisms(),
            },
        );
        let r = TransportMessage::from_bytes(reply(handshake(session, secrets, true, init)))
            .unwrap()
            .unwrap();
        let init: PbAuthenticationInitiationResponse = r.decode_payload().unwrap();
        assert_eq!(init.version, "1.0");
        assert_eq!(init.sasl_mechanisms, mechanisms());
        let anon = tm(
            MessageType::SaslRequest,
            &PbSaslRequest {
                method: ANONYMOUS.into(),
                auth_type: PbAuthType::ClientAuth as i32,
                payload: Bytes::new(),
            },
        );
        assert!(reply(handshake(session, secrets, true, anon)).is_empty());
        let reg = tm(
            MessageType::RegisterApplicationRequest,
            &PbRegisterApplicationRequest {
                id: app.into(),
                secret: secret.into(),
            },
        );
        handshake(session, secrets, true, reg)
    }

    #[test]
    fn registration_binds_and_checks_apps() {
        let secrets = Secrets::default();
        let s = Session::default();
        let r = TransportMessage::from_bytes(reply(register(&s, &secrets, "app-1", "k")))
            .unwrap()
            .unwrap();
        let ok: PbRegisterApplicationResponse = r.decode_payload().unwrap();
        assert!(ok.status);
        assert_eq!(s.identity(), Some("app-1"));
        assert_eq!(secrets.get("app-1"), Some(b"k".to_vec()));
        assert!(check_app(&s, "app-1").is_ok());
        assert!(check_shuffle_key(&s, "app-1-3").is_ok());
        assert!(matches!(
            check_shuffle_key(&s, "app-2-3"),
            Err(CelebornError::NotAuthorized { .. })
        ));
        // Nobody takes over a registered application with another secret.
        let other = Session::default();
        assert!(matches!(
            register(&other, &secrets, "app-1", "evil"),
            Answer::Fail(_)
        ));
        assert_eq!(other.identity(), None);
        assert_eq!(secrets.get("app-1"), Some(b"k".to_vec()));
        // An unbound connection passes the checks only when auth is off
        // (ports call check_* on bound connections only).
        assert!(check_app(&Session::default(), "x").is_ok());
    }

    #[test]
    fn out_of_order_or_envelope_requests_fail_and_stay_failed() {
        let secrets = Secrets::default();
        // Registration on a worker port is refused.
        let s = Session::default();
        let init = tm(
            MessageType::AuthenticationInitiationRequest,
            &PbAuthenticationInitiationRequest::default(),
        );
        assert!(matches!(
            handshake(&s, &secrets, false, init),
            Answer::Fail(_)
        ));
        // A register without the steps before it.
        let s = Session::default();
        let reg = tm(
            MessageType::RegisterApplicationRequest,
            &PbRegisterApplicationRequest {
                id: "a".into(),
                secret: "k".into(),
            },
        );
        assert!(matches!(
            handshake(&s, &secrets, true, reg),
            Answer::Fail(_)
        ));
        // Failed stays failed, even for a good first step.
        let init = tm(
            MessageType::AuthenticationInitiationRequest,
            &PbAuthenticationInitiationRequest::default(),
        );
        assert!(matches!(
            handshake(&s, &secrets, true, init),
            Answer::Fail(_)
        ));
        // Not a TransportMessage (an RPC envelope): not authenticated.
        let s = Session::default();
        match handshake(&s, &secrets, true, Bytes::from_static(&[1, 0, 0, 0, 0, 9])) {
            Answer::Fail(CelebornError::NotAuthenticated) => {}
            _ => panic!("an envelope must be refused"),
        }
        assert!(secrets.is_empty());
    }
}
