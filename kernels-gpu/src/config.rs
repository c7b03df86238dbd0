//! Tile configurations of the tensor-core kernel: one type, one place that picks it, and the
//! shared-memory budget checked at compile time. The kernel body reads these numbers and never
//! repeats them; the host picks the instance by head dimension.
//!
//! Why these tiles: see `kernels-gpu/NOTES.md` (the measured steps and the bench rows behind
//! each choice).

/// A tensor-core kernel configuration. Each warp owns `block_m / warps` query rows (a multiple
/// of 16, the `mma` tile height) and all `block_n` keys of a tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmaConfig {
    /// Head dimension (exact: the kernel has no column predication).
    pub head_dim: u32,
    /// Query rows per block.
    pub block_m: u32,
    /// Keys per shared-memory tile.
    pub block_n: u32,
    /// Warps per block.
    pub warps: u32,
}

/// The largest dynamic shared memory per block on the project's target (H100/H200, compute
/// capability 9.0: 227 KiB). Other devices are checked at run time by the host.
pub const HOPPER_SHARED_LIMIT: u32 = 227 * 1024;

impl MmaConfig {
    /// Threads per block.
    pub const fn threads(&self) -> u32 {
        32 * self.warps
    }

    /// Query rows per warp.
    pub const fn rows_per_warp(&self) -> u32 {
        self.block_m / self.warps
    }

    /// Shared memory: one Q tile (`block_m × d`), one K tile and one V tile (`block_n × d`),
    /// 16-bit elements. K and V have a buffer each, so that V streams in while the scores are
    /// computed and the next K while the output is.
    pub const fn shared_bytes(&self) -> u32 {
        2 * self.head_dim * (self.block_m + 2 * self.block_n)
    }

    /// Whether the configuration is one the kernel can run: whole `mma` tiles per warp, rows of
    /// at least eight 16-byte chunks (for the XOR swizzle), and the Hopper shared-memory budget.
    pub const fn is_valid(&self) -> bool {
        self.warps > 0
            && self.block_m % (16 * self.warps) == 0
            && self.block_n % 16 == 0
            && self.head_dim % 64 == 0
            && self.shared_bytes() <= HOPPER_SHARED_LIMIT
    }
}

/// d = 64: 128 query rows (32 per warp), 64 keys per tile.
pub const MMA_D64: MmaConfig = MmaConfig { head_dim: 64, block_m: 128, block_n: 64, warps: 4 };
/// d = 128: 128 query rows (32 per warp), 64 keys per tile.
pub const MMA_D128: MmaConfig = MmaConfig { head_dim: 128, block_m: 128, block_n: 64, warps: 4 };
/// d = 256: 64 query rows (16 per warp), 64 keys per tile.
pub const MMA_D256: MmaConfig = MmaConfig { head_dim: 256, block_m: 64, block_n: 64, warps: 4 };

/// Every instantiated configuration, by head dimension.
pub const MMA_CONFIGS: [MmaConfig; 3] = [MMA_D64, MMA_D128, MMA_D256];

const _: () = {
    let mut i = 0;
    while i < MMA_CONFIGS.len() {
        assert!(MMA_CONFIGS[i].is_valid(), "an MMA tile configuration breaks the kernel's constraints");
        i += 1;
    }
};

/// The configuration for a head dimension, if the tensor-core kernel has one.
pub const fn mma_config(head_dim: u32) -> Option<MmaConfig> {
    let mut i = 0;
    while i < MMA_CONFIGS.len() {
        if MMA_CONFIGS[i].head_dim == head_dim {
            return Some(MMA_CONFIGS[i]);
        }
        i += 1;
    }
    None
}
