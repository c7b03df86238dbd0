#!/usr/bin/env bash
# Session 31 call 2: the window-only instance in the row layout (window kind 3: the window
# instance's walk and masks, no modifier code), variant A (ba11037: staged dQ adds, as the plain
# instance) and variant B (6ab9775: the lanes' red adds, as the window instance), against main
# (bench-old: 4480c11). N = 16384, B = 1, H = 16, d = 128, bf16, causal, backward from residuals.
# (1) backward:: GPU tests of A beside memcheck of backward::shapes_bf16 (A);
# (2) ncu main-kernel durations and instructions at window 1024, three builds;
# (3) A/B/C alternated twice: windows 256/1024/4096, window 16384 (the window instances on the
#     full causal walk: their per-step cost against the plain instance's) and plain causal
#     (control: the same PTX in all three);
# (4) FlexAttention beside A on the windows and plain causal.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 560 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/ab.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; ls bin tests; cat COMMIT
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt; cat $R/gpu.txt
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64,128,256 --mask causal --methods auto --pass bwd --bwd-from residuals --check none --complete-path none --no-report --window 256"
( run warm-a 150 ./bin/bench-a $W ) & ( run warm-b 150 ./bin/bench-b $W ) & ( run warm-old 150 ./bin/bench-old $W ) & wait; el
( ( time timeout 110 ./tests/gpu-a --test-threads 4 backward:: ) > $R/tests-backward.log 2>&1; echo "backward tests rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu-a --test-threads 1 backward::shapes_bf16 > $R/san-memcheck-shapes_bf16.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule" $R/tests-*.log | head -20
grep -hE 'ERROR SUMMARY|test result' $R/san-*.log
grep -hA16 "^---- " $R/tests-*.log | head -40
bin_of() { case $1 in old) echo ./bin/bench-old;; a) echo ./bin/bench-a;; b) echo ./bin/bench-b;; esac; }
for b in old a b; do
  l=$(left); [ $l -gt 25 ] || { echo "skip ncu $b"; continue; }
  timeout 40 ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum --csv -k regex:flash_bwd \
    $(bin_of $b) run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --window 1024 --dtype bf16 --methods auto --pass bwd --bwd-from residuals \
    --check none --complete-path none --reps 2 --warmup-ms 1 --no-report --out /tmp/x > $R/ncu-$b-w1024.csv 2> $R/ncu-$b-w1024.err
  el
done
M="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --no-report --mask causal --dtype bf16"
for i in 1 2; do
  for b in old a b; do
    run ab-$b-$i-win 40 $(bin_of $b) $M --window 256,1024,4096,16384
    run ab-$b-$i-plain 20 $(bin_of $b) $M
  done
done
F="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --peers --peers-script ./bin/peers-flex.py"
run flex-window 100 ./bin/bench-a $F --window 256,1024,4096
run flex-plain 60 ./bin/bench-a $F
python3 - <<'PY'
import json,os,csv,statistics as st
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
for kind in ['win','plain']:
    o=[rows('ab-old-%d-%s'%(i,kind)) for i in (1,2)]
    for v in ('a','b'):
        n=[rows('ab-%s-%d-%s'%(v,i,kind)) for i in (1,2)]
        for k in o[0]:
            try:
                a=min(x[k]['auto'][0] for x in o); b=min(x[k]['auto'][0] for x in n)
                print('AB %s %s %s old %.4f new %.4f change %+.1f%% (runs old %s new %s)'%(v,kind,k,a,b,100*(b/a-1),[round(x[k]['auto'][0],4) for x in o],[round(x[k]['auto'][0],4) for x in n]))
            except (KeyError,ValueError): pass
for b in ('old','a','b'):
    f=R+'/ncu-%s-w1024.csv'%b
    d={}; ins={}
    try:
        for r in csv.reader(open(f)):
            if len(r)>5 and r[-3] in ('gpu__time_duration.sum','smsp__inst_executed.sum'):
                name=[c for c in r if c.startswith('flash_bwd')]; name=name[0] if name else r[4]
                x=float(r[-1].replace(',',''))
                if r[-3]=='gpu__time_duration.sum':
                    u=r[-2]; v=x/1000 if u in ('us','usecond') else x/1e6 if u in ('ns','nsecond') else x
                    d.setdefault(name,[]).append(v)
                else: ins.setdefault(name,set()).add(x)
    except Exception as e: print('parse',f,e)
    for k,v in d.items(): print('NCU',b,k,'median %.4f ms n=%d'%(st.median(v),len(v)), [round(x,4) for x in v], 'inst',sorted(ins.get(k,[])))
for d in ('flex-window','flex-plain'):
    for k,v in rows(d).items():
        fx=v.get('torch-flex'); t=v.get('auto')
        if t: print(d,k,'auto %.4f ms %.1f TF'%t + (' flex %.4f ms %.1f TF x_flex %.3f'%(fx[0],fx[1],fx[0]/t[0]) if fx else ''))
PY
el
cd /tmp && tar czf $OUT/results.tgz res
