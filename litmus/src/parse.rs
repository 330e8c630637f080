//! The `.litmus` parser: `FORMAT.md`, exactly as written there, into a checked [`Test`].
//!
//! Every error names the file, the line and the column, and says what was expected; no input
//! makes the parser panic (it is fuzzed with proptest).

use std::fmt;
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
    /// A character that starts no token.
    #[error("unexpected character `{0}`")]
    BadChar(char),
    /// An integer that does not fit 64 bits.
    #[error("integer `{0}` does not fit in 64 bits")]
    IntTooLarge(String),
    /// A statement name that is no operation of `FORMAT.md`.
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
    #[error("too large: {what} (the limit is {max})")]
    TooLarge {
        /// What is too large.
        what: String,
        /// The limit.
        max: usize,
    },
    /// The file is not UTF-8 text (the position is that of the first bad byte).
    #[error("not UTF-8 text")]
    NotUtf8,
    /// A thread block never closed.
    #[error("thread `{name}` (opened at line {}) is not closed with `}}`", opened.line)]
    Unclosed {
        /// The thread.
        name: String,
        /// Where it was opened.
        opened: Span,
    },
}

/// Every operation of `FORMAT.md`, in its table's order.
pub const OPERATIONS: &[&str] = &[
    "load", "store", "cas", "mfence", "put", "get", "rcas", "rfaa", "wait", "poll", "rfence",
    "bcast", "gf", "acquire", "release", "read_sc", "write_sc", "cas_sc", "faa_sc",
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
pub fn parse_file(path: &Path) -> Result<Test, crate::Error> {
    use std::io::Read as _;
    let file = path.display().to_string();
    let io = |source| crate::Error::Io {
        path: file.clone(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_INPUT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() > MAX_INPUT_BYTES {
        return Err(too_large_input(&file).into());
    }
    let src = match std::str::from_utf8(&bytes) {
        Ok(s) => s,
        Err(e) => {
            let good = &bytes[..e.valid_up_to()];
            let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
            let start = good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let col = String::from_utf8_lossy(&good[start..]).chars().count() + 1;
            return Err(ParseError {
                file,
                span: Span {
                    line: u32::try_from(line).unwrap_or(u32::MAX),
                    col: u32::try_from(col).unwrap_or(u32::MAX),
                },
                kind: ParseErrorKind::NotUtf8,
            }
            .into());
        }
    };
    Ok(parse(src, &file)?)
}

fn too_large_input(file: &str) -> ParseError {
    ParseError {
        file: file.to_string(),
        span: Span { line: 1, col: 1 },
        kind: ParseErrorKind::TooLarge {
            what: "the input".into(),
            max: MAX_INPUT_BYTES,
        },
    }
}

/// Parses the text of one test; `file` names it in errors. Input past the limits
/// ([`MAX_INPUT_BYTES`] and the others) is an error, never a panic or a long parse.
pub fn parse(src: &str, file: &str) -> Result<Test, ParseError> {
    if src.len() > MAX_INPUT_BYTES {
        return Err(too_large_input(file));
    }
    Parser::new(file).run(src)
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Int(u64),
    At,
    Eq,
    Comma,
    LParen,
    RParen,
    LBrace,
    RBrace,
    Colon,
    And,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident(s) => write!(f, "`{s}`"),
            Tok::Int(v) => write!(f, "`{v}`"),
            Tok::At => f.write_str("`@`"),
            Tok::Eq => f.write_str("`=`"),
            Tok::Comma => f.write_str("`,`"),
            Tok::LParen => f.write_str("`(`"),
            Tok::RParen => f.write_str("`)`"),
            Tok::LBrace => f.write_str("`{`"),
            Tok::RBrace => f.write_str("`}`"),
            Tok::Colon => f.write_str("`:`"),
            Tok::And => f.write_str("`/\\`"),
        }
    }
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// Splits one line (comment already removed) into tokens with their columns.
fn lex(line: &str, lno: u32) -> Result<Vec<(Tok, Span)>, (Span, ParseErrorKind)> {
    let chars: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let span = Span {
            line: lno,
            col: i as u32 + 1,
        };
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let tok = if is_ident_start(c) {
            let start = i;
            while i < chars.len() && is_ident_char(chars[i]) {
                i += 1;
            }
            if i - start > MAX_NAME_LEN {
                let what = format!("a name of {} characters", i - start);
                return Err((
                    span,
                    ParseErrorKind::TooLarge {
                        what,
                        max: MAX_NAME_LEN,
                    },
                ));
            }
            out.push((Tok::Ident(chars[start..i].iter().collect()), span));
            continue;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_alphanumeric() {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            if !text.chars().all(|c| c.is_ascii_digit()) {
                return Err((
                    span,
                    ParseErrorKind::Expected {
                        expected: "an integer or a name".into(),
                        found: format!("`{text}`"),
                    },
                ));
            }
            match text.parse::<u64>() {
                Ok(v) => out.push((Tok::Int(v), span)),
                Err(_) => return Err((span, ParseErrorKind::IntTooLarge(text))),
            }
            continue;
        } else {
            match c {
                '@' => Tok::At,
                '=' => Tok::Eq,
                ',' => Tok::Comma,
                '(' => Tok::LParen,
                ')' => Tok::RParen,
                '{' => Tok::LBrace,
                '}' => Tok::RBrace,
                ':' => Tok::Colon,
                '/' if chars.get(i + 1) == Some(&'\\') => {
                    i += 1;
                    Tok::And
                }
                _ => return Err((span, ParseErrorKind::BadChar(c))),
            }
        };
        i += 1;
        out.push((tok, span));
    }
    Ok(out)
}

/// The tokens of one line, consumed left to right.
struct Line {
    toks: Vec<(Tok, Span)>,
    pos: usize,
    /// Column just past the line's last character.
    end: Span,
}

impl Line {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(t, _)| t)
    }

    fn span(&self) -> Span {
        self.toks.get(self.pos).map_or(self.end, |(_, s)| *s)
    }

    fn found(&self) -> String {
        self.peek()
            .map_or_else(|| "end of line".to_string(), |t| t.to_string())
    }

    fn err(&self, expected: impl Into<String>) -> (Span, ParseErrorKind) {
        (
            self.span(),
            ParseErrorKind::Expected {
                expected: expected.into(),
                found: self.found(),
            },
        )
    }

    fn next(&mut self) -> Option<(Tok, Span)> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn expect(&mut self, tok: Tok) -> Result<Span, (Span, ParseErrorKind)> {
        if self.peek() == Some(&tok) {
            Ok(self.next().expect("peeked").1)
        } else {
            Err(self.err(tok.to_string()))
        }
    }

    fn ident(&mut self, what: &str) -> Result<(String, Span), (Span, ParseErrorKind)> {
        match self.peek() {
            Some(Tok::Ident(_)) => match self.next() {
                Some((Tok::Ident(s), span)) => Ok((s, span)),
                _ => unreachable!("peeked an identifier"),
            },
            _ => Err(self.err(what)),
        }
    }

    fn int(&mut self, what: &str) -> Result<u64, (Span, ParseErrorKind)> {
        match self.peek() {
            Some(Tok::Int(v)) => {
                let v = *v;
                self.pos += 1;
                Ok(v)
            }
            _ => Err(self.err(what)),
        }
    }

    fn end(&self) -> Result<(), (Span, ParseErrorKind)> {
        if self.pos < self.toks.len() {
            Err(self.err("end of line"))
        } else {
            Ok(())
        }
    }

    fn at_end(&self) -> bool {
        self.pos >= self.toks.len()
    }
}

/// A parsed argument of a statement, before its meaning is known.
#[derive(Clone, Debug)]
enum Arg {
    Ident(String),
    Int(u64),
    Set(Vec<(String, Span)>),
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arg::Ident(s) => write!(f, "`{s}`"),
            Arg::Int(v) => write!(f, "the integer `{v}`"),
            Arg::Set(_) => f.write_str("a node set"),
        }
    }
}

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
            sv_atoms: Vec::new(),
        }
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
                    "a declaration (`loc`, `sv`, `sc`, `lock`), a `thread`, or `exists`";
                let (kw, span) = line.ident(WANT)?;
                match kw.as_str() {
                    "loc" | "sc" => self.decl_word(&kw == "sc", line, span).map(|()| Phase::Top),
                    "sv" => self.decl_sv(line, span).map(|()| Phase::Top),
                    "lock" => self.decl_lock(line, span).map(|()| Phase::Top),
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
                    if matches!(k.as_str(), "exists" | "thread" | "loc" | "sv" | "sc" | "lock" | "expect"))
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

    // ----- names -----

    fn node_name(&mut self, name: &str, span: Span) -> PResult<NodeId> {
        let n = name
            .strip_prefix('n')
            .filter(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
            .and_then(|d| d.parse::<usize>().ok())
            .filter(|&n| n < MAX_NODES)
            .ok_or((span, ParseErrorKind::BadNode(name.to_string())))?;
        let node = NodeId(n as u16);
        if !self.nodes.contains(&node) {
            self.nodes.push(node);
        }
        Ok(node)
    }

    fn node(&mut self, line: &mut Line) -> PResult<NodeId> {
        line.expect(Tok::At)
            .map_err(|_| line.err("`@<node>`, such as `@n0`"))?;
        let (name, span) = line.ident("a node, such as `n0`")?;
        self.node_name(&name, span)
    }

    /// What a declared name is, with an article, for messages.
    fn kind_of(&self, name: &str) -> Option<String> {
        if self.locs.iter().any(|d| d.0.name == name) {
            Some("a loc".into())
        } else if self.svs.iter().any(|d| d.0.name == name) {
            Some("a shared variable (sv)".into())
        } else if self.scs.iter().any(|d| d.0.name == name) {
            Some("an sc location".into())
        } else {
            self.locks
                .iter()
                .find(|d| d.0.name == name)
                .map(|l| format!("a lock ({})", l.0.kind))
        }
    }

    fn first_decl(&self, name: &str) -> Option<Span> {
        self.locs
            .iter()
            .find(|d| d.0.name == name)
            .map(|d| d.1)
            .or_else(|| self.svs.iter().find(|d| d.0.name == name).map(|d| d.1))
            .or_else(|| self.scs.iter().find(|d| d.0.name == name).map(|d| d.1))
            .or_else(|| self.locks.iter().find(|d| d.0.name == name).map(|d| d.1))
    }

    fn fresh(&self, name: &str, span: Span) -> PResult<()> {
        let decls = self.locs.len() + self.svs.len() + self.scs.len() + self.locks.len();
        if decls >= MAX_DECLARATIONS {
            let what = "more declarations".to_string();
            return Err((
                span,
                ParseErrorKind::TooLarge {
                    what,
                    max: MAX_DECLARATIONS,
                },
            ));
        }
        if let Some(first) = self.first_decl(name) {
            return Err((
                span,
                ParseErrorKind::Duplicate {
                    what: "name",
                    name: name.to_string(),
                    first,
                },
            ));
        }
        if looks_like_node(name) {
            return Err((
                span,
                ParseErrorKind::Expected {
                    expected: "a name that is not a node name".into(),
                    found: format!("`{name}`"),
                },
            ));
        }
        Ok(())
    }

    fn init(&self, line: &mut Line) -> PResult<u64> {
        if line.at_end() {
            return Ok(0);
        }
        line.expect(Tok::Eq)
            .map_err(|_| line.err("`= <int>` or end of line"))?;
        let v = line.int("an initial value (an integer)")?;
        line.end()?;
        Ok(v)
    }

    // ----- declarations -----

    fn decl_word(&mut self, sc: bool, line: &mut Line, _kw: Span) -> PResult<()> {
        let (name, span) = line.ident(if sc {
            "the sc location's name"
        } else {
            "the location's name"
        })?;
        self.fresh(&name, span)?;
        let node = self.node(line)?;
        let init = self.init(line)?;
        if sc {
            self.scs.push((ScDecl { name, node, init }, span));
        } else {
            let d = LocDecl {
                name,
                node,
                init,
                written: false,
            };
            self.locs.push((d, span));
        }
        Ok(())
    }

    fn decl_sv(&mut self, line: &mut Line, _kw: Span) -> PResult<()> {
        let (name, span) = line.ident("the shared variable's name")?;
        self.fresh(&name, span)?;
        let init = self.init(line)?;
        self.svs.push((SvDecl { name, init }, span));
        Ok(())
    }

    fn decl_lock(&mut self, line: &mut Line, _kw: Span) -> PResult<()> {
        let (name, span) = line.ident("the lock's name")?;
        self.fresh(&name, span)?;
        line.expect(Tok::Colon)?;
        const KINDS: &str = "a lock kind: `wlock`, `slock` or `nlock @<node>`";
        let (k, kspan) = line.ident(KINDS)?;
        let kind = match k.as_str() {
            "wlock" => LockKind::WLock,
            "slock" => LockKind::SLock,
            "nlock" => LockKind::NLock(self.node(line)?),
            _ => {
                return Err((
                    kspan,
                    ParseErrorKind::Expected {
                        expected: KINDS.into(),
                        found: format!("`{k}`"),
                    },
                ))
            }
        };
        line.end()?;
        self.locks.push((LockDecl { name, kind }, span));
        Ok(())
    }

    fn open_thread(&mut self, line: &mut Line, _kw: Span) -> PResult<()> {
        let (name, span) = line.ident("the thread's name")?;
        if let Some(t) = self.threads.iter().find(|t| t.0.name == name) {
            return Err((
                span,
                ParseErrorKind::Duplicate {
                    what: "thread",
                    name,
                    first: t.1,
                },
            ));
        }
        if self.threads.len() == MAX_THREADS {
            return Err((span, ParseErrorKind::TooManyThreads));
        }
        let node = self.node(line)?;
        line.expect(Tok::LBrace)?;
        line.end()
            .map_err(|_| line.err("end of line after `{` (one statement per line)"))?;
        let th = Thread {
            name,
            node,
            body: Vec::new(),
            regs: Vec::new(),
            assigned: Vec::new(),
        };
        self.threads.push((th, span));
        Ok(())
    }

    // ----- statements -----

    fn thread(&mut self) -> &mut Thread {
        &mut self.threads.last_mut().expect("inside a thread").0
    }

    fn reg(&mut self, name: &str, span: Span, assign: bool) -> PResult<RegId> {
        if let Some(is) = self.kind_of(name) {
            return Err((
                span,
                ParseErrorKind::WrongKind {
                    name: name.into(),
                    is,
                    wanted: if assign {
                        "a result goes to a register, which needs a name of its own".into()
                    } else {
                        "a value here must be an integer or a register".into()
                    },
                },
            ));
        }
        if looks_like_node(name) {
            return Err((
                span,
                ParseErrorKind::Expected {
                    expected: "an integer or a register (not a node)".into(),
                    found: format!("`{name}`"),
                },
            ));
        }
        let th = self.thread();
        let i = match th.regs.iter().position(|r| r == name) {
            Some(i) => i,
            None => {
                th.regs.push(name.to_string());
                th.assigned.push(false);
                th.regs.len() - 1
            }
        };
        if assign {
            th.assigned[i] = true;
        }
        Ok(RegId(i))
    }

    fn value(&mut self, arg: &(Arg, Span)) -> PResult<Value> {
        match &arg.0 {
            Arg::Int(v) => Ok(Value::Int(*v)),
            Arg::Ident(name) => self.reg(name, arg.1, false).map(Value::Reg),
            Arg::Set(_) => Err((
                arg.1,
                ParseErrorKind::Expected {
                    expected: "an integer or a register".into(),
                    found: "a node set".into(),
                },
            )),
        }
    }

    fn name_arg<'a>(&self, arg: &'a (Arg, Span), what: &str) -> PResult<&'a str> {
        match &arg.0 {
            Arg::Ident(s) => Ok(s),
            other => Err((
                arg.1,
                ParseErrorKind::Expected {
                    expected: what.into(),
                    found: other.to_string(),
                },
            )),
        }
    }

    fn wrong(&self, name: &str, span: Span, wanted: String) -> (Span, ParseErrorKind) {
        match self.kind_of(name) {
            Some(is) => (
                span,
                ParseErrorKind::WrongKind {
                    name: name.into(),
                    is,
                    wanted,
                },
            ),
            None => (
                span,
                ParseErrorKind::Undeclared {
                    what: "location",
                    name: name.into(),
                },
            ),
        }
    }

    /// A `loc`, anywhere (`local = None`) or local to the thread (`Some(role)`).
    fn loc(
        &mut self,
        arg: &(Arg, Span),
        op: &'static str,
        local: Option<&'static str>,
    ) -> PResult<LocId> {
        let name = self.name_arg(arg, "a location")?;
        let Some(i) = self.locs.iter().position(|d| d.0.name == name) else {
            return Err(self.wrong(name, arg.1, format!("`{op}` needs a loc here")));
        };
        let loc_node = self.locs[i].0.node;
        let th = &self.threads.last().expect("inside a thread").0;
        if let Some(role) = local {
            if loc_node != th.node {
                return Err((
                    arg.1,
                    ParseErrorKind::NotLocal {
                        name: name.into(),
                        loc_node,
                        role,
                        op,
                        thread: th.name.clone(),
                        thread_node: th.node,
                    },
                ));
            }
        }
        self.locs[i].0.written |= matches!(
            (op, local),
            ("store" | "cas" | "rcas" | "rfaa", _) | ("put", None) | ("get", Some(_))
        );
        Ok(LocId(i))
    }

    /// A CPU-accessible word: a local `loc`, or an `sv` (its local copy).
    fn var(&mut self, arg: &(Arg, Span), op: &'static str, role: &'static str) -> PResult<Var> {
        let name = self.name_arg(arg, "a location")?;
        if let Some(i) = self.svs.iter().position(|d| d.0.name == name) {
            return Ok(Var::Sv(SvId(i)));
        }
        self.loc(arg, op, Some(role)).map(Var::Loc)
    }

    fn sv(&self, arg: &(Arg, Span), op: &str) -> PResult<SvId> {
        let name = self.name_arg(arg, "a shared variable")?;
        match self.svs.iter().position(|d| d.0.name == name) {
            Some(i) => Ok(SvId(i)),
            None if self.kind_of(name).is_none() => Err((
                arg.1,
                ParseErrorKind::Undeclared {
                    what: "shared variable",
                    name: name.into(),
                },
            )),
            None => Err(self.wrong(name, arg.1, format!("`{op}` needs a shared variable (sv)"))),
        }
    }

    fn sc(&self, arg: &(Arg, Span), op: &str) -> PResult<ScId> {
        let name = self.name_arg(arg, "an sc location")?;
        match self.scs.iter().position(|d| d.0.name == name) {
            Some(i) => Ok(ScId(i)),
            None if self.kind_of(name).is_none() => Err((
                arg.1,
                ParseErrorKind::Undeclared {
                    what: "sc location",
                    name: name.into(),
                },
            )),
            None => Err(self.wrong(name, arg.1, format!("`{op}` needs an sc location"))),
        }
    }

    fn lock(&self, arg: &(Arg, Span), op: &str) -> PResult<LockId> {
        let name = self.name_arg(arg, "a lock")?;
        match self.locks.iter().position(|d| d.0.name == name) {
            Some(i) => Ok(LockId(i)),
            None if self.kind_of(name).is_none() => Err((
                arg.1,
                ParseErrorKind::Undeclared {
                    what: "lock",
                    name: name.into(),
                },
            )),
            None => Err(self.wrong(name, arg.1, format!("`{op}` needs a lock"))),
        }
    }

    fn wid(&mut self, arg: &(Arg, Span)) -> PResult<WidId> {
        let name = self.name_arg(arg, "a work id, such as `d1`")?;
        let i = match self.work_ids.iter().position(|w| w == name) {
            Some(i) => i,
            None => {
                self.work_ids.push(name.to_string());
                self.work_ids.len() - 1
            }
        };
        Ok(WidId(i))
    }

    fn node_arg(&mut self, arg: &(Arg, Span)) -> PResult<NodeId> {
        let name = self.name_arg(arg, "a node, such as `n1`")?;
        self.node_name(name, arg.1)
    }

    /// A node set; `None` for `all` (filled in at the end).
    fn nodes_arg(&mut self, arg: &(Arg, Span)) -> PResult<Option<Vec<NodeId>>> {
        match &arg.0 {
            Arg::Ident(s) if s == "all" => Ok(None),
            Arg::Ident(_) => Ok(Some(vec![self.node_arg(arg)?])),
            Arg::Set(names) => {
                let mut v = Vec::new();
                for (n, span) in names {
                    v.push(self.node_name(n, *span)?);
                }
                v.sort();
                v.dedup();
                Ok(Some(v))
            }
            Arg::Int(_) => Err((
                arg.1,
                ParseErrorKind::Expected {
                    expected: "a node, a node set `{n1, n2}` or `all`".into(),
                    found: arg.0.to_string(),
                },
            )),
        }
    }

    fn args(&self, line: &mut Line) -> PResult<Vec<(Arg, Span)>> {
        line.expect(Tok::LParen)?;
        let mut args = Vec::new();
        if line.peek() == Some(&Tok::RParen) {
            line.next();
            return Ok(args);
        }
        loop {
            let span = line.span();
            let arg = match line.next() {
                Some((Tok::Ident(s), _)) => Arg::Ident(s),
                Some((Tok::Int(v), _)) => Arg::Int(v),
                Some((Tok::LBrace, _)) => {
                    let mut set = Vec::new();
                    loop {
                        set.push(line.ident("a node, such as `n1`")?);
                        match line.next() {
                            Some((Tok::Comma, _)) => {}
                            Some((Tok::RBrace, _)) => break,
                            _ => {
                                line.pos -= 1;
                                return Err(line.err("`,` or `}`"));
                            }
                        }
                    }
                    Arg::Set(set)
                }
                _ => {
                    line.pos -= 1;
                    return Err(line.err("an argument (a name, an integer or a node set)"));
                }
            };
            args.push((arg, span));
            match line.next() {
                Some((Tok::Comma, _)) => {}
                Some((Tok::RParen, _)) => return Ok(args),
                _ => {
                    line.pos -= 1;
                    return Err(line.err("`,` or `)`"));
                }
            }
        }
    }

    fn stmt(&mut self, line: &mut Line, text: &str) -> PResult<()> {
        let span = line.span();
        if self.thread().body.len() >= MAX_STATEMENTS {
            let what = format!("more statements in thread `{}`", self.thread().name);
            return Err((
                span,
                ParseErrorKind::TooLarge {
                    what,
                    max: MAX_STATEMENTS,
                },
            ));
        }
        let (first, fspan) = line.ident("a statement or `}`")?;
        let (result, op_name, op_span) = if line.peek() == Some(&Tok::Eq) {
            line.next();
            let (op, ospan) = line.ident("an operation after `=`")?;
            (Some((first, fspan)), op, ospan)
        } else {
            (None, first, fspan)
        };
        let Some(&op_static) = OPERATIONS.iter().find(|o| **o == op_name) else {
            return Err((op_span, ParseErrorKind::UnknownOperation { name: op_name }));
        };
        let args = self.args(line)?;
        line.end()?;
        let returns = matches!(op_static, "load" | "cas" | "read_sc" | "cas_sc" | "faa_sc");
        let reg = match (&result, returns) {
            (Some((r, rspan)), true) => Some(self.reg(r, *rspan, true)?),
            (None, false) => None,
            (None, true) => {
                return Err((
                    op_span,
                    ParseErrorKind::Result(format!(
                        "`{op_static}` returns a value: write `<r> = {op_static}(...)`"
                    )),
                ))
            }
            (Some((_, rspan)), false) => {
                return Err((
                    *rspan,
                    ParseErrorKind::Result(format!(
                        "`{op_static}` returns no value: drop the `<r> =`"
                    )),
                ))
            }
        };
        let (n, usage) = usage(op_static);
        if args.len() != n {
            return Err((
                op_span,
                ParseErrorKind::Arity {
                    op: op_static,
                    expected: n,
                    found: args.len(),
                    usage,
                },
            ));
        }
        let a = &args;
        let reg = || reg.expect("operations that return have a register");
        let mut all = false;
        let op = match op_static {
            "load" => Op::Load {
                reg: reg(),
                var: self.var(&a[0], "load", "the location")?,
            },
            "store" => Op::Store {
                var: self.var(&a[0], "store", "the location")?,
                val: self.value(&a[1])?,
            },
            "cas" => Op::Cas {
                reg: reg(),
                loc: self.loc(&a[0], "cas", Some("the location"))?,
                expected: self.value(&a[1])?,
                new: self.value(&a[2])?,
            },
            "mfence" => Op::Mfence,
            "put" => Op::Put {
                remote: self.loc(&a[0], "put", None)?,
                local: self.loc(&a[1], "put", Some("the source"))?,
                wid: self.wid(&a[2])?,
            },
            "get" => Op::Get {
                local: self.loc(&a[0], "get", Some("the destination"))?,
                remote: self.loc(&a[1], "get", None)?,
                wid: self.wid(&a[2])?,
            },
            "rcas" => Op::Rcas {
                remote: self.loc(&a[0], "rcas", None)?,
                expected: self.value(&a[1])?,
                new: self.value(&a[2])?,
                local: self.loc(&a[3], "rcas", Some("the return word"))?,
                wid: self.wid(&a[4])?,
            },
            "rfaa" => Op::Rfaa {
                remote: self.loc(&a[0], "rfaa", None)?,
                add: self.value(&a[1])?,
                local: self.loc(&a[2], "rfaa", Some("the return word"))?,
                wid: self.wid(&a[3])?,
            },
            "wait" => Op::Wait(self.wid(&a[0])?),
            "poll" => Op::Poll(self.node_arg(&a[0])?),
            "rfence" => Op::Rfence(self.node_arg(&a[0])?),
            "bcast" => {
                let sv = self.sv(&a[0], "bcast")?;
                let nodes = self.nodes_arg(&a[1])?;
                all = nodes.is_none();
                Op::Bcast {
                    sv,
                    nodes: nodes.unwrap_or_default(),
                    wid: self.wid(&a[2])?,
                }
            }
            "gf" => {
                let nodes = self.nodes_arg(&a[0])?;
                all = nodes.is_none();
                Op::Gf(nodes.unwrap_or_default())
            }
            "acquire" => {
                let l = self.lock(&a[0], "acquire")?;
                if let Some(&(_, at)) = self.held.iter().find(|h| h.0 == l) {
                    return Err((
                        a[0].1,
                        ParseErrorKind::LockDiscipline(format!(
                            "`{}` is already held here (acquired at line {}): a second acquire would deadlock",
                            self.locks[l.0].0.name, at.line
                        )),
                    ));
                }
                self.held.push((l, span));
                Op::Acquire(l)
            }
            "release" => {
                let l = self.lock(&a[0], "release")?;
                let Some(i) = self.held.iter().position(|h| h.0 == l) else {
                    return Err((
                        a[0].1,
                        ParseErrorKind::LockDiscipline(format!(
                            "release of `{}` without a matching acquire in thread {}",
                            self.locks[l.0].0.name,
                            self.threads.last().expect("inside a thread").0.name
                        )),
                    ));
                };
                self.held.remove(i);
                Op::Release(l)
            }
            "read_sc" => Op::ReadSc {
                reg: reg(),
                sc: self.sc(&a[0], "read_sc")?,
            },
            "write_sc" => Op::WriteSc {
                sc: self.sc(&a[0], "write_sc")?,
                val: self.value(&a[1])?,
            },
            "cas_sc" => Op::CasSc {
                reg: reg(),
                sc: self.sc(&a[0], "cas_sc")?,
                expected: self.value(&a[1])?,
                new: self.value(&a[2])?,
            },
            "faa_sc" => Op::FaaSc {
                reg: reg(),
                sc: self.sc(&a[0], "faa_sc")?,
                add: self.value(&a[1])?,
            },
            _ => unreachable!("OPERATIONS and this match list the same names"),
        };
        let t = self.threads.len() - 1;
        let th = self.thread();
        if all {
            let s = th.body.len();
            self.all_sets.push((t, s));
        }
        let th = self.thread();
        th.body.push(Stmt {
            op,
            span,
            text: text.to_string(),
        });
        Ok(())
    }

    // ----- condition -----

    fn cond(&mut self, line: &mut Line) -> PResult<Cond> {
        let mut atoms = Vec::new();
        loop {
            if atoms.len() >= MAX_ATOMS {
                let what = "more atoms in the condition".to_string();
                return Err((
                    line.span(),
                    ParseErrorKind::TooLarge {
                        what,
                        max: MAX_ATOMS,
                    },
                ));
            }
            atoms.push(self.atom(line)?);
            if line.at_end() {
                return Ok(Cond { atoms });
            }
            line.expect(Tok::And)
                .map_err(|_| line.err("`/\\` or end of line"))?;
        }
    }

    fn atom(&mut self, line: &mut Line) -> PResult<Atom> {
        const WANT: &str =
            "a condition atom: `<t>:<r> = <int>`, `<x> = <int>` or `<s>@<node> = <int>`";
        let (name, span) = line.ident(WANT)?;
        let obs = match line.peek() {
            Some(Tok::Colon) => {
                line.next();
                let (r, rspan) = line.ident("a register after `:`")?;
                let Some(t) = self.threads.iter().position(|t| t.0.name == name) else {
                    return Err((
                        span,
                        ParseErrorKind::Undeclared {
                            what: "thread",
                            name,
                        },
                    ));
                };
                let Some(i) = self.threads[t].0.regs.iter().position(|x| *x == r) else {
                    return Err((
                        rspan,
                        ParseErrorKind::Undeclared {
                            what: "register",
                            name: format!("{name}:{r}"),
                        },
                    ));
                };
                Observable::Reg {
                    thread: t,
                    reg: RegId(i),
                }
            }
            Some(Tok::At) => {
                line.next();
                let sv = self.sv(&(Arg::Ident(name), span), "a condition on a copy")?;
                let (n, nspan) = line.ident("a node, such as `n1`")?;
                let node = self.node_name(&n, nspan)?;
                self.sv_atoms.push((node, nspan));
                Observable::Sv { sv, node }
            }
            _ => {
                if let Some(i) = self.locs.iter().position(|d| d.0.name == name) {
                    Observable::Loc(LocId(i))
                } else if let Some(i) = self.scs.iter().position(|d| d.0.name == name) {
                    Observable::Sc(ScId(i))
                } else if self.svs.iter().any(|d| d.0.name == name) {
                    return Err((
                        span,
                        ParseErrorKind::WrongKind {
                            name: name.clone(),
                            is: "a shared variable (sv)".into(),
                            wanted: format!("a condition names one copy, such as `{name}@n0`"),
                        },
                    ));
                } else {
                    return Err(self.wrong(
                        &name,
                        span,
                        "a condition needs a loc or sc location".into(),
                    ));
                }
            }
        };
        line.expect(Tok::Eq)?;
        let value = line.int("an integer")?;
        Ok(Atom { obs, value })
    }
}

/// Whether a name is written like a node (`n` and digits).
fn looks_like_node(name: &str) -> bool {
    name.strip_prefix('n')
        .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
}

/// Argument count and usage line of each operation.
fn usage(op: &str) -> (usize, &'static str) {
    match op {
        "load" => (1, "<r> = load(<x>)"),
        "store" => (2, "store(<x>, <v>)"),
        "cas" => (3, "<r> = cas(<x>, <expected>, <new>)"),
        "mfence" => (0, "mfence()"),
        "put" => (3, "put(<remote y>, <local x>, <d>)"),
        "get" => (3, "get(<local x>, <remote y>, <d>)"),
        "rcas" => (5, "rcas(<remote y>, <expected>, <new>, <local x>, <d>)"),
        "rfaa" => (4, "rfaa(<remote y>, <k>, <local x>, <d>)"),
        "wait" => (1, "wait(<d>)"),
        "poll" => (1, "poll(<node>)"),
        "rfence" => (1, "rfence(<node>)"),
        "bcast" => (3, "bcast(<s>, <nodes>, <d>)"),
        "gf" => (1, "gf(<nodes>)"),
        "acquire" => (1, "acquire(<l>)"),
        "release" => (1, "release(<l>)"),
        "read_sc" => (1, "<r> = read_sc(<x>)"),
        "write_sc" => (2, "write_sc(<x>, <v>)"),
        "cas_sc" => (3, "<r> = cas_sc(<x>, <expected>, <new>)"),
        "faa_sc" => (2, "<r> = faa_sc(<x>, <k>)"),
        _ => (0, ""),
    }
}

#[cfg(test)]
mod tests {
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
  r2 = read_sc(c)
  write_sc(c, 5)
  r3 = cas_sc(c, 5, 6)
  r4 = faa_sc(c, 1)
}
exists t0:r2 = 4 /\\ s@n1 = 3 /\\ c = 7
expect allowed
";
        let t = parse(src, "x").unwrap();
        assert_eq!(t.threads[0].body.len(), 23);
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
}
