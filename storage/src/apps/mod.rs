//! Applications: their leases, the shuffles and partitions they hold,
//! quotas, removal events (with tombstones of dead shuffles) and the history
//! of removed applications. [`Apps`] owns all of it; the store and the other
//! parts call its methods.

mod app;
pub mod ledger;
pub mod lifecycle;
mod quota;
pub(crate) mod registry;

pub(crate) use app::App;
pub(crate) use registry::Apps;
