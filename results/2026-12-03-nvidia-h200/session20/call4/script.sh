#!/usr/bin/env bash
# Session 20 call 4: the final build (v37 at d >= 128 only: the d = 64 entries' PTX is call 2's,
# the d >= 128 entries' call 3's). bf16 and f16 headline forward at d = 128 and 256 with
# FlashAttention-2 and cuDNN in the same run.
set -uo pipefail
export OUT; R=$OUT/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 290 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 15 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 128 --methods auto --check none --complete-path none --no-report"
run warm 150 ./bin/flashattn-bench $W; rm -rf $R/warm
H="run --preset headline --head-dims 128,256 --methods auto --check none --complete-path none --ceilings 4.26,798 --peers --peers-script ./bin/peers-fast.py"
run fwd-bf16 90 ./bin/flashattn-bench $H --dtype bf16
run fwd-f16 90 ./bin/flashattn-bench $H --dtype f16
python3 - <<'PY' | tee $R/summary-peers.txt
import json,os
R=os.environ['OUT']+'/res'
for d in ['fwd-bf16','fwd-f16']:
    rows={}
    for fn in ['bench.jsonl','peers.jsonl']:
        p=os.path.join(R,d,fn)
        if not os.path.exists(p): continue
        for l in open(p):
            r=json.loads(l)
            if r.get('kind')=='row' and r.get('timing'):
                rows.setdefault(r['key'],{}).setdefault(r['method'],(r['timing']['median_ms'], r.get('tflops') or 0))
    for k,v in rows.items():
        fl=v.get('torch-flash'); c=v.get('torch-cudnn'); t=v.get('auto')
        if t: print(d,k,'auto %.4f ms %.1f TF'%t + (' x_fa2 %.3f'%(fl[0]/t[0]) if fl else '') + (' x_cudnn %.3f'%(c[0]/t[0]) if c else ''))
PY
cd $R && tar czf $OUT/res.tgz . && cd / && rm -rf $R
el
