//! Posts, waits and errors are visible as `tracing` events under `loco::rdmawait`.

use std::io::Write;
use std::sync::{Arc, Mutex};

use loco_rdmawait::{Cluster, NodeId, WorkId};

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn posts_waits_and_errors_are_traced() {
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let c = Cluster::builder()
            .nodes(2)
            .memory_per_node(64)
            .build()
            .unwrap();
        let x = c.alloc_word(NodeId(0)).unwrap();
        let y = c.alloc_word(NodeId(1)).unwrap();
        let ctx = c.context(NodeId(0)).unwrap();
        ctx.put(&y, &x, WorkId::new(4)).unwrap();
        ctx.wait(WorkId::new(4)).unwrap();
        c.shutdown();
        assert!(ctx.put(&y, &x, WorkId::new(4)).is_err());
    });
    let log = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    for needle in [
        "context opened",
        "post",
        "Write",
        "wait done",
        "post failed",
        "shut down",
    ] {
        assert!(log.contains(needle), "missing {needle:?} in:\n{log}");
    }
}
