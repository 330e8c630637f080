//! What the rdma_cm bootstrap (`Bootstrap::RdmaCm` of the verbs backend) puts
//! in the connection manager's private data, and how it is authenticated. Device-free, so that
//! its tests (tampering, replays, truncation) run without RDMA; `verbs::cm` carries it.
//!
//! A thread of node `from` that opens a queue pair towards node `to` connects it through
//! rdma_cm. Both processes have joined each other over the authenticated TCP session by then,
//! so each knows the other's incarnation, and both hold the cluster key:
//!
//! ```text
//! REQ private data (51 bytes; rdma_cm leaves 56 to users on InfiniBand and RoCE):
//!   version 1 | from u16 | client incarnation u64 | seq u64 | MAC_req (32)
//! REP private data (61 bytes; 196 allowed):
//!   version 1 | server incarnation u64 | addr u64 | rkey u32 | words u64 | MAC_rep (32)
//! REJ private data: the reason, UTF-8, at most 140 bytes
//!
//! MAC_req = HMAC-SHA256(key, "loco rdma_cm v1: request" || nodes || from || to
//!                       || client incarnation || server incarnation || seq || client QPN)
//! MAC_rep = HMAC-SHA256(key, "loco rdma_cm v1: reply" || the same fields
//!                       || responder QPN || addr || rkey || words)
//! ```
//!
//! The queue pair numbers are the ones the connection manager itself carries in REQ and REP,
//! so a recorded request cannot be replayed for another queue pair, and a reply cannot be
//! grafted onto another connection. The server's incarnation is bound without being sent: a
//! request recorded before the server restarted does not verify against the new process.
//! Within one server incarnation, `seq` (a counter of the client process, never reused) may be
//! used once ([`Seen`]). The reply carries the memory key: memory addresses and rkeys cross the
//! network only in MACed REPs, never in the clear TCP session (whose `Join` then carries the
//! memory size only). As on the TCP path, the queue pairs' packets themselves are not
//! authenticated (RoCE has no such thing).

use std::collections::BTreeSet;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::auth::ClusterKey;
use super::wire::{NodeInfo, MAC};

type HmacSha256 = Hmac<Sha256>;

const VERSION: u8 = 1;
const REQUEST_LABEL: &[u8] = b"loco rdma_cm v1: request";
const REPLY_LABEL: &[u8] = b"loco rdma_cm v1: reply";

/// Bytes of a request's private data.
pub(crate) const REQUEST_LEN: usize = 1 + 2 + 8 + 8 + MAC;
/// Bytes of a reply's private data.
pub(crate) const REPLY_LEN: usize = 1 + 8 + 8 + 4 + 8 + MAC;
/// Most bytes of a reject's reason (IB CM REJ leaves 148 bytes of private data).
pub(crate) const REJECT_MAX: usize = 140;
/// Private data rdma_cm lets a REQ carry on InfiniBand and RoCE (92 bytes minus its own header).
pub(crate) const REQUEST_MAX: usize = 56;
/// Private data a REP may carry.
pub(crate) const REPLY_MAX: usize = 196;

const _: () = assert!(REQUEST_LEN <= REQUEST_MAX && REPLY_LEN <= REPLY_MAX);

/// Who connects to whom: what both sides know without it being sent, bound by both MACs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Link {
    pub(crate) nodes: u16,
    /// The connecting node.
    pub(crate) from: u16,
    /// The node that accepts (serves the responder queue pair).
    pub(crate) to: u16,
    pub(crate) client_incarnation: u64,
    pub(crate) server_incarnation: u64,
    /// The request's number, unique per client incarnation.
    pub(crate) seq: u64,
    /// The connecting queue pair's number (as the connection manager carries it).
    pub(crate) client_qpn: u32,
}

impl Link {
    fn mac(&self, key: &ClusterKey, label: &[u8]) -> HmacSha256 {
        // HMAC takes keys of any length (the empty key included).
        let mut m = <HmacSha256 as Mac>::new_from_slice(key.bytes()).expect("HMAC takes any key");
        m.update(label);
        m.update(&self.nodes.to_le_bytes());
        m.update(&self.from.to_le_bytes());
        m.update(&self.to.to_le_bytes());
        m.update(&self.client_incarnation.to_le_bytes());
        m.update(&self.server_incarnation.to_le_bytes());
        m.update(&self.seq.to_le_bytes());
        m.update(&self.client_qpn.to_le_bytes());
        m
    }

    fn reply_mac(&self, key: &ClusterKey, responder_qpn: u32, info: &NodeInfo) -> HmacSha256 {
        let mut m = self.mac(key, REPLY_LABEL);
        m.update(&responder_qpn.to_le_bytes());
        m.update(&info.addr.to_le_bytes());
        m.update(&info.rkey.to_le_bytes());
        m.update(&info.words.to_le_bytes());
        m
    }

    /// The request's private data.
    pub(crate) fn request(&self, key: &ClusterKey) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[0] = VERSION;
        b[1..3].copy_from_slice(&self.from.to_le_bytes());
        b[3..11].copy_from_slice(&self.client_incarnation.to_le_bytes());
        b[11..19].copy_from_slice(&self.seq.to_le_bytes());
        let tag: [u8; MAC] = self.mac(key, REQUEST_LABEL).finalize().into_bytes().into();
        b[19..].copy_from_slice(&tag);
        b
    }

    /// The reply's private data: the accepting node's memory, for responder `responder_qpn`.
    pub(crate) fn reply(
        &self,
        key: &ClusterKey,
        responder_qpn: u32,
        info: &NodeInfo,
    ) -> [u8; REPLY_LEN] {
        let mut b = [0u8; REPLY_LEN];
        b[0] = VERSION;
        b[1..9].copy_from_slice(&self.server_incarnation.to_le_bytes());
        b[9..17].copy_from_slice(&info.addr.to_le_bytes());
        b[17..21].copy_from_slice(&info.rkey.to_le_bytes());
        b[21..29].copy_from_slice(&info.words.to_le_bytes());
        let tag: [u8; MAC] = self
            .reply_mac(key, responder_qpn, info)
            .finalize()
            .into_bytes()
            .into();
        b[29..].copy_from_slice(&tag);
        b
    }

    /// Checks a reply for this request and returns the memory it describes. The connection
    /// manager may pad private data: bytes past [`REPLY_LEN`] are ignored.
    pub(crate) fn open_reply(
        &self,
        key: &ClusterKey,
        responder_qpn: u32,
        data: &[u8],
    ) -> Result<NodeInfo, String> {
        let b = data
            .get(..REPLY_LEN)
            .ok_or_else(|| format!("its reply carries {} bytes, not {REPLY_LEN}", data.len()))?;
        if b[0] != VERSION {
            return Err(format!(
                "its reply is of version {}, this process speaks {VERSION}",
                b[0]
            ));
        }
        let server_incarnation = u64::from_le_bytes(b[1..9].try_into().unwrap_or_default());
        if server_incarnation != self.server_incarnation {
            return Err(format!(
                "the reply comes from incarnation {server_incarnation:#x}, not from {:#x}, \
                 the one this process joined",
                self.server_incarnation
            ));
        }
        let info = NodeInfo {
            addr: u64::from_le_bytes(b[9..17].try_into().unwrap_or_default()),
            rkey: u32::from_le_bytes(b[17..21].try_into().unwrap_or_default()),
            words: u64::from_le_bytes(b[21..29].try_into().unwrap_or_default()),
        };
        self.reply_mac(key, responder_qpn, &info)
            .verify_slice(&b[29..])
            .map_err(|_| {
                "its reply does not prove the cluster key (LOCO_CLUSTER_KEY)".to_string()
            })?;
        Ok(info)
    }
}

/// A request as it arrives, before it is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) from: u16,
    pub(crate) client_incarnation: u64,
    pub(crate) seq: u64,
    tag: [u8; MAC],
}

impl Request {
    /// Parses a request's private data (bytes past [`REQUEST_LEN`] are padding).
    pub(crate) fn parse(data: &[u8]) -> Result<Request, String> {
        let b = data.get(..REQUEST_LEN).ok_or_else(|| {
            format!(
                "the request carries {} bytes of private data, not {REQUEST_LEN} (not a loco \
                 process, or one using another LOCO_BOOTSTRAP)",
                data.len()
            )
        })?;
        if b[0] != VERSION {
            return Err(format!(
                "the request is of version {}, this process speaks {VERSION}",
                b[0]
            ));
        }
        let mut tag = [0u8; MAC];
        tag.copy_from_slice(&b[19..]);
        Ok(Request {
            from: u16::from_le_bytes([b[1], b[2]]),
            client_incarnation: u64::from_le_bytes(b[3..11].try_into().unwrap_or_default()),
            seq: u64::from_le_bytes(b[11..19].try_into().unwrap_or_default()),
            tag,
        })
    }

    /// Whether the request proves the key for `link` (whose `from`, client incarnation and
    /// `seq` must be the request's own; constant-time comparison).
    pub(crate) fn verify(&self, key: &ClusterKey, link: &Link) -> bool {
        link.from == self.from
            && link.client_incarnation == self.client_incarnation
            && link.seq == self.seq
            && link.mac(key, REQUEST_LABEL).verify_slice(&self.tag).is_ok()
    }
}

/// How a reject's reason starts when the request may be sent again shortly (the requester
/// restarted and its rejoin is not complete at the listener yet).
pub(crate) const RETRY: &str = "retry: ";

/// The reason a reject carries, cut to [`REJECT_MAX`] bytes on a character boundary.
pub(crate) fn reject_reason(reason: &str) -> &[u8] {
    let mut end = reason.len().min(REJECT_MAX);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason.as_bytes()[..end]
}

/// A reject's reason as text (padding zeros dropped; not UTF-8: shown lossily).
pub(crate) fn read_reason(data: &[u8]) -> String {
    let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    String::from_utf8_lossy(&data[..end.min(REJECT_MAX)]).into_owned()
}

/// The request numbers of one client incarnation already accepted: each may be used once. The
/// last [`Seen::WINDOW`] are remembered; anything older is refused as stale (a client numbers
/// its requests in order, so only a replay is that far behind).
#[derive(Debug, Default)]
pub(crate) struct Seen {
    recent: BTreeSet<u64>,
    /// Every number at or below it is refused.
    floor: u64,
}

impl Seen {
    pub(crate) const WINDOW: usize = 4096;

    /// Records `seq`; false if it was used already or is older than the window.
    pub(crate) fn fresh(&mut self, seq: u64) -> bool {
        if seq <= self.floor || !self.recent.insert(seq) {
            return false;
        }
        while self.recent.len() > Self::WINDOW {
            if let Some(oldest) = self.recent.pop_first() {
                self.floor = oldest;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ClusterKey {
        ClusterKey::new(&[7u8; 32]).unwrap()
    }

    fn link() -> Link {
        Link {
            nodes: 3,
            from: 1,
            to: 2,
            client_incarnation: 0x1111,
            server_incarnation: 0x2222,
            seq: 5,
            client_qpn: 0x33,
        }
    }

    fn info() -> NodeInfo {
        NodeInfo {
            addr: 0x7f00_0000_1000,
            rkey: 0xabcd,
            words: 4096,
        }
    }

    #[test]
    fn request_round_trips_and_binds_everything() {
        let k = key();
        let l = link();
        let data = l.request(&k);
        assert!(data.len() <= REQUEST_MAX);
        let r = Request::parse(&data).unwrap();
        assert_eq!((r.from, r.client_incarnation, r.seq), (1, 0x1111, 5));
        assert!(r.verify(&k, &l));
        // Padding after the request is ignored.
        let mut padded = data.to_vec();
        padded.extend_from_slice(&[0; 5]);
        assert!(Request::parse(&padded).unwrap().verify(&k, &l));
        // Another key, another server incarnation (it restarted), another queue pair, another
        // direction or cluster size: refused.
        assert!(!r.verify(&ClusterKey::new(&[8u8; 32]).unwrap(), &l));
        assert!(!r.verify(&ClusterKey::none(), &l));
        for other in [
            Link {
                server_incarnation: 0x2223,
                ..l
            },
            Link {
                client_qpn: 0x34,
                ..l
            },
            Link { to: 0, ..l },
            Link { nodes: 4, ..l },
            Link { seq: 6, ..l },
        ] {
            assert!(!r.verify(&k, &other), "{other:?}");
        }
    }

    #[test]
    fn tampered_or_short_requests_are_refused() {
        let k = key();
        let l = link();
        let data = l.request(&k);
        for i in 0..REQUEST_LEN {
            let mut bad = data;
            bad[i] ^= 1;
            let ok = Request::parse(&bad).is_ok_and(|r| r.verify(&k, &l));
            assert!(!ok, "flipping byte {i} went unnoticed");
        }
        for len in 0..REQUEST_LEN {
            assert!(Request::parse(&data[..len]).is_err(), "{len} bytes parsed");
        }
    }

    #[test]
    fn reply_round_trips_and_is_bound_to_its_request() {
        let k = key();
        let l = link();
        let data = l.reply(&k, 0x99, &info());
        assert!(data.len() <= REPLY_MAX);
        assert_eq!(l.open_reply(&k, 0x99, &data).unwrap(), info());
        // Another responder, another request, another key: refused.
        assert!(l.open_reply(&k, 0x98, &data).is_err());
        assert!(Link { seq: 6, ..l }.open_reply(&k, 0x99, &data).is_err());
        assert!(l
            .open_reply(&ClusterKey::new(&[8u8; 32]).unwrap(), 0x99, &data)
            .is_err());
        let from_restarted = Link {
            server_incarnation: 0x2223,
            ..l
        };
        let e = from_restarted.open_reply(&k, 0x99, &data).unwrap_err();
        assert!(e.contains("incarnation"), "{e}");
        for i in 0..REPLY_LEN {
            let mut bad = data;
            bad[i] ^= 0x80;
            assert!(l.open_reply(&k, 0x99, &bad).is_err(), "byte {i}");
        }
        assert!(l.open_reply(&k, 0x99, &data[..REPLY_LEN - 1]).is_err());
    }

    #[test]
    fn each_request_number_is_accepted_once() {
        let mut s = Seen::default();
        assert!(s.fresh(1));
        assert!(!s.fresh(1));
        assert!(s.fresh(3));
        assert!(s.fresh(2), "out of order, but new");
        assert!(!s.fresh(0), "0 is never a request number");
        for n in 4..(Seen::WINDOW as u64 + 10) {
            assert!(s.fresh(n));
        }
        assert!(!s.fresh(5), "a replay older than the window");
        assert!(!s.fresh(Seen::WINDOW as u64), "a replay within the window");
        assert!(s.recent.len() <= Seen::WINDOW);
        assert!(s.fresh(u64::MAX));
        assert!(!s.fresh(u64::MAX));
    }

    #[test]
    fn reject_reasons_are_cut_on_character_boundaries() {
        let long = "é".repeat(100);
        let cut = reject_reason(&long);
        assert!(cut.len() <= REJECT_MAX);
        assert_eq!(read_reason(cut), "é".repeat(REJECT_MAX / 2));
        let mut padded = b"no room".to_vec();
        padded.extend_from_slice(&[0; 20]);
        assert_eq!(read_reason(&padded), "no room");
        assert_eq!(read_reason(&[0xff, 0xfe]), "\u{fffd}\u{fffd}");
    }
}
