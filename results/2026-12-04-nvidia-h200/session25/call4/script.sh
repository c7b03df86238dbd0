#!/usr/bin/env bash
# Session 25 call 4: the final build (the bundle's `flashattn-bench`: b40 in its final form and
# b41; the forward as at the session's start) — the backward headline from residuals with
# PyTorch's FlashAttention-2 and cuDNN in the same run, bf16 and f16, d = 64/128/256, causal and
# not (for the README's backward table).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 370 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py .gpu/peers-flex.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
run warm 120 ./bin/flashattn-bench run --seqlens 1024 --batch 1 --heads 2 --head-dims 64 --mask causal --methods auto --pass bwd --bwd-from residuals --check none --complete-path none --no-report
H="run --preset headline --head-dims 64,128,256 --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd --bwd-from residuals --peers --peers-script ./bin/peers-fast.py"
run bwd-bf16 120 ./bin/flashattn-bench $H --dtype bf16
run bwd-f16 120 ./bin/flashattn-bench $H --dtype f16
python3 - <<'PY'
import json,os
R='/tmp/res'
for d in ['bwd-bf16','bwd-f16']:
    rows={}
    for fn in ['bench.jsonl','peers.jsonl']:
        p=os.path.join(R,d,fn)
        if not os.path.exists(p): continue
        for l in open(p):
            r=json.loads(l)
            if r.get('kind')=='row' and r.get('timing') and not r.get('tiles'):
                rows.setdefault(r['key'],{})[r['method']]=(r['timing']['median_ms'],r.get('tflops') or 0)
    for k,v in rows.items():
        a=v.get('auto'); f=v.get('torch-flash'); c=v.get('torch-cudnn')
        if a: print(d,k,'ours %.1f TF'%a[1] + (' fa2 %.1f x%.3f'%(f[1],f[0]/a[0]) if f else '') + (' cudnn %.1f x%.3f'%(c[1],c[0]/a[0]) if c else ''))
PY
el
cd /tmp && tar czf $OUT/results.tgz res
