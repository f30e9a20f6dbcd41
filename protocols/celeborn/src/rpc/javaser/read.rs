//! A bounded parser for one-object Java serialization streams.
//!
//! Follows `java.io.ObjectInputStream` for the supported subset, including the order in
//! which handles are assigned (a class descriptor gets its handle before its field type
//! strings; an object or enum constant gets its handle after its class descriptor and
//! before its contents), so that back-references resolve as in Java.
//!
//! Not supported (typed error): classes with `writeObject` data, `Externalizable`,
//! proxy classes, `Class` objects, block data, exceptions, arrays other than `byte[]`,
//! cyclic references.

use std::sync::Arc;

use bytes::{Buf, Bytes};

use super::*;
use crate::rpc::error::RpcError;
use crate::rpc::java_utf;

/// Nesting limit (objects, arrays, enums, class descriptors and their superclasses).
const MAX_DEPTH: usize = 16;
/// Limit on handles in one stream; our messages use at most 10.
const MAX_HANDLES: usize = 256;
/// Limit on the fields of one class descriptor.
const MAX_FIELDS: usize = 64;
/// Limit on one string (class names, endpoint names, enum constants).
const MAX_STRING_BYTES: usize = 64 * 1024;
/// Limit on the field values of all objects of one stream together. The
/// per-class limit alone does not bound them: classes chained by
/// back-reference give one object up to `MAX_HANDLES × MAX_FIELDS` fields,
/// each a few input bytes but ~48 bytes decoded. Our messages have fewer
/// than 20.
pub(crate) const MAX_TOTAL_FIELDS: usize = 1024;
/// Limit on what the parser builds for one stream: strings, descriptors,
/// objects and their field vectors (byte arrays are slices of the input and
/// cost only their `Value`). Like the JDK's `maxbytes` serial filter, it
/// bounds the whole stream, so decoded memory is at most this plus the
/// input, whatever the input's shape. Our messages build a few KiB.
pub(crate) const MAX_BUILT_BYTES: usize = 1024 * 1024;

/// A parsed class descriptor.
#[derive(Debug)]
pub(crate) struct ClassDesc {
    pub(crate) name: String,
    pub(crate) suid: i64,
    pub(crate) flags: u8,
    pub(crate) fields: Vec<FieldDesc>,
    pub(crate) super_desc: Option<Arc<ClassDesc>>,
}

/// One serializable field of a class descriptor.
#[derive(Debug)]
pub(crate) struct FieldDesc {
    /// `B C D F I J S Z` for primitives, `L` or `[` for references.
    pub(crate) type_code: u8,
    /// Shared with every object's copy of the field: a name is decoded once
    /// per descriptor, not once per object.
    pub(crate) name: Arc<str>,
}

/// A deserialized value.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Int(i32),
    /// A byte, char, short, long, float or double field: read past, value not needed by
    /// any class we map.
    OtherPrimitive,
    String(Arc<str>),
    ByteArray(Bytes),
    Enum {
        class: Arc<ClassDesc>,
        constant: Arc<str>,
    },
    Object(Arc<Object>),
}

/// An ordinary object: its class and the values of every serializable field, classes
/// from the top-most serializable superclass down (stream order).
#[derive(Debug)]
pub(crate) struct Object {
    pub(crate) class: Arc<ClassDesc>,
    pub(crate) fields: Vec<(Arc<str>, Value)>,
}

impl Object {
    /// A field by name; the most-derived class wins if names repeat.
    pub(crate) fn field(&self, name: &str) -> Option<&Value> {
        self.fields
            .iter()
            .rev()
            .find(|(n, _)| &**n == name)
            .map(|(_, v)| v)
    }
}

#[derive(Debug)]
enum Handle {
    Class(Arc<ClassDesc>),
    Value(Value),
    /// Assigned but not finished yet: a reference to it would be a cycle.
    Pending,
}

/// Parses a whole stream that must hold exactly one object.
pub(crate) fn read_single_object(bytes: Bytes) -> Result<Value, RpcError> {
    read_counted(bytes).0
}

/// [`read_single_object`], also returning the bytes the parser charged to
/// its budget (what it built), success or not: tests check the bound.
pub(crate) fn read_counted(bytes: Bytes) -> (Result<Value, RpcError>, usize) {
    let mut p = Parser {
        buf: bytes,
        handles: Vec::new(),
        depth: 0,
        fields: 0,
        built: 0,
    };
    let result = p.stream();
    (result, p.built)
}

struct Parser {
    buf: Bytes,
    handles: Vec<Handle>,
    depth: usize,
    /// Field values read so far (all objects of the stream).
    fields: usize,
    /// Bytes built so far, as charged by [`Parser::charge`].
    built: usize,
}

impl Parser {
    fn stream(&mut self) -> Result<Value, RpcError> {
        let p = self;
        let magic = p.u16("stream magic")?;
        let version = p.u16("stream version")?;
        if magic != STREAM_MAGIC || version != STREAM_VERSION {
            return Err(RpcError::BadStreamHeader((magic >> 8) as u8));
        }
        let value = loop {
            match p.u8("type code")? {
                // ObjectOutputStream.reset() between writes; harmless before the object.
                TC_RESET => p.handles.clear(),
                tc => break p.content(tc)?,
            }
        };
        if !p.buf.is_empty() {
            return Err(RpcError::TrailingBytes(p.buf.len()));
        }
        Ok(value)
    }

    /// Charges `bytes` about to be built; refuses once the stream's total
    /// would pass [`MAX_BUILT_BYTES`], before the allocation happens.
    fn charge(&mut self, bytes: usize) -> Result<(), RpcError> {
        let total = self.built.saturating_add(bytes);
        if total > MAX_BUILT_BYTES {
            return Err(RpcError::DecodeBudget {
                what: "bytes built",
                limit: MAX_BUILT_BYTES,
            });
        }
        self.built = total;
        Ok(())
    }

    fn need(&self, n: usize, what: &'static str) -> Result<(), RpcError> {
        if self.buf.len() < n {
            Err(RpcError::Truncated { what })
        } else {
            Ok(())
        }
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, RpcError> {
        self.need(1, what)?;
        Ok(self.buf.get_u8())
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, RpcError> {
        self.need(2, what)?;
        Ok(self.buf.get_u16())
    }

    fn i32(&mut self, what: &'static str) -> Result<i32, RpcError> {
        self.need(4, what)?;
        Ok(self.buf.get_i32())
    }

    fn i64(&mut self, what: &'static str) -> Result<i64, RpcError> {
        self.need(8, what)?;
        Ok(self.buf.get_i64())
    }

    fn skip(&mut self, n: usize, what: &'static str) -> Result<Value, RpcError> {
        self.need(n, what)?;
        self.buf.advance(n);
        Ok(Value::OtherPrimitive)
    }

    fn utf_bytes(&mut self, len: usize, what: &'static str) -> Result<String, RpcError> {
        if len > MAX_STRING_BYTES {
            return Err(RpcError::BadLength {
                what,
                len: len as i64,
            });
        }
        self.need(len, what)?;
        // Modified UTF-8 never decodes longer than it is encoded (a 6-byte
        // surrogate pair becomes 4 bytes), so the input length bounds it.
        self.charge(len)?;
        let raw = self.buf.split_to(len);
        java_utf::decode(&raw, what)
    }

    /// `writeUTF` form: u16 length + modified UTF-8.
    fn utf(&mut self, what: &'static str) -> Result<String, RpcError> {
        let len = usize::from(self.u16(what)?);
        self.utf_bytes(len, what)
    }

    fn enter(&mut self) -> Result<(), RpcError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(RpcError::TooDeep(MAX_DEPTH));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn assign(&mut self, handle: Handle) -> Result<usize, RpcError> {
        if self.handles.len() >= MAX_HANDLES {
            return Err(RpcError::TooManyHandles(MAX_HANDLES));
        }
        self.charge(std::mem::size_of::<Handle>())?;
        self.handles.push(handle);
        Ok(self.handles.len() - 1)
    }

    fn lookup(&mut self) -> Result<&Handle, RpcError> {
        let wire = self.i32("reference")?;
        let index = wire
            .checked_sub(BASE_WIRE_HANDLE)
            .and_then(|i| usize::try_from(i).ok());
        match index.and_then(|i| self.handles.get(i)) {
            Some(Handle::Pending) | None => Err(RpcError::BadReference(wire)),
            Some(handle) => Ok(handle),
        }
    }

    /// One content element whose type code `tc` was just read.
    fn content(&mut self, tc: u8) -> Result<Value, RpcError> {
        match tc {
            TC_NULL => Ok(Value::Null),
            TC_REFERENCE => match self.lookup()? {
                Handle::Value(v) => Ok(v.clone()),
                _ => Err(RpcError::Unsupported(
                    "reference to a class descriptor as a value",
                )),
            },
            TC_STRING | TC_LONGSTRING => self.new_string(tc).map(Value::String),
            TC_OBJECT => self.new_object(),
            TC_ARRAY => self.new_array(),
            TC_ENUM => self.new_enum(),
            TC_CLASS => Err(RpcError::Unsupported("Class objects")),
            TC_CLASSDESC | TC_PROXYCLASSDESC => {
                Err(RpcError::Unsupported("class descriptor as a value"))
            }
            TC_BLOCKDATA | TC_BLOCKDATALONG => Err(RpcError::Unsupported("block data")),
            TC_EXCEPTION => Err(RpcError::Unsupported("serialized exception")),
            code => Err(RpcError::UnexpectedTypeCode {
                code,
                context: "content",
            }),
        }
    }

    fn new_string(&mut self, tc: u8) -> Result<Arc<str>, RpcError> {
        let len = if tc == TC_STRING {
            usize::from(self.u16("string length")?)
        } else {
            let len = self.i64("long string length")?;
            usize::try_from(len).map_err(|_| RpcError::BadLength {
                what: "long string",
                len,
            })?
        };
        let s: Arc<str> = self.utf_bytes(len, "string")?.into();
        self.assign(Handle::Value(Value::String(s.clone())))?;
        Ok(s)
    }

    /// A string object (new or back-reference), as used for field type signatures and enum
    /// constant names.
    fn string_object(&mut self, context: &'static str) -> Result<Arc<str>, RpcError> {
        match self.u8(context)? {
            tc @ (TC_STRING | TC_LONGSTRING) => self.new_string(tc),
            TC_REFERENCE => match self.lookup()? {
                Handle::Value(Value::String(s)) => Ok(s.clone()),
                _ => Err(RpcError::Unsupported(
                    "reference to a non-string where a string is required",
                )),
            },
            code => Err(RpcError::UnexpectedTypeCode { code, context }),
        }
    }

    /// A class descriptor: new, back-reference, or null.
    fn class_desc(&mut self) -> Result<Option<Arc<ClassDesc>>, RpcError> {
        match self.u8("class descriptor")? {
            TC_NULL => Ok(None),
            TC_REFERENCE => match self.lookup()? {
                Handle::Class(c) => Ok(Some(c.clone())),
                _ => Err(RpcError::Unsupported(
                    "reference to a non-class where a class is required",
                )),
            },
            TC_CLASSDESC => self.new_class_desc().map(Some),
            TC_PROXYCLASSDESC => Err(RpcError::Unsupported("proxy classes")),
            code => Err(RpcError::UnexpectedTypeCode {
                code,
                context: "class descriptor",
            }),
        }
    }

    fn new_class_desc(&mut self) -> Result<Arc<ClassDesc>, RpcError> {
        self.enter()?;
        let name = self.utf("class name")?;
        let suid = self.i64("serialVersionUID")?;
        // Java assigns the descriptor's handle before reading its fields.
        let handle = self.assign(Handle::Pending)?;
        let flags = self.u8("class flags")?;
        let count = usize::from(self.u16("field count")?);
        if count > MAX_FIELDS {
            return Err(RpcError::TooManyFields {
                count,
                limit: MAX_FIELDS,
            });
        }
        self.charge(std::mem::size_of::<ClassDesc>() + count * std::mem::size_of::<FieldDesc>())?;
        let mut fields = Vec::with_capacity(count);
        for _ in 0..count {
            let type_code = self.u8("field type")?;
            let name: Arc<str> = self.utf("field name")?.into();
            match type_code {
                b'B' | b'C' | b'D' | b'F' | b'I' | b'J' | b'S' | b'Z' => {}
                // The signature string is only needed by Java's class resolution.
                b'L' | b'[' => {
                    self.string_object("field signature")?;
                }
                code => {
                    return Err(RpcError::UnexpectedTypeCode {
                        code,
                        context: "field type",
                    })
                }
            }
            fields.push(FieldDesc { type_code, name });
        }
        match self.u8("class annotation")? {
            TC_ENDBLOCKDATA => {}
            _ => return Err(RpcError::Unsupported("class annotations")),
        }
        let super_desc = self.class_desc()?;
        let desc = Arc::new(ClassDesc {
            name,
            suid,
            flags,
            fields,
            super_desc,
        });
        self.handles[handle] = Handle::Class(desc.clone());
        self.leave();
        Ok(desc)
    }

    fn new_object(&mut self) -> Result<Value, RpcError> {
        self.enter()?;
        let class = self
            .class_desc()?
            .ok_or(RpcError::Unsupported("object with a null class"))?;
        let handle = self.assign(Handle::Pending)?;
        // Superclass fields come first in the stream.
        let mut chain = Vec::new();
        let mut next = Some(&class);
        while let Some(desc) = next {
            if desc.flags & (SC_WRITE_METHOD | SC_EXTERNALIZABLE) != 0 {
                return Err(RpcError::Unsupported("writeObject/Externalizable data"));
            }
            if desc.flags & SC_SERIALIZABLE == 0 || desc.flags & SC_ENUM != 0 {
                return Err(RpcError::Unsupported(
                    "object of a non-serializable or enum class",
                ));
            }
            chain.push(desc.clone());
            next = desc.super_desc.as_ref();
        }
        // Counted and charged before anything is read or allocated.
        let count: usize = chain.iter().map(|d| d.fields.len()).sum();
        self.fields += count;
        if self.fields > MAX_TOTAL_FIELDS {
            return Err(RpcError::DecodeBudget {
                what: "field values",
                limit: MAX_TOTAL_FIELDS,
            });
        }
        self.charge(
            std::mem::size_of::<Object>()
                + chain.len() * std::mem::size_of::<Arc<ClassDesc>>()
                + count * std::mem::size_of::<(Arc<str>, Value)>(),
        )?;
        let mut fields = Vec::with_capacity(count);
        for desc in chain.iter().rev() {
            for field in &desc.fields {
                let value = self.field_value(field.type_code)?;
                fields.push((field.name.clone(), value));
            }
        }
        let value = Value::Object(Arc::new(Object { class, fields }));
        self.handles[handle] = Handle::Value(value.clone());
        self.leave();
        Ok(value)
    }

    fn field_value(&mut self, type_code: u8) -> Result<Value, RpcError> {
        Ok(match type_code {
            b'I' => Value::Int(self.i32("int field")?),
            b'Z' => Value::Bool(self.u8("boolean field")? != 0),
            b'B' => self.skip(1, "byte field")?,
            b'C' | b'S' => self.skip(2, "char/short field")?,
            b'F' => self.skip(4, "float field")?,
            b'D' | b'J' => self.skip(8, "long/double field")?,
            _ => {
                let tc = self.u8("object field")?;
                self.content(tc)?
            }
        })
    }

    fn new_array(&mut self) -> Result<Value, RpcError> {
        self.enter()?;
        let class = self
            .class_desc()?
            .ok_or(RpcError::Unsupported("array with a null class"))?;
        if class.name != classes::BYTE_ARRAY {
            return Err(RpcError::Unsupported("arrays other than byte[]"));
        }
        let len = self.i32("array length")?;
        let n = usize::try_from(len)
            .ok()
            .filter(|&n| n <= self.buf.len())
            .ok_or(RpcError::BadLength {
                what: "byte array",
                len: i64::from(len),
            })?;
        let value = Value::ByteArray(self.buf.split_to(n));
        self.assign(Handle::Value(value.clone()))?;
        self.leave();
        Ok(value)
    }

    fn new_enum(&mut self) -> Result<Value, RpcError> {
        self.enter()?;
        let class = self
            .class_desc()?
            .ok_or(RpcError::Unsupported("enum with a null class"))?;
        if class.flags & SC_ENUM == 0 {
            return Err(RpcError::Unsupported("enum constant of a non-enum class"));
        }
        let handle = self.assign(Handle::Pending)?;
        let constant = self.string_object("enum constant name")?;
        let value = Value::Enum { class, constant };
        self.handles[handle] = Handle::Value(value.clone());
        self.leave();
        Ok(value)
    }
}
