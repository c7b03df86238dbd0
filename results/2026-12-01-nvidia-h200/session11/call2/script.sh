#!/usr/bin/env bash
# Session 11 call 2 (build 812e5b2): (1) the decode example's split sweep (every power of two,
# in one process, B = 1/4/16/64 × 1k–128k) to refit the split rule; (2) the head-dims preset,
# bf16 and f16, with PyTorch's FlashAttention-2 and cuDNN backends in the same run (issue 10's
# head-dim bar, after the Hopper kernel took d > 32).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
python3 -c "import tarfile; tarfile.open('.gpu/base.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
( timeout 200 ./bin/decode ) > $R/decode-sweep.log 2>&1; echo "decode rc $?"; el
cat $R/decode-sweep.log
( timeout 260 ./bin/flashattn-bench run --preset head-dims --methods auto --check oracle --complete-path none --peers --peers-script ./bin/peers-fast.py --out $R/head-dims ) > $R/head-dims.log 2>&1; echo "head-dims rc $?"; el
grep -h "ours / torch" -A40 $R/head-dims/report.md | grep "^|" | awk -F'|' '{print $2,$3,$4,$5,$6,$7,$8,$9,$10}' | head -70
cd /tmp && tar czf $OUT/results.tgz res
