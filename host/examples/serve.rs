//! Serving from a paged K/V cache: a decode loop. Two sequences share a pool of 16-token pages;
//! each step appends one new K/V token per sequence in place and attends its one query token to
//! the whole cache — FlashAttention's `flash_attn_with_kvcache` with a `block_table`.
//!
//! On the CPU (f32) by default. With `--gpu`, the same loop in bf16 on device 0 —
//! `Device::append_kv` then `Device::attention` with `cache_seqlens` and `block_table`, which
//! the planner sends to the tensor-core kernel's decode instances — beside the CPU path on the
//! same bf16 data, printing their largest difference at each step.
//!
//! ```text
//! cargo run --release --example serve [-- --gpu]
//! ```

use flashattn::cpu::{HostTensor, HostTensorMut, attention_with_kvcache};
use flashattn::{AttentionOptions, BlockTable, Device, DeviceBuffer, Element, Layout, bf16};

/// The decode loop in element type `T`, on the CPU, and on `gpu` beside it when given.
fn serve<T: Element>(gpu: Option<&Device>) -> Result<(), flashattn::Error> {
    let (batch, heads_q, heads_kv, d) = (2, 8, 2, 64);
    let (page_size, pages_per_entry) = (16, 4); // room for 64 tokens per sequence
    // The page pool: (pages, page_size, heads_kv, d). Sequence 0 gets pages 5, 2, 7, 0 in that
    // order, sequence 1 pages 1, 6, 3, 4: any assignment works.
    let pool = Layout::bshd(batch * pages_per_entry, page_size, heads_kv, d);
    let table = BlockTable { page_size, pages_per_entry, pages: vec![5, 2, 7, 0, 1, 6, 3, 4].into() };
    let zero = T::from_f32(0.0);
    let mut k_cache = vec![zero; pool.required_len().unwrap_or(0)];
    let mut v_cache = k_cache.clone();
    // Prompts of 10 and 37 tokens are already in the cache (a prefill would have put them there;
    // here they are zeros).
    let mut lens: Vec<u32> = vec![10, 37];
    let q_layout = Layout::bshd(batch, 1, heads_q, d); // one query token per sequence
    let new_layout = Layout::bshd(batch, 1, heads_kv, d); // one new K/V token per sequence
    let mut out = vec![zero; q_layout.required_len().unwrap_or(0)];
    let mut lse = vec![0.0f32; batch * heads_q];
    // The GPU's copies of the caches, kept on the device for the whole loop.
    let mut device_cache: Option<(DeviceBuffer<T>, DeviceBuffer<T>)> = match gpu {
        Some(dev) => Some((dev.upload(&k_cache)?, dev.upload(&v_cache)?)),
        None => None,
    };
    let token = |step: usize, i: usize| T::from_f32(((step * 31 + i * 17) % 97) as f32 / 97.0 - 0.5);
    for step in 0..8 {
        // The model would produce these from the last token; here, numbers that change per step.
        let q: Vec<T> = (0..out.len()).map(|i| token(step, i)).collect();
        let k_new: Vec<T> = (0..new_layout.required_len().unwrap_or(0)).map(|i| token(step + 1, i)).collect();
        let v_new: Vec<T> = k_new.iter().map(|x| T::from_f32(-x.to_f32())).collect();
        let opts = AttentionOptions {
            causal: true,
            cache_seqlens: Some(lens.clone()), // the lengths before this step's token
            block_table: Some(table.clone()),
            ..Default::default()
        };
        attention_with_kvcache(
            HostTensor { data: &q, layout: q_layout },
            HostTensorMut { data: &mut k_cache, layout: pool },
            HostTensorMut { data: &mut v_cache, layout: pool },
            Some((
                HostTensor { data: &k_new, layout: new_layout },
                HostTensor { data: &v_new, layout: new_layout },
            )),
            HostTensorMut { data: &mut out, layout: q_layout },
            Some(&mut lse),
            &opts,
        )?;
        let mut line = format!(
            "step {step}: cache lengths {:?}, o[0][0] = {:+.5}",
            lens.iter().map(|l| l + 1).collect::<Vec<_>>(),
            out[0].to_f32()
        );
        if let (Some(dev), Some((kc, vc))) = (gpu, device_cache.as_mut()) {
            // On the GPU: append the new tokens in place, then attend to the grown caches.
            let (q_d, kn_d, vn_d) = (dev.upload(&q)?, dev.upload(&k_new)?, dev.upload(&v_new)?);
            dev.append_kv(
                kc.view_mut(pool),
                vc.view_mut(pool),
                kn_d.view(new_layout),
                vn_d.view(new_layout),
                &lens,
                Some(&table),
            )?;
            let grown =
                AttentionOptions { cache_seqlens: Some(lens.iter().map(|l| l + 1).collect()), ..opts };
            let mut out_d = dev.alloc::<T>(out.len())?;
            let plan = dev.attention(
                q_d.view(q_layout),
                kc.view(pool),
                vc.view(pool),
                out_d.view_mut(q_layout),
                None,
                &grown,
            )?;
            let got = dev.download(&out_d)?;
            let diff =
                got.iter().zip(&out).map(|(a, b)| (a.to_f32() - b.to_f32()).abs()).fold(0.0f32, f32::max);
            line += &format!(" | GPU ({}) largest difference {diff:.2e}", plan.kernel());
        }
        lens.iter_mut().for_each(|l| *l += 1);
        println!("{line}");
    }
    Ok(())
}

fn main() -> Result<(), flashattn::Error> {
    if std::env::args().any(|a| a == "--gpu") {
        let dev = Device::new(0)?;
        println!("{}", dev.props());
        serve::<bf16>(Some(&dev))
    } else {
        serve::<f32>(None)
    }
}
