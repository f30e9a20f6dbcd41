//! Traffic metrics every protocol front end records under the same names:
//! bytes pushed and fetched, and requests with their outcome and latency,
//! labelled by `protocol` (`uniffle`, `celeborn`, `flink`) and `op`, so that
//! one dashboard panel shows every protocol side by side.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Bytes clients pushed that were stored (`protocol`).
pub const PUSHED_BYTES: &str = "switchyard_pushed_bytes_total";
/// Bytes sent back to readers (`protocol`).
pub const FETCHED_BYTES: &str = "switchyard_fetched_bytes_total";
/// Data-path requests answered (`protocol`, `op`, `outcome` = ok, error).
pub const REQUESTS: &str = "switchyard_requests_total";
/// Time from a request's arrival to its answer (`protocol`, `op`).
pub const REQUEST_SECONDS: &str = "switchyard_request_duration_seconds";
/// Every request of every port, control RPCs included: from its frame's arrival
/// (its header read) to its reply written to the socket, or from a gRPC call's
/// arrival to its response (`protocol`, `port`, `message`).
pub const RPC_SECONDS: &str = "switchyard_rpc_duration_seconds";

/// Records one request of [`RPC_SECONDS`].
pub fn rpc_answered(
    protocol: &'static str,
    port: &'static str,
    message: impl Into<metrics::SharedString>,
    took: std::time::Duration,
) {
    let message = message.into();
    metrics::histogram!(RPC_SECONDS, "protocol" => protocol, "port" => port, "message" => message)
        .record(took.as_secs_f64());
}

/// The wire a request came in on: owned by `switchyard-ident`, re-exported
/// here for the metrics' callers.
pub use switchyard_ident::Protocol;

/// The byte totals again, for the process itself (the status page's
/// throughput history): the metrics recorder cannot be read back.
static TOTALS: [[AtomicU64; 2]; Protocol::ALL.len()] =
    [const { [const { AtomicU64::new(0) }; 2] }; Protocol::ALL.len()];

/// Bytes pushed and fetched per protocol since the process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub pushed: u64,
    pub fetched: u64,
}

/// This process's totals for `protocol`.
pub fn totals(protocol: Protocol) -> Totals {
    let [pushed, fetched] = &TOTALS[protocol as usize];
    Totals {
        pushed: pushed.load(Ordering::Relaxed),
        fetched: fetched.load(Ordering::Relaxed),
    }
}

/// Counts bytes stored from a client's push.
pub fn pushed(protocol: Protocol, bytes: u64) {
    TOTALS[protocol as usize][0].fetch_add(bytes, Ordering::Relaxed);
    metrics::counter!(PUSHED_BYTES, "protocol" => protocol.as_str()).increment(bytes);
}

/// Counts bytes sent to a reader.
pub fn fetched(protocol: Protocol, bytes: u64) {
    TOTALS[protocol as usize][1].fetch_add(bytes, Ordering::Relaxed);
    metrics::counter!(FETCHED_BYTES, "protocol" => protocol.as_str()).increment(bytes);
}

/// One data-path request, recorded when dropped: as an error unless
/// [`Request::ok`] was called, so every early return counts as one.
#[must_use = "a request is recorded when it is dropped"]
pub struct Request {
    protocol: Protocol,
    op: &'static str,
    started: Instant,
    ok: bool,
}

impl Request {
    pub fn start(protocol: Protocol, op: &'static str) -> Request {
        Request {
            protocol,
            op,
            started: Instant::now(),
            ok: false,
        }
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The request was answered with success (or a backpressure reply the
    /// protocol defines, which is not a failure).
    pub fn ok(&mut self) {
        self.ok = true;
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        let (protocol, op) = (self.protocol.as_str(), self.op);
        let outcome = if self.ok { "ok" } else { "error" };
        metrics::counter!(REQUESTS, "protocol" => protocol, "op" => op, "outcome" => outcome)
            .increment(1);
        metrics::histogram!(REQUEST_SECONDS, "protocol" => protocol, "op" => op)
            .record(self.started.elapsed().as_secs_f64());
    }
}
