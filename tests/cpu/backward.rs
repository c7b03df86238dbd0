//! The CPU backward pass (`flashattn::cpu::attention_backward`) against the f64 gradient oracle
//! under the gradient tolerance rule ([`flashattn_testkit::grad::check_gradients`]): odd shapes,
//! tiles that do not divide N, causal with Nq > Nk (rows without keys: zero gradients), GQA and
//! MQA, varlen with empty sequences, padded and mixed layouts, logits in the thousands.

use flashattn::cpu::{self, Gradients, HostTensor, HostTensorMut};
use flashattn::{Element, Tiles, bf16, f16};
use flashattn_testkit::grad::{attention_backward_f64, baseline_backward, check_gradients};
use flashattn_testkit::oracle::widen;
use flashattn_testkit::{Case, LayoutKind, Sequences, Spec, Values};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The CPU backward of `case` (with its forward's `out` and `lse`, upstream gradient `d_o`) into
/// NaN-poisoned dQ, dK, dV laid out like Q, K, V.
pub fn backward_of<T: Element>(
    case: &Case<T>,
    out: &[T],
    lse: &[f32],
    d_o: &[T],
) -> flashattn::Result<(Vec<T>, Vec<T>, Vec<T>)> {
    let p = &case.problem;
    let nan = || T::from_f32(f32::NAN);
    let (mut dq, mut dk, mut dv) =
        (vec![nan(); case.q.len()], vec![nan(); case.k.len()], vec![nan(); case.v.len()]);
    cpu::attention_backward(
        HostTensor { data: &case.q, layout: *p.q() },
        HostTensor { data: &case.k, layout: *p.k() },
        HostTensor { data: &case.v, layout: *p.v() },
        HostTensor { data: out, layout: *p.o() },
        lse,
        HostTensor { data: d_o, layout: *p.o() },
        Gradients {
            dq: HostTensorMut { data: &mut dq, layout: *p.q() },
            dk: HostTensorMut { data: &mut dk, layout: *p.k() },
            dv: HostTensorMut { data: &mut dv, layout: *p.v() },
        },
        &case.opts,
    )?;
    Ok((dq, dk, dv))
}

/// Forward on the CPU, a random dO, backward into NaN-poisoned gradients; checks the rule and
/// that rows seeing no key have dQ exactly 0. Returns the worst rule ratio.
fn run<T: Element>(spec: &Spec, seed: u64) -> Result<f64, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let case = Case::<T>::random(&mut rng, spec);
    let p = &case.problem;
    let (out, lse) = case.run_cpu().map_err(|e| e.to_string())?;
    let d_o: Vec<T> = (0..out.len()).map(|_| T::from_f32(rng.random_range(-1.0..1.0))).collect();
    let (dq, dk, dv) = backward_of(&case, &out, &lse, &d_o).map_err(|e| e.to_string())?;
    let reference =
        attention_backward_f64(p, &widen(&case.q), &widen(&case.k), &widen(&case.v), &widen(&d_o));
    let baseline = baseline_backward(p, &case.q, &case.k, &case.v, &d_o);
    let worst =
        check_gradients(p, [&dq, &dk, &dv], &reference, &baseline).map_err(|e| format!("{e}\n{case}"))?;
    // Rows that see no key: dQ exactly 0.
    flashattn_testkit::case::for_each_row(p, |c, row| {
        if case.reference.row_keys[row] == 0 {
            let o = p.q().offset(c.b, c.s, c.h);
            assert!(
                dq[o..o + p.head_dim()].iter().all(|x| x.to_f32() == 0.0),
                "row {row} sees no key: dq {:?}",
                &dq[o..o + 4.min(p.head_dim())].iter().map(|x| x.to_f32()).collect::<Vec<_>>()
            );
        }
    });
    Ok(worst)
}

fn both(spec: &Spec, seed: u64) {
    for r in [run::<f16>(spec, seed), run::<bf16>(spec, seed)] {
        if let Err(e) = r {
            panic!("{e}");
        }
    }
}

#[test]
fn backward_matches_the_gradient_oracle() {
    let mut specs = Vec::new();
    let mut s = Spec::batch(2, 37, 53, 2, 24);
    s.tiles = Tiles { block_m: Some(8), block_n: Some(16) };
    specs.push(s.clone());
    s.causal = true;
    specs.push(s.clone());
    s.values = Values::LargeLogits;
    specs.push(s);
    // Causal with more queries than keys: the first rows see nothing.
    let mut s = Spec::batch(1, 20, 7, 2, 16);
    s.causal = true;
    s.tiles = Tiles { block_m: Some(3), block_n: Some(3) };
    specs.push(s);
    // GQA (2 query heads per K/V head) and MQA, padded and mixed layouts.
    let mut s = Spec::batch(2, 19, 30, 4, 40);
    s.heads_k = 2;
    s.layout = LayoutKind::Padded;
    specs.push(s.clone());
    s.heads_k = 1;
    s.layout = LayoutKind::Mixed;
    s.causal = true;
    specs.push(s);
    // Varlen with empty sequences; decode.
    let mut s = Spec::batch(1, 1, 1, 2, 32);
    s.sequences =
        Sequences::VarLen { q_lens: vec![9, 0, 14, 1], k_lens: vec![12, 5, 0, 20], spare_q: 1, spare_k: 2 };
    s.heads_k = 1;
    s.causal = true;
    specs.push(s);
    specs.push(Spec::batch(3, 1, 70, 4, 64));
    // Sliding windows (left, right, both, with causal), on a ragged shape with GQA.
    for (left, right, causal) in
        [(Some(6), None, false), (None, Some(4), false), (Some(9), Some(2), false), (Some(5), None, true)]
    {
        let mut s = Spec::batch(1, 29, 41, 4, 16);
        s.heads_k = 2;
        s.window = flashattn::Window { left, right };
        s.causal = causal;
        s.tiles = Tiles { block_m: Some(5), block_n: Some(7) };
        specs.push(s);
    }
    // Score modifiers: a softcap, ALiBi, both; with causal, GQA, varlen and a window.
    let slopes = vec![0.5, 0.0, 0.125, 0.03125];
    for (softcap, alibi) in [(Some(3.0), None), (None, Some(slopes.clone())), (Some(30.0), Some(slopes))] {
        let mut s = Spec::batch(2, 19, 30, 4, 24);
        s.heads_k = 2;
        (s.softcap, s.alibi_slopes, s.causal) = (softcap, alibi.clone(), true);
        s.tiles = Tiles { block_m: Some(5), block_n: Some(7) };
        specs.push(s.clone());
        s.causal = false;
        s.window = flashattn::Window { left: Some(6), right: Some(3) };
        specs.push(s);
        let mut s = Spec::batch(1, 1, 1, 4, 16);
        s.sequences = Sequences::VarLen {
            q_lens: vec![9, 0, 14, 1],
            k_lens: vec![12, 5, 0, 20],
            spare_q: 1,
            spare_k: 2,
        };
        (s.softcap, s.alibi_slopes, s.causal) = (softcap, alibi, true);
        specs.push(s);
    }
    // A K/V cache: per-entry key lengths (an empty entry, a full one), decode and a chunk.
    for nq in [1, 4] {
        let mut s = Spec::batch(3, nq, 20, 4, 16);
        s.heads_k = 2;
        s.cache_seqlens = Some(vec![5, 0, 20]);
        s.causal = true;
        s.tiles = Tiles { block_m: Some(2), block_n: Some(3) };
        specs.push(s);
    }
    let mut worst = 0.0f64;
    for (i, s) in specs.iter().enumerate() {
        both(s, 40 + i as u64);
        worst = worst.max(run::<bf16>(s, 40 + i as u64).unwrap_or(f64::INFINITY));
    }
    eprintln!("backward: worst rule ratio {worst:.3}");
}

/// Cases per property test: `PROPTEST_CASES` if set, else `default`.
fn config(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    ProptestConfig { cases, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config(96))]

    /// The forward's random specs (odd shapes, tiles that divide nothing, every mask, varlen
    /// with empty sequences, GQA/MQA, every layout and input distribution) through the backward.
    #[test]
    fn f16_gradients_match_oracle(spec in flashattn_testkit::strategy::spec(), seed in any::<u64>()) {
        run::<f16>(&spec, seed).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn bf16_gradients_match_oracle(spec in flashattn_testkit::strategy::spec(), seed in any::<u64>()) {
        run::<bf16>(&spec, seed).map_err(TestCaseError::fail)?;
    }

    /// K/V caches (per-entry key lengths) through the backward.
    #[test]
    fn kv_cache_gradients_match_oracle(spec in flashattn_testkit::strategy::spec_with_cache(), seed in any::<u64>()) {
        run::<f16>(&spec, seed).map_err(TestCaseError::fail)?;
        run::<bf16>(&spec, seed).map_err(TestCaseError::fail)?;
    }

    /// Softcaps and ALiBi through the backward.
    #[test]
    fn score_mod_gradients_match_oracle(
        spec in flashattn_testkit::strategy::spec_with_score_mods(),
        seed in any::<u64>(),
    ) {
        run::<f16>(&spec, seed).map_err(TestCaseError::fail)?;
        run::<bf16>(&spec, seed).map_err(TestCaseError::fail)?;
    }
}
