//! A parsed and checked litmus test (the format of docs/litmus-format.md).
//!
//! Names are resolved to indices by the parser: a statement refers to [`LocId`], [`SvId`],
//! [`ScId`], [`LockId`], [`RegId`] and [`WidId`], never to strings, and every check of
//! docs/litmus-format.md (locality, declared names, kinds) has already been made. A test built
//! or edited by hand may break them: [`Test::validate`] checks it (the explorer and the runner
//! call it).

use std::fmt;

pub use loco_rdmawait::model::FailedCas;
pub use loco_rdmawait::{FenceRead, NodeId};

macro_rules! index {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub usize);
    };
}

index!(
    /// A `loc` declaration: index into [`Test::locs`].
    LocId
);
index!(
    /// An `sv` declaration: index into [`Test::svs`].
    SvId
);
index!(
    /// An `sc` declaration: index into [`Test::scs`].
    ScId
);
index!(
    /// A `lock` declaration: index into [`Test::locks`].
    LockId
);
index!(
    /// A register of one thread: index into [`Thread::regs`].
    RegId
);
index!(
    /// A user work id: index into [`Test::work_ids`].
    WidId
);

/// A position in the source: 1-based line and column (in characters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Span {
    /// Line, from 1.
    pub line: u32,
    /// Column, from 1.
    pub col: u32,
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// One litmus test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Test {
    /// The name after `litmus`.
    pub name: String,
    /// Plain words (`loc`).
    pub locs: Vec<LocDecl>,
    /// Shared variables (`sv`).
    pub svs: Vec<SvDecl>,
    /// SC locations (`sc`).
    pub scs: Vec<ScDecl>,
    /// Locks (`lock`).
    pub locks: Vec<LockDecl>,
    /// Threads, in file order.
    pub threads: Vec<Thread>,
    /// User work id names, in order of first use.
    pub work_ids: Vec<String>,
    /// Every node named anywhere in the test, ascending (what `all` means).
    pub nodes: Vec<NodeId>,
    /// What a failed remote CAS does: the model's rule 9 ([`FailedCas::Reads`], the default),
    /// or rxe's write-back (`atomics rxe`: [`FailedCas::WritesBack`]).
    pub atomics: FailedCas,
    /// How `gf` (and every lock or SC operation that fences) reads each node's dummy word:
    /// the paper's get ([`FenceRead::Get`], the default) or a remote CAS that cannot succeed
    /// (`fence cas`: [`FenceRead::Cas`], what the verbs backend uses on Soft-RoCE).
    pub fence: FenceRead,
    /// The `exists` condition.
    pub exists: Cond,
    /// The expected verdict.
    pub expect: Expect,
}

/// `loc <x> @<node> [= <int>]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocDecl {
    /// Name.
    pub name: String,
    /// Node holding the word.
    pub node: NodeId,
    /// Initial value.
    pub init: u64,
    /// Whether any statement can write it (a never-written word is left out of outcomes).
    pub written: bool,
}

/// `sv <s> [= <int>]`: one copy on every node of the test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SvDecl {
    /// Name.
    pub name: String,
    /// Initial value of every copy.
    pub init: u64,
}

/// `sc <x> @<node> [= <int>]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScDecl {
    /// Name.
    pub name: String,
    /// Node hosting it.
    pub node: NodeId,
    /// Initial value.
    pub init: u64,
}

/// `lock <l> : <kind>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockDecl {
    /// Name.
    pub name: String,
    /// Kind.
    pub kind: LockKind,
}

/// The three lock kinds of docs/model.md §5.3-§5.5.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockKind {
    /// Weak lock (Fig. 10): mutual exclusion only.
    WLock,
    /// Strong lock: a global fence before the release.
    SLock,
    /// Node lock on a node (Fig. 13).
    NLock(NodeId),
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockKind::WLock => f.write_str("wlock"),
            LockKind::SLock => f.write_str("slock"),
            LockKind::NLock(n) => write!(f, "nlock @{n}"),
        }
    }
}

/// `thread <t> @<node> { ... }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Thread {
    /// Name.
    pub name: String,
    /// Node the thread runs on.
    pub node: NodeId,
    /// Statements in program order.
    pub body: Vec<Stmt>,
    /// Register names, in order of first appearance.
    pub regs: Vec<String>,
    /// Registers that some statement assigns (the others stay 0 and are left out of outcomes).
    pub assigned: Vec<bool>,
}

/// A statement with its place in the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stmt {
    /// What it does.
    pub op: Op,
    /// Where it starts.
    pub span: Span,
    /// Its source text, trimmed (for traces).
    pub text: String,
}

/// An operand: an integer or a register of the thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    /// A constant.
    Int(u64),
    /// A register.
    Reg(RegId),
}

/// A word a CPU load or store acts on: a local `loc` or the local copy of an `sv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Var {
    /// A plain word on the thread's node.
    Loc(LocId),
    /// The thread's node's copy of a shared variable.
    Sv(SvId),
}

/// A statement (the table of docs/litmus-format.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `r = load(x)`.
    Load {
        /// Destination register.
        reg: RegId,
        /// What is read.
        var: Var,
    },
    /// `store(x, v)`.
    Store {
        /// What is written.
        var: Var,
        /// Value.
        val: Value,
    },
    /// `r = cas(x, e, v)` on a local `loc`.
    Cas {
        /// Register receiving the old value.
        reg: RegId,
        /// The word.
        loc: LocId,
        /// Expected value.
        expected: Value,
        /// New value.
        new: Value,
    },
    /// `mfence()`.
    Mfence,
    /// `put(y, x, d)`: remote `y` := local `x`.
    Put {
        /// Destination (any node).
        remote: LocId,
        /// Source (local).
        local: LocId,
        /// Work id.
        wid: WidId,
    },
    /// `get(x, y, d)`: local `x` := remote `y`.
    Get {
        /// Destination (local).
        local: LocId,
        /// Source (any node).
        remote: LocId,
        /// Work id.
        wid: WidId,
    },
    /// `rcas(y, e, v, x, d)`.
    Rcas {
        /// Target (any node).
        remote: LocId,
        /// Expected value.
        expected: Value,
        /// New value.
        new: Value,
        /// Local word receiving the old value.
        local: LocId,
        /// Work id.
        wid: WidId,
    },
    /// `rfaa(y, k, x, d)`.
    Rfaa {
        /// Target (any node).
        remote: LocId,
        /// Addend.
        add: Value,
        /// Local word receiving the old value.
        local: LocId,
        /// Work id.
        wid: WidId,
    },
    /// `wait(d)`.
    Wait(WidId),
    /// `poll(n)`.
    Poll(NodeId),
    /// `rfence(n)`.
    Rfence(NodeId),
    /// `bcast(s, N, d)`.
    Bcast {
        /// The shared variable.
        sv: SvId,
        /// Target nodes, ascending.
        nodes: Vec<NodeId>,
        /// Work id.
        wid: WidId,
    },
    /// `gf(N)`.
    Gf(Vec<NodeId>),
    /// `acquire(l)`.
    Acquire(LockId),
    /// `release(l)`.
    Release(LockId),
    /// `giveup(l)`: takes a ticket of the lock and gives it up without entering (an acquire
    /// that timed out), as `loco-locks` does.
    GiveUp(LockId),
    /// `handoff(l)`: a cohort's local handover (`loco-locks`' Cohorts): the holder passes its
    /// hold, unreleased, to the thread of its node that does `takeover(l)`.
    Handoff(LockId),
    /// `takeover(l)`: waits for the `handoff(l)` of another thread of the same node and holds
    /// the lock from then on (released or handed off as if acquired).
    Takeover(LockId),
    /// `r = read_sc(x)`.
    ReadSc {
        /// Destination register.
        reg: RegId,
        /// The location.
        sc: ScId,
    },
    /// `write_sc(x, v)`.
    WriteSc {
        /// The location.
        sc: ScId,
        /// Value.
        val: Value,
    },
    /// `r = cas_sc(x, e, v)`.
    CasSc {
        /// Register receiving the old value.
        reg: RegId,
        /// The location.
        sc: ScId,
        /// Expected value.
        expected: Value,
        /// New value.
        new: Value,
    },
    /// `r = faa_sc(x, k)`.
    FaaSc {
        /// Register receiving the old value.
        reg: RegId,
        /// The location.
        sc: ScId,
        /// Addend.
        add: Value,
    },
}

impl Op {
    /// The operation's name as written in a test.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Load { .. } => "load",
            Op::Store { .. } => "store",
            Op::Cas { .. } => "cas",
            Op::Mfence => "mfence",
            Op::Put { .. } => "put",
            Op::Get { .. } => "get",
            Op::Rcas { .. } => "rcas",
            Op::Rfaa { .. } => "rfaa",
            Op::Wait(_) => "wait",
            Op::Poll(_) => "poll",
            Op::Rfence(_) => "rfence",
            Op::Bcast { .. } => "bcast",
            Op::Gf(_) => "gf",
            Op::Acquire(_) => "acquire",
            Op::Release(_) => "release",
            Op::GiveUp(_) => "giveup",
            Op::Handoff(_) => "handoff",
            Op::Takeover(_) => "takeover",
            Op::ReadSc { .. } => "read_sc",
            Op::WriteSc { .. } => "write_sc",
            Op::CasSc { .. } => "cas_sc",
            Op::FaaSc { .. } => "faa_sc",
        }
    }
}

/// The expected verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Expect {
    /// Some execution satisfies the condition.
    Allowed,
    /// No execution does.
    Forbidden,
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Expect::Allowed => "allowed",
            Expect::Forbidden => "forbidden",
        })
    }
}

/// Something whose final value an outcome records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Observable {
    /// Register `reg` of thread `thread`.
    Reg {
        /// Thread index.
        thread: usize,
        /// Register.
        reg: RegId,
    },
    /// A plain word.
    Loc(LocId),
    /// An SC location.
    Sc(ScId),
    /// The copy of a shared variable on a node.
    Sv {
        /// The variable.
        sv: SvId,
        /// The node.
        node: NodeId,
    },
}

/// One `<atom>` of a condition: an observable equals a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Atom {
    /// What is compared.
    pub obs: Observable,
    /// The value it must have.
    pub value: u64,
}

/// A conjunction of atoms.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Cond {
    /// The atoms, all of which must hold.
    pub atoms: Vec<Atom>,
}

impl Test {
    /// The observables an outcome records, in a fixed order: the assigned registers of each
    /// thread, the written `loc`s, every `sc` location, every copy of every `sv`, and whatever
    /// else the condition names.
    pub fn observables(&self) -> Vec<Observable> {
        let mut out = Vec::new();
        for (t, th) in self.threads.iter().enumerate() {
            for (r, &a) in th.assigned.iter().enumerate() {
                if a {
                    out.push(Observable::Reg {
                        thread: t,
                        reg: RegId(r),
                    });
                }
            }
        }
        for (i, l) in self.locs.iter().enumerate() {
            if l.written {
                out.push(Observable::Loc(LocId(i)));
            }
        }
        out.extend((0..self.scs.len()).map(|i| Observable::Sc(ScId(i))));
        for i in 0..self.svs.len() {
            for &node in &self.nodes {
                out.push(Observable::Sv { sv: SvId(i), node });
            }
        }
        for a in &self.exists.atoms {
            if !out.contains(&a.obs) {
                out.push(a.obs);
            }
        }
        out
    }

    /// How an observable is written in a condition (`t0:r0`, `x`, `s@n1`). One that names
    /// something the test does not have (see [`Test::validate`]) is written with the index in
    /// its place (`#3`).
    pub fn observable_name(&self, o: &Observable) -> String {
        fn name(names: Option<&String>, i: usize) -> String {
            names.cloned().unwrap_or_else(|| format!("#{i}"))
        }
        match *o {
            Observable::Reg { thread, reg } => {
                let th = self.threads.get(thread);
                let t = name(th.map(|th| &th.name), thread);
                let r = name(th.and_then(|th| th.regs.get(reg.0)), reg.0);
                format!("{t}:{r}")
            }
            Observable::Loc(l) => name(self.locs.get(l.0).map(|d| &d.name), l.0),
            Observable::Sc(s) => name(self.scs.get(s.0).map(|d| &d.name), s.0),
            Observable::Sv { sv, node } => {
                format!("{}@{node}", name(self.svs.get(sv.0).map(|d| &d.name), sv.0))
            }
        }
    }

    /// Whether the test uses an operation of a library above rdmawait+RMW (sv, locks, SC).
    pub fn uses(&self, pred: impl Fn(&Op) -> bool) -> bool {
        self.threads
            .iter()
            .any(|t| t.body.iter().any(|s| pred(&s.op)))
    }

    /// The highest node index named, plus one: how many nodes a cluster running it needs.
    pub fn cluster_nodes(&self) -> usize {
        self.nodes.last().map_or(1, |n| n.index() + 1)
    }
}
