//! Causal masking, bottom-right aligned: query `t` of a sequence with `len_q` queries and `len_k`
//! keys sees key `j` iff `j + len_q <= t + len_k`. (With `len_q == len_k` that is `j <= t`;
//! with `len_q > len_k` the first `len_q - len_k` queries see no key at all.)
//!
//! Shared by the kernels (to skip and mask tiles) and by the host (grid sizing, plans).

/// Whether query `t` sees key `j`.
#[inline(always)]
pub fn visible(t: u32, j: u32, len_q: u32, len_k: u32) -> bool {
    (j as u64) + (len_q as u64) <= (t as u64) + (len_k as u64)
}

/// One past the last key that any query in `0..row_end` may see: the keys a tile of queries
/// ending (exclusive) at `row_end` must visit. Tiles of keys at or beyond it are skipped.
#[inline(always)]
pub fn key_end(row_end: u32, len_q: u32, len_k: u32, causal: bool) -> u32 {
    if !causal {
        return len_k;
    }
    if row_end == 0 {
        return 0;
    }
    let end = row_end as i64 + len_k as i64 - len_q as i64;
    end.clamp(0, len_k as i64) as u32
}

/// The first key that some query in `row_start..` may *not* see: key tiles that start at or
/// after it need masking, tiles that end before it need none.
#[inline(always)]
pub fn unmasked_end(row_start: u32, len_q: u32, len_k: u32, causal: bool) -> u32 {
    if !causal {
        return len_k;
    }
    let end = row_start as i64 + 1 + len_k as i64 - len_q as i64;
    end.clamp(0, len_k as i64) as u32
}

/// The first query that sees key `key` (with causal masking, `key + len_q − len_k`, at least 0;
/// without, 0): the backward's key tiles skip the query tiles before it.
#[inline(always)]
pub fn first_query(key: u32, len_q: u32, len_k: u32, causal: bool) -> u32 {
    if !causal {
        return 0;
    }
    (key as i64 + len_q as i64 - len_k as i64).clamp(0, u32::MAX as i64) as u32
}

/// A window side without a bound ([`row_key_begin`], [`row_key_end`]).
pub const UNBOUNDED: u32 = u32::MAX;

/// The first key query `t` sees: its diagonal key (`t + len_k − len_q`, bottom-right aligned)
/// minus the window's `left` bound, clamped to the keys; 0 when `left` is [`UNBOUNDED`].
#[inline(always)]
pub fn row_key_begin(t: u32, len_q: u32, len_k: u32, left: u32) -> u32 {
    if left == UNBOUNDED {
        return 0;
    }
    let begin = t as i64 + len_k as i64 - len_q as i64 - left as i64;
    begin.clamp(0, len_k as i64) as u32
}

/// One past the last key query `t` sees: its diagonal key plus the window's `right` bound (0
/// with the causal mask, whatever `right` says) plus one, clamped to the keys; `len_k` without
/// causal masking when `right` is [`UNBOUNDED`]. Query `t` sees keys
/// `row_key_begin(..)..row_key_end(..)` (none where that range is empty).
#[inline(always)]
pub fn row_key_end(t: u32, len_q: u32, len_k: u32, causal: bool, right: u32) -> u32 {
    let right = if causal { 0 } else { right };
    if right == UNBOUNDED {
        return len_k;
    }
    let end = t as i64 + len_k as i64 - len_q as i64 + right as i64 + 1;
    end.clamp(0, len_k as i64) as u32
}

/// The query range `first..end` that sees some key of `key0..key0 + keys` (`keys ≥ 1`), by
/// [`row_key_begin`] and [`row_key_end`]: the backward's key tiles visit only these queries.
#[inline(always)]
pub fn query_range(
    key0: u32,
    keys: u32,
    len_q: u32,
    len_k: u32,
    causal: bool,
    left: u32,
    right: u32,
) -> (u32, u32) {
    let right = if causal { 0 } else { right };
    let diag = len_k as i64 - len_q as i64;
    // Query t sees key j iff t + diag − left ≤ j and j ≤ t + diag + right.
    let first =
        if right == UNBOUNDED { 0 } else { (key0 as i64 - diag - right as i64).clamp(0, len_q as i64) };
    let end = if left == UNBOUNDED {
        len_q as i64
    } else {
        (key0 as i64 + keys as i64 - 1 - diag + left as i64 + 1).clamp(0, len_q as i64)
    };
    (first as u32, end as u32)
}

/// The query tiles (of `bm` rows) that the backward's window walk visits for the key block
/// `key0..key0 + keys`: `first..end`, from [`query_range`] — the tile of its first query up to
/// the tile past its last (`end ≥ first`; the main kernel's window instances walk exactly these,
/// for every query head of the K/V head's group).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn window_block_tiles(
    key0: u32,
    keys: u32,
    bm: u32,
    len_q: u32,
    len_k: u32,
    causal: bool,
    left: u32,
    right: u32,
) -> (u32, u32) {
    let bm = bm.max(1);
    let (q_first, q_end) = query_range(key0, keys, len_q, len_k, causal, left, right);
    let first = q_first / bm;
    (first, q_end.div_ceil(bm).max(first))
}

/// How many of the backward's window-walk key blocks (`bn` keys each, the last one partial)
/// visit query tile `tile` (of `bm` rows) by [`window_block_tiles`]: the count the dQ
/// conversion waits for before it converts the tile. Both ends of a block's tile range grow with
/// the block, so the visitors are the blocks `lo..hi` found by two binary searches
/// (`O(log(len_k / bn))`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn window_tile_visitors(
    tile: u32,
    bm: u32,
    bn: u32,
    len_q: u32,
    len_k: u32,
    causal: bool,
    left: u32,
    right: u32,
) -> u32 {
    let bn = bn.max(1);
    let blocks = len_k.div_ceil(bn);
    let tiles_of = |kb: u32| {
        let key0 = kb * bn;
        window_block_tiles(key0, (len_k - key0).min(bn), bm, len_q, len_k, causal, left, right)
    };
    // The first block in 0..blocks for which `past` holds (`past` monotone: false, then true).
    let partition = |past: &dyn Fn(u32) -> bool| {
        let (mut lo, mut hi) = (0u32, blocks);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if past(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    };
    // Blocks from `hi` on start past the tile; blocks before `lo` end at or before it.
    let hi = partition(&|kb| tiles_of(kb).0 > tile);
    let lo = partition(&|kb| tiles_of(kb).1 > tile);
    hi.saturating_sub(lo)
}

/// [`visible`] for host-side `usize` coordinates (no truncation to 32 bits).
#[inline]
pub fn visible_usize(t: usize, j: usize, len_q: usize, len_k: usize) -> bool {
    (j as u128) + (len_q as u128) <= (t as u128) + (len_k as u128)
}

/// [`key_end`] (causal) for host-side `usize` coordinates.
#[inline]
pub fn key_end_usize(row_end: usize, len_q: usize, len_k: usize) -> usize {
    if row_end == 0 {
        return 0;
    }
    ((row_end as u128 + len_k as u128).saturating_sub(len_q as u128)).min(len_k as u128) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    /// The window's bounds against a brute-force definition: query `t` sees key `j` iff
    /// `diag − left ≤ j ≤ diag + right` (`diag = t + len_k − len_q`; causal: `right = 0`).
    #[test]
    fn window_bounds_match_brute_force() {
        let sees = |t: u32, j: u32, q: u32, k: u32, causal: bool, l: u32, r: u32| {
            let diag = t as i64 + k as i64 - q as i64;
            let r = if causal { 0 } else { r };
            (l == UNBOUNDED || j as i64 >= diag - l as i64) && (r == UNBOUNDED || j as i64 <= diag + r as i64)
        };
        for (len_q, len_k) in [(1, 1), (4, 4), (3, 7), (7, 3), (1, 9), (9, 1), (5, 0), (0, 5), (16, 40)] {
            for causal in [false, true] {
                for l in [0, 1, 2, 5, UNBOUNDED] {
                    for r in [0, 1, 3, UNBOUNDED] {
                        for t in 0..len_q {
                            let keys: Vec<u32> =
                                (0..len_k).filter(|&j| sees(t, j, len_q, len_k, causal, l, r)).collect();
                            let (b, e) =
                                (row_key_begin(t, len_q, len_k, l), row_key_end(t, len_q, len_k, causal, r));
                            let got: Vec<u32> = (b..e.max(b)).collect();
                            assert_eq!(got, keys, "t {t} of {len_q}x{len_k} causal {causal} l {l} r {r}");
                            if causal && l == UNBOUNDED {
                                assert_eq!(e, key_end(t + 1, len_q, len_k, true));
                            }
                        }
                        for key0 in 0..len_k {
                            for n in 1..=(len_k - key0).min(4) {
                                let expect: Vec<u32> = (0..len_q)
                                    .filter(|&t| {
                                        (key0..key0 + n).any(|j| sees(t, j, len_q, len_k, causal, l, r))
                                    })
                                    .collect();
                                let (f, e) = query_range(key0, n, len_q, len_k, causal, l, r);
                                // The range holds every query that sees a key; the ends are exact.
                                assert!(
                                    expect.iter().all(|&t| f <= t && t < e),
                                    "{key0}+{n}: {expect:?} vs {f}..{e}"
                                );
                                if let (Some(&lo), Some(&hi)) = (expect.first(), expect.last()) {
                                    assert_eq!(
                                        (f, e),
                                        (lo, hi + 1),
                                        "{key0}+{n} of {len_q}x{len_k} {causal} {l} {r}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// The window walk's visitor counts against the walk itself: every key block's tiles
    /// enumerated.
    #[test]
    fn window_tile_visitors_count_the_walk() {
        for (len_q, len_k) in
            [(1u32, 1u32), (5, 0), (0, 5), (64, 64), (100, 37), (37, 300), (300, 300), (513, 700)]
        {
            for (bm, bn) in [(64u32, 128u32), (64, 64), (16, 32)] {
                for causal in [false, true] {
                    for l in [0, 1, 63, 64, 100, 257, UNBOUNDED] {
                        for r in [0, 5, 128, UNBOUNDED] {
                            let tiles = len_q.div_ceil(bm);
                            let mut expect = Vec::from_iter(core::iter::repeat_n(0u32, tiles as usize + 8));
                            for kb in 0..len_k.div_ceil(bn) {
                                let key0 = kb * bn;
                                let keys = (len_k - key0).min(bn);
                                let (f, e) = window_block_tiles(key0, keys, bm, len_q, len_k, causal, l, r);
                                // (As the main kernel walks: `first..first + per_head`.)
                                let (q_first, q_end) = query_range(key0, keys, len_q, len_k, causal, l, r);
                                assert_eq!(f, q_first / bm);
                                assert_eq!(e, f + q_end.div_ceil(bm).saturating_sub(q_first / bm));
                                for t in f..e {
                                    expect[t as usize] += 1;
                                }
                            }
                            for t in 0..tiles + 8 {
                                let got = window_tile_visitors(t, bm, bn, len_q, len_k, causal, l, r);
                                assert_eq!(
                                    got, expect[t as usize],
                                    "tile {t} of {len_q}x{len_k} bm {bm} bn {bn} causal {causal} l {l} r {r}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn key_end_matches_visibility() {
        for (len_q, len_k) in [(1, 1), (4, 4), (3, 7), (7, 3), (1, 9), (9, 1), (5, 0)] {
            for row_end in 0..=len_q {
                let expect = (0..len_k).filter(|&j| (0..row_end).any(|t| visible(t, j, len_q, len_k))).max();
                let expect = expect.map_or(0, |j| j + 1);
                assert_eq!(key_end(row_end, len_q, len_k, true), expect, "{len_q} {len_k} {row_end}");
                let (r, q, k) = (row_end as usize, len_q as usize, len_k as usize);
                assert_eq!(key_end_usize(r, q, k), expect as usize);
            }
            for row_start in 0..len_q {
                // Keys below unmasked_end are visible to every query from row_start on.
                let end = unmasked_end(row_start, len_q, len_k, true);
                for j in 0..end {
                    assert!((row_start..len_q).all(|t| visible(t, j, len_q, len_k)));
                }
                if end < len_k {
                    assert!(!visible(row_start, end, len_q, len_k));
                }
            }
        }
    }

    #[test]
    fn bottom_right_alignment() {
        // 2 queries, 5 keys: the last query sees all keys, the first all but the last.
        assert!(visible(1, 4, 2, 5));
        assert!(visible(0, 3, 2, 5) && !visible(0, 4, 2, 5));
        // 5 queries, 2 keys: the first three see nothing.
        assert!(!visible(2, 0, 5, 2) && visible(3, 0, 5, 2) && !visible(3, 1, 5, 2));
    }
}
