#!/usr/bin/env bash
# Session 33 call 4 (as call 3, with the other paths instruction-identical to main but the parameter size: the
# conversion's grid-wide body and the preprocessing kernels without the counter branch) against main ("old", ba8ada2): backward tests, memcheck,
# A/B alternated twice: d = 64 w1024 (with its Nq = 1 row), d = 128 windows 256/1024/4096 (control: their
# main kernels' PTX is the old one again).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 250 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/b.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; ls bin tests; cat COMMIT
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt; cat $R/gpu.txt
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64,128,256 --mask causal --methods auto --pass bwd --bwd-from residuals --check none --complete-path none --no-report --window 256"
( run warm-new 100 ./bin/bench-new $W ) & ( run warm-old 100 ./bin/bench-old $W ) & wait; el
( ( time timeout 110 ./tests/gpu-new --test-threads 4 backward:: ) > $R/tests-backward.log 2>&1; echo "backward tests rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 110 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu-new --test-threads 1 backward::shapes_bf16 > $R/san-memcheck-shapes_bf16.log 2>&1; echo "memcheck shapes rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 timeout 110 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu-new --test-threads 1 backward::deterministic > $R/san-memcheck-det.log 2>&1; echo "memcheck det rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule" $R/tests-*.log | head -20
grep -hE 'ERROR SUMMARY|test result' $R/san-*.log
grep -hA16 "^---- " $R/tests-*.log | head -40
M="run --seqlens 16384 --batch 1 --heads 16 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --no-report --mask causal"
for i in 1 2; do
  for b in old new; do
    run ab-$b-$i-win 40 ./bin/bench-$b $M --head-dims 128 --window 256,1024,4096 --dtype bf16
    run ab-$b-$i-win64 20 ./bin/bench-$b $M --head-dims 64 --window 1024 --dtype bf16
  done
done
python3 - <<'PY'
import json,os
R='/tmp/res'
def rows(d):
    out={}
    for fn in ['bench.jsonl','peers.jsonl']:
        p=os.path.join(R,d,fn)
        if not os.path.exists(p): continue
        for l in open(p):
            r=json.loads(l)
            if r.get('kind')=='row':
                t=r.get('timing'); k=r['key']
                if t and not r.get('tiles'): out.setdefault(k,{})[r['method']]=(t['median_ms'], r.get('tflops') or 0)
    return out
for kind in ['win','win64']:
    o=[rows('ab-old-%d-%s'%(i,kind)) for i in (1,2)]
    n=[rows('ab-new-%d-%s'%(i,kind)) for i in (1,2)]
    for k in o[0]:
        try:
            a=min(x[k]['auto'][0] for x in o); b=min(x[k]['auto'][0] for x in n)
            print('AB %s %s old %.4f new %.4f change %+.1f%% (runs old %s new %s)'%(kind,k,a,b,100*(b/a-1),[round(x[k]['auto'][0],4) for x in o],[round(x[k]['auto'][0],4) for x in n]))
        except (KeyError,ValueError): pass
PY
el
cd /tmp && tar czf $OUT/results.tgz res
