#!/usr/bin/env bash
# Session 7 call 4: backward b7 (statistics rows by cp.async): backward tests, headline --pass bwd bf16 with peers,
# ncu stall reasons of main/pre-pass at d128 N=4096.
set -uo pipefail
R=/tmp/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 570 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/bundle.txz').extractall()"
cd bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( time timeout 150 ./tests/gpu --test-threads 1 backward ) > $R/gpu-bwd.log 2>&1; echo "bwd tests rc $?"
grep -E "^test |test result" $R/gpu-bwd.log | head -12; grep -E "panicked|exceeds|FAILED|rror" $R/gpu-bwd.log | head -10; el
if grep -q "test result: ok" $R/gpu-bwd.log; then
  ( time timeout 130 ./run.sh bench run --preset headline --dtype bf16 --pass bwd --peers --out $R/headline-bwd ) > $R/headline-bwd.log 2>&1; echo "bench rc $?"
  grep -E "^\| .*\| bwd \| [0-9]" $R/headline-bwd/report.md | head -24; el
fi
( timeout 80 ncu --kernel-name regex:flash_bwd --launch-skip 276 --launch-count 2 --section SpeedOfLight --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio ./bin/backward bf16 128 ) > $R/ncu-bwd.txt 2>&1; echo "ncu rc $?"
grep -E "flash_bwd|Duration|stalled" $R/ncu-bwd.txt | grep -vE " 0(\.0+)?$" | head -50
el
cd /tmp && tar czf $OUT/results.tgz res
