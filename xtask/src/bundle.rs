//! `cargo xtask bundle`: release executables and a script, for a GPU machine without Rust.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::util::{Result, cargo, root};

/// The script written into the bundle. Commands: `test` (default), `sanitize`, `bench`,
/// `timing`, `tune`, `decode`, `backward`, `window`, `python`, `python-ratios`, `candle`, `help`; every one is listed in the header and in `usage` (a unit test
/// holds the three together).
const RUN_SH: &str = r#"#!/usr/bin/env bash
# Runs flashattn's GPU suite from release executables; needs only an NVIDIA driver.
#   ./run.sh test [ARGS]      every test executable; GPU tests must run (FLASHATTN_REQUIRE_GPU=1)
#   ./run.sh sanitize [ARGS]  the GPU tests on small shapes under compute-sanitizer memcheck, racecheck and synccheck
#   ./run.sh bench [ARGS]     the benchmark executable, flashattn-bench (`bench --help` lists its flags)
#   ./run.sh timing [ARGS]    the timing example: one shape with every method
#   ./run.sh tune             the tune example: every tensor-core tile configuration on the headline shapes
#   ./run.sh decode [ARGS]    the decode example: Llama-3-8B decoding with every split count, in TB/s
#   ./run.sh backward [ARGS]  the backward example: forward and backward times on the headline shapes
#   ./run.sh window [ARGS]    the window example: sliding-window forward time against the window
#   ./run.sh python [ARGS]    the Python wheel, installed offline by pip into a fresh virtual environment
#                             (which sees this machine's PyTorch and NumPy), then its pytest suite;
#                             ARGS go to pytest. PYTHON=... picks the interpreter (default python3)
#   ./run.sh python-ratios [ARGS]  the same install, then python/bench/ratios.py: the headline shapes through
#                             the wheel and PyTorch's backends, timed alike, against a bench.jsonl (ARGS)
#   ./run.sh candle [ARGS]    flashattn-candle built with candle's CUDA backend (`bundle --candle-cuda`):
#                             its test executable (ARGS go to it), then the compare example; needs
#                             the CUDA 13 libraries (candle/lib, or the CUDA toolkit's)
#   ./run.sh help             this list (also -h, --help)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
usage() {
  cat <<'EOF'
usage: run.sh [COMMAND] [ARGS]
  test [ARGS]       every test executable; GPU tests must run (the default command)
  sanitize [ARGS]   the GPU tests on small shapes under compute-sanitizer memcheck, racecheck and synccheck
  bench [ARGS]      the benchmark executable, flashattn-bench (bench --help lists its flags)
  timing [ARGS]     the timing example: one shape with every method
  tune              the tune example: every tensor-core tile configuration on the headline shapes
  decode [ARGS]     the decode example: Llama-3-8B decoding with every split count, in TB/s
  backward [ARGS]   the backward example: forward and backward times on the headline shapes
  window [ARGS]     the window example: sliding-window forward time against the window
  python [ARGS]     the Python wheel installed offline by pip into a fresh virtual environment that
                    sees this machine's PyTorch and NumPy, then its pytest suite (ARGS go to pytest)
  python-ratios [ARGS]  the same install, then python/bench/ratios.py (the headline through the
                    wheel and PyTorch's backends, timed alike; ARGS go to it)
  candle [ARGS]     flashattn-candle on candle's CUDA backend: its test executable (ARGS go to it),
                    then the compare example (only in bundles made with --candle-cuda)
  help, -h, --help  this list
EOF
}
# Runs one of the bundle's executables, or says that this bundle does not carry it.
run_bin() {
  local bin="$here/bin/$1"; shift
  if [ ! -x "$bin" ]; then echo "this bundle has no $(basename "$bin") (not built when it was made)" >&2; exit 2; fi
  exec "$bin" "$@"
}
cmd="${1:-test}"; shift || true
case "$cmd" in
  help|-h|--help)
    usage; exit 0 ;;
esac
# cuBLAS (for the standard-attention path): the CUDA toolkit's, or the one pip installed.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    $(python3 -c 'import site, glob; print(" ".join(d for p in site.getsitepackages() + [site.getusersitepackages()] for d in glob.glob(p + "/nvidia/*/lib")))' 2>/dev/null); do
  if ls "$d"/libcublas.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break; fi
done
export FLASHATTN_REQUIRE_GPU=1
# The commit the bundle was built from, which the bench records in its rows (a checkout on the
# GPU machine, if there is one, may be another commit).
if [ -z "${FLASHATTN_COMMIT:-}" ] && [ -f "$here/COMMIT" ]; then export FLASHATTN_COMMIT="$(cat "$here/COMMIT")"; fi
# The Python wheel installed with pip into a fresh virtual environment, offline, no compiler; sets
# `python` to the environment's interpreter and works from a temporary folder (so that no source
# checkout of python/flashattn can be imported). The environment sees, through a .pth file, every
# package folder of the Python that made it (the H200 image's python3 is itself a venv holding
# PyTorch and NumPy, which a new venv made from it would otherwise hide). Without `ensurepip` (Debian's python3 without python3-venv) the venv is made
# without pip and this Python's pip installs into it (`pip --python`, pip >= 22.3).
python_venv() {
  if [ -f "$here/python/NO_WHEEL" ]; then
    echo "this bundle has no Python wheel (not built when it was made): $(cat "$here/python/NO_WHEEL")" >&2; exit 2
  fi
  local wheel="" w base venv purelib
  for w in "$here"/python/wheels/flashattn-*.whl; do if [ -f "$w" ]; then wheel="$w"; fi; done
  if [ -z "$wheel" ]; then echo "this bundle has no Python wheel (python/wheels/flashattn-*.whl)" >&2; exit 2; fi
  if [ -f "$here/python/NO_DEPS" ]; then
    echo "warning: this bundle has no pytest wheels, pip looks for pytest on this machine: $(cat "$here/python/NO_DEPS")" >&2
  fi
  base="${PYTHON:-python3}"
  tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
  venv="$tmp/venv"
  if "$base" -m venv --system-site-packages "$venv" >/dev/null 2>&1 && [ -x "$venv/bin/pip" ]; then
    vpip=("$venv/bin/python" -m pip)
  elif rm -rf "$venv" && "$base" -m venv --system-site-packages --without-pip "$venv"; then
    vpip=("$base" -m pip --python "$venv/bin/python")
  else
    echo "$base could not create a virtual environment" >&2; exit 1
  fi
  python="$venv/bin/python"
  purelib="$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  # Every package folder the calling Python sees (its own site packages — on the H200 image
  # python3 is itself a venv, /opt/torch/.venv — and the user's), after the new environment's own.
  "$base" -c 'import site, sys
u = site.getusersitepackages() if site.ENABLE_USER_SITE else None
paths = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))] + ([u] if isinstance(u, str) else [])
print("\n".join(dict.fromkeys(paths)))' > "$purelib/_flashattn_base_site.pth" ||
    { echo "$base could not list its package folders" >&2; exit 1; }
  vpip+=(install --quiet --disable-pip-version-check --no-input --no-index)
  "${vpip[@]}" --no-deps "$wheel" || { echo "pip could not install $wheel into $venv" >&2; exit 1; }
  if ! "$python" -c 'import pytest' 2>/dev/null; then
    "${vpip[@]}" --find-links "$here/python/deps" pytest ||
      { echo "no pytest for $python, and pip could not install it from the bundle (pytest needs Python >= 3.10)" >&2; exit 1; }
  fi
  "$python" -c 'import numpy' 2>/dev/null ||
    { echo "no NumPy for $base: install it ($base -m pip install numpy)" >&2; exit 1; }
  cd "$tmp"
  "$python" -c 'import flashattn, os, sys; sys.exit(not os.path.realpath(flashattn.__file__).startswith(os.path.realpath(sys.argv[1])))' "$purelib" ||
    { echo "flashattn is not imported from the wheel installed into $venv" >&2; exit 1; }
  echo "python: flashattn installed by pip into the virtual environment $venv" >&2
}
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
    for tool in memcheck racecheck synccheck; do
      echo "== compute-sanitizer --tool $tool"
      # The error-path tests trigger driver errors on purpose (a refused launch, an out-of-memory
      # allocation), which compute-sanitizer would count as errors: they are skipped here.
      compute-sanitizer --tool "$tool" --error-exitcode 97 "$here/tests/gpu" --test-threads 1 --skip runtime::error_ "$@" || status=1
    done
    exit $status ;;
  bench)
    run_bin flashattn-bench "$@" ;;
  timing)
    run_bin timing "$@" ;;
  tune)
    run_bin tune "$@" ;;
  decode)
    run_bin decode "$@" ;;
  backward)
    run_bin backward "$@" ;;
  window)
    run_bin window "$@" ;;
  python|python-ratios)
    python_venv
    if [ "$cmd" = python-ratios ]; then
      "$python" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null ||
        { echo "python-ratios needs PyTorch with a CUDA device" >&2; exit 1; }
      PYTHONDONTWRITEBYTECODE=1 "$python" "$here/python/bench/ratios.py" "$@"
      exit $? 
    fi
    "$python" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null ||
      echo "warning: no PyTorch with a CUDA device here: the CUDA tests (test_cuda.py) skip" >&2
    status=0
    PYTHONDONTWRITEBYTECODE=1 "$python" -m pytest -q -rs -p no:cacheprovider "$here/python/tests" "$@" || status=$?
    exit $status ;;
  candle)
    if [ ! -x "$here/candle/attention" ] || [ ! -x "$here/candle/compare" ]; then
      echo "this bundle has no candle CUDA executables (made without --candle-cuda)" >&2; exit 2
    fi
    # The CUDA 13 libraries they link to: the bundle's own when it carries them, else the
    # toolkit's or pip's found above (the driver's libcuda.so.1 from the system).
    if [ -d "$here/candle/lib" ]; then export LD_LIBRARY_PATH="$here/candle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
      if [ -d "$d" ]; then export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"; fi
    done
    if command -v ldd >/dev/null && missing="$(ldd "$here/candle/attention" | grep 'not found')"; then
      echo "the candle executables need these CUDA 13 libraries, not found (LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}):" >&2
      echo "$missing" >&2
      echo "install the CUDA 13 toolkit, or make the bundle with --candle-cuda --candle-cuda-libs" >&2
      exit 1
    fi
    status=0
    echo "== candle/attention"
    "$here/candle/attention" "$@" || status=1
    echo "== candle/compare"
    "$here/candle/compare" || status=1
    exit $status ;;
  *)
    echo "unknown command: $cmd" >&2; usage >&2; exit 2 ;;
esac
"#;

/// The file that marks a folder as made by `cargo xtask bundle`: only a folder holding it is
/// ever replaced.
pub const MARKER: &str = ".flashattn-bundle";

/// What the output folder is now, as far as the decision needs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct OutState {
    pub exists: bool,
    pub is_dir: bool,
    /// It holds [`MARKER`]: an earlier bundle made it.
    pub has_marker: bool,
    pub is_empty: bool,
    /// It holds `.git`: a checkout.
    pub has_git: bool,
}

/// What `bundle` does with its output folder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OutDecision {
    /// It does not exist: create it.
    Create,
    /// It exists and is empty: fill it.
    UseEmpty,
    /// An earlier bundle made it (it holds the marker): empty it and fill it again.
    Replace,
}

/// The rule, with no file system: `out` and `repo_root` are absolute and canonical (symbolic
/// links resolved), `state` is what `out` is. The tool never deletes a folder it did not create:
/// the repository, its ancestors and checkouts are refused outright, an existing folder is
/// replaced only when it holds the marker, and any other non-empty folder is an error.
pub fn decide(out: &Path, repo_root: &Path, state: OutState) -> Result<OutDecision> {
    if out == repo_root {
        return Err(format!("--out {} is the repository itself: refused", out.display()));
    }
    if repo_root.starts_with(out) {
        return Err(format!(
            "--out {} holds the repository ({}): refused",
            out.display(),
            repo_root.display()
        ));
    }
    if state.has_git {
        return Err(format!("--out {} holds .git (a checkout): refused", out.display()));
    }
    if !state.exists {
        return Ok(OutDecision::Create);
    }
    if !state.is_dir {
        return Err(format!("--out {} exists and is not a folder: nothing written", out.display()));
    }
    if state.has_marker {
        return Ok(OutDecision::Replace);
    }
    if state.is_empty {
        return Ok(OutDecision::UseEmpty);
    }
    Err(format!(
        "--out {} exists, is not empty and was not made by `cargo xtask bundle` (it has no {MARKER}): \
         nothing deleted. Choose another --out, or empty or remove it yourself",
        out.display()
    ))
}

/// `path`, absolute and with symbolic links resolved, also when it does not exist yet (its
/// nearest existing ancestor is resolved and the rest appended).
fn canonical(path: &Path) -> Result<PathBuf> {
    let mut missing = Vec::new();
    let mut existing = path;
    loop {
        match existing.canonicalize() {
            Ok(c) => return Ok(missing.iter().rev().fold(c, |p, part| p.join(part))),
            Err(_) => match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    missing.push(name.to_os_string());
                    existing = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
                }
                // `..` or a root that does not resolve.
                _ => return Err(format!("cannot resolve {}", path.display())),
            },
        }
    }
}

/// What `out` is now.
fn inspect(out: &Path) -> OutState {
    let Ok(meta) = std::fs::symlink_metadata(out) else { return OutState::default() };
    // A symbolic link to a folder is judged as that folder (canonical() resolved `out` already).
    let is_dir = meta.is_dir() || out.is_dir();
    let mut entries = if is_dir { std::fs::read_dir(out).ok() } else { None };
    OutState {
        exists: true,
        is_dir,
        has_marker: is_dir && out.join(MARKER).is_file(),
        is_empty: entries.as_mut().is_some_and(|e| e.next().is_none()),
        has_git: is_dir && std::fs::symlink_metadata(out.join(".git")).is_ok(),
    }
}

/// Resolves `--out` (relative to the repository root) and decides what to do with it, before
/// anything is built or deleted.
pub fn plan_out(out: &Path, repo_root: &Path) -> Result<(PathBuf, OutDecision)> {
    let joined = if out.is_absolute() { out.to_path_buf() } else { repo_root.join(out) };
    let out = canonical(&joined)?;
    let repo_root = canonical(repo_root)?;
    let decision = decide(&out, &repo_root, inspect(&out))?;
    Ok((out, decision))
}

/// Carries out the decision: `out` exists, empty but for the marker, afterwards. A replaced
/// bundle is emptied, not removed, so that the folder itself is never deleted.
pub fn prepare_out(out: &Path, decision: OutDecision) -> Result<()> {
    let err = |e: std::io::Error| format!("{}: {e}", out.display());
    match decision {
        OutDecision::Create => std::fs::create_dir_all(out).map_err(err)?,
        OutDecision::UseEmpty => {}
        OutDecision::Replace => {
            // Checked again, right before deleting anything.
            if !out.join(MARKER).is_file() {
                return Err(format!("{} lost its {MARKER}: nothing deleted", out.display()));
            }
            for entry in std::fs::read_dir(out).map_err(err)? {
                let path = entry.map_err(err)?.path();
                let meta = std::fs::symlink_metadata(&path).map_err(err)?;
                if meta.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) }
                    .map_err(|e| format!("removing {}: {e}", path.display()))?;
            }
        }
    }
    std::fs::write(
        out.join(MARKER),
        "Made by `cargo xtask bundle`: the next bundle into this folder replaces what it holds.\n",
    )
    .map_err(err)
}

/// The test executables the bundle carries.
const GPU_TESTS: &[&str] = &["gpu"];

/// The release binaries the bundle carries besides the test executables.
const BINARIES: &[&str] = &[
    "flashattn-bench",
    "examples/timing",
    "examples/tune",
    "examples/decode",
    "examples/backward",
    "examples/window",
];

/// Whether `bundle` adds flashattn-candle built with the real `cuda` feature.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CandleCuda {
    No,
    /// Its test executable and `compare` example, into `candle/`.
    Executables,
    /// Those, and the CUDA 13 libraries they link to (from the wheels) into `candle/lib`.
    WithLibraries,
}

/// The script that installs the CUDA 13.0 wheels into target/cuda-wheels and exports the build
/// environment for candle's `cuda` feature.
const CUDA_ENV: &str = "candle/ci/cuda-env.sh";

/// The CUDA libraries, by soname, that the candle executables need besides the driver's
/// libcuda.so.1: their NEEDED entries (the linker drops cudarc's NVRTC and cuBLASLt links as
/// unused) and cuBLAS's own libcublasLt.so.13; about 730 MB, cuBLASLt 540 of them.
const CANDLE_CUDA_LIBS: &[&str] =
    &["libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libcurand.so.10"];

/// One executable that cargo reported building.
struct Artifact {
    name: String,
    path: String,
    is_test: bool,
    /// Whether its target is an example (`target.kind` holds "example").
    is_example: bool,
}

fn build_artifacts() -> Result<Vec<Artifact>> {
    let mut cmd = cargo();
    cmd.args(["test", "--workspace", "--release", "--no-run", "--message-format=json-render-diagnostics"]);
    artifacts_of(cmd, "release build of the test executables")
}

/// flashattn-candle's test executable and examples with the real `cuda` feature, built in the
/// environment of [`CUDA_ENV`] (which installs the CUDA wheels first when they are missing).
fn build_candle_cuda() -> Result<Vec<Artifact>> {
    let mut cmd = std::process::Command::new("bash");
    cmd.args(["-c", r#". "$0" && exec "$@""#, CUDA_ENV])
        .arg(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["build", "--release", "-p", "flashattn-candle", "--features", "cuda", "--tests", "--examples"])
        .arg("--message-format=json-render-diagnostics");
    artifacts_of(cmd, "release build of flashattn-candle with candle's `cuda` feature")
}

/// Runs a cargo build with `--message-format=json...` from the repository root and returns the
/// executables it reports.
fn artifacts_of(mut cmd: std::process::Command, what: &str) -> Result<Vec<Artifact>> {
    let out = cmd
        .current_dir(root())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{what} failed"));
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
        let is_example = msg["target"]["kind"]
            .as_array()
            .is_some_and(|kinds| kinds.iter().any(|k| k.as_str() == Some("example")));
        found.push(Artifact { name, path: path.to_string(), is_test, is_example });
    }
    Ok(found)
}

/// The commit the bundle is built from: `git rev-parse HEAD`, with `-dirty` when tracked files
/// have uncommitted changes; `None` outside a git checkout.
fn source_commit() -> Option<String> {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "HEAD"]).filter(|h| !h.is_empty())?;
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}

/// `cargo xtask bundle`.
pub fn bundle(out: &Path, candle: CandleCuda) -> Result<()> {
    // Decided before the (long) build, so that a refused --out fails at once, and again after it.
    let (out, _) = plan_out(out, &root())?;
    let artifacts = build_artifacts()?;
    // The binaries' paths as cargo reports them (its target directory may be anywhere:
    // `CARGO_TARGET_DIR`, `build.target-dir`), not guessed under the repository.
    let mut bin_build = cargo();
    bin_build.args([
        "build",
        "--release",
        "--workspace",
        "--bins",
        "--examples",
        "--message-format=json-render-diagnostics",
    ]);
    let binaries = artifacts_of(bin_build, "release build of the binaries")?;
    // After the workspace build, which writes a CPU-only target/release/examples/compare.
    let candle_artifacts = if candle == CandleCuda::No { Vec::new() } else { build_candle_cuda()? };
    // The wheel and pytest's wheels; without them the bundle is still made, and says so.
    let python = crate::wheel::prepare();
    // Decided again right before anything is deleted: the folder may have changed meanwhile.
    let (out, decision) = plan_out(&out, &root())?;
    prepare_out(&out, decision)?;
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
    for &bin in BINARIES {
        let (example, name) = match bin.strip_prefix("examples/") {
            Some(name) => (true, name),
            None => (false, bin),
        };
        let built = binaries.iter().find(|a| a.name == name && a.is_example == example && !a.is_test);
        let Some(built) = built else {
            return Err(format!("the release build did not report `{bin}`, which the bundle carries"));
        };
        std::fs::copy(&built.path, out.join("bin").join(name))
            .map_err(|e| format!("copying {}: {e}", built.path))?;
        listed.push(format!("bin/{name}"));
    }
    // The PyTorch peers script of `bench run --peers`, found next to the bench executable.
    let peers = root().join("benches/peers.py");
    if peers.is_file() {
        std::fs::copy(&peers, out.join("bin/peers.py"))
            .map_err(|e| format!("copying {}: {e}", peers.display()))?;
        listed.push("bin/peers.py".to_string());
    }
    listed.extend(crate::wheel::copy_into(&out, &python)?);
    if candle != CandleCuda::No {
        listed.extend(copy_candle_cuda(&out, &candle_artifacts, candle == CandleCuda::WithLibraries)?);
    }
    if let Some(commit) = source_commit() {
        std::fs::write(out.join("COMMIT"), format!("{commit}\n")).map_err(|e| e.to_string())?;
        listed.push(format!("COMMIT ({commit})"));
    }
    let script = out.join("run.sh");
    std::fs::write(&script, RUN_SH).map_err(|e| e.to_string())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755));
    }
    println!("bundle: {} with {}", out.display(), listed.join(", "));
    let name = out.file_name().unwrap_or_default().to_string_lossy();
    if let Err(why) = &python.wheel {
        eprintln!("bundle: this bundle has NO Python wheel (`run.sh python` says so): {why}");
    }
    if let Err(why) = &python.deps {
        eprintln!(
            "bundle: this bundle has no pytest wheels (`run.sh python` needs pytest on the GPU machine): {why}"
        );
    }
    let python_cmd =
        if python.wheel.is_ok() { format!(" and `{name}/run.sh python`") } else { String::new() };
    let candle_cmd =
        if candle == CandleCuda::No { String::new() } else { format!(" and `{name}/run.sh candle`") };
    println!("bundle: on the GPU machine run `{name}/run.sh test`{python_cmd}{candle_cmd}");
    Ok(())
}

/// Copies the candle CUDA executables (and with `libs`, the CUDA libraries from the wheels)
/// into `out/candle`; returns what it wrote.
fn copy_candle_cuda(out: &Path, artifacts: &[Artifact], libs: bool) -> Result<Vec<String>> {
    let dir = out.join("candle");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut listed = Vec::new();
    for (name, is_test) in [("attention", true), ("compare", false)] {
        let a = artifacts
            .iter()
            .find(|a| a.name == name && a.is_test == is_test)
            .ok_or_else(|| format!("the candle CUDA build reported no `{name}` executable"))?;
        std::fs::copy(&a.path, dir.join(name)).map_err(|e| format!("copying {}: {e}", a.path))?;
        listed.push(format!("candle/{name}"));
    }
    if libs {
        let from = root().join("target/cuda-wheels/nvidia/cu13/lib");
        std::fs::create_dir_all(dir.join("lib")).map_err(|e| e.to_string())?;
        for lib in CANDLE_CUDA_LIBS {
            let src = from.join(lib);
            std::fs::copy(&src, dir.join("lib").join(lib))
                .map_err(|e| format!("copying {}: {e}", src.display()))?;
            listed.push(format!("candle/lib/{lib}"));
        }
    }
    Ok(listed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The labels of every `case` arm in a shell script (`a|b)` gives `a` and `b`), `*` left out.
    fn case_labels(script: &str) -> Vec<String> {
        let mut labels = Vec::new();
        let mut in_case = false;
        for line in script.lines().map(str::trim) {
            if line.starts_with("case ") && line.ends_with(" in") {
                in_case = true;
            } else if line == "esac" || line.starts_with("esac ") {
                in_case = false;
            } else if in_case {
                let Some((pattern, _)) = line.split_once(')') else { continue };
                let is_label = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '|' | '*');
                if !pattern.is_empty() && pattern.chars().all(is_label) {
                    labels.extend(pattern.split('|').filter(|l| *l != "*").map(str::to_string));
                }
            }
        }
        labels
    }

    /// The words of a text: runs of letters, digits, `_` and `-`.
    fn words(text: &str) -> Vec<&str> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .filter(|w| !w.is_empty())
            .collect()
    }

    /// The text `usage` prints: the lines between `usage() {` and its closing `}`.
    fn usage_text(script: &str) -> String {
        let start = script.find("usage() {").expect("run.sh defines usage");
        let body = &script[start..];
        let end = body.find("\n}\n").expect("usage's closing brace");
        body[..end].to_string()
    }

    /// The header comment: the `#` lines after the shebang.
    fn header(script: &str) -> String {
        script.lines().skip(1).take_while(|l| l.starts_with('#')).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn run_sh_usage_and_header_name_every_command_it_accepts() {
        let labels = case_labels(RUN_SH);
        for expected in [
            "test", "sanitize", "bench", "timing", "tune", "decode", "backward", "window", "python",
            "candle", "help", "-h", "--help",
        ] {
            assert!(labels.iter().any(|l| l == expected), "no `{expected})` arm in run.sh: {labels:?}");
        }
        let usage = usage_text(RUN_SH);
        let header = header(RUN_SH);
        for label in &labels {
            assert!(words(&usage).contains(&label.as_str()), "usage does not name `{label}`:\n{usage}");
            assert!(
                words(&header).contains(&label.as_str()),
                "the header does not name `{label}`:\n{header}"
            );
        }
    }

    #[test]
    fn run_sh_runs_every_binary_the_bundle_carries_and_synccheck() {
        for bin in BINARIES {
            let name = Path::new(bin).file_name().unwrap().to_string_lossy();
            assert!(RUN_SH.contains(&format!("run_bin {name} ")), "run.sh never runs bin/{name}");
        }
        assert!(RUN_SH.contains("for tool in memcheck racecheck synccheck; do"));
    }

    #[cfg(unix)]
    #[test]
    fn run_sh_hands_the_bundles_commit_to_the_bench() {
        // The bench reads FLASHATTN_COMMIT before asking git (benches/src/meta.rs).
        assert!(RUN_SH.contains(r#"export FLASHATTN_COMMIT="$(cat "$here/COMMIT")""#));
        assert!(RUN_SH.contains(r#"[ -z "${FLASHATTN_COMMIT:-}" ]"#), "a caller's FLASHATTN_COMMIT wins");
    }

    #[test]
    fn run_sh_help_prints_usage_and_exits_zero() {
        if crate::util::which("bash").is_none() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("run.sh");
        std::fs::write(&script, RUN_SH).unwrap();
        let run = |arg: &str| std::process::Command::new("bash").arg(&script).arg(arg).output().unwrap();
        for arg in ["help", "-h", "--help"] {
            let out = run(arg);
            assert_eq!(out.status.code(), Some(0), "run.sh {arg}");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.starts_with("usage: run.sh") && stdout.contains("tune"), "run.sh {arg}: {stdout}");
        }
        let out = run("frobnicate");
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("unknown command: frobnicate") && stderr.contains("usage: run.sh"),
            "{stderr}"
        );
        // A binary this bundle does not carry is said so, not an exec error.
        let out = run("tune");
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("this bundle has no tune"));
        // So is a wheel: with the reason the bundle recorded, or without one.
        let out = run("python");
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("this bundle has no Python wheel"));
        std::fs::create_dir_all(dir.path().join("python")).unwrap();
        std::fs::write(dir.path().join(crate::wheel::NO_WHEEL), "maturin failed\n").unwrap();
        let out = run("python");
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("this bundle has no Python wheel") && stderr.contains("maturin failed"),
            "{stderr}"
        );
        // And the candle CUDA executables of a bundle made without --candle-cuda.
        let out = run("candle");
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("no candle CUDA executables"));
    }

    #[test]
    fn the_candle_cuda_executables_go_to_candle_and_a_missing_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let built = dir.path().join("built");
        std::fs::create_dir_all(&built).unwrap();
        let artifact = |name: &str, is_test: bool| {
            let path = built.join(format!("{name}-{is_test}"));
            std::fs::write(&path, format!("{name} {is_test}")).unwrap();
            Artifact {
                name: name.into(),
                path: path.to_string_lossy().into_owned(),
                is_test,
                is_example: !is_test,
            }
        };
        // The lib's own unit tests and a CPU build of the example are not what it picks.
        let artifacts = [
            artifact("flashattn_candle", true),
            artifact("attention", true),
            artifact("compare", true),
            artifact("compare", false),
        ];
        let out = dir.path().join("bundle");
        let listed = copy_candle_cuda(&out, &artifacts, false).unwrap();
        assert_eq!(listed, ["candle/attention", "candle/compare"]);
        assert_eq!(std::fs::read_to_string(out.join("candle/attention")).unwrap(), "attention true");
        assert_eq!(std::fs::read_to_string(out.join("candle/compare")).unwrap(), "compare false");
        assert!(!out.join("candle/lib").exists());
        let err = copy_candle_cuda(&out, &artifacts[..2], false).unwrap_err();
        assert!(err.contains("no `compare` executable"), "{err}");
    }

    #[test]
    fn the_candle_cuda_environment_script_and_its_requirements_are_there() {
        let script = std::fs::read_to_string(root().join(CUDA_ENV)).unwrap();
        let reqs = std::fs::read_to_string(root().join("candle/ci/cuda-requirements.txt")).unwrap();
        assert!(script.contains("candle/ci/cuda-requirements.txt") && script.contains("target/cuda-wheels"));
        assert!(script.contains("nvidia/cu13") && script.contains("CUDA_COMPUTE_CAP"));
        for pkg in ["nvidia-cuda-nvcc==13.0.", "nvidia-cuda-runtime==13.0.", "nvidia-cuda-nvrtc==13.0."] {
            assert!(reqs.contains(pkg), "cuda-requirements.txt pins no {pkg}*");
        }
        // The libraries the bundle carries come from those wheels (cuBLAS, cuRAND, cudart).
        for pkg in ["nvidia-cublas==", "nvidia-curand==", "nvidia-cuda-runtime=="] {
            assert!(reqs.contains(pkg), "cuda-requirements.txt has no {pkg}");
        }
        assert!(CANDLE_CUDA_LIBS.iter().all(|l| l.starts_with("lib") && l.contains(".so.")));
    }

    fn state(exists: bool, has_marker: bool, is_empty: bool, has_git: bool) -> OutState {
        OutState { exists, is_dir: exists, has_marker, is_empty, has_git }
    }

    #[test]
    fn decide_refuses_the_repository_its_ancestors_and_checkouts() {
        let root = Path::new("/work/main");
        let existing = state(true, false, false, true);
        assert!(decide(root, root, existing).unwrap_err().contains("is the repository itself"));
        assert!(
            decide(Path::new("/work"), root, state(true, false, false, false))
                .unwrap_err()
                .contains("holds the repository")
        );
        assert!(decide(Path::new("/"), root, state(true, false, false, false)).is_err());
        // Even a marked folder is refused when it holds .git.
        let err = decide(Path::new("/elsewhere/clone"), root, state(true, true, false, true)).unwrap_err();
        assert!(err.contains(".git"), "{err}");
    }

    #[test]
    fn decide_replaces_only_marked_folders() {
        let root = Path::new("/work/main");
        let out = Path::new("/work/main/bundle");
        assert_eq!(decide(out, root, OutState::default()).unwrap(), OutDecision::Create);
        assert_eq!(decide(out, root, state(true, false, true, false)).unwrap(), OutDecision::UseEmpty);
        assert_eq!(decide(out, root, state(true, true, false, false)).unwrap(), OutDecision::Replace);
        let err = decide(out, root, state(true, false, false, false)).unwrap_err();
        assert!(err.contains("not made by `cargo xtask bundle`") && err.contains(MARKER), "{err}");
        assert!(err.contains("nothing deleted"), "{err}");
        let file = OutState { exists: true, ..Default::default() };
        assert!(decide(out, root, file).unwrap_err().contains("not a folder"));
        // A sibling whose name starts like the repository's is not its ancestor.
        assert_eq!(
            decide(Path::new("/work/main-bundle"), root, OutState::default()).unwrap(),
            OutDecision::Create
        );
    }

    /// A fake checkout: `.git/`, a source file.
    fn checkout() -> tempfile::TempDir {
        let repo = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(repo.path().join(".git")).unwrap();
        std::fs::write(repo.path().join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::create_dir_all(repo.path().join("src")).unwrap();
        std::fs::write(repo.path().join("src/lib.rs"), "// source\n").unwrap();
        repo
    }

    #[test]
    fn out_dot_and_out_dotdot_are_refused_and_nothing_is_deleted() {
        let repo = checkout();
        for out in [".", "..", "src/..", ""] {
            assert!(plan_out(Path::new(out), repo.path()).is_err(), "--out {out:?} was accepted");
        }
        assert!(plan_out(repo.path(), repo.path()).is_err());
        assert!(repo.path().join(".git/HEAD").is_file() && repo.path().join("src/lib.rs").is_file());
    }

    #[cfg(unix)]
    #[test]
    fn a_symbolic_link_to_the_repository_is_refused() {
        let repo = checkout();
        let elsewhere = tempfile::tempdir().unwrap();
        let link = elsewhere.path().join("link");
        std::os::unix::fs::symlink(repo.path(), &link).unwrap();
        assert!(plan_out(&link, repo.path()).is_err());
    }

    #[test]
    fn a_folder_without_the_marker_is_an_error_and_kept() {
        let repo = checkout();
        let err = plan_out(Path::new("src"), repo.path()).unwrap_err();
        assert!(err.contains("not made by `cargo xtask bundle`"), "{err}");
        assert!(repo.path().join("src/lib.rs").is_file());
        // Another checkout elsewhere, even one that looks like an old bundle.
        let other = checkout();
        std::fs::write(other.path().join(MARKER), "").unwrap();
        assert!(plan_out(other.path(), repo.path()).unwrap_err().contains(".git"));
        assert!(other.path().join(".git/HEAD").is_file());
    }

    #[test]
    fn a_new_bundle_is_marked_and_replaced_next_time() {
        let repo = checkout();
        let (out, decision) = plan_out(Path::new("bundle"), repo.path()).unwrap();
        assert_eq!(decision, OutDecision::Create);
        prepare_out(&out, decision).unwrap();
        assert!(out.join(MARKER).is_file());
        std::fs::create_dir_all(out.join("tests")).unwrap();
        std::fs::write(out.join("tests/gpu"), "old").unwrap();
        let (again, decision) = plan_out(Path::new("bundle"), repo.path()).unwrap();
        assert_eq!((again.as_path(), decision), (out.as_path(), OutDecision::Replace));
        prepare_out(&out, decision).unwrap();
        assert!(out.join(MARKER).is_file() && !out.join("tests").exists());
        assert!(repo.path().join("src/lib.rs").is_file());
    }

    #[test]
    fn an_empty_folder_is_used_and_not_deleted() {
        let repo = checkout();
        std::fs::create_dir(repo.path().join("empty")).unwrap();
        let (out, decision) = plan_out(Path::new("empty"), repo.path()).unwrap();
        assert_eq!(decision, OutDecision::UseEmpty);
        prepare_out(&out, decision).unwrap();
        assert!(out.join(MARKER).is_file());
    }
}
