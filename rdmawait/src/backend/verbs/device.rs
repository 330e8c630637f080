//! Device selection: which RDMA device, port and GID the backend uses, and what it can do.
//!
//! Attributes are read with raw `ibv_query_*` calls rather than sideway's typed getters, whose
//! `From<u32>` conversions panic on values they do not know (docs/verbs-notes.md, pitfall 5): a device
//! reporting an unusual link layer or atomic capability must give an error, not a panic.

use std::io;
use std::mem::MaybeUninit;
use std::sync::Arc;

use rdma_mummy_sys as sys;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::DeviceContext;

use super::{verbs_error, VerbsConfig};
use crate::{Error, Result};

/// What to install or do when there is no usable device; shown in every "no device" error.
pub(crate) const HOW_TO_GET_A_DEVICE: &str = "no RDMA NIC? create a Soft-RoCE device over an \
    Ethernet interface: `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0` (the `rdma` \
    tool is in iproute2); where the kernel has no RDMA support (no rdma_rxe module), run inside \
    the project's VM: `soft-roce-ci/vm.sh -- <command>`";

/// The opened device, with the port and address this process uses and its limits.
#[derive(Debug)]
pub(crate) struct Device {
    pub(crate) ctx: Arc<DeviceContext>,
    pub(crate) name: String,
    pub(crate) port: u8,
    /// Source GID index: `Some` where packets need a global route header (RoCE, or asked for).
    pub(crate) gid_index: Option<u8>,
    pub(crate) gid: [u8; 16],
    pub(crate) lid: u16,
    /// Active MTU as an `ibv_mtu` code (1 = 256 bytes ... 5 = 4096 bytes).
    pub(crate) mtu: u8,
    pub(crate) max_qp_wr: u32,
    pub(crate) max_cqe: u32,
    /// Outstanding RDMA READs / atomics a QP may initiate (`max_qp_init_rd_atom`).
    pub(crate) max_rd_atomic: u8,
    /// Outstanding RDMA READs / atomics a QP may serve (`max_qp_rd_atom`).
    pub(crate) max_dest_rd_atomic: u8,
    /// The device is Soft-RoCE (the kernel's rdma_rxe driver).
    pub(crate) soft_roce: bool,
}

/// The vendor id the rdma_rxe driver reports (`RXE_VENDOR_ID`).
const RXE_VENDOR_ID: u32 = 0x00ff_ffff;

#[derive(Clone, Copy)]
struct DeviceLimits {
    ports: u8,
    max_qp_wr: i32,
    max_cqe: i32,
    max_qp_rd_atom: i32,
    max_qp_init_rd_atom: i32,
    atomic_cap: u32,
    vendor_id: u32,
}

#[derive(Clone, Copy)]
struct PortInfo {
    state: u32,
    active_mtu: u32,
    max_mtu: u32,
    gid_tbl_len: i32,
    lid: u16,
    link_layer: u8,
}

const LINK_LAYER_ETHERNET: u8 = sys::IBV_LINK_LAYER_ETHERNET;
const PORT_ACTIVE: u32 = sys::ibv_port_state::IBV_PORT_ACTIVE;

/// libibverbs' device list, or why there is none, with what to install or load.
fn device_list() -> Result<DeviceList> {
    DeviceList::new().map_err(|e| {
        let os = io::Error::last_os_error();
        let message = match os.raw_os_error() {
            Some(libc::EOPNOTSUPP) => "libibverbs.so.1 could not be loaded; install the verbs \
                user-space library and its providers (Debian/Ubuntu: `apt install libibverbs1 \
                ibverbs-providers`; Fedora: `dnf install libibverbs`)"
                .to_string(),
            _ if !std::path::Path::new("/sys/class/infiniband_verbs").exists() => format!(
                "libibverbs is loaded, but the kernel has no RDMA support loaded ({e}; no \
                 /sys/class/infiniband_verbs); {HOW_TO_GET_A_DEVICE}"
            ),
            _ => format!("cannot list RDMA devices ({e}); is the kernel's RDMA stack loaded? {HOW_TO_GET_A_DEVICE}"),
        };
        Error::Backend {
            backend: "verbs",
            message,
            source: Some(os),
        }
    })
}

/// Opens the device `config` names (or the first with an active port) and picks port and GID.
pub(crate) fn open(config: &VerbsConfig) -> Result<Device> {
    let list = device_list()?;
    let names: Vec<String> = list.iter().map(|d| d.name()).collect();
    if names.is_empty() {
        return Err(verbs_error(format!(
            "no RDMA device found (libibverbs lists none); {HOW_TO_GET_A_DEVICE}"
        )));
    }
    let candidates: Vec<usize> = match &config.device {
        Some(want) => match names.iter().position(|n| n == want) {
            Some(i) => vec![i],
            None => {
                return Err(verbs_error(format!(
                    "no RDMA device named `{want}` (LOCO_RDMA_DEVICE); devices: {}",
                    names.join(", ")
                )))
            }
        },
        None => (0..names.len()).collect(),
    };
    let mut why = Vec::new();
    for i in candidates {
        let dev = list.get(i).expect("index from the same list");
        let name = names[i].clone();
        let ctx = match dev.open() {
            Ok(ctx) => ctx,
            Err(e) => {
                why.push(format!(
                    "{name}: cannot open ({e}: {})",
                    io::Error::last_os_error()
                ));
                continue;
            }
        };
        match pick_port(&ctx, &name, config) {
            Ok(Some(device)) => return Ok(device),
            Ok(None) => why.push(format!("{name}: no active port")),
            Err(e) if config.device.is_some() => return Err(e),
            Err(e) => why.push(format!("{name}: {e}")),
        }
    }
    Err(verbs_error(format!(
        "no usable RDMA device ({}); {HOW_TO_GET_A_DEVICE}",
        why.join("; ")
    )))
}

/// The configured port (or the first active one) of an opened device, with its GID.
fn pick_port(ctx: &Arc<DeviceContext>, name: &str, config: &VerbsConfig) -> Result<Option<Device>> {
    let limits = query_device(ctx).map_err(|e| os_error(format!("{name}: ibv_query_device"), e))?;
    if limits.atomic_cap == sys::ibv_atomic_cap::IBV_ATOMIC_NONE {
        return Err(verbs_error(format!(
            "{name} has no remote atomics (atomic_cap = IBV_ATOMIC_NONE), which rcas/rfaa need"
        )));
    }
    let ports: Vec<u8> = match config.port {
        Some(p) if p == 0 || p > limits.ports => {
            return Err(verbs_error(format!(
                "{name} has ports 1..={}, not {p} (LOCO_RDMA_PORT)",
                limits.ports
            )))
        }
        Some(p) => vec![p],
        None => (1..=limits.ports).collect(),
    };
    for port in ports {
        let info = query_port(ctx, port)
            .map_err(|e| os_error(format!("{name}: ibv_query_port({port})"), e))?;
        if info.state != PORT_ACTIVE {
            if config.port.is_some() {
                return Err(verbs_error(format!(
                    "port {port} of {name} is not active (state {}); is its network interface up?",
                    info.state
                )));
            }
            continue;
        }
        let ethernet = info.link_layer == LINK_LAYER_ETHERNET;
        let gid_index = match config.gid_index {
            Some(i) => Some(i),
            None if ethernet => Some(pick_gid(ctx, port, info.gid_tbl_len).ok_or_else(|| {
                verbs_error(format!(
                    "port {port} of {name} has no usable GID (RoCE needs an IP address on the \
                     device's network interface)"
                ))
            })?),
            None => None,
        };
        let gid = match gid_index {
            Some(i) => {
                let i = u8::try_from(i).map_err(|_| {
                    verbs_error(format!("GID index {i} is out of range (LOCO_GID_INDEX)"))
                })?;
                let gid = query_gid(ctx, port, i.into()).map_err(|e| {
                    os_error(
                        format!("{name}: GID index {i} of port {port} (LOCO_GID_INDEX)"),
                        e,
                    )
                })?;
                if gid == [0; 16] {
                    return Err(verbs_error(format!(
                        "GID index {i} of port {port} of {name} is empty (LOCO_GID_INDEX); \
                         RoCE GIDs appear once the network interface has an address"
                    )));
                }
                (Some(i), gid)
            }
            None => (None, [0; 16]),
        };
        if !(1..=5).contains(&info.active_mtu) {
            return Err(verbs_error(format!(
                "port {port} of {name} reports an unknown MTU code {}",
                info.active_mtu
            )));
        }
        let clamp = |v: i32| v.clamp(1, 255) as u8;
        return Ok(Some(Device {
            ctx: ctx.clone(),
            name: name.to_string(),
            port,
            gid_index: gid.0,
            gid: gid.1,
            lid: info.lid,
            mtu: info.active_mtu as u8,
            max_qp_wr: limits.max_qp_wr.max(1) as u32,
            max_cqe: limits.max_cqe.max(1) as u32,
            max_rd_atomic: clamp(limits.max_qp_init_rd_atom),
            max_dest_rd_atomic: clamp(limits.max_qp_rd_atom),
            soft_roce: limits.vendor_id == RXE_VENDOR_ID,
        }));
    }
    Ok(None)
}

/// The GID to use on a RoCE port: a RoCE v2 GID holding an IPv4-mapped address if there is one
/// (routable, what rxe and perftest use), else any RoCE v2 GID, else the first non-zero one.
fn pick_gid(ctx: &DeviceContext, port: u8, table_len: i32) -> Option<u32> {
    let mut best: Option<(u8, u32)> = None;
    for i in 0..table_len.max(0) as u32 {
        let Ok(gid) = query_gid(ctx, port, i) else {
            continue;
        };
        if gid == [0; 16] {
            continue;
        }
        let v2 = query_gid_type(ctx, port, i) == Some(sys::IBV_GID_TYPE_SYSFS_ROCE_V2);
        let rank = gid_rank(v2, ipv4_of(&gid).is_some());
        match best {
            Some((r, _)) if r >= rank => {}
            _ => best = Some((rank, i)),
        }
    }
    best.map(|(_, i)| i)
}

/// How much loco prefers a GID on a RoCE port: RoCE v2 over IPv4, then any RoCE v2, then the rest.
fn gid_rank(roce_v2: bool, ipv4: bool) -> u8 {
    match (roce_v2, ipv4) {
        (true, true) => 3,
        (true, false) => 2,
        _ => 1,
    }
}

/// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`).
fn ipv4_of(gid: &[u8; 16]) -> Option<std::net::Ipv4Addr> {
    (gid[..10] == [0; 10] && gid[10..12] == [0xff, 0xff])
        .then(|| std::net::Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15]))
}

fn query_device(ctx: &DeviceContext) -> io::Result<DeviceLimits> {
    let mut attr = MaybeUninit::<sys::ibv_device_attr>::zeroed();
    // SAFETY: the context pointer is valid while `ctx` lives (it is borrowed for the call), and
    // `attr` is a writable `ibv_device_attr` that the call fills in.
    let ret = unsafe { sys::ibv_query_device(ctx.context().as_ptr(), attr.as_mut_ptr()) };
    if ret != 0 {
        return Err(io::Error::from_raw_os_error(ret));
    }
    // SAFETY: zero-initialised plain-old-data (integers and arrays), filled in by the call.
    let a = unsafe { attr.assume_init() };
    Ok(DeviceLimits {
        ports: a.phys_port_cnt,
        max_qp_wr: a.max_qp_wr,
        max_cqe: a.max_cqe,
        max_qp_rd_atom: a.max_qp_rd_atom,
        max_qp_init_rd_atom: a.max_qp_init_rd_atom,
        atomic_cap: a.atomic_cap,
        vendor_id: a.vendor_id,
    })
}

fn query_port(ctx: &DeviceContext, port: u8) -> io::Result<PortInfo> {
    let mut attr = MaybeUninit::<sys::ibv_port_attr>::zeroed();
    // SAFETY: valid context (borrowed), writable `ibv_port_attr` of the size the call is told.
    let ret = unsafe { sys::ibv_query_port(ctx.context().as_ptr(), port, attr.as_mut_ptr()) };
    if ret != 0 {
        return Err(io::Error::from_raw_os_error(ret));
    }
    // SAFETY: zero-initialised plain-old-data, filled in by the call.
    let a = unsafe { attr.assume_init() };
    Ok(PortInfo {
        state: a.state,
        active_mtu: a.active_mtu,
        max_mtu: a.max_mtu,
        gid_tbl_len: a.gid_tbl_len,
        lid: a.lid,
        link_layer: a.link_layer,
    })
}

fn query_gid(ctx: &DeviceContext, port: u8, index: u32) -> io::Result<[u8; 16]> {
    let mut gid = sys::ibv_gid { raw: [0; 16] };
    let index = i32::try_from(index).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: valid context (borrowed); `gid` is a writable 16-byte `ibv_gid`.
    let ret = unsafe { sys::ibv_query_gid(ctx.context().as_ptr(), port, index, &mut gid) };
    if ret != 0 {
        // ibv_query_gid returns -1 and sets errno.
        return Err(io::Error::last_os_error());
    }
    // SAFETY: every bit pattern of the union is a valid `[u8; 16]`.
    Ok(unsafe { gid.raw })
}

fn query_gid_type(ctx: &DeviceContext, port: u8, index: u32) -> Option<u32> {
    let mut ty: sys::ibv_gid_type_sysfs = 0;
    // SAFETY: valid context (borrowed); `ty` is a writable integer.
    let ret = unsafe { sys::ibv_query_gid_type(ctx.context().as_ptr(), port, index, &mut ty) };
    (ret == 0).then_some(ty)
}

fn os_error(what: String, source: io::Error) -> Error {
    Error::Backend {
        backend: "verbs",
        message: format!("{what} failed"),
        source: Some(source),
    }
}

/// What [`inventory`] finds about one RDMA device (what `ibv_devinfo -v` prints, the parts loco
/// needs). For diagnostics (`loco doctor`); [`crate::ClusterBuilder::verbs`] picks a device by
/// itself.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DeviceReport {
    /// The device's name (`rxe0`, `mlx5_0`).
    pub name: String,
    /// Soft-RoCE (the kernel's rdma_rxe driver).
    pub soft_roce: bool,
    /// Remote atomics: `IBV_ATOMIC_NONE` (0), `_HCA` (1) or `_GLOB` (2).
    pub atomic_cap: u32,
    /// Outstanding RDMA READs and atomics a queue pair may serve (`max_qp_rd_atom`).
    pub max_qp_rd_atom: i32,
    /// Outstanding RDMA READs and atomics a queue pair may initiate (`max_qp_init_rd_atom`).
    pub max_qp_init_rd_atom: i32,
    /// Its ports, from 1.
    pub ports: Vec<PortReport>,
    /// Why the device or its attributes could not be read (then `ports` is empty).
    pub error: Option<String>,
}

/// One port of a [`DeviceReport`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PortReport {
    /// Port number, from 1.
    pub port: u8,
    /// `IBV_PORT_ACTIVE` (4) is the only state that carries traffic.
    pub state: u32,
    /// `IBV_LINK_LAYER_INFINIBAND` (1) or `_ETHERNET` (2, RoCE).
    pub link_layer: u8,
    /// Active and largest MTU in bytes (0 for a code the device should not report).
    pub active_mtu: u32,
    /// See `active_mtu`.
    pub max_mtu: u32,
    /// The non-empty entries of the GID table.
    pub gids: Vec<GidReport>,
    /// The port's GID table length.
    pub gid_table_len: u32,
}

/// One non-empty GID table entry.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GidReport {
    /// Its index (`LOCO_GID_INDEX`).
    pub index: u32,
    /// The GID.
    pub gid: [u8; 16],
    /// RoCE v2 (routable over UDP/IP; what loco and perftest pick on Ethernet).
    pub roce_v2: bool,
    /// The IPv4 address of an IPv4-mapped GID.
    pub ipv4: Option<std::net::Ipv4Addr>,
    /// The network interface it belongs to, from sysfs (RoCE).
    pub netdev: Option<String>,
}

impl PortReport {
    /// The state's name as `ibv_devinfo` prints it.
    pub fn state_name(&self) -> &'static str {
        match self.state {
            1 => "DOWN",
            2 => "INIT",
            3 => "ARMED",
            4 => "ACTIVE",
            5 => "ACTIVE_DEFER",
            _ => "NOP",
        }
    }

    /// Whether the port carries traffic.
    pub fn active(&self) -> bool {
        self.state == PORT_ACTIVE
    }

    /// Whether the port is Ethernet (RoCE), which needs a GID with an address.
    pub fn ethernet(&self) -> bool {
        self.link_layer == LINK_LAYER_ETHERNET
    }

    /// The GID index loco picks on this port when `LOCO_GID_INDEX` is not set (RoCE: a RoCE v2
    /// IPv4 entry first).
    pub fn best_gid(&self) -> Option<u32> {
        let rank = |g: &GidReport| gid_rank(g.roce_v2, g.ipv4.is_some());
        let mut best: Option<&GidReport> = None;
        for g in &self.gids {
            if best.is_none_or(|b| rank(g) > rank(b)) {
                best = Some(g);
            }
        }
        best.map(|g| g.index)
    }
}

/// Every RDMA device libibverbs lists, with its ports and GID tables. Fails only when the device
/// list cannot be read (no libibverbs, no kernel RDMA stack), with what to install.
pub fn inventory() -> Result<Vec<DeviceReport>> {
    Ok(device_list()?.iter().map(|dev| report(&dev)).collect())
}

fn report(dev: &sideway::ibverbs::device::Device<'_>) -> DeviceReport {
    let mut r = DeviceReport {
        name: dev.name(),
        soft_roce: false,
        atomic_cap: 0,
        max_qp_rd_atom: 0,
        max_qp_init_rd_atom: 0,
        ports: Vec::new(),
        error: None,
    };
    let ctx = match dev.open() {
        Ok(ctx) => ctx,
        Err(e) => {
            r.error = Some(format!("cannot open: {e} ({})", io::Error::last_os_error()));
            return r;
        }
    };
    let limits = match query_device(&ctx) {
        Ok(l) => l,
        Err(e) => {
            r.error = Some(format!("ibv_query_device: {e}"));
            return r;
        }
    };
    r.soft_roce = limits.vendor_id == RXE_VENDOR_ID;
    r.atomic_cap = limits.atomic_cap;
    r.max_qp_rd_atom = limits.max_qp_rd_atom;
    r.max_qp_init_rd_atom = limits.max_qp_init_rd_atom;
    for port in 1..=limits.ports {
        let mtu = |code: u32| {
            if (1..=5).contains(&code) {
                128 << code
            } else {
                0
            }
        };
        match query_port(&ctx, port) {
            Ok(info) => {
                let len = info.gid_tbl_len.max(0) as u32;
                let gids = (0..len)
                    .filter_map(|i| {
                        let gid = query_gid(&ctx, port, i).ok().filter(|g| *g != [0; 16])?;
                        Some(GidReport {
                            index: i,
                            gid,
                            roce_v2: query_gid_type(&ctx, port, i)
                                == Some(sys::IBV_GID_TYPE_SYSFS_ROCE_V2),
                            ipv4: ipv4_of(&gid),
                            netdev: std::fs::read_to_string(format!(
                                "/sys/class/infiniband/{}/ports/{port}/gid_attrs/ndevs/{i}",
                                r.name
                            ))
                            .ok()
                            .map(|s| s.trim().to_string())
                            .filter(|s| !s.is_empty()),
                        })
                    })
                    .collect();
                r.ports.push(PortReport {
                    port,
                    state: info.state,
                    link_layer: info.link_layer,
                    active_mtu: mtu(info.active_mtu),
                    max_mtu: mtu(info.max_mtu),
                    gids,
                    gid_table_len: len,
                });
            }
            Err(e) => r.error = Some(format!("ibv_query_port({port}): {e}")),
        }
    }
    r
}
