//! Shared-memory tiles of the tensor-core kernels (forward and backward): the swizzled layout,
//! the `ldmatrix` lane addresses into it, and the `cp.async` copy of a head's rows into it.

use super::arch::cp_async;
use super::arch::thread::thread_x_opaque;
use super::arch::{global, shared};
use super::sequence::SeqView;
use crate::config::{PAD_ELEMENTS, PAD_EXACT};
use crate::params::AttnParams;

/// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile with `chunks` per row.
#[inline(always)]
pub(super) fn swizzle(row: u32, chunk: u32, chunks: u32) -> u32 {
    16 * (row * chunks + (chunk ^ (row % 8)))
}

/// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of `rows` rows laid out as
/// `wgmma`'s 128-byte swizzled panels (64 columns of 16-bit elements each, `SWIZZLE_ATOM_BYTES`
/// in [`super::arch::wgmma`]): panel `chunk / 8` holds every row's chunks `8p..8p + 8`, 128 bytes
/// a row, swizzled as [`swizzle`] with 8 chunks a row. With the tile 1024-byte aligned this is
/// the layout the hardware's 128-byte swizzle reads (chunk index XOR row % 8). For tiles of 64
/// columns it is the same as [`swizzle`]'s.
#[inline(always)]
pub(super) fn panel_swizzle(row: u32, chunk: u32, rows: u32) -> u32 {
    128 * rows * (chunk / 8) + swizzle(row, chunk % 8, 8)
}

/// Where this lane's `ldmatrix` row addresses fall in a swizzled tile, for one operand.
///
/// A lane reads row `16·slab + row` and chunk `2·pair + chunk` (pair = which 16 columns). As
/// `row % 8` is the same for every slab and the XOR touches only the low 3 bits of the chunk, the
/// address is `tile + row·16·chunks + 256·chunks·slab + 128·(pair / 4) + swz[pair % 4]`: four
/// lane-dependent values and compile-time offsets. Keeping it in this form (rather than one
/// precomputed address per fragment, which the compiler would hoist out of the key loop and keep
/// in dozens of registers) is what keeps the kernels free of spills.
#[derive(Clone, Copy)]
pub(super) struct FragRows {
    row_bytes: u32,
    swz: [u32; 4],
}

impl FragRows {
    #[inline(always)]
    pub(super) fn new(row: u32, chunk: u32, chunks: u32) -> FragRows {
        let mut swz = [0; 4];
        for (b, s) in swz.iter_mut().enumerate() {
            *s = 16 * ((2 * b as u32 + chunk) ^ (row % 8));
        }
        FragRows { row_bytes: 16 * chunks * row, swz }
    }

    /// Address of 16-row slab `slab`, 16-column pair `pair`, in the tile at `tile`.
    #[inline(always)]
    pub(super) fn at(&self, tile: u32, slab: usize, pair: usize, chunks: u32) -> u32 {
        tile + self.row_bytes + self.swz[pair % 4] + 256 * chunks * slab as u32 + 128 * (pair / 4) as u32
    }
}

/// One head's rows of a 16-bit tensor, as a block's sequence sees them: the tensor, its
/// strides, where the sequence's tokens start in it, the head, how many rows (tokens) the
/// sequence has, and how many elements of a row are real (the head dim). Built at each use from
/// the launch parameters (which stay in the parameter bank, not in registers).
#[derive(Clone, Copy)]
pub(super) struct HeadRows<'a> {
    src: u64,
    seq: &'a SeqView,
    strides: &'a [u64; 3],
    start: u64,
    head: u32,
    len: u32,
    dim: u32,
    /// A paged K/V cache: the address of this sequence's row of page indices (u32), or 0.
    pages: u64,
    /// log2 of the tokens per page, with `pages`.
    page_shift: u32,
}

impl<'a> HeadRows<'a> {
    /// Head `head` of Q (or O's rows: the same tokens).
    #[inline(always)]
    pub(super) fn queries(p: &'a AttnParams, seq: &'a SeqView, head: u32) -> HeadRows<'a> {
        HeadRows {
            src: p.q,
            seq,
            strides: &p.q_strides,
            start: seq.q_start,
            head,
            len: seq.len_q,
            dim: p.head_dim,
            pages: 0,
            page_shift: 0,
        }
    }

    /// Key/value head `head` of K.
    #[inline(always)]
    pub(super) fn keys(p: &'a AttnParams, seq: &'a SeqView, head: u32) -> HeadRows<'a> {
        HeadRows {
            src: p.k,
            seq,
            strides: &p.k_strides,
            start: seq.k_start,
            head,
            len: seq.len_k,
            dim: p.head_dim,
            pages: 0,
            page_shift: 0,
        }
    }

    /// Head `head` of the tensor the parameters call O, from the query tokens: the forward's
    /// output, or the backward's upstream gradient dO (which the backward passes there).
    #[inline(always)]
    pub(super) fn outputs(p: &'a AttnParams, seq: &'a SeqView, head: u32) -> HeadRows<'a> {
        Self::query_rows(p.o, &p.o_strides, p, seq, head)
    }

    /// Head `head` of a tensor at `src` with `strides` that has a row per query token (the
    /// backward reads the forward's O and its residual beside dO).
    #[inline(always)]
    pub(super) fn query_rows(
        src: u64,
        strides: &'a [u64; 3],
        p: &AttnParams,
        seq: &'a SeqView,
        head: u32,
    ) -> HeadRows<'a> {
        HeadRows {
            src,
            seq,
            strides,
            start: seq.q_start,
            head,
            len: seq.len_q,
            dim: p.head_dim,
            pages: 0,
            page_shift: 0,
        }
    }

    /// Key/value head `head` of V.
    #[inline(always)]
    pub(super) fn values(p: &'a AttnParams, seq: &'a SeqView, head: u32) -> HeadRows<'a> {
        HeadRows {
            src: p.v,
            seq,
            strides: &p.v_strides,
            start: seq.k_start,
            head,
            len: seq.len_k,
            dim: p.head_dim,
            pages: 0,
            page_shift: 0,
        }
    }
}

impl HeadRows<'_> {
    /// These K or V rows read through sequence `z`'s row of a paged cache's table when `reads`
    /// (a compile-time condition at the call: the kernels that take paged caches) and the launch
    /// has one (`p.block_table`); unchanged otherwise.
    #[inline(always)]
    pub(super) fn paged_if(self, reads: bool, p: &AttnParams, z: u32) -> Self {
        if !reads || p.block_table == 0 {
            return self;
        }
        HeadRows {
            pages: p.block_table + 4 * z as u64 * p.pages_per_entry as u64,
            page_shift: p.page_shift,
            ..self
        }
    }
}

/// Page groups of 16 rows a paged tile load resolves at once (tiles of up to 128 rows).
const PAGE_GROUPS: usize = 8;

/// Issues the copies of rows `row0..row0+ROWS` of head `h` of a 16-bit tensor into a swizzled
/// shared tile of `PD` elements a row; rows at or past `len` are zero-filled. `PAD` is the
/// instance's padding kind ([`crate::config::MmaConfig::pad`]):
/// - [`PAD_EXACT`]: the tile row is the head dim, copied as 16-byte chunks with `cp.async`;
/// - [`crate::config::PAD_CHUNKS`]: the same, and the chunks at or past the head dim `d` (a multiple of 8) are
///   zero-filled (never read);
/// - [`PAD_ELEMENTS`]: any `d` and rows aligned to the element: each chunk is read element by
///   element (`ld.global`, the elements at or past `d` are zero) and stored whole into the tile.
///   These copies are synchronous: the tile is written when the function returns.
///
/// Every thread of the block takes part, with a compile-time number of copies: thread `tid`
/// always copies chunk `tid % chunks` of rows `tid / chunks + k·(THREADS / chunks)`, so its
/// source address is one 64-bit base plus a fixed step per copy.
#[inline(always)]
pub(super) unsafe fn load_tile<const ROWS: usize, const PD: usize, const THREADS: usize, const PAD: u32>(
    tile: u32,
    rows: HeadRows<'_>,
    row0: u32,
) {
    // SAFETY: forwarded contract.
    unsafe { load_tile_in::<ROWS, PD, THREADS, PAD, false>(tile, rows, row0) }
}

/// [`load_tile`] into a tile laid out as [`swizzle`] says (`PANELS` false) or as `wgmma`'s
/// panels ([`panel_swizzle`], `PANELS` true: the tile 1024-byte aligned; not with paged caches
/// or [`PAD_ELEMENTS`]).
///
/// # Safety
/// As [`load_tile`].
#[inline(always)]
pub(super) unsafe fn load_tile_in<
    const ROWS: usize,
    const PD: usize,
    const THREADS: usize,
    const PAD: u32,
    const PANELS: bool,
>(
    tile: u32,
    rows: HeadRows<'_>,
    row0: u32,
) {
    const { assert!(!PANELS || PAD != PAD_ELEMENTS) };
    let HeadRows { src, seq, strides, start, head: h, len, dim: d, pages, page_shift } = rows;
    let chunks = PD / 8;
    let rows_per_pass = THREADS / chunks;
    const { assert!(THREADS % (PD / 8) == 0 && ROWS % (THREADS / (PD / 8)) == 0) };
    // An opaque read: the per-thread addresses are recomputed at each call (a few integer
    // operations) rather than hoisted out of the key loop into registers.
    let tid = thread_x_opaque() as usize;
    let (c, r0) = ((tid % chunks) as u32, (tid / chunks) as u32);
    if PAD == PAD_ELEMENTS {
        let base = src + 2 * (seq.offset(strides, start, row0 + r0, h) + 8 * c as u64);
        let step = 2 * strides[1] * rows_per_pass as u64;
        // Elements of this thread's chunk inside the head dim (0..=8).
        let inside = d.saturating_sub(8 * c).min(8);
        for k in 0..ROWS / rows_per_pass {
            let r = r0 + (k * rows_per_pass) as u32;
            let mut words = [0u32; 4];
            if row0 + r < len {
                let at = base + k as u64 * step;
                for e in 0..8 {
                    if (e as u32) < inside {
                        // SAFETY: element `8c + e < d` of a row inside the tensor (host
                        // validation), 2-byte aligned.
                        let x = unsafe { global::load_u16(at + 2 * e as u64) };
                        words[e / 2] |= (x as u32) << (16 * (e % 2));
                    }
                }
            }
            // SAFETY: inside the tile, 16-byte aligned.
            unsafe { shared::store_u32x4(tile + swizzle(r, c, chunks as u32), words) };
        }
        return;
    }
    // Bytes of this thread's chunk inside the head dim: 16, or 0 past it (chunk-padded
    // instances run head dims that are multiples of 8, so no chunk is partial).
    let bytes = if PAD == PAD_EXACT || c < d / 8 { 16 } else { 0 };
    // A paged cache (only the one-warp decode instances are sent one: there a thread's rows
    // `r0 + k·rows_per_pass` never straddle a 16-row group, since `rows_per_pass` divides 16).
    if !PANELS && pages != 0 && 16 % rows_per_pass == 0 && ROWS % 16 == 0 && ROWS / 16 <= PAGE_GROUPS {
        // Each 16-row group lies in one page (pages of 16 tokens or more, `row0` a multiple of
        // 16), at `t & in_page` in it: per group, one page-index load (all issued before any
        // copy) and this thread's first source address in the group; its copies there then step
        // by a per-tile row step, with no per-copy page arithmetic.
        let in_page = (1u32 << page_shift) - 1;
        let per_group = 16 / rows_per_pass;
        let step = 2 * strides[1] * rows_per_pass as u64;
        let mut group_at = [0u64; PAGE_GROUPS];
        for (g, at) in group_at.iter_mut().enumerate().take(ROWS / 16) {
            let t = row0 + 16 * g as u32;
            if t < len {
                // SAFETY: slot `t >> page_shift` of the sequence's table row exists (the host
                // checked `len` against the table's capacity).
                let page = unsafe { global::load_u32(pages + 4 * (t >> page_shift) as u64) };
                let row = ((t & in_page) + r0) as u64;
                *at = src
                    + 2 * (page as u64 * strides[0]
                        + row * strides[1]
                        + h as u64 * strides[2]
                        + 8 * c as u64);
            }
        }
        // The next tile's page indices (the sequence's next rows, read by the next call's loads
        // one iteration later) brought into L1 now: otherwise each tile's copies wait behind an
        // L2 round trip for indices that small pages put on a new line every tile or two.
        let next = row0 + ROWS as u32;
        if next < len {
            // SAFETY: slot `next >> page_shift` exists (`next < len`, as above).
            unsafe { global::prefetch_l1(pages + 4 * (next >> page_shift) as u64) };
        }
        for (g, &at) in group_at.iter().enumerate().take(ROWS / 16) {
            for i in 0..per_group {
                let r = r0 + ((g * per_group + i) * rows_per_pass) as u32;
                let n = if row0 + r < len { bytes } else { 0 };
                let addr = if n > 0 { at + i as u64 * step } else { src };
                // SAFETY: as below, with the row found through the page table (host-validated
                // pages of the pools): row `r` is row `r0 + i·rows_per_pass` of group `g`.
                unsafe { cp_async::copy16(tile + swizzle(r, c, chunks as u32), addr, n) };
            }
        }
        return;
    }
    let base = src + 2 * (seq.offset(strides, start, row0 + r0, h) + 8 * c as u64);
    let step = 2 * strides[1] * rows_per_pass as u64;
    for k in 0..ROWS / rows_per_pass {
        let r = r0 + (k * rows_per_pass) as u32;
        let n = if row0 + r < len { bytes } else { 0 };
        let addr = if n > 0 { base + k as u64 * step } else { src };
        let at = if PANELS { panel_swizzle(r, c, ROWS as u32) } else { swizzle(r, c, chunks as u32) };
        // SAFETY: inside the tile; the `n` source bytes (0 or 16) are in the tensor (host
        // validation and alignment checks), or nothing is read.
        unsafe { cp_async::copy16(tile + at, addr, n) };
    }
}
