#!/usr/bin/env bash
# Session 22 call 4: the final build (v40's Auto rule at d <= 32), with little device time left:
# the d = 32 head-dims row (N = 4096, Auto now on the Hopper kernel; oracle-checked) with FA2 and
# cuDNN, then the GPU suite's hopper::shapes_bf16 (d = 8 and 32 among its head dims).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( time timeout 150 ./bin/flashattn-bench run --preset head-dims --head-dims 32 --mask none,causal --methods auto --check oracle --complete-path none --ceilings 4.26,798 --pass fwd --peers --peers-script ./bin/peers-fast.py --out $R/peers-d32 ) > $R/peers-d32.log 2>&1; echo "peers rc $?"
el
( time timeout 80 ./tests/gpu --test-threads 8 hopper::shapes_bf16 ) > $R/tests-all.log 2>&1; echo "suite rc $?"
el
grep -hE "^test .*FAILED|test result|worst rule" $R/tests-all.log | head -20
grep -hA16 "^---- " $R/tests-all.log | head -30
cd /tmp && tar czf $OUT/results.tgz res
