#!/usr/bin/env bash
# Session 10 call 6: the softcap forward on the Hopper masked instance measured 224.6 TFLOP/s in
# call 5 against 266.3 in session 8 (window 1024 and ALiBi gained 8-9% over the same pair): the
# session's starting build (old, b01ec0b) and main (new) alternated on the masked forward rows.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b'); tarfile.open('.gpu/old.txz').extractall('/tmp/b/bundle')"
cd /tmp/b/bundle; cat COMMIT
M="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto,flash-tc --pass fwd --complete-path none --check none --tiles auto"
for v in old new old new; do
  b=./bin/flashattn-bench; [ $v = old ] && b=./old/flashattn-bench
  for m in "cap:--softcap 30" "alibi:--alibi" "w1024:--window 1024"; do
    n=${m%%:*}; f=${m#*:}
    timeout 40 $b $M $f --out $R/$v-$n-$SECONDS > $R/$v-$n-$SECONDS.log 2>&1
    echo "$v $n $(grep -h '| ok |' $R/$v-$n-*/report.md 2>/dev/null | tail -2 | awk -F'|' '{printf "%s %s %s; ", $3, $6, $9}')"
  done
done
cd /tmp && tar czf $OUT/results.tgz res
