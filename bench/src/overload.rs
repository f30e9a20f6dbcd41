//! `switchyard-bench overload`: many clients of both protocols at once push
//! several times the node's memory budget (Celeborn pushes and Uniffle sends at
//! the same time, each half of them), commit, and read everything back,
//! checking every batch and block. It prints the server's peak RSS against
//! what the configuration bounds it to (the node's memory number, plus the read
//! budget, plus 64 MiB), the backpressure the server answered with, and the
//! throughput, and fails when the peak passes the bound.
//!
//! Run it against a freshly started server (its peak RSS is the process's
//! lifetime peak) with `--server-pid`.

use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{ensure, Context};
use bytesize::ByteSize;

use crate::celeborn::CelebornBenchArgs;
use crate::report::{self, gbps, mib};
use crate::uniffle::UniffleBenchArgs;

/// Allowed beyond the two budgets: code, runtime, connection buffers.
pub(crate) const OVERHEAD: u64 = 64 << 20;

#[derive(Debug, Clone, clap::Args)]
pub struct OverloadBenchArgs {
    /// The node's admin HTTP address (for its budget and counters).
    #[arg(long, default_value = "127.0.0.1:19990")]
    pub admin: SocketAddr,
    /// Celeborn master address.
    #[arg(long, default_value = "127.0.0.1:9097")]
    pub celeborn_master: String,
    /// Uniffle coordinator address.
    #[arg(long, default_value = "127.0.0.1:19999")]
    pub uniffle_coordinator: String,
    /// Concurrent clients in all, half per protocol (each a writer, then a reader).
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Bytes pushed in all, as a multiple of the node's memory budget.
    #[arg(long, default_value_t = 10)]
    pub times_budget: u64,
    /// Uniffle transport: GRPC or GRPC_NETTY.
    #[arg(long, default_value = "GRPC_NETTY")]
    pub transport: String,
    /// PID of the server, for its peak RSS.
    #[arg(long)]
    pub server_pid: Option<u32>,
}

/// The body of a GET on the node's admin HTTP.
pub(crate) async fn admin_get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let url = format!("http://{addr}{path}");
    let client = reqwest::Client::builder()
        // The admin port is inside the cluster network; never via a proxy.
        .no_proxy()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .context("cannot build the HTTP client")?;
    let response = client
        .get(&url)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    ensure!(
        response.status().is_success(),
        "GET {url} answered {}",
        response.status()
    );
    response
        .text()
        .await
        .with_context(|| format!("GET {url}: cannot read the answer"))
}

/// The backpressure a node has answered with so far.
struct Backpressure {
    memory_waits: u64,
    uniffle_no_buffer: f64,
}

async fn backpressure(admin: SocketAddr) -> anyhow::Result<Backpressure> {
    let status: serde_json::Value =
        serde_json::from_str(&admin_get(admin, "/api/v1/status").await?)?;
    let metrics = admin_get(admin, "/metrics").await?;
    Ok(Backpressure {
        memory_waits: status["storage"]["operations"]["memory_waits"]
            .as_u64()
            .unwrap_or(0),
        uniffle_no_buffer: metrics
            .lines()
            .filter(|l| {
                l.starts_with("switchyard_uniffle_errors_total{")
                    && l.contains("status=\"NO_BUFFER")
            })
            .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .sum(),
    })
}

pub async fn run(args: OverloadBenchArgs) -> anyhow::Result<()> {
    ensure!(args.clients >= 2, "--clients must be at least 2");
    let status: serde_json::Value =
        serde_json::from_str(&admin_get(args.admin, "/api/v1/status").await?)?;
    let memory = &status["storage"]["memory"];
    // The node's one number (stored blocks, frames in flight, replies); a
    // node from before it was one number shows the store's capacity only.
    let budget = memory["node_capacity"]
        .as_u64()
        .or_else(|| memory["capacity"].as_u64())
        .context("storage.memory.capacity")?;
    let read_budget = memory["read_capacity"].as_u64().unwrap_or(0);
    let bound = budget + read_budget + OVERHEAD;
    let total = budget * args.times_budget;
    let per_protocol = ByteSize::b(total / 2);
    let clients = args.clients / 2;
    println!(
        "overload bench: {} ({}x the {} budget) from {} clients, half Celeborn, half Uniffle {}; bound on peak RSS: budget + read budget {} + {} MiB = {:.0} MiB",
        ByteSize::b(total),
        args.times_budget,
        ByteSize::b(budget),
        clients * 2,
        args.transport,
        ByteSize::b(read_budget),
        OVERHEAD >> 20,
        mib(bound)
    );
    // Both halves use one application id, as two unrelated clients of the
    // two protocols may: each protocol's namespace in the store keeps them
    // apart, and every byte read back is checked.
    let app = crate::harness::app_id("bench-overload");
    let before = backpressure(args.admin).await?;
    let celeborn = crate::celeborn::run(CelebornBenchArgs {
        master: args.celeborn_master.clone(),
        size: per_protocol,
        mappers: clients,
        partitions: 64,
        batch_size: ByteSize::kib(64),
        server_pid: None,
        app: Some(app.clone()),
        keep_app: false,
        replicate: false,
        read_replicas: false,
        rack_aware: false,
    });
    let uniffle = crate::uniffle::run(UniffleBenchArgs {
        coordinator: Some(args.uniffle_coordinator.clone()),
        server: Vec::new(),
        size: per_protocol,
        mappers: clients,
        partitions: 64,
        block_size: ByteSize::kib(256),
        blocks_per_request: 4,
        transport: args.transport.clone(),
        replicas: 1,
        read_replica: 0,
        server_pid: None,
        app: Some(app),
    });
    let started = Instant::now();
    let (c, u) = tokio::join!(celeborn, uniffle);
    let elapsed = started.elapsed();
    c.context("celeborn half")?;
    u.context("uniffle half")?;
    let after = backpressure(args.admin).await?;
    println!(
        "both protocols: {} written and read back, every batch and block checked, in {:.1} s ({:.3} GB/s written+read)",
        ByteSize::b(total),
        elapsed.as_secs_f64(),
        gbps(2 * total, elapsed)
    );
    println!(
        "backpressure: {} appends waited for memory (Celeborn pushes), {:.0} Uniffle requests answered NO_BUFFER",
        after.memory_waits - before.memory_waits,
        after.uniffle_no_buffer - before.uniffle_no_buffer
    );
    if let Some(pid) = args.server_pid {
        let peak = report::peak_rss_of(pid).context("server peak RSS")?;
        let ratio = peak as f64 / bound as f64;
        println!(
            "server peak RSS {:.0} MiB = {:.2} of the bound ({:.0} MiB): {}",
            mib(peak),
            ratio,
            mib(bound),
            if ratio <= 1.0 { "within" } else { "OVER" }
        );
        ensure!(
            peak <= bound,
            "server peak RSS {:.0} MiB passed the bound of {:.0} MiB",
            mib(peak),
            mib(bound)
        );
    }
    Ok(())
}
