//! The global fence may read each node's dummy word with a remote CAS that cannot succeed instead
//! of the paper's get (`FenceRead::Cas`, docs/model.md §5.2 "The fence's read"): the verbs
//! backend does so on Soft-RoCE, where a read costs 1.6-1.8 times an atomic. Every shipped litmus test
//! keeps its verdict with that fence, in the model and, for the tests of locks and SC locations,
//! with Soft-RoCE's failed CAS that writes back (`atomics rxe`), as the device runs them.

mod common;

use loco_litmus::ast::{FailedCas, FenceRead};
use loco_litmus::explore::{explore_with, Config};

/// Explores `path` with the CAS fence (and `atomics` if given); `true` if the test fences at all.
fn check(path: &std::path::Path, atomics: Option<FailedCas>) -> bool {
    let mut t = loco_litmus::parse_file(path).unwrap_or_else(|e| panic!("{e}"));
    let src = std::fs::read_to_string(path).unwrap();
    // gf itself, the strong lock's release and handover, the node lock's handover, and the SC
    // library's operations (over node locks) all fence.
    let fences = src.contains("gf(") || !t.locks.is_empty() || !t.scs.is_empty();
    if let Some(a) = atomics {
        if t.locks.is_empty() && t.scs.is_empty() {
            return false;
        }
        t.atomics = a;
    }
    t.fence = FenceRead::Cas;
    let e = explore_with(&t, &Config::default()).unwrap_or_else(|e| panic!("{}: {e}", t.name));
    assert_eq!(
        e.verdict(&t).model(),
        t.expect,
        "{}: verdict with the CAS fence ({:?})",
        t.name,
        t.atomics
    );
    assert_eq!(
        e.stuck, 0,
        "{}: a stuck execution with the CAS fence",
        t.name
    );
    fences
}

#[test]
fn every_shipped_test_keeps_its_verdict_with_the_cas_fence() {
    let fencing = common::shipped_files()
        .iter()
        .filter(|f| check(f, None))
        .count();
    assert!(fencing >= 15, "only {fencing} shipped tests fence");
}

#[test]
fn lock_and_sc_tests_keep_their_verdicts_with_the_cas_fence_under_rxe_atomics() {
    let checked = common::shipped_files()
        .iter()
        .filter(|f| check(f, Some(FailedCas::WritesBack)))
        .count();
    assert!(checked >= 15, "only {checked} lock or SC tests");
}

/// A parsed `fence cas` line sets it; `fence` twice, or another word, is refused.
#[test]
fn the_fence_line_parses() {
    let base =
        "litmus t\nsv x\nthread t0 @n0 {\n  r0 = load(x)\n}\nexists t0:r0 = 0\nexpect allowed\n";
    let with = |line: &str| base.replacen("sv x", &format!("{line}\nsv x"), 1);
    let t = loco_litmus::parse(&with("fence cas"), "t").unwrap();
    assert_eq!(t.fence, FenceRead::Cas);
    let t = loco_litmus::parse(base, "t").unwrap();
    assert_eq!(t.fence, FenceRead::Get);
    assert!(loco_litmus::parse(&with("fence cas\nfence get"), "t").is_err());
    let e = loco_litmus::parse(&with("fence faa"), "t").unwrap_err();
    assert!(e.to_string().contains("`get` or `cas`"), "{e}");
}
