//! Small helpers shared by the tasks.

use std::path::{Path, PathBuf};
use std::process::Command;

pub type Result<T> = std::result::Result<T, String>;

/// The workspace root (the parent of `xtask/`).
pub fn root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// Runs a command, failing with its name and exit status.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().map_err(|e| format!("could not start {cmd:?}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{cmd:?} failed with {status}")) }
}

/// Runs a command and returns its stdout, or None when it cannot start or fails.
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The `cargo` that runs this xtask (so nested builds use the pinned host toolchain).
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Finds an executable on `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// Runs a command whose stderr is shown as it comes and also kept, and returns its exit status
/// and that stderr (for commands that fetch from the network: apt-get, cargo install, pip, whose
/// failure for want of a network should be said as such, not as an exit code).
pub fn run_keeping_stderr(cmd: &mut Command) -> Result<(std::process::ExitStatus, String)> {
    use std::io::{BufRead, BufReader};
    let mut child = cmd
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not start {cmd:?}: {e}"))?;
    let mut kept = String::new();
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).lines().map_while(std::io::Result::ok) {
            eprintln!("{line}");
            kept.push_str(&line);
            kept.push('\n');
        }
    }
    let status = child.wait().map_err(|e| format!("waiting for {cmd:?}: {e}"))?;
    Ok((status, kept))
}

/// What the network-fetching tools (apt, cargo, pip, curl) print when no network is there: name
/// resolution, routing and connection failures, in lower case.
const NO_NETWORK_SIGNS: &[&str] = &[
    "temporary failure resolving",
    "temporary failure in name resolution",
    "could not resolve host",
    "couldn't resolve host",
    "could not resolve hostname",
    "name or service not known",
    "failed to lookup address",
    "dns error",
    "network is unreachable",
    "no route to host",
    "unable to connect to",
    "could not connect to",
    "failed to establish a new connection",
    "connection timed out",
    "spurious network error",
];

/// The first line of a tool's stderr that says the network could not be reached, if any.
pub fn no_network_evidence(stderr: &str) -> Option<&str> {
    stderr.lines().map(str::trim).find(|line| {
        let lower = line.to_ascii_lowercase();
        NO_NETWORK_SIGNS.iter().any(|sign| lower.contains(sign))
    })
}

/// The message for a fetch that failed for want of a network: what could not be reached, the
/// tool's own words, and what to do instead.
pub fn no_network_message(what: &str, evidence: &str, by_hand: &str) -> String {
    format!("no network: could not reach {what} ({evidence}); {by_hand}")
}

/// Runs a command that fetches `what` from the network. On failure the message says "no
/// network" (with the tool's line that shows it, and `by_hand`: what to do instead) when its
/// stderr shows that the network could not be reached, else the command and its exit status.
pub fn run_fetching(cmd: &mut Command, what: &str, by_hand: &str) -> Result<()> {
    let (status, stderr) = run_keeping_stderr(cmd)?;
    if status.success() {
        return Ok(());
    }
    Err(match no_network_evidence(&stderr) {
        Some(evidence) => no_network_message(what, evidence, by_hand),
        None => format!("{cmd:?} failed with {status}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offline_apt_cargo_and_pip_errors_read_as_no_network() {
        let apt = "Err:1 http://deb.debian.org/debian bookworm InRelease\n  \
                   Temporary failure resolving 'deb.debian.org'\n\
                   W: Some index files failed to download.";
        assert_eq!(no_network_evidence(apt), Some("Temporary failure resolving 'deb.debian.org'"));
        let cargo = "    Updating crates.io index\nwarning: spurious network error (3 tries remaining): \
                     [6] Couldn't resolve host name (Could not resolve host: index.crates.io)";
        assert!(no_network_evidence(cargo).is_some());
        let pip = "WARNING: Retrying ... NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection \
                   object>: Failed to establish a new connection: [Errno -3] Temporary failure in name \
                   resolution')";
        assert!(no_network_evidence(pip).is_some());
        let message =
            no_network_message("the apt repositories", "Temporary failure resolving 'x'", "install X");
        assert!(message.starts_with("no network: could not reach the apt repositories"), "{message}");
    }

    #[test]
    fn other_failures_are_not_called_network_failures() {
        assert_eq!(no_network_evidence("E: Unable to locate package rustc-web"), None);
        assert_eq!(no_network_evidence("sudo: a password is required"), None);
        assert_eq!(no_network_evidence("error: could not compile `llvm-bitcode-linker`"), None);
        assert_eq!(no_network_evidence(""), None);
    }

    #[cfg(unix)]
    #[test]
    fn a_failing_fetch_offline_says_no_network_not_an_exit_code() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo \"Temporary failure resolving 'deb.debian.org'\" >&2; exit 100"]);
        let err = run_fetching(&mut cmd, "the apt repositories", "install rustc-web by hand").unwrap_err();
        assert!(err.starts_with("no network: could not reach the apt repositories"), "{err}");
        assert!(err.contains("install rustc-web by hand"), "{err}");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo 'E: something else' >&2; exit 100"]);
        let err = run_fetching(&mut cmd, "the apt repositories", "by hand").unwrap_err();
        assert!(err.contains("failed with"), "{err}");
    }
}
