//! Cancellation: a [`CancelToken`] is what a handler watches (the runtime cancelled its attempt,
//! its deadline passed, or the worker gives up on it at shutdown); the worker also uses tokens
//! to end long polls and backoff sleeps.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// Why a token was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The runtime cancelled the attempt (a heartbeat's `cancel` list).
    Cancel,
    /// The attempt's deadline passed.
    Deadline,
    /// The worker is stopping and gave up on the attempt.
    Shutdown,
}

type Callback = Box<dyn FnOnce() + Send>;

struct State {
    reason: Option<Reason>,
    next_id: u64,
    callbacks: Vec<(u64, Callback)>,
}

struct Inner {
    state: Mutex<State>,
    cv: Condvar,
    deadline: Option<Instant>,
    parent: Option<(Weak<Inner>, u64)>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some((p, id)) = &self.parent {
            if let Some(p) = p.upgrade() {
                let mut st = p.state.lock().unwrap();
                st.callbacks.retain(|(i, _)| i != id);
            }
        }
    }
}

/// A cancellation signal shared between threads; cheap to clone.
#[derive(Clone)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

impl Default for CancelToken {
    fn default() -> Self {
        CancelToken::new()
    }
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CancelToken({:?})", self.reason())
    }
}

impl CancelToken {
    /// A token that nothing has cancelled yet.
    pub fn new() -> CancelToken {
        CancelToken::make(None, None)
    }

    fn make(deadline: Option<Instant>, parent: Option<(Weak<Inner>, u64)>) -> CancelToken {
        CancelToken {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    reason: None,
                    next_id: 0,
                    callbacks: Vec::new(),
                }),
                cv: Condvar::new(),
                deadline,
                parent,
            }),
        }
    }

    /// A token cancelled with this one (with its reason), or on its own, or at `deadline`.
    pub fn child(&self, deadline: Option<Instant>) -> CancelToken {
        let mut st = self.inner.state.lock().unwrap();
        let id = st.next_id;
        st.next_id += 1;
        let child = CancelToken::make(deadline, Some((Arc::downgrade(&self.inner), id)));
        if let Some(r) = st.reason {
            drop(st);
            child.cancel(r);
            return child;
        }
        let weak = Arc::downgrade(&child.inner);
        let parent = Arc::downgrade(&self.inner);
        st.callbacks.push((
            id,
            Box::new(move || {
                if let (Some(c), Some(p)) = (weak.upgrade(), parent.upgrade()) {
                    let r = p.state.lock().unwrap().reason.unwrap_or(Reason::Cancel);
                    CancelToken { inner: c }.cancel(r);
                }
            }),
        ));
        child
    }

    /// Cancels the token (the first reason stays) and runs what waits on it.
    pub fn cancel(&self, reason: Reason) {
        let callbacks = {
            let mut st = self.inner.state.lock().unwrap();
            if st.reason.is_some() {
                return;
            }
            st.reason = Some(reason);
            std::mem::take(&mut st.callbacks)
        };
        self.inner.cv.notify_all();
        for (_, cb) in callbacks {
            cb();
        }
    }

    /// Why it was cancelled, or None while it was not (a passed deadline counts).
    pub fn reason(&self) -> Option<Reason> {
        let r = self.inner.state.lock().unwrap().reason;
        if r.is_none() {
            if let Some(d) = self.inner.deadline {
                if Instant::now() >= d {
                    return Some(Reason::Deadline);
                }
            }
        }
        r
    }

    pub fn is_cancelled(&self) -> bool {
        self.reason().is_some()
    }

    /// The deadline this token was made with.
    pub fn deadline(&self) -> Option<Instant> {
        self.inner.deadline
    }

    /// Waits `d`, or less when the token is cancelled; answers true when it was.
    pub fn wait_timeout(&self, d: Duration) -> bool {
        let mut end = Instant::now() + d;
        if let Some(dl) = self.inner.deadline {
            end = end.min(dl);
        }
        let mut st = self.inner.state.lock().unwrap();
        loop {
            if st.reason.is_some() {
                return true;
            }
            let now = Instant::now();
            if now >= end {
                drop(st);
                return self.is_cancelled();
            }
            st = self.inner.cv.wait_timeout(st, end - now).unwrap().0;
        }
    }

    /// Waits until the token is cancelled.
    pub fn wait(&self) -> Reason {
        loop {
            if self.wait_timeout(Duration::from_secs(3600)) {
                return self.reason().unwrap_or(Reason::Cancel);
            }
        }
    }

    /// Runs `f` once when the token is cancelled (at once if it is); the answer removes it.
    pub(crate) fn on_cancel(&self, f: Callback) -> Option<u64> {
        let mut st = self.inner.state.lock().unwrap();
        if st.reason.is_some() {
            drop(st);
            f();
            return None;
        }
        let id = st.next_id;
        st.next_id += 1;
        st.callbacks.push((id, f));
        Some(id)
    }

    pub(crate) fn remove(&self, id: Option<u64>) {
        if let Some(id) = id {
            self.inner
                .state
                .lock()
                .unwrap()
                .callbacks
                .retain(|(i, _)| *i != id);
        }
    }
}
