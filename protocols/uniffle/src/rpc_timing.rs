//! `switchyard_rpc_duration_seconds` for the gRPC services: one tower layer
//! times every call from its arrival to its response, labelled by the method
//! (`/rss.common.ShuffleServer/sendShuffleData` → `sendShuffleData`), as the
//! frame ports time theirs.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use switchyard_frame::traffic;

/// Times the calls of the server it wraps; `port` names it (`coordinator`,
/// `grpc`).
#[derive(Clone, Copy)]
pub struct RpcTimingLayer {
    pub port: &'static str,
}

impl<S> tower::Layer<S> for RpcTimingLayer {
    type Service = RpcTiming<S>;

    fn layer(&self, inner: S) -> RpcTiming<S> {
        RpcTiming {
            inner,
            port: self.port,
        }
    }
}

#[derive(Clone)]
pub struct RpcTiming<S> {
    inner: S,
    port: &'static str,
}

/// The methods of `proto/uniffle.proto`: the label set is bounded, whatever path
/// a client sends (others count as `unknown`).
const METHODS: &[&str] = &[
    "registerShuffle",
    "unregisterShuffle",
    "unregisterShuffleByAppId",
    "sendShuffleData",
    "getLocalShuffleIndex",
    "getLocalShuffleData",
    "getMemoryShuffleData",
    "commitShuffleTask",
    "reportShuffleResult",
    "getShuffleResult",
    "getShuffleResultForMultiPart",
    "finishShuffle",
    "requireBuffer",
    "appHeartbeat",
    "startSortMerge",
    "getSortedShuffleData",
    "getShuffleServerList",
    "getShuffleServerNum",
    "getShuffleAssignments",
    "heartbeat",
    "getShuffleDataStorageInfo",
    "checkServiceAvailable",
    "reportClientOperation",
    "registerApplicationInfo",
    "accessCluster",
    "fetchClientConf",
    "fetchClientConfV2",
    "fetchRemoteStorage",
];

/// The method a request path names, as a label.
fn method(path: &str) -> &'static str {
    let name = path.rsplit('/').next().unwrap_or("");
    METHODS
        .iter()
        .find(|m| **m == name)
        .copied()
        .unwrap_or("unknown")
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower::Service<http::Request<B>> for RpcTiming<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let arrived = Instant::now();
        let method = method(request.uri().path());
        let port = self.port;
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await;
            traffic::rpc_answered("uniffle", port, method, arrived.elapsed());
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_of_the_proto_is_a_label() {
        let proto = include_str!("../proto/uniffle.proto");
        for line in proto.lines() {
            let Some(rest) = line.trim().strip_prefix("rpc ") else {
                continue;
            };
            let name = rest.split('(').next().unwrap().trim();
            assert_eq!(method(&format!("/rss.common.X/{name}")), name);
        }
        assert_eq!(method("/rss.common.ShuffleServer/madeUp"), "unknown");
        assert_eq!(method(""), "unknown");
    }
}
