//! The GPU test suite. Run by `cargo test` like any test target; without a GPU every test is
//! listed as ignored (skipped) with the reason printed once, never as passed.
//! `FLASHATTN_REQUIRE_GPU=1` turns a missing GPU into a failure (the bundle sets it).
//! `FLASHATTN_TEST_SMALL=1` shrinks shapes (for compute-sanitizer runs).

mod attention;
mod backward;
mod context_parallel;
mod holes;
mod hopper;
mod runtime;

use std::sync::Arc;

use flashattn::Device;
use libtest_mimic::{Arguments, Failed, Trial};

/// A GPU test body: gets the shared device; `Err` carries the failure message.
pub type GpuTest = fn(&Device) -> Result<(), String>;

fn main() {
    let args = Arguments::from_args();
    let require = std::env::var("FLASHATTN_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let device = match Device::new(0) {
        Ok(d) => {
            let seed = attention::run_seed();
            eprintln!("GPU tests on {}; seed {seed} (replay with FLASHATTN_GPU_SEED={seed})", d.props());
            Ok(Arc::new(d))
        }
        Err(e) if require => {
            eprintln!("FLASHATTN_REQUIRE_GPU=1 but no usable GPU: {e}");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("GPU tests skipped (shown as ignored): {e}");
            Err(e.to_string())
        }
    };
    let tests: Vec<(&'static str, GpuTest)> = runtime::TESTS
        .iter()
        .chain(attention::TESTS)
        .chain(backward::TESTS)
        .chain(holes::TESTS)
        .chain(hopper::TESTS)
        .copied()
        .collect();
    // The multi-GPU tests need two GPUs or more: with fewer they are listed as ignored
    // (`FLASHATTN_REQUIRE_GPUS=2` turns that into a failure, for the two-GPU machine).
    let gpus = Device::count().unwrap_or(0);
    let require_multi =
        std::env::var("FLASHATTN_REQUIRE_GPUS").is_ok_and(|v| v.parse().is_ok_and(|n: usize| n >= 2));
    if device.is_ok() && gpus < 2 {
        if require_multi {
            eprintln!("FLASHATTN_REQUIRE_GPUS asks for 2 GPUs, this machine has {gpus}");
            std::process::exit(1);
        }
        eprintln!("multi-GPU tests skipped (shown as ignored): {gpus} GPU");
    }
    let multi = tests.len();
    let tests: Vec<(&'static str, GpuTest)> =
        tests.into_iter().chain(context_parallel::TESTS.iter().copied()).collect();
    let trials = tests
        .into_iter()
        .enumerate()
        .map(|(i, (name, body))| match &device {
            Ok(_) if i >= multi && gpus < 2 => {
                Trial::test(name, move || Err(Failed::from(format!("needs 2 GPUs, found {gpus}"))))
                    .with_ignored_flag(true)
            }
            Ok(dev) => {
                let dev = Arc::clone(dev);
                Trial::test(name, move || body(&dev).map_err(Failed::from))
            }
            Err(why) => {
                let why = why.clone();
                Trial::test(name, move || Err(Failed::from(format!("no GPU: {why}")))).with_ignored_flag(true)
            }
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
