#!/usr/bin/env bash
# Session 12 call 3: the split rule rounding down (v31; at B = 16 with 8 K/V heads 3 splits
# instead of 4) — the attention:: GPU tests; then issue 10's decode grid (Nq = 1, bf16, d = 128,
# 32 query heads over 8 K/V heads, B 1/4/16/64 x caches 1k-128k) in both memory orders, cuDNN
# and FA2 on the same tensors in the same run.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 570 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 100 ./tests/gpu --test-threads 8 attention:: ) > $R/tests-attention.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
sleep 1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
D="run --preset headline --dtype bf16 --head-dims 128 --seqlen-q 1 --heads 32 --kv-heads 8 --mask none --methods auto --check none --complete-path none --seqlens 1024,4096,16384,65536,131072 --ceilings 4.26,798 --peers --peers-script ./bin/peers-fast.py"
wait; el; cat $R/rc.txt; grep -hE "^test .*FAILED|test result" $R/tests-attention.log | head
for lay in bshd bhsd; do for b in 16 64 4 1; do run $lay-b$b 80 ./bin/flashattn-bench $D --batch $b --layout $lay; done; done
for f in $R/*-b*/; do n=$(basename $f); python3 -c "
import json
rows={}
for fn in ['bench.jsonl','peers.jsonl']:
  try:
    for l in open('$f'+fn):
      r=json.loads(l)
      if r.get('kind')=='row' and r.get('timing'): rows.setdefault(r['key'],{})[r['method']]=(r['timing']['median_ms'], r.get('kv_tb_s') or 0)
  except FileNotFoundError: pass
for k,v in rows.items():
  a=v.get('auto'); c=v.get('torch-cudnn'); fl=v.get('torch-flash')
  print('$n', k.split('/')[1], k.split('/')[4], 'ours %.4f ms %.3f TB/s'%a if a else '-', 'cudnn %.4f'%c[0] if c else '-', 'fa2 %.4f'%fl[0] if fl else '-', 'x_cudnn %.3f'%(c[0]/a[0]) if a and c else '', 'x_fa2 %.3f'%(fl[0]/a[0]) if a and fl else '')
"; done
cd /tmp && tar czf $OUT/results.tgz res
