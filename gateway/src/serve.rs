//! `switchyard serve`: opens the store, serves admin HTTP, and shuts down in
//! order on SIGTERM or Ctrl-C.

use std::time::{Duration, Instant};

use anyhow::Context;
use metrics_exporter_prometheus::PrometheusHandle;
use switchyard_celeborn::CelebornNode;
use switchyard_storage::Store;
use switchyard_uniffle::UniffleNode;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::admin::{self, AdminState};
use crate::config::GatewayConfig;
use crate::telemetry;

/// How long in-flight admin requests may take to finish after a shutdown
/// signal before their connections are dropped.
const ADMIN_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// SIGTERM and SIGINT, registered up front so a signal that arrives while
/// the store is still opening is not lost (nor fatal).
struct ShutdownSignals {
    term: Signal,
    int: Signal,
}

impl ShutdownSignals {
    fn register() -> anyhow::Result<Self> {
        Ok(ShutdownSignals {
            term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
        })
    }

    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

pub async fn serve(config: GatewayConfig, metrics: PrometheusHandle) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut signals = ShutdownSignals::register()?;

    // Bind first: a taken port fails before any data directory is touched.
    let listener = TcpListener::bind(config.admin.listen)
        .await
        .with_context(|| format!("cannot listen on admin.listen {}", config.admin.listen))?;
    let admin_addr = listener.local_addr()?;

    let upkeep = tokio::spawn({
        let metrics = metrics.clone();
        async move {
            let mut tick = tokio::time::interval(telemetry::UPKEEP_INTERVAL);
            loop {
                tick.tick().await;
                metrics.run_upkeep();
            }
        }
    });

    info!(
        version = admin::VERSION,
        memory = %config.storage.memory.capacity,
        dirs = ?config.storage.disks.dirs,
        cold = config.storage.cold.is_some(),
        "opening the store"
    );
    let store = Store::open(config.storage.clone())
        .await
        .context("cannot open the store")?;
    info!(ready = store.is_ready(), "store open");

    // Protocol listeners hold a clone of `store` and stop before
    // `store.shutdown()` below.
    let uniffle = if config.uniffle.enabled {
        Some(
            UniffleNode::start(config.uniffle.clone(), store.clone())
                .await
                .context("cannot start the Uniffle roles")?,
        )
    } else {
        info!("uniffle roles disabled");
        None
    };
    let celeborn = if config.celeborn.enabled {
        Some(
            CelebornNode::start(config.celeborn.clone(), store.clone())
                .await
                .context("cannot start the Celeborn roles")?,
        )
    } else {
        info!("celeborn roles disabled");
        None
    };

    let (stop_tx, mut stop_rx) = watch::channel(false);
    let app = admin::router(AdminState {
        store: store.clone(),
        metrics,
        started,
    });
    let mut admin_server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop_rx.wait_for(|stop| *stop).await;
            })
            .await
    });
    info!(%admin_addr, "admin HTTP listening (/healthz /readyz /metrics /api/v1/status)");

    let mut result = Ok(());
    tokio::select! {
        signal = signals.recv() => {
            info!(signal, "shutting down: closing admin HTTP");
            let _ = stop_tx.send(true);
            match tokio::time::timeout(ADMIN_DRAIN_TIMEOUT, &mut admin_server).await {
                Ok(Ok(Ok(()))) => info!("admin HTTP closed"),
                Ok(Ok(Err(e))) => warn!(error = %e, "admin HTTP ended with an error"),
                Ok(Err(e)) => warn!(error = %e, "admin HTTP task failed"),
                Err(_) => {
                    warn!(timeout = ?ADMIN_DRAIN_TIMEOUT, "admin HTTP requests still running; dropping them");
                    admin_server.abort();
                }
            }
        }
        ended = &mut admin_server => {
            let err = match ended {
                Ok(Ok(())) => anyhow::anyhow!("admin HTTP stopped unexpectedly"),
                Ok(Err(e)) => anyhow::Error::new(e).context("admin HTTP failed"),
                Err(e) => anyhow::Error::new(e).context("admin HTTP task failed"),
            };
            error!(error = format!("{err:#}"), "shutting down");
            result = Err(err);
        }
    }

    // A second signal skips the rest of the shutdown.
    tokio::spawn(async move {
        let signal = signals.recv().await;
        warn!(
            signal,
            "second signal: exiting before the store finished shutting down"
        );
        std::process::exit(130);
    });

    if let Some(node) = uniffle {
        info!("closing the Uniffle listeners");
        node.shutdown().await;
    }
    if let Some(node) = celeborn {
        info!("closing the Celeborn listeners");
        node.shutdown().await;
    }
    info!("shutting down the store: flushing buffered data");
    let flush_started = Instant::now();
    store.shutdown().await;
    info!(took = ?flush_started.elapsed(), "store closed");
    upkeep.abort();
    if result.is_ok() {
        info!(uptime = ?started.elapsed(), "switchyard stopped");
    }
    result
}
