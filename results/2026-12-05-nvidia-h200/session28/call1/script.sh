#!/usr/bin/env bash
# Session 28 call 1: protoC (session 27's FA3-form step for the d = 128 window instance without a
# score modifier: transposed scores, P^T register-A for dV, dS^T stored once for dK and dQ) on the
# GPU for the first time. new = 6d65ce0 + protoC.py; bench-old = 6d65ce0 (1ec4810's PTX);
# bench-d2 / tests/gpu-d2 = protoC + protoD2 (the step's 64 queries in two 32-query wgmma groups:
# the second half's S^T/dP^T under the first half's probabilities, dV register-A per half; 68 B
# spilled).
# (1) backward:: GPU tests on protoC beside memcheck (backward::shapes_bf16, small);
# (2) ncu kernel durations at N = 16384, B = 1, H = 16, d = 128, causal, window 1024, bf16, both;
# (3) A/B alternated twice (windows 256/1024/4096 bf16, 1024 f16, softcap 30 as control);
# (4) the window rows with FlexAttention in the same run (new build).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 560 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; [tarfile.open('.gpu/%s.txz'%n).extractall('/tmp/b') for n in ('new','old','d2')]"
cp .gpu/peers-flex.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT; ls bin
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64,128,256 --mask causal --methods auto --pass bwd --bwd-from residuals --check none --complete-path none --no-report --window 256"
( run warm-new 150 ./bin/flashattn-bench $W ) & ( run warm-old 150 ./bin/bench-old $W ) & ( run warm-d2 150 ./bin/bench-d2 $W ) & wait; el
( ( time timeout 220 ./tests/gpu --test-threads 4 backward:: ) > $R/tests-backward.log 2>&1; echo "backward tests rc $?" >> $R/rc.txt ) &
( ( time timeout 220 ./tests/gpu-d2 --test-threads 4 backward:: ) > $R/tests-backward-d2.log 2>&1; echo "backward tests d2 rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 220 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu-d2 --test-threads 1 backward::shapes_bf16 > $R/san-memcheck-d2-backwardshapes_bf16.log 2>&1; echo "memcheck d2 rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
for f in $R/tests-*.log; do echo "== $f"; grep -hE "^test .*FAILED|test result|worst rule|backward shapes|backward random" $f | head -20; done
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-*.log | head -60
for b in old new d2; do
  bin=./bin/flashattn-bench; [ $b = old ] && bin=./bin/bench-old; [ $b = d2 ] && bin=./bin/bench-d2
  l=$(left); [ $l -gt 25 ] || { echo "skip ncu $b"; continue; }
  timeout 30 ncu --metrics gpu__time_duration.sum --csv -k regex:flash_bwd \
    $bin run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --window 1024 --dtype bf16 --methods auto --pass bwd --bwd-from residuals \
    --check none --complete-path none --reps 2 --warmup-ms 1 --no-report --out /tmp/x > $R/ncu-$b-w1024.csv 2> $R/ncu-$b-w1024.err
  el
done
F="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --peers --peers-script ./bin/peers-flex.py"
run mods-window 90 ./bin/flashattn-bench $F --window 256,1024,4096
run mods-window-d2 90 ./bin/bench-d2 $F --window 256,1024,4096
M="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --no-report --mask causal"
for i in 1 2; do
  for b in old new d2; do
    bin=./bin/flashattn-bench; [ $b = old ] && bin=./bin/bench-old; [ $b = d2 ] && bin=./bin/bench-d2
    run ab-$b-$i-win 30 $bin $M --dtype bf16 --window 256,1024,4096
    run ab-$b-$i-winf 15 $bin $M --dtype f16 --window 1024
    run ab-$b-$i-soft 20 $bin $M --dtype bf16 --softcap 30
  done
done
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
    for nb in ('new','d2'):
      n=[rows('ab-%s-%d-%s'%(nb,i,kind)) for i in (1,2)]
      for k in o[0]:
        try:
            a=min(x[k]['auto'][0] for x in o); b=min(x[k]['auto'][0] for x in n)
            print('AB %s %s %s old %.4f new %.4f change %+.1f%% (runs old %s new %s)'%(nb,kind,k,a,b,100*(b/a-1),[round(x[k]['auto'][0],4) for x in o],[round(x[k]['auto'][0],4) for x in n]))
        except (KeyError,ValueError): pass
for b in ('old','new','d2'):
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
    for k,v in d.items(): print('NCU',b,k,'median %.4f ms n=%d'%(st.median(v),len(v)), [round(x,4) for x in v])
for dd in ('mods-window','mods-window-d2'):
  for k,v in rows(dd).items():
    fx=v.get('torch-flex'); t=v.get('auto')
    if t: print(dd,k,'auto %.4f ms %.1f TF'%t + (' flex %.4f ms %.1f TF x_flex %.3f'%(fx[0],fx[1],fx[0]/t[0]) if fx else ''))
PY
el
cd /tmp && tar czf $OUT/results.tgz res
