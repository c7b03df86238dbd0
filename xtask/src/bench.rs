//! `cargo xtask bench [ARGS]`: builds `flashattn-bench` in release, runs `flashattn-bench run
//! ARGS` (a sweep: results as JSON lines in a folder), then `flashattn-bench report` on that
//! folder (report.md and SVG plots).

use std::process::{Command, Stdio};

use crate::util::{Result, cargo, root};

/// Builds the benchmark executable in release and returns its path.
fn build() -> Result<String> {
    let out = cargo()
        .current_dir(root())
        .args(["build", "--release", "-p", "flashattn-bench", "--message-format=json-render-diagnostics"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if !out.status.success() {
        return Err("release build of flashattn-bench failed".into());
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "flashattn-bench")
        .find_map(|m| m["executable"].as_str().map(str::to_string))
        .ok_or_else(|| "cargo built no flashattn-bench executable".to_string())
}

/// `cargo xtask bench ARGS`.
pub fn bench(args: &[String]) -> Result<()> {
    let exe = build()?;
    let marker = std::env::temp_dir().join(format!("flashattn-bench-out-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let status = Command::new(&exe)
        .arg("run")
        .args(args)
        .arg("--out-marker")
        .arg(&marker)
        .current_dir(root())
        .status()
        .map_err(|e| format!("could not start {exe}: {e}"))?;
    // The run writes the marker once its rows are in place, even when it stopped early.
    let dir = std::fs::read_to_string(&marker).ok();
    let _ = std::fs::remove_file(&marker);
    if let Some(dir) = dir {
        let report = Command::new(&exe)
            .args(["report", "--in", dir.trim()])
            .current_dir(root())
            .status()
            .map_err(|e| format!("could not start {exe}: {e}"))?;
        if !report.success() {
            return Err(format!("flashattn-bench report failed with {report}"));
        }
    }
    if status.success() { Ok(()) } else { Err(format!("flashattn-bench run failed with {status}")) }
}
