//! The CPU sweep, for machines without a GPU: the library's tiled CPU attention
//! (`flashattn::cpu::attention`) against standard attention that materializes every score (the
//! test kit's baseline, `flashattn_testkit::oracle::baseline_materialized`), on small shapes:
//! time, extra memory (model and measured) and error by the test kit's rule.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use flashattn::cpu::{Gradients, HostTensor, HostTensorMut};
use flashattn::{AttentionOptions, DType, Method, Problem, bf16, f16};
use flashattn_testkit::grad;
use flashattn_testkit::oracle::{baseline_materialized, widen};

use crate::gpu::{Flow, References, base_row, classify};
use crate::inputs::{PoolElem, Pools};
use crate::meta::RunInfo;
use crate::models::{self, Layouts};
use crate::record::{ErrorStats, Row, Timing};
use crate::shapes::{Block, Case, Overrides, Pass, Preset, Variant, expand};
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
    for mut c in o.modify(expand(&blocks)?) {
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

/// How the CPU sweep samples, and what it runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Exactly this many samples per row (else [`MIN_RUNS`]..=[`MAX_RUNS`] over `rep_ms`).
    pub reps: Option<usize>,
    /// Sampling time per row, ms.
    pub rep_ms: f64,
    /// The passes to time, each a row per variant.
    pub passes: Vec<Pass>,
    /// Whether to check the backward's gradients by the test kit's rule (shapes within the
    /// oracle's budget, [`crate::gpu::ORACLE_BUDGET`]).
    pub check: bool,
}

/// Runs the CPU rows of one case: for each variant, one row per pass.
pub fn run_case(
    case: &Case,
    pools: &Pools,
    info: &RunInfo,
    settings: &Settings,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(Row) -> Result<(), String>,
) -> Result<Flow, String> {
    match case.shape.dtype {
        DType::BF16 => run_typed::<bf16>(case, pools, info, settings, stop, emit),
        DType::F16 => run_typed::<f16>(case, pools, info, settings, stop, emit),
        DType::F32 => run_typed::<f32>(case, pools, info, settings, stop, emit),
    }
}

/// Calls `call` until enough samples (wall clock, ms per call): `settings.reps`, else at least
/// [`MIN_RUNS`] and until `rep_ms` has passed, at most [`MAX_RUNS`]. Stops at the first error.
fn sample(
    settings: &Settings,
    stop: &AtomicBool,
    mut call: impl FnMut() -> flashattn::Result<()>,
) -> (Vec<f64>, Option<flashattn::Error>) {
    let mut times = Vec::new();
    let started = Instant::now();
    loop {
        let t = Instant::now();
        if let Err(e) = call() {
            return (times, Some(e));
        }
        times.push(t.elapsed().as_secs_f64() * 1e3);
        let n = times.len();
        let enough = match settings.reps {
            Some(r) => n >= r,
            None => {
                n >= MAX_RUNS || (n >= MIN_RUNS && started.elapsed().as_secs_f64() * 1e3 >= settings.rep_ms)
            }
        };
        if enough || stop.load(Ordering::SeqCst) {
            return (times, None);
        }
    }
}

/// Fills a row's status and message from a failed call.
fn fail(row: &mut Row, e: &flashattn::Error) {
    let (status, needed) = classify(e);
    row.status = status.to_string();
    row.oom_needed_bytes = needed;
    row.message = Some(e.to_string());
}

/// Fills a row's timing from its samples, or its status from the error that ended them.
fn finish(row: &mut Row, (times, err): (Vec<f64>, Option<flashattn::Error>)) {
    if let Some(e) = err {
        row.status = "error".into();
        row.message = Some(e.to_string());
    }
    if let Some(s) = Summary::of(&times) {
        row.timing = Some(Timing::from_summary(&s, 1, 1, 1, "wall-clock"));
    }
}

fn run_typed<T: PoolElem>(
    case: &Case,
    pools: &Pools,
    info: &RunInfo,
    settings: &Settings,
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
    let wants_fwd = settings.passes.contains(&Pass::Fwd);
    let checks = wants_fwd.then(|| References::new(&p, [q, k, v]));
    // The upstream gradient of the backward passes, laid out as O.
    let d_o = if settings.passes.iter().any(|&x| x != Pass::Fwd) { window(3 * 4096 + 59, lq)? } else { &[] };
    for variant in &case.variants {
        for &pass in &settings.passes {
            if stop.load(Ordering::SeqCst) {
                return Ok(Flow::Stop);
            }
            let mut row = Row {
                method: method_name(variant.method).to_string(),
                tiles: variant.tiles.map(|t| t.to_string()),
                pass: Some(pass.name().to_string()),
                flops: base.flops * pass.flops_factor(),
                ..base.clone()
            };
            let tiled = variant.method != Method::Standard;
            let opts = models::with_variant(&base_opts, variant);
            let tiles = flashattn::cpu::tiles(&opts).ok();
            let fwd_extra =
                models::cpu_extra_bytes(shape, if tiled { Some(tiles.unwrap_or((64, 64))) } else { None });
            row.extra_bytes_plan = Some(match pass {
                Pass::Fwd => fwd_extra,
                Pass::Bwd => models::cpu_backward_extra_bytes(shape),
                // The forward's working set is freed before the backward allocates its own.
                Pass::FwdBwd => fwd_extra.max(models::cpu_backward_extra_bytes(shape)),
            });
            if let (true, Some((m, n))) = (tiled, tiles) {
                (row.block_m, row.block_n) = (Some(m), Some(n));
            }
            row.bytes_model = None;
            if pass != Pass::Fwd {
                if tiled {
                    backward(&mut row, pass, &p, &opts, &l, [q, k, v, d_o], settings, stop);
                } else {
                    row.status = "unsupported".into();
                    row.message = Some(
                        "no materializing CPU backward to time (the test kit's baseline_backward is the \
                         gradient rule's yardstick, not a method)"
                            .into(),
                    );
                    row.extra_bytes_plan = None;
                }
                emit(row)?;
                continue;
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
                fail(&mut row, &e);
                emit(row)?;
                continue;
            }
            row.extra_bytes_measured = growth;
            row.error = checks.as_ref().map(|c| c.error_stats(&p, v, &out));
            finish(&mut row, sample(settings, stop, || call(&mut out)));
            emit(row)?;
        }
    }
    Ok(Flow::Continue)
}

/// Times the library's CPU backward on `row`: `bwd` the backward call alone, given O and the
/// log-sum-exp computed once beforehand (untimed), `fwd+bwd` the forward then the backward.
/// The first call gives the measured memory; the gradients are checked after the samples when
/// `settings.check` asks and the shape is within the oracle's budget.
#[allow(clippy::too_many_arguments)]
fn backward<T: PoolElem>(
    row: &mut Row,
    pass: Pass,
    p: &Problem,
    opts: &AttentionOptions,
    l: &Layouts,
    [q, k, v, d_o]: [&[T]; 4],
    settings: &Settings,
    stop: &AtomicBool,
) {
    let (lq, lk) = l.lens();
    let mut o = vec![T::from_f32(f32::NAN); lq];
    let mut lse = vec![f32::NAN; p.lse_len()];
    let fwd = |o: &mut [T], lse: &mut [f32]| {
        flashattn::cpu::attention(
            HostTensor { data: q, layout: l.q },
            HostTensor { data: k, layout: l.k },
            HostTensor { data: v, layout: l.k },
            HostTensorMut { data: o, layout: l.o },
            Some(lse),
            opts,
        )
    };
    if let Err(e) = fwd(&mut o, &mut lse) {
        fail(row, &e);
        return;
    }
    let (mut dq, mut dk, mut dv) =
        (vec![T::from_f32(0.0); lq], vec![T::from_f32(0.0); lk], vec![T::from_f32(0.0); lk]);
    let mut call = || -> flashattn::Result<()> {
        if pass == Pass::FwdBwd {
            fwd(&mut o, &mut lse)?;
        }
        flashattn::cpu::attention_backward(
            HostTensor { data: q, layout: l.q },
            HostTensor { data: k, layout: l.k },
            HostTensor { data: v, layout: l.k },
            HostTensor { data: &o, layout: l.o },
            &lse,
            HostTensor { data: d_o, layout: l.o },
            Gradients {
                dq: HostTensorMut { data: &mut dq, layout: l.q },
                dk: HostTensorMut { data: &mut dk, layout: l.k },
                dv: HostTensorMut { data: &mut dv, layout: l.k },
            },
            opts,
        )
    };
    let (first, growth) = peak_growth(&mut call);
    if let Err(e) = first {
        fail(row, &e);
        return;
    }
    row.extra_bytes_measured = growth;
    finish(row, sample(settings, stop, &mut call));
    if settings.check && row.ok() {
        row.error = Some(gradient_check(p, [q, k, v, d_o], [&dq, &dk, &dv]));
    }
}

/// The test kit's gradient rule (`flashattn_testkit::grad::check_gradients`) on every gradient
/// element against its f64 oracle and input-precision baseline; within
/// [`crate::gpu::ORACLE_BUDGET`] FLOPs only (else a note says it was not run).
fn gradient_check<T: PoolElem>(p: &Problem, [q, k, v, d_o]: [&[T]; 4], got: [&[T]; 3]) -> ErrorStats {
    let nonfinite = got.iter().flat_map(|g| g.iter()).filter(|x| !x.to_f32().is_finite()).count() as u64;
    if p.flops() > crate::gpu::ORACLE_BUDGET {
        return ErrorStats {
            nonfinite,
            note: Some(format!(
                "gradients not checked: over the oracle's budget of {:.0e} FLOPs",
                crate::gpu::ORACLE_BUDGET
            )),
            ..Default::default()
        };
    }
    let reference = grad::attention_backward_f64(p, &widen(q), &widen(k), &widen(v), &widen(d_o));
    let baseline = grad::baseline_backward(p, q, k, v, d_o);
    let rows = p.lse_len();
    match grad::check_gradients(p, got, &reference, &baseline) {
        Ok(ratio) => ErrorStats {
            oracle_rows: rows,
            oracle_complete: true,
            rule_ratio: Some(ratio),
            within_rule: Some(true),
            nonfinite,
            ..Default::default()
        },
        Err(why) => ErrorStats {
            oracle_rows: rows,
            oracle_complete: true,
            within_rule: Some(false),
            nonfinite,
            note: Some(why),
            ..Default::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shapes::{Mask, TileSpec};

    fn settings(reps: Option<usize>, passes: &[Pass], check: bool) -> Settings {
        Settings { reps, rep_ms: 1.0, passes: passes.to_vec(), check }
    }

    #[test]
    fn cpu_backward_rows() {
        let o = Overrides {
            seqlens: Some(vec![24]),
            head_dims: Some(vec![8]),
            masks: Some(vec![Mask::Dense, Mask::VarlenCausal]),
            dtypes: Some(vec![DType::F32, DType::BF16]),
            batch: Some(crate::shapes::Size::Fixed(2)),
            ..Default::default()
        };
        let (cases, _) = cases(&o).unwrap();
        assert_eq!(cases.len(), 4);
        let pools = Pools::new(1 << 16, 3, &[DType::BF16]);
        let info = RunInfo { run_id: "t".into(), device: "cpu".into(), ..Default::default() };
        let stop = AtomicBool::new(false);
        let passes = [Pass::Bwd, Pass::FwdBwd];
        let mut rows = Vec::new();
        for c in &cases {
            let mut emit = |mut r: Row| {
                r.derive();
                rows.push(r);
                Ok(())
            };
            let s = settings(Some(2), &passes, true);
            assert!(matches!(run_case(c, &pools, &info, &s, &stop, &mut emit).unwrap(), Flow::Continue));
        }
        // Two variants (tiled, standard) × two passes per shape.
        assert_eq!(rows.len(), cases.len() * 4);
        for r in &rows {
            let fwd_flops =
                crate::models::flops(&cases.iter().find(|c| c.shape.key() == r.key).unwrap().shape);
            let factor = if r.pass() == "bwd" { 2.5 } else { 3.5 };
            assert_eq!(r.flops, fwd_flops * factor);
            if r.method == "cpu-standard" {
                assert_eq!(r.status, "unsupported", "{r:?}");
                continue;
            }
            assert_eq!(r.status, "ok", "{} {}: {:?}", r.key, r.pass(), r.message);
            let t = r.timing.as_ref().unwrap();
            assert_eq!(t.samples, 2);
            assert!(t.median_ms > 0.0 && r.tflops.unwrap() > 0.0);
            let e = r.error.as_ref().unwrap();
            assert_eq!(e.within_rule, Some(true), "{} {}: {e:?}", r.key, r.pass());
            assert_eq!(e.nonfinite, 0);
        }
        let bwd = rows.iter().find(|r| r.pass() == "bwd" && r.method == "cpu-tiled").unwrap();
        assert_eq!(bwd.extra_bytes_plan, Some(crate::models::cpu_backward_extra_bytes(&cases[0].shape)));
    }

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
                run_case(c, &pools, &info, &settings(Some(2), &[Pass::Fwd], false), &stop, &mut emit)
                    .unwrap(),
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
