//! What survives restarts: the manifest of committed partitions, and
//! recovery from it at open.

pub(crate) mod manifest;
pub(crate) mod recovery;
