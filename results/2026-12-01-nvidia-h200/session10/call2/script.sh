#!/usr/bin/env bash
# Session 10 call 2: hopper-varlen with the host fix (offsets uploaded on the Hopper path):
# hopper:: tests, memcheck/racecheck/synccheck on small hopper cases, varlen rows
# (flash-tc vs flash-hopper), and the Hopper headline d128 A/B against main's build (old).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b'); tarfile.open('.gpu/old.txz').extractall('/tmp/b/bundle')"
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 280 ./tests/gpu --test-threads 6 hopper:: ) > $R/tests-hopper.log 2>&1; echo "tests rc $?" >> $R/rc.txt ) &
for tool in memcheck racecheck synccheck; do
  ( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 270 compute-sanitizer --tool $tool --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::shapes_bf16 > $R/san-$tool.log 2>&1; echo "$tool rc $?" >> $R/rc.txt ) &
done
wait; el
cat $R/rc.txt; grep -hE "^test |test result|panicked" $R/tests-hopper.log | head -30
for t in memcheck racecheck synccheck; do grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result" $R/san-$t.log | head -3; done
B=./bin/flashattn-bench
timeout 120 $B run --preset headline --dtype bf16 --head-dims 64,128 --seqlens 4096,16384 --mask varlen,varlen-causal --methods flash-tc,flash-hopper --check none --out $R/varlen > $R/bench-varlen.log 2>&1; echo "varlen rc $?"; el
for v in old new old new; do
  b=$B; [ $v = old ] && b=./old/flashattn-bench
  timeout 70 $b run --preset headline --dtype bf16 --head-dims 128 --seqlens 1024,4096,16384 --methods flash-hopper --check none --out $R/ab-$v-$SECONDS > $R/ab-$v-$SECONDS.log 2>&1; echo "ab $v rc $?"
done; el
grep -h "flash-hopper | " $R/ab-*/report.md | grep " ok " | head -30
grep -h "|" $R/varlen/report.md 2>/dev/null | grep "flash-" | head -20
cd /tmp && tar czf $OUT/results.tgz res
