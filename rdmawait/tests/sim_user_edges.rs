//! A new user's tries at the simulator (`loco_rdmawait::sim`) that found defects: each test
//! failed before its fix.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loco_rdmawait::sim::{self, At, Config, Fault, Profile, Strategy};
use loco_rdmawait::{clock, Cluster, Ctx, NodeId};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const N0: NodeId = NodeId(0);

/// Under PCT every spin loop's pause drops the pausing thread's priority below every other's.
/// The priorities were `u64`s counting down from 2^20, so the 1,048,577th drop of a run
/// overflowed: in a debug build the run failed as a panic of the spinning thread ("attempt to
/// subtract with overflow"), a bug of the simulator blamed on the code under test. Two threads
/// that pause 600,000 times each (1.2 million drops) now both finish.
#[test]
fn pct_survives_more_than_a_million_pauses() {
    static DONE: AtomicU64 = AtomicU64::new(0);
    let f = |c: &Cluster| -> Result<(), BoxError> {
        let spinner = || {
            move |_: &Ctx| {
                for _ in 0..600_000 {
                    clock::pause();
                }
                DONE.fetch_add(1, Ordering::SeqCst);
                Ok::<(), BoxError>(())
            }
        };
        let a = sim::spawn(c, N0, spinner());
        let b = sim::spawn(c, N0, spinner());
        a.join()?;
        b.join()?;
        Ok(())
    };
    let config = Config::new(1).runs(1).strategy(Strategy::Pct { depth: 3 });
    let r = sim::check(config, f).unwrap_or_else(|f| panic!("{}", f.report()));
    assert!(r.steps > 1_200_000, "{r:?}");
    assert_eq!(DONE.load(Ordering::SeqCst), 2);
}

/// Every line of a failure's trace that shows a value read ("-> v") is a load or a CAS, and
/// each load and CAS of the run shows one. The value used to go on the trace's last line when
/// the read was made: after the thread's scheduling point, where other threads may have run,
/// so it was often shown on another thread's step ("t0 (main)  join t1  -> 0", "t2 (n0)
/// store w0 := 100  -> 0") while the load itself showed none; a fault injected at the load's
/// step took it as well.
#[test]
fn trace_values_are_on_the_steps_that_read_them() {
    let f = |c: &Cluster| -> Result<(), BoxError> {
        let x = c.alloc_word(N0)?;
        let reader = sim::spawn(c, N0, move |ctx: &Ctx| {
            for _ in 0..5 {
                ctx.load(&x)?;
            }
            Ok::<(), BoxError>(())
        });
        let writer = sim::spawn(c, N0, move |ctx: &Ctx| {
            for i in 0..5 {
                ctx.store(&x, 100 + i)?;
            }
            ctx.cas(&x, 104, 7)?;
            Ok::<(), BoxError>(())
        });
        reader.join()?;
        writer.join()?;
        Err("every run fails, to show its trace".into())
    };
    let check = |failure: sim::Failure| {
        let report = failure.report();
        let first = failure.trace().first().cloned().unwrap_or_default();
        assert!(
            first.starts_with("step       1 "),
            "the whole run is traced: {report}"
        );
        let mut reads = 0;
        for line in failure.trace() {
            let reads_a_value = line.contains(" load w") || line.contains(" cas w");
            assert_eq!(
                line.contains("  -> "),
                reads_a_value,
                "{line:?} in\n{report}"
            );
            reads += usize::from(reads_a_value);
        }
        assert_eq!(reads, 6, "{report}");
    };
    for seed in 0..10 {
        check(sim::replay(Config::new(1), seed, f).unwrap_err());
    }
    // A fault injected at a load's step is traced after it, on the same thread.
    for step in 1..=20 {
        let config = Config::new(1).fault(Fault::Partition {
            node: N0,
            at: At::Step(step),
            steps: 1,
        });
        check(sim::replay(config, 1, f).unwrap_err());
    }
}

/// An [`clock::Unparker`] of a parked thread of one run, called by a thread of another (here a
/// `sim::check` nested in the first run's main thread): the unpark took the caller's thread
/// number as one of the parked thread's run, and with fewer threads there the run of the caller
/// failed as a panic ("index out of bounds") of the simulator. It now wakes the parked thread
/// as an unpark from outside its run does.
#[test]
fn an_unparker_called_from_another_run() {
    static WOKEN: AtomicU64 = AtomicU64::new(0);
    let outer = |c: &Cluster| -> Result<(), BoxError> {
        let slot: Arc<Mutex<Option<clock::Unparker>>> = Arc::default();
        let mine = slot.clone();
        let sleeper = sim::spawn(c, N0, move |_: &Ctx| {
            *mine.lock().unwrap() = clock::unparker();
            let start = clock::now();
            clock::park_timeout(Duration::from_secs(1));
            if clock::now() - start < Duration::from_secs(1) {
                WOKEN.fetch_add(1, Ordering::SeqCst);
            }
            Ok::<(), BoxError>(())
        });
        // The sleeper parks first (this thread's clock is behind its own by then).
        clock::sleep(Duration::from_micros(1));
        let unparker = slot
            .lock()
            .unwrap()
            .take()
            .ok_or("the sleeper has not parked")?;
        // A run of four threads: the unpark comes from its t3.
        let inner = move |c: &Cluster| -> Result<(), BoxError> {
            let mut hs = Vec::new();
            for t in 1..=3 {
                let u = unparker.clone();
                hs.push(sim::spawn(c, N0, move |_: &Ctx| {
                    if t == 3 {
                        u.unpark();
                    }
                    Ok::<(), BoxError>(())
                }));
            }
            for h in hs {
                h.join()?;
            }
            Ok(())
        };
        sim::check(Config::new(1).runs(1), inner)?;
        sleeper.join()?;
        Ok(())
    };
    let config = Config::new(1).runs(1).profile(Profile::connectx5());
    sim::check(config, outer).unwrap_or_else(|f| panic!("{}", f.report()));
    assert_eq!(
        WOKEN.load(Ordering::SeqCst),
        1,
        "the unpark woke the sleeper"
    );
}

/// A wait loop without a spin pause (`while ctx.load(&flag)? == 0 {}`) passes under the random
/// strategy, but under exhaustive search (and PCT of depth 1) the running thread goes on until
/// it pauses or blocks, so the first run spins until the step budget. The failure said only "a
/// livelock, or raise Config::max_steps", which sends the user after a livelock the code does
/// not have, or a bigger budget; it now says what the strategy needs.
#[test]
fn a_wait_loop_without_a_pause_is_named_when_it_exhausts_the_budget() {
    let spin = |c: &Cluster| -> Result<(), BoxError> {
        let flag = c.alloc_word(N0)?;
        let waiter = sim::spawn(c, N0, move |ctx: &Ctx| {
            while ctx.load(&flag)? == 0 {}
            Ok::<(), BoxError>(())
        });
        let setter = sim::spawn(c, N0, move |ctx: &Ctx| ctx.store(&flag, 1));
        waiter.join()?;
        setter.join()?;
        Ok(())
    };
    let config = || Config::new(1).runs(10).max_steps(5_000);
    sim::check(config(), spin).unwrap_or_else(|f| panic!("{}", f.report()));
    for strategy in [
        Strategy::Exhaustive { max_delays: 2 },
        Strategy::Pct { depth: 1 },
    ] {
        let f = sim::check(config().strategy(strategy), spin).unwrap_err();
        assert_eq!(f.kind(), sim::FailureKind::Budget, "{}", f.report());
        assert!(
            f.message()
                .contains("t1 took each of the last 200 steps, none a spin pause, while t"),
            "{}",
            f.report()
        );
        assert!(
            f.message().contains("loco::clock::pause()"),
            "{}",
            f.message()
        );
    }
    // A thread that spins alone, with pauses, is a livelock as before.
    let alone = |c: &Cluster| -> Result<(), BoxError> {
        let flag = c.alloc_word(N0)?;
        sim::spawn(c, N0, move |ctx: &Ctx| {
            while ctx.load(&flag)? == 0 {
                clock::pause();
            }
            Ok::<(), BoxError>(())
        })
        .join()?;
        Ok(())
    };
    let f = sim::check(config().strategy(Strategy::Pct { depth: 1 }), alone).unwrap_err();
    assert!(
        f.message().ends_with("raise Config::max_steps)"),
        "{}",
        f.message()
    );
}

/// A profile's `jitter` or `spin_share` of NaN ran as if it were 0, and made the run's config
/// unequal to itself (`Config: PartialEq`), so that comparing a `Failure::config` with the
/// config given, as its docs suggest, said they differ. A NaN or infinite value of either is
/// now refused before the run starts (`Setup`, naming the field), by `check` and `replay`;
/// finite values out of 0 to 1 still run, taken as documented (the nearest of 0 and 1).
#[test]
fn a_profile_with_a_nan_or_infinite_fraction_is_refused() {
    static RAN: AtomicBool = AtomicBool::new(false);
    let f = |_: &Cluster| -> Result<(), BoxError> {
        RAN.store(true, Ordering::SeqCst);
        Ok(())
    };
    let bad = [
        ("jitter", f64::NAN, Profile::rxe()),
        ("jitter", f64::INFINITY, Profile::connectx5()),
        ("jitter", f64::NEG_INFINITY, Profile::rxe()),
        ("spin_share", f64::NAN, Profile::rxe()),
        ("spin_share", f64::INFINITY, Profile::rxe()),
        ("spin_share", -f64::NAN, Profile::connectx5()),
    ]
    .map(|(field, v, mut p)| {
        match field {
            "jitter" => p.jitter = v,
            _ => p.spin_share = v,
        }
        (field, p)
    });
    for (field, p) in bad {
        let config = Config::new(2).runs(2).profile(p.clone());
        for fail in [
            sim::check(config.clone(), f).unwrap_err(),
            sim::replay(config.clone(), 7, f).unwrap_err(),
        ] {
            assert_eq!(fail.kind(), sim::FailureKind::Setup, "{p:?}: {fail}");
            let m = fail.message();
            assert!(
                m.starts_with(&format!("Profile::{field} of the profile")),
                "{m}"
            );
            assert!(m.contains("give a finite value from 0 to 1"), "{m}");
            assert!(
                fail.to_string()
                    .starts_with("simulation not started (Setup)"),
                "{fail}"
            );
        }
    }
    assert!(
        !RAN.load(Ordering::SeqCst),
        "a refused config ran the closure"
    );
    // Finite values outside 0 to 1 are taken as the nearest, and run.
    for p in [
        Profile {
            jitter: -0.5,
            ..Profile::rxe()
        },
        Profile {
            jitter: 7.0,
            ..Profile::rxe()
        },
        Profile {
            spin_share: -1.0,
            ..Profile::rxe()
        },
        Profile {
            spin_share: 1e300,
            ..Profile::rxe()
        },
    ] {
        let config = Config::new(2).runs(2).profile(p.clone());
        let r = sim::check(config, f).unwrap_or_else(|e| panic!("{p:?}: {}", e.report()));
        assert_eq!(r.runs, 2);
    }
}

/// `Failure::steps`: the steps of the failing run, which users could only read out of its
/// `Display` ("failed after N steps"). It is that number, the step of the trace's last line
/// and the same on a replay; 0 for a config refused before the run; one past the budget for a
/// run that exhausted it.
#[test]
fn a_failure_tells_its_steps() {
    let f = |c: &Cluster| -> Result<(), BoxError> {
        let x = c.alloc_word(N0)?;
        sim::spawn(c, N0, move |ctx: &Ctx| {
            for i in 0..10 {
                ctx.store(&x, i)?;
            }
            Ok::<(), BoxError>(())
        })
        .join()?;
        Err("fails after its stores".into())
    };
    let fail = sim::check(Config::new(1).runs(3), f).unwrap_err();
    assert_eq!(fail.kind(), sim::FailureKind::Error, "{}", fail.report());
    let n = fail.steps();
    assert!(n >= 10, "ten stores at least: {n}");
    assert!(
        fail.to_string()
            .contains(&format!("failed after {n} steps")),
        "{fail}"
    );
    let last = fail.trace().last().cloned().unwrap_or_default();
    assert!(
        last.starts_with(&format!("step {n:>7} ")),
        "last line {last:?} is not step {n}"
    );
    assert_eq!(sim::replay_failure(&fail, f).unwrap_err().steps(), n);

    // Refused before the run: no step.
    let refused = sim::check(Config::new(1).max_steps(0), f).unwrap_err();
    assert_eq!(refused.kind(), sim::FailureKind::Setup);
    assert_eq!(refused.steps(), 0);

    // Out of budget: the step that went past it.
    let spin = |c: &Cluster| -> Result<(), BoxError> {
        let flag = c.alloc_word(N0)?;
        sim::spawn(c, N0, move |ctx: &Ctx| {
            while ctx.load(&flag)? == 0 {
                clock::pause();
            }
            Ok::<(), BoxError>(())
        })
        .join()?;
        Ok(())
    };
    let budget = sim::check(Config::new(1).runs(1).max_steps(500), spin).unwrap_err();
    assert_eq!(
        budget.kind(),
        sim::FailureKind::Budget,
        "{}",
        budget.report()
    );
    assert_eq!(budget.steps(), 501);
}
