//! Attention on the CPU: the tiled algorithm with the shared online-softmax recurrence, for
//! machines without a GPU and as the first thing the tests check.

use flashattn_kernels::softmax::{GradRow, OnlineSoftmax, ScoreMod, SplitMerge, prob_from_lse};

use crate::buffer::Element;
use crate::error::{InvalidInput, Result};
use crate::plan::TileError;
use crate::problem::{AttentionOptions, Layout, Problem, Tiles};

/// A read-only tensor in host memory.
#[derive(Clone, Copy, Debug)]
pub struct HostTensor<'a, T> {
    /// The storage.
    pub data: &'a [T],
    /// Shape and strides.
    pub layout: Layout,
}

/// A writable tensor in host memory.
#[derive(Debug)]
pub struct HostTensorMut<'a, T> {
    /// The storage.
    pub data: &'a mut [T],
    /// Shape and strides.
    pub layout: Layout,
}

/// Query rows per tile when `opts.tiles.block_m` is `None` (the kernel crate's config table).
pub const DEFAULT_BLOCK_M: usize = flashattn_kernels::config::CPU_TILES.0;
/// Keys per tile when `opts.tiles.block_n` is `None`.
pub const DEFAULT_BLOCK_N: usize = flashattn_kernels::config::CPU_TILES.1;

/// The tile sizes a call runs with: the override, or the defaults. Both must be at least 1;
/// there is no upper limit (a tile larger than a sequence covers it whole).
pub fn tiles(opts: &AttentionOptions) -> Result<(usize, usize), InvalidInput> {
    let Tiles { block_m, block_n } = opts.tiles;
    if block_m == Some(0) || block_n == Some(0) {
        return Err(InvalidInput::Tiles { method: opts.method, block_m, block_n, reason: TileError::Zero });
    }
    Ok((block_m.unwrap_or(DEFAULT_BLOCK_M), block_n.unwrap_or(DEFAULT_BLOCK_N)))
}

/// Tiled attention on the CPU (f32 accumulation), same semantics and validation as
/// [`crate::Device::attention`]. `opts.tiles` sets the tile sizes (rows of Q × rows of K,
/// defaults [`DEFAULT_BLOCK_M`] × [`DEFAULT_BLOCK_N`]); `opts.method` is ignored.
///
/// For each sequence, query head and tile of `block_m` queries, the keys are streamed
/// `block_n` at a time through the shared online-softmax recurrence
/// ([`flashattn_kernels::softmax::OnlineSoftmax`]): a tile's scores are computed, the running
/// maximum and normaliser updated, the accumulator rescaled and the tile's probabilities times
/// V added; no row of scores longer than `block_n` exists at any time. Under causal masking, key
/// tiles that no query of the tile sees are skipped. The log-sum-exp, if asked for, is written as
/// [`Problem::lse_index`] says.
///
/// Like the GPU kernels, every row of a query tile accumulates every key of each key tile the
/// query tile visits (a key the row may not see with probability 0). For finite inputs that
/// changes nothing; it makes non-finite values in V reach exactly the rows they reach on the GPU
/// when the tiles are the GPU plan's (see the README's non-finite inputs).
///
/// `opts.splits` runs split-KV as the GPU does: each query tile's key tiles are cut into that
/// many contiguous ranges (the GPU's rule: `ceil(tiles / splits)` tiles each), each finished on
/// its own (normalised output, log-sum-exp, in f32), and the ranges merged by log-sum-exp with
/// the kernels' own [`SplitMerge`]. `None` or 1 is one pass.
///
/// Every check happens before anything is written: on error `out` and `lse` are untouched.
pub fn attention<T: Element>(
    q: HostTensor<'_, T>,
    k: HostTensor<'_, T>,
    v: HostTensor<'_, T>,
    out: HostTensorMut<'_, T>,
    lse: Option<&mut [f32]>,
    opts: &AttentionOptions,
) -> Result<()> {
    let lens = [q.data.len(), k.data.len(), v.data.len(), out.data.len()];
    let (problem, tiles) = prepare_forward(
        [q.layout, k.layout, v.layout, out.layout],
        lens,
        lse.as_deref().map(<[f32]>::len),
        opts,
    )?;
    run_forward(&problem, tiles, opts, [q.data, k.data, v.data], out.data, lse);
    Ok(())
}

/// The forward's checks, before anything is written: the problem, the log-sum-exp buffer's
/// length and the tiles.
fn prepare_forward(
    [lq, lk, lv, lo]: [Layout; 4],
    lens: [usize; 4],
    lse_len: Option<usize>,
    opts: &AttentionOptions,
) -> Result<(Problem, (usize, usize))> {
    let problem = Problem::new(lq, lk, lv, lo, lens, opts)?;
    problem.check_lse_len(lse_len)?;
    Ok((problem, tiles(opts)?))
}

/// The forward on checked arguments ([`prepare_forward`]).
fn run_forward<T: Element>(
    problem: &Problem,
    (block_m, block_n): (usize, usize),
    opts: &AttentionOptions,
    [q, k, v]: [&[T]; 3],
    out: &mut [T],
    lse: Option<&mut [f32]>,
) {
    let mut tiled = Tiled::new(problem, block_m, block_n);
    // (The split count was checked by `Problem::new`.)
    tiled.splits = opts.splits.unwrap_or(1);
    tiled.run(problem, q, k, v, out, lse);
}

/// The working set of one tile of queries: converted Q, K and V tiles, the accumulator, and the
/// per-row softmax states. Allocated once per call.
struct Tiled {
    block_m: usize,
    block_n: usize,
    d: usize,
    /// `block_m × d` queries, f32.
    q: Vec<f32>,
    /// `block_n × d` keys, f32.
    k: Vec<f32>,
    /// `block_n × d` values, f32.
    v: Vec<f32>,
    /// `block_n` scores of one query row.
    s: Vec<f32>,
    /// `block_m × d` unnormalised outputs.
    acc: Vec<f32>,
    /// One running state per query row.
    state: Vec<OnlineSoftmax>,
    /// Split-KV: key ranges per query tile (1: one pass).
    splits: usize,
    /// Split-KV: each split's normalised output rows (`splits × block_m × d`) and log-sum-exps
    /// (`splits × block_m`).
    part_o: Vec<f32>,
    part_lse: Vec<f32>,
}

impl Tiled {
    fn new(problem: &Problem, block_m: usize, block_n: usize) -> Tiled {
        // A tile never needs more rows than the longest sequence has.
        let (max_q, max_k) = problem.max_lens();
        let block_m = block_m.min(max_q.max(1));
        let block_n = block_n.min(max_k.max(1));
        let d = problem.head_dim();
        Tiled {
            block_m,
            block_n,
            d,
            q: vec![0.0; block_m * d],
            k: vec![0.0; block_n * d],
            v: vec![0.0; block_n * d],
            s: vec![0.0; block_n],
            acc: vec![0.0; block_m * d],
            state: vec![OnlineSoftmax::new(); block_m],
            splits: 1,
            part_o: Vec::new(),
            part_lse: Vec::new(),
        }
    }

    fn run<T: Element>(
        &mut self,
        p: &Problem,
        q: &[T],
        k: &[T],
        v: &[T],
        out: &mut [T],
        mut lse: Option<&mut [f32]>,
    ) {
        let (d, bm, bn) = (self.d, self.block_m, self.block_n);
        let group = p.group_size();
        let scale_log2 = recurrence_scale_log2(p);
        for i in 0..p.batch() {
            let seq = p.sequence(i);
            let b = seq.batch_index;
            for h in 0..p.q().heads {
                let kh = h / group;
                let sm = p.score_mod(h);
                for t0 in (0..seq.len_q).step_by(bm) {
                    let rows = bm.min(seq.len_q - t0);
                    for r in 0..rows {
                        load(&mut self.q[r * d..(r + 1) * d], q, p.q().offset(b, seq.q_start + t0 + r, h));
                    }
                    // Key tiles beyond what the tile's last query sees are skipped; the tiles
                    // visited are whole (up to the end of the keys).
                    // With a window, the tiles before the first row's first key are skipped too.
                    let key_end = p.key_end(t0 + rows - 1, seq.len_q, seq.len_k);
                    let n_tiles = key_end.div_ceil(bn);
                    let first = (p.key_begin(t0, seq.len_q, seq.len_k) / bn).min(n_tiles);
                    // The tensor-core kernel's split rule (`flash_mma`: `ceil(tiles / splits)`
                    // contiguous tiles per split), over the tiles this query tile visits.
                    let tiles_of = |split: usize, splits: usize| {
                        let per = (n_tiles - first).div_ceil(splits);
                        let begin = (first + split * per).min(n_tiles);
                        begin..(begin + per).min(n_tiles)
                    };
                    let ctx = TileCtx { p, seq: &seq, kh, t0, rows, scale_log2, sm };
                    if self.splits > 1 {
                        let splits = self.splits;
                        self.part_o.resize(splits * bm * d, 0.0);
                        self.part_lse.resize(splits * bm, 0.0);
                        for split in 0..splits {
                            self.keys(&ctx, k, v, tiles_of(split, splits));
                            for r in 0..rows {
                                let fin = self.state[r].finish(scale_log2);
                                let at = (split * bm + r) * d;
                                for (o, &a) in
                                    self.part_o[at..at + d].iter_mut().zip(&self.acc[r * d..(r + 1) * d])
                                {
                                    *o = a * fin.inv_sum;
                                }
                                self.part_lse[split * bm + r] = fin.lse;
                            }
                        }
                        // Merge the splits into the accumulator, normalised, and the states'
                        // places into the merged log-sum-exps.
                        for r in 0..rows {
                            let mut merge = SplitMerge::new();
                            (0..splits).for_each(|sp| merge.see(self.part_lse[sp * bm + r]));
                            let acc = &mut self.acc[r * d..(r + 1) * d];
                            acc.fill(0.0);
                            let mut weight_sum = 0.0f32;
                            for sp in 0..splits {
                                let w = merge.weight(self.part_lse[sp * bm + r]);
                                weight_sum += w;
                                let at = (sp * bm + r) * d;
                                for (a, &x) in acc.iter_mut().zip(&self.part_o[at..at + d]) {
                                    *a += w * x;
                                }
                            }
                            let fin = merge.finish(weight_sum);
                            let o = p.o().offset(b, seq.q_start + t0 + r, h);
                            for (dst, &a) in out[o..o + d].iter_mut().zip(acc.iter()) {
                                *dst = T::from_f32(a * fin.inv_sum);
                            }
                            if let Some(l) = lse.as_deref_mut() {
                                l[p.lse_index(i, h, t0 + r)] = fin.lse;
                            }
                        }
                        continue;
                    }
                    self.keys(&ctx, k, v, first..n_tiles);

                    for r in 0..rows {
                        let t = t0 + r;
                        let fin = self.state[r].finish(scale_log2);
                        let o = p.o().offset(b, seq.q_start + t, h);
                        for (dst, &a) in out[o..o + d].iter_mut().zip(&self.acc[r * d..(r + 1) * d]) {
                            *dst = T::from_f32(a * fin.inv_sum);
                        }
                        if let Some(l) = lse.as_deref_mut() {
                            l[p.lse_index(i, h, t)] = fin.lse;
                        }
                    }
                }
            }
        }
    }

    /// Streams key tiles `tiles` (indices of `block_n`-key tiles) of one query tile through the
    /// recurrence, from a fresh accumulator and fresh states.
    fn keys<T: Element>(&mut self, c: &TileCtx<'_>, k: &[T], v: &[T], tiles: std::ops::Range<usize>) {
        let (d, bn) = (self.d, self.block_n);
        let TileCtx { p, seq, kh, t0, rows, scale_log2, sm } = *c;
        let b = seq.batch_index;
        self.acc[..rows * d].fill(0.0);
        self.state[..rows].fill(OnlineSoftmax::new());
        for j0 in tiles.map(|t| t * bn) {
            let cols = bn.min(seq.len_k - j0);
            for c in 0..cols {
                let j = seq.k_start + j0 + c;
                load(&mut self.k[c * d..(c + 1) * d], k, p.kv_offset(false, b, j, kh));
                load(&mut self.v[c * d..(c + 1) * d], v, p.kv_offset(true, b, j, kh));
            }
            for r in 0..rows {
                // Keys of this tile that row `r` sees (columns `lo..hi`); the rest score -inf.
                let t = t0 + r;
                let lo = p.key_begin(t, seq.len_q, seq.len_k).saturating_sub(j0).min(cols);
                let hi = p.key_end(t, seq.len_q, seq.len_k).saturating_sub(j0).min(cols);
                let q_row = &self.q[r * d..(r + 1) * d];
                let s = &mut self.s[..cols];
                let mut block_max = f32::NEG_INFINITY;
                for (c, sc) in s.iter_mut().enumerate() {
                    *sc = if (lo..hi).contains(&c) {
                        let raw = dot(q_row, &self.k[c * d..(c + 1) * d]);
                        logit(p, &sm, raw, t, j0 + c, seq)
                    } else {
                        f32::NEG_INFINITY
                    };
                    block_max = block_max.max(*sc);
                }
                let step = self.state[r].step(block_max, scale_log2);
                let acc = &mut self.acc[r * d..(r + 1) * d];
                if step.alpha != 1.0 {
                    acc.iter_mut().for_each(|a| *a *= step.alpha);
                }
                let mut block_sum = 0.0f32;
                for (c, &sc) in s.iter().enumerate() {
                    let prob = step.prob_any(sc, scale_log2);
                    block_sum += prob;
                    for (a, &x) in acc.iter_mut().zip(&self.v[c * d..(c + 1) * d]) {
                        *a += prob * x;
                    }
                }
                self.state[r].add(block_sum);
            }
        }
    }
}

/// Writes new K/V tokens into a cache in place (FlashAttention's `flash_attn_with_kvcache` with
/// `k`/`v` given): the `n` tokens of entry `b` of `k_new`/`v_new` go to positions
/// `cache_seqlens[b]..cache_seqlens[b] + n` of `k_cache`/`v_cache`. Attend to the grown cache with
/// [`attention`] and `AttentionOptions { cache_seqlens: Some(lens + n), .. }`.
///
/// The caches are `(batch, capacity, heads_kv, d)`, or with `block_table` page pools
/// `(pages, page_size, heads_kv, d)` addressed through it (then the capacity is an entry's
/// pages); the new tokens are `(batch, n, heads_kv, d)`; any strides. Everything is checked
/// before anything is written: shapes, buffer lengths, caches whose elements overlap, the table,
/// one length per entry, and room for the new tokens ([`InvalidInput::CacheFull`]).
pub fn append_kv<T: Element>(
    k_cache: HostTensorMut<'_, T>,
    v_cache: HostTensorMut<'_, T>,
    k_new: HostTensor<'_, T>,
    v_new: HostTensor<'_, T>,
    cache_seqlens: &[u32],
    block_table: Option<&crate::problem::BlockTable>,
) -> Result<()> {
    check_append(&k_cache, &v_cache, &k_new, &v_new, cache_seqlens, block_table)?;
    write_append(k_cache, v_cache, k_new, v_new, cache_seqlens, block_table);
    Ok(())
}

/// [`append_kv`]'s checks, before any write.
fn check_append<T: Element>(
    k_cache: &HostTensorMut<'_, T>,
    v_cache: &HostTensorMut<'_, T>,
    k_new: &HostTensor<'_, T>,
    v_new: &HostTensor<'_, T>,
    cache_seqlens: &[u32],
    block_table: Option<&crate::problem::BlockTable>,
) -> Result<()> {
    check_append_layouts(
        [
            (&k_cache.layout, k_cache.data.len()),
            (&v_cache.layout, v_cache.data.len()),
            (&k_new.layout, k_new.data.len()),
            (&v_new.layout, v_new.data.len()),
        ],
        cache_seqlens,
        block_table,
    )
}

/// An append's checks on the layouts and buffer lengths of `[k_cache, v_cache, k_new, v_new]`
/// (the CPU's slices or the GPU's buffers): shapes, lengths, caches whose elements overlap, the
/// table, one length per entry, and room for the new tokens ([`InvalidInput::CacheFull`]).
pub(crate) fn check_append_layouts(
    [(kc, kc_len), (vc, vc_len), (kn, kn_len), (vn, vn_len)]: [(&Layout, usize); 4],
    cache_seqlens: &[u32],
    block_table: Option<&crate::problem::BlockTable>,
) -> Result<()> {
    let kc = *kc;
    let batch = kn.batch;
    // What a cache's layout must match: the new tokens' batch (or, paged, the pool's own).
    let cache_like = Layout { batch: if block_table.is_some() { kc.batch } else { batch }, ..kc };
    for (name, l, len) in
        [("k_cache", &kc, kc_len), ("v_cache", vc, vc_len), ("k_new", kn, kn_len), ("v_new", vn, vn_len)]
    {
        let cache = name.ends_with("cache");
        let like = if cache { cache_like } else { Layout { batch, seqlen: kn.seqlen, ..kc } };
        crate::problem::check_like(name, l, &like, len, cache)?;
    }
    let capacity = match block_table {
        Some(t) => {
            crate::problem::check_block_table(t, &Layout { batch, ..*kn }, &kc, false)?;
            t.pages_per_entry * t.page_size
        }
        None => kc.seqlen,
    };
    if cache_seqlens.len() != batch {
        return Err(
            InvalidInput::CacheSeqlens { len: cache_seqlens.len(), batch, capacity, varlen: false }.into()
        );
    }
    let n = kn.seqlen;
    if let Some((entry, &len)) = cache_seqlens.iter().enumerate().find(|&(_, &l)| l as usize + n > capacity) {
        return Err(InvalidInput::CacheFull { entry, len, new: n, capacity }.into());
    }
    Ok(())
}

/// [`append_kv`]'s writes, on checked arguments.
fn write_append<T: Element>(
    k_cache: HostTensorMut<'_, T>,
    v_cache: HostTensorMut<'_, T>,
    k_new: HostTensor<'_, T>,
    v_new: HostTensor<'_, T>,
    cache_seqlens: &[u32],
    block_table: Option<&crate::problem::BlockTable>,
) {
    let kc = k_cache.layout;
    let n = k_new.layout.seqlen;
    let d = kc.head_dim;
    let position = |b: usize, j: usize| block_table.map_or((b, j), |t| t.locate(b, j));
    for (cache, new) in [(k_cache, k_new), (v_cache, v_new)] {
        for (b, &start) in cache_seqlens.iter().enumerate() {
            for t in 0..n {
                let (bp, row) = position(b, start as usize + t);
                for h in 0..kc.heads {
                    let (dst, src) = (cache.layout.offset(bp, row, h), new.layout.offset(b, t, h));
                    cache.data[dst..dst + d].copy_from_slice(&new.data[src..src + d]);
                }
            }
        }
    }
}

/// FlashAttention's `flash_attn_with_kvcache` in one call: appends `new_kv` (if given) to the
/// cache after each entry's `opts.cache_seqlens` (the lengths *before* the new tokens; required),
/// then attends `q` to the grown cache (lengths + new tokens; causal aligned to their end). The
/// cache is contiguous, or paged with `opts.block_table`. Everything — the append's checks and
/// the attention's — is checked before anything is written.
#[allow(clippy::too_many_arguments)]
pub fn attention_with_kvcache<T: Element>(
    q: HostTensor<'_, T>,
    k_cache: HostTensorMut<'_, T>,
    v_cache: HostTensorMut<'_, T>,
    new_kv: Option<(HostTensor<'_, T>, HostTensor<'_, T>)>,
    out: HostTensorMut<'_, T>,
    lse: Option<&mut [f32]>,
    opts: &AttentionOptions,
) -> Result<()> {
    let before = opts.cache_seqlens.clone().ok_or(InvalidInput::CacheSeqlens {
        len: 0,
        batch: q.layout.batch,
        capacity: k_cache.layout.seqlen,
        varlen: opts.varlen.is_some(),
    })?;
    let n = new_kv.as_ref().map_or(0, |(k, _)| k.layout.seqlen);
    // The lengths after the append (an overflow of u32 is an overflow of the cache too).
    let after: Vec<u32> = before.iter().map(|&l| l.saturating_add(n.min(u32::MAX as usize) as u32)).collect();
    if let Some((k_new, v_new)) = &new_kv {
        check_append(&k_cache, &v_cache, k_new, v_new, &before, opts.block_table.as_ref())?;
    }
    let grown = AttentionOptions { cache_seqlens: Some(after), ..opts.clone() };
    let (problem, tiles) = prepare_forward(
        [q.layout, k_cache.layout, v_cache.layout, out.layout],
        [q.data.len(), k_cache.data.len(), v_cache.data.len(), out.data.len()],
        lse.as_deref().map(<[f32]>::len),
        &grown,
    )?;
    let (kl, vl) = (k_cache.layout, v_cache.layout);
    let (k_data, v_data): (&[T], &[T]) = match new_kv {
        Some((k_new, v_new)) => {
            let (kc, vc) = (k_cache.data, v_cache.data);
            write_append(
                HostTensorMut { data: &mut *kc, layout: kl },
                HostTensorMut { data: &mut *vc, layout: vl },
                k_new,
                v_new,
                &before,
                opts.block_table.as_ref(),
            );
            (kc, vc)
        }
        None => (k_cache.data, v_cache.data),
    };
    run_forward(&problem, tiles, &grown, [q.data, k_data, v_data], out.data, lse);
    Ok(())
}

/// The gradients' destinations of [`attention_backward`]: dQ, dK and dV, each laid out like its
/// input (same shape; any strides whose elements do not overlap).
#[derive(Debug)]
pub struct Gradients<'a, T> {
    /// ∂L/∂Q, the shape of Q.
    pub dq: HostTensorMut<'a, T>,
    /// ∂L/∂K, the shape of K.
    pub dk: HostTensorMut<'a, T>,
    /// ∂L/∂V, the shape of V.
    pub dv: HostTensorMut<'a, T>,
}

/// The backward pass of attention on the CPU, tiled as FlashAttention-2's: from Q, K, V, the
/// forward's output O and log-sum-exp, and the upstream gradient dO, writes dQ, dK and dV.
///
/// 1. Per query row, a pass over its keys: `D_t = Σ_j P_tj·dP_tj` (relative to the dP of its
///    most probable key) and `1/Σ_j P_tj`, by the recurrence the GPU's preprocessing kernel runs
///    ([`GradRow`]; it says why not FlashAttention-2's `rowsum(dO ∘ O)`: the storage type's
///    rounding of O and the f32 rounding of a large log-sum-exp would cost many times the
///    baseline's error on nearly one-hot rows).
/// 2. For each K/V head and tile of `block_n` keys, with dK and dV accumulators for the tile in
///    f32: for every query head that reads it (grouped-query attention sums over them) and
///    every tile of `block_m` queries that sees one of its keys, recompute
///    `P = exp(scale·q·k − lse)` from the log-sum-exp
///    ([`flashattn_kernels::softmax::prob_from_lse`], the kernels' own) times the row's
///    normaliser, then
///    `dV += Pᵀ·dO`, `dP = dO·Vᵀ`, `dS = P ∘ (dP − D)`, `dK += scale·dSᵀ·Q`, and
///    `dQ += scale·dS·K` into an f32 accumulator of every query row, converted at the end.
///
/// Memory beyond the inputs and outputs is O(N): D (two numbers), the normaliser and the f32 dQ
/// accumulator per query row, and one row's (P, dP) pairs. Rows that see no key (`lse = -inf`) have zero gradients, never NaN.
/// `lse` is the forward's, laid out as [`Problem::lse_index`] says; `opts` must be the
/// forward's (scale, causal, varlen); `opts.tiles` sets the tiles. Everything is checked before
/// anything is written.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward<T: Element>(
    q: HostTensor<'_, T>,
    k: HostTensor<'_, T>,
    v: HostTensor<'_, T>,
    o: HostTensor<'_, T>,
    lse: &[f32],
    d_o: HostTensor<'_, T>,
    grads: Gradients<'_, T>,
    opts: &AttentionOptions,
) -> Result<()> {
    let problem = Problem::new(
        q.layout,
        k.layout,
        v.layout,
        o.layout,
        [q.data.len(), k.data.len(), v.data.len(), o.data.len()],
        opts,
    )?;
    problem.check_lse_len(Some(lse.len()))?;
    problem.check_backward(
        (&d_o.layout, d_o.data.len()),
        [
            ("dq", &grads.dq.layout, grads.dq.data.len()),
            ("dk", &grads.dk.layout, grads.dk.data.len()),
            ("dv", &grads.dv.layout, grads.dv.data.len()),
        ],
    )?;
    if let Some(t) = problem.block_table() {
        // Each used page must belong to one entry: the gradients of a shared page would need
        // the sum over its entries, which this pass does not form.
        let mut seen = std::collections::HashSet::new();
        for i in 0..problem.batch() {
            let used = problem.sequence(i).len_k.div_ceil(t.page_size);
            for &page in &t.pages[i * t.pages_per_entry..i * t.pages_per_entry + used] {
                if !seen.insert(page) {
                    return Err(InvalidInput::BlockTable {
                        why: format!(
                            "page {page} is used by two entries; the backward needs pages of their own"
                        ),
                    }
                    .into());
                }
            }
        }
    }
    let (block_m, block_n) = tiles(opts)?;
    let inputs = [q.data, k.data, v.data, d_o.data];
    backward_tiled(&problem, inputs, d_o.layout, lse, grads, (block_m, block_n));
    Ok(())
}

/// The body of [`attention_backward`], on validated inputs.
fn backward_tiled<T: Element>(
    p: &Problem,
    [q, k, v, d_o]: [&[T]; 4],
    ld: Layout,
    lse: &[f32],
    grads: Gradients<'_, T>,
    (block_m, block_n): (usize, usize),
) {
    let d = p.head_dim();
    let (max_q, max_k) = p.max_lens();
    let (bm, bn) = (block_m.min(max_q.max(1)), block_n.min(max_k.max(1)));
    let scale = p.scale();
    let scale_log2 = recurrence_scale_log2(p);
    let group = p.group_size();
    let (lq, lk) = (*p.q(), *p.k());
    // 1. Per query row, from the same recomputed P and dP as the main pass: D = Σ_j P_j·dP_j
    //    (as a pivot and the sum relative to it) and the factor 1/Σ_j P_j that makes the
    //    recomputed P sum to 1. Not rowsum(dO ∘ O): with
    //    O rounded to the storage type that costs dQ and dK an error of u·|O|·|dO| in every row.
    //    And not P from the log-sum-exp alone: an f32 log-sum-exp in the thousands (logits in
    //    the thousands) is off by u·|lse|, a factor common to the row's P that normalising
    //    removes exactly (as the forward's rounding of max·scale cancels in o = Σpv / Σp).
    //    Near-one-hot rows turn either error into many times the input-precision baseline's.
    //    dQ accumulates in f32.
    let rows = p.lse_len();
    let (mut pivot, mut d_rel, mut inv_sum) = (vec![0.0f32; rows], vec![0.0f32; rows], vec![0.0f32; rows]);
    let mut dq_acc = vec![0.0f32; rows * d];
    let (mut q_row, mut do_row, mut kv_row) = (vec![0.0f32; d], vec![0.0f32; d], vec![0.0f32; d]);
    for i in 0..p.batch() {
        let seq = p.sequence(i);
        let b = seq.batch_index;
        for h in 0..lq.heads {
            let kh = h / group;
            for t in 0..seq.len_q {
                let row = p.lse_index(i, h, t);
                load(&mut q_row, q, lq.offset(b, seq.q_start + t, h));
                load(&mut do_row, d_o, ld.offset(b, seq.q_start + t, h));
                // The GPU's recurrence, one key at a time ([`GradRow`]): a row without keys (or
                // whose every probability underflowed) ends with 1/Σ P = 0, hence zero gradients.
                let mut stats = GradRow::new();
                let sm = p.score_mod(h);
                for j in p.key_begin(t, seq.len_q, seq.len_k)..p.key_end(t, seq.len_q, seq.len_k) {
                    load(&mut kv_row, k, p.kv_offset(false, b, seq.k_start + j, kh));
                    let s = logit(p, &sm, dot(&q_row, &kv_row), t, j, &seq);
                    let pr = prob_from_lse(s, scale_log2, lse[row]);
                    load(&mut kv_row, v, p.kv_offset(true, b, seq.k_start + j, kh));
                    let dp = dot(&do_row, &kv_row);
                    stats.see(pr, dp);
                    stats.add(pr, dp);
                }
                let (inv, rel) = GradRow::finish(stats.sum, stats.rel);
                (pivot[row], d_rel[row], inv_sum[row]) = (stats.pivot, rel, inv);
            }
        }
    }
    // 2. Key tiles, each with its dK, dV accumulators.
    let Gradients { dq, dk, dv } = grads;
    let (mut kt, mut vt) = (vec![0.0f32; bn * d], vec![0.0f32; bn * d]);
    let (mut dk_acc, mut dv_acc) = (vec![0.0f32; bn * d], vec![0.0f32; bn * d]);
    let (mut p_row, mut ds_row) = (vec![0.0f32; bn], vec![0.0f32; bn]);
    for i in 0..p.batch() {
        let seq = p.sequence(i);
        let b = seq.batch_index;
        for kh in 0..lk.heads {
            for j0 in (0..seq.len_k).step_by(bn) {
                let cols = bn.min(seq.len_k - j0);
                for c in 0..cols {
                    load(&mut kt[c * d..(c + 1) * d], k, p.kv_offset(false, b, seq.k_start + j0 + c, kh));
                    load(&mut vt[c * d..(c + 1) * d], v, p.kv_offset(true, b, seq.k_start + j0 + c, kh));
                }
                dk_acc[..cols * d].fill(0.0);
                dv_acc[..cols * d].fill(0.0);
                for h in kh * group..(kh + 1) * group {
                    for t0 in (0..seq.len_q).step_by(bm) {
                        let t_end = bm.min(seq.len_q - t0) + t0;
                        // Query tiles that see none of these keys are skipped: the last row's keys
                        // end before them, or (a window) the first row's begin after them.
                        if p.key_end(t_end - 1, seq.len_q, seq.len_k) <= j0
                            || p.key_begin(t0, seq.len_q, seq.len_k) >= j0 + cols
                        {
                            continue;
                        }
                        for t in t0..t_end {
                            let row = p.lse_index(i, h, t);
                            let lo = p.key_begin(t, seq.len_q, seq.len_k).saturating_sub(j0).min(cols);
                            let hi = p.key_end(t, seq.len_q, seq.len_k).saturating_sub(j0).min(cols);
                            if lo >= hi {
                                continue;
                            }
                            load(&mut q_row, q, lq.offset(b, seq.q_start + t, h));
                            load(&mut do_row, d_o, ld.offset(b, seq.q_start + t, h));
                            let sm = p.score_mod(h);
                            for c in lo..hi {
                                let raw = dot(&q_row, &kt[c * d..(c + 1) * d]);
                                let s = logit(p, &sm, raw, t, j0 + c, &seq);
                                let pr = prob_from_lse(s, scale_log2, lse[row]) * inv_sum[row];
                                let dp = dot(&do_row, &vt[c * d..(c + 1) * d]);
                                p_row[c] = pr;
                                // dS with respect to the scaled score: the softcap's derivative
                                // (1 without one; the ALiBi bias does not depend on Q or K).
                                ds_row[c] =
                                    GradRow::ds(pr, dp, pivot[row], d_rel[row]) * sm.slope_of(scale * raw);
                            }
                            let dq_row = &mut dq_acc[row * d..(row + 1) * d];
                            for c in lo..hi {
                                let (pr, ds) = (p_row[c], scale * ds_row[c]);
                                let (dvc, dkc) =
                                    (&mut dv_acc[c * d..(c + 1) * d], &mut dk_acc[c * d..(c + 1) * d]);
                                for x in 0..d {
                                    dvc[x] += pr * do_row[x];
                                    dkc[x] += ds * q_row[x];
                                    dq_row[x] += ds * kt[c * d + x];
                                }
                            }
                        }
                    }
                }
                for c in 0..cols {
                    // (A paged cache's gradients land in the pages, like its K and V.)
                    let (bp, row) = p.kv_position(b, seq.k_start + j0 + c);
                    let (ko, vo) = (dk.layout.offset(bp, row, kh), dv.layout.offset(bp, row, kh));
                    for x in 0..d {
                        dk.data[ko + x] = T::from_f32(dk_acc[c * d + x]);
                        dv.data[vo + x] = T::from_f32(dv_acc[c * d + x]);
                    }
                }
            }
        }
        // Keys of K/V heads no query head reads cannot exist (heads divide); every key above
        // was written, also those no query sees (zero).
        for h in 0..lq.heads {
            for t in 0..seq.len_q {
                let row = p.lse_index(i, h, t);
                let off = dq.layout.offset(b, seq.q_start + t, h);
                for x in 0..d {
                    dq.data[off + x] = T::from_f32(dq_acc[row * d + x]);
                }
            }
        }
    }
}

/// Where one query tile is: its problem, sequence, K/V head, first query, rows and
/// `scale·log2(e)`.
#[derive(Clone, Copy)]
struct TileCtx<'a> {
    p: &'a Problem,
    seq: &'a crate::problem::Sequence,
    kh: usize,
    t0: usize,
    rows: usize,
    scale_log2: f32,
    sm: ScoreMod,
}

/// The recurrence's `scale·log2(e)`: the problem's, or `log2(e)` when score modifiers turn the
/// raw scores into logits first ([`logit`]).
fn recurrence_scale_log2(p: &Problem) -> f32 {
    if p.has_score_mod() { flashattn_kernels::math::LOG2_E } else { p.scale_log2() }
}

/// What the recurrence takes for raw score `raw` (`q·k`) of query `t` and key `j` of `seq`: the
/// raw score itself, or with score modifiers the logit `sm.logit(scale·raw, …)` (then the
/// recurrence runs with `scale_log2 = log2 e`, [`recurrence_scale_log2`]).
#[inline]
fn logit(p: &Problem, sm: &ScoreMod, raw: f32, t: usize, j: usize, seq: &crate::problem::Sequence) -> f32 {
    if p.has_score_mod() {
        sm.logit(p.scale() * raw, t as u32, j as u32, seq.len_q as u32, seq.len_k as u32)
    } else {
        raw
    }
}

/// Converts the `dst.len()` elements at `src[offset..]` to f32.
#[inline]
fn load<T: Element>(dst: &mut [f32], src: &[T], offset: usize) {
    let n = dst.len();
    for (d, &s) in dst.iter_mut().zip(&src[offset..offset + n]) {
        *d = s.to_f32();
    }
}

/// f32 dot product in eight interleaved partial sums (which the compiler keeps in one vector
/// register), added pairwise at the end.
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let mut part = [0.0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            part[l] += x[l] * y[l];
        }
    }
    for (l, (x, y)) in ra.iter().zip(rb).enumerate() {
        part[l] += x * y;
    }
    ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_sequential_sum() {
        for n in [1, 7, 8, 9, 59, 256] {
            let a: Vec<f32> = (0..n).map(|i| (i % 5) as f32 - 2.0).collect();
            let b: Vec<f32> = (0..n).map(|i| (i % 3) as f32 * 0.5).collect();
            let want: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert_eq!(dot(&a, &b), want, "n = {n}");
        }
    }

    #[test]
    fn zero_tiles_are_refused_and_defaults_apply() {
        let opts = |m, n| AttentionOptions { tiles: Tiles { block_m: m, block_n: n }, ..Default::default() };
        assert_eq!(tiles(&opts(None, None)), Ok((DEFAULT_BLOCK_M, DEFAULT_BLOCK_N)));
        assert_eq!(tiles(&opts(Some(3), None)), Ok((3, DEFAULT_BLOCK_N)));
        assert!(matches!(tiles(&opts(Some(0), Some(4))), Err(InvalidInput::Tiles { block_m: Some(0), .. })));
        assert!(matches!(tiles(&opts(None, Some(0))), Err(InvalidInput::Tiles { block_n: Some(0), .. })));
    }
}
