//! SC litmus shapes over SC locations on different nodes (docs/model.md §5.6, Fig. 14): message passing,
//! store buffering, IRIW and CAS against a write never show an outcome that no interleaving of
//! the SC operations explains, in 10,000 seeded Chaos runs each (plus Threaded runs). And an SC
//! write does not make an earlier plain, un-waited `put` of the same thread visible: that weak
//! outcome is observed.
//!
//! On a real device (`LOCO_BACKEND=verbs`, `soft-roce-ci/run.sh`): `DEVICE_RUNS` runs per shape,
//! every outcome checked against the SC ones; the weak outcome of the last test is only counted.
//!
//! The allowed outcomes of each shape are computed by enumerating every interleaving of its
//! threads' programs (sequential consistency by definition), not written by hand. The checks are
//! not vacuous: the readers of MP and IRIW must have seen the writes the forbidden outcomes need,
//! and deliberately broken SC writes (test-only mutants: one scratch word per thread, no lock)
//! must be caught by the write-write shape within its 1,000 seeds.

mod common;

use std::collections::BTreeSet;

use loco_rdmawait::{Schedule, WorkId};
use loco_sc::{Sc, ScLoc};

/// An SC operation of a litmus program, on location index `.0`.
#[derive(Clone, Copy, Debug)]
enum Op {
    Read(usize),
    Write(usize, u64),
    Cas(usize, u64, u64),
    Faa(usize, u64),
}

/// A litmus shape: the node of each location, and each thread's node and program.
struct Shape {
    name: &'static str,
    locs: &'static [u16],
    threads: &'static [(u16, &'static [Op])],
}

/// What a run shows: every operation's return value (writes return 0), thread by thread, and
/// the final value of every location.
type Outcome = (Vec<Vec<u64>>, Vec<u64>);

fn step(mem: &mut [u64], op: Op) -> u64 {
    match op {
        Op::Read(x) => mem[x],
        Op::Write(x, v) => {
            mem[x] = v;
            0
        }
        Op::Cas(x, e, v) => {
            let old = mem[x];
            if old == e {
                mem[x] = v;
            }
            old
        }
        Op::Faa(x, k) => {
            let old = mem[x];
            mem[x] = old.wrapping_add(k);
            old
        }
    }
}

/// Every outcome of every interleaving.
fn sc_outcomes(shape: &Shape) -> BTreeSet<Outcome> {
    fn go(
        shape: &Shape,
        pcs: &mut Vec<usize>,
        rets: &mut Vec<Vec<u64>>,
        mem: &mut Vec<u64>,
        out: &mut BTreeSet<Outcome>,
    ) {
        let mut done = true;
        for t in 0..shape.threads.len() {
            let prog = shape.threads[t].1;
            if pcs[t] == prog.len() {
                continue;
            }
            done = false;
            let saved = mem.clone();
            let r = step(mem, prog[pcs[t]]);
            rets[t].push(r);
            pcs[t] += 1;
            go(shape, pcs, rets, mem, out);
            pcs[t] -= 1;
            rets[t].pop();
            *mem = saved;
        }
        if done {
            out.insert((rets.clone(), mem.clone()));
        }
    }
    let mut out = BTreeSet::new();
    go(
        shape,
        &mut vec![0; shape.threads.len()],
        &mut vec![Vec::new(); shape.threads.len()],
        &mut vec![0; shape.locs.len()],
        &mut out,
    );
    out
}

/// One run of `shape` on a fresh 3-node cluster.
fn run(shape: &Shape, schedule: Schedule) -> Outcome {
    let c = common::cluster(3, schedule);
    let locs: Vec<ScLoc> = shape
        .locs
        .iter()
        .map(|&n| ScLoc::new_on(&c, loco_rdmawait::NodeId(n), 0).unwrap())
        .collect();
    let nodes: Vec<u16> = shape.threads.iter().map(|t| t.0).collect();
    let rets = common::threads(&c, &nodes, |t, ctx| {
        shape.threads[t]
            .1
            .iter()
            .map(|op| match *op {
                Op::Read(x) => ctx.read_sc(&locs[x]),
                Op::Write(x, v) => ctx.write_sc(&locs[x], v).map(|()| 0),
                Op::Cas(x, e, v) => ctx.cas_sc(&locs[x], e, v),
                Op::Faa(x, k) => ctx.faa_sc(&locs[x], k),
            })
            .collect::<loco_sc::Result<Vec<u64>>>()
    });
    c.quiesce().unwrap();
    let mem = locs.iter().map(|l| l.peek(&c).unwrap()).collect();
    (rets, mem)
}

/// Runs `shape` `chaos` times under Chaos (seeds 0..) and `threaded` times under Threaded;
/// every outcome must be an SC one. Returns the outcomes seen.
fn check(shape: &Shape, chaos: u64, threaded: u64) -> BTreeSet<Outcome> {
    let allowed = sc_outcomes(shape);
    let mut seen = BTreeSet::new();
    let schedules = (0..chaos)
        .map(|seed| Schedule::Chaos { seed })
        .chain((0..threaded).map(|_| Schedule::Threaded));
    for schedule in schedules {
        let o = run(shape, schedule);
        assert!(
            allowed.contains(&o),
            "{}: non-SC outcome {o:?} under {schedule:?}; SC allows {allowed:?}",
            shape.name
        );
        seen.insert(o);
    }
    seen
}

const X: usize = 0;
const Y: usize = 1;

/// Message passing: x and y on different nodes, neither the writer's nor the reader's.
/// Forbidden: the reader sees the flag y but not the data x.
const MP: Shape = Shape {
    name: "MP",
    locs: &[1, 2],
    threads: &[
        (0, &[Op::Write(X, 1), Op::Write(Y, 1)]),
        (0, &[Op::Read(Y), Op::Read(X)]),
    ],
};

/// Store buffering. Forbidden: both reads see 0 (allowed for plain puts with waits, Fig. 5).
const SB: Shape = Shape {
    name: "SB",
    locs: &[1, 2],
    threads: &[
        (0, &[Op::Write(X, 1), Op::Read(Y)]),
        (2, &[Op::Write(Y, 1), Op::Read(X)]),
    ],
};

/// Independent reads of independent writes. Forbidden: the two readers disagree on the order of
/// the writes (1,0 and 1,0).
const IRIW: Shape = Shape {
    name: "IRIW",
    locs: &[1, 2],
    threads: &[
        (0, &[Op::Write(X, 1)]),
        (1, &[Op::Write(Y, 1)]),
        (2, &[Op::Read(X), Op::Read(Y)]),
        (0, &[Op::Read(Y), Op::Read(X)]),
    ],
};

/// CAS and FAA against a write of the same location. Forbidden: the write lost (the Fig. 6
/// effect of a put landing inside a remote RMW), e.g. a final 1 after the write of 2.
const CAS_WRITE: Shape = Shape {
    name: "CAS-vs-write",
    locs: &[1],
    threads: &[
        (0, &[Op::Cas(X, 0, 1)]),
        (2, &[Op::Write(X, 2), Op::Read(X)]),
        (1, &[Op::Faa(X, 10)]),
    ],
};

/// Back-to-back writes of different values to locations on different nodes: each location ends
/// with its own last value. (The writes' puts are not waited for: with one scratch word per thread
/// rather than per location, a pending put to x could send a later write's value, `docs/model.md`
/// §5.6. The Chaos schedule does open that window: [`Mutant::SharedScratch`] ends with x = 4 in
/// about one seed in twelve, and `the_write_write_seed_count_catches_broken_sc_writes` checks
/// that `WW_CHAOS_RUNS` seeds catch it.)
const WW: Shape = Shape {
    name: "write-write",
    locs: &[1, 2],
    threads: &[
        (
            0,
            &[
                Op::Write(X, 1),
                Op::Write(Y, 2),
                Op::Write(X, 3),
                Op::Write(Y, 4),
            ],
        ),
        (2, &[Op::Read(X), Op::Read(Y), Op::Read(X)]),
    ],
};

#[test]
fn allowed_sets_are_the_textbook_ones() {
    let forbidden_mp = (vec![vec![0, 0], vec![1, 0]], vec![1, 1]);
    assert!(!sc_outcomes(&MP).contains(&forbidden_mp));
    assert_eq!(sc_outcomes(&MP).len(), 3);
    let sb: BTreeSet<_> = sc_outcomes(&SB)
        .into_iter()
        .map(|(r, _)| (r[0][1], r[1][1]))
        .collect();
    assert_eq!(sb, BTreeSet::from([(0, 1), (1, 0), (1, 1)]));
    assert!(!sc_outcomes(&IRIW)
        .iter()
        .any(|(r, _)| r[2] == [1, 0] && r[3] == [1, 0]));
    // CAS-vs-write: the write of 2 is never lost: 2 or 12 at the end.
    assert!(sc_outcomes(&CAS_WRITE)
        .iter()
        .all(|(_, m)| m[0] == 2 || m[0] == 12));
}

const CHAOS_RUNS: u64 = 10_000;
const THREADED_RUNS: u64 = 200;
/// Runs per shape on a real device (no schedules there: these are all its runs).
const DEVICE_RUNS: u64 = 200;

/// [`check`] with the default run counts: `CHAOS_RUNS` Chaos seeds and `THREADED_RUNS` Threaded
/// runs on the soft NIC, `DEVICE_RUNS` runs on a device.
fn check_default(shape: &Shape) -> BTreeSet<Outcome> {
    check(
        shape,
        common::runs(CHAOS_RUNS, DEVICE_RUNS),
        THREADED_RUNS.min(common::runs(THREADED_RUNS, 0)),
    )
}

#[test]
fn message_passing_is_sc() {
    let seen = check_default(&MP);
    // Not vacuous: the forbidden outcome needs the flag read as 1, so some run must read it.
    assert!(
        seen.iter().any(|(r, _)| r[1][0] == 1) || !common::shows_weak_outcomes(),
        "the reader never saw the flag: {seen:?}"
    );
}

#[test]
fn store_buffering_is_sc() {
    let seen = check_default(&SB);
    // The runs are not all alike: threads do interleave (both reads 1 needs real overlap). A
    // device need not show it in a few runs.
    assert!(
        seen.len() >= 2 || !common::shows_weak_outcomes(),
        "{seen:?}"
    );
}

#[test]
fn iriw_is_sc() {
    let seen = check_default(&IRIW);
    // Not vacuous: the forbidden outcome needs each reader to see its first write; each must
    // have been seen.
    assert!(
        (seen.iter().any(|(r, _)| r[2][0] == 1) && seen.iter().any(|(r, _)| r[3][0] == 1))
            || !common::shows_weak_outcomes(),
        "a reader never saw the write it reads first: {seen:?}"
    );
}

#[test]
fn cas_against_write_is_sc() {
    let seen = check_default(&CAS_WRITE);
    assert!(
        seen.len() >= 2 || !common::shows_weak_outcomes(),
        "{seen:?}"
    );
}

/// Chaos seeds of [`back_to_back_writes_keep_their_values`] on the soft NIC.
const WW_CHAOS_RUNS: u64 = 1_000;

#[test]
fn back_to_back_writes_keep_their_values() {
    let seen = check(
        &WW,
        common::runs(WW_CHAOS_RUNS, DEVICE_RUNS),
        50.min(common::runs(50, 0)),
    );
    assert!(seen.iter().all(|(_, m)| m == &[3, 4]), "{seen:?}");
}

/// A deliberately broken SC library, for showing that a seed count catches a bug: Fig. 14's
/// operations over a word and a lock of their own, with one piece taken out.
#[derive(Clone, Copy, Debug)]
enum Mutant {
    /// No lock at all: `store(b, v); put(x, b)` and `get(a, x); wait; load(a)`. Nothing orders
    /// a write to x after an earlier write to y on another node.
    Unlocked,
    /// The weak lock instead of the node lock, its tickets on node 0 rather than the location's
    /// node: mutual exclusion only, so a write's put may land after the next holder's get
    /// (Fig. 8b). (With its tickets on the location's node, the release's writes follow the
    /// write's on the same queue pair, which is enough for the shapes here: not a mutant they can catch.)
    WeakLock,
    /// The node lock, as in the library, but one scratch word `b` per thread for all locations.
    SharedScratch,
}

/// The lock of a mutant SC location.
enum Lk {
    W(loco_locks::WLock),
    N(loco_locks::NLock),
}

/// One run of `shape` with `mutant` in place of the SC library; the outcome as [`run`] gives it.
fn run_mutant(shape: &Shape, mutant: Mutant, seed: u64) -> Outcome {
    use loco_locks::{LockGuard, NLock, WLock};
    use loco_rdmawait::NodeId;
    const FETCH: WorkId = WorkId::new(1);
    const WRITE: WorkId = WorkId::new(2);
    let c = common::chaos(3, seed);
    let locs: Vec<_> = shape
        .locs
        .iter()
        .map(|&n| {
            let word = c.alloc_word(NodeId(n)).unwrap();
            assert_ne!(n, 0, "the weak lock's tickets are on node 0");
            let lock = match mutant {
                Mutant::Unlocked => None,
                Mutant::WeakLock => Some(Lk::W(
                    WLock::new(&c, NodeId(0), shape.threads.len()).unwrap(),
                )),
                Mutant::SharedScratch => Some(Lk::N(NLock::new(&c, NodeId(n)).unwrap())),
            };
            (word, lock)
        })
        .collect();
    let nodes: Vec<u16> = shape.threads.iter().map(|t| t.0).collect();
    let rets = common::threads(&c, &nodes, |t, ctx| {
        let node = ctx.node();
        // Scratch words a and b per (thread, location), as in the real library.
        let shared = c.alloc_word(node).unwrap();
        let scratch: Vec<_> = locs
            .iter()
            .map(|_| match mutant {
                Mutant::SharedScratch => (c.alloc_word(node).unwrap(), shared),
                _ => (c.alloc_word(node).unwrap(), c.alloc_word(node).unwrap()),
            })
            .collect();
        let mut rets = Vec::new();
        for op in shape.threads[t].1 {
            let (x, (a, b)) = match *op {
                Op::Read(x) | Op::Write(x, _) => (x, scratch[x]),
                Op::Cas(..) | Op::Faa(..) => unreachable!("the mutants read and write only"),
            };
            let (word, lock) = &locs[x];
            let body = || -> loco_sc::Result<u64> {
                match *op {
                    Op::Write(_, v) => {
                        ctx.store(&b, v)?;
                        ctx.put(word, &b, WRITE)?;
                    }
                    _ => ctx.get(&a, word, FETCH)?,
                }
                Ok(0)
            };
            match lock {
                None => {
                    body()?;
                }
                Some(Lk::W(l)) => {
                    let g = l.acquire(ctx)?;
                    body()?;
                    LockGuard::release(g)?;
                }
                Some(Lk::N(l)) => {
                    let g = l.acquire(ctx)?;
                    body()?;
                    LockGuard::release(g)?;
                }
            }
            rets.push(match *op {
                Op::Write(..) => 0,
                _ => {
                    ctx.wait(FETCH)?;
                    ctx.load(&a)?
                }
            });
        }
        Ok(rets)
    });
    c.quiesce().unwrap();
    let mem = locs.iter().map(|(w, _)| c.peek(w).unwrap()).collect();
    (rets, mem)
}

/// The first `seeds` Chaos seeds at which `mutant`, running the write-write shape, shows an
/// outcome that [`back_to_back_writes_keep_their_values`] rejects (non-SC, or a location not
/// ending with its own last value); `stop` after that many.
fn ww_catches(mutant: Mutant, seeds: u64, stop: usize) -> Vec<(u64, Outcome)> {
    let allowed = sc_outcomes(&WW);
    (0..seeds)
        .map(|seed| (seed, run_mutant(&WW, mutant, seed)))
        .filter(|(_, o)| !allowed.contains(o) || o.1 != [3, 4])
        .take(stop)
        .collect()
}

/// The seed count of [`back_to_back_writes_keep_their_values`] catches the bug its comment is
/// about (one scratch word per thread: caught in about one seed in twelve) and an SC write without
/// its lock (about one in eighty): each mutant shows a rejected outcome within `WW_CHAOS_RUNS`
/// seeds, so a miss by chance has odds below 1e-5. The loop stops at the first catch.
#[test]
fn the_write_write_seed_count_catches_broken_sc_writes() {
    if !common::shows_weak_outcomes() {
        // A real NIC need not interleave the mutants' operations badly: the seed count is a
        // property of the soft NIC's Chaos schedule.
        return;
    }
    for mutant in [Mutant::SharedScratch, Mutant::Unlocked] {
        let caught = ww_catches(mutant, WW_CHAOS_RUNS, 1);
        let Some((seed, o)) = caught.first() else {
            panic!(
                "{mutant:?}: no rejected outcome in {WW_CHAOS_RUNS} seeds: the test is too weak"
            );
        };
        eprintln!("{mutant:?}: caught at seed {seed}: {o:?}");
    }
}

/// The weak lock in place of the node lock is a bug the write-write shape catches only rarely
/// under Chaos (about one seed in 2,000 to 5,000 measured): beyond the default seed count, so it
/// is checked here, in a soak of up to 30,000 seeds (`--ignored`; it stops at the first catch,
/// at worst about 20 s).
#[test]
#[ignore = "soak: 30,000 seeds of a mutant"]
fn a_weak_lock_in_sc_writes_is_caught_in_a_soak() {
    if !common::shows_weak_outcomes() {
        return; // as above: a property of the Chaos schedule
    }
    let caught = ww_catches(Mutant::WeakLock, 30_000, 1);
    assert!(
        !caught.is_empty(),
        "WeakLock: no rejected outcome in 30,000 seeds"
    );
    eprintln!("WeakLock: caught at {caught:?}");
}

/// A longer soak: 100,000 more Chaos seeds per shape (`cargo test -p loco-sc --test litmus --
/// --ignored`; about ten times the default suite's time).
#[test]
#[ignore = "soak: ten times the default runs"]
fn soak_all_shapes() {
    for shape in [&MP, &SB, &IRIW, &CAS_WRITE, &WW] {
        let allowed = sc_outcomes(shape);
        for seed in CHAOS_RUNS..CHAOS_RUNS + 100_000 {
            let o = run(shape, Schedule::Chaos { seed });
            assert!(
                allowed.contains(&o),
                "{}: non-SC outcome {o:?}, seed {seed}",
                shape.name
            );
        }
    }
}

/// docs/model.md §5.6, "other libraries are not covered": SC operations do not complete earlier operations of
/// other libraries. Thread 0 puts 1 to a plain word y on n1 (no wait; behind a queue of other
/// puts towards n1, so that it tends to stay in flight), then `write_sc(x, 1)` with x on n2.
/// Thread 1 starts once `write_sc` has returned (a flag outside the model), reads x with
/// `read_sc` (so 1), then y with a get. Seeing y = 0 is allowed, and observed under Chaos.
#[test]
fn sc_write_does_not_publish_an_earlier_plain_put() {
    use loco_rdmawait::NodeId;
    const D: WorkId = WorkId::new(1);
    const FILLER: u64 = 48;
    let mut weak = 0;
    let mut seeds = 0;
    let runs = common::runs(2_000, 10);
    for seed in 0..runs {
        let c = common::chaos(3, seed);
        let y = c.alloc_word(NodeId(1)).unwrap();
        let filler = c.alloc_words(NodeId(1), FILLER).unwrap();
        let x = ScLoc::new_on(&c, NodeId(2), 0).unwrap();
        let (src, tmp) = (
            c.alloc_word(NodeId(0)).unwrap(),
            c.alloc_word(NodeId(0)).unwrap(),
        );
        let written = std::sync::atomic::AtomicBool::new(false);
        let r = common::threads(&c, &[0, 0], |t, ctx| {
            if t == 0 {
                ctx.store(&src, 1)?;
                for i in 0..FILLER {
                    ctx.put(&filler.word(i)?, &src, D)?;
                }
                ctx.put(&y, &src, D)?; // plain, not waited for
                ctx.write_sc(&x, 1)?;
                written.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(None)
            } else {
                while !written.load(std::sync::atomic::Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                assert_eq!(
                    ctx.read_sc(&x)?,
                    1,
                    "write_sc returned, so it is in the SC order"
                );
                ctx.get(&tmp, &y, D)?;
                ctx.wait(D)?;
                Ok(Some(ctx.load(&tmp)?))
            }
        });
        seeds += 1;
        if r[1] == Some(0) {
            weak += 1;
            if weak == 10 {
                break;
            }
        }
    }
    eprintln!("weak outcome seen {weak} times in {seeds} seeds (of {runs})");
    assert!(
        weak > 0 || !common::shows_weak_outcomes(),
        "y = 0 after x = 1 never observed in {seeds} seeds: the SC write seems to publish the put"
    );
}
