//! The lexer: one line into tokens with their columns, and the cursor the parser reads them with.

use std::fmt;

use super::*;

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
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
pub(super) fn lex(line: &str, lno: u32) -> Result<Vec<(Tok, Span)>, (Span, ParseErrorKind)> {
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
                        unit: LimitUnit::Count,
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
                ';' => {
                    return Err((
                        span,
                        ParseErrorKind::Expected {
                            expected: "end of line (one statement per line, no `;`)".into(),
                            found: "`;`".into(),
                        },
                    ))
                }
                // Two spellings from other litmus formats, said plainly.
                '-' if chars.get(i + 1).is_some_and(char::is_ascii_digit) => {
                    let digits: String = chars[i + 1..]
                        .iter()
                        .take_while(|c| c.is_ascii_digit())
                        .take(21)
                        .collect();
                    return Err((
                        span,
                        ParseErrorKind::Expected {
                            expected: "an integer from 0 to 2^64 - 1 (integers have no sign)"
                                .into(),
                            found: format!("`-{digits}`"),
                        },
                    ));
                }
                '\\' if chars.get(i + 1) == Some(&'/') => {
                    return Err((
                        span,
                        ParseErrorKind::Expected {
                            expected: "`/\\` (a condition is atoms joined by `/\\`; there is no \
                                       disjunction: write one test per case)"
                                .into(),
                            found: "`\\/`".into(),
                        },
                    ));
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
pub(super) struct Line {
    pub(super) toks: Vec<(Tok, Span)>,
    pub(super) pos: usize,
    /// Column just past the line's last character.
    pub(super) end: Span,
}

impl Line {
    pub(super) fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(t, _)| t)
    }

    pub(super) fn span(&self) -> Span {
        self.toks.get(self.pos).map_or(self.end, |(_, s)| *s)
    }

    pub(super) fn found(&self) -> String {
        self.peek()
            .map_or_else(|| "end of line".to_string(), |t| t.to_string())
    }

    pub(super) fn err(&self, expected: impl Into<String>) -> (Span, ParseErrorKind) {
        (
            self.span(),
            ParseErrorKind::Expected {
                expected: expected.into(),
                found: self.found(),
            },
        )
    }

    pub(super) fn next(&mut self) -> Option<(Tok, Span)> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    pub(super) fn expect(&mut self, tok: Tok) -> Result<Span, (Span, ParseErrorKind)> {
        if self.peek() == Some(&tok) {
            Ok(self.next().expect("peeked").1)
        } else {
            Err(self.err(tok.to_string()))
        }
    }

    pub(super) fn ident(&mut self, what: &str) -> Result<(String, Span), (Span, ParseErrorKind)> {
        match self.peek() {
            Some(Tok::Ident(_)) => match self.next() {
                Some((Tok::Ident(s), span)) => Ok((s, span)),
                _ => unreachable!("peeked an identifier"),
            },
            _ => Err(self.err(what)),
        }
    }

    pub(super) fn int(&mut self, what: &str) -> Result<u64, (Span, ParseErrorKind)> {
        match self.peek() {
            Some(Tok::Int(v)) => {
                let v = *v;
                self.pos += 1;
                Ok(v)
            }
            _ => Err(self.err(what)),
        }
    }

    pub(super) fn end(&self) -> Result<(), (Span, ParseErrorKind)> {
        if self.pos < self.toks.len() {
            Err(self.err("end of line"))
        } else {
            Ok(())
        }
    }

    pub(super) fn at_end(&self) -> bool {
        self.pos >= self.toks.len()
    }
}

/// A parsed argument of a statement, before its meaning is known.
#[derive(Clone, Debug)]
pub(super) enum Arg {
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
