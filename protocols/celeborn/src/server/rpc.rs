//! The NettyRpcEnv side of the Master and Worker RPC ports: envelopes in,
//! endpoint lookup (the verifier handshake), control messages to an
//! [`Endpoint`], Java-serialized replies out.

use std::future::Future;
use std::sync::Arc;

use super::conn::{Handler, Replier};
use super::error::CelebornError;
use crate::auth::{self, Answer, Secrets};
use crate::frame::Message;
use crate::rpc::{encode_boolean, encode_reply, endpoint, RequestMessage, RpcContent};
use crate::transport_message::TransportMessage;
use switchyard_frame::log_limit::{self, LogLimiter};

/// StorageInfo type of this worker's files (`StorageInfo.Type.HDD`): readers
/// fetch them through the worker's fetch port.
pub(crate) const STORAGE_TYPE_HDD: i32 = 1;

/// Failed requests are client-caused as often as not: their lines are
/// rate-limited (`switchyard_celeborn_errors_total` counts each).
static FAILED_LOG: LogLimiter = log_limit::client_caused();

/// Decodes a control message's payload, or says which type did not decode.
pub(crate) fn decode<M: prost::Message + Default>(
    tm: &TransportMessage,
) -> Result<M, CelebornError> {
    tm.decode_payload()
        .map_err(|source| CelebornError::BadPayload {
            message_type: tm.message_type,
            source,
        })
}

/// A named RPC endpoint (`MasterEndpoint`, `WorkerEndpoint`).
pub trait Endpoint: Send + Sync + 'static {
    fn name(&self) -> &'static str;

    /// Answers one control message; an error becomes an RPC_FAILURE whose text
    /// the client turns into an exception.
    fn receive(
        self: Arc<Self>,
        message: TransportMessage,
    ) -> impl Future<Output = Result<TransportMessage, CelebornError>> + Send;
}

pub struct RpcPort<E> {
    endpoint: Arc<E>,
    port: &'static str,
    auth: Option<PortAuth>,
}

/// An RPC port's part in authentication: the node's secrets, and whether
/// drivers register theirs here (the master port).
pub struct PortAuth {
    pub secrets: Arc<Secrets>,
    pub registration: bool,
}

impl<E: Endpoint> RpcPort<E> {
    pub fn new(endpoint: Arc<E>, port: &'static str, auth: Option<PortAuth>) -> Arc<Self> {
        Arc::new(RpcPort {
            endpoint,
            port,
            auth,
        })
    }

    /// With authentication on: a connection not bound yet gets its
    /// handshake step answered (Some); a bound one passes (None).
    async fn gate(&self, message: &Message, replier: &Replier) -> Option<()> {
        let auth = self.auth.as_ref()?;
        let session = replier.session();
        if session.identity().is_some() {
            return None;
        }
        match message {
            Message::RpcRequest { request_id, body } => {
                auth.secrets.prefetch_for(body).await;
                let frame = match auth::handshake(
                    session,
                    &auth.secrets,
                    auth.registration,
                    body.clone(),
                ) {
                    Answer::Reply(body) => Message::RpcResponse {
                        request_id: *request_id,
                        body,
                    },
                    Answer::Fail(e) => {
                        e.count(self.port);
                        Message::RpcFailure {
                            request_id: *request_id,
                            error: e.client_text(),
                        }
                    }
                };
                replier.send(frame).await;
            }
            _ => CelebornError::NotAuthenticated.count(self.port),
        }
        Some(())
    }
}

impl<E: Endpoint> RpcPort<E> {
    /// On an authenticated connection, a message that names an application
    /// must name the connection's own.
    fn check_app(&self, tm: &TransportMessage, replier: &Replier) -> Result<(), CelebornError> {
        if self.auth.is_none() {
            return Ok(());
        }
        match auth::app_of(tm)? {
            Some(app) => auth::check_app(replier.session(), &app),
            None => Ok(()),
        }
    }
}

impl<E: Endpoint> Handler<Message> for RpcPort<E> {
    fn port(&self) -> &'static str {
        self.port
    }

    async fn handle(self: Arc<Self>, message: Message, replier: Replier) {
        if self.gate(&message, &replier).await.is_some() {
            return;
        }
        let (request_id, body) = match message {
            Message::RpcRequest { request_id, body } => (Some(request_id), body),
            Message::OneWayMessage { body } => (None, body),
            other => {
                tracing::warn!(port = self.port, kind = ?other.message_type(), "unexpected frame on an RPC port");
                return;
            }
        };
        let reply = match RequestMessage::decode(body) {
            Err(e) => Err(CelebornError::Undecodable(e.to_string())),
            Ok(request) => match request.content {
                RpcContent::CheckExistence { name } => {
                    replier.label("CHECK_EXISTENCE");
                    let exists = name == self.endpoint.name();
                    tracing::debug!(port = self.port, name, exists, "endpoint lookup");
                    Ok(encode_boolean(exists))
                }
                RpcContent::TransportMessage(tm) => {
                    replier.label(tm.name());
                    if request.endpoint != self.endpoint.name()
                        && request.endpoint != endpoint::VERIFIER
                    {
                        Err(CelebornError::NoEndpoint(request.endpoint))
                    } else if let Err(e) = self.check_app(&tm, &replier) {
                        Err(e)
                    } else {
                        match self.endpoint.clone().receive(tm).await {
                            Ok(reply) => encode_reply(&reply)
                                .map_err(|e| CelebornError::Encode(e.to_string())),
                            Err(e) => Err(e),
                        }
                    }
                }
                RpcContent::Boolean(_) => Err(CelebornError::NotARequest),
            },
        };
        if let Err(e) = &reply {
            e.count(self.port);
        }
        let Some(request_id) = request_id else {
            replier.no_reply();
            if let Err(e) = reply {
                if let Some(suppressed) = FAILED_LOG.allow() {
                    tracing::warn!(port = self.port, error = %e, suppressed, "one-way message failed");
                }
            }
            return;
        };
        let frame = match reply {
            Ok(body) => Message::RpcResponse { request_id, body },
            Err(e) => {
                if let Some(suppressed) = FAILED_LOG.allow() {
                    tracing::warn!(port = self.port, status = %e.status(), error = %e, suppressed, "request failed");
                }
                Message::RpcFailure {
                    request_id,
                    error: e.client_text(),
                }
            }
        };
        replier.send(frame).await;
    }
}
