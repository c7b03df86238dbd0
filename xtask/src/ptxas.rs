//! `ptxas` resource reports: registers, spills, stack, shared memory and barriers per kernel.
//!
//! ptxas comes from a CUDA toolkit or from the `nvidia-cuda-nvcc` wheel on PyPI (which
//! `cargo xtask setup` installs into `target/kernel-toolchain/cuda-nvcc`); no GPU is needed.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::toolchain::install_dir;
use crate::util::{Result, output, which};

/// The CUDA release whose ptxas `setup` installs: it matches the driver on the project's H200.
const NVCC_WHEEL: &str = "nvidia-cuda-nvcc==13.0.*";

fn wheel_ptxas(site: &Path) -> Option<PathBuf> {
    let nvidia = site.join("nvidia");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&nvidia)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("bin/ptxas"))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop()
}

/// Finds ptxas: `FLASHATTN_PTXAS`, `PATH`, `$CUDA_HOME/bin`, `/usr/local/cuda/bin`, the wheel
/// that `setup` installed, then a wheel in python3's site-packages.
pub fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FLASHATTN_PTXAS") {
        return Some(PathBuf::from(p));
    }
    if let Some(p) = which("ptxas") {
        return Some(p);
    }
    let cuda_home =
        std::env::var_os("CUDA_HOME").map(PathBuf::from).unwrap_or_else(|| "/usr/local/cuda".into());
    let toolkit = cuda_home.join("bin/ptxas");
    if toolkit.is_file() {
        return Some(toolkit);
    }
    if let Some(p) = wheel_ptxas(&install_dir().join("cuda-nvcc")) {
        return Some(p);
    }
    let site = output(
        Command::new("python3").args(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]),
    )?;
    wheel_ptxas(Path::new(site.trim()))
}

/// Installs ptxas from PyPI into `target/kernel-toolchain/cuda-nvcc`.
pub fn install() -> Result<PathBuf> {
    let dest = install_dir().join("cuda-nvcc");
    println!("setup: installing ptxas ({NVCC_WHEEL}) into {}", dest.display());
    crate::util::run_fetching(
        Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "--no-deps", "--only-binary=:all:", "--target"])
            .arg(&dest)
            .arg(NVCC_WHEEL),
        "PyPI (the nvidia-cuda-nvcc wheel, for ptxas)",
        &format!(
            "install ptxas by hand (a CUDA toolkit, or `pip install '{NVCC_WHEEL}'`) and set \
             FLASHATTN_PTXAS to it; without ptxas only the register/spill report is skipped"
        ),
    )?;
    wheel_ptxas(&dest).ok_or_else(|| format!("the wheel installed, but no ptxas under {}", dest.display()))
}

/// One kernel's resources as ptxas reports them.
#[derive(Debug, Default, Clone)]
pub struct KernelResources {
    pub name: String,
    pub registers: u32,
    pub stack_bytes: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
    pub shared_bytes: u32,
    pub barriers: u32,
    /// ptxas serialised this kernel's `wgmma` instructions (info C7514/C7515: a register an
    /// in-flight `wgmma` accumulates into was read or written meanwhile): each product then
    /// waits for the previous one, a silent loss of most of Hopper's overlap.
    pub wgmma_serialized: bool,
    /// Waits ptxas added for this kernel's `wgmma` results (info C7517: "warpgroup.wait is
    /// injected … to allow use of registers defined by GMMA"): a product completed earlier than
    /// the code asked, e.g. where a path leaves a loop with a product in flight and no wait of
    /// its own (NOTES v44c). Not an error (the code stays correct), but the overlap meant there
    /// is not what runs.
    pub injected_waits: u32,
}

/// The function a ptxas "wgmma … serialized … in the function 'NAME'" line names.
fn serialized_wgmma_function(line: &str) -> Option<&str> {
    if !line.contains("wgmma.mma_async instructions are serialized") {
        return None;
    }
    line.split("in the function '").nth(1).and_then(|rest| rest.split('\'').next())
}

/// The function a ptxas "warpgroup.wait is injected … in function 'NAME'" line names.
fn injected_wait_function(line: &str) -> Option<&str> {
    if !line.contains("warpgroup.wait is injected") {
        return None;
    }
    line.split("in function '").nth(1).and_then(|rest| rest.split('\'').next())
}

fn number_before(text: &str, unit: &str) -> u32 {
    text.find(unit)
        .and_then(|i| text[..i].split_whitespace().last())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Runs `ptxas -v` on one PTX file for `arch`; returns ptxas's version line and one entry per kernel.
pub fn report(ptxas: &Path, ptx: &Path, arch: &str) -> Result<(String, Vec<KernelResources>)> {
    let version = output(Command::new(ptxas).arg("--version"))
        .and_then(|v| v.lines().last().map(str::to_string))
        .unwrap_or_default();
    let out = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .arg(ptx)
        .args(["-o", "/dev/null"])
        .output()
        .map_err(|e| format!("could not run {}: {e}", ptxas.display()))?;
    let text = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("ptxas rejected {}:\n{text}", ptx.display()));
    }
    let mut kernels: Vec<KernelResources> = Vec::new();
    // The properties line that follows "Function properties for NAME" belongs to NAME, which is
    // the kernel being compiled or a function it calls (those are skipped).
    let mut properties_of_kernel = false;
    // The serialisation notes come before the kernel's own lines: collected by name first.
    let serialized: Vec<&str> = text.lines().filter_map(serialized_wgmma_function).collect();
    let injected: Vec<&str> = text.lines().filter_map(injected_wait_function).collect();
    for line in text.lines() {
        if serialized_wgmma_function(line).is_some() || injected_wait_function(line).is_some() {
            continue;
        }
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            kernels.push(KernelResources { name, ..Default::default() });
        } else if let Some(name) = line.split("Function properties for ").nth(1) {
            properties_of_kernel = kernels.last().is_some_and(|k| k.name == name.trim());
        } else if let Some(k) = kernels.last_mut() {
            if line.contains("bytes stack frame") && properties_of_kernel {
                k.stack_bytes = number_before(line, "bytes stack frame");
                k.spill_stores = number_before(line, "bytes spill stores");
                k.spill_loads = number_before(line, "bytes spill loads");
                properties_of_kernel = false;
            } else if line.contains("Used") && line.contains("registers") {
                k.registers = number_before(line, "registers");
                k.barriers = number_before(line, "barriers");
                k.shared_bytes = number_before(line, "bytes smem");
            }
        }
    }
    for k in &mut kernels {
        k.wgmma_serialized = serialized.contains(&k.name.as_str());
        k.injected_waits = injected.iter().filter(|&&f| f == k.name).count() as u32;
    }
    Ok((version, kernels))
}

/// The committed report's text: one table per arch.
pub fn format(version: &str, tables: &[(&str, Vec<KernelResources>)]) -> String {
    let mut s = format!("# ptxas resource report ({version})\n");
    s += "# Regenerated by `cargo xtask ptx`. smem is static shared memory; the dynamic part is set per launch.\n";
    for (arch, kernels) in tables {
        s += &format!(
            "\n## {arch}\n{:<44} {:>5} {:>6} {:>7} {:>7} {:>7} {:>4}{}{}\n",
            "kernel",
            "regs",
            "stack",
            "spill-s",
            "spill-l",
            "smem",
            "bar",
            if kernels.iter().any(|k| k.wgmma_serialized) { "  wgmma" } else { "" },
            if kernels.iter().any(|k| k.injected_waits > 0) { "  injected-waits" } else { "" }
        );
        for k in kernels {
            s += &format!(
                "{:<44} {:>5} {:>6} {:>7} {:>7} {:>7} {:>4}{}{}\n",
                k.name,
                k.registers,
                k.stack_bytes,
                k.spill_stores,
                k.spill_loads,
                k.shared_bytes,
                k.barriers,
                if k.wgmma_serialized { "  serialized" } else { "" },
                if k.injected_waits > 0 { format!("  {}", k.injected_waits) } else { String::new() }
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_kernel_whose_wgmma_ptxas_serialised() {
        let line = "ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are \
                    serialized due to non wgmma instructions reading accumulator registers of  a wgmma \
                    between start and end of the pipeline stage in the function 'flash_fwd_wgmma_bf16_d64'";
        assert_eq!(serialized_wgmma_function(line), Some("flash_fwd_wgmma_bf16_d64"));
        assert_eq!(serialized_wgmma_function("ptxas info    : Used 168 registers, used 1 barriers"), None);
    }

    #[test]
    fn finds_the_kernel_where_ptxas_injected_a_wgmma_wait() {
        let line = "ptxas info    : (C7517) warpgroup.wait is injected in around line 3386 by compiler to \
                    allow use of registers defined by GMMA in function 'flash_fwd_wgmma_bf16_d64_persistent'";
        assert_eq!(injected_wait_function(line), Some("flash_fwd_wgmma_bf16_d64_persistent"));
        assert_eq!(serialized_wgmma_function(line), None);
        assert_eq!(injected_wait_function("ptxas info    : Used 168 registers, used 1 barriers"), None);
    }
}
