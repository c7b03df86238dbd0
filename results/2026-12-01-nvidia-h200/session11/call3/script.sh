#!/usr/bin/env bash
# Session 11 call 3: build 0330db4 (main: interleaved decode splits, backward mask-free whole tiles)
# against the session's starting build (812e5b2, old/): whole GPU suite + compute-sanitizer on the
# changed paths; decode rows (cuDNN in the same run) and paged decode; backward headline (bf16,
# FA2/cuDNN in the same run), old and new alternated.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 540 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b'); tarfile.open('.gpu/base-bench.txz').extractall('/tmp/o')"
mv /tmp/o/bundle /tmp/b/bundle/old; mkdir -p /tmp/b/bundle/old/bin && true
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT old/COMMIT
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 270 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
san() {
  ( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 260 compute-sanitizer --tool $1 --error-exitcode 97 ./tests/gpu --test-threads 1 $2 > $R/san-$1-$(echo $2 | tr -d ':').log 2>&1; echo "$1 $2 rc $?" >> $R/rc.txt ) &
}
san memcheck backward::shapes_bf16
san racecheck backward::shapes_bf16
san memcheck attention::split_kv_bf16
san racecheck attention::split_kv_bf16
san memcheck attention::paged_cache_bf16
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA14 "^---- " $R/tests-all.log | head -60
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
D="run --preset headline --dtype bf16 --head-dims 128 --seqlen-q 1 --heads 32 --kv-heads 8 --mask none --methods auto --check none --complete-path none"
run dec-old1 25 ./old/bin/flashattn-bench $D --batch 16 --seqlens 65536,131072
run dec-new1 70 ./bin/flashattn-bench $D --batch 16 --seqlens 65536,131072 --peers --peers-script ./bin/peers-fast.py
run dec-old2 25 ./old/bin/flashattn-bench $D --batch 16 --seqlens 65536,131072
run dec-new2 25 ./bin/flashattn-bench $D --batch 16 --seqlens 65536,131072
run dec1-new 60 ./bin/flashattn-bench $D --batch 1 --seqlens 4096,65536,131072 --peers --peers-script ./bin/peers-fast.py
run dec1-old 20 ./old/bin/flashattn-bench $D --batch 1 --seqlens 4096,65536,131072
B="run --preset headline --dtype bf16 --methods auto --pass bwd --check none --complete-path none"
run bwd-new 100 ./bin/flashattn-bench $B --peers --peers-script ./bin/peers-fast.py
run bwd-old 45 ./old/bin/flashattn-bench $B
l=$(left); if [ $l -gt 40 ]; then ( timeout $(( l - 10 )) ./bin/decode --quick --cache ) > $R/decode-cache.log 2>&1; echo "decode cache rc $?"; el; fi
for f in dec-old1 dec-new1 dec-old2 dec-new2 dec1-new dec1-old; do echo "$f $(python3 -c "
import json
for l in open('$R/$f/bench.jsonl'):
    r=json.loads(l)
    if r.get('kind')=='row': print(r['key'].split('/')[1], r['key'].split('/')[4], round(r['timing']['median_ms'],4) if r.get('timing') else r['status'], round(r.get('kv_tb_s') or 0,3), end='; ')
" 2>&1)"; done
grep -h "ours / torch" -A5 $R/dec-new1/report.md $R/dec1-new/report.md | grep "^| \`" 
for f in bwd-new bwd-old; do echo "== $f"; grep -h "| bwd | gpu | ok" $R/$f/report.md | awk -F'|' '{print $2,$7,$8}'; done
grep -h "ours / torch" -A22 $R/bwd-new/report.md | grep "^| \`"
cat $R/decode-cache.log | head -20
cd /tmp && tar czf $OUT/results.tgz res
