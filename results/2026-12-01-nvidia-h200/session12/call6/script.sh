#!/usr/bin/env bash
# Session 12 call 6: b17 as d = 64's default — the backward GPU tests (deterministic mode now on
# the one-warpgroup block), memcheck on deterministic_bit_identical; the d = 64 headline backward,
# default against `--tiles 64x128` (the old block) in one run.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 150 ./tests/gpu --test-threads 8 backward:: ) > $R/tests-backward.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::deterministic_bit_identical > $R/san-memcheck-det.log 2>&1; echo "memcheck det rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule" $R/tests-backward.log | head
grep -hE 'ERROR SUMMARY|test result' $R/san-memcheck-det.log
grep -hA14 "^---- " $R/tests-backward.log | head -40
( timeout 60 ./bin/flashattn-bench run --preset headline --dtype bf16 --head-dims 64 --methods auto --pass bwd --check none --complete-path none --ceilings 4.26,798 --tiles auto,64x128 --out $R/bwd-d64 ) > $R/bwd-d64.log 2>&1; echo "bench rc $?"; el
python3 -c "
import json
for l in open('$R/bwd-d64/bench.jsonl'):
    r=json.loads(l)
    if r.get('kind')=='row': print(r['key'].split('/')[3], r['mask'], r.get('tiles') or 'default', r.get('block_n'), round(r['timing']['median_ms'],4) if r.get('timing') else r['status'], round(r.get('tflops') or 0,1))
"
cd /tmp && tar czf $OUT/results.tgz res
