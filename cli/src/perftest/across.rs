//! `--vs-perftest` across two hosts: a cluster of two processes (`LOCO_NODE_ID` 0 and 1,
//! `LOCO_PEERS` naming both), each on its own host and device.
//!
//! n1's process runs perftest's servers; n0's runs perftest's clients towards n1's host (its
//! address in `LOCO_PEERS`) and loco's measurements towards n1's memory, so both cross the
//! same network between the same two devices. The rounds alternate as on one host (perftest,
//! loco, perftest, loco...); n0 prints the table.
//!
//! The two processes keep in step over the cluster itself: each step ends in the cluster's
//! barrier, and what one side must tell the other (the server is up, the client's verdict) is
//! a word put into the other's memory and fenced (`gf`) before the barrier. Per perftest run:
//!
//! | n1 | | n0 |
//! |---|---|---|
//! | start the server on the port, tell n0 whether it listens | barrier | |
//! | | | run the client (if the server is up), tell n1: done, again, or give up |
//! | | barrier | |
//! | reap (or kill) the server; on "done": | barrier | measure loco (n1's CPU idle) |
//!
//! Both count ports and attempts the same way, so they agree on every run without sending
//! more than those two words.

// Without the verbs backend only the messages' encoding is built (and tested).
#![cfg_attr(not(feature = "verbs"), allow(dead_code))]

use serde_json::json;

use super::OpsArgs;

/// Runs n0's or n1's side.
#[cfg(feature = "verbs")]
pub(crate) fn compare(args: &OpsArgs) -> Result<(), String> {
    verbs::compare(args)
}

/// Without the verbs backend there is no cluster of processes.
#[cfg(not(feature = "verbs"))]
pub(crate) fn compare(args: &OpsArgs) -> Result<(), String> {
    let _ = args;
    Err(crate::bench::NO_VERBS.into())
}

/// What n1 tells n0 before a run: its server listens.
const UP: u64 = 1;
/// ... or did not start.
const DOWN: u64 = 2;
/// What n0 tells n1 after a run: a figure was read, go on to loco's turn.
const DONE: u64 = 3;
/// ... no figure: run again (on the next port).
const AGAIN: u64 = 4;
/// ... no figure, and that was the last attempt: stop.
const GIVE_UP: u64 = 5;

/// A message: the step number (so that a stale word is never read as news) and the code.
fn message(step: u64, code: u64) -> u64 {
    (step << 8) | code
}

/// The code of `word` if it carries step `step`.
fn code_of(word: u64, step: u64) -> Option<u64> {
    (word >> 8 == step).then_some(word & 0xff)
}

/// The host part of a `LOCO_PEERS` entry (`host:port`, `[v6]:port`).
fn host_of(peer: &str) -> &str {
    let host = peer.rsplit_once(':').map_or(peer, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// The footer line and JSON placement of a run across hosts.
fn describe(
    args: &OpsArgs,
    device: &str,
    gid_index: u32,
    peer: &str,
    pin: Option<super::Pinning>,
) -> (serde_json::Value, String) {
    let placement = json!({
        "placement": "across_hosts",
        "perftest_server": peer,
        "pinned": pin.map(|p| json!({"client_cpu": p.client})),
    });
    let footer = format!(
        "across two hosts: perftest's server on n1's ({peer}), its client and loco's measuring \
         thread in n0's process (device {device}, GID index {gid_index}), loco's n0 towards n1's \
         memory; {}; {}",
        super::method(args),
        match pin {
            Some(p) => format!(
                "pinned on n0's host: perftest's client and loco's measuring thread on CPU {}",
                p.client
            ),
            None => "not pinned (no CPU list or no taskset)".into(),
        }
    );
    (placement, footer)
}

#[cfg(feature = "verbs")]
mod verbs {
    use std::cell::Cell;
    use std::process::Child;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use loco_rdmawait::backend::verbs::{Process, VerbsConfig};
    use loco_rdmawait::{Cluster, Ctx, Loc, NodeId, WorkId};
    use loco_sv::GlobalFence as _;

    use super::super::Comparison;
    use super::*;
    use crate::ops::{Buffers, MAX_SIZE};

    /// Work id of the messages' puts.
    const TELL: WorkId = WorkId::new(0x7e11);

    /// The two processes' link: the cluster's barrier and one message word on each node.
    struct Link {
        process: Arc<Process>,
        ctx: Ctx,
        me: NodeId,
        /// The message word on each node (what the other side writes), and this node's source.
        inbox: [Loc; 2],
        src: [Loc; 2],
        step: Cell<u64>,
    }

    impl Link {
        fn other(&self) -> NodeId {
            NodeId(1 - self.me.0)
        }

        /// Tells the other side `code` for the current step: put into its word, fenced.
        fn tell(&self, code: u64) -> Result<(), String> {
            let s = |e: loco_rdmawait::Error| e.to_string();
            let (me, other) = (self.me.0 as usize, self.other().0 as usize);
            self.ctx
                .store(&self.src[me], message(self.step.get(), code))
                .map_err(s)?;
            self.ctx
                .put(&self.inbox[other], &self.src[me], TELL)
                .map_err(s)?;
            self.ctx.wait(TELL).map_err(s)?;
            self.ctx.gf([self.other()]).map_err(|e| e.to_string())
        }

        /// What the other side told for the current step (after the barrier that follows it).
        fn heard(&self) -> Result<u64, String> {
            let word = self
                .ctx
                .load(&self.inbox[self.me.0 as usize])
                .map_err(|e| e.to_string())?;
            code_of(word, self.step.get()).ok_or_else(|| {
                format!(
                    "out of step with the other process (step {}, its word {word:#x})",
                    self.step.get()
                )
            })
        }

        /// The next step: a message of an earlier one is stale from now on.
        fn next(&self) {
            self.step.set(self.step.get() + 1);
        }

        fn barrier(&self) -> Result<(), String> {
            self.process.barrier().map_err(|e| e.to_string())
        }
    }

    pub(super) fn compare(args: &OpsArgs) -> Result<(), String> {
        let s = |e: loco_rdmawait::Error| e.to_string();
        let config = VerbsConfig::from_env().map_err(s)?;
        let Some((me, peers)) = config.peers().map(|(n, p)| (n, p.to_vec())) else {
            return Err("LOCO_NODE_ID is set without LOCO_PEERS".into());
        };
        if peers.len() != 2 {
            return Err(format!(
                "--vs-perftest across hosts takes a cluster of two processes: LOCO_PEERS names {}",
                peers.len()
            ));
        }
        let (device, gid_index) = {
            let sel = config.selected().map_err(s)?;
            (sel.device.clone(), sel.gid_index.unwrap_or(0))
        };
        let cluster = Cluster::builder()
            .nodes(2)
            .memory_per_node(MAX_SIZE + 4096)
            .timeout(Duration::from_secs(300))
            .verbs(config)
            .build()
            .map_err(s)?;
        let process = Process::of(&cluster).map_err(s)?;
        // The same allocations in the same order in both processes.
        let b = Buffers::alloc(&cluster, MAX_SIZE)?;
        let inbox = [
            cluster.alloc_word(NodeId(0)).map_err(s)?,
            cluster.alloc_word(NodeId(1)).map_err(s)?,
        ];
        let src = [
            cluster.alloc_word(NodeId(0)).map_err(s)?,
            cluster.alloc_word(NodeId(1)).map_err(s)?,
        ];
        let ctx = cluster.context(me).map_err(s)?;
        let link = Link {
            process,
            ctx,
            me,
            inbox,
            src,
            step: Cell::new(0),
        };
        link.barrier()?;
        let cmps = super::super::comparisons(args);
        let pin = super::super::Pinning::probe()
            .and_then(|(p, core)| core_affinity::set_for_current(core).then_some(p));
        if me == NodeId(1) {
            return serve(args, &cmps, &link, &device, gid_index, pin);
        }
        let peer = host_of(&peers[1]).to_string();
        let seen = super::super::rounds(
            args,
            &cmps,
            |c, port, last| {
                link.next();
                link.barrier()?;
                let opts = super::super::options(c, &device, gid_index, args.iters);
                let r = match link.heard()? {
                    UP => super::super::client(c.tool, &opts, port, &peer, pin.map(|p| p.client))
                        .and_then(|out| super::super::figure(c, &out)),
                    _ => Err(format!(
                        "{} server on n1 did not start (port {port})",
                        c.tool
                    )),
                };
                let verdict = match (&r, last) {
                    (Ok(_), _) => DONE,
                    (Err(_), false) => AGAIN,
                    (Err(_), true) => GIVE_UP,
                };
                link.tell(verdict)?;
                link.barrier()?;
                r
            },
            |c| {
                let r = if super::super::with_bare(c) {
                    crate::ops::measure_vs_raw(
                        &link.ctx,
                        &b,
                        c.config,
                        args.iters,
                        args.warmup,
                        args.raw_block,
                    )
                } else {
                    crate::ops::measure(&link.ctx, &b, c.config, args.iters, args.warmup)
                };
                // n1 waits for loco's turn to end, even after a failure (else it would hang).
                link.barrier()?;
                r.map(|row| super::super::ours(c, &row))
            },
        )?;
        let (placement, footer) = describe(args, &device, gid_index, &peer, pin);
        super::super::report(args, &cmps, &seen, placement, &footer);
        Ok(())
    }

    /// n1's side: a perftest server per run n0 makes, in the same order and on the same ports.
    fn serve(
        args: &OpsArgs,
        cmps: &[Comparison],
        link: &Link,
        device: &str,
        gid_index: u32,
        pin: Option<super::super::Pinning>,
    ) -> Result<(), String> {
        let mut port = super::super::FIRST_PORT;
        for _ in 0..args.rounds {
            for c in cmps {
                let opts = super::super::options(c, device, gid_index, args.iters);
                for _ in 0..super::super::ATTEMPTS {
                    port = port.wrapping_add(1).max(super::super::FIRST_PORT);
                    link.next();
                    let srv = super::super::serve(c.tool, &opts, port, pin.map(|p| p.server));
                    let heard = link
                        .tell(if srv.is_ok() { UP } else { DOWN })
                        .and_then(|()| link.barrier())
                        .and_then(|()| link.barrier())
                        .and_then(|()| link.heard());
                    // Reaped (killed if need be) whatever happened, n0 gone included: no
                    // server outlives the run.
                    if let Ok(srv) = srv {
                        reap(srv);
                    }
                    match heard? {
                        DONE => {
                            link.barrier()?;
                            break;
                        }
                        AGAIN => continue,
                        _ => return Err(format!("n0 gave up on {} (see its output)", c.tool)),
                    }
                }
            }
        }
        crate::ops::out("n1: served perftest's servers and loco's memory for n0");
        Ok(())
    }

    /// A server whose client is done (or never came): it exits on its own, or is killed.
    fn reap(mut srv: Child) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if srv.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = srv.kill();
        let _ = srv.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_their_step() {
        let w = message(7, DONE);
        assert_eq!(code_of(w, 7), Some(DONE));
        assert_eq!(code_of(w, 6), None, "a stale word is not news");
        assert_eq!(code_of(0, 1), None, "nothing written yet");
    }

    #[test]
    fn peer_hosts() {
        assert_eq!(host_of("10.77.0.2:7470"), "10.77.0.2");
        assert_eq!(host_of("[fe80::1]:7470"), "fe80::1");
        assert_eq!(host_of("node-b"), "node-b");
    }
}
