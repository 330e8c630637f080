//! The paper's litmus tests of Figs. 2, 3 and 5 (`tests/litmus/`, docs/model.md §6; Fig. 7 is beside its RMW
//! twin in loco-rdmawaitrmw's litmus tests), on the backend
//! `LOCO_BACKEND` names: forbidden outcomes never appear, on every backend; on the soft NIC in
//! `Chaos` (the default, `RUNS` seeded runs) the allowed weak ones do too. On a real device
//! (`soft-roce-ci/run.sh`: `VERBS_RUNS` runs) every outcome must be an allowed one and the
//! histograms are printed; a real NIC need not show the weak ones.

mod common;

use std::collections::BTreeSet;

use common::{cluster, histogram, histogram_n, VERBS_RUNS};
use loco_rdmawait::testing::{runs, shows_weak_outcomes};
use loco_rdmawait::{NodeId, WorkId};

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const D1: WorkId = WorkId::new(1);
const D2: WorkId = WorkId::new(2);

/// Fig. 2 shapes, one thread on n0: puts of x@n0 to y@n1, some completion, then `store(x, 1)`.
/// Returns the final y.
fn fig2(
    seed: u64,
    body: impl Fn(&loco_rdmawait::Ctx, &loco_rdmawait::Loc, &loco_rdmawait::Loc),
) -> u64 {
    let c = cluster(2, seed);
    let x = c.alloc_word(N0).unwrap();
    let y = c.alloc_word(N1).unwrap();
    {
        let ctx = c.context(N0).unwrap();
        body(&ctx, &x, &y);
        ctx.store(&x, 1).unwrap();
    }
    c.quiesce().unwrap();
    c.peek(&y).unwrap()
}

#[test]
fn fig2a_put_poll_forbidden() {
    let h = histogram(|s| {
        fig2(s, |ctx, x, y| {
            ctx.rdmatso().put(y, x).unwrap();
            ctx.rdmatso().poll(N1).unwrap();
        })
    });
    assert!(!h.contains_key(&1), "{h:?}");
}

#[test]
fn fig2b_two_puts_one_poll_allowed() {
    let h = histogram(|s| {
        fig2(s, |ctx, x, y| {
            ctx.rdmatso().put(y, x).unwrap();
            ctx.rdmatso().put(y, x).unwrap();
            ctx.rdmatso().poll(N1).unwrap();
        })
    });
    assert!(h.keys().all(|&y| y <= 1), "{h:?}");
    if shows_weak_outcomes() {
        assert!(
            h.contains_key(&1),
            "the second put must be seen reading x late: {h:?}"
        );
        assert!(h.contains_key(&0), "{h:?}");
    }
}

#[test]
fn fig2c_two_puts_two_polls_forbidden() {
    let h = histogram(|s| {
        fig2(s, |ctx, x, y| {
            ctx.rdmatso().put(y, x).unwrap();
            ctx.rdmatso().put(y, x).unwrap();
            ctx.rdmatso().poll(N1).unwrap();
            ctx.rdmatso().poll(N1).unwrap();
        })
    });
    assert_eq!(h.keys().collect::<Vec<_>>(), vec![&0], "{h:?}");
}

#[test]
fn fig2d_put_wait_forbidden() {
    let h = histogram(|s| {
        fig2(s, |ctx, x, y| {
            ctx.put(y, x, D1).unwrap();
            ctx.wait(D1).unwrap();
        })
    });
    assert_eq!(h.keys().collect::<Vec<_>>(), vec![&0], "{h:?}");
}

#[test]
fn fig2e_earlier_put_other_wid_forbidden() {
    let h = histogram(|s| {
        fig2(s, |ctx, x, y| {
            ctx.put(y, x, D2).unwrap();
            ctx.put(y, x, D1).unwrap();
            ctx.wait(D1).unwrap();
        })
    });
    assert_eq!(h.keys().collect::<Vec<_>>(), vec![&0], "{h:?}");
    // And the earlier put's id was consumed by the wait's polls: waiting on it returns at once.
}

#[test]
fn fig3_cpu_cas_is_atomic() {
    let h = histogram(|s| {
        let c = cluster(1, s);
        let x = c.alloc_word(N0).unwrap();
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let ctx = c.context(N0).unwrap();
                ctx.cas(&x, 0, 1).unwrap()
            });
            sc.spawn(|| {
                let ctx = c.context(N0).unwrap();
                ctx.store(&x, 2).unwrap();
            });
        });
        c.quiesce().unwrap();
        c.peek(&x).unwrap()
    });
    // x = 1 would need the store to land between the CAS's read and its write, and be lost.
    assert!(!h.contains_key(&1), "{h:?}");
}

/// Fig. 5: store buffering through puts. `sync` is what each thread does after its put.
fn fig5(seed: u64, gf: bool) -> (u64, u64) {
    let c = cluster(2, seed);
    let x = c.alloc_word(N0).unwrap();
    let one0 = c.alloc_word(N0).unwrap();
    let y = c.alloc_word(N1).unwrap();
    let one1 = c.alloc_word(N1).unwrap();
    let gfw = [c.alloc_word(N0).unwrap(), c.alloc_word(N1).unwrap()];
    c.poke(&one0, 1).unwrap();
    c.poke(&one1, 1).unwrap();
    let side = |me: NodeId,
                other: NodeId,
                target: &loco_rdmawait::Loc,
                one: &loco_rdmawait::Loc,
                mine: &loco_rdmawait::Loc| {
        let ctx = c.context(me).unwrap();
        ctx.put(target, one, D1).unwrap();
        if gf {
            // The global fence of docs/model.md §5.2: rfence, a get of a word on the node, wait.
            let scratch = c.alloc_word(me).unwrap();
            ctx.rfence(other).unwrap();
            ctx.get(&scratch, &gfw[other.index()], D2).unwrap();
            ctx.wait(D2).unwrap();
        } else {
            ctx.wait(D1).unwrap();
        }
        ctx.load(mine).unwrap()
    };
    let (r0, r1) = std::thread::scope(|sc| {
        let a = sc.spawn(|| side(N0, N1, &y, &one0, &x));
        let b = sc.spawn(|| side(N1, N0, &x, &one1, &y));
        (a.join().unwrap(), b.join().unwrap())
    });
    c.quiesce().unwrap();
    (r0, r1)
}

#[test]
fn fig5_sb_put_wait_allowed() {
    let h = histogram(|s| fig5(s, false));
    assert!(h.keys().all(|&(a, b)| a <= 1 && b <= 1), "{h:?}");
    if shows_weak_outcomes() {
        assert!(
            h.contains_key(&(0, 0)),
            "store buffering through puts must be observable: {h:?}"
        );
    }
}

#[test]
fn fig5_sb_put_gf_forbidden() {
    let h = histogram(|s| fig5(s, true));
    assert!(!h.contains_key(&(0, 0)), "{h:?}");
}

/// One message-passing run over one queue pair: a put of the data (42) and a put of the flag,
/// in that order (or the flag first, if `flag_first`: the broken variant), towards the same node,
/// where a reader spins on the flag. Returns what the reader saw of the data, if it saw the flag.
fn message_passing(seed: u64, flag_first: bool) -> Option<u64> {
    let c = cluster(2, seed);
    let data = c.alloc_word(N1).unwrap();
    let flag = c.alloc_word(N1).unwrap();
    let src = c.alloc_words(N0, 2).unwrap();
    c.poke(&src.word(0).unwrap(), 42).unwrap();
    c.poke(&src.word(1).unwrap(), 1).unwrap();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let ctx = c.context(N0).unwrap();
            let mut puts = [(&data, src.word(0).unwrap()), (&flag, src.word(1).unwrap())];
            if flag_first {
                puts.reverse();
            }
            for (dst, from) in puts {
                ctx.put(dst, &from, D1).unwrap();
            }
            ctx.wait(D1).unwrap();
        });
        sc.spawn(|| {
            let ctx = c.context(N1).unwrap();
            for _ in 0..10_000 {
                if ctx.load(&flag).unwrap() == 1 {
                    return Some(ctx.load(&data).unwrap());
                }
                std::hint::spin_loop();
            }
            None
        })
        .join()
        .unwrap()
    })
}

/// Message passing over one queue pair: a reader that sees the flag sees the data (puts on a
/// queue pair land in order, docs/model.md §3.3), and the reader does see the flag in a good
/// share of the runs (else the check would hold vacuously).
#[test]
fn message_passing_on_one_queue_pair() {
    let h = histogram_n(runs(2_000, VERBS_RUNS), |s| message_passing(s, false));
    let seen: BTreeSet<_> = h.keys().copied().collect();
    assert!(
        seen.is_subset(&BTreeSet::from([None, Some(42)])),
        "flag seen before data: {h:?}"
    );
    // Not vacuous: "flag seen implies data seen" holds trivially if the flag is never seen.
    let flag_seen = h.get(&Some(42)).copied().unwrap_or(0);
    let n: u64 = h.values().sum();
    eprintln!("message passing: flag seen in {flag_seen} of {n} runs");
    assert!(
        flag_seen >= n / MP_FLAG_SEEN_SHARE && flag_seen > 0,
        "the reader saw the flag in only {flag_seen} of {n} runs (at least 1 in \
         {MP_FLAG_SEEN_SHARE} wanted): the test checks next to nothing: {h:?}"
    );
}

/// The check of [`message_passing_on_one_queue_pair`] can fail: with the flag put first, the
/// chaos NIC lets the reader see the flag before the data within the test's run count.
#[test]
fn message_passing_with_the_flag_first_is_caught() {
    if !shows_weak_outcomes() {
        return; // a real NIC need not show it
    }
    let runs = runs(2_000, VERBS_RUNS);
    let caught = (0..runs).find(|&s| message_passing(s, true) == Some(0));
    eprintln!("flag first: data missing at seed {caught:?}");
    assert!(caught.is_some(), "flag-first never caught in {runs} runs");
}

/// At least one run in this many must see the flag in `message_passing_on_one_queue_pair`.
const MP_FLAG_SEEN_SHARE: u64 = 10;
