//! Appending new K/V tokens to a cache in device memory (FlashAttention's
//! `flash_attn_with_kvcache` with `k`/`v`), contiguous or paged: the GPU side of
//! [`crate::cpu::append_kv`], with the same checks before anything is queued.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use flashattn_kernels::params::{APPEND_THREADS, AppendParams};
use flashattn_kernels::registry::Family;

use crate::attention::{DeviceTensor, DeviceTensorMut, strides};
use crate::buffer::Element;
use crate::device::{Device, LaunchShape};
use crate::error::{Error, InvalidInput, Result};
use crate::problem::{BlockTable, Layout};
use crate::registry::KernelId;

/// The most blocks the append kernel's 1-D grid holds (CUDA's limit on `x`).
const MAX_APPEND_BLOCKS: u64 = (1 << 31) - 1;

impl Device {
    /// Writes the new tokens `k_new`/`v_new` `(batch, n, heads_kv, d)` of every entry into its
    /// cache right after its `cache_seqlens[b]` tokens, in place, on this device's stream: the
    /// caches are `(batch, capacity, heads_kv, d)`, or page pools `(pages, page_size, heads_kv,
    /// d)` addressed through `block_table`. Then attend to the grown cache with
    /// [`Device::attention`] and `cache_seqlens` + n. Everything [`crate::cpu::append_kv`]
    /// checks is checked here before anything is queued (shapes, lengths, the table, room for the
    /// new tokens: [`InvalidInput::CacheFull`]); the result is the CPU's, bit for bit (a copy).
    pub fn append_kv<T: Element>(
        &self,
        k_cache: DeviceTensorMut<'_, T>,
        v_cache: DeviceTensorMut<'_, T>,
        k_new: DeviceTensor<'_, T>,
        v_new: DeviceTensor<'_, T>,
        cache_seqlens: &[u32],
        block_table: Option<&BlockTable>,
    ) -> Result<()> {
        self.owns("k_cache", k_cache.buf)?;
        self.owns("v_cache", v_cache.buf)?;
        self.owns("k_new", k_new.buf)?;
        self.owns("v_new", v_new.buf)?;
        crate::cpu::check_append_layouts(
            [
                (&k_cache.layout, k_cache.buf.len()),
                (&v_cache.layout, v_cache.buf.len()),
                (&k_new.layout, k_new.buf.len()),
                (&v_new.layout, v_new.buf.len()),
            ],
            cache_seqlens,
            block_table,
        )?;
        let caches =
            [(k_cache.buf.device_address(), k_cache.layout), (v_cache.buf.device_address(), v_cache.layout)];
        let new = [(k_new.buf.device_address(), k_new.layout), (v_new.buf.device_address(), v_new.layout)];
        // SAFETY: checked above: every written row lies in its cache, every read row in its
        // tensor; the buffers are this device's, ordered on its stream.
        unsafe { self.enqueue_append(self.stream(), size_of::<T>(), caches, new, cache_seqlens, block_table) }
    }

    /// Queues the append kernel on `stream` for checked arguments (addresses with their layouts).
    ///
    /// # Safety
    /// The arguments passed [`crate::cpu::check_append_layouts`] for buffers of at least the
    /// checked lengths at these addresses, alive and ordered with `stream` until the kernel has
    /// run; `stream` is a live stream of this device's primary context.
    pub(crate) unsafe fn enqueue_append(
        &self,
        stream: &Arc<CudaStream>,
        elem_bytes: usize,
        caches: [(u64, Layout); 2],
        new: [(u64, Layout); 2],
        cache_seqlens: &[u32],
        block_table: Option<&BlockTable>,
    ) -> Result<()> {
        let kn = new[0].1;
        let blocks = (kn.batch as u64) * (kn.seqlen as u64) * (kn.heads as u64);
        if blocks == 0 || kn.head_dim == 0 {
            return Ok(());
        }
        if blocks > MAX_APPEND_BLOCKS {
            return Err(Error::InvalidInput(InvalidInput::LayoutOverflow { tensor: "k_new" }));
        }
        // 16-bit words per element: the kernel copies rows as 16-bit words whatever the dtype.
        let units = (elem_bytes / 2).max(1) as u64;
        let words = |l: &Layout| strides(l).map(|s| s * units);
        let lens = self.upload_u32(stream, cache_seqlens)?;
        let table = match block_table {
            Some(t) => Some(self.page_table_on(stream, t)?),
            None => None,
        };
        let params = AppendParams {
            cache: [caches[0].0, caches[1].0],
            new: [new[0].0, new[1].0],
            cache_strides: [words(&caches[0].1), words(&caches[1].1)],
            new_strides: [words(&new[0].1), words(&new[1].1)],
            cache_seqlens: lens.device_address(),
            block_table: table.as_ref().map_or(0, |(address, _)| *address),
            pages_per_entry: block_table.map_or(0, |t| t.pages_per_entry as u32),
            page_shift: block_table.map_or(0, |t| t.page_size.trailing_zeros()),
            new_tokens: kn.seqlen as u32,
            heads: kn.heads as u32,
            row_units: (kn.head_dim as u64 * units) as u32,
            reserved: 0,
        };
        let kernel = KernelId::of(Family::AppendKv)
            .ok_or(Error::MissingKernel { kernel: "append_kv_u16", target: self.props().ptx_target })?;
        let shape =
            LaunchShape { grid: (blocks as u32, 2, 1), block: (APPEND_THREADS, 1, 1), shared_bytes: 0 };
        // SAFETY: the caller's contract; the lengths and table buffers are freed in stream order,
        // after the kernel.
        unsafe { self.launch_on(stream.cu_stream(), kernel, shape, &params, false) }
    }
}
