# Experiment (session 27): the d = 128 window instance's step with transposed scores (keys as
# rows): S^T = K.Q^T, dP^T = V.dO^T; P^T and dS^T stay in registers as the A operands of
# register-A dV += P^T.dO; dS^T stored ([key][query]) for dK += dS^T.Q (K-major A) and ([key][query], one 64-query
# panel) for dQ = dS.K (A MN-major from it, B the K panel). No P store. Problems with a score
# modifier keep the old step (a uniform branch).
p='/work/main/kernels-gpu/src/gpu/flash_bwd.rs'
s=open(p).read()
def rep(old,new,count=1):
    global s
    assert s.count(old)==count,(old,s.count(old))
    s=s.replace(old,new)
rep("""    let qw = crate::config::dq_on_wgmma(WGMMA, D as u32, W as u32);
""","""    let qw = crate::config::dq_on_wgmma(WGMMA, D as u32, W as u32);
    // The transposed step (d = 128's window instance on `wgmma`, problems without a score
    // modifier): see the step.
    let transposed = WIN && kvw && qw && D == 128 && CG == 1 && mod_kind(p) == MOD_NONE;
""")
rep("""        let tid_o = thread_x_opaque();
        let (lane_o, warp_o) = (tid_o % 32, tid_o / 32);

        // 1. S and dP: this warp's MT1·16 queries × NT1·8 keys.
        {
""","""        let tid_o = thread_x_opaque();
        let (lane_o, warp_o) = (tid_o % 32, tid_o / 32);

        // 1'. The transposed step: warpgroup wg's 64 keys × the 64 queries, `Sᵀ = K·Qᵀ` and
        // `dPᵀ = V·dOᵀ` (keys as rows: warp w's rows `16·(w % 4)…`, the lane's queries
        // `8·nt + 2·t4 + e`), each query's statistics read per column; `Pᵀ` and `dSᵀ` packed as
        // `wgmma` A fragments (16 queries each) for `dV += Pᵀ·dO` and `dK += dSᵀ·Q`, and `dSᵀ`
        // stored `[key][query]` (one 64-query panel) for `dQ = dS·K`.
        #[cfg(target_feature = "sm_90a")]
        let mut pfr = [[0u32; 4]; BM / 16];
        #[cfg(target_feature = "sm_90a")]
        if transposed {
            let k0 = 64 * (warp_o / 4);
            let mut st = [[0.0f32; 4]; 8];
            let mut dpt = [[0.0f32; 4]; 8];
            // SAFETY: as the scores below, the operands swapped (K and V rows as A).
            unsafe {
                scores_wgmma::<E, D, BN, BM>(
                    &mut st,
                    &mut dpt,
                    (k_tile + 128 * k0, v_tile + 128 * k0),
                    (qt, dot),
                    prefetch,
                )
            };
            let scale_log2 = p.scale_log2;
            let kr = k0 + 16 * (warp_o % 4) + g;
            for ks in 0..BM / 16 {
                let mut pv = [[0.0f32; 4]; 2];
                let mut dv2 = [[0.0f32; 4]; 2];
                for j in 0..2 {
                    let nt = 2 * ks + j;
                    for e in 0..2 {
                        let qc = 8 * nt as u32 + 2 * t4 + e as u32;
                        // SAFETY: inside the statistics stage, 16-byte aligned.
                        let [offset, inv, pivot, d_rel] =
                            unsafe { shared::load_f32x4(rows + s * 16 * BM as u32 + 16 * qc) };
                        let q = m0 + qc;
                        let begin = mask::row_key_begin(q, seq.len_q, seq.len_k, p.window_left);
                        let limit = mask::row_key_end(q, seq.len_q, seq.len_k, causal, p.window_right);
                        for half in 0..2 {
                            let key = key_start() + kr + 8 * half as u32;
                            let x = prob_from_offset(st[nt][2 * half + e], scale_log2, offset) * inv;
                            let pr = if (key < limit) & (key >= begin) { x } else { 0.0 };
                            pv[j][2 * half + e] = pr;
                            dv2[j][2 * half + e] = GradRow::ds(pr, dpt[nt][2 * half + e], pivot, d_rel);
                        }
                    }
                }
                pfr[ks] = E::acc_to_a(&pv[0], &pv[1]);
                let dsf = E::acc_to_a(&dv2[0], &dv2[1]);
                // dSᵀ rows kr, kr + 8, query chunks 2·ks and 2·ks + 1.
                for (r, (half, chunk)) in [(0, 0), (1, 0), (0, 1), (1, 1)].into_iter().enumerate() {
                    let at = panel_swizzle(kr + 8 * half, 2 * ks as u32 + chunk, BN as u32) + 4 * t4;
                    // SAFETY: row < BN, chunk < 8 of the dSᵀ tile (the dS tile's bytes).
                    unsafe { shared::store_u32(ds_tile + at, dsf[r]) };
                }
            }
        }

        // 1. S and dP: this warp's MT1·16 queries × NT1·8 keys.
        if !transposed {
""")
rep("""        let mut qf = [0.0f32; 32];
        if qw {
""","""        let mut qf = [0.0f32; 32];
        #[cfg(target_feature = "sm_90a")]
        if transposed {
            // `dQ = dS·K` for warpgroup wg's 64 columns: A = dS MN-major from the dSᵀ panel
            // (rows = keys, 16 a k-step), B = K's panel wg, MN-major.
            use wgmma::{SWIZZLE_ATOM_BYTES, descriptor};
            let kb = 128 * BN as u32;
            wgmma::fence();
            for ks in 0..BN / 16 {
                let a = descriptor(ds_tile + (ks * 16 * 128) as u32, kb, SWIZZLE_ATOM_BYTES);
                let b = descriptor(k_tile + (warp_o / 4) * kb + (ks * 16 * 128) as u32, kb, SWIZZLE_ATOM_BYTES);
                // SAFETY: the stored (fenced, behind the barrier) dSᵀ panel and the loaded K tile.
                unsafe { E::ss_tt_n64(&mut qf, a, b) };
            }
            wgmma::commit();
        }
        if qw && !transposed {
""")
rep("""                let desc = |addr: u32| descriptor(addr, pb, SWIZZLE_ATOM_BYTES);
                wgmma::fence();
                for kk in 0..BM / 16 {""","""                let desc = |addr: u32| descriptor(addr, pb, SWIZZLE_ATOM_BYTES);
                wgmma::fence();
                if transposed {
                    for ks in 0..BM / 16 {
                        for pn in 0..D / 64 {
                            let b_off = pn as u32 * pb + (ks * 16 * 128) as u32;
                            // SAFETY: the loaded dO and Q panels (behind the step's barrier).
                            unsafe {
                                E::rs_n64(&mut dvw[pn], &pfr[ks], desc(dot + b_off));
                                // dSᵀ rows of the warpgroup's keys, K-major (16 queries = 32
                                // bytes a k-step), from the stored panel.
                                let a = descriptor(
                                    ds_tile + 128 * (64 * wg) + (32 * ks) as u32,
                                    16,
                                    SWIZZLE_ATOM_BYTES,
                                );
                                E::ss_tn_n64(&mut dkw[pn], a, desc(qt + b_off), 1);
                            }
                        }
                    }
                } else {
                for kk in 0..BM / 16 {""")
rep("""                }
                // (Waited for at the end of the step: the dQ product and adds run meanwhile.)
                wgmma::commit();""","""                }
                }
                // (Waited for at the end of the step: the dQ product and adds run meanwhile.)
                wgmma::commit();""")
open(p,'w').write(s)
