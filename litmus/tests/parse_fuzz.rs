//! The parser never panics, whatever the input: arbitrary text and bytes, and every shipped
//! test with random bounded edits. Errors point inside the input. Inputs past the parser's
//! limits (size, statements, declarations, names, condition atoms) are errors, found quickly.

mod common;

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
            // A parsed test is valid: the explorer and the runner take it as it is.
            if let Err(e) = t.validate() {
                panic!("a parsed test fails validation: {e}\n{src}");
            }
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

/// Every shipped test (`tests/litmus/*.litmus`), sorted by name.
fn shipped() -> Vec<String> {
    common::shipped_files()
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

/// Writes `bytes` to a temporary file and parses it with `parse_file`.
fn check_file(bytes: &[u8]) -> Result<loco_litmus::Test, loco_litmus::Error> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let p = std::env::temp_dir().join(format!(
        "loco-fuzz-{}-{}.litmus",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&p, bytes).unwrap();
    let r = loco_litmus::parse_file(&p);
    std::fs::remove_file(&p).ok();
    r
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 1500 } else { 20000 }))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        match check_file(&bytes) {
            Ok(_) => prop_assert!(std::str::from_utf8(&bytes).is_ok()),
            Err(loco_litmus::Error::Parse(e)) => {
                if std::str::from_utf8(&bytes).is_err() {
                    prop_assert_eq!(e.kind, loco_litmus::ParseErrorKind::NotUtf8);
                }
                prop_assert!(e.span.line >= 1 && e.span.col >= 1);
            }
            Err(e) => prop_assert!(false, "{}", e),
        }
    }

    #[test]
    fn every_shipped_test_edited_never_panics(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec(edit(), 1..8),
    ) {
        let tests = shipped_cached();
        check(&apply(&tests[which.index(tests.len())], &edits));
    }

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

fn shipped_cached() -> &'static [String] {
    static S: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    S.get_or_init(shipped)
}

/// Non-UTF-8 bytes: an error at the first bad byte.
#[test]
fn non_utf8_is_an_error_at_its_byte() {
    let mut bytes = b"litmus x\nloc a @n0\nthread t0 @n0 {\n  store(a, 1)".to_vec();
    bytes.extend_from_slice(&[0xff, 0xfe]);
    let Err(loco_litmus::Error::Parse(e)) = check_file(&bytes) else {
        panic!("parsed");
    };
    assert_eq!(e.kind, loco_litmus::ParseErrorKind::NotUtf8);
    assert_eq!((e.span.line, e.span.col), (4, 14), "{e}");
}

/// Inputs past each limit are refused with `TooLarge`, quickly, whether read from a file or
/// given as text.
#[test]
fn oversized_inputs_are_errors() {
    use loco_litmus::parse::{
        MAX_ATOMS, MAX_DECLARATIONS, MAX_INPUT_BYTES, MAX_NAME_LEN, MAX_STATEMENTS,
    };
    let start = std::time::Instant::now();
    let too_large = |src: &str| match loco_litmus::parse(src, "big") {
        Err(e) => matches!(e.kind, loco_litmus::ParseErrorKind::TooLarge { .. }),
        Ok(_) => false,
    };
    // A huge file: refused without being read whole (16 MiB of comment).
    let huge = format!("# {}\n", "x".repeat(16 << 20));
    assert!(too_large(&huge));
    match check_file(huge.as_bytes()) {
        Err(loco_litmus::Error::Parse(e)) => {
            assert!(e.to_string().contains(&MAX_INPUT_BYTES.to_string()), "{e}")
        }
        r => panic!("{r:?}"),
    }
    let head = "litmus big\nloc x @n0\n";
    let tail = "exists x = 0\nexpect allowed\n";
    let stmts = |n| {
        format!(
            "{head}thread t0 @n0 {{\n{}}}\n{tail}",
            "  store(x, 1)\n".repeat(n)
        )
    };
    assert!(loco_litmus::parse(&stmts(MAX_STATEMENTS), "ok").is_ok());
    assert!(too_large(&stmts(MAX_STATEMENTS + 1)));
    let decls = |n: usize| {
        let d: String = (0..n).map(|i| format!("loc v{i} @n0\n")).collect();
        format!("{head}{d}thread t0 @n0 {{\n  store(x, 1)\n}}\n{tail}")
    };
    assert!(loco_litmus::parse(&decls(MAX_DECLARATIONS - 1), "ok").is_ok());
    assert!(too_large(&decls(MAX_DECLARATIONS)));
    let name = |n| {
        format!(
            "litmus {}\nloc x @n0\nthread t0 @n0 {{\n}}\n{tail}",
            "a".repeat(n)
        )
    };
    assert!(loco_litmus::parse(&name(MAX_NAME_LEN), "ok").is_ok());
    assert!(too_large(&name(MAX_NAME_LEN + 1)));
    let atoms = |n| {
        let c = vec!["x = 0"; n].join(" /\\ ");
        format!("{head}thread t0 @n0 {{\n}}\nexists {c}\nexpect allowed\n")
    };
    assert!(loco_litmus::parse(&atoms(MAX_ATOMS), "ok").is_ok());
    assert!(too_large(&atoms(MAX_ATOMS + 1)));
    // Too many threads, and integers past 64 bits.
    let threads: String = (0..=loco_litmus::MAX_THREADS)
        .map(|i| format!("thread t{i} @n0 {{\n}}\n"))
        .collect();
    assert!(loco_litmus::parse(&format!("{head}{threads}{tail}"), "t").is_err());
    assert!(loco_litmus::parse(
        &format!("{head}loc y @n0 = 18446744073709551616\n{tail}"),
        "i"
    )
    .is_err());
    eprintln!("limits checked in {:?}", start.elapsed());
    assert!(start.elapsed() < std::time::Duration::from_secs(60));
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
