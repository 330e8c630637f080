//! The device-free half of the verbs backend's TCP rendezvous: wire format, authentication
//! handshake, listener and per-peer state. It builds without the `verbs` feature, so that its
//! tests (strangers, wrong keys, replays, fuzzing) run on machines without RDMA; the session
//! that drives it with queue pairs and memory is `verbs::session`.
//!
//! Every process listens on its own entry of the peer list and opens one connection to every
//! other process (its *client* connection to that peer). On each:
//!
//! | message | reply | meaning |
//! |---|---|---|
//! | `Hello { nodes, from, to, incarnation, nonce }` | `Challenge { incarnation, nonce, mac }` or `Reject` | start of the handshake ([`auth`]); each side names its incarnation |
//! | `Proof { mac }` | none, or `Reject` | the client proves the cluster key; the server closes on failure |
//! | `Join { info }` | `Welcome { info, epoch }`, `Reject { reason }` or `Retry { reason }` | after the handshake only: memory (address, rkey, words) exchanged, checked against ours (under rdma_cm: words only, address and rkey zero, see [`cmdata`]); `epoch` is the server's barrier count when it admits a restarted process (0 otherwise); `Retry`: a new incarnation whose previous one is not declared dead here yet ([`peers`]) |
//! | `Connect { endpoint }` | `Accepted { endpoint }` or `Reject` | a thread of `from` opened a queue pair towards us: create a responder queue pair, connect it, return its QPN, PSN, LID, GID |
//! | `Release { qpn }` | none | that thread is gone: destroy the responder |
//! | `Barrier { epoch }` | none | `from` reached its barrier number `epoch` (exactly one more than its last) |
//! | `Ping` | none | heartbeat, every `peer_timeout / 5` |
//! | `Bye` | none | `from` is leaving; its memory stays registered until every peer said bye |
//!
//! Under the rdma_cm bootstrap, `Connect`, `Accepted` and `Release` are not used: the
//! connection manager's REQ, REP and disconnect take their place ([`cmdata`]).
//!
//! A joined connection that ends without `Bye`, or on which nothing (not even a `Ping`) arrives
//! for the peer timeout, means the peer is dead or cut off: that incarnation is marked dead, for
//! good, and fenced out. The node may come back as a new incarnation (a restarted process): see
//! [`peers`] for what is admitted, and `verbs::session` for the rejoin.

pub(crate) mod auth;
pub(crate) mod cmdata;
pub(crate) mod gate;
pub(crate) mod peers;
pub(crate) mod wire;
