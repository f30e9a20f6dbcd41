//! `switchyard-bench <bench> ...`: runs one benchmark and prints its figures
//! (see docs/benchmarks.md). `SWITCHYARD_LOG` sets the log filter (default
//! `warn`).

use std::process::ExitCode;

use clap::Parser;

/// The gateway's allocator: in-process benches (`storage`, `cold`) measure
/// the memory the node would use, and the simulations (`fleet-scale`'s
/// thousand workers and drivers) spent ~40 % of their CPU in glibc malloc,
/// CPU the coordinators under test share on a 2-core machine.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = switchyard_bench::Cli::parse();
    let filter = std::env::var("SWITCHYARD_LOG").unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .init();
    match switchyard_bench::run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard-bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}
