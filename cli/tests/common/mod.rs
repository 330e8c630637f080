//! What the CLI's test files share: running the built `loco`, and reading its JSON lines.

use std::process::{Command, Output};

/// Runs the built `loco` with `args`.
pub fn loco(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loco"))
        .args(args)
        .output()
        .expect("runs loco")
}

#[allow(dead_code)] // not every test file reads JSON lines
/// The JSON objects `loco ... --json` printed, one per line, after checking it succeeded.
pub fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect()
}

#[allow(dead_code)] // not every test file lists configurations
/// Each JSON line's configuration: the string field `name` and the number fields `a` and `b`
/// (e.g. `lock`, `nodes`, `threads`), in the order printed.
pub fn configs(lines: &[serde_json::Value], [name, a, b]: [&str; 3]) -> Vec<(String, u64, u64)> {
    lines
        .iter()
        .map(|v| {
            (
                v[name].as_str().expect(name).to_string(),
                v[a].as_u64().expect(a),
                v[b].as_u64().expect(b),
            )
        })
        .collect()
}

#[allow(dead_code)] // not every test file runs the lock benchmark
/// `loco bench locks` under the simulator, 2 nodes, 60 µs per configuration, the node lock
/// and the spinlock, JSON lines; the caller adds the rest.
pub const SIM_LOCKS: [&str; 12] = [
    "bench",
    "locks",
    "--backend",
    "sim",
    "--sim-us",
    "60",
    "--nodes",
    "2",
    "--lock",
    "nlock,rcas-spinlock",
    "--json",
    "--no-plot",
];
