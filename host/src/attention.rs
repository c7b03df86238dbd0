//! The GPU entry point: [`Device::attention`], its tensors, and the launch plan it returns.

use crate::buffer::{DeviceBuffer, Element};
use crate::device::Device;
use crate::error::{InvalidInput, Result};
use crate::problem::{AttentionOptions, Layout, Method, Problem};

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

/// How a call runs: the method and kernel chosen, its tiles and launch shape, and the device
/// memory it needs beyond Q, K, V, O and the log-sum-exp.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The method that runs (never `Auto`).
    pub method: Method,
    /// The kernel that runs (the softmax kernel for `Standard`).
    pub kernel: &'static str,
    /// Query rows per block.
    pub block_m: usize,
    /// Keys per tile.
    pub block_n: usize,
    /// Threads per block.
    pub threads: u32,
    /// Dynamic shared memory per block, bytes.
    pub shared_bytes: u32,
    /// Grid of the main launch (x, y, z).
    pub grid: (u32, u32, u32),
    /// Device memory allocated by the call beyond its inputs and outputs, bytes (the N×N
    /// scores and probabilities for `Standard`, the sequence offsets for varlen).
    pub extra_bytes: u64,
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} via `{}`: tiles {}×{}, {} threads, {} B shared memory, grid {:?}, {} B extra device memory",
            self.method,
            self.kernel,
            self.block_m,
            self.block_n,
            self.threads,
            self.shared_bytes,
            self.grid,
            self.extra_bytes
        )
    }
}

impl Device {
    /// Validates the call and returns the plan it would run, without running anything.
    pub fn plan<T: Element>(&self, problem: &Problem, opts: &AttentionOptions) -> Result<Plan> {
        let _ = (problem, opts);
        Err(InvalidInput::Unsupported { method: "any", why: format!("{} on the GPU yet", T::DTYPE) }.into())
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
        let problem = Problem::new(
            q.layout,
            k.layout,
            v.layout,
            out.layout,
            [q.buf.len(), k.buf.len(), v.buf.len(), out.buf.len()],
            opts,
        )?;
        if let Some(l) = &lse {
            if l.len() < problem.lse_len() {
                return Err(InvalidInput::LseTooSmall { needed: problem.lse_len(), len: l.len() }.into());
            }
        }
        self.plan::<T>(&problem, opts)
    }
}
