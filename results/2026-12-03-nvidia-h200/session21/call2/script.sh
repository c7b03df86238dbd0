#!/usr/bin/env bash
# Session 21 call 2 (92463db): v38 (d = 64's plain Hopper inference instances with three K/V stages) on b35.
# The whole GPU suite beside racecheck on hopper::persistent_bf16 and memcheck on
# hopper::rows192_bf16 (small sets); A/B of the bf16 d = 64 headline forward against the
# session's start (13b672d, `bench-old`), builds alternated three times; then the confirmation of
# call 1's backward: bf16 and f16 headline backward (d = 64, 128, 256) with FA2 and cuDNN in the
# same run, and the head-dims backward sweep (bf16, N = 4096) with them.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 580 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b'); tarfile.open('.gpu/old.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py .gpu/peers-flex.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT; ls bin
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64 --methods auto --pass fwd,bwd --check none --complete-path none --no-report"
( run warm-new 150 ./bin/flashattn-bench $W ) & ( run warm-old 150 ./bin/bench-old $W ) & wait; el
( ( time timeout 200 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::persistent_bf16 > $R/san-racecheck-persistent_bf16.log 2>&1; echo "racecheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::rows192_bf16 > $R/san-memcheck-rows192_bf16.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule|backward shapes" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -60
A="run --preset headline --dtype bf16 --head-dims 64 --methods auto --check none --complete-path none --pass fwd --no-report"
for i in 1 2 3; do run fwd-old-$i 30 ./bin/bench-old $A; run fwd-new-$i 30 ./bin/flashattn-bench $A; done
H="run --preset headline --head-dims 64,128,256 --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd --bwd-from residuals --peers --peers-script ./bin/peers-fast.py"
run bwd-bf16 100 ./bin/flashattn-bench $H --dtype bf16
run bwd-f16 100 ./bin/flashattn-bench $H --dtype f16
run hd-bwd 130 ./bin/flashattn-bench run --preset head-dims --dtype bf16 --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd --bwd-from residuals --peers --peers-script ./bin/peers-fast.py
el
cd /tmp && tar czf $OUT/results.tgz res
