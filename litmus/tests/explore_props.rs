//! Properties of the explorer on random small programs of CPU, rdmawait and RMW operations:
//! the partial-order reduction keeps every outcome, and exploration is deterministic.

use loco_litmus::explore::{explore_with, Config};
use proptest::prelude::*;

/// Local words of node m: `p{m}`, `q{m}`; `x` sits on n2, which has no thread.
const ANY: &[&str] = &["p0", "q0", "p1", "q1", "x"];

fn stmt(node: usize, i: usize) -> impl Strategy<Value = String> {
    let local = prop_oneof![Just(format!("p{node}")), Just(format!("q{node}"))];
    let any = prop::sample::select(ANY);
    let d = prop::sample::select(&["d1", "d2"][..]);
    let k = 1u64..3;
    (0..11usize, local, any, d, k, 0usize..3).prop_map(move |(op, l, a, d, k, n)| match op {
        0 => format!("r{i} = load({l})"),
        1 => format!("store({l}, {k})"),
        2 => format!("r{i} = cas({l}, 0, {k})"),
        3 => "mfence()".to_string(),
        4 => format!("put({a}, {l}, {d})"),
        5 => format!("get({l}, {a}, {d})"),
        6 => format!("rfaa({a}, 1, {l}, {d})"),
        7 => format!("rcas({a}, 0, {k}, {l}, {d})"),
        8 => format!("wait({d})"),
        9 => format!("rfence(n{n})"),
        _ => format!("poll(n{n})"),
    })
}

fn thread(node: usize) -> impl Strategy<Value = Vec<String>> {
    (1usize..5)
        .prop_flat_map(move |len| (0..len).map(|i| stmt(node, i).boxed()).collect::<Vec<_>>())
}

fn program() -> impl Strategy<Value = String> {
    (thread(0), thread(1)).prop_map(|(a, b)| {
        let mut s = String::from(
            "litmus random\nloc p0 @n0\nloc q0 @n0 = 5\nloc p1 @n1\nloc q1 @n1 = 7\nloc x @n2\n",
        );
        for (t, body) in [a, b].iter().enumerate() {
            s += &format!("thread t{t} @n{t} {{\n");
            // A wait needs an earlier operation of its thread with its work id (the parser
            // refuses a wait for nothing); one without is left out.
            let mut tagged = Vec::new();
            for st in body {
                if let Some(d) = st.strip_prefix("wait(").and_then(|w| w.strip_suffix(')')) {
                    if !tagged.contains(&d) {
                        continue;
                    }
                } else if let Some(d) = st.strip_suffix(')').and_then(|w| w.rsplit(", ").next()) {
                    tagged.push(d);
                }
                s += &format!("  {st}\n");
            }
            s += "}\n";
        }
        s + "exists x = 0\nexpect allowed\n"
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 64 } else { 1000 }))]

    #[test]
    fn reduction_keeps_every_outcome(src in program()) {
        let test = loco_litmus::parse(&src, "random").unwrap();
        let mut full = Config::default();
        full.reduction = false;
        full.max_states = 60_000;
        let Ok(slow) = explore_with(&test, &full) else {
            return Ok(()); // too big unreduced: skip
        };
        let fast = explore_with(&test, &Config::default()).unwrap();
        let keys = |e: &loco_litmus::Exploration| e.outcomes.keys().cloned().collect::<Vec<_>>();
        prop_assert_eq!(keys(&fast), keys(&slow), "{}", src);
        prop_assert_eq!(fast.stuck > 0, slow.stuck > 0, "{}", src);
        prop_assert!(fast.states <= slow.states);
        let again = explore_with(&test, &Config::default()).unwrap();
        prop_assert_eq!(keys(&again), keys(&fast));
        prop_assert_eq!(again.states, fast.states);
    }
}

/// A test whose initial state has no step: that state is its end, an outcome when every
/// thread is done (no thread, or only empty ones), stuck when a thread cannot start.
#[test]
fn an_initial_state_without_steps_is_an_outcome_or_stuck() {
    let head = "litmus start\nloc x @n0\nloc y @n1\n";
    let tail = "exists x = 0\nexpect allowed\n";
    for body in ["", "thread t0 @n0 {\n}\n"] {
        let src = format!("{head}{body}{tail}");
        let test = loco_litmus::parse(&src, "start").unwrap();
        let e = explore_with(&test, &Config::default()).unwrap();
        assert_eq!(e.outcomes.len(), 1, "{src}");
        assert_eq!(e.stuck, 0, "{src}");
        assert!(e.verdict(&test).matches(), "{src}");
    }
    // A first statement that can never go on: no outcome, one stuck state.
    let src = format!("{head}thread t0 @n0 {{\n  poll(n1)\n}}\n{tail}");
    let test = loco_litmus::parse(&src, "start").unwrap();
    let e = explore_with(&test, &Config::default()).unwrap();
    assert!(e.outcomes.is_empty(), "{src}");
    assert_eq!(e.stuck, 1, "{src}");
}
