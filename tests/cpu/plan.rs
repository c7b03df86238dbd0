//! Planning, on a machine without a GPU: the pure planner with synthetic sm_80 (A100) and sm_90
//! (H200) properties. Which method `Auto` picks, why it did not pick a faster one, every refusal
//! as a typed reason, and grids and sizes that stay inside CUDA's limits.

use flashattn::kernels::config::{MMA_CONFIGS, mma_default};
use flashattn::{
    AttentionOptions, DType, DeviceProps, InvalidInput, LaunchKind, Layout, Method, Problem, Reason,
    TileError, Tiles, plan,
};

fn problem(q: Layout, k: Layout, opts: &AttentionOptions) -> Problem {
    let lens = [q, k, k, q].map(|l| l.required_len().expect("test layouts fit"));
    Problem::new(q, k, k, q, lens, opts).expect("valid problem")
}

fn devices() -> [DeviceProps; 2] {
    [DeviceProps::a100(), DeviceProps::h200()]
}

#[test]
fn auto_takes_tensor_cores_where_they_apply() {
    for props in devices() {
        for d in [32, 64, 96, 128, 160, 192, 224, 256] {
            for dtype in [DType::F16, DType::BF16] {
                let l = Layout::bshd(2, 1000, 4, d);
                let p =
                    plan(&props, dtype, &problem(l, l, &Default::default()), &Default::default()).unwrap();
                if props.compute_capability == (9, 0) && d > 32 {
                    // The Hopper kernel takes these (`the_hopper_kernel_plans…`).
                    assert_eq!(p.method, Method::FlashHopper, "{} d{d} {dtype}: {p}", props.name);
                    continue;
                }
                assert_eq!(p.method, Method::FlashTensorCore, "{} d{d} {dtype}: {p}", props.name);
                // On sm_90 the Hopper rule was passed over (head dim), and says so.
                let hopper_passed = props.compute_capability == (9, 0);
                assert_eq!(p.not_taken.len(), usize::from(hopper_passed), "{p}");
                let c = MMA_CONFIGS[mma_default(d as u32, false, 1000).unwrap()];
                assert_eq!(p.tiles, Some((c.block_m as usize, c.block_n as usize)));
                let main = p.main_launch().unwrap();
                // Full query tiles are not split, even where they do not fill the GPU.
                assert_eq!(p.splits, 1, "{p}");
                assert_eq!(main.grid, (1000u32.div_ceil(c.block_m) * p.splits as u32, 4, 2));
                assert_eq!((main.threads, main.shared_bytes), (c.threads(), c.shared_bytes()));
            }
        }
    }
}

#[test]
fn auto_says_why_it_did_not_take_tensor_cores() {
    let h200 = DeviceProps::h200();
    let opts = AttentionOptions::default();
    let l = Layout::bshd(1, 64, 2, 64);
    // f32: the tensor-core kernel has no f32 path; cuBLAS standard attention is faster than
    // the CUDA-core kernel where its N×N matrices fit (rule 2).
    let p = plan(&h200, DType::F32, &problem(l, l, &opts), &opts).unwrap();
    assert_eq!(p.method, Method::Standard);
    assert!(p.why[0].starts_with("auto rule 3"), "{p}");
    assert_eq!(p.not_taken[0].method, Method::FlashHopper);
    assert_eq!(p.not_taken[1].method, Method::FlashTensorCore);
    assert_eq!(p.not_taken[1].reason, Reason::DType { dtype: DType::F32 });
    assert!(p.to_string().contains("not flash-tc: f32"), "{p}");
    // Every head dim runs on tensor cores, padded up to an instantiated one (d = 80 → 96)…
    let l80 = Layout::bshd(1, 64, 2, 80);
    let p = plan(&h200, DType::BF16, &problem(l80, l80, &opts), &opts).unwrap();
    assert_eq!(p.method, Method::FlashTensorCore, "{p}");
    assert!(p.kernel().contains("_d96_"), "{p}");
    // …and so do head dims that are not multiples of 8 (d = 59, whose contiguous rows are not
    // 16-byte aligned either), on the element-wise instance of the next head dim…
    let l59 = Layout::bshd(1, 64, 2, 59);
    let p = plan(&h200, DType::BF16, &problem(l59, l59, &opts), &opts).unwrap();
    assert_eq!(p.method, Method::FlashTensorCore, "{p}");
    assert!(p.kernel().contains("_d64_") && p.kernel().ends_with("_elem"), "{p}");
    assert!(p.why.iter().any(|w| w.contains("head dim 59 is not a multiple of 8")), "{p}");
    // …and strides that are not multiples of 8 elements.
    let mut padded = l;
    padded.seq_stride = 2 * 64 + 4;
    padded.batch_stride = 64 * padded.seq_stride;
    let p = plan(&h200, DType::BF16, &problem(padded, padded, &opts), &opts).unwrap();
    assert!(p.kernel().ends_with("_elem"), "{p}");
    assert!(p.why.iter().any(|w| w.contains("q's strides")), "{p}");
    // Element-wise rows cannot split (the combine kernel needs 16-byte rows), and decoding on
    // them takes the element-wise instance, not the decode one.
    let split = AttentionOptions { splits: Some(4), method: Method::FlashTensorCore, ..opts.clone() };
    let r = plan(&h200, DType::BF16, &problem(l59, l59, &split), &split);
    assert!(
        matches!(&r, Err(InvalidInput::Unsupported { reason: Reason::SplitUnaligned { head_dim: 59 }, .. })),
        "{r:?}"
    );
    let (q1, k59) = (Layout::bshd(4, 1, 8, 59), Layout::bshd(4, 4096, 2, 59));
    let p = plan(&h200, DType::BF16, &problem(q1, k59, &opts), &opts).unwrap();
    assert!(p.kernel().ends_with("_elem") && p.splits == 1, "{p}");
    // A tile override it has no instance of: the general kernel runs it, and the plan says so.
    let tiles = AttentionOptions { tiles: Tiles { block_m: Some(32), block_n: Some(64) }, ..opts.clone() };
    let p = plan(&h200, DType::BF16, &problem(l, l, &tiles), &tiles).unwrap();
    assert_eq!(p.method, Method::Flash);
    assert!(
        matches!(p.not_taken[1].reason, Reason::Tiles(TileError::NotInstantiated { head_dim: 64, .. })),
        "{p}"
    );
}

/// Strides of dimensions of extent 1 never move an address: they must not block the
/// tensor-core kernel (a regression: a batch-1 tensor with an odd batch stride used to).
#[test]
fn alignment_ignores_strides_of_size_one_dimensions() {
    let mut l = Layout::bshd(1, 100, 1, 64);
    l.batch_stride = 3; // batch of 1
    l.head_stride = 5; // one head
    let opts = AttentionOptions { method: Method::FlashTensorCore, ..Default::default() };
    let p = plan(&DeviceProps::h200(), DType::F16, &problem(l, l, &opts), &opts).unwrap();
    assert_eq!(p.method, Method::FlashTensorCore);
}

#[test]
fn every_method_checks_tile_overrides() {
    let h200 = DeviceProps::h200();
    let l = Layout::bshd(1, 64, 2, 64);
    let with = |method, m, n| AttentionOptions {
        method,
        tiles: Tiles { block_m: m, block_n: n },
        ..Default::default()
    };
    let refused = |opts: &AttentionOptions| {
        let p = problem(l, l, &AttentionOptions::default());
        match plan(&h200, DType::F16, &p, opts) {
            Err(InvalidInput::Tiles { reason, .. }) => reason,
            other => panic!("{opts:?}: expected a tile error, got {other:?}"),
        }
    };
    // Standard attention has no tiles: any override, 0×0 included, is refused.
    assert_eq!(refused(&with(Method::Standard, Some(0), Some(0))), TileError::NotTiled);
    assert_eq!(refused(&with(Method::Standard, Some(64), None)), TileError::NotTiled);
    assert!(matches!(refused(&with(Method::Flash, Some(0), None)), TileError::BlockM { .. }));
    assert!(matches!(refused(&with(Method::Flash, None, Some(0))), TileError::BlockN { .. }));
    assert!(matches!(refused(&with(Method::Flash, None, Some(48))), TileError::BlockN { .. }));
    assert!(matches!(
        refused(&with(Method::FlashTensorCore, Some(0), Some(0))),
        TileError::NotInstantiated { .. }
    ));
    assert!(matches!(
        refused(&with(Method::FlashTensorCore, Some(usize::MAX), None)),
        TileError::NotInstantiated { .. }
    ));
    // Every instantiated tensor-core configuration is reachable by its tiles.
    for c in MMA_CONFIGS {
        let ld = Layout::bshd(1, 64, 2, c.head_dim as usize);
        let opts = with(Method::FlashTensorCore, Some(c.block_m as usize), Some(c.block_n as usize));
        let p = plan(&h200, DType::BF16, &problem(ld, ld, &opts), &opts).unwrap();
        assert_eq!(p.tiles, Some((c.block_m as usize, c.block_n as usize)));
    }
}

#[test]
fn shared_memory_limits_come_from_the_device() {
    let small = DeviceProps { max_shared_per_block: 48 * 1024, ..DeviceProps::a100() };
    let l = Layout::bshd(1, 64, 2, 256);
    let opts = AttentionOptions { method: Method::FlashTensorCore, ..Default::default() };
    let r = plan(&small, DType::BF16, &problem(l, l, &opts), &opts);
    assert!(matches!(r, Err(InvalidInput::Unsupported { reason: Reason::SharedMemory { .. }, .. })), "{r:?}");
}

#[test]
fn grids_stay_inside_cuda_limits() {
    // 70000 heads: grid.y would exceed 65535.
    let l = Layout::bshd(1, 4, 70_000, 64);
    let opts = AttentionOptions { method: Method::Flash, ..Default::default() };
    let r = plan(&DeviceProps::h200(), DType::F32, &problem(l, l, &opts), &opts);
    assert!(matches!(r, Err(InvalidInput::Unsupported { reason: Reason::Grid { .. }, .. })), "{r:?}");
}

/// A problem whose S and P would need 2^65 bytes: refused by the planner with the sizes, not
/// planned as a 3-billion-block grid with a wrapped byte count (which cuBLAS then overran).
#[test]
fn standard_sizes_are_checked() {
    let q = Layout {
        batch: 1 << 16,
        seqlen: 1 << 16,
        heads: 1,
        head_dim: 8,
        batch_stride: 0,
        seq_stride: 8,
        head_stride: 0,
    };
    let k = Layout { seqlen: 1 << 16, ..q };
    let o = Layout::bshd(1 << 16, 1 << 16, 1, 8);
    let opts = AttentionOptions { method: Method::Standard, ..Default::default() };
    let lens = [q, k, k, o].map(|l| l.required_len().unwrap());
    let p = Problem::new(q, k, k, o, lens, &opts).unwrap();
    let r = plan(&DeviceProps::h200(), DType::F16, &p, &opts);
    assert!(
        matches!(
            r,
            Err(InvalidInput::Unsupported { reason: Reason::TooLarge { .. } | Reason::Grid { .. }, .. })
        ),
        "{r:?}"
    );
}

/// cuBLAS needs token strides of at least the head dim: a broadcast V (token stride 0) is
/// refused by the standard path's plan, before anything runs. The flash paths take it.
#[test]
fn standard_refuses_broadcast_rows_flash_takes_them() {
    let q = Layout::bshd(1, 16, 2, 64);
    let mut v = Layout::bshd(1, 16, 2, 64);
    v.seq_stride = 0;
    v.batch_stride = 0;
    let opts = AttentionOptions { method: Method::Standard, ..Default::default() };
    let lens = [q, q, v, q].map(|l| l.required_len().unwrap());
    let p = Problem::new(q, q, v, q, lens, &opts).unwrap();
    let r = plan(&DeviceProps::h200(), DType::F16, &p, &opts);
    assert!(
        matches!(r, Err(InvalidInput::Unsupported { reason: Reason::GemmStride { tensor: "v", .. }, .. })),
        "{r:?}"
    );
    for method in [Method::Flash, Method::Auto] {
        let opts = AttentionOptions { method, ..Default::default() };
        plan(&DeviceProps::h200(), DType::F16, &p, &opts).unwrap();
    }
}

/// Empty problems (no sequence, no query head, no query token) plan no launch on every path.
#[test]
fn empty_problems_launch_nothing() {
    let cases = [
        (Layout::bshd(0, 16, 2, 64), Layout::bshd(0, 16, 2, 64)),
        (Layout::bshd(2, 16, 0, 64), Layout::bshd(2, 16, 2, 64)),
        (Layout::bshd(2, 0, 2, 64), Layout::bshd(2, 16, 2, 64)),
        (Layout::bshd(2, 16, 0, 64), Layout::bshd(2, 16, 0, 64)),
    ];
    for (q, k) in cases {
        for method in Method::ALL {
            let opts = AttentionOptions { method, ..Default::default() };
            let p = problem(q, k, &opts);
            assert!(p.is_empty());
            for props in devices() {
                let pl = plan(&props, DType::F16, &p, &opts);
                if method == Method::FlashHopper && props.compute_capability != (9, 0) {
                    // An explicit method the device cannot run is refused, empty or not.
                    assert!(matches!(
                        pl,
                        Err(InvalidInput::Unsupported { reason: Reason::Target { .. }, .. })
                    ));
                    continue;
                }
                let pl = pl.unwrap();
                assert!(pl.launches.is_empty() && pl.scratch_bytes == 0, "{pl}");
            }
        }
    }
}

#[test]
fn standard_plan_lists_its_launches() {
    let q = Layout::bshd(2, 64, 4, 64);
    let k = Layout::bshd(2, 80, 2, 64);
    let opts = AttentionOptions { method: Method::Standard, ..Default::default() };
    let p = plan(&DeviceProps::h200(), DType::BF16, &problem(q, k, &opts), &opts).unwrap();
    let kinds: Vec<LaunchKind> = p.launches.iter().map(|l| l.kind).collect();
    assert!(matches!(
        kinds[..],
        [LaunchKind::Gemm(_), LaunchKind::Kernel("softmax_rows_bf16"), LaunchKind::Gemm(_)]
    ));
    assert_eq!(p.launches[0].count, 2, "one GEMM per query head of a group");
    assert_eq!(p.scratch_bytes, 2 * 4 * 64 * 80 * (4 + 2));
}

/// Llama-3-8B decoding (32 query heads over 8 K/V heads, d = 128, one query token): the query
/// heads of a group are packed into one tile, the one-warp decode instance runs it, the keys are
/// split across blocks, and a combine kernel merges them.
#[test]
fn decode_packs_query_heads_and_splits_the_keys() {
    let h200 = DeviceProps::h200();
    let opts = AttentionOptions::default();
    for (batch, cache) in [(1, 1024), (4, 16384), (16, 4096), (64, 131_072)] {
        let (q, kv) = (Layout::bshd(batch, 1, 32, 128), Layout::bshd(batch, cache, 8, 128));
        let pr = problem(q, kv, &opts);
        let p = plan(&h200, DType::BF16, &pr, &opts).unwrap();
        assert_eq!(p.method, Method::FlashTensorCore, "{p}");
        assert!(p.gqa_packed, "{p}");
        assert!(p.kernel().contains("_m16_n64_w1_"), "the decode instance: {p}");
        let main = p.main_launch().unwrap();
        // One query tile (4 packed rows) per (sequence, K/V head), times the splits.
        assert_eq!(main.grid, (p.splits as u32, 8, batch as u32), "{p}");
        let blocks = 8 * batch * p.splits;
        assert!(p.splits <= cache / 64 / 2, "at least 2 key tiles per split: {p}");
        if 8 * batch < 132 {
            // Up to three blocks per SM (one split more would pass it), unless the splits would
            // get fewer than 2 key tiles each.
            let fills = blocks <= 3 * 132 && (blocks + 8 * batch > 3 * 132 || p.splits == cache / 64 / 2);
            assert!(p.splits > 1 && fills, "the splits fill the GPU, or have 2 key tiles each: {p}");
            assert_eq!(p.launches.len(), 2, "{p}");
            assert!(p.launches[1].kind == LaunchKind::Kernel("flash_combine_bf16"), "{p}");
            // The combine sees the packed problem too: 4 rows of 8 heads per sequence.
            assert_eq!(p.launches[1].grid, (1, 8, batch as u32));
            // On sm_90 it is a programmatic dependent of the forward (an A100 launches it after).
            assert!(p.launches[1].after_previous && !p.launches[0].after_previous, "{p}");
            let on_a100 = plan(&DeviceProps::a100(), DType::BF16, &pr, &opts).unwrap();
            assert!(on_a100.launches.iter().all(|l| !l.after_previous), "{on_a100}");
            let partials = 4 * p.splits as u64 * (batch * 32) as u64 * 129;
            assert_eq!(p.scratch_bytes, partials, "{p}");
            assert!(p.to_string().contains("split-KV"), "{p}");
        }
        assert!(p.to_string().contains("GQA packing"), "{p}");
    }
    // Multi-head decoding (no groups) is not packed, but still runs the decode instance.
    let (q, kv) = (Layout::bshd(2, 1, 8, 64), Layout::bshd(2, 4096, 8, 64));
    let p = plan(&h200, DType::F16, &problem(q, kv, &opts), &opts).unwrap();
    assert!(!p.gqa_packed && p.kernel().contains("_m16_"), "{p}");
    // Varlen decoding is not packed (the query tokens of a sequence are its rows).
    let vl = flashattn::VarLen::from_lengths(&[1, 1], &[100, 300]).unwrap();
    let vopts = AttentionOptions { varlen: Some(vl), ..Default::default() };
    let (q, kv) = (Layout::packed(2, 8, 128), Layout::packed(400, 2, 128));
    let p = plan(&h200, DType::BF16, &problem(q, kv, &vopts), &vopts).unwrap();
    assert!(!p.gqa_packed && p.method == Method::FlashTensorCore, "{p}");
}

/// Full query tiles are not split; a split override is honoured and checked.
#[test]
fn split_kv_is_chosen_by_occupancy_and_can_be_overridden() {
    let h200 = DeviceProps::h200();
    let l = Layout::bshd(4, 4096, 16, 128);
    let opts = AttentionOptions::default();
    let p = plan(&h200, DType::BF16, &problem(l, l, &opts), &opts).unwrap();
    assert_eq!(
        (p.splits, p.launches.len(), p.scratch_bytes),
        (1, 1, 0),
        "the headline shape fills the GPU: {p}"
    );
    // Under-filled prefill is not split either (full query tiles: the partials cost more).
    let small = Layout::bshd(1, 4096, 2, 128);
    let p = plan(&h200, DType::BF16, &problem(small, small, &opts), &opts).unwrap();
    assert_eq!(p.splits, 1, "{p}");
    // Few query rows (a short chunk of 8 queries) against long keys: split.
    let (q, kv) = (Layout::bshd(1, 8, 2, 128), Layout::bshd(1, 8192, 2, 128));
    let p = plan(&h200, DType::BF16, &problem(q, kv, &opts), &opts).unwrap();
    assert!(p.splits > 1 && p.kernel().contains("_m16_"), "{p}");
    for splits in [1, 3, 128] {
        let o = AttentionOptions { splits: Some(splits), ..Default::default() };
        let p = plan(&h200, DType::BF16, &problem(l, l, &o), &o).unwrap();
        assert_eq!(p.splits, splits);
        // (Unsplit, the Hopper kernel's persistent grid: one block an SM.)
        let grid = if p.kernel().ends_with("_persistent") {
            h200.sm_count
        } else {
            4096u32.div_ceil(p.tiles.unwrap().0 as u32) * splits as u32
        };
        assert_eq!(p.main_launch().unwrap().grid.0, grid, "{p}");
        assert_eq!(splits == 1, p.kernel().ends_with("_persistent"), "{p}");
        assert_eq!(p.launches.len(), if splits > 1 { 2 } else { 1 });
    }
    for splits in [0, 129] {
        let o = AttentionOptions { splits: Some(splits), ..Default::default() };
        // Refused by the planner (for the options it is given) and by validation.
        let r = plan(&h200, DType::BF16, &problem(l, l, &opts), &o);
        assert!(matches!(r, Err(InvalidInput::Tiles { reason: TileError::Splits { .. }, .. })), "{r:?}");
        let lens = [l, l, l, l].map(|x| x.required_len().unwrap());
        let r = Problem::new(l, l, l, l, lens, &o);
        assert!(matches!(r, Err(InvalidInput::Tiles { reason: TileError::Splits { .. }, .. })), "{r:?}");
    }
    // Only the tensor-core kernel splits the keys.
    for method in [Method::Flash, Method::Standard] {
        let o = AttentionOptions { splits: Some(2), method, ..Default::default() };
        let r = plan(&h200, DType::BF16, &problem(l, l, &o), &o);
        assert!(matches!(r, Err(InvalidInput::Unsupported { reason: Reason::NoSplitKv, .. })), "{r:?}");
    }
}

/// Each rule of `Auto`'s table, where the previous ones do not apply.
#[test]
fn auto_follows_its_rule_table() {
    let h200 = DeviceProps::h200();
    let opts = AttentionOptions::default();
    assert_eq!(
        flashattn::AUTO_RULES.map(|r| r.method),
        [Method::FlashHopper, Method::FlashTensorCore, Method::Standard, Method::Flash]
    );
    // Rule 1: the Hopper kernel on sm_90, 128+ query rows, 32 < d ≤ 256.
    let l = Layout::bshd(2, 512, 4, 64);
    let p = plan(&h200, DType::F16, &problem(l, l, &opts), &opts).unwrap();
    assert!(p.method == Method::FlashHopper && p.why[0].starts_with("auto rule 1"), "{p}");
    // (An inference call on a fixed-length batch: its output is stored by TMA.)
    assert!(p.why.iter().any(|w| w.contains("stored by TMA")), "{p}");
    // Rule 2: the mma.sync kernel: on sm_80 (rule 1 never considered, nothing listed as not
    // taken), for d = 32, for decoding, for rows that are not 16-byte aligned.
    let p = plan(&DeviceProps::a100(), DType::F16, &problem(l, l, &opts), &opts).unwrap();
    assert!(p.method == Method::FlashTensorCore && p.why[0].starts_with("auto rule 2"), "{p}");
    assert!(p.not_taken.is_empty(), "{p}");
    for (q, k) in [
        (Layout::bshd(2, 512, 4, 32), Layout::bshd(2, 512, 4, 32)),
        (Layout::bshd(2, 1, 4, 128), Layout::bshd(2, 4096, 4, 128)),
        (Layout::bshd(2, 512, 4, 252), Layout::bshd(2, 512, 4, 252)),
    ] {
        let p = plan(&h200, DType::BF16, &problem(q, k, &opts), &opts).unwrap();
        assert!(p.method == Method::FlashTensorCore && p.why[0].starts_with("auto rule 2"), "{p}");
        assert_eq!(p.not_taken[0].method, Method::FlashHopper, "{p}");
    }
    // Rule 3: f32 with N×N matrices inside the budget.
    let p = plan(&h200, DType::F32, &problem(l, l, &opts), &opts).unwrap();
    assert!(p.method == Method::Standard && p.why[0].starts_with("auto rule 3"), "{p}");
    // Rule 4: f32 whose N×N matrices exceed 1/16 of the device (8 × 16 heads × 32k² × 8 B = 1 TiB).
    let big = Layout::bshd(8, 32_768, 16, 64);
    let p = plan(&h200, DType::F32, &problem(big, big, &opts), &opts).unwrap();
    assert_eq!(p.method, Method::Flash, "{p}");
    assert!(matches!(p.not_taken[2].reason, Reason::ScratchBudget { .. }), "{p}");
    // Rule 4: varlen f32.
    let vl = flashattn::VarLen::from_lengths(&[10, 20], &[10, 20]).unwrap();
    let vopts = AttentionOptions { varlen: Some(vl), ..Default::default() };
    let pl = Layout::packed(30, 2, 64);
    let p = plan(&h200, DType::F32, &problem(pl, pl, &vopts), &vopts).unwrap();
    assert_eq!(p.method, Method::Flash, "{p}");
    assert_eq!(p.not_taken[2].reason, Reason::VarLen, "{p}");
}

/// A sliding window runs on the tensor-core forward kernel (Auto takes it) and the Hopper
/// kernel's masked instance; the other GPU methods refuse it, typed, and so does f32 (no
/// tensor-core path) under Auto.
#[test]
fn windows_run_on_tensor_cores_and_are_refused_elsewhere() {
    let l = Layout::bshd(1, 64, 2, 64);
    let window = flashattn::Window { left: Some(8), right: None };
    for method in Method::ALL {
        let opts = AttentionOptions { method, window, ..Default::default() };
        let r = plan(&DeviceProps::h200(), DType::BF16, &problem(l, l, &opts), &opts);
        match method {
            // (64 query rows: Auto keeps the mma.sync kernel, below the Hopper kernel's 128.)
            Method::Auto | Method::FlashTensorCore => {
                assert_eq!(r.map(|p| p.method).ok(), Some(Method::FlashTensorCore), "{method}")
            }
            Method::FlashHopper => assert!(r.unwrap().kernel().ends_with("_win"), "{method}"),
            _ => assert!(
                matches!(r, Err(InvalidInput::Unsupported { reason: Reason::Window, .. })),
                "{method}: {r:?}"
            ),
        }
    }
    let opts = AttentionOptions { window, ..Default::default() };
    let r = plan(&DeviceProps::h200(), DType::F32, &problem(l, l, &opts), &opts);
    assert!(matches!(r, Err(InvalidInput::Unsupported { reason: Reason::Window, .. })), "{r:?}");
    // Decoding with a window splits by the window's keys, not the whole cache's.
    let (q1, k) = (Layout::bshd(1, 1, 8, 128), Layout::bshd(1, 65_536, 8, 128));
    let w = AttentionOptions {
        window: flashattn::Window { left: Some(1024), right: Some(0) },
        ..Default::default()
    };
    let windowed = plan(&DeviceProps::h200(), DType::BF16, &problem(q1, k, &w), &w).unwrap();
    let full =
        plan(&DeviceProps::h200(), DType::BF16, &problem(q1, k, &Default::default()), &Default::default())
            .unwrap();
    assert!(windowed.splits < full.splits, "{windowed} / {full}");
    assert!(windowed.splits * 2 * 64 <= 1025 + 2 * 64, "{windowed}");
}

/// The backward's plan: three kernels (preprocessing, main, dQ conversion) with the instance's
/// tiles and its scratch; every refusal a typed reason; kernels with nothing to do are not
/// launched.
#[test]
fn backward_plans_and_refusals() {
    use flashattn::kernels::config::{BWD_CONFIGS, bwd_default};
    use flashattn::plan_backward;
    for props in devices() {
        for d in [8, 32, 40, 64, 96, 128] {
            let (lq, lk) = (Layout::bshd(2, 300, 8, d), Layout::bshd(2, 500, 2, d));
            let opts = AttentionOptions { causal: true, ..Default::default() };
            let p = problem(lq, lk, &opts);
            let layouts = [("d_o", &lq), ("dq", &lq), ("dk", &lk), ("dv", &lk)];
            let plan = plan_backward(&props, DType::BF16, &p, &opts, layouts).unwrap();
            let c = BWD_CONFIGS[bwd_default(d as u32).unwrap()];
            assert_eq!(plan.launches.len(), 3, "{plan}");
            assert_eq!(plan.launches[0].grid, (300u32.div_ceil(64), 8, 2));
            // (Causal, but 2 × 2 (K/V head, sequence) pairs, at most 16: head-major.)
            assert_eq!(plan.launches[1].grid, (500u32.div_ceil(c.block_n()), 2, 2));
            // (1024 bytes of alignment slack where the kernels run `wgmma`: sm_90a.)
            let wgmma = props.compute_capability == (9, 0);
            assert_eq!(
                (plan.launches[1].threads, plan.launches[1].shared_bytes),
                (c.threads(), c.shared_bytes(wgmma))
            );
            assert_eq!(plan.launches[0].shared_bytes, c.prep_shared_bytes(wgmma));
            assert_eq!(plan.scratch_bytes, 4 * (2 * 8 * 300) * (d as u64 + 4), "{plan}");
            assert!(
                matches!(&plan.launches[2].kind, LaunchKind::Kernel(k) if k.starts_with("flash_bwd_dq_bf16"))
            );
        }
    }
    let h200 = DeviceProps::h200();
    let l = Layout::bshd(1, 64, 2, 64);
    let layouts = [("d_o", &l), ("dq", &l), ("dk", &l), ("dv", &l)];
    let refused = |dtype, l: Layout, opts: AttentionOptions| {
        let lay = [("d_o", &l), ("dq", &l), ("dk", &l), ("dv", &l)];
        match plan_backward(&h200, dtype, &problem(l, l, &opts), &opts, lay) {
            Err(InvalidInput::Unsupported { reason, .. }) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    };
    assert_eq!(refused(DType::F32, l, Default::default()), Reason::DType { dtype: DType::F32 });
    assert!(matches!(
        refused(DType::BF16, Layout::bshd(1, 64, 2, 252), Default::default()),
        Reason::HeadDim { .. }
    ));
    // Head dims 136–256: the column-group instance (two warpgroups on 64 keys, 128 columns
    // each), on sm_90a only; its shared memory fits no GPU of the sm_80 PTX.
    for d in [136, 200, 256] {
        let l = Layout::bshd(2, 300, 4, d);
        let lay = [("d_o", &l), ("dq", &l), ("dk", &l), ("dv", &l)];
        let opts = AttentionOptions::default();
        let plan = plan_backward(&h200, DType::BF16, &problem(l, l, &opts), &opts, lay).unwrap();
        let c = BWD_CONFIGS[bwd_default(d as u32).unwrap()];
        assert_eq!((c.head_dim, c.col_groups(), c.block_n()), (256, 2, 64));
        assert_eq!(plan.launches[1].grid, (300u32.div_ceil(64), 4, 2));
        assert_eq!((plan.launches[1].threads, plan.launches[1].shared_bytes), (256, c.shared_bytes(true)));
        assert!(
            matches!(&plan.launches[1].kind, LaunchKind::Kernel(k) if *k == "flash_bwd_bf16_d256_w8_b1"),
            "{plan}"
        );
        assert!(plan.why.iter().any(|w| w.starts_with("column groups")), "{plan}");
        assert!(plan.why.iter().any(|w| w.starts_with("Q and dO tiles by TMA")), "{plan}");
        match plan_backward(&DeviceProps::a100(), DType::BF16, &problem(l, l, &opts), &opts, lay) {
            Err(InvalidInput::Unsupported {
                reason: Reason::SharedMemory { .. } | Reason::Target { .. },
                ..
            }) => {}
            other => panic!("d = {d} on an A100: expected a refusal, got {other:?}"),
        }
    }
    for method in [Method::Flash, Method::Standard] {
        assert_eq!(
            refused(DType::BF16, l, AttentionOptions { method, ..Default::default() }),
            Reason::NoBackward
        );
    }
    // A window runs on the window instance, and says so.
    let window =
        AttentionOptions { window: flashattn::Window { left: Some(8), right: None }, ..Default::default() };
    let p = plan_backward(&h200, DType::BF16, &problem(l, l, &window), &window, layouts).unwrap();
    assert!(p.to_string().contains("_win`"), "{p}");
    assert!(p.why.iter().any(|w| w.contains("sliding window")), "{p}");
    assert_eq!(
        refused(DType::BF16, l, AttentionOptions { splits: Some(2), ..Default::default() }),
        Reason::NoSplitKv
    );
    // A misaligned dO (any of the seven tensors) is refused.
    let odd = Layout { seq_stride: 2 * 64 + 4, ..l };
    let lay = [("d_o", &odd), ("dq", &l), ("dk", &l), ("dv", &l)];
    let opts = AttentionOptions::default();
    assert!(matches!(
        plan_backward(&h200, DType::BF16, &problem(l, l, &opts), &opts, lay),
        Err(InvalidInput::Unsupported { reason: Reason::Alignment { tensor: "d_o", .. }, .. })
    ));
    // A tile override other than the instance's is refused.
    let tiles = AttentionOptions { tiles: Tiles { block_m: Some(32), block_n: None }, ..Default::default() };
    assert!(matches!(
        plan_backward(&h200, DType::BF16, &problem(l, l, &tiles), &tiles, layouts),
        Err(InvalidInput::Tiles { .. })
    ));
    // A tile override naming another instance of the head dim takes it (d = 64: 128 keys a
    // block, two warpgroups; the default has 64 and one); one naming no instance is refused.
    let plain = AttentionOptions::default();
    let default = plan_backward(&h200, DType::BF16, &problem(l, l, &plain), &plain, layouts).unwrap();
    assert!(
        matches!(&default.launches[1].kind, LaunchKind::Kernel(k) if k.ends_with("_d64_w4_b3")),
        "{default}"
    );
    // (d = 64 copies its query tiles by cp.async: TMA measured no faster there.)
    assert!(!default.why.iter().any(|w| w.contains("TMA")), "{default}");
    let variant =
        AttentionOptions { tiles: Tiles { block_m: Some(64), block_n: Some(128) }, ..Default::default() };
    let p = plan_backward(&h200, DType::BF16, &problem(l, l, &variant), &variant, layouts).unwrap();
    assert!(matches!(&p.launches[1].kind, LaunchKind::Kernel(k) if k.ends_with("_d64_w8_b1")), "{p}");
    assert_eq!((p.launches[1].threads, p.tiles), (256, Some((64, 128))), "{p}");
    let none =
        AttentionOptions { tiles: Tiles { block_m: Some(64), block_n: Some(32) }, ..Default::default() };
    match plan_backward(&h200, DType::BF16, &problem(l, l, &none), &none, layouts) {
        Err(InvalidInput::Tiles { .. }) => {}
        other => panic!("expected a tile refusal, got {other:?}"),
    }
    // Keys but no queries: only the main kernel (dK = dV = 0); queries but no keys: no main kernel.
    let (q0, k1) = (Layout::bshd(1, 0, 2, 64), Layout::bshd(1, 10, 2, 64));
    let lay = [("d_o", &q0), ("dq", &q0), ("dk", &k1), ("dv", &k1)];
    let p = plan_backward(&h200, DType::BF16, &problem(q0, k1, &opts), &opts, lay).unwrap();
    assert_eq!(p.launches.len(), 1, "{p}");
    assert!(matches!(&p.launches[0].kind, LaunchKind::Kernel(k) if k.starts_with("flash_bwd_bf16")));
    let lay = [("d_o", &k1), ("dq", &k1), ("dk", &q0), ("dv", &q0)];
    let p = plan_backward(&h200, DType::BF16, &problem(k1, q0, &opts), &opts, lay).unwrap();
    assert_eq!(p.launches.len(), 2, "{p}");
}

/// The backward's main kernel runs on a key-major grid in groups of (K/V head, sequence) pairs
/// (x = pair within the group, y = key tile, z = group: each group's first key tiles, the
/// longest walks, start first) with a causal mask and more than 16 pairs — the group the largest
/// divisor of the pairs up to 16 — on the plain and ALiBi instances; on the head-major one (x =
/// key tiles, y = K/V heads, z = sequences) without a causal mask, with 16 pairs or fewer, where
/// no divisor above 1 exists, and always on the window instances (windows, softcaps).
#[test]
fn backward_key_tiles_in_key_major_order_where_walks_differ() {
    use flashattn::{Window, plan_backward};
    let h200 = DeviceProps::h200();
    let main_grid = |batch: usize, kv_heads: usize, opts: &AttentionOptions| {
        let (q, k) = (Layout::bshd(batch, 1000, 4 * kv_heads, 128), Layout::bshd(batch, 1000, kv_heads, 128));
        let layouts = [("d_o", &q), ("dq", &q), ("dk", &k), ("dv", &k)];
        let opts = AttentionOptions {
            alibi_slopes: opts.alibi_slopes.as_ref().map(|_| vec![0.5; 4 * kv_heads]),
            ..opts.clone()
        };
        let p = plan_backward(&h200, DType::BF16, &problem(q, k, &opts), &opts, layouts).unwrap();
        let main = p
            .launches
            .iter()
            .find(|x| matches!(&x.kind, LaunchKind::Kernel(n) if n.starts_with("flash_bwd_bf16_d")))
            .unwrap();
        (main.grid, p.why.iter().any(|w| w.contains("key-major")))
    };
    // 1000 keys in 128-key tiles: 8.
    let causal = AttentionOptions { causal: true, ..Default::default() };
    let alibi = AttentionOptions { alibi_slopes: Some(Vec::new()), ..causal.clone() };
    for opts in [&causal, &alibi] {
        // 48 pairs: three groups of 16; 34: seventeen of 2 (17 is over 16).
        assert_eq!(main_grid(3, 16, opts), ((16, 8, 3), true), "{opts:?}");
        assert_eq!(main_grid(17, 2, opts), ((2, 8, 17), true), "{opts:?}");
        // Head-major: 16 pairs or fewer (one group lost time where walks are long), or a prime
        // count above 16.
        assert_eq!(main_grid(1, 16, opts), ((8, 16, 1), false), "{opts:?}");
        assert_eq!(main_grid(3, 2, opts), ((8, 2, 3), false), "{opts:?}");
        assert_eq!(main_grid(17, 1, opts), ((8, 1, 17), false), "{opts:?}");
    }
    // No causal mask; the window instances (a window, a softcap).
    let window =
        AttentionOptions { window: Window { left: Some(256), right: Some(0) }, ..Default::default() };
    let softcap = AttentionOptions { softcap: Some(30.0), ..causal.clone() };
    // (A causal window without modifiers: the window-only instance on sm_90a, kind 3, which
    // reads its grid head-major as the window instance does.)
    let causal_window = AttentionOptions { window: window.window, ..causal.clone() };
    for opts in [&AttentionOptions::default(), &window, &softcap, &causal_window] {
        assert_eq!(main_grid(3, 16, opts), ((8, 16, 3), false), "{opts:?}");
    }
}

/// On sm_90a the d = 64 window walk's dQ conversion waits per query tile (counters the main
/// kernel's blocks count down) instead of for the whole main grid, where its f32 accumulator
/// is 16 MiB or more: the plan says so and its scratch holds one u32 a (sequence, query head,
/// query tile). Not without a window, not at other head dims (not faster on an H200 at d =
/// 128), not on sm_80 (no programmatic dependent launches there), not for a small accumulator
/// (single-query rows measured slower with them).
#[test]
fn backward_window_walks_convert_per_tile() {
    use flashattn::{Window, plan_backward};
    let plan = |props: &DeviceProps, n: usize, d: usize, opts: &AttentionOptions| {
        let l = Layout::bshd(4, n, 16, d);
        let layouts = [("d_o", &l), ("dq", &l), ("dk", &l), ("dv", &l)];
        let p = plan_backward(props, DType::BF16, &problem(l, l, opts), opts, layouts).unwrap();
        (p.why.iter().any(|w| w.contains("a query tile at a time")), p.scratch_bytes)
    };
    let window = Window { left: Some(256), right: Some(0) };
    let causal = AttentionOptions { causal: true, ..Default::default() };
    let causal_window = AttentionOptions { window, ..causal.clone() };
    let softcap_window = AttentionOptions { softcap: Some(30.0), ..causal_window.clone() };
    let (h200, a100) = (DeviceProps::h200(), DeviceProps::a100());
    // 4 sequences × 16 heads × 64 query tiles of 64 rows: 4096 counters (a 64 MiB accumulator).
    let (on, with) = plan(&h200, 4096, 64, &causal_window);
    let (off, without) = plan(&a100, 4096, 64, &causal_window);
    assert!(on && !off);
    assert_eq!(with - without, 4 * 4096);
    assert!(plan(&h200, 4096, 64, &softcap_window).0);
    // (A padded head dim on the d = 64 instance too.)
    assert!(plan(&h200, 4096, 48, &causal_window).0);
    // At 1024 queries: 16 MiB; at 512, 8 MiB.
    assert!(plan(&h200, 1024, 64, &causal_window).0);
    assert!(!plan(&h200, 512, 64, &causal_window).0);
    // Only the d = 64 window walk (measured): not d = 32, 128 or 256, nor without a window.
    for d in [32, 128, 256] {
        assert!(!plan(&h200, 4096, d, &causal_window).0, "d = {d}");
    }
    assert!(!plan(&h200, 4096, 64, &causal).0);
    assert!(!plan(&h200, 4096, 64, &AttentionOptions::default()).0);
}

/// ALiBi alone (no window, no softcap) runs the backward's ALiBi instance on sm_90a where it
/// computes the window instance's padded head dim (d = 128: the plain instance's walk and
/// staged dQ adds); a window or a softcap beside it, a head dim whose window instance is
/// another's (d = 64), or sm_80 keep the window instance.
#[test]
fn alibi_alone_takes_the_backward_alibi_instance() {
    use flashattn::{Window, plan_backward};
    let main = |props: &DeviceProps, d: usize, opts: &AttentionOptions| {
        let l = Layout::bshd(1, 256, 2, d);
        let layouts = [("d_o", &l), ("dq", &l), ("dk", &l), ("dv", &l)];
        let p = plan_backward(props, DType::BF16, &problem(l, l, opts), opts, layouts).unwrap();
        let name = p
            .launches
            .iter()
            .find_map(|x| match &x.kind {
                LaunchKind::Kernel(k) if k.starts_with("flash_bwd_bf16_d") => Some(k.to_string()),
                _ => None,
            })
            .unwrap();
        (name, p)
    };
    let h200 = DeviceProps::h200();
    let alibi = AttentionOptions { alibi_slopes: Some(vec![0.5, 0.25]), causal: true, ..Default::default() };
    for d in [128, 96, 72] {
        let (name, p) = main(&h200, d, &alibi);
        assert!(name.ends_with("_d128_w8_b1_alibi"), "d = {d}: {p}");
        assert!(p.why.iter().any(|w| w.contains("ALiBi instance")), "{p}");
        // (Its preprocessing is the masked one: it applies ALiBi too.)
        assert!(format!("{:?}", p.launches[0].kind).contains("flash_bwd_prep_bf16_d128_w8_alibi"), "{p}");
    }
    let with_window = AttentionOptions { window: Window { left: Some(64), right: None }, ..alibi.clone() };
    let with_cap = AttentionOptions { softcap: Some(30.0), ..alibi.clone() };
    for opts in [&with_window, &with_cap] {
        assert!(main(&h200, 128, opts).0.ends_with("_d128_w8_b1_win"));
    }
    assert!(main(&h200, 64, &alibi).0.ends_with("_d64_w8_b1_win"));
    assert!(main(&DeviceProps::a100(), 128, &alibi).0.ends_with("_d128_w8_b1_win"));
}

/// Score modifiers run on the tensor-core kernels' masked instances, forward and backward (Auto
/// takes them), and on the Hopper kernel's; the other GPU methods refuse them as
/// `Reason::ScoreMod`, and so does f32 under Auto. Decoding with ALiBi does not pack grouped query heads (the bias depends on the head and
/// the position); with a softcap alone it does.
#[test]
fn score_modifiers_run_on_tensor_cores_and_are_refused_elsewhere() {
    use flashattn::plan_backward;
    let h200 = DeviceProps::h200();
    let l = Layout::bshd(1, 64, 2, 64);
    let layouts = [("d_o", &l), ("dq", &l), ("dk", &l), ("dv", &l)];
    for (opts, what) in [
        (AttentionOptions { softcap: Some(30.0), ..Default::default() }, "softcap 30"),
        (AttentionOptions { alibi_slopes: Some(vec![0.5, 0.25]), ..Default::default() }, "ALiBi"),
    ] {
        for method in Method::ALL {
            let o = AttentionOptions { method, ..opts.clone() };
            let r = plan(&h200, DType::BF16, &problem(l, l, &o), &o);
            match method {
                Method::Auto | Method::FlashTensorCore | Method::FlashHopper => {
                    let p = r.unwrap();
                    let want = if method == Method::FlashHopper { method } else { Method::FlashTensorCore };
                    assert_eq!(p.method, want, "{p}");
                    // (Softcaps on the Hopper kernel: its masked instance without the overlap.)
                    assert!(p.kernel().ends_with("_win") || p.kernel().ends_with("_win_softcap"), "{p}");
                    assert!(p.why.iter().any(|w| w.contains(what)), "{p}");
                }
                _ => assert!(
                    matches!(r, Err(InvalidInput::Unsupported { reason: Reason::ScoreMod, .. })),
                    "{method}: {r:?}"
                ),
            }
        }
        let p = plan_backward(&h200, DType::BF16, &problem(l, l, &opts), &opts, layouts).unwrap();
        assert!(
            p.launches.iter().any(|x| matches!(&x.kind, LaunchKind::Kernel(k) if k.ends_with("_win"))),
            "{p}"
        );
        assert!(p.why.iter().any(|w| w.contains(what)), "{p}");
        let r = plan(&h200, DType::F32, &problem(l, l, &opts), &opts);
        assert!(matches!(r, Err(InvalidInput::Unsupported { reason: Reason::ScoreMod, .. })), "{r:?}");
        // Element-wise rows (d = 60) have no masked instance.
        let odd = Layout::bshd(1, 64, 2, 60);
        let r = plan(&h200, DType::BF16, &problem(odd, odd, &opts), &opts);
        assert!(matches!(r, Err(InvalidInput::Unsupported { reason: Reason::ScoreMod, .. })), "{r:?}");
    }
    // Decoding, 8 query heads over 2 K/V heads: packed with a softcap, not with ALiBi.
    let (q1, kv) = (Layout::bshd(2, 1, 8, 128), Layout::bshd(2, 4096, 2, 128));
    let cap = AttentionOptions { softcap: Some(30.0), ..Default::default() };
    assert!(plan(&h200, DType::BF16, &problem(q1, kv, &cap), &cap).unwrap().gqa_packed);
    let alibi = AttentionOptions { alibi_slopes: Some(vec![0.5; 8]), ..Default::default() };
    assert!(!plan(&h200, DType::BF16, &problem(q1, kv, &alibi), &alibi).unwrap().gqa_packed);
    // A zero slope for every head is no modifier at all.
    let zero = AttentionOptions { alibi_slopes: Some(vec![0.0; 2]), ..Default::default() };
    assert!(!plan(&h200, DType::BF16, &problem(l, l, &zero), &zero).unwrap().kernel().ends_with("_win"));
    // A K/V cache's per-entry lengths: the tensor-core kernel's decode instances read them (Auto
    // takes them for a decode step), the general kernel too (Auto takes it for a 64-token chunk,
    // which the tensor-core kernel refuses); the Hopper kernel, standard attention and the
    // backward refuse them.
    let lb = Layout::bshd(2, 64, 2, 64);
    let q1 = Layout::bshd(2, 1, 2, 64);
    let cache = AttentionOptions { cache_seqlens: Some(vec![3, 64]), ..Default::default() };
    let p = plan(&h200, DType::BF16, &problem(q1, lb, &cache), &cache).unwrap();
    assert!(p.method == Method::FlashTensorCore && p.kernel().contains("_m16_"), "{p}");
    let p = plan(&h200, DType::BF16, &problem(lb, lb, &cache), &cache).unwrap();
    assert_eq!(p.method, Method::Flash, "{p}");
    assert_eq!(p.not_taken[1].reason, Reason::KvCache, "{p}");
    let o = AttentionOptions { method: Method::FlashTensorCore, ..cache.clone() };
    let r = plan(&h200, DType::BF16, &problem(lb, lb, &o), &o);
    assert!(matches!(r, Err(InvalidInput::Unsupported { reason: Reason::KvCache, .. })), "{r:?}");
    let o = AttentionOptions { method: Method::Standard, ..cache.clone() };
    let r = plan(&h200, DType::BF16, &problem(lb, lb, &o), &o);
    assert!(matches!(r, Err(InvalidInput::Unsupported { reason: Reason::KvCache, .. })), "{r:?}");
    let o = AttentionOptions { method: Method::FlashHopper, ..cache.clone() };
    let r = plan(&h200, DType::BF16, &problem(lb, lb, &o), &o);
    assert!(matches!(r, Err(InvalidInput::Unsupported { reason: Reason::NotOnHopper { .. }, .. })), "{r:?}");
    let lay = [("d_o", &lb), ("dq", &lb), ("dk", &lb), ("dv", &lb)];
    let r = plan_backward(&h200, DType::BF16, &problem(lb, lb, &cache), &cache, lay);
    assert!(matches!(r, Err(InvalidInput::Unsupported { reason: Reason::KvCache, .. })), "{r:?}");
    let lens_b = [lb.required_len().unwrap(); 4];
    for bad in [vec![3], vec![3, 65]] {
        let o = AttentionOptions { cache_seqlens: Some(bad.clone()), ..Default::default() };
        assert!(
            matches!(Problem::new(lb, lb, lb, lb, lens_b, &o), Err(InvalidInput::CacheSeqlens { .. })),
            "{bad:?}"
        );
    }
    // A paged cache: the decode instances read it (Auto takes them for a decode step, split-KV
    // included); a 64-token chunk has no GPU path (the general kernel does not read page
    // tables); the Hopper kernel, standard attention and the backward refuse it.
    let pool = Layout::bshd(6, 16, 2, 64);
    let table =
        flashattn::BlockTable { page_size: 16, pages_per_entry: 3, pages: vec![5, 0, 2, 1, 4, 3].into() };
    let paged = AttentionOptions {
        block_table: Some(table),
        cache_seqlens: Some(vec![20, 48]),
        ..Default::default()
    };
    let p = plan(&h200, DType::BF16, &problem(q1, pool, &paged), &paged).unwrap();
    assert!(p.method == Method::FlashTensorCore && p.kernel().contains("_m16_"), "{p}");
    let q64 = Layout::bshd(2, 64, 2, 64);
    let r = plan(&h200, DType::BF16, &problem(q64, pool, &paged), &paged);
    assert!(matches!(r, Err(InvalidInput::Unsupported { reason: Reason::KvCache, .. })), "{r:?}");
    for method in [Method::Flash, Method::Standard, Method::FlashHopper] {
        let o = AttentionOptions { method, ..paged.clone() };
        let r = plan(&h200, DType::BF16, &problem(q1, pool, &o), &o);
        assert!(
            matches!(
                r,
                Err(InvalidInput::Unsupported { reason: Reason::KvCache | Reason::NotOnHopper { .. }, .. })
            ),
            "{method}: {r:?}"
        );
    }
    let lay1 = [("d_o", &q1), ("dq", &q1), ("dk", &pool), ("dv", &pool)];
    let r = plan_backward(&h200, DType::BF16, &problem(q1, pool, &paged), &paged, lay1);
    assert!(matches!(r, Err(InvalidInput::Unsupported { reason: Reason::KvCache, .. })), "{r:?}");
    // Zero slopes everywhere modify nothing: the GPU runs it.
    let zero = AttentionOptions { alibi_slopes: Some(vec![0.0, 0.0]), ..Default::default() };
    assert!(plan(&h200, DType::BF16, &problem(l, l, &zero), &zero).is_ok());
    let lens = [l.required_len().unwrap(); 4];
    for bad in [Some(0.0), Some(-1.0), Some(f32::NAN), Some(f32::INFINITY)] {
        let o = AttentionOptions { softcap: bad, ..Default::default() };
        assert!(matches!(Problem::new(l, l, l, l, lens, &o), Err(InvalidInput::Softcap { .. })), "{bad:?}");
    }
    for bad in [vec![0.5], vec![0.5, f32::NAN], vec![0.5, -0.1], vec![0.1, 0.2, 0.3]] {
        let o = AttentionOptions { alibi_slopes: Some(bad.clone()), ..Default::default() };
        assert!(
            matches!(Problem::new(l, l, l, l, lens, &o), Err(InvalidInput::AlibiSlopes { heads: 2, .. })),
            "{bad:?}"
        );
    }
}

#[test]
fn the_hopper_kernel_plans_on_sm90_only_and_says_what_it_refuses() {
    use flashattn::kernels::config::WGMMA_CONFIGS;
    let opts = AttentionOptions { method: Method::FlashHopper, ..Default::default() };
    for d in [8, 40, 64, 96, 128, 136, 160, 192, 200, 224, 256] {
        for layout in [Layout::bshd(2, 1000, 4, d), Layout::bhsd(2, 1000, 4, d)] {
            let p = plan(&DeviceProps::h200(), DType::BF16, &problem(layout, layout, &opts), &opts).unwrap();
            assert_eq!(p.method, Method::FlashHopper);
            let c = WGMMA_CONFIGS.iter().find(|c| c.runs(d as u32) && c.window == 0).unwrap();
            assert!(p.kernel().starts_with("flash_fwd_wgmma_bf16_d"), "{p}");
            assert_eq!(p.main_launch().unwrap().grid, (1000u32.div_ceil(c.block_m), 4, 2));
            assert_eq!(p.main_launch().unwrap().threads, 384);
            assert_eq!(p.launches.len(), 1, "no split-KV, no combine: {p}");
        }
    }
    let l = Layout::bshd(2, 1000, 4, 128);
    let refused =
        |props: &DeviceProps, dtype, p: &Problem, o: &AttentionOptions| match plan(props, dtype, p, o) {
            Err(InvalidInput::Unsupported { reason, .. }) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        };
    // Not on sm_80's PTX.
    assert!(matches!(
        refused(&DeviceProps::a100(), DType::BF16, &problem(l, l, &opts), &opts),
        Reason::Target { .. }
    ));
    // f32, head dims that are not multiples of 8, split-KV overrides, unaligned strides.
    assert!(matches!(
        refused(&DeviceProps::h200(), DType::F32, &problem(l, l, &opts), &opts),
        Reason::DType { .. }
    ));
    for d in [59, 60, 252] {
        let l = Layout::bshd(1, 100, 2, d);
        assert!(matches!(
            refused(&DeviceProps::h200(), DType::F16, &problem(l, l, &opts), &opts),
            Reason::HeadDim { .. } | Reason::Alignment { .. }
        ));
    }
    // A window or score modifiers: the masked instance.
    let windowed = AttentionOptions {
        window: flashattn::Window { left: Some(16), right: Some(0) },
        causal: true,
        ..opts.clone()
    };
    let p = plan(&DeviceProps::h200(), DType::F16, &problem(l, l, &windowed), &windowed).unwrap();
    assert!(p.kernel().ends_with("_win") && p.why.iter().any(|w| w.contains("sliding window")), "{p}");
    let capped = AttentionOptions { softcap: Some(30.0), ..opts.clone() };
    let p = plan(&DeviceProps::h200(), DType::F16, &problem(l, l, &capped), &capped).unwrap();
    assert!(p.kernel().ends_with("_win_softcap") && p.why.iter().any(|w| w.contains("softcap 30")), "{p}");
    let alibi = AttentionOptions { alibi_slopes: Some(vec![0.5; 4]), ..opts.clone() };
    let p = plan(&DeviceProps::h200(), DType::F16, &problem(l, l, &alibi), &alibi).unwrap();
    assert!(p.kernel().ends_with("_win"), "ALiBi without a softcap keeps the overlapped instance: {p}");
    let split = AttentionOptions { splits: Some(4), ..opts.clone() };
    assert!(matches!(
        refused(&DeviceProps::h200(), DType::F16, &problem(l, l, &split), &split),
        Reason::NoSplitKv
    ));
    let mut gapped = Layout::bshd(1, 100, 2, 64);
    gapped.seq_stride = 132;
    assert!(matches!(
        refused(&DeviceProps::h200(), DType::F16, &problem(gapped, gapped, &opts), &opts),
        Reason::Alignment { .. }
    ));
    let tiles = AttentionOptions { tiles: Tiles { block_m: Some(64), block_n: None }, ..opts.clone() };
    assert!(matches!(
        plan(&DeviceProps::h200(), DType::F16, &problem(l, l, &tiles), &tiles),
        Err(InvalidInput::Tiles { .. })
    ));
}

#[test]
fn training_forwards_keep_residuals_on_the_hopper_kernel_and_backwards_read_them() {
    use flashattn::{Window, plan_backward, plan_backward_from_residuals, plan_for_backward};
    let auto = AttentionOptions::default();
    let backward = |props: &DeviceProps, p: &Problem, o: &AttentionOptions, from_residuals: bool| {
        let layouts = [("d_o", p.o()), ("dq", p.q()), ("dk", p.k()), ("dv", p.v())];
        let f = if from_residuals { plan_backward_from_residuals } else { plan_backward };
        f(props, DType::BF16, p, o, layouts).unwrap()
    };
    // Plain problems on sm_90 at head dims 40–256: the training instance, its residuals read by
    // the residual preprocessing kernel; the query rows and the grid are the inference plan's.
    for (d, causal) in
        [(40, false), (64, true), (96, false), (128, true), (160, false), (200, true), (256, false)]
    {
        let opts = AttentionOptions { causal, ..auto.clone() };
        let l = Layout::bshd(2, 1000, 4, d);
        let p = problem(l, l, &opts);
        let (fwd, inference) = (
            plan_for_backward(&DeviceProps::h200(), DType::BF16, &p, &opts).unwrap(),
            plan(&DeviceProps::h200(), DType::BF16, &p, &opts).unwrap(),
        );
        assert!(fwd.residuals && !inference.residuals, "{fwd}");
        assert!(fwd.kernel().ends_with("_train"), "{fwd}");
        assert_eq!(fwd.main_launch().unwrap().grid, inference.main_launch().unwrap().grid);
        // (The same query rows; d = 193…256 infer in 80-key tiles and train in 64-key ones.)
        assert_eq!(fwd.tiles.map(|t| t.0), inference.tiles.map(|t| t.0));
        let bwd = backward(&DeviceProps::h200(), &p, &opts, true);
        assert!(bwd.residuals && bwd.kernel().starts_with("flash_bwd_prep_res_bf16"), "{bwd}");
        let lse = backward(&DeviceProps::h200(), &p, &opts, false);
        assert!(!lse.residuals && lse.kernel().starts_with("flash_bwd_prep_bf16"), "{lse}");
        assert_eq!(bwd.launches.len(), lse.launches.len());
    }
    // Masked problems on the Hopper kernel's masked instances (windows, softcaps, ALiBi): their
    // training instances, read by the window instance's residual preprocessing kernel.
    let window = AttentionOptions { window: Window { left: Some(512), right: None }, ..auto.clone() };
    let softcap = AttentionOptions { softcap: Some(30.0), causal: true, ..auto.clone() };
    let alibi = AttentionOptions { alibi_slopes: Some(vec![0.5, 0.25, 0.125, 0.0625]), ..auto.clone() };
    // (ALiBi alone at d = 128 on the backward's ALiBi instance, a window alone at d = 128 on its
    // window-only instance, whose residual preprocessing is the window instance's code; a window
    // at d = 64, which has no window-only instance, on the window instance.)
    let window_softcap = AttentionOptions { softcap: Some(30.0), ..window.clone() };
    for (opts, d, suffix, bwd_suffix) in [
        (window.clone(), 128, "_win_train", "_winonly"),
        (window.clone(), 64, "_win_train", "_win"),
        (window_softcap, 128, "_win_softcap_train", "_win"),
        (softcap, 64, "_win_softcap_train", "_win"),
        (alibi, 128, "_win_train", "_alibi"),
    ] {
        let l = Layout::bshd(2, 2000, 4, d);
        let p = problem(l, l, &opts);
        let (fwd, inference) = (
            plan_for_backward(&DeviceProps::h200(), DType::BF16, &p, &opts).unwrap(),
            plan(&DeviceProps::h200(), DType::BF16, &p, &opts).unwrap(),
        );
        assert!(fwd.residuals && fwd.kernel().ends_with(suffix), "{fwd}");
        assert_eq!(format!("{}_train", inference.kernel()), fwd.kernel());
        assert_eq!(fwd.main_launch().unwrap().grid, inference.main_launch().unwrap().grid);
        let bwd = backward(&DeviceProps::h200(), &p, &opts, true);
        assert!(bwd.residuals && bwd.kernel().starts_with("flash_bwd_prep_res_bf16"), "{bwd}");
        assert!(bwd.kernel().ends_with(bwd_suffix), "{bwd}");
    }
    // Head dims up to 32: Auto's inference forward stays on mma.sync, its training forward takes
    // the Hopper kernel padded to 64 columns (plain and masked), which keeps the residuals.
    for (d, opts) in [
        (32, auto.clone()),
        (16, AttentionOptions { window: Window { left: Some(512), right: None }, ..auto.clone() }),
    ] {
        let l = Layout::bshd(2, 1000, 4, d);
        let p = problem(l, l, &opts);
        let inference = plan(&DeviceProps::h200(), DType::BF16, &p, &opts).unwrap();
        assert_eq!(inference.method, Method::FlashTensorCore, "{inference}");
        let fwd = plan_for_backward(&DeviceProps::h200(), DType::BF16, &p, &opts).unwrap();
        assert!(fwd.residuals && fwd.kernel().starts_with("flash_fwd_wgmma_bf16_d64_"), "{fwd}");
        assert!(fwd.why[0].starts_with(&format!("training forward at d = {d} ≤ 32")), "{fwd}");
        let bwd = backward(&DeviceProps::h200(), &p, &opts, true);
        assert!(bwd.residuals && bwd.kernel().starts_with("flash_bwd_prep_res_bf16_d32"), "{bwd}");
    }
    // No residuals (and the plan says so): sm_80, d = 32 on the mma.sync kernel by name, short
    // sequences; their backward (`Device::attention_backward_saved` plans it with
    // `plan_backward`, the forward having kept none) makes the pass over the keys.
    let mma = AttentionOptions { method: Method::FlashTensorCore, ..auto.clone() };
    let cases = [
        (DeviceProps::a100(), Layout::bshd(2, 1000, 4, 128), auto.clone()),
        (DeviceProps::h200(), Layout::bshd(2, 1000, 4, 32), mma),
        (DeviceProps::h200(), Layout::bshd(2, 64, 4, 128), auto.clone()),
    ];
    for (props, l, opts) in cases {
        let p = problem(l, l, &opts);
        let fwd = plan_for_backward(&props, DType::BF16, &p, &opts).unwrap();
        assert!(!fwd.residuals && fwd.why.iter().any(|w| w.contains("keeps no residuals")), "{fwd}");
        let bwd = backward(&props, &p, &opts, false);
        assert!(!bwd.residuals && !bwd.kernel().contains("prep_res"), "{bwd}");
    }
}

/// The Hopper forward's persistent grid: taken for problems whose query tiles all cost the same
/// (no causal mask, window, modifier or variable lengths) with more tiles than SMs, as one block
/// an SM; the plan says so. Elsewhere, and for the training forward (its instances run one tile
/// a block), the grid is the problem's tiles.
#[test]
fn hopper_takes_a_persistent_grid_where_tiles_cost_the_same() {
    use flashattn::plan_for_backward;
    let h200 = DeviceProps::h200();
    let sm = h200.sm_count;
    let opts = AttentionOptions::default();
    let persistent = |p: &flashattn::Plan| {
        p.kernel().ends_with("_persistent") && p.why.iter().any(|w| w.starts_with("persistent grid"))
    };
    for d in [64, 128, 96, 160, 192] {
        // 8 query tiles × 16 heads × 16 sequences.
        let l = Layout::bshd(16, 1024, 16, d);
        let p = plan(&h200, DType::BF16, &problem(l, l, &opts), &opts).unwrap();
        assert!(p.method == Method::FlashHopper && persistent(&p), "d{d}: {p}");
        assert_eq!(p.main_launch().unwrap().grid, (sm, 1, 1), "{p}");
        // The training forward: the training instance on the problem's own grid.
        let t = plan_for_backward(&h200, DType::BF16, &problem(l, l, &opts), &opts).unwrap();
        assert!(t.residuals && t.kernel().ends_with("_train") && !persistent(&t), "d{d}: {t}");
        assert_eq!(t.main_launch().unwrap().grid, (8, 16, 16), "{t}");
        // Causal: the dynamic instance (tiles from a counter) at d ≤ 128, one tile a block above.
        let c = AttentionOptions { causal: true, ..Default::default() };
        let p = plan(&h200, DType::BF16, &problem(l, l, &c), &c).unwrap();
        if d <= 128 {
            assert!(
                p.method == Method::FlashHopper && p.kernel().ends_with("_persistent_causal"),
                "d{d}: {p}"
            );
            assert_eq!(p.main_launch().unwrap().grid, (sm, 1, 1), "{p}");
        } else {
            assert!(p.method == Method::FlashHopper && !persistent(&p), "d{d}: {p}");
            assert_eq!(p.main_launch().unwrap().grid, (8, 16, 16), "{p}");
        }
        // A window or a modifier: the masked instances.
        let w = AttentionOptions {
            window: flashattn::Window { left: Some(64), right: None },
            ..Default::default()
        };
        let p = plan(&h200, DType::BF16, &problem(l, l, &w), &w).unwrap();
        assert!(p.method == Method::FlashHopper && !persistent(&p), "d{d}: {p}");
    }
    // No more tiles than SMs (8 × 16 = 128 ≤ 132): one tile a block.
    let l = Layout::bshd(1, 1024, 16, 128);
    let p = plan(&h200, DType::BF16, &problem(l, l, &opts), &opts).unwrap();
    assert!(p.method == Method::FlashHopper && !persistent(&p), "{p}");
    // One more than SMs: persistent.
    let l = Layout::bshd(1, 128, sm as usize + 1, 128);
    let p = plan(&h200, DType::BF16, &problem(l, l, &opts), &opts).unwrap();
    assert!(persistent(&p), "{p}");
    // d = 256 has no persistent instance (its output tile would not fit beside the rest; one
    // staging its output in the Q tile ran slower, NOTES v34c).
    let l = Layout::bshd(16, 1024, 16, 256);
    let p = plan(&h200, DType::BF16, &problem(l, l, &opts), &opts).unwrap();
    assert!(p.method == Method::FlashHopper && !persistent(&p), "{p}");
    // Variable lengths: one tile a block.
    let lens = vec![1024; 16];
    let vl = flashattn::VarLen::from_lengths(&lens, &lens).unwrap();
    let vopts = AttentionOptions { varlen: Some(vl), ..Default::default() };
    let pl = Layout::packed(16 * 1024, 16, 128);
    let p = plan(&h200, DType::BF16, &problem(pl, pl, &vopts), &vopts).unwrap();
    assert!(p.method == Method::FlashHopper && !persistent(&p), "{p}");
}

/// A tile override picks among the Hopper instances of a kind: at d ≤ 64 the 192-row ones
/// (three consumer warpgroups), one tile a block or persistent as the default would be; a
/// row count nothing instantiates is refused with the instances that exist.
#[test]
fn hopper_tile_override_picks_the_192_row_instances() {
    let h200 = DeviceProps::h200();
    let rows = |m| AttentionOptions {
        method: Method::FlashHopper,
        tiles: flashattn::Tiles { block_m: Some(m), block_n: None },
        ..Default::default()
    };
    let causal = |m| AttentionOptions { causal: true, ..rows(m) };
    // (16 sequences × 16 heads × 6 tiles of 192 rows: more tiles than SMs.)
    let big = Layout::bshd(16, 1024, 16, 64);
    let small = Layout::bshd(1, 1024, 2, 64);
    for (l, opts, want) in [
        (small, rows(192), "flash_fwd_wgmma_bf16_d64_m192_n128_s2"),
        (small, causal(192), "flash_fwd_wgmma_bf16_d64_m192_n128_s2"),
        (big, rows(192), "flash_fwd_wgmma_bf16_d64_m192_n128_s2_persistent"),
        (big, causal(192), "flash_fwd_wgmma_bf16_d64_m192_n128_s2_persistent_causal"),
        (big, rows(128), "flash_fwd_wgmma_bf16_d64_m128_n128_s2_persistent"),
    ] {
        let p = plan(&h200, DType::BF16, &problem(l, l, &opts), &opts).unwrap();
        assert_eq!(p.kernel(), want, "{p}");
        assert_eq!(p.main_launch().unwrap().threads, if want.contains("m192") { 512 } else { 384 }, "{p}");
        if !want.ends_with("_s2") {
            assert_eq!(p.main_launch().unwrap().grid, (h200.sm_count, 1, 1), "{p}");
        } else {
            assert_eq!(p.main_launch().unwrap().grid.0, 1024u32.div_ceil(192), "{p}");
        }
    }
    // Without an override: 192 rows from 2048 queries a sequence (d ≤ 64, plain instances).
    let auto = |causal| AttentionOptions { causal, ..Default::default() };
    for (l, opts, want) in [
        (Layout::bshd(4, 4096, 32, 64), auto(false), "flash_fwd_wgmma_bf16_d64_m192_n128_s2_persistent"),
        (
            Layout::bshd(4, 4096, 32, 64),
            auto(true),
            "flash_fwd_wgmma_bf16_d64_m192_n128_s2_persistent_causal",
        ),
        (Layout::bshd(1, 2048, 2, 48), auto(false), "flash_fwd_wgmma_bf16_d64_m192_n128_s2"),
        (Layout::bshd(16, 1024, 32, 64), auto(false), "flash_fwd_wgmma_bf16_d64_m128_n128_s2_persistent"),
        (Layout::bshd(1, 2047, 2, 64), auto(true), "flash_fwd_wgmma_bf16_d64_m128_n128_s2"),
        (Layout::bshd(4, 4096, 32, 128), auto(false), "flash_fwd_wgmma_bf16_d128_m128_n128_s2_persistent"),
    ] {
        let p = plan(&h200, DType::BF16, &problem(l, l, &opts), &opts).unwrap();
        assert_eq!(p.kernel(), want, "{p}");
    }
    // A window: the masked instance (128 rows); the training forward: its own instance (128).
    let w = AttentionOptions { window: flashattn::Window { left: Some(256), right: None }, ..auto(true) };
    let l = Layout::bshd(4, 4096, 32, 64);
    let p = plan(&h200, DType::BF16, &problem(l, l, &w), &w).unwrap();
    assert_eq!(p.kernel(), "flash_fwd_wgmma_bf16_d64_m128_n128_s2_win", "{p}");
    let t =
        flashattn::plan_for_backward(&h200, DType::BF16, &problem(l, l, &auto(false)), &auto(false)).unwrap();
    assert_eq!(t.kernel(), "flash_fwd_wgmma_bf16_d64_m128_n128_s2_train", "{t}");
    // A variable-length batch keeps 128 rows without an override (long sequences included).
    let lens = vec![4096; 4];
    let vl = flashattn::VarLen::from_lengths(&lens, &lens).unwrap();
    let vopts = AttentionOptions { varlen: Some(vl), ..Default::default() };
    let pl = Layout::packed(4 * 4096, 32, 64);
    let p = plan(&h200, DType::BF16, &problem(pl, pl, &vopts), &vopts).unwrap();
    assert_eq!(p.kernel(), "flash_fwd_wgmma_bf16_d64_m128_n128_s2", "{p}");
    // d = 128 has no 192-row instance.
    let l = Layout::bshd(1, 1024, 2, 128);
    let err = plan(&h200, DType::BF16, &problem(l, l, &rows(192)), &rows(192)).unwrap_err();
    assert!(err.to_string().contains("128"), "{err}");
}

/// At d = 65…128 a `128 × 176` override picks the 176-key instance (one query tile a block,
/// even where the default would be persistent: no persistent form fits), at d = 129…192 a
/// `128 × 112` one the 112-key instance (Auto's from `WIDE_KEYS_192_FROM` queries); d = 193…256 infer in 80-key tiles by default (64 by
/// override) and train in 64-key ones; d = 64 has no 176-key instance and refuses it with the
/// tiles that exist.
#[test]
fn hopper_tile_override_picks_the_176_key_instance() {
    let h200 = DeviceProps::h200();
    let keys = |n, causal| AttentionOptions {
        method: Method::FlashHopper,
        causal,
        tiles: flashattn::Tiles { block_m: Some(128), block_n: Some(n) },
        ..Default::default()
    };
    for (l, opts) in [
        (Layout::bshd(4, 4096, 16, 128), keys(176, false)),
        (Layout::bshd(4, 4096, 16, 128), keys(176, true)),
        (Layout::bshd(1, 1000, 2, 96), keys(176, false)),
    ] {
        let p = plan(&h200, DType::BF16, &problem(l, l, &opts), &opts).unwrap();
        assert_eq!(p.kernel(), "flash_fwd_wgmma_bf16_d128_m128_n176_s2", "{p}");
        assert_eq!(p.tiles, Some((128, 176)), "{p}");
        assert_eq!(p.main_launch().unwrap().grid.0, (l.seqlen as u32).div_ceil(128), "{p}");
    }
    // The 128 × 128 override keeps the default (persistent) instance.
    let l = Layout::bshd(4, 4096, 16, 128);
    let p = plan(&h200, DType::BF16, &problem(l, l, &keys(128, false)), &keys(128, false)).unwrap();
    assert_eq!(p.kernel(), "flash_fwd_wgmma_bf16_d128_m128_n128_s2_persistent", "{p}");
    let l = Layout::bshd(1, 1024, 2, 64);
    let err = plan(&h200, DType::BF16, &problem(l, l, &keys(176, false)), &keys(176, false)).unwrap_err();
    assert!(err.to_string().contains("176"), "{err}");
    // d = 193…256: 80-key tiles by default, 64 by override; d = 192's 112-key instance.
    let l = Layout::bshd(4, 4096, 8, 224);
    let p = plan(&h200, DType::BF16, &problem(l, l, &keys(64, true)), &keys(64, true)).unwrap();
    assert_eq!(p.kernel(), "flash_fwd_wgmma_bf16_d256_m128_n64_s2", "{p}");
    let auto = AttentionOptions::default();
    let p = plan(&h200, DType::BF16, &problem(l, l, &auto), &auto).unwrap();
    assert_eq!(p.kernel(), "flash_fwd_wgmma_bf16_d256_m128_n80_s2", "{p}");
    // Its training forward: the 64-key training instance (same rows, same grid), residuals kept.
    let t = flashattn::plan_for_backward(&h200, DType::BF16, &problem(l, l, &auto), &auto).unwrap();
    assert_eq!(t.kernel(), "flash_fwd_wgmma_bf16_d256_m128_n64_s2_train", "{t}");
    assert!(t.residuals && t.tiles == Some((128, 64)), "{t}");
    assert_eq!(t.main_launch().unwrap().grid, p.main_launch().unwrap().grid, "{t}");
    let l = Layout::bshd(4, 4096, 8, 160);
    let p = plan(&h200, DType::BF16, &problem(l, l, &keys(112, false)), &keys(112, false)).unwrap();
    assert_eq!(p.kernel(), "flash_fwd_wgmma_bf16_d192_m128_n112_s2", "{p}");
    // Without an override d = 129…192 take 112-key tiles from 4096 queries a sequence without a
    // mask and from 2048 with a causal one (`WIDE_KEYS_192_FROM`); below, the 64-key instance,
    // persistent where there are more query tiles than SMs; never for a window or varlen.
    let causal = AttentionOptions { causal: true, ..Default::default() };
    for (l, opts, want) in [
        (Layout::bshd(4, 4096, 10, 192), &auto, "flash_fwd_wgmma_bf16_d192_m128_n112_s2"),
        (Layout::bshd(8, 2048, 10, 192), &auto, "flash_fwd_wgmma_bf16_d192_m128_n64_s2_persistent"),
        (Layout::bshd(8, 2048, 12, 160), &causal, "flash_fwd_wgmma_bf16_d192_m128_n112_s2"),
        (Layout::bshd(16, 1024, 10, 192), &causal, "flash_fwd_wgmma_bf16_d192_m128_n64_s2"),
    ] {
        let p = plan(&h200, DType::BF16, &problem(l, l, opts), opts).unwrap();
        assert_eq!(p.kernel(), want, "{p}");
        if want.ends_with("n112_s2") {
            assert!(p.why.iter().any(|w| w.contains("112-key tiles")), "{p}");
        }
    }
    let w = AttentionOptions { window: flashattn::Window { left: Some(256), right: None }, ..causal.clone() };
    let l = Layout::bshd(4, 4096, 10, 192);
    let p = plan(&h200, DType::BF16, &problem(l, l, &w), &w).unwrap();
    assert_eq!(p.kernel(), "flash_fwd_wgmma_bf16_d192_m128_n64_s2_win", "{p}");
    let t = flashattn::plan_for_backward(&h200, DType::BF16, &problem(l, l, &auto), &auto).unwrap();
    assert_eq!(t.kernel(), "flash_fwd_wgmma_bf16_d192_m128_n64_s2_train", "{t}");
    assert!(t.residuals, "{t}");
}

/// Auto at d ≤ 32 on sm_90: the Hopper kernel padded to 64 columns (its 192-row tiles) from
/// 2048 queries a sequence without a causal mask and 4096 with one, in fixed-length batches
/// without a window; the `mma.sync` d = 32 instance otherwise (`SMALL_HEAD_DIMS_HOPPER_FROM`).
#[test]
fn small_head_dims_take_the_hopper_kernel_in_long_sequences() {
    let h200 = DeviceProps::h200();
    let auto = AttentionOptions::default();
    let causal = AttentionOptions { causal: true, ..Default::default() };
    let window =
        AttentionOptions { window: flashattn::Window { left: Some(256), right: None }, ..causal.clone() };
    for (l, opts, hopper) in [
        (Layout::bshd(4, 4096, 64, 32), &auto, true),
        (Layout::bshd(8, 2048, 64, 24), &auto, true),
        (Layout::bshd(16, 1024, 64, 32), &auto, false),
        (Layout::bshd(4, 4096, 64, 32), &causal, true),
        (Layout::bshd(8, 2048, 64, 32), &causal, false),
        (Layout::bshd(4, 4096, 64, 32), &window, false),
    ] {
        let p = plan(&h200, DType::BF16, &problem(l, l, opts), opts).unwrap();
        if hopper {
            assert!(p.kernel().starts_with("flash_fwd_wgmma_bf16_d64_m192_n128_s2_persistent"), "{p}");
        } else {
            assert_eq!(p.method, Method::FlashTensorCore, "{p}");
        }
    }
    let lens = vec![4096; 4];
    let vl = flashattn::VarLen::from_lengths(&lens, &lens).unwrap();
    let vopts = AttentionOptions { varlen: Some(vl), ..Default::default() };
    let pl = Layout::packed(4 * 4096, 64, 32);
    let p = plan(&h200, DType::BF16, &problem(pl, pl, &vopts), &vopts).unwrap();
    assert_eq!(p.method, Method::FlashTensorCore, "{p}");
}
