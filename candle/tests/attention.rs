//! flashattn-candle against candle's own attention (matmul, softmax, matmul in f64), on odd
//! shapes: FlashAttention's rule, `err(ours) <= 2·err(candle's own path in the same dtype) + ε`,
//! both measured against the f64 reference. CPU tensors here; CUDA tensors in `mod cuda`
//! (`--features cuda`, skipped without a GPU).

use candle::{D, DType, Device, IndexOp, Result, Tensor, Var};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use flashattn_candle::{
    FlashAttn, flash_attn, flash_attn_alibi, flash_attn_alibi_windowed, flash_attn_alibi_windowed_softcap,
    flash_attn_varlen, flash_attn_varlen_alibi, flash_attn_varlen_alibi_windowed,
    flash_attn_varlen_alibi_windowed_softcap, flash_attn_varlen_windowed, flash_attn_windowed,
};

/// Uniform values in [-1, 1), f32, seeded.
fn rand_tensor(seed: u64, shape: &[usize], dev: &Device) -> Result<Tensor> {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect();
    Tensor::from_vec(data, shape, dev)
}

/// What the reference masks and adds, in candle-flash-attn's terms.
#[derive(Clone, Debug, Default)]
struct Mask {
    causal: bool,
    window: (Option<usize>, Option<usize>),
    alibi: Option<Vec<f32>>,
    softcap: Option<f32>,
}

/// candle's own attention on `(batch, seq, heads, d)` tensors, in their dtype: scores by matmul,
/// mask and biases, softmax from candle ops, matmul. K/V heads are repeated for grouped-query
/// attention. Rows that see no key give 0.
fn naive(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64, mask: &Mask) -> Result<Tensor> {
    let (b, sq, h, d) = q.dims4()?;
    let (_, sk, hk, _) = k.dims4()?;
    let g = h / hk;
    let heads = |t: &Tensor| -> Result<Tensor> {
        let t = t.transpose(1, 2)?.contiguous()?; // (b, hk, sk, d)
        t.unsqueeze(2)?.expand((b, hk, g, sk, d))?.reshape((b, h, sk, d))
    };
    let q = q.transpose(1, 2)?.contiguous()?;
    let (k, v) = (heads(k)?, heads(v)?);
    let mut s = (q.matmul(&k.t()?)? * scale)?; // (b, h, sq, sk)
    if let Some(c) = mask.softcap {
        s = ((s / c as f64)?.tanh()? * c as f64)?;
    }
    // Bias (alibi) and visibility, built on the host in f64.
    let (mut bias, mut visible) = (vec![0f64; h * sq * sk], vec![true; sq * sk]);
    let (left, right) = if mask.causal { (None, Some(0)) } else { mask.window };
    for t in 0..sq {
        for j in 0..sk {
            let diag = t as i64 + sk as i64 - sq as i64;
            let j = j as i64;
            let vis = left.is_none_or(|l| j >= diag - l as i64) && right.is_none_or(|r| j <= diag + r as i64);
            visible[t * sk + j as usize] = vis;
            if let Some(slopes) = &mask.alibi {
                for (hh, slope) in slopes.iter().enumerate() {
                    bias[(hh * sq + t) * sk + j as usize] = -(*slope as f64) * (diag - j).abs() as f64;
                }
            }
        }
    }
    let bias = Tensor::from_vec(bias, (1, h, sq, sk), q.device())?.to_dtype(s.dtype())?;
    let s = s.broadcast_add(&bias)?;
    let vis: Vec<u8> = visible.iter().map(|&x| x as u8).collect();
    let vis = Tensor::from_vec(vis, (1, 1, sq, sk), q.device())?.broadcast_as(s.shape())?;
    let ninf = Tensor::new(f32::NEG_INFINITY, q.device())?.to_dtype(s.dtype())?.broadcast_as(s.shape())?;
    let s = vis.where_cond(&s, &ninf)?;
    // Softmax, with rows that see nothing giving 0 (max = -inf there: use 0).
    let max = s.max_keepdim(D::Minus1)?;
    let max = max.ne(f64::NEG_INFINITY)?.where_cond(&max, &max.zeros_like()?)?;
    let e = s.broadcast_sub(&max)?.exp()?;
    let sum = e.sum_keepdim(D::Minus1)?;
    let sum = sum.eq(0f64)?.where_cond(&sum.ones_like()?, &sum)?;
    let p = e.broadcast_div(&sum)?;
    p.matmul(&v)?.transpose(1, 2)?.contiguous()
}

/// Largest absolute difference.
fn max_err(a: &Tensor, b: &Tensor) -> Result<f64> {
    let a = a.to_dtype(DType::F64)?;
    let b = b.to_dtype(DType::F64)?;
    (a - b)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f64>()
}

/// FlashAttention's rule: ours within twice candle's own path in `dt`, against the f64
/// reference (plus a floor for exact agreement).
fn check(name: &str, ours: &Tensor, own: &Tensor, reference: &Tensor) -> Result<()> {
    let (e_ours, e_own) = (max_err(ours, reference)?, max_err(own, reference)?);
    let floor = match ours.dtype() {
        DType::F32 => 1e-6,
        _ => 1e-3,
    };
    println!("{name}: ours {e_ours:.3e}, candle's own path {e_own:.3e}");
    assert!(e_ours <= 2.0 * e_own + floor, "{name}: error {e_ours:.3e} > 2 × {e_own:.3e} + {floor:e}");
    Ok(())
}

/// One fixed-length case in each dtype: ours, candle's own path in that dtype, and the f64
/// reference. `run` calls the crate's function.
fn compare(
    name: &str,
    (b, sq, sk, h, hk, d): (usize, usize, usize, usize, usize, usize),
    mask: &Mask,
    run: &dyn Fn(&Tensor, &Tensor, &Tensor, f32) -> Result<Tensor>,
    dev: &Device,
) -> Result<()> {
    let scale = 1.0 / (d as f32).sqrt();
    let q = rand_tensor(1, &[b, sq, h, d], dev)?;
    let k = rand_tensor(2, &[b, sk, hk, d], dev)?;
    let v = rand_tensor(3, &[b, sk, hk, d], dev)?;
    let f64s = |t: &Tensor| t.to_dtype(DType::F64);
    let reference = naive(&f64s(&q)?, &f64s(&k)?, &f64s(&v)?, scale as f64, mask)?;
    for dt in [DType::F32, DType::F16, DType::BF16] {
        let (q, k, v) = (q.to_dtype(dt)?, k.to_dtype(dt)?, v.to_dtype(dt)?);
        let ours = run(&q, &k, &v, scale)?;
        assert_eq!(ours.dims(), q.dims());
        assert_eq!(ours.dtype(), dt);
        let own = naive(&q, &k, &v, scale as f64, mask)?;
        check(&format!("{name} {dt:?}"), &ours, &own, &reference)?;
    }
    Ok(())
}

/// Switching from candle-flash-attn is one `use` line: the same signatures.
#[test]
#[allow(clippy::type_complexity)]
fn signatures_are_candle_flash_attns() {
    type R = Result<Tensor>;
    let _: fn(&Tensor, &Tensor, &Tensor, f32, bool) -> R = flash_attn;
    let _: fn(&Tensor, &Tensor, &Tensor, f32, Option<usize>, Option<usize>) -> R = flash_attn_windowed;
    let _: fn(&Tensor, &Tensor, &Tensor, &Tensor, f32, bool) -> R = flash_attn_alibi;
    let _: fn(&Tensor, &Tensor, &Tensor, &Tensor, f32, Option<usize>, Option<usize>) -> R =
        flash_attn_alibi_windowed;
    let _: fn(&Tensor, &Tensor, &Tensor, Option<&Tensor>, f32, Option<usize>, Option<usize>, f32) -> R =
        flash_attn_alibi_windowed_softcap;
    let _: fn(&Tensor, &Tensor, &Tensor, &Tensor, &Tensor, usize, usize, f32, bool) -> R = flash_attn_varlen;
    let _: fn(
        &Tensor,
        &Tensor,
        &Tensor,
        &Tensor,
        &Tensor,
        usize,
        usize,
        f32,
        Option<usize>,
        Option<usize>,
    ) -> R = flash_attn_varlen_windowed;
    let _: fn(&Tensor, &Tensor, &Tensor, &Tensor, &Tensor, &Tensor, usize, usize, f32, bool) -> R =
        flash_attn_varlen_alibi;
    let _: fn(
        &Tensor,
        &Tensor,
        &Tensor,
        &Tensor,
        &Tensor,
        &Tensor,
        usize,
        usize,
        f32,
        Option<usize>,
        Option<usize>,
    ) -> R = flash_attn_varlen_alibi_windowed;
    let _: fn(
        &Tensor,
        &Tensor,
        &Tensor,
        Option<&Tensor>,
        &Tensor,
        &Tensor,
        usize,
        usize,
        f32,
        Option<usize>,
        Option<usize>,
        f32,
    ) -> R = flash_attn_varlen_alibi_windowed_softcap;
}

#[test]
fn plain_and_causal() -> Result<()> {
    let dev = Device::Cpu;
    for causal in [false, true] {
        let mask = Mask { causal, ..Default::default() };
        let run = |q: &Tensor, k: &Tensor, v: &Tensor, s: f32| flash_attn(q, k, v, s, causal);
        compare(&format!("causal={causal} square"), (2, 37, 37, 4, 4, 24), &mask, &run, &dev)?;
        compare(&format!("causal={causal} sq<sk"), (1, 19, 53, 2, 2, 64), &mask, &run, &dev)?;
        // More queries than keys: the first rows see nothing under the causal mask.
        compare(&format!("causal={causal} sq>sk"), (2, 41, 17, 3, 3, 59), &mask, &run, &dev)?;
    }
    Ok(())
}

#[test]
fn grouped_and_multi_query() -> Result<()> {
    let dev = Device::Cpu;
    let mask = Mask { causal: true, ..Default::default() };
    let run = |q: &Tensor, k: &Tensor, v: &Tensor, s: f32| flash_attn(q, k, v, s, true);
    compare("gqa 8/2", (2, 33, 33, 8, 2, 32), &mask, &run, &dev)?;
    compare("mqa 6/1", (1, 20, 45, 6, 1, 16), &mask, &run, &dev)
}

#[test]
fn windows_alibi_softcap() -> Result<()> {
    let dev = Device::Cpu;
    let window = Mask { window: (Some(7), Some(3)), ..Default::default() };
    let run = |q: &Tensor, k: &Tensor, v: &Tensor, s: f32| flash_attn_windowed(q, k, v, s, Some(7), Some(3));
    compare("window (7, 3)", (2, 40, 40, 2, 2, 32), &window, &run, &dev)?;
    // (None, Some(0)) is causal; a side longer than the keys is no limit (FlashAttention-2's rule).
    let causal = Mask { causal: true, ..Default::default() };
    let run = |q: &Tensor, k: &Tensor, v: &Tensor, s: f32| flash_attn_windowed(q, k, v, s, None, Some(0));
    compare("window (None, 0)", (1, 30, 30, 2, 2, 16), &causal, &run, &dev)?;
    let run =
        |q: &Tensor, k: &Tensor, v: &Tensor, s: f32| flash_attn_windowed(q, k, v, s, Some(1000), Some(0));
    compare("window (1000, 0)", (1, 30, 30, 2, 2, 16), &causal, &run, &dev)?;

    let slopes = vec![0.5f32, 0.125, 0.03125];
    let st = Tensor::new(slopes.as_slice(), &dev)?;
    let alibi = Mask { causal: true, alibi: Some(slopes.clone()), ..Default::default() };
    let run = |q: &Tensor, k: &Tensor, v: &Tensor, s: f32| flash_attn_alibi(q, k, v, &st, s, true);
    compare("alibi causal", (2, 25, 31, 3, 3, 24), &alibi, &run, &dev)?;
    let alibi_w = Mask { window: (Some(5), Some(5)), alibi: Some(slopes.clone()), ..Default::default() };
    let run = |q: &Tensor, k: &Tensor, v: &Tensor, s: f32| {
        flash_attn_alibi_windowed(q, k, v, &st, s, Some(5), Some(5))
    };
    compare("alibi window", (1, 25, 25, 3, 1, 24), &alibi_w, &run, &dev)?;
    let all =
        Mask { window: (Some(9), Some(0)), alibi: Some(slopes.clone()), softcap: Some(2.0), causal: false };
    let run = |q: &Tensor, k: &Tensor, v: &Tensor, s: f32| {
        flash_attn_alibi_windowed_softcap(q, k, v, Some(&st), s, Some(9), Some(0), 2.0)
    };
    compare("alibi window softcap", (2, 22, 22, 3, 3, 40), &all, &run, &dev)
}

/// Views: narrowed (a start offset), transposed from `(b, h, s, d)` storage, a strided head
/// dimension (copied first), all without a change in the result.
#[test]
fn strided_and_narrowed_inputs() -> Result<()> {
    let dev = Device::Cpu;
    let (b, s, h, d) = (2, 29, 4, 32);
    let scale = 1.0 / (d as f32).sqrt();
    let q = rand_tensor(11, &[b, s, h, d], &dev)?;
    let k = rand_tensor(12, &[b, s, h, d], &dev)?;
    let v = rand_tensor(13, &[b, s, h, d], &dev)?;
    let want = flash_attn(&q, &k, &v, scale, true)?;
    // Q narrowed out of a longer, wider tensor: offset and strides of the big one.
    let big = Tensor::zeros((b + 1, s + 5, h + 2, d), DType::F32, &dev)?;
    let big = big.slice_assign(&[1..b + 1, 3..s + 3, 2..h + 2, 0..d], &q)?;
    let q_view = big.narrow(0, 1, b)?.narrow(1, 3, s)?.narrow(2, 2, h)?;
    assert!(!q_view.is_contiguous());
    // K stored (b, h, s, d), seen as (b, s, h, d).
    let k_view = k.transpose(1, 2)?.contiguous()?.transpose(1, 2)?;
    assert!(!k_view.is_contiguous());
    // V with a strided head dimension: stored (b, s, d, h).
    let v_view = v.transpose(2, 3)?.contiguous()?.transpose(2, 3)?;
    let got = flash_attn(&q_view, &k_view, &v_view, scale, true)?;
    assert_eq!(max_err(&got, &want)?, 0.0);
    Ok(())
}

/// Packs `lens` sequences of `x` (b, s, h, d) into (total, h, d), each sequence's first tokens.
fn pack(x: &Tensor, lens: &[usize]) -> Result<Tensor> {
    let parts: Vec<Tensor> =
        lens.iter().enumerate().map(|(i, &l)| x.i(i)?.narrow(0, 0, l)).collect::<Result<_>>()?;
    Tensor::cat(&parts, 0)
}

#[test]
fn varlen_matches_each_sequence_alone() -> Result<()> {
    let dev = Device::Cpu;
    let (lq, lk) = ([5usize, 17, 1, 30], [9usize, 17, 4, 30]);
    let (h, hk, d) = (4, 2, 24);
    let (sq, sk) = (*lq.iter().max().unwrap(), *lk.iter().max().unwrap());
    let scale = 1.0 / (d as f32).sqrt();
    let cum = |l: &[usize]| {
        let mut c = vec![0u32];
        for &x in l {
            c.push(c.last().unwrap() + x as u32);
        }
        Tensor::new(c.as_slice(), &dev)
    };
    let (cq, ck) = (cum(&lq)?, cum(&lk)?);
    let q = rand_tensor(21, &[4, sq, h, d], &dev)?;
    let k = rand_tensor(22, &[4, sk, hk, d], &dev)?;
    let v = rand_tensor(23, &[4, sk, hk, d], &dev)?;
    let slopes = Tensor::new(&[0.25f32, 0.5, 0.125, 0.0625], &dev)?;
    for dt in [DType::F32, DType::BF16] {
        let (qp, kp, vp) =
            (pack(&q.to_dtype(dt)?, &lq)?, pack(&k.to_dtype(dt)?, &lk)?, pack(&v.to_dtype(dt)?, &lk)?);
        type Case<'a> = (&'a str, Mask, Box<dyn Fn() -> Result<Tensor> + 'a>);
        let cases: Vec<Case> = vec![
            (
                "plain",
                Mask::default(),
                Box::new(|| flash_attn_varlen(&qp, &kp, &vp, &cq, &ck, sq, sk, scale, false)),
            ),
            (
                "causal",
                Mask { causal: true, ..Default::default() },
                Box::new(|| flash_attn_varlen(&qp, &kp, &vp, &cq, &ck, sq, sk, scale, true)),
            ),
            (
                "window",
                Mask { window: (Some(3), Some(2)), ..Default::default() },
                Box::new(|| {
                    flash_attn_varlen_windowed(&qp, &kp, &vp, &cq, &ck, sq, sk, scale, Some(3), Some(2))
                }),
            ),
            (
                "alibi",
                Mask { causal: true, alibi: Some(vec![0.25, 0.5, 0.125, 0.0625]), ..Default::default() },
                Box::new(|| flash_attn_varlen_alibi(&qp, &kp, &vp, &slopes, &cq, &ck, sq, sk, scale, true)),
            ),
        ];
        for (name, mask, run) in cases {
            let out = run()?;
            assert_eq!(out.dims(), qp.dims());
            let mut at = 0;
            for (i, (&nq, &nk)) in lq.iter().zip(&lk).enumerate() {
                let one = |x: &Tensor, n| x.i(i)?.narrow(0, 0, n)?.unsqueeze(0);
                let (qi, ki, vi) = (one(&q, nq)?, one(&k, nk)?, one(&v, nk)?);
                let f64s = |t: &Tensor| t.to_dtype(DType::F64);
                let reference = naive(&f64s(&qi)?, &f64s(&ki)?, &f64s(&vi)?, scale as f64, &mask)?;
                let low = |t: &Tensor| t.to_dtype(dt);
                let own = naive(&low(&qi)?, &low(&ki)?, &low(&vi)?, scale as f64, &mask)?;
                let ours = out.narrow(0, at, nq)?.unsqueeze(0)?;
                check(&format!("varlen {name} {dt:?} sequence {i}"), &ours, &own, &reference)?;
                at += nq;
            }
        }
    }
    // A max_seqlen shorter than a sequence is refused (FlashAttention would drop its rows).
    let qp = pack(&q, &lq)?;
    let kp = pack(&k, &lk)?;
    let err = flash_attn_varlen(&qp, &kp, &kp, &cq, &ck, sq - 1, sk, scale, false).unwrap_err();
    assert!(err.to_string().contains("max_seqlen_q"), "{err}");
    Ok(())
}

/// Gradients of `sum(out · w)` through ours and through candle's own path (autograd), f32.
fn grads(
    run: &dyn Fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor>,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    w: &Tensor,
) -> Result<[Tensor; 3]> {
    let (q, k, v) = (Var::from_tensor(q)?, Var::from_tensor(k)?, Var::from_tensor(v)?);
    let out = run(q.as_tensor(), k.as_tensor(), v.as_tensor())?;
    let loss = (out * w)?.sum_all()?;
    let g = loss.backward()?;
    let get = |x: &Var| g.get(x.as_tensor()).cloned().ok_or_else(|| candle::Error::msg("no gradient"));
    Ok([get(&q)?, get(&k)?, get(&v)?])
}

#[test]
fn backward_matches_candles_autograd() -> Result<()> {
    let dev = Device::Cpu;
    for (causal, (b, sq, sk, h, hk, d)) in [(false, (2, 23, 31, 4, 2, 24)), (true, (1, 37, 37, 4, 1, 32))] {
        let scale = 1.0 / (d as f32).sqrt();
        let q = rand_tensor(31, &[b, sq, h, d], &dev)?;
        let k = rand_tensor(32, &[b, sk, hk, d], &dev)?;
        let v = rand_tensor(33, &[b, sk, hk, d], &dev)?;
        let w = rand_tensor(34, &[b, sq, h, d], &dev)?;
        let mask = Mask { causal, ..Default::default() };
        let ours = grads(&|q, k, v| flash_attn(q, k, v, scale, causal), &q, &k, &v, &w)?;
        let own = grads(&|q, k, v| naive(q, k, v, scale as f64, &mask), &q, &k, &v, &w)?;
        let f64s = |t: &Tensor| t.to_dtype(DType::F64);
        let reference = grads(
            &|q, k, v| naive(q, k, v, scale as f64, &mask),
            &f64s(&q)?,
            &f64s(&k)?,
            &f64s(&v)?,
            &f64s(&w)?,
        )?;
        // The op struct, used directly: its backward recomputes the log-sum-exp.
        let op = |q: &Tensor, k: &Tensor, v: &Tensor| {
            let window_size_right = causal.then_some(0);
            let op = FlashAttn {
                softmax_scale: scale,
                alibi_slopes: None,
                window_size_left: None,
                window_size_right,
                softcap: None,
            };
            q.apply_op3(k, v, op)
        };
        let direct = grads(&op, &q, &k, &v, &w)?;
        for (i, name) in ["dq", "dk", "dv"].iter().enumerate() {
            assert_eq!(ours[i].dims(), [&q, &k, &v][i].dims());
            check(&format!("{name} causal={causal}"), &ours[i], &own[i], &reference[i])?;
            assert_eq!(max_err(&direct[i], &ours[i])?, 0.0, "{name}: the op struct's backward differs");
        }
    }
    Ok(())
}

#[test]
fn backward_with_alibi_softcap_and_window() -> Result<()> {
    let dev = Device::Cpu;
    let (b, s, h, d) = (1, 21, 2, 16);
    let scale = 1.0 / (d as f32).sqrt();
    let (q, k, v) = (
        rand_tensor(41, &[b, s, h, d], &dev)?,
        rand_tensor(42, &[b, s, h, d], &dev)?,
        rand_tensor(43, &[b, s, h, d], &dev)?,
    );
    let w = rand_tensor(44, &[b, s, h, d], &dev)?;
    let slopes = Tensor::new(&[0.5f32, 0.25], &dev)?;
    let mask =
        Mask { window: (Some(6), Some(2)), alibi: Some(vec![0.5, 0.25]), softcap: Some(3.0), causal: false };
    let run = |q: &Tensor, k: &Tensor, v: &Tensor| {
        flash_attn_alibi_windowed_softcap(q, k, v, Some(&slopes), scale, Some(6), Some(2), 3.0)
    };
    let ours = grads(&run, &q, &k, &v, &w)?;
    let own = grads(&|q, k, v| naive(q, k, v, scale as f64, &mask), &q, &k, &v, &w)?;
    let f64s = |t: &Tensor| t.to_dtype(DType::F64);
    let reference = grads(
        &|q, k, v| naive(q, k, v, scale as f64, &mask),
        &f64s(&q)?,
        &f64s(&k)?,
        &f64s(&v)?,
        &f64s(&w)?,
    )?;
    for (i, name) in ["dq", "dk", "dv"].iter().enumerate() {
        check(name, &ours[i], &own[i], &reference[i])?;
    }
    Ok(())
}

#[test]
fn varlen_backward() -> Result<()> {
    let dev = Device::Cpu;
    let lens = [7usize, 19, 12];
    let (h, d) = (2, 16);
    let scale = 0.3f32;
    let c = Tensor::new(&[0u32, 7, 26, 38], &dev)?;
    let q = rand_tensor(51, &[38, h, d], &dev)?;
    let k = rand_tensor(52, &[38, h, d], &dev)?;
    let v = rand_tensor(53, &[38, h, d], &dev)?;
    let w = rand_tensor(54, &[38, h, d], &dev)?;
    let ours = grads(&|q, k, v| flash_attn_varlen(q, k, v, &c, &c, 19, 19, scale, true), &q, &k, &v, &w)?;
    // The reference: each sequence alone, concatenated.
    let per_sequence = |q: &Tensor, k: &Tensor, v: &Tensor| -> Result<Tensor> {
        let mut outs = vec![];
        let mut at = 0;
        for &n in &lens {
            let one = |x: &Tensor| x.narrow(0, at, n)?.unsqueeze(0);
            let mask = Mask { causal: true, ..Default::default() };
            outs.push(naive(&one(q)?, &one(k)?, &one(v)?, scale as f64, &mask)?.squeeze(0)?);
            at += n;
        }
        Tensor::cat(&outs, 0)
    };
    let own = grads(&per_sequence, &q, &k, &v, &w)?;
    let f64s = |t: &Tensor| t.to_dtype(DType::F64);
    let reference = grads(&per_sequence, &f64s(&q)?, &f64s(&k)?, &f64s(&v)?, &f64s(&w)?)?;
    for (i, name) in ["dq", "dk", "dv"].iter().enumerate() {
        check(&format!("varlen {name}"), &ours[i], &own[i], &reference[i])?;
    }
    Ok(())
}

/// No gradient tracked: nothing kept, and the result is the same.
#[test]
fn no_tracking_same_result() -> Result<()> {
    let dev = Device::Cpu;
    let q = rand_tensor(61, &[1, 16, 2, 8], &dev)?;
    let plain = flash_attn(&q, &q, &q, 0.5, false)?;
    let tracked = flash_attn(Var::from_tensor(&q)?.as_tensor(), &q, &q, 0.5, false)?;
    assert_eq!(max_err(&plain, &tracked)?, 0.0);
    Ok(())
}

#[test]
fn clear_errors() -> Result<()> {
    let dev = Device::Cpu;
    let q = rand_tensor(71, &[1, 8, 2, 16], &dev)?;
    let msg = |r: Result<Tensor>| r.unwrap_err().to_string();
    // Rank.
    let e = msg(flash_attn(&q.i(0)?, &q.i(0)?, &q.i(0)?, 0.25, false));
    assert!(e.contains("rank 4"), "{e}");
    let e = msg(flash_attn_varlen(
        &q,
        &q,
        &q,
        &Tensor::new(&[0u32, 8], &dev)?,
        &Tensor::new(&[0u32, 8], &dev)?,
        8,
        8,
        0.25,
        false,
    ));
    assert!(e.contains("rank 3"), "{e}");
    // Dtypes.
    let e = msg(flash_attn(&q, &q.to_dtype(DType::F16)?, &q, 0.25, false));
    assert!(e.contains("one dtype"), "{e}");
    let e = msg(flash_attn(
        &q.to_dtype(DType::F64)?,
        &q.to_dtype(DType::F64)?,
        &q.to_dtype(DType::F64)?,
        0.25,
        false,
    ));
    assert!(e.contains("f16, bf16 and f32"), "{e}");
    // flashattn's own validation comes through with its message.
    let k3 = rand_tensor(72, &[1, 8, 3, 16], &dev)?;
    let e = msg(flash_attn(&q.broadcast_as((1, 8, 2, 16))?, &k3, &k3, 0.25, false));
    assert!(e.contains("head"), "{e}");
    let e = msg(flash_attn(&q, &q, &q, -1.0, false));
    assert!(e.contains("scale"), "{e}");
    Ok(())
}

/// CUDA tensors: ours on candle's memory and stream against candle's own path on the GPU
/// (`--features cuda`; skipped where no CUDA device opens).
#[cfg(feature = "cuda")]
mod cuda {
    use super::*;

    fn gpu() -> Option<Device> {
        match Device::new_cuda(0) {
            Ok(d) => Some(d),
            // The bundle's `run.sh candle` sets FLASHATTN_REQUIRE_GPU=1: there a skip is a failure.
            Err(e) if std::env::var("FLASHATTN_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
                panic!("FLASHATTN_REQUIRE_GPU=1 but no CUDA device: {e}")
            }
            Err(e) => {
                eprintln!("skipped: no CUDA device ({e})");
                None
            }
        }
    }

    #[test]
    fn forward_on_the_gpu() -> Result<()> {
        let Some(dev) = gpu() else { return Ok(()) };
        for causal in [false, true] {
            let mask = Mask { causal, ..Default::default() };
            let run = |q: &Tensor, k: &Tensor, v: &Tensor, s: f32| flash_attn(q, k, v, s, causal);
            compare(&format!("cuda causal={causal}"), (2, 200, 200, 8, 8, 64), &mask, &run, &dev)?;
            compare(&format!("cuda gqa causal={causal}"), (3, 77, 131, 8, 2, 128), &mask, &run, &dev)?;
            compare(&format!("cuda odd d causal={causal}"), (1, 45, 45, 2, 2, 59), &mask, &run, &dev)?;
        }
        // A window (the tensor-core kernels; f32 refuses it on the GPU: bf16 and f16 only).
        let mask = Mask { window: (Some(32), Some(8)), ..Default::default() };
        let q = rand_tensor(81, &[1, 150, 4, 64], &dev)?;
        let k = rand_tensor(82, &[1, 150, 4, 64], &dev)?;
        let v = rand_tensor(83, &[1, 150, 4, 64], &dev)?;
        let f64s = |t: &Tensor| t.to_dtype(DType::F64);
        let reference = naive(&f64s(&q)?, &f64s(&k)?, &f64s(&v)?, 0.125, &mask)?;
        for dt in [DType::F16, DType::BF16] {
            let (q, k, v) = (q.to_dtype(dt)?, k.to_dtype(dt)?, v.to_dtype(dt)?);
            let ours = flash_attn_windowed(&q, &k, &v, 0.125, Some(32), Some(8))?;
            let own = naive(&q, &k, &v, 0.125, &mask)?;
            check(&format!("cuda window {dt:?}"), &ours, &own, &reference)?;
        }
        // Same on views as on contiguous copies.
        let q = q.to_dtype(DType::BF16)?;
        let kt = k.to_dtype(DType::BF16)?.transpose(1, 2)?.contiguous()?.transpose(1, 2)?;
        let a = flash_attn(&q, &kt, &kt, 0.125, true)?;
        let b = flash_attn(&q, &kt.contiguous()?, &kt.contiguous()?, 0.125, true)?;
        assert_eq!(max_err(&a, &b)?, 0.0);
        // ALiBi on the GPU (the tensor-core kernels) against the CPU path on the same inputs.
        let slopes = Tensor::new(&[0.5f32, 0.25, 0.125, 0.0625], &dev)?;
        let gpu = flash_attn_alibi(&q, &kt, &kt, &slopes, 0.125, true)?;
        let cpu = |t: &Tensor| t.to_device(&candle::Device::Cpu)?.to_dtype(DType::F32);
        let host = flash_attn_alibi(&cpu(&q)?, &cpu(&kt)?, &cpu(&kt)?, &cpu(&slopes)?, 0.125, true)?;
        let e = max_err(&gpu.to_device(&candle::Device::Cpu)?.to_dtype(DType::F32)?, &host)?;
        assert!(e < 2e-2, "ALiBi on the GPU against the CPU: {e}");
        Ok(())
    }

    #[test]
    fn varlen_on_the_gpu() -> Result<()> {
        let Some(dev) = gpu() else { return Ok(()) };
        let lens = [50usize, 129, 3];
        let c = Tensor::new(&[0u32, 50, 179, 182], &dev)?;
        let (h, d) = (4, 64);
        let q = rand_tensor(91, &[182, h, d], &dev)?.to_dtype(DType::BF16)?;
        let k = rand_tensor(92, &[182, h, d], &dev)?.to_dtype(DType::BF16)?;
        let v = rand_tensor(93, &[182, h, d], &dev)?.to_dtype(DType::BF16)?;
        let out = flash_attn_varlen(&q, &k, &v, &c, &c, 129, 129, 0.125, true)?;
        let mut at = 0;
        for &n in &lens {
            let one = |x: &Tensor| x.narrow(0, at, n)?.unsqueeze(0);
            let f64s = |t: &Tensor| one(t)?.to_dtype(DType::F64);
            let mask = Mask { causal: true, ..Default::default() };
            let reference = naive(&f64s(&q)?, &f64s(&k)?, &f64s(&v)?, 0.125, &mask)?;
            let own = naive(&one(&q)?, &one(&k)?, &one(&v)?, 0.125, &mask)?;
            check("cuda varlen", &out.narrow(0, at, n)?.unsqueeze(0)?, &own, &reference)?;
            at += n;
        }
        Ok(())
    }

    #[test]
    fn backward_on_the_gpu() -> Result<()> {
        let Some(dev) = gpu() else { return Ok(()) };
        let (b, s, h, hk, d) = (2, 100, 8, 2, 64);
        let scale = 0.125f32;
        let q = rand_tensor(101, &[b, s, h, d], &dev)?;
        let k = rand_tensor(102, &[b, s, hk, d], &dev)?;
        let v = rand_tensor(103, &[b, s, hk, d], &dev)?;
        let w = rand_tensor(104, &[b, s, h, d], &dev)?;
        let mask = Mask { causal: true, ..Default::default() };
        let f64s = |t: &Tensor| t.to_dtype(DType::F64);
        let reference = grads(
            &|q, k, v| naive(q, k, v, scale as f64, &mask),
            &f64s(&q)?,
            &f64s(&k)?,
            &f64s(&v)?,
            &f64s(&w)?,
        )?;
        let bf = |t: &Tensor| t.to_dtype(DType::BF16);
        let (q, k, v, w) = (bf(&q)?, bf(&k)?, bf(&v)?, bf(&w)?);
        let ours = grads(&|q, k, v| flash_attn(q, k, v, scale, true), &q, &k, &v, &w)?;
        let own = grads(&|q, k, v| naive(q, k, v, scale as f64, &mask), &q, &k, &v, &w)?;
        for (i, name) in ["dq", "dk", "dv"].iter().enumerate() {
            check(&format!("cuda {name}"), &ours[i], &own[i], &reference[i])?;
        }
        Ok(())
    }
}
