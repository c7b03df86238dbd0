//! proptest strategies for attention cases: odd shapes (FlashAttention's test suite's 97, 1025;
//! head dims 59, 111), tiles that do not divide the sequence, every masking, sequence, head
//! grouping, layout and input distribution, with the cost of a case bounded.

use flashattn::{MAX_HEAD_DIM, Tiles};
use proptest::prelude::*;
use proptest::sample::select;

use crate::case::{LayoutKind, Sequences, Spec, Values};

/// Default cost bound of a random case: `Σ Nq·Nk · heads · d` multiply-adds per pass (about
/// 4M: tens of milliseconds for the oracle, the baseline and the CPU implementation together).
pub const DEFAULT_MAX_WORK: usize = 1 << 22;

/// Sequence lengths: mostly small, sometimes the odd lengths 1, 7, 97 and 1025, sometimes
/// medium, rarely 0.
pub fn seqlen() -> BoxedStrategy<usize> {
    prop_oneof![
        6 => 1..=48usize,
        2 => select(vec![1usize, 7, 97, 1025]),
        2 => 49..=200usize,
        1 => Just(0usize),
    ]
    .boxed()
}

/// Head dimensions in 1..=256: mostly up to 64, sometimes the odd 1, 59, 111 and the maximum 256.
pub fn head_dim() -> BoxedStrategy<usize> {
    prop_oneof![
        3 => 1..=64usize,
        2 => select(vec![1usize, 59, 111, MAX_HEAD_DIM]),
        1 => 65..=MAX_HEAD_DIM,
    ]
    .boxed()
}

/// Tile overrides: the defaults, or sizes from 1 to 80 (most of which divide no length drawn).
pub fn tiles() -> BoxedStrategy<Tiles> {
    let one = || prop_oneof![1 => Just(None), 2 => (1..=80usize).prop_map(Some)];
    (one(), one()).prop_map(|(block_m, block_n)| Tiles { block_m, block_n }).boxed()
}

/// Batches of 1–3 entries, or 1–6 packed variable-length sequences whose lengths are often 0
/// (including more sequences than tokens), with 0–2 unaddressed tokens after the last.
pub fn sequences() -> BoxedStrategy<Sequences> {
    let len = || prop_oneof![2 => Just(0u32), 3 => 1..=40u32, 1 => select(vec![1u32, 7, 97])];
    let sparse = || prop_oneof![Just(0u32), Just(1u32)];
    prop_oneof![
        3 => (1..=3usize, seqlen(), seqlen())
            .prop_map(|(batch, seqlen_q, seqlen_k)| Sequences::Batch { batch, seqlen_q, seqlen_k }),
        1 => (prop::collection::vec((len(), len()), 1..=6), 0..=2usize, 0..=2usize).prop_map(
            |(lens, spare_q, spare_k)| {
                let (q_lens, k_lens) = lens.into_iter().unzip();
                Sequences::VarLen { q_lens, k_lens, spare_q, spare_k }
            }
        ),
        1 => (prop::collection::vec((sparse(), sparse()), 2..=6), 0..=1usize, 0..=1usize).prop_map(
            |(lens, spare_q, spare_k)| {
                let (q_lens, k_lens) = lens.into_iter().unzip();
                Sequences::VarLen { q_lens, k_lens, spare_q, spare_k }
            }
        ),
    ]
    .boxed()
}

/// Input distributions, mostly ordinary, sometimes extreme.
pub fn values() -> BoxedStrategy<Values> {
    prop_oneof![
        4 => Just(Values::Uniform),
        3 => Just(Values::Normal),
        1 => Just(Values::LargeLogits),
        1 => Just(Values::EqualScores),
        1 => Just(Values::LargeValues),
    ]
    .boxed()
}

/// Any memory order.
pub fn layout() -> BoxedStrategy<LayoutKind> {
    select(vec![
        LayoutKind::Bshd,
        LayoutKind::Bhsd,
        LayoutKind::Padded,
        LayoutKind::Mixed,
        LayoutKind::Aligned,
    ])
    .boxed()
}

/// Any valid spec whose cost ([`Spec::work`]) is at most [`DEFAULT_MAX_WORK`].
pub fn spec() -> BoxedStrategy<Spec> {
    spec_with(DEFAULT_MAX_WORK)
}

/// Any valid spec whose cost is at most `max_work`: 1–3 kv heads with groups of 1–4 query heads
/// (multi-head, grouped and multi-query attention), causal or not, the default scale or one in
/// [0.05, 2). A drawn spec over budget is shrunk by [`fit`].
pub fn spec_with(max_work: usize) -> BoxedStrategy<Spec> {
    let scale = prop_oneof![3 => Just(None), 1 => (0.05f32..2.0).prop_map(Some)];
    (sequences(), 1..=3usize, 1..=4usize, head_dim(), any::<bool>(), scale, tiles(), layout(), values())
        .prop_map(move |(sequences, heads_k, group, head_dim, causal, scale, tiles, layout, values)| {
            let mut spec = Spec {
                sequences,
                heads_q: heads_k * group,
                heads_k,
                head_dim,
                causal,
                scale,
                tiles,
                splits: None,
                window: flashattn::Window::default(),
                softcap: None,
                alibi_slopes: None,
                cache_seqlens: None,
                layout,
                values,
            };
            fit(&mut spec, max_work);
            spec
        })
        .boxed()
}

/// Shrinks a spec until its cost is at most `max_work`: first the batch, then the heads (to one
/// kv head, keeping a group of up to 2), then the head dimension, then the sequence lengths.
/// So long sequences come with small head dimensions and few heads.
pub fn fit(spec: &mut Spec, max_work: usize) {
    if spec.work() <= max_work {
        return;
    }
    if let Sequences::Batch { batch, .. } = &mut spec.sequences {
        *batch = 1;
    }
    if spec.work() > max_work {
        let group = (spec.heads_q / spec.heads_k).min(2);
        spec.heads_k = 1;
        spec.heads_q = group;
    }
    let work = spec.work();
    if work > max_work {
        spec.head_dim = (spec.head_dim * max_work / work).max(1);
    }
    while spec.work() > max_work {
        match &mut spec.sequences {
            Sequences::Batch { seqlen_q, seqlen_k, .. } => {
                *seqlen_q = (*seqlen_q * 3 / 4).max(1);
                *seqlen_k = (*seqlen_k * 3 / 4).max(1);
            }
            Sequences::VarLen { q_lens, k_lens, .. } => {
                for l in q_lens.iter_mut().chain(k_lens.iter_mut()) {
                    *l = *l * 3 / 4;
                }
            }
        }
    }
}

/// [`spec`] with score modifiers (CPU path only): a softcap in [0.5, 50), ALiBi slopes (a
/// geometric series from a base in [0.01, 1), as BLOOM's), or both.
pub fn spec_with_score_mods() -> BoxedStrategy<Spec> {
    (spec(), 0..3u8, 0.5f32..50.0, 0.01f32..1.0)
        .prop_map(|(mut s, kind, cap, base)| {
            if kind != 1 {
                s.softcap = Some(cap);
            }
            if kind != 0 {
                s.alibi_slopes = Some((0..s.heads_q).map(|h| base.powi(h as i32 + 1)).collect());
            }
            s
        })
        .boxed()
}

/// [`spec`] with a K/V cache (CPU path only): fixed-length batches get per-entry key lengths in
/// `0..=seqlen_k` (empty and full entries included); varlen specs are left as they are.
pub fn spec_with_cache() -> BoxedStrategy<Spec> {
    (spec(), proptest::collection::vec(0.0f64..=1.0, 1..=8))
        .prop_map(|(mut s, fractions)| {
            if let Sequences::Batch { batch, seqlen_k, .. } = s.sequences {
                s.cache_seqlens = Some(
                    (0..batch)
                        .map(|b| {
                            let f = fractions[b % fractions.len()];
                            // Ends of the range half the time: empty and full entries.
                            let f = if f < 0.15 {
                                0.0
                            } else if f > 0.85 {
                                1.0
                            } else {
                                f
                            };
                            (f * seqlen_k as f64).round() as u32
                        })
                        .collect(),
                );
            }
            s
        })
        .boxed()
}
