#!/usr/bin/env bash
# Session 17 call 2: b32 (non-causal key blocks start their query walk at their own tile;
# b31's TMA copies for d = 256 only). The whole GPU suite beside memcheck on
# backward::shapes_bf16 and racecheck/synccheck on backward::deterministic_bit_identical (small
# sets); then A/B in one process order, builds alternated twice: the session's start (b29's
# kernels, `bench-old`) against b32, bf16 headline backward from residuals at d = 64, 128, 256;
# then b32's bf16 and f16 headline backward with FA2 and cuDNN in the same run.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 575 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b'); tarfile.open('.gpu/old.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py .gpu/peers-flex.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT; ls bin
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64 --methods auto --pass bwd --check none --complete-path none --no-report"
( run warm-new 150 ./bin/flashattn-bench $W ) & ( run warm-old 150 ./bin/bench-old $W ) & wait; el
( ( time timeout 200 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::shapes_bf16 > $R/san-memcheck-backwardshapes_bf16.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::deterministic_bit_identical > $R/san-racecheck-backwarddeterministic.log 2>&1; echo "racecheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool synccheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::deterministic_bit_identical > $R/san-synccheck-backwarddeterministic.log 2>&1; echo "synccheck rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule|backward shapes|backward random" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -60
A="run --preset headline --dtype bf16 --head-dims 64,128,256 --methods auto --check none --complete-path none --pass bwd --bwd-from residuals --no-report"
run ab-old-1 60 ./bin/bench-old $A
run ab-new-1 60 ./bin/flashattn-bench $A
run ab-old-2 60 ./bin/bench-old $A
run ab-new-2 60 ./bin/flashattn-bench $A
H="run --preset headline --head-dims 64,128,256 --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd --bwd-from residuals --peers --peers-script ./bin/peers-fast.py"
run bwd-bf16 110 ./bin/flashattn-bench $H --dtype bf16
run bwd-f16 110 ./bin/flashattn-bench $H --dtype f16
python3 - <<'PY'
import json,os
R='/tmp/res'
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
for d in ['bwd-bf16','bwd-f16']:
    for k,v in peers(d).items():
        fl=v.get('torch-flash'); c=v.get('torch-cudnn'); t=v.get('auto')
        if t: print(d,k,'auto %.4f ms %.1f TF'%t + (' x_fa2 %.3f'%(fl[0]/t[0]) if fl else '') + (' x_cudnn %.3f'%(c[0]/t[0]) if c else ''))
PY
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
o=[rows('ab-old-1'),rows('ab-old-2')]; n=[rows('ab-new-1'),rows('ab-new-2')]
for k in o[0]:
    a=min(x[k] for x in o if k in x); b=min(x[k] for x in n if k in x) if all(k in x for x in n) else None
    if b: print('AB %s old %.4f new %.4f change %+.1f%%'%(k,a,b,100*(b/a-1)))
PY
el
cd /tmp && tar czf $OUT/results.tgz res
