//! What Celeborn drivers told the coordinators about their applications:
//! when each was last seen, which shuffles got slots, which it unregistered,
//! whether it ended, and who runs it. Workers holding an application learn
//! it from their heartbeat replies (Celeborn drivers talk to one master
//! only, and never to the workers about lifetime); coordinators exchange
//! their books with each other ([`AppBook::merge`], the `SyncApps` call), so
//! a driver that moves to another master finds its shuffles known there.
//!
//! Every field is a join: times take the maximum, shuffle sets and
//! tombstones only grow, app info keeps the newest. Books therefore merge in
//! any order, any number of times, without agreement: an application lives
//! while any coordinator saw it within the timeout; a shuffle or application
//! is removed when any coordinator holds its tombstone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dashmap::DashMap;
use serde::Serialize;

use crate::proto::{AppInfo, AppRecord, RemovedShuffle};

/// What one book takes from a peer at most: a peer is authenticated, but a
/// broken one must not grow this node without bound.
const MAX_APPS: usize = 100_000;
const MAX_SHUFFLES_PER_APP: usize = 100_000;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[derive(Default, Clone)]
struct Entry {
    /// Unix ms of the driver's last word (0: never, only heard of).
    last_seen_ms: u64,
    /// Unix ms of ApplicationLost (0: never). Ended while `lost_ms >=
    /// last_seen_ms`: a driver that speaks again is a new run of the id.
    lost_ms: u64,
    registered: BTreeSet<i32>,
    removed: BTreeSet<i32>,
    info: Option<AppInfo>,
    /// This book's change number of the entry's last change that peers
    /// must hear of ([`AppBook::changes_since`]).
    changed: u64,
    /// `last_seen_ms` as of that change: a driver's later word counts as a
    /// change again only once it moved the time by [`AppBook::seen_step`].
    seen_marked_ms: u64,
}

impl Entry {
    fn lost(&self) -> bool {
        self.lost_ms > 0 && self.lost_ms >= self.last_seen_ms
    }

    fn latest_ms(&self) -> u64 {
        self.last_seen_ms.max(self.lost_ms)
    }

    /// Joins a peer's record in; whether anything changed here.
    fn merge(&mut self, r: &AppRecord) -> bool {
        let before = (
            self.last_seen_ms,
            self.lost_ms,
            self.registered.len(),
            self.removed.len(),
        );
        self.last_seen_ms = self.last_seen_ms.max(r.last_seen_ms);
        self.lost_ms = self.lost_ms.max(r.lost_ms);
        for &s in r.registered_shuffles.iter().take(MAX_SHUFFLES_PER_APP) {
            if self.registered.len() >= MAX_SHUFFLES_PER_APP {
                break;
            }
            self.registered.insert(s);
        }
        for &s in r.removed_shuffles.iter().take(MAX_SHUFFLES_PER_APP) {
            if self.removed.len() >= MAX_SHUFFLES_PER_APP {
                break;
            }
            self.removed.insert(s);
        }
        let mut info_changed = false;
        if let Some(info) = &r.info {
            if self.info.as_ref().is_none_or(|mine| newer(info, mine)) {
                self.info = Some(info.clone());
                info_changed = true;
            }
        }
        let after = (
            self.last_seen_ms,
            self.lost_ms,
            self.registered.len(),
            self.removed.len(),
        );
        info_changed || before != after
    }

    fn record(&self, app: &str) -> AppRecord {
        AppRecord {
            app: app.to_string(),
            last_seen_ms: self.last_seen_ms,
            lost_ms: self.lost_ms,
            registered_shuffles: self.registered.iter().copied().collect(),
            removed_shuffles: self.removed.iter().copied().collect(),
            info: self.info.clone(),
        }
    }
}

/// Newest wins; on a tie the larger content, so every book picks the same.
fn newer(a: &AppInfo, b: &AppInfo) -> bool {
    fn sorted(i: &AppInfo) -> BTreeMap<&String, &String> {
        i.extra.iter().collect()
    }
    (a.updated_ms, &a.tenant, &a.user, sorted(a)) > (b.updated_ms, &b.tenant, &b.user, sorted(b))
}

pub struct AppBook {
    apps: DashMap<String, Entry>,
    /// An application not seen for this long is not reported alive (the
    /// workers' own lease then expires it): Celeborn's application timeout.
    timeout: Duration,
    /// The last change number handed out; every change to an entry takes
    /// the next one, so a peer that has every change up to n needs only
    /// the entries changed after n.
    seq: AtomicU64,
    /// This book's incarnation (random, never 0): change numbers mean
    /// something only within one; a restarted coordinator has a new one,
    /// and its peers then send it everything.
    epoch: u64,
}

/// A book's entries changed after some change number.
#[derive(Debug, Default)]
pub struct Changes {
    pub records: Vec<AppRecord>,
    /// Every change up to this number is in `records` (or was before).
    pub seq: u64,
}

/// What a worker is told about the applications it asked about.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct AppNews {
    pub alive: Vec<String>,
    pub removed_shuffles: Vec<RemovedShuffle>,
    pub removed_apps: Vec<String>,
}

/// One application as `/api/v1/cluster` shows the book.
#[derive(Clone, Debug, Serialize)]
pub struct AppView {
    pub app: String,
    /// `alive`, `silent` (not seen within the timeout) or `lost`.
    pub state: &'static str,
    pub last_seen_ms_ago: Option<u64>,
    /// Shuffles with slots and not unregistered.
    pub shuffles: Vec<i32>,
    pub removed_shuffles: usize,
    /// `tenant.user` from RegisterApplicationInfo, when one came.
    pub user: Option<String>,
}

impl AppBook {
    pub fn new(timeout: Duration) -> Self {
        AppBook {
            apps: DashMap::new(),
            timeout,
            seq: AtomicU64::new(0),
            epoch: rand::random::<u64>().max(1),
        }
    }

    /// This book's incarnation.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Marks an entry changed (called with its shard locked, so a reader
    /// of [`AppBook::changes_since`] sees the change with its number).
    fn mark(&self, e: &mut Entry) {
        e.changed = self.seq.fetch_add(1, Ordering::AcqRel) + 1;
        e.seen_marked_ms = e.last_seen_ms;
    }

    /// How far a driver's word must move an application's last-seen time
    /// before peers hear of it: a tenth of the application timeout. Drivers
    /// heartbeat every few seconds; sending every beat would make each
    /// exchange carry the whole book. A peer's copy then lags by this at
    /// most, which only shortens how long it alone would keep the
    /// application alive (the coordinator the driver talks to is exact).
    pub fn seen_step(&self) -> u64 {
        self.timeout.as_millis() as u64 / 10
    }

    /// A heartbeat, slot request or registration from the application's driver.
    pub fn seen(&self, app: &str) {
        let mut e = self.apps.entry(app.to_string()).or_default();
        let was_lost = e.lost();
        let new = e.last_seen_ms == 0;
        // After ApplicationLost in the same millisecond it must still count
        // as a new run.
        let floor = if e.lost_ms > 0 { e.lost_ms + 1 } else { 0 };
        e.last_seen_ms = e.last_seen_ms.max(now_ms()).max(floor);
        // A new application and a new run of a lost one travel at once.
        if new || was_lost || e.last_seen_ms >= e.seen_marked_ms + self.seen_step() {
            self.mark(&mut e);
        }
    }

    /// The master gave the shuffle slots (RequestSlots, ReviseLostShuffles).
    pub fn shuffle_registered(&self, app: &str, shuffle: i32) {
        let mut e = self.apps.entry(app.to_string()).or_default();
        if e.registered.insert(shuffle) {
            self.mark(&mut e);
        }
    }

    pub fn shuffle_removed(&self, app: &str, shuffle: i32) {
        let mut e = self.apps.entry(app.to_string()).or_default();
        if e.removed.insert(shuffle) {
            self.mark(&mut e);
        }
    }

    pub fn app_lost(&self, app: &str) {
        let mut e = self.apps.entry(app.to_string()).or_default();
        e.lost_ms = e.lost_ms.max(now_ms()).max(e.last_seen_ms);
        self.mark(&mut e);
    }

    /// RegisterApplicationInfo: who runs the application.
    pub fn app_info(&self, app: &str, tenant: &str, user: &str, extra: BTreeMap<String, String>) {
        let mut e = self.apps.entry(app.to_string()).or_default();
        let updated_ms = e
            .info
            .as_ref()
            .map_or(0, |i| i.updated_ms + 1)
            .max(now_ms());
        e.info = Some(AppInfo {
            updated_ms,
            tenant: tenant.to_string(),
            user: user.to_string(),
            extra: extra.into_iter().collect(),
        });
        self.mark(&mut e);
    }

    /// The shuffles of `app` that got slots and were not unregistered, as a
    /// driver's heartbeat reply lists them (`registeredShuffles`); none once
    /// the application is lost.
    pub fn registered_shuffles(&self, app: &str) -> Vec<i32> {
        self.apps
            .get(app)
            .filter(|e| !e.lost())
            .map(|e| e.registered.difference(&e.removed).copied().collect())
            .unwrap_or_default()
    }

    /// `tenant.user` of an application, when its driver registered its info.
    pub fn user(&self, app: &str) -> Option<(String, String)> {
        let e = self.apps.get(app)?;
        let i = e.info.as_ref()?;
        Some((i.tenant.clone(), i.user.clone()))
    }

    /// Applications seen within the timeout and not lost.
    pub fn alive_count(&self) -> usize {
        let now = now_ms();
        self.apps
            .iter()
            .filter(|e| self.is_alive(e.value(), now))
            .count()
    }

    fn is_alive(&self, e: &Entry, now: u64) -> bool {
        !e.lost()
            && e.last_seen_ms > 0
            && now.saturating_sub(e.last_seen_ms) < self.timeout.as_millis() as u64
    }

    /// What this coordinator knows of `apps` (a worker's list).
    pub fn news_for<'a>(&self, apps: impl IntoIterator<Item = &'a String>) -> AppNews {
        let now = now_ms();
        let mut news = AppNews::default();
        for app in apps {
            let Some(e) = self.apps.get(app) else {
                continue;
            };
            if e.lost() {
                news.removed_apps.push(app.clone());
                continue;
            }
            if self.is_alive(&e, now) {
                news.alive.push(app.clone());
            }
            news.removed_shuffles
                .extend(e.removed.iter().map(|&shuffle_id| RemovedShuffle {
                    app: app.clone(),
                    shuffle_id,
                }));
        }
        news
    }

    /// The whole book, for a peer.
    pub fn snapshot(&self) -> Vec<AppRecord> {
        self.changes_since(0).records
    }

    /// The entries changed after change number `since` (0: all), for a
    /// peer that has every change up to it. An exchange then carries what
    /// changed since the last one, not the whole book.
    pub fn changes_since(&self, since: u64) -> Changes {
        // Read before the walk: a change numbered later than this may or
        // may not be in the walk, and is sent again next time either way.
        let seq = self.seq.load(Ordering::Acquire);
        let records = self
            .apps
            .iter()
            .filter(|e| since == 0 || e.value().changed > since)
            .map(|e| e.value().record(e.key()))
            .collect();
        Changes { records, seq }
    }

    /// Takes in a peer's book. Records older than `retention` are not taken
    /// back in (this book may have forgotten them already). Returns how many
    /// applications were new here.
    pub fn merge(&self, records: &[AppRecord], retention: Duration) -> usize {
        let horizon = now_ms().saturating_sub(retention.as_millis() as u64);
        let mut added = 0;
        for r in records {
            if r.app.is_empty() || r.app.len() > 512 {
                continue;
            }
            let latest = r.last_seen_ms.max(r.lost_ms);
            if latest < horizon {
                continue;
            }
            if self.apps.len() >= MAX_APPS && !self.apps.contains_key(&r.app) {
                continue;
            }
            // Marked with the entry locked, as every change is.
            match self.apps.entry(r.app.clone()) {
                dashmap::mapref::entry::Entry::Occupied(mut o) => {
                    // What changed here travels on to the other peers.
                    if o.get_mut().merge(r) {
                        self.mark(o.get_mut());
                    }
                }
                dashmap::mapref::entry::Entry::Vacant(v) => {
                    let mut e = v.insert(Entry::default());
                    e.merge(r);
                    self.mark(&mut e);
                    added += 1;
                }
            }
        }
        added
    }

    /// The book for `/api/v1/cluster`, most recently seen first.
    pub fn view(&self) -> Vec<AppView> {
        let now = now_ms();
        let mut v: Vec<(u64, AppView)> = self
            .apps
            .iter()
            .map(|e| {
                let (app, entry) = (e.key(), e.value());
                let state = if entry.lost() {
                    "lost"
                } else if self.is_alive(entry, now) {
                    "alive"
                } else {
                    "silent"
                };
                let view = AppView {
                    app: app.clone(),
                    state,
                    last_seen_ms_ago: (entry.last_seen_ms > 0)
                        .then(|| now.saturating_sub(entry.last_seen_ms)),
                    shuffles: entry
                        .registered
                        .difference(&entry.removed)
                        .copied()
                        .collect(),
                    removed_shuffles: entry.removed.len(),
                    user: entry
                        .info
                        .as_ref()
                        .map(|i| format!("{}.{}", i.tenant, i.user)),
                };
                (entry.latest_ms(), view)
            })
            .collect();
        v.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.app.cmp(&b.1.app)));
        v.into_iter().map(|(_, view)| view).collect()
    }

    /// Forgets applications silent (or lost) for `retention`: by then every
    /// worker has applied their tombstones or expired them itself.
    pub fn prune(&self, retention: Duration) {
        let horizon = now_ms().saturating_sub(retention.as_millis() as u64);
        self.apps.retain(|_, e| e.latest_ms() >= horizon);
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

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn alive_removed_and_lost() {
        // A timeout of 1 s (and a retention of 500 ms below): the checks
        // between two steps of time must run within them even on a loaded
        // machine; the sleep outlasts both.
        let book = AppBook::new(Duration::from_secs(1));
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

        std::thread::sleep(Duration::from_millis(1_050));
        let news = book.news_for(&s(&["a"]));
        assert!(news.alive.is_empty(), "silent past the timeout");
        assert_eq!(news.removed_shuffles.len(), 1, "tombstones stay");

        // Seen again after ApplicationLost: alive again.
        book.seen("b");
        assert_eq!(book.news_for(&s(&["b"])).alive, ["b"]);
        book.prune(Duration::from_millis(500));
        assert_eq!(book.len(), 1, "only b, seen just now, is kept");
    }

    #[test]
    fn registered_shuffles_leave_out_tombstones_and_lost_apps() {
        let book = AppBook::new(HOUR);
        book.seen("a");
        for s in [0, 1, 2] {
            book.shuffle_registered("a", s);
        }
        book.shuffle_removed("a", 1);
        assert_eq!(book.registered_shuffles("a"), [0, 2]);
        assert!(book.registered_shuffles("other").is_empty());
        book.app_lost("a");
        assert!(book.registered_shuffles("a").is_empty());
        // A new run of the same id: its old tombstones stay.
        book.seen("a");
        assert_eq!(book.registered_shuffles("a"), [0, 2]);
    }

    /// What two coordinators heard separately, merged either way round or
    /// twice, gives one book: a driver that moved from A to B finds its
    /// shuffles on B, and a tombstone on either wins.
    #[test]
    fn books_merge_in_any_order() {
        let a = AppBook::new(HOUR);
        let b = AppBook::new(HOUR);
        a.seen("app");
        a.shuffle_registered("app", 1);
        a.shuffle_registered("app", 2);
        a.app_info("app", "default", "alice", BTreeMap::new());
        b.seen("app");
        b.shuffle_registered("app", 3);
        b.shuffle_removed("app", 2);
        b.seen("ended");
        b.app_lost("ended");

        let snap_a = a.snapshot();
        let snap_b = b.snapshot();
        assert_eq!(a.merge(&snap_b, HOUR), 1, "'ended' is new to a");
        assert_eq!(b.merge(&snap_a, HOUR), 0);
        // Idempotent and commutative: merging again changes nothing.
        a.merge(&snap_b, HOUR);
        b.merge(&snap_a, HOUR);
        b.merge(&b.snapshot(), HOUR);
        for book in [&a, &b] {
            assert_eq!(book.registered_shuffles("app"), [1, 3]);
            assert_eq!(book.user("app"), Some(("default".into(), "alice".into())));
            let news = book.news_for(&s(&["app", "ended"]));
            assert_eq!(news.alive, ["app"]);
            assert_eq!(news.removed_apps, ["ended"]);
            assert_eq!(news.removed_shuffles.len(), 1);
        }
        let key = |book: &AppBook| {
            let mut v = book.snapshot();
            v.sort_by(|x, y| x.app.cmp(&y.app));
            format!("{v:?}")
        };
        assert_eq!(key(&a), key(&b));
    }

    #[test]
    fn a_later_driver_word_beats_an_older_tombstone_from_a_peer() {
        let a = AppBook::new(HOUR);
        let b = AppBook::new(HOUR);
        a.seen("app");
        a.app_lost("app");
        std::thread::sleep(Duration::from_millis(5));
        // The same id runs again and talks to b.
        b.seen("app");
        b.merge(&a.snapshot(), HOUR);
        assert_eq!(b.news_for(&s(&["app"])).alive, ["app"]);
        a.merge(&b.snapshot(), HOUR);
        assert_eq!(a.news_for(&s(&["app"])).alive, ["app"]);
    }

    #[test]
    fn old_records_and_oversized_ids_are_not_taken() {
        let book = AppBook::new(HOUR);
        let stale = AppRecord {
            app: "old".into(),
            last_seen_ms: now_ms() - 2 * 3600 * 1000,
            ..Default::default()
        };
        let huge = AppRecord {
            app: "x".repeat(600),
            last_seen_ms: now_ms(),
            ..Default::default()
        };
        assert_eq!(book.merge(&[stale, huge], HOUR), 0);
        assert!(book.is_empty());
    }
}
