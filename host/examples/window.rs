//! Sliding-window attention on the GPU: the forward's time against the window, at one long
//! causal shape (bf16, B = 1, H = 16, N = 16384, d = 128 by default), beside plain causal
//! attention of the same shape. TFLOP/s count the visible (query, key) pairs only, so a kernel
//! that skips the hidden key tiles keeps its rate while its time falls with the window.
//!
//! ```text
//! cargo run --release --example window -- [N] [d]
//! ```

use flashattn::{AttentionOptions, Device, GpuTimer, Layout, Problem, Window, bf16};
use rand::Rng;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dev = Device::new(0)?;
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (n, d) = (args.first().copied().unwrap_or(16_384), args.get(1).copied().unwrap_or(128));
    let (b, h) = (1, 2048 / d);
    let l = Layout::bshd(b, n, h, d);
    let len = l.required_len().unwrap_or(0);
    let mut rng = rand::rng();
    let mut host =
        || -> Vec<bf16> { (0..len).map(|_| bf16::from_f32(rng.random_range(-1.0..1.0))).collect() };
    let (q, k, v) = (dev.upload(&host())?, dev.upload(&host())?, dev.upload(&host())?);
    let mut out = dev.alloc::<bf16>(len)?;
    println!("bf16 B={b} H={h} N={n} d={d}, causal; {}", dev.props());
    println!("{:>8} | {:>9} {:>9} {:>8} | {:>9} | plan", "window", "ms", "spread", "TFLOP/s", "vs causal");
    let mut causal_ms = None;
    for left in [None, Some(8192), Some(4096), Some(2048), Some(1024), Some(512), Some(256)] {
        let opts =
            AttentionOptions { causal: true, window: Window { left, right: None }, ..Default::default() };
        let problem = Problem::new(l, l, l, l, [len; 4], &opts)?;
        let mut plan = None;
        let times = GpuTimer::time_calls(&dev, 3, 20, |_| {
            plan = Some(dev.attention(q.view(l), k.view(l), v.view(l), out.view_mut(l), None, &opts)?);
            Ok(())
        })?;
        let ms = times[times.len() / 2];
        let base = *causal_ms.get_or_insert(ms);
        let label = left.map_or("none".to_string(), |w| w.to_string());
        let kernel = plan.as_ref().map_or("", |p| p.kernel());
        println!(
            "{label:>8} | {ms:>9.3} {:>9.3} {:>8.1} | {:>8.2}× | {kernel}",
            times[times.len() - 1] - times[0],
            problem.flops() / (ms as f64 * 1e-3) / 1e12,
            base / ms
        );
    }
    Ok(())
}
