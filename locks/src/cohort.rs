//! Cohorts: the threads of one node queue for a lock locally, and a holder hands the lock,
//! unreleased, to the next thread of its node (see the crate's [Cohorts](crate#cohorts)).
//!
//! Only the thread at the front of its node's queue touches the network: it takes over a hold
//! parked by its predecessor, or acquires the lock on the network. A holder with local waiters
//! parks its hold ([`NetLock::hand_off`]: what the lock owes its next holder, then `mfence`),
//! at most `limit` times in a row; then it releases on the network, and the next local thread
//! queues on the network behind the other nodes' waiters.
//!
//! The queue is process memory (a mutex per node and lock): the threads of one node are the
//! threads of one process. No `Ctx` operation runs under its mutex, so a simulated thread is
//! never stopped while holding it. Only the waiter next in line spins (with [`Spin`]: a
//! scheduling point under the simulator), for [`SPIN_BUDGET`] from when it became next; the
//! others, and then that one too, park ([`clock::park_timeout`]: until unparked on becoming
//! next in line or when a hold is left for it, or in an untimed simulation in steps of
//! [`PARKED_STEP`]), so that a node's waiting threads do not take the CPUs its NIC needs (on
//! Soft-RoCE the NIC is the kernel, on the same CPUs). Parking has a price on a fast network:
//! a wake-up is a system call for the waker and microseconds for the woken (the simulator
//! charges both: `Profile::wake`, `Profile::unpark`). Letting every waiter spin for a budget
//! before it parks made `loco bench locks` at 8 threads on the 2-vCPU VM 4-37% slower (one
//! boot each way, 2026-12-05), so only the next in line does. Every waiter stops at its
//! deadline, at a shutdown, or when its node is reported dead.
//! A front left by an earlier incarnation of the node (a thread that died holding, its node
//! restarted since) is cleared by the first waiter of the new incarnation.

use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use loco_rdmawait::clock::{self, Unparker};
use loco_rdmawait::{Cluster, Ctx, NodeId};

use crate::thread::{Deadline, Home, PinRef, Spin, ThreadLock};
use crate::{Error, Result};

/// A hold on its way from one thread to another thread of the same node, unreleased.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) ticket: u64,
    /// A node lock's: whether the value of `rel` the hold entered on had the poison bit.
    pub(crate) poison: bool,
    /// Keeps the hold's announcement (its first holder's `waiting` slot) in place.
    pub(crate) pin: Option<PinRef>,
}

/// A lock's protocol on the network, as the cohort layer uses it.
pub(crate) trait NetLock {
    /// The calling thread's state (made on first use); [`Error::AlreadyHeld`] if it holds the
    /// lock.
    fn prepare(&self, ctx: &Ctx, d: &Deadline) -> Result<Rc<ThreadLock>>;
    /// The network acquire.
    fn acquire(&self, ctx: &Ctx, d: &Deadline) -> Result<u64>;
    /// The network try-acquire.
    fn try_acquire(&self, ctx: &Ctx, d: &Deadline) -> Result<Option<u64>>;
    /// The network release.
    fn release(&self, ctx: &Ctx, poison: bool) -> Result<()>;
    /// The local handover: what the lock owes its next holder; the calling thread's hold ends
    /// and goes into the returned [`Hold`]. An error leaves the hold with the thread.
    fn hand_off(&self, ctx: &Ctx) -> Result<Hold>;
    /// The calling thread (which does not hold the lock) takes over `hold`.
    fn take_over(&self, ctx: &Ctx, hold: Hold) -> Result<u64>;
}

/// No thread of the node is at the front of its queue (or next in line).
const NOBODY: u64 = u64::MAX;

/// Nobody is at the front, and a hold is parked for whoever comes first: the waiter next in
/// line, or a thread arriving meanwhile (barging).
const OPEN: u64 = u64::MAX - 1;

/// Whether the calling thread is simulated without a profile: no time to wake up in, so
/// parked waiters look again every [`PARKED_STEP`] rather than being unparked.
pub(crate) fn untimed_sim() -> bool {
    clock::simulated() && !clock::timed()
}

/// How long a parked simulated waiter of an untimed run lets pass before it looks again.
pub(crate) const PARKED_STEP: Duration = Duration::from_micros(2);

/// How long the waiter next in line spins before it parks too: a handover within a few
/// round trips of a fast network finds it spinning; on a slow one (Soft-RoCE, where a section
/// takes hundreds of microseconds and the NIC runs on the same CPUs) it gives the CPU back.
pub(crate) const SPIN_BUDGET: Duration = Duration::from_micros(20);

/// A wake-up slower than this (from a hold left open to its sleeping next in line, until that
/// thread claims it) is a host short of CPUs, where the woken thread waits for one: then a
/// thread arriving meanwhile may take the hold first (barging). Where wake-ups are quicker
/// (a host with a core per thread), nobody barges, and the next in line is not passed over
/// for the price of a wake-up.
pub(crate) const SLOW_WAKE: Duration = Duration::from_micros(20);

/// The longest an OS thread parks before it looks at its deadline and its node again.
pub(crate) const PARKED_MAX: Duration = Duration::from_millis(1);

/// The node queues of one lock, and its bound on local handovers in a row.
#[derive(Debug)]
pub(crate) struct Cohorts {
    /// Most local handovers in a row; 0: no cohort (every acquire goes to the network).
    limit: AtomicU32,
    /// One queue per node of the cluster, by node index.
    nodes: Vec<NodeQueue>,
}

impl Cohorts {
    /// Queues for a cluster of `nodes` nodes, with [`crate::COHORT_HANDOVERS`] in a row.
    pub(crate) fn new(nodes: usize) -> Self {
        Cohorts {
            limit: AtomicU32::new(crate::COHORT_HANDOVERS),
            nodes: (0..nodes).map(|_| NodeQueue::default()).collect(),
        }
    }

    pub(crate) fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    pub(crate) fn set_limit(&self, limit: u32) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// The queue of `node`.
    fn queue(&self, node: NodeId) -> Result<&NodeQueue> {
        self.nodes
            .get(node.index())
            .ok_or(Error::Rdma(loco_rdmawait::Error::UnknownNode {
                node,
                nodes: self.nodes.len(),
            }))
    }

    /// The calling thread joins its node's queue: its state (checked: not holding), the queue,
    /// and the node's incarnation.
    fn join(
        &self,
        net: &dyn NetLock,
        ctx: &Ctx,
        d: &Deadline,
    ) -> Result<(Rc<ThreadLock>, &NodeQueue, u64)> {
        let me = net.prepare(ctx, d)?;
        // A context of an earlier incarnation of its node fails here (its node's memory is
        // gone), before it joins the new incarnation's queue.
        ctx.load(&me.word)?;
        let inc = ctx.cluster().incarnation(ctx.node())?;
        Ok((me, self.queue(ctx.node())?, inc))
    }

    /// Acquire through the calling thread's node queue (without cohorts: on the network).
    pub(crate) fn acquire(&self, net: &dyn NetLock, ctx: &Ctx, d: &Deadline) -> Result<u64> {
        if self.limit() == 0 {
            return net.acquire(ctx, d);
        }
        let (me, q, inc) = self.join(net, ctx, d)?;
        let n = q.enter(inc);
        if let Err(e) = q.wait_turn(ctx, n, inc, d) {
            if q.withdraw(n) {
                leave_logged(net, ctx, q, n);
            }
            return Err(e);
        }
        let taken = match q.take_parked() {
            Some(hold) => net.take_over(ctx, hold),
            None => net.acquire(ctx, d),
        };
        match taken {
            Ok(t) => {
                me.turn_since.set(Some(clock::now()));
                me.turn.set(Some(n));
                Ok(t)
            }
            Err(e) => {
                leave_logged(net, ctx, q, n);
                Err(e)
            }
        }
    }

    /// Try-acquire through the calling thread's node queue: `None` at once if a thread of the
    /// node holds or waits, else the network try-acquire.
    pub(crate) fn try_acquire(
        &self,
        net: &dyn NetLock,
        ctx: &Ctx,
        d: &Deadline,
    ) -> Result<Option<u64>> {
        if self.limit() == 0 {
            return net.try_acquire(ctx, d);
        }
        let (me, q, inc) = self.join(net, ctx, d)?;
        let Some(n) = q.try_enter(inc) else {
            return Ok(None);
        };
        // Nobody of the node was at the front, so nothing is parked: a network acquire, and
        // a new run of handovers.
        drop(q.take_parked());
        match net.try_acquire(ctx, d) {
            Ok(Some(t)) => {
                me.turn_since.set(Some(clock::now()));
                me.turn.set(Some(n));
                Ok(Some(t))
            }
            r => {
                leave_logged(net, ctx, q, n);
                r
            }
        }
    }

    /// Release by the calling thread (`me`): if it came through its node's queue, hands the
    /// hold to the next thread of the node when one waits and the run allows it, else
    /// releases on the network; then lets the next thread to the front.
    pub(crate) fn release(
        &self,
        net: &dyn NetLock,
        ctx: &Ctx,
        me: &ThreadLock,
        poison: bool,
    ) -> Result<()> {
        let Some(n) = me.turn.get() else {
            return net.release(ctx, poison);
        };
        let short = me
            .turn_since
            .take()
            .map(|t| clock::now().saturating_duration_since(t) < SPIN_BUDGET);
        if me.held.get().is_none() {
            // The hold ended without a release (its lock's node restarted): only the turn goes.
            me.turn.set(None);
            leave(net, ctx, self.queue(ctx.node())?, n, short)?;
            return Err(Error::NotHeld);
        }
        let q = self.queue(ctx.node())?;
        let r = if !poison && q.wants(self.limit()) {
            match net.hand_off(ctx) {
                // The critical section's CPU stores reach the node's memory before the next
                // thread is let in (the weak lock's whole guarantee, Fig. 8a). A fence that
                // fails (a shutdown, this node dead) parks nothing: the hold goes with the node.
                Ok(hold) => match ctx.mfence() {
                    Ok(()) => {
                        q.park(n, hold);
                        Ok(())
                    }
                    Err(e) => Err(e.into()),
                },
                Err(e) if me.held.get().is_some() => {
                    tracing::debug!(target: "loco::locks", error = %e,
                        "no local handover: releasing on the network");
                    net.release(ctx, poison)
                }
                Err(e) => Err(e),
            }
        } else {
            net.release(ctx, poison)
        };
        // Whatever the release's outcome: a thread still holding after a failed release has
        // its hold but no turn, and the next thread of the node queues on the network.
        me.turn.set(None);
        let left = leave(net, ctx, q, n, short);
        r.and(left)
    }
}

/// One node's queue for one lock.
#[derive(Debug)]
struct NodeQueue {
    state: Mutex<State>,
    /// The number at the front (`state.front`), or [`NOBODY`], for the waiters' spin.
    front: AtomicU64,
    /// The node's incarnation when the front's thread joined the queue.
    front_inc: AtomicU64,
    /// The number next in line (the first of `state.waiting`), or [`NOBODY`]: the one waiter
    /// that spins.
    head: AtomicU64,
    /// The number of the waiter next in line once it has spent its spin budget and sleeps
    /// between looks (else anything but the head's number): only then may a newcomer barge past
    /// it (a spinning one takes an open hold at once). A number, not a flag, so that a late
    /// store by a waiter that has since moved on cannot mark its successor asleep.
    asleep: AtomicU64,
}

impl Default for NodeQueue {
    fn default() -> Self {
        NodeQueue {
            state: Mutex::default(),
            front: AtomicU64::new(NOBODY),
            front_inc: AtomicU64::new(0),
            head: AtomicU64::new(NOBODY),
            asleep: AtomicU64::new(NOBODY),
        }
    }
}

/// A thread waiting behind the front.
#[derive(Debug)]
struct Waiter {
    n: u64,
    /// The node's incarnation when it joined.
    inc: u64,
    /// Its thread, to unpark when it becomes next in line or a hold is left open for it (none
    /// in an async task's blocking call, which spins, nor in an untimed simulation, where a
    /// parked waiter looks again every [`PARKED_STEP`]).
    thread: Option<Unparker>,
}

/// The threads a holder of a queue's mutex wakes, unparked once it lets the mutex go: a
/// futex wake-up costs the waker tens of microseconds on the 2-vCPU VM, and a thread woken
/// under the mutex would find it taken, sleep on it, and need a second wake-up.
#[derive(Debug, Default)]
struct Wakes([Option<Unparker>; 3]);

impl Wakes {
    fn push(&mut self, w: &Waiter) {
        let Some(t) = &w.thread else { return };
        match self.0.iter_mut().find(|u| u.is_none()) {
            Some(slot) => *slot = Some(t.clone()),
            None => t.unpark(), // never more than 3 per hold of the mutex; correct anyway
        }
    }

    fn run(self) {
        for t in self.0.into_iter().flatten() {
            t.unpark();
        }
    }
}

/// A queue's state, locked; the wake-ups noted in it run once it is unlocked.
struct Locked<'a>(Option<MutexGuard<'a, State>>);

impl std::ops::Deref for Locked<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        self.0.as_ref().expect("locked until dropped")
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.0.as_mut().expect("locked until dropped")
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if let Some(mut g) = self.0.take() {
            let wakes = std::mem::take(&mut g.wakes);
            drop(g);
            wakes.run();
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// The next number to hand out.
    next: u64,
    /// The threads waiting behind the front, in order.
    waiting: VecDeque<Waiter>,
    /// The number at the front (its thread holds the lock, or is taking it), and its
    /// incarnation.
    front: Option<(u64, u64)>,
    /// A hold the previous front left for the current one (or, with nobody at the front,
    /// for whoever comes first: see [`OPEN`]).
    parked: Option<Hold>,
    /// With nobody at the front and a hold parked: the node's incarnation it was parked in.
    open: Option<u64>,
    /// Threads that took an open hold past the waiter next in line since a waiter last claimed
    /// one.
    barges: u32,
    /// Local handovers since the last network acquire.
    handovers: u32,
    /// Whether the last hold that ended through the queue was shorter than [`SPIN_BUDGET`]:
    /// then the waiters behind the next in line are woken early ([`NodeQueue::open`]).
    short: bool,
    /// When the hold was last left open, and whether the next in line slept then.
    opened: Option<(std::time::Instant, bool)>,
    /// Whether the last sleeping next in line took longer than [`SLOW_WAKE`] from the hold's
    /// opening to its claim: only then may newcomers barge.
    wakes_slow: bool,
    /// Waiters to unpark once the mutex is let go ([`Locked`]).
    wakes: Wakes,
}

impl NodeQueue {
    fn state(&self) -> Locked<'_> {
        Locked(Some(self.state.lock().unwrap_or_else(|p| p.into_inner())))
    }

    fn set_front(&self, s: &mut State, f: Option<(u64, u64)>) {
        s.front = f;
        s.open = None;
        if let Some((_, inc)) = f {
            self.front_inc.store(inc, Ordering::Release);
        }
        self.front
            .store(f.map_or(NOBODY, |(n, _)| n), Ordering::Release);
        self.set_head(s);
    }

    /// Nobody at the front, the hold parked (in incarnation `inc`) for the waiter next in line
    /// or a barging newcomer, whichever comes first; the waiter is woken, and after a short hold
    /// the one behind it too.
    fn open(&self, s: &mut State, inc: u64) {
        s.front = None;
        s.open = Some(inc);
        self.front_inc.store(inc, Ordering::Release);
        self.front.store(OPEN, Ordering::Release);
        let asleep = s
            .waiting
            .front()
            .is_some_and(|w| self.asleep.load(Ordering::Acquire) == w.n);
        s.opened = Some((clock::now(), asleep));
        if let Some(w) = s.waiting.front() {
            s.wakes.push(w);
        }
        // Short holds: the second in line is woken now, so that it spins by the time the hold
        // comes to it, and the one taking this hold does not pay for the wake-up inside its
        // critical section (`claim` wakes the new next in line, for free if it is not parked).
        if s.short {
            if let Some(w) = s.waiting.get(1) {
                s.wakes.push(w);
            }
        }
    }

    /// Number `n` (of incarnation `inc`), next in line, takes the front from an open hold;
    /// false if a barging thread took it first, or it is not open, or it was opened in another
    /// incarnation (the waiter's own checks then find which one is stale: [`Self::clear_stale`]
    /// drops an earlier incarnation's hold, and a waiter of an earlier incarnation gives up).
    fn claim(&self, n: u64, inc: u64) -> bool {
        let mut s = self.state();
        if s.front.is_some() || s.open != Some(inc) || s.waiting.front().is_none_or(|w| w.n != n) {
            return false;
        }
        s.waiting.pop_front();
        s.barges = 0;
        if let Some((at, true)) = s.opened.take() {
            s.wakes_slow = clock::now().saturating_duration_since(at) > SLOW_WAKE;
        }
        self.set_front(&mut s, Some((n, inc)));
        true
    }

    /// The first waiter is next in line: it spins (woken if parked).
    fn set_head(&self, s: &mut State) {
        let head = s.waiting.front();
        let n = head.map_or(NOBODY, |w| w.n);
        if self.head.swap(n, Ordering::AcqRel) != n {
            if let Some(w) = head {
                s.wakes.push(w);
            }
        }
    }

    /// The front moves to the first waiter (woken), or nobody.
    fn advance(&self, s: &mut State) {
        let next = s.waiting.pop_front();
        if let Some(w) = &next {
            s.wakes.push(w);
        }
        self.set_front(s, next.map(|w| (w.n, w.inc)));
    }

    /// Joins the queue (the node's incarnation is `inc`); returns the thread's number.
    fn enter(&self, inc: u64) -> u64 {
        let mut s = self.state();
        let n = s.next;
        s.next += 1;
        let barge = s.open == Some(inc)
            && s.parked.is_some()
            && s.wakes_slow
            && s.barges < crate::COHORT_BARGES
            && s.waiting
                .front()
                .is_some_and(|w| self.asleep.load(Ordering::Acquire) == w.n);
        if barge {
            s.barges += 1;
        }
        if barge || (s.front.is_none() && s.waiting.is_empty()) {
            self.set_front(&mut s, Some((n, inc)));
        } else {
            let thread = clock::unparker().filter(|_| !untimed_sim());
            s.waiting.push_back(Waiter { n, inc, thread });
            self.set_head(&mut s);
        }
        n
    }

    /// Joins the queue only at its front (nobody of the node holds or waits).
    fn try_enter(&self, inc: u64) -> Option<u64> {
        let mut s = self.state();
        if s.front.is_some() || !s.waiting.is_empty() {
            return None;
        }
        let n = s.next;
        s.next += 1;
        self.set_front(&mut s, Some((n, inc)));
        Some(n)
    }

    /// Spins until number `n` (of incarnation `inc`) is at the front, bounded by `d`; stops
    /// with `Shutdown` after [`Cluster::shutdown`](loco_rdmawait::Cluster::shutdown) and with
    /// `PeerDead` once the thread's own node is reported dead or has restarted. On an error the
    /// caller withdraws `n`.
    fn wait_turn(&self, ctx: &Ctx, n: u64, inc: u64, d: &Deadline) -> Result<()> {
        let mut spin = Spin::new();
        let cluster = ctx.cluster();
        // Since when the thread has been next in line.
        let mut head_since = None;
        loop {
            match self.front.load(Ordering::Acquire) {
                f if f == n => return Ok(()),
                OPEN if self.head.load(Ordering::Acquire) == n && self.claim(n, inc) => {
                    return Ok(())
                }
                _ => {}
            }
            cluster.check_alive(ctx.node())?;
            let now = cluster.incarnation(ctx.node())?;
            if now != inc {
                return Err(Error::Rdma(loco_rdmawait::Error::PeerDead {
                    node: ctx.node(),
                    reason: format!(
                        "this node restarted while the thread waited (incarnation {inc}, now {now})"
                    ),
                }));
            }
            if self.front.load(Ordering::Acquire) != NOBODY
                && self.front_inc.load(Ordering::Acquire) != now
            {
                // (An open hold of an earlier incarnation too: `claim` drops it.)
                self.clear_stale(now);
                continue;
            }
            if d.expired() {
                return Err(d.timeout());
            }
            let head = self.head.load(Ordering::Acquire) == n;
            let spinning = head && {
                let since = *head_since.get_or_insert_with(clock::now);
                clock::now().saturating_duration_since(since) < SPIN_BUDGET
            };
            if head && !spinning {
                self.asleep.store(n, Ordering::Release);
            }
            if spinning || (clock::cooperative() && !clock::simulated()) {
                spin.wait(cluster)?;
            } else if untimed_sim() {
                cluster.check_open()?;
                clock::sleep(PARKED_STEP);
            } else {
                cluster.check_open()?;
                clock::park_timeout(d.remaining().min(PARKED_MAX));
            }
        }
    }

    /// The front (and any waiter) is of an earlier incarnation of the node: its thread died
    /// with the node (holding, or with its guard forgotten), and its hold went with it (the
    /// other nodes skip a dead node's tickets). The queue goes on with incarnation `now`.
    fn clear_stale(&self, now: u64) {
        let mut s = self.state();
        if s.front.is_some_and(|(_, i)| i != now) || s.open.is_some_and(|i| i != now) {
            tracing::debug!(target: "loco::locks",
                "a node's lock queue was left by an earlier incarnation: cleared");
            s.parked = None;
            s.handovers = 0;
            s.waiting.retain(|w| w.inc == now);
            self.advance(&mut s);
        }
    }

    /// Number `n` stops waiting: `true` if it had reached the front (then the caller must
    /// [`leave`] it).
    fn withdraw(&self, n: u64) -> bool {
        let mut s = self.state();
        if s.front.is_some_and(|(f, _)| f == n) {
            return true;
        }
        let Some(i) = s.waiting.iter().position(|w| w.n == n) else {
            return false;
        };
        let me = s.waiting.remove(i).expect("found above");
        if s.open.is_some() && s.waiting.is_empty() {
            // The last waiter of an open hold: nobody is left to take it. This thread takes
            // the front, and its `leave` releases the hold on the network.
            self.set_front(&mut s, Some((n, me.inc)));
            return true;
        }
        self.set_head(&mut s);
        false
    }

    /// The hold the previous front parked, if any; if none, the front acquires on the network
    /// and a new run of handovers starts.
    fn take_parked(&self) -> Option<Hold> {
        let mut s = self.state();
        let h = s.parked.take();
        if h.is_none() {
            s.handovers = 0;
        }
        h
    }

    /// Whether a releasing front should hand its hold over: a thread waits behind it and the
    /// run of handovers is below `limit`.
    fn wants(&self, limit: u32) -> bool {
        let s = self.state();
        !s.waiting.is_empty() && s.handovers < limit
    }

    /// Number `n`, still at the front, goes: the next waiter comes to the front, or nobody.
    fn pass_front(&self, n: u64) {
        let mut s = self.state();
        if s.front.is_some_and(|(f, _)| f == n) {
            if s.waiting.is_empty() {
                self.set_front(&mut s, None);
            } else {
                self.advance(&mut s);
            }
        }
    }

    /// Number `n`, at the front, leaves `hold` for the next front. Not if the front moved on
    /// meanwhile (cleared as an earlier incarnation's: the node restarted, and the hold went
    /// with it; the other nodes skipped its ticket as a dead node's).
    fn park(&self, n: u64, hold: Hold) {
        let mut s = self.state();
        if s.front.is_some_and(|(f, _)| f == n) {
            s.handovers += 1;
            s.parked = Some(hold);
        }
    }
}

/// [`leave`] on an acquire that fails anyway: a failed release of a parked hold is logged (the
/// caller keeps that hold, and the acquire's own error is what it returns).
fn leave_logged(net: &dyn NetLock, ctx: &Ctx, q: &NodeQueue, n: u64) {
    if let Err(e) = leave(net, ctx, q, n, None) {
        tracing::error!(target: "loco::locks", error = %e, node = %ctx.node(),
            "releasing a hold no thread of the node took failed");
    }
}

/// The calling thread (`me`, which must not hold the lock) takes over `hold`, unless the
/// lock's `home` restarted (the hold went with its words) or `ctx` is of an earlier
/// incarnation of its node.
pub(crate) fn take_over(
    ctx: &Ctx,
    me: &ThreadLock,
    home: &Home,
    cluster: &Cluster,
    hold: Hold,
) -> Result<u64> {
    if let Some(ticket) = me.held.get() {
        return Err(Error::AlreadyHeld { ticket });
    }
    home.check(cluster)?;
    ctx.load(&me.word)?;
    me.take_over(hold.ticket, hold.pin, hold.poison);
    Ok(hold.ticket)
}

/// Number `n`, at the front, leaves: the next waiter comes to the front; if none waits, a hold
/// parked for it (its waiter gave up) is released on the network here first (the caller does
/// not hold the lock). If that release fails, the caller keeps the hold (it is reported, and
/// [`RawLock::release`](crate::RawLock::release) by the caller releases it). `short`: whether
/// the hold that ends was shorter than [`SPIN_BUDGET`] (`None`: no hold, an acquire failed).
fn leave(net: &dyn NetLock, ctx: &Ctx, q: &NodeQueue, n: u64, short: Option<bool>) -> Result<()> {
    loop {
        let orphan = {
            let mut s = q.state();
            let Some((f, inc)) = s.front else {
                return Ok(()); // cleared as stale meanwhile
            };
            if f != n {
                return Ok(());
            }
            if let Some(short) = short {
                s.short = short;
            }
            if !s.waiting.is_empty() {
                if s.parked.is_some() {
                    q.open(&mut s, inc);
                } else {
                    q.advance(&mut s);
                }
                return Ok(());
            }
            match s.parked.take() {
                Some(h) => h,
                None => {
                    q.set_front(&mut s, None);
                    return Ok(());
                }
            }
        };
        // Still at the front, so newcomers queue behind: nobody takes this hold now.
        if let Err(e) = net.take_over(ctx, orphan) {
            // The hold is gone with its lock's home or this node: the front goes on.
            q.pass_front(n);
            return Err(e);
        }
        if let Err(e) = net.release(ctx, false) {
            // The caller holds it now: the front goes on, the hold stays with the caller.
            q.pass_front(n);
            return Err(e);
        }
    }
}
