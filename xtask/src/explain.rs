//! `cargo xtask explain`: prints [`flashattn::explain::walkthrough`] for the options given.

use flashattn::explain::{ExplainOptions, walkthrough};

use crate::util::Result;

/// Sizes, block and seed of the worked example.
#[derive(clap::Args)]
pub struct Args {
    /// Query vectors.
    #[arg(long, default_value_t = 4)]
    nq: usize,
    /// Key/value vectors.
    #[arg(long, default_value_t = 4)]
    nk: usize,
    /// Head dimension.
    #[arg(long, default_value_t = 3)]
    d: usize,
    /// Keys per block.
    #[arg(long, default_value_t = 2)]
    block_n: usize,
    /// Seed of the example's inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Softmax scale (default 1/√d).
    #[arg(long)]
    scale: Option<f32>,
}

/// Prints the walkthrough; fails when an argument is out of range.
pub fn run(args: &Args) -> Result<()> {
    if args.d == 0 || args.block_n == 0 {
        return Err("--d and --block-n must be at least 1".into());
    }
    if let Some(s) = args.scale.filter(|s| !s.is_finite() || *s <= 0.0) {
        return Err(format!("--scale is {s}; it must be finite and positive"));
    }
    let opts = ExplainOptions {
        n_q: args.nq,
        n_k: args.nk,
        d: args.d,
        block_n: args.block_n,
        seed: args.seed,
        scale: args.scale,
    };
    print!("{}", walkthrough(&opts));
    Ok(())
}
