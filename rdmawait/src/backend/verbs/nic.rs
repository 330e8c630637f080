//! A thread's NIC on the verbs backend: one completion queue, one RC queue pair per node.
//!
//! Posting and polling call `ibv_post_send` and `ibv_poll_cq` directly (work requests built in
//! a stack array, completions drained into another): the hot path allocates nothing.
//!
//! Completion bookkeeping: a request's `wr_id` is its target node and its sequence number on
//! that queue pair. An RC queue pair completes its requests in post order, so a completion for
//! request `s` completes every earlier one too: draining the completion queue appends one
//! status per request completed to its queue pair's `done` queue (successes for the earlier
//! ones, which would have had completions of their own had they failed), and `poll(n)` consumes
//! the head of `done[n]`, the earliest unpolled request towards `n` (docs/model.md §2).
//!
//! Doorbells: outside a batch ([`ThreadNic::batch_begin`]) each request is posted at once,
//! signalled. In a batch, a thread's requests towards one node wait in the link's `chain` and
//! go in one `ibv_post_send` (one doorbell) when the batch ends, when the chain is
//! [`MAX_CHAIN`] long, or before any other operation of the thread; only the last of them is
//! signalled (the others need no completion of their own, by the rule above).

use std::cell::Cell;
use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::sync::atomic::{fence, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdma_mummy_sys as sys;
use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionQueue};
use sideway::ibverbs::queue_pair::QueuePair;

use super::{qp, session, verbs_error, verbs_source, LocalNode, Shared};
use crate::backend::{ThreadNic, WorkRequest};
use crate::error::TimeoutKind;
use crate::{Error, NodeId, Result, WORD};

/// A queue pair number no queue pair has (for the unreachable-peer testing hook).
const UNREACHABLE_QPN: u32 = 0x00ff_fff0;
/// Completions taken from the completion queue per `ibv_poll_cq` call.
const POLL_BATCH: usize = 16;
/// How often a poll that keeps waiting asks the device whether the queue pair broke.
const STATE_CHECK_EVERY: Duration = Duration::from_millis(200);
/// How long an empty poll spins before it starts yielding the CPU.
const SPIN_FOR: Duration = Duration::from_micros(500);
/// Most requests one doorbell carries (a batch's requests towards one node).
const MAX_CHAIN: usize = 16;
/// `wr_id` = sequence number << `SEQ_SHIFT` | target node index.
const SEQ_SHIFT: u32 = 16;
/// The work request id of [`VerbsNic::raw`]'s requests: no link's (links are fewer than
/// 2^16).
const RAW_WR_ID: u64 = u64::MAX;

/// A thread's NIC (see the module docs).
pub(crate) struct VerbsNic {
    /// The completion channel of the thread's completion queue (async tasks sleep on it).
    #[cfg(feature = "tokio")]
    events: Option<Arc<super::events::Events>>,
    state: Arc<Mutex<State>>,
    shared: Arc<Shared>,
    home: Arc<LocalNode>,
    /// Open batches (nested ones counted): posts wait in their link's chain.
    batching: u32,
    /// Some chain holds requests not rung yet (checked without the lock by the CPU operations).
    unrung: Cell<bool>,
}

impl std::fmt::Debug for VerbsNic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsNic")
            .field("node", &self.home.id)
            .finish()
    }
}

/// The queue pairs and completion queue of one thread. Behind a mutex only so that
/// [`quiesce`] can drain it from another thread; the owning thread is the only other user.
pub(crate) struct State {
    /// Declared before `cq`: queue pairs are destroyed before their completion queue.
    links: Vec<Link>,
    cq: qp::Cq,
    /// Completion-queue entries the device granted.
    cq_capacity: usize,
    /// Requests posted whose completion has not been drained yet, over all queue pairs.
    in_flight: usize,
    /// Requests waiting in the links' chains, over all queue pairs.
    chained: usize,
    /// Requests a failed `ibv_post_send` left on the device uncounted: their (flushed)
    /// completions may still take room in the completion queue, until drained as strays.
    strays: usize,
}

/// The queue pair towards one node and its bookkeeping.
struct Link {
    target: NodeId,
    qp: qp::Qp,
    /// The responder end, when it lives in this process.
    far: Far,
    /// Send-queue entries the device granted.
    capacity: usize,
    /// Inline bytes per request the device granted: puts up to this long go inline.
    max_inline: u32,
    /// Requests posted whose completion has not been drained yet.
    in_flight: usize,
    /// A batch's requests not posted yet (their doorbell not rung), in post order, each with
    /// its Fence flag.
    chain: Vec<(Encoded, bool)>,
    /// Requests of a batch whose `ibv_post_send` failed: they fail, after every request in
    /// flight (they are the latest), with the link's failure.
    lost: usize,
    /// Statuses of drained completions not yet consumed by `poll`, in post order.
    done: VecDeque<u32>,
    /// An `rfence` is pending: the next request carries the Fence flag (or, with the software
    /// fence, waits for the earlier READs and atomics).
    fence: bool,
    /// Requests posted (chained ones included: each has its sequence number from the start),
    /// and completions drained, since the queue pair was created (in post order: RC completes
    /// in order).
    posted: u64,
    completed: u64,
    /// The `posted` count just after the latest RDMA READ or atomic: it has completed once
    /// `completed` reaches it.
    last_read: u64,
    /// Why requests on this queue pair can no longer succeed.
    failed: Option<Failure>,
    /// The queue pair was moved to the error state by us (a dead peer).
    flushed: bool,
    /// The target's incarnation the queue pair leads to: once the target has another, the
    /// link is dead for good (it would reach a dead process, or nothing).
    incarnation: u64,
    /// The link was found leading to a replaced incarnation (reported once as such).
    stale: bool,
    /// The target's memory: base address, rkey, size in words.
    remote_addr: u64,
    rkey: u32,
    remote_words: usize,
    next_state_check: Option<Instant>,
    /// `Peers::changes` (the rendezvous) when [`Link::refresh`]
    /// last looked (`u64::MAX`: never): while it stays the same there is nothing to look at,
    /// and the check on every post and poll costs one atomic load.
    seen_changes: u64,
}

enum Far {
    /// Responder queue pair in the target node's protection domain, in this process.
    Local { _qp: qp::Qp, _node: Arc<LocalNode> },
    /// Responder queue pair in another process, released when this thread's NIC goes.
    Remote { qpn: u32 },
    /// Responder queue pair in another process, connected through rdma_cm: dropping the
    /// connection (after the queue pair: field order in [`Link`]) tells the peer to destroy it.
    Cm(#[allow(dead_code)] CmLink),
    /// None: the target's process was dead when the thread opened; the link only reports it.
    Dead,
}

/// An rdma_cm connection that ends when dropped (only dropped: nothing else to do with it).
struct CmLink(super::cm::Id);

impl Drop for CmLink {
    fn drop(&mut self) {
        self.0.disconnect();
    }
}

#[derive(Clone, Debug)]
enum Failure {
    /// A request failed on the NIC; the queue pair is in the error state.
    Qp,
    /// The peer is gone.
    Peer(String),
    /// Posting a batch's requests failed.
    Post(String),
}

impl VerbsNic {
    /// Opens a thread's NIC on `node`: creates its completion queue and one connected queue pair
    /// towards every node.
    pub(crate) fn open(shared: &Arc<Shared>, node: NodeId) -> Result<VerbsNic> {
        let home = shared
            .local(node)
            .ok_or_else(|| {
                verbs_error(format!(
                    "{node} belongs to another process; threads can only be opened on {}",
                    shared
                        .me
                        .map_or("this process's nodes".to_string(), |m| m.to_string())
                ))
            })?
            .clone();
        let device = &shared.device;
        let nodes = shared.infos.len();
        let want_cqe = (nodes as u64 * u64::from(shared.send_depth))
            .clamp(1, u64::from(device.max_cqe)) as u32;
        let mut builder = device.ctx.create_cq_builder();
        builder.setup_cqe(want_cqe);
        // Async tasks sleep on a completion channel; without one (a device that cannot make
        // one), they keep polling.
        #[cfg(feature = "tokio")]
        let channel = match device.ctx.create_comp_channel() {
            Ok(ch) => match ch.set_nonblocking(true) {
                Ok(()) => {
                    builder.setup_comp_channel(&ch, 0);
                    Some(ch)
                }
                Err(e) => {
                    tracing::debug!(target: "loco::rdmawait", error = %e, "completion channel not usable: async tasks will poll");
                    None
                }
            },
            Err(e) => {
                tracing::debug!(target: "loco::rdmawait", error = %e, "no completion channel: async tasks will poll");
                None
            }
        };
        let cq = qp::Cq::new(
            builder
                .build()
                .map_err(|e| verbs_source("ibv_create_cq failed", e))?,
        );
        #[cfg(feature = "tokio")]
        let events = channel.map(|ch| Arc::new(super::events::Events::new(ch, cq.clone())));
        // SAFETY: the pointer is valid while `cq` lives (borrowed here); `cqe` is a plain integer
        // the provider set at creation to the granted capacity.
        let granted = unsafe { (*cq.cq().as_ptr()).cqe };
        let cq_capacity = usize::try_from(granted).unwrap_or(0).max(1);
        // Under rdma_cm, the events of this thread's connections arrive on a channel of its own.
        let channel = match &shared.cm {
            Some(_) if nodes > 1 => {
                Some(super::cm::Channel::new().map_err(|e| Error::Backend {
                    backend: "verbs",
                    message: "rdma_cm is not available".to_string(),
                    source: Some(e),
                })?)
            }
            _ => None,
        };
        let mut links: Vec<Link> = Vec::with_capacity(nodes);
        for t in 0..nodes {
            match Link::connect(shared, &home, &cq, NodeId(t as u16), channel.as_ref()) {
                Ok(link) => links.push(link),
                Err(e) => {
                    // Nothing stays behind: the responders other processes made for the links
                    // already connected go too (local queue pairs drop with `links`).
                    for link in &links {
                        if let Far::Remote { qpn } = link.far {
                            session::release_qp(shared, link.target, link.incarnation, qpn);
                        }
                    }
                    return Err(e);
                }
            }
        }
        let state = Arc::new(Mutex::new(State {
            links,
            cq,
            cq_capacity,
            in_flight: 0,
            chained: 0,
            strays: 0,
        }));
        {
            let mut nics = shared.nics.lock();
            nics.retain(|w| w.strong_count() > 0);
            nics.push(Arc::downgrade(&state));
        }
        tracing::debug!(target: "loco::rdmawait", %node, cq_capacity, "verbs thread NIC opened");
        Ok(VerbsNic {
            #[cfg(feature = "tokio")]
            events,
            state,
            shared: shared.clone(),
            home,
            batching: 0,
            unrung: Cell::new(false),
        })
    }

    fn words(&self) -> &[AtomicU64] {
        self.home.mem.words().as_slice()
    }

    fn word(&self, word: usize) -> Result<&AtomicU64> {
        let words = self.words();
        words.get(word).ok_or(Error::OutOfRange {
            node: self.home.id,
            offset: word as u64 * WORD,
            len: WORD,
            size: words.len() as u64 * WORD,
        })
    }

    #[inline]
    fn check_local(&self, first: usize, count: usize) -> Result<()> {
        let size = self.words().len();
        match first.checked_add(count) {
            Some(end) if end <= size => Ok(()),
            _ => Err(Error::OutOfRange {
                node: self.home.id,
                offset: first as u64 * WORD,
                len: count as u64 * WORD,
                size: size as u64 * WORD,
            }),
        }
    }
}

impl Link {
    /// Creates the queue pair towards `target` and connects it to a responder queue pair there.
    fn connect(
        shared: &Arc<Shared>,
        home: &Arc<LocalNode>,
        cq: &Arc<BasicCompletionQueue>,
        target: NodeId,
        channel: Option<&Arc<super::cm::Channel>>,
    ) -> Result<Link> {
        let device = &shared.device;
        // The incarnation first: if the target rejoins meanwhile, the link is born stale.
        let incarnation = shared.incarnation(target);
        let mut info = shared.info(target)?;
        let qp::Created {
            mut qp,
            capacity,
            max_inline,
        } = qp::create(device, home, cq, shared.send_depth)?;
        let local = qp::endpoint(device, &qp, qp::random_psn());
        let mut dead = None;
        let far = match shared.local(target) {
            Some(node) => {
                let mut responder = qp::create(device, node, &node.responder_cq, 1)?.qp;
                let remote = qp::endpoint(device, &responder, qp::random_psn());
                let mut towards = remote;
                if shared.peers.unreachable(target) {
                    towards.qpn = UNREACHABLE_QPN; // testing hook: nobody answers
                }
                qp::connect(device, &mut qp, &local, &towards, shared.transport)?;
                qp::connect(device, &mut responder, &remote, &local, shared.transport)?;
                Far::Local {
                    _qp: responder,
                    _node: node.clone(),
                }
            }
            None => {
                // A dead process does not keep the thread from working with the others: its
                // link is born failed, and every operation towards it reports the death.
                let connected = if let Some(reason) = shared.peers.dead(target) {
                    Err(Error::PeerDead {
                        node: target,
                        reason,
                    })
                } else if let Some(ch) = channel {
                    // rdma_cm connects the queue pair; its reply carries the target's memory.
                    session::cm_connect(shared, target, incarnation, &qp, ch).map(
                        |(id, remote_info)| {
                            info = remote_info;
                            Far::Cm(CmLink(id))
                        },
                    )
                } else {
                    Link::connect_over_tcp(shared, target, incarnation, &mut qp, &local)
                };
                match connected {
                    Ok(far) => far,
                    Err(Error::PeerDead { reason, .. }) => {
                        dead = Some(reason);
                        Far::Dead
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let rkey = shared.peers.rkey_override(target).unwrap_or(info.rkey);
        Ok(Link {
            target,
            qp,
            far,
            capacity,
            max_inline,
            in_flight: 0,
            chain: Vec::new(),
            lost: 0,
            done: VecDeque::new(),
            fence: false,
            posted: 0,
            completed: 0,
            last_read: 0,
            // A link born dead never reached RTS: nothing to flush.
            flushed: dead.is_some(),
            failed: dead.map(Failure::Peer),
            incarnation,
            stale: false,
            remote_addr: info.addr,
            rkey,
            remote_words: info.words as usize,
            next_state_check: None,
            seen_changes: u64::MAX,
        })
    }

    /// Asks `target`'s process (incarnation `incarnation`) over the TCP session for a
    /// responder connected to `local`, and connects `qp` to it; the responder is released
    /// again if that fails.
    fn connect_over_tcp(
        shared: &Shared,
        target: NodeId,
        incarnation: u64,
        qp: &mut qp::Qp,
        local: &qp::Endpoint,
    ) -> Result<Far> {
        let remote = session::connect_qp(shared, target, incarnation, local)?;
        if let Err(e) = qp::connect(&shared.device, qp, local, &remote, shared.transport) {
            session::release_qp(shared, target, incarnation, remote.qpn);
            return Err(e);
        }
        Ok(Far::Remote { qpn: remote.qpn })
    }

    /// The error an operation on this queue pair gets once it has failed.
    fn failure(&self) -> Option<Error> {
        self.failed.as_ref().map(|f| match f {
            Failure::Qp => Error::QpInError { node: self.target },
            Failure::Peer(reason) => Error::PeerDead {
                node: self.target,
                reason: reason.clone(),
            },
            Failure::Post(message) => Error::Backend {
                backend: "verbs",
                message: message.clone(),
                source: None,
            },
        })
    }

    /// Marks the link dead if its peer is dead or was replaced by a new incarnation (see
    /// [`Link::kill`]).
    #[inline]
    fn refresh(&mut self, shared: &Shared) {
        let changes = shared.peers.changes();
        if changes != self.seen_changes {
            self.refresh_changed(shared, changes);
        }
    }

    /// [`Link::refresh`] once the rendezvous has changed something (`changes`).
    #[cold]
    #[inline(never)]
    fn refresh_changed(&mut self, shared: &Shared, changes: u64) {
        self.seen_changes = changes;
        if let Some(reason) = shared.peers.dead(self.target) {
            self.kill(reason);
            return;
        }
        if self.stale || matches!(self.far, Far::Local { .. }) {
            return;
        }
        let now = shared.peers.incarnation(self.target);
        if now != self.incarnation {
            // The peer restarted and rejoined: this queue pair led to the dead incarnation.
            // Said once, over whatever reason the link had (the restart explains it).
            self.stale = true;
            self.failed = None;
            self.kill(session::restarted(self.target, self.incarnation, now));
        }
    }

    /// Marks the peer dead and moves the queue pair to the error state (once), so that its
    /// outstanding requests complete (flushed) instead of waiting for retries.
    fn kill(&mut self, reason: String) {
        if !matches!(self.failed, Some(Failure::Peer(_))) {
            self.failed = Some(Failure::Peer(reason));
        }
        if !self.flushed {
            self.flushed = true;
            if let Err(e) = qp::fail(&mut self.qp) {
                tracing::debug!(target: "loco::rdmawait", node = %self.target, error = %e, "could not flush a queue pair");
            }
        }
    }

    /// Records a drained completion's status for the `n`-th of the requests in flight, which
    /// completes the `n - 1` before it (successfully: a failed one has a completion of its own).
    fn complete(&mut self, n: usize, status: u32) {
        self.in_flight -= n;
        self.completed += n as u64;
        for _ in 1..n {
            self.done.push_back(sys::ibv_wc_status::IBV_WC_SUCCESS);
        }
        self.done.push_back(status);
        self.note_status(status);
    }

    /// A failed status marks the link failed (its first failure stays the reason).
    fn note_status(&mut self, status: u32) {
        if status != sys::ibv_wc_status::IBV_WC_SUCCESS && self.failed.is_none() {
            self.failed = Some(match peer_gone(status) {
                Some(reason) => Failure::Peer(reason.to_string()),
                None => Failure::Qp,
            });
        }
    }

    /// The result of a consumed completion.
    #[inline]
    fn result(&self, status: u32) -> Result<()> {
        if status == sys::ibv_wc_status::IBV_WC_SUCCESS {
            Ok(())
        } else {
            self.failed_result(status)
        }
    }

    /// [`Link::result`] of a failed completion.
    #[cold]
    #[inline(never)]
    fn failed_result(&self, status: u32) -> Result<()> {
        use sys::ibv_wc_status::*;
        let node = self.target;
        match status {
            IBV_WC_SUCCESS => Ok(()),
            IBV_WC_WR_FLUSH_ERR => Err(self.failure().unwrap_or(Error::QpInError { node })),
            IBV_WC_REM_ACCESS_ERR => Err(Error::Completion {
                node,
                status: "remote access error (IBV_WC_REM_ACCESS_ERR): invalid rkey, or an \
                         address outside the target's registered memory"
                    .to_string(),
            }),
            s => match peer_gone(s) {
                Some(reason) => Err(Error::PeerDead {
                    node,
                    reason: reason.to_string(),
                }),
                None => Err(Error::Completion {
                    node,
                    status: format!("{} (status {s})", status_name(s)),
                }),
            },
        }
    }
}

impl State {
    /// Whether one more request fits towards link `t`: in its send queue with the requests in
    /// flight and the chained ones, and in the completion queue with every request that may
    /// still complete there (a failed request always has a completion).
    #[inline(always)]
    fn room(&self, t: usize) -> bool {
        let link = &self.links[t];
        link.in_flight + link.chain.len() < link.capacity
            && self.in_flight + self.chained + self.strays < self.cq_capacity
    }

    /// Moves every available completion into its queue pair's `done` queue; returns how many
    /// requests completed.
    fn drain(&mut self) -> Result<usize> {
        let mut wcs = [MaybeUninit::<sys::ibv_wc>::uninit(); POLL_BATCH];
        // SAFETY: the completion queue is alive (owned by `self`), `wcs` has room for
        // `POLL_BATCH` work completions, and the provider writes at most that many.
        let n = unsafe {
            sys::ibv_poll_cq(
                self.cq.cq().as_ptr(),
                POLL_BATCH as i32,
                wcs.as_mut_ptr().cast::<sys::ibv_wc>(),
            )
        };
        if n < 0 {
            return Err(poll_failed(n));
        }
        // The NIC's writes (READ data, atomic results) precede the completion that reports them.
        fence(SeqCst);
        // Never more than asked for; clamped anyway, as `drop` drains too and must not panic.
        let n = (n as usize).min(POLL_BATCH);
        let mut requests = 0;
        for wc in &wcs[..n] {
            // SAFETY: `ibv_poll_cq` returned `n`: the first `n` entries were written.
            let wc = unsafe { wc.assume_init_ref() };
            let t = (wc.wr_id & ((1 << SEQ_SHIFT) - 1)) as usize;
            let seq = wc.wr_id >> SEQ_SHIFT;
            match self.links.get_mut(t) {
                Some(link)
                    if seq > link.completed && seq - link.completed <= link.in_flight as u64 =>
                {
                    let k = (seq - link.completed) as usize;
                    link.complete(k, wc.status);
                    self.in_flight -= k;
                    requests += k;
                }
                _ if self.strays > 0 => self.strays -= 1, // left by a failed post
                _ => {
                    tracing::warn!(target: "loco::rdmawait", wr_id = wc.wr_id, "stray completion ignored")
                }
            }
        }
        Ok(requests)
    }
}

impl ThreadNic for VerbsNic {
    #[cfg(feature = "tokio")]
    fn completion_events(&self) -> Option<Arc<dyn crate::backend::CompletionEvents>> {
        self.events
            .clone()
            .map(|e| e as Arc<dyn crate::backend::CompletionEvents>)
    }

    fn post(&mut self, target: NodeId, wr: WorkRequest) -> Result<()> {
        if self.shared.shutdown.load(SeqCst) {
            return Err(Error::Shutdown);
        }
        let t = target.index();
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let Some(link) = st.links.get_mut(t) else {
            return Err(Error::UnknownNode {
                node: target,
                nodes: st.links.len(),
            });
        };
        check_alive(&self.shared, link)?;
        if matches!(wr, WorkRequest::Fence) {
            link.fence = true;
            return Ok(());
        }
        let enc = Encoded::new(wr, link)?;
        self.check_local(enc.local, enc.words)?;
        // Never post past a queue's capacity (docs/verbs-notes.md, pitfall 4): the send queue
        // holds the requests in flight and the chained ones; the completion queue may get a
        // completion for each (a failed request always has one). Chained requests free nothing
        // until they are posted: post them, then wait for completions.
        if !st.room(t) {
            self.ring_all(st);
            self.drain_until(st, t, "send queue space", |st| st.room(t))?;
        }
        let software_fence = st.links[t].fence && self.shared.software_fence;
        if software_fence {
            // The Fence flag's promise, kept by the poster: every earlier RDMA READ and atomic
            // on this queue pair has completed (chained ones are posted first).
            self.ring(st, t);
            self.drain_until(st, t, "rfence (earlier reads and atomics)", |st| {
                st.links[t].completed >= st.links[t].last_read
            })?;
        }
        let link = &mut st.links[t];
        let hardware_fence = link.fence && !software_fence;
        let last_read = link.last_read;
        link.posted += 1;
        if enc.opcode != sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE {
            link.last_read = link.posted;
        }
        let sent = if self.batching == 0 && link.chain.is_empty() {
            // Not in a batch (a batch rings its chains as it ends): the request goes alone.
            self.send_one(st, t, &enc, hardware_fence)
        } else {
            link.chain.push((enc, hardware_fence));
            st.chained += 1;
            if self.batching > 0 {
                self.unrung.set(true);
                if st.links[t].chain.len() >= MAX_CHAIN {
                    self.ring(st, t);
                }
                st.links[t].fence = false;
                return Ok(());
            }
            self.send_chain(st, t)
        };
        match sent {
            Ok(()) => {
                st.links[t].fence = false;
                Ok(())
            }
            Err(e) => {
                // Never posted: as if it had not been (the fence still applies to the next).
                let link = &mut st.links[t];
                link.posted -= 1;
                link.last_read = last_read;
                Err(e)
            }
        }
    }

    fn batch_begin(&mut self) {
        self.batching = self.batching.saturating_add(1);
    }

    fn batch_end(&mut self) {
        self.batching = self.batching.saturating_sub(1);
        if self.batching == 0 {
            self.ring_pending();
        }
    }

    fn try_poll(&mut self, target: NodeId) -> Option<Result<()>> {
        self.ring_pending();
        let mut st = self.state.lock();
        look(&self.shared, &mut st, target)
    }

    fn raw_requests(
        &mut self,
        target: NodeId,
        wr: WorkRequest,
        n: usize,
        timeout: Duration,
    ) -> Option<Result<Vec<u64>>> {
        Some(self.raw(target, wr, n, timeout))
    }

    fn poll(&mut self, target: NodeId, timeout: Duration) -> Result<()> {
        let t = target.index();
        // The clock is read only once nothing is there yet: a completion already in the queue
        // (rxe completes atomics inside `ibv_post_send`) costs no clock read.
        let mut start: Option<Instant> = None;
        let mut idle = 0u32;
        self.ring_pending();
        loop {
            let now = {
                let mut guard = self.state.lock();
                let st = &mut *guard;
                if let Some(r) = look(&self.shared, st, target) {
                    return r;
                }
                let link = &mut st.links[t];
                let now = Instant::now();
                let check = *link.next_state_check.get_or_insert(now + STATE_CHECK_EVERY);
                if now >= check {
                    link.next_state_check = Some(now + STATE_CHECK_EVERY);
                    if qp::in_error(&link.qp) {
                        // Its requests complete as flushed; make sure later posts fail at once.
                        link.failed.get_or_insert(Failure::Qp);
                    }
                }
                now
            };
            // Nothing to return yet: a shutdown ends the wait (as on the soft NIC).
            if self.shared.shutdown.load(SeqCst) {
                return Err(Error::Shutdown);
            }
            let since = *start.get_or_insert(now);
            if now.saturating_duration_since(since) >= timeout {
                return Err(Error::Timeout {
                    what: TimeoutKind::Poll(target),
                    after: timeout,
                });
            }
            pause(&mut idle, since);
        }
    }

    fn load(&mut self, word: usize) -> Result<u64> {
        self.ring_pending();
        Ok(self.word(word)?.load(SeqCst))
    }

    fn store(&mut self, word: usize, value: u64) -> Result<()> {
        self.ring_pending();
        self.word(word)?.store(value, SeqCst);
        Ok(())
    }

    fn cas(&mut self, word: usize, expected: u64, new: u64) -> Result<u64> {
        self.ring_pending();
        Ok(
            match self
                .word(word)?
                .compare_exchange(expected, new, SeqCst, SeqCst)
            {
                Ok(v) | Err(v) => v,
            },
        )
    }

    fn mfence(&mut self) -> Result<()> {
        self.ring_pending();
        fence(SeqCst);
        Ok(())
    }
}

impl VerbsNic {
    /// Drains completions until `done` holds, failing if the peer of queue pair `t` dies or the
    /// queue pair fails, or with [`Error::Timeout`] (`what`) after the cluster's timeout.
    fn drain_until(
        &self,
        st: &mut State,
        t: usize,
        what: &'static str,
        done: impl Fn(&State) -> bool,
    ) -> Result<()> {
        // Usually `done` holds at once: the clock is read only when it does not.
        let mut start: Option<Instant> = None;
        let mut idle = 0u32;
        loop {
            check_alive(&self.shared, &mut st.links[t])?;
            if done(st) {
                return Ok(());
            }
            if st.drain()? == 0 {
                let start = *start.get_or_insert_with(Instant::now);
                if start.elapsed() >= self.shared.timeout {
                    return Err(Error::Timeout {
                        what: TimeoutKind::Other(what),
                        after: self.shared.timeout,
                    });
                }
                pause(&mut idle, start);
            }
        }
    }

    /// Posts every chained request (batches end, or another operation comes).
    #[inline]
    fn ring_pending(&self) {
        if self.unrung.get() {
            let mut st = self.state.lock();
            self.ring_all(&mut st);
        }
    }

    /// Posts the chains of every link.
    fn ring_all(&self, st: &mut State) {
        for t in 0..st.links.len() {
            self.ring(st, t);
        }
        self.unrung.set(false);
    }

    /// Posts link `t`'s chain in a batch. If that fails, its requests are lost: each fails, in
    /// its turn, with the link's failure (the link is failed from now on).
    fn ring(&self, st: &mut State, t: usize) {
        let n = st.links[t].chain.len();
        if n == 0 {
            return;
        }
        if let Err(e) = self.send_chain(st, t) {
            tracing::debug!(target: "loco::rdmawait", node = %st.links[t].target, error = %e,
                "posting a batch failed: its requests fail");
            let link = &mut st.links[t];
            link.lost += n;
            if link.failed.is_none() {
                link.failed = Some(match e {
                    Error::QpInError { .. } => Failure::Qp,
                    e => Failure::Post(e.to_string()),
                });
            }
        }
    }

    /// Posts link `t`'s chain with one `ibv_post_send` (one doorbell), only its last request
    /// signalled, each with its Fence flag. The caller has checked the local words and made
    /// room. On an error nothing is in flight (a request posted before the one refused is
    /// flushed: the queue pair is moved to the error state).
    fn send_chain(&self, st: &mut State, t: usize) -> Result<()> {
        let link = &mut st.links[t];
        let n = link.chain.len();
        if n == 0 {
            return Ok(());
        }
        st.chained -= n;
        let first = link.posted - n as u64 + 1;
        let base = self.home.mem.words().addr() as u64;
        let lkey = self.home.mem.lkey();
        let mut sges = [const { MaybeUninit::<sys::ibv_sge>::uninit() }; MAX_CHAIN];
        let mut wrs = [const { MaybeUninit::<sys::ibv_send_wr>::uninit() }; MAX_CHAIN];
        // One pointer for every access to the requests, so that the `next` links stay valid.
        let wr = wrs.as_mut_ptr().cast::<sys::ibv_send_wr>();
        let remote = (link.rkey, link.max_inline);
        for (i, (enc, fence)) in link.chain.drain(..).enumerate() {
            let sge = sges[i].write(sge_of(&enc, base, lkey));
            let wr_id = ((first + i as u64) << SEQ_SHIFT) | t as u64;
            let mut swr = request(&enc, fence, i + 1 == n, wr_id, sge, remote);
            if i + 1 < n {
                // SAFETY: `i + 1 < n <= MAX_CHAIN`: the address is inside `wrs` (written in the
                // next turn), which outlives the call below.
                swr.next = unsafe { wr.add(i + 1) };
            }
            // SAFETY: `i < n <= MAX_CHAIN`: inside `wrs`; written once, in order.
            unsafe { wr.add(i).write(swr) };
        }
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the queue pair is alive (owned by the link); `wrs[..n]` is a list of complete
        // requests linked by `next` (the last one's null: zeroed), whose scatter entries in
        // `sges` outlive the call and name `lkey`-registered memory of this node, inside it
        // (checked by the caller). The provider copies the requests.
        let ret = unsafe { sys::ibv_post_send(link.qp.qp().as_ptr(), wr, &mut bad) };
        if ret == 0 {
            link.in_flight += n;
            st.in_flight += n;
            return Ok(());
        }
        let os = std::io::Error::from_raw_os_error(ret);
        if bad != wr && !bad.is_null() {
            // Some went, unsignalled, and may have no completion: flush them, and count none
            // of them (their flushed completions are drained as strays, kept room for meanwhile).
            // SAFETY: the provider points `bad` at the refused request, inside `wrs[..n]`.
            let went = unsafe { bad.offset_from(wr) }.clamp(0, n as isize) as usize;
            st.strays += went;
            link.failed.get_or_insert(Failure::Post(format!(
                "ibv_post_send failed part-way ({os})"
            )));
            if !link.flushed {
                link.flushed = true;
                if let Err(e) = qp::fail(&mut link.qp) {
                    tracing::debug!(target: "loco::rdmawait", node = %link.target, error = %e, "could not flush a queue pair");
                }
            }
        }
        Err(refused(link, os))
    }

    /// [`ThreadNic::raw_requests`]: what perftest's latency loop does, on this thread's queue
    /// pair towards `target`. The requests are never counted as in flight: each is consumed
    /// here, and one that does not complete within `timeout` is left as a stray (its
    /// completion, should it come, is ignored by later drains).
    fn raw(
        &mut self,
        target: NodeId,
        wr: WorkRequest,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<u64>> {
        self.ring_pending();
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let t = target.index();
        if t >= st.links.len() {
            return Err(Error::UnknownNode {
                node: target,
                nodes: st.links.len(),
            });
        }
        if st.in_flight + st.chained + st.strays > 0 {
            return Err(verbs_error(
                "bare requests need a thread with nothing in flight (wait for its requests first)",
            ));
        }
        if wr == WorkRequest::Fence {
            return Err(verbs_error("a fence is not a request of its own"));
        }
        let link = &mut st.links[t];
        check_alive(&self.shared, link)?;
        let enc = Encoded::new(wr, link)?;
        self.check_local(enc.local, enc.words)?;
        let mut sge = sge_of(
            &enc,
            self.home.mem.words().addr() as u64,
            self.home.mem.lkey(),
        );
        let mut swr = request(
            &enc,
            false,
            true,
            RAW_WR_ID,
            &mut sge,
            (link.rkey, link.max_inline),
        );
        let mut times = Vec::with_capacity(n);
        let mut last = crate::clock::now();
        for _ in 0..n {
            let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
            // SAFETY: as in `send_one`: the queue pair is alive (the link, borrowed, owns it),
            // `swr` is a complete request whose scatter entry `sge` outlives the call and names
            // checked registered memory of this node; the provider copies the request.
            let ret =
                unsafe { sys::ibv_post_send(st.links[t].qp.qp().as_ptr(), &mut swr, &mut bad) };
            if ret != 0 {
                return Err(refused(
                    &mut st.links[t],
                    std::io::Error::from_raw_os_error(ret),
                ));
            }
            let mut wc = MaybeUninit::<sys::ibv_wc>::uninit();
            let mut spins = 0u32;
            let mut since = None;
            loop {
                // SAFETY: the completion queue is alive (owned by the state, locked) and `wc`
                // has room for the one completion asked for.
                let k = unsafe { sys::ibv_poll_cq(st.cq.cq().as_ptr(), 1, wc.as_mut_ptr()) };
                if k > 0 {
                    break;
                }
                if k < 0 {
                    st.strays += 1;
                    return Err(poll_failed(k));
                }
                spins = spins.wrapping_add(1);
                if spins % 1024 == 0 {
                    let start = *since.get_or_insert_with(Instant::now);
                    if start.elapsed() >= timeout {
                        st.strays += 1;
                        return Err(Error::Timeout {
                            what: TimeoutKind::Poll(target),
                            after: timeout,
                        });
                    }
                }
                std::hint::spin_loop();
            }
            // The NIC's writes precede the completion that reports them.
            fence(SeqCst);
            // SAFETY: `ibv_poll_cq` returned 1: the entry was written.
            let wc = unsafe { wc.assume_init() };
            let link = &mut st.links[t];
            if wc.status != sys::ibv_wc_status::IBV_WC_SUCCESS {
                link.note_status(wc.status);
                return Err(link
                    .result(wc.status)
                    .err()
                    .unwrap_or(Error::QpInError { node: target }));
            }
            let now = crate::clock::now();
            let ns = now.saturating_duration_since(last).as_nanos();
            times.push(ns.min(u128::from(u64::MAX)) as u64);
            last = now;
        }
        Ok(times)
    }

    /// Posts one request, signalled, outside a batch (the common case: `send_chain` for a
    /// chain of one, without the chain). It is the link's latest: its sequence number is
    /// `posted`. The caller has checked the local words and made room; on an error nothing is
    /// in flight.
    #[inline(always)]
    fn send_one(&self, st: &mut State, t: usize, enc: &Encoded, fence: bool) -> Result<()> {
        let link = &mut st.links[t];
        let mut sge = sge_of(
            enc,
            self.home.mem.words().addr() as u64,
            self.home.mem.lkey(),
        );
        let wr_id = (link.posted << SEQ_SHIFT) | t as u64;
        let mut swr = request(
            enc,
            fence,
            true,
            wr_id,
            &mut sge,
            (link.rkey, link.max_inline),
        );
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the queue pair is alive (owned by the link); `swr` is a complete request
        // (`next` null: zeroed) whose scatter entry `sge` outlives the call and names
        // `lkey`-registered memory of this node, inside it (checked by the caller). The
        // provider copies the request.
        let ret = unsafe { sys::ibv_post_send(link.qp.qp().as_ptr(), &mut swr, &mut bad) };
        if ret == 0 {
            link.in_flight += 1;
            st.in_flight += 1;
            return Ok(());
        }
        Err(refused(link, std::io::Error::from_raw_os_error(ret)))
    }
}

/// The scatter entry of `enc`'s local words.
#[inline(always)]
fn sge_of(enc: &Encoded, base: u64, lkey: u32) -> sys::ibv_sge {
    sys::ibv_sge {
        addr: base + enc.local as u64 * WORD,
        length: enc.length,
        lkey,
    }
}

/// `enc` as an `ibv_send_wr` with scatter entry `sge`, its Fence flag `fence`, signalled or not,
/// not linked to a next one, for a queue pair whose target memory has `rkey` and which sends up
/// to `max_inline` bytes inline.
#[inline(always)]
fn request(
    enc: &Encoded,
    fence: bool,
    signalled: bool,
    wr_id: u64,
    sge: *mut sys::ibv_sge,
    (rkey, max_inline): (u32, u32),
) -> sys::ibv_send_wr {
    // SAFETY: `ibv_send_wr` is plain old data (integers, raw pointers, unions of those): all
    // zeroes is a valid value of each field.
    let mut swr: sys::ibv_send_wr = unsafe { MaybeUninit::zeroed().assume_init() };
    swr.wr_id = wr_id;
    swr.sg_list = sge;
    swr.num_sge = 1;
    swr.opcode = enc.opcode;
    if signalled {
        swr.send_flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
    }
    if fence {
        swr.send_flags |= sys::ibv_send_flags::IBV_SEND_FENCE.0;
    }
    // A small put goes inline: the provider copies its source now, and the NIC need not read
    // it over PCIe (the put reads its source at post time, one of the moments the model
    // allows, docs/model.md §4).
    if enc.opcode == sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE && enc.length <= max_inline {
        swr.send_flags |= sys::ibv_send_flags::IBV_SEND_INLINE.0;
    }
    if enc.atomic {
        swr.wr.atomic = sys::atomic_t {
            remote_addr: enc.remote_addr,
            compare_add: enc.compare_add,
            swap: enc.swap,
            rkey,
        };
    } else {
        swr.wr.rdma = sys::rdma_t {
            remote_addr: enc.remote_addr,
            rkey,
        };
    }
    swr
}

/// The error of an `ibv_poll_cq` that returned `n` (negative: minus an errno).
fn poll_failed(n: i32) -> Error {
    Error::Backend {
        backend: "verbs",
        message: "ibv_poll_cq failed".to_string(),
        source: Some(std::io::Error::from_raw_os_error(-n)),
    }
}

/// The error of an `ibv_post_send` that `link`'s queue pair refused with `os`.
fn refused(link: &mut Link, os: std::io::Error) -> Error {
    if qp::in_error(&link.qp) {
        link.failed.get_or_insert(Failure::Qp);
        return Error::QpInError { node: link.target };
    }
    Error::Backend {
        backend: "verbs",
        message: format!("ibv_post_send towards {} failed", link.target),
        source: Some(os),
    }
}

/// Consumes the completion of the earliest request in flight towards `target` if it is there,
/// draining the completion queue meanwhile (completions of other queue pairs are kept for
/// them): `None` if that request has not completed yet. What [`ThreadNic::poll`] returns for
/// it otherwise, without waiting or reading the clock.
#[inline(always)]
fn look(shared: &Shared, st: &mut State, target: NodeId) -> Option<Result<()>> {
    let t = target.index();
    if t >= st.links.len() {
        return Some(Err(Error::UnknownNode {
            node: target,
            nodes: st.links.len(),
        }));
    }
    loop {
        let link = &mut st.links[t];
        if let Some(status) = link.done.pop_front() {
            return Some(link.result(status));
        }
        if link.in_flight == 0 {
            if link.lost > 0 {
                link.lost -= 1;
                return Some(Err(link
                    .failure()
                    .unwrap_or(Error::QpInError { node: target })));
            }
            return Some(Err(Error::NothingPending { node: target }));
        }
        link.refresh(shared);
        match st.drain() {
            Err(e) => return Some(Err(e)),
            Ok(0) => return None,
            Ok(_) => {}
        }
    }
}

/// The one peer-alive check: marks `link` failed if the rendezvous reports its peer dead (or
/// restarted since the link was made), and returns the error every operation on a failed link
/// gets.
#[inline]
fn check_alive(shared: &Shared, link: &mut Link) -> Result<()> {
    link.refresh(shared);
    // The common case first: a live link, without a call into `failure` (hot path).
    if link.failed.is_none() {
        return Ok(());
    }
    link.failure().map_or(Ok(()), Err)
}

/// A work request in ibverbs terms, checked against the link's remote memory.
#[derive(Clone, Copy)]
struct Encoded {
    opcode: u32,
    /// First local word and word count.
    local: usize,
    words: usize,
    remote_addr: u64,
    /// The atomic's compare (CAS) or addend (FAA) operand, and its swap operand.
    compare_add: u64,
    swap: u64,
    atomic: bool,
    /// Bytes to transfer.
    length: u32,
}

impl Encoded {
    /// Encodes `wr` (not a fence) for `link`: opcode, addresses, operands. Remote bounds are
    /// the target NIC's to enforce (a request outside its memory region completes with a remote
    /// access error); an address that overflows is refused here.
    #[inline(always)]
    fn new(wr: WorkRequest, link: &Link) -> Result<Encoded> {
        use sys::ibv_wr_opcode::*;
        let at = |word: usize| {
            (word as u64)
                .checked_mul(WORD)
                .and_then(|off| link.remote_addr.checked_add(off))
        };
        let (opcode, local, words, remote, compare_add, swap) = match wr {
            WorkRequest::Write {
                local,
                remote,
                words,
            } => (IBV_WR_RDMA_WRITE, local, words, remote, 0, 0),
            WorkRequest::Read {
                local,
                remote,
                words,
            } => (IBV_WR_RDMA_READ, local, words, remote, 0, 0),
            WorkRequest::CompareSwap {
                remote,
                expected,
                new,
                local,
            } => (IBV_WR_ATOMIC_CMP_AND_SWP, local, 1, remote, expected, new),
            WorkRequest::FetchAdd { remote, add, local } => {
                (IBV_WR_ATOMIC_FETCH_AND_ADD, local, 1, remote, add, 0)
            }
            WorkRequest::Fence => {
                return Err(verbs_error("a fence is not a work request".to_owned()))
            }
        };
        let Some(remote_addr) = at(remote) else {
            return Err(Error::OutOfRange {
                node: link.target,
                offset: u64::MAX,
                len: (words as u64).saturating_mul(WORD),
                size: link.remote_words as u64 * WORD,
            });
        };
        let atomic = matches!(
            wr,
            WorkRequest::CompareSwap { .. } | WorkRequest::FetchAdd { .. }
        );
        // Atomics need 8-byte aligned targets; word addresses are, if the base is.
        if atomic && remote_addr % WORD != 0 {
            return Err(Error::Misaligned {
                offset: remote_addr - link.remote_addr,
                len: WORD,
            });
        }
        let length = u32::try_from((words as u64).saturating_mul(WORD))
            .map_err(|_| verbs_error(format!("a transfer of {words} words is over 4 GiB")))?;
        Ok(Encoded {
            opcode,
            local,
            words,
            remote_addr,
            compare_add,
            swap,
            atomic,
            length,
        })
    }
}

impl Drop for VerbsNic {
    /// Lets the thread's outstanding requests finish (up to the cluster's timeout) before the
    /// queue pairs go: destroying a queue pair cancels its requests, but an operation posted
    /// and never waited for must still take effect (as on the soft NIC; `quiesce` relies on it).
    fn drop(&mut self) {
        let mut st = self.state.lock();
        // Requests still held by a batch go too (a context ends its batches first; in case).
        self.ring_all(&mut st);
        let start = Instant::now();
        let mut idle = 0u32;
        while st.in_flight > 0 && start.elapsed() < self.shared.timeout {
            for t in 0..st.links.len() {
                st.links[t].refresh(&self.shared);
            }
            match st.drain() {
                Ok(0) => pause(&mut idle, start),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        if st.in_flight > 0 {
            tracing::warn!(target: "loco::rdmawait", node = %self.home.id, in_flight = st.in_flight,
                "thread NIC dropped with requests still outstanding");
        }
        for link in &st.links {
            if let Far::Remote { qpn } = link.far {
                session::release_qp(&self.shared, link.target, link.incarnation, qpn);
            }
        }
    }
}

/// Waits until every thread NIC of the backend has drained a completion for every request it
/// posted (the requests have then taken effect: a completion means the responder executed it).
pub(crate) fn quiesce(shared: &Shared, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    let mut idle = 0u32;
    loop {
        let nics: Vec<_> = shared
            .nics
            .lock()
            .iter()
            .filter_map(|w| w.upgrade())
            .collect();
        let mut busy = false;
        for nic in nics {
            let mut st = nic.lock();
            st.drain()?;
            busy |= st.in_flight > 0;
        }
        if !busy {
            return Ok(());
        }
        if shared.shutdown.load(SeqCst) {
            return Err(Error::Shutdown);
        }
        if start.elapsed() >= timeout {
            return Err(Error::Timeout {
                what: TimeoutKind::Quiesce,
                after: timeout,
            });
        }
        pause(&mut idle, start);
    }
}

/// Backs off between empty polls: spin first (a completion usually comes within microseconds,
/// and perftest-like latency needs busy polling), then yield, then sleep briefly so that long
/// waits do not starve the threads (or, on Soft-RoCE, the kernel) doing the work.
fn pause(idle: &mut u32, since: Instant) {
    *idle = idle.saturating_add(1);
    if *idle % 64 != 0 {
        std::hint::spin_loop();
        return;
    }
    let waited = since.elapsed();
    if waited < SPIN_FOR {
        std::hint::spin_loop();
    } else if waited < Duration::from_millis(5) {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Why a failed status means the peer is unreachable, if it does.
fn peer_gone(status: u32) -> Option<&'static str> {
    use sys::ibv_wc_status::*;
    match status {
        IBV_WC_RETRY_EXC_ERR => Some(
            "no acknowledgement after the transport's retries (IBV_WC_RETRY_EXC_ERR): the peer's \
             queue pair is gone or unreachable",
        ),
        IBV_WC_RNR_RETRY_EXC_ERR => {
            Some("receiver not ready after the retries (IBV_WC_RNR_RETRY_EXC_ERR)")
        }
        IBV_WC_RESP_TIMEOUT_ERR => Some("response timeout (IBV_WC_RESP_TIMEOUT_ERR)"),
        _ => None,
    }
}

fn status_name(status: u32) -> &'static str {
    use sys::ibv_wc_status::*;
    match status {
        IBV_WC_LOC_LEN_ERR => "local length error (IBV_WC_LOC_LEN_ERR)",
        IBV_WC_LOC_QP_OP_ERR => "local queue pair operation error (IBV_WC_LOC_QP_OP_ERR)",
        IBV_WC_LOC_PROT_ERR => "local protection error (IBV_WC_LOC_PROT_ERR)",
        IBV_WC_WR_FLUSH_ERR => "flushed: the queue pair is in the error state (IBV_WC_WR_FLUSH_ERR)",
        IBV_WC_BAD_RESP_ERR => "bad response (IBV_WC_BAD_RESP_ERR)",
        IBV_WC_LOC_ACCESS_ERR => "local access error (IBV_WC_LOC_ACCESS_ERR)",
        IBV_WC_REM_INV_REQ_ERR => {
            "remote invalid request (IBV_WC_REM_INV_REQ_ERR): the target does not support the operation or its length"
        }
        IBV_WC_REM_ACCESS_ERR => "remote access error (IBV_WC_REM_ACCESS_ERR)",
        IBV_WC_REM_OP_ERR => "remote operation error (IBV_WC_REM_OP_ERR)",
        IBV_WC_REM_ABORT_ERR => "remote aborted (IBV_WC_REM_ABORT_ERR)",
        IBV_WC_FATAL_ERR => "fatal device error (IBV_WC_FATAL_ERR)",
        IBV_WC_GENERAL_ERR => "general error (IBV_WC_GENERAL_ERR)",
        _ => "unknown completion status",
    }
}
