//! Times the GPU backward pass beside the forward on the headline shapes (a first look; the
//! sweeps with PyTorch beside them are `cargo xtask bench run --pass fwd,bwd`).
//!
//! ```text
//! cargo run --release --example backward -- [f16|bf16] [head dims…]
//! ```
//! bf16 by default; B·N = 16384, H·d = 2048, d ∈ {64, 128} (or the head dims given), causal and
//! not, N = 1024…16384.
//! TFLOP/s count the backward as 2.5× the forward's FLOPs (FlashAttention's convention).

use flashattn::{AttentionOptions, Device, DeviceGradients, Element, GpuTimer, Layout, Problem, bf16, f16};
use rand::Rng;

fn time_ms(
    dev: &Device,
    reps: usize,
    mut f: impl FnMut() -> flashattn::Result<()>,
) -> flashattn::Result<(f32, f32)> {
    let times = GpuTimer::time_calls(dev, 3, reps, |_| f())?;
    Ok((times[reps / 2], times[reps - 1] - times[0]))
}

fn run<T: Element>(dev: &Device, dims: &[usize]) -> Result<(), Box<dyn std::error::Error>> {
    println!("{} {}", T::DTYPE, dev.props());
    println!(
        "{:>4} {:>6} {:>4} {:>4} {:>6} | {:>9} {:>7} | {:>9} {:>7} {:>8} | {:>10} | {:>9} {:>7}",
        "B",
        "N",
        "H",
        "d",
        "causal",
        "fwd ms",
        "TF/s",
        "bwd ms",
        "TF/s",
        "spread",
        "extra MiB",
        "det ms",
        "TF/s"
    );
    let mut rng = rand::rng();
    for &d in dims {
        for causal in [false, true] {
            for n in [1024, 2048, 4096, 8192, 16384] {
                let (b, h) = (16384 / n, 2048 / d);
                let l = Layout::bshd(b, n, h, d);
                let len = l.required_len().unwrap_or(0);
                let mut host = |_: ()| -> Vec<T> {
                    (0..len).map(|_| T::from_f32(rng.random_range(-1.0..1.0))).collect()
                };
                let (q, k, v, d_o) = (
                    dev.upload(&host(()))?,
                    dev.upload(&host(()))?,
                    dev.upload(&host(()))?,
                    dev.upload(&host(()))?,
                );
                let (mut out, mut dq, mut dk, mut dv) =
                    (dev.alloc::<T>(len)?, dev.alloc::<T>(len)?, dev.alloc::<T>(len)?, dev.alloc::<T>(len)?);
                let opts = AttentionOptions { causal, ..Default::default() };
                let problem = Problem::new(l, l, l, l, [len; 4], &opts)?;
                let mut lse = dev.alloc::<f32>(problem.lse_len())?;
                let (fwd, _) = time_ms(dev, 20, || {
                    dev.attention(q.view(l), k.view(l), v.view(l), out.view_mut(l), Some(&mut lse), &opts)
                        .map(|_| ())
                })?;
                // The backward, plain and in the deterministic mode (key tiles add to dQ in a
                // fixed order); the extra device memory from the plan.
                let mut time_backward = |opts: &AttentionOptions| -> flashattn::Result<((f32, f32), u64)> {
                    let mut extra = 0;
                    let t = time_ms(dev, 20, || {
                        let grads =
                            DeviceGradients { dq: dq.view_mut(l), dk: dk.view_mut(l), dv: dv.view_mut(l) };
                        let plan = dev.attention_backward(
                            q.view(l),
                            k.view(l),
                            v.view(l),
                            out.view(l),
                            &lse,
                            d_o.view(l),
                            grads,
                            opts,
                        )?;
                        extra = plan.scratch_bytes;
                        Ok(())
                    })?;
                    Ok((t, extra))
                };
                let ((bwd, spread), extra) = time_backward(&opts)?;
                let ((det, _), _) = time_backward(&AttentionOptions { deterministic: true, ..opts.clone() })?;
                let tf = |flops: f64, ms: f32| flops / (ms as f64 * 1e-3) / 1e12;
                println!(
                    "{b:>4} {n:>6} {h:>4} {d:>4} {:>6} | {fwd:>9.3} {:>7.1} | {bwd:>9.3} {:>7.1} {spread:>8.3} | {:>10.1} | {det:>9.3} {:>7.1}",
                    causal as u8,
                    tf(problem.flops(), fwd),
                    tf(2.5 * problem.flops(), bwd),
                    extra as f64 / (1 << 20) as f64,
                    tf(2.5 * problem.flops(), det)
                );
            }
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dev = Device::new(0)?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut dims: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if dims.is_empty() {
        dims = vec![64, 128];
    }
    match args.first().map(String::as_str) {
        Some("f16") => run::<f16>(&dev, &dims),
        _ => run::<bf16>(&dev, &dims),
    }
}
