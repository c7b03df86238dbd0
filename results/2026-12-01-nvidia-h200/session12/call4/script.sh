#!/usr/bin/env bash
# Session 12 call 4 (build 34373c3's code): B = 64 decode, where the decode instance runs 512
# one-warp blocks (4 per SM), beside the padded 64x64 4-warp instance (a tile override: one
# 4-warp block per sequence and K/V head, 4 packed rows in a 64-row tile), both memory orders,
# cuDNN in the same run.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 400 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
D="run --preset headline --dtype bf16 --head-dims 128 --seqlen-q 1 --heads 32 --kv-heads 8 --mask none --methods auto --check none --complete-path none --seqlens 4096,16384,65536,131072 --ceilings 4.26,798 --batch 64 --tiles auto,64x64"
run bshd-b64 120 ./bin/flashattn-bench $D --layout bshd --peers --peers-script ./bin/peers-fast.py
run bhsd-b64 90 ./bin/flashattn-bench $D --layout bhsd
run bshd-b64-2 90 ./bin/flashattn-bench $D --layout bshd
for f in $R/*-b64*/; do n=$(basename $f); python3 -c "
import json
for fn in ['bench.jsonl','peers.jsonl']:
  try:
    for l in open('$f'+fn):
      r=json.loads(l)
      if r.get('kind')=='row': print('$n', r['seqlen_k'], r['method'], r.get('tiles') or '', (r.get('kernel') or '')[14:], round(r['timing']['median_ms'],4) if r.get('timing') else r['status'], round(r.get('kv_tb_s') or 0,3), (r.get('error') or {}).get('within_rule'), (r.get('message') or '')[:60])
  except FileNotFoundError: pass
"; done
cd /tmp && tar czf $OUT/results.tgz res
