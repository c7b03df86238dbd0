#!/usr/bin/env bash
# Session 11 call 4: main d69bf31 (b15: backward mask-free whole tiles, fixed; b14: d = 64 dQ on
# wgmma) — whole GPU suite, compute-sanitizer on the backward; bf16 headline backward of this
# build (FA2/cuDNN in the same run), of e8e3dc0 (mid/: b15 only) and of 812e5b2 (old/: session
# start), one after another in this call.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 520 - ($(date +%s) - start) )); }
python3 -c "
import tarfile
tarfile.open('.gpu/new.txz').extractall('/tmp/b')
tarfile.open('.gpu/mid-bench.txz').extractall('/tmp/m')
tarfile.open('.gpu/base-bench.txz').extractall('/tmp/o')"
mv /tmp/m/bundle /tmp/b/bundle/mid; mv /tmp/o/bundle /tmp/b/bundle/old
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT mid/COMMIT old/COMMIT
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 200 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
san() {
  ( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 190 compute-sanitizer --tool $1 --error-exitcode 97 ./tests/gpu --test-threads 1 $2 > $R/san-$1-$(echo $2 | tr -d ':').log 2>&1; echo "$1 $2 rc $?" >> $R/rc.txt ) &
}
san memcheck backward::shapes_bf16
san racecheck backward::shapes_bf16
san memcheck backward::deterministic_bit_identical
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA14 "^---- " $R/tests-all.log | head -50
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
B="run --preset headline --dtype bf16 --methods auto --pass bwd --check none --complete-path none"
run bwd-new 110 ./bin/flashattn-bench $B --peers --peers-script ./bin/peers-fast.py
run bwd-mid 80 ./mid/bin/flashattn-bench $B
run bwd-old 80 ./old/bin/flashattn-bench $B
for f in bwd-new bwd-mid bwd-old; do echo "$f $(python3 -c "
import json
for l in open('$R/$f/bench.jsonl'):
    r=json.loads(l)
    if r.get('kind')=='row' and r.get('backend')=='gpu': print(r['key'].split('/',1)[1], round(r['timing']['median_ms'],4) if r.get('timing') else r['status'], end='; ')
" 2>&1)"; done
grep -h "ours / torch" -A22 $R/bwd-new/report.md | grep "^| \`"
cd /tmp && tar czf $OUT/results.tgz res
