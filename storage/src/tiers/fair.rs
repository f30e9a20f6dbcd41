//! Turns taken application by application, in proportion to bytes: a gate
//! of `width` places that, when entrants wait, gives the next free place to
//! the waiting application that was served the fewest bytes since it
//! started waiting (start-time fair queueing, each entrant costing the bytes
//! it will write or read). One application's backlog of large flushes or
//! reads therefore cannot sit in front of another's small ones: a newcomer
//! waits for the next free place, and its small requests go ahead of the
//! backlog until it has had as many bytes as the others. With nobody
//! waiting it is a counter, and entering takes a free place at once.
//!
//! The flush slots ([`super::flush::Flusher`]) and the read places
//! ([`super::durable::Durable`]) are such gates.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::id::AppId;

pub(crate) struct FairGate {
    state: Mutex<State>,
}

struct State {
    free: usize,
    /// Applications with someone waiting.
    waiting: HashMap<AppId, Waiting>,
    /// The bytes served of the application served last when it was chosen:
    /// an application that starts waiting starts there, so it neither
    /// banks credit from idle time nor pays for bytes served before it came.
    clock: u64,
    /// Orders applications that were served equally: first come first.
    arrivals: u64,
    /// Entrants waiting now.
    queued: usize,
}

/// One application's waiting entrants and the bytes it was served.
struct Waiting {
    entrants: VecDeque<(oneshot::Sender<Turn>, u64)>,
    served: u64,
    arrival: u64,
}

/// A place in the gate, handed to the next waiter (or freed) when dropped.
pub(crate) struct Turn {
    gate: Option<Arc<FairGate>>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.pass_on(Turn {
                gate: Some(gate.clone()),
            });
        }
    }
}

impl Turn {
    /// Charges `app` the `bytes` this place moved, before the place is
    /// handed on (see [`FairGate::charge`]).
    pub(crate) fn charge(&self, app: &AppId, bytes: u64) {
        if let Some(gate) = &self.gate {
            gate.charge(app, bytes);
        }
    }

    /// Takes the place out without handing it on (it goes back to `free`).
    fn disarm(mut self) {
        self.gate = None;
    }
}

impl FairGate {
    pub(crate) fn new(width: usize) -> Arc<Self> {
        Arc::new(FairGate {
            state: Mutex::new(State {
                free: width.max(1),
                waiting: HashMap::new(),
                clock: 0,
                arrivals: 0,
                queued: 0,
            }),
        })
    }

    /// A free place, if one is free and nobody waits for it.
    pub(crate) fn try_enter(self: &Arc<Self>) -> Option<Turn> {
        let mut s = self.state.lock();
        if s.free == 0 || s.queued > 0 {
            return None;
        }
        s.free -= 1;
        Some(Turn {
            gate: Some(self.clone()),
        })
    }

    /// A place for an entrant of `app` that will move `cost` bytes, once
    /// the applications served fewer bytes than `app` had theirs.
    /// Cancel-safe: a place given to a waiter that stopped waiting goes on
    /// to the next.
    pub(crate) async fn enter(self: &Arc<Self>, app: &AppId, cost: u64) -> Turn {
        if let Some(turn) = self.try_enter() {
            return turn;
        }
        let rx = {
            let mut s = self.state.lock();
            let (tx, rx) = oneshot::channel();
            if !s.waiting.contains_key(app) {
                let (clock, arrival) = (s.clock, s.arrivals);
                s.arrivals += 1;
                s.waiting.insert(
                    app.clone(),
                    Waiting {
                        entrants: VecDeque::new(),
                        served: clock,
                        arrival,
                    },
                );
            }
            if let Some(w) = s.waiting.get_mut(app) {
                w.entrants.push_back((tx, cost));
            }
            s.queued += 1;
            // A place freed between try_enter and here found nobody to
            // hand to; take it back for the round.
            if s.free > 0 {
                s.free -= 1;
                drop(s);
                self.pass_on(Turn {
                    gate: Some(self.clone()),
                });
            }
            rx
        };
        // The gate outlives this future (it is borrowed), and a waiter's
        // sender is only dropped after a failed send to a dropped receiver.
        rx.await.expect("the gate hands every waiter a place")
    }

    /// Charges `app` `bytes` more, if it waits now: for an entrant whose
    /// bytes were only known once it had its place (a queued flush cuts its
    /// batch then). An application not waiting starts afresh when it next
    /// waits, so nothing is kept for it.
    pub(crate) fn charge(&self, app: &AppId, bytes: u64) {
        if let Some(w) = self.state.lock().waiting.get_mut(app) {
            w.served = w.served.saturating_add(bytes);
        }
    }

    /// Places free now, and entrants waiting.
    pub(crate) fn figures(&self) -> (usize, usize) {
        let s = self.state.lock();
        (s.free, s.queued)
    }

    /// Hands `turn` to the first waiter of the next application in the
    /// round, or frees it when nobody waits.
    fn pass_on(&self, mut turn: Turn) {
        loop {
            let next = {
                let mut s = self.state.lock();
                match s.next_waiter() {
                    Some(tx) => tx,
                    None => {
                        s.free += 1;
                        turn.disarm();
                        return;
                    }
                }
            };
            match next.send(turn) {
                Ok(()) => return,
                Err(back) => turn = back,
            }
        }
    }
}

impl State {
    /// The first entrant of the waiting application served the fewest
    /// bytes (the earliest come among equals), charged its cost.
    fn next_waiter(&mut self) -> Option<oneshot::Sender<Turn>> {
        loop {
            let app = self
                .waiting
                .iter()
                .min_by_key(|(_, w)| (w.served, w.arrival))
                .map(|(app, _)| app.clone())?;
            let w = self.waiting.get_mut(&app)?;
            let next = w.entrants.pop_front();
            self.clock = w.served;
            if let Some((_, cost)) = &next {
                w.served = w.served.saturating_add(*cost);
            }
            if w.entrants.is_empty() {
                self.waiting.remove(&app);
            }
            if let Some((tx, _)) = next {
                self.queued -= 1;
                return Some(tx);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn app(name: &str) -> AppId {
        Arc::from(name)
    }

    /// Queues `entrants` (application, index, cost) in this order behind a
    /// held place of a gate of one, frees it, and returns the order in
    /// which they were served.
    async fn served_order(entrants: &[(&'static str, u32, u64)]) -> Vec<String> {
        let gate = FairGate::new(1);
        let first = gate.try_enter().unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for &(name, i, cost) in entrants {
            let (g, order) = (gate.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let turn = g.enter(&app(name), cost).await;
                order.lock().push(format!("{name}{i}"));
                drop(turn);
            }));
            // Queued in this order.
            while gate.figures().1 < waiters.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(first);
        for w in waiters {
            w.await.unwrap();
        }
        assert_eq!(gate.figures(), (1, 0), "every place came back");
        let served = order.lock().clone();
        served
    }

    /// Waiters are served one application after another: the small
    /// application's one request goes second, not after the big one's
    /// whole backlog.
    #[tokio::test]
    async fn waiters_are_served_application_by_application() {
        let entrants = [("big", 0, 1), ("big", 1, 1), ("big", 2, 1), ("small", 0, 1)];
        assert_eq!(
            served_order(&entrants).await,
            ["big0", "small0", "big1", "big2"]
        );
    }

    /// Turns go by bytes: the small application's three small entrants
    /// all go before the big one's second large one.
    #[tokio::test]
    async fn turns_are_shared_by_bytes() {
        let entrants = [
            ("big", 0, 100),
            ("big", 1, 100),
            ("small", 0, 10),
            ("small", 1, 10),
            ("small", 2, 10),
        ];
        assert_eq!(
            served_order(&entrants).await,
            ["big0", "small0", "small1", "small2", "big1"]
        );
    }

    /// A waiter that stops waiting loses its place to the next one; no
    /// place is lost with it.
    #[tokio::test]
    async fn a_cancelled_waiter_passes_its_place_on() {
        let gate = FairGate::new(1);
        let first = gate.try_enter().unwrap();
        let (g, quitter) = (gate.clone(), app("quitter"));
        let cancelled = tokio::spawn(async move { g.enter(&quitter, 1).await });
        while gate.figures().1 < 1 {
            tokio::task::yield_now().await;
        }
        let (g, patient) = (gate.clone(), app("patient"));
        let served = tokio::spawn(async move { g.enter(&patient, 1).await });
        while gate.figures().1 < 2 {
            tokio::task::yield_now().await;
        }
        cancelled.abort();
        let _ = cancelled.await;
        drop(first);
        let turn = tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .expect("the patient waiter got the place")
            .unwrap();
        drop(turn);
        assert_eq!(gate.figures(), (1, 0), "the place came back");
    }

    /// Without waiters, places are taken and given back as a counter's.
    #[tokio::test]
    async fn free_places_are_taken_at_once() {
        let gate = FairGate::new(2);
        let a = gate.enter(&app("a"), 1).await;
        let b = gate.enter(&app("a"), 1).await;
        assert!(gate.try_enter().is_none());
        drop(a);
        assert_eq!(gate.figures(), (1, 0));
        drop(b);
        assert_eq!(gate.figures(), (2, 0));
    }
}
