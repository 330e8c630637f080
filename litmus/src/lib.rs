//! Litmus tests for loco-rs (placeholder docs, expanded below).

#![forbid(unsafe_code)]

pub mod ast;
mod cpu;
pub mod explore;
mod lower;
pub mod parse;
pub mod run;

pub use ast::Test;
pub use explore::{explore, Exploration, Outcome, Verdict};
pub use parse::{parse, parse_file, ParseError, ParseErrorKind};
pub use run::{run, Backend, RunConfig, RunError, RunReport};

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
    /// A test file does not parse.
    #[error(transparent)]
    Parse(#[from] ParseError),
}
