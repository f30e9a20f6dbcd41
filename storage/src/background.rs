//! The store's background loops: spill checks, disk health, application
//! expiry and gauges. Each stops when the store shuts down.

use std::sync::Arc;
use std::time::Duration;

use crate::store::Store;

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
                    _ = store.spill_wakeup.notified() => {}
                    _ = tokio::time::sleep(interval) => {}
                }
                store.spill_if_needed();
                if tokio::time::Instant::now() >= gauges_due {
                    store.publish_gauges();
                    gauges_due = tokio::time::Instant::now() + Duration::from_secs(1);
                }
            }
        });

        let weak = Arc::downgrade(self);
        let cancel = self.cancel.clone();
        let interval = self.config.disks.health_check_interval;
        self.tasks.spawn(async move {
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(interval) => {}
                }
                let Some(store) = weak.upgrade() else { return };
                // Every disk at once: a hung one (each call bounded by
                // io_timeout) must not delay the others' checks.
                futures::future::join_all(store.disks.iter().map(|d| async move {
                    d.check_capacity().await;
                    d.probe_if_faulted().await;
                }))
                .await;
            }
        });

        let weak = Arc::downgrade(self);
        let cancel = self.cancel.clone();
        let interval = self.config.apps.expiry_check_interval;
        self.tasks.spawn(async move {
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(interval) => {}
                }
                let Some(store) = weak.upgrade() else { return };
                store.expire_apps().await;
            }
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
            store.sweep_orphans().await;
        });
    }
}
