//! `switchyard import-config`: turns a team's existing Celeborn
//! `celeborn-defaults.conf` and Uniffle `server.conf` / `coordinator.conf`
//! into a `switchyard.toml` that sets only the keys that map.
//!
//! The steps: read each file as Java properties ([`props`]), look every key
//! up in its file's table ([`rules`]), convert the value's units ([`units`]),
//! merge the results (the first file in [`PRECEDENCE`] wins a key two files
//! set differently), settle what only makes sense together (a cold tier,
//! one port per listener), write TOML with a comment naming each value's
//! source, and load that TOML with the same code `check-config` uses before
//! anything is written. The report on standard error says what was mapped,
//! what was ignored and why, and which conflicts were settled how.

mod props;
mod rules;
mod units;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::cli::ImportConfigArgs;
use crate::config::GatewayConfig;
use props::Properties;
use rules::{Action, Conv, Rule, Special, Why};
use units::ValueError;

/// The input files, in precedence order: when two of them set the same
/// Switchyard key to different values, the earlier one is kept. Uniffle's
/// shuffle server comes first because its settings are a store's, in
/// absolute bytes (memory budget, read budget, disk capacity), as
/// Switchyard's are; Celeborn sizes its worker from JVM off-heap ratios.
pub const PRECEDENCE: [Kind; 3] = [Kind::Uniffle, Kind::Coordinator, Kind::Celeborn];

/// Which upstream file an input is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A Uniffle shuffle server's `server.conf`.
    Uniffle,
    /// A Uniffle coordinator's `coordinator.conf`.
    Coordinator,
    /// Celeborn's `celeborn-defaults.conf`.
    Celeborn,
}

impl Kind {
    /// The command-line flag that takes this file.
    pub fn flag(self) -> &'static str {
        match self {
            Kind::Uniffle => "--uniffle",
            Kind::Coordinator => "--uniffle-coordinator",
            Kind::Celeborn => "--celeborn",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Kind::Uniffle => "Uniffle shuffle-server",
            Kind::Coordinator => "Uniffle coordinator",
            Kind::Celeborn => "Celeborn",
        }
    }

    /// The rule tables searched for this file's keys, in order.
    fn tables(self) -> &'static [&'static [Rule]] {
        match self {
            Kind::Uniffle => &[rules::UNIFFLE, rules::UNIFFLE_COMMON],
            Kind::Coordinator => &[rules::COORDINATOR, rules::UNIFFLE_COMMON],
            Kind::Celeborn => &[rules::CELEBORN],
        }
    }
}

/// What went wrong. Every message names the file, and a bad value its key.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(
        "give at least one input: --celeborn FILE, --uniffle FILE or --uniffle-coordinator FILE"
    )]
    NoInput,
    #[error("cannot read {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}", values_message(.0))]
    Values(Vec<BadValue>),
    #[error(
        "the imported settings do not pass the checks `switchyard check-config` makes \
         (nothing was written): {0}"
    )]
    Invalid(String),
    #[error("cannot write {}: {error}", path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// A value that cannot be converted, with where it came from.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key} = {value:?} ({file} line {line}){}: {reason}", target.map(|t| format!(", for {t}")).unwrap_or_default())]
pub struct BadValue {
    pub key: String,
    pub value: String,
    pub file: String,
    pub line: usize,
    pub target: Option<&'static str>,
    pub reason: ConvertError,
}

/// Why a value does not convert to its Switchyard setting.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConvertError {
    #[error(transparent)]
    Value(#[from] ValueError),
    /// Zero where the setting needs more; the text says what it takes.
    #[error("zero: expected {0}")]
    Zero(&'static str),
    #[error("too large")]
    TooLarge,
    /// An empty list: `what` is missing, `expected` shows a value.
    #[error("no {what}: expected {expected}")]
    Empty {
        what: &'static str,
        expected: &'static str,
    },
    #[error("unknown storage type {0:?}: expected MEMORY, HDD, SSD, HDFS, S3 or OSS")]
    StorageType(String),
    #[error("{0:?} has no directory before its attributes")]
    NoDirectory(String),
    #[error(
        "illegal attribute {attr:?} in {item:?}: expected capacity=, disktype= or flushthread="
    )]
    Attribute { attr: String, item: String },
    /// A Celeborn directory's `capacity=` or `flushthread=`.
    #[error("{attr}= of {dir}: {source}")]
    DirAttribute {
        attr: &'static str,
        dir: String,
        source: Box<ConvertError>,
    },
    #[error("{0}= too large")]
    AttributeTooLarge(&'static str),
    #[error("disktype= of {dir} is {value:?}: expected HDD or SSD")]
    DiskType { dir: String, value: String },
}

fn values_message(values: &[BadValue]) -> String {
    let mut s = format!(
        "{} value{} cannot be converted (nothing was written):",
        values.len(),
        if values.len() == 1 { "" } else { "s" }
    );
    for v in values {
        s.push_str(&format!("\n  {v}"));
    }
    s
}

/// One input file, parsed.
#[derive(Clone, Debug)]
pub struct Input {
    pub kind: Kind,
    /// The file's name, as the comments and the report show it.
    pub label: String,
    pub props: Properties,
}

impl Input {
    pub fn new(kind: Kind, label: impl Into<String>, text: &str) -> Self {
        Input {
            kind,
            label: label.into(),
            props: props::parse(text),
        }
    }

    fn value(&self, key: &str) -> Option<&str> {
        self.props
            .entries
            .iter()
            .find(|p| p.key == key)
            .map(|p| p.value.as_str())
    }
}

/// Where a value came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Origin {
    pub kind: Kind,
    pub label: String,
    pub key: String,
    pub raw: String,
    pub line: usize,
}

impl Origin {
    /// `rss.server.buffer.capacity (server.conf)`
    fn short(&self) -> String {
        format!("{} ({})", self.key, self.label)
    }
}

/// A Switchyard key the output sets.
#[derive(Clone, Debug, PartialEq)]
pub struct Mapped {
    pub target: &'static str,
    pub value: toml::Value,
    pub origin: Origin,
    /// Later sources that set the same value.
    pub also: Vec<Origin>,
}

/// An upstream key the output does not carry.
#[derive(Clone, Debug, PartialEq)]
pub struct Ignored {
    pub origin: Origin,
    pub why: Why,
    pub detail: String,
}

/// Two sources setting one Switchyard key to different values.
#[derive(Clone, Debug, PartialEq)]
pub struct Conflict {
    pub target: &'static str,
    pub kept: (toml::Value, Origin),
    pub dropped: (toml::Value, Origin),
}

/// The outcome of an import, before it is written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Import {
    pub mapped: Vec<Mapped>,
    pub ignored: Vec<Ignored>,
    pub conflicts: Vec<Conflict>,
    pub notes: Vec<Note>,
}

/// Something the operator should know. A note about a mapped value is shown
/// only while that value is in the output (not after it lost a conflict).
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    /// The source and the Switchyard key the note is about, if any.
    pub about: Option<(Origin, &'static str)>,
    pub text: String,
}

impl Note {
    fn general(text: String) -> Self {
        Note { about: None, text }
    }
}

impl Import {
    fn get(&self, target: &str) -> Option<&Mapped> {
        self.mapped.iter().find(|m| m.target == target)
    }

    /// The notes that still apply: general ones, and those about a value the
    /// output carries from the note's source.
    pub fn live_notes(&self) -> impl Iterator<Item = &Note> {
        self.notes.iter().filter(|n| match &n.about {
            None => true,
            Some((origin, target)) => self
                .get(target)
                .is_some_and(|m| m.origin == *origin || m.also.contains(origin)),
        })
    }

    /// Adds a value; a second value for a key already set is a conflict
    /// (the first is kept), the same value again is only remembered.
    fn merge(&mut self, target: &'static str, value: toml::Value, origin: Origin) {
        match self.mapped.iter_mut().find(|m| m.target == target) {
            Some(m) if m.value == value => m.also.push(origin),
            Some(m) => self.conflicts.push(Conflict {
                target,
                kept: (m.value.clone(), m.origin.clone()),
                dropped: (value, origin),
            }),
            None => self.mapped.push(Mapped {
                target,
                value,
                origin,
                also: Vec::new(),
            }),
        }
    }

    /// Takes a mapped key back out, reporting each of its sources as ignored.
    fn unmap(&mut self, target: &str, why: Why, detail: &str) {
        if let Some(i) = self.mapped.iter().position(|m| m.target == target) {
            let m = self.mapped.remove(i);
            for origin in std::iter::once(m.origin).chain(m.also) {
                self.ignored.push(Ignored {
                    origin,
                    why,
                    detail: format!("{target} not set: {detail}"),
                });
            }
        }
    }
}

/// What other keys say that some conversions need to know.
#[derive(Debug, Default)]
struct Context {
    /// Celeborn's `celeborn.storage.availableTypes` (or its old name).
    celeborn_types: Option<String>,
    /// Whether `celeborn.worker.storage.dirs` is set.
    celeborn_dirs: bool,
    /// Uniffle's `rss.storage.type` from server.conf.
    uniffle_storage_type: Option<String>,
}

impl Context {
    fn new(inputs: &[Input]) -> Self {
        let mut c = Context::default();
        for input in inputs {
            match input.kind {
                Kind::Celeborn => {
                    c.celeborn_types = input
                        .value("celeborn.storage.availableTypes")
                        .or_else(|| input.value("celeborn.storage.activeTypes"))
                        .map(str::to_string);
                    c.celeborn_dirs = input.value("celeborn.worker.storage.dirs").is_some();
                }
                Kind::Uniffle => {
                    c.uniffle_storage_type = input.value("rss.storage.type").map(str::to_string);
                }
                Kind::Coordinator => {}
            }
        }
        c
    }
}

/// What a rule made of one value: settings, and notes about them (each
/// about the first setting).
enum Outcome {
    Mapped(Vec<(&'static str, toml::Value)>, Vec<String>),
    Ignored(Why, String),
}

/// Maps every key of every input; fails with every value that cannot be
/// converted. Pure: no files, no environment.
pub fn import(inputs: &[Input]) -> Result<Import, ImportError> {
    if inputs.is_empty() {
        return Err(ImportError::NoInput);
    }
    let ctx = Context::new(inputs);
    let mut out = Import::default();
    let mut errors = Vec::new();
    for kind in PRECEDENCE {
        for input in inputs.iter().filter(|i| i.kind == kind) {
            import_one(input, &ctx, &mut out, &mut errors);
        }
    }
    if !errors.is_empty() {
        return Err(ImportError::Values(errors));
    }
    settle_cold_tier(&mut out);
    settle_listeners(&mut out);
    Ok(out)
}

fn import_one(input: &Input, ctx: &Context, out: &mut Import, errors: &mut Vec<BadValue>) {
    for d in &input.props.duplicates {
        let lines: Vec<String> = d.lines.iter().map(|l| l.to_string()).collect();
        out.notes.push(Note::general(format!(
            "{} is set {} times in {} (lines {}): the last is used, as Java's properties do",
            d.key,
            d.lines.len(),
            input.label,
            lines.join(", ")
        )));
    }
    // Rule order first, so that a current key is seen before its older
    // alternative (which then only conflicts with it); then file order.
    let mut entries: Vec<_> = input
        .props
        .entries
        .iter()
        .map(|p| (rules::find(input.kind.tables(), &p.key), p))
        .collect();
    entries.sort_by_key(|(rule, p)| (rule.map_or(usize::MAX, |(rank, _)| rank), p.line));
    for (rule, p) in entries {
        let origin = Origin {
            kind: input.kind,
            label: input.label.clone(),
            key: p.key.clone(),
            raw: p.value.clone(),
            line: p.line,
        };
        let Some((_, rule)) = rule else {
            let detail = unknown_detail(input.kind, &p.key);
            out.ignored.push(Ignored {
                origin,
                why: Why::Unknown,
                detail,
            });
            continue;
        };
        match convert(&rule.action, &p.value, ctx) {
            Ok(Outcome::Mapped(settings, notes)) => {
                let first = settings.first().map(|(target, _)| *target);
                for (target, value) in settings {
                    out.merge(target, value, origin.clone());
                }
                out.notes.extend(notes.into_iter().map(|text| Note {
                    about: first.map(|t| (origin.clone(), t)),
                    text: format!("{}: {text}", origin.short()),
                }));
            }
            Ok(Outcome::Ignored(why, detail)) => out.ignored.push(Ignored {
                origin,
                why,
                detail,
            }),
            Err(reason) => errors.push(BadValue {
                key: p.key.clone(),
                value: p.value.clone(),
                file: input.label.clone(),
                line: p.line,
                target: match rule.action {
                    Action::Map(target, _) => Some(target),
                    _ => None,
                },
                reason,
            }),
        }
    }
}

/// The reason for a key no rule of its file knows: if it is another
/// file's key, say which file takes it.
fn unknown_detail(kind: Kind, key: &str) -> String {
    for other in PRECEDENCE.into_iter().filter(|&k| k != kind) {
        if let Some((_, rule)) = rules::find(other.tables(), key) {
            if !matches!(rule.action, Action::Ignore(Why::Unknown, _)) {
                return format!(
                    "a {} key, not read from this file (give that file with {})",
                    other.what(),
                    other.flag()
                );
            }
        }
    }
    format!(
        "not a {} key this importer knows: check it by hand",
        kind.what()
    )
}

fn convert(action: &Action, text: &str, ctx: &Context) -> Result<Outcome, ConvertError> {
    match *action {
        Action::Ignore(why, detail) => Ok(Outcome::Ignored(why, detail.to_string())),
        Action::Map(target, conv) => convert_value(target, conv, text),
        Action::Special(special) => convert_special(special, text, ctx),
    }
}

fn size_value(bytes: u64) -> toml::Value {
    toml::Value::String(units::size_string(bytes))
}

fn strings(items: Vec<String>) -> toml::Value {
    toml::Value::Array(items.into_iter().map(toml::Value::String).collect())
}

fn positive_size(text: &str) -> Result<u64, ConvertError> {
    match units::parse_size(text)? {
        0 => Err(ConvertError::Zero("a size above zero")),
        n => Ok(n),
    }
}

/// The listen address for `target` on `port`: the key's default host (from
/// the built-in defaults, so it follows them), the imported port.
fn listen(target: &str, port: u16) -> String {
    let host = GatewayConfig::default()
        .listen_addresses()
        .into_iter()
        .find(|(key, _)| *key == target)
        .map_or_else(|| [127, 0, 0, 1].into(), |(_, addr)| addr.ip());
    SocketAddr::new(host, port).to_string()
}

fn convert_value(target: &'static str, conv: Conv, text: &str) -> Result<Outcome, ConvertError> {
    let value = match conv {
        Conv::Listen => toml::Value::String(listen(target, units::parse_port(text)?)),
        Conv::Size => size_value(positive_size(text)?),
        Conv::SizeOrZero => size_value(units::parse_size(text)?),
        Conv::SizeOrDerived(why_negative) => match units::parse_size_or_negative(text)? {
            None => return Ok(Outcome::Ignored(Why::Handled, why_negative.to_string())),
            Some(0) => return Err(ConvertError::Zero("a size above zero, or -1")),
            Some(bytes) => size_value(bytes),
        },
        Conv::Duration => toml::Value::String(units::duration_string(units::parse_duration(text)?)),
        Conv::Percent => toml::Value::Float(units::parse_percent(text)?),
        Conv::Count => toml::Value::Integer(
            i64::try_from(units::parse_count(text)?).map_err(|_| ConvertError::TooLarge)?,
        ),
        Conv::Bool => toml::Value::Boolean(units::parse_bool(text)?),
        Conv::Dirs => {
            let dirs = units::parse_list(text);
            if dirs.is_empty() {
                return Err(ConvertError::Empty {
                    what: "directory",
                    expected: "a comma list of paths",
                });
            }
            strings(dirs)
        }
        Conv::List => strings(units::parse_list(text)),
    };
    let mut notes = Vec::new();
    if target == "storage.disks.dirs" {
        notes.push(
            "Uniffle's shuffle server deletes every directory in rss.storage.basePath that is \
             not one of its applications (rss.server.leak.shuffledata.check.interval): stop it \
             before Switchyard uses these directories, or give Switchyard others"
                .to_string(),
        );
    }
    Ok(Outcome::Mapped(vec![(target, value)], notes))
}

fn convert_special(special: Special, text: &str, ctx: &Context) -> Result<Outcome, ConvertError> {
    match special {
        Special::CelebornDirs => celeborn_dirs(text),
        Special::CelebornHdfsDir => {
            if let Some(types) = &ctx.celeborn_types {
                if !has_type(types, "HDFS") {
                    return Ok(Outcome::Ignored(
                        Why::Handled,
                        format!(
                            "celeborn.storage.availableTypes is {types:?}, without HDFS: \
                             Celeborn does not write here, so no cold tier is imported"
                        ),
                    ));
                }
            }
            let mut outcome = hdfs_cold_tier(text)?;
            if let (Outcome::Mapped(_, notes), None) = (&mut outcome, &ctx.celeborn_types) {
                notes.push(
                    "celeborn.storage.availableTypes is not set (Celeborn's default is HDD \
                     alone): the HDFS directory is imported as the cold tier all the same"
                        .to_string(),
                );
            }
            Ok(outcome)
        }
        Special::CelebornTypes => celeborn_types(text, ctx),
        Special::UniffleNettyPort => {
            let t = text.trim();
            if t.starts_with('-') && t[1..].chars().all(|c| c.is_ascii_digit()) && t.len() > 1 {
                return Ok(Outcome::Ignored(
                    Why::Handled,
                    "negative: Uniffle runs no Netty server; Switchyard serves its Netty data \
                     plane (uniffle.server_netty_listen) beside gRPC anyway, used only by \
                     clients with spark.rss.client.type=GRPC_NETTY"
                        .to_string(),
                ));
            }
            convert_value("uniffle.server_netty_listen", Conv::Listen, text)
        }
        Special::UniffleRemoteStorage => {
            let paths = units::parse_list(text);
            if paths.is_empty() {
                return Err(ConvertError::Empty {
                    what: "path",
                    expected: "hdfs://namenode:port/dir",
                });
            }
            if let Some(t) = &ctx.uniffle_storage_type {
                if !t.to_ascii_uppercase().contains("HDFS") {
                    return Ok(Outcome::Ignored(
                        Why::Handled,
                        format!(
                            "server.conf's rss.storage.type is {t:?}, without HDFS: the shuffle \
                             server does not write there, so no cold tier is imported"
                        ),
                    ));
                }
            }
            if paths.len() > 1 {
                return Ok(Outcome::Ignored(
                    Why::Handled,
                    "several remote storage paths: Switchyard has one cold tier; write \
                     [storage.cold] by hand"
                        .to_string(),
                ));
            }
            hdfs_cold_tier(&paths[0])
        }
    }
}

/// `hdfs://namenode:9000/celeborn` as `("hdfs://namenode:9000", "/celeborn")`;
/// `None` for another scheme or no name node.
fn split_hdfs_uri(uri: &str) -> Option<(String, String)> {
    let uri = uri.trim();
    let rest = uri
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case("hdfs://"))
        .map(|_| &uri[7..])?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if authority.is_empty() {
        return None;
    }
    let path = path.trim_end_matches('/');
    Some((format!("hdfs://{authority}"), format!("/{path}")))
}

/// An upstream HDFS directory as Switchyard's cold tier on HDFS. Other
/// schemes are left to the operator: only HDFS has a Switchyard service
/// whose settings all come from the URI.
fn hdfs_cold_tier(uri: &str) -> Result<Outcome, ConvertError> {
    let Some((name_node, root)) = split_hdfs_uri(uri) else {
        return Ok(Outcome::Ignored(
            Why::Handled,
            format!(
                "{uri:?} is not hdfs://namenode[:port]/dir: write [storage.cold] by hand \
                 (service fs, s3 or hdfs)"
            ),
        ));
    };
    Ok(Outcome::Mapped(
        vec![
            ("storage.cold.service", toml::Value::String("hdfs".into())),
            ("storage.cold.name_node", toml::Value::String(name_node)),
            ("storage.cold.root", toml::Value::String(root)),
        ],
        vec![
            "the HDFS client (hdfs-native) takes HA nameservices and other Hadoop settings \
             from HADOOP_CONF_DIR"
                .to_string(),
        ],
    ))
}

fn has_type(types: &str, wanted: &str) -> bool {
    units::parse_list(types)
        .iter()
        .any(|t| t.eq_ignore_ascii_case(wanted))
}

/// `celeborn.storage.availableTypes`: only "no local disk" (HDFS without
/// HDD or SSD) has a Switchyard meaning, an empty `storage.disks.dirs`.
fn celeborn_types(text: &str, ctx: &Context) -> Result<Outcome, ConvertError> {
    let types = units::parse_list(text);
    if types.is_empty() {
        return Err(ConvertError::Empty {
            what: "storage type",
            expected: "a list of MEMORY, HDD, SSD, HDFS, S3, OSS",
        });
    }
    if let Some(bad) = types.iter().find(|t| {
        !["MEMORY", "HDD", "SSD", "HDFS", "S3", "OSS"]
            .iter()
            .any(|k| t.eq_ignore_ascii_case(k))
    }) {
        return Err(ConvertError::StorageType(bad.clone()));
    }
    let local = has_type(text, "HDD") || has_type(text, "SSD");
    if !local && has_type(text, "HDFS") && !ctx.celeborn_dirs {
        return Ok(Outcome::Mapped(
            vec![("storage.disks.dirs", toml::Value::Array(Vec::new()))],
            vec!["HDFS without HDD or SSD: no local disks, the cold tier is the only tier".into()],
        ));
    }
    Ok(Outcome::Ignored(
        Why::Handled,
        "Switchyard's tiers are memory (always first), storage.disks.dirs, then [storage.cold] \
         when one is configured"
            .to_string(),
    ))
}

/// `celeborn.worker.storage.dirs`: `dir[:capacity=][:disktype=][:flushthread=]`
/// per entry, as Celeborn's `workerBaseDirs` reads it. The directories map
/// to `storage.disks.dirs`; `capacity=` and `flushthread=` map to
/// `storage.disks.capacity` and `write_concurrency` only when every entry
/// gives the same value, since Switchyard has one of each for all disks.
fn celeborn_dirs(text: &str) -> Result<Outcome, ConvertError> {
    let items = units::parse_list(text);
    if items.is_empty() {
        return Err(ConvertError::Empty {
            what: "directory",
            expected: "/mnt/disk1[:disktype=SSD][:capacity=1t],...",
        });
    }
    let mut dirs = Vec::new();
    let mut capacities = Vec::new();
    let mut threads = Vec::new();
    let mut disk_types = Vec::new();
    for item in &items {
        let mut parts = item.split(':');
        let dir = parts.next().unwrap_or_default().trim();
        if dir.is_empty() {
            return Err(ConvertError::NoDirectory(item.clone()));
        }
        dirs.push(dir.to_string());
        let (mut capacity, mut thread) = (None, None);
        for attr in parts {
            let illegal = || ConvertError::Attribute {
                attr: attr.to_string(),
                item: item.clone(),
            };
            let (name, value) = attr.split_once('=').ok_or_else(illegal)?;
            let of_dir = |attr: &'static str| {
                move |source: ConvertError| ConvertError::DirAttribute {
                    attr,
                    dir: dir.to_string(),
                    source: Box::new(source),
                }
            };
            match name.trim().to_ascii_lowercase().as_str() {
                "capacity" => capacity = Some(positive_size(value).map_err(of_dir("capacity"))?),
                "flushthread" => {
                    thread = Some(
                        units::parse_count(value).map_err(|e| of_dir("flushthread")(e.into()))?,
                    )
                }
                "disktype" => {
                    let t = value.trim().to_ascii_uppercase();
                    if t != "HDD" && t != "SSD" {
                        return Err(ConvertError::DiskType {
                            dir: dir.to_string(),
                            value: value.to_string(),
                        });
                    }
                    disk_types.push(t);
                }
                _ => return Err(illegal()),
            }
        }
        capacities.push(capacity);
        threads.push(thread);
    }
    let mut settings = vec![("storage.disks.dirs", strings(dirs))];
    let mut notes = Vec::new();
    match same_for_all(&capacities) {
        Uniform::All(bytes) => settings.push(("storage.disks.capacity", size_value(bytes))),
        Uniform::Mixed => notes.push(
            "capacity= is not the same on every directory: Switchyard has one \
             storage.disks.capacity for all disks, so none was set (set it by hand)"
                .to_string(),
        ),
        Uniform::None => {}
    }
    match same_for_all(&threads) {
        Uniform::All(n) => settings.push((
            "storage.disks.write_concurrency",
            toml::Value::Integer(
                i64::try_from(n).map_err(|_| ConvertError::AttributeTooLarge("flushthread"))?,
            ),
        )),
        Uniform::Mixed => notes.push(
            "flushthread= is not the same on every directory: Switchyard has one \
             storage.disks.write_concurrency for all disks, so none was set (set it by hand)"
                .to_string(),
        ),
        Uniform::None => {}
    }
    if !disk_types.is_empty() {
        notes.push(format!(
            "disktype= ({}) is not kept: Switchyard treats every disk alike",
            disk_types.join(", ")
        ));
    }
    notes.push(
        "Switchyard writes in these directories themselves, beside Celeborn's working \
         directory (celeborn-worker/shuffle_data), which it leaves alone"
            .to_string(),
    );
    Ok(Outcome::Mapped(settings, notes))
}

enum Uniform {
    /// Every entry gives this value.
    All(u64),
    /// Some give one, some another or none.
    Mixed,
    /// No entry gives one.
    None,
}

fn same_for_all(values: &[Option<u64>]) -> Uniform {
    match values.first() {
        Some(Some(first)) if values.iter().all(|v| *v == Some(*first)) => Uniform::All(*first),
        _ if values.iter().all(Option::is_none) => Uniform::None,
        _ => Uniform::Mixed,
    }
}

/// Keys of `[storage.cold]` need the tier itself (`service` and the rest),
/// and an empty `storage.disks.dirs` needs a cold tier to write to: without
/// an imported tier they are taken back out, with the reason.
fn settle_cold_tier(out: &mut Import) {
    if out.get("storage.cold.service").is_some() {
        return;
    }
    let cold: Vec<&'static str> = out
        .mapped
        .iter()
        .map(|m| m.target)
        .filter(|t| t.starts_with("storage.cold."))
        .collect();
    for target in cold {
        out.unmap(
            target,
            Why::Handled,
            "it belongs to [storage.cold], the tier where Switchyard's huge partitions go, and \
             no cold tier was imported; write [storage.cold] by hand to use it",
        );
    }
    if out
        .get("storage.disks.dirs")
        .is_some_and(|m| m.value.as_array().is_some_and(|a| a.is_empty()))
    {
        out.unmap(
            "storage.disks.dirs",
            Why::Handled,
            "no local disks would leave nowhere to spill, and no cold tier was imported",
        );
    }
}

/// The listeners clients configure themselves: their ports must stay.
const CLIENT_FACING: [&str; 2] = ["uniffle.coordinator_listen", "celeborn.master_listen"];

/// The listeners clients learn from the coordinator or the Master: their
/// ports can move without any client noticing.
const ADVERTISED: [&str; 6] = [
    "uniffle.server_grpc_listen",
    "uniffle.server_netty_listen",
    "celeborn.worker_rpc_listen",
    "celeborn.worker_push_listen",
    "celeborn.worker_fetch_listen",
    "celeborn.worker_replicate_listen",
];

/// Upstream runs a Uniffle coordinator and its shuffle servers on different
/// hosts, often all on 19999; Switchyard runs every role in one process, so
/// one port can serve one listener only. An imported port of an advertised
/// listener that another listener (imported or default) already has is
/// dropped: that listener keeps its default port, and clients still find it.
/// Clashes of client-facing ports are left for the final check to report.
fn settle_listeners(out: &mut Import) {
    let defaults = GatewayConfig::default().listen_addresses();
    let effective = |out: &Import, key: &str| -> Option<(SocketAddr, String)> {
        match out.get(key) {
            Some(m) => m
                .value
                .as_str()
                .and_then(|s| s.parse().ok())
                .map(|a| (a, format!("imported from {}", m.origin.short()))),
            None => defaults
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, a)| (*a, "its default".to_string())),
        }
    };
    for key in ADVERTISED {
        let Some((addr, _)) = out.get(key).and(effective(out, key)) else {
            continue;
        };
        if addr.port() == 0 {
            continue;
        }
        let clash = defaults
            .iter()
            .map(|(k, _)| *k)
            .filter(|k| *k != key)
            .find_map(|other| {
                effective(out, other)
                    .filter(|(a, _)| a.port() == addr.port())
                    .map(|(a, from)| (other, a, from))
            });
        if let Some((other, other_addr, from)) = clash {
            let default = defaults
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, a)| a.to_string())
                .unwrap_or_default();
            let finder = if key.starts_with("uniffle.") {
                "the coordinator"
            } else {
                "the Master"
            };
            let detail = format!(
                "port {} is {other} ({other_addr}, {from}); Switchyard runs every role in one \
                 process, one port per listener, and clients learn this listener's port from \
                 {finder}, so it keeps its default {default}",
                addr.port()
            );
            out.unmap(key, Why::Handled, &detail);
        }
    }
    debug_assert!(CLIENT_FACING.iter().all(|k| !ADVERTISED.contains(k)));
}

/// Replaces control characters (a newline in a file name would end a TOML
/// comment) so a label is safe on one comment line.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// The output: a header, then each table that has keys, in the order of
/// config/switchyard.toml, each value under a comment naming its source.
/// Values are written by the `toml` crate, so strings are escaped as TOML
/// requires.
pub fn render(import: &Import, inputs: &[Input]) -> String {
    let sources: Vec<String> = PRECEDENCE
        .iter()
        .flat_map(|k| inputs.iter().filter(move |i| i.kind == *k))
        .map(|i| format!("{} ({})", one_line(&i.label), i.kind.flag()))
        .collect();
    let mut s = format!(
        "# Written by `switchyard import-config` from {}.\n\
         # Only the settings that map to Switchyard are here; every other key keeps its\n\
         # built-in default (config/switchyard.toml lists them all). The report printed\n\
         # with it names each key that was ignored and why.\n",
        sources.join(", ")
    );
    let mut tables: Vec<&str> = Vec::new();
    for target in rules::TARGETS {
        let (table, _) = target.rsplit_once('.').expect("dotted target");
        if !tables.contains(&table) {
            tables.push(table);
        }
    }
    for table in tables {
        let keys: Vec<&Mapped> = rules::TARGETS
            .iter()
            .filter(|t| t.rsplit_once('.').is_some_and(|(tb, _)| tb == table))
            .filter_map(|t| import.get(t))
            .collect();
        if keys.is_empty() {
            continue;
        }
        s.push_str(&format!("\n[{table}]\n"));
        for m in keys {
            let (_, key) = m.target.rsplit_once('.').expect("dotted target");
            let mut from = format!("# from {} ({})", m.origin.key, one_line(&m.origin.label));
            for o in &m.also {
                from.push_str(&format!(", also {} ({})", o.key, one_line(&o.label)));
            }
            s.push_str(&format!("{from}\n{key} = {}\n", m.value));
        }
    }
    s
}

/// Loads the TOML exactly as `check-config` loads a file (the same
/// `GatewayConfig::from_toml` and `finish`: every check `serve` makes
/// before binding), but without the caller's `SWITCHYARD_*` variables: the
/// file itself must pass.
pub fn check(text: &str) -> Result<GatewayConfig, ImportError> {
    GatewayConfig::from_toml(text)
        .and_then(|c| c.finish(|_| None))
        .map_err(|e| ImportError::Invalid(format!("{e:#}")))
}

/// The report for standard error: inputs and precedence, then what was
/// mapped, the conflicts, what was ignored and why, and notes.
pub fn report(import: &Import, inputs: &[Input]) -> String {
    let mut s = String::from("switchyard import-config: read");
    let ordered: Vec<&Input> = PRECEDENCE
        .iter()
        .flat_map(|k| inputs.iter().filter(move |i| i.kind == *k))
        .collect();
    let read: Vec<String> = ordered
        .iter()
        .map(|i| {
            format!(
                " {} ({} file, {}, {} keys)",
                one_line(&i.label),
                i.kind.what(),
                i.kind.flag(),
                i.props.entries.len()
            )
        })
        .collect();
    s.push_str(&read.join(","));
    s.push('\n');
    if ordered.len() > 1 {
        let order: Vec<String> = ordered.iter().map(|i| one_line(&i.label)).collect();
        s.push_str(&format!(
            "precedence: when two files set one Switchyard key differently, the first of {} is kept\n",
            order.join(", then ")
        ));
    }
    // Processing follows the rule tables; the report follows the files.
    let mut mapped: Vec<&Mapped> = import.mapped.iter().collect();
    mapped.sort_by_key(|m| (m.origin.kind, m.origin.line));
    s.push_str(&format!("\nmapped ({}):\n", mapped.len()));
    for m in mapped {
        s.push_str(&format!(
            "  {} = {} ({} line {}) -> {} = {}\n",
            m.origin.key,
            one_line(&m.origin.raw),
            one_line(&m.origin.label),
            m.origin.line,
            m.target,
            m.value
        ));
        for o in &m.also {
            s.push_str(&format!(
                "    also {} = {} ({} line {}), the same value\n",
                o.key,
                one_line(&o.raw),
                one_line(&o.label),
                o.line
            ));
        }
    }
    if !import.conflicts.is_empty() {
        s.push_str(&format!("\nconflicts ({}):\n", import.conflicts.len()));
        for c in &import.conflicts {
            s.push_str(&format!(
                "  {}: kept {} from {}; dropped {} from {} ({})\n",
                c.target,
                c.kept.0,
                c.kept.1.short(),
                c.dropped.0,
                c.dropped.1.short(),
                if c.kept.1.kind == c.dropped.1.kind {
                    "the current key before its older alternative".to_string()
                } else {
                    format!("{} comes first", one_line(&c.kept.1.label))
                }
            ));
        }
    }
    let mut ignored: Vec<&Ignored> = import.ignored.iter().collect();
    ignored.sort_by_key(|i| (i.origin.kind, i.origin.line));
    s.push_str(&format!("\nignored ({}):\n", ignored.len()));
    for i in ignored {
        s.push_str(&format!(
            "  {} = {} ({} line {}): {}: {}\n",
            i.origin.key,
            one_line(&i.origin.raw),
            one_line(&i.origin.label),
            i.origin.line,
            i.why.label(),
            i.detail
        ));
    }
    let notes: Vec<&Note> = import.live_notes().collect();
    if !notes.is_empty() {
        s.push_str("\nnotes:\n");
        for n in notes {
            s.push_str(&format!("  {}\n", one_line(&n.text)));
        }
    }
    s
}

fn read_input(kind: Kind, path: &Path) -> Result<Input, ImportError> {
    let text = std::fs::read_to_string(path).map_err(|error| ImportError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    let label = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    Ok(Input::new(kind, label, &text))
}

/// `switchyard import-config`: reads the inputs, imports, checks the TOML,
/// prints the report on standard error and the TOML on standard output or
/// into `--output`. Nothing is written unless the TOML passes the check.
pub fn run(args: ImportConfigArgs) -> anyhow::Result<()> {
    let mut inputs = Vec::new();
    for (kind, path) in [
        (Kind::Uniffle, &args.uniffle),
        (Kind::Coordinator, &args.uniffle_coordinator),
        (Kind::Celeborn, &args.celeborn),
    ] {
        if let Some(path) = path {
            inputs.push(read_input(kind, path)?);
        }
    }
    let import = import(&inputs)?;
    let text = render(&import, &inputs);
    let checked = check(&text);
    eprint!("{}", report(&import, &inputs));
    checked?;
    match &args.output {
        Some(path) => {
            std::fs::write(path, &text).map_err(|error| ImportError::Write {
                path: path.clone(),
                error,
            })?;
            eprintln!(
                "\nwrote {}: it loads as `switchyard check-config` loads a file",
                path.display()
            );
        }
        None => {
            print!("{text}");
            eprintln!("\nthe TOML is on standard output: it loads as `switchyard check-config` loads a file");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
