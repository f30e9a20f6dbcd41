//! What Celeborn drivers told this coordinator about their applications:
//! when each was last seen, which shuffles it unregistered, whether it
//! ended. Workers holding an application learn it from their heartbeat
//! replies (Celeborn drivers talk to one master only, and never to the
//! workers about lifetime).
//!
//! The records only grow (tombstones included) until an application is
//! forgotten, so replies from several coordinators merge on the worker
//! without agreement: an application lives while any coordinator saw it
//! within the timeout; a shuffle or application is removed when any
//! coordinator holds its tombstone.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use dashmap::DashMap;

use crate::proto::RemovedShuffle;

#[derive(Default)]
struct Entry {
    last_seen: Option<Instant>,
    lost: Option<Instant>,
    removed_shuffles: HashSet<i32>,
}

pub struct AppBook {
    apps: DashMap<String, Entry>,
    /// An application not seen for this long is not reported alive (the
    /// workers' own lease then expires it): Celeborn's application timeout.
    timeout: Duration,
}

/// What a worker is told about the applications it asked about.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct AppNews {
    pub alive: Vec<String>,
    pub removed_shuffles: Vec<RemovedShuffle>,
    pub removed_apps: Vec<String>,
}

impl AppBook {
    pub fn new(timeout: Duration) -> Self {
        AppBook {
            apps: DashMap::new(),
            timeout,
        }
    }

    /// A heartbeat, slot request or registration from the application's driver.
    pub fn seen(&self, app: &str) {
        let mut e = self.apps.entry(app.to_string()).or_default();
        e.last_seen = Some(Instant::now());
        // A driver that speaks again after ApplicationLost is a new run of
        // the same id; its removed shuffles stay removed.
        e.lost = None;
    }

    pub fn shuffle_removed(&self, app: &str, shuffle: i32) {
        self.apps
            .entry(app.to_string())
            .or_default()
            .removed_shuffles
            .insert(shuffle);
    }

    pub fn app_lost(&self, app: &str) {
        self.apps.entry(app.to_string()).or_default().lost = Some(Instant::now());
    }

    /// Applications seen within the timeout and not lost.
    pub fn alive_count(&self) -> usize {
        self.apps
            .iter()
            .filter(|e| self.is_alive(e.value()))
            .count()
    }

    fn is_alive(&self, e: &Entry) -> bool {
        e.lost.is_none() && e.last_seen.is_some_and(|t| t.elapsed() < self.timeout)
    }

    /// What this coordinator knows of `apps` (a worker's list).
    pub fn news_for<'a>(&self, apps: impl IntoIterator<Item = &'a String>) -> AppNews {
        let mut news = AppNews::default();
        for app in apps {
            let Some(e) = self.apps.get(app) else {
                continue;
            };
            if e.lost.is_some() {
                news.removed_apps.push(app.clone());
                continue;
            }
            if self.is_alive(&e) {
                news.alive.push(app.clone());
            }
            news.removed_shuffles
                .extend(e.removed_shuffles.iter().map(|&shuffle_id| RemovedShuffle {
                    app: app.clone(),
                    shuffle_id,
                }));
        }
        news
    }

    /// Forgets applications silent (or lost) for `retention`: by then every
    /// worker has applied their tombstones or expired them itself.
    pub fn prune(&self, retention: Duration) {
        self.apps.retain(|_, e| {
            let last = e.lost.or(e.last_seen);
            last.is_some_and(|t| t.elapsed() < retention)
        });
    }

    pub fn len(&self) -> usize {
        self.apps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.apps.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn alive_removed_and_lost() {
        let book = AppBook::new(Duration::from_millis(300));
        book.seen("a");
        book.seen("b");
        book.shuffle_removed("a", 3);
        book.app_lost("b");
        let news = book.news_for(&s(&["a", "b", "unknown"]));
        assert_eq!(news.alive, ["a"]);
        assert_eq!(
            news.removed_shuffles,
            [RemovedShuffle {
                app: "a".into(),
                shuffle_id: 3
            }]
        );
        assert_eq!(news.removed_apps, ["b"]);
        // Unknown to this coordinator is not a reason to delete anything.
        assert_eq!(book.alive_count(), 1);

        std::thread::sleep(Duration::from_millis(350));
        let news = book.news_for(&s(&["a"]));
        assert!(news.alive.is_empty(), "silent past the timeout");
        assert_eq!(news.removed_shuffles.len(), 1, "tombstones stay");

        // Seen again after ApplicationLost: alive again.
        book.seen("b");
        assert_eq!(book.news_for(&s(&["b"])).alive, ["b"]);
        book.prune(Duration::from_millis(100));
        assert_eq!(book.len(), 1, "only b, seen just now, is kept");
    }
}
