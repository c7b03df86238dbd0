#!/usr/bin/env bash
# Session 31 call 1 (the session-30 call 3 script, run at last): v2 of the window-only backward instance (window kind 3, d = 128, sm_90a: protoC's
# transposed step decided at compile time, so that ptxas no longer serialises the dQ adds behind
# the register-A dV/dK group) against the baseline (bench-old: main 4480c11, whose kernels are cb2e550's).
# (1) backward:: GPU tests beside memcheck of backward::shapes_bf16 (v2 changes no memory access against v1, racecheck-clean in session 30);
# (2) ncu kernel durations at N = 16384, B = 1, H = 16, d = 128, causal, window 1024, bf16, both builds;
# (3) A/B alternated twice (windows 256/1024/4096 bf16, 1024 f16; softcap 30 as control: same PTX);
# (4) the window rows with FlexAttention in the same run (new build), after the A/B.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 560 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; [tarfile.open('.gpu/%s.txz'%n).extractall('/tmp/b') for n in ('new','old')]"
cd /tmp/b/bundle; ls bin tests
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt; cat $R/gpu.txt
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64,128,256 --mask causal --methods auto --pass bwd --bwd-from residuals --check none --complete-path none --no-report --window 256"
( run warm-new 150 ./bin/flashattn-bench $W ) & ( run warm-old 150 ./bin/bench-old $W ) & wait; el
( ( time timeout 110 ./tests/gpu --test-threads 4 backward:: ) > $R/tests-backward.log 2>&1; echo "backward tests rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::shapes_bf16 > $R/san-memcheck-shapes_bf16.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
for f in $R/tests-*.log; do echo "== $f"; grep -hE "^test .*FAILED|test result|worst rule|backward shapes|backward random" $f | head -20; done
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-*.log | head -40
for b in old new; do
  bin=./bin/flashattn-bench; [ $b = old ] && bin=./bin/bench-old
  l=$(left); [ $l -gt 25 ] || { echo "skip ncu $b"; continue; }
  timeout 40 ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum --csv -k regex:flash_bwd \
    $bin run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --window 1024 --dtype bf16 --methods auto --pass bwd --bwd-from residuals \
    --check none --complete-path none --reps 2 --warmup-ms 1 --no-report --out /tmp/x > $R/ncu-$b-w1024.csv 2> $R/ncu-$b-w1024.err
  el
done
F="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --peers --peers-script ./bin/peers-flex.py"
M="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --no-report --mask causal"
for i in 1 2; do
  for b in old new; do
    bin=./bin/flashattn-bench; [ $b = old ] && bin=./bin/bench-old
    run ab-$b-$i-win 30 $bin $M --dtype bf16 --window 256,1024,4096
    run ab-$b-$i-winf 15 $bin $M --dtype f16 --window 1024
    # run ab-$b-$i-soft 20 $bin $M --dtype bf16 --softcap 30
  done
done
run mods-window 100 ./bin/flashattn-bench $F --window 256,1024,4096
python3 - <<'PY'
import json,os,csv,glob,statistics as st
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
                if t: out.setdefault(k,{})[r['method']]=(t['median_ms'], r.get('tflops') or 0)
    return out
for kind in ['win','winf','soft']:
    o=[rows('ab-old-%d-%s'%(i,kind)) for i in (1,2)]
    n=[rows('ab-new-%d-%s'%(i,kind)) for i in (1,2)]
    for k in o[0]:
        try:
            a=min(x[k]['auto'][0] for x in o); b=min(x[k]['auto'][0] for x in n)
            print('AB %s %s old %.4f new %.4f change %+.1f%% (runs old %s new %s)'%(kind,k,a,b,100*(b/a-1),[round(x[k]['auto'][0],4) for x in o],[round(x[k]['auto'][0],4) for x in n]))
        except (KeyError,ValueError): pass
for b in ('old','new'):
    f=R+'/ncu-%s-w1024.csv'%b
    d={}
    try:
        for r in csv.reader(open(f)):
            if len(r)>5 and r[-3]=='gpu__time_duration.sum':
                x=float(r[-1].replace(',','')); u=r[-2]
                v=x/1000 if u in ('us','usecond') else x/1e6 if u in ('ns','nsecond') else x
                name=[c for c in r if c.startswith('flash_bwd')]
                d.setdefault(name[0] if name else r[4],[]).append(v)
    except Exception as e: print('parse',f,e)
    for r in csv.reader(open(f)):
        if len(r)>5 and r[-3]=='smsp__inst_executed.sum' and 'd128_w8_b1_win' in ','.join(r): print('INST',b,r[4] if len(r)>4 else '',r[-1])
    for k,v in d.items(): print('NCU',b,k,'median %.4f ms n=%d'%(st.median(v),len(v)), [round(x,4) for x in v])
for k,v in rows('mods-window').items():
    fx=v.get('torch-flex'); t=v.get('auto')
    if t: print('mods-window',k,'auto %.4f ms %.1f TF'%t + (' flex %.4f ms %.1f TF x_flex %.3f'%(fx[0],fx[1],fx[0]/t[0]) if fx else ''))
PY
el
cd /tmp && tar czf $OUT/results.tgz res
