//! Causal attention over one sequence spread across every GPU of the machine (at least two),
//! checked against the same attention on one GPU.
//!
//! ```text
//! cargo run --release --example context_parallel -- [tokens]
//! ```
//! B = 1, 32 query heads over 8 K/V heads, d = 128, bf16; 65536 tokens by default (a multiple of
//! 2·GPUs). Prints the largest difference between the two results.

use flashattn::context_parallel::{Ring, Shard, shard_tokens};
use flashattn::{AttentionOptions, Device, Layout, bf16};
use rand::Rng;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).map_or(Ok(65_536), |a| a.parse())?;
    let gpus = Device::count()?;
    if gpus < 2 {
        println!("context-parallel attention needs 2 GPUs or more; this machine has {gpus}");
        return Ok(());
    }
    let ring = Ring::new((0..gpus).map(Device::new).collect::<Result<Vec<_>, _>>()?)?;
    let (ranks, heads, kv_heads, d) = (ring.ranks(), 32, 8, 128);
    let opts = AttentionOptions { causal: true, ..Default::default() };

    // The whole sequence on the host.
    let mut rng = rand::rng();
    let (lq, lk) = (Layout::bshd(1, n, heads, d), Layout::bshd(1, n, kv_heads, d));
    let mut random =
        |len: usize| -> Vec<bf16> { (0..len).map(|_| bf16::from_f32(rng.random_range(-1.0..1.0))).collect() };
    let (q, k, v) = (random(n * heads * d), random(n * kv_heads * d), random(n * kv_heads * d));

    // Each rank's shard: the zigzag chunks `shard_tokens(r, P, n)`, in that order (bshd rows of
    // consecutive tokens are contiguous, so each chunk is one slice).
    let shard_len = n / ranks;
    let (sq, sk) = (Layout::bshd(1, shard_len, heads, d), Layout::bshd(1, shard_len, kv_heads, d));
    let rows = |x: &[bf16], width: usize, r: usize| -> Vec<bf16> {
        let chunks = shard_tokens(r, ranks, n).expect("n is a multiple of 2·GPUs");
        chunks.iter().flat_map(|c| x[c.start * width..c.end * width].iter().copied()).collect()
    };
    let mut bufs = Vec::with_capacity(ranks);
    for r in 0..ranks {
        let dev = ring.device(r).ok_or("no device")?;
        bufs.push((
            dev.upload(&rows(&q, heads * d, r))?,
            dev.upload(&rows(&k, kv_heads * d, r))?,
            dev.upload(&rows(&v, kv_heads * d, r))?,
            dev.alloc::<bf16>(shard_len * heads * d)?,
        ));
    }
    let mut shards: Vec<Shard<'_, bf16>> = bufs
        .iter_mut()
        .map(|(q, k, v, o)| Shard {
            q: q.view(sq),
            k: k.view(sk),
            v: v.view(sk),
            out: o.view_mut(sq),
            lse: None,
        })
        .collect();
    let t = std::time::Instant::now();
    let plan = ring.attention(&mut shards, &opts)?;
    ring.synchronize(std::time::Duration::from_secs(120))?;
    println!(
        "{ranks} GPUs (peer access {}), {n} tokens: {:.1} ms including the first call's setup, {} MiB scratch per GPU",
        plan.peer_access,
        t.elapsed().as_secs_f64() * 1e3,
        plan.scratch_bytes >> 20
    );

    // The same attention on GPU 0.
    let dev = ring.device(0).ok_or("no device")?;
    let (gq, gk, gv) = (dev.upload(&q)?, dev.upload(&k)?, dev.upload(&v)?);
    let mut go = dev.alloc::<bf16>(q.len())?;
    dev.attention(gq.view(lq), gk.view(lk), gv.view(lk), go.view_mut(lq), None, &opts)?;
    let whole = dev.download(&go)?;
    let mut worst = 0.0f32;
    for (r, (_, _, _, o)) in bufs.iter().enumerate() {
        let got = ring.device(r).ok_or("no device")?.download(o)?;
        let want = rows(&whole, heads * d, r);
        for (a, b) in got.iter().zip(&want) {
            worst = worst.max((a.to_f32() - b.to_f32()).abs());
        }
    }
    println!("largest difference from one GPU: {worst:.3e}");
    Ok(())
}
