//! The general flash-attention forward kernel, on CUDA cores (f32 FMA), for any head dimension
//! up to 256 and f16/bf16/f32 storage.
//!
//! Each block owns `block_m` query rows of one (sequence, head) and streams the keys through
//! shared memory `block_n` at a time; the N×N score matrix never exists. Four threads share a
//! query row ([`SIMT_THREADS_PER_ROW`]): for scores each takes every fourth key of a 32-key
//! chunk ([`SIMT_KEY_CHUNK`]), for the output each owns `D/4` columns in 16-byte groups. After
//! each chunk the shared online-softmax recurrence ([`OnlineSoftmax`]) rescales the accumulator.
//!
//! Shared memory (f32): Q tile `block_m × (D+4)`, K tile `block_n × (D+4)`, V tile
//! `block_n × D`. The 4-float row padding keeps the 16-byte loads of different rows in different
//! banks. Elements past the head dimension and rows past the sequence are zero, so they add
//! nothing to the dot products; their outputs are not stored.

use super::arch::global::{Storage, store_f32};
use super::arch::shared;
use super::arch::shuffle;
use super::arch::thread::{block_dim_x, block_x, block_y, block_z, sync_threads, thread_x};
use super::sequence::SeqView;
use crate::mask;
use crate::math::fma;
use crate::params::{AttnParams, SIMT_KEY_CHUNK, SIMT_ROW_PAD, SIMT_THREADS_PER_ROW};
use crate::softmax::OnlineSoftmax;

const TPR: u32 = SIMT_THREADS_PER_ROW;
/// Scores per thread per chunk.
const SCORES: usize = (SIMT_KEY_CHUNK / SIMT_THREADS_PER_ROW) as usize;

/// Copies rows `row0..row0+rows` (tokens of the sequence, `start` offset) of head `h` from a
/// global tensor into a shared f32 tile with row pitch `pitch` floats, zero-filling rows past
/// `len` and columns past `d`. All threads of the block take part; coalesced along the row.
#[inline(always)]
unsafe fn load_tile<E: Storage, const D: usize>(
    tile: u32,
    pitch: u32,
    src: u64,
    seq: &SeqView,
    strides: &[u64; 3],
    start: u64,
    h: u32,
    row0: u32,
    rows: u32,
    len: u32,
    d: u32,
) {
    let threads = block_dim_x();
    let mut i = thread_x();
    while i < rows * D as u32 {
        let r = i / D as u32;
        let c = i % D as u32;
        let t = row0 + r;
        let x = if t < len && c < d {
            let off = seq.offset(strides, start, t, h) + c as u64;
            // SAFETY: t < len and c < d: inside the tensor by the host's validation.
            unsafe { E::load(src + off * E::BYTES) }
        } else {
            0.0
        };
        // SAFETY: r < rows, c < D: inside the tile.
        unsafe { shared::store_f32(tile + 4 * (r * pitch + c), x) };
        i += threads;
    }
}

/// The kernel body, for storage `E` and head dimension padded to `D` (a multiple of 16);
/// `DQ = D/4` is the accumulator length per thread (spelled out: array lengths cannot be
/// computed from a generic parameter on stable Rust).
///
/// # Safety
/// `p` must describe valid tensors as the host's validation guarantees; launch with
/// `4·block_m` threads, `p.block_n` a multiple of 32, and `simt_shared_bytes(block_m, block_n, D)`
/// bytes of dynamic shared memory.
#[inline(always)]
pub unsafe fn flash_fwd_simt<E: Storage, const D: usize, const DQ: usize>(p: &AttnParams) {
    const { assert!(D % 16 == 0 && DQ * 4 == D) };
    let tid = thread_x();
    let lane = tid % 32;
    let block_m = block_dim_x() / TPR;
    let row = tid / TPR;
    let sub = tid % TPR;
    let (h, z) = (block_y(), block_z());
    // SAFETY: offsets are valid for every z of the grid (host).
    let seq = unsafe { SeqView::of_cached(p, z) };
    let m0 = block_x() * block_m;
    if m0 >= seq.len_q {
        return; // the whole block: this sequence is shorter than the longest one
    }
    // `max(1)`: the host never passes 0, and the compiler then needs no division-by-zero panic.
    let kv_h = h / p.group.max(1);
    let d = p.head_dim;
    let causal = p.causal != 0;
    let pitch_qk = D as u32 + SIMT_ROW_PAD;
    let q_tile = shared::base();
    let k_tile = q_tile + 4 * block_m * pitch_qk;
    let v_tile = k_tile + 4 * p.block_n * pitch_qk;

    // SAFETY: the tiles fit the launch's shared memory (host sizing).
    unsafe {
        load_tile::<E, D>(
            q_tile,
            pitch_qk,
            p.q,
            &seq,
            &p.q_strides,
            seq.q_start,
            h,
            m0,
            block_m,
            seq.len_q,
            d,
        )
    };

    let t = m0 + row; // this thread's query
    let row_end = (m0 + block_m).min(seq.len_q);
    let n_end = mask::key_end(row_end, seq.len_q, seq.len_k, causal);
    let free_end = mask::unmasked_end(m0, seq.len_q, seq.len_k, causal);
    let mut state = OnlineSoftmax::new();
    let mut acc = [0.0f32; DQ];
    let q_row = q_tile + 4 * row * pitch_qk;

    let mut n0 = 0;
    while n0 < n_end {
        sync_threads(); // the previous tile is no longer read
        // SAFETY: as above.
        unsafe {
            load_tile::<E, D>(
                k_tile,
                pitch_qk,
                p.k,
                &seq,
                &p.k_strides,
                seq.k_start,
                kv_h,
                n0,
                p.block_n,
                seq.len_k,
                d,
            );
            load_tile::<E, D>(
                v_tile,
                D as u32,
                p.v,
                &seq,
                &p.v_strides,
                seq.k_start,
                kv_h,
                n0,
                p.block_n,
                seq.len_k,
                d,
            );
        }
        sync_threads();
        let mut c0 = 0;
        while c0 < p.block_n && n0 + c0 < n_end {
            // Scores of keys n0+c0+sub+4i against this thread's query.
            let mut s = [0.0f32; SCORES];
            let mut x = 0;
            while x < D as u32 {
                // SAFETY: inside the Q and K tiles.
                let qv = unsafe { shared::load_f32x4(q_row + 4 * x) };
                for (i, si) in s.iter_mut().enumerate() {
                    let key = c0 + sub + TPR * i as u32;
                    // SAFETY: key < block_n, x + 3 < D.
                    let kv = unsafe { shared::load_f32x4(k_tile + 4 * (key * pitch_qk + x)) };
                    *si = fma(qv[3], kv[3], fma(qv[2], kv[2], fma(qv[1], kv[1], fma(qv[0], kv[0], *si))));
                }
                x += 4;
            }
            // Mask keys past the sequence, and (on the diagonal only) keys the query may not see.
            let needs_mask = n0 + c0 + SIMT_KEY_CHUNK > free_end.min(seq.len_k);
            let mut block_max = f32::NEG_INFINITY;
            for (i, si) in s.iter_mut().enumerate() {
                let j = n0 + c0 + sub + TPR * i as u32;
                if needs_mask && (j >= seq.len_k || (causal && !mask::visible(t, j, seq.len_q, seq.len_k))) {
                    *si = f32::NEG_INFINITY;
                }
                block_max = block_max.max(*si);
            }
            let step = state.step(shuffle::max4(block_max), p.scale_log2);
            for a in acc.iter_mut() {
                *a *= step.alpha;
            }
            let mut probs = [0.0f32; SCORES];
            let mut sum = 0.0;
            for (pi, &si) in probs.iter_mut().zip(&s) {
                *pi = step.prob_any(si, p.scale_log2);
                sum += *pi;
            }
            state.add(sum);
            // acc[c] += Σ_key p[key] · V[key][c], with p[key] fetched from the thread that has it.
            let row_lane0 = lane & !(TPR - 1);
            for (i, &pi) in probs.iter().enumerate() {
                for s4 in 0..TPR {
                    let pk = shuffle::idx(pi, row_lane0 | s4);
                    let key = c0 + s4 + TPR * i as u32;
                    let v_row = v_tile + 4 * key * D as u32;
                    let mut g = 0;
                    while g < D / 16 {
                        let col = 4 * sub + 16 * g as u32;
                        // SAFETY: key < block_n, col + 3 < D.
                        let vv = unsafe { shared::load_f32x4(v_row + 4 * col) };
                        for e in 0..4 {
                            acc[4 * g + e] = fma(pk, vv[e], acc[4 * g + e]);
                        }
                        g += 1;
                    }
                }
            }
            c0 += SIMT_KEY_CHUNK;
        }
        n0 += p.block_n;
    }

    // The row's normaliser is the sum of its four threads' partial sums.
    state.sum = shuffle::sum4(state.sum);
    let res = state.finish(p.scale_log2);
    if t < seq.len_q {
        let o_row = p.o + seq.offset(&p.o_strides, seq.q_start, t, h) * E::BYTES;
        let mut g = 0;
        while g < D / 16 {
            for e in 0..4 {
                let col = 4 * sub + 16 * g as u32 + e as u32;
                if col < d {
                    // SAFETY: t < len_q, col < d: inside O.
                    unsafe { E::store(o_row + col as u64 * E::BYTES, acc[4 * g + e] * res.inv_sum) };
                }
            }
            g += 1;
        }
        if sub == 0 && p.lse != 0 {
            let idx = seq.lse_index(p, h, t);
            // SAFETY: inside the log-sum-exp output (host sizing).
            unsafe { store_f32(p.lse + 4 * idx, res.lse) };
        }
    }
}

/// One exported entry per instance of [`crate::for_each_simt_instance!`] and storage type; its
/// name is [`crate::simt_kernel_name!`]'s, which is also the host's.
macro_rules! simt_entries {
    (() $(($d:literal, $dq:literal))*) => {
        $( simt_entries!(@one F16, "f16", $d, $dq);
           simt_entries!(@one Bf16, "bf16", $d, $dq);
           simt_entries!(@one F32, "f32", $d, $dq); )*
    };
    (@one $storage:ty, $dt:literal, $d:literal, $dq:literal) => {
        const _: () = {
            /// General flash-attention forward kernel (see the module docs).
            ///
            /// # Safety
            /// See [`flash_fwd_simt`].
            #[unsafe(export_name = crate::simt_kernel_name!($dt, $d))]
            pub unsafe extern "ptx-kernel" fn entry(p: AttnParams) {
                // SAFETY: forwarded contract.
                unsafe { flash_fwd_simt::<$storage, $d, $dq>(&p) }
            }
        };
    };
}

use super::arch::global::{Bf16, F16, F32};
crate::for_each_simt_instance!(simt_entries);
