#!/usr/bin/env bash
# Session 7 call 1: backward main kernel b5 (FlashAttention-2's warp tiling: S/dP 32x32 per warp, P and dS through shared memory):
# backward tests, headline --pass bwd with PyTorch peers, memcheck/racecheck; decode A/B (main vs fc456de, before the paged change).
set -uo pipefail
R=/tmp/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 560 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/bundle.txz').extractall()"
cd bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( time timeout 150 ./tests/gpu --test-threads 1 backward ) > $R/gpu-bwd.log 2>&1; echo "bwd tests rc $?"
grep -E "^test |test result" $R/gpu-bwd.log | head -12; grep -E "panicked|exceeds|FAILED|rror" $R/gpu-bwd.log | head -10; el
if grep -q "test result: ok" $R/gpu-bwd.log; then
  ( time timeout 200 ./run.sh bench run --preset headline --pass bwd --peers --out $R/headline-bwd ) > $R/headline-bwd.log 2>&1; echo "bench rc $?"
  grep -E "flash-tc \[bwd\]" $R/headline-bwd.log | head -45; el
  grep -iE "ratio|flash-tc" $R/headline-bwd/report.md | head -60
fi
( FLASHATTN_TEST_SMALL=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward ) > $R/san-memcheck-bwd.log 2>&1; echo "memcheck rc $?"
grep -E "ERROR SUMMARY|test result" $R/san-memcheck-bwd.log | head -3; el
for i in 1 2; do
  ( timeout 60 ./run.sh decode --quick ) > $R/decode-main-$i.log 2>&1; echo "decode main rc $?"
  ( timeout 60 ./bin/decode-fc456de --quick ) > $R/decode-old-$i.log 2>&1; echo "decode old rc $?"
done
el
l=$(left); [ $l -gt 40 ] && { ( FLASHATTN_TEST_SMALL=1 timeout $l compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::shapes ) > $R/san-racecheck-bwd.log 2>&1; echo "racecheck rc $?"; grep -E "ERROR SUMMARY|test result|RACE" $R/san-racecheck-bwd.log | head -5; }
el
cd /tmp && tar czf $OUT/results.tgz res
