//! The rendezvous wire format: length-prefixed frames, one message each, decoded strictly.
//!
//! A frame is a little-endian `u32` body length and the body, whose first byte is the message
//! tag. Decoding refuses anything it does not fully understand: unknown tags, truncated or
//! over-long bodies (trailing bytes included), lengths above [`MAX_FRAME`], reasons that are not
//! UTF-8 or too long, values outside their range (queue pair numbers and PSNs are 24 bits, MTU
//! codes 1..=5, memory that would wrap the address space). A peer's bytes never reach the
//! device or an allocation unchecked.

use std::io::{self, Read, Write};

/// Identifies a loco rendezvous (the first field of `Hello`).
pub(crate) const MAGIC: u32 = 0x4c4f_434f; // "LOCO"
/// Protocol version; 2 added the authenticated handshake and heartbeats, 3 the incarnations
/// (rejoin after a restart) and the barrier count in `Welcome`.
pub(crate) const VERSION: u16 = 3;
/// Largest frame body accepted; the longest message is a `Reject` with its reason.
pub(crate) const MAX_FRAME: u32 = 2048;
/// Longest `Reject` reason sent or accepted, in bytes.
pub(crate) const MAX_REASON: usize = 1024;
/// Bytes of a handshake nonce.
pub(crate) const NONCE: usize = 32;
/// Bytes of a handshake MAC (HMAC-SHA256).
pub(crate) const MAC: usize = 32;

/// What a remote request needs to address a node's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NodeInfo {
    /// Address of the first word, as registered.
    pub(crate) addr: u64,
    /// Remote key of the memory region.
    pub(crate) rkey: u32,
    /// Size in words.
    pub(crate) words: u64,
}

/// One end of a queue pair connection, as the other end needs to know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    pub(crate) lid: u16,
    pub(crate) gid: [u8; 16],
    /// Active MTU code of the end's port (1..=5: 256..4096 bytes).
    pub(crate) mtu: u8,
}

/// The messages. See the table in the [module docs](super).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Msg {
    Hello {
        nodes: u16,
        from: u16,
        to: u16,
        /// The connecting process's incarnation (never 0).
        incarnation: u64,
        nonce: [u8; NONCE],
    },
    Challenge {
        /// The listening process's incarnation (never 0).
        incarnation: u64,
        nonce: [u8; NONCE],
        mac: [u8; MAC],
    },
    Proof {
        mac: [u8; MAC],
    },
    Reject {
        reason: String,
    },
    Join {
        info: NodeInfo,
    },
    Welcome {
        info: NodeInfo,
        /// The welcoming process's barrier count when it admits a restarted process (which
        /// continues from it); 0 otherwise.
        epoch: u64,
    },
    Connect {
        endpoint: Endpoint,
    },
    Accepted {
        endpoint: Endpoint,
    },
    Release {
        qpn: u32,
    },
    Barrier {
        epoch: u64,
    },
    Bye,
    Ping,
    /// Refused for now, try again: the joining node's previous incarnation is not declared
    /// dead here yet.
    Retry {
        reason: String,
    },
}

impl Msg {
    /// A `Reject`, its reason cut to [`MAX_REASON`] bytes (at a character boundary).
    pub(crate) fn reject(reason: impl Into<String>) -> Msg {
        Msg::Reject {
            reason: cut(reason.into()),
        }
    }

    /// A `Retry`, its reason cut like [`Msg::reject`]'s.
    pub(crate) fn retry(reason: impl Into<String>) -> Msg {
        Msg::Retry {
            reason: cut(reason.into()),
        }
    }

    /// The message's name, for logs and errors (never its contents: they may be a peer's).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Msg::Hello { .. } => "Hello",
            Msg::Challenge { .. } => "Challenge",
            Msg::Proof { .. } => "Proof",
            Msg::Reject { .. } => "Reject",
            Msg::Join { .. } => "Join",
            Msg::Welcome { .. } => "Welcome",
            Msg::Connect { .. } => "Connect",
            Msg::Accepted { .. } => "Accepted",
            Msg::Release { .. } => "Release",
            Msg::Barrier { .. } => "Barrier",
            Msg::Bye => "Bye",
            Msg::Ping => "Ping",
            Msg::Retry { .. } => "Retry",
        }
    }
}

/// `reason` cut to [`MAX_REASON`] bytes (at a character boundary).
fn cut(mut reason: String) -> String {
    if reason.len() > MAX_REASON {
        let mut end = MAX_REASON;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
    }
    reason
}

/// Encodes `msg` as one frame.
pub(crate) fn encode(msg: &Msg) -> Vec<u8> {
    let mut b = Vec::with_capacity(80);
    b.extend_from_slice(&[0; 4]);
    match msg {
        Msg::Hello {
            nodes,
            from,
            to,
            incarnation,
            nonce,
        } => {
            b.push(1);
            b.extend_from_slice(&MAGIC.to_le_bytes());
            b.extend_from_slice(&VERSION.to_le_bytes());
            b.extend_from_slice(&nodes.to_le_bytes());
            b.extend_from_slice(&from.to_le_bytes());
            b.extend_from_slice(&to.to_le_bytes());
            b.extend_from_slice(&incarnation.to_le_bytes());
            b.extend_from_slice(nonce);
        }
        Msg::Challenge {
            incarnation,
            nonce,
            mac,
        } => {
            b.push(2);
            b.extend_from_slice(&incarnation.to_le_bytes());
            b.extend_from_slice(nonce);
            b.extend_from_slice(mac);
        }
        Msg::Proof { mac } => {
            b.push(3);
            b.extend_from_slice(mac);
        }
        Msg::Reject { reason } => {
            b.push(4);
            let r = reason.as_bytes();
            b.extend_from_slice(&r[..r.len().min(MAX_REASON)]);
        }
        Msg::Retry { reason } => {
            b.push(13);
            let r = reason.as_bytes();
            b.extend_from_slice(&r[..r.len().min(MAX_REASON)]);
        }
        Msg::Join { info } => {
            b.push(5);
            put_info(&mut b, info);
        }
        Msg::Welcome { info, epoch } => {
            b.push(6);
            put_info(&mut b, info);
            b.extend_from_slice(&epoch.to_le_bytes());
        }
        Msg::Connect { endpoint } => {
            b.push(7);
            put_endpoint(&mut b, endpoint);
        }
        Msg::Accepted { endpoint } => {
            b.push(8);
            put_endpoint(&mut b, endpoint);
        }
        Msg::Release { qpn } => {
            b.push(9);
            b.extend_from_slice(&qpn.to_le_bytes());
        }
        Msg::Barrier { epoch } => {
            b.push(10);
            b.extend_from_slice(&epoch.to_le_bytes());
        }
        Msg::Bye => b.push(11),
        Msg::Ping => b.push(12),
    }
    let len = (b.len() - 4) as u32;
    b[..4].copy_from_slice(&len.to_le_bytes());
    b
}

/// Writes `msg` as one frame.
pub(crate) fn write_msg(w: &mut impl Write, msg: &Msg) -> io::Result<()> {
    w.write_all(&encode(msg))?;
    w.flush()
}

/// Reads one frame and decodes it strictly.
pub(crate) fn read_msg(r: &mut impl Read) -> io::Result<Msg> {
    let mut len = [0; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len == 0 || len > MAX_FRAME {
        return Err(bad(format!("bad frame length {len}")));
    }
    let mut body = vec![0; len as usize];
    r.read_exact(&mut body)?;
    decode(&body)
}

/// Decodes one frame body (tag and fields); the whole body must be consumed.
pub(crate) fn decode(body: &[u8]) -> io::Result<Msg> {
    let (&tag, rest) = body
        .split_first()
        .ok_or_else(|| bad("empty frame".to_string()))?;
    let mut c = Cursor(rest);
    let msg = match tag {
        1 => {
            let magic = c.u32()?;
            let version = c.u16()?;
            if magic != MAGIC || version != VERSION {
                return Err(bad(format!(
                    "not a loco rendezvous peer, or another version (magic {magic:#x}, version \
                     {version}; want {MAGIC:#x}, {VERSION})"
                )));
            }
            Msg::Hello {
                nodes: c.u16()?,
                from: c.u16()?,
                to: c.u16()?,
                incarnation: c.incarnation()?,
                nonce: c.take()?,
            }
        }
        2 => Msg::Challenge {
            incarnation: c.incarnation()?,
            nonce: c.take()?,
            mac: c.take()?,
        },
        3 => Msg::Proof { mac: c.take()? },
        4 => Msg::Reject {
            reason: c.reason()?,
        },
        13 => Msg::Retry {
            reason: c.reason()?,
        },
        5 => Msg::Join { info: c.info()? },
        6 => Msg::Welcome {
            info: c.info()?,
            epoch: c.u64()?,
        },
        7 => Msg::Connect {
            endpoint: c.endpoint()?,
        },
        8 => Msg::Accepted {
            endpoint: c.endpoint()?,
        },
        9 => Msg::Release { qpn: c.qpn()? },
        10 => Msg::Barrier { epoch: c.u64()? },
        11 => Msg::Bye,
        12 => Msg::Ping,
        t => return Err(bad(format!("unknown message tag {t}"))),
    };
    if !c.0.is_empty() {
        return Err(bad(format!(
            "{} trailing bytes after a {} message",
            c.0.len(),
            msg.name()
        )));
    }
    Ok(msg)
}

fn put_info(b: &mut Vec<u8>, i: &NodeInfo) {
    b.extend_from_slice(&i.addr.to_le_bytes());
    b.extend_from_slice(&i.rkey.to_le_bytes());
    b.extend_from_slice(&i.words.to_le_bytes());
}

fn put_endpoint(b: &mut Vec<u8>, e: &Endpoint) {
    b.extend_from_slice(&e.qpn.to_le_bytes());
    b.extend_from_slice(&e.psn.to_le_bytes());
    b.extend_from_slice(&e.lid.to_le_bytes());
    b.extend_from_slice(&e.gid);
    b.push(e.mtu);
}

/// An `InvalidData` error: the peer sent something this protocol does not allow.
pub(crate) fn bad(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        if self.0.len() < N {
            return Err(bad("truncated message".to_string()));
        }
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        let mut out = [0; N];
        out.copy_from_slice(head);
        Ok(out)
    }

    fn u16(&mut self) -> io::Result<u16> {
        self.take().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> io::Result<u32> {
        self.take().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> io::Result<u64> {
        self.take().map(u64::from_le_bytes)
    }

    /// An incarnation number: never 0 (0 stands for "not known yet" here).
    fn incarnation(&mut self) -> io::Result<u64> {
        let v = self.u64()?;
        if v == 0 {
            return Err(bad("incarnation 0".to_string()));
        }
        Ok(v)
    }

    /// The rest of the body as a reason: at most [`MAX_REASON`] bytes of UTF-8.
    fn reason(&mut self) -> io::Result<String> {
        let r = std::mem::take(&mut self.0);
        if r.len() > MAX_REASON {
            return Err(bad(format!("reason of {} bytes", r.len())));
        }
        let reason = std::str::from_utf8(r).map_err(|_| bad("reason is not UTF-8".to_string()))?;
        Ok(reason.to_string())
    }

    /// A 24-bit queue pair number or PSN.
    fn qpn(&mut self) -> io::Result<u32> {
        let v = self.u32()?;
        if v >= 1 << 24 {
            return Err(bad(format!("{v:#x} does not fit 24 bits")));
        }
        Ok(v)
    }

    fn info(&mut self) -> io::Result<NodeInfo> {
        let info = NodeInfo {
            addr: self.u64()?,
            rkey: self.u32()?,
            words: self.u64()?,
        };
        let end = info
            .words
            .checked_mul(8)
            .and_then(|b| info.addr.checked_add(b));
        if info.words == 0 || end.is_none() {
            return Err(bad(format!(
                "memory of {} words at {:#x} is empty or wraps the address space",
                info.words, info.addr
            )));
        }
        Ok(info)
    }

    fn endpoint(&mut self) -> io::Result<Endpoint> {
        let e = Endpoint {
            qpn: self.qpn()?,
            psn: self.qpn()?,
            lid: self.u16()?,
            gid: self.take()?,
            mtu: {
                let [m] = self.take()?;
                m
            },
        };
        if !(1..=5).contains(&e.mtu) {
            return Err(bad(format!("MTU code {} is not 1..=5", e.mtu)));
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn samples() -> Vec<Msg> {
        let info = NodeInfo {
            addr: 0x7f00_dead_b000,
            rkey: 0x1234,
            words: 1 << 17,
        };
        let endpoint = Endpoint {
            qpn: 17,
            psn: 0xabcdef,
            lid: 3,
            gid: [7; 16],
            mtu: 5,
        };
        vec![
            Msg::Hello {
                nodes: 3,
                from: 2,
                to: 1,
                incarnation: 0x1234_5678_9abc_def0,
                nonce: [9; NONCE],
            },
            Msg::Challenge {
                incarnation: 77,
                nonce: [1; NONCE],
                mac: [2; MAC],
            },
            Msg::Proof { mac: [3; MAC] },
            Msg::reject("no"),
            Msg::Join { info },
            Msg::Welcome { info, epoch: 3 },
            Msg::Connect { endpoint },
            Msg::Accepted { endpoint },
            Msg::Release { qpn: 9 },
            Msg::Barrier { epoch: 4 },
            Msg::Bye,
            Msg::Ping,
            Msg::retry("later"),
        ]
    }

    #[test]
    fn messages_round_trip() {
        for m in samples() {
            let buf = encode(&m);
            assert_eq!(read_msg(&mut &buf[..]).unwrap(), m);
        }
    }

    #[test]
    fn trailing_and_missing_bytes_are_refused() {
        for m in samples() {
            let mut buf = encode(&m);
            let reason = matches!(m, Msg::Reject { .. } | Msg::Retry { .. });
            if !reason {
                // One more byte in the body, length adjusted: trailing garbage.
                buf.push(0);
                let len = (buf.len() - 4) as u32;
                buf[..4].copy_from_slice(&len.to_le_bytes());
                let e = read_msg(&mut &buf[..]).unwrap_err();
                assert!(e.to_string().contains("trailing"), "{m:?}: {e}");
                buf.pop();
            }
            if buf.len() > 5 && !reason {
                buf.pop();
                let len = (buf.len() - 4) as u32;
                buf[..4].copy_from_slice(&len.to_le_bytes());
                assert!(read_msg(&mut &buf[..]).is_err(), "{m:?} truncated");
            }
        }
    }

    #[test]
    fn garbage_is_refused() {
        assert!(read_msg(&mut &[0u8, 0, 0, 0][..]).is_err());
        assert!(read_msg(&mut &[1u8, 0, 0, 0, 99][..]).is_err());
        assert!(read_msg(&mut &[255u8, 255, 255, 255][..]).is_err());
        let mut hello = encode(&samples()[0]);
        hello[5] ^= 0xff; // corrupt the magic
        assert!(read_msg(&mut &hello[..]).is_err());
        // Out-of-range values.
        let bad_mtu = Msg::Connect {
            endpoint: Endpoint {
                qpn: 1,
                psn: 1,
                lid: 0,
                gid: [0; 16],
                mtu: 9,
            },
        };
        assert!(read_msg(&mut &encode(&bad_mtu)[..]).is_err());
        assert!(read_msg(&mut &encode(&Msg::Release { qpn: 1 << 24 })[..]).is_err());
        let wraps = Msg::Welcome {
            info: NodeInfo {
                addr: u64::MAX - 8,
                rkey: 1,
                words: 2,
            },
            epoch: 0,
        };
        assert!(read_msg(&mut &encode(&wraps)[..]).is_err());
        let mut not_utf8 = encode(&Msg::reject("ab"));
        not_utf8[5] = 0xff;
        assert!(read_msg(&mut &not_utf8[..]).is_err());
        let mut not_utf8 = encode(&Msg::retry("ab"));
        not_utf8[5] = 0xff;
        assert!(read_msg(&mut &not_utf8[..]).is_err());
        // Incarnation 0 means "unknown": no peer may claim it.
        let zero = Msg::Challenge {
            incarnation: 0,
            nonce: [1; NONCE],
            mac: [2; MAC],
        };
        assert!(read_msg(&mut &encode(&zero)[..]).is_err());
        let mut hello = encode(&samples()[0]);
        // nodes, from, to (6 bytes) after tag, magic and version: the incarnation follows.
        hello[5 + 4 + 2 + 6..5 + 4 + 2 + 6 + 8].fill(0);
        assert!(read_msg(&mut &hello[..]).is_err());
        // A version 2 peer (no incarnation) is told apart by the version, not misparsed.
        let mut old = encode(&samples()[0]);
        old[9..11].copy_from_slice(&2u16.to_le_bytes());
        let e = read_msg(&mut &old[..]).unwrap_err();
        assert!(e.to_string().contains("version 2"), "{e}");
    }

    #[test]
    fn long_reasons_are_cut_at_a_character() {
        let Msg::Reject { reason } = Msg::reject("é".repeat(MAX_REASON)) else {
            unreachable!()
        };
        assert!(reason.len() <= MAX_REASON);
        let buf = encode(&Msg::Reject { reason });
        assert!(read_msg(&mut &buf[..]).is_ok());
    }
}
