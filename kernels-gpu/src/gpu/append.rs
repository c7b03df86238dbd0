//! Appending new K/V tokens to a cache in place (FlashAttention's `flash_attn_with_kvcache` with
//! `k`/`v`): one block per (entry, new token, K/V head) and tensor, each thread copying 16-bit
//! words of the row. The host checked everything (room in every entry, the table's pages).

use super::arch::global;
use super::arch::thread::{block_dim_x, block_x, block_y, thread_x};
use crate::params::AppendParams;

/// Copies row `(entry, token, head)` (block `x` = `(entry·new_tokens + token)·heads + head`) of
/// the new K (`y` = 0) or V (`y` = 1) tokens to the entry's position `cache_seqlens[entry] +
/// token` in its cache.
///
/// # Safety
/// `p` must describe valid caches, new tokens and lengths (host validation: every position is
/// inside its entry's capacity, every table slot names a page of the pools).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn append_kv_u16(p: AppendParams) {
    let (x, which) = (block_x(), (block_y() as usize).min(1));
    // `max(1)`: never 0 from the host (an empty append launches nothing); it spares a panic path.
    let (heads, tokens) = (p.heads.max(1), p.new_tokens.max(1));
    let (row, head) = (x / heads, x % heads);
    let (entry, token) = (row / tokens, row % tokens);
    // SAFETY: one length per entry (host).
    let pos = unsafe { global::load_u32(p.cache_seqlens + 4 * entry as u64) } + token;
    let cs = p.cache_strides[which];
    let dst = if p.block_table != 0 {
        let slot = entry as u64 * p.pages_per_entry as u64 + (pos >> p.page_shift) as u64;
        // SAFETY: the slot is inside the entry's row of the table (host: room for the tokens).
        let page = unsafe { global::load_u32(p.block_table + 4 * slot) };
        page as u64 * cs[0] + (pos & ((1u32 << p.page_shift) - 1)) as u64 * cs[1]
    } else {
        entry as u64 * cs[0] + pos as u64 * cs[1]
    } + head as u64 * cs[2];
    let ns = p.new_strides[which];
    let src = entry as u64 * ns[0] + token as u64 * ns[1] + head as u64 * ns[2];
    let mut i = thread_x();
    while i < p.row_units {
        // SAFETY: word `i` of a row inside both tensors (host validation).
        unsafe {
            let w = global::load_u16(p.new[which] + 2 * (src + i as u64));
            global::store_u16(p.cache[which] + 2 * (dst + i as u64), w);
        }
        i += block_dim_x();
    }
}
