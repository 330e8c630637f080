//! The `exists` condition: atoms joined by `/\\`.

use super::*;

impl Parser {
    pub(super) fn cond(&mut self, line: &mut Line) -> PResult<Cond> {
        let mut atoms = Vec::new();
        loop {
            if atoms.len() >= MAX_ATOMS {
                let what = "more atoms in the condition".to_string();
                return Err((
                    line.span(),
                    ParseErrorKind::TooLarge {
                        what,
                        max: MAX_ATOMS,
                        unit: LimitUnit::Count,
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

    pub(super) fn atom(&mut self, line: &mut Line) -> PResult<Atom> {
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
                let node = Self::node_ref(&n, nspan)?;
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
                } else if let Some(t) = self
                    .threads
                    .iter()
                    .find(|t| t.0.regs.contains(&name) && self.kind_of(&name).is_none())
                {
                    // A register written as in other litmus formats, without its thread.
                    return Err((
                        span,
                        ParseErrorKind::Expected {
                            expected: format!(
                                "a register with its thread, such as `{}:{name}`",
                                t.0.name
                            ),
                            found: format!("`{name}`"),
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
