//! The device's ceilings for the roofline, measured in the same run: HBM bandwidth from a
//! device-to-device copy, dense throughput from a bf16 cuBLAS matmul.

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use flashattn::{Device, GpuTimer, bf16};

use crate::inputs::Pools;
use crate::record::Ceilings;
use crate::stats::Summary;

/// Bandwidth of the reference H200 (h200-peers.md), TB/s.
pub const H200_BANDWIDTH_TBS: f64 = 4.3;
/// HBM3e bandwidth of the H200 by NVIDIA's datasheet, TB/s (what decode rows are also compared
/// with: the measured copy bandwidth is the achievable one).
pub const H200_DATASHEET_TBS: f64 = 4.8;
/// bf16 matmul throughput of the reference H200, TFLOP/s.
pub const H200_TFLOPS: f64 = 790.0;
/// Bytes copied per device-to-device copy (read once and written once).
const COPY_BYTES: usize = 1 << 30;
/// Matmul size (n × n × n).
const GEMM_N: usize = 8192;
/// Timed repetitions of each.
const REPS: usize = 10;

/// The reference H200's ceilings.
pub fn defaults(run_id: &str, device: &str) -> Ceilings {
    Ceilings {
        run_id: run_id.to_string(),
        device: device.to_string(),
        bandwidth_tbs: H200_BANDWIDTH_TBS,
        tflops: H200_TFLOPS,
        source: "default (H200 reference: shared/reference/h200-peers.md)".to_string(),
        notes: String::new(),
    }
}

fn err(what: &str) -> impl Fn(cudarc::driver::DriverError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Times `f` `REPS` times after two warm runs; median milliseconds.
fn time(dev: &Device, mut f: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    for _ in 0..2 {
        f()?;
    }
    let timers: Vec<GpuTimer> =
        (0..REPS).map(|_| GpuTimer::new(dev)).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    for t in &timers {
        t.start(dev).map_err(|e| e.to_string())?;
        f()?;
        t.stop(dev).map_err(|e| e.to_string())?;
    }
    dev.synchronize().map_err(|e| e.to_string())?;
    let ms: Vec<f64> = timers
        .iter()
        .map(|t| t.elapsed_ms().map(f64::from))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    Summary::of(&ms).map(|s| s.median).ok_or_else(|| "no sample".to_string())
}

/// Device-to-device copy bandwidth, TB/s (read + write bytes).
pub fn bandwidth(dev: &Device) -> Result<f64, String> {
    let stream = dev.stream();
    // SAFETY: bytes are copied, never interpreted.
    let src = unsafe { stream.alloc::<u8>(COPY_BYTES) }.map_err(err("allocating the copy source"))?;
    let mut dst =
        unsafe { stream.alloc::<u8>(COPY_BYTES) }.map_err(err("allocating the copy destination"))?;
    let ms = time(dev, || stream.memcpy_dtod(&src, &mut dst).map_err(err("device-to-device copy")))?;
    Ok(2.0 * COPY_BYTES as f64 / (ms * 1e-3) / 1e12)
}

/// bf16 matmul throughput (f32 accumulation, cuBLAS), TFLOP/s, on random normal inputs.
pub fn matmul(dev: &Device, pools: &Pools) -> Result<f64, String> {
    // SAFETY: only probes whether the library can be loaded.
    if !unsafe { cudarc::cublas::sys::is_culib_present() } {
        return Err("cuBLAS (libcublas.so) could not be loaded".into());
    }
    let stream = dev.stream();
    let n = GEMM_N * GEMM_N;
    let fill = |offset: usize| -> Result<cudarc::driver::CudaSlice<bf16>, String> {
        // SAFETY: every element is written from the pool below before use.
        let mut m = unsafe { stream.alloc::<bf16>(n) }.map_err(err("allocating a matmul input"))?;
        let chunk = pools.len().saturating_sub(offset).min(n).max(1);
        let host = pools.window::<bf16>(offset, chunk).ok_or("the random pool has no bf16 values")?;
        for start in (0..n).step_by(chunk) {
            let len = chunk.min(n - start);
            let mut view = m.slice_mut(start..start + len);
            stream.memcpy_htod(&host[..len], &mut view).map_err(err("uploading a matmul input"))?;
        }
        Ok(m)
    };
    let a = fill(0)?;
    let b = fill(4099)?;
    // SAFETY: written by the matmul before it is read.
    let mut c = unsafe { stream.alloc::<bf16>(n) }.map_err(err("allocating the matmul output"))?;
    let blas = CudaBlas::new(stream.clone()).map_err(|e| format!("creating a cuBLAS handle: {e}"))?;
    let g = GEMM_N as i32;
    let cfg = GemmConfig {
        transa: cublasOperation_t::CUBLAS_OP_N,
        transb: cublasOperation_t::CUBLAS_OP_T,
        m: g,
        n: g,
        k: g,
        alpha: bf16::ONE,
        lda: g,
        ldb: g,
        beta: bf16::ZERO,
        ldc: g,
    };
    // SAFETY: three n×n bf16 matrices of the leading dimensions given.
    let ms =
        time(dev, || unsafe { blas.gemm(cfg, &a, &b, &mut c) }.map_err(|e| format!("cuBLAS matmul: {e}")))?;
    Ok(2.0 * (GEMM_N as f64).powi(3) / (ms * 1e-3) / 1e12)
}

/// Both ceilings, each falling back to the H200 reference when it cannot be measured.
pub fn measure(dev: &Device, pools: &Pools, run_id: &str) -> Ceilings {
    let mut c = defaults(run_id, &dev.props().name);
    let mut notes = Vec::new();
    let mut measured = 0;
    match bandwidth(dev) {
        Ok(bw) => {
            c.bandwidth_tbs = bw;
            measured += 1;
            notes.push(format!(
                "bandwidth: device-to-device copy of {} MiB, read + write bytes, median of {REPS}",
                COPY_BYTES >> 20
            ));
        }
        Err(e) => notes.push(format!("bandwidth not measured ({e}): H200 reference used")),
    }
    match matmul(dev, pools) {
        Ok(tf) => {
            c.tflops = tf;
            measured += 1;
            notes.push(format!(
                "matmul: bf16 {GEMM_N}³ cuBLAS GEMM, f32 accumulation, 2·n³ FLOPs, median of {REPS}"
            ));
        }
        Err(e) => notes.push(format!("matmul not measured ({e}): H200 reference used")),
    }
    c.source = match measured {
        2 => "measured".to_string(),
        1 => "partly measured".to_string(),
        _ => c.source,
    };
    c.notes = notes.join("; ");
    c
}
