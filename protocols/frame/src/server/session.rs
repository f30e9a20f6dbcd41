//! What a protocol keeps for the life of one connection: the identity it
//! authenticated, and its handshake state until then. The frame server
//! gives neither any meaning; a connection's session ends with it.

use std::any::Any;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

#[derive(Default)]
pub struct Session {
    identity: OnceLock<Arc<str>>,
    state: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Session {
    /// The identity this connection authenticated as, if it did.
    pub fn identity(&self) -> Option<&str> {
        self.identity.get().map(|s| &**s)
    }

    /// Binds the connection to `identity`, once: false if it is already
    /// bound (to this identity or another), so a connection never changes
    /// whom it speaks for.
    pub fn bind(&self, identity: &str) -> bool {
        self.identity.set(identity.into()).is_ok()
    }

    /// Runs `f` on the protocol's handshake state of type `T` (created with
    /// its default on first use; a state of another type is replaced).
    pub fn with_state<T: Default + Send + 'static, R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut slot = self.state.lock();
        if !slot.as_ref().is_some_and(|s| s.is::<T>()) {
            *slot = Some(Box::<T>::default());
        }
        let state = slot
            .as_mut()
            .and_then(|s| s.downcast_mut::<T>())
            .expect("just set to a T");
        f(state)
    }

    /// Drops the handshake state (once authenticated, or after a failure).
    pub fn clear_state(&self) {
        *self.state.lock() = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_once_and_keeps_typed_state() {
        let s = Session::default();
        assert_eq!(s.identity(), None);
        assert!(s.bind("app-1"));
        assert!(!s.bind("app-2"));
        assert_eq!(s.identity(), Some("app-1"));
        s.with_state(|n: &mut u32| *n += 2);
        assert_eq!(s.with_state(|n: &mut u32| *n), 2);
        // Another type starts afresh.
        assert_eq!(s.with_state(|v: &mut Vec<u8>| v.len()), 0);
        s.clear_state();
        assert_eq!(s.with_state(|n: &mut u32| *n), 0);
    }
}
