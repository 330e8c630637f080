//! Abandon marks and the poison bit, shared by the node lock and the weak lock.
//!
//! A ticket lock hands the lock to tickets in order, so a ticket whose thread gave up (a timed
//! acquire that ran out, an error after the ticket was taken) would block every later ticket.
//! Its thread therefore leaves an **abandon mark**: `ab[u mod K] = u + 1`, a ring of
//! [`MARKS`] words next to the lock's ticket dispenser, written only with remote RMWs (so they
//! are atomic against each other, and a stale RMW — one whose wait timed out — can only fail,
//! being a CAS from the exact value read). A thread that finds the lock released to `r` and
//! `ab[r mod K] = r + 1` passes the lock on to `r + 1` for it (the node lock with `rcas(rel, r,
//! r+1)`, the weak lock with a forwarding release); see the lock types' docs for why mutual
//! exclusion and the publication guarantees survive. Those steps are protocol steps
//! ([`crate::protocol::mark`], `nlock_give_up`, `nlock_pass_on`, `wlock_give_up`,
//! `wlock_pass_on`), checked by the litmus explorer; this module keeps the process's owed
//! marks.
//!
//! The ring has room for the marks of the `K` tickets after the one the lock is released to; a
//! ticket given up further back than that cannot be marked yet: the mark is **owed**, kept in
//! the lock handle ([`Debts`], shared by the threads of the process) and paid by the next thread
//! of the process that calls the lock or waits for it.

use std::sync::Mutex;
use std::time::Duration;

use loco_rdmawait::{clock, NodeId};

use crate::thread::Deadline;
use crate::Result;

/// How long a thread that gives a ticket up spends marking it (beyond the caller's deadline):
/// a few round trips to the lock's node. If that does not suffice, the mark is owed (see
/// [`Debts`]).
pub(crate) const ABANDON_BUDGET: Duration = Duration::from_millis(500);

/// How far paying owed marks may run past the caller's deadline (see [`Debts::pay`]).
pub(crate) const DEBT_MARGIN: Duration = Duration::from_millis(10);

pub(crate) use crate::protocol::{MARKS, POISON};

/// The ticket part of a released-to value.
pub(crate) fn ticket(raw: u64) -> u64 {
    raw & !POISON
}

/// Whether a released-to value carries the poison bit.
pub(crate) fn poisoned(raw: u64) -> bool {
    raw & POISON != 0
}

/// Tickets given up whose marks could not be written yet (see the module docs): paid by any
/// thread of the process that uses the lock next.
#[derive(Debug, Default)]
pub(crate) struct Debts(Mutex<Vec<u64>>);

impl Debts {
    pub(crate) fn push(&self, u: u64) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(u);
    }

    /// Gives ticket `u` up with `try_abandon` (pass it on, or leave its mark), within
    /// [`ABANDON_BUDGET`]; a ticket that could not be marked is owed. `kind` and `node` name the
    /// lock kind and the calling thread's node in the logs.
    pub(crate) fn abandon(
        &self,
        lock: u64,
        kind: &'static str,
        node: NodeId,
        u: u64,
        try_abandon: impl FnOnce(&Deadline) -> Result<bool>,
    ) {
        match try_abandon(&Deadline::after(ABANDON_BUDGET)) {
            Ok(true) => {
                tracing::debug!(target: "loco::locks", lock, kind, %node, ticket = u, "ticket abandoned");
            }
            Ok(false) => self.push(u),
            Err(e) => {
                self.push(u);
                tracing::warn!(target: "loco::locks", lock, kind, %node, ticket = u, error = %e,
                    "could not mark an abandoned ticket; owed to the next caller");
            }
        }
    }

    /// Tries `try_abandon` (within [`ABANDON_BUDGET`] each, and within the caller's deadline
    /// `within`) on every owed ticket; keeps those it could not mark, or had no time left for.
    pub(crate) fn pay(
        &self,
        within: &Deadline,
        mut try_abandon: impl FnMut(u64, &Deadline) -> Result<bool>,
    ) {
        let owed: Vec<u64> = {
            let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if v.is_empty() {
                return;
            }
            std::mem::take(&mut *v)
        };
        // The caller's deadline, stretched by a small margin so that even callers with tiny
        // deadlines get owed marks written (a mark is a few round trips).
        let until = within.end().max(clock::now() + DEBT_MARGIN);
        let left: Vec<u64> = owed
            .into_iter()
            .filter(|&u| {
                let d = Deadline::at(until.min(clock::now() + ABANDON_BUDGET));
                d.expired() || !matches!(try_abandon(u, &d), Ok(true))
            })
            .collect();
        if !left.is_empty() {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(left);
        }
    }
}
