//! The GPU entry point: [`Device::attention`], its tensors, and the launch plan it returns.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use flashattn_kernels::params::AttnParams;

use crate::buffer::{DeviceBuffer, Element};
use crate::device::{Device, LaunchShape};
use crate::error::Result;
use crate::plan::Plan;
use crate::problem::{AttentionOptions, Layout, Method, Problem, VarLen};

/// A read-only tensor in device memory: a buffer and the layout that addresses it.
#[derive(Clone, Copy, Debug)]
pub struct DeviceTensor<'a, T> {
    /// The storage.
    pub buf: &'a DeviceBuffer<T>,
    /// Shape and strides.
    pub layout: Layout,
}

/// A writable tensor in device memory.
#[derive(Debug)]
pub struct DeviceTensorMut<'a, T> {
    /// The storage.
    pub buf: &'a mut DeviceBuffer<T>,
    /// Shape and strides.
    pub layout: Layout,
}

impl<T> DeviceBuffer<T> {
    /// This buffer seen through `layout`.
    pub fn view(&self, layout: Layout) -> DeviceTensor<'_, T> {
        DeviceTensor { buf: self, layout }
    }

    /// This buffer seen through `layout`, writable.
    pub fn view_mut(&mut self, layout: Layout) -> DeviceTensorMut<'_, T> {
        DeviceTensorMut { buf: self, layout }
    }
}

impl Device {
    /// Validates the call and returns the plan it would run, without running anything: the
    /// pure [`crate::plan::plan`] with this device's properties.
    pub fn plan<T: Element>(&self, problem: &Problem, opts: &AttentionOptions) -> Result<Plan> {
        Ok(crate::plan::plan(self.props(), T::DTYPE, problem, opts)?)
    }

    /// Attention on the GPU: `out = softmax(scale·Q·Kᵀ [+ mask])·V`, and optionally the per-row
    /// log-sum-exp (f32, `(batch, heads, seqlen_q)`, or `(heads, total_q)` for varlen).
    ///
    /// Q, K, V and O are `(batch, seqlen, heads, head_dim)` tensors with any strides (head dim
    /// contiguous); K/V may have fewer heads than Q (grouped-query attention). Everything is
    /// checked before any work; on error nothing is written. The work is queued on the device's
    /// stream: call [`Device::synchronize`] (or download) to wait for it.
    pub fn attention<T: Element>(
        &self,
        q: DeviceTensor<'_, T>,
        k: DeviceTensor<'_, T>,
        v: DeviceTensor<'_, T>,
        out: DeviceTensorMut<'_, T>,
        lse: Option<&mut DeviceBuffer<f32>>,
        opts: &AttentionOptions,
    ) -> Result<Plan> {
        if let Some(l) = &lse {
            self.owns("lse", l)?;
        }
        let problem = self.forward_problem(&q, &k, &v, &out, opts)?;
        problem.check_lse_len(lse.as_ref().map(|l| l.len()))?;
        let io = Io {
            q: q.buf.device_address(),
            k: k.buf.device_address(),
            v: v.buf.device_address(),
            o: out.buf.device_address(),
            lse: lse.map_or(0, |l| l.device_address()),
            partial: None,
            residuals: None,
        };
        let plan = crate::plan::plan(self.props(), T::DTYPE, &problem, opts)?;
        self.run_forward(T::DTYPE, &problem, io, &plan)?;
        Ok(plan)
    }

    /// A forward call's problem, once its tensors are known to be this device's.
    pub(crate) fn forward_problem<T: Element>(
        &self,
        q: &DeviceTensor<'_, T>,
        k: &DeviceTensor<'_, T>,
        v: &DeviceTensor<'_, T>,
        out: &DeviceTensorMut<'_, T>,
        opts: &AttentionOptions,
    ) -> Result<Problem> {
        for (what, buf) in [("q", q.buf), ("k", k.buf), ("v", v.buf)] {
            self.owns(what, buf)?;
        }
        self.owns("out", out.buf)?;
        Ok(Problem::new(
            q.layout,
            k.layout,
            v.layout,
            out.layout,
            [q.buf.len(), k.buf.len(), v.buf.len(), out.buf.len()],
            opts,
        )?)
    }

    /// Queues a planned forward on the device's stream: standard attention or the kernels
    /// (nothing for an empty plan).
    pub(crate) fn run_forward(
        &self,
        dtype: crate::buffer::DType,
        problem: &Problem,
        io: Io,
        plan: &Plan,
    ) -> Result<()> {
        if plan.launches.is_empty() {
            return Ok(());
        }
        match plan.method {
            Method::Standard => crate::standard::run(self, dtype, problem, io, plan),
            _ => self.run_kernels(self.stream(), dtype, problem, io, plan),
        }
    }

    /// Queues a planned kernel method (not `Standard`) on `stream`: the Hopper kernel with its
    /// tensor maps, or a flash plan's kernels.
    pub(crate) fn run_kernels(
        &self,
        stream: &Arc<CudaStream>,
        dtype: crate::buffer::DType,
        problem: &Problem,
        io: Io,
        plan: &Plan,
    ) -> Result<()> {
        match plan.method {
            Method::FlashHopper => self.run_wgmma(stream, dtype, problem, io, plan),
            _ => self.run_flash(stream, problem, io, plan),
        }
    }

    /// Queues a flash plan's kernels on `stream` (the device's own, or a caller's), with the
    /// offsets and split-KV scratch they need allocated in that stream's order.
    pub(crate) fn run_flash(
        &self,
        stream: &Arc<CudaStream>,
        problem: &Problem,
        io: Io,
        plan: &Plan,
    ) -> Result<()> {
        // The plan may have packed the query heads of each K/V group into rows: the kernels
        // then see that problem (the same memory, re-addressed).
        let packed = if plan.gqa_packed { problem.gqa_packed() } else { None };
        let problem = packed.as_ref().unwrap_or(problem);
        let offsets = match problem.varlen() {
            Some(vl) => Some(self.upload_offsets(stream, vl)?),
            None => None,
        };
        let addresses = offsets.as_ref().map(|o| (o.0.device_address(), o.1.device_address()));
        let block_n = plan.tiles.map_or(0, |t| t.1 as u32);
        let mut params = attn_params(problem, io, addresses, block_n);
        // ALiBi slopes, read by the masked instances (freed in stream order after them).
        let slopes = self.upload_slopes(stream, problem)?;
        params.alibi_slopes = slopes.as_ref().map_or(0, |b| b.device_address());
        // A paged cache's page table, read by the decode instances (freed in stream order too);
        // an entry's keys are then its pages' capacity (or its `cache_seqlens`).
        let page_table = match problem.block_table() {
            Some(t) => Some((self.page_table_on(stream, t)?, t)),
            None => None,
        };
        if let Some(((address, _buf), t)) = &page_table {
            params.block_table = *address;
            params.pages_per_entry = t.pages_per_entry as u32;
            params.page_shift = t.page_size.trailing_zeros();
            params.seqlen_k = (t.pages_per_entry * t.page_size) as u32;
        }
        // A K/V cache's per-entry lengths, read by the kernels (freed in stream order after
        // them); a single entry's length goes in the parameters instead (no copy).
        let cache_lens =
            match problem.cache_seqlens().and_then(|lens| cache_lengths_in_params(&mut params, lens)) {
                Some(lens) => Some(self.upload_u32(stream, lens)?),
                None => None,
            };
        params.seqused_k = cache_lens.as_ref().map_or(0, |b| b.device_address());
        if io.partial.is_some() {
            // A step of context-parallel attention: the forward kernel alone, its `splits`
            // (at least 2: the tensor-core kernel writes partial results only when split) into
            // consecutive slots from the caller's; the caller merges them.
            params.splits = plan.splits as u32;
            let Some(main) = plan.main_launch() else { return Ok(()) };
            // SAFETY: as below; the partial buffers hold `plan.splits` slots of `partial.rows`
            // rows from the given addresses (the caller's sizing).
            return unsafe { self.launch_each(stream, std::slice::from_ref(main), &params) };
        }
        if plan.splits <= 1 {
            // SAFETY: `params` is the forward kernel's parameter struct, built from validated
            // layouts whose buffers hold every addressed element; the offset buffers are freed in
            // stream order, after the kernel.
            return unsafe { self.launch_plan(stream, plan, &params) };
        }
        // Split-KV: the partial outputs and log-sum-exps, in the device's kept scratch.
        let rows = problem.lse_len() as u64;
        let bytes = crate::plan::partial_bytes(problem, plan.splits);
        let what = || format!("split-KV partial results ({} splits × {rows} rows)", plan.splits);
        self.with_split_scratch(stream, bytes, plan.scratch_bytes, what, |address| {
            params.splits = plan.splits as u32;
            params.partial_rows = rows;
            // Outputs first: their rows (head dims of whole 16-byte chunks) stay 16-byte aligned.
            params.partial_o = address;
            params.partial_lse = address + 4 * plan.splits as u64 * rows * problem.head_dim() as u64;
            // SAFETY: as above, for the forward kernel and the combine, with partial buffers of
            // at least `bytes` (sized for `plan.splits`), which no other call's kernels use until
            // these have run (one stream; the scratch is locked while they are queued).
            unsafe { self.launch_plan(stream, plan, &params) }
        })
    }

    /// Launches every kernel of `plan` on `stream`, in order, each with `params`.
    ///
    /// # Safety
    /// As [`Device::launch_on`], for every kernel of the plan.
    pub(crate) unsafe fn launch_plan<P: Copy>(
        &self,
        stream: &Arc<CudaStream>,
        plan: &Plan,
        params: &P,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.launch_each(stream, &plan.launches, params) }
    }

    /// Launches each kernel of `launches` on `stream`, in order, each with `params` (library
    /// calls, which have no kernel, are skipped).
    ///
    /// # Safety
    /// As [`Device::launch_on`], for every kernel.
    pub(crate) unsafe fn launch_each<P: Copy>(
        &self,
        stream: &Arc<CudaStream>,
        launches: &[crate::plan::Launch],
        params: &P,
    ) -> Result<()> {
        for launch in launches {
            let Some(kernel) = launch.kernel else { continue };
            let shape = LaunchShape {
                grid: launch.grid,
                block: (launch.threads, 1, 1),
                shared_bytes: launch.shared_bytes,
            };
            // SAFETY: the caller's contract; a launch the plan marks `after_previous` (the
            // combine on sm_90) waits for the grid before it in the kernel.
            unsafe { self.launch_on(stream.cu_stream(), kernel, shape, params, launch.after_previous) }?;
        }
        Ok(())
    }

    /// Copies a problem's ALiBi slopes (when it has any) to the device, in `stream`'s order.
    pub(crate) fn upload_slopes(
        &self,
        stream: &Arc<CudaStream>,
        problem: &Problem,
    ) -> Result<Option<DeviceBuffer<u32>>> {
        let Some(slopes) = problem.alibi_slopes() else { return Ok(None) };
        let bits: Vec<u32> = slopes.iter().map(|s| s.to_bits()).collect();
        Ok(Some(self.upload_u32(stream, &bits)?))
    }

    /// Copies variable-length offsets to the device, in `stream`'s order.
    pub(crate) fn upload_offsets(
        &self,
        stream: &Arc<CudaStream>,
        vl: &VarLen,
    ) -> Result<(DeviceBuffer<u32>, DeviceBuffer<u32>)> {
        Ok((self.upload_u32(stream, &vl.cu_seqlens_q)?, self.upload_u32(stream, &vl.cu_seqlens_k)?))
    }
}

/// Device addresses of one call's tensors.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Io {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub lse: u64,
    /// Where the forward kernel writes its results in f32 instead of `o` and `lse` (and where the
    /// combine kernel reads them): a step of context-parallel attention.
    pub partial: Option<PartialRows>,
    /// A training forward ([`crate::plan::plan_for_backward`]): where its kernel writes O's
    /// residual (O's layout) and the rows' probability offsets and sums.
    pub residuals: Option<(u64, u64)>,
}

/// f32 partial results addressed by log-sum-exp row (`lse_index` with `lse_seq_stride`): the
/// forward writes one slot, the combine merges `splits` consecutive slots of `rows` rows each.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PartialRows {
    /// The slot's first output row (f32, `head_dim` per row).
    pub o: u64,
    /// The slot's first log-sum-exp.
    pub lse: u64,
    /// Rows per slot.
    pub rows: u64,
    /// Log-sum-exp rows per (batch, head), for partial results, `lse` and the combine alike: the
    /// full shard's query length when the problem is a part of its rows (and the addresses then
    /// start at the part's first row).
    pub lse_seq_stride: u32,
    /// The Hopper kernel's running merge (see [`flashattn_kernels::params::WgmmaParams`]): whether
    /// the slot holds earlier steps' result for these rows, and how many leading rows of the
    /// launch are final (written to `o` and `lse` instead).
    pub merge: bool,
    /// Leading rows of the launch that are final.
    pub final_rows: u32,
}

pub(crate) fn strides(l: &Layout) -> [u64; 3] {
    [l.batch_stride as u64, l.seq_stride as u64, l.head_stride as u64]
}

/// The kernels' parameter struct for a validated problem (whose counts the validation and the
/// planner keep within 32 bits).
pub(crate) fn attn_params(
    problem: &Problem,
    io: Io,
    offsets: Option<(u64, u64)>,
    block_n: u32,
) -> AttnParams {
    let mut params = AttnParams {
        q: io.q,
        k: io.k,
        v: io.v,
        o: io.o,
        lse: io.lse,
        cu_seqlens_q: offsets.map_or(0, |o| o.0),
        cu_seqlens_k: offsets.map_or(0, |o| o.1),
        q_strides: strides(problem.q()),
        k_strides: strides(problem.k()),
        v_strides: strides(problem.v()),
        o_strides: strides(problem.o()),
        seqlen_q: problem.q().seqlen as u32,
        seqlen_k: problem.k().seqlen as u32,
        heads_q: problem.q().heads as u32,
        group: problem.group_size() as u32,
        head_dim: problem.head_dim() as u32,
        // With score modifiers the recurrence runs on logits (`scale` goes in `logit_scale`).
        scale_log2: if problem.has_score_mod() {
            flashattn_kernels::math::LOG2_E
        } else {
            problem.scale_log2()
        },
        causal: problem.causal() as u32,
        window_left: window_bound(problem.window().left),
        window_right: window_bound(problem.window().right),
        block_n,
        lse_seq_stride: problem.lse_seq_stride() as u32,
        splits: 1,
        partial_o: io.partial.map_or(0, |p| p.o),
        partial_lse: io.partial.map_or(0, |p| p.lse),
        partial_rows: io.partial.map_or(0, |p| p.rows),
        seqused_k: 0,
        block_table: 0,
        pages_per_entry: 0,
        page_shift: 0,
        // (Set by the caller, which uploads the slopes.)
        alibi_slopes: 0,
        softcap: if problem.has_score_mod() { problem.score_mod(0).softcap } else { 0.0 },
        logit_scale: if problem.has_score_mod() { problem.scale() } else { 0.0 },
    };
    if let Some(p) = io.partial {
        params.lse_seq_stride = p.lse_seq_stride;
    }
    params
}

/// A K/V cache's per-entry lengths (`cache_seqlens`, validated: each at most the cache's capacity
/// `params.seqlen_k`) as the kernels take them. The kernels that read the lengths
/// (the kernels' `SeqView::of_cached`) take an entry's keys from `seqused_k` when
/// it is set and from `seqlen_k` otherwise; so a single entry (B = 1) in a fixed-length batch is
/// passed as `seqlen_k` itself, and nothing is copied to the device before the launch (a
/// host-to-device copy that cost 10–34% of 15–30 µs decode calls). Returns the lengths that
/// still need a device copy (for `seqused_k`), or `None` when the parameters hold them. Call it
/// after anything else that sets `seqlen_k` (a paged cache's capacity).
pub(crate) fn cache_lengths_in_params<'a>(params: &mut AttnParams, lens: &'a [u32]) -> Option<&'a [u32]> {
    match lens {
        [len] if params.cu_seqlens_q == 0 => {
            debug_assert!(*len <= params.seqlen_k, "a cache length past the capacity");
            params.seqlen_k = *len;
            None
        }
        _ => Some(lens),
    }
}

/// A window side as the kernels take it: [`flashattn_kernels::mask::UNBOUNDED`] for none (a
/// bound that large sees every key anyway).
fn window_bound(side: Option<usize>) -> u32 {
    use flashattn_kernels::mask::UNBOUNDED;
    side.map_or(UNBOUNDED, |b| b.min(UNBOUNDED as usize - 1) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cache_length_goes_in_the_parameters() {
        let base = AttnParams { seqlen_k: 1000, ..Default::default() };
        for len in [0, 1, 700, 1000] {
            let mut params = base;
            assert_eq!(cache_lengths_in_params(&mut params, &[len]), None);
            assert_eq!(params, AttnParams { seqlen_k: len, ..base }, "only the key count changes");
        }
    }

    #[test]
    fn several_cache_lengths_are_copied() {
        let base = AttnParams { seqlen_k: 1000, ..Default::default() };
        let lens = [0, 64, 1000];
        let mut params = base;
        assert_eq!(cache_lengths_in_params(&mut params, &lens), Some(&lens[..]));
        assert_eq!(params, base, "the parameters are left alone");
        // Variable-length input (never given lengths: validation refuses it) keeps the copy.
        let varlen = AttnParams { cu_seqlens_q: 0x1000, ..base };
        let mut params = varlen;
        assert_eq!(cache_lengths_in_params(&mut params, &[5]), Some(&[5][..]));
        assert_eq!(params, varlen);
    }
}
