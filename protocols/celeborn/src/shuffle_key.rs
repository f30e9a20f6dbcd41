//! Celeborn's name of a shuffle, `"<appUniqueId>-<shuffleId>"` (upstream's
//! `Utils.makeShuffleKey`): what clients send on the push and fetch ports and
//! what the worker keeps its shuffles by. Built and split only here.

use std::fmt;

/// One shuffle of one application, as Celeborn names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShuffleKey<'a> {
    pub app: &'a str,
    pub shuffle_id: i32,
}

impl<'a> ShuffleKey<'a> {
    pub fn new(app: &'a str, shuffle_id: i32) -> Self {
        ShuffleKey { app, shuffle_id }
    }

    /// A key read back, split on its last `-` (application ids hold `-`
    /// themselves, shuffle ids do not); `None` without an application or a
    /// number after it.
    pub fn parse(key: &'a str) -> Option<Self> {
        let (app, shuffle) = key.rsplit_once('-')?;
        if app.is_empty() {
            return None;
        }
        Some(ShuffleKey::new(app, shuffle.parse().ok()?))
    }
}

impl fmt::Display for ShuffleKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.app, self.shuffle_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_keys_split_on_the_last_dash() {
        let parse = |key| ShuffleKey::parse(key).map(|k| (k.app, k.shuffle_id));
        assert_eq!(parse("local-1700-0"), Some(("local-1700", 0)));
        assert_eq!(parse("app-1-12"), Some(("app-1", 12)));
        assert_eq!(parse("nodash"), None);
        assert_eq!(parse("-3"), None);
        assert_eq!(parse("app-x"), None);
    }

    #[test]
    fn shuffle_keys_round_trip() {
        for (app, id) in [("app-1", 0), ("local-1700", 12), ("a b/c", i32::MAX)] {
            let key = ShuffleKey::new(app, id).to_string();
            assert_eq!(key, format!("{app}-{id}"));
            assert_eq!(ShuffleKey::parse(&key), Some(ShuffleKey::new(app, id)));
        }
    }
}
