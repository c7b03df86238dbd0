//! Random inputs without paying for fresh random numbers on every row: one pool of standard-normal
//! values per run (drawn in parallel, deterministic for a seed), rounded once to each dtype; every
//! Q, K and V buffer is a window of the pool at a random offset. Offsets of Q, K and V differ by a
//! non-multiple of 64 elements, so no row of K repeats a row of Q (which would make the softmax
//! unrealistically peaked).

use flashattn::{DType, Element, bf16, f16};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

/// Room beyond the largest tensor for random window offsets, in elements.
pub const SLACK: usize = 1 << 22;
/// Elements drawn per generator (each chunk is seeded by its index: the pool does not depend on
/// the thread count).
const CHUNK: usize = 1 << 20;

/// Residues (mod 64) of the Q, K and V window offsets.
const RESIDUES: [usize; 3] = [0, 17, 41];
/// Residue (mod 64) of the window offsets of the backward's upstream gradient dO.
const GRAD_RESIDUE: usize = 59;

/// Standard-normal values, in f32 and rounded to each 16-bit type.
pub struct Pools {
    f32: Vec<f32>,
    bf16: Vec<bf16>,
    f16: Vec<f16>,
}

/// Element types with a pool.
pub trait PoolElem: Element {
    /// This type's pool.
    fn pool(p: &Pools) -> &[Self];
}

impl PoolElem for f32 {
    fn pool(p: &Pools) -> &[f32] {
        &p.f32
    }
}

impl PoolElem for bf16 {
    fn pool(p: &Pools) -> &[bf16] {
        &p.bf16
    }
}

impl PoolElem for f16 {
    fn pool(p: &Pools) -> &[f16] {
        &p.f16
    }
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(32)
}

/// Runs `f(chunk_index, chunk)` over `CHUNK`-sized pieces of `data` on every core.
fn par_chunks<T: Send>(data: &mut [T], f: impl Fn(usize, &mut [T]) + Sync) {
    let n = threads();
    let mut groups: Vec<Vec<(usize, &mut [T])>> = (0..n).map(|_| Vec::new()).collect();
    for (i, c) in data.chunks_mut(CHUNK).enumerate() {
        groups[i % n].push((i, c));
    }
    std::thread::scope(|s| {
        for g in groups {
            let f = &f;
            s.spawn(move || g.into_iter().for_each(|(i, c)| f(i, c)));
        }
    });
}

fn rounded<T: Element + Send>(src: &[f32]) -> Vec<T> {
    let mut out = vec![T::default(); src.len()];
    par_chunks(&mut out, |i, c| {
        for (o, &x) in c.iter_mut().zip(&src[i * CHUNK..]) {
            *o = T::from_f32(x);
        }
    });
    out
}

impl Pools {
    /// `len` standard-normal values from `seed`, rounded to the 16-bit `dtypes` asked for.
    pub fn new(len: usize, seed: u64, dtypes: &[DType]) -> Pools {
        let mut f32s = vec![0.0f32; len];
        par_chunks(&mut f32s, |i, c| {
            let mut rng = SmallRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            c.iter_mut().for_each(|x| *x = rng.sample(StandardNormal));
        });
        let bf16 = if dtypes.contains(&DType::BF16) { rounded(&f32s) } else { Vec::new() };
        let f16 = if dtypes.contains(&DType::F16) { rounded(&f32s) } else { Vec::new() };
        Pools { f32: f32s, bf16, f16 }
    }

    /// Pool length (elements).
    pub fn len(&self) -> usize {
        self.f32.len()
    }

    /// A window of `len` elements of `T`'s pool at `offset` (clamped to fit); `None` if the pool
    /// of `T` is shorter than `len`.
    pub fn window<T: PoolElem>(&self, offset: usize, len: usize) -> Option<&[T]> {
        let pool = T::pool(self);
        let start = offset.min(pool.len().checked_sub(len)?);
        Some(&pool[start..start + len])
    }
}

/// Offsets of the Q, K and V windows of one input set: random, below [`SLACK`], with residues
/// mod 64 that differ between Q, K and V.
pub fn window_offsets(rng: &mut SmallRng) -> [usize; 3] {
    RESIDUES.map(|r| rng.random_range(0..SLACK / 64 - 1) * 64 + r)
}

/// Offset of the window of one input set's upstream gradient dO (the backward passes): random,
/// below [`SLACK`], with a residue mod 64 that differs from those of Q, K and V.
pub fn grad_offset(rng: &mut SmallRng) -> usize {
    rng.random_range(0..SLACK / 64 - 1) * 64 + GRAD_RESIDUE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_is_normal_deterministic_and_rounded() {
        let a = Pools::new(3 * CHUNK / 2, 7, &[DType::BF16]);
        let b = Pools::new(3 * CHUNK / 2, 7, &[DType::BF16]);
        assert_eq!(a.f32, b.f32);
        let n = a.len() as f64;
        let mean = a.f32.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = a.f32.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        assert!(mean.abs() < 0.01 && (var - 1.0).abs() < 0.01, "mean {mean} var {var}");
        assert!(a.f32.iter().all(|&x| x != 0.0 || x.is_finite()));
        assert_eq!(a.bf16.len(), a.len());
        assert!(a.f16.is_empty());
        assert_eq!(a.bf16[123].to_f32(), bf16::from_f32(a.f32[123]).to_f32());
        let w = a.window::<bf16>(usize::MAX, 10).unwrap();
        assert_eq!(w.len(), 10);
        assert!(a.window::<f16>(0, 10).is_none());
        let mut rng = SmallRng::seed_from_u64(1);
        let [q, k, v] = window_offsets(&mut rng);
        assert_eq!((q % 64, k % 64, v % 64), (0, 17, 41));
        assert!(q < SLACK && k < SLACK && v < SLACK);
        let g = grad_offset(&mut rng);
        assert!(g % 64 == 59 && g < SLACK);
    }
}
