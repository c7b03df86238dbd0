//! Context-parallel attention's schedule, on the CPU: that the zigzag ring steps attend every
//! visible (query, key) pair exactly once and nothing else, with equal work per step; and an
//! emulation of the ring with the CPU implementation (each step's partial results merged by
//! log-sum-exp, in f64) that reproduces single-device attention. The GPU twin, with real
//! shards on two GPUs, is `tests/gpu/context_parallel.rs`.

use flashattn::context_parallel::{Ring, schedule, shard_tokens};
use flashattn::cpu::{self, HostTensor, HostTensorMut};
use flashattn::{AttentionOptions, Error, InvalidInput, Layout, RingError};
use flashattn_testkit::shard::{shard, tokens, unshard};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Every visible pair once, nothing else; each launch's slot is the number of contributions its
/// rows have had before (the same for all of them); with the causal mask every step of every rank
/// attends the same number of pairs.
#[test]
fn schedule_covers_every_visible_pair_once() {
    for ranks in 2..=5 {
        for causal in [false, true] {
            for chunk in [1usize, 2, 3, 7] {
                let n = 2 * ranks * chunk;
                let mut seen = vec![0u8; n * n];
                let mut step_pairs: Vec<usize> = Vec::new();
                for rank in 0..ranks {
                    let local = tokens(rank, ranks, n);
                    let sched = schedule(rank, ranks, local.len(), causal);
                    assert_eq!(sched.len(), ranks);
                    // Contributions so far per local query row.
                    let mut count = vec![0usize; local.len()];
                    for (s, works) in sched.iter().enumerate() {
                        let src = (rank + ranks - s) % ranks;
                        let remote = tokens(src, ranks, n);
                        let mut pairs = 0;
                        for w in works {
                            assert!(w.causal == (causal && s == 0), "rank {rank} step {s}: {w:?}");
                            for i in w.q_rows.clone() {
                                assert_eq!(w.slot, count[i], "rank {rank} step {s} row {i}: slots in order");
                                count[i] += 1;
                            }
                            let (lq, lk) = (w.q_rows.len(), w.k_rows.len());
                            for (i, qi) in w.q_rows.clone().enumerate() {
                                for (j, kj) in w.k_rows.clone().enumerate() {
                                    // Bottom-right aligned causal mask of the launch.
                                    if w.causal && j > i + (lk - lq.min(lk)) {
                                        continue;
                                    }
                                    seen[local[qi] * n + remote[kj]] += 1;
                                    pairs += 1;
                                }
                            }
                        }
                        if causal && s > 0 {
                            step_pairs.push(pairs);
                        }
                    }
                }
                for q in 0..n {
                    for k in 0..n {
                        let visible = !causal || k <= q;
                        assert_eq!(
                            seen[q * n + k],
                            visible as u8,
                            "ranks {ranks} causal {causal} chunk {chunk}: pair ({q}, {k})"
                        );
                    }
                }
                assert!(step_pairs.windows(2).all(|w| w[0] == w[1]), "unequal steps: {step_pairs:?}");
            }
        }
    }
}

#[test]
fn shard_tokens_are_the_zigzag_chunks() {
    assert_eq!(shard_tokens(0, 2, 8), Some([0..2, 6..8]));
    assert_eq!(shard_tokens(1, 2, 8), Some([2..4, 4..6]));
    assert_eq!(shard_tokens(1, 2, 6), None);
    assert_eq!(shard_tokens(2, 2, 8), None);
    assert_eq!(shard_tokens(0, 0, 0), None);
}

/// The ring on the CPU: every rank's steps run `cpu::attention` on the schedule's query part
/// and block rows, the partial outputs (f32) merged by log-sum-exp in f64; the gathered result
/// equals attention over the whole sequence.
#[test]
fn emulated_ring_reproduces_attention() {
    let mut rng = StdRng::seed_from_u64(7);
    for (ranks, causal, hq, hk, chunk) in
        [(2, true, 4, 2, 5), (2, false, 2, 2, 6), (3, true, 3, 1, 4), (4, false, 2, 1, 3)]
    {
        let (b, d) = (2, 16);
        let n = 2 * ranks * chunk;
        let (lq, lk) = (Layout::bshd(b, n, hq, d), Layout::bshd(b, n, hk, d));
        let q: Vec<f32> = (0..lq.required_len().unwrap()).map(|_| rng.random_range(-2.0..2.0)).collect();
        let k: Vec<f32> = (0..lk.required_len().unwrap()).map(|_| rng.random_range(-2.0..2.0)).collect();
        let v: Vec<f32> = (0..lk.required_len().unwrap()).map(|_| rng.random_range(-1.0..1.0)).collect();
        let opts = AttentionOptions { causal, ..Default::default() };
        let mut want = vec![f32::NAN; q.len()];
        let mut want_lse = vec![f32::NAN; b * hq * n];
        cpu::attention(
            HostTensor { data: &q, layout: lq },
            HostTensor { data: &k, layout: lk },
            HostTensor { data: &v, layout: lk },
            HostTensorMut { data: &mut want, layout: lq },
            Some(&mut want_lse),
            &opts,
        )
        .unwrap();
        let shards: Vec<_> = (0..ranks)
            .map(|r| {
                (
                    shard(&q, &lq, r, ranks, false),
                    shard(&k, &lk, r, ranks, false),
                    shard(&v, &lk, r, ranks, false),
                )
            })
            .collect();
        let mut got = vec![f32::NAN; q.len()];
        let mut got_lse = vec![f32::NAN; want_lse.len()];
        for r in 0..ranks {
            let ((sq, slq), _, _) = &shards[r];
            let len = slq.seqlen;
            // Per slot and query row of the shard: (lse, output row).
            let mut partial: Vec<Vec<(f64, Vec<f32>)>> = vec![Vec::new(); b * hq * len];
            for (s, works) in schedule(r, ranks, len, causal).iter().enumerate() {
                let src = (r + ranks - s) % ranks;
                let (_, (sk, slk), (sv, _)) = &shards[src];
                for w in works {
                    let qpart = Layout { seqlen: w.q_rows.len(), ..*slq };
                    let kpart = Layout { seqlen: w.k_rows.len(), ..*slk };
                    let mut o = vec![f32::NAN; qpart.required_len().unwrap()];
                    let mut l = vec![f32::NAN; b * hq * qpart.seqlen];
                    let o_layout = Layout::bshd(b, qpart.seqlen, hq, d);
                    cpu::attention(
                        HostTensor { data: &sq[w.q_rows.start * slq.seq_stride..], layout: qpart },
                        HostTensor { data: &sk[w.k_rows.start * slk.seq_stride..], layout: kpart },
                        HostTensor { data: &sv[w.k_rows.start * slk.seq_stride..], layout: kpart },
                        HostTensorMut { data: &mut o, layout: o_layout },
                        Some(&mut l),
                        &AttentionOptions { causal: w.causal, ..Default::default() },
                    )
                    .unwrap();
                    for bi in 0..b {
                        for h in 0..hq {
                            for (i, t) in w.q_rows.clone().enumerate() {
                                let at = o_layout.offset(bi, i, h);
                                let row = &mut partial[(bi * hq + h) * len + t];
                                assert_eq!(row.len(), w.slot, "slot order");
                                row.push((
                                    l[(bi * hq + h) * qpart.seqlen + i] as f64,
                                    o[at..at + d].to_vec(),
                                ));
                            }
                        }
                    }
                }
            }
            // Merge by log-sum-exp.
            let mut so = vec![f32::NAN; slq.required_len().unwrap()];
            let mut sl = vec![f32::NAN; b * hq * len];
            for bi in 0..b {
                for h in 0..hq {
                    for t in 0..len {
                        let row = &partial[(bi * hq + h) * len + t];
                        let m = row.iter().map(|x| x.0).fold(f64::NEG_INFINITY, f64::max);
                        let w: Vec<f64> = row.iter().map(|x| (x.0 - m).exp()).collect();
                        let sum: f64 = w.iter().sum();
                        let at = slq.offset(bi, t, h);
                        for c in 0..d {
                            let x: f64 = row.iter().zip(&w).map(|(p, w)| w * p.1[c] as f64).sum();
                            so[at + c] = (x / sum) as f32;
                        }
                        sl[(bi * hq + h) * len + t] = (m + sum.ln()) as f32;
                    }
                }
            }
            unshard(&so, slq, &sl, &mut got, &lq, &mut got_lse, r, ranks);
        }
        let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        let lse_err = got_lse.iter().zip(&want_lse).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(err < 1e-5 && lse_err < 1e-5, "ranks {ranks} causal {causal}: err {err}, lse err {lse_err}");
    }
}

#[test]
fn a_ring_needs_two_gpus() {
    match Ring::new(Vec::new()) {
        Err(Error::InvalidInput(InvalidInput::Ring(RingError::TooFewRanks { ranks: 0 }))) => {}
        other => panic!("expected TooFewRanks, got {other:?}"),
    }
}

/// On an H200 with shards of 512 tokens every launch runs on the Hopper kernel and merges its
/// rows itself: one slot; each launch merges when its rows have a running result, and writes O
/// for exactly the rows whose last contribution it is (every row once). On an A100 the
/// `mma.sync` kernel splits each launch in two slots that the combine merges.
#[test]
fn launch_plan_merges_every_row_once() {
    use flashattn::context_parallel::plan_launches;
    use flashattn::{DType, DeviceProps, Method};
    let (ranks, len) = (3, 512);
    let (q, kv) = (Layout::bshd(1, len, 8, 128), Layout::bshd(1, len, 2, 128));
    for causal in [false, true] {
        let opts = AttentionOptions { causal, ..Default::default() };
        let plan = plan_launches(&DeviceProps::h200(), DType::BF16, ranks, q, kv, q, &opts).unwrap();
        assert!(plan.running_merge, "causal {causal}: {plan:?}");
        assert_eq!(plan.slots, 1);
        for (rank, launches) in plan.per_rank.iter().enumerate() {
            let mut seen = vec![0usize; len];
            let mut finals = vec![0usize; len];
            for l in launches {
                assert_eq!(l.method, Method::FlashHopper);
                assert_eq!(l.slots, 0..1);
                let rows = l.work.q_rows.clone();
                assert!(rows.clone().all(|i| (seen[i] > 0) == l.merge), "rank {rank}: {l:?}");
                for (k, i) in rows.enumerate() {
                    seen[i] += 1;
                    if k < l.final_rows {
                        finals[i] += 1;
                        // Final means no later launch covers the row.
                        let later =
                            launches.iter().filter(|m| m.step > l.step).any(|m| m.work.q_rows.contains(&i));
                        assert!(!later, "rank {rank} row {i} final at step {} but covered later", l.step);
                    }
                }
            }
            assert!(finals.iter().all(|&f| f == 1), "rank {rank}: every row written to O once: {finals:?}");
        }
        // Steps large enough for the Hopper kernel's persistent grid (more query tiles than SMs,
        // non-causal steps among them) still run one query tile a block: the persistent
        // instances' partial rows are not covered by their tests, which need two GPUs.
        let (bq, bkv) = (Layout::bshd(2, 3 * 4096, 16, 128), Layout::bshd(2, 3 * 4096, 16, 128));
        let big = plan_launches(&DeviceProps::h200(), DType::BF16, ranks, bq, bkv, bq, &opts).unwrap();
        let kernels: Vec<_> = big.per_rank.iter().flatten().map(|l| l.kernel).collect();
        assert!(
            kernels.iter().all(|k| k.starts_with("flash_fwd_wgmma") && !k.ends_with("_persistent")),
            "{kernels:?}"
        );
        let a100 = plan_launches(&DeviceProps::a100(), DType::BF16, ranks, q, kv, q, &opts).unwrap();
        assert!(!a100.running_merge);
        assert!(
            a100.per_rank.iter().flatten().all(|l| l.method == Method::FlashTensorCore && l.slots.len() == 2)
        );
        assert_eq!(a100.slots, 2 * ranks);
    }
    // Refusals, without GPUs.
    let opts = AttentionOptions { causal: true, ..Default::default() };
    let odd = Layout::bshd(1, 511, 8, 128);
    match plan_launches(&DeviceProps::h200(), DType::BF16, 2, odd, Layout::bshd(1, 511, 2, 128), odd, &opts) {
        Err(Error::InvalidInput(InvalidInput::Ring(RingError::CausalShard { .. }))) => {}
        other => panic!("expected CausalShard, got {other:?}"),
    }
    match plan_launches(&DeviceProps::h200(), DType::F32, 2, q, kv, q, &opts) {
        Err(Error::InvalidInput(InvalidInput::Ring(RingError::DType { .. }))) => {}
        other => panic!("expected DType, got {other:?}"),
    }
}
