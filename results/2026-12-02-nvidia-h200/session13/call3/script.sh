#!/usr/bin/env bash
# Session 13 call 3 (3986906, b18 revised: exact-max training instances with unrounded row sums;
# page tables and tensor maps shared with their calls until queued): the whole GPU suite; the
# paged-cache tests three more times at 8 threads; memcheck and racecheck on backward::shapes_bf16;
# the bf16 headline backward from the residuals (FA2/cuDNN) and from the log-sum-exp, fwd+bwd both
# ways, the f16 headline backward from the residuals (FA2/cuDNN).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 570 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 220 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( ( for i in 1 2 3; do timeout 60 ./tests/gpu --test-threads 8 attention::paged_cache; done ) > $R/paged-repeat.log 2>&1; echo "paged repeat rc $?" >> $R/rc.txt ) &
san() {
  ( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 200 compute-sanitizer --tool $1 --error-exitcode 97 ./tests/gpu --test-threads 1 $2 > $R/san-$1-$(echo $2 | tr -d ':').log 2>&1; echo "$1 $2 rc $?" >> $R/rc.txt ) &
}
san memcheck backward::shapes_bf16
san racecheck backward::shapes_bf16
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule|backward shapes" $R/tests-all.log | head -30
grep -hE "test result|not finite|paged cache" $R/paged-repeat.log | head
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -80
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
B="run --preset headline --dtype bf16 --methods auto --check none --complete-path none --ceilings 4.26,798"
run bwd-res 110 ./bin/flashattn-bench $B --pass bwd --bwd-from residuals --peers --peers-script ./bin/peers-fast.py
run bwd-lse 60 ./bin/flashattn-bench $B --pass bwd --bwd-from lse
run fb-res 60 ./bin/flashattn-bench $B --pass fwd+bwd --bwd-from residuals
run fb-lse 60 ./bin/flashattn-bench $B --pass fwd+bwd --bwd-from lse
run bwd-f16 110 ./bin/flashattn-bench run --preset headline --dtype f16 --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd --bwd-from residuals --peers --peers-script ./bin/peers-fast.py
for f in bwd-res bwd-lse fb-res fb-lse bwd-f16; do python3 -c "
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
el
cd /tmp && tar czf $OUT/results.tgz res
