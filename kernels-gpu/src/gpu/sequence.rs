//! Where a block's sequence lives: its tokens in the (possibly packed) Q/K/V/O tensors.

use super::arch::global::load_u32;
use crate::params::{AttnParams, lse_index};

/// One sequence's place in the tensors, as a block of the grid's `z` index sees it.
#[derive(Clone, Copy)]
pub struct SeqView {
    /// Batch index into the layouts (0 for packed variable-length input).
    pub batch: u64,
    /// First query token.
    pub q_start: u64,
    /// First key token.
    pub k_start: u64,
    /// Query tokens.
    pub len_q: u32,
    /// Key tokens.
    pub len_k: u32,
}

impl SeqView {
    /// Sequence `z` of the launch.
    ///
    /// # Safety
    /// With `p.cu_seqlens_q != 0`, both offset arrays must hold `z + 2` valid entries.
    /// `p.seqused_k` is not read: kernels that take K/V caches use [`SeqView::of_cached`].
    #[inline(always)]
    pub unsafe fn of(p: &AttnParams, z: u32) -> SeqView {
        if p.cu_seqlens_q == 0 {
            return SeqView { batch: z as u64, q_start: 0, k_start: 0, len_q: p.seqlen_q, len_k: p.seqlen_k };
        }
        let at = |base: u64, i: u32| {
            // SAFETY: caller's contract.
            unsafe { load_u32(base + 4 * i as u64) }
        };
        let (q0, q1) = (at(p.cu_seqlens_q, z), at(p.cu_seqlens_q, z + 1));
        let (k0, k1) = (at(p.cu_seqlens_k, z), at(p.cu_seqlens_k, z + 1));
        SeqView { batch: 0, q_start: q0 as u64, k_start: k0 as u64, len_q: q1 - q0, len_k: k1 - k0 }
    }

    /// [`SeqView::of`], and with `p.seqused_k != 0` (a K/V cache in a fixed-length batch) the
    /// sequence's key count read from there. A separate function because the loaded length
    /// stays in a register for the kernel's whole life (`p.seqlen_k` is re-read from the
    /// parameters instead): the tensor-core kernel's 128-row instances have no register to spare
    /// (ptxas spilled at d = 96), so only its decode instances and the general kernel read it.
    ///
    /// # Safety
    /// As [`SeqView::of`], and with `p.seqused_k != 0` it must hold `z + 1` lengths, each at
    /// most `p.seqlen_k`.
    #[inline(always)]
    pub unsafe fn of_cached(p: &AttnParams, z: u32) -> SeqView {
        // SAFETY: caller's contract.
        let mut seq = unsafe { SeqView::of(p, z) };
        if p.cu_seqlens_q == 0 && p.seqused_k != 0 {
            // SAFETY: caller's contract.
            seq.len_k = unsafe { load_u32(p.seqused_k + 4 * z as u64) };
        }
        seq
    }

    /// Element offset of `(token t of this sequence, head h)` in a tensor with `strides`
    /// (batch, seq, head), for a tensor whose tokens start at `start`.
    #[inline(always)]
    pub fn offset(&self, strides: &[u64; 3], start: u64, t: u32, h: u32) -> u64 {
        self.batch * strides[0] + (start + t as u64) * strides[1] + h as u64 * strides[2]
    }

    /// Index of the log-sum-exp of this sequence's query `t`, head `h`
    /// ([`crate::params::lse_index`]).
    #[inline(always)]
    pub fn lse_index(&self, p: &AttnParams, h: u32, t: u32) -> u64 {
        lse_index(self.batch, p.heads_q as u64, h as u64, p.lse_seq_stride as u64, self.q_start, t as u64)
    }
}
