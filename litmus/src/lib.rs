//! Litmus tests for loco-rs: a parser for the `.litmus` format, an exhaustive explorer of the
//! paper's operational model, and a runner that executes a test for real on a backend.
//!
//! ```
//! use loco_litmus::{explore, parse, RunBackend, RunConfig};
//!
//! let test = parse(
//!     "litmus fig2d-put-wait
//!      loc x @n0
//!      loc y @n1
//!      thread t0 @n0 {
//!        put(y, x, d1)
//!        wait(d1)
//!        store(x, 1)
//!      }
//!      exists y = 1
//!      expect forbidden",
//!     "fig2d.litmus",
//! )?;
//! let model = explore(&test)?;
//! assert!(model.verdict(&test).matches()); // the model forbids y = 1, as expected
//! assert_eq!(model.outcomes.len(), 1);     // the only final state: x = 1, y = 0
//!
//! let runs = loco_litmus::run(&test, &RunConfig::new(RunBackend::SoftChaos, 50, 0), |_| {})?;
//! assert!(runs.histogram.keys().all(|o| model.allows(o))); // the soft NIC agrees
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The `loco` command (crate `loco-cli`) wraps all of this: `loco litmus check`, `run`, `show`.
//!
//! The format is specified in [docs/litmus-format.md][loco-format]; section and rule numbers
//! cited here (`docs/model.md §4`) are those of the [model page][loco-model].
//!
//! [loco-format]: https://github.com/loco-rs/loco-rs/blob/main/docs/litmus-format.md
//! [loco-model]: https://github.com/loco-rs/loco-rs/blob/main/docs/model.md
//!
//! # What is checked
//! A test (format: docs/litmus-format.md; the project's tests are in `tests/litmus/`) is a few
//! threads on nodes, each a list of operations of any library of the stack (CPU, rdmatso,
//! rdmawait, rdmawait+RMW, sv, locks, SC), and a condition on the final state with the verdict
//! the paper gives it.
//!
//! The [explorer](mod@explore) runs the operational model of docs/model.md §4 over **every**
//! schedule and returns the exact set of reachable final outcomes:
//! - the NIC half is [`loco_rdmawait::model`], the rules the soft NIC's `Chaos` schedule runs too
//!   (queue-pair pipes, remote and local write buffers, completion notices, remote-atomic locks);
//! - the CPU half is here: x86-TSO store buffers that posted remote operations travel through
//!   in program order with stores, loads, `cas`/`mfence` draining them, `poll`, and `wait(d)` in
//!   the atomic form of docs/model.md §4;
//! - library operations are expanded into their implementations over the layers below
//!   (docs/model.md §5): `bcast` into puts, `gf` into rfences, gets and a wait, each lock kind into
//!   its ticket-lock protocol, SC operations into node-lock critical sections. The explorer
//!   therefore checks the paper's *implementations*, not just their specifications. Spin loops
//!   are await forms (block until the awaited value is there, then take it), which have the same
//!   outcomes and keep the state graph finite and acyclic.
//!
//! The [runner](mod@run) executes the same test with real OS threads calling the real libraries
//! (`loco-rdmawait`, `loco-rdmawaitrmw`, `loco-sv`, `loco-locks`, `loco-sc`) on a backend, many
//! times, and collects the histogram of observed outcomes. An observed outcome that the explorer
//! does not list is a bug in a library, in the backend, or in the model.
//!
//! # Running
//! ```text
//! loco litmus check tests/litmus/*.litmus       # verdicts; exit 0 iff all match
//! loco litmus show --traces tests/litmus/fig7a-lb-get.litmus
//! loco litmus run --backend soft --runs 2000 tests/litmus/*.litmus
//! ```
//! `cargo test -p loco-cli` checks every file of `tests/litmus/` (a new file is a new test) and
//! runs each on the soft NIC.
//!
//! # Reading a counterexample
//! Every outcome comes with one schedule reaching it ([`Exploration::trace`]), replayed from the
//! initial state with the values read and written, one transition per line:
//! ```text
//! t0: put(y, x, d1) (line 6)                          a statement (or one step of a library's expansion)
//! t0: store buffer -> pipe to n1: put(y@n1, x@n0) [d1] the post leaves the TSO store buffer
//! t0->n1: put [d1] nLR reads x@n0 = 1                  a NIC rule on t0's queue pair towards n1
//! t0->n1: remote write commits y@n1 = 1
//! ```
//! `check` prints the schedule of the first outcome that satisfies a condition the test expects
//! to be forbidden; `show --traces` prints one for every outcome. Library steps are labelled
//! with the statement they implement (`acquire(l): rfaa(tkt_l, 1, turn_l[t0]) [_wl]`), internal
//! work ids with a leading underscore (`_wl`, `_wlr`, `_nl`, `_nlr`, `_gf`, `_sc`, `_scw`),
//! internal words by role (`tkt_l`, `rel_l[t1]@n2`, `gf_scratch[t0]`), the protocols' registers
//! as `r<k>`.
//!
//! The library operations are expanded by the libraries' own protocol functions
//! (`loco_sv::protocol`, `loco_locks::protocol`, `loco_sc::protocol`), run on a machine that
//! records instructions: the explorer checks the protocols the crates execute.
//!
//! # Limits
//! - At most [`MAX_NODES`] nodes and [`MAX_THREADS`] threads per test; values are `u64` and
//!   there are no loops or branches, so every test is finite.
//! - Exploration gives up with [`explore::ExploreError`] past [`explore::Config::max_states`]
//!   or [`explore::Config::max_memory`] (default 1 GiB); the project's tests need from 6 to
//!   about 3 000 states, the 4-thread IRIW of SC reads 100 000 (about a second).
//! - Visited states are kept as 128-bit fingerprints ([`mod@explore`] states the collision
//!   probability), and a partial-order reduction takes alone the transitions nothing else can
//!   interfere with; a release-mode test checks it loses no outcome on every shipped test.
//! - The parser refuses input past [`parse::MAX_INPUT_BYTES`], [`parse::MAX_STATEMENTS`] per
//!   thread, [`parse::MAX_DECLARATIONS`], [`parse::MAX_NAME_LEN`] and [`parse::MAX_ATOMS`], and
//!   input that is not UTF-8, with a positioned error.
//! - A [`Test`] built or edited by hand (its fields are public) is checked before it is
//!   explored or run ([`Test::validate`]): one naming a register, declaration, work id, thread
//!   or node it does not have, breaking a rule the parser enforces, or past one of the
//!   parser's size limits ([`validate::SizeLimit`]: the same constants), is
//!   [`explore::ExploreError::Invalid`] or [`run::RunError::Invalid`], never a panic.
//! - The runner refuses a test in which a thread ends holding a lock that another thread
//!   acquires ([`run::RunError::HeldAtEnd`]): a run where the holder goes first never ends.
//! - The runner's `Chaos` schedule picks NIC steps at random and its threads interleave as the
//!   OS schedules them: a rare allowed outcome (Fig. 7a) can take thousands of runs to appear,
//!   and a run that does not show an outcome proves nothing.
//! - Where the paper leaves an implementation choice open the expansion follows the libraries:
//!   `bcast` skips the thread's own node (its copy is the source), the weak lock's release puts
//!   carry their own work id that nothing waits for, SC writes are not waited for.
//!
//! # Implementation
//! [`parse`](mod@parse) (docs/litmus-format.md to [`Test`]), `lower` (the expansion of docs/model.md §5 into machine
//! operations over a memory layout), `cpu` (whole-system state and transitions, CPU half),
//! [`explore`](mod@explore) (depth-first search with a visited set of fingerprints, and the
//! partial-order reduction of `reduce`), [`run`](mod@run). The approach
//! follows tokio-rs/loom's: exhaustive exploration of a small model, outcomes gathered into a set.

#![forbid(unsafe_code)]

pub mod ast;
mod cpu;
pub mod explore;
mod fingerprint;
mod lower;
pub mod parse;
mod reduce;
pub mod run;
pub mod validate;

pub use ast::Test;
pub use explore::{explore, Exploration, Outcome, Verdict};
pub use parse::{parse, parse_file, parse_reader, LimitUnit, ParseError, ParseErrorKind};
#[allow(deprecated)]
pub use run::Backend;
pub use run::{run, RunBackend, RunConfig, RunError, RunReport};
pub use validate::InvalidTest;

/// Most nodes a test may name (`n0` to `n7`).
pub const MAX_NODES: usize = 8;
/// Most threads a test may have.
pub const MAX_THREADS: usize = 8;

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A test file could not be read.
    #[error("cannot read {path}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A test file is not a regular file (a directory, a FIFO, a device...): it is refused
    /// before it is opened, since a FIFO no one writes would block the reader for ever.
    #[error("cannot read {path}: it is {what}, not a regular file")]
    NotRegularFile {
        /// The file.
        path: String,
        /// What it is: `a directory`, `a FIFO (named pipe)`, `a character device`...
        what: &'static str,
    },
    /// A test file does not parse.
    #[error(transparent)]
    Parse(#[from] ParseError),
}
