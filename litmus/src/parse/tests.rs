//! Unit tests of the parser: every error kind, positioned.

use super::*;

const FIG2D: &str = "litmus fig2d-put-wait
loc x @n0
loc y @n1
thread t0 @n0 {
  put(y, x, d1)
  wait(d1)
  store(x, 1)
}
exists y = 1
expect forbidden
";

fn err(src: &str) -> String {
    parse(src, "t.litmus").unwrap_err().to_string()
}

#[test]
fn smoke() {
    let t = parse(FIG2D, "fig2d.litmus").unwrap();
    assert_eq!(t.name, "fig2d-put-wait");
    assert_eq!(t.threads.len(), 1);
    assert_eq!(t.threads[0].body.len(), 3);
    assert_eq!(t.expect, Expect::Forbidden);
    assert_eq!(t.nodes, vec![NodeId(0), NodeId(1)]);
    assert_eq!(
        t.threads[0].body[0].op,
        Op::Put {
            remote: LocId(1),
            local: LocId(0),
            wid: WidId(0)
        }
    );
    assert_eq!(t.threads[0].body[0].span, Span { line: 5, col: 3 });
}

#[test]
fn unknown_operation() {
    let src = FIG2D.replace("wait(d1)", "frob(d1)");
    assert_eq!(
        err(&src),
        format!(
            "t.litmus:6:3: unknown operation `frob`; expected one of {}",
            OPERATIONS.join(", ")
        )
    );
}

#[test]
fn local_word_required_but_remote_given() {
    let src = FIG2D.replace("put(y, x, d1)", "put(x, y, d1)");
    assert_eq!(
        err(&src),
        "t.litmus:5:10: `y` is on n1, but the source of `put` must be local to thread t0 (on n0)"
    );
    let src = FIG2D.replace("store(x, 1)", "store(y, 1)");
    assert_eq!(
        err(&src),
        "t.litmus:7:9: `y` is on n1, but the location of `store` must be local to thread t0 (on n0)"
    );
}

#[test]
fn undeclared_location() {
    let src = FIG2D.replace("store(x, 1)", "store(z, 1)");
    assert_eq!(err(&src), "t.litmus:7:9: undeclared location `z`");
    let src = FIG2D.replace("exists y = 1", "exists w = 1");
    assert_eq!(err(&src), "t.litmus:9:8: undeclared location `w`");
}

#[test]
fn missing_expect() {
    let src = FIG2D.replace("expect forbidden\n", "");
    assert_eq!(
        err(&src),
        "t.litmus:9:13: missing `expect allowed` or `expect forbidden` after the `exists` condition"
    );
    let src = FIG2D.replace("expect forbidden", "expect maybe");
    assert_eq!(
        err(&src),
        "t.litmus:10:8: expected `allowed` or `forbidden` after `expect`, found `maybe`"
    );
}

#[test]
fn other_errors_are_positioned() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "wait(d1)",
            "wait(d1, d2)",
            "6:3: `wait` takes 1 argument, found 2: wait(<d>)",
        ),
        ("wait(d1)", "r0 = wait(d1)", "6:3: `wait` returns no value"),
        ("wait(d1)", "load(x)", "6:3: `load` returns a value"),
        ("wait(d1)", "poll(m1)", "6:8: bad node `m1`"),
        ("wait(d1)", "rfence(n9)", "6:10: bad node `n9`"),
        (
            "wait(d1)",
            "store(x, y)",
            "6:12: `y` is a loc, but a value here",
        ),
        (
            "wait(d1)",
            "store(x, 1 2)",
            "6:14: expected `,` or `)`, found `2`",
        ),
        (
            "wait(d1)",
            "store(x, 1) %",
            "6:15: unexpected character `%`",
        ),
        (
            "wait(d1)",
            "store(x, 99999999999999999999)",
            "6:12: integer `99999999999999999999` does not fit",
        ),
        (
            "loc y @n1",
            "loc x @n1",
            "3:5: name `x` is already declared at line 2",
        ),
        (
            "exists y = 1",
            "exists t0:r9 = 1",
            "9:11: undeclared register `t0:r9`",
        ),
        (
            "exists y = 1",
            "exists t7:r9 = 1",
            "9:8: undeclared thread `t7`",
        ),
        (
            "litmus fig2d-put-wait",
            "litmos x",
            "1:1: expected `litmus <name>` as the first line, found `litmos`",
        ),
        (
            "}\n",
            "",
            "8:1: thread `t0` (opened at line 4) is not closed with `}`",
        ),
        (
            "wait(d1)",
            "acquire(x)",
            "6:11: `x` is a loc, but `acquire` needs a lock",
        ),
        (
            "wait(d1)",
            "r = read_sc(x)",
            "6:15: `x` is a loc, but `read_sc` needs an sc location",
        ),
    ];
    for (from, to, want) in cases {
        let src = FIG2D.replace(from, to);
        let got = err(&src);
        assert!(
            got.starts_with(&format!("t.litmus:{want}")),
            "{to}: got {got}, want {want}"
        );
    }
}

#[test]
fn every_operation_parses() {
    let src = "litmus all-ops
loc x @n0
loc y @n1
sv s = 3
sc c @n1 = 4
lock w : wlock
lock k : slock
lock m : nlock @n1
thread t0 @n0 { # a comment
  r0 = load(x)
  store(s, r0)
  r1 = cas(x, 0, r0)
  mfence()
  put(y, x, d1)
  get(x, y, d2)
  rcas(y, 1, 2, x, d1)
  rfaa(y, r1, x, d1)
  wait(d1)
  poll(n1)
  rfence(n1)
  bcast(s, all, d3)
  gf({n0, n1})
  acquire(w)
  release(w)
  acquire(k)
  acquire(m)
  release(m)
  release(k)
  giveup(m)
  giveup(w)
  r2 = read_sc(c)
  write_sc(c, 5)
  r3 = cas_sc(c, 5, 6)
  r4 = faa_sc(c, 1)
}
exists t0:r2 = 4 /\\ s@n1 = 3 /\\ c = 7
expect allowed
";
    let t = parse(src, "x").unwrap();
    assert_eq!(t.threads[0].body.len(), 25);
    assert_eq!(t.threads[0].body[19].op, Op::GiveUp(LockId(2)));
    assert_eq!(
        t.threads[0].body[11].op,
        Op::Bcast {
            sv: SvId(0),
            nodes: vec![NodeId(0), NodeId(1)],
            wid: WidId(2)
        }
    );
    assert_eq!(t.exists.atoms.len(), 3);
    assert!(t.locs[0].written && t.locs[1].written);
}

#[test]
fn giveup_takes_a_lock_the_thread_does_not_hold() {
    let src = "litmus g
lock l : nlock @n1
loc x @n0
thread t0 @n0 {
  acquire(l)
  giveup(l)
  release(l)
}
exists x = 0
expect allowed
";
    let e = err(src);
    assert!(
        e.starts_with("t.litmus:6:10:") && e.contains("`l` is held here (acquired at line 5)"),
        "{e}"
    );
    let e = err(&src.replace("giveup(l)", "giveup(x)"));
    assert!(e.contains("`giveup` needs a lock"), "{e}");
    let e = err(&src.replace("giveup(l)", "giveup(l, l)"));
    assert!(e.contains("giveup(<l>)"), "{e}");
    // At most MARKS (16) tickets of a lock that is given up.
    let many = format!(
        "litmus g\nlock l : nlock @n1\nloc x @n0\nthread t0 @n0 {{\n  giveup(l)\n{}}}\nexists x = 0\nexpect allowed\n",
        "  acquire(l)\n  release(l)\n".repeat(16)
    );
    let e = err(&many);
    assert!(
        e.contains("too large: 17 acquires and give-ups of `l`") && e.contains("16"),
        "{e}"
    );
    let fine = many.replacen("  acquire(l)\n  release(l)\n", "", 1);
    parse(&fine, "t.litmus").unwrap();
}

#[test]
fn an_sv_condition_names_a_node_of_the_test() {
    let src = "litmus sv-far
sv s
thread t0 @n0 {
  store(s, 1)
}
exists s@n5 = 0
expect allowed
";
    let e = err(src);
    assert!(e.contains("a node of the test") && e.contains("n5"), "{e}");
    // A node the test has is fine, and the condition adds none.
    let t = parse(&src.replace("s@n5", "s@n0"), "t.litmus").unwrap();
    assert_eq!(t.nodes, vec![NodeId(0)]);
}

#[test]
fn atomics_setting() {
    assert_eq!(parse(FIG2D, "t").unwrap().atomics, FailedCas::Reads);
    let with = |line: &str| FIG2D.replacen("loc x @n0", &format!("{line}\nloc x @n0"), 1);
    assert_eq!(
        parse(&with("atomics rxe"), "t").unwrap().atomics,
        FailedCas::WritesBack
    );
    assert_eq!(
        parse(&with("atomics model"), "t").unwrap().atomics,
        FailedCas::Reads
    );
    assert_eq!(
        err(&with("atomics mlx5")),
        "t.litmus:2:9: expected `model` or `rxe` after `atomics`, found `mlx5`"
    );
    assert_eq!(
        err(&with("atomics rxe now")),
        "t.litmus:2:13: expected end of line, found `now`"
    );
    assert_eq!(
        err(&with("atomics rxe\natomics model")),
        "t.litmus:3:1: setting `atomics` is already declared at line 2"
    );
}

#[test]
fn a_takeover_needs_a_handoff_on_its_node() {
    let src = "litmus h
lock l : wlock
loc x @n0
thread t0 @n0 {
  acquire(l)
  handoff(l)
}
thread t1 @n0 {
  takeover(l)
  release(l)
}
exists x = 0
expect allowed
";
    let t = parse(src, "t.litmus").unwrap();
    assert_eq!(t.threads[0].body[1].op, Op::Handoff(LockId(0)));
    assert_eq!(t.threads[1].body[0].op, Op::Takeover(LockId(0)));
    // On another node, nobody hands it over there.
    let e = err(&src.replace("thread t1 @n0", "thread t1 @n1"));
    assert!(
        e.contains("a takeover of `l` needs a handoff of it by another thread of n1"),
        "{e}"
    );
    // A handoff needs the lock held; a takeover a lock not held.
    let e = err(&src.replace("  acquire(l)\n  handoff(l)", "  handoff(l)"));
    assert!(
        e.contains("handoff of `l` without a matching acquire"),
        "{e}"
    );
    let e = err(&src.replace(
        "  takeover(l)\n",
        "  acquire(l)\n  takeover(l)\n  release(l)\n",
    ));
    assert!(e.contains("a takeover would deadlock"), "{e}");
}

/// A `TooLarge` says what its limit counts by its `unit`, not by what its `what` reads (a
/// count whose `what` read "the input" was shown as a byte limit); the messages are as before.
#[test]
fn too_large_says_its_unit() {
    let kind = |src: &str| parse(src, "t.litmus").unwrap_err().kind;
    let big = format!("# {}\n", "x".repeat(MAX_INPUT_BYTES));
    let ParseErrorKind::TooLarge { what, max, unit } = kind(&big) else {
        panic!("not TooLarge");
    };
    assert_eq!(
        (what.as_str(), max, unit),
        ("the input", MAX_INPUT_BYTES, LimitUnit::InputBytes)
    );
    assert_eq!(
        err(&big),
        format!("t.litmus:1:1: too large: more than {MAX_INPUT_BYTES} bytes (the limit for a litmus test)")
    );
    let long = format!("litmus {}\n", "a".repeat(MAX_NAME_LEN + 1));
    assert!(matches!(
        kind(&long),
        ParseErrorKind::TooLarge {
            unit: LimitUnit::Count,
            max: MAX_NAME_LEN,
            ..
        }
    ));
    assert_eq!(
        err(&long),
        format!("t.litmus:1:8: too large: a name of 65 characters (the limit is {MAX_NAME_LEN})")
    );
    // The unit decides, whatever `what` reads.
    let count = ParseErrorKind::TooLarge {
        what: "the input".into(),
        max: 3,
        unit: LimitUnit::Count,
    };
    assert_eq!(count.to_string(), "too large: the input (the limit is 3)");
    let bytes = ParseErrorKind::TooLarge {
        what: "this file".into(),
        max: 3,
        unit: LimitUnit::InputBytes,
    };
    assert_eq!(
        bytes.to_string(),
        "too large: more than 3 bytes (the limit for a litmus test)"
    );
}

/// A `wait(d)` that no earlier operation of its own thread is tagged with waits for nothing: a
/// typo of the work id, or a wait meant for another thread's put (work ids belong to a thread),
/// silently changed the verdict instead of being an error.
#[test]
fn a_wait_needs_an_earlier_operation_of_its_thread_with_that_work_id() {
    let e = err(&FIG2D.replace("wait(d1)", "wait(d2)"));
    assert_eq!(
        e,
        "t.litmus:6:8: `wait(d2)` would wait for nothing: no earlier operation of thread t0 is \
         tagged `d2` (tag a put, get, rcas, rfaa or bcast of this thread with it first)"
    );
    // A wait before the operation it names waits for nothing too.
    let e = err(&FIG2D.replace(
        "  put(y, x, d1)\n  wait(d1)\n",
        "  wait(d1)\n  put(y, x, d1)\n",
    ));
    assert!(
        e.starts_with("t.litmus:5:8: `wait(d1)` would wait for nothing"),
        "{e}"
    );
    // Another thread's operations are not this thread's.
    let other = FIG2D.replace(
        "exists",
        "thread t1 @n1 {\n  wait(d1)\n  r = load(y)\n}\nexists",
    );
    let e = err(&other);
    assert_eq!(
        e,
        "t.litmus:10:8: `wait(d1)` would wait for nothing: no earlier operation of thread t1 is \
         tagged `d1`; thread t0's operations are, but work ids belong to a thread: t1 cannot \
         wait for them"
    );
    // Every tagging operation counts.
    for tagged in [
        "put(y, x, d2)",
        "get(x, y, d2)",
        "rcas(y, 0, 1, x, d2)",
        "rfaa(y, 1, x, d2)",
    ] {
        parse(
            &FIG2D.replace("wait(d1)", &format!("{tagged}\n  wait(d2)")),
            "t",
        )
        .unwrap();
    }
    let sv = "litmus b\nsv s\nthread t0 @n0 {\n  bcast(s, all, d1)\n  wait(d1)\n}\nthread t1 @n1 {\n}\nexists s@n1 = 0\nexpect allowed\n";
    parse(sv, "t").unwrap();
}

/// A file that an editor saved with a byte order mark parses as without it; before, it was
/// refused with "unexpected character" and the invisible mark between the backquotes.
#[test]
fn a_byte_order_mark_at_the_start_is_not_text() {
    let t = parse(&format!("\u{feff}{FIG2D}"), "t.litmus").unwrap();
    assert_eq!(t, parse(FIG2D, "t.litmus").unwrap());
    // Anywhere else it is an error that shows what it is.
    let e = err(&FIG2D.replace("wait(d1)", "wait(d1)\u{feff}"));
    assert_eq!(e, "t.litmus:6:11: unexpected character U+FEFF");
}

/// A character no token starts with is named by its code point when it is not printable ASCII:
/// a zero-width space or a non-breaking hyphen pasted from a web page is told apart from what it
/// looks like.
#[test]
fn an_unexpected_character_that_is_not_plain_ascii_shows_its_code_point() {
    let e = err(&FIG2D.replace("store(x, 1)", "store(x,\u{200b} 1)"));
    assert_eq!(e, "t.litmus:7:11: unexpected character U+200B");
    let e = err(&FIG2D.replace("loc x @n0", "loc é @n0"));
    assert_eq!(e, "t.litmus:2:5: unexpected character `é` (U+00E9)");
    let e = err(&FIG2D.replace("store(x, 1)", "store(x, 1) %"));
    assert_eq!(e, "t.litmus:7:15: unexpected character `%`");
}

/// Two spellings of other litmus formats: a negative integer, and a disjunction `\/`. Before,
/// both were only "unexpected character".
#[test]
fn a_sign_or_a_disjunction_is_an_error_that_says_why() {
    let e = err(&FIG2D.replace("exists y = 1", "exists y = -1"));
    assert_eq!(
        e,
        "t.litmus:9:12: expected an integer from 0 to 2^64 - 1 (integers have no sign), found `-1`"
    );
    let e = err(&FIG2D.replace("exists y = 1", "exists y = 1 \\/ x = 1"));
    assert_eq!(
        e,
        "t.litmus:9:14: expected `/\\` (a condition is atoms joined by `/\\`; there is no \
         disjunction: write one test per case), found `\\/`"
    );
}

/// A condition naming a register without its thread (`exists r0 = 1`) says how to write it;
/// before, it was an "undeclared location".
#[test]
fn a_register_in_a_condition_without_its_thread_says_how_to_name_it() {
    let src = FIG2D.replace("store(x, 1)", "r0 = load(x)");
    let e = err(&src.replace("exists y = 1", "exists r0 = 1"));
    assert_eq!(
        e,
        "t.litmus:9:8: expected a register with its thread, such as `t0:r0`, found `r0`"
    );
    // A name that is nobody's register is still an undeclared location.
    let e = err(&src.replace("exists y = 1", "exists r1 = 1"));
    assert_eq!(e, "t.litmus:9:8: undeclared location `r1`");
}

/// A thread named like a node (`thread n0 @n0`) is refused, as any other name written like a
/// node is: its traces read `n0->n1` for the thread's queue pair to n1. Before, it was accepted.
#[test]
fn a_thread_cannot_be_named_like_a_node() {
    let e = err(&FIG2D.replace("thread t0", "thread n0"));
    assert_eq!(
        e,
        "t.litmus:4:8: expected a thread name that is not a node name (such as `t0`), found `n0`"
    );
    parse(&FIG2D.replace("thread t0", "thread n0x"), "t").unwrap();
}

/// Three slips of a newcomer, each said in the format's words: a node list given as two
/// arguments (`gf(n0, n1)`: the usage now says what `<nodes>` is), a C-style `;` (before,
/// "unexpected character"), and `r := load(x)` (before, "unknown operation `r`").
#[test]
fn a_node_list_a_semicolon_or_a_colon_equals_is_an_error_that_says_how_to_write_it() {
    let e = err(&FIG2D.replace("wait(d1)", "gf(n0, n1)"));
    assert_eq!(
        e,
        "t.litmus:6:3: `gf` takes 1 argument, found 2: gf(<nodes>), <nodes> being a node, a set \
         `{n1, n2}` or `all`"
    );
    let e = err(&FIG2D.replace("wait(d1)", "wait(d1);"));
    assert_eq!(
        e,
        "t.litmus:6:11: expected end of line (one statement per line, no `;`), found `;`"
    );
    let e = err(&FIG2D.replace("store(x, 1)", "r := load(x)"));
    assert_eq!(
        e,
        "t.litmus:7:5: expected `=` (a result is written `<r> = load(<x>)`), found `:`"
    );
}
