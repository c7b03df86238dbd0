//! Context-parallel (ring) attention on every GPU of the machine (at least two; with fewer these
//! tests are listed as ignored): random inputs cut into zigzag shards, the ring's gathered
//! output and log-sum-exp checked against the f64 oracle by the tolerance rule, and compared
//! with single-GPU attention on the whole sequence (the ring merges in f32, so it must not be
//! less accurate); the refusals; many calls in a row without a hang.

use std::time::Duration;

use flashattn::context_parallel::{Ring, Shard};
use flashattn::{
    AttentionOptions, Device, DeviceBuffer, Element, Error, InvalidInput, Layout, RingError, bf16, f16,
};
use flashattn_testkit::shard::{shard, unshard};
use flashattn_testkit::tolerance::check;
use flashattn_testkit::{Case, LayoutKind, Report};

use crate::GpuTest;
use crate::attention::{batch, case_rng, e2s, run, small, spec};

pub const TESTS: &[(&str, GpuTest)] = &[
    ("context_parallel::shards_f16", shards::<f16>),
    ("context_parallel::shards_bf16", shards::<bf16>),
    ("context_parallel::refusals", refusals),
    ("context_parallel::many_calls", many_calls),
];

/// How long a test waits for the ring before calling it hung.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A ring over every GPU.
fn ring() -> Result<Ring, String> {
    let n = Device::count().map_err(e2s)?;
    Ring::new((0..n).map(Device::new).collect::<Result<Vec<_>, _>>().map_err(e2s)?).map_err(e2s)
}

/// One rank's device buffers.
struct RankBufs<T> {
    q: DeviceBuffer<T>,
    k: DeviceBuffer<T>,
    v: DeviceBuffer<T>,
    out: DeviceBuffer<T>,
    lse: DeviceBuffer<f32>,
    layouts: [Layout; 2],
}

/// Cuts `case` (a `bshd` batch) into the ring's shards on their devices; outputs NaN.
fn upload<T: Element>(ring: &Ring, case: &Case<T>, kv_bhsd: bool) -> Result<Vec<RankBufs<T>>, String> {
    let p = &case.problem;
    let ranks = ring.ranks();
    (0..ranks)
        .map(|r| {
            let dev = ring.device(r).ok_or("no device")?;
            let (q, lq) = shard(&case.q, p.q(), r, ranks, false);
            let (k, lk) = shard(&case.k, p.k(), r, ranks, kv_bhsd);
            let (v, _) = shard(&case.v, p.v(), r, ranks, kv_bhsd);
            let mut out = dev.alloc::<T>(q.len()).map_err(e2s)?;
            let mut lse = dev.alloc::<f32>(lq.batch * lq.heads * lq.seqlen).map_err(e2s)?;
            dev.fill_nan(&mut out).map_err(e2s)?;
            dev.fill_nan(&mut lse).map_err(e2s)?;
            Ok(RankBufs {
                q: dev.upload(&q).map_err(e2s)?,
                k: dev.upload(&k).map_err(e2s)?,
                v: dev.upload(&v).map_err(e2s)?,
                out,
                lse,
                layouts: [lq, lk],
            })
        })
        .collect()
}

fn shard_views<T>(bufs: &mut [RankBufs<T>]) -> Vec<Shard<'_, T>> {
    bufs.iter_mut()
        .map(|b| Shard {
            q: b.q.view(b.layouts[0]),
            k: b.k.view(b.layouts[1]),
            v: b.v.view(b.layouts[1]),
            out: b.out.view_mut(b.layouts[0]),
            lse: Some(&mut b.lse),
        })
        .collect()
}

/// Downloads every rank's output and log-sum-exp into the whole sequence's layout.
fn gather<T: Element>(
    ring: &Ring,
    case: &Case<T>,
    bufs: &[RankBufs<T>],
) -> Result<(Vec<T>, Vec<f32>), String> {
    let p = &case.problem;
    let mut out = vec![T::from_f32(f32::NAN); case.out_len()];
    let mut lse = vec![f32::NAN; case.lse_len()];
    for (r, b) in bufs.iter().enumerate() {
        let dev = ring.device(r).ok_or("no device")?;
        let (o, l) = (dev.download(&b.out).map_err(e2s)?, dev.download(&b.lse).map_err(e2s)?);
        unshard(&o, &b.layouts[0], &l, &mut out, p.o(), &mut lse, r, ring.ranks());
    }
    Ok((out, lse))
}

/// Single-GPU attention on the whole case (the suite's own run: NaN-poisoned outputs), checked.
fn single<T: Element>(dev: &Device, case: &Case<T>) -> Result<Report, String> {
    let o = run(dev, case, &case.opts)?.ok_or_else(|| format!("single GPU refused the case\n{case}"))?;
    check(case, &o.out, Some(&o.lse)).map_err(|e| format!("single GPU:\n{e}"))
}

/// Random shapes through the ring: causal and not, MHA, GQA and MQA, head dims of the Hopper
/// and the `mma.sync` kernels, chunks that are not multiples of the tiles, K/V in both memory
/// orders. Each against the oracle, and against single-GPU attention's error.
fn shards<T: Element>(dev: &Device) -> Result<(), String> {
    let ring = ring()?;
    let ranks = ring.ranks();
    // (batch, chunk tokens, query heads, K/V heads, head dim, causal, K/V in bhsd order)
    let mut shapes = vec![
        (2, 64, 4, 2, 128, true, false),
        (2, 64, 4, 2, 128, false, true),
        (1, 200, 4, 4, 64, true, true),
        (1, 200, 2, 1, 64, false, false),
        (1, 96, 4, 2, 96, true, false),
        (1, 130, 2, 2, 256, true, false),
        (1, 72, 4, 1, 32, true, true),
    ];
    if !small() {
        shapes.push((1, 512, 4, 2, 128, true, false));
        shapes.push((1, 512, 4, 2, 128, false, false));
    }
    for (b, chunk, hq, hk, d, causal, kv_bhsd) in shapes {
        let n = 2 * ranks * chunk;
        let case =
            Case::<T>::random(&mut case_rng(), &spec(batch(b, n, n), hq, hk, d, causal, LayoutKind::Bshd));
        let want = single(dev, &case)?;
        let mut bufs = upload(&ring, &case, kv_bhsd)?;
        let plan =
            ring.attention(&mut shard_views(&mut bufs), &case.opts).map_err(|e| format!("{e}\n{case}"))?;
        ring.synchronize(TIMEOUT).map_err(e2s)?;
        let (out, lse) = gather(&ring, &case, &bufs)?;
        let got = check(&case, &out, Some(&lse)).map_err(|e| format!("{ranks} GPUs:\n{e}"))?;
        let (e_ring, e_one, atol) = (got.output.err, want.output.err, got.output.atol);
        let method = plan.step_plans.first().map(|p| p.method.name()).unwrap_or("-");
        eprintln!(
            "context_parallel {} b{b} n{n} h{hq}/{hk} d{d} causal {causal} ({method}): err {e_ring:.3e} on {ranks} GPUs, \
             {e_one:.3e} on one; lse {:.3e} / {:.3e}",
            T::DTYPE,
            got.lse_err,
            want.lse_err
        );
        // No less accurate than one GPU, within half a rounding step of the output dtype.
        if e_ring > e_one + atol / 2.0 {
            return Err(format!(
                "the ring is less accurate than one GPU: {e_ring:e} > {e_one:e} + {:e}\n{case}",
                atol / 2.0
            ));
        }
    }
    Ok(())
}

/// Misconfigurations are typed errors and write nothing.
fn refusals(_dev: &Device) -> Result<(), String> {
    let ring = ring()?;
    let ranks = ring.ranks();
    let same = Ring::new(vec![Device::new(0).map_err(e2s)?, Device::new(0).map_err(e2s)?]);
    if !matches!(same, Err(Error::InvalidInput(InvalidInput::Ring(RingError::SameDevice { ordinal: 0 })))) {
        return Err(format!("two ranks on one GPU: {same:?}"));
    }
    let n = 2 * ranks * 64;
    let case = Case::<bf16>::random(&mut case_rng(), &spec(batch(1, n, n), 2, 2, 64, true, LayoutKind::Bshd));
    let mut bufs = upload(&ring, &case, false)?;
    let expect = |what: &str, r: Result<_, Error>, ok: &dyn Fn(&RingError) -> bool| match r {
        Err(Error::InvalidInput(InvalidInput::Ring(e))) if ok(&e) => Ok(()),
        other => Err(format!("{what}: {other:?}")),
    };
    {
        let mut views = shard_views(&mut bufs);
        let r = ring.attention(&mut views[..1], &case.opts);
        expect("one shard", r, &|e| matches!(e, RingError::ShardCount { .. }))?;
        let varlen = AttentionOptions {
            varlen: Some(flashattn::VarLen::from_lengths(&[1], &[1]).unwrap()),
            ..case.opts.clone()
        };
        let r = ring.attention(&mut views, &varlen);
        expect("varlen", r, &|e| matches!(e, RingError::Feature { .. }))?;
        // An odd shard (rank 0 given one token less).
        views[0].q.layout.seqlen -= 1;
        views[0].out.layout.seqlen -= 1;
        let r = ring.attention(&mut views, &case.opts);
        expect("uneven shards", r, &|e| matches!(e, RingError::ShardShapes { .. }))?;
    }
    {
        // K with a gap between tokens.
        let mut views = shard_views(&mut bufs);
        for v in views.iter_mut() {
            v.k.layout.seqlen /= 2;
            v.k.layout.seq_stride *= 2;
            v.v.layout = v.k.layout;
        }
        let r = ring.attention(&mut views, &AttentionOptions { causal: false, ..case.opts.clone() });
        expect("strided K", r, &|e| matches!(e, RingError::KvNotDense { .. }))?;
    }
    ring.synchronize(TIMEOUT).map_err(e2s)?;
    for (r, b) in bufs.iter().enumerate() {
        let out = ring.device(r).ok_or("no device")?.download(&b.out).map_err(e2s)?;
        if out.iter().any(|x| !x.to_f32().is_nan()) {
            return Err(format!("a refused call wrote rank {r}'s output"));
        }
    }
    Ok(())
}

/// Calls in a row (1000, or 50 small), waited on with a bound: no hang, and the last result
/// still right.
fn many_calls(_dev: &Device) -> Result<(), String> {
    let ring = ring()?;
    let ranks = ring.ranks();
    let (calls, n) = if small() { (50, 2 * ranks * 64) } else { (1000, 2 * ranks * 512) };
    let case =
        Case::<bf16>::random(&mut case_rng(), &spec(batch(1, n, n), 4, 2, 128, true, LayoutKind::Bshd));
    let mut bufs = upload(&ring, &case, false)?;
    for i in 0..calls {
        ring.attention(&mut shard_views(&mut bufs), &case.opts).map_err(e2s)?;
        if i % 100 == 99 {
            ring.synchronize(TIMEOUT).map_err(|e| format!("call {i}: {e}"))?;
        }
    }
    ring.synchronize(TIMEOUT).map_err(e2s)?;
    // One more call with its timeline: a step's launches end after the previous step's, and after
    // the block they read arrived; the call ends after its last step.
    ring.record_timeline(true);
    ring.attention(&mut shard_views(&mut bufs), &case.opts).map_err(e2s)?;
    ring.synchronize(TIMEOUT).map_err(e2s)?;
    ring.record_timeline(false);
    let timeline = ring.timeline().map_err(e2s)?;
    for (r, t) in timeline.iter().enumerate() {
        let ordered = t.steps.windows(2).all(|w| w[0] <= w[1])
            && t.arrivals.iter().zip(&t.steps[1..]).all(|(a, s)| a <= s)
            && t.steps.last().is_some_and(|&l| l <= t.end);
        if timeline.len() != ranks || t.steps.len() != ranks || t.arrivals.len() != ranks - 1 || !ordered {
            return Err(format!("rank {r}'s timeline is not a ring call's: {t:?}"));
        }
    }
    let (out, lse) = gather(&ring, &case, &bufs)?;
    check(&case, &out, Some(&lse)).map(|_| ()).map_err(|e| format!("after {calls} calls:\n{e}"))
}
