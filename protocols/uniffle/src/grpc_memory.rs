//! Uniffle's gRPC messages inside the node's one memory number.
//!
//! tonic reads a whole message before it decodes it, so a `sendShuffleData` of
//! many MiB is in memory before any handler runs. This layer reads the
//! message's 5-byte gRPC prefix (a compression flag and its length) as the
//! first bytes arrive and takes that many bytes from the node's network share
//! before it lets the rest through: without room the stream is not read, so
//! HTTP/2 flow control stops the client, as the frame ports stop reading their
//! sockets. The bytes are held until the call is answered (the decoded request
//! lives that long), and a message larger than the share could ever hold is
//! refused with `RESOURCE_EXHAUSTED`.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use switchyard_memory::{Holder, NetworkBytes, NodeMemory, Part, TooLarge};

/// gRPC's message prefix: a compression flag and a big-endian 4-byte length.
const PREFIX: usize = 5;

/// Charges the requests of the server it wraps to `node`'s network share.
#[derive(Clone)]
pub struct GrpcMemoryLayer {
    pub node: Arc<NodeMemory>,
}

impl<S> tower::Layer<S> for GrpcMemoryLayer {
    type Service = GrpcMemory<S>;

    fn layer(&self, inner: S) -> GrpcMemory<S> {
        GrpcMemory {
            inner,
            node: self.node.clone(),
        }
    }
}

#[derive(Clone)]
pub struct GrpcMemory<S> {
    inner: S,
    node: Arc<NodeMemory>,
}

/// The bytes a call's message holds, from its prefix until its answer.
type Held = Arc<Mutex<Option<NetworkBytes>>>;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> tower::Service<http::Request<tonic::body::Body>> for GrpcMemory<S>
where
    S: tower::Service<http::Request<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let held = Held::default();
        let node = self.node.clone();
        let slot = held.clone();
        // The calls of one HTTP/2 connection wait their turn for the network
        // share as one holder, beside the frame ports' connections.
        let holder = request
            .extensions()
            .get::<tonic::transport::server::TcpConnectInfo>()
            .and_then(|c| c.remote_addr())
            .map_or_else(Holder::next, Holder::of_peer);
        let request = request.map(|inner| {
            tonic::body::Body::new(ChargedBody {
                inner,
                node,
                holder,
                held: slot,
                head: BytesMut::new(),
                state: State::Prefix,
            })
        });
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await;
            drop(held);
            response
        })
    }
}

/// A request body that holds its first message back until its bytes are taken.
struct ChargedBody {
    inner: tonic::body::Body,
    node: Arc<NodeMemory>,
    holder: Holder,
    held: Held,
    /// What arrived of the message before its bytes were taken.
    head: BytesMut,
    state: State,
}

enum State {
    /// Waiting for the message's prefix.
    Prefix,
    /// Waiting for room for the message.
    Taking(BoxFuture<Result<NetworkBytes, TooLarge>>),
    /// Taken (or nothing to take): the body passes through.
    Passing,
}

impl ChargedBody {
    /// Starts taking room for the message whose prefix `head` begins with.
    fn start_taking(&mut self) -> Result<(), tonic::Status> {
        let len = u32::from_be_bytes([self.head[1], self.head[2], self.head[3], self.head[4]]);
        let bytes = PREFIX + len as usize;
        match self.node.try_take(self.holder, Part::InFlight, bytes) {
            Ok(held) => {
                self.hold(held);
                Ok(())
            }
            Err(Some(too)) => Err(too_large(too)),
            Err(None) => {
                metrics::counter!("switchyard_read_pauses_total", "protocol" => "uniffle", "port" => "grpc")
                    .increment(1);
                let (node, holder) = (self.node.clone(), self.holder);
                self.state = State::Taking(Box::pin(async move {
                    node.take(holder, Part::InFlight, bytes).await
                }));
                Ok(())
            }
        }
    }

    fn hold(&mut self, bytes: NetworkBytes) {
        *self.held.lock().unwrap_or_else(|e| e.into_inner()) = Some(bytes);
        self.state = State::Passing;
    }

    /// What arrived before the room was taken, as one frame.
    fn release_head(&mut self) -> Option<Frame<Bytes>> {
        (!self.head.is_empty()).then(|| Frame::data(self.head.split().freeze()))
    }
}

fn too_large(too: TooLarge) -> tonic::Status {
    tonic::Status::resource_exhausted(format!(
        "a message of {} bytes is more than this node may hold for requests ({} bytes of storage.memory.network)",
        too.requested, too.limit
    ))
}

impl Body for ChargedBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                State::Passing => {
                    if let Some(head) = this.release_head() {
                        return Poll::Ready(Some(Ok(head)));
                    }
                    return Pin::new(&mut this.inner).poll_frame(cx);
                }
                State::Taking(taking) => match ready!(taking.as_mut().poll(cx)) {
                    Ok(held) => this.hold(held),
                    Err(too) => return Poll::Ready(Some(Err(too_large(too)))),
                },
                State::Prefix => match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => {
                            this.head.extend_from_slice(&data);
                            if this.head.len() >= PREFIX {
                                if let Err(status) = this.start_taking() {
                                    return Poll::Ready(Some(Err(status)));
                                }
                            }
                        }
                        // Trailers before a whole prefix: nothing to take.
                        Err(frame) => {
                            this.state = State::Passing;
                            if let Some(head) = this.release_head() {
                                return Poll::Ready(Some(Ok(head)));
                            }
                            return Poll::Ready(Some(Ok(frame)));
                        }
                    },
                    other => {
                        this.state = State::Passing;
                        if let Some(head) = this.release_head() {
                            return Poll::Ready(Some(Ok(head)));
                        }
                        return Poll::Ready(other);
                    }
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Passing) && self.head.is_empty() && self.inner.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_of(chunks: Vec<&'static [u8]>, node: Arc<NodeMemory>, held: Held) -> ChargedBody {
        let frames = chunks
            .into_iter()
            .map(|c| Ok::<_, tonic::Status>(Frame::data(Bytes::from_static(c))));
        let inner = http_body_util::StreamBody::new(futures::stream::iter(frames));
        ChargedBody {
            inner: tonic::body::Body::new(inner),
            node,
            holder: Holder::next(),
            held,
            head: BytesMut::new(),
            state: State::Prefix,
        }
    }

    async fn collect(mut body: ChargedBody) -> Result<Vec<u8>, tonic::Status> {
        let mut out = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            if let Ok(data) = frame?.into_data() {
                out.extend_from_slice(&data);
            }
        }
        Ok(out)
    }

    #[tokio::test]
    async fn a_message_is_charged_from_its_split_prefix_and_passes_whole() {
        let node = NodeMemory::new(64 << 20, 16 << 20);
        let held = Held::default();
        // A 3-byte message whose prefix arrives in two pieces.
        let body = body_of(
            vec![&[0, 0, 0], &[0, 3, 7], &[8, 9]],
            node.clone(),
            held.clone(),
        );
        assert_eq!(collect(body).await.unwrap(), vec![0, 0, 0, 0, 3, 7, 8, 9]);
        assert_eq!(
            node.in_use(Part::InFlight),
            8,
            "held until the call is answered"
        );
        drop(held);
        assert_eq!(node.in_use(Part::InFlight), 0);
    }

    #[tokio::test]
    async fn a_message_larger_than_the_share_is_refused() {
        let node = NodeMemory::new(64 << 20, 16 << 20);
        // Announces 256 MiB.
        let body = body_of(vec![&[0, 16, 0, 0, 0, 1]], node, Held::default());
        let err = collect(body).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err}");
    }
}
