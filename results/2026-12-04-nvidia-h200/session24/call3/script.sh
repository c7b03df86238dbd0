#!/usr/bin/env bash
# Session 24 call 3: where the ALiBi instance's extra 4.4% over the plain instance goes (b39,
# two FMAs a score instead of four operations, changed nothing). Nsight Compute, full set with
# SASS-level sampling, of the d = 128 backward's main kernel at N = 16384, B = 1, H = 16, bf16,
# causal, from residuals: ALiBi (`flash_bwd_bf16_d128_w8_b1_alibi`) and plain
# (`flash_bwd_bf16_d128_w8_b1`), the shipped kernels (82e824a = `bench-b37`, b39 reverted).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/old.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; ls bin
export FLASHATTN_REQUIRE_GPU=1
./bin/bench-b37 run --seqlens 1024 --batch 1 --heads 2 --head-dims 128 --mask causal --alibi --methods auto --pass bwd --check none --complete-path none --no-report --out /tmp/warm > $R/warm.log 2>&1; echo "warm rc $?"; el
for m in alibi plain; do
  extra=""; k=flash_bwd_bf16_d128_w8_b1; [ $m = alibi ] && { extra="--alibi"; k=flash_bwd_bf16_d128_w8_b1_alibi; }
  timeout 150 ncu --set full --import-source no -k regex:"^$k\$" --launch-count 1 -o /tmp/p-$m \
    ./bin/bench-b37 run --seqlens 16384 --batch 1 --heads 16 --dtype bf16 --head-dims 128 --mask causal $extra --methods auto --pass bwd \
    --bwd-from residuals --check none --complete-path none --reps 1 --warmup-ms 1 --no-report --out /tmp/x-$m > $R/ncu-$m.log 2>&1
  echo "ncu $m rc $?"; el
  ncu --import /tmp/p-$m.ncu-rep --page details > $R/bwd-$m-details.txt 2>&1
  ncu --import /tmp/p-$m.ncu-rep --page source --csv --print-source sass > $R/bwd-$m-sass.csv 2>/dev/null
  grep -E "Duration|Registers Per|Executed Instructions  |Issue Slots Busy|Eligible Warps|No Eligible|L2 Cache Throughput|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued" $R/bwd-$m-details.txt | head -14
done
el
cd /tmp && tar czf $OUT/results.tgz res
