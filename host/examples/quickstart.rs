//! The README's example: attention on the GPU in a dozen lines (needs a GPU).

use flashattn::{AttentionOptions, Device, DeviceGradients, Layout, bf16};

fn main() -> Result<(), flashattn::Error> {
    let dev = Device::new(0)?; // Err(Error::NoDriver) without an NVIDIA driver
    let l = Layout::bshd(2, 4096, 16, 128); // (batch, seqlen, heads, head_dim), any strides
    let n = l.required_len().unwrap_or(0);
    let q = dev.upload(&vec![bf16::from_f32(0.5); n])?;
    let k = dev.upload(&vec![bf16::from_f32(0.1); n])?;
    let v = dev.upload(&vec![bf16::from_f32(1.0); n])?;
    let mut out = dev.alloc::<bf16>(n)?;
    let mut lse = dev.alloc::<f32>(2 * 16 * 4096)?; // per-row log-sum-exp, (batch, heads, seqlen_q)
    let opts = AttentionOptions { causal: true, ..Default::default() };
    let plan = dev.attention(q.view(l), k.view(l), v.view(l), out.view_mut(l), Some(&mut lse), &opts)?;
    println!("{plan}"); // which kernel, tiles, shared memory, grid
    let o: Vec<bf16> = dev.download(&out)?;
    println!("o[0] = {}", o[0]);
    // Training: a forward that keeps what its backward needs (the log-sum-exp, and on Hopper O's
    // residual and the rows' sums, which spare the backward a pass over the keys), then the
    // gradients of L = Σ O ∘ dO.
    let mut saved = dev.alloc_saved::<bf16>(l, 2 * 16 * 4096)?;
    dev.attention_for_backward(q.view(l), k.view(l), v.view(l), out.view_mut(l), &mut saved, &opts)?;
    let d_o = dev.upload(&vec![bf16::from_f32(1.0); n])?;
    let (mut dq, mut dk, mut dv) = (dev.alloc::<bf16>(n)?, dev.alloc::<bf16>(n)?, dev.alloc::<bf16>(n)?);
    let grads = DeviceGradients { dq: dq.view_mut(l), dk: dk.view_mut(l), dv: dv.view_mut(l) };
    let (q, k, v, o) = (q.view(l), k.view(l), v.view(l), out.view(l));
    dev.attention_backward_saved(q, k, v, o, &saved, d_o.view(l), grads, &opts)?;
    Ok(())
}
