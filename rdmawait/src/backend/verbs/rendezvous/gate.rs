//! The rendezvous listener: accepts connections on this node's own address, runs the
//! authentication handshake on each with a deadline, and hands authenticated connections to the
//! session. Device-free, so that it is tested where there is no RDMA.
//!
//! Bounds: at most `max_pending` connections are in the handshake at once, and at most half of
//! them from one IP address (further ones are closed at once); a handshake that does not finish
//! within `handshake_timeout` of its accept is shut down by the accept loop, however slowly the
//! stranger drips bytes (it holds a thread and a descriptor for that long, no more); a
//! connection's thread and descriptor are released when it ends. Authenticated connections are bounded by
//! the session, which keeps one per peer and refuses duplicates.

use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::auth::{self, ClusterKey, Refused};

/// How often the accept loop looks at its stop flag when nobody connects.
const ACCEPT_POLL: Duration = Duration::from_millis(5);
/// How long one connection attempt of [`dial`] may take.
const CONNECT_ATTEMPT: Duration = Duration::from_millis(500);
/// Pause between attempts of [`dial`] while the peer is not listening (or is busy).
const CONNECT_RETRY: Duration = Duration::from_millis(50);

/// What the listener checks connections against.
#[derive(Clone, Debug)]
pub(crate) struct GateConfig {
    /// This node.
    pub(crate) me: u16,
    /// This process's incarnation.
    pub(crate) incarnation: u64,
    /// The cluster's size.
    pub(crate) nodes: u16,
    pub(crate) key: ClusterKey,
    /// Deadline of a connection's handshake (reads and writes).
    pub(crate) handshake_timeout: Duration,
    /// Connections in the handshake at once.
    pub(crate) max_pending: usize,
}

/// What runs an authenticated connection from node `from`, incarnation `incarnation` (on the
/// connection's thread, until the connection ends).
pub(crate) type OnJoin = dyn Fn(TcpStream, u16, u64) + Send + Sync;

struct Inner {
    cfg: GateConfig,
    on_join: Box<OnJoin>,
    stop: AtomicBool,
    pending: AtomicUsize,
    refused: AtomicU64,
    next_id: AtomicU64,
    /// Every open connection, by id.
    conns: Mutex<HashMap<u64, Conn>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// An open connection as the listener keeps it.
struct Conn {
    /// A clone of its stream, to shut it down (on stop, or when its handshake is late).
    stream: TcpStream,
    /// Where it comes from.
    from: std::net::IpAddr,
    /// While in the handshake: when it must be done.
    deadline: Option<Instant>,
}

/// A running listener; [`Gate::stop`] (or drop) closes the port and ends every thread.
pub(crate) struct Gate {
    addr: SocketAddr,
    inner: Arc<Inner>,
    accept: Option<JoinHandle<()>>,
}

impl Gate {
    /// Listens on `addr` (this node's own address, never every interface).
    pub(crate) fn start(
        addr: SocketAddr,
        cfg: GateConfig,
        on_join: Box<OnJoin>,
    ) -> io::Result<Gate> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            cfg,
            on_join,
            stop: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            next_id: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
            threads: Mutex::new(Vec::new()),
        });
        let i = inner.clone();
        let accept = std::thread::Builder::new()
            .name(format!("loco-rendezvous-n{}", inner.cfg.me))
            .spawn(move || accept_loop(&i, &listener))?;
        Ok(Gate {
            addr,
            inner,
            accept: Some(accept),
        })
    }

    /// The address listened on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    #[cfg(test)]
    /// Connections refused so far (failed handshakes, and connections over the cap).
    pub(crate) fn refused(&self) -> u64 {
        self.inner.refused.load(SeqCst)
    }

    #[cfg(test)]
    /// Open connections (in the handshake or authenticated).
    pub(crate) fn open_connections(&self) -> usize {
        self.inner.conns.lock().len()
    }

    /// Closes the port, shuts every connection down and joins every thread.
    pub(crate) fn stop(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        self.inner.stop.store(true, SeqCst);
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
        for c in self.inner.conns.lock().values() {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
        let threads: Vec<_> = self.inner.threads.lock().drain(..).collect();
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.shut();
    }
}

/// Shuts down every connection whose handshake is past its deadline (its thread then ends).
fn reap_late(inner: &Inner) {
    let now = Instant::now();
    for c in inner.conns.lock().values_mut() {
        if c.deadline.is_some_and(|d| now >= d) {
            c.deadline = None;
            inner.refused.fetch_add(1, SeqCst);
            let _ = c.stream.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(inner: &Arc<Inner>, listener: &TcpListener) {
    while !inner.stop.load(SeqCst) {
        reap_late(inner);
        let (stream, from) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(ACCEPT_POLL);
                continue;
            }
            Err(e) => {
                // Out of descriptors, or the like: back off rather than spin.
                tracing::debug!(target: "loco::rdmawait", error = %e, "rendezvous accept failed");
                std::thread::sleep(ACCEPT_POLL * 4);
                continue;
            }
        };
        let from_there = inner
            .conns
            .lock()
            .values()
            .filter(|c| c.deadline.is_some() && c.from == from.ip())
            .count();
        if inner.pending.load(SeqCst) >= inner.cfg.max_pending
            || from_there >= inner.cfg.max_pending.div_ceil(2)
        {
            inner.refused.fetch_add(1, SeqCst);
            tracing::debug!(target: "loco::rdmawait", %from, "rendezvous busy: connection closed");
            continue; // dropping the stream closes it
        }
        let t = inner.cfg.handshake_timeout;
        let ok = stream.set_nonblocking(false).is_ok()
            && stream.set_nodelay(true).is_ok()
            && stream.set_read_timeout(Some(t)).is_ok()
            && stream.set_write_timeout(Some(t)).is_ok();
        let Ok(clone) = stream.try_clone() else {
            continue;
        };
        if !ok {
            continue;
        }
        let id = inner.next_id.fetch_add(1, SeqCst);
        let conn = Conn {
            stream: clone,
            from: from.ip(),
            deadline: Some(Instant::now() + t.min(Duration::from_secs(3600))),
        };
        inner.conns.lock().insert(id, conn);
        inner.pending.fetch_add(1, SeqCst);
        let i = inner.clone();
        let spawned = std::thread::Builder::new()
            .name("loco-rendezvous-conn".to_string())
            .spawn(move || {
                connection(&i, id, stream, from);
                i.conns.lock().remove(&id);
            });
        let mut threads = inner.threads.lock();
        threads.retain(|h| !h.is_finished());
        match spawned {
            Ok(h) => threads.push(h),
            Err(e) => {
                tracing::warn!(target: "loco::rdmawait", error = %e, "cannot start a rendezvous thread");
                inner.conns.lock().remove(&id);
                inner.pending.fetch_sub(1, SeqCst);
            }
        }
    }
}

/// Runs one accepted connection: the handshake, then (if it proved the key) the session.
fn connection(inner: &Inner, id: u64, mut stream: TcpStream, addr: SocketAddr) {
    let cfg = &inner.cfg;
    let r = auth::server(&mut stream, &cfg.key, cfg.nodes, cfg.me, cfg.incarnation);
    // Out of the handshake: no deadline any more (a late one was shut down already).
    if let Some(c) = inner.conns.lock().get_mut(&id) {
        c.deadline = None;
    }
    inner.pending.fetch_sub(1, SeqCst);
    match r {
        Ok((from, inc)) if !inner.stop.load(SeqCst) => (inner.on_join)(stream, from, inc),
        Ok(_) => {}
        Err(e) => {
            inner.refused.fetch_add(1, SeqCst);
            match e {
                Refused::Told(reason) => {
                    tracing::warn!(target: "loco::rdmawait", %addr, %reason, "rendezvous refused a connection")
                }
                Refused::Io(e) => {
                    tracing::debug!(target: "loco::rdmawait", %addr, error = %e, "rendezvous connection dropped during the handshake")
                }
            }
        }
    }
}

/// Who dials whom: node `from` (incarnation `incarnation`) of `nodes` to node `to`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dial {
    pub(crate) nodes: u16,
    pub(crate) from: u16,
    pub(crate) to: u16,
    pub(crate) incarnation: u64,
}

/// Connects to the listener of node `d.to` at `addr` and proves the key, retrying (until
/// `deadline`) while it is not listening yet or is busy. A refusal or a failed proof is final.
/// Returns the connection and the listener's incarnation.
pub(crate) fn dial(
    addr: SocketAddr,
    deadline: Instant,
    key: &ClusterKey,
    d: Dial,
    io_timeout: Duration,
) -> io::Result<(TcpStream, u64)> {
    loop {
        let attempt = TcpStream::connect_timeout(&addr, CONNECT_ATTEMPT).and_then(|mut s| {
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(io_timeout))?;
            s.set_write_timeout(Some(io_timeout))?;
            let theirs = auth::client(&mut s, key, d.nodes, d.from, d.to, d.incarnation)?;
            Ok((s, theirs))
        });
        match attempt {
            Ok(s) => return Ok(s),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::PermissionDenied | io::ErrorKind::InvalidData
                ) =>
            {
                return Err(e)
            }
            Err(e) if Instant::now() < deadline => {
                tracing::trace!(target: "loco::rdmawait", %addr, error = %e, "peer not up yet");
                std::thread::sleep(CONNECT_RETRY);
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::wire::{self, Msg, NodeInfo};
    use super::*;
    use rand::{Rng, SeedableRng};
    use std::io::Write;
    use std::sync::mpsc;

    const NODES: u16 = 3;
    const ME: u16 = 0;

    fn key() -> ClusterKey {
        ClusterKey::new(b"a test key of thirty-two bytes!!").unwrap()
    }

    /// A gate on a loopback port whose sessions answer `Join` with `Welcome` and report the
    /// joined node on the channel.
    fn gate(max_pending: usize, handshake: Duration) -> (Gate, mpsc::Receiver<u16>) {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let cfg = GateConfig {
            me: ME,
            incarnation: 1,
            nodes: NODES,
            key: key(),
            handshake_timeout: handshake,
            max_pending,
        };
        let on_join = Box::new(move |mut s: TcpStream, from: u16, _inc: u64| {
            if let Ok(Msg::Join { info }) = wire::read_msg(&mut s) {
                let _ = wire::write_msg(&mut s, &Msg::Welcome { info, epoch: 0 });
                let _ = tx.lock().send(from);
            }
        });
        let g = Gate::start("127.0.0.1:0".parse().unwrap(), cfg, on_join).unwrap();
        (g, rx)
    }

    fn join(addr: SocketAddr, key: &ClusterKey, from: u16) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let d = Dial {
            nodes: NODES,
            from,
            to: ME,
            incarnation: 2,
        };
        let (mut s, theirs) = dial(addr, deadline, key, d, Duration::from_secs(10))?;
        assert_eq!(theirs, 1, "the listener's incarnation");
        let info = NodeInfo {
            addr: 4096,
            rkey: 1,
            words: 8,
        };
        wire::write_msg(&mut s, &Msg::Join { info })?;
        match wire::read_msg(&mut s)? {
            Msg::Welcome { info: i, .. } if i == info => Ok(()),
            other => Err(wire::bad(format!("got {other:?}"))),
        }
    }

    #[test]
    fn strangers_are_refused_and_the_member_joins() {
        let (g, rx) = gate(8, Duration::from_secs(5));
        let e = join(g.addr(), &ClusterKey::none(), 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        let e = join(g.addr(), &ClusterKey::new(&[9; 32]).unwrap(), 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        assert!(rx.try_recv().is_err(), "a stranger reached the session");
        join(g.addr(), &key(), 2).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(30)).unwrap(), 2);
        g.stop();
    }

    /// A client holding the key that authenticates as node 1 (Hello and proof) and leaves
    /// before its `Join`, several times, keeps nobody out: no session saw a join, and the real
    /// node 1 then joins, with the same incarnation.
    #[test]
    fn an_authenticated_hello_that_leaves_before_joining_keeps_the_member_in() {
        let (g, rx) = gate(8, Duration::from_secs(5));
        for _ in 0..5 {
            let d = Dial {
                nodes: NODES,
                from: 1,
                to: ME,
                incarnation: 2,
            };
            let deadline = Instant::now() + Duration::from_secs(30);
            let (s, theirs) = dial(g.addr(), deadline, &key(), d, Duration::from_secs(10)).unwrap();
            assert_eq!(theirs, 1);
            drop(s);
        }
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "a connection that never sent Join reached a session's join"
        );
        join(g.addr(), &key(), 1).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(30)).unwrap(), 1);
        g.stop();
    }

    #[test]
    fn a_fuzzing_client_does_not_keep_the_member_out() {
        let (g, rx) = gate(8, Duration::from_millis(500));
        let addr = g.addr();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(10);
        let good_hello = wire::encode(&Msg::Hello {
            nodes: NODES,
            from: 1,
            to: ME,
            incarnation: 5,
            nonce: [3; wire::NONCE],
        });
        let start = Instant::now();
        let (mut frames, mut conns) = (0u32, 0u32);
        // Bounded in count and in time; loopback only.
        while frames < 3000 && start.elapsed() < Duration::from_secs(20) {
            let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
                continue;
            };
            conns += 1;
            let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
            for _ in 0..rng.random_range(1..20) {
                frames += 1;
                let frame: Vec<u8> = match rng.random_range(0..6) {
                    // Random bytes.
                    0 => (0..rng.random_range(0..64)).map(|_| rng.random()).collect(),
                    // A plausible length, a random body.
                    1 => {
                        let n = rng.random_range(1..100u32);
                        let mut f = n.to_le_bytes().to_vec();
                        f.extend((0..n).map(|_| rng.random::<u8>()));
                        f
                    }
                    // Huge lengths.
                    2 => rng
                        .random::<u32>()
                        .max(wire::MAX_FRAME + 1)
                        .to_le_bytes()
                        .to_vec(),
                    // A good Hello, then garbage where the proof goes.
                    3 => {
                        let mut f = good_hello.clone();
                        f.extend(wire::encode(&Msg::Proof { mac: rng.random() }));
                        f
                    }
                    // A good Hello with a flipped byte.
                    4 => {
                        let mut f = good_hello.clone();
                        let i = rng.random_range(0..f.len());
                        f[i] ^= 1 << rng.random_range(0..8);
                        f
                    }
                    // Messages that only follow the handshake.
                    _ => wire::encode(&Msg::Barrier {
                        epoch: rng.random(),
                    }),
                };
                if s.write_all(&frame).is_err() {
                    break;
                }
            }
        }
        // A few silent strangers, more than the handshake cap: they are dropped after the
        // handshake timeout, and meanwhile new connections are closed at once.
        let silent: Vec<_> = (0..12)
            .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok())
            .collect();
        eprintln!(
            "fuzz: {frames} frames over {conns} connections in {:.2?}; {} refused",
            start.elapsed(),
            g.refused()
        );
        assert!(rx.try_recv().is_err(), "garbage reached the session");
        let t = Instant::now();
        join(addr, &key(), 1).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(30)).unwrap(), 1);
        eprintln!("the member joined {:.2?} after the fuzzing", t.elapsed());
        drop(silent);
        assert!(g.refused() > 0);
        g.stop();
    }

    /// Strangers that send one byte at a time, each well within the per-read timeout, behind a
    /// frame length of 2048: each is cut off once its handshake is past the deadline, so they
    /// cannot hold the handshake slots (here: all of this address's) for ever, and the member
    /// joins. The bound checked is generous (the deadline is 300 ms).
    #[test]
    fn strangers_dripping_bytes_are_cut_off_at_the_handshake_deadline() {
        let (g, rx) = gate(4, Duration::from_millis(300));
        let addr = g.addr();
        let drippers: Vec<_> = (0..2)
            .map(|_| {
                std::thread::spawn(move || {
                    let start = Instant::now();
                    let Ok(mut s) = TcpStream::connect(addr) else {
                        return Duration::ZERO;
                    };
                    let _ = s.write_all(&wire::MAX_FRAME.to_le_bytes());
                    while start.elapsed() < Duration::from_secs(60) {
                        std::thread::sleep(Duration::from_millis(100));
                        if s.write_all(&[0]).is_err() {
                            break;
                        }
                    }
                    start.elapsed()
                })
            })
            .collect();
        join(addr, &key(), 1).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(30)).unwrap(), 1);
        for d in drippers {
            let held = d.join().unwrap();
            assert!(
                held < Duration::from_secs(30),
                "a dripping stranger held on {held:?}"
            );
        }
        assert!(g.refused() >= 2, "the late handshakes count as refused");
        g.stop();
    }

    #[test]
    fn a_stopped_gate_releases_its_port_and_threads() {
        let (g, _rx) = gate(4, Duration::from_secs(60));
        let addr = g.addr();
        // A silent connection holds a handshake thread until the stop.
        let _silent = TcpStream::connect(addr).unwrap();
        let t = Instant::now();
        while g.open_connections() == 0 && t.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let inner = g.inner.clone();
        g.stop();
        assert!(inner.conns.lock().is_empty());
        assert!(inner.threads.lock().is_empty());
        assert_eq!(
            Arc::strong_count(&inner),
            1,
            "a thread still holds the gate"
        );
        // The same port again.
        let (tx, _rx) = mpsc::channel::<u16>();
        let tx = Mutex::new(tx);
        let again = Gate::start(
            addr,
            GateConfig {
                me: ME,
                incarnation: 1,
                nodes: NODES,
                key: key(),
                handshake_timeout: Duration::from_secs(1),
                max_pending: 1,
            },
            Box::new(move |_, from, _| {
                let _ = tx.lock().send(from);
            }),
        )
        .unwrap();
        assert_eq!(again.addr(), addr);
    }
}
