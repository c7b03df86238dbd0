//! THROWAWAY measurement (not part of the suite): emulates cheaper GPU backward variants in f32
//! (rounding to T where the kernels would) on the backward's property-test strategies, and checks
//! each under the gradient tolerance rule. Run with
//! `cargo test -p flashattn-testkit --test emulate_bwd -- --nocapture`
//! (env: EMU_CASES (default 1000), EMU_STRATEGY = spec | cache | named).
//!
//! Second round (F1..F4): a "training-mode forward" whose l is summed over the SAME rounded
//! probabilities round_T(P̃) that multiply V, O_T = round_T(O_f32), O_lo = round_T(O_f32 − O_T);
//! the backward uses that forward's (m, l). Also measures that forward's output against the f64
//! oracle under the forward tolerance rule (tolerance::output_errors), next to the current one.

use flashattn::cpu::{self, HostTensor, HostTensorMut};
use flashattn::kernels::softmax::prob_from_lse;
use flashattn::{Element, Problem, Tiles, bf16, f16};
use flashattn_testkit::case::for_each_row;
use flashattn_testkit::grad::{
    Gradients, attention_backward_f64, baseline_backward, check_gradients, for_each_gradient,
};
use flashattn_testkit::oracle::widen;
use flashattn_testkit::tolerance::output_errors;
use flashattn_testkit::{Case, LayoutKind, Sequences, Spec, Values};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Which forward the backward's (m, l) and O come from.
#[derive(Clone, Copy, PartialEq)]
enum FKind {
    /// The current GPU forward: l = Σ P̃ (unrounded), O = Σ round(P̃)·v / l.
    Cur,
    /// Training-mode forward: l = Σ round(P̃), O = Σ round(P̃)·v / l.
    Rl,
    /// Exact-max forward: P̃ = 2^((s − m)·c) (the largest score's probability exactly 1),
    /// l = Σ P̃ unrounded, O = Σ round(P̃)·v / l.
    Ex,
}

#[derive(Clone, Copy, PartialEq)]
enum PKind {
    /// exp2(fma(s, c, -m c)) * (1/l), exact (m, l) of the variant's forward.
    Ml,
    /// round_T(exp2(fma(s, c, -m c))) * (1/l): the forward's own weights.
    MlRounded,
    /// prob_from_lse(s, c, lse) with the forward's f32 lse.
    Lse,
}

#[derive(Clone, Copy, PartialEq)]
enum DKind {
    /// Σ dO·O_T (f32).
    Ot,
    /// Σ dO·(O_T + O_lo) (f32).
    OtLo,
    /// Σ dO·O_f32 (f32).
    Of32,
    /// Σ dO·O_T summed in f64, cast to f32.
    OtF64,
    /// Σ dO·O_cons, O_cons = (Σ Pt·v)/l with unrounded Pt (consistent numerator and l).
    Ocons,
    /// Σ_j P_j·dP_j (f32, key order): D from the same P and dP as dS.
    Pdp,
    /// Σ dO·O_T (f32 sequential), but dP from an 8-lane interleaved f32 dot (another order).
    OtMixDp,
    /// Σ dO·(O_T + O_lo) (f32 sequential), dP from the 8-lane interleaved dot.
    OtLoMixDp,
    /// dO·O_T + dO·O_lo, two sequential dots (the GPU's two products, dP's order).
    Two,
}

/// The emulated gradients of every variant, and the forward outputs O_T of the current forward
/// and of the training-mode forward (laid out as problem.o, 0 where no key is seen).
struct Emulated<T> {
    grads: Vec<[Vec<T>; 3]>,
    o_cur: Vec<T>,
    o_rl: Vec<T>,
}

const VARIANTS: [(&str, FKind, PKind, DKind); 15] = [
    ("V1 (m,l) D=dO·O_T", FKind::Cur, PKind::Ml, DKind::Ot),
    ("V2 (m,l) D=dO·(O_T+O_lo)", FKind::Cur, PKind::Ml, DKind::OtLo),
    ("V3 (m,l) D=dO·O_f32", FKind::Cur, PKind::Ml, DKind::Of32),
    ("V4 lse D=dO·O_T", FKind::Cur, PKind::Lse, DKind::Ot),
    ("V5 lse D=dO·O_f32", FKind::Cur, PKind::Lse, DKind::Of32),
    ("V1' (m,l) D=f64 Σ dO·O_T", FKind::Cur, PKind::Ml, DKind::OtF64),
    ("X1 (m,l) D=dO·O_cons", FKind::Cur, PKind::Ml, DKind::Ocons),
    ("X2 (m,l) D=Σ P·dP", FKind::Cur, PKind::Ml, DKind::Pdp),
    ("X3 V1 w/ dP other order", FKind::Cur, PKind::Ml, DKind::OtMixDp),
    // Training-mode forward (l = Σ round(P̃)); (m, l) are that forward's.
    ("F1 lr Pt/l D=dO·(O_T+O_lo)", FKind::Rl, PKind::Ml, DKind::OtLo),
    ("F2 lr r(Pt)/l D=dO·(OT+Olo)", FKind::Rl, PKind::MlRounded, DKind::OtLo),
    ("F3 lr Pt/l D=dO·O_T", FKind::Rl, PKind::Ml, DKind::Ot),
    ("F4 F1 w/ dP other order", FKind::Rl, PKind::Ml, DKind::OtLoMixDp),
    ("F1' lr Pt/l D=dO·O_T+dO·O_lo", FKind::Rl, PKind::Ml, DKind::Two),
    ("E1 exact max, l unrounded, D=dO·O_T+dO·O_lo", FKind::Ex, PKind::Ml, DKind::Two),
];

/// cpu.rs's dot: eight interleaved partial sums, added pairwise.
fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    let mut part = [0.0f32; 8];
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        part[i % 8] += x * y;
    }
    ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]))
}

fn dot_seq(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0.0f32, |s, (x, y)| s + x * y)
}

/// The emulated gradients of every variant, f32 accumulators laid out like Q, K, V.
fn emulate<T: Element>(case: &Case<T>, lse: &[f32], d_o: &[T]) -> Emulated<T> {
    let p = &case.problem;
    assert!(!p.has_score_mod());
    let d = p.head_dim();
    let scale = p.scale();
    let c = p.scale_log2();
    let round = |x: f32| T::from_f32(x).to_f32();
    let nv = VARIANTS.len();
    let mut acc: Vec<[Vec<f32>; 3]> = (0..nv)
        .map(|_| [vec![0.0f32; case.q.len()], vec![0.0f32; case.k.len()], vec![0.0f32; case.v.len()]])
        .collect();
    let load = |buf: &[T], o: usize| -> Vec<f32> { buf[o..o + d].iter().map(|x| x.to_f32()).collect() };
    let mut o_cur = vec![T::from_f32(0.0); case.out_len()];
    let mut o_rl = vec![T::from_f32(0.0); case.out_len()];
    let group = p.group_size();
    for i in 0..p.batch() {
        let seq = p.sequence(i);
        let b = seq.batch_index;
        for h in 0..p.q().heads {
            let kh = h / group;
            for t in 0..seq.len_q {
                let row = p.lse_index(i, h, t);
                let qo = p.q().offset(b, seq.q_start + t, h);
                let q_row = load(&case.q, qo);
                let oo = p.o().offset(b, seq.q_start + t, h);
                let do_row = load(d_o, oo);
                let (kb, ke) = (p.key_begin(t, seq.len_q, seq.len_k), p.key_end(t, seq.len_q, seq.len_k));
                if kb >= ke {
                    continue;
                }
                let keys: Vec<usize> = (kb..ke).collect();
                debug_assert!(keys.iter().all(|&j| p.visible(t, j, seq.len_q, seq.len_k)));
                let ko: Vec<usize> =
                    keys.iter().map(|&j| p.kv_offset(false, b, seq.k_start + j, kh)).collect();
                let vo: Vec<usize> =
                    keys.iter().map(|&j| p.kv_offset(true, b, seq.k_start + j, kh)).collect();
                let k_rows: Vec<Vec<f32>> = ko.iter().map(|&o| load(&case.k, o)).collect();
                let v_rows: Vec<Vec<f32>> = vo.iter().map(|&o| load(&case.v, o)).collect();
                let s: Vec<f32> = k_rows.iter().map(|kr| dot_seq(&q_row, kr)).collect();
                let m = s.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
                let nmc = -m * c;
                let pt: Vec<f32> = s.iter().map(|&x| x.mul_add(c, nmc).exp2()).collect();
                let l: f32 = pt.iter().fold(0.0f32, |a, &x| a + x);
                let mut o_f32 = vec![0.0f32; d];
                for (j, vr) in v_rows.iter().enumerate() {
                    let pr = round(pt[j]);
                    for x in 0..d {
                        o_f32[x] += pr * vr[x];
                    }
                }
                o_f32.iter_mut().for_each(|o| *o /= l);
                let mut o_cons = vec![0.0f32; d];
                for (j, vr) in v_rows.iter().enumerate() {
                    for x in 0..d {
                        o_cons[x] += pt[j] * vr[x];
                    }
                }
                o_cons.iter_mut().for_each(|o| *o /= l);
                let d_ocons = dot_seq(&do_row, &o_cons);
                let o_t: Vec<f32> = o_f32.iter().map(|&o| round(o)).collect();
                let o_lo: Vec<f32> = o_f32.iter().zip(&o_t).map(|(&a, &b)| round(a - b)).collect();
                let d_ot = dot_seq(&do_row, &o_t);
                let ot_lo: Vec<f32> = o_t.iter().zip(&o_lo).map(|(a, b)| a + b).collect();
                let d_otlo = dot_seq(&do_row, &ot_lo);
                let d_of32 = dot_seq(&do_row, &o_f32);
                let d_otf64 =
                    do_row.iter().zip(&o_t).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum::<f64>() as f32;
                let inv_l = 1.0 / l;
                let p_ml: Vec<f32> = pt.iter().map(|&x| x * inv_l).collect();
                let p_lse: Vec<f32> = s.iter().map(|&x| prob_from_lse(x, c, lse[row])).collect();
                let dp: Vec<f32> = v_rows.iter().map(|vr| dot_seq(&do_row, vr)).collect();
                let dp_lanes: Vec<f32> = v_rows.iter().map(|vr| dot_lanes(&do_row, vr)).collect();
                let d_pdp = p_ml.iter().zip(&dp).fold(0.0f32, |a, (&x, &y)| a + x * y);
                // Training-mode forward: l over the rounded probabilities that multiply V.
                let pr_all: Vec<f32> = pt.iter().map(|&x| round(x)).collect();
                let l_r: f32 = pr_all.iter().fold(0.0f32, |a, &x| a + x);
                let mut o_rf32 = vec![0.0f32; d];
                for (j, vr) in v_rows.iter().enumerate() {
                    for x in 0..d {
                        o_rf32[x] += pr_all[j] * vr[x];
                    }
                }
                o_rf32.iter_mut().for_each(|o| *o /= l_r);
                let o_rt: Vec<f32> = o_rf32.iter().map(|&o| round(o)).collect();
                let o_rlo: Vec<f32> = o_rf32.iter().zip(&o_rt).map(|(&a, &b)| round(a - b)).collect();
                let d_rot = dot_seq(&do_row, &o_rt);
                let rot_lo: Vec<f32> = o_rt.iter().zip(&o_rlo).map(|(a, b)| a + b).collect();
                let d_rotlo = dot_seq(&do_row, &rot_lo);
                let d_rtwo = dot_seq(&do_row, &o_rt) + dot_seq(&do_row, &o_rlo);
                // Exact-max forward.
                let pt_e: Vec<f32> = s.iter().map(|&x| ((x - m) * c).exp2()).collect();
                let l_e: f32 = pt_e.iter().fold(0.0f32, |a, &x| a + x);
                let mut o_ef32 = vec![0.0f32; d];
                for (j, vr) in v_rows.iter().enumerate() {
                    let pr = round(pt_e[j]);
                    for x in 0..d {
                        o_ef32[x] += pr * vr[x];
                    }
                }
                o_ef32.iter_mut().for_each(|o| *o /= l_e);
                let o_et: Vec<f32> = o_ef32.iter().map(|&o| round(o)).collect();
                let o_elo: Vec<f32> = o_ef32.iter().zip(&o_et).map(|(&a, &b)| round(a - b)).collect();
                let d_etwo = dot_seq(&do_row, &o_et) + dot_seq(&do_row, &o_elo);
                let inv_le = 1.0 / l_e;
                let p_eml: Vec<f32> = pt_e.iter().map(|&x| x * inv_le).collect();
                let inv_lr = 1.0 / l_r;
                let p_rml: Vec<f32> = pt.iter().map(|&x| x * inv_lr).collect();
                let p_rmlr: Vec<f32> = pr_all.iter().map(|&x| x * inv_lr).collect();
                for x in 0..d {
                    o_cur[oo + x] = T::from_f32(o_f32[x]);
                    o_rl[oo + x] = T::from_f32(o_rf32[x]);
                }
                for (vi, &(_, fk, pk, dk)) in VARIANTS.iter().enumerate() {
                    let probs = match (fk, pk) {
                        (FKind::Cur, PKind::Ml) => &p_ml,
                        (FKind::Cur, PKind::Lse) => &p_lse,
                        (FKind::Rl, PKind::Ml) => &p_rml,
                        (FKind::Rl, PKind::MlRounded) => &p_rmlr,
                        (FKind::Ex, PKind::Ml) => &p_eml,
                        _ => unreachable!(),
                    };
                    let big_d = match (fk, dk) {
                        (FKind::Cur, DKind::Ot) => d_ot,
                        (FKind::Cur, DKind::OtLo) => d_otlo,
                        (FKind::Cur, DKind::Of32) => d_of32,
                        (FKind::Cur, DKind::OtF64) => d_otf64,
                        (FKind::Cur, DKind::Ocons) => d_ocons,
                        (FKind::Cur, DKind::Pdp) => d_pdp,
                        (FKind::Cur, DKind::OtMixDp) => d_ot,
                        (FKind::Rl, DKind::Ot) => d_rot,
                        (FKind::Rl, DKind::OtLo) => d_rotlo,
                        (FKind::Rl, DKind::OtLoMixDp) => d_rotlo,
                        (FKind::Rl, DKind::Two) => d_rtwo,
                        (FKind::Ex, DKind::Two) => d_etwo,
                        _ => unreachable!(),
                    };
                    let dpv = if matches!(dk, DKind::OtMixDp | DKind::OtLoMixDp) { &dp_lanes } else { &dp };
                    let [gq, gk, gv] = &mut acc[vi];
                    for j in 0..keys.len() {
                        let pj = probs[j];
                        let ds = scale * round(pj * (dpv[j] - big_d));
                        let pr = round(pj);
                        for x in 0..d {
                            gv[vo[j] + x] += pr * do_row[x];
                            gk[ko[j] + x] += ds * q_row[x];
                            gq[qo + x] += ds * k_rows[j][x];
                        }
                    }
                }
            }
        }
    }
    let grads = acc
        .into_iter()
        .map(|[a, b, cc]| {
            let conv = |v: Vec<f32>| v.into_iter().map(T::from_f32).collect::<Vec<T>>();
            [conv(a), conv(b), conv(cc)]
        })
        .collect();
    Emulated { grads, o_cur, o_rl }
}

/// Forward-rule measurements of one forward over the cases.
#[derive(Default, Clone)]
struct FwdStats {
    fails: usize,
    worst_ratio: f64,
    sum_ratio: f64,
    max_err: f64,
    worst_feat: String,
}

impl FwdStats {
    fn add(&mut self, ratio: f64, err: f64, feat: &str) {
        if ratio > 1.0 {
            self.fails += 1;
        }
        if ratio > self.worst_ratio {
            self.worst_ratio = ratio;
            self.worst_feat = feat.to_string();
        }
        self.sum_ratio += ratio;
        self.max_err = self.max_err.max(err);
    }
}

/// err/allowed of each of dq, dk, dv (the rule's numbers, for reports).
fn ratios<T: Element>(
    p: &Problem,
    got: [&[T]; 3],
    r: &Gradients,
    base: &Gradients,
) -> [(f64, f64, f64, f64); 3] {
    let refs = [&r.dq, &r.dk, &r.dv];
    let bases = [&base.dq, &base.dk, &base.dv];
    let (mut err, mut eb, mut atol) = ([0.0f64; 3], [0.0f64; 3], [0.0f64; 3]);
    for_each_gradient(p, |t, i| {
        let (x, rr) = (f64::from(got[t][i].to_f32()), refs[t][i]);
        err[t] = err[t].max((x - rr).abs());
        eb[t] = eb[t].max((bases[t][i] - rr).abs());
        let sh = rr + 0.3;
        atol[t] = atol[t].max(2.0 * (f64::from(T::from_f32(sh as f32).to_f32()) - sh).abs());
    });
    std::array::from_fn(|t| {
        let allowed = 2.0 * eb[t] + atol[t];
        (err[t] / allowed.max(f64::MIN_POSITIVE), err[t], eb[t], atol[t])
    })
}

fn features<T: Element>(case: &Case<T>, spec: &Spec) -> String {
    let p = &case.problem;
    let d = p.head_dim();
    // Largest |scale·q·k| over visible pairs, and the largest row length.
    let mut max_logit = 0.0f32;
    let mut max_keys = 0usize;
    for_each_row(p, |co, _| {
        let seq = p.sequence(co.seq);
        let kh = co.h / p.group_size();
        let qo = p.q().offset(co.b, co.s, co.h);
        let q: Vec<f32> = case.q[qo..qo + d].iter().map(|x| x.to_f32()).collect();
        let (kb, ke) = (p.key_begin(co.t, seq.len_q, seq.len_k), p.key_end(co.t, seq.len_q, seq.len_k));
        max_keys = max_keys.max(ke.saturating_sub(kb));
        for j in kb..ke {
            let ko = p.kv_offset(false, co.b, seq.k_start + j, kh);
            let k: Vec<f32> = case.k[ko..ko + d].iter().map(|x| x.to_f32()).collect();
            max_logit = max_logit.max((p.scale() * dot_seq(&q, &k)).abs());
        }
    });
    let seqs = match &spec.sequences {
        Sequences::Batch { batch, seqlen_q, seqlen_k } => format!("batch {batch}x{seqlen_q}q/{seqlen_k}k"),
        Sequences::VarLen { q_lens, k_lens, .. } => format!("varlen q{q_lens:?} k{k_lens:?}"),
    };
    format!(
        "{:?}, d {}, causal {}, window {:?}/{:?}, heads {}:{}, {seqs}, cache {:?}, scale {:.4}, max|logit| {:.1}, max keys/row {}",
        spec.values,
        d,
        spec.causal,
        spec.window.left,
        spec.window.right,
        spec.heads_q,
        spec.heads_k,
        spec.cache_seqlens,
        p.scale(),
        max_logit,
        max_keys
    )
}

#[derive(Default, Clone)]
struct Stats {
    fails: usize,
    worst_pass: f64,
    worst_fail: f64,
    examples: Vec<(f64, String)>,
    fail_by: [usize; 3],
    fail_values: std::collections::BTreeMap<String, usize>,
}

fn record(
    st: &mut Stats,
    res: Result<f64, String>,
    r: [(f64, f64, f64, f64); 3],
    feat: &str,
    values: Values,
) {
    match res {
        Ok(w) => st.worst_pass = st.worst_pass.max(w),
        Err(e) => {
            st.fails += 1;
            let worst = r.iter().map(|x| x.0).fold(0.0, f64::max);
            st.worst_fail = st.worst_fail.max(worst);
            for t in 0..3 {
                if r[t].0 > 1.0 {
                    st.fail_by[t] += 1;
                }
            }
            *st.fail_values.entry(format!("{values:?}")).or_default() += 1;
            let names = ["dq", "dk", "dv"];
            let per: Vec<String> = (0..3).map(|t| format!("{} {:.2}x", names[t], r[t].0)).collect();
            st.examples.push((worst, format!("{e} [ratios {}] | {feat}", per.join(", "))));
        }
    }
}

fn run_dtype<T: Element>(cases: &[(Spec, u64)], out: &mut String) {
    let names: Vec<&str> =
        std::iter::once("CPU backward (control)").chain(VARIANTS.iter().map(|v| v.0)).collect();
    let mut stats = vec![Stats::default(); names.len()];
    // Forward: [real CPU forward, emulated current GPU forward, training-mode forward (F1)].
    let mut fwd = vec![FwdStats::default(); 3];
    let (mut rl_worse, mut rl_better, mut rl_same) = (0usize, 0usize, 0usize);
    let mut rl_max_err_ratio = 0.0f64; // max over cases of err_F1 / err_cur (cases with err_cur > 0)
    let mut rl_max_err_ratio_feat = String::new();
    let start = std::time::Instant::now();
    let mut skipped = 0;
    for (n, (spec, seed)) in cases.iter().enumerate() {
        let mut rng = StdRng::seed_from_u64(*seed);
        let case = Case::<T>::random(&mut rng, spec);
        let p = &case.problem;
        if p.has_score_mod() {
            skipped += 1;
            continue;
        }
        let (o, lse) = case.run_cpu().expect("cpu forward");
        let d_o: Vec<T> = (0..o.len()).map(|_| T::from_f32(rng.random_range(-1.0..1.0))).collect();
        let reference =
            attention_backward_f64(p, &widen(&case.q), &widen(&case.k), &widen(&case.v), &widen(&d_o));
        let baseline = baseline_backward(p, &case.q, &case.k, &case.v, &d_o);
        let feat = features(&case, spec);
        // Control: the real CPU backward.
        {
            let nan = || T::from_f32(f32::NAN);
            let (mut dq, mut dk, mut dv) =
                (vec![nan(); case.q.len()], vec![nan(); case.k.len()], vec![nan(); case.v.len()]);
            cpu::attention_backward(
                HostTensor { data: &case.q, layout: *p.q() },
                HostTensor { data: &case.k, layout: *p.k() },
                HostTensor { data: &case.v, layout: *p.v() },
                HostTensor { data: &o, layout: *p.o() },
                &lse,
                HostTensor { data: &d_o, layout: *p.o() },
                cpu::Gradients {
                    dq: HostTensorMut { data: &mut dq, layout: *p.q() },
                    dk: HostTensorMut { data: &mut dk, layout: *p.k() },
                    dv: HostTensorMut { data: &mut dv, layout: *p.v() },
                },
                &case.opts,
            )
            .expect("cpu backward");
            let got = [&dq[..], &dk[..], &dv[..]];
            let res = check_gradients(p, got, &reference, &baseline);
            record(&mut stats[0], res, ratios(p, got, &reference, &baseline), &feat, case.values);
        }
        let em = emulate(&case, &lse, &d_o);
        {
            let e_cpu = output_errors(&case, &o);
            let e_cur = output_errors(&case, &em.o_cur);
            let e_rl = output_errors(&case, &em.o_rl);
            fwd[0].add(e_cpu.rule_ratio(), e_cpu.err, &feat);
            fwd[1].add(e_cur.rule_ratio(), e_cur.err, &feat);
            fwd[2].add(e_rl.rule_ratio(), e_rl.err, &feat);
            if e_rl.err > e_cur.err {
                rl_worse += 1;
            } else if e_rl.err < e_cur.err {
                rl_better += 1;
            } else {
                rl_same += 1;
            }
            if e_cur.err > 0.0 && e_rl.err / e_cur.err > rl_max_err_ratio {
                rl_max_err_ratio = e_rl.err / e_cur.err;
                rl_max_err_ratio_feat = format!(
                    "err F1 {:.3e} vs cur {:.3e} (rule ratios {:.3} vs {:.3}) | {feat}",
                    e_rl.err,
                    e_cur.err,
                    e_rl.rule_ratio(),
                    e_cur.rule_ratio()
                );
            }
        }
        for (vi, [dq, dk, dv]) in em.grads.iter().enumerate() {
            let got = [&dq[..], &dk[..], &dv[..]];
            let res = check_gradients(p, got, &reference, &baseline);
            record(&mut stats[vi + 1], res, ratios(p, got, &reference, &baseline), &feat, case.values);
        }
        if (n + 1) % 100 == 0 {
            eprintln!("  {} {} cases, {:.0}s", T::DTYPE, n + 1, start.elapsed().as_secs_f64());
        }
    }
    let total = cases.len() - skipped;
    out.push_str(&format!(
        "\n=== dtype {} : {} cases ({} skipped: score mods), {:.0}s ===\n",
        T::DTYPE,
        total,
        skipped,
        start.elapsed().as_secs_f64()
    ));
    out.push_str(&format!(
        "{:<28} {:>6} {:>16} {:>16}  fails by grad (dq/dk/dv)  fails by values\n",
        "variant", "fails", "worst pass ratio", "worst fail ratio"
    ));
    for (name, st) in names.iter().zip(&stats) {
        out.push_str(&format!(
            "{:<28} {:>4}/{:<4} {:>10.3} {:>16.3}  {}/{}/{}  {:?}\n",
            name,
            st.fails,
            total,
            st.worst_pass,
            st.worst_fail,
            st.fail_by[0],
            st.fail_by[1],
            st.fail_by[2],
            st.fail_values
        ));
    }
    out.push_str(&format!(
        "\nforward O_T vs f64 oracle (tolerance::output_errors, rule ratio = err/(2·err_base+atol)):\n{:<40} {:>9} {:>12} {:>12} {:>12}\n",
        "forward", "fails", "worst ratio", "mean ratio", "max |err|"
    ));
    let fnames = [
        "real CPU forward (run_cpu)",
        "emulated current fwd (l=Σ Pt)",
        "emulated training fwd F1 (l=Σ r(Pt))",
    ];
    for (name, f) in fnames.iter().zip(&fwd) {
        out.push_str(&format!(
            "{:<40} {:>4}/{:<4} {:>12.3} {:>12.3} {:>12.3e}\n",
            name,
            f.fails,
            total,
            f.worst_ratio,
            f.sum_ratio / total.max(1) as f64,
            f.max_err
        ));
    }
    out.push_str(&format!(
        "per case, F1 max|err| vs current: larger in {rl_worse}, smaller in {rl_better}, equal in {rl_same}; \
         largest err_F1/err_cur {rl_max_err_ratio:.3}: {rl_max_err_ratio_feat}\n"
    ));
    out.push_str(&format!("  worst F1 rule ratio at: {}\n", fwd[2].worst_feat));
    out.push_str(&format!("  worst current-fwd rule ratio at: {}\n", fwd[1].worst_feat));
    for (name, st) in names.iter().zip(&stats) {
        if st.examples.is_empty() {
            continue;
        }
        out.push_str(&format!("\n-- {} {}: failures (worst first, up to 6) --\n", T::DTYPE, name));
        let mut ex = st.examples.clone();
        ex.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap());
        for (_, e) in ex.iter().take(6) {
            out.push_str(&format!("  * {e}\n"));
        }
        // and the mildest one
        if ex.len() > 6 {
            out.push_str(&format!("  * (mildest) {}\n", ex.last().unwrap().1));
        }
    }
}

/// The named (non-score-mod) specs of backward.rs's `backward_matches_the_gradient_oracle`.
fn named_specs() -> Vec<(Spec, u64)> {
    let mut specs = Vec::new();
    let mut s = Spec::batch(2, 37, 53, 2, 24);
    s.tiles = Tiles { block_m: Some(8), block_n: Some(16) };
    specs.push(s.clone());
    s.causal = true;
    specs.push(s.clone());
    s.values = Values::LargeLogits;
    specs.push(s);
    let mut s = Spec::batch(1, 20, 7, 2, 16);
    s.causal = true;
    specs.push(s);
    let mut s = Spec::batch(2, 19, 30, 4, 40);
    s.heads_k = 2;
    s.layout = LayoutKind::Padded;
    specs.push(s.clone());
    s.heads_k = 1;
    s.layout = LayoutKind::Mixed;
    s.causal = true;
    specs.push(s);
    let mut s = Spec::batch(1, 1, 1, 2, 32);
    s.sequences =
        Sequences::VarLen { q_lens: vec![9, 0, 14, 1], k_lens: vec![12, 5, 0, 20], spare_q: 1, spare_k: 2 };
    s.heads_k = 1;
    s.causal = true;
    specs.push(s);
    specs.push(Spec::batch(3, 1, 70, 4, 64));
    for (left, right, causal) in
        [(Some(6), None, false), (None, Some(4), false), (Some(9), Some(2), false), (Some(5), None, true)]
    {
        let mut s = Spec::batch(1, 29, 41, 4, 16);
        s.heads_k = 2;
        s.window = flashattn::Window { left, right };
        s.causal = causal;
        specs.push(s);
    }
    // Each named spec with many seeds.
    let reps =
        std::env::var("EMU_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000usize) / specs.len();
    let mut out = Vec::new();
    for r in 0..reps {
        for (i, s) in specs.iter().enumerate() {
            out.push((s.clone(), 40 + i as u64 + 1000 * r as u64));
        }
    }
    out
}

#[test]
fn emulate_backward_variants() {
    let n: usize = std::env::var("EMU_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let which = std::env::var("EMU_STRATEGY").unwrap_or_else(|_| "spec".into());
    let cases: Vec<(Spec, u64)> = if which == "named" {
        named_specs()
    } else {
        let mut runner = TestRunner::deterministic();
        let strat = if which == "cache" {
            (flashattn_testkit::strategy::spec_with_cache(), proptest::prelude::any::<u64>()).boxed()
        } else {
            (flashattn_testkit::strategy::spec(), proptest::prelude::any::<u64>()).boxed()
        };
        (0..n).map(|_| strat.new_tree(&mut runner).unwrap().current()).collect()
    };
    let mut out = format!("strategy {which}, {} cases drawn (TestRunner::deterministic)\n", cases.len());
    let mut vals = std::collections::BTreeMap::<String, usize>::new();
    for (s, _) in &cases {
        *vals.entry(format!("{:?}", s.values)).or_default() += 1;
    }
    out.push_str(&format!("values mix: {vals:?}; causal {}\n", cases.iter().filter(|c| c.0.causal).count()));
    run_dtype::<f16>(&cases, &mut out);
    eprintln!("{out}");
    run_dtype::<bf16>(&cases, &mut out);
    println!("{out}");
    let path = format!("/tmp/emulate_bwd2_{which}.txt");
    std::fs::write(&path, &out).unwrap();
}
