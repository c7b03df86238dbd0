#!/usr/bin/env bash
# Session 32 call 2 (same machine as call 1, JIT cache warm): (1) ncu kernel durations at
# w1024 for old/new/nork; (2) the backward headline rows (bf16, d = 64/128, N = 1024/4096/16384,
# B·N = 16384, H·d = 2048, causal and not) old against new, alternated twice; (3) FlexAttention
# beside new on the windows and plain causal (N = 16384, H = 16, d = 128).
set -uo pipefail
R=/tmp/res2; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 570 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
[ -d /tmp/b/bundle ] || python3 -c "import tarfile; tarfile.open('.gpu/b.txz').extractall('/tmp/b')"
cd /tmp/b/bundle
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt; cat $R/gpu.txt
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
bin_of() { echo ./bin/bench-$1; }
for b in old new nork; do
  timeout 45 ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum --csv -k regex:flash_bwd \
    $(bin_of $b) run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --window 1024 --dtype bf16 --methods auto --pass bwd --bwd-from residuals \
    --check none --complete-path none --reps 2 --warmup-ms 1 --no-report --out /tmp/x > $R/ncu-$b-w1024.csv 2> $R/ncu-$b-w1024.err
  el
done
H="run --seqlens 1024,4096,16384 --head-dims 64,128 --tokens 16384 --hidden 2048 --mask none,causal --dtype bf16 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --no-report"
M="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --no-report --mask causal"
for i in 1 2; do
  for b in old new; do
    run hl-$b-$i 60 $(bin_of $b) $H
    run winf-$b-$i 20 $(bin_of $b) $M --window 1024 --dtype f16
  done
done
F="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --peers --peers-script ./bin/peers-flex.py"
run flex-window 120 ./bin/bench-new $F --window 256,1024,4096
run flex-plain 90 ./bin/bench-new $F
python3 - <<'PY'
import json,os,csv,statistics as st
R='/tmp/res2'
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
for kind in ['hl','winf']:
    o=[rows('%s-old-%d'%(kind,i)) for i in (1,2)]
    n=[rows('%s-new-%d'%(kind,i)) for i in (1,2)]
    for k in o[0]:
        try:
            a=min(x[k]['auto'][0] for x in o); b=min(x[k]['auto'][0] for x in n)
            print('AB %s %s old %.4f new %.4f change %+.1f%% (runs old %s new %s)'%(kind,k,a,b,100*(b/a-1),[round(x[k]['auto'][0],4) for x in o],[round(x[k]['auto'][0],4) for x in n]))
        except (KeyError,ValueError): pass
for b in ('old','new','nork'):
    f=R+'/ncu-%s-w1024.csv'%b
    d={}; ins={}
    try:
        for r in csv.reader(open(f)):
            if len(r)>5 and r[-3] in ('gpu__time_duration.sum','smsp__inst_executed.sum'):
                name=[c for c in r if c.startswith('flash_bwd')]; name=name[0] if name else r[4]
                grid=r[8] if len(r)>8 else ''
                x=float(r[-1].replace(',',''))
                key=name+' '+grid
                if r[-3]=='gpu__time_duration.sum':
                    u=r[-2]; v=x/1000 if u in ('us','usecond') else x/1e6 if u in ('ns','nsecond') else x
                    d.setdefault(key,[]).append(v)
                else: ins.setdefault(key,set()).add(x)
    except Exception as e: print('parse',f,e)
    for k,v in d.items(): print('NCU',b,k,'median %.4f ms n=%d'%(st.median(v),len(v)), [round(x,4) for x in v], 'inst',sorted(ins.get(k,[])))
for d in ('flex-window','flex-plain'):
    for k,v in rows(d).items():
        fx=v.get('torch-flex'); t=v.get('auto')
        if t: print(d,k,'auto %.4f ms %.1f TF'%t + (' flex %.4f ms %.1f TF x_flex %.3f'%(fx[0],fx[1],fx[0]/t[0]) if fx else ''))
PY
el
cd /tmp && tar czf $OUT/results2.tgz res2
