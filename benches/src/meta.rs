//! Run metadata: commit, host, time, and the folder name results go to.

use std::process::Command;
use std::time::SystemTime;

/// What every row of a run carries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunInfo {
    /// The run's start time, RFC 3339 (UTC, seconds).
    pub run_id: String,
    /// Device name, or "cpu".
    pub device: String,
    /// Commit measured.
    pub commit: String,
    /// Host name.
    pub host: String,
}

/// The commit: the flag, else `$FLASHATTN_COMMIT`, else `git rev-parse HEAD` (with `-dirty` when
/// the work tree has changes), else "unknown" (the GPU machine has no git).
pub fn commit(flag: Option<&str>) -> String {
    if let Some(c) = flag.map(str::trim).filter(|c| !c.is_empty()) {
        return c.to_string();
    }
    if let Some(c) = std::env::var("FLASHATTN_COMMIT").ok().filter(|c| !c.trim().is_empty()) {
        return c.trim().to_string();
    }
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "HEAD"]) {
        Some(head) if !head.is_empty() => {
            let dirty =
                git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
            if dirty { format!("{head}-dirty") } else { head }
        }
        _ => "unknown".to_string(),
    }
}

/// The host name (Linux's, else `$HOSTNAME`, else "unknown").
pub fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

/// Now, RFC 3339 UTC to the second.
pub fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// Lower-case letters, digits and single dashes: "NVIDIA H200" → "nvidia-h200".
pub fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

/// The default output folder: `results/<date>-<device>`.
pub fn default_out(run_id: &str, device: &str) -> std::path::PathBuf {
    let date = run_id.get(..10).unwrap_or(run_id);
    std::path::PathBuf::from("results").join(format!("{date}-{}", slug(device)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(slug("NVIDIA H200 (SXM) "), "nvidia-h200-sxm");
        assert_eq!(
            default_out("2026-11-29T10:00:00Z", "NVIDIA H200"),
            std::path::Path::new("results/2026-11-29-nvidia-h200")
        );
        assert_eq!(commit(Some(" abc ")), "abc");
        assert_eq!(now().len(), "2026-11-29T10:00:00Z".len());
        assert!(!host().is_empty());
    }
}
