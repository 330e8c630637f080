//! Declarations: `loc`, `sc`, `sv`, `lock`, and `thread` blocks.

use super::*;

impl Parser {
    pub(super) fn decl_word(&mut self, sc: bool, line: &mut Line, _kw: Span) -> PResult<()> {
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

    pub(super) fn decl_sv(&mut self, line: &mut Line, _kw: Span) -> PResult<()> {
        let (name, span) = line.ident("the shared variable's name")?;
        self.fresh(&name, span)?;
        let init = self.init(line)?;
        self.svs.push((SvDecl { name, init }, span));
        Ok(())
    }

    pub(super) fn decl_lock(&mut self, line: &mut Line, _kw: Span) -> PResult<()> {
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

    pub(super) fn open_thread(&mut self, line: &mut Line, _kw: Span) -> PResult<()> {
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
        if looks_like_node(&name) {
            // `thread n0 @n0` would make a trace's `n0->n1` (a thread's queue pair to a node)
            // read as one from node n0, and names written like nodes are refused everywhere.
            return Err((
                span,
                ParseErrorKind::Expected {
                    expected: "a thread name that is not a node name (such as `t0`)".into(),
                    found: format!("`{name}`"),
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
}
