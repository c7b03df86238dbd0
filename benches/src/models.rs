//! The numbers a row is judged by, from its shape alone: the FLOP count, modeled HBM traffic per
//! method, and the layouts and options an attention call on the shape uses.
//!
//! FLOPs: `4·B·H·Nq·Nk·d` (two matrix products of `2·Nq·Nk·d` each), halved under the causal
//! mask, summed over the ragged sequences for varlen; with a sliding window, `4·H·d` per visible
//! (query, key) pair: [`flashattn::Problem::flops`].
//!
//! Bytes (every tensor in its storage type, the log-sum-exp in f32; Q, O and the LSE have the
//! query heads, K and V the K/V heads, fewer under grouped-query attention):
//! - flash: Q read once, O and the LSE written once, K and V read once per query tile
//!   (`ceil(Nq/block_m)` passes; under the causal mask a tile reads the keys up to its last row's
//!   diagonal, rounded up to `block_n`; with a left window from its first row's first key), once
//!   per K/V head: the query heads of a group read the
//!   same K/V head and are counted once. No other reuse through L2 is assumed, so this is an upper
//!   bound on DRAM traffic; Nsight Compute's measured bytes show how much L2 saves.
//! - standard: Q, K, V read once, S (f32) written and read, P (storage type) written and read,
//!   O and the LSE written. The score GEMM is dense, so the causal mask saves no traffic.
//! - compulsory: every input and output once (of K and V, with a window, only the keys some query
//!   sees): the floor any method pays.

use flashattn::{AttentionOptions, InvalidInput, Layout, Method, Problem, Tiles, VarLen, Window};

use crate::shapes::{Shape, Softcap, Variant, alibi_slopes};

/// Q, K, V and O layouts of a shape: `(B, N, H, d)` in memory (or `(B, H, N, d)` when `bhsd`);
/// packed `(total tokens, H, d)` for varlen. K and V have the shape's K/V heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layouts {
    /// Q.
    pub q: Layout,
    /// K (and V).
    pub k: Layout,
    /// O (same as Q).
    pub o: Layout,
}

impl Layouts {
    /// The layouts of `shape`; `bhsd` selects PyTorch's memory order (ignored for varlen, which is
    /// packed by tokens).
    pub fn new(shape: &Shape, bhsd: bool) -> Layouts {
        let (b, h, hkv, d) = (shape.batch, shape.heads, shape.kv_heads, shape.head_dim);
        if shape.mask.varlen() {
            let (q, k) = shape.lengths();
            let tq = q.iter().map(|&x| x as usize).sum();
            let tk = k.iter().map(|&x| x as usize).sum();
            let q = Layout::packed(tq, h, d);
            return Layouts { q, k: Layout::packed(tk, hkv, d), o: q };
        }
        let make = if bhsd { Layout::bhsd } else { Layout::bshd };
        let q = make(b, shape.seqlen_q, h, d);
        Layouts { q, k: make(b, shape.seqlen_k, hkv, d), o: q }
    }

    /// Elements of Q (= O) and of K (= V).
    pub fn lens(&self) -> (usize, usize) {
        (self.q.required_len().unwrap_or(0), self.k.required_len().unwrap_or(0))
    }
}

/// The options of a call on `shape` with the library's defaults (method `Flash`): mask, varlen
/// offsets, the left sliding window (unbounded on the right, which the causal mask bounds) and
/// the score modifiers: the softcap, and ALiBi with BLOOM's slopes ([`alibi_slopes`]), one per
/// query head.
pub fn options(shape: &Shape) -> Result<AttentionOptions, InvalidInput> {
    let (q, k) = shape.lengths();
    let varlen = shape.mask.varlen().then(|| VarLen::from_lengths(&q, &k)).transpose()?;
    Ok(AttentionOptions {
        causal: shape.mask.causal(),
        varlen,
        method: Method::Flash,
        window: Window { left: shape.window, right: None },
        softcap: shape.softcap.map(Softcap::get),
        alibi_slopes: shape.alibi.then(|| alibi_slopes(shape.heads)),
        ..Default::default()
    })
}

/// `opts` with a variant's method and tile override.
pub fn with_variant(opts: &AttentionOptions, v: &Variant) -> AttentionOptions {
    let tiles =
        v.tiles.map_or(Tiles::default(), |t| Tiles { block_m: Some(t.block_m), block_n: Some(t.block_n) });
    AttentionOptions { method: v.method, tiles, ..opts.clone() }
}

/// The validated problem of a shape (the library's own checks).
pub fn problem(shape: &Shape) -> Result<Problem, InvalidInput> {
    let l = Layouts::new(shape, false);
    let (lq, lk) = l.lens();
    Problem::new(l.q, l.k, l.k, l.o, [lq, lk, lk, lq], &options(shape)?)
}

/// FLOPs of one call (see the module doc).
pub fn flops(shape: &Shape) -> f64 {
    problem(shape).map_or(0.0, |p| p.flops())
}

/// Bytes of the log-sum-exp output (f32 per query row and head).
pub fn lse_bytes(shape: &Shape) -> u64 {
    let (q, _) = shape.lengths();
    4 * shape.heads as u64 * q.iter().map(|&x| x as u64).sum::<u64>()
}

/// Bytes of Q, K, V, O and the LSE: one input set and its outputs.
pub fn io_bytes(shape: &Shape) -> u64 {
    let l = Layouts::new(shape, false);
    let (q, k) = l.lens();
    (2 * q as u64 + 2 * k as u64) * shape.dtype.size_bytes() as u64 + lse_bytes(shape)
}

/// Every input and output once; of K and V only the keys some query sees (all without a window:
/// [`Shape::kv_bytes`]), so that a window's compulsory bytes are its floor too.
pub fn compulsory_bytes(shape: &Shape) -> f64 {
    let l = Layouts::new(shape, false);
    let q = l.lens().0 as u64;
    (2 * q * shape.dtype.size_bytes() as u64 + shape.kv_bytes() + lse_bytes(shape)) as f64
}

/// Modeled HBM bytes of the flash kernel with `block_m × block_n` tiles (see the module doc).
pub fn flash_bytes(shape: &Shape, block_m: usize, block_n: usize) -> f64 {
    let (e, d, h) = (shape.dtype.size_bytes() as f64, shape.head_dim as f64, shape.heads as f64);
    let hkv = shape.kv_heads as f64;
    let (block_m, block_n) = (block_m.max(1), block_n.max(1));
    let (qs, ks) = shape.lengths();
    let mut total = 0.0;
    for (&nq, &nk) in qs.iter().zip(&ks) {
        let (nq, nk) = (nq as usize, nk as usize);
        let mut kv_keys = 0usize;
        for r0 in (0..nq).step_by(block_m) {
            let last = (r0 + block_m).min(nq) - 1;
            let visible = if shape.mask.causal() { (last + 1 + nk).saturating_sub(nq).min(nk) } else { nk };
            // A left window: the tile's keys start at its first row's first key.
            let first = shape.window.map_or(0, |left| (r0 + nk).saturating_sub(nq + left).min(visible));
            kv_keys += ((visible - first).div_ceil(block_n) * block_n).min(nk - first);
        }
        // Q read, O written, LSE written (query heads); K and V per query tile (K/V heads).
        total += h * (2.0 * nq as f64 * d * e + 4.0 * nq as f64) + hkv * 2.0 * kv_keys as f64 * d * e;
    }
    total
}

/// Modeled HBM bytes of standard attention (see the module doc).
pub fn standard_bytes(shape: &Shape) -> f64 {
    let (e, d, h) = (shape.dtype.size_bytes() as f64, shape.head_dim as f64, shape.heads as f64);
    let hkv = shape.kv_heads as f64;
    let (qs, ks) = shape.lengths();
    let mut total = 0.0;
    for (&nq, &nk) in qs.iter().zip(&ks) {
        let (nq, nk) = (nq as f64, nk as f64);
        let q_o = 2.0 * nq * d * e;
        let s = 2.0 * 4.0 * nq * nk;
        let p = 2.0 * e * nq * nk;
        total += h * (q_o + s + p + 4.0 * nq) + hkv * 2.0 * nk * d * e;
    }
    total
}

/// Modeled bytes of a plan: standard attention's, or the flash kernel's with the plan's tiles.
pub fn plan_bytes(shape: &Shape, tiles: Option<(usize, usize)>) -> f64 {
    match tiles {
        None => standard_bytes(shape),
        Some((block_m, block_n)) => flash_bytes(shape, block_m, block_n),
    }
}

/// Extra memory of the CPU methods: standard materializes every score (f32), the tiled method
/// holds one Q, K, V and accumulator tile plus one row of scores and the softmax states.
pub fn cpu_extra_bytes(shape: &Shape, tiled: Option<(usize, usize)>) -> u64 {
    let (qs, ks) = shape.lengths();
    match tiled {
        None => {
            let pairs: u64 = qs.iter().zip(&ks).map(|(&q, &k)| q as u64 * k as u64).sum();
            4 * shape.heads as u64 * pairs
        }
        Some((bm, bn)) => {
            let max_q = qs.iter().copied().max().unwrap_or(0) as usize;
            let max_k = ks.iter().copied().max().unwrap_or(0) as usize;
            let (bm, bn, d) =
                (bm.min(max_q.max(1)) as u64, bn.min(max_k.max(1)) as u64, shape.head_dim as u64);
            4 * (2 * bm * d + 2 * bn * d + bn)
                + bm * size_of::<flashattn::kernels::softmax::OnlineSoftmax>() as u64
        }
    }
}

/// Extra memory of the CPU backward (`flashattn::cpu::attention_backward`) as the library states
/// it, O(N): per query row (every head's query tokens) three f32 (D as a pivot and a sum relative
/// to it, and the normaliser 1/Σ P) and an f32 row of `d` (the dQ accumulator), plus one row of
/// (P, dP) f32 pairs as long as the longest key sequence. Nothing of size Nq × Nk.
pub fn cpu_backward_extra_bytes(shape: &Shape) -> u64 {
    let (qs, ks) = shape.lengths();
    let rows = shape.heads as u64 * qs.iter().map(|&x| x as u64).sum::<u64>();
    let max_k = ks.iter().copied().max().unwrap_or(0) as u64;
    4 * rows * (3 + shape.head_dim as u64) + 2 * 4 * max_k
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shapes::Mask;
    use flashattn::DType;

    fn shape(mask: Mask, nq: usize, nk: usize) -> Shape {
        Shape {
            dtype: DType::BF16,
            batch: 2,
            heads: 3,
            kv_heads: 3,
            seqlen_q: nq,
            seqlen_k: nk,
            head_dim: 64,
            mask,
            window: None,
            softcap: None,
            alibi: false,
        }
    }

    #[test]
    fn a_window_reads_fewer_keys_and_sets_the_options() {
        let causal = shape(Mask::Causal, 1024, 1024);
        let w = Shape { window: Some(128), ..causal.clone() };
        assert_eq!(options(&w).unwrap().window, Window { left: Some(128), right: None });
        assert!(options(&causal).unwrap().window.is_none());
        assert!(flash_bytes(&w, 64, 64) < flash_bytes(&causal, 64, 64));
        // A window wider than the sequence is plain causal attention.
        let wide = Shape { window: Some(4096), ..causal.clone() };
        assert_eq!(flash_bytes(&wide, 64, 64), flash_bytes(&causal, 64, 64));
        // FLOPs count the visible pairs (the diagonal included), not half the square.
        assert_eq!(flops(&wide), 4.0 * 2.0 * 3.0 * 64.0 * (1024.0 * 1025.0 / 2.0));
    }

    #[test]
    fn score_mods_set_the_options_and_keep_the_flops() {
        let causal = shape(Mask::Causal, 1024, 1024);
        let plain = options(&causal).unwrap();
        assert_eq!((plain.softcap, plain.alibi_slopes), (None, None));
        let cap = Shape { softcap: Softcap::new(30.0), alibi: true, ..causal.clone() };
        let o = options(&cap).unwrap();
        assert_eq!(o.softcap, Some(30.0));
        // BLOOM's slopes for 3 heads: 2^(-8/3), 2^(-16/3), 2^(-8).
        let want = [2f32.powf(-8.0 / 3.0), 2f32.powf(-16.0 / 3.0), 2f32.powi(-8)];
        let got = o.alibi_slopes.unwrap();
        assert!(got.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-7), "{got:?}");
        assert!(problem(&cap).is_ok(), "the library accepts them");
        assert_eq!(flops(&cap), flops(&causal), "the usual formula, causal halved");
        let w = Shape { window: Some(128), ..cap };
        assert_eq!(flops(&w), flops(&Shape { window: Some(128), ..causal }));
    }

    #[test]
    fn a_windowed_decode_step_reads_only_the_visible_keys() {
        // Nq = 1 against a cache of 16384 keys, left window 1024: 1025 keys (the diagonal too).
        let (b, h, d, e) = (2.0, 3.0, 64.0, 2.0);
        let q_o_lse = b * h * (2.0 * d * e + 4.0);
        let kv = |keys: f64| b * h * 2.0 * keys * d * e;
        for mask in [Mask::Causal, Mask::Dense] {
            let full = shape(mask, 1, 16_384);
            let w = Shape { window: Some(1024), ..full.clone() };
            assert_eq!(w.kv_bytes() as f64, kv(1025.0));
            assert_eq!(full.kv_bytes() as f64, kv(16_384.0));
            // The model (`model GB`) and the floor count the same keys.
            assert_eq!(flash_bytes(&w, 16, 64), q_o_lse + kv(1025.0));
            assert_eq!(compulsory_bytes(&w), q_o_lse + kv(1025.0));
            assert_eq!(flash_bytes(&full, 16, 64), q_o_lse + kv(16_384.0));
            assert_eq!(compulsory_bytes(&full), io_bytes(&full) as f64);
        }
    }

    #[test]
    fn the_cpu_backward_is_linear_in_n() {
        // B·H·Nq rows of (3 + d) f32, and one Nk row of (P, dP) pairs.
        let s = shape(Mask::Dense, 128, 256);
        assert_eq!(cpu_backward_extra_bytes(&s), 4 * 2 * 3 * 128 * (3 + 64) + 8 * 256);
        let big = shape(Mask::Dense, 256, 512);
        assert_eq!(cpu_backward_extra_bytes(&big), 2 * cpu_backward_extra_bytes(&s));
    }

    #[test]
    fn flops_follow_the_written_formula() {
        let s = shape(Mask::Dense, 1024, 1024);
        assert_eq!(flops(&s), 4.0 * 2.0 * 3.0 * 1024.0 * 1024.0 * 64.0);
        assert_eq!(flops(&shape(Mask::Causal, 1024, 1024)), flops(&s) / 2.0);
        let decode = shape(Mask::Dense, 1, 4096);
        assert_eq!(flops(&decode), 4.0 * 2.0 * 3.0 * 4096.0 * 64.0);
        // Varlen: Σ Nq·Nk over the ragged sequences.
        let v = Shape { batch: 4, ..shape(Mask::Varlen, 100, 100) };
        let (q, k) = v.lengths();
        let pairs: f64 = q.iter().zip(&k).map(|(&a, &b)| a as f64 * b as f64).sum();
        assert_eq!(flops(&v), 4.0 * pairs * 3.0 * 64.0);
    }

    #[test]
    fn flash_bytes_count_kv_once_per_query_tile() {
        let s = shape(Mask::Dense, 256, 512);
        let (b, h, d, e) = (2.0, 3.0, 64.0, 2.0);
        let q_o_lse = b * h * (2.0 * 256.0 * d * e + 4.0 * 256.0);
        let kv = |passes: f64| b * h * passes * 2.0 * 512.0 * d * e;
        assert_eq!(flash_bytes(&s, 64, 64), q_o_lse + kv(4.0));
        assert_eq!(flash_bytes(&s, 128, 64), q_o_lse + kv(2.0));
        assert_eq!(flash_bytes(&s, 100, 64), q_o_lse + kv(3.0));
        // Causal, square, block_m = block_n = 64: tile i reads (i+1)·64 keys.
        let c = shape(Mask::Causal, 256, 256);
        let keys = 64.0 * (1.0 + 2.0 + 3.0 + 4.0);
        assert_eq!(flash_bytes(&c, 64, 64), q_o_lse + b * h * 2.0 * keys * d * e);
        assert!(flash_bytes(&c, 64, 64) >= compulsory_bytes(&c));
    }

    #[test]
    fn standard_bytes_include_both_nxn_round_trips() {
        let s = shape(Mask::Causal, 128, 128);
        let (b, h, n, d, e) = (2.0, 3.0, 128.0, 64.0, 2.0);
        let want = b * h * (4.0 * n * d * e + 8.0 * n * n + 2.0 * e * n * n + 4.0 * n);
        assert_eq!(standard_bytes(&s), want);
        assert_eq!(plan_bytes(&s, None), want);
        assert_eq!(io_bytes(&s) as f64, b * h * (4.0 * n * d * e + 4.0 * n));
    }

    #[test]
    fn grouped_query_attention_counts_k_and_v_with_their_heads() {
        // 4 query heads sharing 1 K/V head (d 64, bf16, B 2).
        let g = Shape { heads: 4, kv_heads: 1, ..shape(Mask::Dense, 128, 512) };
        let (b, h, hkv, nq, nk, d, e) = (2.0, 4.0, 1.0, 128.0, 512.0, 64.0, 2.0);
        let l = Layouts::new(&g, false);
        assert_eq!((l.q.heads, l.k.heads), (4, 1));
        assert_eq!(l.lens(), (2 * 128 * 4 * 64, 2 * 512 * 64));
        assert_eq!(Layouts::new(&g, true).k.heads, 1);
        assert_eq!(Layouts::new(&Shape { mask: Mask::Varlen, ..g.clone() }, false).k.heads, 1);
        let q_o_lse = b * h * (2.0 * nq * d * e + 4.0 * nq);
        assert_eq!(io_bytes(&g) as f64, q_o_lse + b * hkv * 2.0 * nk * d * e);
        assert_eq!(flash_bytes(&g, 64, 64), q_o_lse + b * hkv * 2.0 * 2.0 * nk * d * e);
        let nxn = b * h * (8.0 * nq * nk + 2.0 * e * nq * nk);
        assert_eq!(standard_bytes(&g), q_o_lse + nxn + b * hkv * 2.0 * nk * d * e);
        // FLOPs follow the query heads; the library accepts the grouping.
        assert_eq!(flops(&g), 4.0 * b * h * nq * nk * d);
        assert!(problem(&g).is_ok());
        assert!(problem(&Shape { kv_heads: 3, ..g }).is_err());
    }

    #[test]
    fn cpu_memory_models() {
        let s = Shape { batch: 1, heads: 2, kv_heads: 2, ..shape(Mask::Dense, 300, 200) };
        assert_eq!(cpu_extra_bytes(&s, None), 4 * 2 * 300 * 200);
        // Q, K, V and accumulator tiles of 64 × d f32, a row of 64 scores, 64 softmax states.
        assert_eq!(cpu_extra_bytes(&s, Some((64, 64))), 4 * (4 * 64 * 64 + 64) + 64 * 8);
        // Tiles are clipped to the sequences.
        assert_eq!(
            cpu_extra_bytes(&Shape { seqlen_q: 10, seqlen_k: 20, ..s }, Some((64, 64))),
            4 * (2 * 10 * 64 + 2 * 20 * 64 + 20) + 10 * 8
        );
    }

    #[test]
    fn layouts_and_problem_agree_with_the_library() {
        let s = shape(Mask::Causal, 33, 65);
        let p = problem(&s).unwrap();
        assert_eq!(p.flops(), flops(&s));
        let bhsd = Layouts::new(&s, true);
        assert_eq!(bhsd.q.head_stride, 33 * 64);
        assert_eq!(bhsd.lens(), Layouts::new(&s, false).lens());
        let v = Shape { batch: 3, ..shape(Mask::VarlenCausal, 50, 50) };
        let l = Layouts::new(&v, false);
        assert_eq!((l.q.batch, l.q.seqlen), (1, 150));
        assert!(problem(&v).is_ok());
        assert!(options(&v).unwrap().varlen.is_some());
    }
}
