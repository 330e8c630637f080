//! Bad input gets a typed error, and nothing is lost: every error of `loco_rdmawait::Error` that a
//! caller can trigger.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use loco_rdmawait::backend::{Backend, ThreadNic};
use loco_rdmawait::{Cluster, Error, NodeId, Schedule, TimeoutKind, WorkId, WorkRequest};

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const D: WorkId = WorkId::new(1);

fn cluster() -> Cluster {
    Cluster::builder()
        .nodes(2)
        .memory_per_node(256)
        .build()
        .unwrap()
}

#[test]
fn unknown_node() {
    let c = cluster();
    assert!(matches!(
        c.alloc_word(NodeId(2)),
        Err(Error::UnknownNode {
            node: NodeId(2),
            nodes: 2
        })
    ));
    assert!(matches!(
        c.context(NodeId(9)),
        Err(Error::UnknownNode { .. })
    ));
    let ctx = c.context(N0).unwrap();
    assert!(matches!(
        ctx.rfence(NodeId(5)),
        Err(Error::UnknownNode { .. })
    ));
    assert!(matches!(
        ctx.rdmatso().poll(NodeId(5)),
        Err(Error::UnknownNode { .. })
    ));
    assert!(matches!(
        ctx.post(NodeId(7), WorkRequest::Fence, D),
        Err(Error::UnknownNode { .. })
    ));
}

#[test]
fn misaligned_and_out_of_range() {
    let c = cluster();
    let buf = c.alloc_words(N0, 4).unwrap();
    assert!(matches!(buf.slice(4, 8), Err(Error::Misaligned { .. })));
    assert!(matches!(buf.slice(0, 12), Err(Error::Misaligned { .. })));
    assert!(matches!(buf.word(4), Err(Error::OutOfRange { .. })));
    assert!(matches!(
        buf.slice(u64::MAX - 7, 8),
        Err(Error::OutOfRange { .. })
    ));
    // Memory runs out: 256 bytes per node, 32 already taken.
    assert!(matches!(
        c.alloc(N0, 512),
        Err(Error::OutOfMemory {
            requested: 512,
            free: 224,
            ..
        })
    ));
    assert!(c.alloc(N0, 224).is_ok());
    assert!(matches!(
        c.alloc_word(N0),
        Err(Error::OutOfMemory { free: 0, .. })
    ));
}

#[test]
fn atomics_need_one_word() {
    let c = cluster();
    let two = c.alloc_words(N0, 2).unwrap();
    let ctx = c.context(N0).unwrap();
    assert!(matches!(ctx.load(&two), Err(Error::NotAWord { len: 16 })));
    assert!(matches!(ctx.cas(&two, 0, 1), Err(Error::NotAWord { .. })));
    assert!(matches!(c.peek(&two), Err(Error::NotAWord { .. })));
}

#[test]
fn local_word_required() {
    let c = cluster();
    let remote = c.alloc_word(N1).unwrap();
    let remote2 = c.alloc_word(N1).unwrap();
    let ctx = c.context(N0).unwrap();
    let e = ctx.load(&remote).unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotLocal {
                loc: N1,
                thread: N0
            }
        ),
        "{e}"
    );
    assert!(matches!(ctx.store(&remote, 1), Err(Error::NotLocal { .. })));
    // put's source and get's destination must be local.
    assert!(matches!(
        ctx.put(&remote2, &remote, D),
        Err(Error::NotLocal { .. })
    ));
    assert!(matches!(
        ctx.get(&remote, &remote2, D),
        Err(Error::NotLocal { .. })
    ));
    assert_eq!(ctx.unpolled(N1).unwrap(), 0, "nothing was posted");
}

#[test]
fn lengths_must_match_and_be_non_empty() {
    let c = cluster();
    let a = c.alloc_words(N0, 2).unwrap();
    let b = c.alloc_words(N1, 3).unwrap();
    let ctx = c.context(N0).unwrap();
    assert!(matches!(
        ctx.put(&b, &a, D),
        Err(Error::LengthMismatch { dst: 24, src: 16 })
    ));
    let e = a.slice(0, 0).unwrap();
    let f = b.slice(0, 0).unwrap();
    assert!(matches!(ctx.get(&e, &f, D), Err(Error::Empty)));
}

#[test]
fn foreign_location() {
    let c = cluster();
    let other = cluster();
    let x = other.alloc_word(N0).unwrap();
    let ctx = c.context(N0).unwrap();
    assert!(matches!(ctx.load(&x), Err(Error::ForeignLocation { .. })));
    assert!(matches!(c.peek(&x), Err(Error::ForeignLocation { .. })));
}

#[test]
fn poll_with_nothing_pending_does_not_block() {
    let c = cluster();
    let ctx = c.context(N0).unwrap();
    assert!(matches!(
        ctx.rdmatso().poll(N1),
        Err(Error::NothingPending { node: N1 })
    ));
    // A wait on an id with nothing outstanding returns at once.
    ctx.wait(D).unwrap();
}

/// A NIC whose completions arrive only when the test says so: a stand-in for a slow or dead peer.
#[derive(Debug, Default)]
struct Gate(Arc<AtomicBool>);

#[derive(Debug)]
struct GatedNic {
    open: Arc<AtomicBool>,
    posted: Vec<u64>,
}

impl Backend for Gate {
    fn name(&self) -> &'static str {
        "gate"
    }
    fn nodes(&self) -> usize {
        2
    }
    fn words(&self, _: NodeId) -> usize {
        8
    }
    fn open(&self, _: NodeId) -> loco_rdmawait::Result<Box<dyn ThreadNic>> {
        Ok(Box::new(GatedNic {
            open: self.0.clone(),
            posted: vec![0; 2],
        }))
    }
    fn quiesce(&self, _: Duration) -> loco_rdmawait::Result<()> {
        Ok(())
    }
    fn peek(&self, _: NodeId, _: usize) -> loco_rdmawait::Result<u64> {
        Ok(0)
    }
    fn poke(&self, _: NodeId, _: usize, _: u64) -> loco_rdmawait::Result<()> {
        Ok(())
    }
    fn shutdown(&self) {}
}

impl ThreadNic for GatedNic {
    fn post(&mut self, target: NodeId, _: WorkRequest) -> loco_rdmawait::Result<()> {
        self.posted[target.index()] += 1;
        Ok(())
    }
    fn poll(&mut self, target: NodeId, timeout: Duration) -> loco_rdmawait::Result<()> {
        if !self.open.load(SeqCst) {
            std::thread::sleep(timeout);
            return Err(Error::Timeout {
                what: TimeoutKind::Poll(target),
                after: timeout,
            });
        }
        assert!(
            self.posted[target.index()] > 0,
            "rdmawait polled with nothing posted"
        );
        self.posted[target.index()] -= 1;
        Ok(())
    }
    fn load(&mut self, _: usize) -> loco_rdmawait::Result<u64> {
        Ok(0)
    }
    fn store(&mut self, _: usize, _: u64) -> loco_rdmawait::Result<()> {
        Ok(())
    }
    fn cas(&mut self, _: usize, _: u64, _: u64) -> loco_rdmawait::Result<u64> {
        Ok(0)
    }
    fn mfence(&mut self) -> loco_rdmawait::Result<()> {
        Ok(())
    }
}

#[test]
fn wait_times_out_and_nothing_is_lost() {
    let gate = Gate::default();
    let open = gate.0.clone();
    let c = Cluster::with_backend(Box::new(gate), Duration::from_millis(20));
    let x = c.alloc_word(N0).unwrap();
    let y = c.alloc_word(N1).unwrap();
    let ctx = c.context(N0).unwrap();
    ctx.put(&y, &x, D).unwrap();
    ctx.put(&y, &x, WorkId::new(2)).unwrap();
    let e = ctx.wait(D).unwrap_err();
    assert!(
        matches!(e, Error::Timeout { what: TimeoutKind::Wait(w), .. } if w == D),
        "{e}"
    );
    assert_eq!(e.to_string(), "wait(d1) timed out after 20ms");
    let e = ctx
        .rdmatso()
        .poll_timeout(N1, Duration::from_millis(1))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Timeout {
                what: TimeoutKind::Poll(N1),
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        ctx.unpolled(N1).unwrap(),
        2,
        "a timed-out wait consumes nothing"
    );
    open.store(true, SeqCst);
    ctx.wait(WorkId::new(2)).unwrap(); // polls both, in order
    assert_eq!(ctx.unpolled(N1).unwrap(), 0);
    ctx.wait(D).unwrap(); // d1 was removed from every set by the earlier polls (Fig. 16)
}

#[test]
fn shutdown_cluster_refuses_work() {
    for schedule in [
        Schedule::Immediate,
        Schedule::Threaded,
        Schedule::Chaos { seed: 1 },
    ] {
        let c = Cluster::builder()
            .nodes(2)
            .memory_per_node(256)
            .soft(schedule)
            .build()
            .unwrap();
        let x = c.alloc_word(N0).unwrap();
        let y = c.alloc_word(N1).unwrap();
        let ctx = c.context(N0).unwrap();
        c.shutdown();
        assert!(
            matches!(ctx.put(&y, &x, D), Err(Error::Shutdown)),
            "{schedule:?}"
        );
        assert!(
            matches!(c.context(N0), Err(Error::Shutdown)),
            "{schedule:?}"
        );
    }
}

#[test]
fn errors_read_well() {
    let c = cluster();
    let ctx = c.context(N0).unwrap();
    let remote = c.alloc_word(N1).unwrap();
    let msg = ctx.load(&remote).unwrap_err().to_string();
    assert_eq!(
        msg,
        "location on n1 is not local to this thread, which runs on n0"
    );
}

#[test]
fn private_words_come_from_the_top_and_never_shift_shared_ones() {
    let a = cluster();
    let b = cluster();
    // Process A allocates a private scratch word first; B does not. Shared words still agree.
    let p = a.alloc_private(N0, 8).unwrap();
    assert_eq!(p.offset(), 248);
    assert_eq!(
        a.alloc_word(N0).unwrap().offset(),
        b.alloc_word(N0).unwrap().offset()
    );
    // The two regions meet in the middle: 256 - 8 (private) - 8 (shared) = 240 free.
    assert!(matches!(
        a.alloc_private(N0, 248),
        Err(Error::OutOfMemory { free: 240, .. })
    ));
    a.alloc_private(N0, 232).unwrap();
    a.alloc_word(N0).unwrap();
    assert!(matches!(
        a.alloc_word(N0),
        Err(Error::OutOfMemory { free: 0, .. })
    ));
}

/// The bare requests of `loco bench ops --vs-raw` exist only on the verbs backend: elsewhere a
/// typed error, after the same checks as a post (an unknown node, a range outside memory).
#[test]
fn bare_requests_outside_verbs_are_a_typed_error() {
    let c = cluster();
    let ctx = c.context(N0).unwrap();
    let faa = |remote| WorkRequest::FetchAdd {
        remote,
        add: 1,
        local: 0,
    };
    let e = ctx.raw_requests(N1, faa(0), 1).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Backend {
                backend: "soft",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("no bare request path"), "{e}");
    assert!(matches!(
        ctx.raw_requests(NodeId(5), faa(0), 1),
        Err(Error::UnknownNode { .. })
    ));
    assert!(matches!(
        ctx.raw_requests(N1, faa(1000), 1),
        Err(Error::OutOfRange { .. })
    ));
}

/// A word or slice past the end of a location is out of range of that location, not of the
/// node's memory: the message said "outside the 96 bytes of registered memory on n0" of a
/// location ending at byte 96 on a node of 256 bytes.
#[test]
fn an_index_past_a_location_does_not_misstate_the_nodes_memory() {
    let c = cluster(); // 256 bytes per node
    c.alloc_words(N0, 8).unwrap();
    let buf = c.alloc_words(N0, 4).unwrap(); // bytes 64..96
    for e in [buf.word(4).unwrap_err(), buf.slice(24, 16).unwrap_err()] {
        assert!(matches!(e, Error::OutOfRange { size: 96, .. }), "{e:?}");
        let msg = e.to_string();
        assert!(!msg.contains("96 bytes of registered memory"), "{msg}");
        assert!(msg.contains("must end by byte 96"), "{msg}");
        assert!(msg.contains("Loc::word or Loc::slice"), "{msg}");
    }
    assert_eq!(
        buf.word(4).unwrap_err().to_string(),
        "location [96, 96+8) on n0 is out of range: it must end by byte 96 (the end of the \
         node's registered memory, or of the location it was cut from with Loc::word or \
         Loc::slice)"
    );
}

/// A load, store, CAS, peek or poke of several words says that such accesses take one word
/// and how to take it: it said "atomic operations need exactly one 8-byte word", which a
/// `load` or `peek` caller does not recognise as their call.
#[test]
fn a_word_access_on_several_words_names_the_accesses_and_the_fix() {
    let c = cluster();
    let ctx = c.context(N0).unwrap();
    let buf = c.alloc_words(N0, 4).unwrap();
    for e in [
        ctx.load(&buf).unwrap_err(),
        ctx.store(&buf, 1).unwrap_err(),
        ctx.cas(&buf, 0, 1).unwrap_err(),
        c.peek(&buf).unwrap_err(),
        c.poke(&buf, 1).unwrap_err(),
    ] {
        assert!(matches!(e, Error::NotAWord { len: 32 }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "a word access (load, store, cas, rcas, rfaa, peek, poke) needs exactly one 8-byte \
             word, got 32 bytes: take one with Loc::word(i)"
        );
    }
}

/// An unknown node's message names the nodes there are, in the singular for one: it said
/// "the cluster has 1 nodes".
#[test]
fn an_unknown_node_names_the_nodes_there_are() {
    let one = Cluster::builder()
        .nodes(1)
        .memory_per_node(64)
        .build()
        .unwrap();
    assert_eq!(
        one.context(NodeId(3)).unwrap_err().to_string(),
        "unknown node n3 (the cluster has 1 node, n0)"
    );
    assert_eq!(
        cluster().alloc_word(NodeId(2)).unwrap_err().to_string(),
        "unknown node n2 (the cluster has 2 nodes, n0 to n1)"
    );
}
