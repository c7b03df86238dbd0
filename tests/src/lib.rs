//! Test support for flashattn, shared by the CPU suite (`tests/cpu`) and the GPU suite
//! (`tests/gpu`): random inputs that are never zeros, and (with the oracle issue) the f64
//! reference and the tolerance rule.

use rand::Rng;

/// `n` values drawn uniformly from [-1, 1), from a caller-seeded generator.
pub fn random_values(rng: &mut impl Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}
