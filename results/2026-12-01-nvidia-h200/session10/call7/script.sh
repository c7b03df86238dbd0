#!/usr/bin/env bash
# Session 10 call 7: softcaps on a masked Hopper instance without the overlap (_win_softcap):
# hopper:: and score-modifier tests, then the masked forward rows against the session's starting
# build (old, b01ec0b), alternated.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b'); tarfile.open('.gpu/old.txz').extractall('/tmp/b/bundle')"
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 200 ./tests/gpu --test-threads 8 hopper:: ) > $R/tests-hopper.log 2>&1; echo "hopper rc $?" >> $R/rc.txt ) &
( ( time timeout 200 ./tests/gpu --test-threads 4 score_modifiers ) > $R/tests-mods.log 2>&1; echo "mods rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 190 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::masked_bf16 > $R/san-memcheck-hoppermasked.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt; grep -hE "^test |test result" $R/tests-*.log | head -30; grep -h "ERROR SUMMARY" $R/san-*.log
M="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --pass fwd --complete-path none --check none --tiles auto"
for v in old new old new; do
  b=./bin/flashattn-bench; [ $v = old ] && b=./old/flashattn-bench
  for m in "cap:--softcap 30" "alibi:--alibi" "both:--softcap 30 --alibi" "w1024:--window 1024"; do
    n=${m%%:*}; f=${m#*:}; o=$R/$v-$n-$(date +%s%N)
    timeout 40 $b $M $f --out $o > $o.log 2>&1
    echo "$v $n $(grep -h '| ok |' $o/report.md 2>/dev/null | awk -F'|' '{printf "%s %s %s; ", $3, $6, $9}')"
  done
done; el
cd /tmp && tar czf $OUT/results.tgz res
