//! Times every instantiated tensor-core configuration (`MMA_CONFIGS`) on the headline shapes,
//! by launching the kernels directly: the measurements behind the default tile choice
//! (`kernels-gpu/NOTES.md`). Needs a GPU.
//!
//! ```text
//! cargo run --release --example tune
//! ```

use flashattn::kernels::config::{MMA_CONFIGS, MMA_KERNELS};
use flashattn::kernels::params::AttnParams;
use flashattn::{AttentionOptions, Device, GpuTimer, Kernel, LaunchShape, Layout, Problem, bf16};
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
                let out = dev.alloc::<bf16>(len)?;
                let opts = AttentionOptions { causal, ..Default::default() };
                let problem = Problem::new(l, l, l, l, [len; 4], &opts)?;
                let mut line = format!("d {d:>3} causal {causal:>5} N {n:>5} B {b:>2} H {h:>2} |");
                for (i, c) in MMA_CONFIGS.iter().enumerate() {
                    if c.head_dim as usize != d {
                        continue;
                    }
                    let params = |s: usize| {
                        let st = [l.batch_stride as u64, l.seq_stride as u64, l.head_stride as u64];
                        AttnParams {
                            q: sets[s].device_address(),
                            k: sets[(s + 1) % 3].device_address(),
                            v: sets[(s + 2) % 3].device_address(),
                            o: out.device_address(),
                            q_strides: st,
                            k_strides: st,
                            v_strides: st,
                            o_strides: st,
                            seqlen_q: n as u32,
                            seqlen_k: n as u32,
                            heads_q: h as u32,
                            group: 1,
                            head_dim: d as u32,
                            scale_log2: problem.scale_log2(),
                            causal: causal as u32,
                            block_n: c.block_n,
                            lse_seq_stride: n as u32,
                            ..Default::default()
                        }
                    };
                    let kernel = Kernel::FlashMma { bf16: true, config: i as u8 };
                    let shape = LaunchShape {
                        grid: (n.div_ceil(c.block_m as usize) as u32, h as u32, b as u32),
                        block: (c.threads(), 1, 1),
                        shared_bytes: c.shared_bytes(),
                    };
                    let timer = GpuTimer::new(&dev)?;
                    let mut times = Vec::new();
                    for rep in 0..23 {
                        let p = params(rep % 3);
                        timer.start(&dev)?;
                        // SAFETY: the parameters describe the buffers above (BSHD, contiguous).
                        unsafe { dev.launch(kernel, shape, &p)? };
                        timer.stop(&dev)?;
                        if rep >= 3 {
                            times.push(timer.elapsed_ms()?);
                        }
                    }
                    times.sort_by(f32::total_cmp);
                    let ms = times[times.len() / 2] as f64;
                    let name = MMA_KERNELS[1][i].trim_start_matches("flash_fwd_mma_bf16_");
                    line += &format!(" {name} {:.1}", problem.flops() / (ms * 1e-3) / 1e12);
                }
                println!("{line}");
            }
        }
    }
    Ok(())
}
