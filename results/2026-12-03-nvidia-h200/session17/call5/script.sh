#!/usr/bin/env bash
# Session 17 call 5 (the device time left): Nsight Compute of the final build's d = 64 backward
# main kernel (c7150b5: b32's kernels), bf16 and f16, B = 4, N = 4096, non-causal, from the
# training residuals — where its step waits after b32, and why f16 runs 1–2% slower than bf16
# with the same SASS but for the conversion opcode. Writes straight to $OUT (the lease may end).
set -uo pipefail
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
timeout 100 ./bin/flashattn-bench run --seqlens 1024 --batch 1 --heads 2 --head-dims 64 --methods auto --pass bwd --check none --complete-path none --no-report --out /tmp/warm > $OUT/warm.log 2>&1; echo "warm rc $?"
for dt in bf16 f16; do
  timeout 70 ncu --clock-control none --set full --import-source no -k regex:flash_bwd_${dt}_d64_w4 --launch-count 1 -o /tmp/bwd-$dt \
    ./bin/flashattn-bench run --seqlens 4096 --batch 4 --heads 32 --dtype $dt --head-dims 64 --mask none --methods auto --pass bwd \
    --bwd-from residuals --check none --complete-path none --reps 1 --warmup-ms 1 --no-report --out /tmp/x-$dt > $OUT/ncu-$dt.log 2>&1
  echo "ncu $dt rc $?"
  ncu --import /tmp/bwd-$dt.ncu-rep --page details > $OUT/bwd-d64-$dt-details.txt 2>&1
  grep -E "flash_bwd|Duration|Registers Per|Issue Slots Busy|Eligible Warps|No Eligible|L2 Cache Throughput|Compute \(SM\) Throughput|Memory Throughput" $OUT/bwd-d64-$dt-details.txt | head -14
done
