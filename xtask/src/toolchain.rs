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
//!
//! `setup` installs the Debian packages at the exact versions pinned below, and the linker with
//! `cargo install --locked`, so that a machine set up today builds the same PTX as the one that
//! built the committed PTX.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{self, Result, output, root, which};

/// The exact `rustc-web` that `setup` installs with apt: the package that built the committed
/// PTX (rustc 1.96.0, commit ac68faa20, LLVM 22.1.8; Debian bookworm-security). Read with
/// `dpkg-query -W rustc-web rust-web-src` on the build machine. A new pin means a new PTX build:
/// change both versions together, then run `cargo xtask setup` and `cargo xtask ptx`.
pub const RUSTC_WEB_VERSION: &str = "1.96.0+dfsg1-1~deb12u2";
/// The exact `rust-web-src` (core's sources, and the llvm-bitcode-linker's) that `setup`
/// installs: the same source package as [`RUSTC_WEB_VERSION`].
pub const RUST_WEB_SRC_VERSION: &str = "1.96.0+dfsg1-1~deb12u2";

/// The Debian packages `setup` installs, with their pinned versions.
const DEBIAN_PINS: [(&str, &str); 2] =
    [("rustc-web", RUSTC_WEB_VERSION), ("rust-web-src", RUST_WEB_SRC_VERSION)];

/// What to do when `setup` cannot install the pinned packages itself.
fn apt_by_hand() -> String {
    format!(
        "install rustc-web={RUSTC_WEB_VERSION} and rust-web-src={RUST_WEB_SRC_VERSION} by hand (apt-get, \
         or the .deb files from snapshot.debian.org), or set FLASHATTN_KERNEL_RUSTC to another \
         nightly-capable rustc (see the README)"
    )
}

/// A kernel toolchain that was found, and how to run its cargo.
pub struct Toolchain {
    /// Where it came from, for messages.
    pub origin: &'static str,
    /// `rustc --version` of the kernel compiler: recorded in the PTX manifest, for people.
    pub version: String,
    /// `rustc -vV` of the kernel compiler, line by line (release, commit-hash, commit-date, host,
    /// LLVM version): recorded in the PTX manifest; the PTX check compares bytes only when this
    /// matches. Empty when `rustc -vV` does not run.
    pub identity: Vec<String>,
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

/// `rustc -vV`, line by line: the compiler's full identity.
fn rustc_identity(rustc: &Path) -> Vec<String> {
    parse_identity(&output(Command::new(rustc).arg("-vV")).unwrap_or_default())
}

/// The non-empty lines of `rustc -vV`'s output, trimmed.
pub fn parse_identity(vv: &str) -> Vec<String> {
    vv.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect()
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
        identity: rustc_identity(&rustc),
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
        identity: rustc_identity(&rustc),
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
        identity: rustc_identity(&rustc),
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

/// The versions of `package` that `apt-cache madison` lists (lines `package | version | source`).
fn offered_versions<'a>(madison: &'a str, package: &str) -> Vec<&'a str> {
    let mut found: Vec<&str> = madison
        .lines()
        .filter_map(|line| {
            let mut fields = line.split('|').map(str::trim);
            (fields.next()? == package).then_some(())?;
            fields.next().filter(|v| !v.is_empty())
        })
        .collect();
    found.dedup();
    found
}

/// Whether apt offers every pinned package at its exact version, judged from `apt-cache
/// madison`'s output: Ok, or a message saying, per package, what apt offers and what is
/// expected. `no_network` is the line of `apt-get update` that showed the repositories could not
/// be reached, if one did: then that is the first thing the message says.
fn check_offered(madison: &str, pins: &[(&str, &str)], no_network: Option<&str>) -> Result<()> {
    let missing: Vec<String> = pins
        .iter()
        .filter_map(|&(package, version)| {
            let offered = offered_versions(madison, package);
            (!offered.contains(&version)).then(|| {
                let found = if offered.is_empty() { "none".to_string() } else { offered.join(", ") };
                format!("{package}: apt offers {found}; expected {version}")
            })
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let found = missing.join("; ");
    Err(match no_network {
        Some(evidence) => format!(
            "{} ({found})",
            util::no_network_message("the apt repositories", evidence, &apt_by_hand())
        ),
        None => format!(
            "apt cannot provide the pinned kernel compiler: {found} (the compiler of the committed \
             PTX). Debian's security archive keeps only its newest update, so a pinned version can \
             disappear: {}. To move the pin instead, change RUSTC_WEB_VERSION and \
             RUST_WEB_SRC_VERSION in xtask/src/toolchain.rs, then run `cargo xtask setup` and \
             `cargo xtask ptx`",
            apt_by_hand()
        ),
    })
}

/// The installed version of a Debian package, if it is installed.
fn installed_version(package: &str) -> Option<String> {
    output(Command::new("dpkg-query").args(["-W", "-f=${Version}", package]))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

fn install_debian() -> Result<()> {
    if !Path::new("/etc/debian_version").is_file() {
        return Err("not a Debian system: install a rustup nightly with `rustup component add rust-src \
                    llvm-bitcode-linker --toolchain nightly`, or set FLASHATTN_KERNEL_RUSTC"
            .into());
    }
    if rustc_version(&debian_rustc()).is_none() || !has_core_sources(&debian_rustc()) {
        let wanted: Vec<String> = DEBIAN_PINS.iter().map(|(p, v)| format!("{p}={v}")).collect();
        println!("setup: installing {} with apt-get", wanted.join(" "));
        let (status, update_log) = util::run_keeping_stderr(privileged("apt-get").args(["update", "-q"]))?;
        // apt-get update exits 0 when it cannot reach a repository (it warns and keeps the old
        // lists), so its stderr is what says whether the network was there.
        let offline = util::no_network_evidence(&update_log).map(str::to_string);
        if !status.success() && offline.is_none() {
            return Err(format!("apt-get update failed with {status}\n(needs root or passwordless sudo)"));
        }
        let names = DEBIAN_PINS.map(|(p, _)| p);
        let madison = output(Command::new("apt-cache").arg("madison").args(names)).unwrap_or_default();
        check_offered(&madison, &DEBIAN_PINS, offline.as_deref())?;
        let (status, install_log) = util::run_keeping_stderr(
            privileged("apt-get")
                .env("DEBIAN_FRONTEND", "noninteractive")
                .args(["install", "-y", "-q"])
                .args(&wanted),
        )?;
        if !status.success() {
            return Err(match util::no_network_evidence(&install_log) {
                Some(evidence) => util::no_network_message("the apt repositories", evidence, &apt_by_hand()),
                None => format!(
                    "apt-get install {} failed with {status}\n(needs root or passwordless sudo)",
                    wanted.join(" ")
                ),
            });
        }
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
        // --locked: the dependency versions of rustc's own Cargo.lock, as rustc's build uses.
        let by_hand = format!(
            "build it by hand where there is a network (`cargo install --locked --path {} --root {}`), \
             or set FLASHATTN_KERNEL_RUSTC with FLASHATTN_KERNEL_PATH naming a folder that holds \
             llvm-bitcode-linker",
            src.display(),
            install_dir().display()
        );
        util::run_fetching(
            util::cargo()
                .current_dir("/")
                .env_remove("RUSTUP_TOOLCHAIN")
                .args(["install", "--locked", "--quiet", "--path"])
                .arg(&src)
                .arg("--root")
                .arg(install_dir()),
            "crates.io (llvm-bitcode-linker's dependencies)",
            &by_hand,
        )?;
    }
    Ok(())
}

/// Says when the installed Debian packages are not the pinned ones (the PTX check then compares
/// by source hash only, since the compiler differs from the one that built the committed PTX).
fn note_debian_pins() {
    for (package, pinned) in DEBIAN_PINS {
        match installed_version(package) {
            Some(installed) if installed != pinned => println!(
                "setup: note: {package} {installed} is installed; setup pins {pinned}, the compiler of \
                 the committed PTX (`cargo xtask ptx --check` compares PTX bytes only with that compiler)"
            ),
            _ => {}
        }
    }
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
    if found.origin == "Debian rustc-web" {
        note_debian_pins();
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    const MADISON: &str = " rustc-web | 1.96.0+dfsg1-1~deb12u2 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
 rustc-web | 1.85.0+dfsg3-1~deb12u3 | http://deb.debian.org/debian bookworm/main amd64 Packages
rust-web-src | 1.96.0+dfsg1-1~deb12u2 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
rust-web-src | 1.85.0+dfsg3-1~deb12u3 | http://deb.debian.org/debian bookworm/main amd64 Packages
";

    #[test]
    fn setup_pins_exact_debian_versions() {
        // Exact Debian versions (upstream+debian revision), not a bare release.
        for (package, version) in DEBIAN_PINS {
            assert!(version.contains('+') && version.contains('-'), "{package}={version}");
        }
        assert_eq!(RUSTC_WEB_VERSION, RUST_WEB_SRC_VERSION, "one source package: one version");
        assert_eq!(
            offered_versions(MADISON, "rustc-web"),
            ["1.96.0+dfsg1-1~deb12u2", "1.85.0+dfsg3-1~deb12u3"]
        );
        assert!(check_offered(MADISON, &DEBIAN_PINS, None).is_ok());
    }

    #[test]
    fn apt_without_the_pinned_version_says_what_it_found_and_expected() {
        let old_only = MADISON.lines().filter(|l| l.contains("1.85.0")).collect::<Vec<_>>().join("\n");
        let err = check_offered(&old_only, &[("rustc-web", "1.96.0+dfsg1-1~deb12u2")], None).unwrap_err();
        assert!(
            err.contains("rustc-web: apt offers 1.85.0+dfsg3-1~deb12u3; expected 1.96.0+dfsg1-1~deb12u2"),
            "{err}"
        );
        let err = check_offered("", &[("rust-web-src", "1.96.0+dfsg1-1~deb12u2")], None).unwrap_err();
        assert!(err.contains("rust-web-src: apt offers none; expected 1.96.0+dfsg1-1~deb12u2"), "{err}");
        let err = check_offered("", &DEBIAN_PINS, Some("Temporary failure resolving 'deb.debian.org'"))
            .unwrap_err();
        assert!(err.starts_with("no network: could not reach the apt repositories"), "{err}");
        assert!(err.contains("by hand") && err.contains("FLASHATTN_KERNEL_RUSTC"), "{err}");
    }

    #[test]
    fn identity_is_the_full_verbose_version() {
        let vv = "rustc 1.96.0 (ac68faa20 2026-05-25) (built from a source tarball)\nbinary: rustc\n\
                  commit-hash: ac68faa20c58cbccd01ee7208bf3b6e93a7d7f96\ncommit-date: 2026-05-25\n\
                  host: x86_64-unknown-linux-gnu\nrelease: 1.96.0\nLLVM version: 22.1.8\n";
        let id = parse_identity(vv);
        assert_eq!(id.len(), 7);
        assert!(id.contains(&"LLVM version: 22.1.8".to_string()));
        assert!(id.contains(&"commit-hash: ac68faa20c58cbccd01ee7208bf3b6e93a7d7f96".to_string()));
        assert!(parse_identity("").is_empty());
    }
}
