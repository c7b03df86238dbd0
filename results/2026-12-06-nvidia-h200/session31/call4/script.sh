#!/usr/bin/env bash
# Session 31 call 4: the shipped tree (b44 on main) — the whole GPU suite beside memcheck and
# racecheck of backward::shapes_bf16 (small cases): b44's instance had run only in the A/B timing
# calls (its tests ran on variants A and b45, which contain its code).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
export CUDA_CACHE_MAXSIZE=4294967296 FLASHATTN_REQUIRE_GPU=1
python3 -c "import tarfile; tarfile.open('.gpu/f.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; cat COMMIT
nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt
( ( time timeout 380 ./tests/gpu --test-threads 4 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 380 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::shapes_bf16 > $R/san-memcheck.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=2 timeout 380 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::shapes_bf16 > $R/san-racecheck.log 2>&1; echo "racecheck rc $?" >> $R/rc.txt ) &
wait
cat $R/gpu.txt $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule" $R/tests-all.log | head -30
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|test result" $R/san-*.log
grep -hA20 "^---- " $R/tests-all.log | head -40
cd /tmp && tar czf $OUT/results.tgz res
