//! Locks over RDMA: the paper's weak, strong and node locks (docs/model.md §5.3-§5.5; Figs. 8, 10 and 13).
//!
//! Three locks, one shape ([`lock_api`]'s split into a raw protocol, a handle and a guard):
//!
//! | lock | protocol | a release publishes | release blocks? |
//! |---|---|---|---|
//! | [`WLock`] | distributed ticket lock (Fig. 10) | CPU accesses only: mutual exclusion, nothing more | no |
//! | [`SLock`] | `gf(all)` + the weak release | every earlier operation, towards every node | yes (one round trip; nodes not written to since the thread's last fence are left out) |
//! | [`NLock`] on n | centralised ticket lock on n (Fig. 13) | operations towards n | no |
//!
//! A handle is cheap to clone, `Send` and `Sync`, and is used by threads on every node; each call
//! takes the calling thread's [`Ctx`], and the guard holds it. The threads of one node form a
//! **cohort** for each lock (on by default, see [Cohorts](#cohorts)): they queue on their node,
//! and a holder hands the lock to the next thread of its node without a network release.
//!
//! ```
//! use loco_locks::SLock;
//! use loco_rdmawait::{Cluster, NodeId, Schedule, WorkId};
//!
//! let cluster = Cluster::builder().nodes(3).soft(Schedule::Threaded).build()?;
//! let counter = cluster.alloc_word(NodeId(2))?;
//! let lock = SLock::new(&cluster, NodeId(0), 4)?; // ticket dispenser on n0, up to 4 threads
//!
//! let workers: Vec<_> = (0..3u16)
//!     .map(|n| {
//!         let (cluster, lock) = (cluster.clone(), lock.clone());
//!         std::thread::spawn(move || -> loco_locks::Result<()> {
//!             let ctx = cluster.context(NodeId(n))?;
//!             let tmp = cluster.alloc_word(NodeId(n))?;
//!             let d = WorkId::new(1);
//!             for _ in 0..10 {
//!                 let _g = lock.acquire(&ctx)?;
//!                 ctx.get(&tmp, &counter, d)?;          // read the counter on n2 ...
//!                 ctx.wait(d)?;
//!                 ctx.store(&tmp, ctx.load(&tmp)? + 1)?; // ... add on the CPU ...
//!                 ctx.put(&counter, &tmp, d)?;          // ... write it back
//!             } // the guard's release fences: the put lands before the next holder enters
//!             Ok(())
//!         })
//!     })
//!     .collect();
//! for w in workers {
//!     w.join().unwrap()?;
//! }
//! cluster.quiesce()?;
//! assert_eq!(cluster.peek(&counter)?, 30);
//! # Ok::<(), loco_locks::Error>(())
//! ```
//!
//! Section and rule numbers cited here (`docs/model.md §5.2`, `rule 6`) are those of the
//! project's [model page][loco-model]; the [docs index][loco-docs] lists the other reference
//! pages.
//!
//! [loco-model]: https://github.com/loco-rs/loco-rs/blob/main/docs/model.md
//! [loco-docs]: https://github.com/loco-rs/loco-rs/blob/main/docs/README.md
//!
//! # Guarantees (docs/model.md §5.3-§5.5, Fig. 8)
//! All three give **mutual exclusion** and serve tickets in order (FIFO: [`Lock::acquire`],
//! [`Lock::acquire_timeout`] and [`Lock::acquire_until`]; [`Lock::try_acquire_for`] is not FIFO,
//! it takes a ticket only when the lock is free). With cohorts (the default) a node's threads
//! share its ticket for up to [`COHORT_HANDOVERS`]` + 1` sections in a row, in the order they
//! queued on the node except that a thread arriving while a handed-over hold waits for the next
//! in line may take it first, at most [`COHORT_BARGES`] times past that thread; turn cohorts off ([`Lock::set_cohort`]`(0)`) for one ticket per section, strictly
//! in order. They differ in what a release (or a local handover) makes visible to the next
//! holder:
//! - [`WLock`]: CPU accesses of the critical section (Fig. 8a), not its remote operations: a put
//!   may land after the release, after the next holder has read the old value (Fig. 8b).
//!   Add [`gf`](loco_sv::GlobalFence::gf) towards the nodes you wrote before releasing (Fig. 8d).
//! - [`SLock`]: every operation issued before the release has fully completed before the next
//!   holder enters (Fig. 8e).
//! - [`NLock`] on n: operations **towards n** inside the critical section are visible to the next
//!   holder (Fig. 8f); operations towards other nodes are not (the other-node variant of 8f).
//!
//! A global fence alone gives no exclusion at all (Fig. 8c).
//!
//! # Cohorts
//! On an RDMA network a lock's handover costs round trips: the release, then the next holder's
//! acquire (an FAA, reads of the lock word, a CAS or a broadcast). Threads of the same node can
//! hand a lock over through their node's memory instead, as Sherman's and ALock's hierarchical
//! locks do ([docs/model.md §5.5a][loco-model]):
//! - The threads of a node queue for the lock on their node (process memory; a waiter spins on
//!   its node's CPU, off the network). Only the thread at the front takes a ticket, so a node
//!   puts one thread, not all of them, into the network queue.
//! - A holder whose node has a thread waiting **hands its hold over** without releasing it, after
//!   what the lock owes its next holder: the weak lock `mfence` only (no network operation: Fig.
//!   8a is about CPU accesses), the strong lock its `gf` over every node (Fig. 8e), the node lock
//!   on n `gf([n])` (Fig. 8f), one round trip where a release and the next acquire cost an FAA,
//!   a read of `rel` and a CAS. The next thread enters on the same ticket
//!   ([`LockGuard::ticket`]); it is told of poisoning only by a network handover.
//! - At most `k` handovers in a row ([`Lock::set_cohort`], default [`COHORT_HANDOVERS`]); then
//!   the holder releases on the network and the next thread of its node takes a ticket behind
//!   the other nodes' waiters, which are therefore passed by at most `k` critical sections
//!   (with the `tokio` feature's task handovers, `Lock::acquire_async`, each of those can
//!   be a run of one context's tasks: at most `(k + 1) × (t + 1) - 1`, `t` the tasks'
//!   bound).
//!
//! Measured in simulated time (`connectx5`, 16 threads over 4 nodes, a critical section that
//! writes remote data, wake-ups of parked threads charged): the node lock goes from 268 k to
//! 305 k sections per second, with 6.7 network operations per section instead of 19, and p99
//! acquire latency from 64 to 104 µs (the price of local runs); docs/performance.md §4 has the
//! table.
//!
//! Waiting on the network: a thread whose ticket is not next looks at the lock in proportion
//! to its place in the queue, as DSLR's waiters do: a node lock's waiter reads `rel`, a weak or
//! strong lock's waiter looks at its node's copy, then stays off for a quarter of the time the
//! tickets ahead of it should take (estimated from how fast the released-to ticket moves; at
//! most 500 µs), sleeping when that is 100 µs or more. Only the thread next in line looks
//! continuously. Under `connectx5` this leaves the weak lock's waiters 392 scheduling points per
//! section where looking in a loop took 675 (12 threads over 3 nodes without cohorts); on the
//! 2-vCPU VM, where looking in a loop takes CPU time the holder and the NIC need, it gave 3-12%
//! more sections per second at 8 threads (docs/performance.md §5).
//!
//! Barging: when a holder hands over, the hold is left for whichever thread of the node comes
//! first, the thread next in line or a thread arriving meanwhile (typically the holder itself
//! coming back for its next section), but a newcomer may take it only once the next in line has
//! spent its spin budget and sleeps between looks, only while the node's wake-ups are slow (the
//! last sleeping next in line took more than 20 µs from the hold's opening to taking it), and
//! only [`COHORT_BARGES`] times in a row. A spinning next in line takes the hold at once, as on
//! a fast network; a sleeping one must be woken, which on a host with more threads than CPUs
//! (Soft-RoCE in a 2-vCPU VM, 8 threads) is a context switch the lock would otherwise sit
//! through idle, and on a host with a core per thread a few microseconds, not worth passing the
//! next in line over for. There (8 threads over 2 nodes)
//! barging took the node lock from 4290 to 4286-5366 sections per second, the weak lock from
//! 2432 to 4555-4738 and the strong lock from 1906 to 3452-3653 (the rCAS spinlock: 4917-5398),
//! with fairness 1.04-1.11 (an A/B on 2026-12-05: 1.30-1.65 times the spinlock at 2 nodes with
//! barging, 1.12-1.42 without). Under the simulator's `connectx5` profile, where wake-ups take
//! 3 µs, nobody barges; when they did, the node lock did 284 k sections per second at 16
//! threads, with fairness 3.5, against 305 k and 2.0 (docs/performance.md §4).
//!
//! Failures: a thread that gives up (timeout, error) while queued on its node leaves the queue;
//! one that reaches the front as it gives up passes the front on, releasing on the network a hold
//! parked for it if nobody else of the node waits. The thread at the front took the hold's
//! ticket, and its `waiting` slot keeps naming the hold until the network release, even if its
//! context is dropped first, so the dead-holder and unclaimed-ticket checks below see the hold.
//! If the node dies, its cohort dies with it, and the other nodes skip the hold as a dead node's;
//! a queue left by an earlier incarnation of a node (a holder that died, its node restarted
//! since) is cleared by the first waiter of the new one, and a hold handed over as the node
//! died is dropped, not parked. A context dropped while holding keeps the lock held (as
//! without cohorts), and its node's other threads wait for it until their timeout. If the
//! network release of a hold parked for a thread that gave up fails, the thread that found it
//! holds it and is told ([`Lock::is_held`]; its release returns the error). A thread that handed its hold over and,
//! with cohorts turned off meanwhile, acquires on the network while its successor still holds
//! is refused ([`Error::HandedOff`]).
//!
//! # Combining
//! [`Lock::combine`] runs a critical section given as a closure, **combining** it with those of
//! the other threads of the node ([docs/model.md §5.5b][loco-model], as flat-combining and
//! delegation locks do): one thread of the node, the combiner, takes the lock once and runs
//! the queued sections one after the other on its own context, then releases. Consecutive
//! sections of one combiner are one thread's program, so nothing is owed between them: the
//! round trip a cohort handover pays per section (the node lock's `gf([n])`) is paid once per
//! batch, by the combiner's [`Ctx::wait_all`](loco_rdmawait::Ctx::wait_all) before it tells the
//! batch's threads that their sections are done.
//!
//! ```
//! # use loco_locks::NLock;
//! # use loco_rdmawait::{Cluster, NodeId, WorkId};
//! # let cluster = Cluster::builder().nodes(2).build()?;
//! let lock = NLock::new(&cluster, NodeId(1))?;
//! let (counter, one) = (cluster.alloc_word(NodeId(1))?, cluster.alloc_word(NodeId(0))?);
//! let ctx = cluster.context(NodeId(0))?;
//! ctx.store(&one, 1)?;
//! // The section runs on whichever thread of n0 combines, with that thread's context.
//! lock.combine(&ctx, move |ctx| ctx.put(&counter, &one, WorkId::new(1)))??;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! - **Guarantee**: the lock kind's, for the combiner's hold as a whole: sections run one at a
//!   time, a node's in the order they were queued, each seeing the earlier sections of its hold
//!   in full and those of earlier holds as the lock promises across a release (the weak lock's
//!   sections still `gf` what they write). The caller's own earlier operations come before
//!   its section, as in one thread's program: before queuing it, the caller fences
//!   (`gf`) the live nodes it may have operations on their way to
//!   ([`Ctx::in_flight`](loco_rdmawait::Ctx::in_flight); nothing when it has none), so
//!   the section's operations, on the combiner's queue pairs, cannot overtake them. When
//!   `combine` returns, the section's operations have completed and its CPU stores are
//!   visible to the caller; its remote writes have not necessarily landed (the caller's own
//!   later get of a word the section put to may read the old value): a section whose caller
//!   reads back what it wrote, outside the lock, ends with `gf` towards the nodes it wrote.
//! - **Fairness**: the combiner is the thread of the oldest queued section, so the role goes
//!   round a node's threads; a combiner runs at most [`COMBINE_BATCHES`] batches (each of up to
//!   64 sections) per hold, so other nodes wait behind at most that many.
//! - **Cost**: under the simulator's `connectx5` profile, 16 threads over 4 nodes, a section
//!   that puts one word to the lock's node: the node lock does 1.18 M sections per second
//!   through `combine` against 0.31 M through acquire and release with cohorts (the README's
//!   Performance has the table). With one thread per node there is nobody to combine with, and
//!   a section costs what a plain one does plus the wait for its own operations and the landing
//!   of what the thread sent (one thread alone: 154 k against 230 k sections per second).
//! - **Failures**: a section not taken by a combiner within the cluster's timeout is withdrawn,
//!   never run ([`Error::Timeout`]); a combiner that cannot take the lock returns its error to
//!   its own caller (the raw error: its section did not run), and the next thread of the queue
//!   tries; a section that ran and whose combiner then failed gets [`Error::Combined`]: its
//!   batch's wait failed, or, for the combiner's own section, the combiner's release or its
//!   landing of what it sent did (the sections of other threads were answered before the
//!   release, and do not hear of it); a panicking section is resumed in its caller, also when
//!   its combiner failed too (the panic comes first), and the lock is released poisoned. A
//!   combiner that panics while taking the lock (a raw lock's bug) takes its own section out of
//!   the node's queue as it unwinds, so the node's other sections are combined as usual.
//!   Sections are `Send + 'static` closures, and they get the combiner's context, not their
//!   caller's.
//! - **Waiting**: a thread whose section is queued spins for 20 µs, then sleeps until told;
//!   once a combiner is about to take the lock for its section, or runs it, it spins, so that
//!   it is awake when told and back with its next section while the combiner still holds the
//!   lock (which waits 1 µs for it). Where the process has more threads in `combine` than
//!   CPUs (Soft-RoCE in a small VM, whose NIC is the kernel on the same CPUs), or where
//!   waking a sleeping thread of the node was last seen to take more than 20 µs, that
//!   spinning would take the CPUs the combiner needs: there waiters sleep after 20 µs
//!   whatever their state, are woken when their batch is done, and the combiner, backing off
//!   as a waiter does, waits for them to come back with their next sections for up to twice
//!   the node's last measured wake-up (at most 500 µs) before it runs the next batch or
//!   releases. Without that wait a node of two or three threads paid a network release and
//!   acquire for every batch of one or two sections (on Soft-RoCE, 4 threads over 3 nodes:
//!   2.2-2.5 k sections per second, against 8.4-8.5 k with it).
//!
//! # Errors
//! Misuse is checked, always and cheaply: acquiring a lock the thread holds is
//! [`Error::AlreadyHeld`], releasing one it does not hold is [`Error::NotHeld`], more threads at
//! once than a weak or strong lock was made for is [`Error::TooManyThreads`]. An acquire that
//! runs out of time is [`Error::Timeout`]. Everything else comes from the layers below
//! ([`Error::Rdma`]: [`PeerDead`](loco_rdmawait::Error::PeerDead) naming a dead node,
//! [`Shutdown`](loco_rdmawait::Error::Shutdown) after [`Cluster::shutdown`], ...).
//!
//! # Failures
//! The paper's model has no failures; these are the locks' answers to them. Mutual exclusion and
//! each lock's publication guarantee (Fig. 8) are kept in every case below, except where said.
//!
//! | what happens | what the locks do |
//! |---|---|
//! | a holder does not release | [`Lock::acquire`] gives up with [`Error::Timeout`] after the cluster's timeout ([`Cluster::timeout`]); [`Lock::acquire_timeout`] / [`Lock::acquire_until`] after the caller's, within a small margin; an awaited acquire (feature `tokio`) too, also one queued behind a guard of its own context kept forever (forgotten, or held by the task that awaits the acquire) |
//! | an acquire gives up or fails after taking its ticket | the ticket is **abandoned**: marked so that the next thread to find the lock released to it passes it on; nothing blocks later tickets (checked by the litmus explorer: `giveup(l)` in `tests/litmus/*giveup*`) |
//! | a thread's first acquire of a weak or strong lock times out while its `rel` slot claim (a remote FAA) is on its way | the claim is kept for the thread's next call, which waits for that FAA instead of posting another: time limits of zero, tried again and again, use one slot, not one per try |
//! | the holder's node dies | a waiter that finds the lock released to a ticket entered by a node reported dead ([`Cluster::check_alive`]) skips that ticket; the next holder is told ([`LockGuard::was_poisoned`]) |
//! | a waiter's node dies | the same, for a ticket its node announced waiting for (a put sent as soon as the waiter has to wait); the next holder is told, conservatively |
//! | a thread dies after taking its ticket, before naming it (between its FAA and its announcement landing) | a waiter that finds the lock released to that ticket for 4 ms, unmarked, and claimed by no live thread (below) skips it; the next holder is told, conservatively |
//! | the holder's node dies and restarts before any waiter has looked (the node is seen alive again) | the dead incarnation's slot still names the ticket, but tagged with that incarnation, which is not the node's any more: it claims nothing, so a waiter that finds the lock released to that ticket for 4 ms skips it as claimed by no live thread; the next holder is told |
//! | the calling thread's own node is reported dead | its waiting acquire stops with `PeerDead` naming that node, writing nothing; so does every later acquire, release or leave of its context (an acquire while it held too: not [`Error::AlreadyHeld`]), and so do [`Lock::is_held`] and [`RawLock::held`] (also while it held: the others skip that hold, so it is not reported held; a context of the dead incarnation keeps saying so after the node restarts) |
//! | the lock's own node dies (the node lock's node, the weak or strong lock's ticket node) | every acquire fails with [`PeerDead`](loco_rdmawait::Error::PeerDead) naming it, also one by a thread that held the lock when it died; such a thread's release (or local handover) fails the same way and writes nothing: its hold ends there (nobody can take the lock again, so nobody waits for the release) |
//! | the lock's own node restarts ([`Cluster::incarnation`] changes) | its words are gone: the lock is refused from then on (`PeerDead` naming it, in acquire, in a wait, and in a release, which writes nothing: a hold from before the restart ends there); make the lock again |
//! | another node dies (weak or strong lock) | releases publish to the live nodes only (and the strong lock fences only those): the lock keeps working among them |
//! | a node dies or restarts, its threads holding `rel` slots of a weak or strong lock (a killed process's contexts are never dropped) | each slot's owner record (on the ticket node) names its thread's node and incarnation; once every slot has been taken, a thread's first use takes over a slot whose owner's incarnation is dead (its node reported dead, or restarted since), whatever its node: the restarted node's new threads, or the survivors', find room again and nothing waits for the dead owner (see [Contexts come and go](#failures)) |
//! | a guard is dropped while its thread panics | the release is **poisoned**: the next holder is told ([`LockGuard::was_poisoned`]) |
//! | [`Cluster::shutdown`] | threads blocked in any acquire return `Shutdown` within a spin round; a holder's release fails with `Shutdown` and its hold ends there (nobody can take the lock again), so its next acquire is refused with `Shutdown` too, not `AlreadyHeld`; no local handover to a queued task of an async context (feature `tokio`): it is refused with `Shutdown` |
//! | a context is dropped | its weak/strong lock `rel` slot and private words go back (see below) |
//!
//! **How fast.** A waiter looks for abandoned or dead tickets once per millisecond of waiting (one extra read of a mark;
//! while a node is dead, or once the lock has stayed released to one ticket for 4 ms, one read of every
//! node's `waiting` slots); a dead node is noticed as fast as [`Cluster::check_alive`] reports it (the soft
//! NIC at once after [`Cluster::kill`]; the verbs backend after its failure detector).
//! Abandoning a ticket costs the giving-up thread at most a few round trips, bounded by 0.5 s.
//!
//! **Poisoning** is std-style but reported once: the lock protects remote memory, not a Rust
//! value, so the next holder (the only one that can repair the state) is told, and its normal
//! release clears it. The lock stays usable.
//!
//! **Tickets nobody names.** Each context has a slot of its own in the lock's `waiting` array
//! (16 per node, on the lock's node). Before it takes a ticket it **claims** the slot: a put of
//! `TAKING`, on the same queue pair as the FAA (or `try_acquire`'s CAS), so it lands first
//! (docs/model.md §3.3). Its slot then reads `TAKING` or names its ticket (its waiting
//! announcement, then its hold announcement) until its next claim, which comes after its
//! release. What a context writes into its slot (`TAKING`, its waiting and hold announcements)
//! carries a tag, its node's [`Cluster::incarnation`] modulo 256 (bits 54-61; tickets stay
//! below 2^54); a slot of a live node whose tag is not the node's current incarnation's was
//! written by an earlier incarnation, which died (a node restarts only once its previous
//! incarnation is declared dead, and a process learns of a new incarnation before that one
//! has a context: on verbs it joins only once every peer has admitted it), and claims
//! nothing. So a ticket the lock has been released to that no live node's slot claims (no
//! `TAKING`, no slot naming it, with the node's current tag) is not a live thread's: its thread
//! died before naming it, or with an earlier incarnation of its node, or its context was
//! dropped. A waiter skips it as it skips a dead holder (poisoned, since the
//! thread may have entered). Two incarnations 256 restarts apart share a tag: the older one's
//! slots then count as claims, which only holds waiters up. Costs: one put per acquire (not waited for: the FAA behind it is),
//! and the claim check only after a 4 ms stall. The simulator crashes a node at every step of
//! its threads' acquires (`locks/tests/sim.rs`): no survivor's acquire times out.
//!
//! **Not recovered** (documented limits):
//! - The claim check needs every claim to be in a slot of its own. Beyond 15 contexts of one
//!   node using the lock at once, the others share the node's last slot, where one context's
//!   claim can overwrite another's: once a live node has used its shared slot, no ticket is
//!   inferred unclaimed while that node lives (a dead node's announcements still count).
//! - A slot left reading `TAKING` (an FAA whose completion never arrived, in a context that never
//!   calls the lock again and is never dropped) holds up the claim check. A dropped context
//!   clears its slot (`IDLE`) first.
//! - A slot is reused by the process's next context only once its owner's writes into it are
//!   known to have landed (a put's completion does not say so): [`Lock::leave`], and dropping
//!   the context, end with one get of the slot (at a drop, bounded by 200 ms). A slot whose
//!   read did not complete is kept:
//!   after 15 such contexts of one node on one lock, that node's contexts share the last slot,
//!   and the claim check is off for that node (see the first point).
//! - After a node restarts, what its dead incarnation's threads claimed stays in their slots,
//!   tagged with that incarnation, so it claims nothing, except after a multiple of 256
//!   restarts, when the tags agree again: then it reads as the live node's claims (a dead
//!   holder's ticket blocks, waiters time out) until the new process's contexts reuse those
//!   slots.
//! - After another node restarts, a weak or strong lock's copies there read 0 until the next
//!   release reaches it: a thread of that node may time out (its ticket is then passed on).
//! - A weak or strong lock's `rel` slot is lost (counts against `max_threads` for good) if the
//!   thread that took it fresh dies, or drops its context with the claim still on its way (a
//!   first acquire that timed out, never called again), before the slot's owner record has
//!   landed; a slot whose record names a live incarnation but no live thread (a context
//!   dropped that way after the record was sent, or a take-over's CAS) is lost until that
//!   incarnation dies. A record of an incarnation whose number (verbs: random) agrees in its
//!   low 32 bits with its node's current one reads as live: that slot is not taken over.
//! - A ticket given up while [`MARKS`] (16) or more tickets before it are still
//!   unserved cannot be marked at once; the mark is **owed**, kept in the lock handle, and paid
//!   by the next thread of the same process that calls the lock or waits for it. If no thread of
//!   that process uses the lock again, the ticket blocks.
//! - Skipping a dead holder trusts the failure detector: a node reported dead must have stopped
//!   (fail-stop), and its last writes must have landed or been dropped. A partitioned node that
//!   wakes up inside its critical section breaks mutual exclusion (a lease would be needed).
//!   Taking over a dead owner's `rel` slot trusts it the same way (a late release of the old
//!   owner could overwrite the new owner's: waiters would time out, nobody would enter twice).
//!
//! **Contexts come and go.** A weak or strong lock's `rel` slot goes back to the lock (for the
//! process's next thread) when the context is dropped or calls [`Lock::leave`]; the new owner
//! first checks that the old owner's last release value has landed on every live node, so no
//! late put of the old owner can overwrite its releases (a node restarted since the old owner's
//! context was made is not waited for: nothing of that context reaches the new incarnation).
//! Each slot has an owner record on the ticket node (its thread's node and incarnation): a
//! slot handed back by a thread of another node, or of an incarnation that has died, becomes
//! the new thread's with a remote CAS of that record, and once every slot has been taken, a
//! thread's first use reads the records (one get) and takes over, with a CAS, a slot whose
//! owner's incarnation is dead (its node reported dead, or restarted since). So a node that
//! restarts again and again, or dies for good, does not use the lock's slots up. A thread's
//! first use costs one round trip more than before (the put of a fresh slot's record, waited
//! for); acquires and releases after it are unchanged. Private words go back to the cluster
//! ([`Cluster::free_private`], for the next context's [`Cluster::alloc_private`]) when no
//! operation can still read or write them: always after [`Lock::leave`]; on a plain drop once the
//! context has reaped what it left in flight ([`Ctx::settled`](loco_rdmawait::Ctx::settled)),
//! else unless a release CAS of the node lock or a timed-out wait is outstanding (then they are
//! leaked, three words, which is safe). A weak or strong lock's
//! release first waits for its hold's announcement (usually long complete), so its words come
//! back on a plain drop after a release.
//!
//! # Implementation
//! Each lock runs the paper's protocol over `loco-sv` and `loco-rdmawaitrmw`, and nothing else:
//! no process-local mutex stands in for it, so the soft backend exercises exactly what runs over
//! verbs. Per-thread state (ticket, private words, `rel` slot) lives in the thread's [`Ctx`]. The
//! locks' operations use library-reserved work ids ([`WorkId::internal`]), so user waits never
//! wait for them. Release operations that the paper does not wait for (the weak lock's broadcast,
//! the node lock's put) are reaped by the thread's next acquire, so completions never pile up.
//!
//! Per-thread words (a weak lock's `turn`, a node lock's `loc`) are allocated on the thread's node
//! on its first use of the lock, from the node's private region
//! ([`Cluster::alloc_private`](loco_rdmawait::Cluster::alloc_private)), so they never shift the
//! offsets of shared objects: in a cluster spanning several processes, nodes agree on the
//! addresses of locks, shared variables and data as long as each process makes them in the same
//! order.
//!
//! [`lock_api`]: https://docs.rs/lock_api
//! [`Ctx`]: loco_rdmawait::Ctx
//! [`WorkId::internal`]: loco_rdmawait::WorkId::internal

#![forbid(unsafe_code)]

mod cohort;
mod combine;
mod error;
mod lock;
mod marks;
mod nlock;
pub mod protocol;
mod run;
mod thread;
mod wlock;

use loco_rdmawait::{Cluster, NodeId};

/// A good bound on local handovers in a row for [`Lock::set_cohort`]: enough for a node's
/// threads to pass the lock round a few times, few enough that another node's waiter is
/// passed by at most this many critical sections.
pub const COHORT_HANDOVERS: u32 = 8;

/// Most threads of a node that take a handed-over hold past the thread next in line in the
/// node's queue before that thread gets one (see [Cohorts](crate#cohorts)): a thread that
/// arrives while the next one is still waking up (on a busy host, a context switch, which the
/// lock would otherwise sit through idle) takes the hold at once, but not more than this many
/// times in a row.
pub const COHORT_BARGES: u32 = 2;

/// Words in a lock's ring of abandon marks (see [Failures](crate#failures)).
pub const MARKS: u64 = marks::MARKS;

pub use combine::COMBINE_BATCHES;
pub use error::{Error, Result};
#[cfg(feature = "tokio")]
pub use lock::LOCAL_HANDOVERS;
pub use lock::{Lock, LockGuard, RawLock, RawLockTimed};
pub use nlock::RawNLock;
pub use wlock::{RawSLock, RawWLock};

/// The **weak lock** (docs/model.md §5.3, Fig. 10): a distributed ticket lock.
///
/// # Guarantee
/// Mutual exclusion, and nothing more: the CPU accesses of one critical section happen before
/// those of the next (Fig. 8a), but its remote operations may complete after the release (Fig.
/// 8b): a put inside the critical section can land after the next holder has read the old value.
/// Tickets are served in order.
///
/// # When to choose it
/// When the critical section only touches local memory with the CPU, or when you know which nodes
/// it wrote: then fence just those (`gf(N)`) before releasing, which is cheaper than the
/// [`SLock`]'s fence towards every node (Fig. 8d). The release does not wait for its broadcast;
/// it first retires its hold's announcement put (posted at the acquire, and usually complete by
/// then: at most one round trip to the ticket node for a very short critical section).
///
/// ```
/// use loco_locks::WLock;
/// use loco_rdmawait::{Cluster, NodeId, WorkId};
/// use loco_sv::GlobalFence;
///
/// let cluster = Cluster::builder().nodes(3).build()?;
/// let x = cluster.alloc_word(NodeId(2))?;
/// let one = cluster.alloc_word(NodeId(0))?;
/// let lock = WLock::new(&cluster, NodeId(0), 8)?;
/// let ctx = cluster.context(NodeId(0))?;
///
/// let g = lock.acquire(&ctx)?;
/// ctx.store(&one, 1)?;
/// ctx.put(&x, &one, WorkId::new(1))?;
/// ctx.gf([NodeId(2)])?; // only n2 was written: fence just n2, then release
/// loco_locks::WLockGuard::release(g)?;
/// # Ok::<(), loco_locks::Error>(())
/// ```
///
/// # Failures: the protocol
/// A ring of abandon marks `ab[K]` next to the ticket dispenser. A thread that gives ticket u up
/// marks `ab[u mod K] = u+1` (remote CAS), then, if some local `rel` copy already reads u,
/// releases u+1 itself (`store(rel[me], u+1); bcast`) without entering. A waiter whose local
/// copies have shown highest ticket r (< its own) for 1 ms reads `ab[r mod K]`; if r is marked,
/// it **forwards**: `store(rel[me], r+1); bcast`. Several forwarders publish the same value in
/// their own slots, which is harmless: a release value is a permission for one ticket, and r+1
/// is that ticket's whatever its copy count. A forward happens only after the release to r was
/// observed (the previous holder left) and r's thread stopped for good (it marks only after it
/// stopped waiting), so at most one thread is ever inside; the forwarded release is issued after
/// the observed one, so Fig. 8a (and for the [`SLock`], 8e: its `gf(all)` came before the
/// observed release) carries over to the next holder. Giving up and forwarding are
/// [`protocol::wlock_give_up`] and [`protocol::wlock_pass_on`], which the litmus explorer checks
/// (`giveup(l)`: `tests/litmus/wlock-giveup-cpu.litmus`; with puts, for this lock and the
/// [`SLock`], `litmus/tests/data/`).
///
/// Dead threads: on the ticket node, 16 `waiting[k][i]` slots per node k. A thread claims its
/// slot (`TAKING`) before its FAA, announces its ticket there as soon as it has to wait, and
/// announces entering with ticket t with `put(slot, turn)` (`turn` = t+1), not waited for until
/// its release; each of these carries its node's incarnation tag (see
/// [Tickets nobody names](crate#failures)). A stalled waiter that finds the lock released to r, r not marked, and a slot of
/// a node k reported dead = r+1, or (after 4 ms) no live node's slot claiming r, forwards as
/// above with the poison bit set, once its copies still stop at r; a thread whose own node is reported
/// dead stops waiting and never enters, so a skipped ticket is never entered (see the crate's
/// [Failures](crate#failures) for what is not recovered).
pub type WLock = Lock<RawWLock>;

/// The **strong lock** (docs/model.md §5.4): the weak lock, with a global fence towards every node
/// before each release.
///
/// # Guarantee
/// Mutual exclusion, and every operation the holder issued before the release (puts, gets, RMWs,
/// towards any node) has fully completed before the next holder enters (Fig. 8e). Tickets are
/// served in order.
///
/// # When to choose it
/// When the critical section touches remote memory and you want it to behave like a lock on a
/// single machine. The price is the release: one fence and round trip per node.
///
/// ```
/// use loco_locks::SLock;
/// use loco_rdmawait::{Cluster, NodeId, WorkId};
///
/// let cluster = Cluster::builder().nodes(3).build()?;
/// let (x, y) = (cluster.alloc_word(NodeId(1))?, cluster.alloc_word(NodeId(2))?);
/// let one = cluster.alloc_word(NodeId(0))?;
/// let lock = SLock::new(&cluster, NodeId(0), 8)?;
/// let ctx = cluster.context(NodeId(0))?;
/// {
///     let _g = lock.acquire(&ctx)?;
///     ctx.store(&one, 1)?;
///     ctx.put(&x, &one, WorkId::new(1))?; // towards n1 ...
///     ctx.put(&y, &one, WorkId::new(1))?; // ... and n2: both land before the next holder enters
/// }
/// # Ok::<(), loco_locks::Error>(())
/// ```
pub type SLock = Lock<RawSLock>;

/// The **node lock** on node n (docs/model.md §5.5, Fig. 13): a centralised ticket lock whose words
/// live on n.
///
/// # Guarantee
/// Mutual exclusion; operations **towards n** inside a critical section are visible to the next
/// holder (Fig. 8f); operations towards other nodes are not (8f, other-node variant). The release
/// (`rfence(n); put`) does not block the CPU. Tickets are served in order.
///
/// # When to choose it
/// When the data the critical section touches lives on one node, as in SC objects (docs/model.md §5.6,
/// Fig. 14): it orders exactly what it needs to, without a fence round trip at release.
///
/// ```
/// use loco_locks::NLock;
/// use loco_rdmawait::{Cluster, NodeId, WorkId};
///
/// let cluster = Cluster::builder().nodes(3).build()?;
/// let counter = cluster.alloc_word(NodeId(2))?;
/// let tmp = cluster.alloc_word(NodeId(0))?;
/// let lock = NLock::new(&cluster, NodeId(2))?; // the data is on n2: lock on n2
/// let ctx = cluster.context(NodeId(0))?;
/// let d = WorkId::new(1);
/// {
///     let _g = lock.acquire(&ctx)?;
///     ctx.get(&tmp, &counter, d)?;
///     ctx.wait(d)?;
///     ctx.store(&tmp, ctx.load(&tmp)? + 1)?;
///     ctx.put(&counter, &tmp, d)?; // visible to the next holder, without waiting here
/// }
/// # Ok::<(), loco_locks::Error>(())
/// ```
///
/// # Failures: the protocol
/// Words on n: `tkt`, `rel`, 16 `waiting[k][i]` slots per node k, and a ring of
/// abandon marks
/// `ab[K]`. `rel` holds the ticket the lock is released to, plus a poison bit.
/// - A thread claims its slot of `waiting[me]` (`TAKING`) before it takes a ticket. It
///   announces entering with ticket t there: `put(slot, loc)` (`loc` = t+1, with its node's
///   incarnation tag in bits 54-61, as every value the thread writes there), not waited for; it
///   lands before its release's `rcas(rel, t, t+1)` (same queue pair, in order). A thread that
///   has to wait announces its ticket the same way (on its first failed read).
/// - A thread that gives ticket u up (timeout, error) writes `ab[u mod K] = u+1` with a remote
///   CAS, then reads `rel`; if the lock was handed to it meanwhile it passes it on itself with
///   `rcas(rel, u, u+1)`.
/// - A waiter that reads `rel = r` (not its ticket) and finds `ab[r mod K] = r+1`, or finds a
///   node k reported dead with a slot of `waiting[k]` = r+1, or (after 4 ms at r) no live
///   node's slot claiming r (a slot tagged with an earlier incarnation of its node claims
///   nothing), does `rcas(rel, r, r+1)` (setting the poison bit for a ticket
///   that was not given up) and reads again; `try_acquire` does the
///   same before giving up. A thread whose own node is reported dead stops waiting at once and
///   writes nothing more, so a ticket skipped as dead is never entered.
///
/// Why mutual exclusion survives: `rel` is written only by CASes: by the holder of ticket
/// `rel`'s value (its release), and from a value r whose ticket will never enter (marked
/// abandoned after its thread stopped waiting, or entered on a dead node). While `rel = r` with
/// such an r, nobody else writes `rel` (no holder exists), and CASes are atomic against each
/// other (Fig. 6), so exactly one CAS moves r to r+1 and a stale one fails. Every word of the
/// lock that an RMW touches (`tkt`, `rel`, `ab`) is written by RMWs only, so also on rxe, whose
/// failing CAS writes back what it read (docs/verbs-notes.md, pitfall 9), no write is lost:
/// the paper's release put was, and `tests/litmus/nlock-rxe-pass-on-race.litmus` shows how. The race where the lock reaches u exactly as u gives up: its thread marks first, then
/// reads `rel`; if it reads u it CASes u→u+1; a waiter that read u before the mark landed reads
/// again later; either one CAS wins or the lock has already moved on. `rel` only grows, and a
/// ticket is passed on only if it is never entered.
///
/// Giving up and passing on are [`protocol::nlock_give_up`] and [`protocol::nlock_pass_on`],
/// which the litmus explorer checks (`giveup(l)`: `tests/litmus/nlock-giveup-*.litmus`); the
/// dead-node checks are the crate's own.
///
/// Why Fig. 8f survives: the thread that passes r on read `rel = r` first — the same read the
/// next holder makes in the plain protocol — and everything it and the next holder do comes
/// after that read completed (waits), so what the releaser's `rfence(n); rcas(rel)` published is
/// visible to the next holder as before.
pub type NLock = Lock<RawNLock>;

/// The guard of a [`WLock`].
pub type WLockGuard<'a> = LockGuard<'a, RawWLock>;
/// The guard of an [`SLock`].
pub type SLockGuard<'a> = LockGuard<'a, RawSLock>;
/// The guard of an [`NLock`].
pub type NLockGuard<'a> = LockGuard<'a, RawNLock>;

impl WLock {
    /// A weak lock for at most `max_threads` threads, its ticket dispenser on `ticket_node` (see
    /// [`RawWLock::new`]).
    pub fn new(cluster: &Cluster, ticket_node: NodeId, max_threads: usize) -> Result<WLock> {
        Ok(Lock::from_raw(RawWLock::new(
            cluster,
            ticket_node,
            max_threads,
        )?))
    }
}

impl SLock {
    /// A strong lock for at most `max_threads` threads, its ticket dispenser on `ticket_node` (see
    /// [`RawWLock::new`]).
    pub fn new(cluster: &Cluster, ticket_node: NodeId, max_threads: usize) -> Result<SLock> {
        Ok(Lock::from_raw(RawSLock::new(
            cluster,
            ticket_node,
            max_threads,
        )?))
    }
}

impl NLock {
    /// A node lock on `node`.
    pub fn new(cluster: &Cluster, node: NodeId) -> Result<NLock> {
        Ok(Lock::from_raw(RawNLock::new(cluster, node)?))
    }
}
