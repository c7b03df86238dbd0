#!/usr/bin/env bash
# Session 8 call 3: Hopper masked instances (windows, softcap, ALiBi): hopper:: and window/score-modifier tests, then N=16384 d128 bf16 causal fwd,bwd with FlexAttention in the same run: window 256/1024/4096, softcap 30, ALiBi, both.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 470 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/bundle.txz').extractall()"
cd bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( time timeout 150 ./tests/gpu --test-threads 2 hopper:: attention::sliding attention::score attention::random_score ) > $R/gpu-tests.log 2>&1; echo "tests rc $?"
grep -E "^test |test result|panicked|exceeds" $R/gpu-tests.log | head -24; el
B="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto,flash-tc --pass fwd,bwd --peers --complete-path none --tiles auto"
for v in "window:--window 256,1024,4096" "softcap:--softcap 30" "alibi:--alibi" "both:--softcap 30 --alibi"; do
  name=${v%%:*}; flags=${v#*:}
  l=$(left); [ $l -gt 40 ] || break
  ( time timeout $l ./run.sh bench $B $flags --out $R/mods-$name ) > $R/mods-$name.log 2>&1; echo "bench $name rc $?"
  el
done
cd /tmp && tar czf $OUT/results.tgz res
