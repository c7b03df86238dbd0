//! What a training forward keeps for its backward: [`SavedForBackward`], written by
//! [`Device::attention_for_backward`] and read by [`Device::attention_backward_saved`].
//!
//! The backward needs, per query row, `D = Σ_j P_j·dP_j` and the probabilities' normaliser. From
//! the log-sum-exp alone it gets them by a pass over the row's keys (two more matrix products a
//! score: a quarter of the backward's time), because `rowsum(dO ∘ O)` with O rounded to the
//! storage type, or an f32 log-sum-exp in the thousands, is off by many times the gradient rule's
//! bound on nearly one-hot and uniform rows (`kernels-gpu/NOTES.md`, "Backward"). A training
//! forward on the Hopper kernel keeps instead what makes `D` exact from O: its probabilities in
//! the two-step form `2^((s − m)·c)` (a row's largest score exactly 1, so that a row whose other
//! probabilities round away has `O` exactly that key's value), O's residual
//! `O_lo = round(O_f32 − O)` in the storage type, and each row's probability offset and sum. The
//! backward then takes `D = dO·O + dO·O_lo` on tensor cores, in the instruction and order in
//! which it forms `dP` — so such a row has `dS = 0` exactly, as standard attention does — and
//! recomputes each probability as the forward formed it. (Emulated on the CPU before the
//! kernels: 0 failures of the gradient rule in 1000 cases of each strategy and dtype,
//! `kernels-gpu/NOTES.md` b18.)

use crate::attention::{DeviceTensor, DeviceTensorMut, Io};
use crate::backward::{BwdResiduals, DeviceGradients};
use crate::buffer::{DeviceBuffer, Element};
use crate::device::Device;
use crate::error::{InvalidInput, Result};
use crate::plan::Plan;
use crate::problem::{AttentionOptions, Layout, Problem};

/// The state a training forward keeps for the GPU backward: the log-sum-exp and, where the
/// forward's kernel writes them (the Hopper kernel's training instances: f16/bf16, head dims up
/// to 256, up to 128 with windows and score modifiers), O's residual and each row's probability
/// offset and sum
/// (module docs). Memory: the log-sum-exp, 8 bytes a row beside it, and one O-sized tensor.
///
/// ```no_run
/// use flashattn::{AttentionOptions, Device, DeviceGradients, Layout, bf16};
/// # fn main() -> Result<(), flashattn::Error> {
/// let dev = Device::new(0)?;
/// let l = Layout::bshd(2, 4096, 16, 128);
/// let n = l.required_len().unwrap_or(0);
/// let (q, k, v) = (dev.alloc::<bf16>(n)?, dev.alloc::<bf16>(n)?, dev.alloc::<bf16>(n)?);
/// let mut out = dev.alloc::<bf16>(n)?;
/// let opts = AttentionOptions { causal: true, ..Default::default() };
/// let mut saved = dev.alloc_saved::<bf16>(l, 2 * 16 * 4096)?;
/// dev.attention_for_backward(q.view(l), k.view(l), v.view(l), out.view_mut(l), &mut saved, &opts)?;
/// let d_o = dev.alloc::<bf16>(n)?;
/// let (mut dq, mut dk, mut dv) = (dev.alloc::<bf16>(n)?, dev.alloc::<bf16>(n)?, dev.alloc::<bf16>(n)?);
/// let grads = DeviceGradients { dq: dq.view_mut(l), dk: dk.view_mut(l), dv: dv.view_mut(l) };
/// let plan = dev.attention_backward_saved(q.view(l), k.view(l), v.view(l), out.view(l), &saved, d_o.view(l), grads, &opts)?;
/// println!("{plan}"); // `plan.residuals`: whether the backward skipped its pass over the keys
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct SavedForBackward<T> {
    lse: DeviceBuffer<f32>,
    /// O's residual, with O's layout.
    o_lo: DeviceBuffer<T>,
    /// Two f32 a log-sum-exp row: the probability offset and the row sum.
    rows: DeviceBuffer<f32>,
    /// The problem of the last forward that wrote this state, and whether it wrote the
    /// residuals; `None` before any (or after one that failed).
    kept: Option<(Problem, bool)>,
}

impl<T> SavedForBackward<T> {
    /// The log-sum-exp the forward wrote (f32, `(batch, heads, seqlen_q)`, or `(heads,
    /// total_q)` for varlen), as [`Device::attention`] writes it.
    pub fn lse(&self) -> &DeviceBuffer<f32> {
        &self.lse
    }

    /// Whether the last forward kept the residuals, so that a backward of its problem skips the
    /// pass over the keys (false: no forward yet, or its kernel keeps the log-sum-exp alone).
    pub fn has_residuals(&self) -> bool {
        self.kept.as_ref().is_some_and(|k| k.1)
    }

    /// Checks the buffers against a problem's sizes.
    fn check_sizes(&self, problem: &Problem) -> std::result::Result<(), InvalidInput> {
        problem.check_lse_len(Some(self.lse.len()))?;
        let rows = 2 * problem.lse_len();
        if self.rows.len() < rows {
            return Err(InvalidInput::SavedTooSmall {
                what: "row statistics",
                needed: rows,
                len: self.rows.len(),
            });
        }
        let o = problem.o().required_len().ok_or(InvalidInput::LayoutOverflow { tensor: "o" })?;
        if self.o_lo.len() < o {
            return Err(InvalidInput::SavedTooSmall { what: "O residual", needed: o, len: self.o_lo.len() });
        }
        Ok(())
    }
}

impl Device {
    /// A [`SavedForBackward`] for forwards whose output has layout `o` (O's residual is laid out
    /// the same) and `lse_len` log-sum-exp rows (batch × heads × seqlen_q, or heads × total
    /// query tokens for varlen).
    pub fn alloc_saved<T: Element>(&self, o: Layout, lse_len: usize) -> Result<SavedForBackward<T>> {
        let o_len = o.required_len().ok_or(InvalidInput::LayoutOverflow { tensor: "o" })?;
        Ok(SavedForBackward {
            lse: self.alloc(lse_len)?,
            o_lo: self.alloc(o_len)?,
            rows: self.alloc(2 * lse_len)?,
            kept: None,
        })
    }

    /// The forward of [`Device::attention`] for training: writes `out` and `saved`'s
    /// log-sum-exp and, where its kernel can (the returned [`Plan::residuals`]; planned by
    /// [`crate::plan_for_backward`]), the residuals with which
    /// [`Device::attention_backward_saved`] skips its pass over the keys. The outputs are those
    /// of [`Device::attention`] to within rounding (the probabilities in the two-step form,
    /// which [`Device::attention`] takes only at huge scales; held to the same tolerance rule).
    /// Everything is checked before any work; on error nothing is written and `saved` holds no
    /// forward.
    pub fn attention_for_backward<T: Element>(
        &self,
        q: DeviceTensor<'_, T>,
        k: DeviceTensor<'_, T>,
        v: DeviceTensor<'_, T>,
        out: DeviceTensorMut<'_, T>,
        saved: &mut SavedForBackward<T>,
        opts: &AttentionOptions,
    ) -> Result<Plan> {
        self.owns("saved", &saved.lse)?;
        let problem = self.forward_problem(&q, &k, &v, &out, opts)?;
        saved.check_sizes(&problem)?;
        let plan = crate::plan::plan_for_backward(self.props(), T::DTYPE, &problem, opts)?;
        saved.kept = None;
        let io = Io {
            q: q.buf.device_address(),
            k: k.buf.device_address(),
            v: v.buf.device_address(),
            o: out.buf.device_address(),
            lse: saved.lse.device_address(),
            partial: None,
            residuals: plan.residuals.then(|| (saved.o_lo.device_address(), saved.rows.device_address())),
        };
        self.run_forward(T::DTYPE, &problem, io, &plan)?;
        saved.kept = Some((problem, plan.residuals));
        Ok(plan)
    }

    /// The backward of [`Device::attention_backward`] from a training forward's
    /// [`SavedForBackward`] instead of a log-sum-exp: with the forward's residuals (its
    /// [`SavedForBackward::has_residuals`]) the preprocessing takes `D` from O and its residual
    /// instead of a pass over the keys (the returned [`Plan::residuals`]), otherwise it is
    /// [`Device::attention_backward`] on the saved log-sum-exp. `o` must be the forward's output
    /// and the problem the forward's (checked: the same layouts and options, else
    /// `InvalidInput::NotSaved`).
    #[allow(clippy::too_many_arguments)]
    pub fn attention_backward_saved<T: Element>(
        &self,
        q: DeviceTensor<'_, T>,
        k: DeviceTensor<'_, T>,
        v: DeviceTensor<'_, T>,
        o: DeviceTensor<'_, T>,
        saved: &SavedForBackward<T>,
        d_o: DeviceTensor<'_, T>,
        grads: DeviceGradients<'_, T>,
        opts: &AttentionOptions,
    ) -> Result<Plan> {
        self.owns("saved", &saved.lse)?;
        let Some((forward, residuals)) = &saved.kept else {
            return Err(InvalidInput::NotSaved { why: "holds no forward" }.into());
        };
        let residuals = residuals
            .then(|| BwdResiduals { o_lo: saved.o_lo.device_address(), rows: saved.rows.device_address() });
        self.backward_checked(q, k, v, o, &saved.lse, d_o, grads, opts, Some(forward), residuals)
    }
}
