//! Hopper's asynchronous copies: `mbarrier` transaction barriers in shared memory and TMA tile
//! loads (`cp.async.bulk.tensor`) described by a tensor map in device memory.
//!
//! A barrier is 8 bytes of shared memory. Its phase completes when the expected number of
//! arrivals has happened *and* the transaction bytes announced with
//! [`arrive_expect_tx`] have landed; waiters name the phase parity they wait for (0 for the
//! first phase, then 1, 0, …).
//!
//! The tensor map (128 bytes, 64-byte aligned, encoded by the host with
//! `cuTensorMapEncodeTiled`) lives in device memory: a map passed by value as a kernel
//! parameter is not 64-byte aligned with this compiler (`../shared/reference/nvptx-toolchain.md`).

use core::arch::asm;

/// `mbarrier.init.shared::cta.b64`: a barrier whose phases complete after `count` arrivals.
///
/// # Safety
/// `bar` must be an 8-byte aligned shared address no other thread uses before the block's next
/// barrier (`bar.sync`), after [`fence_init`].
#[inline(always)]
pub unsafe fn init(bar: u32, count: u32) {
    // SAFETY: caller's contract.
    unsafe { asm!("mbarrier.init.shared::cta.b64 [{b}], {c};", b = in(reg32) bar, c = in(reg32) count) };
}

/// `fence.mbarrier_init.release.cluster`: makes initialised barriers visible to the async proxy
/// (the TMA unit) before they are used.
#[inline(always)]
pub fn fence_init() {
    // SAFETY: a fence.
    unsafe { asm!("fence.mbarrier_init.release.cluster;") };
}

/// `mbarrier.arrive.expect_tx`: one arrival, and `bytes` more transaction bytes the current phase
/// waits for (the TMA loads that complete on this barrier).
///
/// # Safety
/// `bar` must be an initialised barrier in shared memory.
#[inline(always)]
pub unsafe fn arrive_expect_tx(bar: u32, bytes: u32) {
    // SAFETY: caller's contract.
    unsafe {
        asm!("mbarrier.arrive.expect_tx.shared::cta.b64 _, [{b}], {n};", b = in(reg32) bar, n = in(reg32) bytes)
    };
}

/// `mbarrier.arrive`: one arrival (release semantics: this thread's earlier shared-memory reads
/// and writes happen before the phase completes).
///
/// # Safety
/// As [`arrive_expect_tx`].
#[inline(always)]
pub unsafe fn arrive(bar: u32) {
    // SAFETY: caller's contract.
    unsafe { asm!("mbarrier.arrive.shared::cta.b64 _, [{b}];", b = in(reg32) bar) };
}

/// Waits until the phase of parity `parity` of `bar` has completed (`mbarrier.try_wait.parity`
/// in a loop; acquire semantics: the loads that completed it are visible afterwards).
///
/// # Safety
/// As [`arrive_expect_tx`].
#[inline(always)]
pub unsafe fn wait(bar: u32, parity: u32) {
    loop {
        let done: u32;
        // SAFETY: caller's contract.
        unsafe {
            asm!(
                "{{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [{b}], {ph}; selp.u32 {d}, 1, 0, p; }}",
                b = in(reg32) bar, ph = in(reg32) parity, d = out(reg32) done,
            )
        };
        if done != 0 {
            return;
        }
    }
}

/// `prefetch.tensormap`: brings a tensor map into the TMA unit's cache ahead of its first load.
///
/// # Safety
/// `map` must be the generic address of a tensor map in device memory.
#[inline(always)]
pub unsafe fn prefetch_map(map: u64) {
    // SAFETY: caller's contract.
    unsafe { asm!("prefetch.tensormap [{m}];", m = in(reg64) map) };
}

/// A 4-D TMA tile load: the box of `map` at coordinates `(c0, c1, c2, c3)` (innermost first;
/// out-of-bounds elements arrive as zeros) into shared memory at `dst`, completing `bytes` of
/// `bar`'s transaction count.
///
/// # Safety
/// `map` must be a valid tensor map in device memory (generic address); `dst` a shared address
/// aligned as the map's swizzle needs (1024 bytes for 128-byte swizzling) with room for the box;
/// `bar` an initialised barrier expecting the box's bytes.
#[inline(always)]
pub unsafe fn load_4d(dst: u32, map: u64, c: [i32; 4], bar: u32) {
    // SAFETY: caller's contract.
    unsafe {
        asm!(
            "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{m}, {{{c0}, {c1}, {c2}, {c3}}}], [{b}];",
            d = in(reg32) dst, m = in(reg64) map, c0 = in(reg32) c[0], c1 = in(reg32) c[1],
            c2 = in(reg32) c[2], c3 = in(reg32) c[3], b = in(reg32) bar,
        )
    };
}

/// A 4-D TMA tile store: shared memory at `src`, laid out as the map's box (and swizzle), into
/// the box of `map` at coordinates `(c0, c1, c2, c3)` (innermost first); elements outside the
/// tensor's dimensions are not written. Asynchronous: the calling thread's current bulk group,
/// closed by [`bulk_commit`], its source read once [`bulk_wait_read`] returns. The source must be
/// made visible to the async proxy first (`fence.proxy.async.shared::cta` by the threads that
/// wrote it, then a barrier with this thread). sm_90, PTX ISA 8.0.
///
/// # Safety
/// `map` must be a valid tensor map in device memory (generic address) of a writable tensor;
/// `src` a shared address aligned as the map's swizzle needs (1024 bytes for 128-byte
/// swizzling) holding the box, not written until [`bulk_wait_read`] has returned.
#[inline(always)]
pub unsafe fn store_4d(src: u32, map: u64, c: [i32; 4]) {
    // SAFETY: caller's contract.
    unsafe {
        asm!(
            "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [{m}, {{{c0}, {c1}, {c2}, {c3}}}], [{s}];",
            s = in(reg32) src, m = in(reg64) map, c0 = in(reg32) c[0], c1 = in(reg32) c[1],
            c2 = in(reg32) c[2], c3 = in(reg32) c[3],
        )
    };
}

/// `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32`: the copy engine adds `bytes`
/// bytes of f32 from shared memory at `src` into global memory at `dst`, element by element
/// (each add atomic on its own, as `red.global.add.f32`), asynchronously: the calling thread's
/// current bulk group, closed by [`bulk_commit`] and waited for by [`bulk_wait_read`] (source
/// read) or [`bulk_wait`] (done). The source must be made visible to the async proxy first
/// (`fence.proxy.async.shared::cta` by the threads that wrote it, then a barrier with this
/// thread). sm_90, PTX ISA 8.0.
///
/// # Safety
/// `dst` a valid, 16-byte aligned, writable global address of `bytes / 4` f32; `src` a 16-byte
/// aligned shared address of as many, not written until [`bulk_wait_read`] has returned;
/// `bytes` a multiple of 16.
#[inline(always)]
pub unsafe fn bulk_reduce_add_f32(dst: u64, src: u32, bytes: u32) {
    // SAFETY: caller's contract.
    unsafe {
        asm!(
            "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [{d}], [{s}], {n};",
            d = in(reg64) dst, s = in(reg32) src, n = in(reg32) bytes,
        )
    };
}

/// `cp.async.bulk.commit_group`: closes the calling thread's current bulk group.
#[inline(always)]
pub fn bulk_commit() {
    // SAFETY: no operands; a thread without open bulk operations commits an empty group.
    unsafe { asm!("cp.async.bulk.commit_group;") };
}

/// `cp.async.bulk.wait_group.read N`: returns once at most `N` of the calling thread's bulk
/// groups still read their shared-memory sources.
#[inline(always)]
pub fn bulk_wait_read<const N: u32>() {
    // SAFETY: waits only; a thread without bulk groups returns at once.
    unsafe { asm!("cp.async.bulk.wait_group.read {n};", n = const N) };
}

/// `cp.async.bulk.wait_group N`: returns once at most `N` of the calling thread's bulk groups
/// are incomplete (their writes performed).
#[inline(always)]
pub fn bulk_wait<const N: u32>() {
    // SAFETY: waits only.
    unsafe { asm!("cp.async.bulk.wait_group {n};", n = const N) };
}
