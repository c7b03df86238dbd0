//! The JSON-lines records a run writes (and the peers script writes in the same format), and the
//! writer and reader for them.
//!
//! Every line is one object with a `kind`: `meta` (who, where, when, how), `ceilings` (the
//! device's measured bandwidth and matmul throughput, for the roofline) or `row` (one shape and
//! one method). Rows are appended and flushed one at a time, so an interrupted run keeps every row
//! it finished.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

use crate::shapes::kv_read_keys;
use crate::stats::Summary;

/// File our rows go to, in the output folder.
pub const ROWS_FILE: &str = "bench.jsonl";
/// File the peers script writes, in the output folder.
pub const PEERS_FILE: &str = "peers.jsonl";

/// Reads a number that may be `null` (how JSON writers spell NaN) as NaN.
fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Option::<f64>::deserialize(d).map(|x| x.unwrap_or(f64::NAN))
}

/// One line of a results file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// Run metadata.
    Meta(Meta),
    /// Device ceilings for the roofline.
    Ceilings(Ceilings),
    /// One measurement.
    Row(Box<Row>),
}

/// Who ran what, where and when.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Meta {
    /// `flashattn-bench` or `peers.py`.
    pub source: String,
    /// Identifies the run (its start time); every row of the run carries it.
    pub run_id: String,
    /// RFC 3339 UTC time the run started.
    pub timestamp: String,
    /// Host name.
    pub host: String,
    /// Git commit of the code measured (`--commit`, `FLASHATTN_COMMIT`, or `git rev-parse`).
    pub commit: String,
    /// Device name (or "cpu").
    pub device: String,
    /// Everything else: device properties, software versions, settings, the command line.
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

/// The device's ceilings: HBM bandwidth and dense matmul throughput.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Ceilings {
    /// Run these belong to.
    pub run_id: String,
    /// Device name.
    pub device: String,
    /// Device-to-device copy bandwidth, TB/s (bytes read + written per second / 10¹²).
    #[serde(deserialize_with = "nan_if_null")]
    pub bandwidth_tbs: f64,
    /// bf16 matmul throughput (cuBLAS), TFLOP/s.
    #[serde(deserialize_with = "nan_if_null")]
    pub tflops: f64,
    /// How they were obtained: `measured`, `--ceilings`, or `default (H200 reference)`.
    pub source: String,
    /// How each was measured.
    pub notes: String,
}

/// Kernel time of a row.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timing {
    /// Median, milliseconds per call.
    #[serde(deserialize_with = "nan_if_null")]
    pub median_ms: f64,
    /// 10th percentile.
    #[serde(deserialize_with = "nan_if_null")]
    pub p10_ms: f64,
    /// 90th percentile.
    #[serde(deserialize_with = "nan_if_null")]
    pub p90_ms: f64,
    /// Fastest sample.
    #[serde(deserialize_with = "nan_if_null")]
    pub min_ms: f64,
    /// Slowest sample.
    #[serde(deserialize_with = "nan_if_null")]
    pub max_ms: f64,
    /// Samples taken.
    pub samples: usize,
    /// Calls per sample (a sample of several calls is divided by their number).
    pub calls_per_sample: usize,
    /// Calls made before sampling (warm-up).
    pub warmup_calls: usize,
    /// Input sets rotated through (so that a call does not find its inputs in L2).
    pub input_sets: usize,
    /// What timed it: `cuda-events`, `wall-clock`, `triton.do_bench`.
    pub timer: String,
}

impl Timing {
    /// From a summary of per-call milliseconds.
    pub fn from_summary(
        s: &Summary,
        calls_per_sample: usize,
        warmup_calls: usize,
        input_sets: usize,
        timer: &str,
    ) -> Timing {
        Timing {
            median_ms: s.median,
            p10_ms: s.p10,
            p90_ms: s.p90,
            min_ms: s.min,
            max_ms: s.max,
            samples: s.n,
            calls_per_sample,
            warmup_calls,
            input_sets,
            timer: timer.to_string(),
        }
    }
}

/// How far the output is from the references, by the test kit's tolerance rule
/// (`flashattn_testkit::tolerance`) on the checked rows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorStats {
    /// Max |out − f64 oracle| over the checked rows.
    pub oracle_max_abs: Option<f64>,
    /// Max |f64 oracle| over the checked rows (to read the error relative to the output's size).
    pub oracle_ref_max_abs: Option<f64>,
    /// Query rows the oracle checked (over one or two (sequence, head) slices).
    pub oracle_rows: usize,
    /// Whether the checked slices were complete (every query row) or sampled rows.
    pub oracle_complete: bool,
    /// Max |baseline − oracle| on the same rows: standard attention in the input dtype.
    pub baseline_max_abs: Option<f64>,
    /// The rule's allowance for the output dtype's rounding.
    pub atol: Option<f64>,
    /// The rule's absolute bound for f32 outputs.
    pub f32_bound: Option<f64>,
    /// `oracle_max_abs / (2·baseline_max_abs + atol)`.
    pub rule_ratio: Option<f64>,
    /// The rule's verdict: finite, masked rows 0, and within 2·baseline + atol (f16, bf16) or
    /// the f32 bound (f32).
    pub within_rule: Option<bool>,
    /// Max |out − GPU f32 flash run on the f32-upcast inputs| over every output element.
    pub f32_ref_max_abs: Option<f64>,
    /// Output elements that were NaN or infinite (over the whole output).
    pub nonfinite: u64,
    /// Why the rule failed, or why a check could not run.
    pub note: Option<String>,
}

/// The complete path around a call on one shape.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompletePath {
    /// Host→device copy of Q, K, V from a plain `Vec` (pageable memory), wall ms (median of 3).
    pub upload_ms: Option<f64>,
    /// The same from page-locked (pinned) host memory.
    pub upload_pinned_ms: Option<f64>,
    /// Device→host copy of O into a plain `Vec`, wall ms (median of 3).
    pub download_ms: Option<f64>,
    /// The same into page-locked host memory.
    pub download_pinned_ms: Option<f64>,
    /// Bytes uploaded (Q + K + V).
    pub upload_bytes: u64,
    /// Bytes downloaded (O).
    pub download_bytes: u64,
    /// Median kernel ms of the same call with `(B, H, N, d)` (PyTorch order) inputs and output.
    pub bhsd_median_ms: Option<f64>,
    /// Host µs per `Device::attention` call, enqueued back to back.
    pub enqueue_us: Option<f64>,
    /// GPU ms per call over back-to-back calls on the stream.
    pub stream_ms_per_call: Option<f64>,
    /// GPU ms per call when the same calls are captured in a CUDA graph and replayed.
    pub graph_ms_per_call: Option<f64>,
    /// Calls in the back-to-back and graph measurements.
    pub calls: usize,
    /// Why a part could not run.
    pub notes: Vec<String>,
}

/// DRAM traffic measured by Nsight Compute over one call.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NcuBytes {
    /// `dram__bytes_read.sum`, over every kernel of the call.
    pub dram_read: Option<f64>,
    /// `dram__bytes_write.sum`.
    pub dram_write: Option<f64>,
    /// Kernels profiled.
    pub kernels: usize,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// One shape × one method.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Row {
    /// `gpu`, `cpu` or `peer`.
    pub backend: String,
    /// Run it belongs to.
    pub run_id: String,
    /// Device name.
    pub device: String,
    /// Commit measured.
    pub commit: String,
    /// Shape key (see `Shape::key`).
    pub key: String,
    /// Sweep part (headline, varlen, …).
    pub group: String,
    /// bf16, f16, f32.
    pub dtype: String,
    /// Sequences.
    pub batch: usize,
    /// Query heads.
    pub heads: usize,
    /// K/V heads (fewer than `heads` under grouped-query attention; 0 in records written before
    /// it was recorded, which had as many as `heads`: see [`Row::kv_heads`]).
    pub kv_heads: usize,
    /// Query tokens per sequence (mean for varlen).
    pub seqlen_q: usize,
    /// Key tokens per sequence (mean for varlen).
    pub seqlen_k: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// none, causal, varlen, varlen-causal.
    pub mask: String,
    /// Left sliding window (keys before each query's diagonal), combined with `mask`; absent
    /// without a window (and in records written before windows were swept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_left: Option<usize>,
    /// Logit softcap `C` (scaled scores `s` became `C·tanh(s/C)`); absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub softcap: Option<f32>,
    /// Whether ALiBi (BLOOM's slopes `2^(−8(h+1)/H)`, bottom-right aligned) biased the logits;
    /// absent when not.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub alibi: bool,
    /// Method (ours: flash, flash-tc, standard, cpu-tiled, cpu-standard; peers: torch-…).
    pub method: String,
    /// Tile override asked for (`MxN`), if any.
    pub tiles: Option<String>,
    /// Which pass was timed: `fwd`, `bwd` (the backward alone) or `fwd+bwd`; absent in records
    /// written before backward passes were measured, which are all forward (see [`Row::pass`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pass: Option<String>,
    /// Query rows per block of the plan that ran.
    pub block_m: Option<usize>,
    /// Keys per tile of the plan that ran.
    pub block_n: Option<usize>,
    /// Kernel that ran.
    pub kernel: Option<String>,
    /// ok, oom, unsupported, invalid, error, skipped.
    pub status: String,
    /// The error or the reason for the status.
    pub message: Option<String>,
    /// FLOPs of one call (see the report's formula).
    #[serde(deserialize_with = "nan_if_null")]
    pub flops: f64,
    /// Kernel time.
    pub timing: Option<Timing>,
    /// `flops / median time`, TFLOP/s.
    pub tflops: Option<f64>,
    /// Modeled HBM bytes of one call for this method.
    pub bytes_model: Option<f64>,
    /// Bytes of every input and output once.
    pub bytes_compulsory: Option<f64>,
    /// GPU backward rows: what the backward's preprocessing started from — `residuals` (a
    /// training forward's saved residuals, `Device::attention_backward_saved`) or `lse` (the
    /// log-sum-exp; also where `--bwd-from residuals` met a training forward whose plan keeps no
    /// residuals, e.g. under a tile override; before session 31 such rows said `residuals`);
    /// absent on forward rows and in records written before the choice existed (which started
    /// from the log-sum-exp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bwd_from: Option<String>,
    /// Memory order of the timed tensors (`bshd`, `bhsd`) where the run chose one (`--layout`);
    /// absent otherwise (ours `bshd`, the peers' `bhsd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// `bytes_model / median time`, GB/s.
    pub bandwidth_gbs: Option<f64>,
    /// `flops / bytes_model`, FLOP/byte.
    pub intensity: Option<f64>,
    /// Decode rows (Nq = 1) only: the bytes of K and V (each read once, storage type; with a
    /// window only the keys it lets a query see: [`Row::kv_bytes`]) over the median time, TB/s: how close a decode step comes to streaming its K/V cache at the
    /// memory's speed.
    pub kv_tb_s: Option<f64>,
    /// Peers only, under grouped-query attention: `native` (`enable_gqa=True`) or `repeat` (K
    /// and V expanded with `repeat_interleave` inside the timed call: a torch without
    /// `enable_gqa`).
    pub gqa: Option<String>,
    /// Bytes of Q, K, V, O and LSE of one input set.
    pub io_bytes: u64,
    /// Extra device (or host) memory the method allocates beyond its inputs and outputs, by the
    /// plan (GPU) or the model (CPU), bytes.
    pub extra_bytes_plan: Option<u64>,
    /// Extra memory measured: free device memory before the call minus free memory while it is
    /// queued (GPU), or the peak resident-set growth (CPU, Linux).
    pub extra_bytes_measured: Option<u64>,
    /// For status `oom`: the bytes the call needed.
    pub oom_needed_bytes: Option<u64>,
    /// Output error.
    pub error: Option<ErrorStats>,
    /// Complete-path measurements (a subset of shapes).
    pub complete: Option<CompletePath>,
    /// Nsight Compute DRAM bytes (with `--ncu`).
    pub ncu: Option<NcuBytes>,
}

impl Row {
    /// Whether the row holds a measurement.
    pub fn ok(&self) -> bool {
        self.status == "ok"
    }

    /// Median ms, if measured.
    pub fn median_ms(&self) -> Option<f64> {
        self.timing.as_ref().map(|t| t.median_ms).filter(|x| x.is_finite() && *x > 0.0)
    }

    /// The pass timed (`fwd` for records that predate the field).
    pub fn pass(&self) -> &str {
        self.pass.as_deref().unwrap_or("fwd")
    }

    /// K/V heads (`heads` for records that predate the field).
    pub fn kv_heads(&self) -> usize {
        if self.kv_heads == 0 { self.heads } else { self.kv_heads }
    }

    /// Bytes of K plus V in the storage type that the call must read (B·Nk·H_kv·d·e each; with a
    /// left window of L only the keys some query sees, `min(Nk, Nq + L)` per sequence: see
    /// [`crate::shapes::visible_keys`]), if the dtype is known.
    pub fn kv_bytes(&self) -> Option<f64> {
        let e = match self.dtype.as_str() {
            "bf16" | "f16" => 2.0,
            "f32" => 4.0,
            _ => return None,
        };
        let varlen = self.mask.starts_with("varlen");
        let keys = kv_read_keys(varlen, self.batch, self.seqlen_q, self.seqlen_k, self.window_left);
        Some(2.0 * keys as f64 * (self.kv_heads() * self.head_dim) as f64 * e)
    }

    /// [`Row::kv_tb_s`] from the shape and the timing: decode rows (Nq = 1) that were measured.
    pub fn kv_tbs(&self) -> Option<f64> {
        if self.seqlen_q != 1 || !self.ok() {
            return None;
        }
        Some(self.kv_bytes()? / (self.median_ms()? * 1e-3) / 1e12)
    }

    /// Fills TFLOP/s, bandwidth and intensity from the timing and the byte model.
    pub fn derive(&mut self) {
        if let Some(ms) = self.median_ms() {
            self.tflops = Some(self.flops / (ms * 1e-3) / 1e12);
            if let Some(b) = self.bytes_model {
                self.bandwidth_gbs = Some(b / (ms * 1e-3) / 1e9);
            }
        }
        if let Some(b) = self.bytes_model.filter(|&b| b > 0.0) {
            self.intensity = Some(self.flops / b);
        }
        self.kv_tb_s = self.kv_tbs();
    }
}

/// Appends records to a JSONL file, one flushed line each.
pub struct JsonlWriter {
    file: std::io::BufWriter<std::fs::File>,
    path: PathBuf,
}

impl JsonlWriter {
    /// Opens (creating or appending to) `path`.
    pub fn append(path: &Path) -> Result<JsonlWriter, String> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot open {} for appending: {e}", path.display()))?;
        Ok(JsonlWriter { file: std::io::BufWriter::new(file), path: path.to_path_buf() })
    }

    /// Writes one record and flushes it.
    pub fn write(&mut self, rec: &Record) -> Result<(), String> {
        let line = serde_json::to_string(rec).map_err(|e| format!("cannot serialize a record: {e}"))?;
        writeln!(self.file, "{line}")
            .and_then(|()| self.file.flush())
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }
}

/// Records read from files, and the lines that could not be read.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Every record, in file order.
    pub records: Vec<Record>,
    /// `file:line: why` for each line skipped.
    pub skipped: Vec<String>,
}

impl Loaded {
    /// Rows only.
    pub fn rows(&self) -> impl DoubleEndedIterator<Item = &Row> {
        self.records.iter().filter_map(|r| if let Record::Row(row) = r { Some(row.as_ref()) } else { None })
    }

    /// Metadata records.
    pub fn metas(&self) -> impl Iterator<Item = &Meta> {
        self.records.iter().filter_map(|r| if let Record::Meta(m) = r { Some(m) } else { None })
    }

    /// The last ceilings record, if any.
    pub fn ceilings(&self) -> Option<&Ceilings> {
        self.records.iter().rev().find_map(|r| if let Record::Ceilings(c) = r { Some(c) } else { None })
    }
}

/// Reads every `*.jsonl` file in `dir` (sorted by name); unreadable lines are listed, not fatal.
pub fn load_dir(dir: &Path) -> Result<Loaded, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let mut out = Loaded::default();
    for f in files {
        let file = std::fs::File::open(&f).map_err(|e| format!("cannot open {}: {e}", f.display()))?;
        for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
            let Ok(line) = line else {
                out.skipped.push(format!("{}:{}: not UTF-8", f.display(), i + 1));
                continue;
            };
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Record>(&line) {
                Ok(r) => out.records.push(r),
                Err(e) => out.skipped.push(format!("{}:{}: {e}", f.display(), i + 1)),
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_and_unknown_fields_are_tolerated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(ROWS_FILE);
        let mut w = JsonlWriter::append(&path).unwrap();
        let mut row = Row { key: "k".into(), status: "ok".into(), flops: 2e12, ..Default::default() };
        row.timing = Some(Timing { median_ms: 10.0, ..Default::default() });
        row.bytes_model = Some(4e10);
        row.derive();
        assert_eq!(row.tflops, Some(200.0));
        assert_eq!(row.bandwidth_gbs, Some(4000.0));
        assert_eq!(row.intensity, Some(50.0));
        w.write(&Record::Row(Box::new(row.clone()))).unwrap();
        let mut extra = BTreeMap::new();
        extra.insert("torch".to_string(), serde_json::json!("2.11"));
        w.write(&Record::Meta(Meta { source: "x".into(), extra, ..Default::default() })).unwrap();
        drop(w);
        std::fs::write(
            dir.path().join(PEERS_FILE),
            "{\"kind\":\"row\",\"backend\":\"peer\",\"key\":\"k\",\"method\":\"torch-flash\",\"new_field\":1}\nnot json\n\n",
        )
        .unwrap();
        let loaded = load_dir(dir.path()).unwrap();
        let rows: Vec<_> = loaded.rows().collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(*rows[0], row);
        assert_eq!(rows[1].method, "torch-flash");
        assert_eq!(loaded.metas().next().unwrap().extra["torch"], "2.11");
        assert_eq!(loaded.skipped.len(), 1);
    }

    #[test]
    fn decode_rows_report_k_and_v_bandwidth() {
        // Llama-3-8B decode, B = 16, Nk = 16384: K + V = 2·16·16384·8·128·2 bytes = 1 GiB.
        let mut row = Row {
            key: "bf16/B16/H32/KV8/N1x16384/d128/none".into(),
            status: "ok".into(),
            dtype: "bf16".into(),
            batch: 16,
            heads: 32,
            kv_heads: 8,
            seqlen_q: 1,
            seqlen_k: 16_384,
            head_dim: 128,
            flops: 4.0 * 16.0 * 32.0 * 16_384.0 * 128.0,
            timing: Some(Timing { median_ms: 0.25, ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(row.kv_bytes(), Some((1u64 << 30) as f64));
        row.derive();
        let want = (1u64 << 30) as f64 / 0.25e-3 / 1e12;
        assert!((row.kv_tb_s.unwrap() - want).abs() < 1e-12, "{:?} vs {want}", row.kv_tb_s);
        assert!((want - 4.294_967_296).abs() < 1e-9);
        // Records from before the field: K/V heads are the query heads.
        let old = Row { kv_heads: 0, heads: 8, dtype: "f32".into(), ..row.clone() };
        assert_eq!(old.kv_bytes(), Some(2.0 * 16.0 * 16_384.0 * 8.0 * 128.0 * 4.0));
        // Not a decode row, or not measured: none.
        assert_eq!(Row { seqlen_q: 2, ..row.clone() }.kv_tbs(), None);
        assert_eq!(Row { status: "oom".into(), ..row.clone() }.kv_tbs(), None);
        assert_eq!(Row { timing: None, ..row }.kv_tbs(), None);
    }

    #[test]
    fn a_window_counts_only_the_keys_a_decode_step_can_see() {
        // B = 1, H = 16, Nk = 16384, d = 128, bf16; a left window of 1024 keys: the query sees
        // 1025 keys (its diagonal included), not the 16384 of the cache.
        let row = Row {
            key: "bf16/B1/H16/N1x16384/d128/causal/w1024".into(),
            status: "ok".into(),
            dtype: "bf16".into(),
            batch: 1,
            heads: 16,
            kv_heads: 16,
            seqlen_q: 1,
            seqlen_k: 16_384,
            head_dim: 128,
            mask: "causal".into(),
            window_left: Some(1024),
            timing: Some(Timing { median_ms: 0.01, ..Default::default() }),
            ..Default::default()
        };
        let per_key = 2.0 * 16.0 * 128.0 * 2.0;
        assert_eq!(row.kv_bytes(), Some(1025.0 * per_key));
        let want = 1025.0 * per_key / 0.01e-3 / 1e12;
        assert!((row.kv_tbs().unwrap() - want).abs() < 1e-12);
        // No window, or one wider than the cache: every key.
        let full = Row { window_left: None, key: "bf16/B1/H16/N1x16384/d128/causal".into(), ..row.clone() };
        assert_eq!(full.kv_bytes(), Some(16_384.0 * per_key));
        assert_eq!(Row { window_left: Some(1 << 20), ..row.clone() }.kv_bytes(), Some(16_384.0 * per_key));
        // Several queries: the keys from the first query's window start on (Nq + L per sequence).
        let q8 = Row { seqlen_q: 8, batch: 3, ..row };
        assert_eq!(q8.kv_bytes(), Some(3.0 * (8.0 + 1024.0) * per_key));
    }

    #[test]
    fn null_numbers_read_as_nan() {
        let r: Record =
            serde_json::from_str(r#"{"kind":"row","flops":null,"timing":{"median_ms":null}}"#).unwrap();
        let Record::Row(row) = r else { panic!() };
        assert!(row.flops.is_nan());
        assert_eq!(row.median_ms(), None);
    }
}
