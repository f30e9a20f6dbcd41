//! Errors of the RPC layer (envelope and Java serialization subset).

/// Why an RPC envelope or its content could not be decoded or encoded.
///
/// The content is parsed by a deliberately small, bounded subset of Java object
/// serialization: anything outside it is an error, never a panic or an unbounded
/// allocation.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// The input ended before `what` could be read.
    #[error("truncated while reading {what}")]
    Truncated {
        /// What was being read.
        what: &'static str,
    },

    /// A Java modified-UTF-8 string was malformed.
    #[error("{what} is not valid modified UTF-8")]
    InvalidUtf {
        /// What was being read.
        what: &'static str,
    },

    /// The content starts with neither the Java stream magic `AC ED 00 05` nor the V2
    /// marker `FF`.
    #[error("not a Java serialization stream (starts with {0:#04x})")]
    BadStreamHeader(u8),

    /// A type code that cannot appear at this point.
    #[error("unexpected type code {code:#04x} while reading {context}")]
    UnexpectedTypeCode {
        /// The byte read.
        code: u8,
        /// Where it was read.
        context: &'static str,
    },

    /// A valid Java serialization feature outside the supported subset.
    #[error("unsupported Java serialization feature: {0}")]
    Unsupported(&'static str),

    /// Nesting deeper than the parser allows.
    #[error("object graph deeper than {0} levels")]
    TooDeep(usize),

    /// More handles (objects, strings, class descriptors) than the parser allows.
    #[error("more than {0} objects in one stream")]
    TooManyHandles(usize),

    /// A class descriptor with more fields than the parser allows.
    #[error("class descriptor with {count} fields (limit {limit})")]
    TooManyFields {
        /// Fields declared.
        count: usize,
        /// The limit.
        limit: usize,
    },

    /// The stream as a whole would build more than the parser allows for one
    /// stream (see `javaser::read::MAX_BUILT_BYTES`), however small each item.
    #[error("Java serialization stream exceeds its decode budget: more than {limit} {what}")]
    DecodeBudget {
        /// What ran over: "bytes built" or "field values".
        what: &'static str,
        /// The limit.
        limit: usize,
    },

    /// A length that is negative or larger than allowed.
    #[error("{what} length {len} is negative or too large")]
    BadLength {
        /// What the length belongs to.
        what: &'static str,
        /// The value read.
        len: i64,
    },

    /// A back-reference to a handle that does not exist or is still being read.
    #[error("invalid back-reference {0:#x}")]
    BadReference(i32),

    /// Bytes left after the one object of the stream (or after the V2 payload).
    #[error("{0} bytes after the end of the content")]
    TrailingBytes(usize),

    /// The object is not one of the classes the RPC layer exchanges.
    #[error("unexpected class {0}")]
    UnexpectedClass(String),

    /// A known class with a different serialVersionUID (Java would refuse it too).
    #[error("class {class} has serialVersionUID {actual}, expected {expected}")]
    SuidMismatch {
        /// Class name.
        class: String,
        /// The value we know.
        expected: i64,
        /// The value on the wire.
        actual: i64,
    },

    /// A required field is missing or has the wrong type.
    #[error("field {field} of {class} is missing or has the wrong type")]
    BadField {
        /// Class name.
        class: &'static str,
        /// Field name.
        field: &'static str,
    },

    /// An enum constant we do not know.
    #[error("unknown constant {constant} of enum {class}")]
    UnknownEnumConstant {
        /// Enum class.
        class: String,
        /// Constant name.
        constant: String,
    },

    /// A string or payload too large for its length field.
    #[error("{what} of {len} bytes is too large to encode")]
    TooLargeToEncode {
        /// What was too large.
        what: &'static str,
        /// Its size.
        len: usize,
    },
}
