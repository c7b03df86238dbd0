//! `cargo xtask bundle`: release executables and a script, for a GPU machine without Rust.

use std::path::Path;
use std::process::Stdio;

use crate::util::{Result, cargo, root};

/// The script written into the bundle. Subcommands: `test` (default), `sanitize`, `bench`.
const RUN_SH: &str = r#"#!/usr/bin/env bash
# Runs flashattn's GPU suite from release executables; needs only an NVIDIA driver.
#   ./run.sh test [ARGS]     every test executable; GPU tests must run (FLASHATTN_REQUIRE_GPU=1)
#   ./run.sh sanitize        the GPU tests on small shapes under compute-sanitizer memcheck and racecheck
#   ./run.sh bench [ARGS]    the benchmark executable
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# cuBLAS (for the standard-attention path): the CUDA toolkit's, or the one pip installed.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    $(python3 -c 'import site, glob; print(" ".join(d for p in site.getsitepackages() for d in glob.glob(p + "/nvidia/*/lib")))' 2>/dev/null); do
  if ls "$d"/libcublas.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break; fi
done
export FLASHATTN_REQUIRE_GPU=1
cmd="${1:-test}"; shift || true
case "$cmd" in
  test)
    status=0
    for t in "$here"/tests/*; do
      echo "== $(basename "$t")"
      "$t" "$@" || status=1
    done
    exit $status ;;
  sanitize)
    export FLASHATTN_TEST_SMALL=1
    status=0
    for tool in memcheck racecheck; do
      echo "== compute-sanitizer --tool $tool"
      # The error-path tests trigger driver errors on purpose (a refused launch, an out-of-memory
      # allocation), which compute-sanitizer would count as errors: they are skipped here.
      compute-sanitizer --tool "$tool" --error-exitcode 97 "$here/tests/gpu" --test-threads 1 --skip runtime::error_ "$@" || status=1
    done
    exit $status ;;
  bench)
    exec "$here/bin/flashattn-bench" "$@" ;;
  timing)
    exec "$here/bin/timing" "$@" ;;
  *) echo "unknown command $cmd (test, sanitize, bench)"; exit 2 ;;
esac
"#;

/// The test executables the bundle carries.
const GPU_TESTS: &[&str] = &["gpu"];

/// The release binaries the bundle carries besides the test executables.
const BINARIES: &[&str] = &["flashattn-bench", "examples/timing", "examples/tune"];

/// One executable that cargo reported building.
struct Artifact {
    name: String,
    path: String,
    is_test: bool,
}

fn build_artifacts() -> Result<Vec<Artifact>> {
    let out = cargo()
        .current_dir(root())
        .args(["test", "--workspace", "--release", "--no-run", "--message-format=json-render-diagnostics"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if !out.status.success() {
        return Err("release build of the test executables failed".into());
    }
    let mut found = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let Some(path) = msg["executable"].as_str() else { continue };
        let is_test = msg["profile"]["test"].as_bool().unwrap_or(false);
        let name = msg["target"]["name"].as_str().unwrap_or_default().to_string();
        found.push(Artifact { name, path: path.to_string(), is_test });
    }
    Ok(found)
}

/// `cargo xtask bundle`.
pub fn bundle(out: &Path) -> Result<()> {
    let out = if out.is_absolute() { out.to_path_buf() } else { root().join(out) };
    let artifacts = build_artifacts()?;
    let bin_build = cargo()
        .current_dir(root())
        .args(["build", "--release", "--workspace", "--bins", "--examples"])
        .status()
        .map_err(|e| e.to_string())?;
    if !bin_build.success() {
        return Err("release build of the binaries failed".into());
    }
    let _ = std::fs::remove_dir_all(&out);
    for sub in ["tests", "bin"] {
        std::fs::create_dir_all(out.join(sub)).map_err(|e| e.to_string())?;
    }
    let mut listed = Vec::new();
    // The GPU suite only: the other test executables need no GPU and run wherever `cargo test`
    // does (the bundle must stay small enough to travel).
    for a in artifacts.iter().filter(|a| a.is_test && GPU_TESTS.contains(&a.name.as_str())) {
        // Unit tests of libraries are named after their crate; integration tests after their file.
        let dest = out.join("tests").join(&a.name);
        std::fs::copy(&a.path, &dest).map_err(|e| format!("copying {}: {e}", a.path))?;
        listed.push(format!("tests/{}", a.name));
    }
    let release = root().join("target/release");
    for &bin in BINARIES {
        let src = release.join(bin);
        if src.is_file() {
            let name = Path::new(bin).file_name().unwrap_or_default();
            std::fs::copy(&src, out.join("bin").join(name)).map_err(|e| e.to_string())?;
            listed.push(format!("bin/{}", name.to_string_lossy()));
        }
    }
    // The PyTorch peers script of `bench run --peers`, found next to the bench executable.
    let peers = root().join("benches/peers.py");
    if peers.is_file() {
        std::fs::copy(&peers, out.join("bin/peers.py"))
            .map_err(|e| format!("copying {}: {e}", peers.display()))?;
        listed.push("bin/peers.py".to_string());
    }
    let script = out.join("run.sh");
    std::fs::write(&script, RUN_SH).map_err(|e| e.to_string())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755));
    }
    println!("bundle: {} with {}", out.display(), listed.join(", "));
    println!(
        "bundle: on the GPU machine run `{}/run.sh test`",
        out.file_name().unwrap_or_default().to_string_lossy()
    );
    Ok(())
}
