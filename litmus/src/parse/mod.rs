//! The `.litmus` parser: docs/litmus-format.md, exactly as written there, into a checked [`Test`].
//!
//! Every error names the file, the line and the column, and says what was expected; no input
//! makes the parser panic (it is fuzzed with proptest).
//!
//! The file is read line by line (`lex`: tokens and the cursor over them); this module walks
//! the file's parts in order (header, declarations and threads, condition, verdict) and
//! checks the whole at the end; `decl` parses declarations and opens threads, `stmt` the
//! statements of a thread, `names` resolves names to what they declare, `cond` the `exists`
//! condition.

use std::path::Path;

use crate::ast::*;
use crate::{MAX_NODES, MAX_THREADS};

/// A parse error: where, and what went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{}:{}: {kind}", span.line, span.col)]
pub struct ParseError {
    /// File name as given (or `<input>`).
    pub file: String,
    /// Line and column.
    pub span: Span,
    /// What went wrong.
    pub kind: ParseErrorKind,
}

/// What went wrong in a parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseErrorKind {
    /// Something else was found where the grammar wants `expected`.
    #[error("expected {expected}, found {found}")]
    Expected {
        /// What the grammar wants here.
        expected: String,
        /// What is there (`end of line`, `end of file`, or the token).
        found: String,
    },
    /// A character that starts no token. One that is not printable ASCII is also shown by its
    /// code point (an invisible one, such as a zero-width space, only by it).
    #[error("unexpected character {}", show_char(*.0))]
    BadChar(char),
    /// An integer that does not fit 64 bits.
    #[error("integer `{0}` does not fit in 64 bits")]
    IntTooLarge(String),
    /// A statement name that is no operation of docs/litmus-format.md.
    #[error("unknown operation `{name}`; expected one of {}", OPERATIONS.join(", "))]
    UnknownOperation {
        /// The name used.
        name: String,
    },
    /// An operation given the wrong number of arguments.
    #[error("`{op}` takes {expected} argument{}, found {found}: {usage}", if *.expected == 1 { "" } else { "s" })]
    Arity {
        /// The operation.
        op: &'static str,
        /// Arguments it takes.
        expected: usize,
        /// Arguments given.
        found: usize,
        /// How it is written.
        usage: &'static str,
    },
    /// An operation that returns a value, written without `r =`, or one that does not, with it.
    #[error("{0}")]
    Result(String),
    /// A name used before, or without, its declaration.
    #[error("undeclared {what} `{name}`")]
    Undeclared {
        /// `location`, `shared variable`, `sc location`, `lock`, `thread`, `register`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// A declared name of the wrong kind for this place.
    #[error("`{name}` is {is}, but {wanted}")]
    WrongKind {
        /// The name.
        name: String,
        /// What it was declared as (with article).
        is: String,
        /// What this place needs.
        wanted: String,
    },
    /// A word of another node where one local to the thread is required.
    #[error("`{name}` is on {loc_node}, but {role} of `{op}` must be local to thread {thread} (on {thread_node})")]
    NotLocal {
        /// The location.
        name: String,
        /// Its node.
        loc_node: NodeId,
        /// Which operand (`the source`, `the destination`, ...).
        role: &'static str,
        /// The operation.
        op: &'static str,
        /// The thread.
        thread: String,
        /// The thread's node.
        thread_node: NodeId,
    },
    /// A name declared twice.
    #[error("{what} `{name}` is already declared at line {}", first.line)]
    Duplicate {
        /// `location`, `thread`, ...
        what: &'static str,
        /// The name.
        name: String,
        /// Where it was first declared.
        first: Span,
    },
    /// A node name that is not `n0`, `n1`, ... within the checker's limit.
    #[error("bad node `{0}`: nodes are written n0, n1, ... up to n{max}", max = MAX_NODES - 1)]
    BadNode(String),
    /// More threads than the checker handles.
    #[error("too many threads: the checker handles at most {MAX_THREADS}")]
    TooManyThreads,
    /// A required part of the file is missing.
    #[error("missing {0}")]
    Missing(&'static str),
    /// Lock operations that do not pair up within a thread.
    #[error("{0}")]
    LockDiscipline(String),
    /// An input past one of the parser's limits ([`MAX_INPUT_BYTES`], [`MAX_STATEMENTS`],
    /// [`MAX_DECLARATIONS`], [`MAX_NAME_LEN`], [`MAX_ATOMS`]): no test needs that much, and the
    /// explorer could not finish one that did.
    #[error("too large: {}", too_large(what, *max, *unit))]
    TooLarge {
        /// What is too large.
        what: String,
        /// The limit.
        max: usize,
        /// What `max` counts: the input's bytes, or what `what` names.
        unit: LimitUnit,
    },
    /// The file is not UTF-8 text (the position is that of the first bad byte).
    #[error("not UTF-8 text")]
    NotUtf8,
    /// A `wait(d)` with no earlier operation of its thread tagged `d`: it would wait for
    /// nothing.
    #[error("`wait({wid})` would wait for nothing: no earlier operation of thread {thread} is tagged `{wid}`{}", match other {
        Some(o) => format!("; thread {o}'s operations are, but work ids belong to a thread: {thread} cannot wait for them"),
        None => " (tag a put, get, rcas, rfaa or bcast of this thread with it first)".to_string(),
    })]
    WaitForNothing {
        /// The work id.
        wid: String,
        /// The waiting thread.
        thread: String,
        /// A thread whose operations are tagged with it, if any.
        other: Option<String>,
    },
    /// A thread block never closed.
    #[error("thread `{name}` (opened at line {}) is not closed with `}}`", opened.line)]
    Unclosed {
        /// The thread.
        name: String,
        /// Where it was opened.
        opened: Span,
    },
}

/// A character in a message: `c`, with its code point unless it is printable ASCII, and only
/// its code point if it shows nothing (a control or format character, a byte order mark).
fn show_char(c: char) -> String {
    let invisible = c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2064}' | '\u{feff}');
    if c.is_ascii_graphic() {
        format!("`{c}`")
    } else if invisible {
        format!("U+{:04X}", c as u32)
    } else {
        format!("`{c}` (U+{:04X})", c as u32)
    }
}

/// What the `max` of a [`ParseErrorKind::TooLarge`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitUnit {
    /// Bytes of the whole input ([`MAX_INPUT_BYTES`]).
    InputBytes,
    /// What the error's `what` names: statements of a thread, declarations, characters of a
    /// name, atoms of the condition, ...
    Count,
}

/// Every operation of docs/litmus-format.md, in its table's order.
pub const OPERATIONS: &[&str] = &[
    "load", "store", "cas", "mfence", "put", "get", "rcas", "rfaa", "wait", "poll", "rfence",
    "bcast", "gf", "acquire", "release", "giveup", "handoff", "takeover", "read_sc", "write_sc",
    "cas_sc", "faa_sc",
];

/// Largest input the parser reads, in bytes (the project's tests are under 1 KiB).
pub const MAX_INPUT_BYTES: usize = 256 * 1024;
/// Most statements in one thread.
pub const MAX_STATEMENTS: usize = 256;
/// Most declarations (`loc`, `sv`, `sc`, `lock`) in one test.
pub const MAX_DECLARATIONS: usize = 256;
/// Longest name (of a test, location, register, thread, work id...), in characters.
pub const MAX_NAME_LEN: usize = 64;
/// Most atoms in the `exists` condition.
pub const MAX_ATOMS: usize = 64;

/// Reads and parses a `.litmus` file. A file larger than [`MAX_INPUT_BYTES`] is refused
/// without being read whole, and one that is not UTF-8 is a parse error at its first bad byte.
/// Anything but a regular file (a directory, a FIFO, a device, a socket) is
/// [`crate::Error::NotRegularFile`], before it is opened: opening a FIFO that no one writes
/// would block for ever. (To read a pipe, give it to [`parse_reader`].)
pub fn parse_file(path: &Path) -> Result<Test, crate::Error> {
    let file = path.display().to_string();
    let io = |source| crate::Error::Io {
        path: file.clone(),
        source,
    };
    let regular = |meta: &std::fs::Metadata| {
        if meta.is_file() {
            Ok(())
        } else {
            Err(crate::Error::NotRegularFile {
                path: file.clone(),
                what: file_kind(&meta.file_type()),
            })
        }
    };
    regular(&std::fs::metadata(path).map_err(io)?)?;
    let reader = std::fs::File::open(path).map_err(io)?;
    // Again on what was opened, in case the path changed in between.
    regular(&reader.metadata().map_err(io)?)?;
    parse_reader(reader, &file)
}

/// What a file that is not a regular file is, for [`crate::Error::NotRegularFile`].
fn file_kind(t: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_char_device() {
            return "a character device";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

/// Reads and parses one test from `reader` (standard input, say), as [`parse_file`] reads a
/// file: at most [`MAX_INPUT_BYTES`] are read, and input that is not UTF-8 is a parse error
/// at its first bad byte. `file` names the input in errors.
pub fn parse_reader(reader: impl std::io::Read, file: &str) -> Result<Test, crate::Error> {
    use std::io::Read as _;
    let io = |source| crate::Error::Io {
        path: file.to_string(),
        source,
    };
    let mut bytes = Vec::new();
    reader
        .take(MAX_INPUT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() > MAX_INPUT_BYTES {
        return Err(too_large_input(file).into());
    }
    let src = match std::str::from_utf8(&bytes) {
        Ok(s) => s,
        Err(e) => {
            let good = &bytes[..e.valid_up_to()];
            let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
            let start = good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let col = String::from_utf8_lossy(&good[start..]).chars().count() + 1;
            return Err(ParseError {
                file: file.to_string(),
                span: Span {
                    line: u32::try_from(line).unwrap_or(u32::MAX),
                    col: u32::try_from(col).unwrap_or(u32::MAX),
                },
                kind: ParseErrorKind::NotUtf8,
            }
            .into());
        }
    };
    Ok(parse(src, file)?)
}

/// The text of a [`ParseErrorKind::TooLarge`]: the input's limit is in bytes, the others count
/// what `what` names.
fn too_large(what: &str, max: usize, unit: LimitUnit) -> String {
    match unit {
        LimitUnit::InputBytes => format!("more than {max} bytes (the limit for a litmus test)"),
        LimitUnit::Count => format!("{what} (the limit is {max})"),
    }
}

fn too_large_input(file: &str) -> ParseError {
    ParseError {
        file: file.to_string(),
        span: Span { line: 1, col: 1 },
        kind: ParseErrorKind::TooLarge {
            what: "the input".into(),
            max: MAX_INPUT_BYTES,
            unit: LimitUnit::InputBytes,
        },
    }
}

/// Parses the text of one test; `file` names it in errors. Input past the limits
/// ([`MAX_INPUT_BYTES`] and the others) is an error, never a panic or a long parse.
pub fn parse(src: &str, file: &str) -> Result<Test, ParseError> {
    if src.len() > MAX_INPUT_BYTES {
        return Err(too_large_input(file));
    }
    // A byte order mark, which some editors write at the start of UTF-8 files, is not text.
    let src = src.strip_prefix('\u{feff}').unwrap_or(src);
    Parser::new(file).run(src)
}

mod cond;
mod decl;
mod lex;
mod names;
mod stmt;
#[cfg(test)]
mod tests;

use lex::{lex, Arg, Line, Tok};
use names::looks_like_node;

type PResult<T> = Result<T, (Span, ParseErrorKind)>;

/// Which part of the file comes next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Header,
    Top,
    Thread,
    Exists,
    Done,
}

struct Parser {
    file: String,
    name: String,
    locs: Vec<(LocDecl, Span)>,
    svs: Vec<(SvDecl, Span)>,
    scs: Vec<(ScDecl, Span)>,
    locks: Vec<(LockDecl, Span)>,
    threads: Vec<(Thread, Span)>,
    work_ids: Vec<String>,
    nodes: Vec<NodeId>,
    /// (thread, statement) whose node set is `all`, filled in at the end.
    all_sets: Vec<(usize, usize)>,
    /// Locks held by the open thread, with where each was acquired.
    held: Vec<(LockId, Span)>,
    exists: Option<Cond>,
    expect: Option<Expect>,
    /// `atomics ...`, with where it was given.
    atomics: Option<(FailedCas, Span)>,
    /// `fence ...`, with where it was given.
    fence: Option<(FenceRead, Span)>,
    /// Condition atoms naming sv copies: their node must be a node of the test, known at the end.
    sv_atoms: Vec<(NodeId, Span)>,
}

impl Parser {
    fn new(file: &str) -> Self {
        Parser {
            file: file.to_string(),
            name: String::new(),
            locs: Vec::new(),
            svs: Vec::new(),
            scs: Vec::new(),
            locks: Vec::new(),
            threads: Vec::new(),
            work_ids: Vec::new(),
            nodes: Vec::new(),
            all_sets: Vec::new(),
            held: Vec::new(),
            exists: None,
            expect: None,
            atomics: None,
            fence: None,
            sv_atoms: Vec::new(),
        }
    }

    /// `atomics model` (the default) or `atomics rxe`: what a failed remote CAS does.
    fn decl_atomics(&mut self, line: &mut Line, kw: Span) -> PResult<()> {
        if let Some((_, first)) = self.atomics {
            let kind = ParseErrorKind::Duplicate {
                what: "setting",
                name: "atomics".to_string(),
                first,
            };
            return Err((kw, kind));
        }
        const WANT: &str = "`model` or `rxe` after `atomics`";
        let (v, _) = line.ident(WANT)?;
        let mode = match v.as_str() {
            "model" => FailedCas::Reads,
            "rxe" => FailedCas::WritesBack,
            _ => {
                line.pos -= 1;
                return Err(line.err(WANT));
            }
        };
        line.end()?;
        self.atomics = Some((mode, kw));
        Ok(())
    }

    /// `fence get` (the default) or `fence cas`: how global fences read.
    fn decl_fence(&mut self, line: &mut Line, kw: Span) -> PResult<()> {
        if let Some((_, first)) = self.fence {
            let kind = ParseErrorKind::Duplicate {
                what: "setting",
                name: "fence".to_string(),
                first,
            };
            return Err((kw, kind));
        }
        const WANT: &str = "`get` or `cas` after `fence`";
        let (v, _) = line.ident(WANT)?;
        let Some(read) = FenceRead::by_name(&v) else {
            line.pos -= 1;
            return Err(line.err(WANT));
        };
        line.end()?;
        self.fence = Some((read, kw));
        Ok(())
    }

    fn error(&self, (span, kind): (Span, ParseErrorKind)) -> ParseError {
        ParseError {
            file: self.file.clone(),
            span,
            kind,
        }
    }

    fn run(mut self, src: &str) -> Result<Test, ParseError> {
        let mut phase = Phase::Header;
        let mut last = Span { line: 1, col: 1 };
        for (i, raw) in src.lines().enumerate() {
            let lno = u32::try_from(i + 1).unwrap_or(u32::MAX);
            let text = raw.split('#').next().unwrap_or("");
            let toks = lex(text, lno).map_err(|e| self.error(e))?;
            if toks.is_empty() {
                continue;
            }
            let end = Span {
                line: lno,
                col: text.trim_end().chars().count() as u32 + 1,
            };
            last = end;
            let mut line = Line { toks, pos: 0, end };
            phase = self
                .line(phase, &mut line, text.trim())
                .map_err(|e| self.error(e))?;
        }
        let eof = (
            last,
            ParseErrorKind::Expected {
                expected: String::new(),
                found: "end of file".into(),
            },
        );
        let missing = |what| (eof.0, ParseErrorKind::Missing(what));
        match phase {
            Phase::Header => return Err(self.error(missing("`litmus <name>` line"))),
            Phase::Thread => {
                let (t, span) = self.threads.last().expect("an open thread");
                let kind = ParseErrorKind::Unclosed {
                    name: t.name.clone(),
                    opened: *span,
                };
                return Err(self.error((eof.0, kind)));
            }
            Phase::Top => {
                return Err(self.error(missing("`exists <condition>` (and `expect`) at the end")))
            }
            Phase::Exists => {
                return Err(self.error(missing(
                    "`expect allowed` or `expect forbidden` after the `exists` condition",
                )))
            }
            Phase::Done => {}
        }
        self.finish()
    }

    fn finish(mut self) -> Result<Test, ParseError> {
        self.nodes.sort();
        self.nodes.dedup();
        for &(n, span) in &self.sv_atoms {
            if !self.nodes.contains(&n) {
                return Err(self.error((
                    span,
                    ParseErrorKind::Expected {
                        expected: "a node of the test (shared variables have a copy on each)"
                            .into(),
                        found: format!("`{n}`"),
                    },
                )));
            }
        }
        // A lock some thread gives up may take at most MARKS tickets: the explorer lays out one
        // ring word per ticket, and a ticket MARKS or more ahead would have its mark owed.
        for (l, (decl, _)) in self.locks.iter().enumerate() {
            let uses = || self.threads.iter().flat_map(|t| &t.0.body);
            let gives = uses().find(|s| matches!(s.op, Op::GiveUp(x) if x.0 == l));
            let tickets = uses()
                .filter(|s| matches!(s.op, Op::Acquire(x) | Op::GiveUp(x) if x.0 == l))
                .count();
            let max = loco_locks::MARKS as usize;
            if let (Some(g), true) = (gives, tickets > max) {
                return Err(self.error((
                    g.span,
                    ParseErrorKind::TooLarge {
                        what: format!(
                            "{tickets} acquires and give-ups of `{}`, a lock some thread gives up",
                            decl.name
                        ),
                        max,
                        unit: LimitUnit::Count,
                    },
                )));
            }
        }
        // A takeover waits for a handoff of the same lock on its node: one of each at most.
        for (l, (decl, _)) in self.locks.iter().enumerate() {
            for node in &self.nodes {
                let on = |op: fn(LockId) -> Op| {
                    self.threads
                        .iter()
                        .filter(|t| t.0.node == *node)
                        .flat_map(|t| &t.0.body)
                        .filter(|s| s.op == op(LockId(l)))
                        .map(|s| s.span)
                        .collect::<Vec<_>>()
                };
                let (offs, takes) = (on(Op::Handoff), on(Op::Takeover));
                for (spans, op) in [(&offs, "handoff"), (&takes, "takeover")] {
                    if let Some(&second) = spans.get(1) {
                        let what = format!("{} {op}s of `{}` on {node}", spans.len(), decl.name);
                        return Err(self.error((
                            second,
                            ParseErrorKind::TooLarge {
                                what,
                                max: 1,
                                unit: LimitUnit::Count,
                            },
                        )));
                    }
                }
                if let (Some(&t), true) = (takes.first(), offs.is_empty()) {
                    return Err(self.error((
                        t,
                        ParseErrorKind::LockDiscipline(format!(
                            "a takeover of `{}` needs a handoff of it by another thread of {node}",
                            decl.name
                        )),
                    )));
                }
            }
        }
        for &(t, s) in &self.all_sets {
            match &mut self.threads[t].0.body[s].op {
                Op::Bcast { nodes, .. } | Op::Gf(nodes) => nodes.clone_from(&self.nodes),
                _ => unreachable!("only bcast and gf take node sets"),
            }
        }
        Ok(Test {
            name: self.name,
            locs: self.locs.into_iter().map(|d| d.0).collect(),
            svs: self.svs.into_iter().map(|d| d.0).collect(),
            scs: self.scs.into_iter().map(|d| d.0).collect(),
            locks: self.locks.into_iter().map(|d| d.0).collect(),
            threads: self.threads.into_iter().map(|d| d.0).collect(),
            work_ids: self.work_ids,
            nodes: self.nodes,
            atomics: self.atomics.map_or(FailedCas::Reads, |(a, _)| a),
            fence: self.fence.map_or(FenceRead::Get, |(f, _)| f),
            exists: self.exists.expect("phase Done has a condition"),
            expect: self.expect.expect("phase Done has a verdict"),
        })
    }

    fn line(&mut self, phase: Phase, line: &mut Line, text: &str) -> PResult<Phase> {
        match phase {
            Phase::Header => {
                let (kw, _) = line.ident("`litmus <name>` as the first line")?;
                if kw != "litmus" {
                    line.pos = 0;
                    return Err(line.err("`litmus <name>` as the first line"));
                }
                let name = text["litmus".len()..].trim();
                if name.is_empty() {
                    return Err(line.err("the test's name after `litmus`"));
                }
                if name.contains(char::is_whitespace) {
                    return Err(line.err("a test name without spaces"));
                }
                self.name = name.to_string();
                Ok(Phase::Top)
            }
            Phase::Top => {
                const WANT: &str =
                    "a declaration (`loc`, `sv`, `sc`, `lock`, `atomics`, `fence`), a `thread`, or `exists`";
                let (kw, span) = line.ident(WANT)?;
                match kw.as_str() {
                    "loc" | "sc" => self.decl_word(&kw == "sc", line, span).map(|()| Phase::Top),
                    "sv" => self.decl_sv(line, span).map(|()| Phase::Top),
                    "lock" => self.decl_lock(line, span).map(|()| Phase::Top),
                    "atomics" => self.decl_atomics(line, span).map(|()| Phase::Top),
                    "fence" => self.decl_fence(line, span).map(|()| Phase::Top),
                    "thread" => self.open_thread(line, span).map(|()| Phase::Thread),
                    "exists" => {
                        let cond = self.cond(line)?;
                        self.exists = Some(cond);
                        Ok(Phase::Exists)
                    }
                    "expect" => Err((
                        span,
                        ParseErrorKind::Missing("`exists <condition>` before `expect`"),
                    )),
                    _ => {
                        line.pos = 0;
                        Err(line.err(WANT))
                    }
                }
            }
            Phase::Thread => {
                if line.peek() == Some(&Tok::RBrace) {
                    line.next();
                    line.end()?;
                    self.held.clear(); // a thread may end holding a lock
                    return Ok(Phase::Top);
                }
                let top_kw = matches!(line.peek(), Some(Tok::Ident(k))
                    if matches!(k.as_str(), "exists" | "thread" | "loc" | "sv" | "sc" | "lock" | "atomics" | "fence" | "expect"))
                    && !matches!(line.toks.get(1), Some((Tok::LParen | Tok::Eq, _)));
                if top_kw {
                    let (t, opened) = self.threads.last().expect("an open thread");
                    let kind = ParseErrorKind::Unclosed {
                        name: t.name.clone(),
                        opened: *opened,
                    };
                    return Err((line.span(), kind));
                }
                self.stmt(line, text)?;
                Ok(Phase::Thread)
            }
            Phase::Exists => {
                let (kw, span) = line.ident("`expect allowed` or `expect forbidden`")?;
                if kw != "expect" {
                    return Err((
                        span,
                        ParseErrorKind::Expected {
                            expected: "`expect allowed` or `expect forbidden`".into(),
                            found: format!("`{kw}`"),
                        },
                    ));
                }
                let (v, vspan) = line.ident("`allowed` or `forbidden` after `expect`")?;
                self.expect = Some(match v.as_str() {
                    "allowed" => Expect::Allowed,
                    "forbidden" => Expect::Forbidden,
                    _ => {
                        return Err((
                            vspan,
                            ParseErrorKind::Expected {
                                expected: "`allowed` or `forbidden` after `expect`".into(),
                                found: format!("`{v}`"),
                            },
                        ))
                    }
                });
                line.end()?;
                Ok(Phase::Done)
            }
            Phase::Done => Err(line.err("end of file after `expect` (one test per file)")),
        }
    }
}
