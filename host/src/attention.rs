//! The GPU entry point: [`Device::attention`], its tensors, and the launch plan it returns.

use flashattn_kernels::config::{MMA_CONFIGS, mma_default, mma_find};
use flashattn_kernels::params::{
    AttnParams, SIMT_HEAD_DIMS, SIMT_KEY_CHUNK, SIMT_THREADS_PER_ROW, simt_shared_bytes,
};

use crate::buffer::{DType, DeviceBuffer, Element};
use crate::device::{Device, LaunchShape};
use crate::error::{InvalidInput, Result};
use crate::problem::{AttentionOptions, Layout, Method, Problem, Tiles, VarLen};
use crate::ptx::Kernel;

/// A read-only tensor in device memory: a buffer and the layout that addresses it.
#[derive(Clone, Copy, Debug)]
pub struct DeviceTensor<'a, T> {
    /// The storage.
    pub buf: &'a DeviceBuffer<T>,
    /// Shape and strides.
    pub layout: Layout,
}

/// A writable tensor in device memory.
#[derive(Debug)]
pub struct DeviceTensorMut<'a, T> {
    /// The storage.
    pub buf: &'a mut DeviceBuffer<T>,
    /// Shape and strides.
    pub layout: Layout,
}

impl<T> DeviceBuffer<T> {
    /// This buffer seen through `layout`.
    pub fn view(&self, layout: Layout) -> DeviceTensor<'_, T> {
        DeviceTensor { buf: self, layout }
    }

    /// This buffer seen through `layout`, writable.
    pub fn view_mut(&mut self, layout: Layout) -> DeviceTensorMut<'_, T> {
        DeviceTensorMut { buf: self, layout }
    }
}

/// How a call runs: the method and kernel chosen, its tiles and launch shape, and the device
/// memory it needs beyond Q, K, V, O and the log-sum-exp.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The method that runs (never `Auto`).
    pub method: Method,
    /// The kernel that runs (the softmax kernel for `Standard`).
    pub kernel: &'static str,
    /// Query rows per block.
    pub block_m: usize,
    /// Keys per tile.
    pub block_n: usize,
    /// Threads per block.
    pub threads: u32,
    /// Dynamic shared memory per block, bytes.
    pub shared_bytes: u32,
    /// Grid of the main launch (x, y, z).
    pub grid: (u32, u32, u32),
    /// Device memory allocated by the call beyond its inputs and outputs, bytes (the N×N
    /// scores and probabilities for `Standard`, the sequence offsets for varlen).
    pub extra_bytes: u64,
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} via `{}`: tiles {}×{}, {} threads, {} B shared memory, grid {:?}, {} B extra device memory",
            self.method,
            self.kernel,
            self.block_m,
            self.block_n,
            self.threads,
            self.shared_bytes,
            self.grid,
            self.extra_bytes
        )
    }
}

/// Tile choice of the general flash kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SimtTiles {
    pub padded_dim: u32,
    pub block_m: u32,
    pub block_n: u32,
}

/// Query rows per block the general kernel can run (4 threads per row, ≤ 256 threads).
const SIMT_BLOCK_M: [usize; 3] = [16, 32, 64];

impl SimtTiles {
    /// Default tiles for a head dim, or the user's override, checked against the kernel and the
    /// device's shared memory.
    pub(crate) fn choose(
        head_dim: usize,
        tiles: Tiles,
        shared_limit: u32,
    ) -> Result<SimtTiles, InvalidInput> {
        let padded_dim = SIMT_HEAD_DIMS.into_iter().find(|&p| p as usize >= head_dim).unwrap_or(256);
        // Defaults: more rows per block where the accumulator is small; fewer keys per tile where
        // the K/V tiles are large (d = 256), so that two blocks fit on an SM.
        let block_m = tiles.block_m.unwrap_or(if padded_dim <= 64 { 64 } else { 32 });
        let block_n = tiles.block_n.unwrap_or(if padded_dim <= 128 { 64 } else { 32 });
        let bad = |why: String| InvalidInput::Tiles {
            method: "flash",
            block_m: tiles.block_m,
            block_n: tiles.block_n,
            why,
        };
        if !SIMT_BLOCK_M.contains(&block_m) {
            return Err(bad(format!("block_m must be one of {SIMT_BLOCK_M:?}")));
        }
        let chunk = SIMT_KEY_CHUNK as usize;
        if block_n == 0 || block_n % chunk != 0 || block_n > 256 {
            return Err(bad(format!("block_n must be a multiple of {chunk} up to 256")));
        }
        let t = SimtTiles { padded_dim, block_m: block_m as u32, block_n: block_n as u32 };
        if t.shared_bytes() > shared_limit {
            return Err(bad(format!(
                "it needs {} bytes of shared memory for head dim {padded_dim}, the device allows {shared_limit}",
                t.shared_bytes()
            )));
        }
        Ok(t)
    }

    pub(crate) fn shared_bytes(&self) -> u32 {
        simt_shared_bytes(self.block_m, self.block_n, self.padded_dim)
    }

    pub(crate) fn threads(&self) -> u32 {
        self.block_m * SIMT_THREADS_PER_ROW
    }
}

/// Grid dimensions must fit the driver's limits (y and z ≤ 65535).
fn check_grid(method: &'static str, grid: (u32, u32, u32)) -> Result<(), InvalidInput> {
    if grid.1 > 65_535 || grid.2 > 65_535 {
        return Err(InvalidInput::Unsupported {
            method,
            why: format!("more than 65535 heads or sequences in one call (grid {grid:?}): split the batch"),
        });
    }
    Ok(())
}

fn u32_of(method: &'static str, what: &str, x: usize) -> Result<u32, InvalidInput> {
    u32::try_from(x)
        .map_err(|_| InvalidInput::Unsupported { method, why: format!("{what} of {x} (over 2³²)") })
}

impl Device {
    /// Validates the call and returns the plan it would run, without running anything.
    pub fn plan<T: Element>(&self, problem: &Problem, opts: &AttentionOptions) -> Result<Plan> {
        Ok(self.choose(T::DTYPE, problem, opts)?.plan)
    }

    /// Picks the kernel and its launch for a validated problem.
    fn choose(
        &self,
        dtype: DType,
        problem: &Problem,
        opts: &AttentionOptions,
    ) -> Result<Choice, InvalidInput> {
        match opts.method {
            Method::Flash => self.plan_simt(dtype, problem, opts),
            Method::FlashTensorCore => self.plan_mma(dtype, problem, opts),
            // The tensor-core kernel where it applies, the general one otherwise.
            Method::Auto => {
                self.plan_mma(dtype, problem, opts).or_else(|_| self.plan_simt(dtype, problem, opts))
            }
            Method::Standard => Ok(Choice { plan: crate::standard::plan(dtype, problem)?, kernel: None }),
        }
    }

    fn plan_mma(
        &self,
        dtype: DType,
        problem: &Problem,
        opts: &AttentionOptions,
    ) -> Result<Choice, InvalidInput> {
        let unsupported = |why: String| InvalidInput::Unsupported { method: "flash-tc", why };
        let d = problem.q.head_dim;
        let head_dims = || {
            let mut v: Vec<u32> = MMA_CONFIGS.iter().map(|c| c.head_dim).collect();
            v.dedup();
            v
        };
        let max_q = (0..problem.batch()).map(|i| problem.sequence(i).len_q).max().unwrap_or(0);
        let default = mma_default(d as u32, problem.causal, max_q)
            .filter(|_| dtype != DType::F32)
            .ok_or_else(|| {
                unsupported(format!(
                    "{dtype} with head dim {d} (it runs f16/bf16 with head dims {:?}; use `flash`)",
                    head_dims()
                ))
            })?;
        for (name, l) in [("q", &problem.q), ("k", &problem.k), ("v", &problem.v), ("o", &problem.o)] {
            if [l.batch_stride, l.seq_stride, l.head_stride].iter().any(|s| s % 8 != 0) {
                return Err(unsupported(format!(
                    "{name}'s strides {:?}: they must be multiples of 8 elements (16-byte rows)",
                    [l.batch_stride, l.seq_stride, l.head_stride]
                )));
            }
        }
        // A tile override picks one of the instantiated configurations of this head dim.
        let index = match (opts.tiles.block_m, opts.tiles.block_n) {
            (None, None) => default,
            (m, n) => {
                let c = MMA_CONFIGS[default];
                let (m, n) = (m.unwrap_or(c.block_m as usize), n.unwrap_or(c.block_n as usize));
                mma_find(d as u32, m as u32, n as u32).ok_or_else(|| {
                    let have: Vec<String> = MMA_CONFIGS
                        .iter()
                        .filter(|c| c.head_dim as usize == d)
                        .map(|c| format!("{}x{}", c.block_m, c.block_n))
                        .collect();
                    InvalidInput::Tiles {
                        method: "flash-tc",
                        block_m: opts.tiles.block_m,
                        block_n: opts.tiles.block_n,
                        why: format!("for d = {d} it has the tiles {}", have.join(", ")),
                    }
                })?
            }
        };
        let config = MMA_CONFIGS[index];
        let kernel = Kernel::flash_mma(dtype, index).ok_or_else(|| unsupported(format!("{dtype}")))?;
        let limit = self.props().max_shared_per_block;
        if config.shared_bytes() > limit {
            return Err(unsupported(format!(
                "this device: it needs {} bytes of shared memory per block, the device allows {limit}",
                config.shared_bytes()
            )));
        }
        let (m, n) = (config.block_m, config.block_n);
        self.flash_choice(
            Method::FlashTensorCore,
            kernel,
            problem,
            (m, n),
            config.threads(),
            config.shared_bytes(),
        )
    }

    /// The plan of a flash kernel launch: one block per `block_m` query rows of each head and
    /// sequence, no device memory beyond the varlen offsets.
    fn flash_choice(
        &self,
        method: Method,
        kernel: Kernel,
        problem: &Problem,
        (block_m, block_n): (u32, u32),
        threads: u32,
        shared_bytes: u32,
    ) -> Result<Choice, InvalidInput> {
        let grid = self.grid(problem, block_m as usize, method.name())?;
        let plan = Plan {
            method,
            kernel: kernel.name(),
            block_m: block_m as usize,
            block_n: block_n as usize,
            threads,
            shared_bytes,
            grid,
            extra_bytes: offsets_bytes(problem),
        };
        Ok(Choice { plan, kernel: Some(kernel) })
    }

    /// Grid of the flash kernels: query tiles of the longest sequence × heads × sequences.
    fn grid(
        &self,
        problem: &Problem,
        block_m: usize,
        method: &'static str,
    ) -> Result<(u32, u32, u32), InvalidInput> {
        let max_q = (0..problem.batch()).map(|i| problem.sequence(i).len_q).max().unwrap_or(0);
        let grid = (
            u32_of(method, "query tokens", max_q.div_ceil(block_m))?,
            u32_of(method, "heads", problem.q.heads)?,
            u32_of(method, "sequences", problem.batch())?,
        );
        check_grid(method, grid)?;
        Ok(grid)
    }

    fn plan_simt(
        &self,
        dtype: DType,
        problem: &Problem,
        opts: &AttentionOptions,
    ) -> Result<Choice, InvalidInput> {
        let tiles = SimtTiles::choose(problem.q.head_dim, opts.tiles, self.props().max_shared_per_block)?;
        let kernel = Kernel::flash_simt(dtype, tiles.padded_dim)
            .ok_or(InvalidInput::HeadDim { head_dim: problem.q.head_dim })?;
        let tile = (tiles.block_m, tiles.block_n);
        self.flash_choice(Method::Flash, kernel, problem, tile, tiles.threads(), tiles.shared_bytes())
    }

    /// Attention on the GPU: `out = softmax(scale·Q·Kᵀ [+ mask])·V`, and optionally the per-row
    /// log-sum-exp (f32, `(batch, heads, seqlen_q)`, or `(heads, total_q)` for varlen).
    ///
    /// Q, K, V and O are `(batch, seqlen, heads, head_dim)` tensors with any strides (head dim
    /// contiguous); K/V may have fewer heads than Q (grouped-query attention). Everything is
    /// checked before any work; on error nothing is written. The work is queued on the device's
    /// stream: call [`Device::synchronize`] (or download) to wait for it.
    pub fn attention<T: Element>(
        &self,
        q: DeviceTensor<'_, T>,
        k: DeviceTensor<'_, T>,
        v: DeviceTensor<'_, T>,
        out: DeviceTensorMut<'_, T>,
        lse: Option<&mut DeviceBuffer<f32>>,
        opts: &AttentionOptions,
    ) -> Result<Plan> {
        let problem = Problem::new(
            q.layout,
            k.layout,
            v.layout,
            out.layout,
            [q.buf.len(), k.buf.len(), v.buf.len(), out.buf.len()],
            opts,
        )?;
        if let Some(l) = &lse {
            if l.len() < problem.lse_len() {
                return Err(InvalidInput::LseTooSmall { needed: problem.lse_len(), len: l.len() }.into());
            }
        }
        let lse_addr = lse.map_or(0, |l| l.device_address());
        let io = Io {
            q: q.buf.device_address(),
            k: k.buf.device_address(),
            v: v.buf.device_address(),
            o: out.buf.device_address(),
            lse: lse_addr,
        };
        let choice = self.choose(T::DTYPE, &problem, opts)?;
        match choice.kernel {
            None => crate::standard::run(self, T::DTYPE, &problem, io),
            Some(kernel) => self.run_flash(&problem, io, choice.plan, kernel),
        }
    }

    fn run_flash(&self, problem: &Problem, io: Io, plan: Plan, kernel: Kernel) -> Result<Plan> {
        if plan.grid.0 == 0 || plan.grid.1 == 0 || plan.grid.2 == 0 {
            return Ok(plan);
        }
        let offsets = match &problem.varlen {
            Some(vl) => Some(self.upload_offsets(vl)?),
            None => None,
        };
        let addresses = offsets.as_ref().map(|o| (o.0.device_address(), o.1.device_address()));
        let params = attn_params(problem, io, addresses, plan.block_n as u32)?;
        let shape =
            LaunchShape { grid: plan.grid, block: (plan.threads, 1, 1), shared_bytes: plan.shared_bytes };
        // SAFETY: `params` is the kernel's parameter struct, built from validated layouts whose
        // buffers hold every addressed element. The offset buffers are freed in stream order,
        // after the kernel.
        unsafe { self.launch(kernel, shape, &params)? };
        Ok(plan)
    }

    /// Copies variable-length offsets to the device.
    fn upload_offsets(&self, vl: &VarLen) -> Result<(DeviceBuffer<u32>, DeviceBuffer<u32>)> {
        Ok((self.upload_u32(&vl.cu_seqlens_q)?, self.upload_u32(&vl.cu_seqlens_k)?))
    }
}

/// A chosen plan and the flash kernel that runs it (`None` for standard attention).
struct Choice {
    plan: Plan,
    kernel: Option<Kernel>,
}

/// Device bytes a call allocates for variable-length offsets.
fn offsets_bytes(problem: &Problem) -> u64 {
    problem.varlen.as_ref().map_or(0, |v| 8 * v.cu_seqlens_q.len() as u64)
}

/// Device addresses of one call's tensors.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Io {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub lse: u64,
}

fn strides(l: &Layout) -> [u64; 3] {
    [l.batch_stride as u64, l.seq_stride as u64, l.head_stride as u64]
}

/// The kernels' parameter struct for a validated problem.
pub(crate) fn attn_params(
    problem: &Problem,
    io: Io,
    offsets: Option<(u64, u64)>,
    block_n: u32,
) -> Result<AttnParams, InvalidInput> {
    let m = "flash";
    Ok(AttnParams {
        q: io.q,
        k: io.k,
        v: io.v,
        o: io.o,
        lse: io.lse,
        cu_seqlens_q: offsets.map_or(0, |o| o.0),
        cu_seqlens_k: offsets.map_or(0, |o| o.1),
        q_strides: strides(&problem.q),
        k_strides: strides(&problem.k),
        v_strides: strides(&problem.v),
        o_strides: strides(&problem.o),
        seqlen_q: u32_of(m, "query tokens", problem.q.seqlen)?,
        seqlen_k: u32_of(m, "key tokens", problem.k.seqlen)?,
        heads_q: u32_of(m, "heads", problem.q.heads)?,
        group: u32_of(m, "heads per group", problem.group_size())?,
        head_dim: problem.q.head_dim as u32,
        scale_log2: problem.scale_log2(),
        causal: problem.causal as u32,
        block_n,
        lse_seq_stride: u32_of(m, "query tokens", problem.q.seqlen)?,
        _pad: 0,
    })
}
