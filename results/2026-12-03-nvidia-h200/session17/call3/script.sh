#!/usr/bin/env bash
# Session 17 call 3: b33 (d = 64's plain block adds dQ by bulk reductions, with b32's spread
# walks). The whole GPU suite beside memcheck on backward::shapes_bf16 and racecheck/synccheck on
# backward::deterministic_bit_identical (small sets); then A/B in one process order, builds
# alternated twice: b32 (`bench-b32`) against b33, bf16 headline backward from residuals at
# d = 64 and 128 and f16 at d = 64; then b33's d = 64 headline backward with FA2 and cuDNN.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 575 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b'); tarfile.open('.gpu/b32.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py .gpu/peers-flex.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT; ls bin
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64 --methods auto --pass bwd --check none --complete-path none --no-report"
( run warm-new 150 ./bin/flashattn-bench $W ) & ( run warm-b32 150 ./bin/bench-b32 $W ) & wait; el
( ( time timeout 200 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::shapes_bf16 > $R/san-memcheck-backwardshapes_bf16.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::deterministic_bit_identical > $R/san-racecheck-backwarddeterministic.log 2>&1; echo "racecheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool synccheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::deterministic_bit_identical > $R/san-synccheck-backwarddeterministic.log 2>&1; echo "synccheck rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule|backward shapes|backward random" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -60
A="run --preset headline --dtype bf16 --head-dims 64,128 --methods auto --check none --complete-path none --pass bwd --bwd-from residuals --no-report"
F="run --preset headline --dtype f16 --head-dims 64 --methods auto --check none --complete-path none --pass bwd --bwd-from residuals --no-report"
for i in 1 2; do
  run ab-old-$i 40 ./bin/bench-b32 $A
  run ab-new-$i 40 ./bin/flashattn-bench $A
  run abf-old-$i 30 ./bin/bench-b32 $F
  run abf-new-$i 30 ./bin/flashattn-bench $F
done
H="run --preset headline --head-dims 64 --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd --bwd-from residuals --peers --peers-script ./bin/peers-fast.py"
run bwd-bf16 80 ./bin/flashattn-bench $H --dtype bf16
run bwd-f16 80 ./bin/flashattn-bench $H --dtype f16
python3 - <<'PY'
import json,os
R='/tmp/res'
def rows(d):
    out={}
    p=os.path.join(R,d,'bench.jsonl')
    if not os.path.exists(p): return out
    for l in open(p):
        r=json.loads(l)
        if r.get('kind')=='row' and r.get('timing'):
            out[r['key']]=r['timing']['median_ms']
    return out
def peers(d):
    out={}
    for fn in ['bench.jsonl','peers.jsonl']:
        p=os.path.join(R,d,fn)
        if not os.path.exists(p): continue
        for l in open(p):
            r=json.loads(l)
            if r.get('kind')=='row' and r.get('timing'):
                out.setdefault(r['key'],{})[r['method']]=(r['timing']['median_ms'], r.get('tflops') or 0)
    return out
for p in ['ab','abf']:
    o=[rows(p+'-old-1'),rows(p+'-old-2')]; n=[rows(p+'-new-1'),rows(p+'-new-2')]
    for k in o[0]:
        if all(k in x for x in o+n):
            a=min(x[k] for x in o); b=min(x[k] for x in n)
            print('AB %s b32 %.4f b33 %.4f change %+.1f%%'%(k,a,b,100*(b/a-1)))
for d in ['bwd-bf16','bwd-f16']:
    for k,v in peers(d).items():
        fl=v.get('torch-flash'); c=v.get('torch-cudnn'); t=v.get('auto')
        if t: print(d,k,'auto %.4f ms %.1f TF'%t + (' x_fa2 %.3f'%(fl[0]/t[0]) if fl else '') + (' x_cudnn %.3f'%(c[0]/t[0]) if c else ''))
PY
el
cd /tmp && tar czf $OUT/results.tgz res
