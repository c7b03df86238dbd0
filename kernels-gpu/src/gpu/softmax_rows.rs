//! Row softmax of standard attention: `P = softmax(scale·S)` row by row, with the causal mask,
//! and the log-sum-exp of each row. One block per row: each thread folds its share of the row
//! into an [`OnlineSoftmax`] state, the states are merged across the block, and a second pass
//! writes the probabilities in the storage type.

use super::arch::global::{Bf16, F16, F32, Storage, store_f32};
use super::arch::shared;
use super::arch::shuffle;
use super::arch::thread::{block_x, sync_threads, thread_x};
use crate::mask;
use crate::params::{SOFTMAX_THREADS, SoftmaxParams};
use crate::softmax::OnlineSoftmax;

const WARPS: u32 = SOFTMAX_THREADS / 32;

/// Merges one state per thread into the block's state (every thread gets the result).
#[inline(always)]
fn block_merge(mut st: OnlineSoftmax, scale_log2: f32, scratch: u32) -> OnlineSoftmax {
    let tid = thread_x();
    let mut m = 16;
    while m > 0 {
        let other = OnlineSoftmax { max: shuffle::xor(st.max, m), sum: shuffle::xor(st.sum, m) };
        st.merge(other, scale_log2);
        m >>= 1;
    }
    if tid % 32 == 0 {
        // SAFETY: 2 floats per warp inside the scratch area.
        unsafe {
            shared::store_f32(scratch + 8 * (tid / 32), st.max);
            shared::store_f32(scratch + 8 * (tid / 32) + 4, st.sum);
        }
    }
    sync_threads();
    let mut all = OnlineSoftmax::new();
    for w in 0..WARPS {
        // SAFETY: written above, before the barrier.
        let other = unsafe {
            OnlineSoftmax {
                max: shared::load_f32(scratch + 8 * w),
                sum: shared::load_f32(scratch + 8 * w + 4),
            }
        };
        all.merge(other, scale_log2);
    }
    all
}

/// # Safety
/// `p` must describe valid buffers; launch `p.rows` blocks of [`SOFTMAX_THREADS`] threads with
/// [`crate::params::SOFTMAX_SHARED_BYTES`] of dynamic shared memory.
#[inline(always)]
unsafe fn softmax_rows<E: Storage>(p: &SoftmaxParams) {
    let r = block_x();
    let tid = thread_x();
    // `max(1)`: never 0 from the host (no rows, no launch); it spares a panic path.
    let len_q = p.len_q.max(1);
    let (head, t) = (r / len_q, r % len_q);
    let s_row = p.s + 4 * r as u64 * p.len_k as u64;
    let p_row = p.p + E::BYTES * r as u64 * p.len_k as u64;
    let causal = p.causal != 0;
    let score = |j: u32| {
        if causal && !mask::visible(t, j, p.len_q, p.len_k) {
            f32::NEG_INFINITY
        } else {
            // SAFETY: j < len_k: inside the row.
            unsafe { F32::load(s_row + 4 * j as u64) }
        }
    };
    let mut st = OnlineSoftmax::new();
    let mut j = tid;
    while j < p.len_k {
        let s = score(j);
        let step = st.step(s, p.scale_log2);
        st.add(step.prob_any(s, p.scale_log2));
        j += SOFTMAX_THREADS;
    }
    let st = block_merge(st, p.scale_log2, shared::base());
    let res = st.finish(p.scale_log2);
    let step = st.current(p.scale_log2);
    let mut j = tid;
    while j < p.len_k {
        let prob = step.prob_any(score(j), p.scale_log2) * res.inv_sum;
        // SAFETY: j < len_k: inside the row.
        unsafe { E::store(p_row + E::BYTES * j as u64, prob) };
        j += SOFTMAX_THREADS;
    }
    if tid == 0 && p.lse != 0 {
        let idx = crate::params::lse_index(0, 0, head as u64, p.lse_head_stride as u64, 0, t as u64);
        // SAFETY: inside the log-sum-exp output (host sizing).
        unsafe { store_f32(p.lse + 4 * idx, res.lse) };
    }
}

macro_rules! softmax_kernels {
    ($($name:ident => $storage:ty;)*) => {$(
        /// Row softmax of standard attention (see the module docs).
        ///
        /// # Safety
        /// See `softmax_rows`.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: SoftmaxParams) {
            // SAFETY: forwarded contract.
            unsafe { softmax_rows::<$storage>(&p) }
        }
    )*};
}

softmax_kernels! {
    softmax_rows_f16 => F16;
    softmax_rows_bf16 => Bf16;
    softmax_rows_f32 => F32;
}
