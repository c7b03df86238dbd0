#!/usr/bin/env bash
# Session 6 call 3 (nvidia-h200): branch gpu-paged (paged K/V cache in the decode instances, v21) + candle CUDA executables built from main fc456de.
set -uo pipefail
R=/tmp/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 560 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/bundle.txz').extractall(); tarfile.open('.gpu/candle.txz').extractall('bundle')"
cd bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( time timeout 120 ./tests/gpu attention::paged_cache ) > $R/paged-tests.log 2>&1; echo "paged tests rc $?"
grep -E "^test |test result|FAILED|Error|error" $R/paged-tests.log | head -12; el
( time timeout 90 ./bin/decode --quick --cache ) > $R/decode-cache.log 2>&1; echo "decode cache rc $?"; grep -v '^$' $R/decode-cache.log | tail -22; el
export FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=4
for tool in memcheck racecheck; do
  ( timeout 60 compute-sanitizer --tool $tool --error-exitcode 97 ./tests/gpu --test-threads 1 attention::paged_cache_bf16 ) > $R/san-$tool-paged.log 2>&1; echo "$tool paged rc $?"
  grep -E "ERROR SUMMARY|test result" $R/san-$tool-paged.log | head -3
done; el
unset FLASHATTN_TEST_SMALL FLASHATTN_GPU_CASES
( time timeout 90 ./run.sh candle ) > $R/candle.log 2>&1; echo "candle rc $?"
grep -E "test result|FAILED|agree|max" $R/candle.log | head -12; el
( time timeout 90 ./run.sh python ) > $R/python-tests.log 2>&1; echo "python rc $?"
grep -E "passed|failed|python:" $R/python-tests.log | tail -3; el
l=$(left); [ $l -gt 30 ] && { ( time timeout $l ./tests/gpu ) > $R/gpu-suite.log 2>&1; echo "suite rc $?"; grep -E "FAILED|test result" $R/gpu-suite.log | head; }
el
cd /tmp && tar czf $OUT/results.tgz res
