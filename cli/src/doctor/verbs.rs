//! The checks that need the verbs backend: libibverbs, devices, ports, GIDs, the device loco
//! would pick, the cluster key, and the loop-back smoke test.

use std::time::{Duration, Instant};

use loco_rdmawait::backend::verbs::{
    inventory, rdma_cm_available, DeviceReport, PortReport, VerbsConfig,
};
use loco_rdmawait::Bootstrap;
use loco_rdmawait::{Cluster, NodeId, WorkId};
use loco_rdmawaitrmw::Rmw;

use super::*;

const ADD_LINK: &str = "sudo modprobe rdma_rxe && sudo rdma link add rxe0 type rxe netdev";

pub(super) fn checks(args: &DoctorArgs, out: &mut Vec<Check>) -> Value {
    let devices = match inventory() {
        Ok(d) => d,
        Err(e) => {
            let msg = e.to_string();
            let fix = if msg.contains("could not be loaded") {
                "sudo apt install libibverbs1 ibverbs-providers rdma-core (Debian/Ubuntu), then \
                 run loco doctor again"
                    .to_string()
            } else {
                add_link_fix()
            };
            out.push(check("libibverbs", Status::Fail, msg).fix(fix));
            return json!([]);
        }
    };
    let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
    out.push(check(
        "libibverbs",
        Status::Pass,
        format!("loaded; devices: {}", list(&names)),
    ));
    out.push(rxe_check(&devices));
    if devices.is_empty() {
        out.push(
            check(
                "devices",
                Status::Fail,
                "no RDMA device: libibverbs lists none",
            )
            .fix(add_link_fix()),
        );
        return json!([]);
    }
    for d in &devices {
        out.push(device_check(d));
        for p in &d.ports {
            out.push(port_check(d, p));
            if p.active() && p.ethernet() {
                out.push(gid_check(d, p));
            }
        }
    }
    let selected = selected_check(out);
    if let (Some(cfg), false) = (selected, args.no_smoke) {
        out.push(smoke(cfg));
    }
    json!(devices.iter().map(device_json).collect::<Vec<_>>())
}

/// With `LOCO_BOOTSTRAP=rdma_cm`: librdmacm and the kernel's connection manager usable, and
/// no peer on a loopback address (rdma_cm cannot route there). `None` for the TCP bootstrap.
pub(super) fn bootstrap_check(peers: &[String]) -> Option<Check> {
    let name = "bootstrap";
    let v = std::env::var("LOCO_BOOTSTRAP").ok()?;
    let b: Bootstrap = match v.parse() {
        Ok(b) => b,
        Err(e) => {
            return Some(check(name, Status::Fail, e).fix("LOCO_BOOTSTRAP=tcp or rdma_cm"));
        }
    };
    if b != Bootstrap::RdmaCm {
        return Some(check(name, Status::Pass, format!("LOCO_BOOTSTRAP={b}")));
    }
    if let Err(e) = rdma_cm_available() {
        return Some(
            check(
                name,
                Status::Fail,
                format!("LOCO_BOOTSTRAP=rdma_cm, but {e}"),
            )
            .fix(
                "sudo apt install librdmacm1 (Debian/Ubuntu) and sudo modprobe rdma_ucm, or \
             LOCO_BOOTSTRAP=tcp",
            ),
        );
    }
    let loopback: Vec<&str> = peers
        .iter()
        .filter(|p| {
            p.to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .is_some_and(|a| a.ip().is_loopback() || a.ip().is_unspecified())
        })
        .map(String::as_str)
        .collect();
    if !loopback.is_empty() {
        return Some(
            check(
                name,
                Status::Fail,
                format!(
                    "LOCO_BOOTSTRAP=rdma_cm with peers on loopback or wildcard addresses: {}",
                    loopback.join(", ")
                ),
            )
            .fix(format!(
                "list the address of the interface the RDMA device runs over ({}), or \
                 LOCO_BOOTSTRAP=tcp",
                rdma_addresses()
            )),
        );
    }
    Some(check(
        name,
        Status::Pass,
        "LOCO_BOOTSTRAP=rdma_cm: librdmacm loaded, the connection manager answers",
    ))
}

/// The IPv4 addresses RDMA devices' ports carry (from their RoCE GIDs), as `netdev a.b.c.d`
/// items, for advice.
fn rdma_addresses() -> String {
    let mut found: Vec<String> = inventory()
        .unwrap_or_default()
        .iter()
        .flat_map(|d| d.ports.iter())
        .flat_map(|p| p.gids.iter())
        .filter_map(|g| {
            g.ipv4
                .map(|ip| format!("{} {ip}", g.netdev.as_deref().unwrap_or("?")))
        })
        .collect();
    found.sort();
    found.dedup();
    if found.is_empty() {
        "no RDMA device has an IPv4 address yet".to_string()
    } else {
        format!("here: {}", found.join(", "))
    }
}

fn list(names: &[&str]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// The first network interface that is up, other than loopback (for `rdma link add`).
fn an_interface() -> String {
    let Ok(dir) = std::fs::read_dir("/sys/class/net") else {
        return "<interface>".to_string();
    };
    let mut up: Vec<String> = dir
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lo")
        .filter(|n| {
            std::fs::read_to_string(format!("/sys/class/net/{n}/operstate"))
                .is_ok_and(|s| s.trim() == "up")
        })
        .collect();
    up.sort();
    up.into_iter()
        .next()
        .unwrap_or_else(|| "<interface>".to_string())
}

fn add_link_fix() -> String {
    match rxe_module() {
        RxeModule::Missing(release) => format!(
            "this kernel ({release}) has no rdma_rxe module: install it (Ubuntu: `sudo apt \
             install linux-modules-extra-{release}`), use an RDMA NIC, or run inside the \
             project's VM: soft-roce-ci/vm.sh -- <command>"
        ),
        _ => format!("{ADD_LINK} {}", an_interface()),
    }
}

enum RxeModule {
    Loaded,
    Available,
    Missing(String),
}

fn rxe_module() -> RxeModule {
    if std::path::Path::new("/sys/module/rdma_rxe").exists() {
        return RxeModule::Loaded;
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let base = format!("/lib/modules/{release}");
    let dir = format!("{base}/kernel/drivers/infiniband/sw/rxe");
    let file = ["ko", "ko.xz", "ko.zst", "ko.gz"]
        .iter()
        .any(|ext| std::path::Path::new(&format!("{dir}/rdma_rxe.{ext}")).exists());
    let builtin = std::fs::read_to_string(format!("{base}/modules.builtin"))
        .is_ok_and(|s| s.contains("/rdma_rxe.ko"));
    if file || builtin {
        RxeModule::Available
    } else {
        RxeModule::Missing(release)
    }
}

fn rxe_check(devices: &[DeviceReport]) -> Check {
    let rxe: Vec<&str> = devices
        .iter()
        .filter(|d| d.soft_roce)
        .map(|d| d.name.as_str())
        .collect();
    let hw = devices.iter().any(|d| !d.soft_roce);
    match (rxe_module(), rxe.is_empty()) {
        (_, false) => check(
            "rdma_rxe",
            Status::Pass,
            format!("Soft-RoCE device(s): {}", rxe.join(", ")),
        ),
        (_, true) if hw => check(
            "rdma_rxe",
            Status::Pass,
            "not needed: a hardware RDMA device is there",
        ),
        (RxeModule::Loaded, true) => check(
            "rdma_rxe",
            Status::Warn,
            "loaded, but no Soft-RoCE link is configured",
        )
        .fix(format!(
            "sudo rdma link add rxe0 type rxe netdev {}",
            an_interface()
        )),
        (RxeModule::Available, true) => check(
            "rdma_rxe",
            Status::Warn,
            "available, not loaded: Soft-RoCE gives RDMA over any Ethernet interface",
        )
        .fix(add_link_fix()),
        (RxeModule::Missing(r), true) => check(
            "rdma_rxe",
            Status::Warn,
            format!("this kernel ({r}) has no rdma_rxe module"),
        )
        .fix(add_link_fix()),
    }
}

fn atomic_cap(cap: u32) -> &'static str {
    match cap {
        0 => "NONE",
        1 => "HCA",
        2 => "GLOB",
        _ => "unknown",
    }
}

fn device_check(d: &DeviceReport) -> Check {
    let name = format!("device {}", d.name);
    if let Some(e) = &d.error {
        return check(name, Status::Fail, e.clone())
            .fix("check the device's permissions (/dev/infiniband/uverbs*) and `dmesg`");
    }
    let kind = if d.soft_roce { "Soft-RoCE" } else { "hardware" };
    let what = format!(
        "{kind}, atomic_cap {}, max_qp_rd_atom {}, max_qp_init_rd_atom {}",
        atomic_cap(d.atomic_cap),
        d.max_qp_rd_atom,
        d.max_qp_init_rd_atom
    );
    if d.atomic_cap == 0 {
        check(
            name,
            Status::Fail,
            format!("{what}: no remote atomics, which rcas/rfaa (and every lock) need"),
        )
        .fix("use another device (LOCO_RDMA_DEVICE=<name>)")
    } else if d.max_qp_rd_atom < 1 || d.max_qp_init_rd_atom < 1 {
        check(
            name,
            Status::Fail,
            format!("{what}: no outstanding reads or atomics allowed"),
        )
        .fix("use another device (LOCO_RDMA_DEVICE=<name>)")
    } else {
        match fence_read(d.soft_roce) {
            Ok(fence) => check(name, Status::Pass, format!("{what}, {fence}")),
            Err(e) => check(name, Status::Fail, format!("{what}: {e}"))
                .fix("LOCO_FENCE_READ=get or LOCO_FENCE_READ=cas, or unset it"),
        }
    }
}

/// How global fences will read on this device (docs/model.md §5.2): `LOCO_FENCE_READ`, else a
/// CAS on Soft-RoCE and a get elsewhere, as the verbs backend decides.
fn fence_read(soft_roce: bool) -> Result<String, String> {
    match std::env::var("LOCO_FENCE_READ") {
        Ok(v) => match loco_rdmawait::FenceRead::by_name(v.trim()) {
            Some(f) => Ok(format!("fences read with a {} (LOCO_FENCE_READ)", f.name())),
            None => Err(format!("LOCO_FENCE_READ is `{v}`, neither `get` nor `cas`")),
        },
        Err(_) if soft_roce => {
            Ok("fences read with a cas (Soft-RoCE: its reads are slower than atomics)".into())
        }
        Err(_) => Ok("fences read with a get".into()),
    }
}

/// The network interface of a port, from its GIDs.
fn netdev(p: &PortReport) -> Option<&str> {
    p.gids.iter().find_map(|g| g.netdev.as_deref())
}

fn port_check(d: &DeviceReport, p: &PortReport) -> Check {
    let name = format!("port {}/{}", d.name, p.port);
    let layer = if p.ethernet() {
        "Ethernet (RoCE)"
    } else {
        "InfiniBand"
    };
    let what = format!(
        "{}, {layer}, MTU {} of {}",
        p.state_name(),
        p.active_mtu,
        p.max_mtu
    );
    let iface = netdev(p).unwrap_or("<interface>");
    if !p.active() {
        let fix = if p.ethernet() {
            format!("sudo ip link set {iface} up (the port follows its network interface)")
        } else {
            "check the cable and that a subnet manager runs (`sudo systemctl start opensm`)"
                .to_string()
        };
        return check(name, Status::Fail, format!("{what}: not active")).fix(fix);
    }
    if p.active_mtu < p.max_mtu && p.ethernet() {
        let fix = format!(
            "RoCE's MTU follows the interface's: `sudo ip link set {iface} mtu {}` (on every \
             host of the fabric)",
            p.max_mtu + 200
        );
        return check(
            name,
            Status::Warn,
            format!("{what}: larger transfers are split into smaller packets"),
        )
        .fix(fix);
    }
    check(name, Status::Pass, what)
}

fn gid_check(d: &DeviceReport, p: &PortReport) -> Check {
    let name = format!("gid {}/{}", d.name, p.port);
    let iface = netdev(p).unwrap_or("<interface>");
    // What loco picks without LOCO_GID_INDEX (a RoCE v2 IPv4 entry first).
    let best = p
        .best_gid()
        .and_then(|i| p.gids.iter().find(|g| g.index == i));
    let describe = |g: &loco_rdmawait::backend::verbs::GidReport| {
        format!(
            "index {} ({}{}{})",
            g.index,
            if g.roce_v2 { "RoCE v2" } else { "RoCE v1" },
            g.ipv4.map(|a| format!(", {a}")).unwrap_or_default(),
            g.netdev
                .as_deref()
                .map(|n| format!(", {n}"))
                .unwrap_or_default()
        )
    };
    let env = std::env::var("LOCO_GID_INDEX").ok();
    if let Some(v) = env {
        let Ok(i) = v.trim().parse::<u32>() else {
            return check(
                name,
                Status::Fail,
                format!("LOCO_GID_INDEX={v} is not a number"),
            )
            .fix(best.map_or("unset LOCO_GID_INDEX".to_string(), |g| {
                format!("export LOCO_GID_INDEX={}", g.index)
            }));
        };
        let fix = best.map_or("unset LOCO_GID_INDEX".to_string(), |g| {
            format!(
                "export LOCO_GID_INDEX={} (or unset it: loco picks it)",
                g.index
            )
        });
        return match p.gids.iter().find(|g| g.index == i) {
            None => check(
                name,
                Status::Fail,
                format!(
                    "LOCO_GID_INDEX={i} points at an empty entry (table of {}; non-empty: {})",
                    p.gid_table_len,
                    p.gids
                        .iter()
                        .map(|g| g.index.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
            .fix(fix),
            Some(g) if !(g.roce_v2 && g.ipv4.is_some()) && best.is_some_and(|b| b.index != i) => {
                check(
                    name,
                    Status::Warn,
                    format!(
                        "LOCO_GID_INDEX={i} is {}, not RoCE v2 over IPv4: peers that use v2 \
                         will not reach it",
                        describe(g)
                    ),
                )
                .fix(fix)
            }
            Some(g) => check(
                name,
                Status::Pass,
                format!("LOCO_GID_INDEX={i}: {}", describe(g)),
            ),
        };
    }
    match best {
        Some(g) if g.roce_v2 && g.ipv4.is_some() => check(
            name,
            Status::Pass,
            format!("RoCE v2 over IPv4 at {}", describe(g)),
        ),
        Some(g) => check(
            name,
            Status::Warn,
            format!("no RoCE v2 IPv4 entry; loco would use {}", describe(g)),
        )
        .fix(format!(
            "give {iface} an IPv4 address: sudo ip addr add <address>/<prefix> dev {iface}"
        )),
        None => check(
            name,
            Status::Fail,
            "the GID table is empty: RoCE needs an IP address on the interface",
        )
        .fix(format!("sudo ip addr add <address>/<prefix> dev {iface}")),
    }
}

/// The device, port and GID a cluster would use (LOCO_RDMA_DEVICE, LOCO_RDMA_PORT,
/// LOCO_GID_INDEX), as a single-process configuration for the smoke test.
fn selected_check(out: &mut Vec<Check>) -> Option<VerbsConfig> {
    let name = "selected";
    let cfg = match local_config() {
        Ok(c) => c,
        Err(e) => {
            out.push(
                check(name, Status::Fail, e)
                    .fix("fix or unset LOCO_RDMA_DEVICE, LOCO_RDMA_PORT and LOCO_GID_INDEX"),
            );
            return None;
        }
    };
    match cfg.selected() {
        Ok(s) => {
            out.push(check(
                name,
                Status::Pass,
                format!(
                    "loco uses {} port {}{}",
                    s.device,
                    s.port,
                    s.gid_index
                        .map(|i| format!(" GID index {i}"))
                        .unwrap_or_default()
                ),
            ));
            Some(cfg)
        }
        Err(e) => {
            out.push(check(name, Status::Fail, e.to_string()).fix(
                "see the failed checks above; LOCO_RDMA_DEVICE / LOCO_RDMA_PORT / \
                 LOCO_GID_INDEX choose another device, port or GID",
            ));
            None
        }
    }
}

fn local_config() -> Result<VerbsConfig, String> {
    fn var<T: std::str::FromStr>(name: &str) -> Result<Option<T>, String> {
        match std::env::var(name) {
            Ok(v) => v
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| format!("{name}={v} does not parse")),
            Err(_) => Ok(None),
        }
    }
    let mut c = VerbsConfig::new();
    if let Ok(d) = std::env::var("LOCO_RDMA_DEVICE") {
        c = c.device(d);
    }
    if let Some(p) = var::<u8>("LOCO_RDMA_PORT")? {
        c = c.port(p);
    }
    if let Some(g) = var::<u32>("LOCO_GID_INDEX")? {
        c = c.gid_index(g);
    }
    Ok(c)
}

/// One put, get, rfaa and rcas between two nodes of an in-process cluster on the device.
fn smoke(cfg: VerbsConfig) -> Check {
    let name = "smoke test";
    let start = Instant::now();
    let r = (|| -> Result<(), Box<dyn std::error::Error>> {
        const D: WorkId = WorkId::new(1);
        let c = Cluster::builder()
            .nodes(2)
            .memory_per_node(4096)
            .timeout(Duration::from_secs(5))
            .verbs(cfg)
            .build()?;
        let (a, b) = (c.alloc_word(NodeId(0))?, c.alloc_word(NodeId(0))?);
        let x = c.alloc_word(NodeId(1))?;
        let ctx = c.context(NodeId(0))?;
        ctx.store(&a, 5)?;
        ctx.put(&x, &a, D)?;
        ctx.wait(D)?;
        ctx.get(&b, &x, D)?;
        ctx.wait(D)?;
        expect("get after put", ctx.load(&b)?, 5)?;
        ctx.rfaa(&x, 2, &b, D)?;
        ctx.wait(D)?;
        expect("rfaa's old value", ctx.load(&b)?, 5)?;
        ctx.rcas(&x, 7, 9, &b, D)?;
        ctx.wait(D)?;
        expect("rcas's old value", ctx.load(&b)?, 7)?;
        ctx.get(&b, &x, D)?;
        ctx.wait(D)?;
        expect("the word after rcas", ctx.load(&b)?, 9)?;
        Ok(())
    })();
    match r {
        Ok(()) => check(
            name,
            Status::Pass,
            format!(
                "put, get, rfaa and rcas between two nodes on the device in {:.1?}",
                start.elapsed()
            ),
        ),
        Err(e) => check(name, Status::Fail, e.to_string())
            .fix("see the failed checks above; RUST_LOG=loco=debug shows what the backend did"),
    }
}

fn expect(what: &str, got: u64, want: u64) -> Result<(), Box<dyn std::error::Error>> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: read {got}, expected {want}").into())
    }
}

pub(super) fn key_check(peers: &[String]) -> Check {
    let name = "cluster key";
    match VerbsConfig::from_env() {
        // A key that does not parse.
        Err(e) if e.to_string().contains("LOCO_CLUSTER_KEY") => {
            check(name, Status::Fail, e.to_string())
                .fix("export LOCO_CLUSTER_KEY=$(loco keygen), the same key on every node")
        }
        // Something else of the environment is refused (e.g. LOCO_PEERS without LOCO_NODE_ID,
        // as before a node's id is chosen): the cluster starts with that error; this check is
        // about the key.
        Err(_) => super::key_check_plain(peers),
        Ok(c) if c.has_cluster_key() => check(name, Status::Pass, "LOCO_CLUSTER_KEY is set"),
        Ok(c) if c.allows_no_key() => check(
            name,
            Status::Warn,
            "no key, LOCO_CLUSTER_INSECURE=1: anyone who reaches the rendezvous port can join",
        )
        .fix("export LOCO_CLUSTER_KEY=$(loco keygen), the same key on every node"),
        Ok(_) => super::no_key(peers),
    }
}

fn device_json(d: &DeviceReport) -> Value {
    json!({
        "name": d.name,
        "soft_roce": d.soft_roce,
        "atomic_cap": atomic_cap(d.atomic_cap),
        "max_qp_rd_atom": d.max_qp_rd_atom,
        "max_qp_init_rd_atom": d.max_qp_init_rd_atom,
        "error": d.error,
        "ports": d.ports.iter().map(|p| json!({
            "port": p.port,
            "state": p.state_name(),
            "link_layer": if p.ethernet() { "Ethernet" } else { "InfiniBand" },
            "active_mtu": p.active_mtu,
            "max_mtu": p.max_mtu,
            "best_gid": p.best_gid(),
            "gids": p.gids.iter().map(|g| json!({
                "index": g.index,
                "gid": g.gid.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1]))
                    .collect::<Vec<_>>().join(":"),
                "roce_v2": g.roce_v2,
                "ipv4": g.ipv4.map(|a| a.to_string()),
                "netdev": g.netdev,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}
