//! `cargo xtask ptx`: kernels-gpu → committed PTX, and the freshness check.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::toolchain::{self, Toolchain};
use crate::util::{Result, root};

/// The PTX targets: (ptxas/-C target-cpu name, committed file name).
const TARGETS: [(&str, &str); 2] = [("sm_80", "flashattn_sm80.ptx"), ("sm_90a", "flashattn_sm90a.ptx")];

/// How the PTX is built. Part of the source hash, so a change here also marks the PTX stale.
const RECIPE: &str = "cargo rustc --release --target nvptx64-nvidia-cuda -Zbuild-std=core --crate-type cdylib; \
                      profile.release: panic=abort, codegen-units=1, opt-level=3; RUSTFLAGS=-C target-cpu=<arch> -C llvm-args=-unroll-threshold=UNROLL_THRESHOLD";

/// LLVM's unroll threshold for the kernels. The kernels keep per-thread tiles in register
/// arrays indexed by loop counters; such an array stays in registers only when its loops are
/// unrolled completely (CUDA C++ says `#pragma unroll`). LLVM's default threshold gives up on the
/// larger head dimensions and moves the array to local memory, so it is raised.
const UNROLL_THRESHOLD: u32 = 4000;

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Manifest {
    /// `rustc --version` of the kernel compiler.
    compiler: String,
    /// sha256 of the kernel crate's sources and the recipe.
    source_hash: String,
    recipe: String,
    ptx: Vec<PtxFile>,
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct PtxFile {
    arch: String,
    file: String,
    sha256: String,
}

fn ptx_dir() -> PathBuf {
    root().join("host").join("ptx")
}

fn hex(digest: impl AsRef<[u8]>) -> String {
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            files_under(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

/// sha256 over the recipe and every file of `kernels-gpu` (Cargo.toml and src/), by relative path.
fn source_hash() -> Result<String> {
    let crate_dir = root().join("kernels-gpu");
    let mut files = vec![crate_dir.join("Cargo.toml")];
    files_under(&crate_dir.join("src"), &mut files)?;
    files.sort();
    let mut h = Sha256::new();
    h.update(RECIPE.replace("UNROLL_THRESHOLD", &UNROLL_THRESHOLD.to_string()).as_bytes());
    for f in files {
        let rel = f.strip_prefix(&crate_dir).unwrap_or(&f).to_string_lossy().replace('\\', "/");
        let bytes = std::fs::read(&f).map_err(|e| format!("reading {}: {e}", f.display()))?;
        h.update(rel.as_bytes());
        h.update([0]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Ok(format!("sha256:{}", hex(h.finalize())))
}

/// Compiles the kernel crate for one arch and returns the PTX text.
fn compile(tc: &Toolchain, arch: &str, target_dir: &Path) -> Result<String> {
    let manifest = root().join("kernels-gpu").join("Cargo.toml");
    let mut cmd = tc.cargo();
    cmd.arg("rustc")
        .arg("--manifest-path")
        .arg(&manifest)
        .args(["--release", "--target", "nvptx64-nvidia-cuda", "-Zbuild-std=core", "--crate-type", "cdylib"])
        .arg("--target-dir")
        .arg(target_dir)
        .args(["--config", "profile.release.panic=\"abort\""])
        .args(["--config", "profile.release.codegen-units=1"])
        .args(["--config", "profile.release.opt-level=3"])
        .env("RUSTFLAGS", format!("-C target-cpu={arch} -C llvm-args=-unroll-threshold={UNROLL_THRESHOLD}"));
    println!("ptx: building {arch} with {} ({})", tc.origin, tc.version);
    crate::util::run(&mut cmd)?;
    let out = target_dir.join("nvptx64-nvidia-cuda/release/flashattn_kernels.ptx");
    let ptx = std::fs::read_to_string(&out).map_err(|e| format!("reading {}: {e}", out.display()))?;
    add_launch_bounds(&ptx)
}

/// Writes each tensor-core kernel's launch bounds into the PTX: `.maxntid` (its threads per
/// block) and `.minnctapersm` (its `min_blocks`), the PTX that CUDA C++'s
/// `__launch_bounds__(threads, min_blocks)` produces. Rust has no attribute for them, and
/// without them ptxas may use all 255 registers per thread, which limits how many blocks share a
/// multiprocessor.
fn add_launch_bounds(ptx: &str) -> Result<String> {
    use flashattn_kernels::config::{MMA_CONFIGS, MMA_KERNELS};
    let mut out = ptx.to_string();
    for names in MMA_KERNELS {
        for (config, name) in MMA_CONFIGS.iter().zip(names) {
            let entry = format!(".entry {name}(");
            let start = out.find(&entry).ok_or_else(|| format!("kernel {name} is missing from the PTX"))?;
            let close = out[start..]
                .find("\n)")
                .map(|i| start + i + 2)
                .ok_or_else(|| format!("unterminated {name}"))?;
            let bounds =
                format!("\n.maxntid {}, 1, 1\n.minnctapersm {}", config.threads(), config.min_blocks);
            out.insert_str(close, &bounds);
        }
    }
    Ok(out)
}

fn read_manifest() -> Result<Manifest> {
    let path = ptx_dir().join("manifest.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("{}: {e}; run `cargo xtask ptx`", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}; run `cargo xtask ptx`", path.display()))
}

/// `cargo xtask ptx`.
pub fn build(allow_spills: bool) -> Result<()> {
    let tc = toolchain::require()?;
    let dir = ptx_dir();
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut files = Vec::new();
    for (arch, file) in TARGETS {
        let ptx = compile(&tc, arch, &root().join("target/ptx").join(arch))?;
        std::fs::write(dir.join(file), &ptx).map_err(|e| e.to_string())?;
        files.push(PtxFile {
            arch: arch.into(),
            file: file.into(),
            sha256: hex(Sha256::digest(ptx.as_bytes())),
        });
    }
    let manifest = Manifest {
        compiler: tc.version.clone(),
        source_hash: source_hash()?,
        recipe: RECIPE.into(),
        ptx: files,
    };
    let json = serde_json::to_string_pretty(&manifest).map_err(|e| e.to_string())? + "\n";
    std::fs::write(dir.join("manifest.json"), json).map_err(|e| e.to_string())?;
    println!("ptx: wrote {} ({})", dir.display(), manifest.source_hash);
    resource_report(allow_spills)
}

/// Runs ptxas over the committed PTX, writes `host/ptx/ptxas-report.txt`, and fails on spills.
fn resource_report(allow_spills: bool) -> Result<()> {
    let Some(ptxas) = crate::ptxas::find() else {
        println!("ptx: ptxas not found, no resource report (`cargo xtask setup` installs it)");
        return Ok(());
    };
    let mut tables = Vec::new();
    let mut version = String::new();
    for (arch, file) in TARGETS {
        let (v, kernels) = crate::ptxas::report(&ptxas, &ptx_dir().join(file), arch)?;
        version = v;
        tables.push((arch, kernels));
    }
    let text = crate::ptxas::format(&version, &tables);
    print!("{text}");
    std::fs::write(ptx_dir().join("ptxas-report.txt"), &text).map_err(|e| e.to_string())?;
    let spilling: Vec<String> = tables
        .iter()
        .flat_map(|(arch, ks)| {
            ks.iter()
                .filter(|k| k.spill_stores + k.spill_loads > 0)
                .map(move |k| format!("{} ({arch})", k.name))
        })
        .collect();
    if !spilling.is_empty() && !allow_spills {
        return Err(format!(
            "ptxas reports register spills in: {}. Fix the kernel, or pass --allow-spills",
            spilling.join(", ")
        ));
    }
    Ok(())
}

/// `cargo xtask ptx --check`.
pub fn check() -> Result<()> {
    let manifest = read_manifest()?;
    let hash = source_hash()?;
    if manifest.source_hash != hash {
        return Err(format!(
            "host/ptx is stale: kernels-gpu changed since the PTX was built \
             (manifest {}, sources {hash}). Run `cargo xtask ptx` (needs the kernel toolchain: \
             `cargo xtask setup`) and commit host/ptx/",
            manifest.source_hash
        ));
    }
    for f in &manifest.ptx {
        let bytes = std::fs::read(ptx_dir().join(&f.file)).map_err(|e| format!("{}: {e}", f.file))?;
        if hex(Sha256::digest(&bytes)) != f.sha256 {
            return Err(format!(
                "host/ptx/{} does not match its manifest entry: run `cargo xtask ptx`",
                f.file
            ));
        }
    }
    println!("ptx check: source hash matches ({hash})");
    match toolchain::find() {
        Ok(tc) if tc.version == manifest.compiler => {
            for f in &manifest.ptx {
                let fresh = compile(&tc, &f.arch, &root().join("target/ptx-check").join(&f.arch))?;
                if hex(Sha256::digest(fresh.as_bytes())) != f.sha256 {
                    return Err(format!(
                        "a rebuild of {} differs from the committed host/ptx/{}: run `cargo xtask ptx`",
                        f.arch, f.file
                    ));
                }
            }
            println!("ptx check: rebuilt with {} and compared: byte-identical", tc.version);
        }
        Ok(tc) => println!(
            "ptx check: byte comparison skipped: the PTX was built by `{}`, this machine has `{}` ({})",
            manifest.compiler, tc.version, tc.origin
        ),
        Err(_) => println!("ptx check: no kernel toolchain here, so checked by source hash only"),
    }
    Ok(())
}
