//! Statements: one operation of docs/litmus-format.md per line, checked and turned into an [`Op`].

use super::*;

impl Parser {
    pub(super) fn thread(&mut self) -> &mut Thread {
        &mut self.threads.last_mut().expect("inside a thread").0
    }

    pub(super) fn reg(&mut self, name: &str, span: Span, assign: bool) -> PResult<RegId> {
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

    pub(super) fn value(&mut self, arg: &(Arg, Span)) -> PResult<Value> {
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

    pub(super) fn name_arg<'a>(&self, arg: &'a (Arg, Span), what: &str) -> PResult<&'a str> {
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

    pub(super) fn wrong(&self, name: &str, span: Span, wanted: String) -> (Span, ParseErrorKind) {
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
    pub(super) fn loc(
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
    pub(super) fn var(
        &mut self,
        arg: &(Arg, Span),
        op: &'static str,
        role: &'static str,
    ) -> PResult<Var> {
        let name = self.name_arg(arg, "a location")?;
        if let Some(i) = self.svs.iter().position(|d| d.0.name == name) {
            return Ok(Var::Sv(SvId(i)));
        }
        self.loc(arg, op, Some(role)).map(Var::Loc)
    }

    pub(super) fn sv(&self, arg: &(Arg, Span), op: &str) -> PResult<SvId> {
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

    pub(super) fn sc(&self, arg: &(Arg, Span), op: &str) -> PResult<ScId> {
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

    pub(super) fn lock(&self, arg: &(Arg, Span), op: &str) -> PResult<LockId> {
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

    pub(super) fn wid(&mut self, arg: &(Arg, Span)) -> PResult<WidId> {
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

    /// A `wait(d)` needs an earlier operation of its own thread tagged `d`: without one it
    /// waits for nothing, which is a typo or a wait meant for another thread's operations (work
    /// ids belong to a thread, docs/model.md §1), and either silently changes the verdict.
    fn tagged_before(&self, w: WidId, span: Span) -> PResult<()> {
        let tags = |s: &Stmt| {
            matches!(s.op,
                Op::Put { wid, .. } | Op::Get { wid, .. } | Op::Rcas { wid, .. }
                | Op::Rfaa { wid, .. } | Op::Bcast { wid, .. } if wid == w)
        };
        let th = &self.threads.last().expect("inside a thread").0;
        if th.body.iter().any(tags) {
            return Ok(());
        }
        let other = self
            .threads
            .iter()
            .find(|t| t.0.name != th.name && t.0.body.iter().any(tags))
            .map(|t| t.0.name.clone());
        Err((
            span,
            ParseErrorKind::WaitForNothing {
                wid: self.work_ids[w.0].clone(),
                thread: th.name.clone(),
                other,
            },
        ))
    }

    pub(super) fn node_arg(&mut self, arg: &(Arg, Span)) -> PResult<NodeId> {
        let name = self.name_arg(arg, "a node, such as `n1`")?;
        self.node_name(name, arg.1)
    }

    /// A node set; `None` for `all` (filled in at the end).
    pub(super) fn nodes_arg(&mut self, arg: &(Arg, Span)) -> PResult<Option<Vec<NodeId>>> {
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

    pub(super) fn args(&self, line: &mut Line) -> PResult<Vec<(Arg, Span)>> {
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

    pub(super) fn stmt(&mut self, line: &mut Line, text: &str) -> PResult<()> {
        let span = line.span();
        if self.thread().body.len() >= MAX_STATEMENTS {
            let what = format!("more statements in thread `{}`", self.thread().name);
            return Err((
                span,
                ParseErrorKind::TooLarge {
                    what,
                    max: MAX_STATEMENTS,
                    unit: LimitUnit::Count,
                },
            ));
        }
        let (first, fspan) = line.ident("a statement or `}`")?;
        if line.peek() == Some(&Tok::Colon) {
            // `r := load(x)`, as other formats write an assignment.
            return Err(line.err("`=` (a result is written `<r> = load(<x>)`)"));
        }
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
            "wait" => {
                let w = self.wid(&a[0])?;
                self.tagged_before(w, a[0].1)?;
                Op::Wait(w)
            }
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
            // A takeover enters as an acquire does; a handoff leaves as a release does.
            "acquire" | "takeover" => {
                let l = self.lock(&a[0], op_static)?;
                if let Some(&(_, at)) = self.held.iter().find(|h| h.0 == l) {
                    let what = if op_static == "acquire" {
                        "a second acquire"
                    } else {
                        "a takeover"
                    };
                    return Err((
                        a[0].1,
                        ParseErrorKind::LockDiscipline(format!(
                            "`{}` is already held here (acquired at line {}): {what} would deadlock",
                            self.locks[l.0].0.name, at.line
                        )),
                    ));
                }
                self.held.push((l, span));
                if op_static == "acquire" {
                    Op::Acquire(l)
                } else {
                    Op::Takeover(l)
                }
            }
            "release" | "handoff" => {
                let l = self.lock(&a[0], op_static)?;
                let Some(i) = self.held.iter().position(|h| h.0 == l) else {
                    return Err((
                        a[0].1,
                        ParseErrorKind::LockDiscipline(format!(
                            "{op_static} of `{}` without a matching acquire in thread {}",
                            self.locks[l.0].0.name,
                            self.threads.last().expect("inside a thread").0.name
                        )),
                    ));
                };
                self.held.remove(i);
                if op_static == "release" {
                    Op::Release(l)
                } else {
                    Op::Handoff(l)
                }
            }
            "giveup" => {
                let l = self.lock(&a[0], "giveup")?;
                if let Some(&(_, at)) = self.held.iter().find(|h| h.0 == l) {
                    return Err((
                        a[0].1,
                        ParseErrorKind::LockDiscipline(format!(
                            "`{}` is held here (acquired at line {}): give a ticket up only of a lock the thread does not hold",
                            self.locks[l.0].0.name, at.line
                        )),
                    ));
                }
                Op::GiveUp(l)
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
        "bcast" => (
            3,
            "bcast(<s>, <nodes>, <d>), <nodes> being a node, a set `{n1, n2}` or `all`",
        ),
        "gf" => (
            1,
            "gf(<nodes>), <nodes> being a node, a set `{n1, n2}` or `all`",
        ),
        "acquire" => (1, "acquire(<l>)"),
        "release" => (1, "release(<l>)"),
        "giveup" => (1, "giveup(<l>)"),
        "handoff" => (1, "handoff(<l>)"),
        "takeover" => (1, "takeover(<l>)"),
        "read_sc" => (1, "<r> = read_sc(<x>)"),
        "write_sc" => (2, "write_sc(<x>, <v>)"),
        "cas_sc" => (3, "<r> = cas_sc(<x>, <expected>, <new>)"),
        "faa_sc" => (2, "<r> = faa_sc(<x>, <k>)"),
        _ => (0, ""),
    }
}
