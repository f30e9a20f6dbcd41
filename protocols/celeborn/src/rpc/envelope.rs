//! The NettyRpcEnv request envelope: the body of an RPC_REQUEST or ONE_WAY_MESSAGE frame
//! on a master/worker RPC port (upstream `RequestMessage.serialize` / `RequestMessage.apply`
//! in `common/.../rpc/netty/NettyRpcEnv.scala`, unchanged from v0.5.1 to v0.7.0):
//!
//! ```text
//! bool sender present   [UTF host, i32 port]   -- the caller's own RpcEnv, absent for
//!                                                  client-mode RpcEnvs (executors)
//! bool receiver present [UTF host, i32 port]   -- the address the caller dialled
//! UTF  endpoint name
//! content (see `content`)
//! ```
//!
//! Booleans are `DataOutputStream.writeBoolean` (1/0; any non-zero reads as true), UTF is
//! `writeUTF` (u16 length + modified UTF-8). A reply (RPC_RESPONSE body) has no envelope.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::content::RpcContent;
use super::error::RpcError;
use super::java_utf;
use super::javaser::write::put_utf;

/// A host and port as the JVM side writes them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RpcAddress {
    /// Host name or IP literal.
    pub host: String,
    /// Port.
    pub port: i32,
}

/// A decoded RPC request (RPC_REQUEST or ONE_WAY_MESSAGE body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestMessage {
    /// The caller's listening RpcEnv, if it has one.
    pub sender: Option<RpcAddress>,
    /// The address the caller dialled.
    pub receiver: Option<RpcAddress>,
    /// Target endpoint (see [`super::endpoint`]).
    pub endpoint: String,
    /// The message.
    pub content: RpcContent,
}

impl RequestMessage {
    /// Decodes a request body.
    pub fn decode(mut body: Bytes) -> Result<Self, RpcError> {
        let sender = read_address(&mut body)?;
        let receiver = read_address(&mut body)?;
        let endpoint = read_utf(&mut body, "endpoint name")?;
        let content = RpcContent::decode(body)?;
        Ok(Self {
            sender,
            receiver,
            endpoint,
            content,
        })
    }

    /// Encodes a request body as a JVM client would.
    pub fn encode(&self) -> Result<Bytes, RpcError> {
        let mut dst = BytesMut::new();
        write_address(&mut dst, self.sender.as_ref())?;
        write_address(&mut dst, self.receiver.as_ref())?;
        put_utf(&mut dst, &self.endpoint, "endpoint name")?;
        dst.extend_from_slice(&self.content.encode()?);
        Ok(dst.freeze())
    }
}

fn read_utf(buf: &mut Bytes, what: &'static str) -> Result<String, RpcError> {
    if buf.len() < 2 {
        return Err(RpcError::Truncated { what });
    }
    let len = usize::from(buf.get_u16());
    if buf.len() < len {
        return Err(RpcError::Truncated { what });
    }
    java_utf::decode(&buf.split_to(len), what)
}

fn read_address(buf: &mut Bytes) -> Result<Option<RpcAddress>, RpcError> {
    if buf.is_empty() {
        return Err(RpcError::Truncated {
            what: "address flag",
        });
    }
    if buf.get_u8() == 0 {
        return Ok(None);
    }
    let host = read_utf(buf, "address host")?;
    if buf.len() < 4 {
        return Err(RpcError::Truncated {
            what: "address port",
        });
    }
    Ok(Some(RpcAddress {
        host,
        port: buf.get_i32(),
    }))
}

fn write_address(dst: &mut BytesMut, address: Option<&RpcAddress>) -> Result<(), RpcError> {
    match address {
        None => dst.put_u8(0),
        Some(address) => {
            dst.put_u8(1);
            put_utf(dst, &address.host, "address host")?;
            dst.put_i32(address.port);
        }
    }
    Ok(())
}
