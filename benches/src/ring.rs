//! `flashattn-bench context-parallel`: the ring (context-parallel attention over every GPU of
//! the machine) against one GPU, on the shapes of long-context training and prefill: B = 1,
//! 32 query heads over 8 K/V heads, d = 128, bf16, causal and not, total N from 16k tokens up.
//!
//! Per (N, mask): the single-GPU time T₁ (`Device::attention`, `Method::Auto`) and the ring's
//! time T_P on P GPUs, each the median of `reps` calls timed with CUDA events after warm-up
//! (the ring's time of a call is the longest of its GPUs' times, each from an event recorded on
//! that GPU before the call to one after it); scaling efficiency T₁ / (P·T_P). Shapes whose
//! single-GPU time would be too long (`--single-max`) run on the ring only. Inputs are windows
//! of one standard-normal pool, different on every GPU. Rows go to `context-parallel.jsonl`
//! and a Markdown table to `context-parallel.md` in `--out`.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use flashattn::context_parallel::{Ring, Shard};
use flashattn::{AttentionOptions, DType, Device, DeviceBuffer, GpuTimer, Layout, bf16};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::inputs::Pools;
use crate::stats::Summary;

/// `context-parallel`'s flags.
#[derive(Debug, Args)]
pub struct RingArgs {
    /// Total sequence lengths (tokens over all GPUs).
    #[arg(long, value_delimiter = ',', default_values_t = [16_384usize, 32_768, 65_536, 131_072, 262_144])]
    pub seqlens: Vec<usize>,
    /// Masks: `none`, `causal`, or both.
    #[arg(long, value_delimiter = ',', default_values_t = ["none".to_string(), "causal".to_string()])]
    pub masks: Vec<String>,
    /// Query heads.
    #[arg(long, default_value_t = 32)]
    pub heads: usize,
    /// K/V heads.
    #[arg(long, default_value_t = 8)]
    pub kv_heads: usize,
    /// Head dim.
    #[arg(long, default_value_t = 128)]
    pub head_dim: usize,
    /// GPUs in the ring (default: all).
    #[arg(long)]
    pub gpus: Option<usize>,
    /// Longest N measured on one GPU too (longer ones run on the ring only).
    #[arg(long, default_value_t = 262_144)]
    pub single_max: usize,
    /// Timed calls per measurement (fewer for long shapes: about a second of GPU time each).
    #[arg(long, default_value_t = 20)]
    pub reps: usize,
    /// Output folder.
    #[arg(long, default_value = "results/context-parallel")]
    pub out: PathBuf,
    /// Seed of the input pool.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// After the timed calls, one more with timing events per step on every GPU: when each
    /// step's launches ended and each K/V block arrived (printed, and in the rows).
    #[arg(long)]
    pub timeline: bool,
}

/// One rank's Q, K, V, O and log-sum-exp.
type RankBufs =
    (DeviceBuffer<bf16>, DeviceBuffer<bf16>, DeviceBuffer<bf16>, DeviceBuffer<bf16>, DeviceBuffer<f32>);

/// One measurement's times (ms), per call.
fn summary(samples: &[f64]) -> Result<Summary, String> {
    Summary::of(samples).ok_or_else(|| "no finite sample".to_string())
}

/// A device buffer of `len` bf16 values: windows of the pool at random offsets.
fn random(dev: &Device, pool: &[bf16], len: usize, rng: &mut SmallRng) -> Result<DeviceBuffer<bf16>, String> {
    const PIECE: usize = 1 << 20;
    let mut host = Vec::with_capacity(len);
    while host.len() < len {
        let n = PIECE.min(len - host.len());
        let at = rng.random_range(0..pool.len() - n);
        host.extend_from_slice(&pool[at..at + n]);
    }
    dev.upload(&host).map_err(|e| e.to_string())
}

fn tflops(n: usize, heads: usize, d: usize, causal: bool, ms: f64) -> f64 {
    let pairs = if causal { n as f64 * (n as f64 + 1.0) / 2.0 } else { (n as f64).powi(2) };
    4.0 * pairs * heads as f64 * d as f64 / (ms * 1e-3) / 1e12
}

pub fn run(args: &RingArgs) -> Result<(), String> {
    let count = Device::count().map_err(|e| e.to_string())?;
    let ranks = args.gpus.unwrap_or(count);
    if ranks < 2 || ranks > count {
        return Err(format!("context-parallel needs 2..={count} GPUs here, asked for {ranks}"));
    }
    let devices = (0..ranks).map(Device::new).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())?;
    let ring = Ring::new(devices).map_err(|e| e.to_string())?;
    let masks: Vec<bool> = args
        .masks
        .iter()
        .map(|m| match m.as_str() {
            "none" => Ok(false),
            "causal" => Ok(true),
            other => Err(format!("unknown mask {other}: none or causal")),
        })
        .collect::<Result<_, _>>()?;
    for &n in &args.seqlens {
        if n % (2 * ranks) != 0 {
            return Err(format!("N = {n} is not a multiple of 2·{ranks} (the zigzag chunks)"));
        }
    }
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let rows_path = args.out.join("context-parallel.jsonl");
    let mut rows = std::fs::File::create(&rows_path).map_err(|e| format!("{}: {e}", rows_path.display()))?;
    let pool = Pools::new(1 << 26, args.seed, &[DType::BF16]);
    let pool = pool.window::<bf16>(0, 1 << 26).ok_or("empty pool")?;
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let (h, hk, d) = (args.heads, args.kv_heads, args.head_dim);
    let d0 = ring.device(0).ok_or("no device 0")?;
    eprintln!(
        "context-parallel: {ranks} × {} (peer access {}), B = 1, {h}/{hk} heads, d = {d}, bf16",
        d0.props().name,
        ring.peer_access()
    );
    let mut table = vec![
        "| N | mask | tokens/GPU | 1 GPU ms | TFLOP/s | ring ms (p10–p90) | TFLOP/s | efficiency T₁/(P·T_P) | step method |".to_string(),
        "|---|---|---|---|---|---|---|---|---|".to_string(),
    ];
    for &n in &args.seqlens {
        for &causal in &masks {
            let opts = AttentionOptions { causal, ..Default::default() };
            // Calls per measurement: about a second of ring time, at least 3.
            let est_ms =
                4.0 * (n as f64).powi(2) * (h * d) as f64 / if causal { 2.0 } else { 1.0 } / 4e14 * 1e3;
            let reps = (args.reps as f64).min((1000.0 / (est_ms / ranks as f64)).ceil()).max(3.0) as usize;
            // One GPU.
            let single = if n <= args.single_max {
                let (lq, lk) = (Layout::bshd(1, n, h, d), Layout::bshd(1, n, hk, d));
                let q = random(d0, pool, lq.required_len().unwrap_or(0), &mut rng)?;
                let k = random(d0, pool, lk.required_len().unwrap_or(0), &mut rng)?;
                let v = random(d0, pool, lk.required_len().unwrap_or(0), &mut rng)?;
                let mut o = d0.alloc::<bf16>(q.len()).map_err(|e| e.to_string())?;
                let mut lse = d0.alloc::<f32>(h * n).map_err(|e| e.to_string())?;
                let mut call = || {
                    d0.attention(q.view(lq), k.view(lk), v.view(lk), o.view_mut(lq), Some(&mut lse), &opts)
                        .map_err(|e| e.to_string())
                };
                let plan = call()?;
                let timer = GpuTimer::new(d0).map_err(|e| e.to_string())?;
                let mut ms = Vec::with_capacity(reps);
                for _ in 0..reps {
                    timer.start(d0).map_err(|e| e.to_string())?;
                    call()?;
                    timer.stop(d0).map_err(|e| e.to_string())?;
                    ms.push(timer.elapsed_ms().map_err(|e| e.to_string())? as f64);
                }
                Some((summary(&ms)?, plan.method.name()))
            } else {
                None
            };
            // The ring.
            let l = n / ranks;
            let (lq, lk) = (Layout::bshd(1, l, h, d), Layout::bshd(1, l, hk, d));
            let mut bufs = Vec::with_capacity(ranks);
            for r in 0..ranks {
                let dev = ring.device(r).ok_or("no device")?;
                let q = random(dev, pool, lq.required_len().unwrap_or(0), &mut rng)?;
                let k = random(dev, pool, lk.required_len().unwrap_or(0), &mut rng)?;
                let v = random(dev, pool, lk.required_len().unwrap_or(0), &mut rng)?;
                let o = dev.alloc::<bf16>(q.len()).map_err(|e| e.to_string())?;
                let lse = dev.alloc::<f32>(h * l).map_err(|e| e.to_string())?;
                bufs.push((q, k, v, o, lse));
            }
            let call = |bufs: &mut Vec<RankBufs>| {
                let mut shards: Vec<Shard<'_, bf16>> = bufs
                    .iter_mut()
                    .map(|(q, k, v, o, lse)| Shard {
                        q: q.view(lq),
                        k: k.view(lk),
                        v: v.view(lk),
                        out: o.view_mut(lq),
                        lse: Some(lse),
                    })
                    .collect();
                ring.attention(&mut shards, &opts).map_err(|e| e.to_string())
            };
            let plan = call(&mut bufs)?;
            ring.synchronize(std::time::Duration::from_secs(600)).map_err(|e| e.to_string())?;
            let timers = (0..ranks)
                .map(|r| GpuTimer::new(ring.device(r).ok_or("no device")?).map_err(|e| e.to_string()))
                .collect::<Result<Vec<_>, _>>()?;
            let mut ms = Vec::with_capacity(reps);
            let mut wall = Vec::with_capacity(reps);
            for _ in 0..reps {
                let t0 = std::time::Instant::now();
                for (r, t) in timers.iter().enumerate() {
                    t.start(ring.device(r).ok_or("no device")?).map_err(|e| e.to_string())?;
                }
                call(&mut bufs)?;
                for (r, t) in timers.iter().enumerate() {
                    t.stop(ring.device(r).ok_or("no device")?).map_err(|e| e.to_string())?;
                }
                ring.synchronize(std::time::Duration::from_secs(600)).map_err(|e| e.to_string())?;
                wall.push(t0.elapsed().as_secs_f64() * 1e3);
                let mut worst = 0.0f64;
                for t in &timers {
                    worst = worst.max(t.elapsed_ms().map_err(|e| e.to_string())? as f64);
                }
                ms.push(worst);
            }
            let timeline = if args.timeline {
                ring.record_timeline(true);
                call(&mut bufs)?;
                ring.synchronize(std::time::Duration::from_secs(600)).map_err(|e| e.to_string())?;
                ring.record_timeline(false);
                let t = ring.timeline().map_err(|e| e.to_string())?;
                for (r, rt) in t.iter().enumerate() {
                    eprintln!(
                        "  timeline N = {n} {} rank {r}: steps end at {:?} ms, blocks arrive at {:?} ms, end {:.3} ms",
                        if causal { "causal" } else { "none" },
                        rt.steps,
                        rt.arrivals,
                        rt.end
                    );
                }
                Some(
                    t.iter()
                        .map(|rt| json!({"steps_ms": rt.steps, "arrivals_ms": rt.arrivals, "end_ms": rt.end}))
                        .collect::<Vec<_>>(),
                )
            } else {
                None
            };
            let ring_ms = summary(&ms)?;
            let wall_ms = summary(&wall)?;
            let method = plan.step_plans.first().map_or("-", |p| p.method.name());
            let eff = single.map(|(s, _)| s.median / (ranks as f64 * ring_ms.median));
            let row = json!({
                "kind": "context-parallel",
                "seqlen": n,
                "causal": causal,
                "ranks": ranks,
                "batch": 1, "heads": h, "kv_heads": hk, "head_dim": d, "dtype": "bf16",
                "tokens_per_gpu": l,
                "transport": format!("{:?}", plan.transport),
                "peer_access": plan.peer_access,
                "step_method": method,
                "scratch_bytes_per_gpu": plan.scratch_bytes,
                "single_ms": single.map(|(s, _)| s),
                "single_method": single.map(|(_, m)| m),
                "ring_ms": ring_ms,
                "ring_wall_ms": wall_ms,
                "single_tflops": single.map(|(s, _)| tflops(n, h, d, causal, s.median)),
                "ring_tflops": tflops(n, h, d, causal, ring_ms.median),
                "efficiency": eff,
                "reps": reps,
                "timeline": timeline,
            });
            writeln!(rows, "{row}").map_err(|e| e.to_string())?;
            let line = format!(
                "| {n} | {} | {l} | {} | {} | {:.3} ({:.3}–{:.3}) | {:.0} | {} | {method} |",
                if causal { "causal" } else { "none" },
                single.map_or("-".into(), |(s, _)| format!("{:.3}", s.median)),
                single.map_or("-".into(), |(s, _)| format!("{:.0}", tflops(n, h, d, causal, s.median))),
                ring_ms.median,
                ring_ms.p10,
                ring_ms.p90,
                tflops(n, h, d, causal, ring_ms.median),
                eff.map_or("-".into(), |e| format!("{:.1}%", 100.0 * e)),
            );
            eprintln!("{line}");
            table.push(line);
        }
    }
    let md = args.out.join("context-parallel.md");
    std::fs::write(&md, table.join("\n") + "\n").map_err(|e| format!("{}: {e}", md.display()))?;
    eprintln!("context-parallel: wrote {} and {}", rows_path.display(), md.display());
    Ok(())
}
