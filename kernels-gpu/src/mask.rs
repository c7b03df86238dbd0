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
