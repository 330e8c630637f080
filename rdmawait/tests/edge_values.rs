//! Edge values through the public API on every soft schedule: each gets a typed error (or
//! works), never a panic, an abort or a hang (issue 10, point 6).

use std::sync::Arc;
use std::time::Duration;

use loco_rdmawait::backend::Backend;
use loco_rdmawait::{
    Cluster, Error, Loc, NodeId, Schedule, SoftBackend, TimeoutKind, WorkId, WorkRequest,
    MAX_SOFT_MEMORY,
};

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const D: WorkId = WorkId::new(1);
const SCHEDULES: [Schedule; 3] = [
    Schedule::Immediate,
    Schedule::Threaded,
    Schedule::Chaos { seed: 7 },
];

fn cluster(s: Schedule) -> Cluster {
    Cluster::builder()
        .nodes(2)
        .memory_per_node(256)
        .soft(s)
        .build()
        .unwrap()
}

fn out_of_range<T: std::fmt::Debug>(r: Result<T, Error>) {
    assert!(matches!(r, Err(Error::OutOfRange { .. })), "{r:?}");
}

/// Every word range of a raw work request is checked, on both nodes, including ranges whose end
/// overflows; afterwards RMWs still work (the remote-atomic lock was never left taken).
#[test]
fn post_checks_every_word_range() {
    for s in SCHEDULES {
        let c = cluster(s);
        let ctx = c.context(N0).unwrap();
        let words = 256 / 8;
        let bad = [
            WorkRequest::Write {
                local: 0,
                remote: words,
                words: 1,
            },
            WorkRequest::Write {
                local: words - 1,
                remote: 0,
                words: 2,
            },
            WorkRequest::Read {
                local: 0,
                remote: usize::MAX,
                words: 1,
            },
            WorkRequest::Read {
                local: 1,
                remote: 1,
                words: usize::MAX,
            },
            WorkRequest::CompareSwap {
                remote: usize::MAX,
                expected: 0,
                new: 1,
                local: 0,
            },
            WorkRequest::CompareSwap {
                remote: 0,
                expected: 0,
                new: 1,
                local: words,
            },
            WorkRequest::FetchAdd {
                remote: words,
                add: 1,
                local: 0,
            },
            WorkRequest::FetchAdd {
                remote: 0,
                add: 1,
                local: usize::MAX,
            },
        ];
        for wr in bad {
            out_of_range(ctx.post(N1, wr, D));
            out_of_range(ctx.post(N0, wr, D));
        }
        assert_eq!(ctx.unpolled(N1).unwrap(), 0, "nothing posted on error");
        assert!(matches!(
            ctx.post(NodeId(u16::MAX), WorkRequest::Fence, D),
            Err(Error::UnknownNode { .. })
        ));
        // Zero words at the very end is a valid, empty transfer.
        ctx.post(
            N1,
            WorkRequest::Write {
                local: words,
                remote: words,
                words: 0,
            },
            D,
        )
        .unwrap();
        for _ in 0..3 {
            ctx.post(
                N1,
                WorkRequest::FetchAdd {
                    remote: words - 1,
                    add: 2,
                    local: 0,
                },
                D,
            )
            .unwrap();
        }
        ctx.wait(D).unwrap();
        c.quiesce().unwrap();
        let last = c.alloc_words(N1, 32).unwrap().word(31).unwrap();
        assert_eq!(c.peek(&last).unwrap(), 6, "{s:?}");
    }
}

/// The backend's own interface is public too: its thread NICs and peek/poke check indices.
#[test]
fn the_soft_nic_itself_refuses_bad_indices() {
    for s in SCHEDULES {
        let b = SoftBackend::try_new(2, 4, s).unwrap();
        assert!(matches!(b.open(NodeId(2)), Err(Error::UnknownNode { .. })));
        let mut nic = b.open(N0).unwrap();
        out_of_range(nic.load(4));
        out_of_range(nic.store(usize::MAX, 1));
        out_of_range(nic.cas(4, 0, 1));
        out_of_range(nic.post(
            N1,
            WorkRequest::Read {
                local: 0,
                remote: 3,
                words: 2,
            },
        ));
        assert!(matches!(
            nic.post(NodeId(9), WorkRequest::Fence),
            Err(Error::UnknownNode { .. })
        ));
        assert!(matches!(
            nic.poll(NodeId(9), Duration::ZERO),
            Err(Error::UnknownNode { .. })
        ));
        out_of_range(b.peek(N1, 4));
        out_of_range(b.poke(N1, usize::MAX, 0));
        assert!(matches!(
            b.peek(NodeId(3), 0),
            Err(Error::UnknownNode { .. })
        ));
        nic.store(3, 9).unwrap();
        nic.mfence().unwrap();
        assert_eq!(nic.load(3).unwrap(), 9);
        assert!(matches!(b.kill(NodeId(2)), Err(Error::UnknownNode { .. })));
    }
}

/// Memory that cannot exist is an error before anything is allocated or touched.
#[test]
fn absurd_sizes_are_errors_not_aborts() {
    for s in SCHEDULES {
        for (nodes, bytes) in [
            (1, 1u64 << 44),
            (2, u64::MAX),
            (2, u64::MAX - 3),
            (1000, 1 << 33),
            (1, MAX_SOFT_MEMORY + 8),
        ] {
            let r = Cluster::builder()
                .nodes(nodes)
                .memory_per_node(bytes)
                .soft(s)
                .build();
            assert!(
                matches!(
                    r,
                    Err(Error::Backend {
                        backend: "soft",
                        ..
                    })
                ),
                "{nodes} x {bytes}: {r:?}"
            );
        }
        for nodes in [0, 65536, usize::MAX] {
            let r = Cluster::builder().nodes(nodes).soft(s).build();
            assert!(matches!(r, Err(Error::Backend { .. })), "{nodes}: {r:?}");
        }
        assert!(SoftBackend::try_new(1, usize::MAX, s).is_err());
    }
}

#[test]
fn allocation_near_u64_max() {
    let c = cluster(Schedule::Immediate);
    for bytes in [u64::MAX, u64::MAX - 7, u64::MAX - 8, 257] {
        assert!(
            matches!(c.alloc(N0, bytes), Err(Error::OutOfMemory { .. })),
            "{bytes}"
        );
        assert!(matches!(
            c.alloc_private(N0, bytes),
            Err(Error::OutOfMemory { .. })
        ));
    }
    for n in [u64::MAX, u64::MAX / 8 + 1, 33] {
        assert!(
            matches!(c.alloc_words(N0, n), Err(Error::OutOfMemory { .. })),
            "{n}"
        );
    }
    assert!(matches!(
        c.alloc(NodeId(2), 8),
        Err(Error::UnknownNode { .. })
    ));
    // Nothing was taken by the failures: all of the memory is still there.
    let all = c.alloc_words(N0, 32).unwrap();
    assert_eq!(all.len(), 256);
    // A zero-length allocation is an empty location.
    let empty = c.alloc(N1, 0).unwrap();
    assert!(empty.is_empty());
}

#[test]
fn loc_arithmetic_never_overflows() {
    let c = cluster(Schedule::Immediate);
    let _skip = c.alloc_words(N0, 2).unwrap();
    let buf: Loc = c.alloc_words(N0, 4).unwrap();
    for i in [4, u64::MAX, u64::MAX / 8, u64::MAX / 8 + 1] {
        out_of_range(buf.word(i));
    }
    for (offset, len) in [
        (u64::MAX - 7, 8),
        (8, u64::MAX - 7),
        (u64::MAX - 7, u64::MAX - 7),
        (32, 8),
        (0, 40),
    ] {
        out_of_range(buf.slice(offset, len));
    }
    assert!(matches!(
        buf.slice(u64::MAX, 8),
        Err(Error::Misaligned { .. })
    ));
    assert!(matches!(
        buf.slice(0, u64::MAX),
        Err(Error::Misaligned { .. })
    ));
    // Zero-length slices are locations; moving nothing is an error, not a panic.
    let empty = buf.slice(32, 0).unwrap();
    assert!(empty.is_empty());
    let ctx = c.context(N0).unwrap();
    assert!(matches!(ctx.put(&empty, &empty, D), Err(Error::Empty)));
    assert!(matches!(ctx.load(&empty), Err(Error::NotAWord { len: 0 })));
}

/// Overlapping source and destination: some copy happens, nothing breaks.
#[test]
fn overlapping_locations() {
    for s in SCHEDULES {
        let c = cluster(s);
        let buf = c.alloc_words(N0, 3).unwrap();
        for (i, v) in [1, 2, 3].into_iter().enumerate() {
            c.poke(&buf.word(i as u64).unwrap(), v).unwrap();
        }
        let ctx = c.context(N0).unwrap();
        let (a, b) = (buf.slice(0, 16).unwrap(), buf.slice(8, 16).unwrap());
        ctx.put(&b, &a, D).unwrap();
        ctx.get(&a, &b, D).unwrap();
        ctx.put(&a, &a, D).unwrap();
        ctx.wait(D).unwrap();
        c.quiesce().unwrap();
        let words = c.peek_words(&buf).unwrap();
        assert!(
            words.iter().all(|w| (1..=3).contains(w)),
            "{s:?}: {words:?}"
        );
    }
}

/// `Duration::MAX` anywhere a duration is taken means "as long as needed"; `Duration::ZERO`
/// gives up at once when the work is not done.
#[test]
fn extreme_durations() {
    for s in SCHEDULES {
        for t in [Duration::MAX, Duration::from_secs(u64::MAX), Duration::ZERO] {
            let c = Cluster::builder()
                .nodes(2)
                .memory_per_node(64)
                .soft(s)
                .timeout(t)
                .build()
                .unwrap();
            assert_eq!(c.timeout(), t);
            let (x, y) = (c.alloc_word(N0).unwrap(), c.alloc_word(N1).unwrap());
            let ctx = c.context(N0).unwrap();
            ctx.store(&x, 5).unwrap();
            ctx.put(&y, &x, D).unwrap();
            ctx.get(&x, &y, D).unwrap();
            match ctx.wait(D) {
                Ok(()) => {}
                // Zero: the NIC may not have got there yet; the wait can be repeated.
                Err(Error::Timeout {
                    what: TimeoutKind::Wait(D),
                    ..
                }) if t.is_zero() => ctx.wait_timeout(D, Duration::MAX).unwrap(),
                Err(e) => panic!("{s:?} {t:?}: {e}"),
            }
            assert_eq!(ctx.load(&x).unwrap(), 5);
            ctx.get(&x, &y, WorkId::new(2)).unwrap();
            ctx.rdmatso().poll_timeout(N1, Duration::MAX).unwrap();
            assert!(matches!(
                ctx.rdmatso().poll_timeout(N1, Duration::MAX),
                Err(Error::NothingPending { .. })
            ));
            ctx.wait_timeout(WorkId::new(3), Duration::ZERO).unwrap();
            if !t.is_zero() {
                c.quiesce().unwrap();
            }
        }
    }
}

/// A poll with a zero timeout on work that cannot complete (held back by a stall) times out at
/// once and consumes nothing.
#[test]
fn zero_timeout_consumes_nothing() {
    for s in [Schedule::Threaded, Schedule::Chaos { seed: 3 }] {
        let soft = Arc::new(SoftBackend::try_new(2, 8, s).unwrap());
        let c = Cluster::with_backend(Box::new(soft.clone()), Duration::from_secs(60));
        let (x, y) = (c.alloc_word(N0).unwrap(), c.alloc_word(N1).unwrap());
        let ctx = c.context(N0).unwrap();
        soft.stall(N1, true).unwrap();
        ctx.put(&y, &x, D).unwrap();
        for _ in 0..3 {
            assert!(matches!(
                ctx.wait_timeout(D, Duration::ZERO),
                Err(Error::Timeout { .. })
            ));
            assert!(matches!(
                ctx.rdmatso().poll_timeout(N1, Duration::ZERO),
                Err(Error::Timeout { .. })
            ));
            assert_eq!(ctx.unpolled(N1).unwrap(), 1);
        }
        assert!(matches!(
            c.quiesce_timeout(Duration::ZERO),
            Err(Error::Timeout { .. })
        ));
        soft.stall(N1, false).unwrap();
        ctx.wait_timeout(D, Duration::MAX).unwrap();
        c.quiesce_timeout(Duration::MAX).unwrap();
    }
}

#[test]
fn work_id_edge_values() {
    for s in SCHEDULES {
        let c = cluster(s);
        let (x, y) = (c.alloc_word(N0).unwrap(), c.alloc_word(N1).unwrap());
        let ctx = c.context(N0).unwrap();
        let ids = [
            WorkId::new(0),
            WorkId::new(u32::MAX),
            WorkId::internal(0),
            WorkId::internal(u32::MAX),
        ];
        for d in ids {
            ctx.put(&y, &x, d).unwrap();
            ctx.get(&x, &y, d).unwrap();
        }
        for d in ids.iter().rev() {
            ctx.wait(*d).unwrap();
        }
        assert_eq!(ctx.unpolled(N1).unwrap(), 0);
    }
}

#[test]
fn unknown_nodes_everywhere() {
    for s in SCHEDULES {
        let c = cluster(s);
        let ctx = c.context(N0).unwrap();
        for n in [NodeId(2), NodeId(u16::MAX)] {
            assert!(matches!(ctx.rfence(n), Err(Error::UnknownNode { .. })));
            assert!(matches!(
                ctx.rdmatso().poll(n),
                Err(Error::UnknownNode { .. })
            ));
            assert!(matches!(ctx.unpolled(n), Err(Error::UnknownNode { .. })));
            assert!(matches!(c.kill(n), Err(Error::UnknownNode { .. })));
            assert!(matches!(c.check_alive(n), Err(Error::UnknownNode { .. })));
            assert!(matches!(c.context(n), Err(Error::UnknownNode { .. })));
            assert!(!c.is_alive(n));
        }
    }
}

/// The resident memory of this process (Linux: /proc/self/statm), in bytes.
#[cfg(target_os = "linux")]
fn resident() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Node memory is zeroed by the OS on first touch, not written when the cluster is built: two
/// nodes of 1 GiB cost (nearly) nothing until used. A page-aligned zeroed allocation used to
/// `memset` all of it first, so a large cluster took seconds and its size in RAM (or was killed
/// by the OOM killer) before it could return anything.
#[cfg(target_os = "linux")]
#[test]
fn large_node_memory_is_not_touched_until_used() {
    let before = resident();
    let c = Cluster::builder()
        .nodes(2)
        .memory_per_node(1 << 30)
        .soft(Schedule::Immediate)
        .build()
        .unwrap();
    let grew = resident().saturating_sub(before);
    assert!(grew < 256 << 20, "building touched {grew} bytes");
    // The last word of n1 works, and reads 0 before it is written.
    let last = c
        .alloc_words(N1, (1 << 30) / 8 - 1)
        .and_then(|_| c.alloc_word(N1))
        .unwrap();
    let mine = c.alloc_word(N0).unwrap();
    assert_eq!(c.peek(&last).unwrap(), 0);
    let ctx = c.context(N0).unwrap();
    ctx.store(&mine, 7).unwrap();
    ctx.put(&last, &mine, D).unwrap();
    ctx.wait(D).unwrap();
    c.quiesce().unwrap();
    assert_eq!(c.peek(&last).unwrap(), 7);
}
