#!/usr/bin/env bash
# Session 25 call 3: 65a8baf (the bundle's `flashattn-bench` and tests: b40 key-major only for
# the plain and ALiBi instances above 16 pairs, the window instances head-major with their old
# index reads; b41; v41 only for one-tile causal grids) against the session's start (a5db9b9 =
# `bench-old`). The backward and Hopper GPU tests (call 2 named both filters at once and ran
# none) beside memcheck (backward::shapes_f16, small); A/B alternated twice: the backward's
# causal headline from residuals (bf16 and f16, d = 64/128/256), N = 16384 windows and ALiBi;
# the d = 256 causal forward as Nsight Compute kernel durations at locked clocks; then the
# masked backward rows of issue 13 with FlexAttention in the same run.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 575 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; [tarfile.open('.gpu/%s.txz'%n).extractall('/tmp/b') for n in ('new','old')]"
cp .gpu/peers-fast.py .gpu/peers-flex.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT; ls bin
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64,128,256 --mask none,causal --methods auto --pass fwd,bwd --bwd-from residuals --check none --complete-path none --no-report"
( run warm-new 150 ./bin/flashattn-bench $W ) & ( run warm-old 150 ./bin/bench-old $W ) & wait; el
( ( time timeout 170 ./tests/gpu --test-threads 4 backward:: ) > $R/tests-backward.log 2>&1; echo "backward tests rc $?" >> $R/rc.txt ) &
( ( time timeout 170 ./tests/gpu --test-threads 4 hopper:: ) > $R/tests-hopper.log 2>&1; echo "hopper tests rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 170 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::shapes_f16 > $R/san-memcheck-backwardshapes_f16.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule|backward shapes|backward random" $R/tests-*.log | head -40
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-*.log | head -60
H="run --preset headline --mask causal --head-dims 64,128,256 --dtype bf16,f16 --methods auto --check none --complete-path none --pass bwd --bwd-from residuals --no-report"
M="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --no-report --mask causal --dtype bf16"
for i in 1 2; do
  for b in old new; do
    bin=./bin/flashattn-bench; [ $b = old ] && bin=./bin/bench-old
    run ab-$b-$i-head 40 $bin $H
    run ab-$b-$i-win 30 $bin $M --window 256,1024,4096
    run ab-$b-$i-alibi 20 $bin $M --alibi
  done
done
for b in old new; do
  bin=./bin/flashattn-bench; [ $b = old ] && bin=./bin/bench-old
  for n in 1024 2048 4096 8192; do
    l=$(left); [ $l -gt 20 ] || { echo "skip ncu $b $n"; continue; }
    timeout 25 ncu --metrics gpu__time_duration.sum --csv -k regex:flash_fwd \
      $bin run --seqlens $n --batch $((16384 / n)) --heads 8 --head-dims 256 --mask causal --dtype bf16 --methods auto --pass fwd \
      --check none --complete-path none --reps 2 --warmup-ms 1 --no-report --out /tmp/x > $R/ncu-$b-d256-causal-n$n.csv 2> $R/ncu-$b-d256-causal-n$n.err
  done
  el
done
F="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --peers --peers-script ./bin/peers-flex.py"
run mods-window 70 ./bin/flashattn-bench $F --window 256,1024,4096
run mods-alibi 40 ./bin/flashattn-bench $F --alibi
run mods-softcap 40 ./bin/flashattn-bench $F --softcap 30
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
                t=r.get('timing'); k=r['key']+('' if not r.get('tiles') else ' tiles=%s'%r.get('tiles'))
                if t: out.setdefault(k,{})[r['method']]=(t['median_ms'], r.get('tflops') or 0)
    return out
for kind in ['head','win','alibi']:
    o=[rows('ab-old-%d-%s'%(i,kind)) for i in (1,2)]
    n=[rows('ab-new-%d-%s'%(i,kind)) for i in (1,2)]
    for k in o[0]:
        try:
            a=min(x[k]['auto'][0] for x in o); b=min(x[k]['auto'][0] for x in n)
            print('AB %s %s old %.4f new %.4f change %+.1f%% (runs old %s new %s)'%(kind,k,a,b,100*(b/a-1),[round(x[k]['auto'][0],4) for x in o],[round(x[k]['auto'][0],4) for x in n]))
        except KeyError: pass
def durs(f):
    v=[]
    try:
        for r in csv.reader(open(f)):
            if len(r)>5 and r[-3]=='gpu__time_duration.sum':
                x=float(r[-1].replace(',','')); u=r[-2]
                v.append(x/1000 if u in ('us','usecond') else x/1e6 if u in ('ns','nsecond') else x)
    except Exception as e: print('parse',f,e)
    return v
for f in sorted(glob.glob(R+'/ncu-old-*.csv')):
    g=f.replace('ncu-old-','ncu-new-')
    a,b=durs(f),durs(g)
    if a and b:
        print('NCU %s old %.4f ms (n=%d) new %.4f ms (n=%d) change %+.1f%%'%(os.path.basename(f)[8:-4],st.median(a),len(a),st.median(b),len(b),100*(st.median(b)/st.median(a)-1)))
    else: print('NCU missing',f,len(a),len(b))
for d in ['mods-alibi','mods-window','mods-softcap']:
    for k,v in rows(d).items():
        fx=v.get('torch-flex'); t=v.get('auto')
        if t: print(d,k,'auto %.4f ms %.1f TF'%t + (' flex %.4f ms %.1f TF x_flex %.3f'%(fx[0],fx[1],fx[0]/t[0]) if fx else ''))
PY
el
cd /tmp && tar czf $OUT/results.tgz res
