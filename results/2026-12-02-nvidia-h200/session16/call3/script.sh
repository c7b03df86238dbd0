#!/usr/bin/env bash
# Session 16 call 3: b30 (d = 64's deferred dQ adds) and b29 (the d = 256 column groups' split
# softmax). The whole GPU suite on b30's build beside memcheck on backward::shapes_bf16 and
# racecheck/synccheck on backward::deterministic_bit_identical (small sets); then A/B in one
# process order, builds alternated twice: b29 against b30 on the bf16 headline backward (d = 64
# and 128), b28 against b29 at d = 256; then b30's bf16 and f16 headline backward (d = 64, 128,
# 256) with FA2 and cuDNN in the same run.
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
( run warm30 150 ./bin/flashattn-bench $W ) & ( run warm29 150 ./bin/bench-b29 $W ) & ( run warm28 150 ./bin/bench-b28 $W ) & wait; el
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
D="run --preset headline --dtype bf16 --head-dims 256 --methods auto --check none --complete-path none --pass bwd --bwd-from residuals --no-report"
run ab-b29-1 40 ./bin/bench-b29 $A
run ab-b30-1 40 ./bin/flashattn-bench $A
run ab-b29-2 40 ./bin/bench-b29 $A
run ab-b30-2 40 ./bin/flashattn-bench $A
run d256-b28-1 30 ./bin/bench-b28 $D
run d256-b29-1 30 ./bin/bench-b29 $D
run d256-b28-2 30 ./bin/bench-b28 $D
run d256-b29-2 30 ./bin/bench-b29 $D
H="run --preset headline --head-dims 64,128,256 --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd --bwd-from residuals --peers --peers-script ./bin/peers-fast.py"
run bwd-bf16 110 ./bin/flashattn-bench $H --dtype bf16
run bwd-f16 110 ./bin/flashattn-bench $H --dtype f16
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
                m=r['method']+('@'+r['tiles'] if r.get('tiles') else '')
                t=r.get('timing')
                if t: out.setdefault(r['key'],{})[m]=(t['median_ms'], r.get('tflops') or 0)
                else: print('no timing', d, r['key'], m, r.get('status'))
    return out
def ab(a1,b1,a2,b2,la,lb):
    r=[rows(x) for x in (a1,b1,a2,b2)]
    for k in r[0]:
        try:
            ta=min(r[0][k]['auto'][0], r[2][k]['auto'][0]); tb=min(r[1][k]['auto'][0], r[3][k]['auto'][0])
            print('AB', k, '%s %.4f %s %.4f change %+.1f%%'%(la,ta,lb,tb,100*(tb/ta-1)))
        except KeyError as e: print('AB', k, 'missing', e)
ab('ab-b29-1','ab-b30-1','ab-b29-2','ab-b30-2','b29','b30')
ab('d256-b28-1','d256-b29-1','d256-b28-2','d256-b29-2','b28','b29')
for d in ['bwd-bf16','bwd-f16']:
    for k,v in rows(d).items():
        fl=v.get('torch-flash'); c=v.get('torch-cudnn')
        parts=[]
        for m,t in v.items():
            if m.startswith('torch'): continue
            parts.append('%s %.4f ms %.1f TF'%(m,t[0],t[1]) + (' x_fa2 %.3f'%(fl[0]/t[0]) if fl else '') + (' x_cudnn %.3f'%(c[0]/t[0]) if c else ''))
        print(d, k, ' | '.join(parts))
PY
el
cd /tmp && tar czf $OUT/results.tgz res
