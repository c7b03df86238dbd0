#!/usr/bin/env bash
# Session 7 call 2: ncu of the b5 backward kernels (d128, N=4096 bf16 non-causal: prep, main, dq), memory tables; serve --gpu.
set -uo pipefail
R=/tmp/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
python3 -c "import tarfile; tarfile.open('.gpu/bundle.txz').extractall()"
cd bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( timeout 200 ncu --kernel-name regex:flash_bwd --launch-skip 276 --launch-count 3 --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section Occupancy --section WarpStateStats --section SchedulerStats ./bin/backward bf16 128 ) > $R/ncu-bwd.txt 2>&1; echo "ncu rc $?"
grep -E "flash_bwd|Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache|L2 Cache Throughput|Achieved Occupancy|Issue Slots Busy|Executed Ipc|Warp Cycles Per Issued|Bank|bank|Shared" $R/ncu-bwd.txt | head -70
el
( timeout 60 ./bin/serve --gpu ) > $R/serve-gpu.log 2>&1; echo "serve rc $?"; tail -15 $R/serve-gpu.log
el
cd /tmp && tar czf $OUT/results.tgz res
