//! Switchyard's node-to-node protocol and the coordinators' soft state.
//!
//! Workers heartbeat every coordinator ([`heartbeat`]) with both protocols'
//! endpoints, their load and their state. A coordinator keeps what it hears
//! in a [`Directory`] (placement input for both protocols) and what Celeborn
//! drivers tell it in an [`AppBook`] (applications seen, shuffles
//! unregistered, applications lost), which it returns to the workers that
//! hold those applications; coordinators exchange their books with each other
//! ([`AppSyncer`]). Nothing here needs agreement between coordinators: the
//! books are joins that merge in any order, every worker hears from every
//! coordinator, refreshes an application when any of them saw it, and
//! deletes only on a tombstone (see `docs/cluster.md`).
//!
//! This crate knows no shuffle protocol; the gateway maps its records onto
//! the Uniffle and Celeborn roles.

pub mod apps;
pub mod config;
pub mod directory;
pub mod heartbeat;
pub mod proto;
pub mod service;
pub mod sync;

pub use apps::AppBook;
pub use config::{ClusterConfig, Role};
pub use directory::{Directory, WorkerView};
pub use heartbeat::{Heartbeater, LocalWorker, SecretLookup};
pub use service::{ClusterService, WorkerListener};
pub use sync::{AppSyncer, APP_BOOK_RETENTION};

/// The newest protocol version this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// The gRPC metadata key that carries the cluster secret.
pub const SECRET_HEADER: &str = "x-switchyard-cluster-secret";
