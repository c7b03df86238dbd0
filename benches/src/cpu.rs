//! The CPU sweep, for machines without a GPU: the library's tiled CPU attention
//! (`flashattn::cpu::attention`) against standard attention that materializes every score (the
//! test kit's baseline, `flashattn_testkit::oracle::baseline_materialized`), on small shapes:
//! time, extra memory (model and measured) and error by the test kit's rule.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use flashattn::cpu::{HostTensor, HostTensorMut};
use flashattn::{DType, Method, bf16, f16};
use flashattn_testkit::oracle::baseline_materialized;

use crate::gpu::{Flow, References, base_row, classify};
use crate::inputs::{PoolElem, Pools};
use crate::meta::RunInfo;
use crate::models::{self, Layouts};
use crate::record::{Row, Timing};
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
    let base_opts = models::options(shape).map_err(|e| format!("{}: {e}", shape.key()))?;
    let l = Layouts::new(shape, false);
    let (lq, lk) = l.lens();
    let window = |off: usize, len: usize| pools.window::<T>(off, len).ok_or("the random pool is too small");
    let (q, k, v) = (window(0, lq)?, window(4096 + 17, lk)?, window(2 * 4096 + 41, lk)?);
    let checks = References::new(&p, [q, k, v]);
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
        let opts = models::with_variant(&base_opts, variant);
        let tiles = flashattn::cpu::tiles(&opts).ok();
        row.extra_bytes_plan =
            Some(models::cpu_extra_bytes(shape, if tiled { Some(tiles.unwrap_or((64, 64))) } else { None }));
        if let (true, Some((m, n))) = (tiled, tiles) {
            (row.block_m, row.block_n) = (Some(m), Some(n));
        }
        let mut out = vec![T::from_f32(f32::NAN); lq];
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
                baseline_materialized(&p, q, k, v, out);
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
        row.error = Some(checks.error_stats(&p, v, &out));
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
    use crate::shapes::{Mask, TileSpec};

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
            assert_eq!(e.within_rule, Some(true), "{} {}: {e:?}", r.key, r.method);
            assert_eq!(r.timing.as_ref().unwrap().samples, 2);
        }
        let std_row = rows
            .iter()
            .find(|r| r.method == "cpu-standard" && r.key.starts_with("f32/B3/H2/N40x40/d8/none"))
            .unwrap();
        assert_eq!(std_row.extra_bytes_plan, Some(4 * 3 * 2 * 40 * 40));
    }
}
