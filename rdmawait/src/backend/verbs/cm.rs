//! The connection manager (librdmacm), raw: event channels, identifiers, and the calls of the
//! rdma_cm bootstrap ([`Bootstrap::RdmaCm`](super::Bootstrap::RdmaCm)). What goes in the
//! private data is `rendezvous::cmdata`; who connects to whom is `nic.rs` (active side) and
//! `session.rs` (passive side).
//!
//! Raw calls through `rdma-mummy-sys` rather than `sideway::rdmacm`: sideway 0.4.3 cannot put
//! private data in a connect or accept (its `ConnectionParameter` has no setter for it), cannot
//! read the private data of an event, has no `rdma_reject`, exposes no raw handle to add them,
//! and panics on event types it does not know. The bootstrap needs all of these.
//!
//! The queue pairs stay the backend's own (created in a node's protection domain by `qp.rs`):
//! the connection manager only carries their numbers (`qp_num` in the connection parameters)
//! and computes the attributes that connect them (`rdma_init_qp_attr`), which this module
//! applies with `ibv_modify_qp`. So a queue pair connected by rdma_cm is the same kind of queue
//! pair as one connected by the TCP rendezvous, with the same transport timeouts.

use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::ptr::{null_mut, NonNull};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rdma_mummy_sys as sys;
use sideway::ibverbs::queue_pair::{BasicQueuePair, QueuePair};

pub(crate) use sys::rdma_cm_event_type as kind;

/// The reject status of a reject sent by the peer's application (`IB_CM_REJ_CONSUMER_DEFINED`):
/// its private data says why.
pub(crate) const REJECT_BY_PEER: i32 = 28;

/// An rdma_cm event channel: a file descriptor on which the kernel reports the events of the
/// identifiers created on it. Read by one thread at a time (the mutex).
pub(crate) struct Channel {
    raw: NonNull<sys::rdma_event_channel>,
    reading: Mutex<()>,
}

// SAFETY: librdmacm's calls are thread-safe for distinct identifiers; the channel itself is read
// under `reading` only, and destroyed once (in `Drop`, when no identifier holds it any more).
unsafe impl Send for Channel {}
// SAFETY: as above.
unsafe impl Sync for Channel {}

/// An event, copied out of librdmacm's buffer and acknowledged at once: acknowledging early
/// keeps `rdma_destroy_id` (which waits for the acknowledgement of its identifier's events)
/// from blocking on a thread that is still looking at an event.
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) kind: u32,
    pub(crate) status: i32,
    /// The identifier the event is about: for a connect request, a new one (adopt it with
    /// [`Id::adopt`], exactly once); otherwise only an address to compare, never dereferenced.
    pub(crate) id: usize,
    /// The private data of a connect request, response or reject.
    pub(crate) private: Vec<u8>,
    /// The peer's queue pair number (connect request and response).
    pub(crate) qp_num: u32,
}

fn last_error(call: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{call}: {e}"))
}

impl Channel {
    /// A new channel, in non-blocking mode (events are waited for with `poll`).
    pub(crate) fn new() -> io::Result<Arc<Channel>> {
        // SAFETY: no arguments; returns a new channel or null.
        let raw = unsafe { sys::rdma_create_event_channel() };
        let raw = NonNull::new(raw).ok_or_else(|| {
            let e = io::Error::last_os_error();
            io::Error::new(
                e.kind(),
                format!(
                    "rdma_create_event_channel failed ({e}): rdma_cm needs librdmacm \
                     (Debian/Ubuntu: librdmacm1) and the rdma_ucm kernel module \
                     (/dev/infiniband/rdma_cm: `modprobe rdma_ucm`)"
                ),
            )
        })?;
        let channel = Arc::new(Channel {
            raw,
            reading: Mutex::new(()),
        });
        let fd = channel.fd();
        // SAFETY: `fd` is the channel's open descriptor; F_GETFL/F_SETFL take plain integers.
        let ok = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
        };
        if !ok {
            return Err(last_error("fcntl(O_NONBLOCK) on the rdma_cm channel"));
        }
        Ok(channel)
    }

    fn fd(&self) -> i32 {
        // SAFETY: the channel is alive (borrowed); `fd` is a plain integer set at creation.
        unsafe { self.raw.as_ref().fd }
    }

    /// A new identifier on this channel, for reliable connections (`RDMA_PS_TCP`).
    pub(crate) fn create_id(self: &Arc<Self>) -> io::Result<Id> {
        let mut raw = null_mut();
        // SAFETY: the channel is alive; `raw` receives the new identifier; no user context.
        let ret = unsafe {
            sys::rdma_create_id(
                self.raw.as_ptr(),
                &mut raw,
                null_mut(),
                sys::rdma_port_space::RDMA_PS_TCP,
            )
        };
        if ret != 0 {
            return Err(last_error("rdma_create_id"));
        }
        let raw = NonNull::new(raw).ok_or_else(|| io::Error::other("rdma_create_id gave null"))?;
        Ok(Id {
            raw,
            _channel: self.clone(),
        })
    }

    /// The next event, waiting at most `timeout` (`None`: none came).
    pub(crate) fn next(&self, timeout: Duration) -> io::Result<Option<Event>> {
        let _reading = self.reading.lock();
        let mut pfd = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(None)
            } else {
                Err(e)
            };
        }
        if n == 0 {
            return Ok(None);
        }
        let mut ev: *mut sys::rdma_cm_event = null_mut();
        // SAFETY: the channel is alive and in non-blocking mode; `ev` receives the event.
        if unsafe { sys::rdma_get_cm_event(self.raw.as_ptr(), &mut ev) } != 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(None)
            } else {
                Err(io::Error::new(e.kind(), format!("rdma_get_cm_event: {e}")))
            };
        }
        // SAFETY: librdmacm returned a valid event, ours until acknowledged below. The
        // connection parameters are the union's member for the connection events read here;
        // their private data (when not null) holds `private_data_len` bytes, copied before the
        // acknowledgement frees them.
        let event = unsafe {
            let e = &*ev;
            let conn_event = matches!(
                e.event,
                kind::RDMA_CM_EVENT_CONNECT_REQUEST
                    | kind::RDMA_CM_EVENT_CONNECT_RESPONSE
                    | kind::RDMA_CM_EVENT_REJECTED
                    | kind::RDMA_CM_EVENT_ESTABLISHED
            );
            let (private, qp_num) = if conn_event {
                let conn = e.param.conn;
                let private = if conn.private_data.is_null() || conn.private_data_len == 0 {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(
                        conn.private_data.cast::<u8>(),
                        usize::from(conn.private_data_len),
                    )
                    .to_vec()
                };
                (private, conn.qp_num)
            } else {
                (Vec::new(), 0)
            };
            let event = Event {
                kind: e.event,
                status: e.status,
                id: e.id as usize,
                private,
                qp_num,
            };
            sys::rdma_ack_cm_event(ev);
            event
        };
        Ok(Some(event))
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: destroyed once; every identifier created on it holds an `Arc` of it, so none
        // is left.
        unsafe { sys::rdma_destroy_event_channel(self.raw.as_ptr()) };
    }
}

/// An rdma_cm identifier (`rdma_cm_id`), destroyed on drop. It never owns a queue pair: the
/// backend's queue pairs are its own (see the module docs).
pub(crate) struct Id {
    raw: NonNull<sys::rdma_cm_id>,
    /// Its events arrive there; it must outlive the identifier.
    _channel: Arc<Channel>,
}

// SAFETY: an identifier may be used and destroyed by another thread than the one that made it
// (the listener thread accepts, a fencing thread destroys): librdmacm keeps no thread-local
// state for it. It is not `Sync`: librdmacm does not make concurrent calls on one identifier
// safe, and each `Id` has one owner. `rdma_destroy_id` waits for the identifier's events to
// be acknowledged, which they are at once (`Channel::next`).
unsafe impl Send for Id {}

/// A socket address in the C form librdmacm takes.
fn c_addr(addr: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut s: libc::sockaddr_storage = unsafe { MaybeUninit::zeroed().assume_init() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&raw mut s).cast::<libc::sockaddr_in>(), sin) };
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&raw mut s).cast::<libc::sockaddr_in6>(), sin6) };
        }
    }
    s
}

/// What a queue pair gets on top of the connection manager's attributes: the backend's own
/// transport settings and read/atomic depths, as the TCP path sets them (`qp::connect`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tuning {
    pub(crate) timeout: u8,
    pub(crate) retry_count: u8,
    pub(crate) max_rd_atomic: u8,
    pub(crate) max_dest_rd_atomic: u8,
}

impl Id {
    /// Takes ownership of the identifier a connect request event created (`event.id`).
    ///
    /// # Safety
    /// `raw` must be the identifier of a connect request event read from `channel`, adopted
    /// once.
    pub(crate) unsafe fn adopt(raw: usize, channel: &Arc<Channel>) -> Option<Id> {
        NonNull::new(raw as *mut sys::rdma_cm_id).map(|raw| Id {
            raw,
            _channel: channel.clone(),
        })
    }

    /// The identifier's address, to match events against.
    pub(crate) fn key(&self) -> usize {
        self.raw.as_ptr() as usize
    }

    /// The device and port the identifier is bound to (after a bind or an address
    /// resolution), if any.
    pub(crate) fn device(&self) -> Option<(String, u8)> {
        // SAFETY: the identifier is alive; `verbs` is null or the device context librdmacm
        // opened, whose device pointer and name are valid while the context is.
        unsafe {
            let id = self.raw.as_ref();
            if id.verbs.is_null() || (*id.verbs).device.is_null() {
                return None;
            }
            let name = sys::ibv_get_device_name((*id.verbs).device);
            if name.is_null() {
                return None;
            }
            let name = CStr::from_ptr(name).to_string_lossy().into_owned();
            Some((name, id.port_num))
        }
    }

    pub(crate) fn bind(&self, addr: SocketAddr) -> io::Result<()> {
        let mut a = c_addr(addr);
        // SAFETY: the identifier is alive; `a` is a valid socket address of its family.
        let ret = unsafe { sys::rdma_bind_addr(self.raw.as_ptr(), (&raw mut a).cast()) };
        if ret != 0 {
            return Err(last_error("rdma_bind_addr"));
        }
        Ok(())
    }

    pub(crate) fn listen(&self, backlog: i32) -> io::Result<()> {
        // SAFETY: the identifier is alive and bound.
        if unsafe { sys::rdma_listen(self.raw.as_ptr(), backlog) } != 0 {
            return Err(last_error("rdma_listen"));
        }
        Ok(())
    }

    /// Starts resolving `dst` from `src` (event: address resolved, or an address error).
    pub(crate) fn resolve_addr(
        &self,
        src: SocketAddr,
        dst: SocketAddr,
        timeout: Duration,
    ) -> io::Result<()> {
        let (mut s, mut d) = (c_addr(src), c_addr(dst));
        let ms = i32::try_from(timeout.as_millis())
            .unwrap_or(i32::MAX)
            .max(1);
        // SAFETY: the identifier is alive; both addresses are valid socket addresses.
        let ret = unsafe {
            sys::rdma_resolve_addr(
                self.raw.as_ptr(),
                (&raw mut s).cast(),
                (&raw mut d).cast(),
                ms,
            )
        };
        if ret != 0 {
            return Err(last_error("rdma_resolve_addr"));
        }
        Ok(())
    }

    /// Starts resolving the route (event: route resolved, or a route error).
    pub(crate) fn resolve_route(&self, timeout: Duration) -> io::Result<()> {
        let ms = i32::try_from(timeout.as_millis())
            .unwrap_or(i32::MAX)
            .max(1);
        // SAFETY: the identifier is alive, its address resolved.
        if unsafe { sys::rdma_resolve_route(self.raw.as_ptr(), ms) } != 0 {
            return Err(last_error("rdma_resolve_route"));
        }
        Ok(())
    }

    fn param(private: &[u8], qp_num: u32, t: &Tuning, active: bool) -> sys::rdma_conn_param {
        sys::rdma_conn_param {
            private_data: private.as_ptr().cast(),
            private_data_len: u8::try_from(private.len()).unwrap_or(u8::MAX),
            // The requester only initiates, the responder only serves.
            responder_resources: if active { 0 } else { t.max_dest_rd_atomic },
            initiator_depth: if active { t.max_rd_atomic } else { 0 },
            flow_control: 0,
            retry_count: t.retry_count.min(7),
            rnr_retry_count: 7,
            srq: 0,
            qp_num,
        }
    }

    /// Sends the connect request for queue pair `qp_num` (route resolved).
    pub(crate) fn connect(&self, qp_num: u32, private: &[u8], t: &Tuning) -> io::Result<()> {
        let mut p = Self::param(private, qp_num, t, true);
        // SAFETY: the identifier is alive; `p` and the private data it points to outlive the
        // call, which copies them.
        if unsafe { sys::rdma_connect(self.raw.as_ptr(), &mut p) } != 0 {
            return Err(last_error("rdma_connect"));
        }
        Ok(())
    }

    /// Accepts a connect request with queue pair `qp_num` (already ready to send: [`Id::ready`]).
    pub(crate) fn accept(&self, qp_num: u32, private: &[u8], t: &Tuning) -> io::Result<()> {
        let mut p = Self::param(private, qp_num, t, false);
        // SAFETY: as in `connect`.
        if unsafe { sys::rdma_accept(self.raw.as_ptr(), &mut p) } != 0 {
            return Err(last_error("rdma_accept"));
        }
        Ok(())
    }

    /// Refuses a connect request, saying why in the private data.
    pub(crate) fn reject(&self, private: &[u8]) -> io::Result<()> {
        let len = u8::try_from(private.len()).unwrap_or(u8::MAX);
        // SAFETY: the identifier is alive; the private data outlives the call, which copies it.
        if unsafe { sys::rdma_reject(self.raw.as_ptr(), private.as_ptr().cast(), len) } != 0 {
            return Err(last_error("rdma_reject"));
        }
        Ok(())
    }

    /// Completes an active connection once the queue pair is ready (sends the RTU).
    pub(crate) fn establish(&self) -> io::Result<()> {
        // SAFETY: the identifier is alive and got its connect response.
        if unsafe { sys::rdma_establish(self.raw.as_ptr()) } != 0 {
            return Err(last_error("rdma_establish"));
        }
        Ok(())
    }

    /// Ends the connection (the peer gets a disconnect event). Failures are of no
    /// consequence: the identifier is destroyed next anyway.
    pub(crate) fn disconnect(&self) {
        // SAFETY: the identifier is alive.
        unsafe { sys::rdma_disconnect(self.raw.as_ptr()) };
    }

    /// Moves `qp` (in INIT, on the identifier's port) to RTR and then RTS with the attributes
    /// the connection manager computed for this connection (path, GID, MTU, remote queue pair
    /// number and PSNs), and the backend's own transport settings and depths (`t`).
    pub(crate) fn ready(&self, qp: &BasicQueuePair, t: &Tuning) -> io::Result<()> {
        use sys::ibv_qp_attr_mask as m;
        for state in [
            sys::ibv_qp_state::IBV_QPS_RTR,
            sys::ibv_qp_state::IBV_QPS_RTS,
        ] {
            // SAFETY: the identifier is alive; `attr` is a zeroed ibv_qp_attr (integers and
            // structs of integers) with the state asked for, which rdma_init_qp_attr fills in
            // with `mask`; the queue pair is alive (borrowed).
            let ret = unsafe {
                let mut attr = MaybeUninit::<sys::ibv_qp_attr>::zeroed().assume_init();
                let mut mask: i32 = 0;
                attr.qp_state = state;
                if sys::rdma_init_qp_attr(self.raw.as_ptr(), &mut attr, &mut mask) != 0 {
                    return Err(last_error("rdma_init_qp_attr"));
                }
                if state == sys::ibv_qp_state::IBV_QPS_RTR {
                    attr.max_dest_rd_atomic = t.max_dest_rd_atomic;
                    attr.min_rnr_timer = 12;
                    mask |= (m::IBV_QP_MAX_DEST_RD_ATOMIC.0 | m::IBV_QP_MIN_RNR_TIMER.0) as i32;
                } else {
                    attr.max_rd_atomic = t.max_rd_atomic;
                    attr.timeout = t.timeout;
                    attr.retry_cnt = t.retry_count.min(7);
                    attr.rnr_retry = 7;
                    mask |= (m::IBV_QP_MAX_QP_RD_ATOMIC.0
                        | m::IBV_QP_TIMEOUT.0
                        | m::IBV_QP_RETRY_CNT.0
                        | m::IBV_QP_RNR_RETRY.0) as i32;
                }
                sys::ibv_modify_qp(qp.qp().as_ptr(), &mut attr, mask)
            };
            if ret != 0 {
                let e = io::Error::from_raw_os_error(ret.abs());
                let which = if state == sys::ibv_qp_state::IBV_QPS_RTR {
                    "RTR"
                } else {
                    "RTS"
                };
                return Err(io::Error::new(
                    e.kind(),
                    format!("moving a queue pair to {which} with rdma_cm's attributes: {e}"),
                ));
            }
        }
        Ok(())
    }
}

impl Drop for Id {
    fn drop(&mut self) {
        // SAFETY: destroyed once; it owns no queue pair; its events were acknowledged as they
        // were read (`Channel::next`), so this does not wait on anyone.
        let ret = unsafe { sys::rdma_destroy_id(self.raw.as_ptr()) };
        if ret != 0 {
            tracing::debug!(target: "loco::rdmawait", error = %io::Error::last_os_error(),
                "rdma_destroy_id failed");
        }
    }
}

/// What an IB CM reject status means (the common ones; IBA table 112).
fn reject_status(status: i32) -> String {
    let what = match status {
        1 => "no queue pair resources",
        8 => "invalid service id: nothing listens there",
        10 => "stale connection: a queue pair number was reused",
        26 => "timed out",
        _ => "",
    };
    if what.is_empty() {
        format!("status {status}")
    } else {
        format!("status {status}, {what}")
    }
}

/// The librdmacm calls the bootstrap makes that a library may lack (`rdma_init_qp_attr` and
/// `rdma_establish` came later than the rest), by name: empty when all are there, or when
/// librdmacm cannot be opened at all (`Channel::new` reports that).
pub(crate) fn missing_calls() -> Vec<&'static str> {
    const CALLS: [&std::ffi::CStr; 8] = [
        c"rdma_init_qp_attr",
        c"rdma_establish",
        c"rdma_reject",
        c"rdma_accept",
        c"rdma_connect",
        c"rdma_resolve_route",
        c"rdma_resolve_addr",
        c"rdma_listen",
    ];
    // SAFETY: dlopen and dlsym take NUL-terminated names; the handle is closed again, and no
    // symbol is called (only looked up).
    unsafe {
        let lib = libc::dlopen(
            c"librdmacm.so.1".as_ptr(),
            libc::RTLD_LAZY | libc::RTLD_LOCAL,
        );
        if lib.is_null() {
            return Vec::new();
        }
        let missing = CALLS
            .into_iter()
            .filter(|name| libc::dlsym(lib, name.as_ptr()).is_null())
            .map(|name| name.to_str().unwrap_or("?"))
            .collect();
        libc::dlclose(lib);
        missing
    }
}

/// Name of an event type, for messages.
pub(crate) fn event_name(k: u32) -> &'static str {
    match k {
        kind::RDMA_CM_EVENT_ADDR_RESOLVED => "address resolved",
        kind::RDMA_CM_EVENT_ADDR_ERROR => "address error",
        kind::RDMA_CM_EVENT_ROUTE_RESOLVED => "route resolved",
        kind::RDMA_CM_EVENT_ROUTE_ERROR => "route error",
        kind::RDMA_CM_EVENT_CONNECT_REQUEST => "connect request",
        kind::RDMA_CM_EVENT_CONNECT_RESPONSE => "connect response",
        kind::RDMA_CM_EVENT_CONNECT_ERROR => "connect error",
        kind::RDMA_CM_EVENT_UNREACHABLE => "unreachable",
        kind::RDMA_CM_EVENT_REJECTED => "rejected",
        kind::RDMA_CM_EVENT_ESTABLISHED => "established",
        kind::RDMA_CM_EVENT_DISCONNECTED => "disconnected",
        kind::RDMA_CM_EVENT_DEVICE_REMOVAL => "device removal",
        kind::RDMA_CM_EVENT_ADDR_CHANGE => "address change",
        kind::RDMA_CM_EVENT_TIMEWAIT_EXIT => "timewait exit",
        _ => "unknown event",
    }
}

/// Why an active connection attempt failed.
#[derive(Debug)]
pub(crate) enum Failed {
    /// Nobody listens (yet) at the address: the peer's listener may still be starting.
    NoListener(String),
    /// The peer's process refused the request, saying why.
    Refused(String),
    /// Anything else (address or route resolution, a device mismatch, a call that failed).
    Other(String),
    /// The deadline passed.
    TimedOut,
}

/// What the peer answered: its private data and the number of the queue pair it connected.
pub(crate) struct Answer {
    pub(crate) id: Id,
    pub(crate) private: Vec<u8>,
    pub(crate) qp_num: u32,
}

/// Waits for the next event of identifier `id` on `ch` until `deadline`, dropping the events
/// of other identifiers (a thread's earlier links: their disconnects are not needed here).
fn await_event(ch: &Channel, id: &Id, deadline: std::time::Instant) -> Result<Event, Failed> {
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(Failed::TimedOut);
        }
        match ch.next(left.min(Duration::from_millis(200))) {
            Ok(Some(ev)) if ev.id == id.key() => return Ok(ev),
            Ok(_) => {}
            Err(e) => return Err(Failed::Other(format!("reading rdma_cm events: {e}"))),
        }
    }
}

/// What an active connection asks for.
pub(crate) struct Request<'a> {
    /// This process's address (the port is not used).
    pub(crate) src: SocketAddr,
    /// The peer's listener.
    pub(crate) dst: SocketAddr,
    /// The device and port the queue pair lives on, which the route must use (an empty name:
    /// any).
    pub(crate) device: &'a str,
    pub(crate) port: u8,
    /// The queue pair to connect.
    pub(crate) qp_num: u32,
    pub(crate) private: &'a [u8],
}

/// The active side of a connection: resolves `r.dst` from `r.src`, checks that the connection
/// manager picked the queue pair's device and port, and sends the connect request. Returns the
/// identifier with the answer; the caller checks it, readies the queue pair ([`Id::ready`])
/// and calls [`Id::establish`].
pub(crate) fn connect(
    ch: &Arc<Channel>,
    r: &Request<'_>,
    t: &Tuning,
    deadline: std::time::Instant,
) -> Result<Answer, Failed> {
    let (src, dst, device) = (r.src, r.dst, (r.device, r.port));
    let other = |e: io::Error| Failed::Other(e.to_string());
    let step = || {
        deadline
            .saturating_duration_since(std::time::Instant::now())
            .min(Duration::from_secs(10))
    };
    let id = ch.create_id().map_err(other)?;
    id.resolve_addr(SocketAddr::new(src.ip(), 0), dst, step())
        .map_err(other)?;
    let ev = await_event(ch, &id, deadline)?;
    if ev.kind != kind::RDMA_CM_EVENT_ADDR_RESOLVED {
        return Err(Failed::Other(format!(
            "resolving {dst} from {} gave {} (status {}): is {} the address of a network \
             interface that an RDMA device runs over, reachable from {}?",
            src.ip(),
            event_name(ev.kind),
            ev.status,
            dst.ip(),
            src.ip()
        )));
    }
    match id.device() {
        Some(_) if device.0.is_empty() => {} // a probe: whatever device routing picks
        Some((name, port)) if name == device.0 && port == device.1 => {}
        Some((name, port)) => {
            return Err(Failed::Other(format!(
                "rdma_cm routes {} → {dst} through {name} port {port}, but this process uses \
                 {} port {} (LOCO_RDMA_DEVICE, LOCO_RDMA_PORT)",
                src.ip(),
                device.0,
                device.1
            )))
        }
        None => {
            return Err(Failed::Other(format!(
                "rdma_cm resolved {dst} without an RDMA device"
            )))
        }
    }
    id.resolve_route(step()).map_err(other)?;
    let ev = await_event(ch, &id, deadline)?;
    if ev.kind != kind::RDMA_CM_EVENT_ROUTE_RESOLVED {
        return Err(Failed::Other(format!(
            "resolving the route to {dst} gave {} (status {})",
            event_name(ev.kind),
            ev.status
        )));
    }
    id.connect(r.qp_num, r.private, t).map_err(other)?;
    let ev = await_event(ch, &id, deadline)?;
    match ev.kind {
        kind::RDMA_CM_EVENT_CONNECT_RESPONSE => Ok(Answer {
            id,
            private: ev.private,
            qp_num: ev.qp_num,
        }),
        kind::RDMA_CM_EVENT_REJECTED if ev.status == REJECT_BY_PEER => {
            let reason = crate::backend::rendezvous::cmdata::read_reason(&ev.private);
            if reason.is_empty() {
                // A reject without a reason comes from the kernel, not from a loco process:
                // the peer's process went away while the request was pending.
                Err(Failed::Other(format!(
                    "the connection manager at {dst} rejected the request without a reason \
                     (its process ended while the request was pending?)"
                )))
            } else {
                Err(Failed::Refused(reason))
            }
        }
        kind::RDMA_CM_EVENT_REJECTED => Err(Failed::NoListener(format!(
            "the connection manager at {dst} rejected the request ({}): is the process for \
             that address running with LOCO_BOOTSTRAP=rdma_cm?",
            reject_status(ev.status)
        ))),
        k => Err(Failed::Other(format!(
            "connecting to {dst} gave {} (status {})",
            event_name(k),
            ev.status
        ))),
    }
}
