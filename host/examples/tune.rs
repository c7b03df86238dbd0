//! Times every instantiated tensor-core configuration (`MMA_CONFIGS`) on the headline shapes,
//! through the public API with a tile override per configuration: the measurements behind the
//! default tile choice (`kernels-gpu/NOTES.md`). Needs a GPU.
//!
//! ```text
//! cargo run --release --example tune
//! ```

use flashattn::kernels::config::MMA_CONFIGS;
use flashattn::{AttentionOptions, Device, GpuTimer, Layout, Method, Problem, Tiles, bf16};
use rand::Rng;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dev = Device::new(0)?;
    println!("{}", dev.props());
    let mut rng = rand::rng();
    for d in [64usize, 128, 256] {
        for causal in [false, true] {
            for n in [1024usize, 4096, 16384] {
                let (b, h) = (16384 / n, 2048 / d);
                let l = Layout::bshd(b, n, h, d);
                let len = l.required_len().unwrap_or(0);
                // Three input sets, rotated, so that small shapes are not served from L2.
                let sets: Vec<_> = (0..3)
                    .map(|_| {
                        let data: Vec<bf16> =
                            (0..len).map(|_| bf16::from_f32(rng.random_range(-1.0..1.0))).collect();
                        dev.upload(&data)
                    })
                    .collect::<Result<_, _>>()?;
                let mut out = dev.alloc::<bf16>(len)?;
                let base = AttentionOptions { causal, method: Method::FlashTensorCore, ..Default::default() };
                let problem = Problem::new(l, l, l, l, [len; 4], &base)?;
                let mut line = format!("d {d:>3} causal {causal:>5} N {n:>5} B {b:>2} H {h:>2} |");
                for c in MMA_CONFIGS.iter().filter(|c| c.head_dim as usize == d) {
                    let tiles =
                        Tiles { block_m: Some(c.block_m as usize), block_n: Some(c.block_n as usize) };
                    let opts = AttentionOptions { tiles, ..base.clone() };
                    let times = GpuTimer::time_calls(&dev, 3, 20, |rep| {
                        let s = rep % 3;
                        let (q, k, v) = (&sets[s], &sets[(s + 1) % 3], &sets[(s + 2) % 3]);
                        dev.attention(q.view(l), k.view(l), v.view(l), out.view_mut(l), None, &opts)
                            .map(|_| ())
                    })?;
                    let ms = times[times.len() / 2] as f64;
                    let name = format!("m{}n{}w{}v{}", c.block_m, c.block_n, c.warps, c.v_stages);
                    line += &format!(" {name} {:.1}", problem.flops() / (ms * 1e-3) / 1e12);
                }
                println!("{line}");
            }
        }
    }
    Ok(())
}
