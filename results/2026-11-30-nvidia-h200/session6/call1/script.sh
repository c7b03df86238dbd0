#!/usr/bin/env bash
# Session 6 call 1 (nvidia-h200): integ = main + hopper-persistent + gpu-kv-cache.
# Headline bf16 with peers (persistent Hopper grid, prediction v17) with SM clock/power log; python-ratios (new same-process criterion);
# the whole GPU suite; sanitizers on kv_cache and hopper shapes (persistent).
set -uo pipefail
R=/tmp/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
python3 -c "import tarfile; tarfile.open('.gpu/bundle.txz').extractall()"
cd bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 200 > $R/smi.csv 2>&1 &
smi=$!
( time timeout 130 ./run.sh bench run --preset headline --dtype bf16 --methods auto --peers --check none --complete-path none --out $R/headline ) > $R/headline.log 2>&1; echo "headline rc $?"
kill $smi
grep "^| headline" $R/headline/report.md | head -30; el
( time timeout 120 ./run.sh python-ratios --bench $R/headline/bench.jsonl --out $R/ratios.jsonl ) > $R/ratios.log 2>&1; echo "ratios rc $?"
grep -v "^$" $R/ratios.log | cut -c1-110 | tail -30; el
( time timeout 200 ./tests/gpu ) > $R/gpu-suite.log 2>&1; echo "suite rc $?"
grep -E "FAILED|failed|test result" $R/gpu-suite.log | head; el
export FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=4
for t in "memcheck attention::kv_cache_bf16" "racecheck attention::kv_cache_bf16" "memcheck hopper::shapes_bf16" "racecheck hopper::shapes_bf16" "synccheck hopper::shapes_bf16"; do
  set -- $t; left=$(( 580 - ($(date +%s) - start) )); [ $left -lt 20 ] && break
  lim=$(( left < 70 ? left : 70 ))
  ( time timeout $lim compute-sanitizer --tool $1 --error-exitcode 97 ./tests/gpu --test-threads 1 $2 ) > $R/san-$1-${2//::/-}.log 2>&1; echo "$1 $2 rc $?"
  grep -E "ERROR SUMMARY|test result" $R/san-$1-${2//::/-}.log | head -3
done; el
cd /tmp && tar czf $OUT/results.tgz res
