//! The parser never panics, whatever the input: arbitrary text, and valid tests with random
//! edits. Errors point inside the input.

use proptest::prelude::*;

const SEED_TESTS: &[&str] = &[
    include_str!("../../tests/litmus/fig8f-nlock-same-node.litmus"),
    include_str!("../../tests/litmus/fig5-sb-put-gf.litmus"),
    include_str!("../../tests/litmus/sv-sb-bcast-gf.litmus"),
    include_str!("../../tests/litmus/sc-faa-cas.litmus"),
    include_str!("../../tests/litmus/fig6a-rcas-vs-cpu-store.litmus"),
];

/// Pieces of the format's syntax, so that random edits reach deep into the grammar.
const TOKENS: &[&str] = &[
    "litmus",
    "loc",
    "sv",
    "sc",
    "lock",
    "thread",
    "exists",
    "expect",
    "allowed",
    "forbidden",
    "wlock",
    "slock",
    "nlock",
    "@n0",
    "@n1",
    "@n9",
    "n2",
    "{",
    "}",
    "(",
    ")",
    ",",
    "=",
    ":",
    "/\\",
    "#",
    "\n",
    " ",
    "all",
    "{n0, n1}",
    "load",
    "store",
    "cas",
    "put",
    "get",
    "rcas",
    "rfaa",
    "wait",
    "poll",
    "rfence",
    "bcast",
    "gf",
    "acquire",
    "release",
    "read_sc",
    "write_sc",
    "cas_sc",
    "faa_sc",
    "mfence()",
    "x",
    "y",
    "r0",
    "t0:r0",
    "d1",
    "0",
    "1",
    "18446744073709551615",
    "18446744073709551616",
    "é",
    "\t",
    "\r\n",
];

fn check(src: &str) {
    match loco_litmus::parse(src, "fuzz") {
        Ok(t) => {
            // A parsed test is usable: its observables have names.
            for o in t.observables() {
                assert!(!t.observable_name(&o).is_empty());
            }
        }
        Err(e) => {
            let lines = src.lines().count().max(1) as u32;
            assert!(
                e.span.line >= 1 && e.span.line <= lines,
                "{e} ({lines} lines)"
            );
            assert!(e.span.col >= 1, "{e}");
            assert!(e.to_string().starts_with("fuzz:"));
        }
    }
}

#[derive(Debug, Clone)]
enum Edit {
    Delete(usize, usize),
    Insert(usize, usize),
    SwapLines(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 0usize..12).prop_map(|(a, n)| Edit::Delete(a, n)),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(a, t)| Edit::Insert(a, t)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
    ]
}

fn apply(src: &str, edits: &[Edit]) -> String {
    let mut s: Vec<char> = src.chars().collect();
    for e in edits {
        match *e {
            Edit::Delete(a, n) => {
                let a = a % (s.len() + 1);
                let b = (a + n).min(s.len());
                s.drain(a..b);
            }
            Edit::Insert(a, t) => {
                let a = a % (s.len() + 1);
                s.splice(a..a, TOKENS[t].chars());
            }
            Edit::SwapLines(a, b) => {
                let text: String = s.iter().collect();
                let mut lines: Vec<&str> = text.lines().collect();
                if !lines.is_empty() {
                    let n = lines.len();
                    lines.swap(a % n, b % n);
                }
                s = lines.join("\n").chars().collect();
            }
        }
    }
    s.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 1500 } else { 20000 }))]

    #[test]
    fn arbitrary_text_never_panics(src in "\\PC{0,300}") {
        check(&src);
    }

    #[test]
    fn token_soup_never_panics(toks in prop::collection::vec(0..TOKENS.len(), 0..80)) {
        let src: String = toks.iter().map(|&t| TOKENS[t]).collect::<Vec<_>>().join(" ");
        check(&src);
    }

    #[test]
    fn edited_tests_never_panic(which in 0..SEED_TESTS.len(), edits in prop::collection::vec(edit(), 1..6)) {
        check(&apply(SEED_TESTS[which], &edits));
    }
}

#[test]
fn every_project_test_parses() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/litmus");
    for f in std::fs::read_dir(dir).unwrap() {
        let p = f.unwrap().path();
        if p.extension().is_some_and(|e| e == "litmus") {
            loco_litmus::parse_file(&p).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}
