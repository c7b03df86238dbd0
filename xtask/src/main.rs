//! `cargo xtask`: the project's build tasks, one module each.
//!
//! - `cargo xtask setup`: find or install the kernel toolchain (and `ptxas` for reports).
//! - `cargo xtask ptx [--check]`: build the kernels to PTX into `host/ptx/`, or check that the
//!   committed PTX is fresh; both fail when a kernel can reach a panic (the panic gate).
//! - `cargo xtask bundle`: release builds of the test and bench executables, the Python wheel
//!   with its tests, plus a script, to run the GPU suite on a machine without a Rust toolchain;
//!   `--candle-cuda` adds flashattn-candle's CUDA test executable and example (`run.sh candle`).
//! - `cargo xtask bench [ARGS]`: the benchmark sweep (`flashattn-bench run ARGS`) and its report.
//! - `cargo xtask explain [--nq 4 --nk 4 --d 3 --block-n 2 --seed 1]`: the algorithm's worked
//!   example, step by step.

mod bench;
mod bundle;
mod explain;
mod panic_gate;
mod ptx;
mod ptxas;
mod toolchain;
mod util;
mod wheel;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "flashattn's build tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Find or install the kernel toolchain (nightly-capable rustc with the nvptx64 target, core's
    /// sources, llvm-bitcode-linker) and ptxas, and say what was found or done.
    Setup {
        /// Only report; install nothing.
        #[arg(long)]
        no_install: bool,
    },
    /// Compile `kernels-gpu` to PTX for sm_80 and sm_90a into `host/ptx/`, with a manifest and,
    /// when ptxas is found, a register/spill/shared-memory report. Fails (after writing) when a
    /// kernel can reach a panic function.
    Ptx {
        /// Check that the committed PTX matches the kernel sources instead of writing it: by the
        /// source hash, and by rebuilding and comparing bytes when the recorded compiler identity
        /// (`rustc -vV`) is the one here; and that no kernel in it can reach a panic.
        #[arg(long)]
        check: bool,
        /// Do not fail when ptxas reports spills or serialised `wgmma` instructions (experiments).
        #[arg(long)]
        allow_spills: bool,
    },
    /// Build release test and bench executables, and the Python wheel with its tests and the
    /// pytest wheels, into a folder with a `run.sh`, for a GPU machine without a Rust toolchain.
    Bundle {
        /// Output folder: created, or replaced when an earlier bundle made it (it holds a
        /// `.flashattn-bundle` marker). Any other non-empty folder, the repository, its ancestors
        /// and folders holding `.git` are refused; nothing else is ever deleted.
        #[arg(long, default_value = "bundle")]
        out: std::path::PathBuf,
        /// Also flashattn-candle's test executable and `compare` example built with the real
        /// `cuda` feature (candle's CUDA kernels), into `candle/` for `run.sh candle`: the CUDA
        /// 13.0 toolchain comes from PyPI wheels into target/cuda-wheels
        /// (candle/ci/cuda-env.sh).
        #[arg(long)]
        candle_cuda: bool,
        /// With --candle-cuda: carry the CUDA 13 libraries the candle executables link to
        /// (cudart, cuBLAS, cuBLASLt, cuRAND; about 730 MB) in `candle/lib`, for a GPU
        /// machine without the CUDA 13 toolkit. Without it, `run.sh candle` uses the machine's.
        #[arg(long, requires = "candle_cuda")]
        candle_cuda_libs: bool,
    },
    /// Build the benchmark in release, run `flashattn-bench run ARGS` (a sweep over sequence
    /// length, head dim, batch, mask, dtype and method, with optional PyTorch peers and Nsight
    /// Compute bytes), then write its report.md and plots. `cargo xtask bench -- --help` lists
    /// the flags.
    Bench {
        /// Flags of `flashattn-bench run`, e.g. `--preset headline --peers`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Print the worked example: queries attending to keys a block at a time with the online
    /// softmax, step by step, next to standard attention.
    Explain(explain::Args),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Setup { no_install } => toolchain::setup(!no_install),
        Task::Ptx { check: true, .. } => ptx::check(),
        Task::Ptx { check: false, allow_spills } => ptx::build(allow_spills),
        Task::Bundle { out, candle_cuda, candle_cuda_libs } => {
            let candle = match (candle_cuda, candle_cuda_libs) {
                (false, _) => bundle::CandleCuda::No,
                (true, false) => bundle::CandleCuda::Executables,
                (true, true) => bundle::CandleCuda::WithLibraries,
            };
            bundle::bundle(&out, candle)
        }
        Task::Bench { args } => bench::bench(&args),
        Task::Explain(args) => explain::run(&args),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
