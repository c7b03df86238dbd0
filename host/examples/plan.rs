//! Prints the plans of a few calls on a synthetic H200 and A100, without a GPU: which kernel,
//! tiles and grid each would run, and why `Auto` did not take a faster path.
//!
//! ```text
//! cargo run --example plan
//! ```

use flashattn::{AttentionOptions, DType, DeviceProps, Layout, Method, Problem, plan};

fn main() -> Result<(), flashattn::Error> {
    for props in [DeviceProps::h200(), DeviceProps::a100()] {
        println!("{}", props.name);
        for (d, dtype, method) in [
            (128, DType::BF16, Method::Auto),
            (96, DType::BF16, Method::Auto),
            (64, DType::F32, Method::Auto),
            (59, DType::BF16, Method::Auto),
            (128, DType::F16, Method::Standard),
        ] {
            let q = Layout::bshd(2, 1000, 8, d);
            let k = Layout::bshd(2, 1000, 2, d);
            let opts = AttentionOptions { causal: true, method, ..Default::default() };
            let lens = [q, k, k, q].map(|l| l.required_len().unwrap_or(0));
            let problem = Problem::new(q, k, k, q, lens, &opts)?;
            println!("  d {d} {dtype} {method}: {}", plan(&props, dtype, &problem, &opts)?);
        }
        // Decoding: one query token per sequence, 32 query heads over 8 K/V heads, a 16k cache.
        let (q, kv) = (Layout::bshd(4, 1, 32, 128), Layout::bshd(4, 16_384, 8, 128));
        let opts = AttentionOptions::default();
        let lens = [q, kv, kv, q].map(|l| l.required_len().unwrap_or(0));
        let problem = Problem::new(q, kv, kv, q, lens, &opts)?;
        println!("  decode B 4, 16k cache, bf16 auto: {}", plan(&props, DType::BF16, &problem, &opts)?);
    }
    Ok(())
}
