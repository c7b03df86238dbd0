//! Times decoding (one query token per sequence against a K/V cache) on Llama-3-8B's heads
//! (32 query heads sharing 8 K/V heads, d = 128, bf16) for batches 1–64 and caches of 1k–128k
//! tokens: the planner's choice, then every split count and the four-warp instance, as TB/s of
//! K and V read once. The measurements behind the split-KV rule (`kernels-gpu/NOTES.md`).
//! With `--cache`, instead: the planner's choice without and with `cache_seqlens` (every entry
//! using its whole cache, then caches of twice the capacity half used), and the same memory as a
//! paged cache (`block_table`: pages of 16, 64 and 256 tokens in shuffled order, and of 16 in order),
//! which should read K and V at the same speed. Needs a GPU.
//!
//! ```text
//! cargo run --release --example decode [-- --quick] [-- --cache]
//! ```

use flashattn::{AttentionOptions, Device, GpuTimer, Layout, Problem, Tiles, bf16};
use rand::Rng;

/// The buffers one decode shape is timed with: rotated K/V sets, the queries and the output.
struct Bench<'a> {
    dev: &'a Device,
    sets: &'a [(flashattn::DeviceBuffer<bf16>, flashattn::DeviceBuffer<bf16>)],
    q: &'a flashattn::DeviceBuffer<bf16>,
    out: flashattn::DeviceBuffer<bf16>,
}

impl Bench<'_> {
    /// Call `rep`: the queries against K/V set `rep % sets`.
    fn call(
        &mut self,
        rep: usize,
        (lq, lk): (Layout, Layout),
        opts: &AttentionOptions,
    ) -> flashattn::Result<()> {
        let (k, v) = &self.sets[rep % self.sets.len()];
        self.dev
            .attention(self.q.view(lq), k.view(lk), v.view(lk), self.out.view_mut(lq), None, opts)
            .map(|_| ())
    }

    /// Median milliseconds of `reps` timed calls after 3 warm-up calls (each call timed alone:
    /// its latency, the host's share included).
    fn time(
        &mut self,
        layouts: (Layout, Layout),
        opts: &AttentionOptions,
        reps: usize,
    ) -> flashattn::Result<f64> {
        let dev = self.dev;
        let times = GpuTimer::time_calls(dev, 3, reps, |rep| self.call(rep, layouts, opts))?;
        Ok(times[times.len() / 2] as f64)
    }

    /// Milliseconds per call over `reps` calls queued back to back between one pair of events
    /// (the host's work for a call overlaps the GPU's for the one before).
    fn back_to_back(
        &mut self,
        layouts: (Layout, Layout),
        opts: &AttentionOptions,
        reps: usize,
    ) -> flashattn::Result<f64> {
        for rep in 0..3 {
            self.call(rep, layouts, opts)?;
        }
        let timer = GpuTimer::new(self.dev)?;
        timer.start(self.dev)?;
        for rep in 0..reps {
            self.call(rep, layouts, opts)?;
        }
        timer.stop(self.dev)?;
        Ok(timer.elapsed_ms()? as f64 / reps as f64)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let quick = std::env::args().any(|a| a == "--quick");
    let cache = std::env::args().any(|a| a == "--cache");
    let dev = Device::new(0)?;
    println!("{}", dev.props());
    let (hq, hk, d) = (32usize, 8usize, 128usize);
    let mut rng = rand::rng();
    // One random block, tiled into every buffer (filling tens of GiB element by element would
    // take minutes; the timing does not depend on the values).
    let block: Vec<bf16> = (0..1 << 20).map(|_| bf16::from_f32(rng.random_range(-1.0..1.0))).collect();
    let make = |len: usize, shift: usize| -> Result<flashattn::DeviceBuffer<bf16>, flashattn::Error> {
        let data: Vec<bf16> = (0..len).map(|i| block[(i + shift) % block.len()]).collect();
        dev.upload(&data)
    };
    let batches: &[usize] = if quick { &[1, 16] } else { &[1, 4, 16, 64] };
    for &b in batches {
        for nk in [1024usize, 4096, 16384, 65536, 131072] {
            let kv_bytes = 2 * b * nk * hk * d * 2;
            if kv_bytes > 16 << 30 {
                continue;
            }
            let (lq, lk) = (Layout::bshd(b, 1, hq, d), Layout::bshd(b, nk, hk, d));
            let lk_len = lk.required_len().unwrap_or(0);
            // Three K/V sets rotated for caches that fit in L2 several times over; one beyond.
            let n_sets = if kv_bytes < 1 << 30 { 3 } else { 1 };
            let sets = (0..n_sets)
                .map(|s| Ok((make(lk_len, 7919 * s)?, make(lk_len, 7919 * s + 104_729)?)))
                .collect::<Result<Vec<_>, flashattn::Error>>()?;
            let q = make(lq.required_len().unwrap_or(0), 31)?;
            let out = dev.alloc::<bf16>(lq.required_len().unwrap_or(0))?;
            let mut bench = Bench { dev: &dev, sets: &sets, q: &q, out };
            let reps = if kv_bytes > 1 << 30 { 10 } else { 30 };
            let base = AttentionOptions::default();
            let problem = Problem::new(lq, lk, lk, lq, [q.len(), lk_len, lk_len, bench.out.len()], &base)?;
            let plan = dev.plan::<bf16>(&problem, &base)?;
            let tbs = |ms: f64| kv_bytes as f64 / (ms * 1e-3) / 1e12;
            let ms = bench.time((lq, lk), &base, reps)?;
            let mut line = format!(
                "B {b:>2} Nk {nk:>6} | plan splits {:>3} {:.3} ms {:.2} TB/s |",
                plan.splits,
                ms,
                tbs(ms)
            );
            if cache {
                // The same keys as a cache each entry uses entirely; then the first half of
                // caches of the same capacity, against contiguous caches of that half.
                let full = AttentionOptions { cache_seqlens: Some(vec![nk as u32; b]), ..base.clone() };
                let ms_full = bench.time((lq, lk), &full, reps)?;
                let half = AttentionOptions { cache_seqlens: Some(vec![nk as u32 / 2; b]), ..base.clone() };
                let ms_half = bench.time((lq, lk), &half, reps)?;
                let lk_half = Layout { seqlen: nk / 2, ..lk };
                let ms_contig_half = bench.time((lq, lk_half), &base, reps)?;
                let tbs_half = |ms: f64| tbs(ms) / 2.0;
                // The same memory as pools of 16-, 64- and 256-token pages, the pages of each entry
                // scattered over the whole pool (a shuffled table).
                let mut paged = String::new();
                let b2b = bench.back_to_back((lq, lk), &base, reps)?;
                // Pages of 16 in order too (the table names the contiguous cache's own memory):
                // against the shuffled table it separates the page-index loads' cost from that
                // of scattered 32 KiB fragments.
                for (page, shuffled) in [(16usize, true), (16, false), (64, true), (256, true)] {
                    let pages = b * nk / page;
                    let mut order: Vec<u32> = (0..pages as u32).collect();
                    use rand::seq::SliceRandom;
                    if shuffled {
                        order.shuffle(&mut rng);
                    }
                    let table = flashattn::BlockTable {
                        page_size: page,
                        pages_per_entry: nk / page,
                        pages: order.into(),
                    };
                    let opts = AttentionOptions { block_table: Some(table), ..base.clone() };
                    let pool = Layout::bshd(pages, page, hk, d);
                    let ms_paged = bench.time((lq, pool), &opts, reps)?;
                    let b2b_paged = bench.back_to_back((lq, pool), &opts, reps)?;
                    paged += &format!(
                        " | paged {page}{} {:.3} ms {:.2} TB/s ({:+.1}%; back to back {:+.1}%)",
                        if shuffled { "" } else { " in order" },
                        ms_paged,
                        tbs(ms_paged),
                        100.0 * (ms_paged / ms - 1.0),
                        100.0 * (b2b_paged / b2b - 1.0)
                    );
                }
                println!(
                    "{line} cache full {:.3} ms {:.2} TB/s ({:+.1}%) | half used {:.3} ms {:.2} TB/s, contiguous half {:.3} ms {:.2} TB/s ({:+.1}%)",
                    ms_full,
                    tbs(ms_full),
                    100.0 * (ms_full / ms - 1.0),
                    ms_half,
                    tbs_half(ms_half),
                    ms_contig_half,
                    tbs_half(ms_contig_half),
                    100.0 * (ms_half / ms_contig_half - 1.0)
                );
                println!("{paged}");
                continue;
            }
            for splits in [1usize, 2, 4, 8, 16, 32, 64, 128] {
                if splits > nk / 64 {
                    break;
                }
                let opts = AttentionOptions { splits: Some(splits), ..base.clone() };
                let ms = bench.time((lq, lk), &opts, reps)?;
                line += &format!(" s{splits} {:.2}", tbs(ms));
            }
            let four_warps =
                AttentionOptions { tiles: Tiles { block_m: Some(64), block_n: Some(64) }, ..base.clone() };
            let p4 = dev.plan::<bf16>(&problem, &four_warps)?;
            let ms = bench.time((lq, lk), &four_warps, reps)?;
            line += &format!(" | m64 (splits {}) {:.2}", p4.splits, tbs(ms));
            println!("{line}");
        }
    }
    Ok(())
}
