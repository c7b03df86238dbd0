//! Named cases: the odd shapes and corners the property tests reach only by chance, each pinned
//! with a fixed seed, for every dtype.

use flashattn::{Element, Tiles, bf16, f16};
use flashattn_testkit::{Case, LayoutKind, Sequences, Spec, Values};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::{run_case, run_on};

/// Runs `spec` for f32, f16 and bf16 with a fixed seed.
fn all_dtypes(spec: &Spec) {
    fn one<T: Element>(spec: &Spec) {
        if let Err(e) = run_case::<T>(spec, 7) {
            panic!("{e}");
        }
    }
    one::<f32>(spec);
    one::<f16>(spec);
    one::<bf16>(spec);
}

fn spec(batch: usize, seqlen_q: usize, seqlen_k: usize, heads: usize, head_dim: usize) -> Spec {
    Spec::batch(batch, seqlen_q, seqlen_k, heads, head_dim)
}

#[test]
fn seqlen_97_head_dim_59_tiles_that_divide_nothing() {
    let mut s = spec(2, 97, 97, 2, 59);
    s.tiles = Tiles { block_m: Some(13), block_n: Some(17) };
    all_dtypes(&s);
    s.causal = true;
    all_dtypes(&s);
}

#[test]
fn seqlen_1025_with_small_head_dim() {
    let mut s = spec(1, 1025, 1025, 1, 3);
    all_dtypes(&s);
    s.causal = true;
    s.tiles = Tiles { block_m: Some(100), block_n: Some(33) };
    all_dtypes(&s);
}

#[test]
fn head_dims_111_and_256() {
    for d in [111, 256] {
        let mut s = spec(1, 33, 70, 2, d);
        s.layout = LayoutKind::Bhsd;
        all_dtypes(&s);
    }
}

#[test]
fn head_dim_1_and_single_query() {
    all_dtypes(&spec(3, 1, 50, 2, 1));
    let mut s = spec(1, 1, 1, 1, 1);
    s.causal = true;
    all_dtypes(&s);
}

#[test]
fn tiles_of_one_and_tiles_larger_than_the_sequence() {
    let mut s = spec(1, 9, 11, 1, 8);
    s.causal = true;
    s.tiles = Tiles { block_m: Some(1), block_n: Some(1) };
    all_dtypes(&s);
    s.tiles = Tiles { block_m: Some(10_000), block_n: Some(usize::MAX) };
    all_dtypes(&s);
}

#[test]
fn causal_with_more_queries_than_keys_masks_the_top_rows() {
    // 10 queries, 4 keys: query t sees keys j ≤ t − 6, so queries 0..6 see nothing.
    let mut s = spec(2, 10, 4, 2, 16);
    s.causal = true;
    s.tiles = Tiles { block_m: Some(3), block_n: Some(3) };
    all_dtypes(&s);
    let case = Case::<f32>::random(&mut StdRng::seed_from_u64(1), &s);
    let (out, lse) = case.run_cpu().expect("valid");
    let p = &case.problem;
    for b in 0..2 {
        for h in 0..2 {
            for t in 0..10 {
                let o = p.o().offset(b, t, h);
                let l = lse[p.lse_index(b, h, t)];
                if t < 6 {
                    assert!(out[o..o + 16].iter().all(|&x| x == 0.0), "row {t} must be 0");
                    assert_eq!(l, f32::NEG_INFINITY, "row {t}");
                } else {
                    assert!(l.is_finite(), "row {t}");
                }
            }
        }
    }
}

#[test]
fn causal_with_fewer_queries_than_keys_is_bottom_right_aligned() {
    let mut s = spec(1, 3, 40, 3, 12);
    s.causal = true;
    s.tiles = Tiles { block_m: Some(2), block_n: Some(7) };
    all_dtypes(&s);
}

#[test]
fn no_keys_at_all() {
    all_dtypes(&spec(2, 5, 0, 1, 4));
    all_dtypes(&spec(1, 0, 5, 1, 4));
}

#[test]
fn gqa_and_mqa() {
    let mut s = spec(2, 20, 31, 1, 24);
    s.heads_q = 6;
    s.heads_k = 2;
    all_dtypes(&s);
    s.heads_k = 1;
    s.causal = true;
    all_dtypes(&s);
}

#[test]
fn varlen_with_empty_sequences_and_fewer_tokens_than_sequences() {
    let mut s = spec(1, 1, 1, 2, 8);
    s.sequences = Sequences::VarLen {
        q_lens: vec![0, 1, 0, 0, 1],
        k_lens: vec![1, 0, 0, 1, 2],
        spare_q: 1,
        spare_k: 2,
    };
    all_dtypes(&s);
    s.causal = true;
    s.layout = LayoutKind::Mixed;
    all_dtypes(&s);
    s.sequences =
        Sequences::VarLen { q_lens: vec![5, 0, 17, 3], k_lens: vec![9, 4, 2, 30], spare_q: 0, spare_k: 3 };
    s.tiles = Tiles { block_m: Some(4), block_n: Some(5) };
    all_dtypes(&s);
}

#[test]
fn every_layout() {
    for layout in [LayoutKind::Bshd, LayoutKind::Bhsd, LayoutKind::Padded, LayoutKind::Mixed] {
        let mut s = spec(2, 13, 21, 2, 10);
        s.layout = layout;
        s.heads_q = 4;
        all_dtypes(&s);
    }
}

#[test]
fn extreme_inputs() {
    for values in Values::ALL {
        let mut s = spec(2, 19, 45, 2, 32);
        s.values = values;
        s.tiles = Tiles { block_m: Some(8), block_n: Some(10) };
        all_dtypes(&s);
        s.causal = true;
        all_dtypes(&s);
    }
}

#[test]
fn explicit_scales() {
    for scale in [1e-3, 0.37, 4.0] {
        let mut s = spec(1, 17, 23, 1, 16);
        s.scale = Some(scale);
        all_dtypes(&s);
    }
}

#[test]
fn all_equal_scores_average_the_values() {
    // With every key equal, the output is the mean of the visible values.
    let mut s = spec(1, 4, 6, 1, 3);
    s.values = Values::EqualScores;
    let case = Case::<f32>::random(&mut StdRng::seed_from_u64(3), &s);
    run_on(&case).expect("passes the rule");
    let (out, _) = case.run_cpu().expect("valid");
    for (x, &o) in out[..3].iter().enumerate() {
        let mean = (0..6).map(|j| case.v[j * 3 + x]).sum::<f32>() / 6.0;
        assert!((o - mean).abs() < 1e-6, "{o} vs {mean}");
    }
}

#[test]
fn a_wrong_output_fails_the_check() {
    // The rule has teeth: a small perturbation of one element, a NaN, or a wrong LSE fail.
    let case = Case::<f16>::random(&mut StdRng::seed_from_u64(5), &spec(1, 16, 16, 2, 8));
    let (out, lse) = case.run_cpu().expect("valid");
    flashattn_testkit::check(&case, &out, Some(&lse)).expect("the implementation passes");
    let mut bad = out.clone();
    bad[37] = f16::from_f32(bad[37].to_f32() + 0.01);
    assert!(flashattn_testkit::check(&case, &bad, Some(&lse)).is_err());
    let mut bad = out.clone();
    bad[0] = f16::NAN;
    assert!(flashattn_testkit::check(&case, &bad, Some(&lse)).unwrap_err().contains("not finite"));
    let mut bad_lse = lse.clone();
    bad_lse[3] += 1e-3;
    assert!(flashattn_testkit::check(&case, &out, Some(&bad_lse)).unwrap_err().contains("lse error"));
}

/// Split-KV on the CPU (the GPU's split rule and merge): split counts that do not divide the key
/// tiles, more splits than tiles (empty splits), causal with Nq > Nk (splits whose keys a row
/// cannot see), varlen with empty sequences, decode with GQA.
#[test]
fn split_kv_matches_the_oracle() {
    let mut specs = Vec::new();
    let mut s = spec(2, 37, 101, 2, 16);
    s.tiles = Tiles { block_m: Some(8), block_n: Some(8) };
    specs.push(s.clone());
    s.causal = true;
    specs.push(s);
    let mut s = spec(1, 10, 4, 2, 8);
    s.causal = true;
    s.tiles = Tiles { block_m: Some(4), block_n: Some(1) };
    specs.push(s);
    let mut s = spec(1, 1, 1, 2, 24);
    s.sequences =
        Sequences::VarLen { q_lens: vec![3, 0, 9, 1], k_lens: vec![40, 5, 0, 17], spare_q: 1, spare_k: 2 };
    s.tiles = Tiles { block_m: Some(4), block_n: Some(4) };
    s.causal = true;
    specs.push(s);
    let mut s = spec(3, 1, 300, 8, 32);
    s.heads_k = 2;
    s.tiles = Tiles { block_m: Some(16), block_n: Some(16) };
    specs.push(s);
    for s in specs {
        for splits in [2, 3, 7, 128] {
            let mut s = s.clone();
            s.splits = Some(splits);
            all_dtypes(&s);
        }
    }
}

/// Shapes at the edges for the masks and modifiers (4 query heads): tiles that divide nothing,
/// Nq < Nk with GQA, Nq > Nk with MQA, varlen with empty sequences.
fn ragged_shapes() -> Vec<Spec> {
    let mut shapes = Vec::new();
    let mut s = spec(2, 37, 37, 4, 16);
    s.tiles = Tiles { block_m: Some(8), block_n: Some(5) };
    shapes.push(s);
    let mut s = spec(1, 13, 40, 4, 8);
    s.heads_k = 2;
    s.tiles = Tiles { block_m: Some(4), block_n: Some(6) };
    shapes.push(s);
    let mut s = spec(1, 40, 13, 4, 8);
    s.heads_k = 1;
    s.tiles = Tiles { block_m: Some(6), block_n: Some(4) };
    shapes.push(s);
    let mut s = spec(1, 1, 1, 4, 24);
    s.sequences =
        Sequences::VarLen { q_lens: vec![9, 0, 30, 1], k_lens: vec![12, 5, 0, 20], spare_q: 1, spare_k: 2 };
    s.tiles = Tiles { block_m: Some(4), block_n: Some(4) };
    shapes.push(s);
    shapes
}

/// Sliding windows on the CPU path (forward), every dtype: left only, right only, both, with the
/// causal mask, with Nq ≠ Nk both ways, GQA, varlen with empty sequences, tiles that divide
/// nothing and split-KV; windows wider than the sequence and of zero width.
#[test]
fn sliding_windows_match_the_oracle() {
    use flashattn::Window;
    let windows = [
        Window { left: Some(5), right: None },
        Window { left: None, right: Some(3) },
        Window { left: Some(7), right: Some(2) },
        Window { left: Some(0), right: Some(0) },
        Window { left: Some(1000), right: Some(1000) },
    ];
    let shapes = ragged_shapes();
    for base in shapes {
        for window in windows {
            for causal in [false, true] {
                for splits in [None, Some(3)] {
                    let mut s = base.clone();
                    (s.window, s.causal, s.splits) = (window, causal, splits);
                    all_dtypes(&s);
                }
            }
        }
    }
}

/// Score modifiers on the CPU path (forward), every dtype: a softcap (Gemma-2's 50, and a tight
/// 2 that bends every score), ALiBi slopes (BLOOM's geometric ones, and a zero slope on one head),
/// both together, with causal masks, Nq ≠ Nk both ways, GQA, varlen with empty sequences, tiles
/// that divide nothing, split-KV and a window.
#[test]
fn score_modifiers_match_the_oracle() {
    let shapes = ragged_shapes();
    let slopes = vec![0.5, 0.25, 0.0, 0.0625];
    let mods =
        [(Some(50.0), None), (Some(2.0), None), (None, Some(slopes.clone())), (Some(5.0), Some(slopes))];
    for base in shapes {
        for (softcap, alibi) in &mods {
            for causal in [false, true] {
                for splits in [None, Some(3)] {
                    let mut s = base.clone();
                    (s.softcap, s.alibi_slopes, s.causal, s.splits) =
                        (*softcap, alibi.clone(), causal, splits);
                    all_dtypes(&s);
                }
            }
            let mut s = base.clone();
            (s.softcap, s.alibi_slopes) = (*softcap, alibi.clone());
            s.window = flashattn::Window { left: Some(6), right: Some(2) };
            all_dtypes(&s);
        }
    }
}

/// The modifiers change the result (so the test above cannot pass by ignoring them), and the
/// CPU path follows them: a softcap of 2 and ALiBi each move the oracle's outputs, and the CPU
/// outputs move with them.
#[test]
fn score_modifiers_change_the_result() {
    use flashattn_testkit::Case;
    use rand::SeedableRng;
    let base = spec(1, 24, 24, 2, 16);
    let mut capped = base.clone();
    capped.softcap = Some(0.5);
    let mut alibi = base.clone();
    alibi.alibi_slopes = Some(vec![0.5, 1.0]);
    let plain = Case::<f32>::random(&mut rand::rngs::StdRng::seed_from_u64(3), &base);
    for modified in [capped, alibi] {
        let case = Case::<f32>::random(&mut rand::rngs::StdRng::seed_from_u64(3), &modified);
        assert_eq!(case.q, plain.q);
        let moved = case
            .reference
            .out
            .iter()
            .zip(&plain.reference.out)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(
            moved > 1e-2,
            "the oracle ignored {:?}/{:?}: {moved}",
            modified.softcap,
            modified.alibi_slopes
        );
        let (out, _) = case.run_cpu().unwrap();
        let err =
            out.iter().zip(&case.reference.out).map(|(&a, &b)| (f64::from(a) - b).abs()).fold(0.0, f64::max);
        assert!(err < 1e-5, "{err}");
    }
}

/// A K/V cache (`cache_seqlens`): each batch entry attends to the first `cache_seqlens[b]` keys
/// of a cache of capacity 20 (an empty entry, a full one), decode and a 4-token chunk, causal
/// aligned to the end of the used keys, GQA, every dtype; the keys past each entry's length are
/// never read (they hold NaN).
#[test]
fn kv_cache_lengths_match_the_oracle() {
    use flashattn_testkit::Case;
    use rand::SeedableRng;
    for nq in [1, 4] {
        for causal in [false, true] {
            let mut s = spec(3, nq, 20, 4, 16);
            s.heads_k = 2;
            s.cache_seqlens = Some(vec![5, 0, 20]);
            s.causal = causal;
            s.tiles = Tiles { block_m: Some(2), block_n: Some(3) };
            all_dtypes(&s);
            // Poison the unused cache slots: a read of one would show as NaN.
            let mut case = Case::<f32>::random(&mut rand::rngs::StdRng::seed_from_u64(9), &s);
            let p = case.problem.clone();
            for (b, &len) in [5usize, 0, 20].iter().enumerate() {
                for t in len..20 {
                    for h in 0..2 {
                        let (ko, vo) = (p.k().offset(b, t, h), p.v().offset(b, t, h));
                        case.k[ko..ko + 16].fill(f32::NAN);
                        case.v[vo..vo + 16].fill(f32::NAN);
                    }
                }
            }
            let (out, _) = case.run_cpu().unwrap();
            assert!(out.iter().all(|x| x.is_finite()), "an unused cache slot was read");
        }
    }
}

/// `cpu::append_kv` writes new tokens after each entry's length and nothing else; a batch that
/// would overflow the cache is refused before anything is written.
#[test]
fn append_kv_writes_in_place() {
    use flashattn::cpu::{HostTensor, HostTensorMut, append_kv};
    use flashattn::{InvalidInput, Layout};
    let (cap, heads, d, n) = (8, 2, 4, 3);
    let lc = Layout::bshd(2, cap, heads, d);
    let ln = Layout::bshd(2, n, heads, d);
    let mut kc: Vec<f32> = (0..lc.required_len().unwrap()).map(|i| i as f32).collect();
    let mut vc = kc.clone();
    let kn: Vec<f32> = (0..ln.required_len().unwrap()).map(|i| -1.0 - i as f32).collect();
    let vn: Vec<f32> = kn.iter().map(|x| x * 10.0).collect();
    let before = kc.clone();
    append_kv(
        HostTensorMut { data: &mut kc, layout: lc },
        HostTensorMut { data: &mut vc, layout: lc },
        HostTensor { data: &kn, layout: ln },
        HostTensor { data: &vn, layout: ln },
        &[2, 5],
        None,
    )
    .unwrap();
    for b in 0..2 {
        let start = [2, 5][b];
        for t in 0..cap {
            for h in 0..heads {
                let o = lc.offset(b, t, h);
                if (start..start + n).contains(&t) {
                    let src = ln.offset(b, t - start, h);
                    assert_eq!(&kc[o..o + d], &kn[src..src + d]);
                    assert_eq!(&vc[o..o + d], &vn[src..src + d]);
                } else {
                    assert_eq!(&kc[o..o + d], &before[o..o + d], "entry {b} token {t} changed");
                }
            }
        }
    }
    let snapshot = kc.clone();
    let r = append_kv(
        HostTensorMut { data: &mut kc, layout: lc },
        HostTensorMut { data: &mut vc, layout: lc },
        HostTensor { data: &kn, layout: ln },
        HostTensor { data: &vn, layout: ln },
        &[2, 6],
        None,
    );
    assert!(
        matches!(
            r,
            Err(flashattn::Error::InvalidInput(InvalidInput::CacheFull {
                entry: 1,
                len: 6,
                new: 3,
                capacity: 8
            }))
        ),
        "{r:?}"
    );
    assert_eq!(kc, snapshot, "a refused append wrote");
}
