//! Times one attention shape on the GPU with every method, as a first look (the full sweeps are
//! `cargo xtask bench`).
//!
//! ```text
//! cargo run --release --example timing -- [batch seqlen heads head_dim causal(0|1)]...
//! ```
//! Defaults to the headline shapes: bf16, B·N = 16384, H·d = 2048.

use flashattn::{AttentionOptions, Device, GpuTimer, Layout, Method, Problem, bf16};
use rand::Rng;

fn time_ms(
    dev: &Device,
    reps: usize,
    mut f: impl FnMut() -> flashattn::Result<()>,
) -> flashattn::Result<f32> {
    let times = GpuTimer::time_calls(dev, 3, reps, |_| f())?;
    Ok(times[reps / 2])
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let shapes: Vec<[usize; 5]> = if args.len() >= 5 {
        args.chunks_exact(5).map(|c| [c[0], c[1], c[2], c[3], c[4]]).collect()
    } else {
        let mut v = Vec::new();
        for d in [64, 128] {
            for causal in [0, 1] {
                for n in [1024, 4096, 16384] {
                    v.push([16384 / n, n, 2048 / d, d, causal]);
                }
            }
        }
        v
    };
    let dev = Device::new(0)?;
    println!("{}", dev.props());
    println!(
        "{:>5} {:>6} {:>4} {:>4} {:>6} | {:>22} {:>22} {:>22}",
        "B", "N", "H", "d", "causal", "flash-tc", "flash", "standard"
    );
    let mut rng = rand::rng();
    for [b, n, h, d, causal] in shapes {
        let l = Layout::bshd(b, n, h, d);
        let len = l.required_len().unwrap_or(0);
        let data: Vec<bf16> = (0..len).map(|_| bf16::from_f32(rng.random_range(-1.0..1.0))).collect();
        let (q, k, v) = (dev.upload(&data)?, dev.upload(&data)?, dev.upload(&data)?);
        let mut out = dev.alloc::<bf16>(len)?;
        let mut line = format!("{b:>5} {n:>6} {h:>4} {d:>4} {causal:>6} |");
        for method in [Method::FlashTensorCore, Method::Flash, Method::Standard] {
            let opts = AttentionOptions { method, causal: causal == 1, ..Default::default() };
            let problem = Problem::new(l, l, l, l, [len; 4], &opts)?;
            let reps = if method == Method::Flash { 3 } else { 20 };
            let r = time_ms(&dev, reps, || {
                dev.attention(q.view(l), k.view(l), v.view(l), out.view_mut(l), None, &opts).map(|_| ())
            });
            line += &match r {
                Ok(ms) => {
                    format!(" {:>9.3} ms {:>6.1} TF/s", ms, problem.flops() / (ms as f64 * 1e-3) / 1e12)
                }
                Err(e) => format!(
                    " {:>22}",
                    format!("error: {}", e.to_string().chars().take(14).collect::<String>())
                ),
            };
        }
        println!("{line}");
    }
    Ok(())
}
