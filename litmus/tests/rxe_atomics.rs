//! The locks and the SC library are also right on Soft-RoCE, whose failed remote CAS writes back
//! the value it read (docs/verbs-notes.md, pitfall 9; `FailedCas::WritesBack`): every shipped
//! litmus test that uses a lock or an SC location keeps its verdict when explored that way, and
//! every execution still finishes (no given-up ticket or release is lost to a failing CAS).
//! `tests/litmus/nlock-rxe-pass-on-race.litmus` is the case that failed with the paper's put
//! release.

mod common;

use loco_litmus::ast::FailedCas;
use loco_litmus::explore::{explore_with, Config};

fn check(path: &std::path::Path) -> bool {
    let mut t = loco_litmus::parse_file(path).unwrap_or_else(|e| panic!("{e}"));
    if t.locks.is_empty() && t.scs.is_empty() {
        return false;
    }
    t.atomics = FailedCas::WritesBack;
    let e = explore_with(&t, &Config::default()).unwrap_or_else(|e| panic!("{}: {e}", t.name));
    assert_eq!(
        e.verdict(&t).model(),
        t.expect,
        "{}: verdict under rxe atomics",
        t.name
    );
    assert_eq!(
        e.stuck, 0,
        "{}: a stuck execution under rxe atomics",
        t.name
    );
    true
}

#[test]
fn lock_and_sc_tests_keep_their_verdicts_under_rxe_atomics() {
    let checked = common::shipped_files().iter().filter(|f| check(f)).count();
    assert!(
        checked >= 15,
        "only {checked} lock or SC tests among the shipped ones"
    );
}

/// The three-node give-up tests with puts (`tests/data`): release only, for their size.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "release only: cargo test --release -p loco-litmus --test rxe_atomics"
)]
fn giveup_tests_with_puts_keep_their_verdicts_under_rxe_atomics() {
    for file in ["slock-giveup-puts.litmus", "wlock-giveup-puts.litmus"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(file);
        assert!(check(&path), "{file} has a lock");
    }
}

/// The user's own `rcas` against a put: lost under rxe atomics, not in the model.
#[test]
fn a_failed_rcas_loses_a_put_only_under_rxe_atomics() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/litmus");
    let model = loco_litmus::parse_file(&dir.join("fig6b-failed-rcas-vs-put.litmus")).unwrap();
    let rxe = loco_litmus::parse_file(&dir.join("rxe-failed-rcas-vs-put.litmus")).unwrap();
    assert_eq!(model.atomics, FailedCas::Reads);
    assert_eq!(rxe.atomics, FailedCas::WritesBack);
    let mut both = model.clone();
    both.atomics = FailedCas::WritesBack;
    for (t, reachable) in [(&model, false), (&both, true)] {
        let e = explore_with(t, &Config::default()).unwrap();
        assert_eq!(e.verdict(t).reachable, reachable, "{:?}", t.atomics);
    }
}
