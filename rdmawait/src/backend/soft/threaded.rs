//! The `Threaded` schedule: one NIC engine thread per node executes the requests posted by that
//! node's threads, in post order, concurrently with the program.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use crossbeam_utils::Backoff;
use parking_lot::Mutex;

use super::{cpu_cas, Fabric};
use crate::backend::{ThreadNic, WorkRequest};
use crate::error::TimeoutKind;
use crate::{Error, NodeId, Result};

/// How long an idle engine spins before it parks: a parked engine costs a futex wake-up (tens of
/// µs) on the next post, a spinning one costs a core.
const SPIN_BEFORE_PARK: Duration = Duration::from_micros(200);

struct Job {
    to: usize,
    wr: WorkRequest,
    /// The posting queue pair's completion counter.
    done: Arc<AtomicU64>,
}

/// The engine threads of a cluster.
#[derive(Debug)]
pub(super) struct Engines {
    senders: Mutex<Option<Vec<Sender<Job>>>>,
    /// Requests posted and not yet executed, over all engines.
    inflight: Arc<AtomicU64>,
}

impl Engines {
    pub(super) fn start(fabric: &Arc<Fabric>) -> Self {
        let inflight = Arc::new(AtomicU64::new(0));
        let senders = (0..fabric.mem.len())
            .map(|node| {
                let (tx, rx) = crossbeam_channel::unbounded();
                let (fabric, inflight) = (fabric.clone(), inflight.clone());
                std::thread::Builder::new()
                    .name(format!("loco-nic-n{node}"))
                    .spawn(move || run(&fabric, node, &rx, &inflight))
                    .expect("spawning a NIC engine thread");
                tx
            })
            .collect();
        Engines {
            senders: Mutex::new(Some(senders)),
            inflight,
        }
    }

    pub(super) fn open(&self, fabric: &Arc<Fabric>, node: usize) -> Result<ThreadedNic> {
        let tx = self.senders.lock().as_ref().ok_or(Error::Shutdown)?[node].clone();
        let nodes = fabric.mem.len();
        Ok(ThreadedNic {
            fabric: fabric.clone(),
            node,
            tx,
            inflight: self.inflight.clone(),
            done: (0..nodes).map(|_| Arc::new(AtomicU64::new(0))).collect(),
            polled: vec![0; nodes],
        })
    }

    /// Drops the engines' senders: each engine exits once the last thread NIC is gone too.
    pub(super) fn stop(&self) {
        self.senders.lock().take();
    }

    pub(super) fn quiesce(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let backoff = Backoff::new();
        while self.inflight.load(SeqCst) != 0 {
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: TimeoutKind::Quiesce,
                    after: timeout,
                });
            }
            backoff.snooze();
        }
        Ok(())
    }
}

fn run(fabric: &Fabric, node: usize, rx: &Receiver<Job>, inflight: &AtomicU64) {
    let mut idle_since: Option<Instant> = None;
    loop {
        let job = match rx.try_recv() {
            Ok(job) => job,
            Err(TryRecvError::Disconnected) => return,
            Err(TryRecvError::Empty) => {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() < SPIN_BEFORE_PARK {
                    std::hint::spin_loop();
                    continue;
                }
                match rx.recv() {
                    Ok(job) => job,
                    Err(_) => return,
                }
            }
        };
        idle_since = None;
        fabric.execute(node, job.to, job.wr);
        if job.wr.completes() {
            job.done.fetch_add(1, SeqCst);
        }
        inflight.fetch_sub(1, SeqCst);
    }
}

/// A thread's NIC under `Threaded`: posts go to its node's engine; completions are counted per
/// queue pair (a single engine executes a queue pair in order, so completions are in order).
#[derive(Debug)]
pub(super) struct ThreadedNic {
    fabric: Arc<Fabric>,
    node: usize,
    tx: Sender<Job>,
    inflight: Arc<AtomicU64>,
    done: Vec<Arc<AtomicU64>>,
    polled: Vec<u64>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Job(n{} {:?})", self.to, self.wr)
    }
}

impl ThreadNic for ThreadedNic {
    fn post(&mut self, target: NodeId, wr: WorkRequest) -> Result<()> {
        self.fabric.check_open()?;
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
        let backoff = Backoff::new();
        let mut deadline = None;
        while self.done[t].load(SeqCst) < want {
            if backoff.is_completed() {
                let d = *deadline.get_or_insert_with(|| Instant::now() + timeout);
                if Instant::now() >= d {
                    return Err(Error::Timeout {
                        what: TimeoutKind::Poll(target),
                        after: timeout,
                    });
                }
                if self.fabric.shutdown.load(SeqCst) && self.inflight.load(SeqCst) == 0 {
                    return Err(Error::Shutdown);
                }
                std::thread::yield_now();
            } else {
                backoff.snooze();
            }
        }
        self.polled[t] = want;
        Ok(())
    }

    fn load(&mut self, word: usize) -> Result<u64> {
        Ok(self.fabric.read(self.node, word))
    }

    fn store(&mut self, word: usize, value: u64) -> Result<()> {
        self.fabric.write(self.node, word, value);
        Ok(())
    }

    fn cas(&mut self, word: usize, expected: u64, new: u64) -> Result<u64> {
        Ok(cpu_cas(&self.fabric, self.node, word, expected, new))
    }

    fn mfence(&mut self) -> Result<()> {
        std::sync::atomic::fence(SeqCst);
        Ok(())
    }
}
