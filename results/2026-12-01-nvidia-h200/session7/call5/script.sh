#!/usr/bin/env bash
# Session 7 call 5 (final): backward b8 (dQ adds from one base per row): whole GPU suite, Python tests, ncu stalls, headline --pass bwd bf16 with peers.
set -uo pipefail
R=/tmp/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 545 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/bundle.txz').extractall()"
cd bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( time timeout 240 ./tests/gpu ) > $R/gpu-suite.log 2>&1; echo "suite rc $?"
grep -E "FAILED|test result|panicked|worst rule" $R/gpu-suite.log | head -12; el
( time timeout 100 ./run.sh python ) > $R/python-tests.log 2>&1; echo "python rc $?"; grep -E "passed|failed|rror" $R/python-tests.log | tail -3; el
( timeout 60 ncu --kernel-name regex:flash_bwd --launch-skip 276 --launch-count 2 --section SpeedOfLight --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio ./bin/backward bf16 128 ) > $R/ncu-bwd.txt 2>&1; echo "ncu rc $?"
grep -E "flash_bwd|Duration|stalled" $R/ncu-bwd.txt | grep -vE " 0(\.0+)?$" | head -30; el
l=$(left); [ $l -gt 100 ] && { ( time timeout $l ./run.sh bench run --preset headline --dtype bf16 --pass bwd --peers --out $R/headline-bwd ) > $R/headline-bwd.log 2>&1; echo "bench rc $?"; grep -E "^\| .*\| bwd \| [0-9]" $R/headline-bwd/report.md | head -24; }
el
cd /tmp && tar czf $OUT/results.tgz res
