//! `requireBuffer` tickets: memory reserved ahead of a `sendShuffleData`.
//!
//! A ticket holds a [`Reservation`] of the shared memory budget; it is used
//! once, and dropped (returning its memory) when it expires unused.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use switchyard_storage::Reservation;

pub(crate) struct Ticket {
    pub app: String,
    pub reservation: Reservation,
    created: Instant,
}

#[derive(Default)]
pub(crate) struct Tickets {
    next: AtomicI64,
    live: DashMap<i64, Ticket>,
}

impl Tickets {
    pub(crate) fn issue(&self, app: &str, reservation: Reservation) -> i64 {
        // Ids start at 1 and only grow: -1 means "no ticket" on the wire.
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.live.insert(
            id,
            Ticket {
                app: app.to_string(),
                reservation,
                created: Instant::now(),
            },
        );
        id
    }

    /// The ticket `id`, if `app` may spend it: its own, or a legacy one
    /// issued without an application.
    pub(crate) fn take(&self, id: i64, app: &str) -> Option<Ticket> {
        self.live
            .remove_if(&id, |_, t| t.app.is_empty() || t.app == app)
            .map(|(_, t)| t)
    }

    /// Drops tickets older than `timeout`; returns how many.
    pub(crate) fn expire(&self, timeout: Duration) -> usize {
        let before = self.live.len();
        self.live.retain(|_, t| t.created.elapsed() < timeout);
        before - self.live.len()
    }

    pub(crate) fn remove_app(&self, app: &str) {
        self.live.retain(|_, t| t.app != app);
    }

    pub(crate) fn len(&self) -> usize {
        self.live.len()
    }
}
