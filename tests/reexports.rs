//! The facade re-exports every layer: touch each once.

#[test]
fn layers_are_reachable() {
    use loco::prelude::*;
    let cluster = Cluster::builder().nodes(2).build().unwrap();
    let a = cluster.alloc_word(NodeId(0)).unwrap();
    let b = cluster.alloc_word(NodeId(1)).unwrap();
    let ctx = cluster.context(NodeId(0)).unwrap();
    ctx.rfaa(&b, 2, &a, WorkId::new(0)).unwrap();
    ctx.wait(WorkId::new(0)).unwrap();
    let _: loco::rdmawait::Result<()> = Ok(());
    let _: loco::rdmawaitrmw::Result<()> = Ok(());
    assert_eq!(cluster.peek(&b).unwrap(), 2);
}

#[test]
fn sv_and_locks_are_reachable() {
    use loco::prelude::*;
    let cluster = Cluster::builder().nodes(2).build().unwrap();
    let s = SharedVar::with_value(&cluster, 4).unwrap();
    let ctx = cluster.context(NodeId(1)).unwrap();
    let g = SLock::new(&cluster, NodeId(0), 1).unwrap();
    let g = g.acquire(&ctx).unwrap();
    assert_eq!(s.load(&ctx).unwrap(), 4);
    ctx.gf_all().unwrap();
    LockGuard::release(g).unwrap();
    let _ = (
        WLock::new(&cluster, NodeId(0), 1),
        NLock::new(&cluster, NodeId(1)),
    );
    let _: loco::sv::Result<()> = Ok(());
    let _: loco::locks::Result<()> = Ok(());
}

#[test]
fn sc_is_reachable() {
    use loco::prelude::*;
    let cluster = Cluster::builder().nodes(2).build().unwrap();
    let x = ScLoc::new(&cluster, 5).unwrap();
    let ctx = cluster.context(NodeId(0)).unwrap();
    ctx.write_sc(&x, 6).unwrap();
    assert_eq!(ctx.read_sc(&x).unwrap(), 6);
    let _: loco::sc::Result<()> = Ok(());
}
