//! The Node.js peers: `npm ci` when needed, one script run per measurement,
//! its JSON line read back.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// `benches/peers`, where the scripts and their `package.json` are.
fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/peers")
}

/// Runs `npm ci` unless `node_modules` is there.
pub(crate) fn install() {
    if dir().join("node_modules").is_dir() {
        return;
    }
    println!("npm ci in {} ...", dir().display());
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(dir())
        .status()
        .unwrap_or_else(|e| panic!("npm (Node.js 20 or later) is needed for the peers: {e}"));
    assert!(status.success(), "npm ci failed in {}", dir().display());
}

/// The versions the scripts run with.
pub(crate) fn versions() -> String {
    let node = Command::new("node")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|_| "no node".to_owned());
    let package = |name: &str| {
        std::fs::read_to_string(dir().join("node_modules").join(name).join("package.json"))
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .and_then(|v| Some(v.get("version")?.as_str()?.to_owned()))
            .unwrap_or_else(|| "not installed".to_owned())
    };
    format!(
        "node {node}; graphile-worker {}, bullmq {}, pg {}, ioredis {}",
        package("graphile-worker"),
        package("bullmq"),
        package("pg"),
        package("ioredis")
    )
}

/// Runs `node <script> --jobs n --concurrency 8 --name <tag> --<k> <v>...`
/// and returns its last line, parsed; panics if it fails or reports a job
/// run twice or lost.
pub(crate) async fn run(script: &str, args: &[(&str, &str)], n: u64, tag: &str) -> Value {
    let mut command = tokio::process::Command::new("node");
    command
        .arg(script)
        .args(["--jobs", &n.to_string()])
        .args(["--concurrency", &crate::CONCURRENCY.to_string()])
        .args(["--name", tag])
        .current_dir(dir())
        .kill_on_drop(true);
    for (k, v) in args {
        command.arg(format!("--{k}")).arg(v);
    }
    let out = tokio::time::timeout(crate::RUN_TIMEOUT, command.output())
        .await
        .unwrap_or_else(|_| panic!("node {script} ({tag}) timed out"))
        .unwrap_or_else(|e| panic!("node {script}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "node {script} ({tag}) failed: {}\n{stdout}\n{stderr}",
        out.status
    );
    let line = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    println!("    {script}: {line}");
    let value: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("node {script}: {e} in {line:?}\n{stderr}"));
    assert_eq!(
        (field(&value, "duplicates"), field(&value, "lost")),
        (0.0, 0.0),
        "node {script} ({tag}): jobs run twice, lost: {line}"
    );
    value
}

/// A number of a script's result; NaN where the script had none (`null`:
/// JavaScript's NaN, a percentile of no jobs).
pub(crate) fn field(value: &Value, name: &str) -> f64 {
    match value.get(name) {
        Some(Value::Null) => f64::NAN,
        Some(v) => v
            .as_f64()
            .unwrap_or_else(|| panic!("{name} is no number in {value}")),
        None => panic!("no {name} in {value}"),
    }
}
