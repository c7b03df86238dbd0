//! The CPU sweep, for machines without a GPU: the library's tiled CPU attention
//! (`flashattn::cpu::attention`) against standard attention that materializes every score
//! (written here), on small shapes: time, extra memory (model and measured) and error against
//! the f64 oracle.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use flashattn::cpu::{HostTensor, HostTensorMut};
use flashattn::{DType, Element, Method, Problem, bf16, f16};

use crate::gpu::{Flow, base_row, classify};
use crate::inputs::{PoolElem, Pools};
use crate::meta::RunInfo;
use crate::models::{self, Layouts};
use crate::oracle;
use crate::record::{ErrorStats, Row, Timing};
use crate::shapes::{Block, Case, Overrides, Preset, Variant, expand};
use crate::stats::Summary;

/// Shapes above this many FLOPs are left out of the CPU sweep (minutes each).
pub const CPU_MAX_FLOPS: f64 = 2e10;
/// Most timed runs per row.
const MAX_RUNS: usize = 20;
/// Fewest timed runs per row.
const MIN_RUNS: usize = 3;

/// The method names of the CPU sweep: `Method::Flash` stands for the tiled CPU implementation,
/// `Method::Standard` for the materializing one.
pub fn method_name(m: Method) -> &'static str {
    match m {
        Method::Standard => "cpu-standard",
        _ => "cpu-tiled",
    }
}

/// The CPU sweep's cases: the `cpu` preset with the command line's shape overrides (methods and
/// complete-path flags do not apply), without shapes over [`CPU_MAX_FLOPS`] (listed in the
/// second vector).
pub fn cases(o: &Overrides) -> Result<(Vec<Case>, Vec<String>), String> {
    let shape_only = Overrides { methods: None, complete: None, tiles: None, ..o.clone() };
    let tiles = o.tiles.clone().unwrap_or_else(|| vec![None]);
    let blocks: Vec<Block> = Preset::Cpu.blocks().into_iter().map(|b| shape_only.apply(b)).collect();
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for mut c in expand(&blocks)? {
        if models::flops(&c.shape) > CPU_MAX_FLOPS {
            dropped.push(c.shape.key());
            continue;
        }
        c.variants = tiles.iter().map(|&tiles| Variant { method: Method::Flash, tiles }).collect();
        c.variants.push(Variant { method: Method::Standard, tiles: None });
        c.complete = false;
        kept.push(c);
    }
    Ok((kept, dropped))
}

/// Standard attention on the CPU: S = scale·Q·Kᵀ for every (sequence, head) at once (f32, the
/// N×N scores materialized), the row softmax in place, then O = P·V. Returns the bytes of S.
pub fn standard<T: Element>(p: &Problem, q: &[T], k: &[T], v: &[T], out: &mut [T]) -> u64 {
    let (d, h, g) = (p.q.head_dim, p.q.heads, p.group_size());
    let seqs: Vec<_> = (0..p.batch()).map(|i| p.sequence(i)).collect();
    let total: usize = seqs.iter().map(|s| h * s.len_q * s.len_k).sum();
    let mut scores = vec![0.0f32; total];
    let mut at = 0;
    let mut qrow = vec![0.0f32; d];
    for s in &seqs {
        for head in 0..h {
            let kh = head / g;
            for t in 0..s.len_q {
                let qo = p.q.offset(s.batch_index, s.q_start + t, head);
                for (x, y) in qrow.iter_mut().zip(&q[qo..qo + d]) {
                    *x = y.to_f32();
                }
                let row = &mut scores[at..at + s.len_k];
                for (j, sc) in row.iter_mut().enumerate() {
                    *sc = if p.visible(t, j, s.len_q, s.len_k) {
                        let ko = p.k.offset(s.batch_index, s.k_start + j, kh);
                        p.scale * qrow.iter().zip(&k[ko..ko + d]).map(|(a, b)| a * b.to_f32()).sum::<f32>()
                    } else {
                        f32::NEG_INFINITY
                    };
                }
                // Softmax in place: S becomes P.
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                if max == f32::NEG_INFINITY {
                    row.fill(0.0);
                } else {
                    let mut sum = 0.0;
                    for x in row.iter_mut() {
                        *x = (*x - max).exp();
                        sum += *x;
                    }
                    row.iter_mut().for_each(|x| *x /= sum);
                }
                at += s.len_k;
            }
        }
    }
    at = 0;
    let mut acc = vec![0.0f32; d];
    for s in &seqs {
        for head in 0..h {
            let kh = head / g;
            for t in 0..s.len_q {
                acc.fill(0.0);
                for (j, &w) in scores[at..at + s.len_k].iter().enumerate() {
                    if w != 0.0 {
                        let vo = p.v.offset(s.batch_index, s.k_start + j, kh);
                        for (a, x) in acc.iter_mut().zip(&v[vo..vo + d]) {
                            *a += w * x.to_f32();
                        }
                    }
                }
                let o = p.o.offset(s.batch_index, s.q_start + t, head);
                for (dst, &a) in out[o..o + d].iter_mut().zip(&acc) {
                    *dst = T::from_f32(a);
                }
                at += s.len_k;
            }
        }
    }
    4 * total as u64
}

/// A field of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Runs `f`, returning its result and the growth of the peak resident set over the resident set
/// before it (Linux: the peak is reset through `/proc/self/clear_refs`); `None` elsewhere.
fn peak_growth<R>(f: impl FnOnce() -> R) -> (R, Option<u64>) {
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let before = status_bytes("VmRSS:");
    let r = f();
    let peak = status_bytes("VmHWM:");
    let growth = match (reset, before, peak) {
        (true, Some(b), Some(p)) => Some(p.saturating_sub(b)),
        _ => None,
    };
    (r, growth)
}

/// Runs the CPU rows of one case.
pub fn run_case(
    case: &Case,
    pools: &Pools,
    info: &RunInfo,
    reps: Option<usize>,
    rep_ms: f64,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(Row) -> Result<(), String>,
) -> Result<Flow, String> {
    match case.shape.dtype {
        DType::BF16 => run_typed::<bf16>(case, pools, info, reps, rep_ms, stop, emit),
        DType::F16 => run_typed::<f16>(case, pools, info, reps, rep_ms, stop, emit),
        DType::F32 => run_typed::<f32>(case, pools, info, reps, rep_ms, stop, emit),
    }
}

fn run_typed<T: PoolElem>(
    case: &Case,
    pools: &Pools,
    info: &RunInfo,
    reps: Option<usize>,
    rep_ms: f64,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(Row) -> Result<(), String>,
) -> Result<Flow, String> {
    let shape = &case.shape;
    let base = base_row(case, "cpu", info);
    let p = models::problem(shape).map_err(|e| format!("{}: {e}", shape.key()))?;
    let l = Layouts::new(shape, false);
    let (lq, lk) = l.lens();
    let window = |off: usize, len: usize| pools.window::<T>(off, len).ok_or("the random pool is too small");
    let (q, k, v) = (window(0, lq)?, window(4096 + 17, lk)?, window(2 * 4096 + 41, lk)?);
    let checks = oracle::plan(&p, crate::gpu::ORACLE_BUDGET);
    let refs: Vec<Vec<f64>> =
        checks.slices.iter().map(|(s, h, rows)| oracle::reference(&p, q, k, v, *s, *h, rows)).collect();
    for variant in &case.variants {
        if stop.load(Ordering::SeqCst) {
            return Ok(Flow::Stop);
        }
        let mut row = Row {
            method: method_name(variant.method).to_string(),
            tiles: variant.tiles.map(|t| t.to_string()),
            ..base.clone()
        };
        let tiled = variant.method != Method::Standard;
        let opts = models::options(shape, Some(variant));
        let tiles = flashattn::cpu::tiles(&opts).ok();
        row.extra_bytes_plan =
            Some(models::cpu_extra_bytes(shape, if tiled { Some(tiles.unwrap_or((64, 64))) } else { None }));
        if let (true, Some((m, n))) = (tiled, tiles) {
            row.block_m = Some(m);
            row.block_n = Some(n);
        }
        let mut out = vec![T::default(); lq];
        let call = |out: &mut [T]| -> flashattn::Result<()> {
            if tiled {
                flashattn::cpu::attention(
                    HostTensor { data: q, layout: l.q },
                    HostTensor { data: k, layout: l.k },
                    HostTensor { data: v, layout: l.k },
                    HostTensorMut { data: out, layout: l.o },
                    None,
                    &opts,
                )
            } else {
                standard(&p, q, k, v, out);
                Ok(())
            }
        };
        let (first, growth) = peak_growth(|| call(&mut out));
        if let Err(e) = first {
            let (status, needed) = classify(&e);
            row.status = status.to_string();
            row.oom_needed_bytes = needed;
            row.message = Some(e.to_string());
            emit(row)?;
            continue;
        }
        row.extra_bytes_measured = growth;
        let d = oracle::compare(&p, &out, &checks, &refs);
        row.error = Some(ErrorStats {
            oracle_max_abs: Some(d.max_abs),
            oracle_ref_max_abs: Some(d.ref_max_abs),
            oracle_rows: checks.rows(),
            oracle_complete: checks.complete,
            nonfinite: d.nonfinite,
            unit_roundoff: shape.dtype.unit_roundoff(),
            ..Default::default()
        });
        let mut times = Vec::new();
        let started = Instant::now();
        loop {
            let t = Instant::now();
            if let Err(e) = call(&mut out) {
                row.status = "error".into();
                row.message = Some(e.to_string());
                break;
            }
            times.push(t.elapsed().as_secs_f64() * 1e3);
            let n = times.len();
            let enough = match reps {
                Some(r) => n >= r,
                None => n >= MAX_RUNS || (n >= MIN_RUNS && started.elapsed().as_secs_f64() * 1e3 >= rep_ms),
            };
            if enough || stop.load(Ordering::SeqCst) {
                break;
            }
        }
        if let Some(s) = Summary::of(&times) {
            row.timing = Some(Timing::from_summary(&s, 1, 1, 1, "wall-clock"));
        }
        row.bytes_model = None;
        emit(row)?;
    }
    Ok(Flow::Continue)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shapes::{Mask, Shape, TileSpec};

    #[test]
    fn cpu_sweep_on_tiny_shapes() {
        let o = Overrides {
            seqlens: Some(vec![16, 40]),
            head_dims: Some(vec![8]),
            masks: Some(vec![Mask::Dense, Mask::Causal, Mask::VarlenCausal]),
            dtypes: Some(vec![DType::F32, DType::BF16]),
            batch: Some(crate::shapes::Size::Fixed(3)),
            tiles: Some(vec![None, Some(TileSpec { block_m: 4, block_n: 8 })]),
            ..Default::default()
        };
        let (cases, dropped) = cases(&o).unwrap();
        assert!(dropped.is_empty());
        assert_eq!(cases.len(), 2 * 3 * 2);
        let pools = Pools::new(1 << 16, 3, &[DType::BF16]);
        let info = RunInfo { run_id: "t".into(), device: "cpu".into(), ..Default::default() };
        let stop = AtomicBool::new(false);
        let mut rows = Vec::new();
        for c in &cases {
            let mut emit = |r: Row| {
                rows.push(r);
                Ok(())
            };
            assert!(matches!(
                run_case(c, &pools, &info, Some(2), 1.0, &stop, &mut emit).unwrap(),
                Flow::Continue
            ));
        }
        assert_eq!(rows.len(), cases.len() * 3);
        for r in &rows {
            // The tiled CPU implementation may not be there yet: then it says so.
            if r.method == "cpu-tiled" && r.status == "unsupported" {
                continue;
            }
            assert_eq!(r.status, "ok", "{} {}: {:?}", r.key, r.method, r.message);
            let e = r.error.as_ref().unwrap();
            assert!(e.oracle_complete && e.nonfinite == 0);
            let tol = if r.dtype == "f32" { 1e-5 } else { 2e-2 };
            assert!(e.oracle_max_abs.unwrap() < tol, "{} {} error {:?}", r.key, r.method, e.oracle_max_abs);
            assert_eq!(r.timing.as_ref().unwrap().samples, 2);
        }
        let std_row = rows
            .iter()
            .find(|r| r.method == "cpu-standard" && r.key.starts_with("f32/B3/H2/N40x40/d8/none"))
            .unwrap();
        assert_eq!(std_row.extra_bytes_plan, Some(4 * 3 * 2 * 40 * 40));
    }

    #[test]
    fn standard_matches_the_oracle_on_a_ragged_batch() {
        let s = Shape {
            dtype: DType::F32,
            batch: 2,
            heads: 1,
            seqlen_q: 5,
            seqlen_k: 5,
            head_dim: 4,
            mask: Mask::VarlenCausal,
        };
        let p = models::problem(&s).unwrap();
        let l = Layouts::new(&s, false);
        let (lq, lk) = l.lens();
        let pools = Pools::new(1 << 12, 1, &[]);
        let (q, k, v) = (
            pools.window::<f32>(0, lq).unwrap(),
            pools.window::<f32>(7, lk).unwrap(),
            pools.window::<f32>(13, lk).unwrap(),
        );
        let mut out = vec![0.0f32; lq];
        let bytes = standard(&p, q, k, v, &mut out);
        let (ql, kl) = s.lengths();
        assert_eq!(bytes, 4 * ql.iter().zip(&kl).map(|(&a, &b)| a as u64 * b as u64).sum::<u64>());
        let checks = oracle::plan(&p, 1e9);
        let refs: Vec<_> =
            checks.slices.iter().map(|(i, h, r)| oracle::reference(&p, q, k, v, *i, *h, r)).collect();
        assert!(oracle::compare(&p, &out, &checks, &refs).max_abs < 1e-5);
    }
}
