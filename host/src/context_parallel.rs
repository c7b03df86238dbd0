//! Context-parallel ("ring") attention: one sequence spread over several GPUs.
//!
//! Each of `P` GPUs (ranks) holds a shard of Q, K and V — the same token positions of each —
//! and produces that shard of O (and the log-sum-exp). The K/V shards travel around a ring:
//! at step `s` rank `r` holds the block of rank `(r − s) mod P`, attends its own queries to it
//! with the library's kernels (the fastest path for the shape, as [`crate::Method::Auto`]
//! picks), while the next block travels to it on a separate stream (peer copies on the copy
//! engines, ordered by events). Each step's rows stay in **f32** until their last contribution:
//! on the Hopper kernel each launch merges its rows by log-sum-exp into one running f32 result
//! and writes the rows whose last contribution it is to O and the log-sum-exp itself
//! ([`StepLaunch::merge`], [`StepLaunch::final_rows`]); on the `mma.sync` kernel each launch
//! writes f32 slots (two splits) that the split-KV combine kernel merges at the end. No partial
//! result is ever rounded to 16 bits, so the error does not grow with the ring size.
//! [`plan_launches`] shows every launch of a call without GPUs.
//!
//! **Layout (zigzag).** Each sequence of `N` tokens is cut into `2P` chunks of `c = N / 2P`;
//! rank `r` holds chunks `r` and `2P − 1 − r`, in that order ([`zigzag_chunks`],
//! [`shard_tokens`]). With a causal mask every rank then does the same work at every step:
//! at step 0 its block is its own (causal); from a rank `src < r` both local chunks see all of
//! chunk `src` and nothing of chunk `2P − 1 − src`; from `src > r` the local chunk `2P − 1 − r`
//! sees the whole block and chunk `r` nothing ([`schedule`]). Without a mask any equal split
//! works; the zigzag one is accepted too.
//!
//! The schedule is a pure function, checked on the CPU against the mask it must reproduce
//! (every visible (query, key) pair exactly once, nothing else); the GPU tests compare the
//! sharded result with single-GPU attention by the f64 oracle.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaEvent, CudaStream, result as cu, sys};

use crate::attention::{DeviceTensor, DeviceTensorMut, Io, PartialRows, attn_params};
use crate::buffer::{DType, DeviceBuffer, Element};
use crate::device::{Device, DeviceProps};
use crate::error::{DriverContext, Error, InvalidInput, Result, RingError};
use crate::external::required_alignment;
use crate::plan::{Plan, Reason};
use crate::problem::{AttentionOptions, Layout, Method, Problem};

/// The two chunks (of `2·ranks`) of every sequence that rank `rank` holds, in shard order.
pub const fn zigzag_chunks(rank: usize, ranks: usize) -> [usize; 2] {
    [rank, 2 * ranks - 1 - rank]
}

/// The token positions of a sequence of `seqlen` tokens that rank `rank` of `ranks` holds, in
/// shard order (the zigzag layout: chunks [`zigzag_chunks`] of `seqlen / (2·ranks)` tokens).
/// `None` when `seqlen` is not a multiple of `2·ranks` or `rank ≥ ranks`.
pub fn shard_tokens(rank: usize, ranks: usize, seqlen: usize) -> Option<[Range<usize>; 2]> {
    let parts = ranks.checked_mul(2)?;
    if rank >= ranks || parts == 0 || seqlen % parts != 0 {
        return None;
    }
    let c = seqlen / parts;
    Some(zigzag_chunks(rank, ranks).map(|k| k * c..(k + 1) * c))
}

/// One attention launch of a ring step: local query rows `q_rows` of the shard against rows
/// `k_rows` of the K/V block in hand, with or without the causal mask (bottom-right aligned),
/// writing partial-result slot `slot` of its query part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepWork {
    /// Local query rows (a query part: the whole shard, or one of its two chunks).
    pub q_rows: Range<usize>,
    /// Rows of the block in hand.
    pub k_rows: Range<usize>,
    /// Whether the causal mask applies (only at step 0, the rank's own block).
    pub causal: bool,
    /// The how-many-th contribution to these query rows this is (each launch writes its rows'
    /// results to the next free partial slots: one for the Hopper kernel, two for the
    /// `mma.sync` kernel, which writes partial results only when it splits the keys).
    pub slot: usize,
}

/// The work of rank `rank` of `ranks` at every step, for shards of `shard_len` tokens: step `s`
/// attends to the block of rank `(rank − s) mod ranks`, one launch per step. Causal shards are
/// zigzag (two chunks of `shard_len / 2`, which must be even); see the module docs:
/// - step 0, the rank's own block: the whole shard against the whole block with the causal mask
///   (the two chunks are in sequence order, so the mask of the concatenation is the right one);
/// - a block from a lower rank: the whole shard against the block's first chunk, unmasked;
/// - from a higher rank: the shard's second chunk against the whole block, unmasked.
///
/// The lower ranks' blocks come first (steps 1 … rank), so both chunks of the shard have had
/// the same number of contributions whenever a launch covers both.
pub fn schedule(rank: usize, ranks: usize, shard_len: usize, causal: bool) -> Vec<Vec<StepWork>> {
    let l = shard_len;
    let c = l / 2;
    let mut seen = [0usize; 2];
    (0..ranks)
        .map(|s| {
            let src = (rank + ranks - s) % ranks;
            let (q_rows, k_rows, masked) = if !causal {
                (0..l, 0..l, false)
            } else if s == 0 {
                (0..l, 0..l, true)
            } else if src < rank {
                (0..l, 0..c, false)
            } else {
                (c..l, 0..l, false)
            };
            // The contribution index of the launch's rows (equal for both chunks when it covers both).
            let first_chunk = q_rows.start == 0;
            let slot = if first_chunk { seen[0] } else { seen[1] };
            if first_chunk {
                seen[0] += 1;
            }
            seen[1] += 1;
            vec![StepWork { q_rows, k_rows, causal: masked, slot }]
        })
        .collect()
}

/// The query parts whose rows share a contribution count: the whole shard, or (causal) its two
/// chunks, which the lower ranks' blocks reach both and the higher ranks' the second only.
fn query_parts(shard_len: usize, causal: bool) -> Vec<Range<usize>> {
    let mut parts = Vec::with_capacity(2);
    if causal {
        parts.extend([0..shard_len / 2, shard_len / 2..shard_len]);
    } else {
        parts.push(0..shard_len);
    }
    parts
}

/// How the K/V blocks travel between the GPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// Peer-to-peer copies (`cuMemcpyPeerAsync`) on the copy engines, one process: they take
    /// no SMs from the attention kernels.
    #[default]
    PeerCopy,
}

/// One rank's tensors: its shard of Q, K, V (the same token positions of each), its shard of O
/// (written) and optionally the log-sum-exp of its rows (written; `(batch, heads, shard_len)`).
/// Every buffer must belong to the rank's [`Device`].
#[derive(Debug)]
pub struct Shard<'a, T> {
    /// Queries, `(batch, shard_len, heads, d)`.
    pub q: DeviceTensor<'a, T>,
    /// Keys, `(batch, shard_len, heads_kv, d)`, dense (no gaps: it travels as one copy).
    pub k: DeviceTensor<'a, T>,
    /// Values, K's layout.
    pub v: DeviceTensor<'a, T>,
    /// The output, Q's shape.
    pub out: DeviceTensorMut<'a, T>,
    /// The log-sum-exp of the shard's rows, if wanted.
    pub lse: Option<&'a mut DeviceBuffer<f32>>,
}

/// What a context-parallel call ran.
#[derive(Clone, Debug)]
pub struct RingPlan {
    /// GPUs in the ring.
    pub ranks: usize,
    /// How the blocks travelled.
    pub transport: Transport,
    /// Whether the GPUs reach each other's memory directly (NVLink or PCIe peer access);
    /// without it the driver stages peer copies through the host.
    pub peer_access: bool,
    /// The plan of each launch of rank 0's first step (the method the steps run).
    pub step_plans: Vec<Plan>,
    /// Device memory each rank needs for the call (kept by the [`Ring`] for the next call until
    /// [`Ring::free_scratch`]), bytes: the f32 partial results (slots ×
    /// rows × (d + 1) × 4, with a slot per step and query part, two on the `mma.sync` kernel)
    /// and the K/V blocks in flight (two, or one for two ranks).
    pub scratch_bytes: u64,
}

/// A ring of GPUs for context-parallel attention, rank `r` on `devices[r]`.
pub struct Ring {
    devices: Vec<Device>,
    /// Per rank: the stream its incoming K/V blocks are copied on.
    comm: Vec<Arc<CudaStream>>,
    peer_access: bool,
    /// Per rank: an event recorded after its last call's work (for bounded waits).
    done: std::sync::Mutex<Vec<CudaEvent>>,
    /// Per rank: the partial results and K/V blocks of the last call, kept for the next one
    /// (allocating and mapping them again costs about 4 ms per GB); locked during a call.
    scratch: std::sync::Mutex<Vec<Option<DeviceBuffer<u8>>>>,
    /// With [`Ring::record_timeline`]: the last call's timing events.
    timeline: std::sync::Mutex<Option<Vec<TimelineEvents>>>,
    record: std::sync::atomic::AtomicBool,
}

/// One rank's timing events of a call: its start, the end of each step's launches, each
/// incoming block's arrival, the end.
struct TimelineEvents {
    start: CudaEvent,
    steps: Vec<CudaEvent>,
    arrivals: Vec<CudaEvent>,
    end: Option<CudaEvent>,
}

/// Where one rank's time went in the last call ([`Ring::timeline`]), in ms from the call's
/// start on that GPU (when its stream reached the call's first operation).
#[derive(Clone, Debug, PartialEq)]
pub struct RankTimeline {
    /// When each step's launches finished.
    pub steps: Vec<f32>,
    /// When each incoming K/V block had arrived (steps 1, 2, …).
    pub arrivals: Vec<f32>,
    /// When the call's last operation on this GPU finished.
    pub end: f32,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("devices", &self.devices)
            .field("peer_access", &self.peer_access)
            .finish()
    }
}

impl Ring {
    /// A ring over `devices` (at least two, on different GPUs). Enables peer access between
    /// every pair where the hardware allows it.
    pub fn new(devices: Vec<Device>) -> Result<Ring> {
        let ranks = devices.len();
        if ranks < 2 {
            return Err(RingError::TooFewRanks { ranks }.into());
        }
        for (i, a) in devices.iter().enumerate() {
            if let Some(b) = devices[..i].iter().find(|b| b.props().ordinal == a.props().ordinal) {
                return Err(RingError::SameDevice { ordinal: b.props().ordinal }.into());
            }
        }
        let mut peer_access = true;
        for a in &devices {
            for b in &devices {
                if a.props().ordinal != b.props().ordinal {
                    peer_access &= enable_peer_access(a, b)?;
                }
            }
        }
        let comm = devices
            .iter()
            .map(|d| d.stream().context().new_stream().context("creating a ring copy stream"))
            .collect::<Result<Vec<_>>>()?;
        let scratch = std::sync::Mutex::new(devices.iter().map(|_| None).collect());
        Ok(Ring {
            devices,
            comm,
            peer_access,
            done: std::sync::Mutex::new(Vec::new()),
            scratch,
            timeline: std::sync::Mutex::new(None),
            record: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// GPUs in the ring.
    pub fn ranks(&self) -> usize {
        self.devices.len()
    }

    /// The device of rank `rank` (to allocate its shards).
    pub fn device(&self, rank: usize) -> Option<&Device> {
        self.devices.get(rank)
    }

    /// Frees the scratch memory the ring keeps between calls (the f32 partial results and the
    /// K/V blocks of the largest call so far, [`RingPlan::scratch_bytes`] per GPU), in each
    /// device's stream order.
    pub fn free_scratch(&self) {
        if let Ok(mut s) = self.scratch.lock() {
            s.iter_mut().for_each(|b| *b = None);
        }
    }

    /// Records timing events in the following calls (or stops): [`Ring::timeline`] then says
    /// where the last call's time went on each GPU.
    pub fn record_timeline(&self, on: bool) {
        self.record.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// The last recorded call's timeline, per rank (after [`Ring::synchronize`]); empty when
    /// [`Ring::record_timeline`] was off for it.
    pub fn timeline(&self) -> Result<Vec<RankTimeline>> {
        let guard = self.timeline.lock().map_err(|_| RingError::Poisoned)?;
        let Some(events) = guard.as_ref() else { return Ok(Vec::new()) };
        let since =
            |t: &TimelineEvents, e: &CudaEvent| t.start.elapsed_ms(e).context("reading a ring timing event");
        events
            .iter()
            .map(|t| {
                Ok(RankTimeline {
                    steps: t.steps.iter().map(|e| since(t, e)).collect::<Result<_>>()?,
                    arrivals: t.arrivals.iter().map(|e| since(t, e)).collect::<Result<_>>()?,
                    end: t.end.as_ref().map_or(Ok(0.0), |e| since(t, e))?,
                })
            })
            .collect()
    }

    /// Whether every pair of GPUs has peer access.
    pub fn peer_access(&self) -> bool {
        self.peer_access
    }

    /// Context-parallel attention: `shards[r]` on rank `r`'s device (see the module docs for the
    /// zigzag layout causal attention needs). Supports f16 and bf16, causal or not, grouped K/V
    /// heads, any head dim the tensor-core kernels run, the options' scale, method and tiles;
    /// variable-length batches, windows, soft-capping, ALiBi, K/V caches and `splits` are
    /// refused ([`RingError::Feature`]). Everything is checked before anything runs; the work
    /// is queued on each device's stream (wait with [`Ring::synchronize`]).
    pub fn attention<T: Element>(
        &self,
        shards: &mut [Shard<'_, T>],
        opts: &AttentionOptions,
    ) -> Result<RingPlan> {
        let ranks = self.ranks();
        let dtype = T::DTYPE;
        let setup = self.check(shards, opts)?;
        let Setup { problem, kv_layout, schedules, step_problems, parts, slots, fused } = setup;
        let elem = dtype.size_bytes() as u64;
        let (q_layout, d) = (*problem.q(), problem.head_dim());
        let rows = problem.lse_len() as u64;
        let kv_elems = kv_layout.required_len().unwrap_or(0);
        let partial_bytes = 4 * slots as u64 * rows * (d as u64 + 1);
        let in_flight = (ranks - 1).min(2);
        // The scratch: the partial rows, then the K/V blocks in flight, each region 256-byte
        // aligned.
        let align = |x: u64| x.next_multiple_of(256);
        let kv_bytes = kv_elems * elem as usize;
        let block_bytes = align(kv_bytes as u64);
        let scratch_bytes = align(partial_bytes) + in_flight as u64 * 2 * block_bytes;
        let step_plans = step_problems[0].first().map(|s| s.iter().map(|l| l.plan.clone()).collect());
        let ring_plan = RingPlan {
            ranks,
            transport: Transport::PeerCopy,
            peer_access: self.peer_access,
            step_plans: step_plans.unwrap_or_default(),
            scratch_bytes,
        };
        if problem.is_empty() {
            return Ok(ring_plan);
        }

        // Per rank: the partial results and the K/V blocks in flight, in the ring's kept
        // scratch (grown when too small; reused in stream order by the next call).
        let needed = scratch_bytes;
        let mut scratch = self.scratch.lock().map_err(|_| RingError::Poisoned)?;
        for (dev, buf) in self.devices.iter().zip(scratch.iter_mut()) {
            if buf.as_ref().is_none_or(|b| (b.len() as u64) < needed) {
                *buf = None;
                *buf = Some(dev.alloc_scratch(needed, needed, || {
                    "context-parallel partial results and K/V blocks".into()
                })?);
            }
        }
        let base: Vec<u64> = scratch.iter().map(|b| b.as_ref().map_or(0, |b| b.device_address())).collect();
        let event = |stream: &Arc<CudaStream>| {
            stream
                .record_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
                .context("recording a ring event")
        };
        // The inputs and the new buffers are ready in each device's stream order.
        let start = self.devices.iter().map(|d| event(d.stream())).collect::<Result<Vec<_>>>()?;
        // Timing events, when asked for (they cost a little: created and recorded per call).
        // Explicitly with timing: cudarc's default flags (`None`) disable it, and reading such
        // an event's time is CUDA_ERROR_INVALID_HANDLE.
        let timed = |stream: &Arc<CudaStream>| {
            stream
                .record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .context("recording a ring timing event")
        };
        let mut timeline = if self.record.load(std::sync::atomic::Ordering::Relaxed) {
            let starts = self.devices.iter().map(|d| timed(d.stream())).collect::<Result<Vec<_>>>()?;
            Some(
                starts
                    .into_iter()
                    .map(|start| TimelineEvents { start, steps: Vec::new(), arrivals: Vec::new(), end: None })
                    .collect::<Vec<_>>(),
            )
        } else {
            None
        };
        for (comm, ev) in self.comm.iter().zip(&start) {
            comm.wait(ev).context("ordering a ring copy")?;
        }
        // The address of the block rank `r` holds at step `s`.
        let block = |r: usize, s: usize| -> (u64, u64) {
            if s == 0 {
                (shards[r].k.buf.device_address(), shards[r].v.buf.device_address())
            } else {
                let k = base[r] + align(partial_bytes) + 2 * block_bytes * ((s - 1) % in_flight) as u64;
                (k, k + block_bytes)
            }
        };
        let lse_addr: Vec<u64> =
            shards.iter().map(|s| s.lse.as_ref().map_or(0, |l| l.device_address())).collect();
        let out_addr: Vec<u64> = shards.iter().map(|s| s.out.buf.device_address()).collect();
        let out_layout: Vec<Layout> = shards.iter().map(|s| s.out.layout).collect();
        let q_addr: Vec<u64> = shards.iter().map(|s| s.q.buf.device_address()).collect();
        let partial_at = |r: usize, slot: usize, row: usize| {
            let lse_base = base[r] + 4 * (slots as u64 * rows * d as u64);
            let at = slot as u64 * rows + row as u64;
            (base[r] + 4 * at * d as u64, lse_base + 4 * at)
        };
        let mut copied: Vec<Vec<CudaEvent>> = (0..ranks).map(|_| Vec::new()).collect();
        let mut computed: Vec<Vec<CudaEvent>> = (0..ranks).map(|_| Vec::new()).collect();
        for s in 0..ranks {
            // The blocks of step s + 1: rank r's block (of step s) goes to rank r + 1.
            if s + 1 < ranks {
                for r in 0..ranks {
                    let dst = (r + 1) % ranks;
                    let comm = &self.comm[dst];
                    if s >= 1 {
                        // The block rank r holds arrived...
                        comm.wait(&copied[r][s - 1]).context("ordering a ring copy")?;
                    }
                    if s >= 2 {
                        // ...and rank dst is done with the buffer this copy overwrites.
                        comm.wait(&computed[dst][s - 1]).context("ordering a ring copy")?;
                    }
                    let (src_k, src_v) = block(r, s);
                    let (dst_k, dst_v) = block(dst, s + 1);
                    let (src_ctx, dst_ctx) = (
                        self.devices[r].stream().context().cu_ctx(),
                        self.devices[dst].stream().context().cu_ctx(),
                    );
                    comm.context().bind_to_thread().context("binding a context")?;
                    for (from, to) in [(src_k, dst_k), (src_v, dst_v)] {
                        // SAFETY: both addresses hold `kv_bytes` (the shard's dense K/V, or a
                        // block buffer of the same length), alive until the streams that read
                        // and write them are done (they are freed in stream order after the
                        // final waits below).
                        unsafe {
                            cu::memcpy_peer_async(dst_ctx, to, src_ctx, from, kv_bytes, comm.cu_stream())
                        }
                        .context("copying a K/V block to the next GPU")?;
                    }
                    copied[dst].push(event(comm)?);
                    if let Some(t) = timeline.as_mut() {
                        t[dst].arrivals.push(timed(comm)?);
                    }
                }
            }
            for r in 0..ranks {
                let dev = &self.devices[r];
                let stream = dev.stream();
                if s >= 1 {
                    stream.wait(&copied[r][s - 1]).context("waiting for a K/V block")?;
                }
                let (k_addr, v_addr) = block(r, s);
                for (w, l) in schedules[r][s].iter().zip(&step_problems[r][s]) {
                    let (po, pl) = partial_at(r, l.first_slot, w.q_rows.start);
                    let io = Io {
                        q: q_addr[r] + elem * (w.q_rows.start * q_layout.seq_stride) as u64,
                        k: k_addr + elem * (w.k_rows.start * kv_layout.seq_stride) as u64,
                        v: v_addr + elem * (w.k_rows.start * kv_layout.seq_stride) as u64,
                        // (Written only by the running merge, for the launch's final rows.)
                        o: out_addr[r] + elem * (w.q_rows.start * out_layout[r].seq_stride) as u64,
                        lse: if lse_addr[r] == 0 { 0 } else { lse_addr[r] + 4 * w.q_rows.start as u64 },
                        partial: Some(PartialRows {
                            o: po,
                            lse: pl,
                            rows,
                            lse_seq_stride: q_layout.seqlen as u32,
                            merge: l.merge,
                            final_rows: l.final_rows as u32,
                        }),
                        residuals: None,
                    };
                    dev.run_kernels(stream, dtype, &l.sub, io, &l.plan)?;
                }
                computed[r].push(event(stream)?);
                if let Some(t) = timeline.as_mut() {
                    t[r].steps.push(timed(stream)?);
                }
            }
        }
        // Merge each query part's slots into O (and the log-sum-exp), unless the launches did.
        for r in (0..ranks).filter(|_| !fused) {
            let dev = &self.devices[r];
            let out_layout = shards[r].out.layout;
            // Every step's launches are of one kernel family (the element type's).
            let main = step_problems[r][0].first().map(|l| &l.plan);
            let family = main.and_then(|p| p.main_launch()).and_then(|l| l.kernel).map(|k| k.info().family);
            let (Some(plan), Some(family)) = (main, family) else { continue };
            for (q_rows, slots, sub) in &parts[r] {
                let (q_rows, slots) = (q_rows.clone(), *slots);
                let launch = crate::plan::combine_launch(plan.method, dev.props(), family, sub)?;
                let (po, pl) = partial_at(r, 0, q_rows.start);
                let io = Io {
                    q: 0,
                    k: 0,
                    v: 0,
                    o: out_addr[r] + elem * (q_rows.start * out_layout.seq_stride) as u64,
                    lse: if lse_addr[r] == 0 { 0 } else { lse_addr[r] + 4 * q_rows.start as u64 },
                    partial: Some(PartialRows {
                        o: po,
                        lse: pl,
                        rows,
                        lse_seq_stride: q_layout.seqlen as u32,
                        merge: false,
                        final_rows: 0,
                    }),
                    residuals: None,
                };
                let mut params = attn_params(sub, io, None, 0);
                params.splits = slots as u32;
                // SAFETY: `slots` slots of `rows` partial rows were written by this call's
                // steps for every row of the part; O and the log-sum-exp are the validated
                // shard's, addressed at the part's first row with the shard's row stride.
                unsafe { dev.launch_each(dev.stream(), std::slice::from_ref(&launch), &params) }?;
            }
        }
        // The next call reuses the scratch in each device's stream order: after every copy that
        // reads it.
        let mut done = Vec::with_capacity(ranks);
        for r in 0..ranks {
            let stream = self.devices[r].stream();
            let next = (r + 1) % ranks;
            if let Some(last) = copied[next].last() {
                stream.wait(last).context("waiting for the ring's copies")?;
            }
            done.push(event(stream)?);
            if let Some(t) = timeline.as_mut() {
                t[r].end = Some(timed(stream)?);
            }
        }
        drop(scratch);
        if let Ok(mut t) = self.timeline.lock() {
            *t = timeline;
        }
        if let Ok(mut d) = self.done.lock() {
            *d = done;
        }
        Ok(ring_plan)
    }

    /// Waits for the ring's work, at most `timeout`: [`Error::Timeout`] if a GPU has not
    /// finished by then (a hung or failed peer), the first driver error otherwise.
    pub fn synchronize(&self, timeout: Duration) -> Result<()> {
        let began = Instant::now();
        let done = self.done.lock().map(|d| d.iter().map(|e| e.cu_event()).collect::<Vec<_>>());
        let events = done.unwrap_or_default();
        for (r, ev) in events.iter().enumerate() {
            self.devices[r].stream().context().bind_to_thread().context("binding a context")?;
            loop {
                // SAFETY: the event is alive (owned by `self.done`, replaced only by a later call
                // on this `Ring`, which takes `&self` too but runs on this thread or after).
                match unsafe { sys::cuEventQuery(*ev) } {
                    sys::CUresult::CUDA_SUCCESS => break,
                    sys::CUresult::CUDA_ERROR_NOT_READY => {}
                    e => {
                        return Err(Error::Driver {
                            context: "waiting for the ring",
                            source: cu::DriverError(e),
                        });
                    }
                }
                if began.elapsed() > timeout {
                    return Err(Error::Timeout { what: "the ring's attention", waited: began.elapsed() });
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        for d in &self.devices {
            d.synchronize()?;
        }
        Ok(())
    }

    /// Validates a call and plans every launch, before anything runs.
    fn check<T: Element>(&self, shards: &[Shard<'_, T>], opts: &AttentionOptions) -> Result<Setup> {
        let ranks = self.ranks();
        if shards.len() != ranks {
            return Err(RingError::ShardCount { ranks, shards: shards.len() }.into());
        }
        check_options(T::DTYPE, opts)?;
        for (dev, s) in self.devices.iter().zip(shards) {
            for (what, buf) in [("q", s.q.buf), ("k", s.k.buf), ("v", s.v.buf)] {
                dev.owns(what, buf)?;
            }
            dev.owns("out", s.out.buf)?;
            if let Some(l) = &s.lse {
                dev.owns("lse", l)?;
            }
        }
        let first = &shards[0];
        let shape = |l: &Layout| (l.batch, l.seqlen, l.heads, l.head_dim);
        for (rank, s) in shards.iter().enumerate() {
            for (tensor, a, b) in
                [("q", &s.q.layout, &first.q.layout), ("out", &s.out.layout, &first.out.layout)]
            {
                if shape(a) != shape(b) {
                    return Err(RingError::ShardShapes { rank, tensor }.into());
                }
            }
            // The blocks travel with their sender's layout into buffers read with the receiver's.
            for (tensor, a, b) in [("k", &s.k.layout, &first.k.layout), ("v", &s.v.layout, &first.k.layout)] {
                if a != b {
                    return Err(RingError::ShardShapes { rank, tensor }.into());
                }
            }
        }
        let kv_layout = first.k.layout;
        check_layouts(T::DTYPE, &first.q.layout, &kv_layout, &first.out.layout, opts)?;
        // The whole shard, validated as one call (buffers, heads, groups, log-sum-exp length).
        let mut problems = Vec::with_capacity(ranks);
        for s in shards {
            let lens = [s.q.buf.len(), s.k.buf.len(), s.v.buf.len(), s.out.buf.len()];
            let p = Problem::new(s.q.layout, s.k.layout, s.v.layout, s.out.layout, lens, opts)?;
            p.check_lse_len(s.lse.as_ref().map(|l| l.len()))?;
            problems.push(p);
        }
        let problem = problems.swap_remove(0);
        let props: Vec<&DeviceProps> = self.devices.iter().map(|d| d.props()).collect();
        let outs: Vec<(Layout, Layout)> = shards.iter().map(|s| (s.q.layout, s.out.layout)).collect();
        plan_steps(&props, T::DTYPE, &outs, kv_layout, problem, opts)
    }
}

/// The options a ring refuses, and the element types it runs.
fn check_options(dtype: DType, opts: &AttentionOptions) -> Result<()> {
    let feature = |feature| Err(Error::from(RingError::Feature { feature }));
    if opts.varlen.is_some() {
        return feature("variable-length batches");
    }
    if !opts.window.is_none() {
        return feature("sliding windows");
    }
    if opts.softcap.is_some() {
        return feature("soft-capping");
    }
    if opts.alibi_slopes.is_some() {
        return feature("ALiBi");
    }
    if opts.cache_seqlens.is_some() || opts.block_table.is_some() {
        return feature("K/V caches");
    }
    if opts.splits.is_some() {
        return feature("split-KV (each step is one split already)");
    }
    if !matches!(dtype, DType::F16 | DType::BF16) {
        return Err(RingError::DType { dtype }.into());
    }
    Ok(())
}

/// What the shard layouts must be: K and V dense (they travel as one copy), Q and O in 16-byte
/// rows (the partial results are merged 16 bytes at a time), causal shards of two equal chunks
/// with as many keys as queries.
fn check_layouts(dtype: DType, q: &Layout, kv: &Layout, out: &Layout, opts: &AttentionOptions) -> Result<()> {
    let dense = kv.batch * kv.seqlen * kv.heads * kv.head_dim;
    if kv.required_len() != Some(dense) || kv.overlaps() {
        return Err(
            RingError::KvNotDense { strides: [kv.batch_stride, kv.seq_stride, kv.head_stride] }.into()
        );
    }
    for (tensor, l) in [("q", q), ("out", out)] {
        if required_alignment(dtype, l) != 16 {
            return Err(RingError::Unaligned { tensor }.into());
        }
    }
    let (lq, lk) = (q.seqlen, kv.seqlen);
    if opts.causal && (lq != lk || lq % 2 != 0) {
        return Err(RingError::CausalShard { seqlen_q: lq, seqlen_k: lk }.into());
    }
    Ok(())
}

/// One launch of a ring step, as [`plan_launches`] plans it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepLaunch {
    /// The step (the block of rank `(rank − step) mod ranks`).
    pub step: usize,
    /// Its query rows, key rows and mask.
    pub work: StepWork,
    /// The kernel it runs.
    pub method: Method,
    /// The entry name of its main kernel (`Plan::kernel`).
    pub kernel: &'static str,
    /// The first partial slot it writes, and how many (the kernel's splits).
    pub slots: Range<usize>,
    /// Running merge (every launch on the Hopper kernel): whether its rows have a running result
    /// from earlier steps.
    pub merge: bool,
    /// Running merge: its leading rows whose last contribution this is (written to O).
    pub final_rows: usize,
}

/// Every launch of a context-parallel call ([`plan_launches`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingLaunches {
    /// Per rank, its launches in step order.
    pub per_rank: Vec<Vec<StepLaunch>>,
    /// Whether the launches merge their rows themselves (every one on the Hopper kernel); else
    /// a combine kernel merges the slots at the end.
    pub running_merge: bool,
    /// f32 partial slots per query row.
    pub slots: usize,
}

/// Every launch of a context-parallel call, planned without GPUs: what [`Ring::attention`] runs
/// on devices of these properties, with shards of these layouts on every rank.
pub fn plan_launches(
    props: &DeviceProps,
    dtype: DType,
    ranks: usize,
    q: Layout,
    kv: Layout,
    out: Layout,
    opts: &AttentionOptions,
) -> Result<RingLaunches> {
    if ranks < 2 {
        return Err(RingError::TooFewRanks { ranks }.into());
    }
    check_options(dtype, opts)?;
    check_layouts(dtype, &q, &kv, &out, opts)?;
    let lens = [q, kv, kv, out].map(|l| l.required_len().unwrap_or(0));
    let problem = Problem::new(q, kv, kv, out, lens, opts)?;
    let setup = plan_steps(&vec![props; ranks], dtype, &vec![(q, out); ranks], kv, problem, opts)?;
    let per_rank = setup
        .schedules
        .iter()
        .zip(&setup.step_problems)
        .map(|(sched, steps)| {
            sched
                .iter()
                .zip(steps)
                .enumerate()
                .flat_map(|(step, (works, launches))| {
                    works.iter().zip(launches).map(move |(w, l)| StepLaunch {
                        step,
                        work: w.clone(),
                        method: l.plan.method,
                        kernel: l.plan.kernel(),
                        slots: l.first_slot..l.first_slot + l.plan.splits.max(1),
                        merge: l.merge,
                        final_rows: l.final_rows,
                    })
                })
                .collect()
        })
        .collect();
    Ok(RingLaunches { per_rank, running_merge: setup.fused, slots: setup.slots })
}

/// Plans every launch of a validated call: per rank (its device's properties, its Q and O
/// layouts) and step, the schedule's launches with their sub-problems, plans and partial slots,
/// and the running merge's flags when every launch is on the Hopper kernel. `problem` is rank 0's
/// whole-shard problem (its scale and shape hold for every rank).
fn plan_steps(
    props: &[&DeviceProps],
    dtype: DType,
    shards: &[(Layout, Layout)],
    kv_layout: Layout,
    problem: Problem,
    opts: &AttentionOptions,
) -> Result<Setup> {
    let ranks = props.len();
    let lq = problem.q().seqlen;
    let step_opts = AttentionOptions { scale: Some(problem.scale()), splits: Some(1), ..opts.clone() };
    let mut schedules = Vec::with_capacity(ranks);
    let mut step_problems = Vec::with_capacity(ranks);
    let mut parts = Vec::with_capacity(ranks);
    for (r, (props, (q_layout, out_layout))) in props.iter().zip(shards).enumerate() {
        let sched = schedule(r, ranks, lq, opts.causal);
        // Per query part: the partial slots its launches have used.
        let qparts = query_parts(lq, opts.causal);
        let mut used = vec![0usize; qparts.len()];
        let mut per_step = Vec::with_capacity(ranks);
        for works in &sched {
            let mut launches = Vec::with_capacity(works.len());
            for w in works {
                let part = |l: &Layout, rows: &Range<usize>| Layout { seqlen: rows.len(), ..*l };
                let (q, k) = (part(q_layout, &w.q_rows), part(&kv_layout, &w.k_rows));
                let o = part(out_layout, &w.q_rows);
                let lens = [q, k, k, o].map(|l| l.required_len().unwrap_or(0));
                let o_opts = AttentionOptions { causal: w.causal, ..step_opts.clone() };
                let sub = Problem::new(q, k, k, o, lens, &o_opts)?;
                let mut plan = crate::plan::plan(props, dtype, &sub, &o_opts)?;
                // (One query tile a block: the persistent Hopper instances' partial rows are not
                // covered by their tests, which need two GPUs.)
                plan = crate::plan::one_tile_per_block(props, &sub, plan)?;
                if plan.method == Method::FlashTensorCore {
                    // The `mma.sync` kernel writes partial results only when it splits the
                    // keys: two splits, two slots.
                    let split =
                        AttentionOptions { method: Method::FlashTensorCore, splits: Some(2), ..o_opts };
                    plan = crate::plan::plan(props, dtype, &sub, &split)?;
                }
                let slots = match plan.method {
                    Method::FlashHopper if plan.splits == 1 => 1,
                    Method::FlashTensorCore if plan.splits == 2 => 2,
                    method => {
                        return Err(InvalidInput::Unsupported { method, reason: Reason::NoSplitKv }.into());
                    }
                };
                // The parts this launch covers have used the same slots so far (the
                // schedule's order): it writes the next `slots` of each.
                let covered: Vec<usize> = (0..qparts.len())
                    .filter(|&i| w.q_rows.start <= qparts[i].start && qparts[i].end <= w.q_rows.end)
                    .collect();
                let first_slot = covered.first().map_or(0, |&i| used[i]);
                if covered.iter().any(|&i| used[i] != first_slot) {
                    return Err(
                        RingError::Feature { feature: "a schedule whose parts disagree (a bug)" }.into()
                    );
                }
                covered.iter().for_each(|&i| used[i] += slots);
                launches.push(Launch { sub, plan, first_slot, covered, merge: false, final_rows: 0 });
            }
            per_step.push(launches);
        }
        schedules.push(sched);
        step_problems.push(per_step);
        // The combine's view of each part: its query rows (any keys: it reads none).
        let mut merges = Vec::with_capacity(qparts.len());
        for (rows, n) in qparts.into_iter().zip(used) {
            let (q, o) =
                (Layout { seqlen: rows.len(), ..*q_layout }, Layout { seqlen: rows.len(), ..*out_layout });
            let lens = [q, kv_layout, kv_layout, o].map(|l| l.required_len().unwrap_or(0));
            let sub = Problem::new(q, kv_layout, kv_layout, o, lens, &step_opts)?;
            merges.push((rows, n, sub));
        }
        parts.push(merges);
    }
    // On the Hopper kernel every launch merges its rows into one running f32 slot and writes
    // the final rows itself: no combine, one slot. (The `mma.sync` kernel's two splits per
    // launch go to separate slots that the combine merges.)
    let fused = step_problems.iter().flatten().flatten().all(|l| l.plan.method == Method::FlashHopper);
    if fused {
        for (per_step, merges) in step_problems.iter_mut().zip(&parts) {
            for l in per_step.iter_mut().flatten() {
                l.merge = l.first_slot > 0;
                // Parts are in row order and a part ends no later than the parts after it.
                l.final_rows = l
                    .covered
                    .iter()
                    .take_while(|&&i| l.first_slot + 1 == merges[i].1)
                    .map(|&i| merges[i].0.len())
                    .sum();
                l.first_slot = 0;
            }
        }
    }
    let slots = if fused { 1 } else { parts.iter().flatten().map(|(_, n, _)| *n).max().unwrap_or(0) };
    Ok(Setup { problem, kv_layout, schedules, step_problems, parts, slots, fused })
}

/// One launch of a ring step: its sub-problem (a query part against rows of the block), its
/// plan, and the first partial slot it writes (it writes `plan.splits`).
struct Launch {
    sub: Problem,
    plan: Plan,
    first_slot: usize,
    /// The query parts the launch covers (indices into the rank's parts, in row order).
    covered: Vec<usize>,
    /// Running merge (every launch on the Hopper kernel): whether the rows have a running result.
    merge: bool,
    /// Running merge: the launch's leading rows whose last contribution this is.
    final_rows: usize,
}

/// A validated call: rank 0's whole-shard problem, the K/V layout every rank shares, per rank
/// and step the schedule's launches, per rank the query parts with their slot counts, and the
/// most slots any part uses.
struct Setup {
    problem: Problem,
    kv_layout: Layout,
    schedules: Vec<Vec<Vec<StepWork>>>,
    step_problems: Vec<Vec<Vec<Launch>>>,
    parts: Vec<Vec<(Range<usize>, usize, Problem)>>,
    slots: usize,
    /// Whether every launch merges into a running slot (the Hopper kernel): no combine.
    fused: bool,
}

/// Enables `a`'s access to `b`'s memory; whether the hardware allows it.
fn enable_peer_access(a: &Device, b: &Device) -> Result<bool> {
    let (ca, cb) = (a.stream().context(), b.stream().context());
    let mut can = 0;
    // SAFETY: valid out-pointer and device handles.
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, ca.cu_device(), cb.cu_device()) }
        .result()
        .context("asking whether two GPUs can access each other's memory")?;
    if can == 0 {
        return Ok(false);
    }
    ca.bind_to_thread().context("binding a context")?;
    // SAFETY: `cb` is a live context of another device.
    match unsafe { sys::cuCtxEnablePeerAccess(cb.cu_ctx(), 0) } {
        sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(true),
        e => Err(Error::Driver {
            context: "enabling peer access between two GPUs",
            source: cu::DriverError(e),
        }),
    }
}
