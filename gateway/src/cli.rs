//! Command line: `switchyard serve [--config FILE]`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "switchyard",
    version,
    about = "One remote shuffle service for Uniffle and Celeborn clients",
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway: admin HTTP, metrics and the store (built-in defaults
    /// when no config file is given).
    Serve(ServeArgs),
    /// Benchmarks that print figures against a baseline measured in the same run.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The block store on one data directory, against raw sequential I/O.
    Storage(crate::bench::storage::StorageBenchArgs),
    /// Any Uniffle deployment through its coordinator: write, read, verify.
    Uniffle(crate::bench::uniffle::UniffleBenchArgs),
    /// Any Celeborn deployment through its master: push, commit, fetch, verify.
    Celeborn(crate::bench::celeborn::CelebornBenchArgs),
    /// Reads of huge partitions from the cold tier: through the gateway against a direct OpenDAL read.
    Cold(crate::bench::cold::ColdBenchArgs),
    /// Flink's map partitions and credit-based reads through any Celeborn deployment: write, read, verify.
    Flink(crate::bench::flink::FlinkBenchArgs),
    /// How long a writer waits for memory once it is released: woken by the release against a 5 ms poll.
    MemoryWait(crate::bench::memory_wait::MemoryWaitBenchArgs),
    /// Both protocols at once, many clients, several times the memory budget:
    /// peak RSS against the configured bound, backpressure, every block checked.
    Overload(crate::bench::overload::OverloadBenchArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TOML config file; see config/switchyard.toml for every key and its
    /// default. SWITCHYARD_* environment variables override it.
    #[arg(long, short, value_name = "FILE", env = "SWITCHYARD_CONFIG")]
    pub config: Option<PathBuf>,
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
    fn serve_parses_with_and_without_config() {
        let cli = Cli::try_parse_from(["switchyard", "serve"]).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("serve expected")
        };
        // SWITCHYARD_CONFIG may be set in the environment running the tests.
        if std::env::var_os("SWITCHYARD_CONFIG").is_none() {
            assert!(args.config.is_none());
        }

        let cli = Cli::try_parse_from(["switchyard", "serve", "--config", "x.toml"]).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("serve expected")
        };
        assert_eq!(args.config, Some(PathBuf::from("x.toml")));
    }
}
