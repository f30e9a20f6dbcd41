//! The store's background loops: spill checks, disk health, application
//! expiry and gauges. Each stops when the store shuts down.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use super::Store;

/// Background checks (disk health, expiry) that panicked and went on.
pub(crate) const BACKGROUND_PANICS: &str = "switchyard_background_panics_total";

impl Store {
    pub(crate) fn start_background(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let cancel = self.cancel.clone();
        let interval = self.config.memory.spill_check_interval;
        self.tasks.spawn(async move {
            let mut gauges_due = tokio::time::Instant::now();
            loop {
                let Some(store) = weak.upgrade() else { return };
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = store.flusher.spill_requested() => {}
                    _ = tokio::time::sleep(interval) => {}
                }
                store.count_share_holders();
                store.flusher.spill_if_needed(
                    || store.apps.all_partitions(),
                    |p| store.shares.is_over(&p.key().app),
                );
                if tokio::time::Instant::now() >= gauges_due {
                    store.publish_gauges();
                    gauges_due = tokio::time::Instant::now() + Duration::from_secs(1);
                }
            }
        });

        self.every(
            self.config.disks.health_check_interval,
            |store| async move {
                store.durable.check_disks().await;
                store.remove_late_orphans().await;
            },
        );
        self.every(self.config.apps.expiry_check_interval, |store| async move {
            store.expire_apps().await;
        });

        // Off the path to ready: files no recovered partition owns go once
        // the node serves.
        let weak = Arc::downgrade(self);
        let cancel = self.cancel.clone();
        let grace = self.config.recovery.orphan_grace;
        self.tasks.spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(grace) => {}
            }
            let Some(store) = weak.upgrade() else { return };
            let swept = crate::persist::sweep_orphans(
                store.apps.all_partitions(),
                store.apps.ids(),
                &store.durable,
            )
            .await;
            store.recovery.swept(swept);
        });
    }

    /// Runs `tick` every `interval` until the store shuts down or is
    /// dropped (the loop holds only a weak reference between ticks).
    fn every<F, Fut>(self: &Arc<Self>, interval: Duration, tick: F)
    where
        F: Fn(Arc<Store>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let weak = Arc::downgrade(self);
        let cancel = self.cancel.clone();
        self.tasks.spawn(async move {
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(interval) => {}
                }
                let Some(store) = weak.upgrade() else { return };
                // A tick that panics is logged and the loop goes on: a node
                // whose expiry loop ended once kept lapsed applications'
                // files for good.
                let ticked = std::panic::AssertUnwindSafe(tick(store)).catch_unwind();
                if ticked.await.is_err() {
                    metrics::counter!(BACKGROUND_PANICS).increment(1);
                    tracing::error!(
                        "a background check panicked; it runs again at its next interval"
                    );
                }
            }
        });
    }
}
