//! The verbs backend on a real RDMA device (run by `soft-roce-ci/run.sh` on rxe): every
//! operation of rdmawait and rdmawaitrmw with checked values, polls, waits, fences, queue
//! capacities and error paths. Built only with the `verbs` feature; without a device every test
//! fails with the backend's explanation (what to install, how to create an rxe device). The
//! behavioural tests written once for every backend (litmus shapes, contended remote RMWs, sv,
//! locks, SC; built on `loco_rdmawait::testing`) are in the other targets of each crate;
//! `soft-roce-ci/run.sh` runs them on the device too.
//!
//! Sized for emulation (~10-25 µs per operation under qemu TCG): the whole file runs in seconds.
#![cfg(feature = "verbs")]

mod common;

use std::time::{Duration, Instant};

use common::{verbs_cluster, verbs_config};
use loco_rdmawait::backend::verbs::Process;
use loco_rdmawait::backend::{Backend, WorkRequest};
use loco_rdmawait::{Cluster, Error, NodeId, VerbsBackend, VerbsConfig, WorkId};
use loco_rdmawaitrmw::Rmw;

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);
const D1: WorkId = WorkId::new(1);
const D2: WorkId = WorkId::new(2);

#[test]
fn smoke() {
    let c = verbs_cluster(2);
    assert_eq!(c.backend_name(), "verbs");
    let src = c.alloc_word(N0).unwrap();
    let dst = c.alloc_word(N1).unwrap();
    let back = c.alloc_word(N0).unwrap();
    let old = c.alloc_word(N0).unwrap();
    let ctx = c.context(N0).unwrap();
    ctx.store(&src, 7).unwrap();
    ctx.put(&dst, &src, D1).unwrap();
    ctx.get(&back, &dst, D1).unwrap();
    ctx.rfaa(&dst, 5, &old, D1).unwrap();
    ctx.wait(D1).unwrap();
    assert_eq!(ctx.load(&back).unwrap(), 7);
    assert_eq!(ctx.load(&old).unwrap(), 7);
    c.quiesce().unwrap();
    assert_eq!(c.peek(&dst).unwrap(), 12);
}

/// The bare path of `loco bench ops --vs-raw`: the requests take effect (a fetch-and-add
/// adds once per request, a read reads), leave the context as it was (an ordinary operation
/// and wait work after them), and are refused while the context has unpolled operations, for
/// a fence, and outside the node's memory.
#[test]
fn bare_requests_take_effect_and_leave_the_context_as_it_was() {
    let c = verbs_cluster(2);
    let word = c.alloc_word(N1).unwrap();
    let old = c.alloc_word(N0).unwrap();
    let back = c.alloc_word(N0).unwrap();
    let ctx = c.context(N0).unwrap();
    let (remote, local) = (c.check_word(&word).unwrap(), c.check_word(&old).unwrap());
    let faa = WorkRequest::FetchAdd {
        remote,
        add: 3,
        local,
    };
    let times = ctx.raw_requests(N1, faa, 5).unwrap();
    assert_eq!(times.len(), 5);
    assert!(times.iter().all(|&ns| ns > 0), "{times:?}");
    // The last one read what the four before it left.
    assert_eq!(ctx.load(&old).unwrap(), 12);
    let read = WorkRequest::Read {
        local: c.check_word(&back).unwrap(),
        remote,
        words: 1,
    };
    ctx.raw_requests(N1, read, 1).unwrap();
    assert_eq!(ctx.load(&back).unwrap(), 15);
    // The context goes on as before.
    ctx.rfaa(&word, 1, &old, D1).unwrap();
    ctx.wait(D1).unwrap();
    assert_eq!(ctx.load(&old).unwrap(), 15);
    // Not with an unpolled operation, not a fence, not outside the target's memory.
    ctx.rfaa(&word, 1, &old, D1).unwrap();
    let e = ctx.raw_requests(N1, faa, 1).unwrap_err();
    assert!(e.to_string().contains("unpolled"), "{e}");
    ctx.wait(D1).unwrap();
    assert!(ctx.raw_requests(N1, WorkRequest::Fence, 1).is_err());
    let outside = WorkRequest::FetchAdd {
        remote: usize::MAX / 16,
        add: 1,
        local,
    };
    assert!(matches!(
        ctx.raw_requests(N1, outside, 1),
        Err(Error::OutOfRange { .. })
    ));
    c.quiesce().unwrap();
    assert_eq!(c.peek(&word).unwrap(), 17);
    // The soft NIC has no bare path.
    let soft = Cluster::builder().build().unwrap();
    let w = soft.alloc_word(N1).unwrap();
    let sctx = soft.context(N0).unwrap();
    let e = sctx
        .raw_requests(
            N1,
            WorkRequest::FetchAdd {
                remote: soft.check_word(&w).unwrap(),
                add: 1,
                local: 0,
            },
            1,
        )
        .unwrap_err();
    assert!(e.to_string().contains("no bare request path"), "{e}");
}

#[test]
fn process_handle_of_an_in_process_cluster() {
    let c = verbs_cluster(1);
    let p = Process::of(&c).unwrap();
    assert_eq!(p.node(), None);
    assert!(!p.device().is_empty());
    p.barrier().unwrap();
    assert!(p.peer_error(N0).is_none());
    let soft = Cluster::builder().build().unwrap();
    assert!(matches!(Process::of(&soft), Err(Error::Backend { .. })));
}

/// Puts and gets of one word and of runs of words, between every pair of nodes, loop-back
/// included, each checked.
#[test]
fn put_and_get_between_every_pair() {
    let c = verbs_cluster(3);
    let nodes: Vec<NodeId> = c.node_ids().collect();
    // Per node: a 4-word buffer for every writer.
    let bufs: Vec<_> = nodes
        .iter()
        .map(|&n| c.alloc_words(n, 4 * nodes.len() as u64).unwrap())
        .collect();
    for &me in &nodes {
        let ctx = c.context(me).unwrap();
        let src = c.alloc_words(me, 4).unwrap();
        let back = c.alloc_words(me, 4).unwrap();
        for &to in &nodes {
            let tag = 1000 * (me.0 as u64 + 1) + 10 * to.0 as u64;
            for i in 0..4 {
                ctx.store(&src.word(i).unwrap(), tag + i).unwrap();
            }
            let slot = bufs[to.index()].slice(32 * me.0 as u64, 32).unwrap();
            ctx.put(&slot.word(0).unwrap(), &src.word(0).unwrap(), D1)
                .unwrap(); // one word
            ctx.put(&slot.slice(8, 24).unwrap(), &src.slice(8, 24).unwrap(), D1)
                .unwrap(); // three words
            ctx.get(&back, &slot, D1).unwrap();
            ctx.wait(D1).unwrap();
            for i in 0..4 {
                assert_eq!(
                    ctx.load(&back.word(i).unwrap()).unwrap(),
                    tag + i,
                    "{me}->{to} word {i}"
                );
            }
        }
    }
    c.quiesce().unwrap();
    for &n in &nodes {
        for &from in &nodes {
            let tag = 1000 * (from.0 as u64 + 1) + 10 * n.0 as u64;
            let words = c
                .peek_words(&bufs[n.index()].slice(32 * from.0 as u64, 32).unwrap())
                .unwrap();
            assert_eq!(words, (0..4).map(|i| tag + i).collect::<Vec<_>>());
        }
    }
}

#[test]
fn rcas_success_and_failure() {
    let c = verbs_cluster(2);
    let y = c.alloc_word(N1).unwrap();
    let ret = c.alloc_word(N0).unwrap();
    c.poke(&y, 7).unwrap();
    let ctx = c.context(N0).unwrap();
    ctx.rcas(&y, 7, 42, &ret, D1).unwrap(); // succeeds
    ctx.wait(D1).unwrap();
    assert_eq!(ctx.load(&ret).unwrap(), 7);
    ctx.rcas(&y, 7, 99, &ret, D1).unwrap(); // fails: y is 42
    ctx.wait(D1).unwrap();
    assert_eq!(ctx.load(&ret).unwrap(), 42);
    c.quiesce().unwrap();
    assert_eq!(c.peek(&y).unwrap(), 42);
    // Loop-back CAS on the thread's own node, and a full 64-bit value.
    let z = c.alloc_word(N0).unwrap();
    ctx.rcas(&z, 0, u64::MAX, &ret, D2).unwrap();
    ctx.rcas(&z, u64::MAX, 1, &ret, D2).unwrap();
    ctx.wait(D2).unwrap();
    assert_eq!(ctx.load(&ret).unwrap(), u64::MAX);
    assert_eq!(ctx.load(&z).unwrap(), 1);
}

#[test]
fn rfaa_returns_every_old_value_in_order() {
    let c = verbs_cluster(2);
    let counter = c.alloc_word(N1).unwrap();
    let rets = c.alloc_words(N0, 100).unwrap();
    c.poke(&counter, 100).unwrap();
    let ctx = c.context(N0).unwrap();
    for i in 0..100 {
        ctx.rfaa(&counter, 5, &rets.word(i).unwrap(), D1).unwrap();
    }
    ctx.wait(D1).unwrap();
    for i in 0..100 {
        assert_eq!(ctx.load(&rets.word(i).unwrap()).unwrap(), 100 + 5 * i);
    }
    // Wrapping addition.
    ctx.rfaa(&counter, u64::MAX, &rets.word(0).unwrap(), D1)
        .unwrap(); // -1
    ctx.wait(D1).unwrap();
    assert_eq!(ctx.load(&rets.word(0).unwrap()).unwrap(), 600);
    c.quiesce().unwrap();
    assert_eq!(c.peek(&counter).unwrap(), 599);
}

#[test]
fn rmw_operands_are_checked_before_posting() {
    let c = verbs_cluster(2);
    let two = c.alloc_words(N1, 2).unwrap();
    let ret = c.alloc_word(N0).unwrap();
    let remote_ret = c.alloc_word(N1).unwrap();
    let ctx = c.context(N0).unwrap();
    assert!(matches!(
        ctx.rfaa(&two, 1, &ret, D1),
        Err(Error::NotAWord { len: 16 })
    ));
    assert!(matches!(
        ctx.rcas(&two.word(0).unwrap(), 0, 1, &remote_ret, D1),
        Err(Error::NotLocal { .. })
    ));
    assert_eq!(ctx.unpolled(N1).unwrap(), 0);
}

/// `poll(n)` consumes the earliest unpolled operation towards `n`: after one poll the first get
/// has landed and one operation is left.
#[test]
fn poll_completes_the_earliest_operation() {
    let c = verbs_cluster(2);
    let a = c.alloc_word(N1).unwrap();
    let b = c.alloc_word(N1).unwrap();
    c.poke(&a, 11).unwrap();
    c.poke(&b, 22).unwrap();
    let ra = c.alloc_word(N0).unwrap();
    let rb = c.alloc_word(N0).unwrap();
    let ctx = c.context(N0).unwrap();
    let raw = ctx.rdmatso();
    for round in 0..50 {
        ctx.store(&ra, 0).unwrap();
        ctx.store(&rb, 0).unwrap();
        raw.get(&ra, &a).unwrap();
        raw.get(&rb, &b).unwrap();
        assert_eq!(ctx.unpolled(N1).unwrap(), 2);
        raw.poll(N1).unwrap();
        assert_eq!(ctx.load(&ra).unwrap(), 11, "round {round}");
        assert_eq!(ctx.unpolled(N1).unwrap(), 1);
        raw.poll(N1).unwrap();
        assert_eq!(ctx.load(&rb).unwrap(), 22, "round {round}");
    }
    assert!(matches!(
        raw.poll(N1),
        Err(Error::NothingPending { node: N1 })
    ));
}

/// `wait(d)` over operations towards several nodes covers exactly those tagged `d` (and earlier
/// ones on the same queue pairs); the others stay unpolled until their own wait.
#[test]
fn wait_by_work_id_over_several_nodes() {
    let c = verbs_cluster(3);
    let ys: Vec<_> = [N0, N1, N2]
        .iter()
        .map(|&n| c.alloc_word(n).unwrap())
        .collect();
    for (i, y) in ys.iter().enumerate() {
        c.poke(y, 100 + i as u64).unwrap();
    }
    let r1 = c.alloc_words(N0, 3).unwrap();
    let r2 = c.alloc_words(N0, 3).unwrap();
    let ctx = c.context(N0).unwrap();
    for (i, y) in ys.iter().enumerate() {
        ctx.get(&r1.word(i as u64).unwrap(), y, D1).unwrap();
    }
    ctx.get(&r2.word(2).unwrap(), &ys[2], D2).unwrap(); // after the d1 get towards n2
    ctx.get(&r2.word(1).unwrap(), &ys[1], D2).unwrap();
    ctx.wait(D1).unwrap();
    for i in 0..3 {
        assert_eq!(ctx.load(&r1.word(i).unwrap()).unwrap(), 100 + i);
    }
    // The d2 ops were posted after every d1 op on their queue pair: still unpolled.
    assert_eq!(ctx.unpolled(N1).unwrap(), 1);
    assert_eq!(ctx.unpolled(N2).unwrap(), 1);
    assert_eq!(ctx.unpolled(N0).unwrap(), 0);
    ctx.wait(D2).unwrap();
    assert_eq!(ctx.load(&r2.word(1).unwrap()).unwrap(), 101);
    assert_eq!(ctx.load(&r2.word(2).unwrap()).unwrap(), 102);
    assert_eq!(ctx.unpolled(N1).unwrap() + ctx.unpolled(N2).unwrap(), 0);
    // Waiting on an id with nothing outstanding returns at once.
    ctx.wait(WorkId::new(77)).unwrap();
}

/// `rfence(n)` is accepted and keeps a get's remote read before a later put to the same word
/// (Fig. 7a made forbidden): the get returns the old value every time. Both implementations: the
/// verbs Fence flag and the software fence (the default on Soft-RoCE); and both in a batch
/// (`Ctx::batch`: the Fence flag on the put's request in the chain, or the software fence, which
/// sends the chain first).
#[test]
fn rfence_orders_a_get_before_a_later_put() {
    for (software, batched) in [(false, false), (true, false), (false, true), (true, true)] {
        let c = Cluster::builder()
            .nodes(2)
            .memory_per_node(4096)
            .verbs(verbs_config().software_fence(software))
            .build()
            .unwrap();
        let y = c.alloc_word(N1).unwrap();
        let r = c.alloc_word(N0).unwrap();
        let v = c.alloc_word(N0).unwrap();
        let ctx = c.context(N0).unwrap();
        let fenced = || {
            ctx.get(&r, &y, D1)?;
            ctx.rfence(N1)?;
            ctx.put(&y, &v, D1)
        };
        for i in 1..=100u64 {
            ctx.store(&v, i).unwrap();
            if batched {
                ctx.batch(fenced).unwrap();
            } else {
                fenced().unwrap();
            }
            ctx.wait(D1).unwrap();
            assert_eq!(
                ctx.load(&r).unwrap(),
                i - 1,
                "software fence {software}, batch {batched}, iteration {i}"
            );
        }
        // A trailing rfence with nothing after it is harmless, and produces no completion.
        ctx.rfence(N1).unwrap();
        assert_eq!(ctx.unpolled(N1).unwrap(), 0);
        ctx.get(&r, &y, D1).unwrap();
        ctx.wait(D1).unwrap();
        assert_eq!(ctx.load(&r).unwrap(), 100);
    }
}

/// Fenced requests complete while other threads' queue pairs are busy. On Soft-RoCE (Linux 6.1)
/// a request carrying the verbs Fence flag stalls forever here within a few thousand rounds,
/// which is why the backend fences in software on rxe (see `backend::verbs`): this is the global
/// fence's pattern (`put`, `rfence`, `get`, `wait`) on three threads.
#[test]
fn fenced_requests_complete_under_concurrency() {
    let c = Cluster::builder()
        .nodes(3)
        .memory_per_node(4096)
        .timeout(Duration::from_secs(10))
        .verbs(verbs_config())
        .build()
        .unwrap();
    let (x, w) = (c.alloc_word(N2).unwrap(), c.alloc_word(N2).unwrap());
    std::thread::scope(|s| {
        for node in [N0, N1, N2] {
            let c = &c;
            s.spawn(move || {
                let ctx = c.context(node).unwrap();
                let (src, scratch) = (c.alloc_word(node).unwrap(), c.alloc_word(node).unwrap());
                for i in 0..3000 {
                    ctx.put(&x, &src, D1).unwrap();
                    ctx.rfence(N2).unwrap();
                    ctx.get(&scratch, &w, D2).unwrap();
                    if let Err(e) = ctx.wait(D2) {
                        panic!("{node}, round {i}: the fenced get never completed: {e}");
                    }
                }
                ctx.wait(D1).unwrap();
            });
        }
    });
}

/// Operations towards one node take effect in order: a put then a get of the same word sees
/// the put; a put then an rfaa on the same word adds to the put's value.
#[test]
fn same_queue_pair_order_is_kept() {
    let c = verbs_cluster(2);
    let y = c.alloc_word(N1).unwrap();
    let src = c.alloc_word(N0).unwrap();
    let r = c.alloc_word(N0).unwrap();
    let old = c.alloc_word(N0).unwrap();
    let ctx = c.context(N0).unwrap();
    for i in 0..100u64 {
        ctx.store(&src, 10 * i).unwrap();
        ctx.put(&y, &src, D1).unwrap();
        ctx.rfaa(&y, 1, &old, D1).unwrap();
        ctx.get(&r, &y, D1).unwrap();
        ctx.wait(D1).unwrap();
        assert_eq!(ctx.load(&old).unwrap(), 10 * i);
        assert_eq!(ctx.load(&r).unwrap(), 10 * i + 1);
    }
}

/// Many more operations than the send queue holds, without polling: the backend waits for
/// room instead of overflowing the queue, and every operation completes. Also in one batch
/// (`Ctx::batch`): its chains are sent as the queue fills.
#[test]
fn never_posts_past_the_send_queue() {
    for batched in [false, true] {
        let c = Cluster::builder()
            .nodes(2)
            .memory_per_node(64 * 1024)
            .verbs(verbs_config().send_queue_depth(8))
            .build()
            .unwrap();
        let counter = c.alloc_word(N1).unwrap();
        let rets = c.alloc_words(N0, 300).unwrap();
        let ctx = c.context(N0).unwrap();
        let post = || {
            for i in 0..300 {
                ctx.rfaa(&counter, 1, &rets.word(i)?, D1)?;
            }
            Ok::<_, Error>(())
        };
        if batched {
            ctx.batch(post).unwrap();
        } else {
            post().unwrap();
        }
        assert_eq!(ctx.unpolled(N1).unwrap(), 300);
        ctx.wait(D1).unwrap();
        for i in 0..300 {
            assert_eq!(
                ctx.load(&rets.word(i).unwrap()).unwrap(),
                i,
                "batch {batched}"
            );
        }
    }
}

/// A batch (`Ctx::batch`) sends its requests towards one node in chains of up to 16 per
/// doorbell, only the last signalled: every request still takes effect in post order and is
/// owed one poll; a wait, a poll or a CPU load inside the batch sends what is held first (no
/// batch waits for itself); batches nest; a panic in a batch still sends its requests.
#[test]
fn batched_requests_take_effect_in_order_and_complete_one_by_one() {
    let c = verbs_cluster(3);
    let counter = c.alloc_word(N1).unwrap();
    let rets = c.alloc_words(N0, 40).unwrap();
    let y2 = c.alloc_word(N2).unwrap();
    let src = c.alloc_word(N0).unwrap();
    let back = c.alloc_word(N0).unwrap();
    let ctx = c.context(N0).unwrap();
    for round in 0..5u64 {
        ctx.store(&src, round).unwrap();
        ctx.batch(|| {
            for i in 0..40 {
                ctx.rfaa(&counter, 1, &rets.word(i).unwrap(), D1)?;
            }
            ctx.put(&y2, &src, D1)?;
            ctx.get(&back, &y2, D2)?; // after the put on n2's queue pair
            Ok::<_, Error>(())
        })
        .unwrap();
        assert_eq!(ctx.unpolled(N1).unwrap(), 40);
        assert_eq!(ctx.unpolled(N2).unwrap(), 2);
        ctx.wait(D2).unwrap(); // polls the put too: earlier on its queue pair
        assert_eq!(ctx.unpolled(N2).unwrap(), 0);
        assert_eq!(ctx.load(&back).unwrap(), round);
        let raw = ctx.rdmatso();
        for i in 0..40u64 {
            raw.poll(N1).unwrap();
            assert_eq!(ctx.unpolled(N1).unwrap() as u64, 39 - i);
            assert_eq!(ctx.load(&rets.word(i).unwrap()).unwrap(), round * 40 + i);
        }
    }
    // Inside a batch, a wait and a CPU load send what is held first; batches nest.
    let r = ctx
        .batch(|| {
            ctx.rfaa(&counter, 1, &rets.word(0).unwrap(), D1)?;
            ctx.wait(D1)?;
            let first = ctx.load(&rets.word(0).unwrap())?;
            ctx.batch(|| ctx.rfaa(&counter, 1, &rets.word(1).unwrap(), D1))?;
            ctx.rfaa(&counter, 1, &rets.word(2).unwrap(), D1)?;
            Ok::<_, Error>(first)
        })
        .unwrap();
    assert_eq!(r, 200);
    ctx.wait(D1).unwrap();
    assert_eq!(ctx.load(&rets.word(1).unwrap()).unwrap(), 201);
    assert_eq!(ctx.load(&rets.word(2).unwrap()).unwrap(), 202);
    // A panic in a batch: the requests it posted still go.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ctx.batch(|| {
            ctx.rfaa(&counter, 1, &rets.word(3).unwrap(), D1)?;
            if ctx.node() == N0 {
                panic!("in the batch");
            }
            Ok::<_, Error>(())
        })
    }));
    assert!(caught.is_err());
    ctx.wait(D1).unwrap();
    assert_eq!(ctx.load(&rets.word(3).unwrap()).unwrap(), 203);
    c.quiesce().unwrap();
    assert_eq!(c.peek(&counter).unwrap(), 204);
}

/// A request of a batch that fails on the device: its wait gets the typed error, the later
/// ones (flushed) theirs, each polled once; then the queue pair is failed, as without a batch.
#[test]
fn a_failed_request_in_a_batch_fails_its_wait() {
    let backend = VerbsBackend::new(2, 8192, Duration::from_secs(10), verbs_config()).unwrap();
    backend.override_rkey_for_tests(N1, 0x1234_5678);
    let c = Cluster::with_backend(Box::new(backend), Duration::from_secs(10));
    let x = c.alloc_word(N0).unwrap();
    let y = c.alloc_word(N1).unwrap();
    let ctx = c.context(N0).unwrap();
    ctx.batch(|| {
        for _ in 0..3 {
            ctx.put(&y, &x, D1)?;
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    let e = ctx.wait(D1).unwrap_err();
    assert!(matches!(e, Error::Completion { node: N1, .. }), "{e:?}");
    for _ in 0..2 {
        let e = ctx.wait(D1).unwrap_err();
        assert!(matches!(e, Error::QpInError { node: N1 }), "{e:?}");
    }
    ctx.wait(D1).unwrap();
    assert_eq!(ctx.unpolled(N1).unwrap(), 0);
    let e = ctx.batch(|| ctx.get(&x, &y, D1)).unwrap_err();
    assert!(matches!(e, Error::QpInError { node: N1 }), "{e:?}");
}

// ----- error paths -----

#[test]
fn device_errors_say_what_is_wrong() {
    let named = VerbsBackend::new(
        1,
        16,
        Duration::from_secs(5),
        VerbsConfig::new().device("loco-no-such-device"),
    )
    .unwrap_err();
    let msg = named.to_string();
    assert!(
        msg.contains("loco-no-such-device") || msg.contains("rdma link add"),
        "{msg}"
    );
    let gid = VerbsBackend::new(1, 16, Duration::from_secs(5), verbs_config().gid_index(250))
        .unwrap_err();
    assert!(gid.to_string().contains("GID"), "{gid}");
    let port =
        VerbsBackend::new(1, 16, Duration::from_secs(5), verbs_config().port(9)).unwrap_err();
    assert!(port.to_string().contains("port"), "{port}");
    let peers = VerbsBackend::new(
        3,
        16,
        Duration::from_secs(5),
        VerbsConfig::new().distributed(N0, vec!["127.0.0.1:1".into()]),
    )
    .unwrap_err();
    assert!(peers.to_string().contains("LOCO_PEERS"), "{peers}");
}

/// A request with a wrong rkey completes with a remote access error, reported as
/// [`Error::Completion`] by the poll that reaches it; the queue pair is then in the error state
/// and the thread's next operation towards that node fails with [`Error::QpInError`], while the
/// other queue pairs keep working.
#[test]
fn bad_rkey_is_a_typed_error() {
    let backend = VerbsBackend::new(2, 64, Duration::from_secs(10), verbs_config()).unwrap();
    backend.override_rkey_for_tests(N1, 0xdead_beef);
    let mut nic = backend.open(N0).unwrap();
    let wr = WorkRequest::Write {
        local: 0,
        remote: 0,
        words: 1,
    };
    nic.post(N1, wr).unwrap();
    let e = nic.poll(N1, Duration::from_secs(10)).unwrap_err();
    assert!(matches!(e, Error::Completion { node: N1, .. }), "{e:?}");
    assert!(e.to_string().contains("remote access"), "{e}");
    assert!(matches!(
        nic.post(N1, wr),
        Err(Error::QpInError { node: N1 })
    ));
    // The loop-back queue pair is unaffected.
    nic.post(N0, wr).unwrap();
    nic.poll(N0, Duration::from_secs(10)).unwrap();
}

/// An address outside the target's registered memory (which the rdmawait layer never produces:
/// it checks every location first) is refused by the target NIC: a typed completion error, then
/// [`Error::QpInError`] for the queued requests behind it and for later posts; waits return
/// errors, never hang.
#[test]
fn out_of_range_remote_address_is_a_typed_error() {
    let backend = VerbsBackend::new(2, 64, Duration::from_secs(10), verbs_config()).unwrap();
    let words = backend.words(N1);
    let mut nic = backend.open(N0).unwrap();
    let bad = WorkRequest::Read {
        local: 0,
        remote: words + 4096,
        words: 1,
    };
    let good = WorkRequest::FetchAdd {
        remote: 0,
        add: 1,
        local: 1,
    };
    nic.post(N1, bad).unwrap();
    nic.post(N1, good).unwrap();
    let t = Duration::from_secs(10);
    let first = nic.poll(N1, t).unwrap_err();
    assert!(
        matches!(first, Error::Completion { node: N1, ref status } if status.contains("remote access")),
        "{first:?}"
    );
    let second = nic.poll(N1, t).unwrap_err();
    assert!(
        matches!(second, Error::QpInError { node: N1 }),
        "{second:?}"
    );
    assert!(matches!(nic.post(N1, good), Err(Error::QpInError { .. })));
    // The local side is checked before posting.
    let local = WorkRequest::Write {
        local: 1 << 40,
        remote: 0,
        words: 1,
    };
    assert!(matches!(nic.post(N0, local), Err(Error::OutOfRange { .. })));
    // So is a remote index whose address would overflow.
    let huge = WorkRequest::Read {
        local: 0,
        remote: usize::MAX,
        words: 1,
    };
    assert!(matches!(nic.post(N0, huge), Err(Error::OutOfRange { .. })));
}

/// The same through the rdmawait layer: the wait that reaches the failed operation returns the
/// typed error; the next operation of the thread towards that node fails at once.
#[test]
fn a_broken_queue_pair_fails_the_next_wait_and_operation() {
    let backend = VerbsBackend::new(2, 8192, Duration::from_secs(10), verbs_config()).unwrap();
    backend.override_rkey_for_tests(N1, 0x1234_5678);
    let c = Cluster::with_backend(Box::new(backend), Duration::from_secs(10));
    let x = c.alloc_word(N0).unwrap();
    let y = c.alloc_word(N1).unwrap();
    let z = c.alloc_word(N0).unwrap();
    let ctx = c.context(N0).unwrap();
    ctx.put(&y, &x, D1).unwrap();
    ctx.put(&y, &x, D1).unwrap();
    let start = Instant::now();
    let e = ctx.wait(D1).unwrap_err();
    assert!(matches!(e, Error::Completion { node: N1, .. }), "{e:?}");
    assert!(start.elapsed() < Duration::from_secs(10));
    let e = ctx.get(&x, &y, D1).unwrap_err();
    assert!(matches!(e, Error::QpInError { node: N1 }), "{e:?}");
    // The second put is still owed a completion: the next wait on d1 reports it, then is clean.
    let e = ctx.wait(D1).unwrap_err();
    assert!(matches!(e, Error::QpInError { node: N1 }), "{e:?}");
    ctx.wait(D1).unwrap();
    // Loop-back still works.
    ctx.put(&z, &x, D2).unwrap();
    ctx.wait(D2).unwrap();
}

/// A peer that never answers: the transport gives up after its retries and the poll reports
/// [`Error::PeerDead`] (bounded by the ACK timeout and retry count), rather than hanging.
#[test]
fn an_unresponsive_peer_is_peer_dead() {
    // 4.096 µs × 2^12 ≈ 17 ms per try, 2 retries.
    let config = verbs_config().transport_timeout(12, 2);
    let backend = VerbsBackend::new(2, 64, Duration::from_secs(20), config).unwrap();
    backend.make_unreachable_for_tests(N1);
    let mut nic = backend.open(N0).unwrap();
    let wr = WorkRequest::FetchAdd {
        remote: 0,
        add: 1,
        local: 0,
    };
    nic.post(N1, wr).unwrap();
    nic.post(N1, wr).unwrap();
    let start = Instant::now();
    let e = nic.poll(N1, Duration::from_secs(20)).unwrap_err();
    assert!(matches!(e, Error::PeerDead { node: N1, .. }), "{e:?}");
    let e = nic.poll(N1, Duration::from_secs(20)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::PeerDead { node: N1, .. } | Error::QpInError { node: N1 }
        ),
        "{e:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    assert!(nic.post(N1, wr).is_err());
    // Loop-back is unaffected.
    nic.post(N0, wr).unwrap();
    nic.poll(N0, Duration::from_secs(20)).unwrap();
}

/// A shutdown frees a poll and a quiesce blocked on a request that will not complete for a long
/// while (an unreachable peer, long transport retries) with `Shutdown`, as on the soft NIC. (The
/// thread's NIC is dropped afterwards, which may wait for the request to be flushed: not
/// measured here.)
#[test]
fn shutdown_frees_a_blocked_poll_and_quiesce() {
    // 4.096 µs × 2^20 ≈ 4.3 s per try, 7 retries: half a minute before the transport gives up.
    let config = verbs_config().transport_timeout(20, 7);
    let backend =
        std::sync::Arc::new(VerbsBackend::new(2, 64, Duration::from_secs(5), config).unwrap());
    backend.make_unreachable_for_tests(N1);
    let (posted_tx, posted) = std::sync::mpsc::channel();
    let (polled_tx, polled) = std::sync::mpsc::channel();
    let b = backend.clone();
    let t1 = std::thread::spawn(move || {
        let mut nic = b.open(N0).unwrap();
        let wr = WorkRequest::FetchAdd {
            remote: 0,
            add: 1,
            local: 0,
        };
        nic.post(N1, wr).unwrap();
        posted_tx.send(()).unwrap();
        polled_tx.send(nic.poll(N1, Duration::MAX)).unwrap();
    });
    posted.recv_timeout(Duration::from_secs(20)).unwrap();
    let (quiesced_tx, quiesced) = std::sync::mpsc::channel();
    let b = backend.clone();
    let t2 = std::thread::spawn(move || quiesced_tx.send(b.quiesce(Duration::MAX)).unwrap());
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    backend.shutdown();
    let poll = polled
        .recv_timeout(Duration::from_secs(20))
        .expect("the poll returned");
    let quiesce = quiesced
        .recv_timeout(Duration::from_secs(20))
        .expect("the quiesce returned");
    eprintln!("freed {:?} after the shutdown", start.elapsed());
    assert!(matches!(poll, Err(Error::Shutdown)), "{poll:?}");
    assert!(matches!(quiesce, Err(Error::Shutdown)), "{quiesce:?}");
    t1.join().unwrap();
    t2.join().unwrap();
}

#[test]
fn shutdown_refuses_new_work() {
    let c = verbs_cluster(2);
    let x = c.alloc_word(N0).unwrap();
    let y = c.alloc_word(N1).unwrap();
    let ctx = c.context(N0).unwrap();
    c.shutdown();
    assert!(matches!(ctx.put(&y, &x, D1), Err(Error::Shutdown)));
    assert!(matches!(c.context(N0), Err(Error::Shutdown)));
}

/// Log lines of `tracing` events, for the drop-order test.
#[derive(Clone, Default)]
struct Log(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `f` with the calling thread's `tracing` events captured; returns the log's lines.
fn traced(f: impl FnOnce()) -> Vec<String> {
    let log = Log::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let bytes = log.0.lock().unwrap().clone();
    String::from_utf8_lossy(&bytes)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Every node's registered memory is deregistered (successfully) once, and only after every
/// queue pair of that node is destroyed.
fn check_drop_order(lines: &[String], nodes: &[NodeId]) {
    let all = lines.join("\n");
    assert!(!all.contains("leaked"), "something was leaked:\n{all}");
    for n in nodes {
        let qp = format!("queue pair destroyed node={n}");
        let mem = format!("deregistered and freed what={n}'s");
        let freed: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].contains(&mem))
            .collect();
        assert_eq!(
            freed.len(),
            1,
            "{n}'s memory freed {} times:\n{all}",
            freed.len()
        );
        let last_qp = (0..lines.len()).filter(|&i| lines[i].contains(&qp)).max();
        let last_qp = last_qp.unwrap_or_else(|| panic!("no queue pair of {n} destroyed:\n{all}"));
        assert!(
            last_qp < freed[0],
            "{n}'s memory freed before its last queue pair:\n{all}"
        );
    }
}

/// Registered memory outlives every queue pair that can write it, whatever is dropped first: a
/// backend dropped before its thread NICs (with requests outstanding), a cluster dropped before
/// its contexts, contexts dropped before the cluster. Nothing panics, nothing is leaked, and
/// each node's memory is deregistered after its last queue pair is destroyed.
#[test]
fn memory_outlives_its_queue_pairs_in_any_drop_order() {
    let wr = WorkRequest::FetchAdd {
        remote: 0,
        add: 1,
        local: 1,
    };
    // The backend goes first; its NICs keep the nodes (and their memory) until they go.
    let lines = traced(|| {
        let backend = VerbsBackend::new(2, 64, Duration::from_secs(20), verbs_config()).unwrap();
        let mut a = backend.open(N0).unwrap();
        let mut b = backend.open(N1).unwrap();
        for _ in 0..8 {
            a.post(N1, wr).unwrap();
            b.post(N0, wr).unwrap();
        }
        drop(backend);
        drop(a);
        drop(b);
    });
    check_drop_order(&lines, &[N0, N1]);
    // A cluster dropped before its contexts, then the other way round.
    for cluster_first in [true, false] {
        let lines = traced(|| {
            let c = verbs_cluster(2);
            let x = c.alloc_word(N0).unwrap();
            let y = c.alloc_word(N1).unwrap();
            let ctx0 = c.context(N0).unwrap();
            let ctx1 = c.context(N1).unwrap();
            ctx0.put(&y, &x, D1).unwrap();
            ctx1.get(&y, &x, D1).unwrap();
            if cluster_first {
                drop(c);
                drop(ctx1);
                drop(ctx0);
            } else {
                drop(ctx0);
                drop(ctx1);
                drop(c);
            }
        });
        check_drop_order(&lines, &[N0, N1]);
    }
}
