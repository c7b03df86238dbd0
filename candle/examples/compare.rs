//! One Llama-like attention layer (grouped-query, causal) in candle, with its attention run two
//! ways: candle's own path (matmul, softmax, matmul over `(batch, heads, seq, d)`, the way
//! candle-transformers' Llama does without flash attention) and flashattn-candle's
//! `flash_attn`. Prints the largest difference of the layer's outputs, each against the
//! reference (the layer in f32 through candle's own attention, so candle's own f32 error is 0 by
//! construction), and the time of each (best of three, the device synchronised).
//!
//! ```text
//! cargo run --release -p flashattn-candle --example compare                  # CPU
//! cargo run --release -p flashattn-candle --features cuda --example compare  # CUDA, if a GPU opens
//! ```
//!
//! Optional arguments: `seq_len batch` (default 256 2 on the CPU, 2048 4 on CUDA).

use std::time::Instant;

use candle::{D, DType, Device, Module, Result, Tensor};

/// Llama-like shapes (a small Llama 3: 16 query heads over 4 K/V heads of 64).
const HEADS: usize = 16;
const KV_HEADS: usize = 4;
const HEAD_DIM: usize = 64;
const HIDDEN: usize = HEADS * HEAD_DIM;

/// A bias-free linear layer.
struct Linear(Tensor);

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.broadcast_matmul(&self.0.t()?)
    }
}

/// The layer: projections, rotary embeddings, attention, output projection.
struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    cos: Tensor,
    sin: Tensor,
}

/// Which attention the layer runs.
#[derive(Clone, Copy, Debug)]
enum Path {
    /// candle's own: matmul, masked softmax, matmul.
    Candle,
    /// flashattn-candle's `flash_attn`.
    Flash,
}

impl Attention {
    fn new(seq: usize, dev: &Device, dt: DType) -> Result<Attention> {
        let w = |rows: usize, seed: f64| -> Result<Tensor> {
            // Deterministic weights, scaled like an initialisation (1/√hidden).
            let n = rows * HIDDEN;
            let data: Vec<f32> =
                (0..n).map(|i| ((i as f64 * 0.618_033_988 + seed).fract() as f32 - 0.5) * 0.1).collect();
            Tensor::from_vec(data, (rows, HIDDEN), dev)?.to_dtype(dt)
        };
        // Rotary tables, Llama's (θ = 10000).
        let inv: Vec<f32> =
            (0..HEAD_DIM / 2).map(|i| 1.0 / 10000f32.powf(2.0 * i as f32 / HEAD_DIM as f32)).collect();
        let inv = Tensor::new(inv.as_slice(), dev)?;
        let pos = Tensor::arange(0u32, seq as u32, dev)?.to_dtype(DType::F32)?;
        let freqs = pos.unsqueeze(1)?.broadcast_mul(&inv.unsqueeze(0)?)?;
        Ok(Attention {
            q: Linear(w(HIDDEN, 0.1)?),
            k: Linear(w(KV_HEADS * HEAD_DIM, 0.2)?),
            v: Linear(w(KV_HEADS * HEAD_DIM, 0.3)?),
            o: Linear(w(HIDDEN, 0.4)?),
            cos: freqs.cos()?.to_dtype(dt)?,
            sin: freqs.sin()?.to_dtype(dt)?,
        })
    }

    /// Rotary embeddings on `(batch, seq, heads, d)` (non-interleaved halves, as Llama).
    fn rope(&self, x: &Tensor) -> Result<Tensor> {
        let (_, seq, _, d) = x.dims4()?;
        let (x1, x2) = (x.narrow(D::Minus1, 0, d / 2)?, x.narrow(D::Minus1, d / 2, d / 2)?);
        let cos = self.cos.narrow(0, 0, seq)?.unsqueeze(1)?;
        let sin = self.sin.narrow(0, 0, seq)?.unsqueeze(1)?;
        let r1 = (x1.broadcast_mul(&cos)? - x2.broadcast_mul(&sin)?)?;
        let r2 = (x1.broadcast_mul(&sin)? + x2.broadcast_mul(&cos)?)?;
        Tensor::cat(&[r1, r2], D::Minus1)
    }

    fn forward(&self, x: &Tensor, path: Path) -> Result<Tensor> {
        let (b, seq, _) = x.dims3()?;
        let q = self.rope(&self.q.forward(x)?.reshape((b, seq, HEADS, HEAD_DIM))?)?;
        let k = self.rope(&self.k.forward(x)?.reshape((b, seq, KV_HEADS, HEAD_DIM))?)?;
        let v = self.v.forward(x)?.reshape((b, seq, KV_HEADS, HEAD_DIM))?;
        let scale = 1.0 / (HEAD_DIM as f64).sqrt();
        let y = match path {
            Path::Flash => flashattn_candle::flash_attn(&q, &k, &v, scale as f32, true)?,
            Path::Candle => candle_attention(&q, &k, &v, scale)?,
        };
        self.o.forward(&y.reshape((b, seq, HIDDEN))?)
    }
}

/// candle's own attention, as candle-transformers' Llama computes it without flash attention:
/// K/V heads repeated, `(batch, heads, seq, d)`, scores in f32, causal mask, softmax, `P·V`.
fn candle_attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
    let (b, seq, _, _) = q.dims4()?;
    let repeat = |t: &Tensor| -> Result<Tensor> {
        let t = t.transpose(1, 2)?; // (b, kv, seq, d)
        t.unsqueeze(2)?
            .expand((b, KV_HEADS, HEADS / KV_HEADS, seq, HEAD_DIM))?
            .reshape((b, HEADS, seq, HEAD_DIM))
    };
    let dt = q.dtype();
    let q = q.transpose(1, 2)?.contiguous()?.to_dtype(DType::F32)?;
    let (k, v) = (repeat(k)?.to_dtype(DType::F32)?, repeat(v)?.contiguous()?);
    let s = (q.matmul(&k.t()?)? * scale)?;
    let mask: Vec<u8> = (0..seq * seq).map(|i| u8::from(i % seq <= i / seq)).collect();
    let mask = Tensor::from_vec(mask, (seq, seq), q.device())?.broadcast_as(s.shape())?;
    let s = mask.where_cond(&s, &Tensor::new(f32::NEG_INFINITY, q.device())?.broadcast_as(s.shape())?)?;
    let e = s.broadcast_sub(&s.max_keepdim(D::Minus1)?)?.exp()?;
    let p = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?.to_dtype(dt)?;
    p.matmul(&v)?.transpose(1, 2)?.contiguous()
}

/// Largest absolute difference.
fn max_err(a: &Tensor, b: &Tensor) -> Result<f32> {
    let d = (a.to_dtype(DType::F32)? - b.to_dtype(DType::F32)?)?.abs()?;
    d.flatten_all()?.max(0)?.to_scalar::<f32>()
}

/// The layer on `x` through `path`, timed (the device synchronised), best of three.
fn timed(layer: &Attention, x: &Tensor, path: Path) -> Result<(Tensor, f64)> {
    let mut best = f64::INFINITY;
    let mut out = None;
    for _ in 0..3 {
        x.device().synchronize()?;
        let t = Instant::now();
        let y = layer.forward(x, path)?;
        y.device().synchronize()?;
        best = best.min(t.elapsed().as_secs_f64());
        out = Some(y);
    }
    Ok((out.expect("three runs"), best))
}

fn device() -> Device {
    #[cfg(feature = "cuda")]
    match Device::new_cuda(0) {
        Ok(d) => return d,
        Err(e) if std::env::var("FLASHATTN_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
            eprintln!("FLASHATTN_REQUIRE_GPU=1 but no CUDA device: {e}");
            std::process::exit(1)
        }
        Err(e) => eprintln!("no CUDA device ({e}): running on the CPU"),
    }
    Device::Cpu
}

fn main() -> Result<()> {
    let dev = device();
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (seq, batch) = match (dev.is_cuda(), args.as_slice()) {
        (_, [s, b, ..]) => (*s, *b),
        (_, [s]) => (*s, 2),
        (true, []) => (2048, 4),
        (false, []) => (256, 2),
    };
    println!(
        "device {dev:?}; batch {batch}, seq {seq}, {HEADS} query heads over {KV_HEADS} K/V heads of {HEAD_DIM}, causal"
    );
    let data: Vec<f32> =
        (0..batch * seq * HIDDEN).map(|i| ((i as f64 * 0.754_877_666).fract() as f32 - 0.5) * 2.0).collect();
    let x32 = Tensor::from_vec(data, (batch, seq, HIDDEN), &dev)?;
    let reference = Attention::new(seq, &dev, DType::F32)?.forward(&x32, Path::Candle)?;
    let dtypes: &[DType] =
        if dev.is_cuda() { &[DType::BF16, DType::F16, DType::F32] } else { &[DType::F32, DType::BF16] };
    let mut worst = 0f32;
    for &dt in dtypes {
        let layer = Attention::new(seq, &dev, dt)?;
        let x = x32.to_dtype(dt)?;
        let (own, t_own) = timed(&layer, &x, Path::Candle)?;
        let (ours, t_ours) = timed(&layer, &x, Path::Flash)?;
        let (e_own, e_ours, e_both) =
            (max_err(&own, &reference)?, max_err(&ours, &reference)?, max_err(&ours, &own)?);
        println!(
            "{dt:?}: layer output vs the f32 reference: candle's attention {e_own:.2e}, flashattn {e_ours:.2e}; \
             between them {e_both:.2e}; layer time: candle's {:.2} ms, flashattn's {:.2} ms",
            t_own * 1e3,
            t_ours * 1e3
        );
        // FlashAttention's rule: no worse than twice the framework's own path in that dtype.
        let floor = if dt == DType::F32 { 1e-5 } else { 1e-3 };
        if e_ours > 2.0 * e_own + floor {
            worst = worst.max(e_ours);
            eprintln!("{dt:?}: flashattn's error {e_ours:.2e} is over twice candle's {e_own:.2e}");
        }
    }
    if worst > 0.0 {
        candle::bail!("flashattn disagrees with candle's own attention");
    }
    println!("agree: flashattn within twice candle's own error in every dtype");
    Ok(())
}
