//! Who an application is, for every part of Switchyard. One owner for the
//! three facts the store, both protocol front ends, the traffic metrics and
//! the admin pages all need to agree on:
//!
//! - [`FrontEnd`]: the protocol adapter an application came through, which
//!   owns a namespace of application ids;
//! - [`ScopedApp`]: an application's id scoped by its front end,
//!   `<namespace>/<id>`, the form the store keys by;
//! - [`Protocol`]: the wire as operators tell them apart (metric label
//!   `protocol`, the migration report), where Celeborn's Flink client counts
//!   apart from its Spark client.
//!
//! The string forms here are on disk (manifests, directory names through the
//! store's path encoding), in `/api/v1` JSON and in metric labels: they never
//! change.

use std::fmt;
use std::sync::Arc;

/// A protocol front end: the owner of a namespace of application ids.
/// Each names its applications in a namespace of its own, so clients of two
/// front ends that pick the same application id (by chance or on purpose)
/// never share partitions, leases or removals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrontEnd {
    Uniffle,
    /// Celeborn, for its Spark and its Flink client alike: both talk to the
    /// same master and workers.
    Celeborn,
}

impl FrontEnd {
    pub const ALL: [FrontEnd; 2] = [FrontEnd::Uniffle, FrontEnd::Celeborn];

    /// The namespace of this front end's applications in stored ids.
    pub const fn namespace(self) -> &'static str {
        match self {
            FrontEnd::Uniffle => "uniffle",
            FrontEnd::Celeborn => "celeborn",
        }
    }

    fn from_namespace(namespace: &str) -> Option<FrontEnd> {
        FrontEnd::ALL
            .into_iter()
            .find(|f| f.namespace() == namespace)
    }

    /// The store's id of this front end's application `id`.
    pub fn stored(self, id: &str) -> Arc<str> {
        ScopedApp::new(self, id).into()
    }

    /// The front end's own id of a stored application id, when the
    /// application is this front end's (the inverse of [`FrontEnd::stored`]).
    pub fn own_id(self, stored: &str) -> Option<&str> {
        ScopedApp::parse(stored)
            .filter(|a| a.front_end == self)
            .map(|a| a.id)
    }
}

/// An application as the store keys it: the id its client gave it, scoped
/// by the front end that serves it. Its string form ([`fmt::Display`]) is
/// `<namespace>/<id>`; the id may itself hold `/` (only the first one
/// separates).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScopedApp<'a> {
    pub front_end: FrontEnd,
    /// The client's own id.
    pub id: &'a str,
}

impl<'a> ScopedApp<'a> {
    pub fn new(front_end: FrontEnd, id: &'a str) -> Self {
        ScopedApp { front_end, id }
    }

    /// A stored id read back; `None` when it is in no front end's
    /// namespace.
    pub fn parse(stored: &'a str) -> Option<Self> {
        let (namespace, id) = stored.split_once('/')?;
        Some(ScopedApp::new(FrontEnd::from_namespace(namespace)?, id))
    }

    /// The protocol this application speaks, from how its front end
    /// described the client ([`Protocol::client_description`]).
    pub fn protocol(&self, client: Option<&str>) -> Protocol {
        match self.front_end {
            FrontEnd::Uniffle => Protocol::Uniffle,
            // Only Celeborn's Flink client writes map partitions: its front
            // end tells it apart when slots are reserved, and says so in the
            // client's description.
            FrontEnd::Celeborn if client.is_some_and(|c| c.starts_with(FLINK_CLIENT)) => {
                Protocol::Flink
            }
            FrontEnd::Celeborn => Protocol::Celeborn,
        }
    }
}

impl fmt::Display for ScopedApp<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.front_end.namespace(), self.id)
    }
}

impl From<ScopedApp<'_>> for Arc<str> {
    fn from(app: ScopedApp<'_>) -> Arc<str> {
        let namespace = app.front_end.namespace();
        let mut id = String::with_capacity(namespace.len() + 1 + app.id.len());
        id.push_str(namespace);
        id.push('/');
        id.push_str(app.id);
        id.into()
    }
}

/// How a Flink client's description starts ([`Protocol::client_description`]).
const FLINK_CLIENT: &str = "flink";

/// The wire a request came in on, as operators tell them apart: the
/// `protocol` label of the traffic metrics and the protocols of the
/// migration report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Uniffle = 0,
    /// Celeborn's Spark client (reduce partitions).
    Celeborn,
    /// Celeborn's Flink client (map partitions, credit-based reads).
    Flink,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::Uniffle, Protocol::Celeborn, Protocol::Flink];

    /// The name in metric labels and reports.
    pub const fn as_str(self) -> &'static str {
        match self {
            Protocol::Uniffle => "uniffle",
            Protocol::Celeborn => "celeborn",
            Protocol::Flink => "flink",
        }
    }

    /// The front end serving this protocol's clients.
    pub const fn front_end(self) -> FrontEnd {
        match self {
            Protocol::Uniffle => FrontEnd::Uniffle,
            Protocol::Celeborn | Protocol::Flink => FrontEnd::Celeborn,
        }
    }

    /// How a front end describes a client of this protocol to the store
    /// (`AppRecord.client`), from the version the client told:
    /// `client 0.10.0`, `spark client 0.6.1+`, `flink client 0.5.x-0.6.0`.
    /// [`ScopedApp::protocol`] reads it back.
    pub fn client_description(self, version: &str) -> String {
        match self {
            Protocol::Uniffle => format!("client {version}"),
            Protocol::Celeborn => format!("spark client {version}"),
            Protocol::Flink => format!("{FLINK_CLIENT} client {version}"),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_form_is_namespace_slash_id() {
        assert_eq!(&*FrontEnd::Uniffle.stored("app-1"), "uniffle/app-1");
        assert_eq!(&*FrontEnd::Celeborn.stored("app-1"), "celeborn/app-1");
        assert_eq!(
            ScopedApp::new(FrontEnd::Celeborn, "a/b").to_string(),
            "celeborn/a/b"
        );
        // Display and the stored Arc agree.
        let app = ScopedApp::new(FrontEnd::Uniffle, "x y");
        assert_eq!(app.to_string(), &*Arc::<str>::from(app));
    }

    #[test]
    fn scoped_ids_round_trip() {
        let odd = [
            "app-1",
            "application_1700000000000_0001",
            "a/b",
            "/",
            "//x/",
            "",
            "é ü",
            "a\0b",
            "x\ny",
            "celeborn/nested",
        ];
        for front_end in FrontEnd::ALL {
            for id in odd {
                let stored = front_end.stored(id);
                let back = ScopedApp::parse(&stored).unwrap();
                assert_eq!(back, ScopedApp::new(front_end, id), "{stored:?}");
                assert_eq!(front_end.own_id(&stored), Some(id));
            }
        }
    }

    #[test]
    fn scoped_ids_keep_front_ends_apart() {
        let u = FrontEnd::Uniffle.stored("app-1");
        let c = FrontEnd::Celeborn.stored("app-1");
        assert_ne!(u, c);
        assert_eq!(FrontEnd::Celeborn.own_id(&u), None);
        assert_eq!(FrontEnd::Uniffle.own_id(&c), None);
        // A namespace is matched whole, not as a prefix of another.
        assert_eq!(ScopedApp::parse("uni/app-1"), None);
        assert_eq!(ScopedApp::parse("uniffleX/app-1"), None);
        assert_eq!(ScopedApp::parse("uniffle"), None);
        assert_eq!(ScopedApp::parse("bare"), None);
        assert_eq!(FrontEnd::Uniffle.own_id("uniffle"), None);
    }

    #[test]
    fn flink_is_told_apart_by_its_client() {
        let c = ScopedApp::new(FrontEnd::Celeborn, "app-2");
        let u = ScopedApp::new(FrontEnd::Uniffle, "app-2");
        for protocol in Protocol::ALL {
            let described = protocol.client_description("0.6.1+");
            let app = ScopedApp::new(protocol.front_end(), "app");
            assert_eq!(app.protocol(Some(&described)), protocol, "{described}");
        }
        assert_eq!(c.protocol(Some("flink client 0.6.1+")), Protocol::Flink);
        assert_eq!(
            c.protocol(Some("spark client 0.5.x-0.6.0")),
            Protocol::Celeborn
        );
        assert_eq!(c.protocol(None), Protocol::Celeborn);
        // Only Celeborn has a Flink client.
        assert_eq!(u.protocol(Some("flink client 1")), Protocol::Uniffle);
    }

    #[test]
    fn names_are_stable() {
        let names = Protocol::ALL.map(Protocol::as_str);
        assert_eq!(names, ["uniffle", "celeborn", "flink"]);
        assert_eq!(Protocol::Flink.to_string(), "flink");
        assert_eq!(
            Protocol::ALL.map(|p| p as usize),
            [0, 1, 2],
            "traffic totals are indexed by these"
        );
        assert_eq!(
            Protocol::Uniffle.client_description("0.10.0"),
            "client 0.10.0"
        );
        assert_eq!(
            Protocol::Celeborn.client_description("0.6.1+"),
            "spark client 0.6.1+"
        );
        assert_eq!(
            Protocol::Flink.client_description("0.5.x-0.6.0"),
            "flink client 0.5.x-0.6.0"
        );
    }
}
