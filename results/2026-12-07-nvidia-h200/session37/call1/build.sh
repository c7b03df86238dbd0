#!/usr/bin/env bash
# Builds .gpu/b.txz for script.sh: bench-main, bench-A (v44), bench-C (v44c) and the GPU suite of
# C, from the commits' committed PTX (no kernel rebuild). Usage: build.sh A_COMMIT C_COMMIT, from
# the repository root after `cargo xtask setup`. ~4 min of builds and ~3 min of compression here.
set -euo pipefail
A=${1:?v44 commit}; C=${2:?v44c commit}
B=/tmp/bundle/bundle; rm -rf /tmp/bundle; mkdir -p $B/bin $B/tests .gpu
bench() {
  cargo build --release -p flashattn-bench --bin flashattn-bench 2>&1 | tail -1
  cp target/release/flashattn-bench $B/bin/bench-$1; strip $B/bin/bench-$1
}
bench main
git checkout "$A" -- kernels-gpu/src host/ptx; bench A
git checkout "$C" -- kernels-gpu/src host/ptx; bench C
cargo test --release -p flashattn-testkit --test gpu --no-run 2>&1 | tail -1
exe=$(ls -t target/release/deps/gpu-* | grep -v '\.d$' | head -1); cp "$exe" $B/tests/gpu-C; strip $B/tests/gpu-C
git checkout HEAD -- kernels-gpu/src host/ptx
cp benches/peers.py results/2026-12-01-nvidia-h200/session10/call4/peers-fast.py $B/bin/
echo "main $(git rev-parse --short HEAD); A $A; C $C" > $B/COMMIT
(cd /tmp/bundle && tar cf - bundle | xz -9e -T2 --lzma2=preset=9e,dict=192MiB) > .gpu/b.txz
ls -l .gpu/b.txz
# The tracked tree exceeds the device tool's 64 MiB: move results/ out for the call, keeping
# this folder (see session35's README), e.g.
#   mv results /tmp/results-hold && mkdir -p results/2026-12-07-nvidia-h200/session37/call1 &&
#   cp /tmp/results-hold/2026-12-07-nvidia-h200/session37/call1/script.sh results/2026-12-07-nvidia-h200/session37/call1/
# then run `bash results/2026-12-07-nvidia-h200/session37/call1/script.sh` with carry [".gpu"],
# and `rm -rf results && mv /tmp/results-hold results` afterwards.
