//! Measured DRAM traffic: re-runs this executable's hidden `one` subcommand (a single attention
//! call) under Nsight Compute and sums `dram__bytes_read.sum` and `dram__bytes_write.sum` over
//! every kernel the call launched. Nsight Compute flushes the caches before each kernel it
//! profiles, so these are cold-cache bytes, comparable with the byte models.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use crate::record::NcuBytes;

/// The metrics collected.
pub const METRICS: &str = "dram__bytes_read.sum,dram__bytes_write.sum";

/// The ncu command line (before the profiled executable).
pub fn ncu_args() -> Vec<&'static str> {
    vec![
        "--clock-control",
        "none",
        "--metrics",
        METRICS,
        "--csv",
        "--print-units",
        "base",
        "--target-processes",
        "all",
    ]
}

/// Profiles `exe one_args…` under `ncu`.
pub fn profile(ncu: &Path, exe: &Path, one_args: &[String]) -> NcuBytes {
    let out = match Command::new(ncu).args(ncu_args()).arg(exe).args(one_args).output() {
        Ok(o) => o,
        Err(e) => {
            return NcuBytes {
                error: Some(format!("cannot run {}: {e}", ncu.display())),
                ..Default::default()
            };
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    match parse_csv(&stdout) {
        Ok(b) if out.status.success() => b,
        Ok(b) => {
            NcuBytes { error: Some(format!("ncu exited with {}: {}", out.status, tail(&out.stderr))), ..b }
        }
        Err(e) => NcuBytes {
            error: Some(format!(
                "{e} (ncu exited with {}; stderr: {}; stdout: {})",
                out.status,
                tail(&out.stderr),
                tail(&out.stdout)
            )),
            ..Default::default()
        },
    }
}

fn tail(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    let s = s.trim();
    let start = s.char_indices().rev().nth(400).map_or(0, |(i, _)| i);
    s[start..].replace('\n', " | ")
}

/// Bytes per unit of an ncu unit name (`byte`, `Kbyte`, `MB`, `KiB`, …).
fn unit_scale(unit: &str) -> Option<f64> {
    let u = unit.trim().to_ascii_lowercase();
    let u = u.trim_end_matches("ytes").trim_end_matches("yte").trim_end_matches('b');
    let binary = u.ends_with('i');
    let u = u.trim_end_matches('i');
    let base: f64 = if binary { 1024.0 } else { 1000.0 };
    match u {
        "" => Some(1.0),
        "k" => Some(base),
        "m" => Some(base.powi(2)),
        "g" => Some(base.powi(3)),
        "t" => Some(base.powi(4)),
        _ => None,
    }
}

fn number(s: &str) -> Option<f64> {
    s.trim().replace(',', "").parse::<f64>().ok()
}

/// Parses ncu's `--csv` output: the per-metric ("details") form with `Metric Name`, `Metric Unit`
/// and `Metric Value` columns, or the per-kernel ("raw") form with one column per metric and a
/// units row. Lines that are not CSV records (`==PROF==` messages, the program's own output) are
/// ignored.
pub fn parse_csv(text: &str) -> Result<NcuBytes, String> {
    let csv: String = text.lines().filter(|l| l.starts_with('"')).map(|l| format!("{l}\n")).collect();
    let mut rdr = csv::ReaderBuilder::new().flexible(true).has_headers(true).from_reader(csv.as_bytes());
    let headers = rdr.headers().map_err(|e| format!("no CSV header in ncu's output: {e}"))?.clone();
    let col = |name: &str| headers.iter().position(|h| h == name);
    let mut read = None::<f64>;
    let mut write = None::<f64>;
    let mut kernels = BTreeSet::new();
    let add = |slot: &mut Option<f64>, v: f64| *slot = Some(slot.unwrap_or(0.0) + v);
    if let (Some(name), Some(value)) = (col("Metric Name"), col("Metric Value")) {
        let unit = col("Metric Unit");
        let id = col("ID");
        for rec in rdr.records() {
            let rec = rec.map_err(|e| format!("bad CSV record from ncu: {e}"))?;
            let metric = rec.get(name).unwrap_or("");
            let slot = match metric {
                "dram__bytes_read.sum" => &mut read,
                "dram__bytes_write.sum" => &mut write,
                _ => continue,
            };
            let scale = unit.and_then(|u| rec.get(u)).map_or(Some(1.0), unit_scale).unwrap_or(1.0);
            let v =
                rec.get(value).and_then(number).ok_or_else(|| format!("unreadable value for {metric}"))?;
            add(slot, v * scale);
            kernels.insert(id.and_then(|i| rec.get(i)).unwrap_or("").to_string());
        }
    } else if let (Some(r), Some(w)) = (col("dram__bytes_read.sum"), col("dram__bytes_write.sum")) {
        let mut scales = (1.0, 1.0);
        for (i, rec) in rdr.records().enumerate() {
            let rec = rec.map_err(|e| format!("bad CSV record from ncu: {e}"))?;
            let (rv, wv) = (rec.get(r).unwrap_or(""), rec.get(w).unwrap_or(""));
            if i == 0 && number(rv).is_none() {
                scales = (unit_scale(rv).unwrap_or(1.0), unit_scale(wv).unwrap_or(1.0));
                continue;
            }
            if let (Some(a), Some(b)) = (number(rv), number(wv)) {
                add(&mut read, a * scales.0);
                add(&mut write, b * scales.1);
                kernels.insert(i.to_string());
            }
        }
    } else {
        return Err("ncu's CSV has neither `Metric Name`/`Metric Value` nor per-metric columns".to_string());
    }
    if kernels.is_empty() {
        return Err("ncu profiled no kernel".to_string());
    }
    Ok(NcuBytes { dram_read: read, dram_write: write, kernels: kernels.len(), error: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_details_form_with_units_and_separators() {
        let out = r#"==PROF== Connected to process 1234 (/bundle/bin/flashattn-bench)
==PROF== Profiling "flash_simt_bf16_d128": 0%....50%....100% - 1 pass
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1234","flashattn-bench","127.0.0.1","flash_simt_bf16_d128","1","13","(128, 1, 1)","(16, 16, 4)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","1,048,576"
"0","1234","flashattn-bench","127.0.0.1","flash_simt_bf16_d128","1","13","(128, 1, 1)","(16, 16, 4)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","Kbyte","512"
"1","1234","flashattn-bench","127.0.0.1","softmax_rows","1","13","(256, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","24"
"1","1234","flashattn-bench","127.0.0.1","softmax_rows","1","13","(256, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","byte","0"
==PROF== Disconnected from process 1234
"#;
        let b = parse_csv(out).unwrap();
        assert_eq!(b.dram_read, Some(1_048_600.0));
        assert_eq!(b.dram_write, Some(512_000.0));
        assert_eq!(b.kernels, 2);
    }

    #[test]
    fn parses_the_raw_form_and_reports_missing_data() {
        let raw = "\"ID\",\"Kernel Name\",\"dram__bytes_read.sum\",\"dram__bytes_write.sum\"\n\
                   \"\",\"\",\"Mbyte\",\"byte\"\n\
                   \"0\",\"k\",\"2.5\",\"100\"\n";
        let b = parse_csv(raw).unwrap();
        assert_eq!(b.dram_read, Some(2.5e6));
        assert_eq!(b.dram_write, Some(100.0));
        assert!(parse_csv("==ERROR== ERR_NVGPUCTRPERM - no permission").is_err());
        let header_only = "\"ID\",\"Metric Name\",\"Metric Value\"\n";
        assert!(parse_csv(header_only).unwrap_err().contains("no kernel"));
        assert_eq!(unit_scale("KiB"), Some(1024.0));
        assert_eq!(unit_scale("Gbyte"), Some(1e9));
        assert_eq!(unit_scale("byte"), Some(1.0));
    }
}
