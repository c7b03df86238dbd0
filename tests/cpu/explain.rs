//! The walkthrough (`cargo xtask explain`): its key numbers for the default options, pinned.

use flashattn::explain::{ExplainOptions, walkthrough};

#[test]
fn default_walkthrough_numbers() {
    let w = walkthrough(&ExplainOptions::default());
    assert_eq!((w.options.n_q, w.options.n_k, w.options.d, w.options.block_n), (4, 4, 3, 2));
    assert_eq!(w.blocks.len(), 2);
    assert_eq!(w.scores_held, 8);
    assert_eq!(w.scores_standard, 16);
    assert!((w.scale - 1.0 / 3f32.sqrt()).abs() < 1e-7);

    // The inputs (two decimals from the seeded generator) and a few results, to 1e-6.
    assert_eq!(w.q[0], vec![-0.92, -0.55, 0.26]);
    assert_eq!(w.v[3], vec![0.88, -0.53, -0.61]);
    let pinned = [(0, 0, 0.314_356_5), (1, 1, -0.324_749_8), (2, 2, -0.155_990_6), (3, 2, -0.247_814_0)];
    for (r, x, value) in pinned {
        assert!((w.reference[r][x] - value).abs() < 1e-6, "reference o{r}[{x}] = {}", w.reference[r][x]);
        assert!((f64::from(w.output[r][x]) - value).abs() < 1e-6, "output o{r}[{x}] = {}", w.output[r][x]);
    }
    for r in 0..4 {
        for x in 0..3 {
            assert!((f64::from(w.output[r][x]) - w.reference[r][x]).abs() < 1e-6);
        }
    }
    // The running state: row 1's maximum rises in block 2 (rescale < 1), row 0's does not.
    let b2 = &w.blocks[1];
    assert_eq!(b2.rescale[0], 1.0);
    assert!((b2.rescale[1] - 0.9666).abs() < 1e-4, "{}", b2.rescale[1]);
    assert!((b2.rescale[3] - 0.9093).abs() < 1e-4, "{}", b2.rescale[3]);
    assert!(w.blocks[0].max_before.iter().all(|&m| m == f32::NEG_INFINITY));
    assert!((b2.normaliser[0] - 3.293_691_6).abs() < 1e-6);

    // Exactness: the difference is far below the threshold, which is below 1e-5.
    assert!(w.max_difference < 1e-7, "{}", w.max_difference);
    assert!(w.threshold < 1e-5 && w.max_difference <= w.threshold);
    assert!(w.max_lse_difference < 1e-6, "{}", w.max_lse_difference);
    assert!(w.to_string().contains("It did not occur"));

    // The backward: D from the first pass equals Σ P·dP of the materialised matrices, and the
    // tiled gradients equal standard attention's to f32 rounding.
    let b = &w.backward;
    for (r, &(d, reference)) in b.d.iter().enumerate() {
        assert!((f64::from(d) - reference).abs() < 1e-6, "D of q{r}: {d} vs {reference}");
    }
    for (name, diff) in ["dq", "dk", "dv"].iter().zip(b.max_difference) {
        assert!(diff < 1e-6, "{name}: {diff}");
    }
    assert_eq!((b.held, b.held_standard), (4 * (3 + 3) + 2 * 4 * 2, 32));
    assert!((b.d[1].1 - -0.4398).abs() < 1e-4, "{}", b.d[1].1);
    assert!(w.to_string().contains("Backward (training)"));
}

#[test]
fn merging_the_halves_without_their_weights_is_caught() {
    // Averaging the halves' outputs (ignoring their log-sum-exps) is what a wrong merge does:
    // the default example's halves have different log-sum-exps, so that is far from exact.
    let w = walkthrough(&ExplainOptions::default());
    let naive_diff = (0..w.output.len())
        .flat_map(|r| {
            let (a, b) = (&w.split_halves[0].0[r], &w.split_halves[1].0[r]);
            let reference = &w.reference[r];
            (0..a.len()).map(move |x| (f64::from(0.5 * (a[x] + b[x])) - reference[x]).abs())
        })
        .fold(0.0, f64::max);
    assert!(naive_diff > 1e-3, "the halves' plain average is off by {naive_diff}");
    assert!(w.split_max_difference <= w.threshold);
}

#[test]
fn leaving_out_the_rescale_is_caught() {
    // The threshold separates rounding from a wrong method: recombining the blocks without the
    // rescale factors (each block's probabilities taken relative to its own maximum) misses the
    // reference by far more than the threshold.
    let w = walkthrough(&ExplainOptions::default());
    let mut worst = 0.0f64;
    for r in 0..4 {
        let (mut l, mut acc) = (0.0f64, [0.0f64; 3]);
        for b in &w.blocks {
            let m = b.scores[r].iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
            for (c, &s) in b.scores[r].iter().enumerate() {
                let p = (f64::from(w.scale) * f64::from(s - m)).exp();
                l += p;
                for (x, a) in acc.iter_mut().enumerate() {
                    *a += p * f64::from(w.v[b.first_key + c][x]);
                }
            }
        }
        for (a, reference) in acc.iter().zip(&w.reference[r]) {
            worst = worst.max((a / l - reference).abs());
        }
    }
    assert!(worst > 1e-3 && worst > 100.0 * w.threshold, "{worst}");
}

#[test]
fn other_sizes_are_exact_too() {
    for (n_q, n_k, d, block_n, seed) in
        [(1, 1, 1, 1, 0), (5, 9, 4, 4, 7), (3, 17, 8, 5, 42), (2, 3, 2, 10, 3)]
    {
        let w = walkthrough(&ExplainOptions { n_q, n_k, d, block_n, seed, scale: None });
        assert_eq!(w.blocks.len(), n_k.div_ceil(block_n));
        assert_eq!(w.scores_held, n_q * block_n.min(n_k));
        assert!(w.max_difference <= w.threshold, "{n_q}×{n_k} d {d}: {}", w.max_difference);
        // Split-KV's merge of the two halves is exact too (one half is empty for n_k = 1).
        assert!(w.split_max_difference <= w.threshold, "split {n_q}×{n_k}: {}", w.split_max_difference);
    }
    // Zero keys: output 0, nothing to hold; both halves empty, merged to 0.
    let w = walkthrough(&ExplainOptions { n_k: 0, ..Default::default() });
    assert!(w.output.iter().flatten().all(|&x| x == 0.0));
    assert!(w.split_output.iter().flatten().all(|&x| x == 0.0));
    assert_eq!(w.scores_held, 0);
}
