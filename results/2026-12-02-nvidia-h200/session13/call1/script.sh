#!/usr/bin/env bash
# Session 13 call 1 (build 97c188c, b17 as d = 64's default): the whole GPU suite;
# compute-sanitizer memcheck and racecheck on split-KV, GQA packing and the padded head dims,
# memcheck on the deterministic backward; issue 10's decode grid (Nq = 1, bf16, d = 128, 32/8
# heads, B 1/4/16/64 x 1k-128k) in both memory orders with FA2 and cuDNN on the same tensors;
# the head-dims preset (bf16 and f16, oracle-checked) with FA2 and cuDNN in the same run.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 575 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $R/smi.txt 2>&1
( ( time timeout 200 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
san() {
  ( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 190 compute-sanitizer --tool $1 --error-exitcode 97 ./tests/gpu --test-threads 1 $2 > $R/san-$1-$(echo $2 | tr -d ':').log 2>&1; echo "$1 $2 rc $?" >> $R/rc.txt ) &
}
san memcheck attention::split_kv_bf16
san racecheck attention::split_kv_bf16
san memcheck attention::gqa_packing_decode
san racecheck attention::tensor_core_shapes_bf16
san memcheck attention::tensor_core_shapes_bf16
san memcheck backward::deterministic_bit_identical
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA14 "^---- " $R/tests-all.log | head -50
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
D="run --preset headline --dtype bf16 --head-dims 128 --seqlen-q 1 --heads 32 --kv-heads 8 --mask none --methods auto --check none --complete-path none --seqlens 1024,4096,16384,65536,131072 --ceilings 4.26,798 --peers --peers-script ./bin/peers-fast.py"
for lay in bshd bhsd; do for b in 16 64 4 1; do run dec-$lay-b$b 60 ./bin/flashattn-bench $D --batch $b --layout $lay; done; done
for f in $R/dec-*/; do n=$(basename $f); python3 -c "
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
run head-dims 260 ./bin/flashattn-bench run --preset head-dims --methods auto --check oracle --complete-path none --ceilings 4.26,798 --peers --peers-script ./bin/peers-fast.py
grep -h "ours / torch" -A40 $R/head-dims/report.md | grep "^|" | head -70
el
cd /tmp && tar czf $OUT/results.tgz res
