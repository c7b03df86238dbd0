#!/usr/bin/env bash
# Session 13 call 4 (the build of call 3, 3986906): racecheck and memcheck on the deterministic
# backward test (small: its cases run from the log-sum-exp and from the training forward's
# residuals); the head-dims preset's backward (bf16, d 32-128, causal and not) from the residuals
# with FA2/cuDNN, and from the log-sum-exp, in one call.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 540 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
san() {
  ( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 300 compute-sanitizer --tool $1 --error-exitcode 97 ./tests/gpu --test-threads 1 $2 > $R/san-$1-$(echo $2 | tr -d ':').log 2>&1; echo "$1 $2 rc $?" >> $R/rc.txt ) &
}
san racecheck backward::deterministic_bit_identical
san memcheck backward::deterministic_bit_identical
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
H="run --preset head-dims --dtype bf16 --head-dims 32,40,48,64,80,96,112,128 --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd"
run hd-res 200 ./bin/flashattn-bench $H --bwd-from residuals --peers --peers-script ./bin/peers-fast.py
run hd-lse 80 ./bin/flashattn-bench $H --bwd-from lse
wait; el
cat $R/rc.txt
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
for f in hd-res hd-lse; do python3 -c "
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
  print('$f', k, 'ours %.4f ms %.1f TF'%a[:2] if a else '-', 'fa2 %.1f'%fl[1] if fl else '', 'cudnn %.1f'%c[1] if c else '', 'x_fa2 %.3f'%(fl[0]/a[0]) if a and fl else '', 'x_cudnn %.3f'%(c[0]/a[0]) if a and c else '', a[2] if a else '')
"; done
el
cd /tmp && tar czf $OUT/results.tgz res
