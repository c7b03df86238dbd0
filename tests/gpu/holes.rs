//! GPU regression tests for the holes an adversarial review found: each failed before its fix.
//! Outputs are poisoned (NaN) before every launch; "nothing written" means still all NaN.

use flashattn::cpu::{self, HostTensor, HostTensorMut};
use flashattn::kernels::params::SIMT_KEY_CHUNK;
use flashattn::{
    AttentionOptions, Device, DeviceBuffer, Error, InvalidInput, Layout, Method, Problem, Reason, Tiles, bf16,
};
use flashattn_testkit::oracle::{attention_f64, widen};
use rand::Rng;

use crate::GpuTest;
use crate::attention::case_rng;

pub const TESTS: &[(&str, GpuTest)] = &[
    ("holes::buffer_of_another_device_is_refused", another_device),
    ("holes::standard_broadcast_v_writes_nothing", standard_broadcast_v),
    ("holes::overlapping_output_writes_nothing", overlapping_output),
    ("holes::empty_problems_are_noops", empty_problems),
    ("holes::huge_scale_matches_oracle", huge_scale),
    ("holes::nan_query_row_gives_nan_lse", nan_query_row),
    ("holes::nan_in_v_reaches_the_rows_the_cpu_says", nan_in_v_tile_rule),
];

const METHODS: [Method; 4] = [Method::Auto, Method::Flash, Method::FlashTensorCore, Method::Standard];

fn e2s(e: Error) -> String {
    e.to_string()
}

fn random_bf16(n: usize) -> Vec<bf16> {
    let mut rng = case_rng();
    (0..n).map(|_| bf16::from_f32(rng.random_range(-1.0f32..1.0))).collect()
}

/// GPU outputs of one call into poisoned buffers, or its error.
struct Run {
    result: Result<(), Error>,
    out: Vec<bf16>,
    lse: Vec<f32>,
}

fn run(
    dev: &Device,
    layouts: [Layout; 4],
    data: [&[bf16]; 3],
    opts: &AttentionOptions,
) -> Result<Run, String> {
    let [lq, lk, lv, lo] = layouts;
    let q = dev.upload(data[0]).map_err(e2s)?;
    let k = dev.upload(data[1]).map_err(e2s)?;
    let v = dev.upload(data[2]).map_err(e2s)?;
    let mut out: DeviceBuffer<bf16> = dev.alloc(lo.required_len().unwrap_or(0).max(1)).map_err(e2s)?;
    let mut lse: DeviceBuffer<f32> = dev.alloc((lq.batch * lq.heads * lq.seqlen).max(1)).map_err(e2s)?;
    dev.fill_nan(&mut out).map_err(e2s)?;
    dev.fill_nan(&mut lse).map_err(e2s)?;
    let result =
        dev.attention(q.view(lq), k.view(lk), v.view(lv), out.view_mut(lo), Some(&mut lse), opts).map(|_| ());
    dev.synchronize().map_err(e2s)?;
    Ok(Run { result, out: dev.download(&out).map_err(e2s)?, lse: dev.download(&lse).map_err(e2s)? })
}

fn untouched(r: &Run) -> bool {
    r.out.iter().all(|x| x.to_f32().is_nan()) && r.lse.iter().all(|x| x.is_nan())
}

/// A buffer made by a second `Device` (same GPU, its own unordered stream) used to be accepted
/// and raced (NaN and stale elements); on two GPUs it ended in an illegal address.
fn another_device(dev: &Device) -> Result<(), String> {
    let other = Device::new(dev.props().ordinal).map_err(e2s)?;
    let l = Layout::bshd(1, 64, 2, 64);
    let n = l.required_len().unwrap_or(0);
    let data = random_bf16(n);
    let mine = dev.upload(&data).map_err(e2s)?;
    let theirs = other.upload(&data).map_err(e2s)?;
    let mut out = dev.alloc::<bf16>(n).map_err(e2s)?;
    dev.fill_nan(&mut out).map_err(e2s)?;
    let r =
        dev.attention(mine.view(l), theirs.view(l), mine.view(l), out.view_mut(l), None, &Default::default());
    if !matches!(r, Err(Error::WrongDevice { what: "k", .. })) {
        return Err(format!("expected WrongDevice for k, got {r:?}"));
    }
    let r = dev.download(&theirs);
    if !matches!(r, Err(Error::WrongDevice { .. })) {
        return Err(format!("download of a foreign buffer: expected WrongDevice, got {:?}", r.map(|_| ())));
    }
    let back = dev.download(&out).map_err(e2s)?;
    if !back.iter().all(|x| x.to_f32().is_nan()) {
        return Err("the refused call wrote to the output".into());
    }
    Ok(())
}

/// The standard path used to write the log-sum-exp and then fail inside cuBLAS on a V with
/// token stride 0 (printing cuBLAS noise). Now its plan refuses it before any launch; the flash
/// paths compute it.
fn standard_broadcast_v(dev: &Device) -> Result<(), String> {
    let l = Layout::bshd(1, 32, 2, 64);
    let mut lv = l;
    lv.seq_stride = 0;
    let n = l.required_len().unwrap_or(0);
    let (q, k, v) = (random_bf16(n), random_bf16(n), random_bf16(lv.required_len().unwrap_or(0)));
    let opts = AttentionOptions { method: Method::Standard, ..Default::default() };
    let r = run(dev, [l, l, lv, l], [&q, &k, &v], &opts)?;
    if !matches!(
        r.result,
        Err(Error::InvalidInput(InvalidInput::Unsupported {
            reason: Reason::GemmStride { tensor: "v", .. },
            ..
        }))
    ) {
        return Err(format!("expected a GemmStride refusal, got {:?}", r.result));
    }
    if !untouched(&r) {
        return Err("the refused standard call wrote to the output or the lse".into());
    }
    for method in [Method::Auto, Method::Flash, Method::FlashTensorCore] {
        let r = run(dev, [l, l, lv, l], [&q, &k, &v], &AttentionOptions { method, ..Default::default() })?;
        r.result.map_err(|e| format!("{method}: {e}"))?;
        if !r.out.iter().all(|x| x.to_f32().is_finite()) {
            return Err(format!("{method}: non-finite output for a broadcast V"));
        }
    }
    Ok(())
}

/// Output layouts with overlapping elements used to be accepted (run-to-run different results).
fn overlapping_output(dev: &Device) -> Result<(), String> {
    let l = Layout::bshd(1, 32, 2, 64);
    let mut lo = l;
    lo.head_stride = 0;
    let n = l.required_len().unwrap_or(0);
    let (q, k, v) = (random_bf16(n), random_bf16(n), random_bf16(n));
    for method in METHODS {
        let r = run(dev, [l, l, l, lo], [&q, &k, &v], &AttentionOptions { method, ..Default::default() })?;
        if !matches!(r.result, Err(Error::InvalidInput(InvalidInput::OverlappingOutput { .. }))) {
            return Err(format!("{method}: expected OverlappingOutput, got {:?}", r.result));
        }
        if !untouched(&r) {
            return Err(format!("{method}: the refused call wrote"));
        }
    }
    Ok(())
}

/// B = 0 and zero query heads used to fail on the standard path with a driver error. Empty
/// problems are a no-op on every path.
fn empty_problems(dev: &Device) -> Result<(), String> {
    let shapes = [
        (Layout::bshd(0, 16, 2, 64), Layout::bshd(0, 16, 2, 64)),
        (Layout::bshd(2, 16, 0, 64), Layout::bshd(2, 16, 2, 64)),
        (Layout::bshd(2, 0, 2, 64), Layout::bshd(2, 16, 2, 64)),
    ];
    for (q, k) in shapes {
        let (dq, dk) =
            (random_bf16(q.required_len().unwrap_or(0)), random_bf16(k.required_len().unwrap_or(0)));
        for method in METHODS {
            let r =
                run(dev, [q, k, k, q], [&dq, &dk, &dk], &AttentionOptions { method, ..Default::default() })?;
            r.result.as_ref().map_err(|e| format!("{method} on {q:?}: {e}"))?;
            if !untouched(&r) {
                return Err(format!("{method} on {q:?}: an empty problem wrote"));
            }
        }
    }
    Ok(())
}

/// Scale 1e35 used to give NaN or the "no visible key" result (the one-FMA probability of the
/// largest score is 2^(±10^28) at that scale). Every method now matches the f64 oracle.
fn huge_scale(dev: &Device) -> Result<(), String> {
    let l = Layout::bshd(2, 45, 2, 64);
    let n = l.required_len().unwrap_or(0);
    let (q, k, v) = (random_bf16(n), random_bf16(n), random_bf16(n));
    for scale in [1e10f32, 1e35] {
        for causal in [false, true] {
            let base = AttentionOptions { scale: Some(scale), causal, ..Default::default() };
            let p = Problem::new(l, l, l, l, [n; 4], &base).map_err(|e| e.to_string())?;
            let reference = attention_f64(&p, &widen(&q), &widen(&k), &widen(&v));
            for method in METHODS {
                let r = run(dev, [l; 4], [&q, &k, &v], &AttentionOptions { method, ..base.clone() })?;
                r.result.map_err(|e| format!("{method}: {e}"))?;
                for (i, (o, &want)) in r.out.iter().zip(&reference.out).enumerate() {
                    // One-hot probabilities: the output is a V element, exactly representable.
                    if (o.to_f32() as f64 - want).abs() > 1e-6 {
                        return Err(format!(
                            "{method} scale {scale} causal {causal}: out[{i}] {o} vs {want}"
                        ));
                    }
                }
                for (i, (&x, &want)) in r.lse.iter().zip(&reference.lse).enumerate() {
                    // The log-sum-exp is the largest score times the scale: the kernels' f32 dot
                    // products are off by up to (d + 2)·2⁻²⁴·Σ|q·k| (more than 1e-5 of the score
                    // when its terms cancel), which the scale multiplies.
                    let (b, h, t) = (i / (l.heads * l.seqlen), (i / l.seqlen) % l.heads, i % l.seqlen);
                    let keys = if causal { t + 1 } else { l.seqlen };
                    let row = l.offset(b, t, h);
                    let dot_abs = (0..keys)
                        .map(|j| {
                            let key = l.offset(b, j, h);
                            (0..l.head_dim)
                                .map(|c| (q[row + c].to_f64() * k[key + c].to_f64()).abs())
                                .sum::<f64>()
                        })
                        .fold(0.0f64, f64::max);
                    let rounding = scale as f64 * (l.head_dim + 2) as f64 * f64::powi(2.0, -24) * dot_abs;
                    if (x as f64 - want).abs() > 1e-5 * want.abs() + rounding {
                        return Err(format!(
                            "{method} scale {scale} causal {causal}: lse[{i}] {x} vs {want}"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// A NaN in a query row used to give that row the log-sum-exp -inf ("no visible key").
fn nan_query_row(dev: &Device) -> Result<(), String> {
    let l = Layout::bshd(1, 70, 1, 64);
    let n = l.required_len().unwrap_or(0);
    let (mut q, k, v) = (random_bf16(n), random_bf16(n), random_bf16(n));
    q[5 * 64..6 * 64].fill(bf16::NAN);
    for method in METHODS {
        let r = run(dev, [l; 4], [&q, &k, &v], &AttentionOptions { method, ..Default::default() })?;
        r.result.map_err(|e| format!("{method}: {e}"))?;
        if !r.lse[5].is_nan() || !r.out[5 * 64..6 * 64].iter().all(|x| x.to_f32().is_nan()) {
            return Err(format!("{method}: row 5 has lse {} (expected NaN)", r.lse[5]));
        }
        if (0..70).filter(|&t| t != 5).any(|t| !r.lse[t].is_finite()) {
            return Err(format!("{method}: a NaN query row reached other rows"));
        }
    }
    Ok(())
}

/// A NaN in a V row that some queries may not see used to poison rows on the GPU that the CPU
/// left finite. Now both follow one rule (see the README): with the GPU plan's tiles, the CPU
/// gives NaN in exactly the same output elements.
fn nan_in_v_tile_rule(dev: &Device) -> Result<(), String> {
    let l = Layout::bshd(1, 300, 1, 64);
    let n = l.required_len().unwrap_or(0);
    let (q, k, mut v) = (random_bf16(n), random_bf16(n), random_bf16(n));
    v[200 * 64 + 7] = bf16::NAN;
    let hopper = dev.props().compute_capability == (9, 0);
    for method in [Method::Flash, Method::FlashTensorCore, Method::FlashHopper] {
        if method == Method::FlashHopper && !hopper {
            continue;
        }
        let opts = AttentionOptions { method, causal: true, ..Default::default() };
        let gpu = run(dev, [l; 4], [&q, &k, &v], &opts)?;
        gpu.result.map_err(|e| format!("{method}: {e}"))?;
        let plan = dev
            .plan::<bf16>(&Problem::new(l, l, l, l, [n; 4], &opts).map_err(|e| e.to_string())?, &opts)
            .map_err(e2s)?;
        let (block_m, block_n) = plan.tiles.ok_or("flash plan without tiles")?;
        // The general kernel accumulates in chunks of SIMT_KEY_CHUNK keys inside its tiles.
        let chunk = if method == Method::Flash { SIMT_KEY_CHUNK as usize } else { block_n };
        let cpu_opts = AttentionOptions {
            tiles: Tiles { block_m: Some(block_m), block_n: Some(chunk) },
            ..opts.clone()
        };
        let mut out = vec![bf16::NAN; n];
        let mut lse = vec![f32::NAN; 300];
        cpu::attention(
            HostTensor { data: &q, layout: l },
            HostTensor { data: &k, layout: l },
            HostTensor { data: &v, layout: l },
            HostTensorMut { data: &mut out, layout: l },
            Some(&mut lse),
            &cpu_opts,
        )
        .map_err(e2s)?;
        let nan_rows = |o: &[bf16]| {
            (0..300).filter(|&t| o[t * 64..(t + 1) * 64].iter().any(|x| x.is_nan())).collect::<Vec<_>>()
        };
        let (g, c) = (nan_rows(&gpu.out), nan_rows(&out));
        if g != c || g.is_empty() || g.len() == 300 {
            return Err(format!("{method}: NaN rows differ: GPU {g:?}, CPU {c:?}"));
        }
        for (i, (a, b)) in gpu.out.iter().zip(&out).enumerate() {
            if a.is_nan() != b.is_nan() {
                return Err(format!("{method}: element {i}: GPU {a}, CPU {b}"));
            }
        }
        if gpu.lse.iter().zip(&lse).any(|(a, b)| a.is_nan() != b.is_nan()) {
            return Err(format!("{method}: log-sum-exp NaNs differ"));
        }
    }
    Ok(())
}
