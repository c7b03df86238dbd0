#!/usr/bin/env bash
# Session 21 call 1: b35 (d = 64's backward block at three blocks an SM). The whole GPU suite
# beside memcheck on backward::shapes_bf16 and racecheck on backward::deterministic_bit_identical
# (small sets); ncu's occupancy of the d = 64 main kernel (resident blocks); A/B in one process
# order, builds alternated twice: the session's start (13b672d, `bench-old`) against b35, bf16
# and f16 headline backward from residuals at d = 64 (d = 128 as the control, bf16); then b35's
# bf16 and f16 headline backward (d = 64, 128, 256) with FA2 and cuDNN in the same run.
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
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64 --methods auto --pass bwd --check none --complete-path none --no-report"
( run warm-new 150 ./bin/flashattn-bench $W ) & ( run warm-old 150 ./bin/bench-old $W ) & wait; el
( ( time timeout 200 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::shapes_bf16 > $R/san-memcheck-backwardshapes_bf16.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::deterministic_bit_identical > $R/san-racecheck-backwarddeterministic.log 2>&1; echo "racecheck rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule|backward shapes|backward random" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -60
timeout 60 ncu --metrics launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum -k regex:flash_bwd_bf16_d64 -c 1 ./bin/flashattn-bench run --seqlens 4096 --batch 4 --heads 32 --head-dims 64 --methods auto --pass bwd --bwd-from residuals --check none --complete-path none --no-report --out $R/ncu-occ > $R/ncu-occ.log 2>&1; echo "ncu rc $?"; el
A="run --preset headline --dtype bf16,f16 --head-dims 64 --methods auto --check none --complete-path none --pass bwd --bwd-from residuals --no-report"
C="run --preset headline --dtype bf16 --head-dims 128 --methods auto --check none --complete-path none --pass bwd --bwd-from residuals --no-report"
run ab-old-1 60 ./bin/bench-old $A
run ab-new-1 60 ./bin/flashattn-bench $A
run ab-old-2 60 ./bin/bench-old $A
run ab-new-2 60 ./bin/flashattn-bench $A
run abc-old-1 40 ./bin/bench-old $C
run abc-new-1 40 ./bin/flashattn-bench $C
H="run --preset headline --head-dims 64,128,256 --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd --bwd-from residuals --peers --peers-script ./bin/peers-fast.py"
run bwd-bf16 110 ./bin/flashattn-bench $H --dtype bf16
run bwd-f16 110 ./bin/flashattn-bench $H --dtype f16

el
cd /tmp && tar czf $OUT/results.tgz res
