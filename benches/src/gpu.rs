//! The GPU runner: for each shape, input sets in device memory, the references, then one row per
//! method variant and pass with its kernel time, memory, error and (on a subset) the complete path.
//!
//! How a row is timed: after one warm call and one checked call, one call is timed alone to
//! estimate its length, then warm-up calls run for `--warmup-ms`; then each sample is a pair of
//! CUDA events ([`flashattn::GpuTimer`]) around one call, or around a batch of back-to-back calls
//! (divided by their count) when one call is shorter than [`BATCH_BELOW_MS`]. Consecutive calls
//! rotate through several input sets whose inputs together exceed twice the L2 cache, so no call
//! finds its inputs in L2. Samples are enqueued back to back and read after one synchronization.
//! The time includes everything the call enqueues (for standard attention: the allocation of S
//! and P, two GEMMs, the softmax kernel, the frees).
//!
//! The call is the pass's: `fwd` one `Device::attention`; `bwd` one `Device::attention_backward`,
//! each input set's O and log-sum-exp computed beforehand by one untimed forward with the same
//! options; `fwd+bwd` the forward then the backward. The backward passes rotate through the same
//! input sets, each with its own upstream gradient dO (a window of the random pool) and dQ, dK,
//! dV buffers, allocated after the forward rows for as many sets as fit. Backward rows are not
//! checked against a reference (the CPU sweep checks the gradient rule).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use flashattn::{
    AttentionOptions, DType, Device, DeviceBuffer, DeviceGradients, Element, Error, GpuTimer, InvalidInput,
    Method, Plan, Problem, SavedForBackward, bf16, f16,
};
use flashattn_testkit::oracle::{self, RowsReference};
use flashattn_testkit::tolerance;
use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::cli::{BwdFromArg, Check, LayoutArg, OneArgs, RunArgs};
use crate::inputs::{PoolElem, Pools, SLACK, grad_offset, window_offsets};
use crate::meta::RunInfo;
use crate::models::{self, Layouts};
use crate::record::{CompletePath, ErrorStats, Row, Timing};
use crate::shapes::{Case, Pass, Shape, Variant, check_shape};
use crate::stats::Summary;

/// Input sets per shape at least (more when needed to exceed twice the L2).
pub const MIN_SETS: usize = 3;
/// Input sets per shape at most.
pub const MAX_SETS: usize = 64;
/// Calls shorter than this are timed in batches (ms).
pub const BATCH_BELOW_MS: f64 = 0.2;
/// Most calls per batch.
const MAX_BATCH: usize = 64;
/// Most samples per row.
const MAX_SAMPLES: usize = 500;
/// Calls longer than this need only 3 samples (ms).
const LONG_CALL_MS: f64 = 50.0;
/// FLOPs the f64 oracle may spend per shape.
pub const ORACLE_BUDGET: f64 = 2e9;
/// GPU time the launch-overhead measurements aim for (ms).
const COMPLETE_WINDOW_MS: f64 = 20.0;

/// What the sweep loop should do next.
pub enum Flow {
    /// Go on.
    Continue,
    /// Ctrl-C: stop, keep what was written.
    Stop,
    /// The device no longer works (a sticky CUDA error): stop.
    DeviceLost(String),
}

/// One input set and its outputs, in device memory.
struct Set<T> {
    q: DeviceBuffer<T>,
    k: DeviceBuffer<T>,
    v: DeviceBuffer<T>,
    o: DeviceBuffer<T>,
    lse: DeviceBuffer<f32>,
}

/// The backward's buffers of one input set: the upstream gradient dO (laid out as O) and the
/// gradients it writes (laid out as Q, K, V).
struct Grads<T> {
    d_o: DeviceBuffer<T>,
    dq: DeviceBuffer<T>,
    dk: DeviceBuffer<T>,
    dv: DeviceBuffer<T>,
    /// A training forward's saved state (`--bwd-from residuals`), from which the backward runs
    /// instead of the set's log-sum-exp.
    saved: Option<SavedForBackward<T>>,
}

/// The status a failed call gets, and the bytes it needed when it ran out of memory.
pub fn classify(e: &Error) -> (&'static str, Option<u64>) {
    match e {
        Error::OutOfMemory { requested, .. } => ("oom", Some(*requested)),
        Error::InvalidInput(InvalidInput::Unsupported { .. }) | Error::BlasMissing => ("unsupported", None),
        Error::InvalidInput(_) | Error::SharedMemoryExceeded { .. } => ("invalid", None),
        _ => ("error", None),
    }
}

/// A row with the shape's fields filled in.
pub fn base_row(case: &Case, backend: &str, info: &RunInfo) -> Row {
    let s = &case.shape;
    Row {
        backend: backend.to_string(),
        run_id: info.run_id.clone(),
        device: info.device.clone(),
        commit: info.commit.clone(),
        key: s.key(),
        group: case.group.to_string(),
        dtype: s.dtype.name().to_string(),
        batch: s.batch,
        heads: s.heads,
        kv_heads: s.kv_heads,
        seqlen_q: s.seqlen_q,
        seqlen_k: s.seqlen_k,
        head_dim: s.head_dim,
        mask: s.mask.name().to_string(),
        window_left: s.window,
        softcap: s.softcap.map(|c| c.get()),
        alibi: s.alibi,
        pass: Some(Pass::Fwd.name().to_string()),
        status: "ok".to_string(),
        flops: models::flops(s),
        io_bytes: models::io_bytes(s),
        bytes_compulsory: Some(models::compulsory_bytes(s)),
        ..Default::default()
    }
}

/// The row of a variant in a pass before it runs: the pass's name and FLOPs (the forward's times
/// [`Pass::flops_factor`]: 2.5 for `bwd`, 3.5 for `fwd+bwd`). The byte models are the forward's:
/// a backward row has none.
pub fn pass_row(base: &Row, v: &Variant, pass: Pass) -> Row {
    let mut r = variant_row(base, v);
    if pass != Pass::Fwd {
        r.pass = Some(pass.name().to_string());
        r.flops = base.flops * pass.flops_factor();
        r.bytes_compulsory = None;
    }
    r
}

/// Emits a failed row for each of `passes` × each variant (in that order, the sweep's).
fn fail_rows(
    case: &Case,
    base: &Row,
    passes: &[Pass],
    emit: &mut dyn FnMut(Row) -> Result<(), String>,
    (status, msg, needed): (&str, &str, Option<u64>),
) -> Result<(), String> {
    for &pass in passes {
        for v in &case.variants {
            let mut r = pass_row(base, v, pass);
            r.status = status.to_string();
            r.message = Some(msg.to_string());
            r.oom_needed_bytes = needed;
            emit(r)?;
        }
    }
    Ok(())
}

/// The options of a variant's calls: the shape's, the variant's method and tiles, and for the
/// tensor-core and automatic methods the command line's split-KV override.
fn variant_options(base: &AttentionOptions, v: &Variant, splits: Option<usize>) -> AttentionOptions {
    let mut opts = models::with_variant(base, v);
    if matches!(opts.method, Method::FlashTensorCore | Method::Auto) {
        opts.splits = splits;
    }
    opts
}

/// Bytes of one input set's backward buffers with layouts `l` and `elem`-byte elements: dO and
/// dQ (each as Q), dK and dV (each as K).
pub fn grads_bytes(l: &Layouts, elem: usize) -> u64 {
    let (lq, lk) = l.lens();
    2 * (lq + lk) as u64 * elem as u64
}

/// Bytes of a [`SavedForBackward`] for the layouts (O's residual, the log-sum-exp and two f32 a
/// row).
fn saved_bytes(l: &Layouts, elem: usize, lse_len: usize) -> u64 {
    l.lens().0 as u64 * elem as u64 + 12 * lse_len as u64
}

/// The row of a variant before it runs.
fn variant_row(base: &Row, v: &Variant) -> Row {
    Row { method: v.method.name().to_string(), tiles: v.tiles.map(|t| t.to_string()), ..base.clone() }
}

fn fail(row: &mut Row, e: &Error) {
    let (status, needed) = classify(e);
    row.status = status.to_string();
    row.oom_needed_bytes = needed;
    row.message = Some(e.to_string());
}

/// The GPU sweep's state: the device, the random pools, and reusable timers.
pub struct GpuRunner<'a> {
    dev: &'a Device,
    args: &'a RunArgs,
    info: &'a RunInfo,
    pools: Pools,
    timers: Vec<GpuTimer>,
    seed: u64,
}

/// Pool length for a list of shapes: the largest tensor plus room for offsets.
pub fn pool_len<'s>(shapes: impl Iterator<Item = &'s Shape>) -> usize {
    shapes.map(|s| Layouts::new(s, false).lens()).map(|(q, k)| q.max(k)).max().unwrap_or(0) + SLACK
}

impl<'a> GpuRunner<'a> {
    /// Draws the random pools for `cases`.
    pub fn new(dev: &'a Device, args: &'a RunArgs, info: &'a RunInfo, cases: &[Case]) -> GpuRunner<'a> {
        // bf16 always: the matmul ceiling uses it.
        let mut dtypes: Vec<DType> = cases.iter().map(|c| c.shape.dtype).chain([DType::BF16]).collect();
        dtypes.sort();
        dtypes.dedup();
        let pools = Pools::new(pool_len(cases.iter().map(|c| &c.shape)), args.seed, &dtypes);
        GpuRunner { dev, args, info, pools, timers: Vec::new(), seed: args.seed }
    }

    /// The random pools.
    pub fn pools(&self) -> &Pools {
        &self.pools
    }

    /// Runs every variant of one case in each pass asked for (the forward's rows first), handing
    /// each finished row to `emit`.
    pub fn run_case(
        &mut self,
        case: &Case,
        stop: &AtomicBool,
        emit: &mut dyn FnMut(Row) -> Result<(), String>,
    ) -> Result<Flow, String> {
        match case.shape.dtype {
            DType::BF16 => self.run_typed::<bf16>(case, stop, emit),
            DType::F16 => self.run_typed::<f16>(case, stop, emit),
            DType::F32 => self.run_typed::<f32>(case, stop, emit),
        }
    }

    /// Whether the device still works after a failed row.
    fn health(&self) -> Flow {
        let probe = || -> flashattn::Result<()> {
            self.dev.synchronize()?;
            let _b = self.dev.alloc_zeros::<f32>(1)?;
            self.dev.synchronize()
        };
        match probe() {
            Ok(()) => Flow::Continue,
            Err(e) => Flow::DeviceLost(format!("the device stopped working: {e}")),
        }
    }

    /// A device buffer holding the pool's window of `len` elements at `off`.
    fn upload<T: PoolElem>(&self, off: usize, len: usize) -> flashattn::Result<DeviceBuffer<T>> {
        let mut b = self.dev.alloc::<T>(len)?;
        if let Some(w) = self.pools.window::<T>(off, len) {
            self.dev.copy_to_device(w, &mut b)?;
        }
        Ok(b)
    }

    fn alloc_set<T: PoolElem>(
        &self,
        l: &Layouts,
        lse_len: usize,
        rng: &mut SmallRng,
    ) -> flashattn::Result<(Set<T>, [usize; 3])> {
        let (lq, lk) = l.lens();
        let offs = window_offsets(rng);
        let set = Set {
            q: self.upload(offs[0], lq)?,
            k: self.upload(offs[1], lk)?,
            v: self.upload(offs[2], lk)?,
            o: self.dev.alloc::<T>(lq)?,
            lse: self.dev.alloc::<f32>(lse_len)?,
        };
        Ok((set, offs))
    }

    /// dO (a window of the random pool) and the gradient buffers for up to `sets` input sets, as
    /// many as fit in a quarter of the free memory (at least one); an error only when not even
    /// one does.
    fn alloc_grads<T: PoolElem>(
        &self,
        l: &Layouts,
        sets: usize,
        lse_len: usize,
        rng: &mut SmallRng,
    ) -> flashattn::Result<Vec<Grads<T>>> {
        let (lq, lk) = l.lens();
        let residuals = self.args.bwd_from == BwdFromArg::Residuals;
        let bytes = grads_bytes(l, size_of::<T>())
            + if residuals { saved_bytes(l, size_of::<T>(), lse_len) } else { 0 };
        let free = self.dev.memory_info().map(|m| m.0).unwrap_or(0);
        let fit = ((free / 4) / bytes.max(1)).max(1) as usize;
        let mut out = Vec::new();
        for _ in 0..sets.min(fit) {
            let g = (|| {
                Ok(Grads {
                    d_o: self.upload(grad_offset(rng), lq)?,
                    dq: self.dev.alloc::<T>(lq)?,
                    dk: self.dev.alloc::<T>(lk)?,
                    dv: self.dev.alloc::<T>(lk)?,
                    saved: if residuals { Some(self.dev.alloc_saved::<T>(l.o, lse_len)?) } else { None },
                })
            })();
            match g {
                Ok(g) => out.push(g),
                Err(e) if out.is_empty() => return Err(e),
                Err(_) => break,
            }
        }
        Ok(out)
    }

    fn run_typed<T: PoolElem>(
        &mut self,
        case: &Case,
        stop: &AtomicBool,
        emit: &mut dyn FnMut(Row) -> Result<(), String>,
    ) -> Result<Flow, String> {
        let shape = &case.shape;
        let passes = self.args.passes();
        let wants_fwd = passes.contains(&Pass::Fwd);
        // The forward's rows first, then each backward pass's, in the order asked for.
        let backward_passes: Vec<Pass> = passes.iter().copied().filter(|&p| p != Pass::Fwd).collect();
        let all_passes: Vec<Pass> =
            wants_fwd.then_some(Pass::Fwd).into_iter().chain(backward_passes.clone()).collect();
        let mut base = base_row(case, "gpu", self.info);
        base.layout = self.args.layout.map(|l| l.name().to_string());
        let validated = models::problem(shape).and_then(|p| Ok((p, models::options(shape)?)));
        let (problem, base_opts) = match validated {
            Ok(p) => p,
            Err(e) => {
                fail_rows(case, &base, &all_passes, emit, ("invalid", &e.to_string(), None))?;
                return Ok(Flow::Continue);
            }
        };
        let layouts = Layouts::new(shape, self.args.layout == Some(LayoutArg::Bhsd));
        let (lq, lk) = layouts.lens();
        let e = shape.dtype.size_bytes() as u64;
        let input_bytes = (lq as u64 + 2 * lk as u64) * e;
        let set_bytes = input_bytes + lq as u64 * e + 4 * problem.lse_len() as u64;
        let free = self.dev.memory_info().map(|m| m.0).unwrap_or(0);
        let want =
            MIN_SETS.max((2 * self.dev.props().l2_bytes).div_ceil(input_bytes.max(1)) as usize).min(MAX_SETS);
        let fit = ((free / 4) / set_bytes.max(1)).max(1) as usize;
        let nsets = want.min(fit);

        let mut rng = SmallRng::seed_from_u64(self.seed ^ fxhash(&shape.key()));
        let mut sets: Vec<Set<T>> = Vec::with_capacity(nsets);
        let mut offsets0 = [0usize; 3];
        for i in 0..nsets {
            match self.alloc_set::<T>(&layouts, problem.lse_len(), &mut rng) {
                Ok((s, offs)) => {
                    if i == 0 {
                        offsets0 = offs;
                    }
                    sets.push(s);
                }
                Err(err) if sets.is_empty() => {
                    let (status, needed) = classify(&err);
                    let msg = format!("allocating the inputs: {err}");
                    fail_rows(case, &base, &all_passes, emit, (status, &msg, needed))?;
                    return Ok(self.health());
                }
                Err(_) => break,
            }
        }
        let host = |off: usize, len: usize| self.pools.window::<T>(off, len).unwrap_or(&[]);
        let (hq, hk, hv) = (host(offsets0[0], lq), host(offsets0[1], lk), host(offsets0[2], lk));
        if hq.len() != lq || hk.len() != lk {
            let msg = "the random pool is smaller than the inputs";
            fail_rows(case, &base, &all_passes, emit, ("error", msg, None))?;
            return Ok(Flow::Continue);
        }

        if wants_fwd {
            // References: the test kit's oracle and baseline on a slice or two, and where the
            // oracle only samples rows, a GPU f32 flash run over every element.
            let checks = (self.args.check != Check::None).then(|| References::new(&problem, [hq, hk, hv]));
            let need_f32 = self.args.check == Check::Full
                && shape.dtype != DType::F32
                && checks.as_ref().is_some_and(|c| !c.complete);
            // Computed when the first variant has an output to compare (never for a shape whose
            // every variant fails, like the memory wall's).
            let mut f32_ref: Option<Result<Vec<f32>, String>> = None;

            let transfers =
                if case.complete { Some(self.transfers(&mut sets[0], [hq, hk, hv])) } else { None };

            for v in &case.variants {
                if stop.load(Ordering::SeqCst) {
                    return Ok(Flow::Stop);
                }
                let mut row = variant_row(&base, v);
                let opts = variant_options(&base_opts, v, self.args.splits);
                let plan = match self.dev.plan::<T>(&problem, &opts) {
                    Ok(p) => p,
                    Err(err) => {
                        fail(&mut row, &err);
                        emit(row)?;
                        continue;
                    }
                };
                (row.block_m, row.block_n) = (plan.tiles.map(|t| t.0), plan.tiles.map(|t| t.1));
                row.kernel = Some(plan.kernel().to_string());
                row.extra_bytes_plan = Some(plan.scratch_bytes);
                row.bytes_model = Some(models::plan_bytes(shape, plan.tiles));
                let mut calls = Calls::new(self.dev, Pass::Fwd, &mut sets, &mut [], &opts, layouts);
                let measured = measure(&mut calls, &mut self.timers, self.args);
                match measured {
                    Ok(m) => {
                        row.timing = Some(m.timing);
                        row.extra_bytes_measured = Some(m.extra_measured);
                        if need_f32 && f32_ref.is_none() {
                            let r = self.f32_reference(&base_opts, &calls.layouts, [hq, hk, hv]);
                            f32_ref = Some(r.map_err(|e| format!("f32 reference: {e}")));
                        }
                        if let Some(c) = &checks {
                            let mut e = c.error_stats(&problem, hv, &m.output);
                            match &f32_ref {
                                Some(Ok(r)) => e.f32_ref_max_abs = Some(max_diff(&m.output, r)),
                                Some(Err(msg)) => {
                                    e.note = Some(e.note.map_or(msg.clone(), |n| format!("{n}; {msg}")))
                                }
                                None => {}
                            }
                            row.error = Some(e);
                        }
                        // The complete path with the library's tiles only (tile overrides are a
                        // kernel-time question).
                        if let (Some(t), None) = (&transfers, v.tiles) {
                            let mut cp = t.clone();
                            complete_path(&mut calls, &mut self.timers, shape, &plan, m.est_ms, &mut cp);
                            row.complete = Some(cp);
                        }
                        emit(row)?;
                    }
                    Err(err) => {
                        fail(&mut row, &err);
                        emit(row)?;
                        if let Flow::DeviceLost(msg) = self.health() {
                            return Ok(Flow::DeviceLost(msg));
                        }
                    }
                }
            }
        }
        if backward_passes.is_empty() {
            return Ok(Flow::Continue);
        }
        let mut grads = match self.alloc_grads::<T>(&layouts, sets.len(), problem.lse_len(), &mut rng) {
            Ok(g) => g,
            Err(err) => {
                let (status, needed) = classify(&err);
                let msg = format!("allocating dO and the gradients: {err}");
                fail_rows(case, &base, &backward_passes, emit, (status, &msg, needed))?;
                return Ok(self.health());
            }
        };
        sets.truncate(grads.len());
        for &pass in &backward_passes {
            for v in &case.variants {
                if stop.load(Ordering::SeqCst) {
                    return Ok(Flow::Stop);
                }
                let mut row = pass_row(&base, v, pass);
                let opts = variant_options(&base_opts, v, self.args.splits);
                let failed =
                    self.time_backward(&mut row, pass, &problem, &opts, layouts, &mut sets, &mut grads);
                emit(row)?;
                if failed && let Flow::DeviceLost(msg) = self.health() {
                    return Ok(Flow::DeviceLost(msg));
                }
            }
        }
        Ok(Flow::Continue)
    }

    /// Plans and times one row of a backward pass (`bwd` or `fwd+bwd`) on `sets`, each with its
    /// `grads`, filling `row`: the backward's plan (tiles, kernels, scratch memory), the timing and
    /// the measured extra memory, or the status of the failure. True when a call failed (after
    /// planning), so the caller checks the device's health.
    #[allow(clippy::too_many_arguments)]
    fn time_backward<T: PoolElem>(
        &mut self,
        row: &mut Row,
        pass: Pass,
        problem: &Problem,
        opts: &AttentionOptions,
        l: Layouts,
        sets: &mut [Set<T>],
        grads: &mut [Grads<T>],
    ) -> bool {
        let layouts = [("d_o", &l.o), ("dq", &l.q), ("dk", &l.k), ("dv", &l.k)];
        let from_saved = self.args.bwd_from == BwdFromArg::Residuals;
        // (From a training forward's saved state, the backward reads its residuals where the
        // forward's plan keeps them; where it keeps none — e.g. a tile override that puts the
        // forward on the `mma.sync` kernel — the row says `lse`: that backward's preprocessing
        // makes its pass over the keys from the log-sum-exp, as without the saved state.)
        let props = self.dev.props();
        let fwd_opts = forward_options(pass, opts);
        let residuals = from_saved
            && flashattn::plan_for_backward(props, T::DTYPE, problem, &fwd_opts).is_ok_and(|p| p.residuals);
        row.bwd_from =
            Some(if residuals { BwdFromArg::Residuals } else { BwdFromArg::Lse }.name().to_string());
        let planned = if residuals {
            flashattn::plan_backward_from_residuals(props, T::DTYPE, problem, opts, layouts)
        } else {
            flashattn::plan_backward(props, T::DTYPE, problem, opts, layouts)
        };
        let bwd = match planned {
            Ok(p) => p,
            Err(err) => {
                fail(row, &Error::InvalidInput(err));
                return false;
            }
        };
        (row.block_m, row.block_n) = (bwd.tiles.map(|t| t.0), bwd.tiles.map(|t| t.1));
        row.kernel = Some(bwd.kernel().to_string());
        row.extra_bytes_plan = Some(bwd.scratch_bytes);
        if pass == Pass::FwdBwd {
            let planned = if from_saved {
                flashattn::plan_for_backward(props, T::DTYPE, problem, &fwd_opts).map_err(Error::InvalidInput)
            } else {
                self.dev.plan::<T>(problem, &fwd_opts)
            };
            let fwd = match planned {
                Ok(p) => p,
                Err(err) => {
                    fail(row, &err);
                    return false;
                }
            };
            row.kernel = Some(format!("{} + {}", fwd.kernel(), bwd.kernel()));
            // The forward's scratch is freed (in stream order) before the backward allocates its own.
            row.extra_bytes_plan = Some(fwd.scratch_bytes.max(bwd.scratch_bytes));
        } else {
            // O and the log-sum-exp (or the saved state) of every input set, once, untimed.
            let mut fwd = Calls::new(self.dev, Pass::Fwd, sets, grads, opts, l);
            let r = (0..fwd.len())
                .try_for_each(|i| fwd.forward(i, &l).map(drop))
                .and_then(|()| self.dev.synchronize());
            if let Err(err) = r {
                fail(row, &err);
                row.message =
                    Some(format!("the forward before the backward (untimed, for O and the LSE): {err}"));
                return true;
            }
        }
        let mut calls = Calls::new(self.dev, pass, sets, grads, opts, l);
        match measure(&mut calls, &mut self.timers, self.args) {
            Ok(m) => {
                row.timing = Some(m.timing);
                row.extra_bytes_measured = Some(m.extra_measured);
                false
            }
            Err(err) => {
                fail(row, &err);
                true
            }
        }
    }

    /// Every output element of the flash method on f32 copies of set 0's inputs.
    fn f32_reference<T: PoolElem>(
        &self,
        opts: &AttentionOptions,
        l: &Layouts,
        host: [&[T]; 3],
    ) -> flashattn::Result<Vec<f32>> {
        let up = |h: &[T]| {
            let wide: Vec<f32> = h.iter().map(|x| x.to_f32()).collect();
            self.dev.upload(&wide)
        };
        let (q, k, v) = (up(host[0])?, up(host[1])?, up(host[2])?);
        let mut o = self.dev.alloc::<f32>(l.lens().0)?;
        let opts = AttentionOptions { method: Method::Flash, ..opts.clone() };
        self.dev.attention(q.view(l.q), k.view(l.k), v.view(l.k), o.view_mut(l.o), None, &opts)?;
        self.dev.download(&o)
    }

    /// Host↔device copies of one set (wall clock, median of 3), from and to plain and pinned
    /// host memory.
    fn transfers<T: PoolElem>(&self, set: &mut Set<T>, host: [&[T]; 3]) -> CompletePath {
        let dev = self.dev;
        let esize = size_of::<T>() as u64;
        let mut cp = CompletePath {
            upload_bytes: host.iter().map(|h| h.len() as u64 * esize).sum(),
            download_bytes: set.o.len() as u64 * esize,
            ..Default::default()
        };
        let time3 = |f: &mut dyn FnMut() -> flashattn::Result<()>| -> Result<f64, String> {
            let mut t = Vec::new();
            for _ in 0..3 {
                dev.synchronize().map_err(|e| e.to_string())?;
                let start = Instant::now();
                f().map_err(|e| e.to_string())?;
                dev.synchronize().map_err(|e| e.to_string())?;
                t.push(start.elapsed().as_secs_f64() * 1e3);
            }
            Summary::of(&t).map(|s| s.median).ok_or_else(|| "no sample".to_string())
        };
        let note = |cp: &mut CompletePath, what: &str, r: Result<f64, String>| match r {
            Ok(ms) => Some(ms),
            Err(e) => {
                cp.notes.push(format!("{what}: {e}"));
                None
            }
        };
        let r = time3(&mut || {
            dev.copy_to_device(host[0], &mut set.q)?;
            dev.copy_to_device(host[1], &mut set.k)?;
            dev.copy_to_device(host[2], &mut set.v)
        });
        cp.upload_ms = note(&mut cp, "upload", r);
        let mut out = vec![T::default(); set.o.len()];
        let r = time3(&mut || dev.copy_to_host(&set.o, &mut out));
        cp.download_ms = note(&mut cp, "download", r);
        drop(out);
        match self.pinned_transfers(set, host, &time3) {
            Ok((up, down)) => {
                cp.upload_pinned_ms = Some(up);
                cp.download_pinned_ms = Some(down);
            }
            Err(e) => cp.notes.push(format!("pinned copies: {e}")),
        }
        cp
    }

    fn pinned_transfers<T: PoolElem>(
        &self,
        set: &mut Set<T>,
        host: [&[T]; 3],
        time3: &Time3<'_>,
    ) -> Result<(f64, f64), String> {
        let ctx = self.dev.stream().context();
        let pin = |len: usize| {
            // SAFETY: page-locked host memory of plain floats, written before it is read.
            unsafe { ctx.alloc_pinned_with_flags::<T>(len.max(1), 0) }.map_err(|e| e.to_string())
        };
        let mut pinned = Vec::new();
        for h in host {
            let mut p = pin(h.len())?;
            p.as_mut_slice().map_err(|e| e.to_string())?[..h.len()].copy_from_slice(h);
            pinned.push(p);
        }
        let slices: Vec<&[T]> = pinned
            .iter()
            .zip(host)
            .map(|(p, h)| p.as_slice().map(|s| &s[..h.len()]).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        let up = time3(&mut || {
            self.dev.copy_to_device(slices[0], &mut set.q)?;
            self.dev.copy_to_device(slices[1], &mut set.k)?;
            self.dev.copy_to_device(slices[2], &mut set.v)
        })?;
        let mut out = pin(set.o.len())?;
        let dst = &mut out.as_mut_slice().map_err(|e| e.to_string())?[..set.o.len()];
        let down = time3(&mut || self.dev.copy_to_host(&set.o, &mut *dst))?;
        Ok((up, down))
    }
}

/// Times a host↔device copy (median wall milliseconds of 3).
type Time3<'t> = dyn Fn(&mut dyn FnMut() -> flashattn::Result<()>) -> Result<f64, String> + 't;

/// A small, stable string hash (FNV-1a) for per-shape seeds.
fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// The forward's options in a pass `pass` of a variant with `opts` (see [`Calls::fwd_opts`]).
fn forward_options(pass: Pass, opts: &AttentionOptions) -> AttentionOptions {
    match pass {
        Pass::Fwd => opts.clone(),
        Pass::Bwd | Pass::FwdBwd => AttentionOptions { tiles: Default::default(), ..opts.clone() },
    }
}

/// Calls of one pass on rotating input sets.
struct Calls<'c, T> {
    dev: &'c Device,
    /// What one call runs.
    pass: Pass,
    sets: &'c mut [Set<T>],
    /// The backward's buffers of the first `grads.len()` sets (none for the forward).
    grads: &'c mut [Grads<T>],
    opts: &'c flashattn::AttentionOptions,
    /// The forward's options: `opts`, but in a pass with a backward the library's own tiles (a
    /// tile override there names a backward instance, as in the GPU tests; the forward with it
    /// would run another kernel, one that may keep no residuals).
    fwd_opts: flashattn::AttentionOptions,
    /// The `(B, N, H, d)` layouts the sets were allocated for.
    layouts: Layouts,
    next: usize,
}

impl<'c, T: PoolElem> Calls<'c, T> {
    fn new(
        dev: &'c Device,
        pass: Pass,
        sets: &'c mut [Set<T>],
        grads: &'c mut [Grads<T>],
        opts: &'c AttentionOptions,
        layouts: Layouts,
    ) -> Calls<'c, T> {
        let fwd_opts = forward_options(pass, opts);
        Calls { dev, pass, sets, grads, opts, fwd_opts, layouts, next: 0 }
    }

    /// The input sets the calls rotate through: every set for the forward, the sets with the
    /// backward's buffers otherwise.
    fn len(&self) -> usize {
        match self.pass {
            Pass::Fwd => self.sets.len(),
            _ => self.sets.len().min(self.grads.len()),
        }
    }

    /// One call on set `i mod len` with layouts `l`: the forward, the backward (given the set's
    /// O and log-sum-exp, or its saved state), or both; the plan of the last.
    fn on(&mut self, i: usize, l: &Layouts) -> flashattn::Result<Plan> {
        match self.pass {
            Pass::Fwd => self.forward(i, l),
            Pass::Bwd => self.backward(i, l),
            Pass::FwdBwd => {
                self.forward(i, l)?;
                self.backward(i, l)
            }
        }
    }

    /// The forward on set `i mod len`: into the saved state of its backward buffers where they
    /// have one (a training forward), else into the set's log-sum-exp.
    fn forward(&mut self, i: usize, l: &Layouts) -> flashattn::Result<Plan> {
        let i = i % self.len();
        let (dev, opts, s) = (self.dev, &self.fwd_opts, &mut self.sets[i]);
        let (q, k, v, o) = (s.q.view(l.q), s.k.view(l.k), s.v.view(l.k), s.o.view_mut(l.o));
        match self.grads.get_mut(i).and_then(|g| g.saved.as_mut()) {
            Some(saved) => dev.attention_for_backward(q, k, v, o, saved, opts),
            None => dev.attention(q, k, v, o, Some(&mut s.lse), opts),
        }
    }

    /// The backward on set `i mod len`, from its saved state where it has one, else from the
    /// set's log-sum-exp.
    fn backward(&mut self, i: usize, l: &Layouts) -> flashattn::Result<Plan> {
        let i = i % self.len();
        let (dev, opts, s, g) = (self.dev, self.opts, &self.sets[i], &mut self.grads[i]);
        let (q, k, v, o, d_o) = (s.q.view(l.q), s.k.view(l.k), s.v.view(l.k), s.o.view(l.o), g.d_o.view(l.o));
        let grads =
            DeviceGradients { dq: g.dq.view_mut(l.q), dk: g.dk.view_mut(l.k), dv: g.dv.view_mut(l.k) };
        match &g.saved {
            Some(saved) => dev.attention_backward_saved(q, k, v, o, saved, d_o, grads, opts),
            None => dev.attention_backward(q, k, v, o, &s.lse, d_o, grads, opts),
        }
    }

    /// One call on the next set.
    fn next(&mut self, l: &Layouts) -> flashattn::Result<Plan> {
        self.next += 1;
        self.on(self.next, l)
    }
}

/// What [`measure`] found.
struct Measured<T> {
    timing: Timing,
    est_ms: f64,
    extra_measured: u64,
    output: Vec<T>,
}

/// Grows the timer pool to `n`.
fn timers(pool: &mut Vec<GpuTimer>, dev: &Device, n: usize) -> flashattn::Result<()> {
    while pool.len() < n {
        pool.push(GpuTimer::new(dev)?);
    }
    Ok(())
}

/// Times `samples` samples of `batch` calls each, with layouts `l`; per-call milliseconds.
fn sample<T: PoolElem>(
    calls: &mut Calls<'_, T>,
    pool: &mut Vec<GpuTimer>,
    l: &Layouts,
    samples: usize,
    batch: usize,
) -> flashattn::Result<Vec<f64>> {
    timers(pool, calls.dev, samples)?;
    for t in pool.iter().take(samples) {
        t.start(calls.dev)?;
        for _ in 0..batch {
            calls.next(l)?;
        }
        t.stop(calls.dev)?;
    }
    calls.dev.synchronize()?;
    pool.iter().take(samples).map(|t| t.elapsed_ms().map(|ms| ms as f64 / batch as f64)).collect()
}

/// Warm-up, memory, output and kernel time of one variant (see the module doc).
fn measure<T: PoolElem>(
    calls: &mut Calls<'_, T>,
    pool: &mut Vec<GpuTimer>,
    args: &RunArgs,
) -> flashattn::Result<Measured<T>> {
    let dev = calls.dev;
    let l = calls.layouts;
    let fwd = calls.pass == Pass::Fwd;
    // Warm call: first-use costs (cuBLAS handle, shared-memory attribute) are paid here.
    calls.on(0, &l)?;
    dev.synchronize()?;
    // Checked call on set 0, the forward's output poisoned with NaN first (the backward passes'
    // gradients are not checked); free memory read while it is queued.
    if fwd {
        dev.fill_nan(&mut calls.sets[0].o)?;
        dev.synchronize()?;
    }
    let before = dev.memory_info()?.0;
    calls.on(0, &l)?;
    let during = dev.memory_info()?.0;
    dev.synchronize()?;
    let output = if fwd { dev.download(&calls.sets[0].o)? } else { Vec::new() };
    // Estimate, warm up, sample.
    let est1 = sample(calls, pool, &l, 1, 1)?[0].max(1e-4);
    let warm = ((args.warmup_ms / est1).ceil() as usize).clamp(1, 10_000);
    let est = sample(calls, pool, &l, 1, warm)?[0].max(1e-4);
    let batch =
        if est < BATCH_BELOW_MS { ((BATCH_BELOW_MS / est).ceil() as usize).clamp(1, MAX_BATCH) } else { 1 };
    let min_samples = if est > LONG_CALL_MS { 3 } else { 5 };
    let samples = args.reps.unwrap_or_else(|| {
        ((args.rep_ms / (est * batch as f64)).ceil() as usize).clamp(min_samples, MAX_SAMPLES)
    });
    let per_call = sample(calls, pool, &l, samples, batch)?;
    let summary = Summary::of(&per_call).unwrap_or_default();
    Ok(Measured {
        timing: Timing::from_summary(&summary, batch, 3 + warm, calls.len(), "cuda-events"),
        est_ms: est,
        extra_measured: before.saturating_sub(during),
        output,
    })
}

/// Max |out − reference| over the elements where both are finite.
fn max_diff<T: Element>(out: &[T], reference: &[f32]) -> f64 {
    let d = out.iter().zip(reference).map(|(a, &b)| (f64::from(a.to_f32()) - f64::from(b)).abs());
    d.filter(|x| x.is_finite()).fold(0.0, f64::max)
}

/// The test kit's references on the rows an error check covers: its oracle (f64) and baseline
/// (standard attention in the input dtype) on one or two `(sequence, head)` slices, whole when
/// that fits [`ORACLE_BUDGET`], else on evenly spaced rows.
pub struct References<T> {
    rows: RowsReference<T>,
    /// Whether the slices are complete.
    pub complete: bool,
}

impl<T: Element> References<T> {
    /// Computes both references from the inputs `[q, k, v]` of `problem`.
    pub fn new(problem: &Problem, [q, k, v]: [&[T]; 3]) -> References<T> {
        let sample = oracle::sample_rows(problem, ORACLE_BUDGET);
        References { rows: oracle::reference_rows(problem, q, k, v, &sample.rows), complete: sample.complete }
    }

    /// The test kit's tolerance rule on an output (laid out as `problem.o`) computed from V = `v`.
    pub fn error_stats(&self, problem: &Problem, v: &[T], out: &[T]) -> ErrorStats {
        let e = tolerance::output_errors_rows(problem, &self.rows, v, out);
        let failure = e.failure(T::DTYPE);
        ErrorStats {
            oracle_max_abs: Some(e.err),
            oracle_ref_max_abs: Some(self.rows.out.iter().fold(0.0, |m, x| m.max(x.abs()))),
            oracle_rows: self.rows.rows.len(),
            oracle_complete: self.complete,
            baseline_max_abs: Some(e.err_baseline),
            atol: Some(e.atol),
            f32_bound: e.f32_bound,
            rule_ratio: Some(e.rule_ratio()),
            within_rule: Some(failure.is_none()),
            f32_ref_max_abs: None,
            nonfinite: out.iter().filter(|x| !x.to_f32().is_finite()).count() as u64,
            note: failure.map(|(_, why)| why),
        }
    }
}

/// Layout, enqueue cost, stream vs CUDA-graph time per call, added to `cp`.
fn complete_path<T: PoolElem>(
    calls: &mut Calls<'_, T>,
    pool: &mut Vec<GpuTimer>,
    shape: &Shape,
    plan: &Plan,
    est_ms: f64,
    cp: &mut CompletePath,
) {
    let dev = calls.dev;
    let bshd = calls.layouts;
    let k = ((COMPLETE_WINDOW_MS / est_ms.max(1e-4)).ceil() as usize).clamp(2, 100);
    cp.calls = k;
    // The same call on (B, H, N, d) tensors (not for varlen, which is packed by tokens).
    if !shape.mask.varlen() {
        let bhsd = Layouts::new(shape, true);
        let r = calls.on(0, &bhsd).and_then(|_| sample(calls, pool, &bhsd, 3, 1));
        match r {
            Ok(ms) => cp.bhsd_median_ms = Summary::of(&ms).map(|s| s.median),
            Err(e) => cp.notes.push(format!("bhsd layout: {e}")),
        }
    }
    // Back to back on the stream: host time per enqueue, GPU time per call.
    let r = (|| -> flashattn::Result<(f64, f64)> {
        timers(pool, dev, 1)?;
        dev.synchronize()?;
        pool[0].start(dev)?;
        let start = Instant::now();
        for _ in 0..k {
            calls.next(&bshd)?;
        }
        let enqueue = start.elapsed().as_secs_f64() * 1e6 / k as f64;
        pool[0].stop(dev)?;
        dev.synchronize()?;
        Ok((enqueue, pool[0].elapsed_ms()? as f64 / k as f64))
    })();
    match r {
        Ok((us, ms)) => {
            cp.enqueue_us = Some(us);
            cp.stream_ms_per_call = Some(ms);
        }
        Err(e) => cp.notes.push(format!("back-to-back calls: {e}")),
    }
    // The same calls captured into a CUDA graph and replayed. Standard attention allocates
    // scratch memory in each call, and varlen uploads offsets: neither is captured here.
    if plan.method == Method::Standard || shape.mask.varlen() {
        cp.notes.push("graph: not captured (the call allocates or uploads)".to_string());
        return;
    }
    match graph_per_call(calls, pool, &bshd, k) {
        Ok(ms) => cp.graph_ms_per_call = Some(ms),
        Err(e) => cp.notes.push(format!("graph: {e}")),
    }
}

fn graph_per_call<T: PoolElem>(
    calls: &mut Calls<'_, T>,
    pool: &mut Vec<GpuTimer>,
    l: &Layouts,
    k: usize,
) -> Result<f64, String> {
    let dev = calls.dev;
    let stream = dev.stream();
    dev.synchronize().map_err(|e| e.to_string())?;
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .map_err(|e| format!("begin capture: {e}"))?;
    let mut first_err = None;
    for _ in 0..k {
        if let Err(e) = calls.next(l) {
            first_err = Some(e.to_string());
            break;
        }
    }
    // Always end the capture, so the stream is usable whatever happened.
    let graph = stream.end_capture(CUgraphInstantiate_flags(0));
    if let Some(e) = first_err {
        return Err(format!("a call failed while capturing: {e}"));
    }
    let graph = graph.map_err(|e| format!("end capture: {e}"))?.ok_or("the capture recorded nothing")?;
    graph.upload().map_err(|e| format!("graph upload: {e}"))?;
    timers(pool, dev, 1).map_err(|e| e.to_string())?;
    pool[0].start(dev).map_err(|e| e.to_string())?;
    graph.launch().map_err(|e| format!("graph launch: {e}"))?;
    pool[0].stop(dev).map_err(|e| e.to_string())?;
    dev.synchronize().map_err(|e| e.to_string())?;
    Ok(pool[0].elapsed_ms().map_err(|e| e.to_string())? as f64 / k as f64)
}

/// `one`: a single call on one shape (what Nsight Compute profiles). Prints nothing on stdout.
pub fn one(args: &OneArgs) -> Result<(), String> {
    let (shape, variant) = args.case();
    check_shape(&shape)?;
    let dev = Device::new(args.device).map_err(|e| e.to_string())?;
    let pools = Pools::new(pool_len(std::iter::once(&shape)), 0x5eed, &[shape.dtype]);
    match shape.dtype {
        DType::BF16 => one_typed::<bf16>(&dev, &pools, &shape, &variant),
        DType::F16 => one_typed::<f16>(&dev, &pools, &shape, &variant),
        DType::F32 => one_typed::<f32>(&dev, &pools, &shape, &variant),
    }
    .map_err(|e| e.to_string())
}

fn one_typed<T: PoolElem>(
    dev: &Device,
    pools: &Pools,
    shape: &Shape,
    variant: &Variant,
) -> flashattn::Result<()> {
    let l = Layouts::new(shape, false);
    let (lq, lk) = l.lens();
    let up = |off: usize, len: usize| -> flashattn::Result<DeviceBuffer<T>> {
        let mut b = dev.alloc::<T>(len)?;
        if let Some(w) = pools.window::<T>(off, len) {
            dev.copy_to_device(w, &mut b)?;
        }
        Ok(b)
    };
    let (q, k, v) = (up(0, lq)?, up(17, lk)?, up(41, lk)?);
    let mut o = dev.alloc::<T>(lq)?;
    let p = models::problem(shape)?;
    let mut lse = dev.alloc::<f32>(p.lse_len())?;
    let opts = models::with_variant(&models::options(shape)?, variant);
    dev.attention(q.view(l.q), k.view(l.k), v.view(l.k), o.view_mut(l.o), Some(&mut lse), &opts)?;
    dev.synchronize()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shapes::{Mask, Preset, expand};

    #[test]
    fn backward_rows_carry_their_pass_and_flops() {
        let blocks = Preset::Quick.blocks();
        let case = &expand(&blocks).unwrap()[0];
        let info = RunInfo { run_id: "t".into(), device: "gpu".into(), ..Default::default() };
        let base = base_row(case, "gpu", &info);
        assert_eq!(base.pass(), "fwd");
        for v in &case.variants {
            let fwd = pass_row(&base, v, Pass::Fwd);
            assert_eq!(fwd, variant_row(&base, v), "the forward's row is the variant's");
            for (pass, factor) in [(Pass::Bwd, 2.5), (Pass::FwdBwd, 3.5)] {
                let r = pass_row(&base, v, pass);
                assert_eq!((r.status.as_str(), r.pass(), r.backend.as_str()), ("ok", pass.name(), "gpu"));
                assert_eq!((r.method.as_str(), &r.tiles), (v.method.name(), &v.tiles.map(|t| t.to_string())));
                assert_eq!(r.flops, models::flops(&case.shape) * factor);
                assert_eq!((r.key.as_str(), r.io_bytes), (base.key.as_str(), base.io_bytes));
                assert!(r.timing.is_none() && r.message.is_none() && r.bytes_compulsory.is_none());
            }
        }
        // Failed rows: every pass asked for × every variant, in the sweep's order.
        let mut rows = Vec::new();
        let mut emit = |r: Row| {
            rows.push(r);
            Ok(())
        };
        let passes = [Pass::Fwd, Pass::Bwd, Pass::FwdBwd];
        fail_rows(case, &base, &passes, &mut emit, ("oom", "allocating: no", Some(7))).unwrap();
        assert_eq!(rows.len(), 3 * case.variants.len());
        for (i, r) in rows.iter().enumerate() {
            let (pass, v) = (passes[i / case.variants.len()], &case.variants[i % case.variants.len()]);
            assert_eq!((r.pass(), r.method.as_str()), (pass.name(), v.method.name()));
            assert_eq!((r.status.as_str(), r.oom_needed_bytes), ("oom", Some(7)));
            assert_eq!(r.flops, base.flops * pass.flops_factor());
        }
    }

    #[test]
    fn backward_buffers_and_options() {
        let cases = expand(&Preset::Quick.blocks()).unwrap();
        let c = cases.iter().find(|c| c.shape.kv_heads < c.shape.heads).unwrap_or(&cases[0]);
        let l = Layouts::new(&c.shape, false);
        let (lq, lk) = l.lens();
        assert_eq!(grads_bytes(&l, 2), 2 * 2 * (lq + lk) as u64);
        let opts = models::options(&c.shape).unwrap();
        let tc = Variant { method: Method::FlashTensorCore, tiles: None };
        let standard = Variant { method: Method::Standard, tiles: None };
        assert_eq!(variant_options(&opts, &tc, Some(4)).splits, Some(4));
        assert_eq!(
            variant_options(&opts, &standard, Some(4)).splits,
            None,
            "only the tensor-core methods split"
        );
        assert_eq!(variant_options(&opts, &standard, Some(4)).method, Method::Standard);
        // Methods without a GPU backward are the library's to refuse: the row says unsupported.
        let no_backward = Error::InvalidInput(InvalidInput::Unsupported {
            method: Method::Flash,
            reason: flashattn::Reason::NoBackward,
        });
        assert_eq!(classify(&no_backward), ("unsupported", None));
    }

    #[test]
    fn score_mods_reach_every_pass_and_the_records() {
        let o = crate::shapes::Overrides {
            seqlens: Some(vec![1024]),
            softcaps: Some(vec![crate::shapes::Softcap::new(30.0).unwrap()]),
            alibi: true,
            ..Default::default()
        };
        let blocks: Vec<_> = Preset::Quick.blocks().into_iter().map(|b| o.apply(b)).collect();
        let cases = o.modify(expand(&blocks).unwrap());
        let case = &cases[0];
        assert!(case.shape.key().ends_with("/cap30/alibi"), "{}", case.shape.key());
        let info = RunInfo { run_id: "t".into(), device: "gpu".into(), ..Default::default() };
        let base = base_row(case, "gpu", &info);
        assert_eq!((base.softcap, base.alibi, base.flops), (Some(30.0), true, models::flops(&case.shape)));
        let json = serde_json::to_value(&base).unwrap();
        assert_eq!((json["softcap"].as_f64(), json["alibi"].as_bool()), (Some(30.0), Some(true)));
        let plain = serde_json::to_value(base_row(&expand(&blocks).unwrap()[0], "gpu", &info)).unwrap();
        assert!(plain.get("softcap").is_none() && plain.get("alibi").is_none(), "absent without them");
        // The same options for the forward, the backward and both: the shape's, per variant.
        let opts = models::options(&case.shape).unwrap();
        for v in &case.variants {
            let o = variant_options(&opts, v, Some(2));
            assert_eq!(o.softcap, Some(30.0));
            assert_eq!(o.alibi_slopes, Some(crate::shapes::alibi_slopes(case.shape.heads)));
            for pass in [Pass::Fwd, Pass::Bwd, Pass::FwdBwd] {
                let r = pass_row(&base, v, pass);
                assert_eq!((r.softcap, r.alibi, r.key.as_str()), (Some(30.0), true, base.key.as_str()));
            }
        }
        // A kernel that does not apply them refuses them: the row says unsupported.
        let refused = Error::InvalidInput(InvalidInput::Unsupported {
            method: Method::FlashTensorCore,
            reason: flashattn::Reason::ScoreMod,
        });
        assert_eq!(classify(&refused), ("unsupported", None));
    }

    #[test]
    fn failures_become_statuses() {
        let oom =
            Error::OutOfMemory { what: "S".into(), requested: 412, requested_gib: 0.0, free: 1, total: 2 };
        assert_eq!(classify(&oom), ("oom", Some(412)));
        let reason = flashattn::Reason::DType { dtype: DType::F32 };
        let unsupported =
            Error::InvalidInput(InvalidInput::Unsupported { method: Method::FlashTensorCore, reason });
        assert_eq!(classify(&unsupported), ("unsupported", None));
        assert_eq!(
            classify(&Error::InvalidInput(InvalidInput::HeadDim { head_dim: 300 })),
            ("invalid", None)
        );
        assert_eq!(classify(&Error::NoDriver), ("error", None));
    }

    #[test]
    fn base_rows_carry_the_shape_and_the_models() {
        let cases = expand(&Preset::Quick.blocks()).unwrap();
        let c = cases.iter().find(|c| c.shape.mask == Mask::VarlenCausal).unwrap();
        let info = RunInfo { run_id: "r".into(), device: "d".into(), commit: "c".into(), host: "h".into() };
        let r = base_row(c, "gpu", &info);
        assert_eq!(
            (r.key.as_str(), r.group.as_str(), r.mask.as_str()),
            (c.shape.key().as_str(), "varlen", "varlen-causal")
        );
        assert_eq!(r.flops, models::flops(&c.shape));
        assert_eq!(r.io_bytes, models::io_bytes(&c.shape));
        assert!(pool_len(cases.iter().map(|c| &c.shape)) >= 16_384 * 2048 + SLACK);
    }
}
