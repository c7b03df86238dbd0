#!/usr/bin/env bash
# Session 14 call 1 (b19: d = 64 dQ on wgmma; b20: masked training instances and the window
# backward's residual preprocessing): the whole GPU suite beside memcheck on backward::shapes_bf16;
# then alone: the bf16 and f16 headline backward from the residuals (FA2/cuDNN), the masks at
# N = 16384, d = 128, causal (window 256/1024/4096, softcap 30, ALiBi; fwd and bwd, FlexAttention),
# and ncu on the d = 64 backward's main kernel (B = 4, N = 4096).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 570 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py .gpu/peers-flex.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 230 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::shapes_bf16 > $R/san-memcheck-backwardshapes_bf16.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule|backward shapes" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -80
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
H="run --preset headline --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd --bwd-from residuals --peers --peers-script ./bin/peers-fast.py"
run bwd-bf16 80 ./bin/flashattn-bench $H --dtype bf16
run bwd-f16 80 ./bin/flashattn-bench $H --dtype f16
M="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --pass fwd,bwd --peers --peers-script ./bin/peers-flex.py --complete-path none --check none"
run mods-window 90 ./bin/flashattn-bench $M --window 256,1024,4096
run mods-softcap 45 ./bin/flashattn-bench $M --softcap 30
run mods-alibi 45 ./bin/flashattn-bench $M --alibi
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
  print('$f', k, 'ours %.4f ms %.1f TF'%a[:2] if a else '-', 'fa2 %.4f'%fl[0] if fl else '', 'cudnn %.4f'%c[0] if c else '', 'x_fa2 %.3f'%(fl[0]/a[0]) if a and fl else '', 'x_cudnn %.3f'%(c[0]/a[0]) if a and c else '', a[2] if a else '')
"; done
grep -h "ours / " -A12 $R/mods-*/report.md | grep "^|" | head -40
l=$(left); if [ $l -gt 60 ]; then
  timeout $(( l - 15 )) ncu --clock-control none --set full --import-source no -k regex:flash_bwd_bf16_d64_w4 --launch-count 1 -o $R/bwd-d64 \
    ./bin/flashattn-bench run --preset headline --dtype bf16 --head-dims 64 --seqlens 4096 --mask none --methods auto --pass bwd \
    --check none --complete-path none --reps 1 --warmup-ms 1 --no-report --out $R/x64 > $R/ncu-bwd-d64.log 2>&1
  echo "ncu rc $?"; el
  ncu --import $R/bwd-d64.ncu-rep --page details > $R/bwd-d64-details.txt 2>&1
  ncu --import $R/bwd-d64.ncu-rep --page source --csv --print-source sass > $R/bwd-d64-sass.csv 2>&1
  grep -E "flash_bwd|Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|Issue Slots Busy|Eligible Warps|No Eligible" $R/bwd-d64-details.txt | head -20
  rm -f $R/bwd-d64.ncu-rep
fi
el
cd /tmp && tar czf $OUT/results.tgz res
