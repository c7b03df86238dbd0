//! Standard attention on the GPU, the method FlashAttention is measured against: the scores
//! `S = Q·Kᵀ` (f32) and the probabilities `P = softmax(scale·S)` are stored in device memory,
//! `B·H·Nq·Nk` elements each, then `O = P·V`. Both products are cuBLAS strided-batched GEMMs
//! with f32 accumulation; the row softmax is a Rust kernel. When the N×N buffers do not fit, the
//! call returns [`Error::OutOfMemory`] saying how many bytes it needed: the memory wall.

use std::ffi::c_void;

use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::cublas::{CudaBlas, result as blas};
use flashattn_kernels::params::{
    FILL_THREADS, FillRowsParams, SOFTMAX_SHARED_BYTES, SOFTMAX_THREADS, SoftmaxParams,
};

use crate::attention::Io;
use crate::buffer::DType;
use crate::device::{Device, LaunchShape};
use crate::error::{Error, Result};
use crate::plan::{Plan, gemm_ld, standard_matrix_elems};
use crate::problem::Problem;
use crate::registry::elem;
use flashattn_kernels::registry::Family;

fn data_type(dtype: DType) -> cudaDataType {
    match dtype {
        DType::F16 => cudaDataType::CUDA_R_16F,
        DType::BF16 => cudaDataType::CUDA_R_16BF,
        DType::F32 => cudaDataType::CUDA_R_32F,
    }
}

/// One strided-batched GEMM `C = op(A)·op(B)` in cuBLAS's column-major terms.
struct Gemm {
    trans_a: bool,
    m: usize,
    n: usize,
    k: usize,
    a: u64,
    lda: usize,
    stride_a: usize,
    b: u64,
    ldb: usize,
    stride_b: usize,
    c: u64,
    ldc: usize,
    stride_c: usize,
    batch: usize,
}

/// A 32-bit cuBLAS extent. The planner has checked every extent and stride against
/// `i32::MAX`, so this never saturates in practice.
fn int(x: usize) -> i32 {
    i32::try_from(x).unwrap_or(i32::MAX)
}

impl Gemm {
    /// Runs in `in_type` → `out_type` with f32 accumulation. Sizes are in elements of each
    /// operand's own type.
    fn run(&self, blas: &CudaBlas, in_type: DType, out_type: DType) -> Result<()> {
        if self.batch == 0 || self.m == 0 || self.n == 0 {
            return Ok(());
        }
        let (alpha, beta) = (1.0f32, 0.0f32);
        let op = |t| if t { cublasOperation_t::CUBLAS_OP_T } else { cublasOperation_t::CUBLAS_OP_N };
        // SAFETY: addresses and extents describe device buffers the caller validated; the handle
        // runs on the device's stream.
        unsafe {
            blas::gemm_strided_batched_ex(
                *blas.handle(),
                op(self.trans_a),
                cublasOperation_t::CUBLAS_OP_N,
                int(self.m),
                int(self.n),
                int(self.k),
                (&alpha as *const f32).cast::<c_void>(),
                self.a as *const c_void,
                data_type(in_type),
                int(self.lda.max(1)),
                self.stride_a as i64,
                self.b as *const c_void,
                data_type(in_type),
                int(self.ldb.max(1)),
                self.stride_b as i64,
                (&beta as *const f32).cast::<c_void>(),
                self.c as *mut c_void,
                data_type(out_type),
                int(self.ldc.max(1)),
                self.stride_c as i64,
                int(self.batch),
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|source| Error::Blas { context: "a strided-batched GEMM of standard attention", source })
    }
}

/// Writes 0 to `tokens` rows (all heads, all of the head dim) of the output starting at `addr`.
fn zero_rows(dev: &Device, dtype: DType, o: &crate::problem::Layout, addr: u64, tokens: usize) -> Result<()> {
    let params = FillRowsParams {
        ptr: addr,
        seq_stride: o.seq_stride as u64,
        head_stride: o.head_stride as u64,
        tokens: tokens as u32,
        heads: o.heads as u32,
        cols: o.head_dim as u32,
        value: 0,
    };
    let kernel = dev.fill_kernel(Family::FillRows(dtype.size_bytes() as u32))?;
    let total = (tokens * o.heads * o.head_dim) as u64;
    let blocks = total.div_ceil(FILL_THREADS as u64).clamp(1, 4096) as u32;
    let shape = LaunchShape { grid: (blocks, 1, 1), block: (FILL_THREADS, 1, 1), shared_bytes: 0 };
    // SAFETY: the rows are inside the validated output tensor.
    unsafe { dev.launch(kernel, shape, &params) }
}

/// Standard attention: validated `problem`, device addresses `io`, and the plan that
/// [`crate::plan::plan`] made for it (which checked every extent, stride and size used here).
pub(crate) fn run(dev: &Device, dtype: DType, problem: &Problem, io: Io, plan: &Plan) -> Result<()> {
    let elems = standard_matrix_elems(problem).unwrap_or(u64::MAX);
    let blas = dev.blas()?;
    let what = || {
        format!(
            "standard attention's score matrix S ({elems} f32) and probabilities P ({elems} {dtype}), \
             i.e. batch × heads × seqlen_q × seqlen_k elements each"
        )
    };
    let es = dtype.size_bytes() as u64;
    let total = plan.scratch_bytes;
    let s = dev.alloc_scratch(4 * elems, total, what)?;
    let p = dev.alloc_scratch(es * elems, total, what)?;
    let (q, k, v, o) = (problem.q(), problem.k(), problem.v(), problem.o());
    let h = q.heads;
    let g = problem.group_size();
    let softmax = dev.fill_kernel(Family::SoftmaxRows(elem(dtype)))?;
    // (first sequence, sequences at once): all at once when every tensor's (batch, head) pairs
    // are one stride apart and there is no varlen; otherwise one sequence at a time.
    let uniform = problem.varlen().is_none() && [q, k, v, o].iter().all(|l| l.heads_uniform_across_batch());
    let chunks: Vec<(usize, usize)> =
        if uniform { vec![(0, problem.batch())] } else { (0..problem.batch()).map(|i| (i, 1)).collect() };
    for (first, count) in chunks {
        let seq = problem.sequence(first);
        let (nq, nk) = (seq.len_q, seq.len_k);
        if nq == 0 {
            continue;
        }
        if nk == 0 {
            // No keys: the outputs are 0 and the log-sum-exp -inf by definition, but a matrix
            // product over zero keys writes nothing, so write them directly.
            for b in 0..count {
                let seq = problem.sequence(first + b);
                zero_rows(dev, dtype, o, io.o + es * o.offset(seq.batch_index, seq.q_start, 0) as u64, nq)?;
            }
        }
        let nn = nq * nk;
        let addr = |base: u64, l: &crate::problem::Layout, start: usize, head: usize| {
            base + es * l.offset(seq.batch_index, start, head) as u64
        };
        // Heads hk·g + j for j in 0..g: query heads one group apart, K/V heads consecutive.
        for j in 0..g {
            let heads_kv = h / g;
            let batch = count * heads_kv;
            // Sᵀ (Nk × Nq, column-major) = K · Qᵀ  ⇔  S = Q·Kᵀ row-major.
            Gemm {
                trans_a: true,
                m: nk,
                n: nq,
                k: q.head_dim,
                a: addr(io.k, k, seq.k_start, 0),
                lda: gemm_ld(k),
                stride_a: k.head_stride,
                b: addr(io.q, q, seq.q_start, j),
                ldb: gemm_ld(q),
                stride_b: g * q.head_stride,
                c: s.device_address() + 4 * (j * nn) as u64,
                ldc: nk,
                stride_c: g * nn,
                batch,
            }
            .run(blas, dtype, DType::F32)?;
        }
        let rows = count * h * nq;
        let lse = if io.lse == 0 { 0 } else { io.lse + 4 * problem.lse_index(first, 0, 0) as u64 };
        let params = SoftmaxParams {
            s: s.device_address(),
            p: p.device_address(),
            lse,
            rows: rows as u32,
            len_q: nq as u32,
            len_k: nk as u32,
            lse_head_stride: if problem.varlen().is_some() { q.seqlen as u32 } else { nq as u32 },
            scale_log2: problem.scale_log2(),
            causal: problem.causal() as u32,
        };
        let shape = LaunchShape {
            grid: (rows as u32, 1, 1),
            block: (SOFTMAX_THREADS, 1, 1),
            shared_bytes: SOFTMAX_SHARED_BYTES,
        };
        // SAFETY: S and P hold `rows × nk` elements; the lse index is inside the validated output.
        unsafe { dev.launch(softmax, shape, &params)? };
        for j in 0..g {
            let heads_kv = h / g;
            // Oᵀ (d × Nq, column-major) = Vᵀ · Pᵀ  ⇔  O = P·V row-major.
            Gemm {
                trans_a: false,
                m: q.head_dim,
                n: nq,
                k: nk,
                a: addr(io.v, v, seq.k_start, 0),
                lda: gemm_ld(v),
                stride_a: v.head_stride,
                b: p.device_address() + es * (j * nn) as u64,
                ldb: nk,
                stride_b: g * nn,
                c: addr(io.o, o, seq.q_start, j),
                ldc: gemm_ld(o),
                stride_c: g * o.head_stride,
                batch: count * heads_kv,
            }
            .run(blas, dtype, dtype)?;
        }
    }
    Ok(())
}
