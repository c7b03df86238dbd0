#!/usr/bin/env bash
# Session 35 call 4: why v43 (3522a74) lost 4-8% at N = 1024 (call 3). Nsight Compute warp-state,
# scheduler and SASS-level source counters, one launch each, old (ca487dd) and new (3522a74):
# bf16 non-causal N = 1024, d = 64 (+8.2% in call 3) and d = 128 (+4.2%).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
D=$PWD/results/2026-12-06-nvidia-h200/session35/call4
python3 -c "import tarfile; tarfile.open('.gpu/b.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; cat COMMIT
nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt; cat $R/gpu.txt
for d in 64 128; do for b in old new; do
  n=$b-d$d
  timeout 90 ncu --section WarpStateStats --section SchedulerStats --section SourceCounters --section LaunchStats \
    --import-source no -k regex:flash_fwd_wgmma --launch-count 1 -o /tmp/$n \
    ./bin/bench-$b run --seqlens 1024 --batch 16 --heads $((2048 / d)) --dtype bf16 --head-dims $d --mask none --methods auto \
    --pass fwd --check none --complete-path none --reps 1 --warmup-ms 1 --no-report --out /tmp/x-$n > $R/$n.log 2>&1
  echo "$n rc $?"
  ncu --import /tmp/$n.ncu-rep --page details > $R/$n-details.txt 2>&1
  ncu --import /tmp/$n.ncu-rep --page source --csv --print-source sass > $R/$n-sass.csv 2>/dev/null
  grep -E "Duration|Stall|Issue Slots|Eligible|Active Warps|Warp Cycles" $R/$n-details.txt | head -30
  python3 $D/sass-stalls.py $R/$n-sass.csv 15 > $R/$n-stalls.txt 2>&1; head -30 $R/$n-stalls.txt
  el
done; done
cd /tmp && tar czf $OUT/results.tgz res
