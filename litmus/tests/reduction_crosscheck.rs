//! The explorer's partial-order reduction against the unreduced explorer, on every shipped
//! litmus test (`tests/litmus/*.litmus`): the same final outcomes, and stuck states in both or
//! in neither. No file is skipped: one the unreduced explorer cannot finish within its budget
//! fails the test. Prints which files were compared, with both state counts.
//!
//! Release mode only (the unreduced graphs reach millions of states):
//! `cargo test --release -p loco-litmus --test reduction_crosscheck`.

mod common;

use std::time::Instant;

use loco_litmus::explore::{explore_with, Config};

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "release only: cargo test --release -p loco-litmus --test reduction_crosscheck"
)]
fn reduction_keeps_every_outcome_of_every_shipped_test() {
    let files = common::shipped_files();
    let mut full = Config::default();
    full.reduction = false;
    full.max_states = 50_000_000;
    full.max_memory = 3 << 30;
    let start = Instant::now();
    eprintln!(
        "{:<32} {:>10} {:>12} {:>9}",
        "test", "reduced", "unreduced", "outcomes"
    );
    for f in &files {
        let t = loco_litmus::parse_file(f).unwrap_or_else(|e| panic!("{e}"));
        let fast =
            explore_with(&t, &Config::default()).unwrap_or_else(|e| panic!("{}: {e}", t.name));
        let slow = explore_with(&t, &full).unwrap_or_else(|e| panic!("{}: unreduced: {e}", t.name));
        let keys = |e: &loco_litmus::Exploration| e.outcomes.keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&fast), keys(&slow), "{}", t.name);
        assert_eq!(fast.stuck > 0, slow.stuck > 0, "{}", t.name);
        assert!(fast.states <= slow.states, "{}", t.name);
        eprintln!(
            "{:<32} {:>10} {:>12} {:>9}",
            t.name,
            fast.states,
            slow.states,
            fast.outcomes.len()
        );
    }
    eprintln!(
        "compared all {} shipped tests in {:.1?}",
        files.len(),
        start.elapsed()
    );
}

/// The three-node IRIW test of SC reads (4 threads; `tests/data/sc-iriw.litmus`): too big for
/// the unreduced explorer, so its reduced outcomes are checked against an independent
/// enumeration of every interleaving of the SC operations (sequential consistency by
/// definition): the same set.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "release only: cargo test --release -p loco-litmus --test reduction_crosscheck"
)]
fn iriw_of_sc_reads_has_exactly_the_sc_outcomes() {
    use std::collections::BTreeSet;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/sc-iriw.litmus");
    let t = loco_litmus::parse_file(std::path::Path::new(path)).unwrap();
    let start = Instant::now();
    let e = explore_with(&t, &Config::default()).unwrap();
    eprintln!("sc-iriw: {} states in {:.2?}", e.states, start.elapsed());
    let got: BTreeSet<Vec<u64>> = e.outcomes.keys().map(|o| o.0.clone()).collect();
    // Threads: t0 writes x, t1 writes y, t2 reads x then y, t3 reads y then x.
    #[derive(Clone, Copy)]
    enum Op {
        W(usize),
        R(usize),
    }
    let progs: [&[Op]; 4] = [
        &[Op::W(0)],
        &[Op::W(1)],
        &[Op::R(0), Op::R(1)],
        &[Op::R(1), Op::R(0)],
    ];
    let mut want = BTreeSet::new();
    fn go(
        progs: &[&[Op]; 4],
        pcs: [usize; 4],
        mem: [u64; 2],
        regs: [[u64; 2]; 4],
        out: &mut BTreeSet<Vec<u64>>,
    ) {
        let mut done = true;
        for t in 0..4 {
            if let Some(&op) = progs[t].get(pcs[t]) {
                done = false;
                let (mut pcs, mut mem, mut regs) = (pcs, mem, regs);
                match op {
                    Op::W(x) => mem[x] = 1,
                    Op::R(x) => regs[t][pcs[t]] = mem[x],
                }
                pcs[t] += 1;
                go(progs, pcs, mem, regs, out);
            }
        }
        if done {
            out.insert(vec![
                regs[2][0], regs[2][1], regs[3][0], regs[3][1], mem[0], mem[1],
            ]);
        }
    }
    go(&progs, [0; 4], [0; 2], [[0; 2]; 4], &mut want);
    let names: Vec<_> = e.observables.iter().map(|o| t.observable_name(o)).collect();
    assert_eq!(names, ["t2:r0", "t2:r1", "t3:r0", "t3:r1", "x", "y"]);
    assert_eq!(got, want);
    assert_eq!(want.len(), 15);
    assert!(!e.verdict(&t).reachable);
}

/// The give-up tests with puts (`tests/data/{w,s}lock-giveup-puts.litmus`, three nodes): too big
/// for the unreduced explorer in CI's time, so only their verdicts are checked here, and that
/// every execution finishes (a given-up ticket is always passed on). The strong lock's forbids
/// the stale read although the ticket given up is passed on without a global fence of its own;
/// the weak lock's still allows it, as Fig. 8(b) does without the give-up.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "release only: cargo test --release -p loco-litmus --test reduction_crosscheck"
)]
fn giveup_tests_with_puts_keep_their_verdicts() {
    use loco_litmus::ast::Expect;
    for (file, expect) in [
        ("slock-giveup-puts.litmus", Expect::Forbidden),
        ("wlock-giveup-puts.litmus", Expect::Allowed),
    ] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(file);
        let t = loco_litmus::parse_file(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.expect, expect, "{file}");
        let start = Instant::now();
        let e = explore_with(&t, &Config::default()).unwrap_or_else(|e| panic!("{file}: {e}"));
        eprintln!("{}: {} states in {:.2?}", t.name, e.states, start.elapsed());
        assert_eq!(e.verdict(&t).model(), expect, "{file}");
        assert_eq!(e.stuck, 0, "{file}: a stuck execution");
    }
}
