//! Cutting a sequence into context-parallel shards and putting the results back: the zigzag
//! layout of [`flashattn::context_parallel`], on host buffers.

use flashattn::Layout;
use flashattn::context_parallel::shard_tokens;

/// The token positions rank `rank` of `ranks` holds, in shard order (panics unless `seqlen`
/// is a multiple of `2·ranks`).
pub fn tokens(rank: usize, ranks: usize, seqlen: usize) -> Vec<usize> {
    let ranges = shard_tokens(rank, ranks, seqlen).expect("seqlen a multiple of 2·ranks");
    ranges.into_iter().flatten().collect()
}

/// Rank `rank`'s shard of `full` (laid out as `layout`), in a new buffer of layout
/// `shard_layout(layout.batch, shard_len, heads, d)` (`bshd` or `bhsd` as `bhsd` says).
pub fn shard<T: Copy>(
    full: &[T],
    layout: &Layout,
    rank: usize,
    ranks: usize,
    bhsd: bool,
) -> (Vec<T>, Layout) {
    let toks = tokens(rank, ranks, layout.seqlen);
    let (b, h, d) = (layout.batch, layout.heads, layout.head_dim);
    let out = if bhsd { Layout::bhsd(b, toks.len(), h, d) } else { Layout::bshd(b, toks.len(), h, d) };
    let mut data = Vec::with_capacity(out.required_len().unwrap_or(0));
    data.resize(out.required_len().unwrap_or(0), full[0]);
    for bi in 0..b {
        for (i, &t) in toks.iter().enumerate() {
            for hi in 0..h {
                let (src, dst) = (layout.offset(bi, t, hi), out.offset(bi, i, hi));
                data[dst..dst + d].copy_from_slice(&full[src..src + d]);
            }
        }
    }
    (data, out)
}

/// Writes rank `rank`'s shard output (`shard`, laid out as `shard_layout`) into `full` (laid
/// out as `layout`), and its log-sum-exp (`(batch, heads, shard_len)`) into `full_lse`
/// (`(batch, heads, seqlen)`).
#[allow(clippy::too_many_arguments)]
pub fn unshard<T: Copy>(
    shard: &[T],
    shard_layout: &Layout,
    shard_lse: &[f32],
    full: &mut [T],
    layout: &Layout,
    full_lse: &mut [f32],
    rank: usize,
    ranks: usize,
) {
    let toks = tokens(rank, ranks, layout.seqlen);
    let (b, h, d, n) = (layout.batch, layout.heads, layout.head_dim, layout.seqlen);
    for bi in 0..b {
        for (i, &t) in toks.iter().enumerate() {
            for hi in 0..h {
                let (src, dst) = (shard_layout.offset(bi, i, hi), layout.offset(bi, t, hi));
                full[dst..dst + d].copy_from_slice(&shard[src..src + d]);
                full_lse[(bi * h + hi) * n + t] = shard_lse[(bi * h + hi) * toks.len() + i];
            }
        }
    }
}
