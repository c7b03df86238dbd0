//! The report's SVG plots (plotters' SVG backend): TFLOP/s against sequence length per method and
//! peer, memory against sequence length (log scale: the quadratic wall), the roofline, error by
//! dtype, and the tile sweep.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use crate::record::Row;
use crate::report::{Data, PEERS, is_headline};

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
        "flash" => RGBColor(31, 119, 180),
        "flash-tc" => RGBColor(44, 160, 44),
        "auto" => RGBColor(148, 103, 189),
        "standard" => RGBColor(214, 39, 40),
        "torch-flash" => RGBColor(255, 127, 14),
        "torch-cudnn" => RGBColor(140, 86, 75),
        "torch-efficient" => RGBColor(227, 119, 194),
        "torch-math" => RGBColor(127, 127, 127),
        "torch-naive" => RGBColor(188, 189, 34),
        "cpu-tiled" => RGBColor(31, 119, 180),
        "cpu-standard" => RGBColor(214, 39, 40),
        _ => RGBColor(23, 190, 207),
    }
}

fn peer_name(method: &str) -> String {
    PEERS.iter().find(|p| p.0 == method).map_or(method.to_string(), |p| p.1.to_string())
}

/// A log-scale range covering `vals` with some room, never empty.
fn log_range(vals: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (lo, hi) = vals
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    if !lo.is_finite() || hi <= 0.0 {
        return 1.0..10.0;
    }
    (lo / 1.6)..(hi * 1.6).max(lo * 4.0)
}

/// A range in log2 units covering `vals` (powers of two get whole-number ticks).
fn log2_range(vals: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let r = log_range(vals);
    (r.start.log2().floor() - 0.25)..(r.end.log2().ceil() + 0.25).max(r.start.log2().floor() + 1.0)
}

/// Labels for a log2 axis: one per whole number, at most about a dozen.
fn log2_labels(r: &std::ops::Range<f64>) -> usize {
    ((r.end - r.start).ceil() as usize + 1).clamp(2, 13)
}

/// `2^x` at whole numbers, nothing between.
fn pow2(x: f64, f: impl Fn(f64) -> String) -> String {
    if (x - x.round()).abs() < 1e-6 { f(2f64.powf(x.round())) } else { String::new() }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Draws one labelled line (and, with `dots`, a dot at each point) on a chart.
fn labelled_line<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    label: String,
    pts: &[(f64, f64)],
    c: RGBColor,
    dots: bool,
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate<From = (f64, f64)>,
{
    chart
        .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
        .map_err(err)?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
    if dots {
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled()))).map_err(err)?;
    }
    Ok(())
}

/// Draws the legend box of a chart at `pos`.
fn legend<'a, DB, CT>(chart: &mut ChartContext<'a, DB, CT>, pos: SeriesLabelPosition) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .position(pos)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(err)
}

/// Writes every plot the data allows into `dir`.
pub fn write_all(d: &Data, dir: &Path) -> Written {
    let mut w = Written::default();
    let mut run = |file: String, caption: String, f: &dyn Fn(&Path) -> Result<bool, String>| {
        let path = dir.join(&file);
        match f(&path) {
            Ok(true) => w.files.push((file, caption)),
            Ok(false) => {}
            Err(e) => w.errors.push(format!("plot {file} failed: {e}")),
        }
    };
    let mut dtypes: Vec<String> = d.gpu.iter().filter(|r| is_headline(r)).map(|r| r.dtype.clone()).collect();
    dtypes.sort();
    dtypes.dedup();
    for dt in dtypes {
        run(
            format!("tflops-{dt}.svg"),
            format!("TFLOP/s against N, {dt}, B·N = 16384, H·d = 2048"),
            &|p| tflops(d, &dt, p),
        );
    }
    run("memory.svg".into(), "Device memory of one call against N (log scale)".into(), &|p| memory(d, p));
    run("roofline.svg".into(), "Roofline: achieved TFLOP/s against arithmetic intensity".into(), &|p| {
        roofline(d, p)
    });
    run("error.svg".into(), "Max error against the f64 oracle, by dtype and method".into(), &|p| error(d, p));
    run("tiles.svg".into(), "Flash kernel TFLOP/s by tile size".into(), &|p| tiles(d, p));
    run("cpu.svg".into(), "CPU: time and extra memory against N".into(), &|p| cpu(d, p));
    w
}

/// One line per method: points (log2 N, y) sorted by N.
fn series<'a>(
    rows: impl Iterator<Item = &'a Row>,
    y: impl Fn(&Row) -> Option<f64>,
) -> BTreeMap<String, Vec<(f64, f64)>> {
    let mut m: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows {
        if let Some(v) = y(r).filter(|v| v.is_finite() && *v > 0.0) {
            m.entry(r.method.clone()).or_default().push(((r.seqlen_k as f64).log2(), v));
        }
    }
    for pts in m.values_mut() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    m
}

fn tflops(d: &Data, dtype: &str, path: &Path) -> Result<bool, String> {
    let rows: Vec<&Row> =
        d.gpu.iter().filter(|r| is_headline(r) && r.dtype == dtype && r.tiles.is_none()).collect();
    let mut panels: Vec<(usize, String)> = rows.iter().map(|r| (r.head_dim, r.mask.clone())).collect();
    panels.sort();
    panels.dedup();
    if panels.is_empty() {
        return Ok(false);
    }
    let cols = panels.len().min(2);
    let nrows = panels.len().div_ceil(cols);
    let root = SVGBackend::new(path, (560 * cols as u32, 380 * nrows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let areas = root.split_evenly((nrows, cols));
    for ((hd, mask), area) in panels.iter().zip(areas.iter()) {
        let in_panel = |r: &&Row| r.head_dim == *hd && &r.mask == mask && r.dtype == dtype && is_headline(r);
        let ours = series(rows.iter().copied().filter(in_panel), |r| if r.ok() { r.tflops } else { None });
        let peers = series(d.peers.iter().filter(in_panel), |r| if r.ok() { r.tflops } else { None });
        let xs = log2_range(ours.values().chain(peers.values()).flatten().map(|p| 2f64.powf(p.0)));
        let ymax = ours.values().chain(peers.values()).flatten().map(|p| p.1).fold(1.0f64, f64::max) * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(format!("{dtype}, d = {hd}, mask {mask}"), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d(xs.clone(), 0.0..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("sequence length N")
            .y_desc("TFLOP/s")
            .x_labels(log2_labels(&xs))
            .x_label_formatter(&|x| pow2(*x, |v| format!("{v:.0}")))
            .draw()
            .map_err(err)?;
        for (name, pts, peer) in ours
            .iter()
            .map(|(k, v)| (k.clone(), v, false))
            .chain(peers.iter().map(|(k, v)| (peer_name(k), v, true)))
        {
            let key = if peer {
                PEERS.iter().find(|p| p.1 == name).map_or(name.as_str(), |p| p.0)
            } else {
                name.as_str()
            };
            let c = color(key);
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(if peer { 1 } else { 2 })))
                .map_err(err)?
                .label(name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
            if peer {
                chart.draw_series(pts.iter().map(|&p| TriangleMarker::new(p, 4, c.filled()))).map_err(err)?;
            } else {
                chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled()))).map_err(err)?;
            }
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    }
    root.present().map_err(err)?;
    Ok(true)
}

/// The shapes the memory plot follows: the memory-wall sweep if it ran, else the largest-d
/// headline shapes without a mask.
fn memory_rows(d: &Data) -> Vec<&Row> {
    let wall: Vec<&Row> = d.gpu.iter().filter(|r| r.group == "wall" && r.tiles.is_none()).collect();
    if !wall.is_empty() {
        return wall;
    }
    let head = d.gpu.iter().filter(|r| is_headline(r) && r.tiles.is_none() && r.mask == "none");
    let Some(dt) = head.clone().map(|r| r.dtype.clone()).min() else { return Vec::new() };
    let Some(hd) = head.clone().filter(|r| r.dtype == dt).map(|r| r.head_dim).max() else {
        return Vec::new();
    };
    head.filter(|r| r.dtype == dt && r.head_dim == hd).collect()
}

fn memory(d: &Data, path: &Path) -> Result<bool, String> {
    let rows: Vec<&Row> = memory_rows(d)
        .into_iter()
        .filter(|r| r.method == "standard" || r.method.starts_with("flash"))
        .collect();
    if rows.is_empty() {
        return Ok(false);
    }
    let need = |r: &Row| -> Option<f64> {
        let extra =
            if r.status == "oom" { r.oom_needed_bytes.or(r.extra_bytes_plan) } else { r.extra_bytes_plan };
        extra.map(|e| (e + r.io_bytes) as f64)
    };
    let lines = series(rows.iter().copied(), need);
    let ooms: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.status == "oom")
        .filter_map(|r| Some(((r.seqlen_k as f64).log2(), need(r)?.log2())))
        .collect();
    let measured = series(rows.iter().copied().filter(|r| r.ok()), |r| {
        r.extra_bytes_measured.map(|e| (e + r.io_bytes) as f64)
    });
    let total_mem = d.meta.as_ref().and_then(|m| m.extra.get("total_memory")).and_then(|v| v.as_f64());
    // Both axes in log2 units.
    let lines: BTreeMap<String, Vec<(f64, f64)>> =
        lines.into_iter().map(|(k, v)| (k, v.into_iter().map(|(x, y)| (x, y.log2())).collect())).collect();
    let measured: BTreeMap<String, Vec<(f64, f64)>> =
        measured.into_iter().map(|(k, v)| (k, v.into_iter().map(|(x, y)| (x, y.log2())).collect())).collect();
    let xs = log2_range(lines.values().flatten().map(|p| 2f64.powf(p.0)));
    let ys = log2_range(lines.values().flatten().map(|p| 2f64.powf(p.1)).chain(total_mem));
    let total_mem = total_mem.map(f64::log2);
    let first = rows[0];
    let root = SVGBackend::new(path, (760, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let caption = format!(
        "Memory of one call: {} d = {}, B = {}, H = {}",
        first.dtype, first.head_dim, first.batch, first.heads
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(xs.clone(), ys.clone())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("sequence length N")
        .y_desc("bytes: Q, K, V, O, LSE + extra")
        .x_labels(log2_labels(&xs))
        .y_labels(log2_labels(&ys))
        .x_label_formatter(&|x| pow2(*x, |v| format!("{v:.0}")))
        .y_label_formatter(&|y| pow2(*y, crate::report::bytes))
        .draw()
        .map_err(err)?;
    for (m, pts) in &lines {
        let c = color(m);
        labelled_line(&mut chart, format!("{m} (plan)"), pts, c, true)?;
    }
    for (m, pts) in &measured {
        let c = color(m);
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 6, c.stroke_width(1))))
            .map_err(err)?
            .label(format!("{m} (measured)"))
            .legend(move |(x, y)| Circle::new((x + 9, y), 5, c.stroke_width(1)));
    }
    if !ooms.is_empty() {
        chart
            .draw_series(ooms.iter().map(|&p| Cross::new(p, 7, RED.stroke_width(3))))
            .map_err(err)?
            .label("out of memory (bytes needed)")
            .legend(|(x, y)| Cross::new((x + 9, y), 5, RED.stroke_width(2)));
    }
    if let Some(t) = total_mem {
        chart
            .draw_series(LineSeries::new([(xs.start, t), (xs.end, t)], BLACK.stroke_width(1)))
            .map_err(err)?
            .label("device memory")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK));
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present().map_err(err)?;
    Ok(true)
}

fn roofline(d: &Data, path: &Path) -> Result<bool, String> {
    let pts: Vec<(&str, f64, f64)> = d
        .gpu
        .iter()
        .filter(|r| r.ok())
        .filter_map(|r| Some((r.method.as_str(), r.intensity?, r.tflops?)))
        .filter(|p| p.1 > 0.0 && p.2 > 0.0)
        .collect();
    if pts.is_empty() {
        return Ok(false);
    }
    let (bw, peak) = (d.ceilings.bandwidth_tbs, d.ceilings.tflops);
    let ridge = peak / bw.max(1e-9);
    let xs = log_range(pts.iter().map(|p| p.1).chain([ridge]));
    let ys = log_range(pts.iter().map(|p| p.2).chain([peak, xs.start * bw]));
    let root = SVGBackend::new(path, (760, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Roofline: {bw:.2} TB/s, {peak:.0} TFLOP/s ({})", d.ceilings.source),
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(xs.clone().log_scale(), ys.log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("arithmetic intensity, FLOP/byte (modeled bytes)")
        .y_desc("TFLOP/s")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(err)?;
    let n = 200;
    let roof: Vec<(f64, f64)> = (0..=n)
        .map(|i| {
            let x = xs.start * (xs.end / xs.start).powf(i as f64 / n as f64);
            (x, (x * bw).min(peak))
        })
        .collect();
    chart
        .draw_series(LineSeries::new(roof, BLACK.stroke_width(2)))
        .map_err(err)?
        .label("min(peak, intensity × bandwidth)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.stroke_width(2)));
    let mut methods: Vec<&str> = pts.iter().map(|p| p.0).collect();
    methods.sort();
    methods.dedup();
    for m in methods {
        let c = color(m);
        chart
            .draw_series(pts.iter().filter(|p| p.0 == m).map(|p| Circle::new((p.1, p.2), 4, c.filled())))
            .map_err(err)?
            .label(m.to_string())
            .legend(move |(x, y)| Circle::new((x + 9, y), 4, c.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present().map_err(err)?;
    Ok(true)
}

fn error(d: &Data, path: &Path) -> Result<bool, String> {
    let pts: Vec<(String, String, f64, f64)> = d
        .gpu
        .iter()
        .chain(&d.cpu)
        .filter(|r| r.ok() && r.tiles.is_none())
        .filter_map(|r| {
            Some((
                r.dtype.clone(),
                r.method.clone(),
                (r.seqlen_k as f64).log2(),
                r.error.as_ref()?.oracle_max_abs?,
            ))
        })
        .map(|(a, b, x, y)| (a, b, x, y.max(1e-9)))
        .collect();
    if pts.is_empty() {
        return Ok(false);
    }
    let xs = log2_range(pts.iter().map(|p| 2f64.powf(p.2)));
    let ys = log_range(pts.iter().map(|p| p.3));
    let root = SVGBackend::new(path, (760, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Max |out − f64 oracle| by dtype (marker) and method (colour)", ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(xs.clone(), ys.log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("key length N")
        .y_desc("max abs error")
        .x_labels(log2_labels(&xs))
        .x_label_formatter(&|x| pow2(*x, |v| format!("{v:.0}")))
        .y_label_formatter(&|y| format!("{y:.0e}"))
        .draw()
        .map_err(err)?;
    let mut groups: BTreeMap<(String, String), Vec<(f64, f64)>> = BTreeMap::new();
    for (dt, m, x, y) in pts {
        groups.entry((dt, m)).or_default().push((x, y));
    }
    for ((dt, m), g) in groups {
        let c = color(&m);
        let label = format!("{dt} {m}");
        let s = match dt.as_str() {
            "f32" => chart.draw_series(g.iter().map(|&p| Circle::new(p, 4, c.filled()).into_dyn())),
            "f16" => chart.draw_series(g.iter().map(|&p| TriangleMarker::new(p, 5, c.filled()).into_dyn())),
            _ => chart.draw_series(g.iter().map(|&p| Cross::new(p, 5, c.stroke_width(2)).into_dyn())),
        }
        .map_err(err)?;
        let dt2 = dt.clone();
        s.label(label).legend(move |(x, y)| match dt2.as_str() {
            "f32" => Circle::new((x + 9, y), 4, c.filled()).into_dyn(),
            "f16" => TriangleMarker::new((x + 9, y), 5, c.filled()).into_dyn(),
            _ => Cross::new((x + 9, y), 5, c.stroke_width(2)).into_dyn(),
        });
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present().map_err(err)?;
    Ok(true)
}

fn tiles(d: &Data, path: &Path) -> Result<bool, String> {
    let keys: Vec<String> = {
        let mut k: Vec<String> = d.gpu.iter().filter(|r| r.tiles.is_some()).map(|r| r.key.clone()).collect();
        k.sort();
        k.dedup();
        k
    };
    if keys.is_empty() {
        return Ok(false);
    }
    let tile_of = |r: &Row| r.tiles.clone().unwrap_or_else(|| "default".to_string());
    let rows: Vec<&Row> = d.gpu.iter().filter(|r| keys.contains(&r.key) && r.method == "flash").collect();
    let mut labels: Vec<String> = rows.iter().map(|r| tile_of(r)).collect();
    labels.sort_by_key(|l| {
        let mut it = l.split('x').map(|x| x.parse::<usize>().unwrap_or(0));
        (l != "default", it.next().unwrap_or(0), it.next().unwrap_or(0))
    });
    labels.dedup();
    let ymax = rows.iter().filter(|r| r.ok()).filter_map(|r| r.tflops).fold(1.0f64, f64::max) * 1.15;
    let root = SVGBackend::new(path, (760, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let n = labels.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption("flash TFLOP/s by tile (block_m x block_n)", ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(55)
        .build_cartesian_2d(-0.5..(n - 0.5), 0.0..ymax)
        .map_err(err)?;
    let fmt = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            labels.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_labels(labels.len().max(2) * 2 + 1)
        .x_label_formatter(&fmt)
        .x_desc("tiles")
        .y_desc("TFLOP/s")
        .disable_x_mesh()
        .draw()
        .map_err(err)?;
    let palette = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
    ];
    for (i, key) in keys.iter().enumerate() {
        let c = palette[i % palette.len()];
        let mut pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| &r.key == key && r.ok())
            .filter_map(|r| Some((labels.iter().position(|l| *l == tile_of(r))? as f64, r.tflops?)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(1)))
            .map_err(err)?
            .label(key.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled()))).map_err(err)?;
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present().map_err(err)?;
    Ok(true)
}

/// The CPU sweep: median time and extra memory against N, for the first dtype and head dim
/// without a mask.
fn cpu(d: &Data, path: &Path) -> Result<bool, String> {
    let Some(first) = d
        .cpu
        .iter()
        .filter(|r| r.mask == "none" && r.tiles.is_none())
        .min_by_key(|r| (r.dtype.clone(), r.head_dim))
    else {
        return Ok(false);
    };
    let rows: Vec<&Row> = d
        .cpu
        .iter()
        .filter(|r| {
            r.mask == "none" && r.tiles.is_none() && r.dtype == first.dtype && r.head_dim == first.head_dim
        })
        .collect();
    let time = series(rows.iter().copied(), |r| if r.ok() { r.median_ms() } else { None });
    let model = series(rows.iter().copied(), |r| r.extra_bytes_plan.map(|b| (b as f64).max(1.0).log2()));
    let measured = series(rows.iter().copied().filter(|r| r.ok()), |r| {
        r.extra_bytes_measured.filter(|&b| b > 0).map(|b| (b as f64).log2())
    });
    if time.is_empty() {
        return Ok(false);
    }
    let root = SVGBackend::new(path, (1120, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let areas = root.split_evenly((1, 2));
    let xs = log2_range(time.values().flatten().map(|p| 2f64.powf(p.0)));
    let title = format!("{}, d = {}, B = {}, H = {}", first.dtype, first.head_dim, first.batch, first.heads);
    let ys = log_range(time.values().flatten().map(|p| p.1));
    let mut chart = ChartBuilder::on(&areas[0])
        .caption(format!("CPU time per call: {title}"), ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(xs.clone(), ys.log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("sequence length N")
        .y_desc("ms (median)")
        .x_labels(log2_labels(&xs))
        .x_label_formatter(&|x| pow2(*x, |v| format!("{v:.0}")))
        .draw()
        .map_err(err)?;
    for (m, pts) in &time {
        let c = color(m);
        labelled_line(&mut chart, m.clone(), pts, c, true)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    let ys = log2_range(model.values().chain(measured.values()).flatten().map(|p| 2f64.powf(p.1)));
    let mut chart = ChartBuilder::on(&areas[1])
        .caption("Extra memory: model (line), measured peak RSS growth (rings)", ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(xs.clone(), ys.clone())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("sequence length N")
        .y_desc("bytes")
        .x_labels(log2_labels(&xs))
        .y_labels(log2_labels(&ys))
        .x_label_formatter(&|x| pow2(*x, |v| format!("{v:.0}")))
        .y_label_formatter(&|y| pow2(*y, crate::report::bytes))
        .draw()
        .map_err(err)?;
    for (m, pts) in &model {
        let c = color(m);
        labelled_line(&mut chart, m.clone(), pts, c, false)?;
    }
    for (m, pts) in &measured {
        let c = color(m);
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 5, c.stroke_width(1)))).map_err(err)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present().map_err(err)?;
    Ok(true)
}
