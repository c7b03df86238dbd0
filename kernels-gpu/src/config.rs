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
    /// Blocks per SM the register allocation must allow (CUDA's `__launch_bounds__(threads,
    /// min_blocks)`): `cargo xtask ptx` writes it into the PTX as `.maxntid` and
    /// `.minnctapersm`, and ptxas caps registers at `65536 / (threads · min_blocks)`.
    pub min_blocks: u32,
    /// V buffers in shared memory: 1 (`V_j` streams in while `S_j` is computed), or 2 (`V_{j+1}`
    /// streams in during the whole of iteration `j`, at the cost of one more V tile).
    pub v_stages: u32,
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

    /// Shared memory: one Q tile (`block_m × d`), one K tile and `v_stages` V tiles
    /// (`block_n × d`), 16-bit elements.
    pub const fn shared_bytes(&self) -> u32 {
        2 * self.head_dim * (self.block_m + (1 + self.v_stages) * self.block_n)
    }

    /// Whether each warp keeps its Q fragments in registers for the whole block (loaded from
    /// shared memory once) instead of reloading them for every key tile: with one 16-row slab
    /// per warp and d ≤ 128 (at most 32 registers). With two slabs the accumulators leave no
    /// room for them (ptxas spills).
    pub const fn q_in_registers(&self) -> bool {
        self.rows_per_warp() == 16 && self.head_dim <= 128
    }

    /// Whether the configuration is one the kernel can run: whole `mma` tiles per warp, rows of
    /// at least eight 16-byte chunks (for the XOR swizzle), and the Hopper shared-memory budget.
    pub const fn is_valid(&self) -> bool {
        self.warps > 0
            && self.block_m % (16 * self.warps) == 0
            && self.block_n % 16 == 0
            && self.head_dim % 64 == 0
            && self.min_blocks > 0
            && (self.v_stages == 1 || self.v_stages == 2)
            && self.shared_bytes() <= HOPPER_SHARED_LIMIT
    }
}

/// Every instantiated configuration. The first one of each head dimension is its default (the
/// tuned choice, see [`mma_default`] and `NOTES.md`); the others are variants that a tile
/// override selects by `block_m × block_n`, so that the bench can sweep them (`--tiles`).
pub const MMA_CONFIGS: [MmaConfig; 8] = [
    MmaConfig { head_dim: 64, block_m: 128, block_n: 96, warps: 4, min_blocks: 1, v_stages: 2 },
    MmaConfig { head_dim: 64, block_m: 128, block_n: 64, warps: 4, min_blocks: 1, v_stages: 1 },
    MmaConfig { head_dim: 64, block_m: 64, block_n: 64, warps: 4, min_blocks: 3, v_stages: 2 },
    MmaConfig { head_dim: 128, block_m: 128, block_n: 64, warps: 4, min_blocks: 1, v_stages: 2 },
    MmaConfig { head_dim: 128, block_m: 128, block_n: 32, warps: 4, min_blocks: 1, v_stages: 2 },
    MmaConfig { head_dim: 128, block_m: 64, block_n: 64, warps: 4, min_blocks: 1, v_stages: 1 },
    MmaConfig { head_dim: 256, block_m: 64, block_n: 64, warps: 4, min_blocks: 1, v_stages: 1 },
    MmaConfig { head_dim: 256, block_m: 128, block_n: 64, warps: 8, min_blocks: 1, v_stages: 1 },
];

/// Kernel entry names of [`MMA_CONFIGS`], f16 then bf16, in the same order:
/// `flash_fwd_mma_{dtype}_d{head_dim}_m{block_m}_n{block_n}_w{warps}_b{min_blocks}_v{v_stages}`.
pub const MMA_KERNELS: [[&str; MMA_CONFIGS.len()]; 2] = [
    [
        "flash_fwd_mma_f16_d64_m128_n96_w4_b1_v2",
        "flash_fwd_mma_f16_d64_m128_n64_w4_b1_v1",
        "flash_fwd_mma_f16_d64_m64_n64_w4_b3_v2",
        "flash_fwd_mma_f16_d128_m128_n64_w4_b1_v2",
        "flash_fwd_mma_f16_d128_m128_n32_w4_b1_v2",
        "flash_fwd_mma_f16_d128_m64_n64_w4_b1_v1",
        "flash_fwd_mma_f16_d256_m64_n64_w4_b1_v1",
        "flash_fwd_mma_f16_d256_m128_n64_w8_b1_v1",
    ],
    [
        "flash_fwd_mma_bf16_d64_m128_n96_w4_b1_v2",
        "flash_fwd_mma_bf16_d64_m128_n64_w4_b1_v1",
        "flash_fwd_mma_bf16_d64_m64_n64_w4_b3_v2",
        "flash_fwd_mma_bf16_d128_m128_n64_w4_b1_v2",
        "flash_fwd_mma_bf16_d128_m128_n32_w4_b1_v2",
        "flash_fwd_mma_bf16_d128_m64_n64_w4_b1_v1",
        "flash_fwd_mma_bf16_d256_m64_n64_w4_b1_v1",
        "flash_fwd_mma_bf16_d256_m128_n64_w8_b1_v1",
    ],
];

const _: () = {
    let mut i = 0;
    while i < MMA_CONFIGS.len() {
        assert!(MMA_CONFIGS[i].is_valid(), "an MMA tile configuration breaks the kernel's constraints");
        i += 1;
    }
};

/// Index into [`MMA_CONFIGS`] of the configuration the library runs: the first of the head
/// dimension (`NOTES.md`, v6: it is the fastest at every headline shape, causal or not, on the
/// H200). The shape is an argument so that a choice by causality or length stays in this one
/// place if measurements ever call for it.
pub const fn mma_default(head_dim: u32, causal: bool, max_seqlen_q: usize) -> Option<usize> {
    let _ = (causal, max_seqlen_q);
    let mut i = 0;
    while i < MMA_CONFIGS.len() {
        if MMA_CONFIGS[i].head_dim == head_dim {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Index of the configuration with these tiles, if one is instantiated.
pub const fn mma_find(head_dim: u32, block_m: u32, block_n: u32) -> Option<usize> {
    let mut i = 0;
    while i < MMA_CONFIGS.len() {
        let c = MMA_CONFIGS[i];
        if c.head_dim == head_dim && c.block_m == block_m && c.block_n == block_n {
            return Some(i);
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    #[test]
    fn kernel_names_follow_the_configs() {
        for (dtype, names) in ["f16", "bf16"].iter().zip(MMA_KERNELS) {
            for (c, name) in MMA_CONFIGS.iter().zip(names) {
                let expect = format!(
                    "flash_fwd_mma_{dtype}_d{}_m{}_n{}_w{}_b{}_v{}",
                    c.head_dim, c.block_m, c.block_n, c.warps, c.min_blocks, c.v_stages
                );
                assert_eq!(name, &expect);
            }
        }
    }

    #[test]
    fn defaults_and_lookup() {
        for d in [64, 128, 256] {
            let i = mma_default(d, false, 4096).unwrap();
            assert_eq!(MMA_CONFIGS[i].head_dim, d);
            let c = MMA_CONFIGS[i];
            assert_eq!(mma_find(d, c.block_m, c.block_n), Some(i));
        }
        assert_eq!(mma_default(96, false, 1), None);
        // The tile override names each configuration of a head dim uniquely.
        for (i, c) in MMA_CONFIGS.iter().enumerate() {
            assert_eq!(mma_find(c.head_dim, c.block_m, c.block_n), Some(i));
        }
    }
}
