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
                      profile.release: panic=abort, codegen-units=1, opt-level=3; RUSTFLAGS=-C target-cpu=<arch> -C llvm-args=-unroll-threshold=UNROLL_THRESHOLD \
                      [sm_90a: -C target-feature=+ptx81]";

/// Extra target features per architecture: sm_90a's PTX declares ISA 8.1 (LLVM's default for
/// the target is 8.0), which vector reductions (`red.global.add.v2.f32`) need.
fn arch_features(arch: &str) -> &'static str {
    if arch == "sm_90a" { " -C target-feature=+ptx81" } else { "" }
}

/// LLVM's unroll threshold for the kernels. The kernels keep per-thread tiles in register
/// arrays indexed by loop counters; such an array stays in registers only when its loops are
/// unrolled completely (CUDA C++ says `#pragma unroll`). LLVM's default threshold gives up on the
/// larger head dimensions and moves the array to local memory, so it is raised.
const UNROLL_THRESHOLD: u32 = 4000;

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Manifest {
    /// `rustc --version` of the kernel compiler, for people.
    compiler: String,
    /// `rustc -vV` of the kernel compiler, line by line (release, commit-hash, commit-date, host,
    /// LLVM version): the check compares PTX bytes only when this machine's compiler has the same
    /// identity. Empty in manifests written before it was recorded (then the check compares by
    /// source hash only).
    #[serde(default)]
    compiler_identity: Vec<String>,
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
        .env(
            "RUSTFLAGS",
            format!(
                "-C target-cpu={arch} -C llvm-args=-unroll-threshold={UNROLL_THRESHOLD}{}",
                arch_features(arch)
            ),
        );
    println!("ptx: building {arch} with {} ({})", tc.origin, tc.version);
    crate::util::run(&mut cmd)?;
    let out = target_dir.join("nvptx64-nvidia-cuda/release/flashattn_kernels.ptx");
    let ptx = std::fs::read_to_string(&out).map_err(|e| format!("reading {}: {e}", out.display()))?;
    add_launch_bounds(&ptx, arch)
}

/// Writes each tensor-core kernel's launch bounds into the PTX: `.maxntid` (its threads per
/// block) and `.minnctapersm` (its `min_blocks`), the PTX that CUDA C++'s
/// `__launch_bounds__(threads, min_blocks)` produces. Rust has no attribute for them, and
/// without them ptxas may use all 255 registers per thread, which limits how many blocks share a
/// multiprocessor.
fn add_launch_bounds(ptx: &str, arch: &str) -> Result<String> {
    use flashattn_kernels::config::{
        BWD_CONFIGS, BWD_KERNELS, BWD_PREP_KERNELS, BWD_PREP_RES_KERNELS, MMA_CONFIGS, MMA_KERNELS,
        WGMMA_CONFIGS, WGMMA_KERNELS,
    };
    use flashattn_kernels::params::BWD_PREP_THREADS;
    let mut bounds: Vec<(&str, u32, u32)> = Vec::new();
    // The Hopper kernels exist in the sm_90a PTX only (one block per SM: 224 registers a thread).
    if arch == flashattn_kernels::registry::Target::Sm90a.name() {
        for names in WGMMA_KERNELS {
            bounds.extend(WGMMA_CONFIGS.iter().zip(names).map(|(c, n)| (n, c.threads(), 1)));
        }
    }
    for names in MMA_KERNELS {
        bounds.extend(MMA_CONFIGS.iter().zip(names).map(|(c, n)| (n, c.threads(), c.min_blocks)));
    }
    let hopper = arch == flashattn_kernels::registry::Target::Sm90a.name();
    // (Some backward instances exist in the sm_90a PTX only: `BwdConfig::sm90a_only`.)
    let on_arch = |c: &flashattn_kernels::config::BwdConfig| !c.sm90a_only() || hopper;
    for names in BWD_KERNELS {
        bounds.extend(
            BWD_CONFIGS
                .iter()
                .zip(names)
                .filter(|(c, _)| on_arch(c))
                .map(|(c, n)| (n, c.threads(), c.launch_min_blocks(hopper))),
        );
    }
    // The preprocessing kernels: 4 warps, three blocks per SM (170 registers; they hold two
    // 16×64 accumulators).
    for names in BWD_PREP_KERNELS {
        bounds.extend(
            BWD_CONFIGS.iter().zip(names).filter(|(c, _)| on_arch(c)).map(|(_, n)| (n, BWD_PREP_THREADS, 3)),
        );
    }
    // Their residual twins (sm_90a, instances without a window; `""` names none).
    if arch == flashattn_kernels::registry::Target::Sm90a.name() {
        for names in BWD_PREP_RES_KERNELS {
            bounds.extend(
                BWD_CONFIGS
                    .iter()
                    .zip(names)
                    .filter(|(_, n)| !n.is_empty())
                    .map(|(c, n)| (n, BWD_PREP_THREADS, c.prep_res_min_blocks())),
            );
        }
    }
    let mut out = ptx.to_string();
    for (name, threads, min_blocks) in bounds {
        let entry = format!(".entry {name}(");
        let start = out.find(&entry).ok_or_else(|| format!("kernel {name} is missing from the PTX"))?;
        let close =
            out[start..].find("\n)").map(|i| start + i + 2).ok_or_else(|| format!("unterminated {name}"))?;
        out.insert_str(close, &format!("\n.maxntid {threads}, 1, 1\n.minnctapersm {min_blocks}"));
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
        compiler_identity: tc.identity.clone(),
        source_hash: source_hash()?,
        recipe: RECIPE.into(),
        ptx: files,
    };
    let json = serde_json::to_string_pretty(&manifest).map_err(|e| e.to_string())? + "\n";
    std::fs::write(dir.join("manifest.json"), json).map_err(|e| e.to_string())?;
    println!("ptx: wrote {} ({})", dir.display(), manifest.source_hash);
    // Both gates run (and the report is written) before either fails the build.
    let gate = panic_gate();
    let report = resource_report(allow_spills);
    both(report, gate)
}

/// Ok when both are, else the errors, one after the other.
fn both(a: Result<()>, b: Result<()>) -> Result<()> {
    match (a, b) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
        (Err(a), Err(b)) => Err(format!("{a}\n{b}")),
    }
}

/// The panic gate over the committed PTX files: fails, naming the kernels and the panic
/// functions, when any kernel can reach a panic.
fn panic_gate() -> Result<()> {
    let mut failures = Vec::new();
    for (_, file) in TARGETS {
        let path = ptx_dir().join(file);
        let ptx = std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        match crate::panic_gate::verdict(&format!("host/ptx/{file}"), &ptx) {
            Ok(line) => println!("{line}"),
            Err(message) => failures.push(message),
        }
    }
    if failures.is_empty() { Ok(()) } else { Err(failures.join("\n")) }
}

/// Whether `ptx --check` can compare PTX bytes: only with the compiler that built them.
#[derive(Debug, PartialEq)]
enum ByteCheck {
    /// This machine's compiler has the recorded identity: rebuild and compare bytes.
    Compare,
    /// The manifest records no full compiler identity (written before it was recorded).
    IdentityAbsent,
    /// The recorded identity differs from this machine's compiler: these lines differ.
    IdentityDiffers(Vec<String>),
}

/// Decides [`ByteCheck`] from the recorded identity and this machine's compiler's.
fn byte_check(recorded: &[String], here: &[String]) -> ByteCheck {
    if recorded.is_empty() {
        return ByteCheck::IdentityAbsent;
    }
    if recorded == here {
        return ByteCheck::Compare;
    }
    let mut differing: Vec<String> =
        recorded.iter().filter(|l| !here.contains(l)).map(|l| format!("recorded `{l}`")).collect();
    differing.extend(here.iter().filter(|l| !recorded.contains(l)).map(|l| format!("here `{l}`")));
    ByteCheck::IdentityDiffers(differing)
}

/// Runs ptxas over the committed PTX, writes `host/ptx/ptxas-report.txt`, and fails on spills
/// and on serialised `wgmma` (both silent slowdowns; `--allow-spills` lets either through, for
/// experiments).
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
    let injected = kernels_where(&tables, |k| k.injected_waits > 0);
    if !injected.is_empty() {
        // Not a failure: the code is correct, but a product completes earlier than written.
        println!(
            "ptx: note: ptxas injected wgmma waits (C7517) in {} kernel(s): {}",
            injected.len(),
            injected.join(", ")
        );
    }
    let spilling = kernels_where(&tables, |k| k.spill_stores + k.spill_loads > 0);
    if !spilling.is_empty() && !allow_spills {
        return Err(format!(
            "ptxas reports register spills in: {}. Fix the kernel, or pass --allow-spills",
            spilling.join(", ")
        ));
    }
    let serialized = kernels_where(&tables, |k| k.wgmma_serialized);
    if !serialized.is_empty() && !allow_spills {
        return Err(format!(
            "ptxas serialises the wgmma instructions of: {} (C7514/C7515: an accumulator of an in-flight \
             wgmma is read or written before its wait). Fix the kernel, or pass --allow-spills",
            serialized.join(", ")
        ));
    }
    Ok(())
}

/// The kernels of every architecture's table that `keep` selects, as `name (arch)`.
fn kernels_where(
    tables: &[(&str, Vec<crate::ptxas::KernelResources>)],
    keep: impl Fn(&crate::ptxas::KernelResources) -> bool,
) -> Vec<String> {
    tables
        .iter()
        .flat_map(|(arch, ks)| ks.iter().filter(|k| keep(k)).map(move |k| format!("{} ({arch})", k.name)))
        .collect()
}

/// `cargo xtask ptx --check`: the freshness check and the panic gate, both run, either fails it.
pub fn check() -> Result<()> {
    let fresh = check_fresh();
    let gate = panic_gate();
    both(fresh, gate)
}

/// That the committed PTX matches the kernel sources (and, with the same compiler, a rebuild).
fn check_fresh() -> Result<()> {
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
    let tc = match toolchain::find() {
        Ok(tc) => tc,
        Err(_) => {
            println!("ptx check: no kernel toolchain here, so checked by source hash only");
            return Ok(());
        }
    };
    match byte_check(&manifest.compiler_identity, &tc.identity) {
        ByteCheck::Compare => {
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
        ByteCheck::IdentityAbsent => println!(
            "ptx check: recorded compiler identity absent (the manifest has `{}` but not its \
             `rustc -vV`) → compared by source hash only; `cargo xtask ptx` records it",
            manifest.compiler
        ),
        ByteCheck::IdentityDiffers(lines) => println!(
            "ptx check: recorded compiler identity differs → compared by source hash only: the PTX \
             was built by `{}`, this machine has `{}` ({}); differing: {}",
            manifest.compiler,
            tc.version,
            tc.origin,
            lines.join(", ")
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(commit: &str, llvm: &str) -> Vec<String> {
        crate::toolchain::parse_identity(&format!(
            "rustc 1.96.0 (ac68faa20 2026-05-25) (built from a source tarball)\nbinary: rustc\n\
             commit-hash: {commit}\ncommit-date: 2026-05-25\nhost: x86_64-unknown-linux-gnu\n\
             release: 1.96.0\nLLVM version: {llvm}\n"
        ))
    }

    #[test]
    fn manifests_without_the_compiler_identity_still_parse() {
        // The manifest as written before `rustc -vV` was recorded.
        let old = r#"{
  "compiler": "rustc 1.96.0 (ac68faa20 2026-05-25) (built from a source tarball)",
  "source_hash": "sha256:e05a",
  "recipe": "cargo rustc",
  "ptx": [{ "arch": "sm_80", "file": "flashattn_sm80.ptx", "sha256": "785a" }]
}"#;
        let m: Manifest = serde_json::from_str(old).expect("an old manifest parses");
        assert!(m.compiler_identity.is_empty());
        assert_eq!(
            byte_check(&m.compiler_identity, &identity("ac68faa2", "22.1.8")),
            ByteCheck::IdentityAbsent
        );
    }

    #[test]
    fn the_manifest_records_the_full_compiler_identity() {
        let m = Manifest {
            compiler: "rustc 1.96.0".into(),
            compiler_identity: identity("ac68faa2", "22.1.8"),
            source_hash: "sha256:0".into(),
            recipe: RECIPE.into(),
            ptx: Vec::new(),
        };
        let json = serde_json::to_string_pretty(&m).unwrap();
        assert!(json.contains("\"compiler_identity\""), "{json}");
        assert!(json.contains("LLVM version: 22.1.8"), "{json}");
        assert_eq!(serde_json::from_str::<Manifest>(&json).unwrap(), m);
    }

    #[test]
    fn bytes_are_compared_only_when_the_full_identity_matches() {
        let recorded = identity("ac68faa2", "22.1.8");
        assert_eq!(byte_check(&recorded, &identity("ac68faa2", "22.1.8")), ByteCheck::Compare);
        // Same `rustc --version` line, another LLVM: the bytes may differ, so no comparison.
        let ByteCheck::IdentityDiffers(lines) = byte_check(&recorded, &identity("ac68faa2", "22.1.9")) else {
            panic!("another LLVM must not be byte-compared")
        };
        assert_eq!(lines, ["recorded `LLVM version: 22.1.8`", "here `LLVM version: 22.1.9`"]);
        assert!(matches!(
            byte_check(&recorded, &identity("0000000", "22.1.8")),
            ByteCheck::IdentityDiffers(_)
        ));
        assert!(matches!(byte_check(&recorded, &[]), ByteCheck::IdentityDiffers(_)));
    }
}
