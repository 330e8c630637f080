//! `loco bench ops --vs-perftest`: perftest and loco on the same device, in alternating rounds.
//! In a cluster of two processes (`LOCO_NODE_ID`), across their two hosts instead ([`across`]).
//!
//! perftest (`ib_write_lat`, `ib_read_lat`, `ib_atomic_lat`, `ib_write_bw`, `ib_read_bw`) runs
//! as a loop-back, server and client on this host's device, as soft-roce-ci/bench-perftest.sh
//! runs it: `-d DEV -x GID_INDEX -F -n ITERS -p PORT`, the client towards the IPv4 address of
//! the device's GID (127.0.0.1 if the GID is not IPv4-mapped), the server awaited on its TCP
//! port, a run that fails or prints `inf` (TSC calibration failed under emulation) retried
//! up to three times, each run on a new port.
//!
//! Under qemu absolute latencies swing from run to run, so each of `--rounds` rounds runs
//! perftest, then loco, per comparison (ABAB...), and the result is the median of the
//! per-round ratios with their min and max. Latencies compare full round trips and medians:
//! `ib_write_lat` reports half a round trip (a ping-pong of writes), so its `t_typical` is
//! doubled; `ib_read_lat` and `ib_atomic_lat` report whole round trips, as loco's op + wait is.
//! Bandwidth compares loco's MiB/s with perftest's `BW average[MB/sec]` (perftest's MB are
//! 2^20 bytes), perftest with `-t` (its tx depth) set to loco's outstanding count.
//!
//! Both sides run alike. Each round of either is a process of its own ([`loco_round`]: where
//! a process's memory lands, and what the emulator has translated of it, then weigh on both),
//! and both are pinned the same way where the host allows it ([`Pinning`]): perftest's server
//! on the first CPU, its client on the second (`taskset -c`), and loco's round on the client's
//! CPU (loco's target node needs no thread: RDMA does not involve its CPU), so that neither
//! side gains from the scheduler moving it around.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::ops::{Config, OpArg, OpsArgs};

mod across;

/// Runs of one perftest test before giving up.
const ATTEMPTS: usize = 4;
/// The longest a perftest client or server may run.
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
/// perftest's default port; each run takes the next one.
const FIRST_PORT: u16 = 18515;

/// What a comparison measures.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// Latency: loco's p50 over perftest's `t_typical` (times `factor`, 2 for ib_write_lat).
    Lat { factor: f64 },
    /// Bandwidth: loco's MiB/s over perftest's average MB/s.
    Bw,
}

/// Where perftest's processes and loco's rounds run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Pinning {
    /// perftest's server.
    server: usize,
    /// perftest's client, and loco's rounds.
    client: usize,
}

impl Pinning {
    /// The first two CPUs this process may run on (one CPU: both sides on it); `None` if the
    /// CPUs cannot be listed or `taskset` is missing (then nothing is pinned).
    fn probe() -> Option<(Pinning, core_affinity::CoreId)> {
        let cores = core_affinity::get_core_ids()?;
        let server = *cores.first()?;
        let client = *cores.get(1).unwrap_or(&server);
        let taskset = Command::new("taskset")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        taskset.then_some((
            Pinning {
                server: server.id,
                client: client.id,
            },
            client,
        ))
    }
}

/// One loco configuration and the perftest test it is compared with.
struct Comparison {
    config: Config,
    tool: &'static str,
    extra: Vec<String>,
    kind: Kind,
}

/// The comparisons `args` asks for: latency at 8 bytes and 1 outstanding for every operation,
/// bandwidth of put and get at the largest size of `--sizes` at most 65536 (else the smallest)
/// with the largest `--outstanding`.
fn comparisons(args: &OpsArgs) -> Vec<Comparison> {
    let depth = args.outstanding.iter().copied().max().unwrap_or(1);
    let bw_size = args
        .sizes
        .iter()
        .copied()
        .filter(|&s| s <= 65536)
        .max()
        .or_else(|| args.sizes.iter().copied().min())
        .unwrap_or(65536);
    let lat = |op| Config {
        op,
        size: 8,
        outstanding: 1,
        batch: !args.no_batch,
    };
    let mut v = Vec::new();
    for &op in &args.op {
        let (tool, extra, factor): (_, &[&str], _) = match op {
            OpArg::Put => ("ib_write_lat", &["-s", "8"], 2.0),
            OpArg::Get => ("ib_read_lat", &["-s", "8"], 1.0),
            OpArg::Rfaa => ("ib_atomic_lat", &["-A", "FETCH_AND_ADD"], 1.0),
            OpArg::Rcas => ("ib_atomic_lat", &["-A", "CMP_AND_SWAP"], 1.0),
        };
        v.push(Comparison {
            config: lat(op),
            tool,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            kind: Kind::Lat { factor },
        });
    }
    for &op in &args.op {
        let tool = match op {
            OpArg::Put => "ib_write_bw",
            OpArg::Get => "ib_read_bw",
            _ => continue,
        };
        v.push(Comparison {
            config: Config {
                op,
                size: bw_size,
                outstanding: depth,
                batch: !args.no_batch,
            },
            tool,
            extra: vec![
                "-s".into(),
                bw_size.to_string(),
                "-t".into(),
                depth.to_string(),
            ],
            kind: Kind::Bw,
        });
    }
    v
}

/// Where perftest runs: device, GID index, and the server's address.
struct Target {
    device: String,
    gid_index: u32,
    server: String,
}

impl Target {
    fn from_env() -> Result<Target, String> {
        let device = std::env::var("LOCO_RDMA_DEVICE").unwrap_or_else(|_| "rxe0".into());
        let gid_index = match std::env::var("LOCO_GID_INDEX") {
            Ok(s) => s
                .parse()
                .map_err(|_| format!("LOCO_GID_INDEX={s}: expected a number"))?,
            Err(_) => 1,
        };
        if !Path::new("/sys/class/infiniband").join(&device).exists() {
            return Err(format!(
                "no RDMA device {device} for perftest (LOCO_RDMA_DEVICE names it; `loco doctor` \
                 lists the devices)"
            ));
        }
        let gid_file = format!("/sys/class/infiniband/{device}/ports/1/gids/{gid_index}");
        let gid = std::fs::read_to_string(&gid_file)
            .map_err(|e| format!("RDMA device {device}: cannot read {gid_file}: {e}"))?;
        Ok(Target {
            server: gid_ipv4(gid.trim()).unwrap_or_else(|| "127.0.0.1".into()),
            device,
            gid_index,
        })
    }
}

/// The IPv4 address of an IPv4-mapped GID (`0000:...:ffff:0a00:020f` is `10.0.2.15`).
fn gid_ipv4(gid: &str) -> Option<String> {
    let hex = gid
        .strip_prefix("0000:0000:0000:0000:0000:ffff:")?
        .replace(':', "");
    if hex.len() != 8 {
        return None;
    }
    let b = u32::from_str_radix(&hex, 16).ok()?.to_be_bytes();
    Some(format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3]))
}

/// perftest's latency result: `t_avg` and `t_typical` (µs), as printed.
#[derive(Debug, PartialEq)]
pub(crate) struct Lat {
    pub(crate) t_avg: f64,
    pub(crate) t_typical: f64,
}

/// Parses a latency test's client output: the header naming `t_avg[usec]` and
/// `t_typical[usec]`, then the values at the same positions in the first row that starts with
/// a number (the columns before them have one-word names).
pub(crate) fn parse_lat(out: &str) -> Result<Lat, String> {
    if out.split_whitespace().any(|w| w == "inf") {
        return Err("perftest printed inf (TSC calibration failed)".into());
    }
    let mut cols = None;
    for line in out.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let (Some(avg), Some(typ)) = (
            words.iter().position(|w| w.starts_with("t_avg")),
            words.iter().position(|w| w.starts_with("t_typical")),
        ) {
            cols = Some((avg, typ));
            continue;
        }
        let Some((avg, typ)) = cols else { continue };
        if words.first().is_some_and(|w| w.parse::<u64>().is_ok()) {
            let at = |i: usize| -> Result<f64, String> {
                words
                    .get(i)
                    .and_then(|w| w.parse::<f64>().ok())
                    .ok_or_else(|| format!("no number in column {} of `{}`", i + 1, line.trim()))
            };
            return Ok(Lat {
                t_avg: at(avg)?,
                t_typical: at(typ)?,
            });
        }
    }
    Err("no t_avg/t_typical row in perftest's output".into())
}

/// Parses a bandwidth test's client output: the average MB/s of the first row of five numbers
/// under the `#bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]` header.
pub(crate) fn parse_bw(out: &str) -> Result<f64, String> {
    if out.split_whitespace().any(|w| w == "inf") {
        return Err("perftest printed inf".into());
    }
    let mut header = false;
    for line in out.lines() {
        if line.contains("BW average") {
            header = true;
            continue;
        }
        if !header {
            continue;
        }
        let nums: Vec<f64> = line
            .split_whitespace()
            .map_while(|w| w.parse::<f64>().ok())
            .collect();
        if nums.len() >= 5 {
            return Ok(nums[3]);
        }
    }
    Err("no BW average row in perftest's output".into())
}

/// Whether a TCP socket listens on `port` here, from /proc/net/tcp and tcp6 (a probe
/// connection would take the perftest server's only client).
fn listening(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .any(|f| std::fs::read_to_string(f).is_ok_and(|t| listens_in(&t, port)))
}

/// Whether a /proc/net/tcp table has a socket in state LISTEN (0A) on local `port`.
fn listens_in(table: &str, port: u16) -> bool {
    table.lines().skip(1).any(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.len() > 3
            && w[3] == "0A"
            && w[1]
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok())
                == Some(port)
    })
}

/// A command for `program`, run on CPU `cpu` (through `taskset -c`) if given.
fn pinned(program: &std::ffi::OsStr, cpu: Option<usize>) -> Command {
    match cpu {
        Some(cpu) => {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(cpu.to_string()).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// Starts one side of perftest test `tool` on `port`: the server (`peer` is `None`) or the
/// client towards `peer`, pinned to `cpu` if given, its output to `out`.
fn spawn(
    tool: &str,
    opts: &[String],
    port: u16,
    peer: Option<&str>,
    cpu: Option<usize>,
    out: Stdio,
) -> Result<Child, String> {
    let mut c = pinned(tool.as_ref(), cpu);
    c.args(opts).arg("-p").arg(port.to_string());
    if let Some(a) = peer {
        c.arg(a);
    }
    c.stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {tool} (is perftest installed?): {e}"))
}

/// Starts perftest's server for `tool` on `port` (pinned to `cpu`) and waits until it listens.
fn serve(tool: &str, opts: &[String], port: u16, cpu: Option<usize>) -> Result<Child, String> {
    let mut srv = spawn(tool, opts, port, None, cpu, Stdio::null())?;
    let start = Instant::now();
    while !listening(port) {
        if srv.try_wait().ok().flatten().is_some() || start.elapsed() > Duration::from_secs(30) {
            let _ = srv.kill();
            let _ = srv.wait();
            return Err(format!(
                "{tool} server did not start listening on port {port}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(srv)
}

/// Runs perftest's client for `tool` towards `server` (pinned to `cpu`); returns its output.
fn client(
    tool: &str,
    opts: &[String],
    port: u16,
    server: &str,
    cpu: Option<usize>,
) -> Result<String, String> {
    let file: PathBuf =
        std::env::temp_dir().join(format!("loco-perftest-{}-{port}.out", std::process::id()));
    output_of(tool, file, |out| {
        spawn(tool, opts, port, Some(server), cpu, out)
    })
}

/// What a process prints, run to its end ([`finish`]): `start` spawns it with the given
/// standard output, which goes to `file` (a file, not a pipe: nothing would read a pipe while
/// we wait), read back and removed.
fn output_of(
    what: &str,
    file: PathBuf,
    start: impl FnOnce(Stdio) -> Result<Child, String>,
) -> Result<String, String> {
    let out = std::fs::File::create(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let result = start(Stdio::from(out))
        .and_then(|c| finish(c, what))
        .and_then(|()| {
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))
        });
    let _ = std::fs::remove_file(&file);
    result
}

/// Runs perftest test `tool` once, server and client here (pinned as `pin` says); returns the
/// client's output.
fn run_once(
    tool: &str,
    opts: &[String],
    port: u16,
    server: &str,
    pin: Option<Pinning>,
) -> Result<String, String> {
    let srv = serve(tool, opts, port, pin.map(|p| p.server))?;
    let result = client(tool, opts, port, server, pin.map(|p| p.client));
    if finish(srv, tool).is_err() {
        // The server's own status does not matter once the client has its numbers.
    }
    result
}

/// Waits for a perftest process (killed after [`TOOL_TIMEOUT`]); an error unless it exits 0.
fn finish(mut c: Child, tool: &str) -> Result<(), String> {
    let start = Instant::now();
    loop {
        match c.try_wait() {
            Ok(Some(s)) if s.success() => return Ok(()),
            Ok(Some(s)) => return Err(format!("{tool} failed ({s})")),
            Ok(None) if start.elapsed() > TOOL_TIMEOUT => {
                let _ = c.kill();
                let _ = c.wait();
                return Err(format!("{tool} ran longer than {TOOL_TIMEOUT:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("{tool}: {e}")),
        }
    }
}

/// The median of `v` (not empty), and its min and max.
pub(crate) fn median_spread(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    (median, s[0], s[n - 1])
}

/// perftest's options for comparison `c` on `device`/`gid_index`.
fn options(c: &Comparison, device: &str, gid_index: u32, iters: usize) -> Vec<String> {
    let mut opts: Vec<String> = vec![
        "-d".into(),
        device.into(),
        "-x".into(),
        gid_index.to_string(),
        "-F".into(),
        "-n".into(),
        iters.to_string(),
    ];
    opts.extend(c.extra.iter().cloned());
    opts
}

/// The figure comparison `c` reads from a perftest client's output.
fn figure(c: &Comparison, out: &str) -> Result<f64, String> {
    match c.kind {
        Kind::Lat { factor } => parse_lat(out).map(|l| l.t_typical * factor),
        Kind::Bw => parse_bw(out),
    }
}

/// loco's figure of comparison `c` in a measured row, with the bare device calls' where the
/// row has them (`--vs-raw`, latencies).
#[cfg(feature = "verbs")]
fn ours(c: &Comparison, row: &crate::ops::Row) -> Ours {
    match c.kind {
        Kind::Lat { .. } => Ours {
            value: row.p50_us,
            bare: row.raw.map(|x| Bare {
                value: x.p50_us,
                loco_over_bare: x.ratio,
            }),
        },
        Kind::Bw => Ours {
            value: row.mib_per_sec.unwrap_or(0.0),
            bare: None,
        },
    }
}

/// What a round of loco measured: its figure and, for a latency, the bare device calls' on
/// the same queue pair in the same process (`--vs-raw`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Ours {
    value: f64,
    bare: Option<Bare>,
}

/// The bare device calls beside loco in one round: their p50 and the round's median over block
/// pairs of loco's p50 over theirs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Bare {
    value: f64,
    loco_over_bare: f64,
}

/// Whether loco's rounds of comparison `c` measure the bare calls too: latencies, where the
/// same queue pair can issue one request at a time bare.
fn with_bare(c: &Comparison) -> bool {
    matches!(c.kind, Kind::Lat { .. }) && c.config.outstanding == 1
}

/// One round of loco for comparison `c`, in a process of its own as each of perftest's rounds
/// is (`loco bench ops --backend verbs` with the comparison's configuration, `--json`),
/// pinned to `cpu` as perftest's client is: where a process's memory lands, and what the
/// emulator has cached of it, then weighs on both sides alike. Its figure: the p50 for a
/// latency, MiB/s for a bandwidth.
fn loco_round(
    exe: &std::path::Path,
    c: &Comparison,
    args: &OpsArgs,
    cpu: Option<usize>,
) -> Result<Ours, String> {
    let mut cmd = pinned(exe.as_os_str(), cpu);
    cmd.args([
        "bench",
        "ops",
        "--backend",
        "verbs",
        "--json",
        "--no-plot",
        "--op",
    ])
    .arg(c.config.op.name())
    .arg("--sizes")
    .arg(c.config.size.to_string())
    .arg("--outstanding")
    .arg(c.config.outstanding.to_string())
    .arg("--iters")
    .arg(args.iters.to_string())
    .arg("--warmup")
    .arg(args.warmup.to_string());
    if !c.config.batch {
        cmd.arg("--no-batch");
    }
    if with_bare(c) {
        cmd.arg("--vs-raw");
    }
    let file: PathBuf = std::env::temp_dir().join(format!("loco-round-{}.out", std::process::id()));
    let output = output_of("loco bench ops", file, |out| {
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))
    })?;
    let row: serde_json::Value = output
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .ok_or("loco bench ops printed no JSON line")?;
    let field = match c.kind {
        Kind::Lat { .. } => "p50_us",
        Kind::Bw => "mib_per_sec",
    };
    let value = row[field]
        .as_f64()
        .ok_or_else(|| format!("loco bench ops gave no {field}: {row}"))?;
    let bare = match (row["raw_p50_us"].as_f64(), row["vs_raw"].as_f64()) {
        (Some(value), Some(loco_over_bare)) if with_bare(c) => Some(Bare {
            value,
            loco_over_bare,
        }),
        _ => None,
    };
    Ok(Ours { value, bare })
}

/// One round's figures of one comparison: perftest's and loco's (with the bare calls').
#[derive(Clone, Copy, Debug)]
struct Seen {
    theirs: f64,
    ours: Ours,
}

impl Seen {
    /// loco's figure over perftest's.
    fn ratio(&self) -> f64 {
        self.ours.value / self.theirs
    }
}

/// The rounds: per round and comparison, perftest (`theirs(c, port, last)`: one run on a new
/// port, parsed; retried up to [`ATTEMPTS`] times, `last` on the final try), then loco
/// (`ours(c)`). Returns per comparison what each round saw.
fn rounds(
    args: &OpsArgs,
    cmps: &[Comparison],
    mut theirs: impl FnMut(&Comparison, u16, bool) -> Result<f64, String>,
    mut loco: impl FnMut(&Comparison) -> Result<Ours, String>,
) -> Result<Vec<Vec<Seen>>, String> {
    let bar = crate::bench::progress(cmps.len() * args.rounds);
    let mut port = FIRST_PORT;
    let mut seen: Vec<Vec<Seen>> = vec![Vec::new(); cmps.len()];
    for round in 0..args.rounds {
        for (i, c) in cmps.iter().enumerate() {
            bar.set_message(format!(
                "round {}: {} vs {}",
                round + 1,
                crate::ops::label(c.config),
                c.tool
            ));
            let mut errors = Vec::new();
            let mut value = None;
            for attempt in 0..ATTEMPTS {
                port = port.wrapping_add(1).max(FIRST_PORT);
                match theirs(c, port, attempt + 1 == ATTEMPTS) {
                    Ok(v) => {
                        value = Some(v);
                        break;
                    }
                    Err(e) => errors.push(e),
                }
            }
            let theirs = value.ok_or_else(|| {
                format!(
                    "{} gave no number in {ATTEMPTS} runs: {}",
                    c.tool,
                    errors.join("; ")
                )
            })?;
            let ours = loco(c)?;
            seen[i].push(Seen { theirs, ours });
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok(seen)
}

/// Prints the comparison: a table and `footer`, or with `--json` one object per comparison
/// (`placement` describes where the two sides ran).
fn report(
    args: &OpsArgs,
    cmps: &[Comparison],
    seen: &[Vec<Seen>],
    placement: serde_json::Value,
    footer: &str,
) {
    let mut table = String::new();
    let _ = writeln!(
        table,
        "{:<18} {:<22} {:>15} {:>15} {:>7} {:>11} {:>18}",
        "loco", "perftest", "perftest", "loco", "ratio", "(min-max)", "loco/bare (min-max)"
    );
    for (c, s) in cmps.iter().zip(seen) {
        let (ratio, lo, hi) = median_spread(&s.iter().map(Seen::ratio).collect::<Vec<_>>());
        let (theirs, ..) = median_spread(&s.iter().map(|x| x.theirs).collect::<Vec<_>>());
        let (ours, ..) = median_spread(&s.iter().map(|x| x.ours.value).collect::<Vec<_>>());
        // The bare calls' figures, if every round has them.
        let bares: Option<Vec<Bare>> = s.iter().map(|x| x.ours.bare).collect();
        let bare = bares.filter(|b| !b.is_empty()).map(|b| {
            let (value, ..) = median_spread(&b.iter().map(|x| x.value).collect::<Vec<_>>());
            let own = median_spread(&b.iter().map(|x| x.loco_over_bare).collect::<Vec<_>>());
            let vs_perftest = median_spread(
                &s.iter()
                    .zip(&b)
                    .map(|(x, b)| b.value / x.theirs)
                    .collect::<Vec<_>>(),
            );
            (value, own, vs_perftest)
        });
        let (tool, unit) = match c.kind {
            Kind::Lat { factor } if factor != 1.0 => (format!("{} x{factor}", c.tool), "us"),
            Kind::Lat { .. } => (c.tool.to_string(), "us"),
            Kind::Bw => (format!("{} -s {}", c.tool, c.config.size), "MiB/s"),
        };
        if args.json {
            let mut row = json!({
                "op": c.config.op.name(),
                "backend": "verbs",
                "profile": null,
                "size": c.config.size,
                "outstanding": c.config.outstanding,
                "metric": if c.kind == Kind::Bw { "mib_per_sec" } else { "p50_us" },
                "perftest": c.tool,
                "perftest_value": theirs,
                "loco_value": ours,
                "rounds": args.rounds,
                "ratio_median": ratio,
                "ratio_min": lo,
                "ratio_max": hi,
                "bare_value": bare.map(|b| b.0),
                "loco_vs_bare_median": bare.map(|b| b.1 .0),
                "loco_vs_bare_min": bare.map(|b| b.1 .1),
                "loco_vs_bare_max": bare.map(|b| b.1 .2),
                "bare_vs_perftest_median": bare.map(|b| b.2 .0),
                "bare_vs_perftest_min": bare.map(|b| b.2 .1),
                "bare_vs_perftest_max": bare.map(|b| b.2 .2),
            });
            if let (Some(row), Some(extra)) = (row.as_object_mut(), placement.as_object()) {
                row.extend(extra.clone());
            }
            crate::ops::out(&row.to_string());
        }
        let _ = writeln!(
            table,
            "{:<18} {:<22} {:>15} {:>15} {:>7.2} {:>11} {:>18}",
            crate::ops::label(c.config),
            tool,
            format!("{theirs:.2} {unit}"),
            format!("{ours:.2} {unit}"),
            ratio,
            format!("{lo:.2}-{hi:.2}"),
            bare.map_or("-".into(), |(_, (m, l, h), _)| format!(
                "{m:.3} ({l:.3}-{h:.3})"
            ))
        );
    }
    if seen.iter().any(|s| s.iter().any(|x| x.ours.bare.is_some())) {
        let _ = writeln!(
            table,
            "loco/bare: loco's post + wait over the same request issued with ibv_post_send and \
             ibv_poll_cq only, on the same queue pair in the same process, in alternating blocks \
             (bench ops --vs-raw): the cost of loco's own path, free of the host's swings \
             between rounds"
        );
    }
    if !args.json {
        crate::ops::out(table.trim_end());
        crate::ops::out(footer);
    }
}

/// What every footer says about the figures.
fn method(args: &OpsArgs) -> String {
    format!(
        "{} rounds of perftest then loco, {} iterations each; latency: loco p50 / perftest \
         t_typical, full round trips (ib_write_lat's half round trip doubled); bandwidth: loco / \
         perftest; values are medians over the rounds, ratio = median of the per-round ratios",
        args.rounds, args.iters
    )
}

/// Runs `loco bench ops --backend verbs --vs-perftest`: on this host's device (loop-backs), or,
/// in a cluster of two processes (`LOCO_NODE_ID`, `LOCO_PEERS`), across their hosts
/// ([`across`]).
pub(crate) fn compare(args: &OpsArgs) -> Result<(), String> {
    if std::env::var_os("LOCO_NODE_ID").is_some() {
        return across::compare(args);
    }
    // The device works for loco before perftest is run against it (a clear error if not: no
    // device, or a loco built without the verbs backend), and before its GID is looked up.
    drop(crate::bench::verbs_single(2, 4096)?);
    let target = Target::from_env()?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find loco's binary: {e}"))?;
    let cmps = comparisons(args);
    let pin = Pinning::probe().map(|(p, _)| p);
    let seen = rounds(
        args,
        &cmps,
        |c, port, _| {
            let opts = options(c, &target.device, target.gid_index, args.iters);
            run_once(c.tool, &opts, port, &target.server, pin).and_then(|out| figure(c, &out))
        },
        |c| loco_round(&exe, c, args, pin.map(|p| p.client)),
    )?;
    let placement = json!({
        "placement": "loopback",
        "pinned": pin.map(|p| json!({"perftest_server_cpu": p.server, "client_cpu": p.client})),
    });
    let footer = format!(
        "device {} (GID index {}), {}; {}",
        target.device,
        target.gid_index,
        method(args),
        match pin {
            Some(p) => format!(
                "pinned: perftest's server on CPU {}, its client and loco's rounds \
                 on CPU {}",
                p.server, p.client
            ),
            None => "not pinned (no CPU list or no taskset)".into(),
        }
    );
    report(args, &cmps, &seen, placement, &footer);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinning_takes_two_cpus_this_process_may_use() {
        let Some((p, core)) = Pinning::probe() else {
            return; // no CPU list or no taskset here: nothing is pinned, nothing to check
        };
        let cpus = core_affinity::get_core_ids().unwrap();
        assert!(cpus.iter().any(|c| c.id == p.server), "{p:?}");
        assert_eq!(core.id, p.client);
        assert_eq!(p.server == p.client, cpus.len() == 1, "{p:?} of {cpus:?}");
    }

    // Client outputs in perftest's format (hand-written after its documented layout).
    const WRITE_LAT: &str = "\
---------------------------------------------------------------------------------------
                    RDMA_Write Latency Test
 Dual-port       : OFF\t\tDevice         : rxe0
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 TX depth        : 1
 Mtu             : 1024[B]
 Link type       : Ethernet
 GID index       : 1
 Max inline data : 220[B]
 rdma_cm QPs\t : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
 local address: LID 0000 QPN 0x0011 PSN 0x5a6b2c RKey 0x000204 VAddr 0x005581e0e4c000
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:00:02:15
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 8       1000          41.36          2113.44      45.27     \t        52.81    \t   71.02  \t\t98.40   \t\t2113.44 
---------------------------------------------------------------------------------------
";

    const ATOMIC_INF: &str = "\
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 8       1000          inf            inf          inf               inf           inf            inf                  inf
";

    const READ_BW: &str = "\
---------------------------------------------------------------------------------------
                    RDMA_Read BW Test
 Dual-port       : OFF\t\tDevice         : rxe0
 Number of qps   : 1\t\tTransport type : IB
 TX depth        : 16
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      1000             312.45             298.11\t\t   0.004770
---------------------------------------------------------------------------------------
";

    #[test]
    fn latency_output_parses() {
        assert_eq!(
            parse_lat(WRITE_LAT),
            Ok(Lat {
                t_avg: 52.81,
                t_typical: 45.27
            })
        );
        assert!(parse_lat(ATOMIC_INF).unwrap_err().contains("inf"));
        assert!(parse_lat("Couldn't connect to 10.0.2.15:18516\n").is_err());
    }

    #[test]
    fn bandwidth_output_parses() {
        assert_eq!(parse_bw(READ_BW), Ok(298.11));
        assert!(parse_bw(WRITE_LAT).is_err());
    }

    #[test]
    fn gid_and_listeners() {
        assert_eq!(
            gid_ipv4("0000:0000:0000:0000:0000:ffff:0a00:020f").as_deref(),
            Some("10.0.2.15")
        );
        assert_eq!(gid_ipv4("fe80:0000:0000:0000:5054:00ff:fe12:3456"), None);
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:4854 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1
   1: 0100007F:4855 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1
";
        assert!(listens_in(t, 0x4854));
        assert!(!listens_in(t, 0x4855), "established, not listening");
    }

    #[test]
    fn median_and_spread() {
        assert_eq!(median_spread(&[1.2, 0.9, 1.1]), (1.1, 0.9, 1.2));
        assert_eq!(median_spread(&[1.0, 2.0]), (1.5, 1.0, 2.0));
    }
}
