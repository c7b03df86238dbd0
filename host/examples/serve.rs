//! Serving from a paged K/V cache: a decode loop on the CPU path (on the GPU the same loop is
//! `Device::append_kv` then `Device::attention` with `block_table`). Two sequences share a pool of 16-token pages; each step appends
//! one new K/V token per sequence in place and attends its one query token to the whole cache —
//! FlashAttention's `flash_attn_with_kvcache` with a `block_table`.
//!
//! ```text
//! cargo run --release --example serve
//! ```

use flashattn::cpu::{HostTensor, HostTensorMut, attention_with_kvcache};
use flashattn::{AttentionOptions, BlockTable, Layout};

fn main() -> Result<(), flashattn::Error> {
    let (batch, heads_q, heads_kv, d) = (2, 8, 2, 64);
    let (page_size, pages_per_entry) = (16, 4); // room for 64 tokens per sequence
    // The page pool: (pages, page_size, heads_kv, d). Sequence 0 gets pages 5, 2, 7, 0 in that
    // order, sequence 1 pages 1, 6, 3, 4: any assignment works.
    let pool = Layout::bshd(batch * pages_per_entry, page_size, heads_kv, d);
    let table = BlockTable { page_size, pages_per_entry, pages: vec![5, 2, 7, 0, 1, 6, 3, 4] };
    let mut k_cache = vec![0.0f32; pool.required_len().unwrap_or(0)];
    let mut v_cache = k_cache.clone();
    // Prompts of 10 and 37 tokens are already in the cache (a prefill would have put them there).
    let mut lens: Vec<u32> = vec![10, 37];
    let q_layout = Layout::bshd(batch, 1, heads_q, d); // one query token per sequence
    let new_layout = Layout::bshd(batch, 1, heads_kv, d); // one new K/V token per sequence
    let mut out = vec![0.0f32; q_layout.required_len().unwrap_or(0)];
    let mut lse = vec![0.0f32; batch * heads_q];
    let token = |step: usize, i: usize| ((step * 31 + i * 17) % 97) as f32 / 97.0 - 0.5;
    for step in 0..8 {
        // The model would produce these from the last token; here, numbers that change per step.
        let q: Vec<f32> = (0..out.len()).map(|i| token(step, i)).collect();
        let k_new: Vec<f32> =
            (0..new_layout.required_len().unwrap_or(0)).map(|i| token(step + 1, i)).collect();
        let v_new: Vec<f32> = k_new.iter().map(|x| -x).collect();
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
        lens.iter_mut().for_each(|l| *l += 1);
        println!("step {step}: cache lengths {lens:?}, o[0][0] = {:+.5}, lse[0] = {:.5}", out[0], lse[0]);
    }
    Ok(())
}
