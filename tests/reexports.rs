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
