#!/usr/bin/env bash
# Session 7 call 6: backward b9 (sm_90a dQ adds as red.global.add.v2.f32): backward tests, ncu main kernel (d128 N=4096), backward example d128.
set -uo pipefail
R=/tmp/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 200 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/bundle.txz').extractall()"
cd bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( time timeout 110 ./tests/gpu --test-threads 2 backward ) > $R/gpu-bwd.log 2>&1; echo "bwd tests rc $?"
grep -E "^test |test result" $R/gpu-bwd.log | head -12; grep -E "panicked|exceeds|FAILED|rror" $R/gpu-bwd.log | head -10; el
( timeout 40 ncu --kernel-name regex:flash_bwd_bf16 --launch-skip 92 --launch-count 1 --section SpeedOfLight --metrics smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio ./bin/backward bf16 128 ) > $R/ncu-bwd.txt 2>&1; echo "ncu rc $?"
grep -E "flash_bwd|Duration|stalled" $R/ncu-bwd.txt | head -8; el
l=$(left); [ $l -gt 20 ] && { ( timeout $l ./bin/backward bf16 128 ) > $R/bwd-example.txt 2>&1; echo "example rc $?"; cat $R/bwd-example.txt; }
el
cd /tmp && tar czf $OUT/results.tgz res
