//! Test support for flashattn, shared by the CPU suite (`tests/cpu`) and the GPU suite
//! (`tests/gpu`):
//!
//! - [`oracle`]: standard attention in f64 (the oracle) and in the input precision (the
//!   baseline), both independent of the online-softmax recurrence they check;
//! - [`case`]: a problem with its inputs and references, random ([`Case::random`]) or given;
//! - [`tolerance`]: the rule an output must meet ([`check`]);
//! - [`strategy`]: proptest strategies for shapes, options and input distributions;
//! - [`shard`]: context-parallel (zigzag) shards of host buffers and back.

pub mod case;
pub mod grad;
pub mod oracle;
pub mod shard;
pub mod strategy;
pub mod tolerance;

pub use case::{Case, LayoutKind, Sequences, Spec, Values};
pub use tolerance::{Report, check};

use rand::Rng;

/// `n` values drawn uniformly from [-1, 1), from a caller-seeded generator.
pub fn random_values(rng: &mut impl Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}
