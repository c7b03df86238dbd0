#!/usr/bin/env bash
# Session 25 call 1: b40 (the backward's main kernel on a key-major grid, in groups of pairs, with
# a causal mask or a window; 423e5f7 = `bench-b40`), b41 (sm_90a: the backward's three launches
# chained as programmatic dependents) and v41 (the Hopper forward's causal tiles in groups of
# pairs, longest first), both in c35db75 = the bundle's `flashattn-bench` and tests, against the
# session's start (a5db9b9 = `bench-old`) on the H200. The whole GPU suite beside memcheck
# (backward::shapes_bf16, small), racecheck (backward::deterministic_bit_identical, small: its
# turns run on the key-major grid) and memcheck (hopper::persistent_bf16, small: the dynamic
# walk's new order); A/B over the builds alternated twice: the backward headline from residuals
# (bf16 and f16, d = 64/128/256, causal and not: the non-causal rows are b40's control), N =
# 16384, B = 1, H = 16, d = 128 windows 256 / 1024 / 4096 and ALiBi (causal); the forward
# headline (old against new; non-causal rows the control).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 575 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; [tarfile.open('.gpu/%s.txz'%n).extractall('/tmp/b') for n in ('new','b40','old')]"
cp .gpu/peers-fast.py .gpu/peers-flex.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT; ls bin
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64,128,256 --mask none,causal --methods auto --pass fwd,bwd --bwd-from residuals --check none --complete-path none --no-report"
( run warm-new 150 ./bin/flashattn-bench $W ) & ( run warm-b40 150 ./bin/bench-b40 $W ) & ( run warm-old 150 ./bin/bench-old $W ) & wait; el
( ( time timeout 210 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::shapes_bf16 > $R/san-memcheck-backwardshapes_bf16.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 200 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::deterministic_bit_identical > $R/san-racecheck-backwarddeterministic.log 2>&1; echo "racecheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::persistent_bf16 > $R/san-memcheck-hopperpersistent.log 2>&1; echo "memcheck2 rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule|backward shapes|backward random" $R/tests-all.log | head -40
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -60
H="run --preset headline --head-dims 64,128,256 --dtype bf16,f16 --methods auto --check none --complete-path none --pass bwd --bwd-from residuals --no-report"
FH="run --preset headline --head-dims 64,128,256 --dtype bf16,f16 --methods auto --check none --complete-path none --pass fwd --no-report"
M="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --no-report --mask causal --dtype bf16"
for i in 1 2; do
  for b in old b40 new; do
    bin=./bin/flashattn-bench; [ $b = old ] && bin=./bin/bench-old; [ $b = b40 ] && bin=./bin/bench-b40
    run ab-$b-$i-head 40 $bin $H
    run ab-$b-$i-win 30 $bin $M --window 256,1024,4096
    run ab-$b-$i-alibi 20 $bin $M --alibi
    [ $b = b40 ] || run ab-$b-$i-fwd 40 $bin $FH
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
                t=r.get('timing'); k=r['key']+('' if not r.get('tiles') else ' tiles=%s'%r.get('tiles'))
                if t: out.setdefault(k,{})[r['method']]=(t['median_ms'], r.get('tflops') or 0)
                else: print('no timing', d, k, r['method'], r.get('status'))
    return out
for kind in ['head','win','alibi','fwd']:
    o=[rows('ab-old-%d-%s'%(i,kind)) for i in (1,2)]
    for nb in ['b40','new']:
        n=[rows('ab-%s-%d-%s'%(nb,i,kind)) for i in (1,2)]
        if not n[0]: continue
        for k in o[0]:
            try:
                a=min(x[k]['auto'][0] for x in o); b=min(x[k]['auto'][0] for x in n)
                print('AB %s %-5s %s old %.4f %s %.4f change %+.1f%% (runs old %s %s %s)'%(kind,nb,k,a,nb,b,100*(b/a-1),[round(x[k]['auto'][0],4) for x in o],nb,[round(x[k]['auto'][0],4) for x in n]))
            except KeyError: print('AB missing',kind,nb,k)
for d in ['mods-alibi','mods-window','mods-softcap']:
    for k,v in rows(d).items():
        fx=v.get('torch-flex'); t=v.get('auto')
        if t: print(d,k,'auto %.4f ms %.1f TF'%t + (' flex %.4f ms %.1f TF x_flex %.3f'%(fx[0],fx[1],fx[0]/t[0]) if fx else ''))
PY
el
cd /tmp && tar czf $OUT/results.tgz res
