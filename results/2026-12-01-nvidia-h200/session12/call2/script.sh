#!/usr/bin/env bash
# Session 12 call 2: a decode instance with 128-key tiles (d = 128, one warp, two V stages,
# 100 KiB: two blocks per SM) beside the 64-key one, at B = 16 with 64k/128k caches, both memory
# orders, split counts 2/3 and the planner's, cuDNN on the same tensors; the split-KV and paged
# tests of the suite (the new instance is reachable only by a tile override).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 560 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 120 ./tests/gpu --test-threads 8 attention:: ) > $R/tests-attention.log 2>&1; echo "suite rc $?" >> $R/rc.txt )
el; cat $R/rc.txt; grep -hE "^test .*FAILED|test result" $R/tests-attention.log | head
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
D="run --preset headline --dtype bf16 --head-dims 128 --seqlen-q 1 --heads 32 --kv-heads 8 --mask none --methods auto --check none --complete-path none --seqlens 65536,131072 --batch 16 --ceilings 4.26,798"
P="--peers --peers-script ./bin/peers-fast.py"
run bhsd-peers 90 ./bin/flashattn-bench $D --layout bhsd --tiles auto,16x128 $P
run bhsd-s2 45 ./bin/flashattn-bench $D --layout bhsd --tiles auto,16x128 --splits 2
run bhsd-s3 45 ./bin/flashattn-bench $D --layout bhsd --tiles auto,16x128 --splits 3
run bshd-peers 90 ./bin/flashattn-bench $D --layout bshd --tiles auto,16x128 --splits 2 $P
run bshd-s3 45 ./bin/flashattn-bench $D --layout bshd --tiles auto,16x128 --splits 3
run bshd-auto 45 ./bin/flashattn-bench $D --layout bshd --tiles auto,16x128
for f in bhsd-peers bhsd-s2 bhsd-s3 bshd-peers bshd-s3 bshd-auto; do echo "== $f"; python3 -c "
import json
for fn in ['bench.jsonl','peers.jsonl']:
  try:
    for l in open('$R/$f/'+fn):
      r=json.loads(l)
      if r.get('kind')=='row': print(r['key'].split('/')[4], r.get('method'), r.get('tiles') or '', (r.get('kernel') or '')[14:], round(r['timing']['median_ms'],4) if r.get('timing') else r['status'], round(r['timing'].get('p10_ms') or 0,4) if r.get('timing') else '', round(r.get('kv_tb_s') or 0,3), (r.get('message') or '')[:80])
  except FileNotFoundError: pass
" 2>&1; done
cd /tmp && tar czf $OUT/results.tgz res
