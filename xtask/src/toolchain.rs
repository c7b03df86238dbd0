//! Finding (and on Debian, installing) the kernel toolchain.
//!
//! The kernels need a rustc that accepts nightly features, has the `nvptx64-nvidia-cuda` target
//! and `core`'s sources (for `-Zbuild-std=core`), and the `llvm-bitcode-linker` that the nvptx
//! target links with. Looked for in this order:
//! 1. `FLASHATTN_KERNEL_RUSTC` (path of a rustc), with optional `FLASHATTN_KERNEL_CARGO` and
//!    `FLASHATTN_KERNEL_PATH` (directories put first in `PATH`, e.g. the linker's);
//! 2. a rustup `nightly` with the components `rust-src` and `llvm-bitcode-linker`;
//! 3. Debian's `rustc-web` + `rust-web-src` (`/usr/bin/rustc`, LLVM tools of the same major
//!    version under `/usr/lib/llvm-N/bin`), with `llvm-bitcode-linker` built from Debian's
//!    source tree into `target/kernel-toolchain/bin`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{self, Result, output, root, which};

/// A kernel toolchain that was found, and how to run its cargo.
pub struct Toolchain {
    /// Where it came from, for messages.
    pub origin: &'static str,
    /// `rustc --version` of the kernel compiler: recorded in the PTX manifest.
    pub version: String,
    rustc: PathBuf,
    cargo: PathBuf,
    path_prefix: Vec<PathBuf>,
    rustup_toolchain: Option<&'static str>,
}

impl Toolchain {
    /// A `cargo` command set up to build with this toolchain.
    pub fn cargo(&self) -> Command {
        let mut cmd = Command::new(&self.cargo);
        for var in [
            "RUSTFLAGS",
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_TARGET",
            "RUSTC_WRAPPER",
        ] {
            cmd.env_remove(var);
        }
        cmd.env("RUSTC", &self.rustc).env("RUSTC_BOOTSTRAP", "1");
        match self.rustup_toolchain {
            Some(t) => cmd.env("RUSTUP_TOOLCHAIN", t),
            None => cmd.env_remove("RUSTUP_TOOLCHAIN"),
        };
        let old = std::env::var_os("PATH").unwrap_or_default();
        let paths = self.path_prefix.iter().cloned().chain(std::env::split_paths(&old));
        if let Ok(joined) = std::env::join_paths(paths) {
            cmd.env("PATH", joined);
        }
        cmd
    }
}

/// Where `cargo xtask setup` puts what it builds.
pub fn install_dir() -> PathBuf {
    root().join("target").join("kernel-toolchain")
}

fn rustc_version(rustc: &Path) -> Option<String> {
    output(Command::new(rustc).arg("--version")).map(|s| s.trim().to_string())
}

fn llvm_major(rustc: &Path) -> Option<u32> {
    let vv = output(Command::new(rustc).arg("-vV"))?;
    let line = vv.lines().find_map(|l| l.strip_prefix("LLVM version: "))?;
    line.split('.').next()?.trim().parse().ok()
}

fn has_core_sources(rustc: &Path) -> bool {
    output(Command::new(rustc).args(["--print", "sysroot"]))
        .map(|s| Path::new(s.trim()).join("lib/rustlib/src/rust/library/core/Cargo.toml").is_file())
        .unwrap_or(false)
}

fn from_env() -> Option<std::result::Result<Toolchain, String>> {
    let rustc = PathBuf::from(std::env::var_os("FLASHATTN_KERNEL_RUSTC")?);
    let Some(version) = rustc_version(&rustc) else {
        return Some(Err(format!("FLASHATTN_KERNEL_RUSTC={} does not run", rustc.display())));
    };
    let cargo =
        std::env::var_os("FLASHATTN_KERNEL_CARGO").map(PathBuf::from).unwrap_or_else(|| "cargo".into());
    let path_prefix = std::env::var_os("FLASHATTN_KERNEL_PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    Some(Ok(Toolchain {
        origin: "FLASHATTN_KERNEL_RUSTC",
        version,
        rustc,
        cargo,
        path_prefix,
        rustup_toolchain: None,
    }))
}

fn from_rustup() -> std::result::Result<Toolchain, String> {
    let Some(installed) =
        output(Command::new("rustup").args(["component", "list", "--installed", "--toolchain", "nightly"]))
    else {
        return Err("rustup nightly: not installed (or no rustup)".into());
    };
    let missing: Vec<_> = ["rust-src", "llvm-bitcode-linker"]
        .into_iter()
        .filter(|c| !installed.lines().any(|l| l.starts_with(c)))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "rustup nightly: lacks {} (`rustup component add {} --toolchain nightly`)",
            missing.join(" and "),
            missing.join(" ")
        ));
    }
    let rustc = output(Command::new("rustup").args(["which", "rustc", "--toolchain", "nightly"]))
        .map(|s| PathBuf::from(s.trim()))
        .ok_or("rustup nightly: `rustup which rustc` failed")?;
    let version = rustc_version(&rustc).ok_or("rustup nightly: rustc does not run")?;
    Ok(Toolchain {
        origin: "rustup nightly",
        version,
        rustc,
        cargo: "cargo".into(),
        path_prefix: Vec::new(),
        rustup_toolchain: Some("nightly"),
    })
}

fn debian_rustc() -> PathBuf {
    PathBuf::from("/usr/bin/rustc")
}

fn bitcode_linker() -> Option<PathBuf> {
    let ours = install_dir().join("bin/llvm-bitcode-linker");
    if ours.is_file() { Some(ours) } else { which("llvm-bitcode-linker") }
}

fn from_debian() -> std::result::Result<Toolchain, String> {
    let rustc = debian_rustc();
    let version = rustc_version(&rustc)
        .ok_or("Debian rustc-web: /usr/bin/rustc not found (apt-get install rustc-web)")?;
    if !has_core_sources(&rustc) {
        return Err("Debian rustc-web: core's sources missing (apt-get install rust-web-src)".into());
    }
    let major = llvm_major(&rustc).ok_or("Debian rustc-web: cannot read its LLVM version")?;
    let llvm_bin = PathBuf::from(format!("/usr/lib/llvm-{major}/bin"));
    if !llvm_bin.join("llc").is_file() {
        return Err(format!(
            "Debian rustc-web: {}/llc missing (apt-get install llvm-{major})",
            llvm_bin.display()
        ));
    }
    let linker = bitcode_linker().ok_or(
        "Debian rustc-web: llvm-bitcode-linker not built (`cargo xtask setup` builds it from rust-web-src)",
    )?;
    let linker_dir = linker.parent().map(Path::to_path_buf).unwrap_or_default();
    let cargo = if Path::new("/usr/bin/cargo").is_file() { "/usr/bin/cargo".into() } else { "cargo".into() };
    Ok(Toolchain {
        origin: "Debian rustc-web",
        version,
        rustc,
        cargo,
        path_prefix: vec![llvm_bin, linker_dir],
        rustup_toolchain: None,
    })
}

/// The first kernel toolchain found, or why each candidate failed.
pub fn find() -> std::result::Result<Toolchain, Vec<String>> {
    let mut reasons = Vec::new();
    if let Some(found) = from_env() {
        match found {
            Ok(t) => return Ok(t),
            Err(e) => reasons.push(e),
        }
    }
    for candidate in [from_rustup, from_debian] {
        match candidate() {
            Ok(t) => return Ok(t),
            Err(e) => reasons.push(e),
        }
    }
    Err(reasons)
}

/// `find()`, turned into the message `cargo xtask ptx` prints when nothing is there.
pub fn require() -> Result<Toolchain> {
    find().map_err(|reasons| {
        format!(
            "no kernel toolchain found:\n  - {}\nRun `cargo xtask setup` to install one (Debian), or see the README.",
            reasons.join("\n  - ")
        )
    })
}

fn privileged(program: &str) -> Command {
    // Root runs apt-get itself; anyone else needs passwordless sudo.
    let is_root = output(Command::new("id").arg("-u")).map(|s| s.trim() == "0").unwrap_or(false);
    if is_root {
        Command::new(program)
    } else {
        let mut cmd = Command::new("sudo");
        cmd.arg("-n").arg(program);
        cmd
    }
}

fn install_debian() -> Result<()> {
    if !Path::new("/etc/debian_version").is_file() {
        return Err("not a Debian system: install a rustup nightly with `rustup component add rust-src \
                    llvm-bitcode-linker --toolchain nightly`, or set FLASHATTN_KERNEL_RUSTC"
            .into());
    }
    if rustc_version(&debian_rustc()).is_none() || !has_core_sources(&debian_rustc()) {
        println!("setup: installing rustc-web and rust-web-src with apt-get");
        util::run(privileged("apt-get").args(["update", "-q"]))?;
        util::run(privileged("apt-get").env("DEBIAN_FRONTEND", "noninteractive").args([
            "install",
            "-y",
            "-q",
            "rustc-web",
            "rust-web-src",
        ]))
        .map_err(|e| format!("{e}\n(needs root or passwordless sudo)"))?;
    }
    if bitcode_linker().is_none() {
        let version = rustc_version(&debian_rustc()).unwrap_or_default();
        let number = version.split_whitespace().nth(1).unwrap_or_default();
        let src = PathBuf::from(format!("/usr/src/rustc-{number}/src/tools/llvm-bitcode-linker"));
        if !src.join("Cargo.toml").is_file() {
            return Err(format!("{} not found: rust-web-src should ship it", src.display()));
        }
        println!(
            "setup: building llvm-bitcode-linker from {} into {}",
            src.display(),
            install_dir().display()
        );
        util::run(
            util::cargo()
                .current_dir("/")
                .env_remove("RUSTUP_TOOLCHAIN")
                .args(["install", "--quiet", "--path"])
                .arg(&src)
                .arg("--root")
                .arg(install_dir()),
        )?;
    }
    Ok(())
}

/// `cargo xtask setup`.
pub fn setup(install: bool) -> Result<()> {
    let found = match find() {
        Ok(t) => Ok(t),
        Err(reasons) if install => {
            println!("setup: no kernel toolchain yet:\n  - {}", reasons.join("\n  - "));
            install_debian()?;
            require()
        }
        Err(_) => require(),
    }?;
    println!("kernel toolchain: {} ({})", found.origin, found.version);
    match crate::ptxas::find() {
        Some(p) => println!("ptxas: {}", p.display()),
        None if install => {
            let p = crate::ptxas::install()?;
            println!("ptxas: {} (installed)", p.display());
        }
        None => println!("ptxas: not found (reports skipped; `cargo xtask setup` installs it from PyPI)"),
    }
    Ok(())
}
