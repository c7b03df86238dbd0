#!/usr/bin/env bash
# Session 9 call 1: (a) the tests that session 8's last call could not run: the Hopper kernel's masked instances (windows, softcap, ALiBi) and the score modifiers through every path; (b) paged decode: next tile's page indices prefetched into L1 + the device-kept page table, against the build before (decode-old, commit 54e7d53) alternated; paged/append tests; memcheck of the masked Hopper and paged tests.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 355 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/bundle.txz').extractall()"
cd bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
for f in hopper:: "score_modifiers --skip hopper::" paged append; do
  n=$(echo $f | cut -d' ' -f1 | tr -d ':')
  ( ( time timeout 150 ./tests/gpu --test-threads 4 $f ) > $R/tests-$n.log 2>&1; echo "tests $f rc $?" >> $R/tests-rc.txt ) &
done
wait
cat $R/tests-rc.txt; grep -hE "^test |test result|panicked|exceeds" $R/tests-*.log | head -40; el
decode() {
  for v in old new; do
    bin=./bin/decode; [ $v = old ] && bin=./bin/decode-old
    l=$(left); [ $l -gt 60 ] || return
    ( time timeout 55 $bin --quick --cache ) > $R/decode-cache-$v-$1.log 2>&1; echo "decode $v rc $?"
  done
}
export FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=4
memcheck() {
  l=$(left); [ $l -gt 40 ] || return
  n=$(echo $1 | tr -d ':')
  ( timeout $(( l - 10 < 80 ? l - 10 : 80 )) compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 $1 ) > $R/san-memcheck-$n.log 2>&1; echo "memcheck $1 rc $?"
  grep -E "ERROR SUMMARY|test result" $R/san-memcheck-$n.log | head -3
}
( unset FLASHATTN_TEST_SMALL FLASHATTN_GPU_CASES; decode 1 ); el
memcheck hopper::masked_bf16; el
( unset FLASHATTN_TEST_SMALL FLASHATTN_GPU_CASES; decode 2 ); el
memcheck attention::paged_cache_bf16; el
grep -h "paged" $R/decode-cache-*.log | head -40
cd /tmp && tar czf $OUT/results.tgz res
