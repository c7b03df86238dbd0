//! Attention on the GPU against the f64 oracle: every method, every dtype, random shapes (the
//! CPU suite's strategies) and the tensor-core kernel's own shapes, with the same tolerance rule.
//! Outputs and log-sum-exp are poisoned with NaN before every launch and every element is
//! checked, also the ones no output position addresses (they must stay NaN).

use flashattn::{
    AttentionOptions, DType, Device, DeviceBuffer, Element, Error, InvalidInput, Layout, Method, Problem,
    Tiles, bf16, f16,
};
use flashattn_testkit::strategy::{DEFAULT_MAX_WORK, spec_with, spec_with_score_mods};
use flashattn_testkit::tolerance::check_untouched;
use flashattn_testkit::{Case, LayoutKind, Sequences, Spec, Values, check};
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::GpuTest;

pub const TESTS: &[(&str, GpuTest)] = &[
    ("attention::random_flash_f16", random::<f16, 0>),
    ("attention::random_flash_bf16", random::<bf16, 0>),
    ("attention::random_flash_f32", random::<f32, 0>),
    ("attention::random_standard_f16", random::<f16, 1>),
    ("attention::random_standard_bf16", random::<bf16, 1>),
    ("attention::random_standard_f32", random::<f32, 1>),
    ("attention::random_tensor_core_f16", random::<f16, 2>),
    ("attention::random_tensor_core_bf16", random::<bf16, 2>),
    ("attention::tensor_core_shapes_f16", tensor_core_shapes::<f16>),
    ("attention::tensor_core_shapes_bf16", tensor_core_shapes::<bf16>),
    ("attention::tensor_core_every_config", every_config),
    ("attention::deterministic_across_runs", deterministic),
    ("attention::standard_memory_wall_is_an_error", memory_wall),
    ("attention::invalid_input_writes_nothing", invalid_writes_nothing),
    ("attention::tile_overrides_checked", tile_overrides),
    ("attention::auto_picks_tensor_cores", auto_plan),
    ("attention::split_kv_f16", split_kv::<f16>),
    ("attention::split_kv_bf16", split_kv::<bf16>),
    ("attention::gqa_packing_decode", gqa_packing),
    ("attention::split_kv_without_lse", split_kv_without_lse),
    ("attention::sliding_windows_f16", sliding_windows::<f16>),
    ("attention::sliding_windows_bf16", sliding_windows::<bf16>),
    ("attention::score_modifiers_f16", score_modifiers::<f16>),
    ("attention::score_modifiers_bf16", score_modifiers::<bf16>),
    ("attention::random_score_modifiers_f16", random_score_modifiers::<f16>),
    ("attention::random_score_modifiers_bf16", random_score_modifiers::<bf16>),
    ("attention::kv_cache_f16", kv_cache::<f16>),
    ("attention::kv_cache_bf16", kv_cache::<bf16>),
    ("attention::paged_cache_f16", paged_cache::<f16>),
    ("attention::paged_cache_bf16", paged_cache::<bf16>),
    ("attention::append_kv", append_kv),
];

const METHODS: [Method; 3] = [Method::Flash, Method::Standard, Method::FlashTensorCore];

pub fn small() -> bool {
    std::env::var("FLASHATTN_TEST_SMALL").is_ok_and(|v| v == "1")
}

/// Random cases per test: `FLASHATTN_GPU_CASES`, else 48 (8 with `FLASHATTN_TEST_SMALL=1`).
fn cases() -> u32 {
    std::env::var("FLASHATTN_GPU_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(if small() {
        8
    } else {
        48
    })
}

pub fn e2s(e: Error) -> String {
    e.to_string()
}

/// Outputs of one GPU run.
pub struct Outputs<T> {
    pub out: Vec<T>,
    pub lse: Vec<f32>,
}

/// Runs `case` with `opts` on the GPU into NaN-poisoned outputs. `Ok(None)` when the method does
/// not support the case (only the tensor-core method may say so).
pub fn run<T: Element>(
    dev: &Device,
    case: &Case<T>,
    opts: &AttentionOptions,
) -> Result<Option<Outputs<T>>, String> {
    let p = &case.problem;
    let q = dev.upload(&case.q).map_err(e2s)?;
    let k = dev.upload(&case.k).map_err(e2s)?;
    let v = dev.upload(&case.v).map_err(e2s)?;
    let mut out: DeviceBuffer<T> = dev.alloc(case.out_len()).map_err(e2s)?;
    let mut lse: DeviceBuffer<f32> = dev.alloc(case.lse_len()).map_err(e2s)?;
    dev.fill_nan(&mut out).map_err(e2s)?;
    dev.fill_nan(&mut lse).map_err(e2s)?;
    let r = dev.attention(
        q.view(*p.q()),
        k.view(*p.k()),
        v.view(*p.v()),
        out.view_mut(*p.o()),
        Some(&mut lse),
        opts,
    );
    match r {
        Ok(_) => {}
        Err(Error::InvalidInput(InvalidInput::Unsupported { .. }))
            if matches!(opts.method, Method::FlashTensorCore | Method::FlashHopper) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(format!("{e}\n{case}")),
    }
    dev.synchronize().map_err(e2s)?;
    Ok(Some(Outputs { out: dev.download(&out).map_err(e2s)?, lse: dev.download(&lse).map_err(e2s)? }))
}

/// Runs and checks one case: the tolerance rule on every output and log-sum-exp element, and
/// nothing written outside the output layout.
pub fn run_and_check<T: Element>(dev: &Device, case: &Case<T>, method: Method) -> Result<bool, String> {
    let opts = AttentionOptions { method, ..case.opts.clone() };
    let Some(o) = run(dev, case, &opts)? else { return Ok(false) };
    check(case, &o.out, Some(&o.lse)).map_err(|e| format!("method {method}:\n{e}"))?;
    check_untouched(case, &o.out).map_err(|e| format!("method {method}:\n{e}"))?;
    Ok(true)
}

/// Tiles the GPU kernels accept, derived from the drawn override so that sweeps vary them (for
/// the general kernel: rows 16/32/64, keys 32…128, at most 64 keys at d > 128 so that the f32
/// tiles fit the shared memory).
fn gpu_tiles(drawn: Tiles, method: Method, head_dim: usize) -> Tiles {
    use flashattn::kernels::config::SIMT_BLOCK_M;
    use flashattn::kernels::params::SIMT_KEY_CHUNK;
    let key_steps = if head_dim > 128 { 2 } else { 4 };
    match method {
        Method::Flash => Tiles {
            block_m: drawn.block_m.map(|m| SIMT_BLOCK_M[m % SIMT_BLOCK_M.len()] as usize),
            block_n: drawn.block_n.map(|n| (SIMT_KEY_CHUNK as usize) * (1 + n % key_steps)),
        },
        _ => Tiles::default(),
    }
}

/// The head dimensions the tensor-core kernel is instantiated for (from the config table).
pub fn tc_head_dims() -> Vec<usize> {
    let mut d: Vec<usize> =
        flashattn::kernels::config::MMA_CONFIGS.iter().map(|c| c.head_dim as usize).collect();
    d.sort_unstable();
    d.dedup();
    d
}

/// The seed of this run's property tests: `FLASHATTN_GPU_SEED`, else a fresh one. Every failure
/// message names it, so a failing run replays with `FLASHATTN_GPU_SEED=<seed>`.
pub fn run_seed() -> u64 {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| {
        std::env::var("FLASHATTN_GPU_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(rand::random)
    })
}

/// A property-test runner seeded by [`run_seed`] (mixed with `salt`, so that tests draw
/// different cases): the runner draws the specs and a seed for each case's inputs.
pub fn seeded_runner(salt: u64) -> TestRunner {
    use proptest::test_runner::{RngAlgorithm, TestRng};
    let seed = run_seed() ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config { cases: cases(), failure_persistence: None, ..Config::default() };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

/// A random test: specs drawn from `specs` (with a pick in 0..6 and an input seed) by a runner
/// seeded from [`run_seed`] and `salt`; `fit` moves each spec into what the path under test runs
/// (`false`: skip it), `run` runs its case and checks it, saying whether the path ran it. A
/// failure names `what` and the seed that replays the run; with `none_ran`, a run in which no
/// case ran is that error.
pub fn run_random<T: Element>(
    salt: u64,
    specs: impl proptest::strategy::Strategy<Value = Spec>,
    what: &str,
    none_ran: Option<&str>,
    fit: impl Fn(&mut Spec, usize) -> bool,
    run: impl Fn(&Case<T>, u64) -> Result<bool, String>,
) -> Result<(), String> {
    let strategy = (specs, 0..6usize, proptest::num::u64::ANY);
    let ran = std::sync::atomic::AtomicU32::new(0);
    let result = seeded_runner(salt).run(&strategy, |(mut spec, pick, input_seed)| {
        if !fit(&mut spec, pick) {
            return Ok(());
        }
        let case = Case::<T>::random(&mut StdRng::seed_from_u64(input_seed), &spec);
        if run(&case, input_seed).map_err(TestCaseError::fail)? {
            ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    });
    result.map_err(|e| format!("{} {what}: {e}\nreplay: FLASHATTN_GPU_SEED={}", T::DTYPE, run_seed()))?;
    match none_ran {
        Some(why) if ran.into_inner() == 0 => Err(why.into()),
        _ => Ok(()),
    }
}

/// An input generator for fixed-shape tests, seeded from [`run_seed`] and a counter (so that a
/// run replays with `FLASHATTN_GPU_SEED`).
pub fn case_rng() -> StdRng {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    StdRng::seed_from_u64(run_seed() ^ n.wrapping_mul(0xD1B5_4A32_D192_ED03))
}

/// Spreads tensor-core cases over the kernel's copy paths: an instantiated head dim, the drawn
/// head dim rounded up to a multiple of 8 on 16-byte aligned layouts (padded chunks), and, with
/// `elementwise`, the spec as drawn (any head dim and layout: where rows are not 16-byte
/// aligned, the element-wise instances), in equal shares.
pub fn for_tensor_cores(spec: &mut Spec, pick: usize, elementwise: bool) {
    match pick % (2 + usize::from(elementwise)) {
        0 => {
            let dims = tc_head_dims();
            spec.head_dim = dims[(pick / 2) % dims.len()];
        }
        1 => spec.head_dim = spec.head_dim.div_ceil(8) * 8,
        _ => return,
    }
    let aligned =
        spec.head_dim.is_multiple_of(8) && matches!(spec.layout, LayoutKind::Bshd | LayoutKind::Bhsd);
    if !aligned {
        spec.layout = LayoutKind::Aligned;
    }
}

/// Random cases (the CPU suite's strategy) through one method: `M` indexes [`METHODS`].
fn random<T: Element, const M: usize>(dev: &Device) -> Result<(), String> {
    let method = METHODS[M];
    if method == Method::FlashTensorCore && T::DTYPE == DType::F32 {
        return Ok(());
    }
    let budget = if method == Method::FlashTensorCore { DEFAULT_MAX_WORK / 4 } else { DEFAULT_MAX_WORK };
    let tensor_cores = method == Method::FlashTensorCore;
    run_random::<T>(
        M as u64 * 3 + T::DTYPE as u64,
        spec_with(budget),
        &method.to_string(),
        tensor_cores.then_some("the tensor-core kernel ran none of the cases"),
        |spec, pick| {
            spec.tiles = gpu_tiles(spec.tiles, method, spec.head_dim);
            if tensor_cores {
                for_tensor_cores(spec, pick, true);
            }
            true
        },
        |case, _| run_and_check(dev, case, method),
    )
}

/// Checks that the tensor-core method refuses `spec`'s problem with `reason` (typed, before
/// anything runs); `what` names the case in the error.
fn refused_on_tensor_cores<T: Element>(
    dev: &Device,
    spec: &Spec,
    reason: flashattn::Reason,
    what: &str,
) -> Result<(), String> {
    let case = Case::<T>::random(&mut case_rng(), spec);
    let opts = AttentionOptions { method: Method::FlashTensorCore, ..case.opts.clone() };
    match dev.plan::<T>(&case.problem, &opts) {
        Err(flashattn::Error::InvalidInput(flashattn::InvalidInput::Unsupported { reason: r, .. }))
            if r == reason =>
        {
            Ok(())
        }
        other => Err(format!("{what}: expected Reason::{reason:?}, got {other:?}")),
    }
}

pub fn spec(
    sequences: Sequences,
    heads_q: usize,
    heads_k: usize,
    d: usize,
    causal: bool,
    layout: LayoutKind,
) -> Spec {
    Spec {
        sequences,
        heads_q,
        heads_k,
        head_dim: d,
        causal,
        scale: None,
        tiles: Tiles::default(),
        splits: None,
        window: flashattn::Window::default(),
        softcap: None,
        alibi_slopes: None,
        cache_seqlens: None,
        layout,
        values: Values::Normal,
    }
}

pub fn batch(b: usize, nq: usize, nk: usize) -> Sequences {
    Sequences::Batch { batch: b, seqlen_q: nq, seqlen_k: nk }
}

/// Five packed sequences of 65, 0, 129, 1 and 200 queries against `k_lens` keys (a sequence
/// without queries, one without keys when `k_lens[2]` is 0), with spare tokens after the last.
pub fn ragged(k_lens: [u32; 5]) -> Sequences {
    Sequences::VarLen { q_lens: vec![65, 0, 129, 1, 200], k_lens: k_lens.to_vec(), spare_q: 1, spare_k: 2 }
}

/// The named edge shapes the forward's and the backward's tests share, at head dim `d`, causal
/// and not: lengths that divide no tile (97), Nq < Nk and Nq > Nk (in `layouts.0` and
/// `layouts.1`), decode with GQA, varlen with empty sequences on both sides; then one causal
/// GQA shape with logits in the thousands.
pub fn edge_specs(d: usize, layouts: (LayoutKind, LayoutKind)) -> Vec<Spec> {
    let mut specs = Vec::new();
    for causal in [false, true] {
        specs.push(spec(batch(2, 97, 97), 2, 2, d, causal, LayoutKind::Bshd));
        specs.push(spec(batch(1, 130, 300), 4, 2, d, causal, layouts.0));
        specs.push(spec(batch(1, 300, 130), 3, 1, d, causal, layouts.1));
        specs.push(spec(batch(3, 1, 257), 4, 1, d, causal, LayoutKind::Bshd));
        specs.push(spec(ragged([70, 3, 0, 64, 200]), 2, 2, d, causal, LayoutKind::Bshd));
    }
    let mut s = spec(batch(1, 200, 200), 2, 1, d, true, LayoutKind::Bshd);
    s.values = Values::LargeLogits;
    specs.push(s);
    specs
}

/// The tensor-core kernel on shapes chosen to hit its edges: lengths that are not multiples of
/// the tiles (97, 1025), Nq ≠ Nk both ways with causal masks, decode (Nq = 1), GQA and MQA,
/// varlen with empty sequences, both memory orders, large logits; every instantiated head dim and
/// odd ones between them.
fn tensor_core_shapes<T: Element>(dev: &Device) -> Result<(), String> {
    use LayoutKind::{Aligned, Bhsd, Bshd, Padded};
    let mut specs = Vec::new();
    for d in tc_head_dims() {
        specs.extend(edge_specs(d, (Bshd, Bhsd)));
        for causal in [false, true] {
            specs.push(spec(batch(1, 1025, 1025), 1, 1, d, causal, Bhsd));
        }
    }
    // Head dims between the instantiated ones (padded up inside the kernel), on 16-byte aligned
    // layouts with gaps after each head.
    for d in [8, 40, 56, 80, 104, 200, 248] {
        for causal in [false, true] {
            specs.push(spec(batch(2, 97, 130), 4, 2, d, causal, Aligned));
            specs.push(spec(batch(1, 1, 257), 8, 1, d, causal, Aligned));
        }
    }
    // Rows that are not 16-byte aligned (element-wise copies): head dims that are not multiples
    // of 8 on each side of every element-wise instance, packed (Bshd/Bhsd) or with odd gaps
    // after each head, token and batch entry (Padded: a read or write past d meets the gap);
    // and a head dim of 64 whose strides are odd.
    for d in [1, 3, 17, 59, 63, 65, 111, 127, 129, 201, 255] {
        for causal in [false, true] {
            specs.push(spec(batch(2, 97, 130), 4, 2, d, causal, Bshd));
            specs.push(spec(batch(1, 130, 97), 2, 1, d, causal, Bhsd));
            specs.push(spec(batch(3, 1, 257), 8, 2, d, causal, Padded));
        }
        specs.push(spec(
            Sequences::VarLen {
                q_lens: vec![65, 0, 129, 1],
                k_lens: vec![70, 3, 0, 64],
                spare_q: 1,
                spare_k: 2,
            },
            2,
            1,
            d,
            true,
            Padded,
        ));
    }
    for causal in [false, true] {
        specs.push(spec(batch(2, 150, 203), 4, 2, 64, causal, Padded));
    }
    if small() {
        specs.retain(|s| s.head_dim <= 128);
    }
    for s in &specs {
        let case = Case::<T>::random(&mut case_rng(), s);
        if !run_and_check(dev, &case, Method::FlashTensorCore)? {
            return Err(format!("the tensor-core kernel refused a case it should run:\n{case}"));
        }
    }
    Ok(())
}

/// Every instantiated tensor-core configuration (a tile override picks each), on ragged shapes.
fn every_config(dev: &Device) -> Result<(), String> {
    // (Window instances are chosen by a window, not by tiles: `sliding_windows` runs them.)
    for c in flashattn::kernels::config::MMA_CONFIGS.into_iter().filter(|c| c.window == 0) {
        // Element-wise instances are chosen for rows that are not 16-byte aligned.
        let d = c.head_dim as usize - usize::from(c.pad == flashattn::kernels::config::PAD_ELEMENTS);
        for causal in [false, true] {
            let mut s = spec(batch(2, 150, 203), 2, 1, d, causal, LayoutKind::Bshd);
            s.tiles = Tiles { block_m: Some(c.block_m as usize), block_n: Some(c.block_n as usize) };
            let case = Case::<bf16>::random(&mut case_rng(), &s);
            let p = dev.plan::<bf16>(
                &case.problem,
                &AttentionOptions { method: Method::FlashTensorCore, ..case.opts.clone() },
            );
            let p = p.map_err(e2s)?;
            if p.tiles != Some((c.block_m as usize, c.block_n as usize)) {
                return Err(format!("override {c:?} ran {p}"));
            }
            if !run_and_check(dev, &case, Method::FlashTensorCore)? {
                return Err(format!("config {c:?} refused"));
            }
        }
    }
    Ok(())
}

/// Same inputs, same bits: each method twice (and the flash kernels with their atomics-free
/// reductions must agree with themselves exactly).
fn deterministic(dev: &Device) -> Result<(), String> {
    let s = spec(batch(2, 300, 300), 4, 2, 128, true, LayoutKind::Bshd);
    let case = Case::<bf16>::random(&mut case_rng(), &s);
    for method in METHODS {
        let opts = AttentionOptions { method, ..case.opts.clone() };
        let a = run(dev, &case, &opts)?.ok_or("unsupported")?;
        let b = run(dev, &case, &opts)?.ok_or("unsupported")?;
        let same = a.out.iter().zip(&b.out).all(|(x, y)| x.to_bits() == y.to_bits())
            && a.lse.iter().zip(&b.lse).all(|(x, y)| x.to_bits() == y.to_bits());
        if !same {
            return Err(format!("{method}: two runs on the same inputs differ"));
        }
    }
    Ok(())
}

/// Standard attention at a length whose N×N matrices cannot fit: a typed error with the bytes,
/// and the output untouched.
fn memory_wall(dev: &Device) -> Result<(), String> {
    let (n, h, d) = (1 << 17, 16, 64);
    let l = Layout::bshd(1, n, h, d);
    let len = l.required_len().unwrap_or(0);
    let q: DeviceBuffer<bf16> = dev.alloc_zeros(len).map_err(e2s)?;
    let mut out: DeviceBuffer<bf16> = dev.alloc(len).map_err(e2s)?;
    dev.fill_nan(&mut out).map_err(e2s)?;
    let opts = AttentionOptions { method: Method::Standard, ..Default::default() };
    let r = dev.attention(q.view(l), q.view(l), q.view(l), out.view_mut(l), None, &opts);
    let needed = (h * n * n) as u64 * 6;
    match r {
        Err(Error::OutOfMemory { requested, .. }) if requested == needed => {}
        other => return Err(format!("expected OutOfMemory of {needed} bytes, got {other:?}")),
    }
    let back = dev.download(&out).map_err(e2s)?;
    if !back.iter().all(|x| x.to_f32().is_nan()) {
        return Err("the refused call wrote to the output".into());
    }
    // The same shape through the flash kernel needs no such memory.
    let p = dev
        .plan::<bf16>(
            &Problem::new(l, l, l, l, [len; 4], &AttentionOptions::default()).map_err(|e| e.to_string())?,
            &AttentionOptions::default(),
        )
        .map_err(e2s)?;
    if p.scratch_bytes != 0 {
        return Err(format!("flash plan allocates {} extra bytes", p.scratch_bytes));
    }
    Ok(())
}

/// Invalid inputs are refused before any work, on every method, with nothing written.
fn invalid_writes_nothing(dev: &Device) -> Result<(), String> {
    let l = Layout::bshd(1, 64, 2, 64);
    let len = l.required_len().unwrap_or(0);
    let q = dev.upload(&vec![f16::from_f32(0.5); len]).map_err(e2s)?;
    let mut out: DeviceBuffer<f16> = dev.alloc(len).map_err(e2s)?;
    let mut lse: DeviceBuffer<f32> = dev.alloc(2 * 64).map_err(e2s)?;
    for method in METHODS {
        dev.fill_nan(&mut out).map_err(e2s)?;
        dev.fill_nan(&mut lse).map_err(e2s)?;
        let bad_scale = AttentionOptions { method, scale: Some(f32::NAN), ..Default::default() };
        let r = dev.attention(q.view(l), q.view(l), q.view(l), out.view_mut(l), Some(&mut lse), &bad_scale);
        if !matches!(r, Err(Error::InvalidInput(InvalidInput::Scale { .. }))) {
            return Err(format!("{method}: expected a scale error, got {r:?}"));
        }
        let short = Layout { seqlen: 65, ..l };
        let opts = AttentionOptions { method, ..Default::default() };
        let r =
            dev.attention(q.view(l), q.view(short), q.view(short), out.view_mut(l), Some(&mut lse), &opts);
        if !matches!(r, Err(Error::InvalidInput(InvalidInput::BufferTooSmall { tensor: "k", .. }))) {
            return Err(format!("{method}: expected BufferTooSmall for k, got {r:?}"));
        }
        // A split count out of range, for every method; more than one split for the methods
        // that do not split.
        let zero = AttentionOptions { method, splits: Some(0), ..Default::default() };
        let r = dev.attention(q.view(l), q.view(l), q.view(l), out.view_mut(l), Some(&mut lse), &zero);
        if !matches!(r, Err(Error::InvalidInput(InvalidInput::Tiles { .. }))) {
            return Err(format!("{method}: expected a split-count error, got {r:?}"));
        }
        if method != Method::FlashTensorCore {
            let two = AttentionOptions { method, splits: Some(2), ..Default::default() };
            let r = dev.attention(q.view(l), q.view(l), q.view(l), out.view_mut(l), Some(&mut lse), &two);
            if !matches!(r, Err(Error::InvalidInput(InvalidInput::Unsupported { .. }))) {
                return Err(format!("{method}: expected split-KV to be refused, got {r:?}"));
            }
        }
        let o = dev.download(&out).map_err(e2s)?;
        let s = dev.download(&lse).map_err(e2s)?;
        if !o.iter().all(|x| x.to_f32().is_nan()) || !s.iter().all(|x| x.is_nan()) {
            return Err(format!("{method}: a refused call wrote output"));
        }
    }
    Ok(())
}

/// Tile overrides: valid ones are used as given, invalid ones are errors before any launch.
fn tile_overrides(dev: &Device) -> Result<(), String> {
    let l = Layout::bshd(1, 100, 1, 100);
    let problem = Problem::new(l, l, l, l, [l.required_len().unwrap_or(0); 4], &AttentionOptions::default())
        .map_err(|e| e.to_string())?;
    let with = |method, block_m, block_n| AttentionOptions {
        method,
        tiles: Tiles { block_m: Some(block_m), block_n: Some(block_n) },
        ..Default::default()
    };
    let plan = dev.plan::<f32>(&problem, &with(Method::Flash, 16, 96)).map_err(e2s)?;
    if plan.tiles != Some((16, 96)) {
        return Err(format!("override not used: {plan}"));
    }
    for (m, n) in [(48, 64), (32, 48), (64, 1024)] {
        let r = dev.plan::<f32>(&problem, &with(Method::Flash, m, n));
        if !matches!(r, Err(Error::InvalidInput(InvalidInput::Tiles { .. }))) {
            return Err(format!("tiles {m}×{n}: expected a Tiles error, got {r:?}"));
        }
    }
    Ok(())
}

/// `Auto` runs the tensor-core kernel where it applies and the general one elsewhere.
fn auto_plan(dev: &Device) -> Result<(), String> {
    let plan_for = |dtype: DType, d: usize| -> Result<Method, String> {
        let l = Layout::bshd(2, 256, 4, d);
        let problem =
            Problem::new(l, l, l, l, [l.required_len().unwrap_or(0); 4], &AttentionOptions::default())
                .map_err(|e| e.to_string())?;
        let opts = AttentionOptions::default();
        let plan = match dtype {
            DType::F16 => dev.plan::<f16>(&problem, &opts),
            DType::BF16 => dev.plan::<bf16>(&problem, &opts),
            DType::F32 => dev.plan::<f32>(&problem, &opts),
        };
        Ok(plan.map_err(e2s)?.method)
    };
    // On sm_90 the Hopper kernel takes 32 < d ≤ 256 (rule 1); elsewhere the mma.sync kernel.
    let hopper =
        if dev.props().compute_capability == (9, 0) { Method::FlashHopper } else { Method::FlashTensorCore };
    for (dtype, d, expect) in [
        (DType::BF16, 128, hopper),
        (DType::F16, 64, hopper),
        (DType::BF16, 256, hopper),
        (DType::BF16, 192, hopper),
        (DType::BF16, 96, hopper),
        (DType::F16, 40, hopper),
        (DType::F16, 32, Method::FlashTensorCore),
        // d = 59: not a multiple of 8, rows not 16-byte aligned: the element-wise instances.
        (DType::BF16, 59, Method::FlashTensorCore),
        (DType::F32, 128, Method::Standard),
    ] {
        let got = plan_for(dtype, d)?;
        if got != expect {
            return Err(format!("{dtype} d={d}: auto chose {got}, expected {expect}"));
        }
    }
    Ok(())
}

/// Split-KV through the tensor-core kernel: split counts that do not divide the key tiles, more
/// splits than key tiles (empty splits), splits whose keys are all masked (causal with Nq > Nk:
/// the first rows see no key), causal prefill with Nq > 1, varlen with empty sequences, decode;
/// exact and padded head dims. Every split count is checked against the oracle, and the plan
/// must run the splits asked for.
fn split_kv<T: Element>(dev: &Device) -> Result<(), String> {
    use LayoutKind::{Aligned, Bhsd, Bshd};
    let varlen = || ragged([700, 3, 0, 64, 1000]);
    let mut specs = Vec::new();
    for d in [64, 128, 256, 40, 96] {
        let layout = if d % 64 == 0 { Bshd } else { Aligned };
        for causal in [false, true] {
            specs.push((spec(batch(2, 97, 1000), 2, 1, d, causal, layout), vec![1, 3, 7, 16]));
            specs.push((spec(batch(1, 5, 100), 2, 2, d, causal, layout), vec![2, 16]));
            specs.push((spec(batch(1, 300, 130), 2, 1, d, causal, Bhsd), vec![4]));
            specs.push((spec(batch(2, 200, 700), 3, 1, d, causal, layout), vec![5]));
            specs.push((spec(varlen(), 2, 2, d, causal, layout), vec![3, 9]));
            specs.push((spec(batch(3, 1, 1025), 4, 2, d, causal, layout), vec![1, 6, 17]));
        }
    }
    if small() {
        specs.retain(|(s, _)| s.head_dim <= 128);
    }
    for (mut s, splits) in specs {
        for n in splits.into_iter().map(Some).chain([None]) {
            s.splits = n;
            let case = Case::<T>::random(&mut case_rng(), &s);
            let opts = AttentionOptions { method: Method::FlashTensorCore, ..case.opts.clone() };
            let plan = dev.plan::<T>(&case.problem, &opts).map_err(e2s)?;
            if n.is_some_and(|n| plan.splits != n) {
                return Err(format!("asked for {n:?} splits, the plan runs {plan}"));
            }
            if !run_and_check(dev, &case, Method::FlashTensorCore)? {
                return Err(format!("the tensor-core kernel refused a split-KV case:\n{case}"));
            }
        }
    }
    Ok(())
}

/// Sliding windows through the tensor-core kernel, against the oracle: left-only, right-only and
/// two-sided windows (0 included: a query sees only its diagonal key), with and without the
/// causal mask (which makes `right` 0), Nq ≠ Nk both ways (rows whose window holds no key), GQA,
/// varlen with empty sequences, decode with split-KV (the planner's count and overrides that do
/// not divide the window's tiles), exact, padded and element-wise head dims. The plan must be the
/// tensor-core kernel's, and key tiles outside every row's window are never visited (checked
/// through the split count the planner derives from the window).
fn sliding_windows<T: Element>(dev: &Device) -> Result<(), String> {
    use LayoutKind::{Aligned, Bhsd, Bshd, Padded};
    let w = |left: Option<usize>, right: Option<usize>| flashattn::Window { left, right };
    let windows = [
        w(Some(0), Some(0)),
        w(Some(1), None),
        w(Some(100), None),
        w(None, Some(3)),
        w(Some(37), Some(64)),
        w(Some(200), Some(0)),
    ];
    let varlen = || ragged([700, 3, 0, 64, 200]);
    let mut specs = Vec::new();
    for (i, win) in windows.into_iter().enumerate() {
        for causal in [false, true] {
            let d = [64, 128, 256, 40, 96, 200][i % 6];
            let layout = if d % 64 == 0 { Bshd } else { Aligned };
            for mut s in [
                spec(batch(2, 300, 300), 2, 1, d, causal, layout),
                spec(batch(1, 130, 700), 4, 2, d, causal, Bhsd),
                spec(batch(1, 700, 130), 2, 2, d, causal, layout),
                spec(varlen(), 2, 1, d, causal, layout),
                spec(batch(3, 1, 3000), 8, 2, d, causal, layout),
            ] {
                s.window = win;
                specs.push(s);
            }
        }
    }
    if small() {
        specs.retain(|s| s.head_dim <= 128);
    }
    // Rows that are not 16-byte aligned have no window instance: a typed refusal, nothing run.
    let mut odd = spec(batch(1, 100, 100), 2, 1, 59, true, Padded);
    odd.window = w(Some(16), None);
    refused_on_tensor_cores::<T>(dev, &odd, flashattn::Reason::Window, "a window on element-wise rows")?;
    for mut s in specs {
        let decode = matches!(s.sequences, Sequences::Batch { seqlen_q: 1, .. });
        let splits: &[Option<usize>] =
            if decode && s.head_dim % 8 == 0 { &[None, Some(1), Some(5)] } else { &[None] };
        for &n in splits {
            s.splits = n;
            let case = Case::<T>::random(&mut case_rng(), &s);
            let plan = dev
                .plan::<T>(
                    &case.problem,
                    &AttentionOptions { method: Method::FlashTensorCore, ..case.opts.clone() },
                )
                .map_err(|e| format!("{e}\n{case}"))?;
            if let Some(n) = n
                && plan.splits != n
            {
                return Err(format!("asked for {n} splits, ran {plan}"));
            }
            if !run_and_check(dev, &case, Method::FlashTensorCore)? {
                return Err(format!("the tensor-core kernel refused a window:\n{case}"));
            }
        }
    }
    Ok(())
}

/// ALiBi slopes for `heads` query heads, BLOOM's geometric series from `base`.
pub fn alibi(heads: usize, base: f32) -> Option<Vec<f32>> {
    Some((0..heads).map(|h| base.powi(h as i32 + 1)).collect())
}

/// Softcap and ALiBi through the tensor-core kernel's masked instances, against the oracle:
/// softcap alone (30, Gemma-2's 50, and a tight 2 that bends every score), ALiBi alone, both,
/// and both with a sliding window; causal and not, Nq ≠ Nk both ways, GQA, varlen with empty
/// sequences, decode with split-KV (the planner's count and an override) and GQA packing (with
/// a softcap alone: ALiBi's bias is per head and position), exact and padded head dims, and
/// logits in the hundreds (`scale` 1), through `Method::Auto` (the Hopper kernel's masked
/// instance on sm_90 for 128+ query rows, else the tensor-core kernel's). The plan must name a
/// masked instance; rows that are not 16-byte aligned are refused as `Reason::ScoreMod`.
fn score_modifiers<T: Element>(dev: &Device) -> Result<(), String> {
    use LayoutKind::{Aligned, Bhsd, Bshd, Padded};
    type Mods = (Option<f32>, Option<Vec<f32>>, flashattn::Window);
    let none = flashattn::Window::default();
    let mods: Vec<Mods> = vec![
        (Some(30.0), None, none),
        (Some(2.0), None, none),
        (None, alibi(8, 0.5), none),
        (Some(50.0), alibi(8, 0.7), none),
        (Some(20.0), alibi(8, 0.3), flashattn::Window { left: Some(100), right: Some(7) }),
    ];
    let varlen = || ragged([700, 3, 0, 64, 200]);
    let mut specs = Vec::new();
    for (i, (cap, slopes, win)) in mods.into_iter().enumerate() {
        for causal in [false, true] {
            let d = [64, 128, 256, 40, 96][i % 5];
            let layout = if d % 64 == 0 { Bshd } else { Aligned };
            for mut s in [
                spec(batch(2, 300, 300), 2, 1, d, causal, layout),
                spec(batch(1, 130, 700), 4, 2, d, causal, Bhsd),
                spec(batch(1, 700, 130), 2, 2, d, causal, layout),
                spec(varlen(), 2, 1, d, causal, layout),
                spec(batch(3, 1, 3000), 8, 2, d, causal, layout),
            ] {
                s.softcap = cap;
                s.alibi_slopes = slopes.clone().map(|v| v[..s.heads_q].to_vec());
                s.window = win;
                if i == 1 {
                    // Raw scores in the hundreds: the softcap bends them all.
                    s.scale = Some(1.0);
                }
                specs.push(s);
            }
        }
    }
    if small() {
        specs.retain(|s| s.head_dim <= 128);
    }
    let mut odd = spec(batch(1, 100, 100), 2, 1, 59, true, Padded);
    odd.softcap = Some(30.0);
    refused_on_tensor_cores::<T>(dev, &odd, flashattn::Reason::ScoreMod, "a softcap on element-wise rows")?;
    for mut s in specs {
        let decode = matches!(s.sequences, Sequences::Batch { seqlen_q: 1, .. });
        let splits: &[Option<usize>] = if decode { &[None, Some(5)] } else { &[None] };
        for &n in splits {
            s.splits = n;
            let case = Case::<T>::random(&mut case_rng(), &s);
            let plan = dev
                .plan::<T>(&case.problem, &AttentionOptions { method: Method::Auto, ..case.opts.clone() })
                .map_err(|e| format!("{e}\n{case}"))?;
            // (Auto takes the Hopper kernel's masked instance on sm_90 for 128+ query rows.)
            let masked_method = matches!(plan.method, Method::FlashTensorCore | Method::FlashHopper);
            if !masked_method || !plan.kernel().contains("_win") {
                return Err(format!("score modifiers not on a masked instance: {plan}\n{case}"));
            }
            if decode && plan.gqa_packed != (s.alibi_slopes.is_none() && s.window.is_none()) {
                return Err(format!("GQA packing with modifiers: {plan}\n{case}"));
            }
            if !run_and_check(dev, &case, Method::Auto)? {
                return Err(format!("Auto refused score modifiers:\n{case}"));
            }
        }
    }
    Ok(())
}

/// Random cases with score modifiers (the CPU suite's strategy: softcaps in [0.5, 50), ALiBi
/// slopes, both) through the tensor-core kernel, on the head dims and 16-byte rows its masked
/// instances run.
fn random_score_modifiers<T: Element>(dev: &Device) -> Result<(), String> {
    run_random::<T>(
        200 + T::DTYPE as u64,
        spec_with_score_mods(),
        "score modifiers",
        Some("the tensor-core kernel ran none of the cases"),
        |spec, pick| {
            spec.tiles = Default::default();
            for_tensor_cores(spec, pick, false);
            true
        },
        |case, _| run_and_check(dev, case, Method::FlashTensorCore),
    )
}

/// Decoding with grouped K/V heads: query heads packed per K/V head, for group sizes 1–8 and
/// multi-query attention (one K/V head for 16 query heads), both memory orders, with and without
/// the causal flag (the same for one query) and split-KV; the plan must say it packed.
fn gqa_packing(dev: &Device) -> Result<(), String> {
    let mut specs = Vec::new();
    for group in 1..=8 {
        for layout in [LayoutKind::Bshd, LayoutKind::Bhsd] {
            specs.push(spec(batch(3, 1, 777), 2 * group, 2, 128, group % 2 == 0, layout));
        }
    }
    specs.push(spec(batch(2, 1, 2000), 16, 1, 64, false, LayoutKind::Bshd));
    specs.push(spec(batch(2, 1, 300), 32, 1, 128, true, LayoutKind::Aligned));
    specs.push(spec(batch(1, 1, 4096), 32, 8, 96, false, LayoutKind::Aligned));
    for mut s in specs {
        for splits in [Some(1), None] {
            s.splits = splits;
            let case = Case::<bf16>::random(&mut case_rng(), &s);
            let plan = dev.plan::<bf16>(&case.problem, &case.opts).map_err(e2s)?;
            let grouped = s.heads_q > s.heads_k;
            if plan.method != Method::FlashTensorCore || plan.gqa_packed != grouped {
                return Err(format!("expected the tensor-core kernel, packed = {grouped}: {plan}\n{case}"));
            }
            if !run_and_check(dev, &case, Method::Auto)? {
                return Err(format!("auto refused a decode case:\n{case}"));
            }
        }
    }
    Ok(())
}

/// The split-KV path without a log-sum-exp output (the combine then writes none): the same
/// output bits as with one, on a decode shape with GQA packing and a prefill chunk.
fn split_kv_without_lse(dev: &Device) -> Result<(), String> {
    for s in [
        spec(batch(2, 1, 3000), 8, 2, 128, false, LayoutKind::Bshd),
        spec(batch(1, 9, 2000), 2, 1, 64, true, LayoutKind::Bhsd),
    ] {
        let case = Case::<bf16>::random(&mut case_rng(), &s);
        let plan = dev.plan::<bf16>(&case.problem, &case.opts).map_err(e2s)?;
        if plan.splits < 2 {
            return Err(format!("expected a split plan: {plan}"));
        }
        let with = run(dev, &case, &case.opts)?.ok_or("unsupported")?;
        let p = &case.problem;
        let q = dev.upload(&case.q).map_err(e2s)?;
        let k = dev.upload(&case.k).map_err(e2s)?;
        let v = dev.upload(&case.v).map_err(e2s)?;
        let mut out: DeviceBuffer<bf16> = dev.alloc(case.out_len()).map_err(e2s)?;
        dev.fill_nan(&mut out).map_err(e2s)?;
        dev.attention(q.view(*p.q()), k.view(*p.k()), v.view(*p.v()), out.view_mut(*p.o()), None, &case.opts)
            .map_err(e2s)?;
        let without = dev.download(&out).map_err(e2s)?;
        if with.out.iter().zip(&without).any(|(a, b)| a.to_bits() != b.to_bits()) {
            return Err(format!("outputs differ with and without the log-sum-exp\n{case}"));
        }
        check(&case, &without, None).map_err(|e| format!("without the log-sum-exp:\n{e}"))?;
    }
    Ok(())
}

/// A K/V cache (`cache_seqlens`) under `Auto`, against the oracle: entries of every length from 0
/// to the cache's capacity (a capacity that is not a multiple of the key tiles), decode with GQA
/// packing and split-KV (the planner's splits and overrides), a 7-token chunk with the causal
/// mask aligned to the end of each entry's keys — all on the tensor-core kernel's decode
/// instances — and 130-token chunks and an odd head dim, which go to the general kernel (the
/// only other GPU kernel that reads the lengths). The cache's slots past each entry's length hold
/// NaN: a kernel that read one would show it in the output.
fn kv_cache<T: Element>(dev: &Device) -> Result<(), String> {
    use LayoutKind::{Aligned, Bshd};
    let mut specs = Vec::new();
    for d in [64, 128, 256, 40, 96, 59] {
        let layout = if d % 64 == 0 { Bshd } else { Aligned };
        let (cap, lens) = (1000, vec![0, 1, 63, 64, 65, 700, 1000]);
        for (nq, causal, heads, kv_heads, splits) in [
            (1, false, 8, 2, None),
            (1, true, 8, 8, Some(5)),
            (1, false, 4, 1, Some(1)),
            (7, true, 4, 2, None),
            (130, true, 2, 2, None),
            (130, false, 2, 1, None),
        ] {
            let mut s = spec(batch(lens.len(), nq, cap), heads, kv_heads, d, causal, layout);
            s.cache_seqlens = Some(lens.clone());
            s.splits = if d % 8 == 0 && nq <= 7 { splits } else { None };
            specs.push(s);
        }
    }
    // A single entry (B = 1): its length goes to the kernels in the launch parameters, not in a
    // device copy of `cache_seqlens` — decode with and without splits, a causal chunk, and the
    // general kernel's 130-token chunk.
    for d in [64, 128] {
        for len in [0, 1, 65, 700, 1000] {
            for (nq, causal, heads, kv_heads, splits) in [
                (1, false, 8, 2, None),
                (1, true, 8, 8, Some(5)),
                (7, true, 4, 2, None),
                (130, true, 2, 1, None),
            ] {
                let mut s = spec(batch(1, nq, 1000), heads, kv_heads, d, causal, Bshd);
                s.cache_seqlens = Some(vec![len]);
                s.splits = splits;
                specs.push(s);
            }
        }
    }
    if small() {
        specs.retain(|s| {
            s.head_dim <= 128 && matches!(s.sequences, Sequences::Batch { seqlen_q, .. } if seqlen_q <= 7)
        });
    }
    for s in &specs {
        // (`Case::random` leaves the slots past each entry's length NaN.)
        let case = Case::<T>::random(&mut case_rng(), s);
        let p = &case.problem;
        let plan = dev.plan::<T>(&case.problem, &case.opts).map_err(e2s)?;
        let decode = s.head_dim % 8 == 0 && p.q().seqlen <= 7;
        let want = if decode { Method::FlashTensorCore } else { Method::Flash };
        if plan.method != want {
            return Err(format!("a K/V cache case planned as {plan}, not on {want}:\n{case}"));
        }
        if !run_and_check(dev, &case, Method::Auto)? {
            return Err(format!("Auto refused a K/V cache case:\n{case}"));
        }
    }
    Ok(())
}

/// A paged K/V cache (`block_table`) under `Auto`, against the oracle (which reads through the
/// table): pages of 16, 64 and 256 tokens shuffled through a pool with spare pages, entries of
/// lengths 0 to the capacity (`cache_seqlens`) and without lengths (every page's tokens), decode
/// with GQA packing and split-KV, a 7-token causal chunk, single entries (B = 1, the length in
/// the launch parameters) — all on the decode instances. Unused
/// pages and the rows past each entry's length hold NaN.
fn paged_cache<T: Element>(dev: &Device) -> Result<(), String> {
    use rand::seq::SliceRandom;
    let mut rng = case_rng();
    let dims: &[usize] = if small() { &[64, 128] } else { &[64, 128, 96, 256] };
    for &d in dims {
        // (The entries `b`: a single one's length goes in the launch parameters, not copied.)
        for (page, nq, causal, heads, kv_heads, splits, with_lens, b) in [
            (16, 1, false, 8, 2, None, true, 4),
            (64, 1, true, 8, 8, Some(5), true, 4),
            (256, 1, false, 4, 1, None, false, 4),
            (16, 7, true, 4, 2, None, true, 4),
            (64, 3, false, 4, 2, Some(2), false, 4),
            (16, 1, false, 8, 2, None, true, 1),
            (16, 7, true, 4, 2, Some(3), true, 1),
            (64, 1, false, 8, 8, Some(5), true, 1),
        ] {
            let ppe = 1536usize.div_ceil(page).max(2);
            let cap = ppe * page;
            let lens: Vec<u32> = if b == 1 {
                vec![(cap / 2 + 3) as u32]
            } else {
                vec![0, 1, (cap / 2 + 3) as u32, cap as u32]
            };
            let mut s = spec(batch(b, nq, cap), heads, kv_heads, d, causal, LayoutKind::Bshd);
            s.cache_seqlens = with_lens.then(|| lens.clone());
            s.splits = splits;
            let contiguous = Case::<T>::random(&mut rng, &s);
            let spare = 3;
            let mut order: Vec<u32> = (0..(b * ppe + spare) as u32).collect();
            order.shuffle(&mut rng);
            let table = flashattn::BlockTable {
                page_size: page,
                pages_per_entry: ppe,
                pages: order[..b * ppe].to_vec().into(),
            };
            let case = contiguous
                .paged(table, b * ppe + spare)
                .map_err(|e| format!("building a paged case: {e}"))?;
            let plan = dev.plan::<T>(&case.problem, &case.opts).map_err(e2s)?;
            if plan.method != Method::FlashTensorCore {
                return Err(format!("a paged cache case planned as {plan}:\n{case}"));
            }
            let first = run_and_check(dev, &case, Method::Auto)
                .map_err(|e| format!("paged cache, page {page}, first call with its table:\n{e}"))?;
            if !first {
                return Err(format!("Auto refused a paged cache case:\n{case}"));
            }
            if d == dims[0] {
                // The device keeps the last table's copy: the same table again (kept), another
                // table over the same pool (replaces it), then the first again (copied anew).
                order.shuffle(&mut rng);
                let other =
                    flashattn::BlockTable { pages: order[..b * ppe].to_vec().into(), ..table_of(&case) };
                let other = contiguous
                    .paged(other, b * ppe + spare)
                    .map_err(|e| format!("building a paged case: {e}"))?;
                for (i, c) in [&case, &other, &case].into_iter().enumerate() {
                    let run = run_and_check(dev, c, Method::Auto).map_err(|e| {
                        let which = ["the same table again", "another table", "the first table again"][i];
                        format!("paged cache, page {page}, {which}:\n{e}")
                    })?;
                    if !run {
                        return Err(format!("Auto refused a paged cache case:\n{c}"));
                    }
                }
            }
        }
    }
    Ok(())
}

/// The block table a paged case was built with.
fn table_of<T: Element>(case: &Case<T>) -> flashattn::BlockTable {
    case.opts.block_table.clone().unwrap_or_default()
}

/// `Device::append_kv` against `cpu::append_kv` on the same data, bit for bit (a copy): f16, bf16
/// and f32; contiguous caches and paged pools of 16-token pages in shuffled order; entries of
/// length 0, appends that cross page boundaries and fill an entry to its capacity; strided new
/// tokens; then a cache that would overflow is refused with nothing written.
fn append_kv(dev: &Device) -> Result<(), String> {
    append_kv_of::<f16>(dev)?;
    append_kv_of::<bf16>(dev)?;
    append_kv_of::<f32>(dev)
}

fn append_kv_of<T: Element>(dev: &Device) -> Result<(), String> {
    use flashattn::{BlockTable, Layout, cpu};
    use rand::Rng;
    use rand::seq::SliceRandom;
    let mut rng = case_rng();
    let (b, hk, d, page, ppe) = (3usize, 2usize, 40usize, 16usize, 4usize);
    let cap = page * ppe;
    for paged in [false, true] {
        for (n, lens) in [(1usize, vec![0u32, 15, 63]), (5, vec![0, 13, 59]), (20, vec![44, 0, 30])] {
            let (cache_l, table) = if paged {
                let mut order: Vec<u32> = (0..(b * ppe + 2) as u32).collect();
                order.shuffle(&mut rng);
                order.truncate(b * ppe);
                (
                    Layout::bshd(b * ppe + 2, page, hk, d),
                    Some(BlockTable { page_size: page, pages_per_entry: ppe, pages: order.into() }),
                )
            } else {
                (Layout::bshd(b, cap, hk, d), None)
            };
            // New tokens laid out (b, h, n, d): strided as (b, n, h, d).
            let new_l = Layout {
                batch: b,
                seqlen: n,
                heads: hk,
                head_dim: d,
                batch_stride: hk * n * d,
                seq_stride: d,
                head_stride: n * d,
            };
            let rand_vec = |rng: &mut StdRng, len: usize| -> Vec<T> {
                (0..len).map(|_| T::from_f32(rng.random_range(-1.0..1.0))).collect()
            };
            let (mut kc, mut vc) = (
                rand_vec(&mut rng, cache_l.required_len().unwrap_or(0)),
                rand_vec(&mut rng, cache_l.required_len().unwrap_or(0)),
            );
            let (kn, vn) = (
                rand_vec(&mut rng, new_l.required_len().unwrap_or(0)),
                rand_vec(&mut rng, new_l.required_len().unwrap_or(0)),
            );
            let mut kc_gpu = dev.upload(&kc).map_err(e2s)?;
            let mut vc_gpu = dev.upload(&vc).map_err(e2s)?;
            let (kn_gpu, vn_gpu) = (dev.upload(&kn).map_err(e2s)?, dev.upload(&vn).map_err(e2s)?);
            if lens.iter().any(|&l| l as usize + n > cap) {
                return Err("test case overflows".into());
            }
            dev.append_kv(
                kc_gpu.view_mut(cache_l),
                vc_gpu.view_mut(cache_l),
                kn_gpu.view(new_l),
                vn_gpu.view(new_l),
                &lens,
                table.as_ref(),
            )
            .map_err(e2s)?;
            cpu::append_kv(
                cpu::HostTensorMut { data: &mut kc, layout: cache_l },
                cpu::HostTensorMut { data: &mut vc, layout: cache_l },
                cpu::HostTensor { data: &kn, layout: new_l },
                cpu::HostTensor { data: &vn, layout: new_l },
                &lens,
                table.as_ref(),
            )
            .map_err(e2s)?;
            let bits = |x: &[T]| x.iter().map(|v| v.to_f32().to_bits()).collect::<Vec<_>>();
            let (kg, vg) = (dev.download(&kc_gpu).map_err(e2s)?, dev.download(&vc_gpu).map_err(e2s)?);
            if bits(&kg) != bits(&kc) || bits(&vg) != bits(&vc) {
                return Err(format!(
                    "{} append (paged {paged}, n {n}, lens {lens:?}) differs from the CPU's",
                    T::DTYPE
                ));
            }
            // One token more than the fullest entry has room for: refused, nothing written.
            let full: Vec<u32> = vec![(cap - n + 1) as u32, 0, 0];
            let before = dev.download(&kc_gpu).map_err(e2s)?;
            let r = dev.append_kv(
                kc_gpu.view_mut(cache_l),
                vc_gpu.view_mut(cache_l),
                kn_gpu.view(new_l),
                vn_gpu.view(new_l),
                &full,
                table.as_ref(),
            );
            if !matches!(r, Err(Error::InvalidInput(InvalidInput::CacheFull { entry: 0, .. }))) {
                return Err(format!("an overflowing append was not refused: {r:?}"));
            }
            if bits(&dev.download(&kc_gpu).map_err(e2s)?) != bits(&before) {
                return Err("a refused append wrote to the cache".into());
            }
        }
    }
    Ok(())
}
