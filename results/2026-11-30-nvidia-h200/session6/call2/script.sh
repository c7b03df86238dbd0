#!/usr/bin/env bash
# Session 6 call 2 (nvidia-h200): A = integ (main + gpu-kv-cache + kept tensor maps + pool threshold; persistent grid reverted),
# B = A + cp.async .L2::256B (prediction v19). Decode A/B alternated; decode with caches; headline + python-ratios; python tests; suite.
set -uo pipefail
R=/tmp/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 590 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/bundle.txz').extractall()"
python3 -c "import tarfile; tarfile.open('.gpu/benchB.txz').extractall('.gpu/B')"
cp -r bundle bundleB && cp .gpu/B/flashattn-bench bundleB/bin/flashattn-bench
cat bundle/COMMIT .gpu/B/COMMIT
export FLASHATTN_REQUIRE_GPU=1
D="run.sh bench run --check oracle --complete-path none --preset quick --tiles auto --dtype bf16 --mask none --head-dims 128 --heads 32 --kv-heads 8 --seqlen-q 1 --methods auto --peers --seqlens 65536,131072"
for round in 1 2; do for v in A B; do for b in 16 64; do
  dir=bundle; [ $v = B ] && dir=bundleB
  ( cd $dir && FLASHATTN_COMMIT=$(cat COMMIT)-$v timeout 60 ./$D --batch $b --out $R/decode-$v$round-b$b ) > $R/decode-$v$round-b$b.log 2>&1; echo "decode $v$round b$b rc $?"
  grep "^| headline" $R/decode-$v$round-b$b/report.md | head -4
done; done; done; el
cd bundle
( time timeout 60 ./bin/decode --quick --cache ) > $R/decode-cache.log 2>&1; echo "decode cache rc $?"; cat $R/decode-cache.log | tail -12; el
( time timeout 130 ./run.sh bench run --preset headline --dtype bf16 --methods auto --peers --check none --complete-path none --out $R/headline ) > $R/headline.log 2>&1; echo "headline rc $?"
grep "^| headline" $R/headline/report.md | head -24; el
( time timeout 120 ./run.sh python-ratios --bench $R/headline/bench.jsonl --out $R/ratios.jsonl ) > $R/ratios.log 2>&1; echo "ratios rc $?"
grep -v "^$" $R/ratios.log | cut -c1-120 | tail -30; el
( time timeout 100 ./run.sh python ) > $R/python-tests.log 2>&1; echo "python rc $?"
grep -E "passed|failed|python:" $R/python-tests.log | tail -3; el
l=$(left); [ $l -gt 30 ] && { ( time timeout $l ./tests/gpu ) > $R/gpu-suite.log 2>&1; echo "suite rc $?"; grep -E "FAILED|test result" $R/gpu-suite.log | head; }
el
l=$(left); [ $l -gt 15 ] && { ( FLASHATTN_TEST_SMALL=1 timeout $l compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::recurring_tensors ) > $R/san-memcheck-recurring.log 2>&1; echo "memcheck recurring rc $?"; grep -E "ERROR SUMMARY|test result" $R/san-memcheck-recurring.log; }
el
cd /tmp && tar czf $OUT/results.tgz res
