//! A new user's edge values and misuse of the simulator's public API (`sim::check`,
//! `sim::replay`, `sim::spawn`, `Config`, faults, profiles): each ends in a report or a typed
//! failure that says what was wrong, never a panic of the simulator or a hang.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loco_rdmawait::sim::{
    self, At, Config, Failure, FailureKind, Fault, JoinError, Search, Strategy,
};
use loco_rdmawait::{Cluster, Ctx, NodeId, WorkId};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);

/// A closure that spawns nothing.
fn nothing(_: &Cluster) -> Result<(), BoxError> {
    Ok(())
}

/// One thread that stores to its node's word.
fn one_thread(c: &Cluster) -> Result<(), BoxError> {
    let x = c.alloc_word(N0)?;
    sim::spawn(c, N0, move |ctx: &Ctx| ctx.store(&x, 1)).join()?;
    Ok(())
}

/// A failure of `kind` whose message contains `part`; nothing ran if it is `Setup`.
fn fails<T: std::fmt::Debug>(r: Result<T, Failure>, kind: FailureKind, part: &str) -> Failure {
    let f = r.unwrap_err();
    assert_eq!(f.kind(), kind, "{}", f.report());
    assert!(f.message().contains(part), "{part:?} not in {}", f.report());
    if kind == FailureKind::Setup {
        // Nothing ran: no steps, and no seed to replay offered.
        assert!(f.trace().is_empty(), "{}", f.report());
        assert!(!f.report().contains("replay with"), "{}", f.report());
    }
    f
}

/// No node, more nodes than a `NodeId` can name: refused before anything runs. The most a
/// cluster can have runs.
#[test]
fn node_counts_out_of_range_are_refused() {
    for nodes in [0, 65_536, usize::MAX] {
        fails(
            sim::check(Config::new(nodes).runs(1), nothing),
            FailureKind::Setup,
            "1..=65535 nodes",
        );
        fails(
            sim::replay(Config::new(nodes), 1, nothing),
            FailureKind::Setup,
            "1..=65535 nodes",
        );
    }
    let r = sim::check(Config::new(65_535).runs(1), nothing).unwrap();
    assert_eq!(r.runs, 1);
    let r = sim::check(Config::new(1).runs(3), nothing).unwrap();
    assert_eq!((r.runs, r.search), (3, Search::Sampled));
}

/// A budget of 0 steps would fail every run before the code under test ran: refused (it used to
/// be reported as a livelock). A budget of 1 is the start step: a closure that spawns nothing
/// passes, one that does more fails on the budget at once, even with `runs(u64::MAX)`.
#[test]
fn step_budgets_of_zero_and_one() {
    fails(
        sim::check(Config::new(1).max_steps(0), nothing),
        FailureKind::Setup,
        "max_steps(0)",
    );
    fails(
        sim::replay(Config::new(1).max_steps(0), 3, nothing),
        FailureKind::Setup,
        "max_steps(0)",
    );
    // Under exhaustive search replay walks the search up to the seed: the refusal comes
    // first, not "the search has only 1 run".
    let exhaustive = Config::new(1)
        .strategy(Strategy::Exhaustive { max_delays: 1 })
        .max_steps(0);
    fails(
        sim::replay(exhaustive, 5, nothing),
        FailureKind::Setup,
        "max_steps(0)",
    );
    let r = sim::check(Config::new(1).runs(3).max_steps(1), nothing).unwrap();
    assert_eq!(r.runs, 3);
    let f = fails(
        sim::check(Config::new(1).runs(u64::MAX).max_steps(1), one_thread),
        FailureKind::Budget,
        "step budget exhausted: 1 steps",
    );
    assert!(!f.trace().is_empty());
}

/// Without a profile, a step time of zero stops virtual time: a wait that cannot complete
/// never timed out and the run failed as a "livelock" after the whole budget. Refused now. A
/// profile whose costs are all zero still lets time pass (spin pauses look again later), so
/// the same wait times out there.
#[test]
fn virtual_time_that_stands_still_is_refused() {
    fails(
        sim::check(Config::new(2).step_time(Duration::ZERO), nothing),
        FailureKind::Setup,
        "step_time(0)",
    );
    fails(
        sim::replay(Config::new(2).step_time(Duration::ZERO), 1, nothing),
        FailureKind::Setup,
        "step_time(0)",
    );
    static TIMED_OUT: AtomicU64 = AtomicU64::new(0);
    let cut_off = |c: &Cluster| {
        let (far, near) = (c.alloc_word(N1)?, c.alloc_word(N0)?);
        sim::spawn(c, N0, move |ctx: &Ctx| -> Result<(), BoxError> {
            ctx.get(&near, &far, WorkId::new(1))?;
            match ctx.wait_timeout(WorkId::new(1), Duration::from_micros(100)) {
                Err(loco_rdmawait::Error::Timeout { .. }) => {
                    TIMED_OUT.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                }
                other => Err(format!("the wait should time out: {other:?}").into()),
            }
        })
        .join()?;
        Ok::<(), BoxError>(())
    };
    let config = Config::new(2)
        .runs(2)
        .step_time(Duration::ZERO) // does not apply under a profile
        .profile(sim::Profile::connectx5().scaled(0.0))
        .fault(Fault::Partition {
            node: N1,
            at: At::Step(1),
            steps: u64::MAX,
        });
    sim::check(config, cut_off).unwrap_or_else(|f| panic!("{}", f.report()));
    assert_eq!(TIMED_OUT.load(Ordering::SeqCst), 2);
}

/// PCT depths of 0 and `usize::MAX` are taken as 1 and the maximum; an exhaustive search with
/// no deviation allowed runs the default schedule once and says the bound cut it (or that it
/// was complete, for a closure that has no choice to make); a search stopped by `runs` says so.
#[test]
fn strategies_at_their_edges() {
    for depth in [0, 1, usize::MAX] {
        let r = sim::check(
            Config::new(1).runs(3).strategy(Strategy::Pct { depth }),
            one_thread,
        )
        .unwrap();
        assert_eq!(r.runs, 3);
    }
    let exhaustive = |max_delays| {
        Config::new(1)
            .runs(10_000)
            .strategy(Strategy::Exhaustive { max_delays })
    };
    let r = sim::check(exhaustive(0), one_thread).unwrap();
    assert_eq!(
        (r.runs, r.search),
        (1, Search::DelayBound { max_delays: 0 })
    );
    let r = sim::check(exhaustive(0), nothing).unwrap();
    assert_eq!((r.runs, r.search), (1, Search::Complete));
    let r = sim::check(exhaustive(usize::MAX), one_thread).unwrap();
    assert_eq!(r.search, Search::Complete);
    assert!(r.runs > 1);
    let r = sim::check(exhaustive(3).runs(1), one_thread).unwrap();
    assert_eq!(r.search, Search::RunBound { runs: 1 });
}

/// A `join` on a thread that is not simulated (a `std::thread` of the code under test) of a
/// handle from a simulated thread says why it cannot wait (`spawn` there is
/// `spawn_from_a_plain_thread_fails_the_run`). Simulated threads may spawn threads themselves.
#[test]
fn joining_outside_and_spawning_inside_simulated_threads() {
    static NESTED: AtomicU64 = AtomicU64::new(0);
    let r = sim::check(Config::new(2).runs(4), |c: &Cluster| {
        // A handle from a simulated thread, joined on a plain one.
        let h = sim::spawn(c, N1, |_: &Ctx| Ok::<(), BoxError>(()));
        let e = std::thread::scope(|s| s.spawn(|| h.join()).join())
            .map_err(|_| "the plain thread panicked")?
            .unwrap_err();
        assert!(matches!(e, JoinError::NotSimulated), "{e:?}");
        assert!(e.to_string().contains("outside a simulated thread"), "{e}");
        // Nested: t1 spawns and joins t2 (on another node).
        let c2 = c.clone();
        sim::spawn(c, N0, move |_: &Ctx| {
            sim::spawn(&c2, N1, |_: &Ctx| {
                NESTED.fetch_add(1, Ordering::SeqCst);
                Ok::<(), BoxError>(())
            })
            .join()
        })
        .join()?;
        Ok::<(), BoxError>(())
    })
    .unwrap_or_else(|f| panic!("{}", f.report()));
    assert_eq!(r.runs, 4);
    assert_eq!(NESTED.load(Ordering::SeqCst), 4);
}

/// Threads not joined when the closure returns run to their end; an error of theirs still
/// fails the run, and so does a panic.
#[test]
fn threads_left_unjoined_still_run_and_still_fail() {
    static ENDED: AtomicU64 = AtomicU64::new(0);
    let r = sim::check(Config::new(1).runs(5), |c: &Cluster| {
        let x = c.alloc_word(N0)?;
        drop(sim::spawn(c, N0, move |ctx: &Ctx| {
            for i in 0..10 {
                ctx.store(&x, i)?;
            }
            ENDED.fetch_add(1, Ordering::SeqCst);
            Ok::<(), BoxError>(())
        }));
        Ok::<(), BoxError>(())
    })
    .unwrap();
    assert_eq!(r.runs, 5);
    assert_eq!(ENDED.load(Ordering::SeqCst), 5);
    fails(
        sim::check(Config::new(1).runs(5), |c: &Cluster| {
            let x = c.alloc_word(N0)?;
            drop(sim::spawn(c, N0, move |ctx: &Ctx| {
                ctx.store(&x, 1)?;
                Err::<(), BoxError>("late error".into())
            }));
            Ok::<(), BoxError>(())
        }),
        FailureKind::Error,
        "t1: late error",
    );
    fails(
        sim::check(Config::new(1).runs(5), |c: &Cluster| {
            drop(sim::spawn(c, N0, |_: &Ctx| -> Result<(), BoxError> {
                std::panic::panic_any(7_u32)
            }));
            Ok::<(), BoxError>(())
        }),
        FailureKind::Panic,
        "t1 panicked: (a non-string panic payload)",
    );
}

/// A `JoinHandle` kept from one run and joined in the next used to wait for whichever thread
/// had the same number in the new run (here one that never ends: the run failed on the step
/// budget, far from the mistake). It is refused now.
#[test]
fn a_handle_kept_for_another_run_is_refused() {
    static SLOT: Mutex<Option<sim::JoinHandle>> = Mutex::new(None);
    static RUN: AtomicU64 = AtomicU64::new(0);
    let f = |c: &Cluster| -> Result<(), BoxError> {
        let x = c.alloc_word(N0)?;
        if RUN.fetch_add(1, Ordering::SeqCst) == 0 {
            let h = sim::spawn(c, N0, move |ctx: &Ctx| ctx.store(&x, 1));
            *SLOT.lock().unwrap() = Some(h);
            return Ok(());
        }
        // t1 of this run never ends by itself.
        let stop = c.alloc_word(N0)?;
        let spinner = sim::spawn(c, N0, move |ctx: &Ctx| {
            while ctx.load(&stop)? == 0 {}
            Ok::<(), loco_rdmawait::Error>(())
        });
        let old = SLOT.lock().unwrap().take().ok_or("no handle kept")?;
        assert_eq!(old.thread(), spinner.thread(), "the same number");
        let e = old.join().unwrap_err();
        assert!(matches!(e, JoinError::OtherRun { thread: 1 }), "{e:?}");
        assert!(e.to_string().contains("another run"), "{e}");
        c.context(N0)?.store(&stop, 1)?;
        spinner.join()?;
        Ok(())
    };
    let r = sim::check(Config::new(1).runs(2).max_steps(100_000), f)
        .unwrap_or_else(|f| panic!("{}", f.report()));
    assert_eq!(r.runs, 2);
}

/// A thread that joins itself (its handle passed to it) is a deadlock, and the report says who
/// waits for whom.
#[test]
fn a_thread_joining_itself_is_a_deadlock() {
    let f = |c: &Cluster| -> Result<(), BoxError> {
        let slot: Arc<Mutex<Option<sim::JoinHandle>>> = Arc::default();
        let x = c.alloc_word(N0)?;
        let s = slot.clone();
        let h = sim::spawn(c, N0, move |ctx: &Ctx| -> Result<(), BoxError> {
            loop {
                if let Some(me) = s.lock().unwrap().take() {
                    return Ok(me.join()?);
                }
                ctx.load(&x)?;
            }
        });
        *slot.lock().unwrap() = Some(h);
        Ok(())
    };
    fails(
        sim::check(Config::new(1).runs(3), f),
        FailureKind::Deadlock,
        "t1 joins t1",
    );
}

/// A `std` mutex held by one simulated thread across a scheduling point, wanted by another:
/// the run's one OS thread blocks outside the simulator. The watchdog reports it as a hang
/// naming the thread instead of hanging `check`.
#[test]
fn a_std_mutex_held_across_a_scheduling_point_is_a_hang() {
    let f = |c: &Cluster| -> Result<(), BoxError> {
        let m = Arc::new(Mutex::new(()));
        let x = c.alloc_word(N0)?;
        let holder = {
            let m = m.clone();
            sim::spawn(c, N0, move |ctx: &Ctx| {
                let _g = m.lock().unwrap();
                for i in 0..10 {
                    ctx.store(&x, i)?;
                }
                Ok::<(), BoxError>(())
            })
        };
        let wanter = sim::spawn(c, N0, move |ctx: &Ctx| {
            ctx.load(&x)?;
            let _g = m.lock().unwrap();
            Ok::<(), BoxError>(())
        });
        holder.join()?;
        wanter.join()?;
        Ok(())
    };
    // Only the holder holds the lock across scheduling points, so the run that interleaves
    // them (one of the first few) blocks the wanter, t2.
    let config = Config::new(1)
        .runs(20)
        .seed(1)
        .watchdog(Duration::from_millis(200));
    let f = fails(
        sim::check(config, f),
        FailureKind::Hang,
        "no scheduling point",
    );
    assert!(
        f.message().contains("simulated thread t2"),
        "{}",
        f.report()
    );
}

/// `replay` of a seed that never failed runs that seed's schedule (the same each time); under
/// exhaustive search, a run number past the end of the search is refused.
#[test]
fn replaying_seeds_that_never_failed() {
    let a = sim::replay(Config::new(1), 12_345, one_thread).unwrap();
    let b = sim::replay(Config::new(1), 12_345, one_thread).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.seed, 12_345);
    let exhaustive = || Config::new(1).strategy(Strategy::Exhaustive { max_delays: 1 });
    let runs = sim::check(exhaustive(), one_thread).unwrap().runs;
    sim::replay(exhaustive(), runs - 1, one_thread).unwrap();
    for seed in [runs, u64::MAX] {
        fails(
            sim::replay(exhaustive(), seed, one_thread),
            FailureKind::Setup,
            &format!("has only {runs} runs"),
        );
    }
}

/// The fault plan's edge values: a node out of range, step 0, a step no run reaches, a random
/// step drawn from nothing, a partition of no steps: refused before anything runs (step 0 and
/// the zero widths used to be taken as 1, and a step past the budget was silently never
/// injected). A crash at step 1 strikes before the thread on the node starts, and a second
/// crash of a dead node changes nothing.
#[test]
fn fault_plans_at_their_edges() {
    let crash = |at| Fault::Crash { node: N1, at };
    let partition = |at, steps| Fault::Partition {
        node: N1,
        at,
        steps,
    };
    let refused = [
        (crash(At::Step(1)).with_node(NodeId(2)), "unknown node n2"),
        (crash(At::Step(0)), "At::Step(0)"),
        (partition(At::Step(0), 5), "At::Step(0)"),
        (crash(At::Step(1_001)), "past Config::max_steps (1000)"),
        (crash(At::Step(u64::MAX)), "past Config::max_steps"),
        (crash(At::Random { within: 0 }), "within: 0"),
        (partition(At::Random { within: 0 }, 5), "within: 0"),
        (partition(At::Step(3), 0), "partition of 0 steps"),
    ];
    for (fault, part) in refused {
        let config = || Config::new(2).runs(2).max_steps(1_000).fault(fault);
        fails(sim::check(config(), nothing), FailureKind::Setup, part);
        fails(sim::replay(config(), 4, nothing), FailureKind::Setup, part);
    }
    // At the last step of the budget, and drawn from far more steps than a run has: accepted.
    for at in [At::Step(1_000), At::Random { within: u64::MAX }] {
        let config = Config::new(2).runs(2).max_steps(1_000).fault(crash(at));
        sim::check(config, nothing).unwrap_or_else(|f| panic!("{at:?}: {}", f.report()));
    }
    static CRASHED: AtomicU64 = AtomicU64::new(0);
    let on_n1 = |c: &Cluster| -> Result<(), BoxError> {
        let x = c.alloc_word(N1)?;
        match sim::spawn(c, N1, move |ctx: &Ctx| ctx.store(&x, 1)).join() {
            Err(JoinError::Crashed { node: N1, .. }) => {
                CRASHED.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
            other => Err(format!("n1 crashed at step 1: {other:?}").into()),
        }
    };
    let config = Config::new(2)
        .runs(3)
        .fault(crash(At::Step(1)))
        .fault(crash(At::Step(2)));
    sim::check(config, on_n1).unwrap_or_else(|f| panic!("{}", f.report()));
    assert_eq!(CRASHED.load(Ordering::SeqCst), 3);
}

/// A `check` inside a simulated thread runs on its own (its runs are not the outer run's).
#[test]
fn a_check_inside_a_simulated_thread() {
    let r = sim::check(
        Config::new(1).runs(2),
        |c: &Cluster| -> Result<(), BoxError> {
            let inner = sim::check(Config::new(1).runs(3), one_thread)?;
            assert_eq!(inner.runs, 3);
            one_thread(c)
        },
    )
    .unwrap_or_else(|f| panic!("{}", f.report()));
    assert_eq!(r.runs, 2);
}

trait WithNode {
    fn with_node(self, node: NodeId) -> Self;
}

impl WithNode for Fault {
    fn with_node(self, node: NodeId) -> Self {
        match self {
            Fault::Crash { at, .. } => Fault::Crash { node, at },
            Fault::Partition { at, steps, .. } => Fault::Partition { node, at, steps },
        }
    }
}

/// `sim::spawn` from a plain `std::thread` of the code under test starts nothing. With its
/// handle dropped unjoined, the closure used to vanish and the run passed: the run fails now,
/// naming the mistake (and a `join` of the handle still says `NotSimulated`).
#[test]
fn spawn_from_a_plain_thread_fails_the_run() {
    static RAN: AtomicU64 = AtomicU64::new(0);
    for join in [false, true] {
        let f = move |c: &Cluster| -> Result<(), BoxError> {
            let c = c.clone();
            let joined = std::thread::spawn(move || {
                let h = sim::spawn(&c, N0, |_: &Ctx| {
                    RAN.fetch_add(1, Ordering::SeqCst);
                    Ok::<(), BoxError>(())
                });
                if join {
                    Some(h.join())
                } else {
                    drop(h);
                    None
                }
            })
            .join()
            .map_err(|_| "the plain thread panicked")?;
            if let Some(r) = joined {
                let e = r.unwrap_err();
                assert!(matches!(e, JoinError::NotSimulated), "{e:?}");
            }
            Ok(())
        };
        let f = fails(
            sim::check(Config::new(1).runs(3), f),
            FailureKind::Error,
            "sim::spawn called on a thread that is not simulated",
        );
        assert!(f.message().contains("n0"), "{}", f.report());
    }
    assert_eq!(
        RAN.load(Ordering::SeqCst),
        0,
        "nothing ran outside the simulation"
    );
    // Outside any simulation (a cluster of no run): the join says so, as before.
    let c = Cluster::builder().nodes(1).build().unwrap();
    let e = sim::spawn(&c, N0, |_: &Ctx| Ok::<(), BoxError>(()))
        .join()
        .unwrap_err();
    assert!(matches!(e, JoinError::NotSimulated), "{e:?}");
}

/// `Config::watchdog(0)` would report every run as a hang at once: refused before anything
/// runs. A short watchdog reports a simulated thread that sleeps (in real time, outside the
/// simulator) as a hang.
#[test]
fn the_watchdog_is_configurable_and_zero_is_refused() {
    fails(
        sim::check(Config::new(1).watchdog(Duration::ZERO), nothing),
        FailureKind::Setup,
        "watchdog(0)",
    );
    fails(
        sim::replay(Config::new(1).watchdog(Duration::ZERO), 1, nothing),
        FailureKind::Setup,
        "watchdog(0)",
    );
    let sleeper = |c: &Cluster| -> Result<(), BoxError> {
        let x = c.alloc_word(N0)?;
        sim::spawn(c, N0, move |ctx: &Ctx| {
            ctx.store(&x, 1)?;
            std::thread::sleep(Duration::from_secs(3_600));
            Ok::<(), BoxError>(())
        })
        .join()?;
        Ok(())
    };
    let config = Config::new(1).runs(1).watchdog(Duration::from_millis(200));
    fails(
        sim::check(config, sleeper),
        FailureKind::Hang,
        "no scheduling point",
    );
}

/// A failing closure: two threads race a put and a get of one word (the reader fails on 0).
fn racy(c: &Cluster) -> Result<(), BoxError> {
    let x = c.alloc_word(N1)?;
    let one = c.alloc_word(N0)?;
    let into = c.alloc_word(N0)?;
    let w = sim::spawn(c, N0, move |ctx: &Ctx| {
        ctx.store(&one, 1)?;
        ctx.put(&x, &one, WorkId::new(1))?;
        ctx.wait(WorkId::new(1))
    });
    let r = sim::spawn(c, N0, move |ctx: &Ctx| -> Result<(), BoxError> {
        ctx.get(&into, &x, WorkId::new(2))?;
        ctx.wait(WorkId::new(2))?;
        match ctx.load(&into)? {
            0 => Err("read 0".into()),
            _ => Ok(()),
        }
    });
    w.join()?;
    r.join()?;
    Ok(())
}

/// A failure keeps the config it failed with: `replay_failure` replays it under that config
/// (the same trace), while `replay` of its seed under another config runs another schedule.
#[test]
fn a_failure_replays_under_its_own_config() {
    let config = Config::new(2)
        .runs(200)
        .strategy(Strategy::Pct { depth: 2 });
    let failure = sim::check(config.clone(), racy).unwrap_err();
    assert_eq!(failure.kind(), FailureKind::Error, "{}", failure.report());
    assert_eq!(failure.config(), &config);
    assert_ne!(failure.config(), &config.clone().strategy(Strategy::Random));
    let again = sim::replay_failure(&failure, racy).unwrap_err();
    assert_eq!(again.seed(), failure.seed());
    assert_eq!(again.trace(), failure.trace());
    assert_eq!(again.message(), failure.message());
    assert!(
        failure.report().contains("replay_failure"),
        "{}",
        failure.report()
    );
    // A config of one's own that is not the failure's (here, another node count: the seed
    // may stand for another schedule there) is told apart.
    let other = Config::new(3)
        .runs(200)
        .strategy(Strategy::Pct { depth: 2 });
    assert_ne!(failure.config(), &other);
    // The same under exhaustive search (the seed is a run number).
    let config = Config::new(2)
        .runs(10_000)
        .strategy(Strategy::Exhaustive { max_delays: 2 });
    let failure = sim::check(config, racy).unwrap_err();
    let again = sim::replay_failure(&failure, racy).unwrap_err();
    assert_eq!(again.trace(), failure.trace());
}
