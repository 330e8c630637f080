//! The `Threaded` schedule: one NIC engine thread per node executes the requests posted by that
//! node's threads, in post order, concurrently with the program.
//!
//! A thread blocked in a poll helps: it executes the next queued requests of its node itself.
//! Requests are taken and executed under the node queue's lock, so a queue pair's requests still
//! execute one at a time in post order, whoever runs them; what helping buys is progress that does
//! not depend on the OS scheduling the engine thread, which on a machine with fewer cores than
//! busy threads would otherwise cost a time slice per completion.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use crossbeam_utils::Backoff;
use parking_lot::Mutex;

use super::{deadline, expired, DirectCpu, Fabric};
use crate::backend::{ThreadNic, WorkRequest};
use crate::error::TimeoutKind;
use crate::{Error, NodeId, Result};

/// How long an idle engine spins before it starts sleeping between looks at its queue.
const SPIN_BEFORE_SLEEP: Duration = Duration::from_micros(200);
/// Longest sleep of an idle engine (pollers help, so this bounds only background latency).
const MAX_SLEEP: Duration = Duration::from_millis(1);
/// After this long idle an engine parks until a post (or the shutdown) wakes it: a cluster of
/// hundreds of idle nodes must not cost a core in wake-ups every millisecond (1024 idle
/// engines took 35 s to let a cluster be built on 2 cores).
const PARK_AFTER: Duration = Duration::from_millis(20);
/// A parked engine looks at its queue at least this often anyway: a bound on its sleep that
/// does not depend on every wake-up arriving (pollers run requests themselves meanwhile).
const PARK_MAX: Duration = Duration::from_millis(100);

struct Job {
    to: usize,
    wr: WorkRequest,
    /// The incarnations of the posting node and of `to` at post time: a request of a dead
    /// incarnation, or towards one, never executes, even once the node has restarted.
    incarnations: (u64, u64),
    /// The posting queue pair's completion counter.
    done: Arc<AtomicU64>,
    /// The posting thread's completion channel (async tasks sleep on it).
    #[cfg(feature = "tokio")]
    events: Option<Arc<super::channel::Channel>>,
}

impl Job {
    /// The job is done with (executed, or dropped for a dead node): tell sleeping tasks.
    fn signal(&self) {
        #[cfg(feature = "tokio")]
        if let Some(ch) = &self.events {
            ch.signal();
        }
    }
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
    /// Holds the head request when it is held back by a stall ([`super::SoftBackend::stall`]).
    exec: Mutex<Option<Job>>,
    /// Whether `exec` holds a request.
    held: AtomicBool,
    /// The engine thread, once started (posts unpark it when it is parked).
    engine: std::sync::OnceLock<std::thread::Thread>,
}

impl NodeQueue {
    /// Wakes the engine if it is parked (after a post, or at the shutdown). An unpark of a
    /// running engine leaves a token: its next park returns at once, and it looks at its queue
    /// again, so no wake-up is lost. It costs one atomic swap when the engine is not parked.
    fn wake(&self) {
        if let Some(t) = self.engine.get() {
            t.unpark();
        }
    }

    fn has_work(&self) -> bool {
        !self.rx.is_empty() || self.held.load(SeqCst)
    }

    /// Executes the next request if there is one and nobody else is executing; true if it did
    /// (or dropped it: a request from or to a dead node completes in error, without touching
    /// memory).
    fn run_one(&self, fabric: &Fabric, inflight: &AtomicU64, block: bool) -> bool {
        let guard = if block {
            Some(self.exec.lock())
        } else {
            self.exec.try_lock()
        };
        let Some(mut head) = guard else { return false };
        let job = match head.take() {
            Some(job) => job,
            None => match self.rx.try_recv() {
                Ok(job) => job,
                Err(_) => return false,
            },
        };
        let (from, to) = (self.node, job.to);
        if fabric.is_dead(from)
            || fabric.is_dead(to)
            || job.incarnations != (fabric.incarnation(from), fabric.incarnation(to))
        {
            self.held.store(false, SeqCst);
            inflight.fetch_sub(1, SeqCst);
            job.signal();
            return true;
        }
        if fabric.is_stalled(from) || fabric.is_stalled(to) {
            *head = Some(job);
            self.held.store(true, SeqCst);
            return false;
        }
        self.held.store(false, SeqCst);
        fabric.execute(from, to, job.wr);
        if job.wr.completes() {
            job.done.fetch_add(1, SeqCst);
        }
        inflight.fetch_sub(1, SeqCst);
        job.signal();
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
    threads: Vec<JoinHandle<()>>,
}

impl Engines {
    /// Starts one engine per node. If the OS refuses a thread, the engines already started are
    /// stopped and joined, and the error is returned.
    pub(super) fn start(fabric: &Arc<Fabric>) -> Result<Self> {
        Self::start_with(fabric, |builder, f| builder.spawn(f))
    }

    /// [`Engines::start`] with the thread spawner given (tests make it fail).
    fn start_with(
        fabric: &Arc<Fabric>,
        mut spawn: impl FnMut(
            std::thread::Builder,
            Box<dyn FnOnce() + Send>,
        ) -> std::io::Result<JoinHandle<()>>,
    ) -> Result<Self> {
        let inflight = Arc::new(AtomicU64::new(0));
        let nodes = fabric.nodes();
        let (mut senders, mut queues, mut threads) = (
            Vec::with_capacity(nodes),
            Vec::with_capacity(nodes),
            Vec::with_capacity(nodes),
        );
        for node in 0..nodes {
            let (tx, rx) = crossbeam_channel::unbounded();
            let queue = Arc::new(NodeQueue {
                node,
                rx,
                exec: Mutex::new(None),
                held: AtomicBool::new(false),
                engine: std::sync::OnceLock::new(),
            });
            let (f, inf, q) = (fabric.clone(), inflight.clone(), queue.clone());
            let spawned = spawn(
                std::thread::Builder::new().name(format!("loco-nic-n{node}")),
                Box::new(move || run(&f, &q, &inf)),
            );
            match spawned {
                Ok(t) => {
                    let _ = queue.engine.set(t.thread().clone());
                    threads.push(t);
                }
                Err(e) => {
                    fabric.shutdown.store(true, SeqCst);
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(Error::Backend {
                        backend: "soft",
                        message: format!("cannot start the NIC engine thread of n{node}"),
                        source: Some(e),
                    });
                }
            }
            senders.push(tx);
            queues.push(queue);
        }
        Ok(Engines {
            senders: Mutex::new(Some(senders)),
            queues,
            inflight,
            threads,
        })
    }

    pub(super) fn open(&self, fabric: &Arc<Fabric>, node: usize) -> Result<EngineNic> {
        let tx = self.senders.lock().as_ref().ok_or(Error::Shutdown)?[node].clone();
        let nodes = fabric.nodes();
        Ok(EngineNic {
            cpu: DirectCpu {
                fabric: fabric.clone(),
                node,
            },
            tx,
            queue: self.queues[node].clone(),
            inflight: self.inflight.clone(),
            done: (0..nodes).map(|_| Arc::new(AtomicU64::new(0))).collect(),
            polled: vec![0; nodes],
            #[cfg(feature = "tokio")]
            events: super::channel::Channel::new().map(Arc::new),
        })
    }

    /// Stops accepting work; the engines exit once they can make no more progress.
    pub(super) fn stop(&self) {
        self.senders.lock().take();
        for q in &self.queues {
            q.wake();
        }
    }

    /// Joins the engine threads (after [`Engines::stop`] and the fabric's shutdown). An engine
    /// that panicked is not an error here: dropping a cluster never panics.
    pub(super) fn join(&mut self) {
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                tracing::error!(target: "loco::rdmawait", "a soft NIC engine thread panicked");
            }
        }
    }

    pub(super) fn quiesce(&self, fabric: &Fabric, timeout: Duration) -> Result<()> {
        let deadline = deadline(timeout);
        let backoff = Backoff::new();
        while self.inflight.load(SeqCst) != 0 {
            fabric.check_open()?;
            if expired(deadline) {
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
                backoff.snooze();
            }
        }
        Ok(())
    }
}

fn run(fabric: &Fabric, queue: &NodeQueue, inflight: &AtomicU64) {
    let mut idle_since: Option<Instant> = None;
    let mut sleep = Duration::from_micros(10);
    loop {
        if queue.has_work() && queue.run_one(fabric, inflight, true) {
            idle_since = None;
            sleep = Duration::from_micros(10);
            continue;
        }
        // After a shutdown, what could still run has run (the line above): stop.
        if fabric.is_shut_down() {
            return;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        let idle = since.elapsed();
        if idle < SPIN_BEFORE_SLEEP {
            std::hint::spin_loop();
        } else if idle >= PARK_AFTER {
            // A post or the shutdown after the look above unparks us (see `NodeQueue::wake`).
            std::thread::park_timeout(PARK_MAX);
        } else {
            std::thread::sleep(sleep);
            sleep = (sleep * 2).min(MAX_SLEEP);
        }
    }
}

/// A thread's [`ThreadNic`] under `Threaded` (it feeds its node's engine thread): posts go to its
/// node's queue; completions are counted per queue pair (one request of a node executes at a
/// time, in post order, so completions of a queue pair arrive in order).
#[derive(Debug)]
pub(super) struct EngineNic {
    cpu: DirectCpu,
    tx: Sender<Job>,
    queue: Arc<NodeQueue>,
    inflight: Arc<AtomicU64>,
    done: Vec<Arc<AtomicU64>>,
    polled: Vec<u64>,
    #[cfg(feature = "tokio")]
    events: Option<Arc<super::channel::Channel>>,
}

impl ThreadNic for EngineNic {
    #[cfg(feature = "tokio")]
    fn completion_events(&self) -> Option<Arc<dyn crate::backend::CompletionEvents>> {
        self.events
            .clone()
            .map(|e| e as Arc<dyn crate::backend::CompletionEvents>)
    }

    fn post(&mut self, target: NodeId, wr: WorkRequest) -> Result<()> {
        let t = self.cpu.fabric.check_post(self.cpu.node, target, &wr)?;
        self.inflight.fetch_add(1, SeqCst);
        let job = Job {
            to: t,
            wr,
            incarnations: (
                self.cpu.fabric.incarnation(self.cpu.node),
                self.cpu.fabric.incarnation(t),
            ),
            done: self.done[t].clone(),
            #[cfg(feature = "tokio")]
            events: self.events.clone(),
        };
        if self.tx.send(job).is_err() {
            self.inflight.fetch_sub(1, SeqCst);
            return Err(Error::Shutdown);
        }
        self.queue.wake();
        Ok(())
    }

    fn poll(&mut self, target: NodeId, timeout: Duration) -> Result<()> {
        let fabric = self.cpu.fabric.clone();
        let t = fabric.check_node(target)?;
        let want = self.polled[t] + 1;
        let backoff = Backoff::new();
        let mut deadline = None;
        loop {
            self.cpu.alive()?;
            if self.done[t].load(SeqCst) >= want {
                break;
            }
            // Not executed yet: if the target died, it never will be (the engine drops it).
            if let Err(e) = fabric.check_alive(t) {
                self.polled[t] = want;
                return Err(e);
            }
            if fabric.is_shut_down() {
                return Err(Error::Shutdown);
            }
            // Help first: yielding on a busy machine can cost a whole time slice.
            if self.queue.run_one(&fabric, &self.inflight, false) {
                continue;
            }
            // Spin briefly, then yield; the clock is read only once spinning is over.
            // A zero timeout looks once (an async task's poll): no spinning on its behalf.
            if (timeout.is_zero() || backoff.is_completed())
                && expired(*deadline.get_or_insert_with(|| super::deadline(timeout)))
            {
                return Err(Error::Timeout {
                    what: TimeoutKind::Poll(target),
                    after: timeout,
                });
            }
            backoff.snooze();
        }
        self.polled[t] = want;
        Ok(())
    }

    fn load(&mut self, word: usize) -> Result<u64> {
        self.cpu.load(word)
    }

    fn store(&mut self, word: usize, value: u64) -> Result<()> {
        self.cpu.store(word, value)
    }

    fn cas(&mut self, word: usize, expected: u64, new: u64) -> Result<u64> {
        self.cpu.cas(word, expected, new)
    }

    fn mfence(&mut self) -> Result<()> {
        self.cpu.mfence()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_the_os_refuses_is_an_error_and_the_others_stop() {
        let fabric = Arc::new(Fabric::new(3, 4).unwrap());
        let mut started = 0;
        let r = Engines::start_with(&fabric, |builder, f| {
            if started == 2 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    "no more threads",
                ));
            }
            started += 1;
            builder.spawn(f)
        });
        let Err(Error::Backend {
            backend: "soft",
            message,
            source: Some(e),
        }) = r
        else {
            panic!("expected a backend error with its source, got {r:?}");
        };
        assert!(message.contains("n2"), "{message}");
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        // The two engines that did start were stopped and joined (start_with returned).
        assert!(fabric.is_shut_down());
    }
}
