#!/usr/bin/env bash
# Session 10 call 8: the f16 headline, forward and backward, with FlashAttention-2 and cuDNN in the same run (main at the session's end).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
timeout 80 ./bin/flashattn-bench run --preset headline --dtype f16 --methods auto --check none --peers --peers-script ./bin/peers-fast.py --out $R/fwd-f16 > $R/fwd-f16.log 2>&1; echo "fwd rc $?"
timeout 90 ./bin/flashattn-bench run --preset headline --dtype f16 --methods auto --pass bwd --check none --peers --peers-script ./bin/peers-fast.py --out $R/bwd-f16 > $R/bwd-f16.log 2>&1; echo "bwd rc $?"
grep -h "ours / torch" -A23 $R/fwd-f16/report.md | grep "^| f16" 
grep -h "ours / torch" -A23 $R/bwd-f16/report.md | grep "^| \`f16"
cd /tmp && tar czf $OUT/results.tgz res
