//! `report`: reads the JSONL files of a results folder (ours and the peers') and writes
//! `report.md` and the SVG plots next to it. Every table is a list of columns ([`Col`]) over a
//! list of rows; the text that does not depend on the data is `report-method.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::ceilings::{self, H200_DATASHEET_TBS};
use crate::plots;
use crate::record::{Ceilings, CompletePath, ErrorStats, Loaded, Meta, Row, Timing, load_dir};
use crate::shapes::{HEADLINE_HIDDEN, HEADLINE_TOKENS};

/// The report's file name.
pub const REPORT_FILE: &str = "report.md";
/// How the numbers were measured, and the formulas.
const METHOD_TEXT: &str = include_str!("report-method.md");

/// Our methods in table order.
const OUR_METHODS: [&str; 5] = ["flash", "flash-tc", "flash-hopper", "auto", "standard"];
/// Peer backends in table order, with the names the report shows.
pub const PEERS: [(&str, &str); 6] = [
    ("torch-flash", "torch FA2"),
    ("torch-cudnn", "torch cuDNN"),
    ("torch-efficient", "torch mem-eff"),
    ("torch-math", "torch math"),
    ("torch-naive", "naive torch"),
    ("torch-flex", "torch flex"),
];

/// Everything the report reads: our GPU and CPU rows and the peers' (deduplicated: a row
/// measured twice keeps the later one), the last metadata of our run and of the peers', the
/// device ceilings, and the lines that could not be read.
pub struct Data {
    pub gpu: Vec<Row>,
    pub cpu: Vec<Row>,
    pub peers: Vec<Row>,
    /// Our rows of passes other than the forward (`bwd`, `fwd+bwd`), GPU and CPU: every other
    /// table (and plot) is of forward rows.
    pub backward: Vec<Row>,
    /// The peers' rows of passes other than the forward, paired with ours by shape and pass.
    pub peers_backward: Vec<Row>,
    pub meta: Option<Meta>,
    pub peers_meta: Option<Meta>,
    pub ceilings: Ceilings,
    pub skipped: Vec<String>,
}

impl Data {
    /// From loaded records; `ceilings` overrides the recorded ones.
    pub fn new(loaded: &Loaded, ceilings: Option<(f64, f64)>) -> Data {
        let mut seen = BTreeSet::new();
        let mut rows: Vec<&Row> = loaded
            .rows()
            .rev()
            .filter(|r| seen.insert((&r.backend, &r.key, &r.method, &r.tiles, r.pass())))
            .collect();
        rows.reverse();
        // K/V TB/s from the shape and the time by the current byte model (ours and the peers'):
        // records written before `kv_tb_s` existed, or before a window's keys were counted as
        // only those a query sees, read the same as new ones. The recorded value stays where the
        // shape cannot give one.
        let by = |b: &str| {
            let fill = |r: &Row| Row { kv_tb_s: r.kv_tbs().or(r.kv_tb_s), ..r.clone() };
            rows.iter().filter(|r| r.backend == b && r.pass() == "fwd").map(|&r| fill(r)).collect()
        };
        let meta = loaded.metas().filter(|m| m.source != "peers.py").last().cloned();
        let device = meta.as_ref().map_or("", |m| m.device.as_str());
        let flag = |(bw, tf)| Ceilings {
            bandwidth_tbs: bw,
            tflops: tf,
            source: "--ceilings".into(),
            ..Default::default()
        };
        let ceilings = ceilings.map(flag).or_else(|| loaded.ceilings().cloned());
        let ceilings = ceilings.unwrap_or_else(|| ceilings::defaults("", device));
        Data {
            gpu: by("gpu"),
            cpu: by("cpu"),
            peers: by("peer"),
            backward: rows
                .iter()
                .filter(|r| r.pass() != "fwd" && r.backend != "peer")
                .map(|&r| r.clone())
                .collect(),
            peers_backward: rows
                .iter()
                .filter(|r| r.pass() != "fwd" && r.backend == "peer")
                .map(|&r| r.clone())
                .collect(),
            peers_meta: loaded.metas().filter(|m| m.source == "peers.py").last().cloned(),
            meta,
            ceilings,
            skipped: loaded.skipped.clone(),
        }
    }

    /// Our methods present, in table order (any unknown ones after).
    fn our_methods(&self) -> Vec<&str> {
        let mut m: Vec<&str> = self.gpu.iter().map(|r| r.method.as_str()).collect();
        m.sort_by_key(|x| (OUR_METHODS.iter().position(|o| o == x).unwrap_or(OUR_METHODS.len()), *x));
        m.dedup();
        m
    }

    /// Peer backends present, in table order.
    fn peer_methods(&self) -> Vec<(&'static str, &'static str)> {
        PEERS.into_iter().filter(|(m, _)| self.peers.iter().any(|r| r.method == *m)).collect()
    }

    /// Our row (with the library's tiles) or the peer row of `key` and `method`.
    fn find(&self, peer: bool, key: &str, method: &str) -> Option<&Row> {
        let rows = if peer { &self.peers } else { &self.gpu };
        rows.iter().find(|r| r.key == key && r.method == method && r.tiles.is_none())
    }

    /// Our fastest measured row of `key` (library tiles).
    fn best(&self, key: &str) -> Option<&Row> {
        fastest(self.gpu.iter().filter(|r| r.key == key && r.tiles.is_none()))
    }

    /// The peer row of `key`, `method` and `pass` (a backward pass).
    fn find_backward(&self, key: &str, method: &str, pass: &str) -> Option<&Row> {
        self.peers_backward.iter().find(|r| r.key == key && r.method == method && r.pass() == pass)
    }

    /// Our fastest measured GPU row of `key` in `pass` (a backward pass; library tiles).
    fn best_backward(&self, key: &str, pass: &str) -> Option<&Row> {
        let ours = self.backward.iter().filter(|r| r.backend == "gpu" && r.tiles.is_none());
        fastest(ours.filter(|r| r.key == key && r.pass() == pass))
    }

    /// Peer backends with rows of a backward pass, in table order.
    fn backward_peer_methods(&self) -> Vec<(&'static str, &'static str)> {
        PEERS.into_iter().filter(|(m, _)| self.peers_backward.iter().any(|r| r.method == *m)).collect()
    }
}

/// The measured row with the most TFLOP/s.
fn fastest<'r>(rows: impl Iterator<Item = &'r Row>) -> Option<&'r Row> {
    rows.filter(|r| r.ok() && r.tflops.is_some())
        .max_by(|a, b| a.tflops.unwrap_or(0.0).total_cmp(&b.tflops.unwrap_or(0.0)))
}

/// Whether a row is a headline shape: B·N = 16384, H·d = 2048, Nq = Nk, no varlen, 16-bit.
pub fn is_headline(r: &Row) -> bool {
    r.batch * r.seqlen_k == HEADLINE_TOKENS
        && r.heads * r.head_dim == HEADLINE_HIDDEN
        && r.seqlen_q == r.seqlen_k
        && (r.mask == "none" || r.mask == "causal")
        && (r.dtype == "bf16" || r.dtype == "f16")
}

/// A byte count for reading: B, KiB, MiB, GiB.
pub fn bytes(b: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut x, mut i) = (b, 0);
    while x >= 1024.0 && i + 1 < units.len() {
        x /= 1024.0;
        i += 1;
    }
    if i == 0 { format!("{x:.0} B") } else { format!("{x:.1} {}", units[i]) }
}

fn opt<T>(x: Option<T>, f: impl Fn(T) -> String) -> String {
    x.map_or_else(|| "–".to_string(), f)
}

fn sci(x: Option<f64>) -> String {
    opt(x, |v| if v == 0.0 { "0".to_string() } else { format!("{v:.1e}") })
}

fn ms(x: Option<f64>) -> String {
    opt(x, |v| format!("{v:.*}", [(100.0, 1), (1.0, 3)].iter().find(|t| v >= t.0).map_or(4, |t| t.1)))
}

fn gb(x: Option<f64>) -> String {
    opt(x, |v| format!("{:.3}", v / 1e9))
}

fn byte_cell(x: Option<u64>) -> String {
    opt(x, |b| bytes(b as f64))
}

/// TFLOP/s of a row, or its status.
pub fn tflops_cell(r: Option<&Row>) -> String {
    match r {
        None => "–".to_string(),
        Some(r) if r.ok() => opt(r.tflops, |t| format!("{t:.1}")),
        Some(r) if r.status == "oom" => "OOM".to_string(),
        Some(r) if r.status == "unsupported" => "n/a".to_string(),
        Some(r) => r.status.clone(),
    }
}

fn ratio(ours: Option<&Row>, peer: Option<&Row>) -> String {
    match (ours.and_then(|r| r.tflops), peer.filter(|p| p.ok()).and_then(|p| p.tflops)) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".to_string(),
    }
}

fn label(r: &Row) -> String {
    r.tiles.as_ref().map_or_else(|| r.method.clone(), |t| format!("{} {t}", r.method))
}

fn err(r: &Row, f: impl Fn(&ErrorStats) -> Option<f64>) -> Option<f64> {
    r.error.as_ref().and_then(f)
}

/// A table column: header, and the cell of an item (a row, or a group of rows).
type Col<'a, T = Row> = (String, Box<dyn Fn(&T) -> String + 'a>);

fn col_of<'a, T>(header: impl Into<String>, cell: impl Fn(&T) -> String + 'a) -> Col<'a, T> {
    (header.into(), Box::new(cell))
}

fn col<'a>(header: impl Into<String>, cell: impl Fn(&Row) -> String + 'a) -> Col<'a> {
    col_of(header, cell)
}

/// The shape key and the method (with its tiles), then `cols`.
fn shape_cols<'a>(cols: impl IntoIterator<Item = Col<'a>>) -> Vec<Col<'a>> {
    [col("shape", |r| format!("`{}`", r.key)), col("method", label)].into_iter().chain(cols).collect()
}

fn table<T>(out: &mut String, items: &[&T], cols: &[Col<'_, T>]) {
    let header: Vec<&str> = cols.iter().map(|c| c.0.as_str()).collect();
    let _ = writeln!(out, "| {} |\n|{}|", header.join(" | "), vec!["---"; cols.len()].join("|"));
    for item in items {
        let cells: Vec<String> = cols.iter().map(|c| (c.1)(item).replace('\n', " ")).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out.push('\n');
}

/// A section: heading and text, the plots whose file names start with `plot`, and the table
/// (folded under `details` when given); nothing at all without items.
fn section<T>(out: &mut String, plots: &plots::Written, head: [&str; 4], items: &[&T], cols: &[Col<'_, T>]) {
    let [title, text, plot, details] = head;
    if items.is_empty() {
        return;
    }
    let _ = writeln!(out, "## {title}\n\n{text}\n");
    for (file, caption) in plots.files.iter().filter(|(f, _)| !plot.is_empty() && f.starts_with(plot)) {
        let _ = writeln!(out, "![{caption}]({file})\n");
    }
    if !details.is_empty() {
        let _ = writeln!(out, "<details><summary>{details}</summary>\n");
    }
    table(out, items, cols);
    if !details.is_empty() {
        out.push_str("</details>\n\n");
    }
}

/// Rows in table order: dtype, head dim, mask, lengths.
fn sorted<'a>(rows: impl Iterator<Item = &'a Row>) -> Vec<&'a Row> {
    let mask_rank = |m: &str| ["none", "causal", "varlen", "varlen-causal"].iter().position(|x| *x == m);
    let mut v: Vec<&Row> = rows.collect();
    v.sort_by_key(|r| {
        (r.dtype.clone(), r.head_dim, mask_rank(&r.mask), r.seqlen_q, r.seqlen_k, r.batch, r.heads)
    });
    v
}

/// One row per distinct shape, in table order.
fn shapes<'a>(rows: impl Iterator<Item = &'a Row>) -> Vec<&'a Row> {
    let mut seen = BTreeSet::new();
    sorted(rows).into_iter().filter(|r| seen.insert(r.key.clone())).collect()
}

/// Writes report.md and the plots into `out`; returns the report's path.
pub fn write(input: &Path, out: &Path, ceilings: Option<(f64, f64)>) -> Result<PathBuf, String> {
    let loaded = load_dir(input)?;
    if loaded.records.is_empty() {
        return Err(format!("no records in {} (expected bench.jsonl / peers.jsonl)", input.display()));
    }
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let data = Data::new(&loaded, ceilings);
    let plots = plots::write_all(&data, out);
    let path = out.join(REPORT_FILE);
    std::fs::write(&path, render(&data, &plots))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// The report's Markdown, given the plots that were written.
pub fn render(d: &Data, plots: &plots::Written) -> String {
    let mut out = String::new();
    let device = d.meta.as_ref().map_or("unknown device", |m| m.device.as_str());
    let _ = writeln!(
        out,
        "# flashattn benchmark: {device}\n\nWhere the time and the bytes go: {} GPU rows, {} CPU rows, {} peer \
         rows. Generated by `flashattn-bench report` from the JSON lines in this folder.\n",
        d.gpu.len(),
        d.cpu.len(),
        d.peers.len()
    );
    meta_table(&mut out, d);
    speed_sections(&mut out, d, plots);
    decode_section(&mut out, d, plots);
    gpu_sections(&mut out, d, plots);
    let cpu_text = "No GPU: the library's tiled CPU attention (`cpu-tiled`) against standard attention that \
         materializes every score (`cpu-standard`: the test kit's baseline), wall clock per call (median). Extra \
         memory: the model (standard: B·H·Nq·Nk·4 bytes of scores; tiled: one Q, K, V and accumulator tile) and \
         the measured growth of the peak resident set (Linux; page-granular, and a small buffer may reuse memory \
         already resident, so small shapes can show 0). Error: the test kit's rule, as in the GPU reports.";
    let cols = shape_cols([
        col("status", |r| r.status.clone()),
        col("median ms", |r| ms(r.median_ms())),
        col("GFLOP/s", |r| opt(r.tflops, |t| format!("{:.2}", t * 1e3))),
        col("extra (model)", |r| byte_cell(r.extra_bytes_plan)),
        col("extra (measured)", |r| byte_cell(r.extra_bytes_measured)),
        col("oracle err", |r| sci(err(r, |e| e.oracle_max_abs))),
        col("rule ratio", |r| opt(err(r, |e| e.rule_ratio), |x| format!("{x:.2}"))),
    ]);
    section(&mut out, plots, ["CPU", cpu_text, "cpu", ""], &sorted(d.cpu.iter()), &cols);
    backward_section(&mut out, d, plots);
    let bad: Vec<&Row> = d
        .gpu
        .iter()
        .chain(&d.cpu)
        .chain(&d.backward)
        .chain(&d.peers)
        .chain(&d.peers_backward)
        .filter(|r| !r.ok())
        .collect();
    let message = |r: &Row| r.message.clone().unwrap_or_default().chars().take(240).collect::<String>();
    let mut cols = shape_cols([
        col("status", |r| r.status.clone()),
        col("message", move |r| message(r).replace('|', "\\|")),
    ]);
    if !d.backward.is_empty() || !d.peers_backward.is_empty() {
        cols.insert(2, col("pass", |r| r.pass().to_string()));
    }
    let head = ["Rows without a measurement", "", "", "Status and message of each"];
    section(&mut out, plots, head, &bad, &cols);
    if !d.gpu.is_empty() {
        out.push_str(METHOD_TEXT);
    }
    if !plots.errors.is_empty() || !d.skipped.is_empty() {
        out.push_str("\n## Notes\n\n");
        for e in plots.errors.iter().chain(&d.skipped) {
            let _ = writeln!(out, "- {e}");
        }
    }
    out
}

/// Rows of the passes other than the forward: the backward alone and the forward then the
/// backward, with their FLOPs (2.5 and 3.5 forwards) and extra memory; then our fastest GPU row
/// of each shape and pass beside the peers' rows of the same pass; nothing without them.
fn backward_section(out: &mut String, d: &Data, plots: &plots::Written) {
    let text = "`bwd`: the backward call alone, given the forward's O and log-sum-exp (computed once per input \
         set, untimed); `fwd+bwd`: the forward then the backward. FLOPs: 2.5 × the forward's for `bwd`, 3.5 × \
         for `fwd+bwd` (FlashAttention's rule). GPU rows: `Device::attention_backward`, timed like the forward \
         (CUDA events, rotating input sets, each with its own dO and gradient buffers); extra memory (model): \
         the backward plan's scratch (`Plan::scratch_bytes`: the f32 dQ accumulator and row statistics), for \
         `fwd+bwd` the larger of the forward's and the backward's; only the tensor-core methods (`auto`, \
         `flash-tc`) have a GPU backward, other methods' rows are unsupported. CPU rows: extra memory (model) \
         is the CPU backward's O(N) working set, three f32 and an f32 row of d (the dQ accumulator) per query \
         row plus one key row of (P, dP) pairs. Gradient check (CPU rows): the test kit's gradient rule \
         against its f64 oracle, where the shape is within the oracle's budget; GPU backward rows are not \
         checked here.";
    let cols = shape_cols([
        col("pass", |r| r.pass().to_string()),
        col("backend", |r| r.backend.clone()),
        col("status", |r| r.status.clone()),
        col("median ms", |r| ms(r.median_ms())),
        // The CPU's speed in GFLOP/s (as the CPU table), the GPU's in TFLOP/s.
        col("speed", |r| {
            opt(r.tflops.filter(|_| r.ok()), |t| match r.backend.as_str() {
                "cpu" => format!("{:.2} GFLOP/s", t * 1e3),
                _ => format!("{t:.1} TFLOP/s"),
            })
        }),
        col("extra (model)", |r| byte_cell(r.extra_bytes_plan)),
        col("extra (measured)", |r| byte_cell(r.extra_bytes_measured)),
        col("rule ratio", |r| opt(err(r, |e| e.rule_ratio), |x| format!("{x:.2}"))),
        col("gradients", |r| match r.error.as_ref() {
            Some(e) => match (e.within_rule, &e.note) {
                (Some(true), _) => "within rule".into(),
                (_, Some(n)) => n.replace('|', "\\|"),
                _ => "–".into(),
            },
            None => "–".into(),
        }),
    ]);
    let mut rows = sorted(d.backward.iter());
    rows.sort_by_key(|r| r.pass() == "fwd+bwd");
    section(out, plots, ["Backward passes", text, "", ""], &rows, &cols);

    // Against the peers: one item per (shape, pass) that both we (GPU) and a peer ran.
    let mut seen = BTreeSet::new();
    let mut pairs: Vec<&Row> = sorted(d.backward.iter().filter(|r| r.backend == "gpu"))
        .into_iter()
        .filter(|r| d.peers_backward.iter().any(|p| p.key == r.key && p.pass() == r.pass()))
        .filter(|r| seen.insert((r.key.clone(), r.pass().to_string())))
        .collect();
    pairs.sort_by_key(|r| r.pass() == "fwd+bwd");
    let best = |r: &Row| {
        opt(d.best_backward(&r.key, r.pass()), |b| format!("{} ({})", tflops_cell(Some(b)), b.method))
    };
    let mut cols = vec![
        col("shape", |r| format!("`{}`", r.key)),
        col("pass", |r| r.pass().to_string()),
        col("ours", best),
    ];
    for (m, name) in d.backward_peer_methods() {
        cols.push(col(name, move |r| tflops_cell(d.find_backward(&r.key, m, r.pass()))));
    }
    for (m, name) in d.backward_peer_methods() {
        cols.push(col(format!("ours / {name}"), move |r| {
            ratio(d.best_backward(&r.key, r.pass()), d.find_backward(&r.key, m, r.pass()))
        }));
    }
    let text = "TFLOP/s of the same pass (2.5 or 3.5 × the forward's FLOPs for both); ours is our fastest GPU \
         method. The peers time `torch.autograd.grad(out, (q, k, v), dO)` on the backend pinned for the \
         forward: `bwd` on the graph of one untimed forward (kept with `retain_graph=True`), `fwd+bwd` the \
         forward and the backward in each call. Ratios: ours over each peer.";
    section(out, plots, ["Backward passes against the peers", text, "", ""], &pairs, &cols);
}

fn meta_table(out: &mut String, d: &Data) {
    let text = |v: &serde_json::Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    let extra = |m: &Option<Meta>, k: &str| m.as_ref().and_then(|m| m.extra.get(k)).map(text);
    let size = |k: &str| d.meta.as_ref().and_then(|m| m.extra.get(k)?.as_f64()).map(bytes);
    let args = d.meta.as_ref().and_then(|m| m.extra.get("args")?.as_array().cloned());
    let args =
        args.map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect::<Vec<_>>().join(" "));
    let peers = d.peers_meta.as_ref().map(|_| {
        let [torch, cuda, triton, cudnn, timer] = ["torch", "torch_cuda", "triton", "cudnn", "timer"]
            .map(|k| extra(&d.peers_meta, k).unwrap_or("–".into()));
        format!("torch {torch} (CUDA {cuda}), triton {triton}, cuDNN {cudnn}; timed with {timer}")
    });
    let c = &d.ceilings;
    let notes = if c.notes.is_empty() { String::new() } else { format!(": {}", c.notes) };
    let ceilings = format!("{:.2} TB/s, {:.0} TFLOP/s ({}{notes})", c.bandwidth_tbs, c.tflops, c.source);
    let field = |f: fn(&Meta) -> &String| d.meta.as_ref().map(|m| f(m).clone());
    let kv = [
        ("device", field(|m| &m.device)),
        ("compute capability", extra(&d.meta, "compute_capability")),
        ("SMs", extra(&d.meta, "sm_count")),
        ("CUDA driver", extra(&d.meta, "driver_version")),
        ("PTX target", extra(&d.meta, "ptx_target")),
        ("L2 cache", size("l2_bytes")),
        ("device memory", size("total_memory")),
        ("commit", field(|m| &m.commit)),
        ("host", field(|m| &m.host)),
        ("started", field(|m| &m.timestamp)),
        ("command", args.map(|a| format!("`{a}`"))),
        ("peers", peers),
        ("ceilings", (!d.gpu.is_empty()).then_some(ceilings)),
    ];
    let kv: Vec<[String; 2]> = kv.into_iter().filter_map(|(k, v)| Some([k.to_string(), v?])).collect();
    let cols = [0, 1].map(|i| col_of("", move |e: &[String; 2]| e[i].clone()));
    table(out, &kv.iter().collect::<Vec<_>>(), &cols);
}

/// `cols`, then each peer's TFLOP/s, then our fastest method's ratio to each peer.
fn with_peers<'a>(d: &'a Data, mut cols: Vec<Col<'a>>) -> Vec<Col<'a>> {
    for (m, name) in d.peer_methods() {
        cols.push(col(name, move |r| tflops_cell(d.find(true, &r.key, m))));
    }
    for (m, name) in d.peer_methods() {
        cols.push(col(format!("ours / {name}"), move |r| ratio(d.best(&r.key), d.find(true, &r.key, m))));
    }
    cols
}

/// The headline grid (each of our methods) and the other shapes the peers ran (our fastest), in
/// TFLOP/s beside each peer's.
fn speed_sections(out: &mut String, d: &Data, plots: &plots::Written) {
    let mut cols = vec![
        col("dtype", |r| r.dtype.clone()),
        col("d", |r| r.head_dim.to_string()),
        col("mask", |r| r.mask.clone()),
        col("N", |r| r.seqlen_k.to_string()),
        col("B", |r| r.batch.to_string()),
        col("H", |r| r.heads.to_string()),
    ];
    cols.extend(d.our_methods().into_iter().map(|m| col(m, move |r| tflops_cell(d.find(false, &r.key, m)))));
    let title = format!("Headline: B·N = {HEADLINE_TOKENS}, H·d = {HEADLINE_HIDDEN}");
    let text = "TFLOP/s (FLOPs = 4·B·H·N²·d, halved for causal). Ratios: our fastest method over each peer.";
    let headline = shapes(d.gpu.iter().filter(|r| is_headline(r)));
    section(out, plots, [&title, text, "tflops", ""], &headline, &with_peers(d, cols));
    let best = |r: &Row| opt(d.best(&r.key), |b| format!("{} ({})", tflops_cell(Some(b)), b.method));
    let cols = with_peers(d, vec![col("shape", |r| format!("`{}`", r.key)), col("ours", best)]);
    let others = shapes(d.peers.iter().filter(|r| !is_headline(r) && !d.gpu.is_empty()));
    let head = [
        "Other shapes against the peers",
        "TFLOP/s; ours is our fastest method. A `/wL` key has a left sliding window of L keys: FLOPs count \
         only the visible (query, key) pairs, and only FlexAttention (torch flex) runs it among the peers. \
         A `/capC` key soft-caps the scaled scores at C (C·tanh(s/C)) and an `/alibi` key adds ALiBi biases \
         (BLOOM's slopes): FLOPs as without them, and only FlexAttention (its `score_mod`) runs them among \
         the peers.",
        "",
        "",
    ];
    section(out, plots, head, &others, &cols);
}

/// K/V TB/s of a row, or its status; `(repeat)` where a peer expanded K and V itself.
fn kv_cell(r: Option<&Row>) -> String {
    match r {
        Some(r) if r.ok() => {
            let repeat = if r.gqa.as_deref() == Some("repeat") { " (repeat)" } else { "" };
            opt(r.kv_tb_s, |t| format!("{t:.2}{repeat}"))
        }
        r => tflops_cell(r),
    }
}

/// Decode shapes (Nq = 1): the K/V cache read over the time, ours (the fastest method) and each
/// peer's, as a share of the memory's speed and as ratios.
fn decode_section(out: &mut String, d: &Data, plots: &plots::Written) {
    let mut rows: Vec<&Row> = shapes(d.gpu.iter().filter(|r| r.seqlen_q == 1 && r.tiles.is_none()));
    rows.sort_by_key(|r| (r.group.clone(), r.dtype.clone(), r.head_dim, r.batch, r.seqlen_k, r.key.clone()));
    let c = &d.ceilings;
    let copy = if c.source.contains("measured") { "measured copy".to_string() } else { c.source.clone() };
    let device = d.meta.as_ref().map_or("", |m| m.device.as_str());
    let share = |bw: f64| {
        move |r: &Row| opt(d.best(&r.key).and_then(|b| b.kv_tb_s), |t| format!("{:.0}%", 100.0 * t / bw))
    };
    let mut cols = vec![
        col("group", |r| r.group.clone()),
        col("dtype", |r| r.dtype.clone()),
        col("B", |r| r.batch.to_string()),
        col("H / KV", |r| format!("{} / {}", r.heads, r.kv_heads())),
        col("d", |r| r.head_dim.to_string()),
        col("Nk", |r| r.seqlen_k.to_string()),
        col("window", |r| r.window_left.map_or("–".to_string(), |l| l.to_string())),
        col("K+V read", |r| opt(r.kv_bytes(), bytes)),
        col("ours TB/s", |r| opt(d.best(&r.key), |b| format!("{} ({})", kv_cell(Some(b)), b.method))),
        col(format!("% of {:.2} TB/s ({copy})", c.bandwidth_tbs), share(c.bandwidth_tbs)),
    ];
    if device.contains("H200") {
        cols.push(col(format!("% of {H200_DATASHEET_TBS} TB/s (datasheet)"), share(H200_DATASHEET_TBS)));
    }
    for (m, name) in d.peer_methods() {
        cols.push(col(format!("{name} TB/s"), move |r| kv_cell(d.find(true, &r.key, m))));
    }
    // Ratios against the two fast peers only (the table is wide enough).
    for (m, name) in d.peer_methods().into_iter().filter(|(m, _)| ["torch-flash", "torch-cudnn"].contains(m))
    {
        cols.push(col(format!("ours / {name}"), move |r| ratio(d.best(&r.key), d.find(true, &r.key, m))));
    }
    let text = format!(
        "One query per sequence against a K/V cache of Nk tokens: the step reads K and V once, so its \
         speed is bandwidth. TB/s = bytes of K and V (2·B·Nk·KV·d·e, the storage type; Q, O and the LSE are \
         negligible and not counted) / median time. A row with a window (a left sliding window of L keys, \
         the key's `/wL`) reads only the keys its query sees: min(Nk, L + 1) per sequence in place of Nk \
         (K+V read). Ours is our fastest method. The shares are of the \
         device-to-device copy bandwidth (read + write bytes) of this run's ceilings{}. A peer marked \
         (repeat) ran on a torch without `enable_gqa`: K and V were expanded with `repeat_interleave` inside \
         its timed call. Ratios: ours over torch's FlashAttention-2 and cuDNN backends (TB/s, equally \
         their time over ours).",
        if device.contains("H200") { ", and of the H200 datasheet's 4.8 TB/s" } else { "" }
    );
    section(out, plots, ["Decode: K/V bandwidth", &text, "", ""], &rows, &cols);
}

/// Memory, error, the complete path, Nsight Compute's bytes, and every GPU row.
fn gpu_sections(out: &mut String, d: &Data, plots: &plots::Written) {
    let methods: Vec<&str> =
        d.our_methods().into_iter().filter(|m| *m == "standard" || m.starts_with("flash")).collect();
    let mut cols =
        vec![col("shape", |r| format!("`{}`", r.key)), col("Q+K+V+O+LSE", |r| bytes(r.io_bytes as f64))];
    cols.extend(methods.iter().map(|&m| {
        col(format!("{m}: extra (plan / measured)"), move |r| match d.find(false, &r.key, m) {
            Some(r) if r.status == "oom" => format!("OOM, needs {}", byte_cell(r.oom_needed_bytes)),
            Some(r) if r.ok() => {
                format!("{} / {}", byte_cell(r.extra_bytes_plan), byte_cell(r.extra_bytes_measured))
            }
            r => tflops_cell(r),
        })
    }));
    let text = "Extra device memory of one call beyond Q, K, V, O and the LSE. Standard attention stores S (f32) \
                and P: B·H·Nq·Nk·(4 + e) bytes, quadratic in N; flash stores nothing of that size.";
    let rows = shapes(d.gpu.iter().filter(|r| r.tiles.is_none() && methods.contains(&r.method.as_str())));
    section(out, plots, ["Memory", text, "memory", ""], &rows, &cols);

    // Error, by dtype and method.
    let mut groups: BTreeMap<(String, String), Vec<&Row>> = BTreeMap::new();
    for r in d.gpu.iter().filter(|r| r.ok() && r.error.is_some()) {
        groups.entry((r.dtype.clone(), label(r))).or_default().push(r);
    }
    type Group<'r> = ((String, String), Vec<&'r Row>);
    let max =
        |g: &Group, f: fn(&ErrorStats) -> Option<f64>| g.1.iter().filter_map(|r| err(r, f)).reduce(f64::max);
    let verdicts = |g: &Group| g.1.iter().filter_map(|r| r.error.as_ref()?.within_rule).collect::<Vec<_>>();
    let cols: Vec<Col<Group>> = vec![
        col_of("dtype", |g: &Group| g.0.0.clone()),
        col_of("method", |g: &Group| g.0.1.clone()),
        col_of("rows", |g: &Group| g.1.len().to_string()),
        col_of("max oracle error", move |g: &Group| sci(max(g, |e| e.oracle_max_abs))),
        col_of("max relative", move |g: &Group| {
            sci(max(g, |e| Some(e.oracle_max_abs? / e.oracle_ref_max_abs?.max(1e-30))))
        }),
        col_of("max baseline error", move |g: &Group| sci(max(g, |e| e.baseline_max_abs))),
        col_of("max vs f32 flash", move |g: &Group| sci(max(g, |e| e.f32_ref_max_abs))),
        col_of("non-finite", |g: &Group| {
            g.1.iter().filter_map(|r| r.error.as_ref()).map(|e| e.nonfinite).sum::<u64>().to_string()
        }),
        col_of("max rule ratio", move |g: &Group| opt(max(g, |e| e.rule_ratio), |x| format!("{x:.2}"))),
        col_of("within rule", move |g: &Group| {
            let v = verdicts(g);
            if v.is_empty() {
                "–".into()
            } else {
                format!("{}/{}", v.iter().filter(|&&x| x).count(), v.len())
            }
        }),
    ];
    let text = "The test kit's tolerance rule (`tests/src/tolerance.rs`, FlashAttention's): on the checked rows, \
                max |out − f64 oracle| may be at most 2 × the error of standard attention in the same dtype (the \
                baseline) + atol, the output dtype's rounding; f32 outputs are held to an absolute bound instead. \
                \"vs f32 flash\": max |out − GPU f32 flash| over every element where the oracle sampled rows. Runs \
                recorded before the rule was shared have no baseline column.";
    let groups: Vec<Group> = groups.into_iter().collect();
    section(out, plots, ["Error", text, "", ""], &groups.iter().collect::<Vec<_>>(), &cols);
    let bad: Vec<&Row> =
        d.gpu.iter().filter(|r| r.error.as_ref().and_then(|e| e.within_rule) == Some(false)).collect();
    let cols = shape_cols([
        col("error", |r| sci(err(r, |e| e.oracle_max_abs))),
        col("baseline error", |r| sci(err(r, |e| e.baseline_max_abs))),
        col("why", |r| r.error.as_ref().and_then(|e| e.note.clone()).unwrap_or_default()),
    ]);
    section(out, plots, ["Rows outside the rule", "", "", ""], &bad, &cols);

    // The complete path.
    let cp = |r: &Row| r.complete.clone().unwrap_or_default();
    let pair = |a: Option<f64>, b: Option<f64>| format!("{} / {}", ms(a), ms(b));
    // Pageable and pinned milliseconds, and the pageable copy's GB/s.
    let copy = |f: fn(&CompletePath) -> [Option<f64>; 3]| {
        move |r: &Row| {
            let [plain, pinned, bytes] = f(&cp(r));
            let rate = plain.zip(bytes).filter(|p| p.0 > 0.0).map(|(m, b)| b / (m * 1e-3) / 1e9);
            format!("{} ({})", pair(plain, pinned), opt(rate, |v| format!("{v:.1} GB/s")))
        }
    };
    let total = move |r: &Row| {
        let c = cp(r);
        let total = c.upload_ms.zip(r.median_ms()).zip(c.download_ms).map(|((u, k), dl)| (u + k + dl, k));
        opt(total, |(t, k)| format!("{} ({:.0}% kernel)", ms(Some(t)), 100.0 * k / t))
    };
    let cols = shape_cols([
        col("kernel ms: (B,N,H,d) / (B,H,N,d)", move |r| pair(r.median_ms(), cp(r).bhsd_median_ms)),
        col("enqueue µs/call", move |r| opt(cp(r).enqueue_us, |v| format!("{v:.1}"))),
        col("ms/call: stream / graph", move |r| pair(cp(r).stream_ms_per_call, cp(r).graph_ms_per_call)),
        col(
            "upload ms: pageable / pinned",
            copy(|c| [c.upload_ms, c.upload_pinned_ms, Some(c.upload_bytes as f64)]),
        ),
        col(
            "download ms: pageable / pinned",
            copy(|c| [c.download_ms, c.download_pinned_ms, Some(c.download_bytes as f64)]),
        ),
        col("total ms", total),
        col("notes", move |r| cp(r).notes.join("; ")),
    ]);
    let text = "One call as an application sees it. Upload: Q, K, V host→device from a plain `Vec` (pageable) and \
                from page-locked (pinned) memory, wall clock, median of 3. Layout: the same call on `(B, H, N, d)` \
                tensors (PyTorch's order, no copy needed). Launch: host time per `Device::attention` call enqueued \
                back to back, and GPU time per call back to back on the stream vs the same calls replayed from a \
                CUDA graph. Download: O device→host. Total = pageable upload + kernel + pageable download.";
    let rows = sorted(d.gpu.iter().filter(|r| r.complete.is_some() && r.ok()));
    section(out, plots, ["The complete path", text, "", ""], &rows, &cols);

    // Nsight Compute.
    let ncu = |r: &Row| r.ncu.clone().unwrap_or_default();
    let measured = move |r: &Row| ncu(r).dram_read.zip(ncu(r).dram_write).map(|(a, b)| a + b);
    let per = move |of: fn(&Row) -> Option<f64>| {
        move |r: &Row| opt(measured(r).zip(of(r).filter(|&m| m > 0.0)), |(t, m)| format!("{:.2}", t / m))
    };
    let cols = shape_cols([
        col("model GB", |r| gb(r.bytes_model)),
        col("compulsory GB", |r| gb(r.bytes_compulsory)),
        col("read + write GB", move |r| format!("{} + {}", gb(ncu(r).dram_read), gb(ncu(r).dram_write))),
        col("measured / model", per(|r| r.bytes_model)),
        col("measured / compulsory", per(|r| r.bytes_compulsory)),
        col("kernels", move |r| ncu(r).kernels.to_string()),
        col("error", move |r| ncu(r).error.unwrap_or_default().chars().take(160).collect()),
    ]);
    let text = "`dram__bytes_read.sum` + `dram__bytes_write.sum` over every kernel of one call (cold caches, \
                `--clock-control none`), next to the models.";
    let rows: Vec<&Row> = d.gpu.iter().filter(|r| r.ncu.is_some()).collect();
    section(out, plots, ["Measured DRAM traffic (Nsight Compute)", text, "", ""], &rows, &cols);

    // Every row.
    let timing = |r: &Row, f: fn(&Timing) -> String| r.timing.as_ref().map_or("–".into(), f);
    let cols = shape_cols([
        col("tiles run", |r| opt(r.block_m.zip(r.block_n), |(m, n)| format!("{m}×{n}"))),
        col("status", |r| r.status.clone()),
        col("median ms", |r| ms(r.median_ms())),
        col("p10–p90 ms", move |r| timing(r, |t| format!("{}–{}", ms(Some(t.p10_ms)), ms(Some(t.p90_ms))))),
        col("samples×calls", move |r| timing(r, |t| format!("{}×{}", t.samples, t.calls_per_sample))),
        col("TFLOP/s", |r| tflops_cell(Some(r))),
        col("model GB", |r| gb(r.bytes_model)),
        col("GB/s", |r| opt(r.bandwidth_gbs, |b| format!("{b:.0}"))),
        col("FLOP/B", |r| opt(r.intensity, |x| format!("{x:.0}"))),
        col("extra (plan)", |r| byte_cell(r.extra_bytes_plan)),
        col("extra (measured)", |r| byte_cell(r.extra_bytes_measured)),
        col("oracle err", |r| sci(err(r, |e| e.oracle_max_abs))),
        col("f32 err", |r| sci(err(r, |e| e.f32_ref_max_abs))),
    ]);
    let head = ["All rows", "", "", "Every GPU row (tile overrides included)"];
    section(out, plots, head, &sorted(d.gpu.iter()), &cols);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renders a committed results folder into a temporary one.
    fn render_committed(run: &str) -> (tempfile::TempDir, String) {
        let input = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results/2026-11-29-nvidia-h200").join(run);
        let dir = tempfile::tempdir().unwrap();
        let md = std::fs::read_to_string(write(&input, dir.path(), None).unwrap()).unwrap();
        (dir, md)
    }

    #[test]
    fn committed_runs_re_render() {
        let (dir, md) = render_committed("headline");
        for want in [
            "| device | NVIDIA H200 |",
            "torch 2.11.0+cu130 (CUDA 13.0)",
            "## Headline: B·N = 16384, H·d = 2048",
            "| dtype | d | mask | N | B | H | flash-tc | standard | torch FA2 | torch cuDNN |",
            "| bf16 | 64 | none | 1024 | 16 | 32 | 292.6 | 41.4 | 288.1 | 426.9 |",
            "| 1.02× | 0.69× |",
            "![TFLOP/s against N, bf16, B·N = 16384, H·d = 2048](tflops-bf16.svg)",
            "](memory.svg)",
            "| `bf16/B1/H16/N16384x16384/d128/none` | 257.0 MiB | 0 B / 0 B | 24.0 GiB / 24.0 GiB |",
            "| bf16 | flash-tc | 20 | 7.4e-3 |",
            "## The complete path",
            "| 0.22 | 0.97 | 1 |",
            "<summary>Every GPU row",
            "FLOPs = 4·B·H·Nq·Nk·d",
        ] {
            assert!(md.contains(want), "the headline report lacks `{want}`:\n{md}");
        }
        for svg in ["tflops-bf16.svg", "tflops-f16.svg", "memory.svg"] {
            let text = std::fs::read_to_string(dir.path().join(svg)).unwrap();
            assert!(
                text.starts_with("<svg") && text.contains("torch FA2") == svg.starts_with("tflops"),
                "{svg}"
            );
        }
        let (dir, md) = render_committed("memory-wall");
        assert!(md.contains(
            "| `bf16/B1/H16/N65536x65536/d128/none` | 1.0 GiB | 0 B / 0 B | OOM, needs 384.0 GiB |"
        ));
        let svg = std::fs::read_to_string(dir.path().join("memory.svg")).unwrap();
        assert!(
            svg.contains("Memory of one call: bf16 d = 128, B = 1, H = 16") && svg.contains("out of memory")
        );
    }

    #[test]
    fn decode_rows_get_a_bandwidth_table() {
        let dir = tempfile::tempdir().unwrap();
        // Llama-3-8B decode, B = 16, Nk = 16384: K + V = 1 GiB; the rows carry no kv_tb_s (as
        // records written before it), so the report derives it.
        let key = "bf16/B16/H32/KV8/N1x16384/d128/none";
        let flops = 4.0 * 16.0 * 32.0 * 16_384.0 * 128.0;
        let row = |backend: &str, method: &str, ms: f64, extra: &str| {
            format!(
                r#"{{"kind":"row","backend":"{backend}","key":"{key}","group":"llama3-8b-decode","dtype":"bf16","batch":16,"heads":32,"kv_heads":8,"seqlen_q":1,"seqlen_k":16384,"head_dim":128,"mask":"none","method":"{method}","status":"ok","flops":{flops},"timing":{{"median_ms":{ms}}},"tflops":{}{extra}}}"#,
                flops / (ms * 1e-3) / 1e12
            )
        };
        let ours = [
            r#"{"kind":"meta","source":"flashattn-bench","device":"NVIDIA H200"}"#.to_string(),
            r#"{"kind":"ceilings","bandwidth_tbs":4.0,"tflops":800.0,"source":"measured"}"#.to_string(),
            row("gpu", "auto", 0.25, ""),
        ];
        let peers = [
            row("peer", "torch-flash", 0.5, r#","gqa":"native""#),
            row("peer", "torch-cudnn", 1.0, r#","gqa":"repeat""#),
            format!(
                r#"{{"kind":"row","backend":"peer","key":"{key}","seqlen_q":1,"method":"torch-efficient","status":"unsupported"}}"#
            ),
        ];
        std::fs::write(dir.path().join("bench.jsonl"), ours.join("\n")).unwrap();
        std::fs::write(dir.path().join("peers.jsonl"), peers.join("\n")).unwrap();
        let md = std::fs::read_to_string(write(dir.path(), dir.path(), None).unwrap()).unwrap();
        for want in [
            "## Decode: K/V bandwidth",
            "| group | dtype | B | H / KV | d | Nk | window | K+V read | ours TB/s | % of 4.00 TB/s (measured copy) | % of 4.8 TB/s \
             (datasheet) | torch FA2 TB/s | torch cuDNN TB/s | torch mem-eff TB/s | ours / torch FA2 | ours / torch \
             cuDNN |",
            "| llama3-8b-decode | bf16 | 16 | 32 / 8 | 128 | 16384 | – | 1.0 GiB | 4.29 (auto) | 107% | 89% | 2.15 | \
             1.07 (repeat) | n/a | 2.00× | 4.00× |",
        ] {
            assert!(md.contains(want), "the report lacks `{want}`:\n{md}");
        }
    }

    #[test]
    fn windowed_decode_rows_count_only_the_visible_keys() {
        let dir = tempfile::tempdir().unwrap();
        // B = 1, H = 16, Nk = 16384, d = 128, bf16, left window 1024: the query sees 1025 keys,
        // K + V = 2·1025·16·128·2 bytes = 8.0 MiB, so 0.01 ms is 0.84 TB/s (all 16384 keys
        // would make it 13.4 TB/s). The rows carry the TB/s of every key (as the bench and
        // peers.py wrote them before): the report recomputes it.
        let key = "bf16/B1/H16/N1x16384/d128/causal/w1024";
        let row = |backend: &str, method: &str, ms: f64, extra: &str| {
            format!(
                r#"{{"kind":"row","backend":"{backend}","key":"{key}","group":"decode","dtype":"bf16","batch":1,"heads":16,"kv_heads":16,"seqlen_q":1,"seqlen_k":16384,"head_dim":128,"mask":"causal","window_left":1024,"method":"{method}","status":"ok","flops":1e9,"timing":{{"median_ms":{ms}}},"tflops":{}{extra}}}"#,
                1e9 / (ms * 1e-3) / 1e12
            )
        };
        let ours = [
            r#"{"kind":"meta","source":"flashattn-bench","device":"NVIDIA H200"}"#.to_string(),
            r#"{"kind":"ceilings","bandwidth_tbs":4.0,"tflops":800.0,"source":"measured"}"#.to_string(),
            row("gpu", "auto", 0.01, r#","kv_tb_s":13.42"#),
        ];
        let peers = [row("peer", "torch-flex", 0.02, r#","kv_tb_s":6.71"#)];
        std::fs::write(dir.path().join("bench.jsonl"), ours.join("\n")).unwrap();
        std::fs::write(dir.path().join("peers.jsonl"), peers.join("\n")).unwrap();
        let md = std::fs::read_to_string(write(dir.path(), dir.path(), None).unwrap()).unwrap();
        for want in [
            "| group | dtype | B | H / KV | d | Nk | window | K+V read | ours TB/s | % of 4.00 TB/s (measured copy) | \
             % of 4.8 TB/s (datasheet) | torch flex TB/s |",
            "| decode | bf16 | 1 | 16 / 16 | 128 | 16384 | 1024 | 8.0 MiB | 0.84 (auto) | 21% | 17% | 0.42 |",
        ] {
            assert!(md.contains(want), "the report lacks `{want}`:\n{md}");
        }
    }

    #[test]
    fn backward_passes_get_their_own_section() {
        let dir = tempfile::tempdir().unwrap();
        let row = |backend: &str, method: &str, pass: &str, status: &str, ms: f64| {
            format!(
                r#"{{"kind":"row","backend":"{backend}","key":"f32/B1/H2/N64x64/d64/none","dtype":"f32","batch":1,"heads":2,"seqlen_q":64,"seqlen_k":64,"head_dim":64,"mask":"none","method":"{method}","pass":"{pass}","status":"{status}","message":"m {pass}","flops":1e9,"timing":{{"median_ms":{ms}}},"tflops":0.0005}}"#
            )
        };
        let lines = [
            row("cpu", "cpu-tiled", "fwd", "ok", 2.0),
            row("cpu", "cpu-tiled", "bwd", "ok", 5.0),
            row("gpu", "flash", "bwd", "unsupported", 0.0),
        ];
        std::fs::write(dir.path().join("bench.jsonl"), lines.join("\n")).unwrap();
        let loaded = load_dir(dir.path()).unwrap();
        let d = Data::new(&loaded, None);
        // The backward rows are kept apart (not deduplicated against the forward's).
        assert_eq!((d.cpu.len(), d.gpu.len(), d.backward.len()), (1, 0, 2));
        let md = std::fs::read_to_string(write(dir.path(), dir.path(), None).unwrap()).unwrap();
        for want in [
            "## Backward passes",
            "| `f32/B1/H2/N64x64/d64/none` | cpu-tiled | bwd | cpu | ok | 5.000 | 0.50 GFLOP/s |",
            "| `f32/B1/H2/N64x64/d64/none` | flash | bwd | unsupported | m bwd |",
            "| `f32/B1/H2/N64x64/d64/none` | cpu-tiled | ok | 2.000 |",
        ] {
            assert!(md.contains(want), "the report lacks `{want}`:\n{md}");
        }
        assert!(!md.contains("against the peers"), "no peers, no pairing:\n{md}");
    }

    #[test]
    fn backward_rows_pair_with_the_peers_by_pass() {
        let dir = tempfile::tempdir().unwrap();
        let key = "bf16/B2/H16/N4096x4096/d128/causal";
        let fwd_flops = 4.0 * 2.0 * 16.0 * 4096.0 * 4096.0 * 128.0 / 2.0;
        let row = |backend: &str, method: &str, pass: &str, status: &str, ms: f64| {
            let factor = match pass {
                "bwd" => 2.5,
                "fwd+bwd" => 3.5,
                _ => 1.0,
            };
            let flops = fwd_flops * factor;
            let tflops = flops / (ms * 1e-3) / 1e12;
            format!(
                r#"{{"kind":"row","backend":"{backend}","key":"{key}","dtype":"bf16","batch":2,"heads":16,"kv_heads":16,"seqlen_q":4096,"seqlen_k":4096,"head_dim":128,"mask":"causal","method":"{method}","pass":"{pass}","status":"{status}","message":"m","flops":{flops},"timing":{{"median_ms":{ms}}},"tflops":{tflops}}}"#
            )
        };
        let ours = [
            row("gpu", "auto", "fwd", "ok", 1.0),
            row("gpu", "auto", "bwd", "ok", 2.0),
            row("gpu", "flash-tc", "bwd", "ok", 4.0),
            row("gpu", "flash", "bwd", "unsupported", 1.0),
            row("gpu", "auto", "fwd+bwd", "ok", 3.0),
        ];
        let peers = [
            row("peer", "torch-flash", "fwd", "ok", 0.5),
            row("peer", "torch-flash", "bwd", "ok", 1.0),
            row("peer", "torch-cudnn", "bwd", "ok", 4.0),
            row("peer", "torch-flash", "fwd+bwd", "ok", 6.0),
            row("peer", "torch-cudnn", "fwd+bwd", "unsupported", 1.0),
        ];
        std::fs::write(dir.path().join("bench.jsonl"), ours.join("\n")).unwrap();
        std::fs::write(dir.path().join("peers.jsonl"), peers.join("\n")).unwrap();
        let d = Data::new(&load_dir(dir.path()).unwrap(), None);
        assert_eq!((d.gpu.len(), d.peers.len(), d.backward.len(), d.peers_backward.len()), (1, 1, 4, 4));
        // Pairs are by pass: the forward's peer row is not the backward's.
        assert_eq!(d.find_backward(key, "torch-flash", "bwd").unwrap().median_ms(), Some(1.0));
        assert_eq!(d.find_backward(key, "torch-flash", "fwd+bwd").unwrap().median_ms(), Some(6.0));
        assert_eq!(d.best_backward(key, "bwd").unwrap().method, "auto");
        assert!(d.find_backward(key, "torch-flash", "fwd").is_none());
        let md = std::fs::read_to_string(write(dir.path(), dir.path(), None).unwrap()).unwrap();
        let tf = |ms: f64, factor: f64| format!("{:.1}", fwd_flops * factor / (ms * 1e-3) / 1e12);
        for want in [
            "## Backward passes against the peers".to_string(),
            "| shape | pass | ours | torch FA2 | torch cuDNN | ours / torch FA2 | ours / torch cuDNN |"
                .into(),
            // bwd: ours 2 ms, FA2 1 ms, cuDNN 4 ms.
            format!(
                "| `{key}` | bwd | {} (auto) | {} | {} | 0.50× | 2.00× |",
                tf(2.0, 2.5),
                tf(1.0, 2.5),
                tf(4.0, 2.5)
            ),
            // fwd+bwd: ours 3 ms, FA2 6 ms, cuDNN unsupported.
            format!("| `{key}` | fwd+bwd | {} (auto) | {} | n/a | 2.00× | – |", tf(3.0, 3.5), tf(6.0, 3.5)),
            // The forward's table pairs forward rows: ours 1 ms over FA2's 0.5 ms.
            "| 0.50× |".into(),
            format!("| `{key}` | torch-cudnn | fwd+bwd | unsupported | m |"),
        ] {
            assert!(md.contains(&want), "the report lacks `{want}`:\n{md}");
        }
    }

    #[test]
    fn window_rows_pair_with_flex() {
        let dir = tempfile::tempdir().unwrap();
        let key = "bf16/B2/H16/N4096x4096/d128/causal/w1024";
        let flops = 1e12;
        let row = |backend: &str, method: &str, status: &str, ms: f64| {
            let tflops = flops / (ms * 1e-3) / 1e12;
            format!(
                r#"{{"kind":"row","backend":"{backend}","key":"{key}","dtype":"bf16","batch":2,"heads":16,"kv_heads":16,"seqlen_q":4096,"seqlen_k":4096,"head_dim":128,"mask":"causal","window_left":1024,"method":"{method}","pass":"fwd","status":"{status}","message":"sliding window","flops":{flops},"timing":{{"median_ms":{ms}}},"tflops":{tflops}}}"#
            )
        };
        let ours = [row("gpu", "flash-tc", "ok", 1.0)];
        let peers = [row("peer", "torch-flex", "ok", 2.0), row("peer", "torch-flash", "unsupported", 1.0)];
        std::fs::write(dir.path().join("bench.jsonl"), ours.join("\n")).unwrap();
        std::fs::write(dir.path().join("peers.jsonl"), peers.join("\n")).unwrap();
        let loaded = load_dir(dir.path()).unwrap();
        let d = Data::new(&loaded, None);
        assert_eq!(d.gpu[0].window_left, Some(1024));
        assert!(d.peer_methods().contains(&("torch-flex", "torch flex")));
        let md = std::fs::read_to_string(write(dir.path(), dir.path(), None).unwrap()).unwrap();
        for want in ["| torch flex |", "| ours / torch flex |", "| 2.00× |", "n/a"] {
            assert!(md.contains(want), "the report lacks `{want}`:\n{md}");
        }
    }

    #[test]
    fn score_mod_rows_pair_with_flex() {
        let dir = tempfile::tempdir().unwrap();
        let key = "bf16/B2/H16/N4096x4096/d128/causal/cap30/alibi";
        let row = |backend: &str, method: &str, pass: &str, status: &str, ms: f64| {
            format!(
                r#"{{"kind":"row","backend":"{backend}","key":"{key}","dtype":"bf16","batch":2,"heads":16,"kv_heads":16,"seqlen_q":4096,"seqlen_k":4096,"head_dim":128,"mask":"causal","softcap":30.0,"alibi":true,"method":"{method}","pass":"{pass}","status":"{status}","message":"score modifier","flops":1e12,"timing":{{"median_ms":{ms}}},"tflops":{}}}"#,
                1.0 / ms
            )
        };
        let ours = [row("gpu", "flash-tc", "fwd", "ok", 1.0), row("gpu", "flash-tc", "bwd", "ok", 3.0)];
        let peers = [
            row("peer", "torch-flex", "fwd", "ok", 2.0),
            row("peer", "torch-flex", "bwd", "ok", 6.0),
            row("peer", "torch-flash", "fwd", "unsupported", 1.0),
        ];
        std::fs::write(dir.path().join("bench.jsonl"), ours.join("\n")).unwrap();
        std::fs::write(dir.path().join("peers.jsonl"), peers.join("\n")).unwrap();
        let loaded = load_dir(dir.path()).unwrap();
        let d = Data::new(&loaded, None);
        assert_eq!((d.gpu[0].softcap, d.gpu[0].alibi), (Some(30.0), true));
        assert_eq!((d.peers[0].softcap, d.peers[0].alibi), (Some(30.0), true));
        assert!(d.find_backward(key, "torch-flex", "bwd").is_some());
        let md = std::fs::read_to_string(write(dir.path(), dir.path(), None).unwrap()).unwrap();
        for want in [format!("| `{key}` |"), "| ours / torch flex |".into(), "| 2.00× |".into(), "n/a".into()]
        {
            assert!(md.contains(&want), "the report lacks `{want}`:\n{md}");
        }
    }

    #[test]
    fn the_rule_and_the_cpu_sweep() {
        let dir = tempfile::tempdir().unwrap();
        let row = |backend: &str, n: usize, method: &str, ratio: f64| {
            format!(
                r#"{{"kind":"row","backend":"{backend}","key":"f32/B1/H2/N{n}x{n}/d64/none","dtype":"f32","batch":1,"heads":2,"seqlen_q":{n},"seqlen_k":{n},"head_dim":64,"mask":"none","method":"{method}","status":"ok","flops":1e9,"timing":{{"median_ms":2.0}},"tflops":0.0005,"io_bytes":4096,"extra_bytes_plan":{},"error":{{"oracle_max_abs":1e-6,"baseline_max_abs":2e-6,"rule_ratio":{ratio},"within_rule":{},"note":"why not"}}}}"#,
                n * 64,
                ratio <= 1.0
            )
        };
        let lines =
            [row("gpu", 64, "flash", 1.5), row("gpu", 128, "flash", 0.4), row("cpu", 64, "cpu-tiled", 0.3)];
        std::fs::write(dir.path().join("bench.jsonl"), lines.join("\n")).unwrap();
        let md = std::fs::read_to_string(write(dir.path(), dir.path(), Some((4.0, 800.0))).unwrap()).unwrap();
        for want in [
            "| f32 | flash | 2 | 1.0e-6 | – | 2.0e-6 | – | 0 | 1.50 | 1/2 |",
            "## Rows outside the rule",
            "| `f32/B1/H2/N64x64/d64/none` | flash | 1.0e-6 | 2.0e-6 | why not |",
            "4.00 TB/s, 800 TFLOP/s (--ceilings)",
            "## CPU",
            "| `f32/B1/H2/N64x64/d64/none` | cpu-tiled | ok | 2.000 | 0.50 | 4.0 KiB | – | 1.0e-6 | 0.30 |",
            "](cpu-memory.svg)",
        ] {
            assert!(md.contains(want), "the report lacks `{want}`:\n{md}");
        }
        assert_eq!((bytes(512.0), bytes(1536.0)), ("512 B".to_string(), "1.5 KiB".to_string()));
    }
}
