#!/usr/bin/env bash
# Session 21 call 3 (30895df + backward_paths.py's fix): the Python layer's training forward and
# its backward from the residuals. The whole GPU suite beside the Python pytest suite (the wheel
# through run.sh python: test_cuda's backward tests now take the residual path on the H200, and
# test_training_forward_keeps_residuals_on_hopper); then python/bench/backward_paths.py: the
# backward through torch.autograd after the training forward, from the log-sum-exp, and
# PyTorch's FA2 backend (bf16, d = 64/128, N = 1024/4096/16384, causal and not).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/backward_paths.py /tmp/b/bundle/python/bench/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 250 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( ( time timeout 300 ./run.sh python ) > $R/pytest.log 2>&1; echo "pytest rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule" $R/tests-all.log | head
grep -hA16 "^---- " $R/tests-all.log | head -40
tail -25 $R/pytest.log
mkdir -p /tmp/fa && python3 -m pip install --quiet --no-deps --no-index --target /tmp/fa python/wheels/flashattn-*.whl > $R/pip.log 2>&1; echo "pip rc $?"
( time PYTHONPATH=/tmp/fa timeout 200 python3 python/bench/backward_paths.py --out $R/backward_paths.jsonl ) > $R/backward_paths.log 2>&1; echo "paths rc $?"
cat $R/backward_paths.log
el
cd /tmp && tar czf $OUT/results.tgz res
