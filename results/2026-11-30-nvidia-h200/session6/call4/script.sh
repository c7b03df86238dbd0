#!/usr/bin/env bash
# Session 6 call 4 (nvidia-h200): K/V append on the GPU (v22): Rust test, Python tests (flash_attn_with_kvcache k=/v= on CUDA), memcheck, whole suite.
set -uo pipefail
R=/tmp/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 300 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/bundle.txz').extractall()"
cd bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( time timeout 60 ./tests/gpu attention::append_kv ) > $R/append-tests.log 2>&1; echo "append rc $?"
grep -E "^test |test result|FAILED|differs|refused|wrote" $R/append-tests.log | head -8; el
( FLASHATTN_TEST_SMALL=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 attention::append_kv ) > $R/san-memcheck-append.log 2>&1; echo "memcheck append rc $?"
grep -E "ERROR SUMMARY|test result" $R/san-memcheck-append.log | head -3; el
( time timeout 80 ./run.sh python ) > $R/python-tests.log 2>&1; echo "python rc $?"
grep -E "passed|failed|python:|Error" $R/python-tests.log | tail -5; el
l=$(left); [ $l -gt 30 ] && { ( time timeout $l ./tests/gpu ) > $R/gpu-suite.log 2>&1; echo "suite rc $?"; grep -E "FAILED|test result" $R/gpu-suite.log | head; }
el
cd /tmp && tar czf $OUT/results.tgz res
