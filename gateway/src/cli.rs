//! Command line: `switchyard serve [--config FILE]`, `switchyard check-config
//! FILE`, `switchyard import-config ...`, `switchyard ctl status|apps`. The
//! benchmarks are the `switchyard-bench` binary.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Parser, Subcommand};

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
    /// Load FILE exactly as `serve` would (defaults, the file, SWITCHYARD_*
    /// overrides), validate it, and print the effective configuration as
    /// TOML with secrets redacted. Exits 1 naming the key on an error.
    /// Binds nothing and writes nothing.
    CheckConfig(CheckConfigArgs),
    /// Turn an existing Celeborn celeborn-defaults.conf and/or Uniffle
    /// server.conf / coordinator.conf into a switchyard.toml holding only the
    /// keys that map. The TOML goes to standard output (or -o FILE), a report
    /// of what was mapped, ignored (and why) and in conflict to standard
    /// error. The TOML is loaded as check-config would before it is written;
    /// a value that cannot be converted exits 1 naming its key.
    ImportConfig(ImportConfigArgs),
    /// Ask a running node over its admin HTTP.
    #[command(subcommand)]
    Ctl(CtlCommand),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TOML config file; see config/switchyard.toml for every key and its
    /// default. SWITCHYARD_* environment variables override it.
    #[arg(long, short, value_name = "FILE", env = "SWITCHYARD_CONFIG")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// The TOML config file to check.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Print nothing on success; only the exit status tells.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
#[command(group(
    ArgGroup::new("input")
        .required(true)
        .multiple(true)
        .args(["celeborn", "uniffle", "uniffle_coordinator"])
))]
pub struct ImportConfigArgs {
    /// A Celeborn celeborn-defaults.conf (Master and Worker settings).
    #[arg(long, value_name = "FILE")]
    pub celeborn: Option<PathBuf>,
    /// A Uniffle shuffle server's server.conf.
    #[arg(long, value_name = "FILE")]
    pub uniffle: Option<PathBuf>,
    /// A Uniffle coordinator's coordinator.conf.
    #[arg(long, value_name = "FILE")]
    pub uniffle_coordinator: Option<PathBuf>,
    /// Write the TOML to FILE instead of standard output.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// The node's id, version, uptime, readiness, roles, memory and disks.
    Status(CtlArgs),
    /// The applications the node's store holds: protocol, client, bytes
    /// written and read, partitions, bytes per tier, idle time.
    Apps(CtlArgs),
    /// The migration report: per protocol and per application (live and
    /// recently removed), which protocol and client moved how many bytes, and
    /// the bytes per protocol per hour.
    Migration(CtlArgs),
    /// The shuffles of one application (every protocol that has that id):
    /// partitions, committed ones, bytes written and per tier.
    Shuffles(ShufflesArgs),
    /// The workers a coordinator hears from (`GET /api/v1/cluster` on
    /// `--admin`): node id, state (active, decommissioning, lost), endpoints,
    /// memory, disk room, partitions, last heartbeat.
    Nodes(CtlArgs),
    /// Decommissions a node: it takes no new partitions, keeps serving what
    /// it holds, and exits 0 once no application holds data on it.
    Decommission(DecommissionArgs),
}

#[derive(Debug, Args)]
pub struct DecommissionArgs {
    /// The node id, looked up in the `--admin` coordinator's worker list;
    /// omitted: the `--admin` node itself.
    pub node: Option<String>,
    /// The target node's `admin.token`.
    #[arg(long, env = "SWITCHYARD_ADMIN_TOKEN", hide_env_values = true)]
    pub token: String,
    /// Cancels the node's decommission instead: it takes new partitions
    /// again and does not exit.
    #[arg(long)]
    pub cancel: bool,
    #[command(flatten)]
    pub ctl: CtlArgs,
}

#[derive(Debug, Args)]
pub struct ShufflesArgs {
    /// The application id, as its client names it (or `<protocol>/<id>`).
    pub app: String,
    #[command(flatten)]
    pub ctl: CtlArgs,
}

#[derive(Debug, Args)]
pub struct CtlArgs {
    /// The node's admin HTTP address (`admin.listen`).
    #[arg(
        long,
        value_name = "URL",
        env = "SWITCHYARD_ADMIN",
        default_value = "http://127.0.0.1:19990"
    )]
    pub admin: String,
    /// Print the node's raw JSON (/api/v1/status; /api/v1/migration for
    /// `migration`) instead of tables.
    #[arg(long)]
    pub json: bool,
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

    #[test]
    fn check_config_and_ctl_parse() {
        let cli = Cli::try_parse_from(["switchyard", "check-config", "x.toml"]).unwrap();
        let Command::CheckConfig(args) = cli.command else {
            panic!("check-config expected")
        };
        assert_eq!(args.file, PathBuf::from("x.toml"));
        assert!(Cli::try_parse_from(["switchyard", "check-config"]).is_err());

        let cli = Cli::try_parse_from([
            "switchyard",
            "ctl",
            "apps",
            "--admin",
            "http://10.0.0.1:1",
            "--json",
        ])
        .unwrap();
        let Command::Ctl(CtlCommand::Apps(args)) = cli.command else {
            panic!("ctl apps expected")
        };
        assert_eq!(args.admin, "http://10.0.0.1:1");
        assert!(args.json);
    }

    #[test]
    fn import_config_needs_an_input() {
        assert!(Cli::try_parse_from(["switchyard", "import-config"]).is_err());
        assert!(Cli::try_parse_from(["switchyard", "import-config", "-o", "x.toml"]).is_err());
        let cli = Cli::try_parse_from([
            "switchyard",
            "import-config",
            "--uniffle",
            "server.conf",
            "--uniffle-coordinator",
            "coordinator.conf",
            "--celeborn",
            "celeborn-defaults.conf",
            "-o",
            "out.toml",
        ])
        .unwrap();
        let Command::ImportConfig(args) = cli.command else {
            panic!("import-config expected")
        };
        assert_eq!(args.uniffle, Some(PathBuf::from("server.conf")));
        assert_eq!(
            args.uniffle_coordinator,
            Some(PathBuf::from("coordinator.conf"))
        );
        assert_eq!(args.celeborn, Some(PathBuf::from("celeborn-defaults.conf")));
        assert_eq!(args.output, Some(PathBuf::from("out.toml")));
        let cli =
            Cli::try_parse_from(["switchyard", "import-config", "--celeborn", "c.conf"]).unwrap();
        let Command::ImportConfig(args) = cli.command else {
            panic!("import-config expected")
        };
        assert!(args.uniffle.is_none() && args.output.is_none());
    }
}
