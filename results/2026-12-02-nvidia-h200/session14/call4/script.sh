#!/usr/bin/env bash
# Session 14 call 4 (56cc639, the final code: b21 only in d = 128's plain instance, b22
# reverted): the whole GPU suite beside memcheck on backward::shapes_bf16 and
# backward::deterministic_bit_identical; then alone, the bf16 and f16 headline backward (FA2/cuDNN),
# the masks' backward (FlexAttention).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 570 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py .gpu/peers-flex.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 170 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
for t in backward::shapes_bf16 backward::deterministic_bit_identical; do
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 165 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 $t > $R/san-memcheck-$(echo $t | tr -d ':').log 2>&1; echo "memcheck $t rc $?" >> $R/rc.txt ) &
done
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule|backward shapes" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -60
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
H="run --preset headline --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd --bwd-from residuals"
run bwd-bf16 80 ./bin/flashattn-bench $H --dtype bf16 --peers --peers-script ./bin/peers-fast.py
run bwd-f16 80 ./bin/flashattn-bench $H --dtype f16 --peers --peers-script ./bin/peers-fast.py
for f in bwd-bf16 bwd-f16; do python3 -c "
import json
rows={}
for fn in ['bench.jsonl','peers.jsonl']:
  try:
    for l in open('$R/$f/'+fn):
      r=json.loads(l)
      if r.get('kind')=='row' and r.get('timing'): rows.setdefault(r['key'],{})[r['method']]=(r['timing']['median_ms'], r.get('tflops') or 0, r.get('kernel'))
  except FileNotFoundError: pass
for k,v in rows.items():
  a=v.get('auto'); c=v.get('torch-cudnn'); fl=v.get('torch-flash')
  print('$f', k, 'ours %.4f ms %.1f TF'%a[:2] if a else '-', 'fa2 %.4f'%fl[0] if fl else '', 'cudnn %.4f'%c[0] if c else '', 'x_fa2 %.3f'%(fl[0]/a[0]) if a and fl else '', 'x_cudnn %.3f'%(c[0]/a[0]) if a and c else '')
"; done
M="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --pass bwd --peers --peers-script ./bin/peers-flex.py --complete-path none --check none"
run mods-window 60 ./bin/flashattn-bench $M --window 256,1024,4096
run mods-softcap 40 ./bin/flashattn-bench $M --softcap 30
run mods-alibi 40 ./bin/flashattn-bench $M --alibi
grep -h "ours / " -A6 $R/mods-*/report.md | grep "^|" | grep -v N1x | head -20
el
cd /tmp && tar czf $OUT/results.tgz res
