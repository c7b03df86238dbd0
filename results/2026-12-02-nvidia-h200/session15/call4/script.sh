#!/usr/bin/env bash
# Session 15 call 4 (b26 kernels as call 3; the bench's training forward now on the library's own
# tiles under a backward tile override): d = 64's default block and the two-warpgroup block
# (--tiles auto,64x128) alternated in one process, bf16 and f16 backward from residuals; the
# head-dims backward sweep (bf16, N = 4096) with FA2/cuDNN.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 400 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
run warm 150 ./bin/flashattn-bench run --seqlens 1024 --batch 1 --heads 1 --head-dims 64 --methods auto --pass bwd --check none --complete-path none --no-report
H="run --preset headline --head-dims 64 --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd --bwd-from residuals --tiles auto,64x128 --no-report"
run ab-bf16 60 ./bin/flashattn-bench $H --dtype bf16
run ab-f16 60 ./bin/flashattn-bench $H --dtype f16
run hd-bwd 120 ./bin/flashattn-bench run --preset head-dims --dtype bf16 --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd --bwd-from residuals --peers --peers-script ./bin/peers-fast.py
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
                out.setdefault(r['key'],{})[m]=(t['median_ms'], r.get('tflops') or 0, r.get('kernel')) if t else (None, 0, r.get('status'))
    return out
for d in ['ab-bf16','ab-f16']:
    for k,v in rows(d).items():
        a=v.get('auto'); b=v.get('auto@64x128')
        print(d, k, 'auto %.4f'%a[0] if a and a[0] else a, '64x128 %.4f'%b[0] if b and b[0] else b, 'ratio %.3f'%(b[0]/a[0]) if a and b and a[0] and b[0] else '', b[2] if b else '')
for k,v in rows('hd-bwd').items():
    a=v.get('auto'); fl=v.get('torch-flash'); c=v.get('torch-cudnn')
    print('hd', k, 'ours %.4f ms %.1f TF'%a[:2] if a and a[0] else a, 'x_fa2 %.3f'%(fl[0]/a[0]) if a and a[0] and fl and fl[0] else '', 'x_cudnn %.3f'%(c[0]/a[0]) if a and a[0] and c and c[0] else '')
PY
el
cd /tmp && tar czf $OUT/results.tgz res
