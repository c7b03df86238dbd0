//! The GPU backward pass: [`Device::attention_backward`].

use std::sync::Arc;

use cudarc::driver::CudaStream;
use flashattn_kernels::params::BwdParams;

use crate::attention::{DeviceTensor, DeviceTensorMut, Io, attn_params, strides};
use crate::buffer::{DeviceBuffer, Element};
use crate::device::Device;
use crate::error::{InvalidInput, Result};
use crate::plan::Plan;
use crate::problem::{AttentionOptions, Layout, Problem};

/// The gradients a backward call writes, each laid out like its input (any strides that do not
/// overlap).
#[derive(Debug)]
pub struct DeviceGradients<'a, T> {
    /// ∂L/∂Q, the shape of Q.
    pub dq: DeviceTensorMut<'a, T>,
    /// ∂L/∂K, the shape of K.
    pub dk: DeviceTensorMut<'a, T>,
    /// ∂L/∂V, the shape of V.
    pub dv: DeviceTensorMut<'a, T>,
}

impl Device {
    /// The backward pass of attention on the GPU: from Q, K, V, the forward's output O and
    /// log-sum-exp (`lse`, as [`Device::attention`] writes it), and the upstream gradient dO
    /// (laid out like O, any strides), writes dQ, dK and dV.
    ///
    /// Every feature of the forward except split-KV and K/V caches (the CPU backward has
    /// those): causal (bottom-right), sliding windows, softcaps and ALiBi, varlen with empty
    /// sequences, grouped-query attention (dK and dV summed over the query heads
    /// of each K/V head), `Nq ≠ Nk`, any strides with 16-byte rows, f16 and bf16, head dims that
    /// are multiples of 8 up to 256. `opts` must be the forward's. Rows that see no key get zero
    /// gradients; keys no query sees get zero dK and dV.
    ///
    /// FlashAttention-2's algorithm (`kernels-gpu/src/gpu/flash_bwd.rs`), except that
    /// `D = Σ_j P_j·dP_j` comes from a first pass over the keys rather than from
    /// `rowsum(dO ∘ O)` (see [`flashattn_kernels::softmax::GradRow`]); `o` is validated but its
    /// values are not read. dQ accumulates in f32 with atomic adds, so its last bits may differ
    /// from run to run, unless `opts.deterministic` fixes their order (bit-identical results, at
    /// a cost in time). Extra device memory: `4·(d + 4)` bytes per query row and head
    /// ([`Plan::scratch_bytes`]), and 4 bytes per 64-row query tile in deterministic mode. Everything is checked before any work; on error nothing is
    /// written. The work is queued on the device's stream.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_backward<T: Element>(
        &self,
        q: DeviceTensor<'_, T>,
        k: DeviceTensor<'_, T>,
        v: DeviceTensor<'_, T>,
        o: DeviceTensor<'_, T>,
        lse: &DeviceBuffer<f32>,
        d_o: DeviceTensor<'_, T>,
        grads: DeviceGradients<'_, T>,
        opts: &AttentionOptions,
    ) -> Result<Plan> {
        self.backward_checked(q, k, v, o, lse, d_o, grads, opts, None, None)
    }

    /// [`Device::attention_backward`]'s checks and launches; with `forward` (a
    /// [`crate::SavedForBackward`]'s problem) the call's problem must be it, and `residuals`
    /// are the training forward's.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn backward_checked<T: Element>(
        &self,
        q: DeviceTensor<'_, T>,
        k: DeviceTensor<'_, T>,
        v: DeviceTensor<'_, T>,
        o: DeviceTensor<'_, T>,
        lse: &DeviceBuffer<f32>,
        d_o: DeviceTensor<'_, T>,
        grads: DeviceGradients<'_, T>,
        opts: &AttentionOptions,
        forward: Option<&Problem>,
        residuals: Option<BwdResiduals>,
    ) -> Result<Plan> {
        for (what, buf) in [("q", q.buf), ("k", k.buf), ("v", v.buf), ("o", o.buf), ("d_o", d_o.buf)] {
            self.owns(what, buf)?;
        }
        self.owns("lse", lse)?;
        let DeviceGradients { dq, dk, dv } = grads;
        for (what, buf) in [("dq", &*dq.buf), ("dk", &*dk.buf), ("dv", &*dv.buf)] {
            self.owns(what, buf)?;
        }
        let problem = Problem::new(
            q.layout,
            k.layout,
            v.layout,
            o.layout,
            [q.buf.len(), k.buf.len(), v.buf.len(), o.buf.len()],
            opts,
        )?;
        if forward.is_some_and(|f| *f != problem) {
            return Err(InvalidInput::NotSaved {
                why: "is from a forward of another problem (its layouts or options differ)",
            }
            .into());
        }
        problem.check_lse_len(Some(lse.len()))?;
        problem.check_backward(
            (&d_o.layout, d_o.buf.len()),
            [
                ("dq", &dq.layout, dq.buf.len()),
                ("dk", &dk.layout, dk.buf.len()),
                ("dv", &dv.layout, dv.buf.len()),
            ],
        )?;
        let layouts = [("d_o", &d_o.layout), ("dq", &dq.layout), ("dk", &dk.layout), ("dv", &dv.layout)];
        let plan = match residuals {
            Some(_) => {
                crate::plan::plan_backward_from_residuals(self.props(), T::DTYPE, &problem, opts, layouts)?
            }
            None => crate::plan::plan_backward(self.props(), T::DTYPE, &problem, opts, layouts)?,
        };
        let io = BwdIo {
            q: q.buf.device_address(),
            k: k.buf.device_address(),
            v: v.buf.device_address(),
            lse: lse.device_address(),
            d_o: (d_o.buf.device_address(), d_o.layout),
            dq: (dq.buf.device_address(), dq.layout),
            dk: (dk.buf.device_address(), dk.layout),
            dv: (dv.buf.device_address(), dv.layout),
            residuals: residuals.filter(|_| plan.residuals).map(|r| (o.buf.device_address(), r.o_lo, r.rows)),
        };
        self.run_backward(self.stream(), &problem, &plan, &io, opts.deterministic)?;
        Ok(plan)
    }
}

/// A training forward's residuals for the backward: the device addresses of O's residual and
/// the rows' statistics ([`crate::SavedForBackward`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct BwdResiduals {
    pub o_lo: u64,
    pub rows: u64,
}

/// Device addresses of one backward call's tensors, with the layouts of those not in the
/// [`Problem`] (dO and the gradients).
#[derive(Clone, Copy, Debug)]
pub(crate) struct BwdIo {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub lse: u64,
    pub d_o: (u64, Layout),
    pub dq: (u64, Layout),
    pub dk: (u64, Layout),
    pub dv: (u64, Layout),
    /// With a training forward's residuals (the plan's preprocessing kernel reads them): O,
    /// O's residual (O's layout) and the rows' statistics.
    pub residuals: Option<(u64, u64, u64)>,
}

impl Device {
    /// Queues a validated backward plan's kernels on `stream` (the device's own, or a caller's),
    /// with the offsets and scratch they need allocated and freed in that stream's order.
    pub(crate) fn run_backward(
        &self,
        stream: &Arc<CudaStream>,
        problem: &Problem,
        plan: &Plan,
        io: &BwdIo,
        deterministic: bool,
    ) -> Result<()> {
        if plan.launches.is_empty() {
            return Ok(());
        }
        let offsets = match problem.varlen() {
            Some(vl) => Some(self.upload_offsets(stream, vl)?),
            None => None,
        };
        let addresses = offsets.as_ref().map(|o| (o.0.device_address(), o.1.device_address()));
        // The kernels read dO where the forward's parameters hold O.
        let attn_io =
            Io { q: io.q, k: io.k, v: io.v, o: io.d_o.0, lse: io.lse, partial: None, residuals: None };
        let mut attn = attn_params(problem, attn_io, addresses, plan.tiles.map_or(0, |t| t.1 as u32));
        attn.o_strides = strides(&io.d_o.1);
        let slopes = self.upload_slopes(stream, problem)?;
        attn.alibi_slopes = slopes.as_ref().map_or(0, |b| b.device_address());
        let rows = problem.lse_len() as u64;
        attn.partial_rows = rows;
        let acc_bytes = 4 * rows * problem.head_dim() as u64;
        let tile_counters = crate::plan::backward_plan_tile_counters(plan, problem);
        let scratch_bytes = crate::plan::backward_scratch_bytes(problem, deterministic, tile_counters);
        let scratch = self.alloc_scratch_on(stream, scratch_bytes, plan.scratch_bytes, || {
            format!("the backward's f32 dQ accumulator and row statistics ({rows} rows)")
        })?;
        let q_tiles = problem.max_lens().0.div_ceil(flashattn_kernels::params::BWD_BLOCK_M as usize) as u32;
        // The main kernel's Q and dO tensor maps (sm_90a), freed in stream order after it.
        let maps = self.backward_tensor_maps(stream, plan, (io.q, problem.q()), (io.d_o.0, &io.d_o.1))?;
        let params = BwdParams {
            attn,
            dq: io.dq.0,
            dk: io.dk.0,
            dv: io.dv.0,
            dq_strides: strides(&io.dq.1),
            dk_strides: strides(&io.dk.1),
            dv_strides: strides(&io.dv.1),
            // The accumulator first: its rows (d = 8k floats) stay 16-byte aligned.
            dq_acc: scratch.device_address(),
            stats: scratch.device_address() + acc_bytes,
            scale: problem.scale(),
            q_tiles,
            // The main kernel's grid as the plan laid it out.
            key_major: crate::plan::backward_plan_key_major(plan, problem),
            kv_heads: problem.k().heads as u32,
            // After the accumulator and the 16-byte statistics rows.
            locks: if deterministic { scratch.device_address() + acc_bytes + 16 * rows } else { 0 },
            // After the turn counters, if any.
            dq_ready: if tile_counters {
                let locks_bytes = if deterministic { 4 * crate::plan::backward_locks(problem) } else { 0 };
                scratch.device_address() + acc_bytes + 16 * rows + locks_bytes
            } else {
                0
            },
            residual_rows: io.residuals.map_or(0, |r| r.2),
            o: io.residuals.map_or(0, |r| r.0),
            o_lo: io.residuals.map_or(0, |r| r.1),
            o_strides: strides(problem.o()),
            maps: maps.as_ref().map_or(0, |m| m.device_address()),
        };
        // SAFETY: `params` is the backward kernels' parameter struct, built from validated
        // layouts whose buffers hold every addressed element, with scratch sized for the
        // problem's log-sum-exp rows. The scratch and offset buffers are freed in stream order,
        // after the kernels.
        unsafe { self.launch_plan(stream, plan, &params) }?;
        drop(scratch);
        drop(maps);
        drop(offsets);
        drop(slopes);
        Ok(())
    }
}
