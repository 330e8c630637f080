//! The cluster key and the mutual challenge-response that proves it, over any `Read + Write`.
//!
//! ```text
//! client (node `from`)                          server (node `to`)
//!   Hello { nodes, from, to, client incarnation, client nonce } -->
//!                                          <--  Challenge { server incarnation, server nonce, MAC_s }
//!   Proof { MAC_c }                          -->
//! MAC_r = HMAC-SHA256(key, label_r || nodes || from || to || client incarnation
//!                          || server incarnation || client nonce || server nonce)
//! ```
//!
//! An *incarnation* is a random non-zero number each process draws at start: a restarted
//! process comes back under its node id with a new one, which is how its peers tell a rejoin
//! from a duplicate (the same incarnation twice) or a stale process (an incarnation they
//! declared dead). The MACs bind both, so neither can be swapped on the way.
//!
//! Each side picks a fresh 32-byte nonce from the operating system's generator, so a recorded
//! transcript does not verify against a new one (replay). The MAC binds the cluster size, both
//! node ids (and so the direction) and both nonces; the two roles use different labels, so a
//! server's MAC can never serve as a client's proof (reflection). MACs are checked with
//! `Mac::verify_slice` (constant time). Nothing else crosses the connection before both sides
//! have proven the key; the messages after it (memory, queue pairs) are not MACed one by one:
//! this authenticates membership, it does not protect a connection against someone on the path
//! who can rewrite TCP segments (nor does RoCE protect its own packets).

use std::fmt;
use std::io::{self, Read, Write};

use hmac::{Hmac, Mac};
use rand::TryRngCore;
use sha2::Sha256;

use super::wire::{self, Msg, MAC, NONCE};

type HmacSha256 = Hmac<Sha256>;

const CLIENT_LABEL: &[u8] = b"loco rendezvous v3: client proof";
const SERVER_LABEL: &[u8] = b"loco rendezvous v3: server proof";

/// Fewest bytes a configured cluster key may have.
pub(crate) const MIN_KEY: usize = 16;

/// The secret every process of a cluster holds. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ClusterKey {
    bytes: Vec<u8>,
    /// No key was configured: the empty key, which anyone can compute (loopback-only clusters
    /// and explicit opt-ins).
    insecure: bool,
}

impl fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.insecure {
            f.write_str("ClusterKey(none)")
        } else {
            write!(f, "ClusterKey({} bytes, redacted)", self.bytes.len())
        }
    }
}

impl ClusterKey {
    /// A configured key; fails when it is shorter than [`MIN_KEY`] bytes.
    pub(crate) fn new(bytes: &[u8]) -> Result<ClusterKey, String> {
        if bytes.len() < MIN_KEY {
            return Err(format!(
                "a cluster key needs at least {MIN_KEY} bytes, this one has {} (generate one with \
                 `loco keygen`)",
                bytes.len()
            ));
        }
        Ok(ClusterKey {
            bytes: bytes.to_vec(),
            insecure: false,
        })
    }

    /// The key of a cluster without one: the handshake still runs, but proves nothing.
    pub(crate) fn none() -> ClusterKey {
        ClusterKey {
            bytes: Vec::new(),
            insecure: true,
        }
    }

    /// Parses a key written as hex (what `loco keygen` prints); whitespace around it is ignored.
    pub(crate) fn from_hex(text: &str) -> Result<ClusterKey, String> {
        let t = text.trim();
        if t.len() % 2 != 0 || !t.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(
                "a cluster key is written as an even number of hex digits (see `loco keygen`)"
                    .to_string(),
            );
        }
        let bytes: Vec<u8> = (0..t.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&t[i..i + 2], 16).unwrap_or(0))
            .collect();
        ClusterKey::new(&bytes)
    }

    /// The key's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// A fresh nonce from the operating system's generator.
pub(crate) fn nonce() -> io::Result<[u8; NONCE]> {
    let mut n = [0u8; NONCE];
    rand::rngs::OsRng
        .try_fill_bytes(&mut n)
        .map_err(|e| io::Error::other(format!("the operating system's random generator: {e}")))?;
    Ok(n)
}

/// A fresh incarnation number (random, never 0) from the operating system's generator.
pub(crate) fn incarnation() -> io::Result<u64> {
    loop {
        let n = nonce()?;
        let mut b = [0u8; 8];
        b.copy_from_slice(&n[..8]);
        let v = u64::from_le_bytes(b);
        if v != 0 {
            return Ok(v);
        }
    }
}

/// What both MACs cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Transcript {
    pub(crate) nodes: u16,
    /// The connecting node.
    pub(crate) from: u16,
    /// The listening node.
    pub(crate) to: u16,
    pub(crate) client_incarnation: u64,
    pub(crate) server_incarnation: u64,
    pub(crate) client_nonce: [u8; NONCE],
    pub(crate) server_nonce: [u8; NONCE],
}

/// Which side a MAC proves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Client,
    Server,
}

fn hmac(key: &ClusterKey, role: Role, t: &Transcript) -> HmacSha256 {
    // HMAC takes keys of any length (the empty key included).
    let mut m = <HmacSha256 as Mac>::new_from_slice(&key.bytes).expect("HMAC takes any key");
    m.update(match role {
        Role::Client => CLIENT_LABEL,
        Role::Server => SERVER_LABEL,
    });
    m.update(&t.nodes.to_le_bytes());
    m.update(&t.from.to_le_bytes());
    m.update(&t.to.to_le_bytes());
    m.update(&t.client_incarnation.to_le_bytes());
    m.update(&t.server_incarnation.to_le_bytes());
    m.update(&t.client_nonce);
    m.update(&t.server_nonce);
    m
}

/// The MAC `role` sends for transcript `t`.
pub(crate) fn mac(key: &ClusterKey, role: Role, t: &Transcript) -> [u8; MAC] {
    hmac(key, role, t).finalize().into_bytes().into()
}

/// Whether `tag` is `role`'s MAC for `t` (constant-time comparison).
pub(crate) fn verify(key: &ClusterKey, role: Role, t: &Transcript, tag: &[u8]) -> bool {
    hmac(key, role, t).verify_slice(tag).is_ok()
}

fn denied(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, message)
}

/// The connecting side: node `from` (incarnation `incarnation`) proves the key to node `to` and
/// checks `to`'s proof. Returns `to`'s incarnation. Errors: `PermissionDenied` when the peer
/// refused us or failed to prove the key, `InvalidData` on a protocol violation, or the I/O
/// error.
pub(crate) fn client<S: Read + Write>(
    s: &mut S,
    key: &ClusterKey,
    nodes: u16,
    from: u16,
    to: u16,
    incarnation: u64,
) -> io::Result<u64> {
    let client_nonce = nonce()?;
    wire::write_msg(
        s,
        &Msg::Hello {
            nodes,
            from,
            to,
            incarnation,
            nonce: client_nonce,
        },
    )?;
    let (server_incarnation, server_nonce, server_mac) = match wire::read_msg(s)? {
        Msg::Challenge {
            incarnation,
            nonce,
            mac,
        } => (incarnation, nonce, mac),
        Msg::Reject { reason } => return Err(denied(format!("refused: {reason}"))),
        other => {
            return Err(wire::bad(format!(
                "answered Hello with {} instead of Challenge",
                other.name()
            )))
        }
    };
    let t = Transcript {
        nodes,
        from,
        to,
        client_incarnation: incarnation,
        server_incarnation,
        client_nonce,
        server_nonce,
    };
    if !verify(key, Role::Server, &t, &server_mac) {
        return Err(denied(
            "it failed to prove the cluster key (another cluster's process, a different \
             LOCO_CLUSTER_KEY, or not a loco process)"
                .to_string(),
        ));
    }
    wire::write_msg(
        s,
        &Msg::Proof {
            mac: mac(key, Role::Client, &t),
        },
    )?;
    Ok(server_incarnation)
}

/// Why the server side refused a connection.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The stranger was told why (a `Reject` was sent, best effort).
    Told(String),
    /// The connection failed or sent garbage.
    Io(io::Error),
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Told(r) => f.write_str(r),
            Refused::Io(e) => write!(f, "{e}"),
        }
    }
}

/// The listening side, node `me` of `nodes` (incarnation `incarnation`): reads a `Hello`,
/// checks it is meant for this cluster and node, proves the key, checks the client's proof.
/// Returns the client's node id and incarnation.
pub(crate) fn server<S: Read + Write>(
    s: &mut S,
    key: &ClusterKey,
    nodes: u16,
    me: u16,
    incarnation: u64,
) -> Result<(u16, u64), Refused> {
    let refuse = |s: &mut S, reason: String| {
        let _ = wire::write_msg(s, &Msg::reject(reason.clone()));
        Refused::Told(reason)
    };
    let (from, client_incarnation, client_nonce) = match wire::read_msg(s).map_err(Refused::Io)? {
        Msg::Hello {
            nodes: n,
            from,
            to,
            incarnation,
            nonce,
        } => {
            if n != nodes {
                return Err(refuse(
                    s,
                    format!("cluster size mismatch: n{me} has {nodes} nodes, you say {n}"),
                ));
            }
            if to != me {
                return Err(refuse(s, format!("this is n{me}, not n{to}")));
            }
            if from >= nodes || from == me {
                return Err(refuse(
                    s,
                    format!("node id n{from} is invalid here (n{me} of {nodes})"),
                ));
            }
            (from, incarnation, nonce)
        }
        other => {
            return Err(Refused::Io(wire::bad(format!(
                "a connection began with {} instead of Hello",
                other.name()
            ))))
        }
    };
    let t = Transcript {
        nodes,
        from,
        to: me,
        client_incarnation,
        server_incarnation: incarnation,
        client_nonce,
        server_nonce: nonce().map_err(Refused::Io)?,
    };
    wire::write_msg(
        s,
        &Msg::Challenge {
            incarnation,
            nonce: t.server_nonce,
            mac: mac(key, Role::Server, &t),
        },
    )
    .map_err(Refused::Io)?;
    match wire::read_msg(s).map_err(Refused::Io)? {
        Msg::Proof { mac } if verify(key, Role::Client, &t, &mac) => Ok((from, client_incarnation)),
        Msg::Proof { .. } => Err(refuse(
            s,
            "authentication failed: you do not hold this cluster's key (LOCO_CLUSTER_KEY)"
                .to_string(),
        )),
        other => Err(Refused::Io(wire::bad(format!(
            "answered Challenge with {} instead of Proof",
            other.name()
        )))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    fn key(b: u8) -> ClusterKey {
        ClusterKey::new(&[b; 32]).unwrap()
    }

    #[test]
    fn keys_parse_and_stay_secret() {
        let hex: String = nonce()
            .unwrap()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hex.len(), 64);
        let k = ClusterKey::from_hex(&format!(" {hex}\n")).unwrap();
        assert!(!format!("{k:?}").contains(&hex[..8]));
        assert!(ClusterKey::from_hex("abc").is_err());
        assert!(ClusterKey::from_hex("zz").is_err());
        assert!(ClusterKey::from_hex("00ff").is_err(), "too short");
        assert!(ClusterKey::new(&[1; 8]).is_err());
    }

    #[test]
    fn macs_bind_role_direction_and_nonces() {
        let k = key(1);
        let t = Transcript {
            nodes: 3,
            from: 1,
            to: 2,
            client_incarnation: 10,
            server_incarnation: 20,
            client_nonce: [4; NONCE],
            server_nonce: [5; NONCE],
        };
        let c = mac(&k, Role::Client, &t);
        assert!(verify(&k, Role::Client, &t, &c));
        assert!(!verify(&k, Role::Server, &t, &c), "reflection");
        assert!(!verify(&key(2), Role::Client, &t, &c), "another key");
        let swapped = Transcript {
            from: 2,
            to: 1,
            ..t
        };
        assert!(!verify(&k, Role::Client, &swapped, &c), "other direction");
        let fresh = Transcript {
            server_nonce: [6; NONCE],
            ..t
        };
        assert!(!verify(&k, Role::Client, &fresh, &c), "replay");
        let restarted = Transcript {
            client_incarnation: 11,
            ..t
        };
        assert!(
            !verify(&k, Role::Client, &restarted, &c),
            "another incarnation"
        );
        let swapped = Transcript {
            client_incarnation: 20,
            server_incarnation: 10,
            ..t
        };
        assert!(
            !verify(&k, Role::Client, &swapped, &c),
            "incarnations swapped"
        );
        assert!(!verify(&k, Role::Client, &t, &c[..31]), "short tag");
    }

    /// One end of an in-memory duplex pipe.
    struct End {
        rx: std::sync::mpsc::Receiver<Vec<u8>>,
        tx: std::sync::mpsc::Sender<Vec<u8>>,
        buf: VecDeque<u8>,
    }

    impl Read for End {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            while self.buf.is_empty() {
                match self.rx.recv_timeout(std::time::Duration::from_secs(10)) {
                    Ok(b) => self.buf.extend(b),
                    Err(_) => return Ok(0),
                }
            }
            let n = out.len().min(self.buf.len());
            for (o, b) in out.iter_mut().zip(self.buf.drain(..n)) {
                *o = b;
            }
            Ok(n)
        }
    }

    impl Write for End {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let _ = self.tx.send(b.to_vec());
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn pipe() -> (End, End) {
        let (a_tx, b_rx) = std::sync::mpsc::channel();
        let (b_tx, a_rx) = std::sync::mpsc::channel();
        (
            End {
                rx: a_rx,
                tx: a_tx,
                buf: VecDeque::new(),
            },
            End {
                rx: b_rx,
                tx: b_tx,
                buf: VecDeque::new(),
            },
        )
    }

    fn run(
        client_key: ClusterKey,
        server_key: ClusterKey,
        from: u16,
        to: u16,
    ) -> (io::Result<u64>, Result<(u16, u64), Refused>) {
        let (mut a, mut b) = pipe();
        let srv = std::thread::spawn(move || server(&mut b, &server_key, 3, 1, 500));
        let c = client(&mut a, &client_key, 3, from, to, 700);
        drop(a);
        (c, srv.join().unwrap())
    }

    #[test]
    fn the_same_key_joins_both_ways() {
        // Each side learns the other's incarnation.
        let (c, s) = run(key(7), key(7), 2, 1);
        assert_eq!(c.unwrap(), 500);
        assert_eq!(s.unwrap(), (2, 700));
        let (c, s) = run(ClusterKey::none(), ClusterKey::none(), 0, 1);
        c.unwrap();
        assert_eq!(s.unwrap(), (0, 700));
        assert_ne!(incarnation().unwrap(), incarnation().unwrap());
    }

    #[test]
    fn a_wrong_or_missing_key_is_refused_by_both_sides() {
        for (ck, sk) in [
            (key(7), key(8)),
            (ClusterKey::none(), key(8)),
            (key(7), ClusterKey::none()),
        ] {
            let (c, s) = run(ck, sk, 2, 1);
            let e = c.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
            assert!(s.is_err(), "the server let a stranger in");
        }
    }

    #[test]
    fn bad_ids_are_refused_before_any_proof() {
        for (from, to) in [(1, 1), (3, 1), (2, 0)] {
            let (c, s) = run(key(7), key(7), from, to);
            assert!(c.is_err(), "{from}->{to}");
            assert!(matches!(s, Err(Refused::Told(_))), "{from}->{to}");
        }
    }

    #[test]
    fn a_replayed_transcript_is_refused() {
        // Record a good client's Hello and Proof, then replay them to a fresh server.
        let k = key(7);
        let (mut a, mut b) = pipe();
        let kk = k.clone();
        let srv = std::thread::spawn(move || server(&mut b, &kk, 3, 1, 500));
        let client_nonce = [42; NONCE];
        let hello = Msg::Hello {
            nodes: 3,
            from: 2,
            to: 1,
            incarnation: 9,
            nonce: client_nonce,
        };
        wire::write_msg(&mut a, &hello).unwrap();
        let Msg::Challenge {
            nonce, incarnation, ..
        } = wire::read_msg(&mut a).unwrap()
        else {
            panic!("no challenge")
        };
        let t = Transcript {
            nodes: 3,
            from: 2,
            to: 1,
            client_incarnation: 9,
            server_incarnation: incarnation,
            client_nonce,
            server_nonce: nonce,
        };
        let proof = Msg::Proof {
            mac: mac(&k, Role::Client, &t),
        };
        wire::write_msg(&mut a, &proof).unwrap();
        assert_eq!(srv.join().unwrap().unwrap(), (2, 9));
        // The replay: same bytes, new server nonce.
        let (mut a, mut b) = pipe();
        let kk = k.clone();
        let srv = std::thread::spawn(move || server(&mut b, &kk, 3, 1, 500));
        wire::write_msg(&mut a, &hello).unwrap();
        let _ = wire::read_msg(&mut a).unwrap();
        wire::write_msg(&mut a, &proof).unwrap();
        assert!(matches!(srv.join().unwrap(), Err(Refused::Told(_))));
        // Reflection: the server's own MAC sent back as the proof.
        let (mut a, mut b) = pipe();
        let srv = std::thread::spawn(move || server(&mut b, &k, 3, 1, 500));
        wire::write_msg(&mut a, &hello).unwrap();
        let Msg::Challenge { mac, .. } = wire::read_msg(&mut a).unwrap() else {
            panic!("no challenge")
        };
        wire::write_msg(&mut a, &Msg::Proof { mac }).unwrap();
        assert!(matches!(srv.join().unwrap(), Err(Refused::Told(_))));
    }
}
