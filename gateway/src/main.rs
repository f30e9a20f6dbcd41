//! `switchyard`: the gateway process. It owns config, the node's identity,
//! logs, metrics, admin HTTP, the store, and the listeners of the Uniffle and
//! Celeborn roles (`serve`); `switchyard check-config FILE` checks a config
//! file without starting anything; `switchyard import-config ...` turns
//! Celeborn and Uniffle config files into a Switchyard one; `switchyard ctl
//! ...` asks a running node over admin HTTP. The benchmarks are another
//! binary, `switchyard-bench` (the `bench/` crate).

/// jemalloc: block-sized buffers are reused instead of mapped and faulted in
/// anew each time (see the workspace Cargo.toml).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Freed pages go back to the system within a quarter of a second (a
/// background thread purges them), so the peak RSS stays near the memory
/// number rather than holding every buffer a burst once needed: at 1 s, the
/// freed pages jemalloc kept under `switchyard-bench overload` at 10x a 64 MiB
/// number were some 60 MiB (peak 132-150 MiB against the 144 MiB bound of
/// docs/configuration.md; 120 MiB at 250 ms, 88 MiB with none kept), while
/// a quarter second still keeps the pages a steady stream of pushes reuses. `oversize_threshold:0`
/// keeps allocations of 8 MiB and more (a gRPC message's buffers, chunk
/// reads) in the normal arenas under the same decay: jemalloc's default
/// sends them to an arena that unmaps them on free, so each was faulted in
/// anew, 4 KiB at a time (on `bench uniffle` over GRPC: half the page
/// faults, server CPU 4.0 -> 3.1 s, write 0.95 -> 1.24 GB/s).
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8] =
    b"background_thread:true,dirty_decay_ms:250,muzzy_decay_ms:0,oversize_threshold:0\0";

mod admin;
mod cli;
mod config;
mod ctl;
mod decommission;
mod fleet;
mod import_config;
mod node;
mod numa;
mod serve;
mod telemetry;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use crate::cli::{CheckConfigArgs, Cli, Command, ServeArgs};
use crate::config::GatewayConfig;

/// How long blocking tasks may linger once `serve` has returned.
const RUNTIME_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => run_serve(args),
        Command::CheckConfig(args) => run_check_config(args),
        Command::ImportConfig(args) => import_config::run(args),
        Command::Ctl(command) => ctl::run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Loads the file through the same loader as `serve` (defaults, the file,
/// the `SWITCHYARD_*` overrides, then every check), and prints the effective
/// configuration. Binds no port and touches no data directory.
fn run_check_config(args: CheckConfigArgs) -> anyhow::Result<()> {
    let file = args.file.display().to_string();
    // Errors of the file itself already name it; the others (a check, an
    // environment override) get it in front.
    let config = GatewayConfig::load(Some(&args.file)).map_err(|e| {
        if format!("{e:#}").contains(&file) {
            e
        } else {
            e.context(format!("{file} is not a valid configuration"))
        }
    })?;
    if args.quiet {
        return Ok(());
    }
    let overrides: Vec<&str> = config::ENV_OVERRIDES
        .iter()
        .copied()
        .filter(|name| std::env::var(name).is_ok_and(|v| !v.trim().is_empty()))
        .collect();
    println!(
        "# The effective configuration of {}: built-in defaults, then the file,\n\
         # then the environment ({}). Secrets are redacted.",
        args.file.display(),
        if overrides.is_empty() {
            "no SWITCHYARD_* overrides set".to_string()
        } else {
            format!("overrides: {}", overrides.join(", "))
        }
    );
    println!("# {}", config.container_memory());
    print!("{}", config.to_redacted_toml()?);
    eprintln!("switchyard: {} is valid", args.file.display());
    Ok(())
}

fn run_serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = GatewayConfig::load(args.config.as_deref())?;
    let log_node = telemetry::init_logging(&config.log)?;
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all().thread_name("switchyard");
    if config.runtime.worker_threads > 0 {
        builder.worker_threads(config.runtime.worker_threads);
    }
    let runtime = builder
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the tokio runtime: {e}"))?;
    let node_runtimes = if config.runtime.numa {
        let nodes = numa::nodes();
        tracing::info!(nodes = nodes.len(), cpus = ?nodes.iter().map(|n| n.cpus.len()).collect::<Vec<_>>(), "runtime.numa: NUMA topology");
        let started = numa::NodeRuntimes::start(nodes)
            .map_err(|e| anyhow::anyhow!("cannot start the NUMA node runtimes: {e}"))?;
        if started.is_none() {
            tracing::info!("runtime.numa: fewer than two NUMA nodes, nothing to bind");
        }
        started
    } else {
        None
    };
    let result = runtime.block_on(serve::serve(
        config,
        args.config,
        log_node,
        node_runtimes.as_ref(),
    ));
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN_TIMEOUT);
    if let Some(n) = node_runtimes {
        for (_, r) in n.nodes {
            r.shutdown_timeout(RUNTIME_SHUTDOWN_TIMEOUT);
        }
    }
    result
}
