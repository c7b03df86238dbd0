#!/usr/bin/env bash
# Session 7 call 3: backward b6 (branch-free P/dS and pre-pass scores): backward tests, headline --pass bwd bf16 with PyTorch peers, ncu of main+prep at d128 N=4096.
set -uo pipefail
R=/tmp/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
python3 -c "import tarfile; tarfile.open('.gpu/bundle.txz').extractall()"
cd bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( time timeout 150 ./tests/gpu --test-threads 1 backward ) > $R/gpu-bwd.log 2>&1; echo "bwd tests rc $?"
grep -E "^test |test result" $R/gpu-bwd.log | head -12; grep -E "panicked|exceeds|FAILED|rror" $R/gpu-bwd.log | head -10; el
if grep -q "test result: ok" $R/gpu-bwd.log; then
  ( time timeout 150 ./run.sh bench run --preset headline --dtype bf16 --pass bwd --peers --out $R/headline-bwd ) > $R/headline-bwd.log 2>&1; echo "bench rc $?"
  grep -E "^\| .*\| bwd \| [0-9]" $R/headline-bwd/report.md | head -24; el
fi
( timeout 120 ncu --kernel-name regex:flash_bwd --launch-skip 276 --launch-count 3 --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats ./bin/backward bf16 128 ) > $R/ncu-bwd.txt 2>&1; echo "ncu rc $?"
grep -E "flash_bwd|Duration|Compute \(SM\) Throughput|Issue Slots Busy|Eligible Warps|Warp Cycles Per Issued" $R/ncu-bwd.txt | head -30
el
cd /tmp && tar czf $OUT/results.tgz res
