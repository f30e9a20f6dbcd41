//! The subset of Java object serialization (Java Object Serialization Specification,
//! chapter 6 "Object Serialization Stream Protocol") that the Celeborn RPC layer needs.
//!
//! Upstream serializes with a plain `ObjectOutputStream` holding exactly one object
//! (`JavaSerializer.scala`, `JavaSerializationStream.writeObject`). The objects that cross
//! a Master/Worker RPC port are `TransportMessage`, `RpcEndpointVerifier$CheckExistence`
//! and `java.lang.Boolean`; a `TransportMessage` from a 0.6+ client also carries a
//! `SerdeVersion` enum constant.
//!
//! - [`read`]: a generic but bounded stream parser (objects with plain serializable
//!   fields, strings, byte arrays, enum constants, back-references, reset);
//! - [`write`]: byte-exact writers for the few objects we send.

pub(crate) mod read;
pub(crate) mod write;

// Stream constants (java.io.ObjectStreamConstants).
pub(crate) const STREAM_MAGIC: u16 = 0xACED;
pub(crate) const STREAM_VERSION: u16 = 5;
pub(crate) const TC_NULL: u8 = 0x70;
pub(crate) const TC_REFERENCE: u8 = 0x71;
pub(crate) const TC_CLASSDESC: u8 = 0x72;
pub(crate) const TC_OBJECT: u8 = 0x73;
pub(crate) const TC_STRING: u8 = 0x74;
pub(crate) const TC_ARRAY: u8 = 0x75;
pub(crate) const TC_CLASS: u8 = 0x76;
pub(crate) const TC_BLOCKDATA: u8 = 0x77;
pub(crate) const TC_ENDBLOCKDATA: u8 = 0x78;
pub(crate) const TC_RESET: u8 = 0x79;
pub(crate) const TC_BLOCKDATALONG: u8 = 0x7A;
pub(crate) const TC_EXCEPTION: u8 = 0x7B;
pub(crate) const TC_LONGSTRING: u8 = 0x7C;
pub(crate) const TC_PROXYCLASSDESC: u8 = 0x7D;
pub(crate) const TC_ENUM: u8 = 0x7E;
/// First handle number; handles count up in stream order.
pub(crate) const BASE_WIRE_HANDLE: i32 = 0x7E_0000;

// Class descriptor flags.
pub(crate) const SC_WRITE_METHOD: u8 = 0x01;
pub(crate) const SC_SERIALIZABLE: u8 = 0x02;
pub(crate) const SC_EXTERNALIZABLE: u8 = 0x04;
pub(crate) const SC_ENUM: u8 = 0x10;

/// The classes of the Celeborn RPC layer, with their serialVersionUIDs.
pub(crate) mod classes {
    /// `TransportMessage`, `serialVersionUID = -3259000920699629773L` (unchanged 0.3-0.7).
    pub(crate) const TRANSPORT_MESSAGE: &str =
        "org.apache.celeborn.common.network.protocol.TransportMessage";
    pub(crate) const TRANSPORT_MESSAGE_SUID: i64 = -3259000920699629773;
    /// `SerdeVersion` (0.6+); enum descriptors always carry SUID 0.
    pub(crate) const SERDE_VERSION: &str =
        "org.apache.celeborn.common.network.protocol.SerdeVersion";
    /// Field type signature of `serdeVersion`.
    pub(crate) const SERDE_VERSION_SIGNATURE: &str =
        "Lorg/apache/celeborn/common/network/protocol/SerdeVersion;";
    /// 0.3's serialized `type` field held this enum.
    pub(crate) const MESSAGE_TYPE: &str = "org.apache.celeborn.common.protocol.MessageType";
    pub(crate) const JAVA_LANG_ENUM: &str = "java.lang.Enum";
    /// `RpcEndpointVerifier.CheckExistence`, `@SerialVersionUID(492543523453L)`.
    pub(crate) const CHECK_EXISTENCE: &str =
        "org.apache.celeborn.common.rpc.netty.RpcEndpointVerifier$CheckExistence";
    pub(crate) const CHECK_EXISTENCE_SUID: i64 = 492543523453;
    pub(crate) const STRING_SIGNATURE: &str = "Ljava/lang/String;";
    /// `java.lang.Boolean` (JDK serialVersionUID).
    pub(crate) const BOOLEAN: &str = "java.lang.Boolean";
    pub(crate) const BOOLEAN_SUID: i64 = -3665804199014368530;
    /// `byte[]` and its JDK serialVersionUID.
    pub(crate) const BYTE_ARRAY: &str = "[B";
    pub(crate) const BYTE_ARRAY_SUID: i64 = -5984413125824719648;
}
