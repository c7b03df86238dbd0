//! Attention on the CPU: the tiled algorithm with the shared online-softmax recurrence, for
//! machines without a GPU and as the first thing the tests check.

use crate::buffer::Element;
use crate::error::{InvalidInput, Result};
use crate::problem::{AttentionOptions, Layout, Problem};

/// A read-only tensor in host memory.
#[derive(Clone, Copy, Debug)]
pub struct HostTensor<'a, T> {
    /// The storage.
    pub data: &'a [T],
    /// Shape and strides.
    pub layout: Layout,
}

/// A writable tensor in host memory.
#[derive(Debug)]
pub struct HostTensorMut<'a, T> {
    /// The storage.
    pub data: &'a mut [T],
    /// Shape and strides.
    pub layout: Layout,
}

/// Tiled attention on the CPU (f32 accumulation), same semantics and validation as
/// [`crate::Device::attention`]. `opts.tiles` sets the tile sizes (rows of Q × rows of K).
pub fn attention<T: Element>(
    q: HostTensor<'_, T>,
    k: HostTensor<'_, T>,
    v: HostTensor<'_, T>,
    out: HostTensorMut<'_, T>,
    lse: Option<&mut [f32]>,
    opts: &AttentionOptions,
) -> Result<()> {
    let problem = Problem::new(
        q.layout,
        k.layout,
        v.layout,
        out.layout,
        [q.data.len(), k.data.len(), v.data.len(), out.data.len()],
        opts,
    )?;
    if let Some(l) = &lse {
        if l.len() < problem.lse_len() {
            return Err(InvalidInput::LseTooSmall { needed: problem.lse_len(), len: l.len() }.into());
        }
    }
    Err(InvalidInput::Unsupported { method: "cpu", why: "anything yet (not implemented)".into() }.into())
}
