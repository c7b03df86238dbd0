#!/usr/bin/env bash
# Session 12 call 1: main with b16 (one K/V stage in the d = 128 preprocessing kernel) and the
# bench's --layout — whole GPU suite and compute-sanitizer on the backward; bf16 headline
# backward against 2ff3cf0 (old/, the build without b16), old and new alternated, FA2/cuDNN in
# the same run; d = 32 and varlen backward (not measured since b15); decode at B = 16/64 with
# 64k/128k caches in both memory orders, cuDNN on the same tensors.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 560 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b'); tarfile.open('.gpu/old.txz').extractall('/tmp/o')"
mv /tmp/o/bundle /tmp/b/bundle/old
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT old/COMMIT
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 200 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
san() {
  ( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 190 compute-sanitizer --tool $1 --error-exitcode 97 ./tests/gpu --test-threads 1 $2 > $R/san-$1-$(echo $2 | tr -d ':').log 2>&1; echo "$1 $2 rc $?" >> $R/rc.txt ) &
}
san memcheck backward::shapes_bf16
san racecheck backward::shapes_bf16
san synccheck backward::shapes_bf16
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA14 "^---- " $R/tests-all.log | head -50
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
B="run --preset headline --dtype bf16 --head-dims 128 --methods auto --pass bwd --check none --complete-path none"
run bwd-new 80 ./bin/flashattn-bench $B --peers --peers-script ./bin/peers-fast.py
run bwd-old 35 ./old/bin/flashattn-bench $B
run bwd-new2 35 ./bin/flashattn-bench $B
run bwd-old2 35 ./old/bin/flashattn-bench $B
D="run --preset headline --dtype bf16 --head-dims 128 --seqlen-q 1 --heads 32 --kv-heads 8 --mask none --methods auto --check none --complete-path none --seqlens 65536,131072 --peers --peers-script ./bin/peers-fast.py"
run dec-bhsd 80 ./bin/flashattn-bench $D --batch 16 --layout bhsd
run dec-bshd 80 ./bin/flashattn-bench $D --batch 16 --layout bshd
run bwd-d32 60 ./bin/flashattn-bench run --preset headline --dtype bf16 --head-dims 32 --methods auto --pass bwd --check none --complete-path none --peers --peers-script ./bin/peers-fast.py
run bwd-varlen 50 ./bin/flashattn-bench run --preset headline --mask varlen,varlen-causal --head-dims 64,128 --dtype bf16 --methods auto --pass bwd --check none --complete-path none
for f in bwd-new bwd-old bwd-new2 bwd-old2; do echo "== $f"; grep -h "| bwd | gpu | ok" $R/$f/report.md | awk -F'|' '{print $2,$7,$8}'; done
for f in bwd-new dec-bhsd dec-bshd bwd-d32; do echo "== $f"; grep -h "ours / torch" -A22 $R/$f/report.md | grep "^| \`"; done
for f in dec-bhsd dec-bshd; do echo "$f $(python3 -c "
import json
for l in open('$R/$f/bench.jsonl'):
    r=json.loads(l)
    if r.get('kind')=='row': print(r['key'], r.get('method'), round(r['timing']['median_ms'],4) if r.get('timing') else r['status'], round(r.get('kv_tb_s') or 0,3), r.get('layout'))
" 2>&1)"; done
echo "== varlen"; grep -h "| bwd | gpu" $R/bwd-varlen/report.md | head -20
cd /tmp && tar czf $OUT/results.tgz res
