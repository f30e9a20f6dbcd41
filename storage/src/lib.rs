//! Switchyard's block store: one block API over a memory tier, local disks
//! and a cold tier. It knows nothing of any wire protocol; the protocol
//! adapters translate onto [`Store`].
//!
//! - [`Store::append`] takes blocks (their bytes are never copied) and makes
//!   them readable before it returns.
//! - Reads: the persisted index and data by offset ([`Store::read_index`],
//!   [`Store::read_data`]), blocks still in memory ([`Store::read_memory`]),
//!   and chunked views ([`Store::open_view`]).
//! - Lifecycle: seal, flush, remove a shuffle or an application, expiry.
//!
//! Memory is one budget ([`MemoryBudget`]); blocks leave memory only when
//! their flush is durable, so an acknowledged block is always readable.

mod background;
pub mod block;
pub mod budget;
mod cold;
pub mod config;
pub mod data_dir;
mod direct;
mod disk;
pub mod error;
pub mod fault;
mod flush;
pub mod id;
pub mod ledger;
pub mod lifecycle;
mod manifest;
pub mod memory;
mod partition;
mod recovery;
pub mod secret;
mod segment;
pub mod status;
mod store;
mod throttle;
pub mod view;

pub use block::{Block, BlockMeta, IndexRecord, BLOCK_OVERHEAD, INDEX_RECORD_LEN};
pub use budget::{MemoryBudget, Reservation};
pub use cold::{cold_operator, ColdStatus};
pub use config::{
    AppConfig, ColdBackend, ColdConfig, ConfigError, DiskConfig, MemoryConfig, RecoveryConfig,
    StoreConfig,
};
pub use disk::{DiskHealth, DiskStatus};
pub use error::{Result, StorageError};
pub use id::{scoped_app, unscoped_app, AppId, PartitionKey};
pub use ledger::{AppRecord, Removal};
pub use lifecycle::{AppListener, AppRemoved, RemovalReason};
pub use manifest::RecoveredNote;
pub use memory::MemoryRead;
pub use recovery::RecoveryStatus;
pub use secret::Secret;
pub use status::{ShuffleStatus, StoreStatus, TierBytes};
pub use store::{PartitionIndex, PartitionStats, Store};
pub use view::{Chunk, PartitionView, Run, SelectedView, Selection};
