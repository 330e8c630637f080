//! The checks of a [`Test`] built by hand: [`Test::validate`].
//!
//! A parsed test is always valid (the parser makes every check made here, with the same size
//! limits, and more: names). A test built or edited by hand (its fields are public) may name a register,
//! a location or a node that does not exist; the explorer ([`crate::explore()`]) and the runner
//! ([`crate::run()`]) call [`Test::validate`] first and return its error instead of indexing
//! past a list.

use std::fmt;

use crate::ast::*;
use crate::parse::{MAX_ATOMS, MAX_DECLARATIONS, MAX_NAME_LEN, MAX_STATEMENTS};
use crate::{MAX_NODES, MAX_THREADS};

/// Why a [`Test`] cannot be explored or run: one of the checks of [`Test::validate`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid test `{test}`: {place}: {kind}")]
#[non_exhaustive]
pub struct InvalidTest {
    /// The test's name.
    pub test: String,
    /// Where in the test.
    pub place: Place,
    /// What is wrong there.
    pub kind: InvalidTestKind,
}

/// Where an [`InvalidTest`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Place {
    /// The test as a whole: its name, node list, number of threads or declarations, work ids,
    /// the size of its condition.
    Test,
    /// A declaration: [`Test::locs`], [`Test::svs`], [`Test::scs`] or [`Test::locks`] (`what`)
    /// number `index`.
    Decl {
        /// `loc`, `sv`, `sc` or `lock`.
        what: &'static str,
        /// Its index in its list.
        index: usize,
    },
    /// Thread `thread` ([`Test::threads`]) itself: its node, its registers.
    Thread {
        /// The thread's index.
        thread: usize,
        /// Its name.
        name: String,
    },
    /// Statement `stmt` (from 0) of thread `thread`.
    Stmt {
        /// The thread's index.
        thread: usize,
        /// Its name.
        name: String,
        /// The statement's index in [`Thread::body`].
        stmt: usize,
        /// Its line ([`Stmt::span`]).
        line: u32,
    },
    /// An atom of the `exists` condition: its index (from 0) in [`Cond::atoms`].
    Atom(usize),
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Test => f.write_str("the test"),
            Place::Decl { what, index } => write!(f, "{what} declaration {index}"),
            Place::Thread { name, .. } => write!(f, "thread {name}"),
            Place::Stmt {
                name, stmt, line, ..
            } => write!(f, "thread {name}, statement {stmt} (line {line})"),
            Place::Atom(i) => write!(f, "atom {i} of the exists condition"),
        }
    }
}

/// What an index of an [`InvalidTestKind::OutOfRange`] indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IndexOf {
    /// A register of the statement's thread ([`Thread::regs`]).
    Reg,
    /// [`Test::locs`].
    Loc,
    /// [`Test::svs`].
    Sv,
    /// [`Test::scs`].
    Sc,
    /// [`Test::locks`].
    Lock,
    /// [`Test::work_ids`].
    WorkId,
    /// [`Test::threads`].
    Thread,
}

impl fmt::Display for IndexOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IndexOf::Reg => "register",
            IndexOf::Loc => "loc",
            IndexOf::Sv => "shared variable",
            IndexOf::Sc => "sc location",
            IndexOf::Lock => "lock",
            IndexOf::WorkId => "work id",
            IndexOf::Thread => "thread",
        })
    }
}

/// How a statement misuses a lock (the rules of docs/litmus-format.md the parser enforces).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockMisuse {
    /// An `acquire` or `takeover` of a lock the thread holds (it would deadlock).
    AlreadyHeld,
    /// A `release` or `handoff` of a lock the thread does not hold.
    NotHeld,
    /// A `giveup` of a lock the thread holds.
    GiveUpHeld,
    /// More acquires and give-ups of a lock some thread gives up than the ring of abandon
    /// marks has words (`loco_locks::MARKS`).
    TooManyTickets {
        /// Acquires and give-ups of the lock.
        tickets: usize,
        /// The limit.
        max: usize,
    },
    /// A second `handoff` of the lock on the same node.
    SecondHandoff,
    /// A second `takeover` of the lock on the same node.
    SecondTakeover,
    /// A `takeover` with no `handoff` of the lock on its node.
    TakeoverWithoutHandoff,
}

impl fmt::Display for LockMisuse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockMisuse::AlreadyHeld => f.write_str("it is already held here (would deadlock)"),
            LockMisuse::NotHeld => f.write_str("the thread does not hold it here"),
            LockMisuse::GiveUpHeld => {
                f.write_str("it is held here: a thread gives up only a lock it does not hold")
            }
            LockMisuse::TooManyTickets { tickets, max } => write!(
                f,
                "{tickets} acquires and give-ups of a lock some thread gives up (at most {max})"
            ),
            LockMisuse::SecondHandoff => f.write_str("a second handoff of it on this node"),
            LockMisuse::SecondTakeover => f.write_str("a second takeover of it on this node"),
            LockMisuse::TakeoverWithoutHandoff => {
                f.write_str("a takeover needs a handoff of it by another thread of the node")
            }
        }
    }
}

/// One of the parser's size limits ([`crate::ParseErrorKind::TooLarge`]) that
/// [`Test::validate`] enforces on a test built by hand: [`SizeLimit::max`] is the parser's own
/// constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SizeLimit {
    /// Statements of one thread ([`crate::parse::MAX_STATEMENTS`]).
    Statements,
    /// Declarations (`loc`, `sv`, `sc`, `lock`) of the test
    /// ([`crate::parse::MAX_DECLARATIONS`]).
    Declarations,
    /// Characters of a name: of the test, a declaration, a thread, a register or a work id
    /// ([`crate::parse::MAX_NAME_LEN`]).
    NameLen,
    /// Atoms of the `exists` condition ([`crate::parse::MAX_ATOMS`]).
    Atoms,
}

impl SizeLimit {
    /// The limit: the most the parser accepts.
    pub const fn max(self) -> usize {
        match self {
            SizeLimit::Statements => MAX_STATEMENTS,
            SizeLimit::Declarations => MAX_DECLARATIONS,
            SizeLimit::NameLen => MAX_NAME_LEN,
            SizeLimit::Atoms => MAX_ATOMS,
        }
    }
}

impl fmt::Display for SizeLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SizeLimit::Statements => "statements in the thread",
            SizeLimit::Declarations => "declarations",
            SizeLimit::NameLen => "characters in a name",
            SizeLimit::Atoms => "atoms in the exists condition",
        })
    }
}

/// What is wrong with an [`InvalidTest`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidTestKind {
    /// An index past the end of the list it indexes.
    #[error("{what} {index} is out of range (there are {len})")]
    OutOfRange {
        /// What it indexes.
        what: IndexOf,
        /// The index.
        index: usize,
        /// The length of the list.
        len: usize,
    },
    /// A node past `n{MAX_NODES - 1}` ([`MAX_NODES`]).
    #[error("node {0} is past n{max}", max = MAX_NODES - 1)]
    NodeTooLarge(NodeId),
    /// A node named here that [`Test::nodes`] does not list.
    #[error("node {0} is not one of the test's nodes (`Test::nodes`)")]
    NodeNotListed(NodeId),
    /// A node list ([`Test::nodes`], a `bcast` or `gf` node set) that is not ascending without
    /// repeats.
    #[error("the node list is not ascending without repeats")]
    UnsortedNodes,
    /// A `bcast` or `gf` with no node.
    #[error("the node set is empty")]
    EmptyNodeSet,
    /// More threads than [`MAX_THREADS`].
    #[error("{0} threads: the checker handles at most {MAX_THREADS}")]
    TooManyThreads(usize),
    /// A thread whose [`Thread::assigned`] has not one flag per register of [`Thread::regs`].
    #[error("{regs} registers but {assigned} `assigned` flags")]
    RegisterFlags {
        /// Length of [`Thread::regs`].
        regs: usize,
        /// Length of [`Thread::assigned`].
        assigned: usize,
    },
    /// A `loc` of another node where the operation needs one local to the thread.
    #[error("loc {loc} is on {loc_node}, but this operand must be local to the thread (on {thread_node})", loc = loc.0)]
    NotLocal {
        /// The location.
        loc: LocId,
        /// Its node.
        loc_node: NodeId,
        /// The thread's node.
        thread_node: NodeId,
    },
    /// Past one of the parser's size limits ([`SizeLimit`]): a parsed test never is.
    #[error("{count} {limit}: too large (the parser's limit is {max})")]
    TooLarge {
        /// Which limit.
        limit: SizeLimit,
        /// How many there are (statements, declarations, characters, atoms).
        count: usize,
        /// The limit ([`SizeLimit::max`]).
        max: usize,
    },
    /// A lock operation that breaks the locks' rules.
    #[error("lock {lock}: {misuse}", lock = lock.0)]
    Lock {
        /// The lock.
        lock: LockId,
        /// What is wrong.
        misuse: LockMisuse,
    },
}

type Check = Result<(), InvalidTestKind>;

fn index(what: IndexOf, index: usize, len: usize) -> Check {
    if index < len {
        Ok(())
    } else {
        Err(InvalidTestKind::OutOfRange { what, index, len })
    }
}

/// At most `limit`'s maximum.
fn within(limit: SizeLimit, count: usize) -> Check {
    let max = limit.max();
    if count <= max {
        Ok(())
    } else {
        Err(InvalidTestKind::TooLarge { limit, count, max })
    }
}

/// A name within [`MAX_NAME_LEN`] characters.
fn name(n: &str) -> Check {
    within(SizeLimit::NameLen, n.chars().count())
}

/// Whether a node list is ascending without repeats.
fn ascending(nodes: &[NodeId]) -> bool {
    nodes.windows(2).all(|w| w[0] < w[1])
}

impl Test {
    /// Checks that the test can be explored and run: every index names something that exists
    /// (registers of the statement's thread, declarations, work ids, threads), every node is
    /// below [`MAX_NODES`] and listed in [`Test::nodes`] (ascending, without repeats), at most
    /// [`MAX_THREADS`] threads, one `assigned` flag per register, operands that must be local
    /// to the thread are, lock operations follow the locks' rules (docs/litmus-format.md), as
    /// the parser checks them, and the test is within the parser's size limits ([`SizeLimit`]:
    /// statements per thread, declarations, name lengths, atoms of the condition). A parsed
    /// test always passes. Linear in the test's size.
    ///
    /// [`crate::explore()`] and [`crate::run()`] (and the other entry points of the explorer
    /// and the runner) call it and return its error: a test built by hand never makes them
    /// panic.
    pub fn validate(&self) -> Result<(), InvalidTest> {
        let fail = |place: Place, kind: InvalidTestKind| InvalidTest {
            test: self.name.clone(),
            place,
            kind,
        };
        let at = |place: Place| move |kind| fail(place, kind);
        if self.threads.len() > MAX_THREADS {
            let kind = InvalidTestKind::TooManyThreads(self.threads.len());
            return Err(fail(Place::Test, kind));
        }
        self.sizes()?;
        if !ascending(&self.nodes) {
            return Err(fail(Place::Test, InvalidTestKind::UnsortedNodes));
        }
        if let Some(&n) = self.nodes.last() {
            if n.index() >= MAX_NODES {
                return Err(fail(Place::Test, InvalidTestKind::NodeTooLarge(n)));
            }
        }
        for (i, l) in self.locs.iter().enumerate() {
            let place = Place::Decl {
                what: "loc",
                index: i,
            };
            self.node(l.node).map_err(at(place))?;
        }
        for (i, s) in self.scs.iter().enumerate() {
            let place = Place::Decl {
                what: "sc",
                index: i,
            };
            self.node(s.node).map_err(at(place))?;
        }
        for (i, l) in self.locks.iter().enumerate() {
            if let LockKind::NLock(n) = l.kind {
                let place = Place::Decl {
                    what: "lock",
                    index: i,
                };
                self.node(n).map_err(at(place))?;
            }
        }
        for (t, th) in self.threads.iter().enumerate() {
            let place = Place::Thread {
                thread: t,
                name: th.name.clone(),
            };
            self.node(th.node).map_err(at(place.clone()))?;
            if th.assigned.len() != th.regs.len() {
                let kind = InvalidTestKind::RegisterFlags {
                    regs: th.regs.len(),
                    assigned: th.assigned.len(),
                };
                return Err(fail(place, kind));
            }
            // The locks the thread holds, as the parser tracks them.
            let mut held: Vec<LockId> = Vec::new();
            for (s, stmt) in th.body.iter().enumerate() {
                let place = Place::Stmt {
                    thread: t,
                    name: th.name.clone(),
                    stmt: s,
                    line: stmt.span.line,
                };
                self.op(th, &stmt.op).map_err(at(place.clone()))?;
                let misuse = match stmt.op {
                    Op::Acquire(l) | Op::Takeover(l) if held.contains(&l) => {
                        Some((l, LockMisuse::AlreadyHeld))
                    }
                    Op::Acquire(l) | Op::Takeover(l) => {
                        held.push(l);
                        None
                    }
                    Op::Release(l) | Op::Handoff(l) => match held.iter().position(|&h| h == l) {
                        Some(i) => {
                            held.remove(i);
                            None
                        }
                        None => Some((l, LockMisuse::NotHeld)),
                    },
                    Op::GiveUp(l) if held.contains(&l) => Some((l, LockMisuse::GiveUpHeld)),
                    _ => None,
                };
                if let Some((lock, misuse)) = misuse {
                    return Err(fail(place, InvalidTestKind::Lock { lock, misuse }));
                }
            }
        }
        self.lock_uses()?;
        for (i, a) in self.exists.atoms.iter().enumerate() {
            self.observable(&a.obs).map_err(at(Place::Atom(i)))?;
        }
        Ok(())
    }

    /// The parser's size limits ([`SizeLimit`]), checked before anything else.
    fn sizes(&self) -> Result<(), InvalidTest> {
        let at = |place: Place| {
            move |kind| InvalidTest {
                test: self.name.clone(),
                place,
                kind,
            }
        };
        let test = || at(Place::Test);
        name(&self.name).map_err(test())?;
        let decls = self.locs.len() + self.svs.len() + self.scs.len() + self.locks.len();
        within(SizeLimit::Declarations, decls).map_err(test())?;
        within(SizeLimit::Atoms, self.exists.atoms.len()).map_err(test())?;
        self.work_ids
            .iter()
            .try_for_each(|w| name(w))
            .map_err(test())?;
        let names = [
            ("loc", self.locs.iter().map(|d| &d.name).collect::<Vec<_>>()),
            ("sv", self.svs.iter().map(|d| &d.name).collect()),
            ("sc", self.scs.iter().map(|d| &d.name).collect()),
            ("lock", self.locks.iter().map(|d| &d.name).collect()),
        ];
        for (what, list) in names {
            for (index, n) in list.into_iter().enumerate() {
                name(n).map_err(at(Place::Decl { what, index }))?;
            }
        }
        for (t, th) in self.threads.iter().enumerate() {
            let place = || Place::Thread {
                thread: t,
                name: th.name.clone(),
            };
            within(SizeLimit::Statements, th.body.len()).map_err(at(place()))?;
            name(&th.name).map_err(at(place()))?;
            th.regs
                .iter()
                .try_for_each(|r| name(r))
                .map_err(at(place()))?;
        }
        Ok(())
    }

    /// A node named somewhere: below [`MAX_NODES`] and one of the test's.
    fn node(&self, n: NodeId) -> Check {
        if n.index() >= MAX_NODES {
            Err(InvalidTestKind::NodeTooLarge(n))
        } else if self.nodes.binary_search(&n).is_err() {
            Err(InvalidTestKind::NodeNotListed(n))
        } else {
            Ok(())
        }
    }

    /// A `bcast` or `gf` node set.
    fn node_set(&self, nodes: &[NodeId]) -> Check {
        if nodes.is_empty() {
            return Err(InvalidTestKind::EmptyNodeSet);
        }
        if !ascending(nodes) {
            return Err(InvalidTestKind::UnsortedNodes);
        }
        nodes.iter().try_for_each(|&n| self.node(n))
    }

    /// A `loc`; with `local`, one on the thread's node.
    fn loc(&self, th: &Thread, l: LocId, local: bool) -> Check {
        index(IndexOf::Loc, l.0, self.locs.len())?;
        let loc_node = self.locs[l.0].node;
        if local && loc_node != th.node {
            return Err(InvalidTestKind::NotLocal {
                loc: l,
                loc_node,
                thread_node: th.node,
            });
        }
        Ok(())
    }

    /// The checks of one statement of thread `th`.
    fn op(&self, th: &Thread, op: &Op) -> Check {
        let reg = |r: RegId| index(IndexOf::Reg, r.0, th.regs.len());
        let val = |v: &Value| match *v {
            Value::Int(_) => Ok(()),
            Value::Reg(r) => reg(r),
        };
        let var = |v: &Var| match *v {
            Var::Loc(l) => self.loc(th, l, true),
            Var::Sv(s) => index(IndexOf::Sv, s.0, self.svs.len()),
        };
        let wid = |w: WidId| index(IndexOf::WorkId, w.0, self.work_ids.len());
        let lock = |l: LockId| index(IndexOf::Lock, l.0, self.locks.len());
        let sc = |s: ScId| index(IndexOf::Sc, s.0, self.scs.len());
        match op {
            Op::Load { reg: r, var: v } => {
                reg(*r)?;
                var(v)
            }
            Op::Store { var: v, val: x } => {
                var(v)?;
                val(x)
            }
            Op::Cas {
                reg: r,
                loc,
                expected,
                new,
            } => {
                reg(*r)?;
                self.loc(th, *loc, true)?;
                val(expected)?;
                val(new)
            }
            Op::Mfence => Ok(()),
            Op::Put {
                remote,
                local,
                wid: w,
            }
            | Op::Get {
                local,
                remote,
                wid: w,
            } => {
                self.loc(th, *remote, false)?;
                self.loc(th, *local, true)?;
                wid(*w)
            }
            Op::Rcas {
                remote,
                expected,
                new,
                local,
                wid: w,
            } => {
                self.loc(th, *remote, false)?;
                val(expected)?;
                val(new)?;
                self.loc(th, *local, true)?;
                wid(*w)
            }
            Op::Rfaa {
                remote,
                add,
                local,
                wid: w,
            } => {
                self.loc(th, *remote, false)?;
                val(add)?;
                self.loc(th, *local, true)?;
                wid(*w)
            }
            Op::Wait(w) => wid(*w),
            Op::Poll(n) | Op::Rfence(n) => self.node(*n),
            Op::Bcast { sv, nodes, wid: w } => {
                index(IndexOf::Sv, sv.0, self.svs.len())?;
                self.node_set(nodes)?;
                wid(*w)
            }
            Op::Gf(nodes) => self.node_set(nodes),
            Op::Acquire(l) | Op::Release(l) | Op::GiveUp(l) | Op::Handoff(l) | Op::Takeover(l) => {
                lock(*l)
            }
            Op::ReadSc { reg: r, sc: s } => {
                reg(*r)?;
                sc(*s)
            }
            Op::WriteSc { sc: s, val: x } => {
                sc(*s)?;
                val(x)
            }
            Op::CasSc {
                reg: r,
                sc: s,
                expected,
                new,
            } => {
                reg(*r)?;
                sc(*s)?;
                val(expected)?;
                val(new)
            }
            Op::FaaSc { reg: r, sc: s, add } => {
                reg(*r)?;
                sc(*s)?;
                val(add)
            }
        }
    }

    /// The rules on the uses of a lock across threads (every index already checked): at most
    /// `MARKS` tickets of a lock that some thread gives up; per node, at most one `handoff`
    /// and one `takeover` of a lock, and a `takeover` only with a `handoff`.
    fn lock_uses(&self) -> Result<(), InvalidTest> {
        #[derive(Clone, Copy, Default)]
        struct Uses {
            tickets: usize,
            gives: bool,
        }
        let mut uses = vec![Uses::default(); self.locks.len()];
        // Per lock and node (`lock * MAX_NODES + node`): the handoff and the takeover there.
        let mut handoffs = vec![false; self.locks.len() * MAX_NODES];
        let mut takeovers: Vec<Option<Place>> = vec![None; self.locks.len() * MAX_NODES];
        for (t, th) in self.threads.iter().enumerate() {
            for (s, stmt) in th.body.iter().enumerate() {
                let place = || Place::Stmt {
                    thread: t,
                    name: th.name.clone(),
                    stmt: s,
                    line: stmt.span.line,
                };
                let fail = |lock, misuse| InvalidTest {
                    test: self.name.clone(),
                    place: place(),
                    kind: InvalidTestKind::Lock { lock, misuse },
                };
                match stmt.op {
                    Op::Acquire(l) => uses[l.0].tickets += 1,
                    Op::GiveUp(l) => {
                        uses[l.0].tickets += 1;
                        uses[l.0].gives = true;
                    }
                    Op::Handoff(l) => {
                        let i = l.0 * MAX_NODES + th.node.index();
                        if std::mem::replace(&mut handoffs[i], true) {
                            return Err(fail(l, LockMisuse::SecondHandoff));
                        }
                    }
                    Op::Takeover(l) => {
                        let i = l.0 * MAX_NODES + th.node.index();
                        if takeovers[i].replace(place()).is_some() {
                            return Err(fail(l, LockMisuse::SecondTakeover));
                        }
                    }
                    _ => {}
                }
            }
        }
        let max = loco_locks::MARKS as usize;
        for (l, u) in uses.iter().enumerate() {
            if u.gives && u.tickets > max {
                return Err(InvalidTest {
                    test: self.name.clone(),
                    place: Place::Decl {
                        what: "lock",
                        index: l,
                    },
                    kind: InvalidTestKind::Lock {
                        lock: LockId(l),
                        misuse: LockMisuse::TooManyTickets {
                            tickets: u.tickets,
                            max,
                        },
                    },
                });
            }
        }
        for (i, place) in takeovers.into_iter().enumerate() {
            if let (Some(place), false) = (place, handoffs[i]) {
                return Err(InvalidTest {
                    test: self.name.clone(),
                    place,
                    kind: InvalidTestKind::Lock {
                        lock: LockId(i / MAX_NODES),
                        misuse: LockMisuse::TakeoverWithoutHandoff,
                    },
                });
            }
        }
        Ok(())
    }

    /// An observable of the condition.
    fn observable(&self, o: &Observable) -> Check {
        match *o {
            Observable::Reg { thread, reg } => {
                index(IndexOf::Thread, thread, self.threads.len())?;
                index(IndexOf::Reg, reg.0, self.threads[thread].regs.len())
            }
            Observable::Loc(l) => index(IndexOf::Loc, l.0, self.locs.len()),
            Observable::Sc(s) => index(IndexOf::Sc, s.0, self.scs.len()),
            Observable::Sv { sv, node } => {
                index(IndexOf::Sv, sv.0, self.svs.len())?;
                self.node(node)
            }
        }
    }
}
