#!/usr/bin/env bash
# Session 10 call 4: speed of main's new build against the session's starting build (old, b01ec0b),
# same machine, same call: bf16 headline forward (Auto: the Hopper kernel, v25) with
# FlashAttention-2 and cuDNN; bf16 headline backward (b11+b12) with the same peers; decode from
# contiguous and paged caches (v26/v26b).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b'); tarfile.open('.gpu/old.txz').extractall('/tmp/b/bundle')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
P="--peers --peers-script ./bin/peers-fast.py"
run() { local name=$1 lim=$2; shift 2; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
run fwd-new 150 ./bin/flashattn-bench run --preset headline --dtype bf16 --methods auto --check none $P
run fwd-old 60 ./old/flashattn-bench run --preset headline --dtype bf16 --methods auto --check none
run bwd-new 170 ./bin/flashattn-bench run --preset headline --dtype bf16 --methods auto --pass bwd --check none $P
run bwd-old 70 ./old/flashattn-bench run --preset headline --dtype bf16 --methods auto --pass bwd --check none
( timeout 55 ./bin/decode --quick --cache ) > $R/decode-new.log 2>&1; echo "decode new rc $?"; el
( timeout 55 ./old/decode --quick --cache ) > $R/decode-old.log 2>&1; echo "decode old rc $?"; el
for f in fwd-new fwd-old bwd-new bwd-old; do echo "== $f"; grep -h "| ok |" $R/$f/report.md | awk -F'|' '{print $2,$3,$6,$9}' | head -24; done
grep -h "ours / torch" -A24 $R/fwd-new/report.md | head -26
grep -h "ours / torch" -A24 $R/bwd-new/report.md | head -26
cd /tmp && tar czf $OUT/results.tgz res
