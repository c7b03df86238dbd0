#!/usr/bin/env bash
# Session 16 call 2 (b28: training instances at d = 192/256, the d = 256 backward from residuals):
# JIT warm-up, the whole GPU suite beside memcheck on backward::shapes_bf16 and
# racecheck/synccheck on backward::deterministic_bit_identical (small sets); the head-dims
# backward sweep, the d = 256 headline backward from residuals and from the log-sum-exp (A/B in
# one process order), FA2 and cuDNN in the same run; the d = 256 training step and the inference
# forward.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 575 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py .gpu/peers-flex.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
run warm 150 ./bin/flashattn-bench run --seqlens 1024 --batch 1 --heads 2 --head-dims 256 --methods auto --pass bwd --check none --complete-path none --no-report
( ( time timeout 220 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 215 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::shapes_bf16 > $R/san-memcheck-backwardshapes_bf16.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 215 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::deterministic_bit_identical > $R/san-racecheck-backwarddeterministic.log 2>&1; echo "racecheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 215 compute-sanitizer --tool synccheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::deterministic_bit_identical > $R/san-synccheck-backwarddeterministic.log 2>&1; echo "synccheck rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule|backward shapes|backward random" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -60
run hd-bwd 130 ./bin/flashattn-bench run --preset head-dims --dtype bf16 --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd --bwd-from residuals --peers --peers-script ./bin/peers-fast.py
H="run --preset headline --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd --bwd-from residuals --peers --peers-script ./bin/peers-fast.py"
run bwd-d256 90 ./bin/flashattn-bench $H --dtype bf16 --head-dims 256
run bwd-d256-lse 60 ./bin/flashattn-bench ${H/--bwd-from residuals/--bwd-from lse} --dtype bf16 --head-dims 256
run bwd-d256-f16 90 ./bin/flashattn-bench $H --dtype f16 --head-dims 256
T="run --preset headline --methods auto --check none --complete-path none --head-dims 256 --dtype bf16 --no-report"
run train-d256 60 ./bin/flashattn-bench $T --pass fwd+bwd --bwd-from residuals
run fwd-d256 60 ./bin/flashattn-bench $T --pass fwd
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
for d in ['hd-bwd','bwd-d256','bwd-d256-lse','bwd-d256-f16','train-d256','fwd-d256']:
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
