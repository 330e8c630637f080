//! The `Threaded` schedule: one NIC engine thread per node executes the requests posted by that
//! node's threads, in post order, concurrently with the program.
//!
//! A thread blocked in a poll helps: it executes the next queued requests of its node itself.
//! Requests are taken and executed under the node queue's lock, so a queue pair's requests still
//! execute one at a time in post order, whoever runs them; what helping buys is progress that does
//! not depend on the OS scheduling the engine thread, which on a machine with fewer cores than
//! busy threads would otherwise cost a time slice per completion.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use super::{DirectCpu, Fabric};
use crate::backend::{ThreadNic, WorkRequest};
use crate::error::TimeoutKind;
use crate::{Error, NodeId, Result};

/// How long an idle engine spins before it starts sleeping between looks at its queue.
const SPIN_BEFORE_SLEEP: Duration = Duration::from_micros(200);
/// Spins of a blocked poll (each trying to help) before it starts yielding its time slice.
const SPINS_BEFORE_YIELD: u32 = 256;
/// Longest sleep of an idle engine (pollers help, so this bounds only background latency).
const MAX_SLEEP: Duration = Duration::from_millis(1);

struct Job {
    to: usize,
    wr: WorkRequest,
    /// The posting queue pair's completion counter.
    done: Arc<AtomicU64>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Job(n{} {:?})", self.to, self.wr)
    }
}

/// The requests posted by one node's threads, in post order.
#[derive(Debug)]
struct NodeQueue {
    node: usize,
    rx: Receiver<Job>,
    /// Held while taking *and* executing a request, so requests execute one at a time in order.
    exec: Mutex<()>,
}

impl NodeQueue {
    /// Executes the next request if there is one and nobody else is executing; true if it did.
    fn run_one(&self, fabric: &Fabric, inflight: &AtomicU64, block: bool) -> bool {
        let guard = if block {
            Some(self.exec.lock())
        } else {
            self.exec.try_lock()
        };
        let Some(_guard) = guard else { return false };
        let Ok(job) = self.rx.try_recv() else {
            return false;
        };
        fabric.execute(self.node, job.to, job.wr);
        if job.wr.completes() {
            job.done.fetch_add(1, SeqCst);
        }
        inflight.fetch_sub(1, SeqCst);
        true
    }
}

/// The engine threads of a cluster.
#[derive(Debug)]
pub(super) struct Engines {
    senders: Mutex<Option<Vec<Sender<Job>>>>,
    queues: Vec<Arc<NodeQueue>>,
    /// Requests posted and not yet executed, over all nodes.
    inflight: Arc<AtomicU64>,
}

impl Engines {
    pub(super) fn start(fabric: &Arc<Fabric>) -> Self {
        let inflight = Arc::new(AtomicU64::new(0));
        let (senders, queues) = (0..fabric.mem.len())
            .map(|node| {
                let (tx, rx) = crossbeam_channel::unbounded();
                let queue = Arc::new(NodeQueue {
                    node,
                    rx,
                    exec: Mutex::new(()),
                });
                let (fabric, inflight, q) = (fabric.clone(), inflight.clone(), queue.clone());
                std::thread::Builder::new()
                    .name(format!("loco-nic-n{node}"))
                    .spawn(move || run(&fabric, &q, &inflight))
                    .expect("spawning a NIC engine thread");
                (tx, queue)
            })
            .unzip();
        Engines {
            senders: Mutex::new(Some(senders)),
            queues,
            inflight,
        }
    }

    pub(super) fn open(&self, fabric: &Arc<Fabric>, node: usize) -> Result<ThreadedNic> {
        let tx = self.senders.lock().as_ref().ok_or(Error::Shutdown)?[node].clone();
        let nodes = fabric.mem.len();
        Ok(ThreadedNic {
            cpu: DirectCpu {
                fabric: fabric.clone(),
                node,
            },
            tx,
            queue: self.queues[node].clone(),
            inflight: self.inflight.clone(),
            done: (0..nodes).map(|_| Arc::new(AtomicU64::new(0))).collect(),
            polled: vec![0; nodes],
        })
    }

    /// Stops accepting work; the engines exit once their queues are drained.
    pub(super) fn stop(&self) {
        self.senders.lock().take();
    }

    pub(super) fn quiesce(&self, fabric: &Fabric, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while self.inflight.load(SeqCst) != 0 {
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: TimeoutKind::Quiesce,
                    after: timeout,
                });
            }
            // Help rather than wait for the engines to be scheduled.
            if !self
                .queues
                .iter()
                .any(|q| q.run_one(fabric, &self.inflight, false))
            {
                std::thread::yield_now();
            }
        }
        Ok(())
    }
}

fn run(fabric: &Fabric, queue: &NodeQueue, inflight: &AtomicU64) {
    let mut idle_since: Option<Instant> = None;
    let mut sleep = Duration::from_micros(10);
    loop {
        if !queue.rx.is_empty() && queue.run_one(fabric, inflight, true) {
            idle_since = None;
            sleep = Duration::from_micros(10);
            continue;
        }
        if fabric.shutdown.load(SeqCst) && queue.rx.is_empty() {
            return;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() < SPIN_BEFORE_SLEEP {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(sleep);
            sleep = (sleep * 2).min(MAX_SLEEP);
        }
    }
}

/// A thread's NIC under `Threaded`: posts go to its node's queue; completions are counted per
/// queue pair (one request of a node executes at a time, in post order, so completions of a
/// queue pair arrive in order).
#[derive(Debug)]
pub(super) struct ThreadedNic {
    cpu: DirectCpu,
    tx: Sender<Job>,
    queue: Arc<NodeQueue>,
    inflight: Arc<AtomicU64>,
    done: Vec<Arc<AtomicU64>>,
    polled: Vec<u64>,
}

impl ThreadNic for ThreadedNic {
    fn post(&mut self, target: NodeId, wr: WorkRequest) -> Result<()> {
        self.cpu.fabric.check_open()?;
        let t = target.index();
        self.inflight.fetch_add(1, SeqCst);
        let job = Job {
            to: t,
            wr,
            done: self.done[t].clone(),
        };
        if self.tx.send(job).is_err() {
            self.inflight.fetch_sub(1, SeqCst);
            return Err(Error::Shutdown);
        }
        Ok(())
    }

    fn poll(&mut self, target: NodeId, timeout: Duration) -> Result<()> {
        let t = target.index();
        let want = self.polled[t] + 1;
        let mut spins = 0u32;
        let mut deadline = None;
        while self.done[t].load(SeqCst) < want {
            // Help first: yielding on a busy machine can cost a whole time slice.
            if self.queue.run_one(&self.cpu.fabric, &self.inflight, false) {
                continue;
            }
            if spins < SPINS_BEFORE_YIELD {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            let d = *deadline.get_or_insert_with(|| Instant::now() + timeout);
            if Instant::now() >= d {
                return Err(Error::Timeout {
                    what: TimeoutKind::Poll(target),
                    after: timeout,
                });
            }
            std::thread::yield_now();
        }
        self.polled[t] = want;
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
