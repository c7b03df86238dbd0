#!/usr/bin/env bash
# Session 22 call 1: v39 (d = 128 in 128 × 176 tiles, d = 256 in 128 × 80, a tile override away). The
# Hopper GPU tests (wide_keys new); memcheck / racecheck / synccheck on hopper::wide_keys_bf16
# (small set); then the bf16/f16 headline forward (causal and not), in one process a row at a
# time: d = 128 with Auto's tiles (persistent 128 × 128) against 128 × 176, d = 256 with 128 × 64
# (Auto's) against 128 × 80, first with the oracle check, then three times timed; then the new
# tiles with FA2 and cuDNN in the same run.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 570 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 128 --methods auto --tiles 128x176 --check none --complete-path none --no-report"
run warm 150 ./bin/flashattn-bench $W
( ( time timeout 150 ./tests/gpu --test-threads 8 hopper:: ) > $R/tests-hopper.log 2>&1; echo "hopper tests rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 140 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::wide_keys_bf16 > $R/san-memcheck.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 140 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::wide_keys_bf16 > $R/san-racecheck.log 2>&1; echo "racecheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 140 compute-sanitizer --tool synccheck --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::wide_keys_bf16 > $R/san-synccheck.log 2>&1; echo "synccheck rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule" $R/tests-hopper.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-hopper.log | head -40
A="run --preset headline --dtype bf16,f16 --head-dims 128 --mask none,causal --methods flash-hopper --tiles 128x128,128x176 --complete-path none --pass fwd --no-report"
B="run --preset headline --dtype bf16,f16 --head-dims 256 --mask none,causal --methods flash-hopper --tiles 128x64,128x80 --complete-path none --pass fwd --no-report"
run ab128-check 150 ./bin/flashattn-bench $A --check oracle
run ab256-check 150 ./bin/flashattn-bench $B --check oracle
for i in 1 2 3; do
  run ab128-$i 40 ./bin/flashattn-bench $A --check none
  run ab256-$i 40 ./bin/flashattn-bench $B --check none
done
H="run --preset headline --methods flash-hopper --check none --complete-path none --ceilings 4.26,798 --pass fwd --peers --peers-script ./bin/peers-fast.py"
run peers128 80 ./bin/flashattn-bench $H --dtype bf16,f16 --head-dims 128 --mask none --tiles 128x176
run peers256 80 ./bin/flashattn-bench $H --dtype bf16,f16 --head-dims 256 --tiles 128x80
el
cd /tmp && tar czf $OUT/results.tgz res
