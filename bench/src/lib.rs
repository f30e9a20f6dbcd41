//! `switchyard-bench`: benchmarks that print figures and a ratio against a
//! baseline measured in the same run. They drive a server through the test
//! clients of `switchyard-clients` (uniffle, celeborn, flink, overload, scale,
//! soak: a fleet of nodes it starts itself, neighbours: one node it starts,
//! beside real Spark and Flink jobs) or
//! the store in process (storage, cold, restart, memory-wait); the
//! `switchyard` server binary links none of it.
//!
//! - [`harness`]: what the mapper-driving benches share (baseline, pattern,
//!   latency, tasks, the work queue of readers, phase figures);
//! - [`lifecycle`]: the Celeborn LifecycleManager's calls (slots, commit);
//! - [`report`]: rates, sizes, process figures.
//!
//! [`run_args`] runs one bench in process from its command line, as the
//! gateway's tests do.

pub mod celeborn;
pub mod cold;
pub mod fleet_scale;
pub mod flink;
pub mod harness;
pub mod lifecycle;
pub mod memory_wait;
pub mod neighbours;
pub mod overload;
pub mod report;
pub mod restart;
pub mod scale;
pub mod soak;
pub mod storage;
pub mod uniffle;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "switchyard-bench",
    version,
    about = "Switchyard's benchmarks: figures against a baseline measured in the same run",
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The block store on one data directory, against raw sequential I/O.
    Storage(storage::StorageBenchArgs),
    /// Any Uniffle deployment through its coordinator: write, read, verify.
    Uniffle(uniffle::UniffleBenchArgs),
    /// Any Celeborn deployment through its master: push, commit, fetch, verify.
    Celeborn(celeborn::CelebornBenchArgs),
    /// Reads of huge partitions from the cold tier: through the gateway against a direct OpenDAL read.
    Cold(cold::ColdBenchArgs),
    /// Flink's map partitions and credit-based reads through any Celeborn deployment: write, read, verify.
    Flink(flink::FlinkBenchArgs),
    /// How long a writer waits for memory once it is released: woken by the release against a 5 ms poll.
    MemoryWait(memory_wait::MemoryWaitBenchArgs),
    /// Both protocols at once, many clients, several times the memory budget:
    /// peak RSS against the configured bound, backpressure, every block checked.
    Overload(overload::OverloadBenchArgs),
    /// Restart recovery: commit N partitions, kill -9, time to ready and
    /// manifest bytes per partition; the write path with recovery on and off.
    Restart(restart::RestartBenchArgs),
    /// A node at production scale: A apps x S shuffles x P partitions through
    /// both protocols held at once; RSS per partition, push/read latency,
    /// idle CPU, kill -9 and restart, unregister and expiry.
    Scale(scale::ScaleBenchArgs),
    /// Hours of mixed load of both protocols on a fleet with replication
    /// while nodes are killed, restarted, decommissioned and cut off; every
    /// acknowledged record must be read back exactly once.
    Soak(soak::SoakArgs),
    /// Noisy neighbours on one node with a throttled disk: real small Spark
    /// and Flink jobs through the stock clients, alone and beside an
    /// aggressor that holds the node at its budget through one protocol.
    Neighbours(neighbours::NeighboursArgs),
    /// The control plane of a big fleet: 3 real coordinators, up to 1,000
    /// simulated workers and drivers of both protocols; placement latency
    /// by shuffle size, coordinator CPU and RSS, app-book exchange, dead
    /// workers, a restarted coordinator, placement balance.
    FleetScale(fleet_scale::FleetScaleArgs),
}

/// Why a bench run did not complete.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Usage(#[from] clap::Error),
    #[error("cannot start the tokio runtime: {0}")]
    Runtime(std::io::Error),
    #[error("{0:#}")]
    Failed(#[from] anyhow::Error),
}

/// Runs one bench on a runtime of its own; its figures go to standard output.
pub fn run(command: Command) -> Result<(), BenchError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(BenchError::Runtime)?;
    runtime.block_on(async move {
        match command {
            Command::Storage(args) => storage::run(args).await,
            Command::Restart(args) => restart::run(args).await,
            Command::Uniffle(args) => uniffle::run(args).await,
            Command::Celeborn(args) => celeborn::run(args).await,
            Command::Cold(args) => cold::run(args).await,
            Command::Flink(args) => flink::run(args).await,
            Command::MemoryWait(args) => memory_wait::run(args).await,
            Command::Overload(args) => overload::run(args).await,
            Command::Scale(args) => scale::run(args).await,
            Command::Soak(args) => soak::run(args).await,
            Command::Neighbours(args) => neighbours::run(args).await,
            Command::FleetScale(args) => fleet_scale::run(args).await,
        }
    })?;
    Ok(())
}

/// Runs the bench a `switchyard-bench` command line names (without the
/// program name), e.g. `["celeborn", "--master", "127.0.0.1:9097"]`.
pub fn run_args<I, S>(args: I) -> Result<(), BenchError>
where
    I: IntoIterator<Item = S>,
    S: Into<std::ffi::OsString> + Clone,
{
    let argv = std::iter::once(std::ffi::OsString::from("switchyard-bench"))
        .chain(args.into_iter().map(Into::into));
    run(Cli::try_parse_from(argv)?.command)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bench_arguments_parse() {
        let cli = Cli::try_parse_from([
            "switchyard-bench",
            "uniffle",
            "--coordinator",
            "127.0.0.1:19999",
            "--size",
            "8MiB",
        ])
        .unwrap();
        let Command::Uniffle(args) = cli.command else {
            panic!("uniffle expected")
        };
        assert_eq!(args.size.as_u64(), 8 << 20);
        assert!(Cli::try_parse_from(["switchyard-bench", "celeborn"]).is_err());
        assert!(matches!(run_args(["flink"]), Err(BenchError::Usage(_))));
    }

    #[test]
    fn work_queue_hands_out_each_item_once() {
        let queue = harness::WorkQueue::new(3);
        let other = queue.clone();
        assert_eq!(queue.take(), Some(0));
        assert_eq!(other.take(), Some(1));
        assert_eq!(queue.take(), Some(2));
        assert_eq!(other.take(), None);
    }

    #[test]
    fn worker_addr_takes_the_port_from_the_end() {
        let id = "10.0.0.1:1:2:3:4";
        assert_eq!(
            lifecycle::worker_addr(id, 2).unwrap(),
            "10.0.0.1:3".parse().unwrap()
        );
    }
}
