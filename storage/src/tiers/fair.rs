//! Turns taken application by application: a gate of `width` places that,
//! when entrants wait, lets them through one application after another
//! (round robin). One application's backlog of flushes or reads therefore
//! cannot sit in front of another's single request: a newcomer waits for
//! the next free place, not for the backlog. With nobody waiting it is a
//! counter, and entering takes a free place at once.
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
    /// Applications with someone waiting, in the order they are served.
    ring: VecDeque<AppId>,
    waiting: HashMap<AppId, VecDeque<oneshot::Sender<Turn>>>,
    /// Entrants waiting now.
    queued: usize,
}

/// A place in the gate, handed to the next waiter (or freed) when dropped.
pub(crate) struct Turn {
    gate: Option<Arc<FairGate>>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.pass_on(Turn { gate: Some(gate.clone()) });
        }
    }
}

impl Turn {
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
                ring: VecDeque::new(),
                waiting: HashMap::new(),
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

    /// A place, after the waiters of other applications ahead of `app` in
    /// the round had theirs. Cancel-safe: a place given to a waiter that
    /// stopped waiting goes on to the next.
    pub(crate) async fn enter(self: &Arc<Self>, app: &AppId) -> Turn {
        if let Some(turn) = self.try_enter() {
            return turn;
        }
        let rx = {
            let mut s = self.state.lock();
            let (tx, rx) = oneshot::channel();
            match s.waiting.get_mut(app) {
                Some(queue) => queue.push_back(tx),
                None => {
                    s.ring.push_back(app.clone());
                    s.waiting.insert(app.clone(), VecDeque::from([tx]));
                }
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
    fn next_waiter(&mut self) -> Option<oneshot::Sender<Turn>> {
        while let Some(app) = self.ring.pop_front() {
            let Some(queue) = self.waiting.get_mut(&app) else {
                continue;
            };
            let tx = queue.pop_front();
            if queue.is_empty() {
                self.waiting.remove(&app);
            } else {
                self.ring.push_back(app);
            }
            if let Some(tx) = tx {
                self.queued -= 1;
                return Some(tx);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn app(name: &str) -> AppId {
        Arc::from(name)
    }

    /// Waiters are served one application after another: the small
    /// application's one request goes second, not after the big one's
    /// whole backlog.
    #[tokio::test]
    async fn waiters_are_served_application_by_application() {
        let gate = FairGate::new(1);
        let first = gate.try_enter().unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        let entrants = [("big", 0), ("big", 1), ("big", 2), ("small", 0)];
        for (name, i) in entrants {
            let (g, order) = (gate.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let turn = g.enter(&app(name)).await;
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
        assert_eq!(*order.lock(), ["big0", "small0", "big1", "big2"]);
        assert_eq!(gate.figures(), (1, 0));
    }

    /// A waiter that stops waiting loses its place to the next one; no
    /// place is lost with it.
    #[tokio::test]
    async fn a_cancelled_waiter_passes_its_place_on() {
        let gate = FairGate::new(1);
        let first = gate.try_enter().unwrap();
        let (g, quitter) = (gate.clone(), app("quitter"));
        let cancelled = tokio::spawn(async move { g.enter(&quitter).await });
        while gate.figures().1 < 1 {
            tokio::task::yield_now().await;
        }
        let (g, patient) = (gate.clone(), app("patient"));
        let served = tokio::spawn(async move { g.enter(&patient).await });
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
        let a = gate.enter(&app("a")).await;
        let b = gate.enter(&app("a")).await;
        assert!(gate.try_enter().is_none());
        drop(a);
        assert_eq!(gate.figures(), (1, 0));
        drop(b);
        assert_eq!(gate.figures(), (2, 0));
    }
}
