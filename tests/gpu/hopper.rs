//! The Hopper kernel (`Method::FlashHopper`: TMA, `wgmma`) against the f64 oracle: its edge
//! shapes and the CPU suite's random strategy, restricted to what it runs (head dims that are
//! multiples of 8 up to 256, 16-byte rows; fixed-length and variable-length batches), its masked instances
//! (sliding windows, softcap, ALiBi) included. On a device without sm_90 the tests check that
//! the planner refuses the method instead.

use flashattn::{AttentionOptions, Device, Error, InvalidInput, Method, Reason, bf16, f16};
use flashattn::{Element, Problem};
use flashattn_testkit::strategy::{DEFAULT_MAX_WORK, spec_with, spec_with_score_mods};
use flashattn_testkit::{Case, LayoutKind, Values, check};

use crate::GpuTest;
use crate::attention::{alibi, batch, case_rng, e2s, edge_specs, run_and_check, run_random, small, spec};

pub const TESTS: &[(&str, GpuTest)] = &[
    ("hopper::shapes_f16", shapes::<f16>),
    ("hopper::shapes_bf16", shapes::<bf16>),
    ("hopper::random_f16", random::<f16>),
    ("hopper::random_bf16", random::<bf16>),
    ("hopper::masked_f16", masked::<f16>),
    ("hopper::masked_bf16", masked::<bf16>),
    ("hopper::random_score_modifiers_f16", random_score_modifiers::<f16>),
    ("hopper::random_score_modifiers_bf16", random_score_modifiers::<bf16>),
    ("hopper::recurring_tensors", recurring_tensors),
    ("hopper::persistent_f16", persistent::<f16>),
    ("hopper::persistent_bf16", persistent::<bf16>),
    ("hopper::rows192_f16", rows192::<f16>),
    ("hopper::rows192_bf16", rows192::<bf16>),
    ("hopper::wide_keys_f16", wide_keys::<f16>),
    ("hopper::wide_keys_bf16", wide_keys::<bf16>),
];

/// Whether this device runs the Hopper kernel; if not, checks that the planner says so.
fn on_hopper(dev: &Device) -> Result<bool, String> {
    if dev.props().compute_capability == (9, 0) {
        return Ok(true);
    }
    let p = Problem::new(
        flashattn::Layout::bshd(1, 128, 1, 64),
        flashattn::Layout::bshd(1, 128, 1, 64),
        flashattn::Layout::bshd(1, 128, 1, 64),
        flashattn::Layout::bshd(1, 128, 1, 64),
        [8192; 4],
        &AttentionOptions::default(),
    )
    .map_err(|e| e.to_string())?;
    let opts = AttentionOptions { method: Method::FlashHopper, ..Default::default() };
    match dev.plan::<bf16>(&p, &opts) {
        Err(Error::InvalidInput(InvalidInput::Unsupported { reason: Reason::Target { .. }, .. })) => {
            Ok(false)
        }
        other => Err(format!("a device without sm_90 planned the Hopper kernel: {other:?}")),
    }
}

/// Head dims of the Hopper instances and padded ones below them (each instance runs the 64
/// head dims above the previous one's).
const DIMS: [usize; 14] = [64, 128, 192, 256, 8, 32, 40, 96, 104, 120, 136, 160, 200, 224];

/// Edge shapes (the tensor-core kernel's): lengths that are not multiples of the 128-row tiles,
/// Nq ≠ Nk both ways with causal masks, decode, GQA and MQA, variable-length batches with empty
/// sequences, both memory orders and 16-byte gaps, large logits; then longer sequences.
fn shapes<T: Element>(dev: &Device) -> Result<(), String> {
    use LayoutKind::{Aligned, Bhsd, Bshd};
    if !on_hopper(dev)? {
        return Ok(());
    }
    let mut specs = Vec::new();
    for d in DIMS {
        let layouts = if d % 16 == 0 { (Bshd, Bhsd) } else { (Aligned, Bhsd) };
        specs.extend(edge_specs(d, layouts));
        for causal in [false, true] {
            specs.push(spec(batch(1, 1025, 1025), 2, 1, d, causal, Bhsd));
            if !small() && d % 64 == 0 {
                specs.push(spec(batch(1, 700, 1500), 4, 2, d, causal, Bshd));
            }
        }
    }
    for d in [128, 256] {
        let mut s = spec(batch(1, 700, 700), 2, 2, d, false, Bshd);
        s.values = Values::LargeLogits;
        specs.push(s);
    }
    // Causal one-tile grids over many (head, sequence) pairs: 24 with GQA and partial tiles, 34
    // with Nq > Nk (rows that see no key), a masked instance (softcap) on 20.
    specs.push(spec(batch(3, 300, 300), 8, 2, 256, true, Bshd));
    specs.push(spec(batch(17, 150, 90), 2, 1, 192, true, Bhsd));
    let mut capped = spec(batch(2, 200, 260), 10, 5, 128, true, Bshd);
    capped.softcap = Some(30.0);
    specs.push(capped);
    for s in &specs {
        let case = Case::<T>::random(&mut case_rng(), s);
        if !run_and_check(dev, &case, Method::FlashHopper)? {
            return Err(format!("the Hopper kernel refused a case it should run:\n{case}"));
        }
    }
    Ok(())
}

/// The masked instances: sliding windows (left-only, right-only, two-sided, 0-wide: only the
/// diagonal key), softcap (30, and 2 with raw scores in the hundreds), ALiBi, both, both with a
/// window; causal and not, Nq ≠ Nk both ways (rows whose window holds no key), GQA, exact and
/// padded head dims. The plan must name the masked instance (for softcaps, the one without the
/// overlap).
fn masked<T: Element>(dev: &Device) -> Result<(), String> {
    use LayoutKind::{Aligned, Bhsd, Bshd};
    if !on_hopper(dev)? {
        return Ok(());
    }
    let w = |left: Option<usize>, right: Option<usize>| flashattn::Window { left, right };
    let none = flashattn::Window::default();
    type Mods = (Option<f32>, Option<Vec<f32>>, flashattn::Window);
    let cases: Vec<Mods> = vec![
        (None, None, w(Some(0), Some(0))),
        (None, None, w(Some(100), None)),
        (None, None, w(None, Some(3))),
        (None, None, w(Some(200), Some(70))),
        (Some(30.0), None, none),
        (Some(2.0), None, none),
        (None, alibi(4, 0.5), none),
        (Some(50.0), alibi(4, 0.7), none),
        (Some(20.0), alibi(4, 0.3), w(Some(150), Some(7))),
    ];
    let mut specs = Vec::new();
    for (i, (cap, slopes, win)) in cases.into_iter().enumerate() {
        let d = [64, 128, 192, 256, 96, 40][i % 6];
        let layout = if d % 64 == 0 { Bshd } else { Aligned };
        for causal in [false, true] {
            for mut s in [
                spec(batch(2, 300, 300), 2, 1, d, causal, layout),
                spec(batch(1, 130, 700), 4, 2, d, causal, Bhsd),
                spec(batch(1, 700, 130), 2, 2, d, causal, layout),
            ] {
                s.softcap = cap;
                s.alibi_slopes = slopes.clone().map(|v| v[..s.heads_q].to_vec());
                s.window = win;
                if i == 5 {
                    s.scale = Some(1.0);
                }
                specs.push(s);
            }
        }
    }
    if small() {
        specs.retain(|s| s.head_dim <= 128);
    }
    for s in &specs {
        let case = Case::<T>::random(&mut case_rng(), s);
        let opts = AttentionOptions { method: Method::FlashHopper, ..case.opts.clone() };
        let plan = dev.plan::<T>(&case.problem, &opts).map_err(|e| format!("{e}\n{case}"))?;
        // Softcaps take the masked instance without the intra-warpgroup overlap where one is
        // instantiated (head dims up to 192).
        let want = if s.softcap.is_some() && s.head_dim <= 192 { "_win_softcap" } else { "_win" };
        if !plan.kernel().ends_with(want) {
            return Err(format!("not the masked instance: {plan}\n{case}"));
        }
        if !run_and_check(dev, &case, Method::FlashHopper)? {
            return Err(format!("the Hopper kernel refused a masked case:\n{case}"));
        }
    }
    Ok(())
}

/// Random cases with score modifiers (softcaps in [0.5, 50), ALiBi slopes, both) through the
/// Hopper kernel's masked instances, moved into what it runs.
fn random_score_modifiers<T: Element>(dev: &Device) -> Result<(), String> {
    if !on_hopper(dev)? {
        return Ok(());
    }
    run_random::<T>(
        60 + T::DTYPE as u64,
        spec_with_score_mods(),
        "flash-hopper, score modifiers",
        Some("the Hopper kernel ran none of the cases"),
        |spec, _| fit_hopper(spec),
        |case, _| run_and_check(dev, case, Method::FlashHopper),
    )
}

/// The persistent instances (a grid of one block an SM walking the query tiles): problems
/// without a window or modifier (the static instances; causal cases the dynamic ones, whose
/// tiles come from a counter), with more query tiles than the device has SMs —
/// one tile more (a single block walks two), and several tiles a block with partial last query
/// and key tiles, Nq ≠ Nk both ways, GQA and MQA, both memory orders and 16-byte gaps, padded
/// head dims of each instance, large logits. The plan must say it runs the persistent grid.
fn persistent<T: Element>(dev: &Device) -> Result<(), String> {
    use LayoutKind::{Aligned, Bhsd, Bshd};
    if !on_hopper(dev)? {
        return Ok(());
    }
    let sm = dev.props().sm_count as usize;
    // Query heads (a multiple of `group`) that give `b` sequences of `nq` queries more 128-row
    // query tiles than SMs.
    let heads = |b: usize, nq: usize, group: usize| (sm / (b * nq.div_ceil(128)) + 1).div_ceil(group) * group;
    let mut specs = vec![
        spec(batch(1, 128, 128), sm + 1, sm + 1, 64, false, Bshd),
        spec(batch(2, 1100, 300), heads(2, 1100, 4), heads(2, 1100, 4) / 4, 128, false, Bshd),
        spec(batch(1, 384, 200), heads(1, 384, 1), heads(1, 384, 1), 192, false, Bhsd),
        spec(batch(3, 129, 513), heads(3, 129, 1), heads(3, 129, 1), 40, false, Aligned),
        spec(batch(1, 256, 333), heads(1, 256, 1), 1, 96, false, Bhsd),
        spec(batch(1, 100, 257), heads(1, 100, 2), heads(1, 100, 2) / 2, 160, false, Aligned),
    ];
    let mut large = spec(batch(2, 300, 250), heads(2, 300, 1), heads(2, 300, 1), 128, false, Bshd);
    large.values = Values::LargeLogits;
    specs.push(large);
    // Causal: the dynamic instances (tiles from a counter, longest first; d ≤ 128), Nq ≠ Nk both
    // ways (Nq > Nk: rows that see no key), GQA, padded head dims.
    specs.extend([
        spec(batch(2, 1100, 700), heads(2, 1100, 4), heads(2, 1100, 4) / 4, 128, true, Bshd),
        spec(batch(1, 384, 1000), heads(1, 384, 1), heads(1, 384, 1), 64, true, Bhsd),
        spec(batch(3, 300, 200), heads(3, 300, 1), heads(3, 300, 1), 96, true, Aligned),
    ]);
    if small() {
        // (One case of each instance: d = 64, 128, 192, and the causal d = 128.)
        let causal = specs.iter().position(|s| s.causal);
        let first_causal = causal.map(|i| specs[i].clone());
        specs.truncate(3);
        specs.extend(first_causal);
    }
    for s in &specs {
        let case = Case::<T>::random(&mut case_rng(), s);
        let opts = AttentionOptions { method: Method::FlashHopper, ..case.opts.clone() };
        let plan = dev.plan::<T>(&case.problem, &opts).map_err(|e| format!("{e}\n{case}"))?;
        let want = if s.causal { "_persistent_causal" } else { "_persistent" };
        if !plan.kernel().ends_with(want) || !plan.why.iter().any(|w| w.starts_with("persistent grid")) {
            return Err(format!("not the persistent grid: {plan}\n{case}"));
        }
        if !run_and_check(dev, &case, Method::FlashHopper)? {
            return Err(format!("the Hopper kernel refused a persistent case:\n{case}"));
        }
    }
    Ok(())
}

/// The 192-row instances at d ≤ 64 (three consumer warpgroups, a tile override away): one
/// query tile a block (partial query and key tiles, Nq ≠ Nk both ways with causal masks, GQA,
/// variable lengths with empty sequences, padded head dims), and the persistent grids, static
/// and causal (tiles from a counter). The plan must name the 192-row instance it runs.
fn rows192<T: Element>(dev: &Device) -> Result<(), String> {
    use LayoutKind::{Aligned, Bhsd, Bshd};
    if !on_hopper(dev)? {
        return Ok(());
    }
    let sm = dev.props().sm_count as usize;
    let heads = |b: usize, nq: usize, group: usize| (sm / (b * nq.div_ceil(192)) + 1).div_ceil(group) * group;
    let mut specs = vec![
        (spec(batch(2, 300, 250), 4, 2, 64, false, Bshd), ""),
        (spec(batch(1, 500, 200), 2, 1, 64, true, Bhsd), ""),
        (spec(batch(1, 100, 700), 3, 3, 40, true, Aligned), ""),
        (spec(crate::attention::ragged([70, 1, 0, 300, 193]), 2, 2, 64, true, Bshd), ""),
        (spec(batch(2, 1000, 900), heads(2, 1000, 2), heads(2, 1000, 2) / 2, 64, false, Bshd), "_persistent"),
        (spec(batch(1, 600, 1000), heads(1, 600, 1), heads(1, 600, 1), 56, true, Bhsd), "_persistent_causal"),
        (
            spec(batch(2, 1000, 500), heads(2, 1000, 4), heads(2, 1000, 4) / 4, 64, true, Bshd),
            "_persistent_causal",
        ),
    ];
    let mut large = spec(batch(1, 400, 300), 2, 2, 64, false, Bshd);
    large.values = Values::LargeLogits;
    specs.push((large, ""));
    if small() {
        // (One causal case of each kind: one tile a block, and the counter's grid.)
        specs = vec![specs[1].clone(), specs[5].clone()];
    }
    run_with_tiles::<T>(dev, flashattn::Tiles { block_m: Some(192), block_n: None }, "_m192_", specs)
}

/// The key tiles other than a head dim's default, a tile override away (one query tile a
/// block): 176 keys at d = 128, 112 at d = 192, 64 at d = 256 (and its default 80). Partial query and key tiles (no sequence here is a multiple of either), Nq ≠ Nk
/// both ways with causal masks, GQA, variable lengths with empty sequences, padded head dims,
/// large logits.
fn wide_keys<T: Element>(dev: &Device) -> Result<(), String> {
    use LayoutKind::{Aligned, Bhsd, Bshd};
    if !on_hopper(dev)? {
        return Ok(());
    }
    let kinds = [
        (128, 96, 176, "_n176_"),
        (192, 160, 112, "_n112_"),
        (256, 200, 80, "_n80_"),
        (256, 200, 64, "_d256_m128_n64_"),
    ];
    for (d, pad, block_n, fragment) in kinds {
        let mut specs = vec![
            (spec(batch(2, 300, 250), 4, 2, d, false, Bshd), ""),
            (spec(batch(1, 500, 1000), 2, 1, pad, true, Bhsd), ""),
            (spec(batch(1, 700, 100), 3, 3, d, true, Aligned), ""),
            (spec(crate::attention::ragged([70, 1, 0, 300, 193]), 2, 2, d, true, Bshd), ""),
            (spec(batch(2, 1000, 1000), 8, 2, d - 8, false, Bshd), ""),
        ];
        let mut large = spec(batch(1, 400, 353), 2, 2, d, false, Bshd);
        large.values = Values::LargeLogits;
        specs.push((large, ""));
        if small() {
            specs = vec![specs[1].clone(), specs[3].clone()];
        }
        let tiles = flashattn::Tiles { block_m: Some(128), block_n: Some(block_n) };
        run_with_tiles::<T>(dev, tiles, fragment, specs)?;
    }
    Ok(())
}

/// Runs each spec with a tile override on the Hopper kernel against the oracle; the plan's
/// kernel must contain `fragment` and end with the spec's kind (`""`: not a persistent one).
fn run_with_tiles<T: Element>(
    dev: &Device,
    tiles: flashattn::Tiles,
    fragment: &str,
    mut specs: Vec<(flashattn_testkit::Spec, &str)>,
) -> Result<(), String> {
    for (s, kind) in &mut specs {
        s.tiles = tiles;
        let case = Case::<T>::random(&mut case_rng(), s);
        let opts = AttentionOptions { method: Method::FlashHopper, ..case.opts.clone() };
        let plan = dev.plan::<T>(&case.problem, &opts).map_err(|e| format!("{e}\n{case}"))?;
        let name = plan.kernel();
        let persistent = name.ends_with("_persistent") || name.ends_with("_persistent_causal");
        if !name.contains(fragment) || (kind.is_empty() && persistent) || !name.ends_with(*kind) {
            return Err(format!("not the {fragment} instance wanted ({kind:?}): {plan}\n{case}"));
        }
        if !run_and_check(dev, &case, Method::FlashHopper)? {
            return Err(format!("the Hopper kernel refused a {fragment} case:\n{case}"));
        }
    }
    Ok(())
}

/// Moves a drawn spec into what the Hopper kernel runs (head dim a multiple of 8 up to 256,
/// 16-byte rows, no cache, split or tile override); `false` for the specs it cannot. Variable-
/// length batches stay: their packed tokens past the last sequence are NaN, so a partial last
/// key tile whose borrowed V rows were not zeroed fails the check.
fn fit_hopper(spec: &mut flashattn_testkit::Spec) -> bool {
    spec.head_dim = spec.head_dim.div_ceil(8).min(32) * 8;
    spec.cache_seqlens = None;
    spec.splits = None;
    spec.tiles = Default::default();
    if !matches!(spec.layout, LayoutKind::Bshd | LayoutKind::Bhsd) {
        spec.layout = LayoutKind::Aligned;
    }
    true
}

/// The CPU suite's random strategy through the Hopper kernel, each drawn spec moved into what
/// it runs (head dim a multiple of 8 up to 256, 16-byte rows, no window or score modifier); at
/// least some cases must run.
fn random<T: Element>(dev: &Device) -> Result<(), String> {
    if !on_hopper(dev)? {
        return Ok(());
    }
    run_random::<T>(
        40 + T::DTYPE as u64,
        spec_with(DEFAULT_MAX_WORK / 4),
        "flash-hopper",
        Some("the Hopper kernel ran none of the cases"),
        |spec, _| {
            spec.window = flashattn::Window::default();
            spec.softcap = None;
            spec.alibi_slopes = None;
            fit_hopper(spec)
        },
        |case, _| run_and_check(dev, case, Method::FlashHopper),
    )
}

/// The same device buffers called again and again with new data, alternating between two
/// shapes on them (the first sighting of each tensor-map set is copied for its call, the second
/// kept on the device, later ones read the kept copy): every call matches its own inputs.
fn recurring_tensors(dev: &Device) -> Result<(), String> {
    use flashattn::DeviceBuffer;
    if !on_hopper(dev)? {
        return Ok(());
    }
    let specs = [
        spec(batch(2, 300, 300), 4, 2, 128, true, LayoutKind::Bshd),
        spec(batch(2, 150, 300), 4, 2, 128, false, LayoutKind::Bshd),
    ];
    let cases: Vec<Case<bf16>> = specs.iter().map(|s| Case::random(&mut case_rng(), s)).collect();
    let len = |f: fn(&Case<bf16>) -> usize| cases.iter().map(f).max().unwrap_or(0);
    let mut q: DeviceBuffer<bf16> = dev.alloc(len(|c| c.q.len())).map_err(e2s)?;
    let mut k: DeviceBuffer<bf16> = dev.alloc(len(|c| c.k.len())).map_err(e2s)?;
    let mut v: DeviceBuffer<bf16> = dev.alloc(len(|c| c.v.len())).map_err(e2s)?;
    let mut out: DeviceBuffer<bf16> = dev.alloc(len(|c| c.out_len())).map_err(e2s)?;
    let mut lse: DeviceBuffer<f32> = dev.alloc(len(|c| c.lse_len())).map_err(e2s)?;
    for round in 0..8 {
        let which = round % 2;
        let case = Case::<bf16>::random(&mut case_rng(), &specs[which]);
        let p = &case.problem;
        let pad = |host: &[bf16], buf: &mut DeviceBuffer<bf16>| {
            let mut full = host.to_vec();
            full.resize(buf.len(), bf16::from_f32(f32::NAN));
            dev.copy_to_device(&full, buf)
        };
        pad(&case.q, &mut q).map_err(e2s)?;
        pad(&case.k, &mut k).map_err(e2s)?;
        pad(&case.v, &mut v).map_err(e2s)?;
        dev.fill_nan(&mut out).map_err(e2s)?;
        dev.fill_nan(&mut lse).map_err(e2s)?;
        let opts = AttentionOptions { method: Method::FlashHopper, ..case.opts.clone() };
        dev.attention(
            q.view(*p.q()),
            k.view(*p.k()),
            v.view(*p.v()),
            out.view_mut(*p.o()),
            Some(&mut lse),
            &opts,
        )
        .map_err(|e| format!("round {round}: {e}"))?;
        let got = dev.download(&out).map_err(e2s)?;
        let got_lse = dev.download(&lse).map_err(e2s)?;
        check(&case, &got[..case.out_len()], Some(&got_lse[..case.lse_len()]))
            .map_err(|e| format!("round {round} (shape {which}):\n{e}"))?;
    }
    Ok(())
}
