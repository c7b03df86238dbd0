#!/usr/bin/env bash
# Session 22 call 2: d = 256 in 128 × 80 tiles by default (v39), d = 192's 128 × 112 instance
# behind a tile override (v39b), the training plan pairing instances by rows. The whole GPU suite
# beside memcheck / racecheck / synccheck on hopper::wide_keys_bf16 (small set); d = 160/192
# (head-dims preset's batch and heads, N = 1024 … 16384, causal and not) with Auto's tiles
# (128 × 64, persistent where it applies) against 128 × 112 in one process, three times; the
# head-dims sweep and the d = 256 headline with FA2 and cuDNN in the same run.
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
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 192 --methods auto --tiles 128x112 --check none --complete-path none --no-report"
run warm 150 ./bin/flashattn-bench $W
( ( time timeout 200 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
for t in memcheck racecheck synccheck; do
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 190 compute-sanitizer --tool $t --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::wide_keys_bf16 > $R/san-$t.log 2>&1; echo "$t rc $?" >> $R/rc.txt ) &
done
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -40
A="run --preset head-dims --seqlens 1024,2048,4096,8192,16384 --dtype bf16,f16 --head-dims 160,192 --mask none,causal --methods flash-hopper --tiles 128x64,128x112 --complete-path none --pass fwd --no-report"
run ab192-check 150 ./bin/flashattn-bench $A --check oracle
for i in 1 2 3; do run ab192-$i 45 ./bin/flashattn-bench $A --check none; done
H="run --methods auto --check none --complete-path none --ceilings 4.26,798 --pass fwd --peers --peers-script ./bin/peers-fast.py"
run peers-headdims 120 ./bin/flashattn-bench $H --preset head-dims --mask none,causal
run peers256 80 ./bin/flashattn-bench $H --preset headline --dtype bf16,f16 --head-dims 256
el
cd /tmp && tar czf $OUT/results.tgz res
