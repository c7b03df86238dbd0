#!/usr/bin/env bash
# Session 12 call 5: b17, the d = 64 backward as two one-warpgroup blocks per SM (a tile
# override, `--tiles 64x64`) — the backward GPU tests (the variant's edge shapes included),
# memcheck and racecheck on backward::shapes_bf16; the bf16 d = 64 headline backward with the
# default and the variant in the same run, FA2/cuDNN beside them.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 470 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 200 ./tests/gpu --test-threads 8 backward:: ) > $R/tests-backward.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
san() {
  ( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 200 compute-sanitizer --tool $1 --error-exitcode 97 ./tests/gpu --test-threads 1 $2 > $R/san-$1-$(echo $2 | tr -d ':').log 2>&1; echo "$1 $2 rc $?" >> $R/rc.txt ) &
}
san memcheck backward::shapes_bf16
san racecheck backward::shapes_bf16
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule" $R/tests-backward.log | head -20
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA14 "^---- " $R/tests-backward.log | head -40
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
B="run --preset headline --dtype bf16 --head-dims 64 --methods auto --pass bwd --check none --complete-path none --ceilings 4.26,798 --tiles auto,64x64"
run bwd-d64 150 ./bin/flashattn-bench $B --peers --peers-script ./bin/peers-fast.py
run bwd-d64-2 80 ./bin/flashattn-bench $B
for f in bwd-d64 bwd-d64-2; do echo "== $f"; python3 -c "
import json
for l in open('$R/$f/bench.jsonl'):
    r=json.loads(l)
    if r.get('kind')=='row': print(r['key'].split('/')[3], r['mask'], r.get('tiles') or 'default', (r.get('kernel') or ''), round(r['timing']['median_ms'],4) if r.get('timing') else r['status'], round(r.get('tflops') or 0,1), (r.get('message') or '')[:80])
"; done
grep -h "ours / torch" -A22 $R/bwd-d64/report.md | grep "^| \`"
cd /tmp && tar czf $OUT/results.tgz res
