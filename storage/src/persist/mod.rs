//! What survives restarts: the manifest of committed partitions, recovery
//! from it at open, and the sweep of files no commit owns.

pub(crate) mod manifest;
pub(crate) mod recovery;
mod sweep;

pub(crate) use recovery::Recovery;
pub(crate) use sweep::sweep_orphans;
