#!/usr/bin/env bash
# Session 10 call 1: the Hopper kernel on variable-length batches (v27, branch hopper-varlen):
# hopper:: tests (edge shapes and random strategy now draw varlen), memcheck/racecheck/synccheck
# on small hopper cases; then varlen forward rows (flash-tc vs flash-hopper) and decode rows
# with PyTorch in both memory layouts (complete path: (B,N,H,d) and (B,H,N,d)).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; cat COMMIT; nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 260 ./tests/gpu --test-threads 6 hopper:: ) > $R/tests-hopper.log 2>&1; echo "tests rc $?" >> $R/rc.txt ) &
for tool in memcheck racecheck synccheck; do
  ( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 250 compute-sanitizer --tool $tool --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::shapes_bf16 > $R/san-$tool.log 2>&1; echo "$tool rc $?" >> $R/rc.txt ) &
done
wait; el
cat $R/rc.txt; grep -hE "^test |test result|panicked|FAILED|failed" $R/tests-hopper.log | head -30
for t in memcheck racecheck synccheck; do grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result" $R/san-$t.log | head -3; done
B=./bin/flashattn-bench
timeout 120 $B run --preset headline --dtype bf16 --head-dims 64,128 --seqlens 4096,16384 --mask varlen,varlen-causal --methods flash-tc,flash-hopper --check none --out $R/varlen > $R/bench-varlen.log 2>&1; echo "varlen rc $?"; el
timeout 150 $B run --preset headline --dtype bf16 --head-dims 128 --seqlens 1024,4096,65536,131072 --seqlen-q 1 --batch 16 --heads 32 --kv-heads 8 --mask none --methods auto --peers --complete-path all --check none --out $R/decode16 > $R/bench-decode16.log 2>&1; echo "decode16 rc $?"; el
timeout 100 $B run --preset headline --dtype bf16 --head-dims 128 --seqlens 1024,4096,65536 --seqlen-q 1 --batch 1 --heads 32 --kv-heads 8 --mask none --methods auto --peers --complete-path all --check none --out $R/decode1 > $R/bench-decode1.log 2>&1; echo "decode1 rc $?"; el
grep -h "|" $R/varlen/report.md 2>/dev/null | head -30
cd /tmp && tar czf $OUT/results.tgz res
