//! The model explorer: every schedule of the operational model, the exact set of reachable final
//! outcomes, and the verdict of a test's `exists` condition.
//!
//! # Search
//! Depth-first from the initial state. The graph is finite and acyclic: every transition moves
//! a program counter, empties a buffer slot or advances a pipe entry, and spin loops are await
//! forms (`docs/model.md` §2), not loops. Only the states on the current path are kept whole;
//! visited states are remembered by a 128-bit fingerprint (16 bytes each, as TLC and SPIN's
//! hash-compact mode do). Assuming the fingerprint behaves as a random function, the chance
//! that two of `n` distinct states share one — which would make the explorer skip the second
//! and what only it leads to — is at most `n² / 2¹²⁹`: under `10⁻²⁶` for the 2.3 million states of
//! the largest exploration the project runs (`sc-sb` unreduced, in the reduction cross-check),
//! under `10⁻²⁴` at the default limit of 20 million.
//!
//! # Budget
//! [`Config::max_states`] and [`Config::max_memory`] bound a run: past either, the explorer
//! stops with [`ExploreError`] ("gave up: budget reached after N states") instead of growing
//! until the OS kills it. `loco litmus` exits with status 4 then.
//!
//! # Reduction
//! Interleavings of independent transitions all reach the same final states, so the explorer
//! takes alone, without branching, any enabled transition that no other possible transition
//! can interfere with (a singleton *persistent set*). Exploring persistent sets reaches every
//! terminal state of the full graph (Godefroid 1996, *Partial-Order Methods for the
//! Verification of Concurrent Systems*, Thm. 6.14), and terminal states — final outcomes and
//! stuck states — are all the explorer reports; the graph being acyclic, no cycle proviso is
//! needed. Two sets of rules:
//! - `cpu.rs`: transitions that commute with everything (a thread pushing into its own store
//!   buffer, a post leaving the head of a store buffer, an rfence leaving a pipe, an
//!   acknowledgement becoming a notice, an enabled `poll`, `wait` or `mfence`);
//! - `reduce.rs`: transitions on words that only one thread ever names (its lock scratch and
//!   ticket words, an SC operation's result word: loads, stores leaving the store buffer, NIC
//!   local writes, a put's local read) and steps internal to a queue pair (a put's or RMW's
//!   remote write entering `Br`, a read's local write entering `Bl`), each under the
//!   conditions that keep it independent; that module's docs argue each rule.
//!
//! With [`Config::reduction`] off, every interleaving is explored. The soundness is
//! cross-checked in release mode on every shipped test (`tests/reduction_crosscheck.rs`: the
//! same outcomes reduced and unreduced), on random programs (`tests/explore_props.rs`), and on
//! IRIW of SC reads against an enumeration of SC interleavings. `docs/explorer.md` has the
//! numbers.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use loco_rdmawait::model::{Entry, LocalItem, Post, RmwOp, SbItem, Step};
use loco_rdmawait::WorkRequest;

use crate::ast::{Expect, Observable, Test};
pub use crate::cpu::Action;
use crate::cpu::State;
use crate::fingerprint::{fingerprint, Visited, BYTES_PER_SLOT};
use crate::lower::{lower, tags, Instr, Program};
use crate::reduce::Owners;
use crate::validate::InvalidTest;

/// Default bound on explored states ([`Config::max_states`]).
pub const DEFAULT_MAX_STATES: usize = 20_000_000;

/// Default bound on the explorer's memory ([`Config::max_memory`]): 1 GiB.
pub const DEFAULT_MAX_MEMORY: usize = 1 << 30;

/// Explorer settings.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// Give up with [`ExploreError::StateLimit`] after this many distinct states
    /// (default [`DEFAULT_MAX_STATES`]).
    pub max_states: usize,
    /// Give up with [`ExploreError::MemoryLimit`] rather than let the visited set and the
    /// search stack grow past about this many bytes (default [`DEFAULT_MAX_MEMORY`]). The
    /// estimate counts the visited set's table (16-byte fingerprints) and the states on the
    /// depth-first stack; what the allocator adds on top is small.
    pub max_memory: usize,
    /// Take eager transitions alone (the partial-order reduction; default on). Off, every
    /// interleaving is explored: slower, same outcomes (a unit test checks that).
    pub reduction: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_states: DEFAULT_MAX_STATES,
            max_memory: DEFAULT_MAX_MEMORY,
            reduction: true,
        }
    }
}

/// Why an exploration did not finish.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ExploreError {
    /// More distinct states than [`Config::max_states`] (the limit).
    #[error("gave up: budget reached after {0} states (the state limit; raise `--max-states`)")]
    StateLimit(usize),
    /// The explorer's memory would pass [`Config::max_memory`].
    #[error(
        "gave up: budget reached after {states} states (the memory limit of {} MiB; raise `--max-memory`)",
        limit / (1 << 20)
    )]
    MemoryLimit {
        /// Distinct states visited when the explorer gave up.
        states: usize,
        /// The limit, in bytes.
        limit: usize,
    },
    /// The test fails [`Test::validate`] (a test built by hand naming something it does not
    /// have; a parsed test never does): nothing was explored.
    #[error(transparent)]
    Invalid(#[from] InvalidTest),
    /// [`replay_trace`]: action `index` (from 0) of the schedule is not one the model can take
    /// at that point (it names a thread, queue pair or step that is not enabled there).
    #[error("action {index} of the schedule ({action:?}) is not enabled at that point")]
    NotEnabled {
        /// The action's index in the schedule.
        index: usize,
        /// The action.
        action: Action,
    },
}

impl ExploreError {
    /// Distinct states visited before giving up (0 for a test that was not explored:
    /// [`ExploreError::Invalid`], [`ExploreError::NotEnabled`]).
    pub fn states(&self) -> usize {
        match *self {
            ExploreError::StateLimit(n) | ExploreError::MemoryLimit { states: n, .. } => n,
            ExploreError::Invalid(_) | ExploreError::NotEnabled { .. } => 0,
        }
    }
}

/// The values of a test's observables ([`Test::observables`]) in one final state.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Outcome(pub Vec<u64>);

/// The result of exploring a test.
#[derive(Clone, Debug)]
pub struct Exploration {
    /// What each outcome's values are the values of.
    pub observables: Vec<Observable>,
    /// Every reachable final outcome, with one schedule reaching it.
    pub outcomes: BTreeMap<Outcome, Vec<Action>>,
    /// Distinct states visited.
    pub states: usize,
    /// Transitions taken.
    pub transitions: usize,
    /// States with no transition that are not final: executions that block forever (a poll
    /// with nothing to poll, a lock never released). They have no outcome.
    pub stuck: usize,
    /// Wall-clock time.
    pub elapsed: Duration,
    prog: Program,
}

/// A test's verdict under the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Whether some reachable outcome satisfies the `exists` condition.
    pub reachable: bool,
    /// What the test expects.
    pub expect: Expect,
}

impl Verdict {
    /// The model's verdict.
    pub fn model(&self) -> Expect {
        if self.reachable {
            Expect::Allowed
        } else {
            Expect::Forbidden
        }
    }

    /// Whether the model agrees with the test's `expect`.
    pub fn matches(&self) -> bool {
        self.model() == self.expect
    }
}

/// Explores `test` with the default [`Config`].
pub fn explore(test: &Test) -> Result<Exploration, ExploreError> {
    explore_with(test, &Config::default())
}

/// Explores every schedule of `test`.
pub fn explore_with(test: &Test, cfg: &Config) -> Result<Exploration, ExploreError> {
    explore_with_progress(test, cfg, |_| {})
}

/// How many new states pass between two calls of [`explore_with_progress`]'s `progress`.
pub const PROGRESS_EVERY: usize = 1 << 14;

/// [`explore_with`], calling `progress` with the number of distinct states seen so far each
/// time [`PROGRESS_EVERY`] more have been found: a large test can take minutes, and a caller
/// can show that it moves (`loco litmus check` does).
///
/// A test that fails [`Test::validate`] is [`ExploreError::Invalid`] (so are the other entry
/// points, which call this one).
pub fn explore_with_progress(
    test: &Test,
    cfg: &Config,
    mut progress: impl FnMut(usize),
) -> Result<Exploration, ExploreError> {
    test.validate()?;
    let start = Instant::now();
    let prog = lower(test);
    let observables = test.observables();
    let mut visited = Visited::default();
    let mut outcomes = BTreeMap::new();
    let (mut transitions, mut stuck) = (0usize, 0usize);
    let mut steps = Vec::new();
    // Depth-first: each frame is a state, its actions, and the next one to try.
    let mut stack: Vec<(State, Vec<Action>, usize)> = Vec::new();
    let mut path: Vec<Action> = Vec::new();
    let init = State::initial(&prog);
    let owners = Owners::new(&prog);
    let reduce = cfg.reduction.then_some(&owners);
    // The memory budget: the visited table, plus the stack at a generous bound per frame.
    let frame_bytes = 4 * init.heap_bytes() + 1024;
    visited.insert(fingerprint(&init));
    let mut acts = Vec::new();
    init.actions(&prog, reduce, &mut acts, &mut steps);
    if acts.is_empty() {
        // A test whose initial state has no step (no thread has a statement, or none can
        // start): that state is its only end, final or stuck like any other.
        if init.is_final(&prog) {
            outcomes.insert(outcome(&prog, &observables, &init), Vec::new());
        } else {
            stuck += 1;
        }
    } else {
        stack.push((init, acts, 0));
    }
    while let Some((state, acts, next)) = stack.last_mut() {
        let Some(&a) = acts.get(*next) else {
            stack.pop();
            path.pop();
            continue;
        };
        *next += 1;
        transitions += 1;
        let mut child = state.clone();
        child.apply(&prog, a);
        let fp = fingerprint(&child);
        if visited.contains(&fp) {
            continue;
        }
        if visited.len() >= cfg.max_states {
            return Err(ExploreError::StateLimit(visited.len()));
        }
        let table = if visited.len() == visited.capacity() {
            2 * visited.capacity().max(16) // the next insert grows the table
        } else {
            visited.capacity()
        };
        if table * BYTES_PER_SLOT + (stack.len() + 1) * frame_bytes > cfg.max_memory {
            return Err(ExploreError::MemoryLimit {
                states: visited.len(),
                limit: cfg.max_memory,
            });
        }
        visited.insert(fp);
        if visited.len() % PROGRESS_EVERY == 0 {
            progress(visited.len());
        }
        path.push(a);
        let mut acts = Vec::new();
        child.actions(&prog, reduce, &mut acts, &mut steps);
        if acts.is_empty() {
            if child.is_final(&prog) {
                let o = outcome(&prog, &observables, &child);
                outcomes.entry(o).or_insert_with(|| path.clone());
            } else {
                stuck += 1;
            }
            path.pop();
            continue;
        }
        stack.push((child, acts, 0));
    }
    Ok(Exploration {
        observables,
        outcomes,
        states: visited.len(),
        transitions,
        stuck,
        elapsed: start.elapsed(),
        prog,
    })
}

fn outcome(prog: &Program, obs: &[Observable], s: &State) -> Outcome {
    Outcome(
        obs.iter()
            .map(|o| match *o {
                Observable::Reg { thread, reg } => s.threads[thread].regs[reg.0],
                _ => {
                    let (n, w) = prog.word_of(o).expect("a location");
                    s.mem[n][w]
                }
            })
            .collect(),
    )
}

/// Whether an outcome satisfies the test's `exists` condition (`o` has the values of
/// `observables`; an atom whose observable has no value in `o` does not hold).
pub fn satisfies(test: &Test, observables: &[Observable], o: &Outcome) -> bool {
    test.exists.atoms.iter().all(|a| {
        observables
            .iter()
            .position(|x| *x == a.obs)
            .is_some_and(|i| o.0.get(i) == Some(&a.value))
    })
}

impl Exploration {
    /// The verdict of `test` (the test explored): its `exists` condition over the outcomes
    /// explored, as in [`Exploration::witness`].
    pub fn verdict(&self, test: &Test) -> Verdict {
        Verdict {
            reachable: self.witness(test).is_some(),
            expect: test.expect,
        }
    }

    /// The first reachable outcome satisfying `test`'s `exists` condition, if any. The
    /// condition is read against [`Exploration::observables`] (see [`satisfies`]): given
    /// another test than the one explored, an atom naming something not observed here does
    /// not hold.
    pub fn witness(&self, test: &Test) -> Option<&Outcome> {
        self.outcomes
            .keys()
            .find(|o| satisfies(test, &self.observables, o))
    }

    /// Whether the model allows `o`.
    pub fn allows(&self, o: &Outcome) -> bool {
        self.outcomes.contains_key(o)
    }

    /// Formats an outcome as `t0:r0=1 x=0 ...`, with `test`'s names (placeholders such as
    /// `#1` for what `test` does not have, see [`Test::observable_name`]).
    pub fn show(&self, test: &Test, o: &Outcome) -> String {
        self.observables
            .iter()
            .zip(&o.0)
            .map(|(x, v)| format!("{}={v}", test.observable_name(x)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The recorded schedule reaching `o`, one line per transition, replayed from the initial
    /// state (so each line can show the values it reads and writes). `None` if `o` is not a
    /// reachable outcome.
    ///
    /// The schedule is that of the test explored; `test` only names its threads, work ids and
    /// source lines. Given another test, names and lines it does not have are placeholders
    /// (`#1` for thread 1, `line ?`), as with [`Exploration::show`]: no panic.
    pub fn trace(&self, test: &Test, o: &Outcome) -> Option<Vec<String>> {
        self.outcomes
            .get(o)
            .map(|acts| replay(&self.prog, test, acts))
    }
}

/// Replays a schedule from the initial state, describing each transition. A test that fails
/// [`Test::validate`] is [`ExploreError::Invalid`]; an action the model cannot take where the
/// schedule has it (not one of the enabled transitions of that state) is
/// [`ExploreError::NotEnabled`]. Every schedule of an [`Exploration`] replays.
pub fn replay_trace(test: &Test, actions: &[Action]) -> Result<Vec<String>, ExploreError> {
    test.validate()?;
    let prog = lower(test);
    let mut s = State::initial(&prog);
    let (mut enabled, mut steps) = (Vec::new(), Vec::new());
    for (index, &action) in actions.iter().enumerate() {
        s.actions(&prog, None, &mut enabled, &mut steps);
        if !enabled.contains(&action) {
            return Err(ExploreError::NotEnabled { index, action });
        }
        s.apply(&prog, action);
    }
    Ok(replay(&prog, test, actions))
}

fn replay(prog: &Program, test: &Test, actions: &[Action]) -> Vec<String> {
    let mut s = State::initial(prog);
    let mut out = Vec::with_capacity(actions.len());
    for &a in actions {
        let line = describe(prog, test, &s, a);
        let executed = match a {
            Action::Exec { thread } => prog.threads[thread].instrs.get(s.threads[thread].pc),
            _ => None,
        };
        s.apply(prog, a);
        let line = match (a, executed) {
            (Action::Exec { thread }, Some(Instr::Load { reg, .. } | Instr::Cas { reg, .. })) => {
                format!("{line}  -> {}", s.threads[thread].regs[*reg])
            }
            _ => line,
        };
        out.push(line);
    }
    out
}

/// Values of a one-word (or longer) transfer.
struct Vals<'a>(&'a [u64]);

impl fmt::Display for Vals<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            [v] => write!(f, "{v}"),
            vs => write!(f, "{vs:?}"),
        }
    }
}

struct Word<'a>(&'a Program, usize, usize);

impl fmt::Display for Word<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.word_names[self.1].get(self.2) {
            Some(n) if n.contains('@') => f.write_str(n),
            Some(n) => write!(f, "{n}@n{}", self.1),
            None => write!(f, "n{}[{}]", self.1, self.2),
        }
    }
}

/// One transition, as a trace line. Everything but the names and line numbers comes from
/// `prog`; those come from `test`, and where `test` lacks them (it is not the test `prog` was
/// lowered from) they are placeholders, as in [`Test::observable_name`]: `#1` for thread 1,
/// `line ?`.
fn describe(prog: &Program, test: &Test, s: &State, a: Action) -> String {
    let t = a.thread();
    let th = &s.threads[t];
    let name = test
        .threads
        .get(t)
        .map_or_else(|| format!("#{t}"), |th| th.name.clone());
    let me = prog.threads[t].node;
    match a {
        Action::Exec { .. } => {
            let o = &prog.threads[t].origins[th.pc];
            let line = test
                .threads
                .get(t)
                .and_then(|th| th.body.get(o.stmt))
                .map_or_else(|| "?".to_string(), |st| st.span.line.to_string());
            format!("{name}: {} (line {line})", o.what)
        }
        Action::Flush { .. } => match th.sb.front() {
            Some(SbItem::Store { word, value }) => {
                format!(
                    "{name}: store buffer -> memory: {} = {value}",
                    Word(prog, me, *word)
                )
            }
            Some(SbItem::Post(Post { target, wr, tag })) => {
                let target = target.index();
                let (r, l) = (|w| Word(prog, target, w), |w| Word(prog, me, w));
                let op = match *wr {
                    WorkRequest::Write { local, remote, .. } => {
                        format!("put({}, {})", r(remote), l(local))
                    }
                    WorkRequest::Read { local, remote, .. } => {
                        format!("get({}, {})", l(local), r(remote))
                    }
                    WorkRequest::CompareSwap {
                        remote,
                        expected,
                        new,
                        local,
                    } => {
                        format!("rcas({}, {expected}, {new}, {})", r(remote), l(local))
                    }
                    WorkRequest::FetchAdd { remote, add, local } => {
                        format!("rfaa({}, {add}, {})", r(remote), l(local))
                    }
                    WorkRequest::Fence => format!("rfence(n{target})"),
                };
                let tag = if wr.completes() {
                    format!(" [{}]", tags::name(*tag, test))
                } else {
                    String::new()
                };
                format!("{name}: store buffer -> pipe to n{target}: {op}{tag}")
            }
            None => format!("{name}: flush of an empty store buffer"),
        },
        Action::Nic { target, step, .. } => {
            let qp = &th.qps[target];
            let q = format!("{name}->n{target}");
            match step {
                Step::CommitRemote => {
                    let w = qp.br.front().expect("listed step");
                    let lock = if w.atomic {
                        " (releases the atomic lock)"
                    } else {
                        ""
                    };
                    format!(
                        "{q}: remote write commits {} = {}{lock}",
                        Word(prog, target, w.remote),
                        Vals(&w.values)
                    )
                }
                Step::CommitLocal(j) => match &qp.bl[j] {
                    LocalItem::Write { local, values } => format!(
                        "{q}: local write commits {} = {}",
                        Word(prog, me, *local),
                        Vals(values)
                    ),
                    LocalItem::Notice(_) => format!("{q}: ?"),
                },
                Step::Pipe(i) => match &qp.pipe[i] {
                    Entry::Fence => format!("{q}: rfence leaves the pipe"),
                    Entry::Put { local, tag, .. } => format!(
                        "{q}: put [{}] nLR reads {} = {}",
                        tags::name(*tag, test),
                        Word(prog, me, *local),
                        s.mem[me][*local]
                    ),
                    Entry::Send { remote, values, .. } => format!(
                        "{q}: put nRW of {} = {} sent",
                        Word(prog, target, *remote),
                        Vals(values)
                    ),
                    Entry::Ack { tag } => {
                        format!("{q}: put acknowledged, notice [{}]", tags::name(*tag, test))
                    }
                    Entry::Get { remote, tag, .. } => format!(
                        "{q}: get [{}] nRR reads {} = {}",
                        tags::name(*tag, test),
                        Word(prog, target, *remote),
                        s.mem[target][*remote]
                    ),
                    Entry::Load { local, values, tag } => format!(
                        "{q}: nLW of {} = {} and notice [{}] queued",
                        Word(prog, me, *local),
                        Vals(values),
                        tags::name(*tag, test)
                    ),
                    Entry::Rmw {
                        op, remote, tag, ..
                    } => format!(
                        "{q}: {} [{}] atomic read of {} = {}",
                        match op {
                            RmwOp::Cas { expected, new } => {
                                format!("rcas (expected {expected}, new {new})")
                            }
                            RmwOp::Faa { add } => format!("rfaa (+{add})"),
                        },
                        tags::name(*tag, test),
                        Word(prog, target, *remote),
                        s.mem[target][*remote]
                    ),
                    Entry::Atomic { remote, value } => format!(
                        "{q}: atomic write {} = {value} queued",
                        Word(prog, target, *remote)
                    ),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;

    /// The set of outcomes, each as `name=value` pairs.
    fn outcomes(src: &str) -> Vec<String> {
        let t = parse(src, "test").unwrap();
        let e = explore(&t).unwrap();
        e.outcomes.keys().map(|o| e.show(&t, o)).collect()
    }

    #[test]
    fn store_buffering_on_the_cpu() {
        let sb = "litmus sb
loc x @n0
loc y @n0
thread t0 @n0 {
  store(x, 1)
  r0 = load(y)
}
thread t1 @n0 {
  store(y, 1)
  r0 = load(x)
}
exists t0:r0 = 0 /\\ t1:r0 = 0
expect allowed
";
        assert_eq!(
            outcomes(sb),
            [
                "t0:r0=0 t1:r0=0 x=1 y=1",
                "t0:r0=0 t1:r0=1 x=1 y=1",
                "t0:r0=1 t1:r0=0 x=1 y=1",
                "t0:r0=1 t1:r0=1 x=1 y=1",
            ]
        );
        let fenced = sb
            .replace("store(x, 1)", "store(x, 1)\n  mfence()")
            .replace("store(y, 1)", "store(y, 1)\n  mfence()");
        assert_eq!(
            outcomes(&fenced),
            [
                "t0:r0=0 t1:r0=1 x=1 y=1",
                "t0:r0=1 t1:r0=0 x=1 y=1",
                "t0:r0=1 t1:r0=1 x=1 y=1",
            ]
        );
    }

    #[test]
    fn message_passing_on_the_cpu() {
        let mp = "litmus mp
loc x @n1
loc y @n1
thread t0 @n1 {
  store(x, 1)
  store(y, 1)
}
thread t1 @n1 {
  r0 = load(y)
  r1 = load(x)
}
exists t1:r0 = 1 /\\ t1:r1 = 0
expect forbidden
";
        assert_eq!(
            outcomes(mp),
            [
                "t1:r0=0 t1:r1=0 x=1 y=1",
                "t1:r0=0 t1:r1=1 x=1 y=1",
                "t1:r0=1 t1:r1=1 x=1 y=1",
            ]
        );
    }

    #[test]
    fn own_stores_are_read_from_the_buffer() {
        let src = "litmus own
loc x @n0
thread t0 @n0 {
  store(x, 1)
  r0 = load(x)
  r1 = cas(x, 1, 2)
}
exists t0:r0 = 0
expect forbidden
";
        assert_eq!(outcomes(src), ["t0:r0=1 t0:r1=1 x=2"]);
    }

    #[test]
    fn put_reads_its_source_late() {
        let src = "litmus late
loc x @n0
loc y @n1
thread t0 @n0 {
  put(y, x, d1)
  store(x, 1)
}
exists y = 1
expect allowed
";
        assert_eq!(outcomes(src), ["x=1 y=0", "x=1 y=1"]);
        let waited = src.replace("store(x, 1)", "wait(d1)\n  store(x, 1)");
        assert_eq!(outcomes(&waited), ["x=1 y=0"]);
    }

    #[test]
    fn a_store_before_a_put_is_visible_to_it() {
        let src = "litmus early
loc x @n0
loc y @n1
thread t0 @n0 {
  store(x, 1)
  put(y, x, d1)
}
exists y = 0
expect forbidden
";
        assert_eq!(outcomes(src), ["x=1 y=1"]);
    }

    #[test]
    fn remote_rmws_are_atomic_against_each_other() {
        let src = "litmus faa
loc c @n2
loc a @n0
loc b @n1
thread t0 @n0 {
  rfaa(c, 1, a, d)
}
thread t1 @n1 {
  rfaa(c, 1, b, d)
}
exists c = 1
expect forbidden
";
        assert_eq!(outcomes(src), ["c=2 a=0 b=1", "c=2 a=1 b=0"]);
    }

    #[test]
    fn a_poll_with_nothing_to_poll_never_finishes() {
        let src = "litmus stuck
loc x @n0
thread t0 @n0 {
  store(x, 1)
  poll(n1)
}
exists x = 1
expect forbidden
";
        let t = parse(src, "test").unwrap();
        let e = explore(&t).unwrap();
        assert!(e.outcomes.is_empty());
        assert_eq!(e.stuck, 1);
        assert_eq!(e.verdict(&t).model(), Expect::Forbidden);
    }

    #[test]
    fn traces_replay_to_their_outcome() {
        let src = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/litmus/fig7a-lb-get.litmus"
        ))
        .unwrap();
        let t = parse(&src, "fig7a").unwrap();
        let e = explore(&t).unwrap();
        let w = e.witness(&t).unwrap();
        let trace = e.trace(&t, w).unwrap();
        assert!(
            trace.iter().any(|l| l.contains("nRR reads x@n1 = 1")),
            "{trace:#?}"
        );
    }

    /// A remote RMW's read is written as the other NIC steps are (`rcas (expected 1, new 2)`,
    /// `rfaa (+1)`), not as the model's `Debug` (`Cas { expected: 1, new: 2 }`).
    #[test]
    fn a_traced_rmw_read_names_the_operation_as_the_format_does() {
        let src = "litmus rmw
loc x @n0
loc y @n1 = 1
thread t0 @n0 {
  rcas(y, 1, 2, x, d1)
  rfaa(y, 3, x, d1)
  wait(d1)
}
exists y = 5
expect allowed
";
        let t = parse(src, "rmw").unwrap();
        let e = explore(&t).unwrap();
        let trace = e.trace(&t, e.witness(&t).unwrap()).unwrap();
        let reads: Vec<_> = trace.iter().filter(|l| l.contains("atomic read")).collect();
        assert_eq!(
            reads,
            [
                "t0->n1: rcas (expected 1, new 2) [d1] atomic read of y@n1 = 1",
                "t0->n1: rfaa (+3) [d1] atomic read of y@n1 = 2",
            ],
            "{trace:#?}"
        );
    }

    /// The methods that take the test accept another test than the one explored (fewer
    /// threads, statements, registers, locations, work ids) without panicking: names it lacks
    /// are shown as placeholders.
    #[test]
    fn methods_accept_a_test_other_than_the_one_explored() {
        let tiny = parse(
            "litmus tiny\nloc z @n0\nthread t0 @n0 {\n  store(z, 1)\n}\nexists z = 1\nexpect allowed\n",
            "tiny",
        )
        .unwrap();
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/litmus/");
        for file in ["fig7a-lb-get", "fig8e-slock", "sc-mp", "sv-mp-bcast"] {
            let t =
                crate::parse_file(std::path::Path::new(&format!("{dir}{file}.litmus"))).unwrap();
            let e = explore(&t).unwrap();
            let mut short = t.clone(); // every thread cut to its first statement
            for th in &mut short.threads {
                th.body.truncate(1);
                th.regs.clear();
            }
            let mut empty = t.clone(); // nothing at all
            empty.threads.clear();
            empty.locs.clear();
            empty.svs.clear();
            empty.scs.clear();
            empty.locks.clear();
            empty.work_ids.clear();
            for other in [&tiny, &short, &empty] {
                let _ = e.verdict(other);
                let _ = e.witness(other);
                for o in e.outcomes.keys() {
                    let _ = e.show(other, o);
                    let trace = e.trace(other, o).expect("an outcome has a trace");
                    assert_eq!(trace.len(), e.outcomes[o].len(), "{file}");
                    if std::ptr::eq(other, &empty) {
                        assert!(trace.iter().all(|l| l.starts_with('#')), "{trace:#?}");
                    }
                }
            }
            // The test explored still gets its names.
            let o = e.outcomes.keys().next().unwrap();
            let trace = e.trace(&t, o).unwrap();
            assert!(!trace.iter().any(|l| l.contains('#')), "{trace:#?}");
        }
    }

    /// Every litmus test of the repository's tests/litmus/, parsed, with its path.
    fn shipped() -> Vec<(std::path::PathBuf, Test)> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/litmus");
        let mut tests = Vec::new();
        for f in std::fs::read_dir(dir).unwrap() {
            let path = f.unwrap().path();
            if path.extension().is_some_and(|e| e == "litmus") {
                let t = crate::parse_file(&path).unwrap();
                tests.push((path, t));
            }
        }
        tests
    }

    /// `progress` hears of every [`PROGRESS_EVERY`] states, in order, and of nothing else;
    /// the shipped tests include one large enough to be heard of.
    #[test]
    fn progress_counts_the_states_as_they_come() {
        let mut heard = 0;
        for (path, t) in shipped() {
            let mut calls = Vec::new();
            let e = explore_with_progress(&t, &Config::default(), |n| calls.push(n)).unwrap();
            let want: Vec<usize> = (1..=e.states / PROGRESS_EVERY)
                .map(|k| k * PROGRESS_EVERY)
                .collect();
            assert_eq!(calls, want, "{}", path.display());
            heard += calls.len();
        }
        assert!(heard > 0, "no shipped test reaches {PROGRESS_EVERY} states");
    }

    /// The partial-order reduction loses no outcome: every shared test, both ways.
    #[test]
    fn reduction_keeps_every_outcome() {
        let mut n = 0;
        for (_, t) in shipped() {
            let full = Config {
                reduction: false,
                max_states: if cfg!(debug_assertions) {
                    20_000
                } else {
                    100_000
                },
                ..Config::default()
            };
            let Ok(slow) = explore_with(&t, &full) else {
                eprintln!("{}: too big unreduced, skipped", t.name);
                continue;
            };
            eprintln!(
                "{}: {} states reduced, {} unreduced",
                t.name,
                explore(&t).unwrap().states,
                slow.states
            );
            let fast = explore(&t).unwrap();
            let keys = |e: &Exploration| e.outcomes.keys().cloned().collect::<Vec<_>>();
            assert_eq!(keys(&fast), keys(&slow), "{}", t.name);
            assert_eq!(fast.stuck > 0, slow.stuck > 0, "{}: stuck states", t.name);
            assert!(fast.states <= slow.states);
            n += 1;
        }
        assert!(n >= 10, "only {n} tests compared");
    }
}
