//! Names: nodes, declared names and their kinds, registers, the arguments that name things.

use super::*;

impl Parser {
    /// A node named where nodes are introduced (threads, declarations, node sets): the test
    /// gains it.
    pub(super) fn node_name(&mut self, name: &str, span: Span) -> PResult<NodeId> {
        let node = Self::node_ref(name, span)?;
        if !self.nodes.contains(&node) {
            self.nodes.push(node);
        }
        Ok(node)
    }

    /// A node named where it must already be one of the test's (a condition on an sv copy):
    /// parsed, not added; `finish` checks it.
    pub(super) fn node_ref(name: &str, span: Span) -> PResult<NodeId> {
        let n = name
            .strip_prefix('n')
            .filter(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
            .and_then(|d| d.parse::<usize>().ok())
            .filter(|&n| n < MAX_NODES)
            .ok_or((span, ParseErrorKind::BadNode(name.to_string())))?;
        Ok(NodeId(n as u16))
    }

    pub(super) fn node(&mut self, line: &mut Line) -> PResult<NodeId> {
        line.expect(Tok::At)
            .map_err(|_| line.err("`@<node>`, such as `@n0`"))?;
        let (name, span) = line.ident("a node, such as `n0`")?;
        self.node_name(&name, span)
    }

    /// What a declared name is, with an article, for messages.
    pub(super) fn kind_of(&self, name: &str) -> Option<String> {
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

    pub(super) fn first_decl(&self, name: &str) -> Option<Span> {
        self.locs
            .iter()
            .find(|d| d.0.name == name)
            .map(|d| d.1)
            .or_else(|| self.svs.iter().find(|d| d.0.name == name).map(|d| d.1))
            .or_else(|| self.scs.iter().find(|d| d.0.name == name).map(|d| d.1))
            .or_else(|| self.locks.iter().find(|d| d.0.name == name).map(|d| d.1))
    }

    pub(super) fn fresh(&self, name: &str, span: Span) -> PResult<()> {
        let decls = self.locs.len() + self.svs.len() + self.scs.len() + self.locks.len();
        if decls >= MAX_DECLARATIONS {
            let what = "more declarations".to_string();
            return Err((
                span,
                ParseErrorKind::TooLarge {
                    what,
                    max: MAX_DECLARATIONS,
                    unit: LimitUnit::Count,
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

    pub(super) fn init(&self, line: &mut Line) -> PResult<u64> {
        if line.at_end() {
            return Ok(0);
        }
        line.expect(Tok::Eq)
            .map_err(|_| line.err("`= <int>` or end of line"))?;
        let v = line.int("an initial value (an integer)")?;
        line.end()?;
        Ok(v)
    }
}

/// Whether a name is written like a node (`n` and digits).
pub(super) fn looks_like_node(name: &str) -> bool {
    name.strip_prefix('n')
        .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
}
