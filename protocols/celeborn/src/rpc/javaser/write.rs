//! Byte-exact writers for the objects the RPC layer sends, producing what
//! `ObjectOutputStream.writeObject` produces for them on a fresh stream.
//!
//! Stream layout (serialization spec §6.4): magic, version, then the object:
//! `TC_OBJECT, classDesc, field values`. A class descriptor is `TC_CLASSDESC, UTF name,
//! i64 serialVersionUID, u8 flags, u16 field count, fields, TC_ENDBLOCKDATA, super
//! descriptor`; a field is `type code, UTF name` plus, for references, the signature as a
//! string object. Java lists primitive fields first, then references, each sorted by name.
//! None of our streams repeats a string, so no back-references are written.

use bytes::{BufMut, BytesMut};

use super::*;
use crate::rpc::error::RpcError;
use crate::rpc::java_utf;
use crate::transport_message::SerdeVersion;

pub(crate) fn stream_header(dst: &mut BytesMut) {
    dst.put_u16(STREAM_MAGIC);
    dst.put_u16(STREAM_VERSION);
}

/// `DataOutput.writeUTF`: u16 length + modified UTF-8.
pub(crate) fn put_utf(dst: &mut BytesMut, s: &str, what: &'static str) -> Result<(), RpcError> {
    let raw = java_utf::encode(s);
    let len = u16::try_from(raw.len()).map_err(|_| RpcError::TooLargeToEncode {
        what,
        len: raw.len(),
    })?;
    dst.put_u16(len);
    dst.put_slice(&raw);
    Ok(())
}

/// A new string object (`writeString`: TC_LONGSTRING past 65535 bytes).
fn put_string_object(dst: &mut BytesMut, s: &str) {
    let raw = java_utf::encode(s);
    match u16::try_from(raw.len()) {
        Ok(len) => {
            dst.put_u8(TC_STRING);
            dst.put_u16(len);
        }
        Err(_) => {
            dst.put_u8(TC_LONGSTRING);
            dst.put_i64(raw.len() as i64);
        }
    }
    dst.put_slice(&raw);
}

/// One field of a class descriptor: type code, name, and for references the signature.
struct Field {
    type_code: u8,
    name: &'static str,
    signature: Option<&'static str>,
}

/// A new class descriptor whose superclass is not serializable (written as TC_NULL)
/// unless `super_desc` writes one.
fn put_class_desc(
    dst: &mut BytesMut,
    name: &'static str,
    suid: i64,
    flags: u8,
    fields: &[Field],
    super_desc: impl FnOnce(&mut BytesMut),
) {
    dst.put_u8(TC_CLASSDESC);
    // Constant ASCII class names well below 64 KiB.
    dst.put_u16(name.len() as u16);
    dst.put_slice(name.as_bytes());
    dst.put_i64(suid);
    dst.put_u8(flags);
    dst.put_u16(fields.len() as u16);
    for field in fields {
        dst.put_u8(field.type_code);
        dst.put_u16(field.name.len() as u16);
        dst.put_slice(field.name.as_bytes());
        if let Some(signature) = field.signature {
            put_string_object(dst, signature);
        }
    }
    // No class annotation.
    dst.put_u8(TC_ENDBLOCKDATA);
    super_desc(dst);
}

fn no_super(dst: &mut BytesMut) {
    dst.put_u8(TC_NULL);
}

/// A `byte[]` object, or TC_NULL.
fn put_byte_array(dst: &mut BytesMut, bytes: Option<&[u8]>) -> Result<(), RpcError> {
    let Some(bytes) = bytes else {
        dst.put_u8(TC_NULL);
        return Ok(());
    };
    let len = i32::try_from(bytes.len()).map_err(|_| RpcError::TooLargeToEncode {
        what: "payload",
        len: bytes.len(),
    })?;
    dst.put_u8(TC_ARRAY);
    put_class_desc(
        dst,
        classes::BYTE_ARRAY,
        classes::BYTE_ARRAY_SUID,
        SC_SERIALIZABLE,
        &[],
        no_super,
    );
    dst.put_i32(len);
    dst.put_slice(bytes);
    Ok(())
}

/// `TransportMessage` with the 0.4/0.5 field set (`messageTypeValue`, `payload`) when
/// `serde_version` is `None`, else with the 0.6+ set (`serdeVersion` too).
pub(crate) fn transport_message(
    dst: &mut BytesMut,
    message_type: i32,
    payload: Option<&[u8]>,
    serde_version: Option<SerdeVersion>,
) -> Result<(), RpcError> {
    let mut fields = vec![
        Field {
            type_code: b'I',
            name: "messageTypeValue",
            signature: None,
        },
        Field {
            type_code: b'[',
            name: "payload",
            signature: Some(classes::BYTE_ARRAY),
        },
    ];
    if serde_version.is_some() {
        fields.push(Field {
            type_code: b'L',
            name: "serdeVersion",
            signature: Some(classes::SERDE_VERSION_SIGNATURE),
        });
    }
    stream_header(dst);
    dst.put_u8(TC_OBJECT);
    put_class_desc(
        dst,
        classes::TRANSPORT_MESSAGE,
        classes::TRANSPORT_MESSAGE_SUID,
        SC_SERIALIZABLE,
        &fields,
        no_super,
    );
    dst.put_i32(message_type);
    put_byte_array(dst, payload)?;
    if let Some(version) = serde_version {
        // Enum constant: descriptor chain SerdeVersion -> java.lang.Enum, then the
        // constant's name as a string object. Enum descriptors have SUID 0, no fields.
        dst.put_u8(TC_ENUM);
        put_class_desc(
            dst,
            classes::SERDE_VERSION,
            0,
            SC_SERIALIZABLE | SC_ENUM,
            &[],
            |dst| {
                put_class_desc(
                    dst,
                    classes::JAVA_LANG_ENUM,
                    0,
                    SC_SERIALIZABLE | SC_ENUM,
                    &[],
                    no_super,
                )
            },
        );
        put_string_object(dst, version.constant_name());
    }
    Ok(())
}

/// `RpcEndpointVerifier.CheckExistence(name)`.
pub(crate) fn check_existence(dst: &mut BytesMut, name: &str) {
    stream_header(dst);
    dst.put_u8(TC_OBJECT);
    put_class_desc(
        dst,
        classes::CHECK_EXISTENCE,
        classes::CHECK_EXISTENCE_SUID,
        SC_SERIALIZABLE,
        &[Field {
            type_code: b'L',
            name: "name",
            signature: Some(classes::STRING_SIGNATURE),
        }],
        no_super,
    );
    put_string_object(dst, name);
}

/// `java.lang.Boolean`.
pub(crate) fn boolean(dst: &mut BytesMut, value: bool) {
    stream_header(dst);
    dst.put_u8(TC_OBJECT);
    put_class_desc(
        dst,
        classes::BOOLEAN,
        classes::BOOLEAN_SUID,
        SC_SERIALIZABLE,
        &[Field {
            type_code: b'Z',
            name: "value",
            signature: None,
        }],
        no_super,
    );
    dst.put_u8(u8::from(value));
}
