//! The soft NIC: an in-process NIC that executes the operational model of spec §4.
//!
//! Every node's registered memory is a block of real shared words; every thread gets queue pairs
//! and a completion queue. What differs between the three [`Schedule`]s is *when* the NIC does its
//! work, each time a behaviour the model allows:
//!
//! | schedule | who runs the NIC | what can be observed |
//! |---|---|---|
//! | [`Schedule::Immediate`] | the posting thread, at post time, in program order | only races between threads |
//! | [`Schedule::Threaded`] | one engine thread per node, concurrently with the program | the above, plus puts reading their source late |
//! | [`Schedule::Chaos`] | every thread, at every call, taking random enabled steps of the model | every weak behaviour of spec §3 |
//!
//! `Chaos` runs the rules of [`crate::model`] over the whole cluster (store buffers, queue-pair
//! pipes, remote and local write buffers, remote-atomic locks), choosing among enabled steps with a
//! seeded RNG; it is what makes the weak outcomes of the litmus tests observable.

mod chaos;
mod threaded;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::Backoff;

use super::{Backend, ThreadNic, WorkRequest};
use crate::{Error, NodeId, Result};

/// When the soft NIC executes posted work (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Schedule {
    /// Every operation executes completely at post time, in program order. Fastest; a valid
    /// behaviour of the model.
    #[default]
    Immediate,
    /// NIC engine threads (one per node) execute each queue pair's requests in order,
    /// concurrently with the program, as a real NIC does.
    Threaded,
    /// Adversarial: every reordering and delay the model allows (a put reading its source late, a
    /// get overtaken by a later put, a remote RMW split by a CPU store or a put, operations towards
    /// different nodes in any order, TSO store buffering), chosen by an RNG seeded with `seed`.
    ///
    /// The NIC's choices are a function of the seed and of the order in which threads call into
    /// it: a single-threaded program replays exactly; a multi-threaded one also depends on the
    /// OS's interleaving of its threads.
    Chaos {
        /// RNG seed.
        seed: u64,
    },
}

/// Registered memory of every node, shared by all NICs.
#[derive(Debug)]
pub(crate) struct Fabric {
    mem: Vec<Box<[AtomicU64]>>,
    /// Remote-atomic locks of the `Immediate` and `Threaded` NICs (Chaos keeps its own).
    rmw_locks: Vec<AtomicBool>,
    shutdown: AtomicBool,
    /// Per node: why it is dead (fault injection, [`Backend::kill`]), or `None`.
    dead: Vec<parking_lot::Mutex<Option<String>>>,
}

impl Fabric {
    fn new(nodes: usize, words: usize) -> Self {
        Fabric {
            mem: (0..nodes)
                .map(|_| (0..words).map(|_| AtomicU64::new(0)).collect())
                .collect(),
            rmw_locks: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            shutdown: AtomicBool::new(false),
            dead: (0..nodes).map(|_| parking_lot::Mutex::new(None)).collect(),
        }
    }

    fn read(&self, node: usize, word: usize) -> u64 {
        self.mem[node][word].load(SeqCst)
    }

    fn write(&self, node: usize, word: usize, v: u64) {
        self.mem[node][word].store(v, SeqCst)
    }

    fn check_open(&self) -> Result<()> {
        if self.shutdown.load(SeqCst) {
            Err(Error::Shutdown)
        } else {
            Ok(())
        }
    }

    /// Executes `wr` from `from` towards `to` completely, each phase in order (one valid schedule
    /// of the model). Remote RMWs hold `to`'s remote-atomic lock between their read and their
    /// write, and nothing else takes it: CPU stores and puts may still land in between (spec §3.4).
    fn execute(&self, from: usize, to: usize, wr: WorkRequest) {
        match wr {
            WorkRequest::Write {
                local,
                remote,
                words,
            } => {
                for k in 0..words {
                    self.write(to, remote + k, self.read(from, local + k));
                }
            }
            WorkRequest::Read {
                local,
                remote,
                words,
            } => {
                for k in 0..words {
                    self.write(from, local + k, self.read(to, remote + k));
                }
            }
            WorkRequest::CompareSwap {
                remote,
                expected,
                new,
                local,
            } => {
                let old = self.rmw(to, remote, |old| (old == expected).then_some(new));
                self.write(from, local, old);
            }
            WorkRequest::FetchAdd { remote, add, local } => {
                let old = self.rmw(to, remote, |old| Some(old.wrapping_add(add)));
                self.write(from, local, old);
            }
            WorkRequest::Fence => {}
        }
    }

    fn rmw(&self, node: usize, word: usize, f: impl FnOnce(u64) -> Option<u64>) -> u64 {
        let lock = &self.rmw_locks[node];
        let backoff = Backoff::new();
        while lock
            .compare_exchange_weak(false, true, SeqCst, SeqCst)
            .is_err()
        {
            backoff.snooze();
        }
        let old = self.read(node, word);
        if let Some(new) = f(old) {
            self.write(node, word, new);
        }
        lock.store(false, SeqCst);
        old
    }
}

/// The soft NIC backend (the default). Build it through
/// [`ClusterBuilder::soft`](crate::ClusterBuilder::soft).
#[derive(Debug)]
pub struct SoftBackend {
    fabric: Arc<Fabric>,
    engine: Engine,
}

#[derive(Debug)]
enum Engine {
    Immediate,
    Threaded(threaded::Engines),
    Chaos(Arc<chaos::Chaos>),
}

impl SoftBackend {
    /// A soft cluster of `nodes` nodes with `words` words of registered memory each.
    pub fn new(nodes: usize, words: usize, schedule: Schedule) -> Self {
        let fabric = Arc::new(Fabric::new(nodes, words));
        let engine = match schedule {
            Schedule::Immediate => Engine::Immediate,
            Schedule::Threaded => Engine::Threaded(threaded::Engines::start(&fabric)),
            Schedule::Chaos { seed } => {
                Engine::Chaos(Arc::new(chaos::Chaos::new(fabric.clone(), seed)))
            }
        };
        SoftBackend { fabric, engine }
    }
}

impl Backend for SoftBackend {
    fn name(&self) -> &'static str {
        "soft"
    }

    fn nodes(&self) -> usize {
        self.fabric.mem.len()
    }

    fn words(&self, node: NodeId) -> usize {
        self.fabric.mem.get(node.index()).map_or(0, |m| m.len())
    }

    fn open(&self, node: NodeId) -> Result<Box<dyn ThreadNic>> {
        self.fabric.check_open()?;
        let n = node.index();
        Ok(match &self.engine {
            Engine::Immediate => Box::new(ImmediateNic {
                cpu: DirectCpu {
                    fabric: self.fabric.clone(),
                    node: n,
                },
                unpolled: vec![0; self.nodes()],
            }),
            Engine::Threaded(e) => Box::new(e.open(&self.fabric, n)?),
            Engine::Chaos(c) => Box::new(chaos::Chaos::open(c, n)),
        })
    }

    fn quiesce(&self, timeout: Duration) -> Result<()> {
        match &self.engine {
            Engine::Immediate => Ok(()),
            Engine::Threaded(e) => e.quiesce(&self.fabric, timeout),
            Engine::Chaos(c) => c.quiesce(timeout),
        }
    }

    fn peek(&self, node: NodeId, word: usize) -> Result<u64> {
        Ok(self.fabric.read(node.index(), word))
    }

    fn poke(&self, node: NodeId, word: usize, value: u64) -> Result<()> {
        self.fabric.write(node.index(), word, value);
        Ok(())
    }

    fn dead(&self, node: NodeId) -> Option<String> {
        self.fabric.dead.get(node.index())?.lock().clone()
    }

    fn kill(&self, node: NodeId) -> Result<()> {
        let Some(d) = self.fabric.dead.get(node.index()) else {
            return Err(Error::UnknownNode {
                node,
                nodes: self.nodes(),
            });
        };
        d.lock()
            .get_or_insert_with(|| "killed by fault injection".to_owned());
        Ok(())
    }

    fn shutdown(&self) {
        self.fabric.shutdown.store(true, SeqCst);
        if let Engine::Threaded(e) = &self.engine {
            e.stop();
        }
    }
}

impl Drop for SoftBackend {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The `Immediate` schedule's thread NIC: executes at post time, so a poll only counts.
#[derive(Debug)]
struct ImmediateNic {
    cpu: DirectCpu,
    /// Completed, unpolled requests per target node.
    unpolled: Vec<u64>,
}

impl ThreadNic for ImmediateNic {
    fn post(&mut self, target: NodeId, wr: WorkRequest) -> Result<()> {
        let DirectCpu { fabric, node } = &self.cpu;
        fabric.check_open()?;
        fabric.execute(*node, target.index(), wr);
        if wr.completes() {
            self.unpolled[target.index()] += 1;
        }
        Ok(())
    }

    fn poll(&mut self, target: NodeId, _timeout: Duration) -> Result<()> {
        let c = &mut self.unpolled[target.index()];
        if *c == 0 {
            return Err(Error::NothingPending { node: target });
        }
        *c -= 1;
        Ok(())
    }

    fn load(&mut self, word: usize) -> Result<u64> {
        Ok(self.cpu.load(word))
    }

    fn store(&mut self, word: usize, value: u64) -> Result<()> {
        self.cpu.store(word, value);
        Ok(())
    }

    fn cas(&mut self, word: usize, expected: u64, new: u64) -> Result<u64> {
        Ok(self.cpu.cas(word, expected, new))
    }

    fn mfence(&mut self) -> Result<()> {
        self.cpu.mfence();
        Ok(())
    }
}

/// The CPU of a thread on `node` under `Immediate` and `Threaded`: accesses go straight to
/// memory (sequentially consistent, a valid behaviour of x86-TSO; only `Chaos` models the store
/// buffer).
#[derive(Debug)]
struct DirectCpu {
    fabric: Arc<Fabric>,
    node: usize,
}

impl DirectCpu {
    fn load(&self, word: usize) -> u64 {
        self.fabric.read(self.node, word)
    }

    fn store(&self, word: usize, value: u64) {
        self.fabric.write(self.node, word, value)
    }

    /// Atomic on memory; ignores the remote-atomic lock (spec §4).
    fn cas(&self, word: usize, expected: u64, new: u64) -> u64 {
        cpu_cas(&self.fabric, self.node, word, expected, new)
    }

    fn mfence(&self) {
        std::sync::atomic::fence(SeqCst);
    }
}

fn cpu_cas(fabric: &Fabric, node: usize, word: usize, expected: u64, new: u64) -> u64 {
    match fabric.mem[node][word].compare_exchange(expected, new, SeqCst, SeqCst) {
        Ok(v) | Err(v) => v,
    }
}
