//! The Hopper forward path (`Method::FlashHopper`): the TMA tensor maps of Q, K and V (and of O,
//! for the output's stores), and the launch of the `wgmma` kernel
//! (`kernels-gpu/src/gpu/flash_wgmma.rs`).
//!
//! Each map describes its tensor as 4-D `(head_dim, seqlen, heads, batch)`, innermost first,
//! with the layout's strides, and a box of one 64-column panel (128 bytes) × the kernel's tile
//! rows, 128-byte swizzled: the layout `wgmma` reads. TMA zero-fills what lies outside the
//! dimensions, so tiles past the end of a sequence and columns past the head dim arrive as
//! zeros. The maps are encoded on the host (`cuTensorMapEncodeTiled`, no GPU work) and read by
//! the kernel from device memory (a map passed by value as a kernel parameter is not aligned as
//! TMA needs with this compiler). [`TensorMapCache`] keeps the device copies of map sets that
//! recur (the same tensors called again, as in every inference or training loop), so that such a
//! call copies nothing: a host-to-device copy between two kernels leaves the GPU idle for about
//! 6.5 µs (measured on the H200, session 6: 2–2.8% of a 0.25–0.35 ms headline call).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use cudarc::driver::{CudaStream, sys};
use flashattn_kernels::config::{BWD_CONFIGS, WGMMA_CONFIGS, WGMMA_PANEL, WGMMA_ROWS};
use flashattn_kernels::params::{BWD_BLOCK_M, TENSOR_MAP_BYTES, WgmmaParams};
use flashattn_kernels::registry::{Elem, Family, Target};

use crate::attention::{Io, attn_params};
use crate::buffer::DType;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::problem::{Layout, Problem};

/// The device copies of recurring tensor-map sets (the forward's three maps, 384 bytes a set;
/// the backward's two), keyed by
/// the encoded bytes themselves: a map holds its tensor's address, shape and strides, so equal
/// bytes mean an equal map, and a kept copy is never written again. A set is kept the second
/// time it is seen (a first sighting is copied for its call alone, so that callers whose
/// tensors never recur pay nothing more than before); keeping one costs a wait for the device's
/// own stream, after which the copy is complete and any stream may read it.
pub(crate) struct TensorMapCache {
    /// Shared with the calls that took a copy's address until each has queued its kernel, so that
    /// a clear on another thread cannot free a copy a kernel about to be queued still reads.
    kept: HashMap<Vec<u32>, Arc<crate::buffer::DeviceBuffer<u32>>>,
    seen: HashSet<Vec<u32>>,
}

/// Map sets a [`TensorMapCache`] keeps (48 KiB of device memory) and first sightings it
/// remembers; when either is full it starts over (kept copies are freed after a wait for the
/// whole context, since a kernel on any stream may still read them).
const MAP_SETS_KEPT: usize = 128;
const MAP_SETS_SEEN: usize = 1024;

impl TensorMapCache {
    pub(crate) fn new() -> Self {
        Self { kept: HashMap::new(), seen: HashSet::new() }
    }
}

/// TMA's limits on a global tensor: strides multiple of 16 bytes below 2⁴⁰, dimensions below 2³².
const TMA_STRIDE_ALIGN: u64 = 16;
const TMA_MAX_STRIDE: u64 = 1 << 40;

/// The byte strides TMA takes for a layout's `(seqlen, heads, batch)` dimensions. A dimension
/// of extent 1 never moves an address, so its stride may be anything: it is replaced by the
/// row's bytes rounded up to 16 (TMA needs a multiple of 16 even there). `None` if a moving
/// stride is not a multiple of 16 bytes or is too large.
pub(crate) fn tma_strides(l: &Layout, elem_bytes: u64) -> Option<[u64; 3]> {
    let dims = [(l.seqlen, l.seq_stride), (l.heads, l.head_stride), (l.batch, l.batch_stride)];
    let row = (l.head_dim as u64 * elem_bytes).next_multiple_of(TMA_STRIDE_ALIGN).max(TMA_STRIDE_ALIGN);
    let mut out = [0u64; 3];
    for (o, (extent, stride)) in out.iter_mut().zip(dims) {
        let bytes = stride as u64 * elem_bytes;
        *o = if extent <= 1 { row } else { bytes };
        if *o % TMA_STRIDE_ALIGN != 0 || *o == 0 || *o >= TMA_MAX_STRIDE {
            return None;
        }
    }
    Some(out)
}

/// Encodes one tensor map: `layout` at `address`, boxes of 64 columns × `rows`.
fn encode(dtype: DType, address: u64, layout: &Layout, rows: u32) -> Result<sys::CUtensorMap> {
    let data_type = match dtype {
        DType::BF16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        _ => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
    };
    // The planner checked the strides; a failure here is a bug, reported as a driver error.
    let strides = tma_strides(layout, 2).unwrap_or([0; 3]);
    // TMA refuses dimensions of 0; a tensor without tokens (no keys) is never loaded from, so
    // its map only has to be valid.
    let dims = [layout.head_dim, layout.seqlen, layout.heads, layout.batch].map(|x| x.max(1) as u64);
    let boxes = [WGMMA_PANEL, rows, 1, 1];
    let element_strides = [1u32; 4];
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    // SAFETY: every pointer refers to a live local array of the length the rank (4) implies;
    // the map is written by the driver, no device memory is touched.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            data_type,
            4,
            address as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()
    .map_err(|source| Error::Driver { context: "encoding a TMA tensor map", source })?;
    Ok(map)
}

/// The query tiles of a forward on the Hopper kernel: `block_m`-row tiles of the longest
/// sequence, those of one (head, sequence) pair and those of all pairs — a persistent grid's
/// work (`WgmmaParams::tiles_m`, `tiles`).
pub(crate) fn query_tiles(problem: &Problem, block_m: u32) -> (u64, u64) {
    let per_pair = problem.max_lens().0.div_ceil(block_m as usize) as u64;
    (per_pair, per_pair * problem.q().heads as u64 * problem.batch() as u64)
}

impl Device {
    /// Runs a planned `Method::FlashHopper` call: encodes the three maps, finds them kept on the
    /// device or copies them there ([`TensorMapCache`]: a first sighting's copy is freed in
    /// stream order after the kernel) and launches.
    pub(crate) fn run_wgmma(
        &self,
        stream: &Arc<CudaStream>,
        dtype: DType,
        problem: &Problem,
        io: Io,
        plan: &Plan,
    ) -> Result<()> {
        let Some(launch) = plan.main_launch() else { return Ok(()) };
        let index = match launch.kernel.map(|k| k.info().family) {
            Some(Family::FlashWgmma(_, i)) => i,
            _ => return Ok(()),
        };
        let config = WGMMA_CONFIGS[index];
        let (tiles_m, tiles) = query_tiles(problem, config.block_m);
        if !config.one_tile_128() && (io.partial.is_some() || io.o % 16 != 0) {
            // A persistent or 192-row instance stores its output by TMA; one that could not
            // (partial rows, or O at an address TMA does not take) would store it from registers,
            // a path their GPU tests do not reach: such calls run the one-tile, 128-row instance.
            let plan = crate::plan::one_tile_per_block(self.props(), problem, plan.clone())?;
            return self.run_wgmma(stream, dtype, problem, io, &plan);
        }
        let mut maps = vec![
            encode(dtype, io.q, problem.q(), config.block_m)?,
            encode(dtype, io.k, problem.k(), config.block_n)?,
            encode(dtype, io.v, problem.v(), config.block_n)?,
        ];
        // O's map, for the kernel's TMA stores of its output tiles (`WgmmaParams::o_map`): an
        // instance that takes it (`WgmmaConfig::o_by_tma`) writing O itself in a fixed-length
        // batch (a variable-length sequence's last tile would be stored over the next sequence's
        // first rows), at an address TMA takes (the planner checked the strides).
        let o_by_tma =
            config.o_by_tma() && io.partial.is_none() && problem.varlen().is_none() && io.o % 16 == 0;
        if o_by_tma {
            maps.push(encode(dtype, io.o, problem.o(), WGMMA_ROWS)?);
        }
        // (A first sighting's copy is freed in stream order after the kernel.)
        let maps_copy = self.device_tensor_maps(stream, &maps)?;
        // A dynamic persistent instance's tile counter, zeroed (freed in stream order after the
        // kernel).
        let counter = if config.persistent == 2 { Some(self.zeroed_u32(stream, 1)?) } else { None };
        let maps = maps_copy.device_address();
        // ALiBi slopes, read by the masked instances (freed in stream order after the kernel).
        let slopes = self.upload_slopes(stream, problem)?;
        // Variable-length offsets (freed in stream order after the kernel).
        let offsets = match problem.varlen() {
            Some(vl) => Some(self.upload_offsets(stream, vl)?),
            None => None,
        };
        let addresses = offsets.as_ref().map(|o| (o.0.device_address(), o.1.device_address()));
        let mut attn = attn_params(problem, io, addresses, config.block_n);
        attn.alibi_slopes = slopes.as_ref().map_or(0, |b| b.device_address());
        let params = WgmmaParams {
            attn,
            maps,
            merge: io.partial.is_some_and(|p| p.merge) as u32,
            final_rows: io.partial.map_or(0, |p| p.final_rows),
            o_lo: io.residuals.map_or(0, |r| r.0),
            residual_rows: io.residuals.map_or(0, |r| r.1),
            o_map: if o_by_tma { maps + 3 * TENSOR_MAP_BYTES } else { 0 },
            // A persistent instance's work (the planner gave it a grid of one block an SM).
            tiles: if config.persistent != 0 { tiles as u32 } else { 0 },
            tiles_m: tiles_m as u32,
            tile_counter: counter.as_ref().map_or(0, |c| c.device_address()),
        };
        // SAFETY: the parameters describe validated layouts whose buffers hold every element
        // the maps address; a kept maps copy is complete and never freed while the cache holds
        // it, a call's own copy is freed in stream order, after the kernel.
        unsafe { self.launch_plan(stream, plan, &params) }
    }

    /// The backward main kernel's tensor maps of Q and dO (`BwdParams::maps`: boxes of one
    /// 64-column panel × [`BWD_BLOCK_M`] rows, as its `cp.async` copies lay the tiles out) on
    /// the device, or `None` where the kernel copies its query tiles itself: a device that
    /// loads the sm_80 PTX, a main kernel that does not take them
    /// (`BwdConfig::tma_query_tiles`), or a tensor TMA cannot describe
    /// (an address or a stride not a multiple of 16 bytes). Held by the caller until its kernels
    /// are queued (a first sighting's copy is then freed in stream order).
    pub(crate) fn backward_tensor_maps(
        &self,
        stream: &Arc<CudaStream>,
        plan: &Plan,
        q: (u64, &Layout),
        d_o: (u64, &Layout),
    ) -> Result<Option<Arc<crate::buffer::DeviceBuffer<u32>>>> {
        // The element type of the plan's main kernel, where that kernel takes the maps.
        let dtype = plan.launches.iter().find_map(|l| {
            let info = l.kernel?.info();
            match info.family {
                Family::BwdMma(elem, i) if BWD_CONFIGS[i].tma_query_tiles(true) && info.on(Target::Sm90a) => {
                    match elem {
                        Elem::F16 => Some(DType::F16),
                        Elem::Bf16 => Some(DType::BF16),
                        Elem::F32 => None,
                    }
                }
                _ => None,
            }
        });
        let takes = |(address, layout): (u64, &Layout)| {
            address % TMA_STRIDE_ALIGN == 0 && tma_strides(layout, 2).is_some()
        };
        let Some(dtype) = dtype.filter(|_| self.target() == Target::Sm90a && takes(q) && takes(d_o)) else {
            return Ok(None);
        };
        let maps = [encode(dtype, q.0, q.1, BWD_BLOCK_M)?, encode(dtype, d_o.0, d_o.1, BWD_BLOCK_M)?];
        self.device_tensor_maps(stream, &maps).map(Some)
    }

    /// `maps` on the device, consecutive (128 bytes each, 64-byte aligned: device allocations
    /// are 256-byte aligned): a kept copy ([`TensorMapCache`]) or one made for this call.
    fn device_tensor_maps(
        &self,
        stream: &Arc<CudaStream>,
        maps: &[sys::CUtensorMap],
    ) -> Result<Arc<crate::buffer::DeviceBuffer<u32>>> {
        let words: Vec<u32> =
            maps.iter().flat_map(|m| m.opaque.iter().flat_map(|w| [*w as u32, (*w >> 32) as u32])).collect();
        debug_assert_eq!(4 * words.len() as u64, maps.len() as u64 * TENSOR_MAP_BYTES);
        Ok(match self.kept_tensor_maps(words)? {
            Ok(kept) => kept,
            Err(words) => Arc::new(self.upload_u32(stream, &words)?),
        })
    }

    /// A kept copy of `words` (a map set), keeping it now if it was seen before (the caller
    /// holds it until its kernel is queued); `Err(words)` back when the caller must copy it for
    /// this call alone.
    fn kept_tensor_maps(
        &self,
        words: Vec<u32>,
    ) -> Result<std::result::Result<Arc<crate::buffer::DeviceBuffer<u32>>, Vec<u32>>> {
        let mut cache = self.tensor_maps.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(buf) = cache.kept.get(&words) {
            return Ok(Ok(Arc::clone(buf)));
        }
        if !cache.seen.remove(&words) {
            if cache.seen.len() >= MAP_SETS_SEEN {
                cache.seen.clear();
            }
            cache.seen.insert(words.clone());
            return Ok(Err(words));
        }
        if cache.kept.len() >= MAP_SETS_KEPT {
            // Kernels on any stream may read the kept copies: wait for all of them first.
            self.synchronize_context()?;
            cache.kept.clear();
        }
        let own = self.stream();
        let buf = self.upload_u32(own, &words)?;
        own.synchronize().map_err(|source| Error::Driver {
            context: "waiting for a kept set of tensor maps to reach the device",
            source,
        })?;
        let buf = Arc::new(buf);
        cache.kept.insert(words, Arc::clone(&buf));
        Ok(Ok(buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(batch: usize, seqlen: usize, heads: usize, d: usize) -> Layout {
        Layout::bshd(batch, seqlen, heads, d)
    }

    #[test]
    fn strides_of_size_one_dimensions_do_not_matter() {
        let l = layout(1, 1, 4, 64);
        assert_eq!(tma_strides(&l, 2), Some([128, 128, 128]));
        let l = layout(2, 100, 4, 64);
        assert_eq!(tma_strides(&l, 2), Some([512, 128, 51200]));
    }

    #[test]
    fn strides_must_be_16_byte_multiples() {
        let mut l = layout(2, 100, 4, 64);
        l.seq_stride = 260; // 520 bytes
        assert_eq!(tma_strides(&l, 2), None);
    }
}
