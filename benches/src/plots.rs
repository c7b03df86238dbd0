//! The report's SVG plots (plotters' SVG backend), all of one kind: panels of lines against the
//! sequence length N on a log₂ axis. The data picks the panels ([`Panel`]); one function draws
//! them ([`draw`]): TFLOP/s per dtype on the headline grid (ours and the peers), and the memory of
//! one call (the quadratic wall) on the GPU and in the CPU sweep.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use plotters::element::DynElement;
use plotters::prelude::*;

use crate::record::Row;
use crate::report::{Data, PEERS, bytes, is_headline};

/// Plots written (file name, caption) and the ones that failed.
#[derive(Debug, Default)]
pub struct Written {
    /// `(file name, caption)`.
    pub files: Vec<(String, String)>,
    /// What went wrong.
    pub errors: Vec<String>,
}

fn color(method: &str) -> RGBColor {
    match method {
        "flash" | "cpu-tiled" => RGBColor(31, 119, 180),
        "flash-tc" => RGBColor(44, 160, 44),
        "flash-hopper" => RGBColor(23, 190, 207),
        "auto" => RGBColor(148, 103, 189),
        "standard" | "cpu-standard" => RGBColor(214, 39, 40),
        "torch-flash" => RGBColor(255, 127, 14),
        "torch-cudnn" => RGBColor(140, 86, 75),
        "torch-efficient" => RGBColor(227, 119, 194),
        "torch-math" => RGBColor(127, 127, 127),
        "torch-naive" => RGBColor(188, 189, 34),
        _ => RGBColor(23, 190, 207),
    }
}

/// How a series marks its points.
#[derive(Clone, Copy)]
enum Mark {
    Dot,
    Triangle,
    Ring,
    Cross,
}

/// One labelled series: points `(N, y)`, a line of `width` (0: none) and a mark at each point.
struct Series {
    label: String,
    color: RGBColor,
    pts: Vec<(f64, f64)>,
    mark: Mark,
    width: u32,
}

/// One chart: its series against N, the y axis linear or log₂ (with a label format), and
/// optionally a horizontal line (value, label).
struct Panel {
    title: String,
    y_desc: &'static str,
    log_y: Option<fn(f64) -> String>,
    series: Vec<Series>,
    hline: Option<(f64, &'static str)>,
}

/// Writes every plot the data allows into `dir`.
pub fn write_all(d: &Data, dir: &Path) -> Written {
    let mut plots = Vec::new();
    let mut dtypes: Vec<&str> = d.gpu.iter().filter(|r| is_headline(r)).map(|r| r.dtype.as_str()).collect();
    dtypes.sort();
    dtypes.dedup();
    for dt in dtypes {
        let caption = format!("TFLOP/s against N, {dt}, B·N = 16384, H·d = 2048");
        plots.push((format!("tflops-{dt}.svg"), caption, tflops(d, dt)));
    }
    let total = d.meta.as_ref().and_then(|m| m.extra.get("total_memory")).and_then(|v| v.as_f64());
    let (gpu, cpu) =
        ("Device memory of one call against N (log scale)", "CPU: extra memory of one call against N");
    plots.push(("memory.svg".into(), gpu.into(), memory(&d.gpu, total)));
    plots.push(("cpu-memory.svg".into(), cpu.into(), memory(&d.cpu, None)));
    let mut w = Written::default();
    for (file, caption, panels) in plots.into_iter().filter(|p| !p.2.is_empty()) {
        match draw(&dir.join(&file), &panels) {
            Ok(()) => w.files.push((file, caption)),
            Err(e) => w.errors.push(format!("plot {file} failed: {e}")),
        }
    }
    w
}

/// One series per method of `rows`: points `(N, y)` where `y` is a positive number.
fn series<'a>(
    rows: impl Iterator<Item = &'a Row>,
    y: impl Fn(&Row) -> Option<f64>,
    label: impl Fn(&str) -> String,
    (mark, width): (Mark, u32),
) -> Vec<Series> {
    let mut m: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows {
        if let Some(v) = y(r).filter(|v| v.is_finite() && *v > 0.0) {
            m.entry(r.method.clone()).or_default().push((r.seqlen_k as f64, v));
        }
    }
    m.values_mut().for_each(|p| p.sort_by(|a, b| a.0.total_cmp(&b.0)));
    m.into_iter().map(|(k, pts)| Series { label: label(&k), color: color(&k), pts, mark, width }).collect()
}

/// One panel per (head dim, mask) of the headline rows of `dtype`: our methods and the peers.
fn tflops(d: &Data, dtype: &str) -> Vec<Panel> {
    let rows = |r: &&Row| is_headline(r) && r.dtype == dtype && r.tiles.is_none();
    let mut panels: Vec<(usize, &str)> =
        d.gpu.iter().filter(rows).map(|r| (r.head_dim, r.mask.as_str())).collect();
    panels.sort();
    panels.dedup();
    let ok_tflops = |r: &Row| r.tflops.filter(|_| r.ok());
    let peer_name = |m: &str| PEERS.iter().find(|p| p.0 == m).map_or(m.to_string(), |p| p.1.to_string());
    let panel = |(hd, mask): (usize, &str)| {
        let in_panel = |r: &&Row| rows(r) && r.head_dim == hd && r.mask == mask;
        let mut lines = series(d.gpu.iter().filter(in_panel), ok_tflops, str::to_string, (Mark::Dot, 2));
        lines.extend(series(d.peers.iter().filter(in_panel), ok_tflops, peer_name, (Mark::Triangle, 1)));
        let title = format!("{dtype}, d = {hd}, mask {mask}");
        Panel { title, y_desc: "TFLOP/s", log_y: None, series: lines, hline: None }
    };
    panels.into_iter().map(panel).collect()
}

/// Memory of one call against N for one family of unmasked shapes (one dtype, head dim and
/// head count, with a fixed batch or a fixed B·N): the family with the most sequence lengths,
/// the memory-wall sweep first, then the smallest dtype name and largest d. Bytes of Q, K, V, O,
/// LSE plus the extra memory by the plan or model (the bytes needed, for OOM) and measured.
fn memory(rows: &[Row], total: Option<f64>) -> Vec<Panel> {
    let mut families: BTreeMap<_, Vec<&Row>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.tiles.is_none() && r.mask == "none" && r.seqlen_q == r.seqlen_k) {
        for by_tokens in [false, true] {
            let size = if by_tokens { r.batch * r.seqlen_k } else { r.batch };
            let key = (r.group != "wall", r.dtype.clone(), Reverse(r.head_dim), r.heads, by_tokens, size);
            families.entry(key).or_default().push(r);
        }
    }
    let lengths = |rows: &[&Row]| rows.iter().map(|r| r.seqlen_k).collect::<BTreeSet<_>>().len();
    let Some(((_, dtype, d, heads, by_tokens, size), rows)) =
        families.into_iter().min_by_key(|f| Reverse(lengths(&f.1)))
    else {
        return Vec::new();
    };
    let with_io = |extra: Option<u64>, r: &Row| extra.map(|e| (e + r.io_bytes) as f64);
    let plan = |r: &Row| {
        with_io(
            if r.status == "oom" { r.oom_needed_bytes.or(r.extra_bytes_plan) } else { r.extra_bytes_plan },
            r,
        )
    };
    let measured = |r: &Row| with_io(r.extra_bytes_measured.filter(|_| r.ok()), r);
    let all = || rows.iter().copied();
    let mut lines = series(all(), plan, |m| format!("{m} (plan)"), (Mark::Dot, 2));
    lines.extend(series(all(), measured, |m| format!("{m} (measured)"), (Mark::Ring, 0)));
    let oom = |m: &str| format!("{m}: out of memory (bytes needed)");
    lines.extend(series(all().filter(|r| r.status == "oom"), plan, oom, (Mark::Cross, 0)));
    let batch = if by_tokens { format!("B·N = {size}") } else { format!("B = {size}") };
    vec![Panel {
        title: format!("Memory of one call: {dtype} d = {}, {batch}, H = {heads}", d.0),
        y_desc: "bytes: Q, K, V, O, LSE + extra",
        log_y: Some(bytes),
        series: lines,
        hline: total.map(|t| (t, "device memory")),
    }]
}

/// A mark at `at`.
fn glyph<DB: DrawingBackend, C: Clone + 'static>(
    mark: Mark,
    at: C,
    c: RGBColor,
) -> DynElement<'static, DB, C> {
    match mark {
        Mark::Dot => Circle::new(at, 3, c.filled()).into_dyn(),
        Mark::Triangle => TriangleMarker::new(at, 4, c.filled()).into_dyn(),
        Mark::Ring => Circle::new(at, 6, c.stroke_width(1)).into_dyn(),
        Mark::Cross => Cross::new(at, 6, c.stroke_width(2)).into_dyn(),
    }
}

/// A range in log₂ units around `vals` (log₂ values), with room for whole-number ticks.
fn log2_range(vals: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (lo, hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    let pad = if hi - lo < 1.0 { 1.0 } else { 0.0 };
    if !lo.is_finite() { 0.0..1.0 } else { (lo.floor() - pad - 0.25)..(hi.ceil() + pad + 0.25) }
}

/// `f(2^x)` at whole numbers, nothing between.
fn pow2(x: f64, f: fn(f64) -> String) -> String {
    if (x - x.round()).abs() < 1e-6 { f(2f64.powf(x.round())) } else { String::new() }
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Draws `panels` into one SVG, two per row.
fn draw(path: &Path, panels: &[Panel]) -> Result<(), String> {
    let cols = panels.len().clamp(1, 2);
    let rows = panels.len().div_ceil(cols);
    let root = SVGBackend::new(path, (560 * cols as u32, 380 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(text)?;
    for (p, area) in panels.iter().zip(root.split_evenly((rows, cols)).iter()) {
        // Both axes in log₂ units where they are logarithmic.
        let y = |v: f64| if p.log_y.is_some() { v.log2() } else { v };
        let pts = |s: &Series| s.pts.iter().map(|&(n, v)| (n.log2(), y(v))).collect::<Vec<_>>();
        let all: Vec<(f64, f64)> = p.series.iter().flat_map(pts).collect();
        let xs = log2_range(all.iter().map(|a| a.0));
        let ys = match p.log_y {
            Some(_) => log2_range(all.iter().map(|a| a.1).chain(p.hline.map(|h| y(h.0)))),
            None => 0.0..all.iter().map(|a| a.1).fold(1.0, f64::max) * 1.15,
        };
        let mut chart = ChartBuilder::on(area)
            .caption(&p.title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(xs.clone(), ys.clone())
            .map_err(text)?;
        let labels = |r: &std::ops::Range<f64>| ((r.end - r.start).ceil() as usize + 1).clamp(2, 13);
        let mut mesh = chart.configure_mesh();
        mesh.x_desc("sequence length N").y_desc(p.y_desc).x_labels(labels(&xs));
        mesh.x_label_formatter(&|x| pow2(*x, |v| format!("{v:.0}")));
        let y_fmt = |v: &f64| p.log_y.map_or_else(|| format!("{v:.0}"), |f| pow2(*v, f));
        if p.log_y.is_some() {
            mesh.y_labels(labels(&ys));
        }
        mesh.y_label_formatter(&y_fmt).draw().map_err(text)?;
        for s in &p.series {
            let (c, mark, width, pts) = (s.color, s.mark, s.width, pts(s));
            let drawn = if width > 0 {
                chart.draw_series(LineSeries::new(pts.clone(), c.stroke_width(width))).map_err(text)?
            } else {
                chart.draw_series(pts.iter().map(|&q| glyph(mark, q, c))).map_err(text)?
            };
            drawn.label(s.label.clone()).legend(move |(x, y)| match width {
                0 => glyph(mark, (x + 9, y), c),
                w => PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(w)).into_dyn(),
            });
            if width > 0 {
                chart.draw_series(pts.iter().map(|&q| glyph(mark, q, c))).map_err(text)?;
            }
        }
        if let Some((v, label)) = p.hline {
            let line = [(xs.start, y(v)), (xs.end, y(v))];
            let drawn = chart.draw_series(LineSeries::new(line, BLACK.stroke_width(1))).map_err(text)?;
            drawn.label(label).legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(text)?;
    }
    root.present().map_err(text)
}
