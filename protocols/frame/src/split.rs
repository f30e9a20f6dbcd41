//! Reading a frame's large byte arrays straight into buffers of their own.
//!
//! A Uniffle `sendShuffleData` frame carries several blocks, each a byte array
//! between fields of its own. Read as one buffer, every block is a slice of it;
//! a block that stays in memory then pins the whole frame (its neighbours, the
//! ignored replica strings) while charged for its own bytes, so blocks smaller
//! than half their frame had to be copied out (`Block::detach`): a quarter of
//! the server's CPU on that path. A [`Splitter`] tells the connection's reader
//! where the arrays are while the frame arrives, and the reader reads each into
//! an allocation of its own size, mostly straight from the socket, so a block
//! owns its memory without a copy.
//!
//! The splitter only walks lengths and counts; the protocol's decoder still
//! checks everything ([`crate::FieldReader::split`]). A splitter that finds the
//! frame inconsistent (a count that cannot fit) asks for more fields than the
//! frame holds, the reader then reads the rest of the frame as fields, and the
//! decoder reports the error as for a frame read whole.

/// What comes next in a message part being read split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Fields, until the fields read so far are this many bytes long.
    Fields(usize),
    /// The contents of a byte array of this many bytes (its length field is
    /// already among the fields).
    Array(usize),
    /// Fields to the end of the message part.
    Rest,
}

/// Walks one message part as its bytes arrive. `fields` is the message part
/// read so far, without the contents of the arrays already split out; the
/// splitter keeps its own position in it.
pub trait Splitter: Send {
    fn next(&mut self, fields: &[u8]) -> Next;
}

/// Frames smaller than this are read whole: splitting pays for itself only
/// where arrays are large enough to read straight from the socket.
pub const MIN_SPLIT_FRAME: usize = 256 << 10;

/// What remains of an array is read straight into its buffer from this size
/// on; below it, through the connection's read buffer (fewer, larger reads,
/// and a copy of at most this much per array).
pub const MIN_DIRECT_READ: usize = 64 << 10;
