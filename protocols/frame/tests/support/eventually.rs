//! Bounded waits for tests, shared by the protocol crates' tests (included
//! with `#[path]`, like `fuzz.rs`). A test that checks a state reached in
//! another task's own time (a timer firing, a connection closing, a removal
//! running behind an expiry) waits for that state, up to a deadline far
//! beyond what it needs, instead of sleeping a fixed time: CI machines may be
//! several times slower than a developer's.

#![allow(dead_code)]

use std::time::{Duration, Instant};

/// How long a test waits for a state before it fails.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Polls `condition` every 20 ms until it holds; panics naming `what` if it
/// still does not after [`PATIENCE`]. Wall-clock: the deadline holds even in a
/// test whose tokio clock is paused.
pub async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {PATIENCE:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
