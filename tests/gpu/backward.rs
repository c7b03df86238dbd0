//! The GPU backward pass (`Device::attention_backward`) against the f64 gradient oracle under
//! FlashAttention's gradient rule ([`flashattn_testkit::grad::check_gradients`]): the forward
//! runs on the GPU (its O and log-sum-exp feed the backward), dO is fresh random, dQ/dK/dV are
//! poisoned with NaN before the launch, every addressed element is checked, every element no
//! layout addresses must still be NaN, and rows that see no key must have dQ exactly 0.

use flashattn::kernels::config::{BWD_CONFIGS, bwd_default, bwd_window};
use flashattn::kernels::params::BWD_BLOCK_M;
use flashattn::{
    AttentionOptions, DType, Device, DeviceBuffer, DeviceGradients, Element, Error, InvalidInput, Method,
    Problem, Reason, SavedForBackward, Tiles, bf16, f16,
};
use flashattn_testkit::grad::{
    attention_backward_f64, baseline_backward, check_gradients, for_each_gradient,
};
use flashattn_testkit::oracle::widen;
use flashattn_testkit::strategy::{DEFAULT_MAX_WORK, spec_with, spec_with_score_mods};
use flashattn_testkit::{Case, LayoutKind, Sequences, Spec, check};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::GpuTest;
use crate::attention::{
    alibi, batch, case_rng, edge_specs, for_tensor_cores, run_random, run_seed, small, spec,
};

pub const TESTS: &[(&str, GpuTest)] = &[
    ("backward::shapes_f16", shapes::<f16>),
    ("backward::shapes_bf16", shapes::<bf16>),
    ("backward::random_f16", random::<f16>),
    ("backward::random_bf16", random::<bf16>),
    ("backward::random_score_modifiers_f16", random_score_modifiers::<f16>),
    ("backward::random_score_modifiers_bf16", random_score_modifiers::<bf16>),
    ("backward::refusals_write_nothing", refusals),
    ("backward::deterministic_bit_identical", deterministic),
];

fn e2s(e: Error) -> String {
    e.to_string()
}

/// The head dims the backward runs (multiples of 8 up to its largest instance).
fn max_head_dim() -> usize {
    flashattn::kernels::config::BWD_CONFIGS.iter().map(|c| c.head_dim as usize).max().unwrap_or(0)
}

/// The backward of `p` (`bufs`: Q, K, V, O, dO) into fresh dQ, dK, dV buffers poisoned with NaN
/// (so that every element a kernel should write is checked, and a refusal can be seen to write
/// nothing), from the forward's log-sum-exp or from a training forward's saved state: the call's
/// result and the three buffers.
fn backward_into_nan<T: Element>(
    dev: &Device,
    p: &Problem,
    [q, k, v, o, d_o]: [&DeviceBuffer<T>; 5],
    from: From<'_, T>,
    opts: &AttentionOptions,
) -> Result<(flashattn::Result<flashattn::Plan>, [DeviceBuffer<T>; 3]), String> {
    let mut grads: [DeviceBuffer<T>; 3] = [
        dev.alloc(q.len()).map_err(e2s)?,
        dev.alloc(k.len()).map_err(e2s)?,
        dev.alloc(v.len()).map_err(e2s)?,
    ];
    for b in &mut grads {
        dev.fill_nan(b).map_err(e2s)?;
    }
    let [dq, dk, dv] = &mut grads;
    let g = DeviceGradients { dq: dq.view_mut(*p.q()), dk: dk.view_mut(*p.k()), dv: dv.view_mut(*p.v()) };
    let (q, k, v, o, d_o) =
        (q.view(*p.q()), k.view(*p.k()), v.view(*p.v()), o.view(*p.o()), d_o.view(*p.o()));
    let r = match from {
        From::Lse(lse) => dev.attention_backward(q, k, v, o, lse, d_o, g, opts),
        From::Saved(saved) => dev.attention_backward_saved(q, k, v, o, saved, d_o, g, opts),
    };
    Ok((r, grads))
}

/// What a backward starts from.
enum From<'a, T> {
    /// The forward's log-sum-exp (`Device::attention_backward`).
    Lse(&'a DeviceBuffer<f32>),
    /// A training forward's saved state (`Device::attention_backward_saved`).
    Saved(&'a SavedForBackward<T>),
}

/// Which forward feeds a backward test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Forward {
    /// `Device::attention` with the tensor-core kernel (as the backward's `opts` say), then
    /// `Device::attention_backward` from its log-sum-exp.
    Lse,
    /// `Device::attention_for_backward` with `Auto` (the Hopper kernel's training instance where
    /// it runs the problem: the residuals), its output checked by the forward's rule, then
    /// `Device::attention_backward_saved`.
    Saved,
}

/// Forward and backward of `case` on the GPU; checks the rule, zero dQ on rows without keys,
/// NaN left where no gradient layout points. `Ok(None)` when the backward refuses the case as
/// unsupported; otherwise the worst rule ratio and whether the backward read a training
/// forward's residuals.
fn run_backward<T: Element>(
    dev: &Device,
    case: &Case<T>,
    seed: u64,
    forward: Forward,
) -> Result<Option<(f64, bool)>, String> {
    let p = &case.problem;
    let opts = AttentionOptions { method: Method::FlashTensorCore, ..case.opts.clone() };
    let mut rng = StdRng::seed_from_u64(seed);
    let q = dev.upload(&case.q).map_err(e2s)?;
    let k = dev.upload(&case.k).map_err(e2s)?;
    let v = dev.upload(&case.v).map_err(e2s)?;
    let mut out: DeviceBuffer<T> = dev.alloc(case.out_len()).map_err(e2s)?;
    let mut lse: DeviceBuffer<f32> = dev.alloc(case.lse_len()).map_err(e2s)?;
    let mut saved = dev.alloc_saved::<T>(*p.o(), case.lse_len()).map_err(e2s)?;
    dev.fill_nan(&mut out).map_err(e2s)?;
    // (A tile override names a backward instance: the forward runs its own default tiles.)
    let forward_opts = AttentionOptions { tiles: Default::default(), ..opts.clone() };
    let (qv, kv, vv) = (q.view(*p.q()), k.view(*p.k()), v.view(*p.v()));
    match forward {
        Forward::Lse => dev
            .attention(qv, kv, vv, out.view_mut(*p.o()), Some(&mut lse), &forward_opts)
            .map(drop)
            .map_err(|e| format!("forward: {e}\n{case}"))?,
        Forward::Saved => {
            let auto = AttentionOptions { method: Method::Auto, ..forward_opts };
            dev.attention_for_backward(qv, kv, vv, out.view_mut(*p.o()), &mut saved, &auto)
                .map_err(|e| format!("training forward: {e}\n{case}"))?;
            dev.synchronize().map_err(e2s)?;
            let (o, l) = (dev.download(&out).map_err(e2s)?, dev.download(saved.lse()).map_err(e2s)?);
            check(case, &o, Some(&l)).map_err(|e| format!("training forward:\n{e}"))?;
        }
    }
    // dO: random where O is addressed, NaN elsewhere (a kernel that reads past the layout
    // poisons its gradients).
    let mut d_o_host: Vec<T> = vec![T::from_f32(f32::NAN); case.out_len()];
    flashattn_testkit::case::for_each_output(p, |_, i| {
        d_o_host[i] = T::from_f32(rng.random_range(-1.0..1.0))
    });
    let d_o = dev.upload(&d_o_host).map_err(e2s)?;
    let from = match forward {
        Forward::Lse => From::Lse(&lse),
        Forward::Saved => From::Saved(&saved),
    };
    let (r, [dq, dk, dv]) = backward_into_nan(dev, p, [&q, &k, &v, &out, &d_o], from, &opts)?;
    let residuals = match r {
        Ok(plan) => plan.residuals,
        Err(Error::InvalidInput(InvalidInput::Unsupported { .. })) => return Ok(None),
        Err(e) => return Err(format!("backward ({forward:?}): {e}\n{case}")),
    };
    if residuals != (forward == Forward::Saved && saved.has_residuals()) {
        return Err(format!(
            "the backward's plan says residuals = {residuals} after a {forward:?} forward\n{case}"
        ));
    }
    let path = if residuals { "from the training forward's residuals" } else { "from the log-sum-exp" };
    dev.synchronize().map_err(e2s)?;
    let got =
        [dev.download(&dq).map_err(e2s)?, dev.download(&dk).map_err(e2s)?, dev.download(&dv).map_err(e2s)?];
    let reference =
        attention_backward_f64(p, &widen(&case.q), &widen(&case.k), &widen(&case.v), &widen(&d_o_host));
    let baseline = baseline_backward(p, &case.q, &case.k, &case.v, &d_o_host);
    let worst = check_gradients(p, [&got[0], &got[1], &got[2]], &reference, &baseline)
        .map_err(|e| format!("backward {path}: {e}\n{case}"))?;
    // Rows that see no key: dQ exactly 0.
    let mut bad = None;
    flashattn_testkit::case::for_each_row(p, |c, row| {
        if case.reference.row_keys[row] == 0 && bad.is_none() {
            let o = p.q().offset(c.b, c.s, c.h);
            if got[0][o..o + p.head_dim()].iter().any(|x| x.to_f32() != 0.0) {
                bad = Some(format!("backward {path}: row {row} sees no key but its dq is not 0\n{case}"));
            }
        }
    });
    if let Some(b) = bad {
        return Err(b);
    }
    // Everything no gradient layout addresses is still NaN.
    let mut addressed = [vec![false; got[0].len()], vec![false; got[1].len()], vec![false; got[2].len()]];
    for_each_gradient(p, |t, i| addressed[t][i] = true);
    for (t, (g, a)) in got.iter().zip(&addressed).enumerate() {
        if let Some(i) = (0..g.len()).find(|&i| !a[i] && !g[i].to_f32().is_nan()) {
            return Err(format!(
                "backward {path}: {} [{i}] is written but no layout addresses it\n{case}",
                ["dq", "dk", "dv"][t]
            ));
        }
    }
    Ok(Some((worst, residuals)))
}

/// Both forwards of [`Forward`] on one case: the worst rule ratio of the backward from each
/// (`None` when the backward refuses the case), and whether the second read residuals.
fn run_both<T: Element>(dev: &Device, case: &Case<T>, seed: u64) -> Result<Option<(f64, f64, bool)>, String> {
    let Some((lse, _)) = run_backward(dev, case, seed, Forward::Lse)? else { return Ok(None) };
    let Some((saved, residuals)) = run_backward(dev, case, seed, Forward::Saved)? else {
        return Err(format!("the backward ran a case from the log-sum-exp but refused it saved\n{case}"));
    };
    Ok(Some((lse, saved, residuals)))
}

/// Named shapes at the edges: lengths that divide no tile, Nq ≠ Nk both ways with causal
/// masks (rows without keys), decode, GQA and MQA, varlen with empty sequences, both memory
/// orders and 16-byte-aligned gaps, logits in the thousands; every backward head dim and odd ones.
fn shapes<T: Element>(dev: &Device) -> Result<(), String> {
    use LayoutKind::{Aligned, Bhsd, Bshd};
    let mut specs = Vec::new();
    let dims: Vec<usize> = [8, 32, 40, 64, 96, 128].into_iter().filter(|&d| d <= max_head_dim()).collect();
    for &d in &dims {
        specs.extend(edge_specs(d, (Bhsd, Aligned)));
    }
    // The column-group instance (d = 256, two warpgroups on the same keys, 128 columns each):
    // its own head dim and padded ones, all its edge shapes for 256.
    let wide: Vec<usize> = [256, 200, 136].into_iter().filter(|&d| d <= max_head_dim()).collect();
    for (i, &d) in wide.iter().enumerate() {
        let edges = edge_specs(d, (Bshd, Aligned));
        let n = if i == 0 { edges.len() } else { 4 };
        specs.extend(edges.into_iter().take(n));
    }
    if !small() {
        specs.push(spec(batch(1, 1025, 1025), 2, 2, 128, true, Bhsd));
        specs.push(spec(batch(2, 513, 1000), 8, 2, 64, false, Bshd));
    }
    // Sliding windows (the window instances): left-only, right-only, two-sided and 0-wide, with
    // and without the causal mask, Nq ≠ Nk both ways, GQA, varlen with empty sequences.
    let w = |left: Option<usize>, right: Option<usize>| flashattn::Window { left, right };
    for (i, win) in [
        w(Some(0), Some(0)),
        w(Some(5), None),
        w(None, Some(9)),
        w(Some(70), Some(33)),
        w(Some(200), Some(0)),
    ]
    .into_iter()
    .enumerate()
    {
        // (The two-sided window also on the widest instance. The 0-wide, two-sided and
        // (200, 0) windows also at d = 128, whose instance's block of two 64-key groups meets
        // tiles that see only one of them: at the diagonal and at a window's far edge.)
        let d = if i == 3 && !wide.is_empty() { wide[0] } else { dims[i % dims.len()] };
        let skips = [0, 3, 4].contains(&i) && max_head_dim() >= 128;
        for (causal, d) in [(false, d), (true, d)]
            .into_iter()
            .chain(skips.then_some([(false, 128), (true, 128)]).into_iter().flatten())
        {
            for mut s in [
                spec(batch(2, 300, 300), 4, 2, d, causal, Bshd),
                spec(batch(1, 130, 500), 2, 1, d, causal, Bhsd),
                spec(batch(1, 500, 130), 2, 2, d, causal, Aligned),
                spec(
                    Sequences::VarLen {
                        q_lens: vec![65, 0, 129, 1],
                        k_lens: vec![300, 3, 0, 64],
                        spare_q: 1,
                        spare_k: 2,
                    },
                    2,
                    1,
                    d,
                    causal,
                    Bshd,
                ),
            ] {
                s.window = win;
                specs.push(s);
            }
        }
    }
    // Windows over many key tiles (each query tile's dQ gathered from up to seven key tiles):
    // causal (600, 0) with GQA at d = 128, a two-sided (300, 200) window without the mask at
    // d = 64, Nq ≠ Nk.
    if !small() {
        for (win, d, causal, seqs) in [
            (w(Some(600), Some(0)), 128, true, batch(2, 2000, 2000)),
            (w(Some(300), Some(200)), 64, false, batch(1, 1500, 1800)),
        ] {
            let mut s = spec(seqs, 4, 2, d.min(max_head_dim()), causal, Bshd);
            s.window = win;
            specs.push(s);
        }
    }
    // Score modifiers (the masked instances): softcap alone (a tight 2 with raw scores in the
    // tens: every score bent), ALiBi alone, both, both with a window; GQA, Nq ≠ Nk, varlen.
    let none = flashattn::Window::default();
    for (i, (cap, slopes, win)) in [
        (Some(30.0), None, none),
        (Some(2.0), None, none),
        (None, alibi(4, 0.5), none),
        (Some(50.0), alibi(4, 0.7), w(Some(70), Some(33))),
    ]
    .into_iter()
    .enumerate()
    {
        // (Softcap with ALiBi and a window also on the widest instance.)
        let d = if i == 3 && !wide.is_empty() { wide[0] } else { dims[(i + 2) % dims.len()] };
        for causal in [false, true] {
            for mut s in [
                spec(batch(2, 300, 300), 4, 2, d, causal, Bshd),
                spec(batch(1, 500, 130), 2, 2, d, causal, Aligned),
                spec(
                    Sequences::VarLen {
                        q_lens: vec![65, 0, 129],
                        k_lens: vec![300, 3, 64],
                        spare_q: 1,
                        spare_k: 2,
                    },
                    2,
                    1,
                    d,
                    causal,
                    Bhsd,
                ),
            ] {
                s.softcap = cap;
                s.alibi_slopes = slopes.clone().map(|v| v[..s.heads_q].to_vec());
                s.window = win;
                if i == 1 {
                    s.scale = Some(0.5);
                }
                specs.push(s);
            }
        }
    }
    // The main kernel's key-major grid (more than 16 (K/V head, sequence) pairs with a causal
    // mask, plain and ALiBi instances: x = pair in the group, y = key tile, z = group): plain
    // causal with GQA (24 pairs in groups of 12) at d = 64, 128 and 256, ALiBi alone (its
    // instance), and a variable-length batch with an empty sequence (20 pairs in groups of 10);
    // beside them a window on 34 pairs (the window instances stay head-major).
    for d in [64, 128, 256].into_iter().filter(|&d| d <= max_head_dim()) {
        specs.push(spec(batch(3, 200, 300), 16, 8, d, true, Bshd));
    }
    let mut with_alibi = spec(batch(3, 260, 200), 8, 8, 128.min(max_head_dim()), true, Bhsd);
    with_alibi.alibi_slopes = alibi(8, 0.5);
    specs.push(with_alibi);
    let mut windowed = spec(batch(17, 90, 150), 2, 2, 64, true, Aligned);
    windowed.window = w(Some(40), Some(0));
    specs.push(windowed);
    // (And at d = 128, where a window without modifiers runs the window-only instance on
    // sm_90a: before session 32 the planner gave it the key-major grid, which it does not read.)
    if max_head_dim() >= 128 {
        let mut windowed = spec(batch(17, 200, 260), 4, 2, 128, true, Bshd);
        windowed.window = w(Some(100), Some(0));
        specs.push(windowed);
    }
    // The d = 64 window walk's per-tile dQ conversion (sm_90a, a 16 MiB accumulator or more:
    // the conversion waits for each query tile's own key blocks, `BwdParams::dq_ready`):
    // queries many, keys few (the oracle's cost), so that most query tiles have no visitor (the
    // bottom-right mask leaves the first Nq − Nk rows without keys) and the others one to
    // three; two-sided without the mask at d = 64, and causal at d = 128 (the window-only
    // instance, whose conversion waits for the grid: the same shape, the other path).
    if max_head_dim() >= 128 {
        let mut windowed = spec(batch(1, 2048, 256), 16, 2, 128, true, Bshd);
        windowed.window = w(Some(100), Some(0));
        specs.push(windowed);
    }
    let mut windowed = spec(batch(1, 4096, 520), 16, 8, 64, false, Bshd);
    windowed.window = w(Some(300), Some(50));
    specs.push(windowed);
    specs.push(spec(
        Sequences::VarLen {
            q_lens: vec![65, 0, 129, 1, 40],
            k_lens: vec![100, 3, 0, 64, 200],
            spare_q: 1,
            spare_k: 2,
        },
        8,
        4,
        64,
        true,
        Bshd,
    ));
    // The variants a tile override selects (instances after the first of their head dim): the
    // edge shapes of a head dim they run, and d = 64's two-block variant on one of 40.
    for (i, c) in BWD_CONFIGS.iter().enumerate() {
        // (The ALiBi and window-only instances are no tile override's: Auto takes them for ALiBi
        // alone and for windows without modifiers, which the score-modifier and window cases
        // draw.)
        if c.window >= 2 {
            continue;
        }
        let default = if c.window == 1 { bwd_window(c.head_dim) } else { bwd_default(c.head_dim) };
        if default == Some(i) || c.head_dim as usize > max_head_dim() {
            continue;
        }
        for d in [c.head_dim as usize, c.head_dim as usize - 24] {
            for mut s in edge_specs(d, (Bshd, Aligned)) {
                s.tiles = Tiles { block_m: Some(BWD_BLOCK_M as usize), block_n: Some(c.block_n() as usize) };
                specs.push(s);
            }
        }
    }
    let (mut worst, mut worst_saved, mut with_residuals, mut masked_residuals) = (0.0f64, 0.0f64, 0, 0);
    for (i, s) in specs.iter().enumerate() {
        let case = Case::<T>::random(&mut case_rng(), s);
        let masked = s.window != none || s.softcap.is_some() || s.alibi_slopes.is_some();
        match run_both(dev, &case, run_seed() ^ i as u64)? {
            Some((w, ws, r)) => {
                worst = worst.max(w);
                worst_saved = worst_saved.max(ws);
                with_residuals += r as usize;
                masked_residuals += (r && masked) as usize;
            }
            None => return Err(format!("the backward refused a case it should run:\n{case}")),
        }
    }
    eprintln!(
        "backward shapes {}: worst rule ratio {worst:.3} from the log-sum-exp, {worst_saved:.3} from the saved \
         state ({with_residuals} of {} cases from the training forward's residuals, {masked_residuals} of them \
         masked)",
        T::DTYPE,
        specs.len()
    );
    expect_residuals(dev, with_residuals)?;
    // (The masked training instances: windows and score modifiers from their residuals too.)
    expect_residuals(dev, masked_residuals)
}

/// On a device with the Hopper kernel's training instances, some cases must have run the
/// backward from their residuals (else the path went untested).
fn expect_residuals(dev: &Device, with_residuals: usize) -> Result<(), String> {
    let hopper = dev.props().ptx_target == "sm_90a";
    if hopper && with_residuals == 0 {
        return Err("no case ran the backward from a training forward's residuals".into());
    }
    Ok(())
}

/// Random cases with score modifiers (softcaps in [0.5, 50), ALiBi slopes, both), made to fit
/// the tensor cores.
fn random_score_modifiers<T: Element>(dev: &Device) -> Result<(), String> {
    run_random::<T>(
        300 + T::DTYPE as u64,
        spec_with_score_mods(),
        "backward, score modifiers",
        Some("the backward ran none of the cases"),
        |spec, pick| {
            spec.tiles = Default::default();
            spec.splits = None;
            for_tensor_cores(spec, pick, false);
            spec.head_dim = spec.head_dim.min(max_head_dim());
            true
        },
        |case, input_seed| Ok(run_backward(dev, case, input_seed ^ 1, Forward::Lse)?.is_some()),
    )
}

/// Random cases (the CPU suite's strategy, made to fit the tensor cores), each from the
/// log-sum-exp and from a training forward's saved state.
fn random<T: Element>(dev: &Device) -> Result<(), String> {
    let residual_cases = std::sync::atomic::AtomicU32::new(0);
    run_random::<T>(
        100 + T::DTYPE as u64,
        spec_with(DEFAULT_MAX_WORK / 4),
        "backward",
        Some("the backward ran none of the cases"),
        |spec, pick| {
            spec.tiles = Default::default();
            spec.splits = None;
            spec.window = Default::default();
            // (The backward copies 16-byte chunks: no element-wise path.)
            for_tensor_cores(spec, pick, false);
            spec.head_dim = spec.head_dim.min(max_head_dim());
            true
        },
        |case, input_seed| {
            let r = run_both(dev, case, input_seed ^ 1)?;
            if r.is_some_and(|r| r.2) {
                residual_cases.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(r.is_some())
        },
    )?;
    // (Few random shapes reach the Hopper kernel — 128 query rows or more, head dims above 32 —
    // so this is reported, not required; the named shapes require it.)
    eprintln!(
        "backward random {}: {} cases from the training forward's residuals",
        T::DTYPE,
        residual_cases.into_inner()
    );
    Ok(())
}

/// What the backward cannot run is a typed error, and nothing is written.
fn refusals(dev: &Device) -> Result<(), String> {
    let try_case = |s: &Spec, method: Method| -> Result<Reason, String> {
        let case = Case::<bf16>::random(&mut case_rng(), s);
        let p = &case.problem;
        let opts = AttentionOptions { method, ..case.opts.clone() };
        let up = |x: &[bf16]| dev.upload(x).map_err(e2s);
        let (q, k, v) = (up(&case.q)?, up(&case.k)?, up(&case.v)?);
        let o = up(&vec![bf16::ZERO; case.out_len()])?;
        let d_o = up(&vec![bf16::ONE; case.out_len()])?;
        let lse: DeviceBuffer<f32> = dev.alloc(case.lse_len()).map_err(e2s)?;
        let (r, grads) = backward_into_nan(dev, p, [&q, &k, &v, &o, &d_o], From::Lse(&lse), &opts)?;
        dev.synchronize().map_err(e2s)?;
        for b in &grads {
            if dev.download(b).map_err(e2s)?.iter().any(|x| !x.to_f32().is_nan()) {
                return Err(format!("a refused backward wrote its outputs\n{case}"));
            }
        }
        match r {
            Err(Error::InvalidInput(InvalidInput::Unsupported { reason, .. })) => Ok(reason),
            other => Err(format!("expected a refusal, got {other:?}")),
        }
    };
    let base = spec(batch(1, 40, 40), 2, 2, 64, false, LayoutKind::Bshd);
    // A head dim no instance pads to (the backward's copies are 16-byte rows: multiples of 8).
    let mut odd = base.clone();
    odd.head_dim = 252;
    if !matches!(try_case(&odd, Method::Auto)?, Reason::HeadDim { .. }) {
        return Err("a head dim that is not a multiple of 8 must be Reason::HeadDim".into());
    }
    // A window on rows that are not 16-byte aligned (the backward has no element-wise path).
    let mut window = base.clone();
    window.window = flashattn::Window { left: Some(4), right: None };
    window.layout = LayoutKind::Padded;
    if !matches!(try_case(&window, Method::Auto)?, Reason::Alignment { .. }) {
        return Err("a window on unaligned rows must be Reason::Alignment".into());
    }
    for m in [Method::Flash, Method::Standard] {
        if try_case(&base, m)? != Reason::NoBackward {
            return Err(format!("{m} must be Reason::NoBackward"));
        }
    }
    // f32 has no tensor-core backward.
    let p = Case::<f32>::random(&mut case_rng(), &base).problem;
    let layouts = [("d_o", p.o()), ("dq", p.q()), ("dk", p.k()), ("dv", p.v())];
    match flashattn::plan_backward(dev.props(), DType::F32, &p, &AttentionOptions::default(), layouts) {
        Err(InvalidInput::Unsupported { reason: Reason::DType { .. }, .. }) => {}
        other => return Err(format!("f32 backward: expected Reason::DType, got {other:?}")),
    }
    // The f16 plan names f16 kernels.
    let f16_plan =
        flashattn::plan_backward(dev.props(), DType::F16, &p, &AttentionOptions::default(), layouts)
            .map_err(|e| e.to_string())?;
    if f16_plan.launches.iter().any(|l| format!("{:?}", l.kind).contains("bf16")) {
        return Err(format!("the f16 plan launches bf16 kernels: {f16_plan}"));
    }
    saved_state_checked(dev)
}

/// A backward from a saved state that holds no forward, or the forward of another problem, is
/// `InvalidInput::NotSaved`, with nothing written.
fn saved_state_checked(dev: &Device) -> Result<(), String> {
    let s = spec(batch(1, 200, 200), 2, 2, 64, false, LayoutKind::Bshd);
    let case = Case::<bf16>::random(&mut case_rng(), &s);
    let p = &case.problem;
    let up = |x: &[bf16]| dev.upload(x).map_err(e2s);
    let (q, k, v) = (up(&case.q)?, up(&case.k)?, up(&case.v)?);
    let o = up(&vec![bf16::ZERO; case.out_len()])?;
    let mut o_fwd = up(&vec![bf16::ZERO; case.out_len()])?;
    let d_o = up(&vec![bf16::ONE; case.out_len()])?;
    let mut saved = dev.alloc_saved::<bf16>(*p.o(), case.lse_len()).map_err(e2s)?;
    let expect_refusal = |saved: &SavedForBackward<bf16>, opts: &AttentionOptions, what: &str| {
        let (r, grads) = backward_into_nan(dev, p, [&q, &k, &v, &o, &d_o], From::Saved(saved), opts)?;
        dev.synchronize().map_err(e2s)?;
        for b in &grads {
            if dev.download(b).map_err(e2s)?.iter().any(|x| !x.to_f32().is_nan()) {
                return Err(format!("a refused backward ({what}) wrote its outputs"));
            }
        }
        match r {
            Err(Error::InvalidInput(InvalidInput::NotSaved { .. })) => Ok(()),
            other => Err(format!("{what}: expected InvalidInput::NotSaved, got {other:?}")),
        }
    };
    let opts = AttentionOptions::default();
    expect_refusal(&saved, &opts, "no forward yet")?;
    let causal = AttentionOptions { causal: true, ..opts.clone() };
    dev.attention_for_backward(
        q.view(*p.q()),
        k.view(*p.k()),
        v.view(*p.v()),
        o_fwd.view_mut(*p.o()),
        &mut saved,
        &causal,
    )
    .map_err(e2s)?;
    expect_refusal(&saved, &opts, "the saved forward was causal, the backward is not")
}

/// `deterministic: true`: dQ, dK and dV bit-identical across 10 runs on the suite's kinds of
/// shapes (many key tiles per query tile, causal, GQA, varlen with empty sequences), and still
/// within the gradient rule.
fn deterministic(dev: &Device) -> Result<(), String> {
    use LayoutKind::{Bhsd, Bshd};
    let mut specs = vec![
        spec(batch(2, 300, 1000), 4, 2, 64, false, Bshd),
        spec(batch(1, 777, 777), 2, 1, 128, true, Bhsd),
        spec(
            Sequences::VarLen {
                q_lens: vec![65, 0, 129, 1, 500],
                k_lens: vec![700, 3, 0, 64, 500],
                spare_q: 1,
                spare_k: 2,
            },
            2,
            2,
            32,
            true,
            Bshd,
        ),
    ];
    // A sliding window: the turn counters start at each query tile's first key tile.
    let mut windowed = spec(batch(2, 600, 700), 4, 2, 64, true, Bshd);
    windowed.window = flashattn::Window { left: Some(150), right: None };
    specs.insert(1, windowed);
    // d = 64's two-warpgroup block (a tile override).
    let mut two_groups = spec(batch(2, 500, 900), 4, 2, 64, false, Bshd);
    two_groups.tiles = Tiles { block_m: Some(BWD_BLOCK_M as usize), block_n: Some(128) };
    specs.insert(2, two_groups);
    // d = 256's column groups: each warpgroup adds its two dQ panels in the tile's turn.
    if max_head_dim() >= 256 {
        specs.insert(3, spec(batch(1, 200, 330), 4, 2, 256, true, Bshd));
    }
    if small() {
        specs.truncate(4);
    }
    for s in &specs {
        let mut case = Case::<bf16>::random(&mut case_rng(), s);
        case.opts.deterministic = true;
        // Correct first (this also checks the rule in deterministic mode)…
        if run_both(dev, &case, run_seed())?.is_none() {
            return Err(format!("the deterministic backward refused a case it should run:\n{case}"));
        }
        // …then the same inputs ten times.
        let p = &case.problem;
        let opts = AttentionOptions { method: Method::FlashTensorCore, ..case.opts.clone() };
        let up = |x: &[bf16]| dev.upload(x).map_err(e2s);
        let (q, k, v) = (up(&case.q)?, up(&case.k)?, up(&case.v)?);
        let mut out: DeviceBuffer<bf16> = dev.alloc(case.out_len()).map_err(e2s)?;
        let mut lse: DeviceBuffer<f32> = dev.alloc(case.lse_len()).map_err(e2s)?;
        // (The forward with its own tiles: a tile override names a backward instance.)
        dev.attention(
            q.view(*p.q()),
            k.view(*p.k()),
            v.view(*p.v()),
            out.view_mut(*p.o()),
            Some(&mut lse),
            &AttentionOptions { tiles: Default::default(), ..opts.clone() },
        )
        .map_err(e2s)?;
        let mut rng = case_rng();
        let d_o = up(&(0..case.out_len())
            .map(|_| bf16::from_f32(rng.random_range(-1.0..1.0)))
            .collect::<Vec<_>>())?;
        let mut first: Option<[Vec<u16>; 3]> = None;
        for run in 0..10 {
            let (r, [dq, dk, dv]) =
                backward_into_nan(dev, p, [&q, &k, &v, &out, &d_o], From::Lse(&lse), &opts)?;
            r.map_err(e2s)?;
            let bits = |b: &DeviceBuffer<bf16>| -> Result<Vec<u16>, String> {
                Ok(dev.download(b).map_err(e2s)?.iter().map(|x| x.to_bits()).collect())
            };
            let got = [bits(&dq)?, bits(&dk)?, bits(&dv)?];
            match &first {
                None => first = Some(got),
                Some(f) => {
                    for (t, (a, b)) in f.iter().zip(&got).enumerate() {
                        if let Some(i) = (0..a.len()).find(|&i| a[i] != b[i]) {
                            return Err(format!(
                                "run {run}: {}[{i}] differs from run 0 ({:#06x} vs {:#06x})\n{case}",
                                ["dq", "dk", "dv"][t],
                                b[i],
                                a[i]
                            ));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
