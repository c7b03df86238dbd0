//! A paged K/V cache (`AttentionOptions::block_table`) on the CPU path: the same problem as a
//! contiguous cache, scattered into shuffled pages of a pool, gives bit-identical outputs and
//! gradients, and meets the oracle (which reads through the table too); bad tables are typed
//! errors.

use flashattn::cpu::{self, Gradients, HostTensor, HostTensorMut};
use flashattn::{AttentionOptions, BlockTable, Element, InvalidInput, Layout, Problem, bf16, f16};
use flashattn_testkit::{Case, Spec};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::run_on;

const PAGE: usize = 16;

/// A contiguous-cache case and the same data in a paged pool: (contiguous, paged).
fn cases<T: Element>(nq: usize, causal: bool) -> (Case<T>, Case<T>) {
    let (b, cap, hq, hk, d) = (3, 48, 4, 2, 16);
    let mut s = Spec::batch(b, nq, cap, hq, d);
    s.heads_k = hk;
    s.causal = causal;
    s.cache_seqlens = Some(vec![20, 0, 48]);
    let contiguous = Case::<T>::random(&mut StdRng::seed_from_u64(11 + nq as u64), &s);
    // 3 entries × 3 page slots over a pool of 11 pages, shuffled; pages 0 and 5 unused.
    let table =
        BlockTable { page_size: PAGE, pages_per_entry: 3, pages: vec![7, 2, 9, 1, 4, 10, 3, 8, 6].into() };
    let paged = contiguous.paged(table, 11).expect("a valid paged problem");
    (contiguous, paged)
}

fn forward_and_backward<T: Element>() {
    for nq in [1, 5] {
        for causal in [false, true] {
            let (c, pg) = cases::<T>(nq, causal);
            run_on(&pg).unwrap_or_else(|e| panic!("{e}"));
            let (oc, lc) = c.run_cpu().unwrap();
            let (op, lp) = pg.run_cpu().unwrap();
            let bits = |x: &[T]| x.iter().map(|v| v.to_f32().to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&oc), bits(&op), "paged output differs (nq {nq}, causal {causal})");
            assert_eq!(
                lc.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                lp.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
            // The backward: dQ equal, dK/dV equal once gathered from the pages.
            let d_o: Vec<T> =
                (0..oc.len()).map(|i| T::from_f32(((i * 37 % 101) as f32 - 50.0) / 50.0)).collect();
            let grads = |case: &Case<T>, out: &[T], lse: &[f32]| {
                crate::backward::backward_of(case, out, lse, &d_o).unwrap()
            };
            let (dqc, dkc, dvc) = grads(&c, &oc, &lc);
            let (dqp, dkp, dvp) = grads(&pg, &op, &lp);
            assert_eq!(bits(&dqc), bits(&dqp));
            let (pc, pp) = (&c.problem, &pg.problem);
            for e in 0..3 {
                for j in 0..pc.sequence(e).len_k {
                    for h in 0..2 {
                        let (a, b) = (pc.kv_offset(false, e, j, h), pp.kv_offset(false, e, j, h));
                        assert_eq!(bits(&dkc[a..a + 16]), bits(&dkp[b..b + 16]), "dk entry {e} token {j}");
                        let (a, b) = (pc.kv_offset(true, e, j, h), pp.kv_offset(true, e, j, h));
                        assert_eq!(bits(&dvc[a..a + 16]), bits(&dvp[b..b + 16]), "dv entry {e} token {j}");
                    }
                }
            }
        }
    }
}

#[test]
fn paged_equals_contiguous_f32() {
    forward_and_backward::<f32>();
}

#[test]
fn paged_equals_contiguous_half() {
    forward_and_backward::<f16>();
    forward_and_backward::<bf16>();
}

/// Bad tables: a page size that is not a power of two ≥ 16 or not the pools', a table of the
/// wrong length, a slot past the pool, varlen; a page shared by two entries is refused by the
/// backward (its gradients would need summing) but not by the forward.
#[test]
fn bad_block_tables_are_typed_errors() {
    let (q, pool) = (Layout::bshd(2, 1, 2, 16), Layout::bshd(4, 16, 2, 16));
    let lens = [
        q.required_len().unwrap(),
        pool.required_len().unwrap(),
        pool.required_len().unwrap(),
        q.required_len().unwrap(),
    ];
    let with = |t: BlockTable| AttentionOptions { block_table: Some(t), ..Default::default() };
    let good = BlockTable { page_size: 16, pages_per_entry: 2, pages: vec![0, 1, 2, 3].into() };
    assert!(Problem::new(q, pool, pool, q, lens, &with(good.clone())).is_ok());
    for bad in [
        BlockTable { page_size: 8, ..good.clone() },
        BlockTable { page_size: 32, ..good.clone() },
        BlockTable { pages: vec![0, 1, 2].into(), ..good.clone() },
        BlockTable { pages: vec![0, 1, 2, 4].into(), ..good.clone() },
    ] {
        let r = Problem::new(q, pool, pool, q, lens, &with(bad.clone()));
        assert!(matches!(r, Err(InvalidInput::BlockTable { .. })), "{bad:?}: {r:?}");
    }
    let too_long = AttentionOptions { cache_seqlens: Some(vec![32, 33]), ..with(good.clone()) };
    assert!(matches!(
        Problem::new(q, pool, pool, q, lens, &too_long),
        Err(InvalidInput::CacheSeqlens { .. })
    ));
    // A page shared by both entries: the forward runs, the backward refuses before writing.
    let shared = AttentionOptions {
        cache_seqlens: Some(vec![20, 20]),
        ..with(BlockTable { pages: vec![0, 1, 0, 2].into(), ..good })
    };
    let data = |n: usize| (0..n).map(|i| (i % 7) as f32 * 0.1).collect::<Vec<f32>>();
    let (qd, kd, vd) = (data(lens[0]), data(lens[1]), data(lens[2]));
    let mut out = vec![0.0f32; lens[3]];
    let mut lse = vec![0.0f32; 4];
    cpu::attention(
        HostTensor { data: &qd, layout: q },
        HostTensor { data: &kd, layout: pool },
        HostTensor { data: &vd, layout: pool },
        HostTensorMut { data: &mut out, layout: q },
        Some(&mut lse),
        &shared,
    )
    .unwrap();
    let (mut dq, mut dk, mut dv) =
        (vec![f32::NAN; lens[0]], vec![f32::NAN; lens[1]], vec![f32::NAN; lens[2]]);
    let r = cpu::attention_backward(
        HostTensor { data: &qd, layout: q },
        HostTensor { data: &kd, layout: pool },
        HostTensor { data: &vd, layout: pool },
        HostTensor { data: &out, layout: q },
        &lse,
        HostTensor { data: &out, layout: q },
        Gradients {
            dq: HostTensorMut { data: &mut dq, layout: q },
            dk: HostTensorMut { data: &mut dk, layout: pool },
            dv: HostTensorMut { data: &mut dv, layout: pool },
        },
        &shared,
    );
    assert!(matches!(r, Err(flashattn::Error::InvalidInput(InvalidInput::BlockTable { .. }))), "{r:?}");
    assert!(dq.iter().chain(&dk).chain(&dv).all(|x| x.is_nan()), "a refused backward wrote");
}

/// `append_kv` through a page table writes the same tokens as into a contiguous cache (entry
/// lengths that cross a page boundary), and refuses an overflow before writing.
#[test]
fn append_into_pages() {
    use flashattn::cpu::append_kv;
    let (hk, d, n) = (2, 4, 5);
    let table = BlockTable { page_size: PAGE, pages_per_entry: 2, pages: vec![3, 0, 2, 1].into() };
    let pool = Layout::bshd(4, PAGE, hk, d);
    let flat = Layout::bshd(2, 2 * PAGE, hk, d);
    let new = Layout::bshd(2, n, hk, d);
    let kn: Vec<f32> = (0..new.required_len().unwrap()).map(|i| i as f32 + 0.5).collect();
    let vn: Vec<f32> = kn.iter().map(|x| -x).collect();
    let lens = [14u32, 27];
    let (mut kp, mut vp) =
        (vec![0.0f32; pool.required_len().unwrap()], vec![0.0f32; pool.required_len().unwrap()]);
    let (mut kf, mut vf) =
        (vec![0.0f32; flat.required_len().unwrap()], vec![0.0f32; flat.required_len().unwrap()]);
    let new_k = HostTensor { data: &kn, layout: new };
    let new_v = HostTensor { data: &vn, layout: new };
    append_kv(
        HostTensorMut { data: &mut kp, layout: pool },
        HostTensorMut { data: &mut vp, layout: pool },
        new_k,
        new_v,
        &lens,
        Some(&table),
    )
    .unwrap();
    append_kv(
        HostTensorMut { data: &mut kf, layout: flat },
        HostTensorMut { data: &mut vf, layout: flat },
        new_k,
        new_v,
        &lens,
        None,
    )
    .unwrap();
    for e in 0..2 {
        for j in 0..2 * PAGE {
            let (page, row) = table.locate(e, j);
            for h in 0..hk {
                let (a, b) = (flat.offset(e, j, h), pool.offset(page, row, h));
                assert_eq!(&kf[a..a + d], &kp[b..b + d], "entry {e} token {j}");
                assert_eq!(&vf[a..a + d], &vp[b..b + d], "entry {e} token {j}");
            }
        }
    }
    let before = kp.clone();
    let r = append_kv(
        HostTensorMut { data: &mut kp, layout: pool },
        HostTensorMut { data: &mut vp, layout: pool },
        new_k,
        new_v,
        &[14, 28],
        Some(&table),
    );
    assert!(
        matches!(r, Err(flashattn::Error::InvalidInput(InvalidInput::CacheFull { entry: 1, .. }))),
        "{r:?}"
    );
    assert_eq!(kp, before);
}

/// `attention_with_kvcache` = `append_kv` then `attention` on the grown cache (paged here), bit
/// for bit; a call that fails its checks (a log-sum-exp buffer too small) appends nothing.
#[test]
fn attention_with_kvcache_appends_then_attends() {
    use flashattn::cpu::{append_kv, attention_with_kvcache};
    let (c, pg) = cases::<f32>(2, true);
    let p = &pg.problem;
    let table = pg.opts.block_table.clone().unwrap();
    // Lengths before the append: 14 → 17 (across a page boundary), 0 → 3 (an empty entry),
    // 45 → 48 (to the last token of its last page).
    let before = vec![14u32, 0, 45];
    let new = Layout::bshd(3, 3, 2, 16);
    let kn: Vec<f32> = (0..new.required_len().unwrap()).map(|i| ((i * 13 % 17) as f32 - 8.0) / 8.0).collect();
    let vn: Vec<f32> = kn.iter().map(|x| x * 0.5 - 0.1).collect();
    let opts = AttentionOptions { cache_seqlens: Some(before.clone()), ..pg.opts.clone() };
    // Two steps, by hand.
    let (mut k1, mut v1) = (pg.k.clone(), pg.v.clone());
    append_kv(
        HostTensorMut { data: &mut k1, layout: *p.k() },
        HostTensorMut { data: &mut v1, layout: *p.v() },
        HostTensor { data: &kn, layout: new },
        HostTensor { data: &vn, layout: new },
        &before,
        Some(&table),
    )
    .unwrap();
    let after = AttentionOptions { cache_seqlens: Some(vec![17, 3, 48]), ..pg.opts.clone() };
    let (mut o1, mut l1) = (vec![0.0f32; pg.out_len()], vec![0.0f32; pg.lse_len()]);
    cpu::attention(
        HostTensor { data: &pg.q, layout: *p.q() },
        HostTensor { data: &k1, layout: *p.k() },
        HostTensor { data: &v1, layout: *p.v() },
        HostTensorMut { data: &mut o1, layout: *p.o() },
        Some(&mut l1),
        &after,
    )
    .unwrap();
    // One call.
    let (mut k2, mut v2) = (pg.k.clone(), pg.v.clone());
    let (mut o2, mut l2) = (vec![0.0f32; pg.out_len()], vec![0.0f32; pg.lse_len()]);
    attention_with_kvcache(
        HostTensor { data: &pg.q, layout: *p.q() },
        HostTensorMut { data: &mut k2, layout: *p.k() },
        HostTensorMut { data: &mut v2, layout: *p.v() },
        Some((HostTensor { data: &kn, layout: new }, HostTensor { data: &vn, layout: new })),
        HostTensorMut { data: &mut o2, layout: *p.o() },
        Some(&mut l2),
        &opts,
    )
    .unwrap();
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&k1), bits(&k2));
    assert_eq!(bits(&o1), bits(&o2));
    assert_eq!(bits(&l1), bits(&l2));
    // And against the oracle on the grown cache (which reads the appended tokens through the
    // table): the tolerance rule on every output and log-sum-exp.
    let grown = Case::from_data(
        [*p.q(), *p.k(), *p.v(), *p.o()],
        after.clone(),
        pg.values,
        pg.q.clone(),
        k2.clone(),
        v2.clone(),
    )
    .expect("a valid grown problem");
    flashattn_testkit::check(&grown, &o2, Some(&l2)).unwrap_or_else(|e| panic!("{e}"));
    // A failing call writes nothing: the log-sum-exp buffer is one short.
    let (mut k3, mut v3) = (pg.k.clone(), pg.v.clone());
    let mut l3 = vec![0.0f32; pg.lse_len() - 1];
    let r = attention_with_kvcache(
        HostTensor { data: &pg.q, layout: *p.q() },
        HostTensorMut { data: &mut k3, layout: *p.k() },
        HostTensorMut { data: &mut v3, layout: *p.v() },
        Some((HostTensor { data: &kn, layout: new }, HostTensor { data: &vn, layout: new })),
        HostTensorMut { data: &mut o2, layout: *p.o() },
        Some(&mut l3),
        &opts,
    );
    assert!(r.is_err());
    assert_eq!(bits(&k3), bits(&pg.k), "a refused call appended");
    let _ = c;
}
