//! The one type for secrets (the S3 secret key, the admin token, the
//! cluster secret, Uniffle's registration secret, Celeborn applications'
//! secrets) and the one constant-time comparison.
//!
//! A secret never prints: `Debug`, `Display` and `Serialize` all give
//! [`REDACTED`], so a config printed by `switchyard check-config`, a log line
//! or a panic message shows `"<redacted>"` where the value was. Reading one
//! back from TOML or JSON takes the plain string, so config keys and files
//! are unchanged. The value is reached only through [`Secret::expose`],
//! which makes every place that uses it easy to find.

use serde::{Deserialize, Serialize, Serializer};
use subtle::ConstantTimeEq;

/// What a secret prints as, everywhere.
pub const REDACTED: &str = "<redacted>";

#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself, for the one place that must send or hash it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `sent` is this secret, compared in constant time; an empty
    /// secret matches nothing (a key left empty must not open the door).
    pub fn matches(&self, sent: &[u8]) -> bool {
        !self.is_empty() && self.equals(sent)
    }

    /// Whether `sent` is this secret, compared in constant time, the empty
    /// secret included (a client registering the same secret again).
    pub fn equals(&self, sent: &[u8]) -> bool {
        constant_time_eq(self.0.as_bytes(), sent)
    }
}

/// Whether `a` and `b` are equal, in time that depends on their lengths
/// only, never on where they differ: for secrets, and for digests computed
/// from them.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(REDACTED, f)
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(REDACTED)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(REDACTED)
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Secret(s.to_string())
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Secret(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_printed() {
        let s = Secret::from("hunter2");
        assert_eq!(format!("{s:?}"), "\"<redacted>\"");
        assert_eq!(s.to_string(), "<redacted>");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"<redacted>\"");
        let back: Secret = serde_json::from_str("\"hunter2\"").unwrap();
        assert_eq!(back.expose(), "hunter2");
    }

    #[test]
    fn compared_whole() {
        let s = Secret::from("k3y");
        assert!(s.matches(b"k3y"));
        assert!(!s.matches(b"k3"));
        assert!(!s.matches(b"k3y!"));
        assert!(!s.matches(b"K3y"));
        assert!(!Secret::default().matches(b""));
        assert!(Secret::default().equals(b""));
        assert!(!Secret::default().equals(b"x"));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
    }
}
