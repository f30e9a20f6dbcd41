//! Applications: their leases, quotas, lifecycle events and history.

pub mod ledger;
pub mod lifecycle;
