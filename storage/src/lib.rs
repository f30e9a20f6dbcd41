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

mod apps;
pub mod block;
pub mod config;
mod counters;
pub mod data_dir;
pub mod error;
pub mod id;
mod persist;
pub mod secret;
mod segment;
pub mod small_map;
pub mod status;
mod store;
mod tiers;
pub mod view;

// The public paths of modules that now live inside a part.
pub use apps::{ledger, lifecycle};
pub use tiers::{budget, memory};
// `switchyard_storage::fault`: the disk layer that injects faults in tests.
pub use tiers::disk::fault;

pub use block::{Block, BlockMeta, IndexRecord, BLOCK_OVERHEAD, INDEX_RECORD_LEN};
pub use budget::{MemoryBudget, Reservation};
pub use config::{
    AppConfig, ColdBackend, ColdConfig, ConfigError, DiskConfig, MemoryConfig, RecoveryConfig,
    StoreConfig,
};
pub use error::{Result, StorageError};
pub use id::{AppId, PartitionKey};
pub use ledger::{AppRecord, Removal};
pub use lifecycle::{AppListener, AppRemoved, RemovalReason};
pub use memory::MemoryRead;
pub use persist::manifest::RecoveredNote;
pub use persist::recovery::RecoveryStatus;
pub use secret::Secret;
pub use small_map::small_map;
pub use status::{
    AppStatus, NodeLoad, ShuffleStatus, StoreCounts, StoreStatus, TierBytes, UserConsumption,
};
pub use store::{PartitionIndex, PartitionStats, Store};
pub use tiers::cold::{cold_operator, ColdStatus};
pub use tiers::disk::{DiskHealth, DiskStatus};
pub use tiers::waits::AppWaits;
pub use view::{Chunk, PartitionView, Run, SelectedView, Selection};
