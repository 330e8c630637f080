//! Per-(lock, thread) state, kept in the thread's context, and the spin-wait helper.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use loco_rdmawait::{Ctx, Loc};

use crate::{Error, Result};

static NEXT_LOCK: AtomicU64 = AtomicU64::new(1);

/// A process-unique id for a new lock (the key of its per-thread state).
pub(crate) fn next_lock_id() -> u64 {
    NEXT_LOCK.fetch_add(1, Ordering::Relaxed)
}

/// What one thread keeps for one lock.
#[derive(Debug)]
pub(crate) struct ThreadLock {
    /// The thread's private word on its own node: `turn` (wlock) or `loc` (nlock).
    pub(crate) word: Loc,
    /// The thread's slot in the `rel[*]` array (wlock); 0 for an nlock.
    pub(crate) slot: usize,
    /// The local copies of every `rel[*]` (wlock); empty for an nlock.
    pub(crate) rels: Vec<Loc>,
    /// The ticket of the thread's current hold.
    pub(crate) held: Cell<Option<u64>>,
}

impl Drop for ThreadLock {
    fn drop(&mut self) {
        if let Some(ticket) = self.held.get() {
            tracing::error!(target: "loco::locks", ticket, node = %self.word.node(),
                "a context was dropped while holding a lock: the lock stays held for good");
        }
    }
}

/// The per-thread lock states of a context, keyed by lock id.
#[derive(Debug, Default)]
struct Registry {
    locks: RefCell<HashMap<u64, Rc<ThreadLock>>>,
}

/// The calling thread's state for lock `id` of cluster `cluster`, registered with `init` on first
/// use.
pub(crate) fn thread_lock(
    ctx: &Ctx,
    cluster: u32,
    id: u64,
    init: impl FnOnce(&Ctx) -> Result<ThreadLock>,
) -> Result<Rc<ThreadLock>> {
    if ctx.cluster().id() != cluster {
        return Err(Error::ForeignContext {
            ctx: ctx.cluster().id(),
            lock: cluster,
        });
    }
    let reg = ctx.extension::<Registry>(|_| Ok(Registry::default()))?;
    if let Some(st) = reg.locks.borrow().get(&id) {
        return Ok(st.clone());
    }
    let st = Rc::new(init(ctx)?);
    reg.locks.borrow_mut().insert(id, st.clone());
    Ok(st)
}

/// Backoff for spin loops on a machine that may have fewer cores than spinning threads: spin
/// briefly, then yield; warn once if the wait exceeds the cluster's timeout (likely a deadlock: a
/// holder that never releases).
pub(crate) struct Spin {
    round: u32,
    start: Instant,
    warn_after: Duration,
    warned: bool,
}

impl Spin {
    pub(crate) fn new(warn_after: Duration) -> Self {
        Spin {
            round: 0,
            start: Instant::now(),
            warn_after,
            warned: false,
        }
    }

    /// Waits for a ticket lock's turn with `ahead` holders still before us: proportional
    /// backoff (each of them needs at least a network round trip), so that waiting threads do
    /// not flood the NICs with polls that cannot succeed yet.
    pub(crate) fn wait_behind(&mut self, ahead: u64, what: &'static str) {
        for _ in 1..ahead.min(64) {
            std::thread::yield_now();
        }
        self.wait(what);
    }

    pub(crate) fn wait(&mut self, what: &'static str) {
        if self.round < 6 {
            for _ in 0..(1 << self.round) {
                std::hint::spin_loop();
            }
            self.round += 1;
        } else {
            std::thread::yield_now();
            if !self.warned && self.start.elapsed() > self.warn_after {
                self.warned = true;
                tracing::warn!(target: "loco::locks", what, waited = ?self.start.elapsed(),
                    "still waiting for a lock: is a holder gone without releasing it?");
            }
        }
    }
}
