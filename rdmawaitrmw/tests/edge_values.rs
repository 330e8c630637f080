//! Bad operands of `rcas`/`rfaa` get typed errors before anything is posted, on every soft
//! schedule; RMWs towards a dead node fail with `PeerDead` (issue 10, points 2 and 6).

use loco_rdmawait::{Cluster, Error, NodeId, Schedule, WorkId};
use loco_rdmawaitrmw::Rmw;

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const D: WorkId = WorkId::new(1);

#[test]
fn bad_operands_are_refused_and_nothing_is_posted() {
    for s in [
        Schedule::Immediate,
        Schedule::Threaded,
        Schedule::Chaos { seed: 4 },
    ] {
        let c = Cluster::builder()
            .nodes(2)
            .memory_per_node(128)
            .soft(s)
            .build()
            .unwrap();
        let other = Cluster::builder().nodes(2).build().unwrap();
        let target = c.alloc_word(N1).unwrap();
        let two = c.alloc_words(N1, 2).unwrap();
        let ret = c.alloc_word(N0).unwrap();
        let remote_ret = c.alloc_word(N1).unwrap();
        let empty = two.slice(16, 0).unwrap();
        let foreign = other.alloc_word(N1).unwrap();
        let ctx = c.context(N0).unwrap();
        let cases = [
            (two, ret),
            (empty, ret),
            (target, two),
            (target, empty),
            (target, remote_ret),
            (foreign, ret),
        ];
        for (t, r) in cases {
            for res in [ctx.rcas(&t, 0, 1, &r, D), ctx.rfaa(&t, u64::MAX, &r, D)] {
                assert!(
                    matches!(
                        res,
                        Err(Error::NotAWord { .. }
                            | Error::NotLocal { .. }
                            | Error::ForeignLocation { .. })
                    ),
                    "{s:?} {t} {r}: {res:?}"
                );
            }
        }
        assert_eq!(ctx.unpolled(N1).unwrap(), 0);
        // Edge values of the operands themselves are fine: wrapping add, any expected value.
        ctx.rfaa(&target, u64::MAX, &ret, D).unwrap();
        ctx.rfaa(&target, 2, &ret, D).unwrap();
        ctx.rcas(&target, u64::MAX, 0, &ret, D).unwrap();
        ctx.rcas(&target, 1, u64::MAX, &ret, D).unwrap();
        ctx.wait(D).unwrap();
        assert_eq!(ctx.load(&ret).unwrap(), 1);
        c.quiesce().unwrap();
        assert_eq!(c.peek(&target).unwrap(), u64::MAX);
        // Loop-back RMWs on the thread's own node work too.
        ctx.rfaa(&ret, 1, &ret, D).unwrap();
        ctx.wait(D).unwrap();
        // Towards a dead node: PeerDead naming it, nothing posted.
        c.kill(N1).unwrap();
        for res in [
            ctx.rcas(&target, 0, 1, &ret, D),
            ctx.rfaa(&target, 1, &ret, D),
        ] {
            assert!(
                matches!(res, Err(Error::PeerDead { node: N1, .. })),
                "{res:?}"
            );
        }
        assert_eq!(ctx.unpolled(N1).unwrap(), 0);
    }
}
