//! Cohorts (`Lock::set_cohort`): threads of one node queue locally and hand the lock over
//! without a network release. Checked under the deterministic simulator, over many seeded
//! schedules: mutual exclusion (with threads giving up in their node's queue), each lock's
//! publication guarantee across local handovers (Fig. 8a, 8e, 8f: lost updates otherwise), the
//! bound on handovers in a row, and a hold whose first holder's context is gone while a
//! successor of its node still holds it.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loco_locks::{Error, Lock, LockGuard, NLock, RawLock, SLock, WLock, COHORT_BARGES};
use loco_rdmawait::sim::{self, Config, Profile, Strategy};
use loco_rdmawait::{Cluster, Ctx, Loc, NodeId, WorkId};
use loco_sv::GlobalFence;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const D: WorkId = WorkId::new(7);

/// Threads per run: two per node over 3 nodes.
const THREADS: usize = 6;
/// Critical sections each thread tries.
const ROUNDS: usize = 3;

fn config(runs: u64) -> Config {
    Config::new(3).runs(runs).timeout(Duration::from_millis(50))
}

/// `THREADS` threads, round-robin over n0..n2, each `ROUNDS` critical sections on the lock
/// `make` builds (cohorts of at most `limit` handovers in a row); with `giving_up`, every
/// other thread acquires with a short timeout and goes on without the lock. Inside: a host
/// occupancy count, and remote work (scheduling points).
fn exclusion<R, M>(
    make: M,
    limit: u32,
    giving_up: bool,
) -> impl Fn(&Cluster) -> Result<(), BoxError> + Send + Sync
where
    R: RawLock + Send + Sync + 'static,
    M: Fn(&Cluster) -> loco_locks::Result<Lock<R>> + Send + Sync + 'static,
{
    move |cluster: &Cluster| {
        let lock = Arc::new(make(cluster)?.with_cohort(limit));
        let inside = Arc::new(AtomicUsize::new(0));
        let word = cluster.alloc_word(NodeId(2))?;
        let mut hs = Vec::new();
        for t in 0..THREADS {
            let node = NodeId((t % 3) as u16);
            let scratch = cluster.alloc_word(node)?;
            let impatient = giving_up && t % 2 == 1;
            let (lock, inside) = (lock.clone(), inside.clone());
            hs.push(sim::spawn(cluster, node, move |ctx: &Ctx| {
                for _ in 0..ROUNDS {
                    let g = if impatient {
                        match lock.acquire_timeout(ctx, Duration::from_micros(20)) {
                            Ok(g) => g,
                            Err(Error::Timeout { .. }) => continue,
                            Err(e) => return Err(BoxError::from(e)),
                        }
                    } else {
                        lock.acquire(ctx)?
                    };
                    let before = inside.fetch_add(1, SeqCst);
                    if before != 0 {
                        return Err(
                            format!("mutual exclusion broken: {before} other holder(s)").into()
                        );
                    }
                    // Nobody died or panicked: a hold skipped as nobody's (a parked hold
                    // dropped, a pin released too early) would show here.
                    if LockGuard::was_poisoned(&g) {
                        return Err("a hold was poisoned with nobody dead".into());
                    }
                    ctx.get(&scratch, &word, D)?;
                    ctx.wait(D)?;
                    inside.fetch_sub(1, SeqCst);
                    LockGuard::release(g)?;
                }
                Ok(())
            }));
        }
        for h in hs {
            h.join()?;
        }
        Ok(())
    }
}

fn check_exclusion<R, M>(name: &str, make: M)
where
    R: RawLock + Send + Sync + 'static,
    M: Fn(&Cluster) -> loco_locks::Result<Lock<R>> + Send + Sync + Clone + 'static,
{
    for giving_up in [false, true] {
        for strategy in [Strategy::Random, Strategy::Pct { depth: 3 }] {
            let r = sim::check(
                config(300).strategy(strategy),
                exclusion(make.clone(), 2, giving_up),
            )
            .unwrap_or_else(|f| panic!("{name}, give-ups {giving_up}:\n{}", f.report()));
            assert_eq!(r.runs, 300);
        }
    }
}

#[test]
fn cohort_wlock_excludes() {
    check_exclusion("wlock", |c: &Cluster| WLock::new(c, NodeId(1), THREADS));
}

#[test]
fn cohort_slock_excludes() {
    check_exclusion("slock", |c: &Cluster| SLock::new(c, NodeId(2), THREADS));
}

#[test]
fn cohort_nlock_excludes() {
    check_exclusion("nlock", |c: &Cluster| NLock::new(c, NodeId(0)));
}

/// What a critical section does to the shared counter(s), per lock kind.
#[derive(Clone, Copy, Debug)]
enum Section {
    /// CPU load and store of a counter in n0's memory (the weak lock publishes CPU accesses).
    Cpu,
    /// Get, add, put (not waited for) of counters on n1 and n2 (the strong lock publishes
    /// every operation).
    Remote,
    /// Get, add, put (not waited for) of a counter on n1, the node lock's node (the node
    /// lock publishes the operations towards its node).
    TowardsN1,
}

/// Lost updates: `threads` threads, all on n0 (so every handover between them is local, up to
/// the bound) and one on n2 if `remote_too`, add 1 to shared counters `rounds` times each under
/// the lock, in the way `section` says. A local handover that did not publish what the lock
/// publishes would let the next thread read an old value, and an increment would be lost.
fn counting<R, M>(
    make: M,
    section: Section,
    remote_too: bool,
) -> impl Fn(&Cluster) -> Result<(), BoxError> + Send + Sync
where
    R: RawLock + Send + Sync + 'static,
    M: Fn(&Cluster) -> loco_locks::Result<Lock<R>> + Send + Sync + 'static,
{
    const ROUNDS: u64 = 3;
    move |cluster: &Cluster| {
        let lock = Arc::new(make(cluster)?.with_cohort(8));
        let counters: Vec<Loc> = match section {
            Section::Cpu => vec![cluster.alloc_word(NodeId(0))?],
            Section::Remote => vec![
                cluster.alloc_word(NodeId(1))?,
                cluster.alloc_word(NodeId(2))?,
            ],
            Section::TowardsN1 => vec![cluster.alloc_word(NodeId(1))?],
        };
        let mut nodes = vec![NodeId(0); 3];
        if remote_too {
            nodes.push(NodeId(2));
        }
        let threads = nodes.len() as u64;
        if matches!(section, Section::Cpu) && remote_too {
            return Err("CPU sections are for threads of n0 only".into());
        }
        let mut hs = Vec::new();
        for node in nodes {
            let (lock, counters) = (lock.clone(), counters.clone());
            let tmp: Vec<Loc> = counters
                .iter()
                .map(|_| cluster.alloc_word(node))
                .collect::<Result<_, _>>()?;
            hs.push(sim::spawn(cluster, node, move |ctx: &Ctx| {
                for _ in 0..ROUNDS {
                    let g = lock.acquire(ctx)?;
                    for (c, t) in counters.iter().zip(&tmp) {
                        match section {
                            Section::Cpu => ctx.store(c, ctx.load(c)? + 1)?,
                            Section::Remote | Section::TowardsN1 => {
                                ctx.get(t, c, D)?;
                                ctx.wait(D)?;
                                ctx.store(t, ctx.load(t)? + 1)?;
                                // Not waited for: the lock's release (or handover) publishes it.
                                ctx.put(c, t, D)?;
                            }
                        }
                    }
                    LockGuard::release(g)?;
                    // The put read `tmp` before the next section stores into it (the lock's
                    // release or handover fenced it).
                }
                Ok::<(), BoxError>(())
            }));
        }
        for h in hs {
            h.join()?;
        }
        cluster.quiesce()?;
        for c in &counters {
            let got = cluster.peek(c)?;
            if got != threads * ROUNDS {
                return Err(format!(
                    "lost updates on {c:?}: {got} of {} increments",
                    threads * ROUNDS
                )
                .into());
            }
        }
        Ok(())
    }
}

fn check_counting<R, M>(name: &str, make: M, section: Section)
where
    R: RawLock + Send + Sync + 'static,
    M: Fn(&Cluster) -> loco_locks::Result<Lock<R>> + Send + Sync + Clone + 'static,
{
    let remote = [false, !matches!(section, Section::Cpu)];
    for remote_too in remote {
        for strategy in [Strategy::Random, Strategy::Pct { depth: 3 }] {
            sim::check(
                config(400).strategy(strategy),
                counting(make.clone(), section, remote_too),
            )
            .unwrap_or_else(|f| {
                panic!(
                    "{name}, {section:?}, a thread of n2 too: {remote_too}:\n{}",
                    f.report()
                )
            });
        }
    }
}

/// Fig. 8a across local handovers: the CPU accesses of one section are seen by the next.
#[test]
fn a_local_wlock_handover_publishes_the_cpu_accesses() {
    check_counting(
        "wlock",
        |c: &Cluster| WLock::new(c, NodeId(1), 4),
        Section::Cpu,
    );
}

/// Fig. 8e across local handovers: every operation of a section has completed before the
/// next holder (local or not) enters.
#[test]
fn a_local_slock_handover_publishes_every_operation() {
    check_counting(
        "slock",
        |c: &Cluster| SLock::new(c, NodeId(0), 4),
        Section::Remote,
    );
}

/// Fig. 8f across local handovers: the operations towards n are seen by the next holder.
#[test]
fn a_local_nlock_handover_publishes_the_operations_towards_its_node() {
    check_counting(
        "nlock",
        |c: &Cluster| NLock::new(c, NodeId(1)),
        Section::TowardsN1,
    );
}

/// The weak lock plus a global fence towards the node written (Fig. 8d) stays a way to
/// publish remote writes with cohorts too.
#[test]
fn a_wlock_with_gf_publishes_remote_writes_across_local_handovers() {
    let run = |cluster: &Cluster| -> Result<(), BoxError> {
        let lock = Arc::new(WLock::new(cluster, NodeId(2), 4)?.with_cohort(8));
        let counter = cluster.alloc_word(NodeId(1))?;
        let mut hs = Vec::new();
        for node in [NodeId(0), NodeId(0), NodeId(0), NodeId(2)] {
            let lock = lock.clone();
            let tmp = cluster.alloc_word(node)?;
            hs.push(sim::spawn(cluster, node, move |ctx: &Ctx| {
                for _ in 0..3 {
                    let g = lock.acquire(ctx)?;
                    ctx.get(&tmp, &counter, D)?;
                    ctx.wait(D)?;
                    ctx.store(&tmp, ctx.load(&tmp)? + 1)?;
                    ctx.put(&counter, &tmp, D)?;
                    ctx.gf([NodeId(1)])?;
                    LockGuard::release(g)?;
                }
                Ok::<(), BoxError>(())
            }));
        }
        for h in hs {
            h.join()?;
        }
        let got = cluster.peek(&counter)?;
        if got != 12 {
            return Err(format!("lost updates: {got} of 12").into());
        }
        Ok(())
    };
    sim::check(config(300), run).unwrap_or_else(|f| panic!("{}", f.report()));
}

/// The bound: with `max_handovers` k, one network ticket serves at most k + 1 critical
/// sections in a row, so a waiter of another node is passed by at most k local handovers;
/// and it gets in.
#[test]
fn local_handovers_in_a_row_are_bounded() {
    for k in [1u32, 3] {
        let run = move |cluster: &Cluster| -> Result<(), BoxError> {
            let lock = Arc::new(NLock::new(cluster, NodeId(1))?.with_cohort(k));
            let entries = Arc::new(Mutex::new(Vec::<(NodeId, u64)>::new()));
            let mut hs = Vec::new();
            for node in [NodeId(0), NodeId(0), NodeId(0), NodeId(0), NodeId(2)] {
                let (lock, entries) = (lock.clone(), entries.clone());
                let scratch = cluster.alloc_word(node)?;
                let word = cluster.alloc_word(NodeId(1))?;
                hs.push(sim::spawn(cluster, node, move |ctx: &Ctx| {
                    for _ in 0..6 {
                        let g = lock.acquire(ctx)?;
                        entries
                            .lock()
                            .unwrap()
                            .push((ctx.node(), LockGuard::ticket(&g)));
                        ctx.get(&scratch, &word, D)?;
                        ctx.wait(D)?;
                        LockGuard::release(g)?;
                    }
                    Ok::<(), BoxError>(())
                }));
            }
            for h in hs {
                h.join()?;
            }
            let entries = entries.lock().unwrap();
            if entries.iter().filter(|(n, _)| *n == NodeId(2)).count() != 6 {
                return Err("n2's thread did not get all its sections".into());
            }
            let mut run = 1u32;
            for w in entries.windows(2) {
                if w[0].1 == w[1].1 {
                    if w[0].0 != w[1].0 {
                        return Err(format!("one ticket crossed nodes: {w:?}").into());
                    }
                    run += 1;
                    if run > k + 1 {
                        return Err(format!(
                            "{run} sections on one ticket (bound {k}): {entries:?}"
                        )
                        .into());
                    }
                } else {
                    run = 1;
                }
            }
            // Handovers did happen: fewer tickets than sections.
            let mut tickets: Vec<u64> = entries.iter().map(|e| e.1).collect();
            tickets.dedup();
            if tickets.len() == entries.len() {
                return Err("no local handover in the run".into());
            }
            Ok(())
        };
        // Timed (threads of n0 queue while one is inside), so that handovers happen.
        sim::check(config(60).profile(Profile::connectx5()), run)
            .unwrap_or_else(|f| panic!("k = {k}:\n{}", f.report()));
    }
}

/// Four threads of n0 take a weak lock (cohorts on) 12 times each, with a section longer than
/// a wake-up (30 µs in these tests) and the next in line's spin budget, under `profile`: the longest run of sections in a row by one
/// thread while every thread still queues, over 200 runs (a run longer than `most` fails).
fn longest_run_while_others_queue(profile: Profile, most: usize) -> usize {
    const PER_THREAD: usize = 12;
    let longest = Arc::new(AtomicUsize::new(0));
    let seen = longest.clone();
    let run = move |cluster: &Cluster| -> Result<(), BoxError> {
        let lock = Arc::new(WLock::new(cluster, NodeId(1), 8)?);
        let log = Arc::new(Mutex::new(Vec::<(usize, usize)>::new()));
        let mut hs = Vec::new();
        for t in 0..4 {
            let (lock, log) = (lock.clone(), log.clone());
            let scratch = cluster.alloc_word(NodeId(0))?;
            let word = cluster.alloc_word(NodeId(1))?;
            hs.push(sim::spawn(cluster, NodeId(0), move |ctx: &Ctx| {
                for i in 0..PER_THREAD {
                    let g = lock.acquire(ctx)?;
                    log.lock().unwrap().push((t, i));
                    ctx.get(&scratch, &word, D)?;
                    ctx.wait(D)?;
                    // Longer than the next in line takes to wake and spin: it sleeps when the
                    // hold is left.
                    loco_rdmawait::clock::sleep(Duration::from_micros(60));
                    LockGuard::release(g)?;
                }
                Ok::<(), BoxError>(())
            }));
        }
        for h in hs {
            h.join()?;
        }
        let log = log.lock().unwrap();
        // Only while every thread still queues: from the section after which each has had one
        // to the first thread's last section.
        let from = (0..4)
            .map(|t| log.iter().position(|e| e.0 == t).unwrap())
            .max()
            .unwrap();
        let to = log.iter().position(|e| e.1 == PER_THREAD - 1).unwrap();
        let mut longest = 0;
        for run in log[from..=to.max(from)].chunk_by(|a, b| a.0 == b.0) {
            longest = longest.max(run.len());
        }
        if longest > most {
            return Err(format!("a run of {longest} sections while others queued: {log:?}").into());
        }
        seen.fetch_max(longest, SeqCst);
        Ok(())
    };
    sim::check(config(200).profile(profile), run).unwrap_or_else(|f| panic!("{}", f.report()));
    longest.load(SeqCst)
}

/// Barging: a thread arriving while a handed-over hold waits for the thread next in line may
/// take it first, but while the node's other threads queue, no thread has more than
/// `COHORT_BARGES + 1` sections in a row; and barging does happen where wake-ups are slow
/// (30 µs, as on a host short of CPUs) and cost the waker less than that: a thread re-enters at
/// once after its release while the next in line, having spent its spin budget during a long
/// section, is still waking up.
#[test]
fn barging_past_the_next_in_line_is_bounded() {
    let p = Profile {
        wake: Duration::from_micros(30),
        ..Profile::connectx5()
    };
    let longest = longest_run_while_others_queue(p, COHORT_BARGES as usize + 1);
    assert!(
        longest > 1,
        "no thread ever barged: every run was one section"
    );
}

/// Nobody barges where wake-ups are quick (`connectx5`: 3 µs, a host with a core per thread):
/// the next in line is not passed over for the price of a wake-up; nor where unparking a thread
/// costs the waker at least the wake-up (a VM whose vCPUs every thread shares, as `rxe`'s
/// profile says), where the woken next in line takes the hold before its waker is back. No
/// thread has two sections in a row while others queue.
#[test]
fn no_barging_where_wake_ups_are_quick_or_cost_the_waker_as_much() {
    assert_eq!(longest_run_while_others_queue(Profile::connectx5(), 1), 1);
    let p = Profile {
        unpark: Duration::from_micros(30),
        wake: Duration::from_micros(30),
        ..Profile::connectx5()
    };
    assert_eq!(longest_run_while_others_queue(p, 1), 1);
}

/// A hold handed over stays named by the slot of the thread that took it on the network even
/// after that thread's context is gone: a waiter of another node stalled at it for longer than
/// the unclaimed-ticket check's delay (4 ms) must not skip it while the successor is inside.
#[test]
fn a_hold_outlives_the_context_that_took_it() {
    fn run<R: RawLock + Send + Sync + 'static>(
        cluster: &Cluster,
        lock: Lock<R>,
    ) -> Result<(), BoxError> {
        let lock = Arc::new(lock.with_cohort(8));
        let inside = Arc::new(AtomicUsize::new(0));
        let (l1, l2, l3) = (lock.clone(), lock.clone(), lock);
        let (i2, i3) = (inside.clone(), inside.clone());
        // A takes the lock on the network, lets B queue behind it, hands over, and ends.
        let a = sim::spawn(cluster, NodeId(0), move |ctx: &Ctx| {
            let g = l1.acquire(ctx)?;
            loco_rdmawait::clock::sleep(Duration::from_micros(200));
            LockGuard::release(g)?;
            Ok::<(), BoxError>(())
        });
        // B, on A's node, holds for 10 ms once handed the lock.
        let b = sim::spawn(cluster, NodeId(0), move |ctx: &Ctx| {
            loco_rdmawait::clock::sleep(Duration::from_micros(50));
            let g = l2.acquire(ctx)?;
            i2.fetch_add(1, SeqCst);
            loco_rdmawait::clock::sleep(Duration::from_millis(10));
            i2.fetch_sub(1, SeqCst);
            LockGuard::release(g)?;
            Ok::<(), BoxError>(())
        });
        // C, on n2, waits for the lock from the start.
        let c = sim::spawn(cluster, NodeId(2), move |ctx: &Ctx| {
            loco_rdmawait::clock::sleep(Duration::from_micros(100));
            let g = l3.acquire(ctx)?;
            if i3.load(SeqCst) != 0 {
                return Err(BoxError::from("entered while a thread of n0 was inside"));
            }
            if LockGuard::was_poisoned(&g) {
                return Err(BoxError::from("the hold was skipped as nobody's"));
            }
            LockGuard::release(g)?;
            Ok(())
        });
        a.join()?;
        b.join()?;
        c.join()?;
        Ok(())
    }
    let cfg = || {
        Config::new(3)
            .runs(5)
            .profile(Profile::connectx5())
            .timeout(Duration::from_millis(200))
    };
    sim::check(cfg(), |c: &Cluster| run(c, NLock::new(c, NodeId(1))?))
        .unwrap_or_else(|f| panic!("nlock:\n{}", f.report()));
    sim::check(cfg(), |c: &Cluster| run(c, WLock::new(c, NodeId(1), 3)?))
        .unwrap_or_else(|f| panic!("wlock:\n{}", f.report()));
}

/// A thread that handed its hold over cannot take a ticket on the network while its successor
/// holds it (its slot names that hold): with cohorts on it queues behind the successor; with
/// cohorts turned off meanwhile, its acquire is refused with `HandedOff`.
#[test]
fn a_thread_whose_hold_was_handed_over_takes_no_ticket_meanwhile() -> Result<(), BoxError> {
    let cluster = Cluster::builder().nodes(2).build()?;
    let lock = NLock::new(&cluster, NodeId(1))?.with_cohort(4);
    let a = cluster.context(NodeId(0))?;
    let ga = lock.acquire(&a)?;
    let ta = LockGuard::ticket(&ga);
    let (l2, c2) = (lock.clone(), cluster.clone());
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| -> Result<(), BoxError> {
        // B queues behind A on n0, and holds until told.
        let h = s.spawn(move || -> Result<u64, BoxError> {
            let b = c2.context(NodeId(0))?;
            let g = l2.acquire(&b)?;
            let t = LockGuard::ticket(&g);
            rx.recv()?;
            LockGuard::release(g)?;
            Ok(t)
        });
        std::thread::sleep(Duration::from_millis(50));
        LockGuard::release(ga)?; // handed to B
        std::thread::sleep(Duration::from_millis(20));
        // With cohorts, A queues behind B (B is inside: A times out).
        assert!(matches!(
            lock.acquire_timeout(&a, Duration::from_millis(20)),
            Err(Error::Timeout { .. })
        ));
        lock.set_cohort(0);
        assert!(matches!(lock.acquire(&a), Err(Error::HandedOff)));
        tx.send(())?;
        let tb = h.join().unwrap()?;
        assert_eq!(ta, tb, "B entered on A's ticket (a local handover)");
        Ok(())
    })?;
    // Released on the network now: A goes on.
    drop(lock.acquire(&a)?);
    Ok(())
}

/// A guard forgotten and the lock released through the raw lock (lock_api's pattern for a
/// hold that outlives a scope) leaves the node's queue too.
#[test]
fn a_raw_release_after_a_forgotten_guard_lets_the_node_go_on() -> Result<(), BoxError> {
    let cluster = Cluster::builder().nodes(2).build()?;
    let nlock = NLock::new(&cluster, NodeId(1))?;
    let wlock = WLock::new(&cluster, NodeId(1), 2)?;
    let (a, b) = (cluster.context(NodeId(0))?, cluster.context(NodeId(0))?);
    std::mem::forget(nlock.acquire(&a)?);
    nlock.raw().release(&a)?;
    drop(nlock.acquire_timeout(&b, Duration::from_secs(5))?);
    std::mem::forget(wlock.acquire(&a)?);
    wlock.raw().release(&a)?;
    drop(wlock.acquire_timeout(&b, Duration::from_secs(5))?);
    Ok(())
}

/// Edge values: the largest bound (no network release while a thread of the node waits) and
/// an acquire with no practical time limit both work; a bound of 0 turns cohorts off.
#[test]
fn edge_bounds_and_timeouts_are_accepted() -> Result<(), BoxError> {
    let cluster = Cluster::builder().nodes(2).build()?;
    let lock = NLock::new(&cluster, NodeId(1))?.with_cohort(u32::MAX);
    assert_eq!(lock.cohort(), u32::MAX);
    std::thread::scope(|s| -> Result<(), BoxError> {
        let hs: Vec<_> = (0..3)
            .map(|_| {
                let (lock, cluster) = (lock.clone(), cluster.clone());
                s.spawn(move || -> Result<(), BoxError> {
                    let ctx = cluster.context(NodeId(0))?;
                    for _ in 0..20 {
                        drop(lock.acquire_timeout(&ctx, Duration::MAX)?);
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap()?;
        }
        Ok(())
    })?;
    lock.set_cohort(0);
    let ctx = cluster.context(NodeId(0))?;
    let a = LockGuard::ticket(&lock.acquire(&ctx)?);
    assert_eq!(
        LockGuard::ticket(&lock.acquire(&ctx)?),
        a + 1,
        "one ticket per section"
    );
    Ok(())
}
