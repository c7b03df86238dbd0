#!/usr/bin/env bash
# Session 18 call 4: v32 off the headline — bf16 forward at head dims 96 and 192 (padded to the
# 128/192 instances), N = 4096, causal and not, and causal Nq = 1024 against Nk = 4096 at
# d = 128; the session's start (`bench-old`) against v32, alternated twice, min of two.
set -uo pipefail
export OUT; R=$OUT/res; mkdir -p $R
start=$(date +%s)
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; [tarfile.open('.gpu/'+f).extractall('/tmp/b') for f in ('new.txz','old.txz')]"
cd /tmp/b/bundle; export FLASHATTN_REQUIRE_GPU=1
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 96 --methods auto --check none --complete-path none --no-report"
for b in flashattn-bench bench-old; do ( timeout 120 ./bin/$b $W --out /tmp/w-$b > /dev/null 2>&1 ) & done; wait
echo "warm $(( $(date +%s) - start )) s"
A="run --seqlens 4096 --batch 4 --heads 16 --head-dims 96,192 --dtype bf16 --methods auto --check none --complete-path none --no-report"
B="run --seqlen-q 1024 --seqlens 4096 --batch 4 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --check none --complete-path none --no-report"
for i in 1 2; do for b in bench-old flashattn-bench; do
  [ $(( $(date +%s) - start )) -lt 150 ] || break
  timeout 30 ./bin/$b $A --out /tmp/a-$b-$i > /tmp/r-$b-$i.log 2>&1
  timeout 20 ./bin/$b $B --out /tmp/c-$b-$i >> /tmp/r-$b-$i.log 2>&1
done; done
python3 - <<'PY' | tee $R/summary.txt
import re,glob
res={}
for f in sorted(glob.glob('/tmp/r-*.log')):
    b=f.split('/r-')[1].rsplit('-',1)[0]
    for l in open(f):
        m=re.match(r'(\S+) auto: ([0-9.]+) ms',l)
        if m: res.setdefault(m.group(1),{}).setdefault(b,[]).append(float(m.group(2)))
for k,v in res.items():
    o=min(v.get('bench-old',[0])); n=min(v.get('flashattn-bench',[0]))
    print('%s old %s v32 %s change %+.1f%%'%(k,v.get('bench-old'),v.get('flashattn-bench'),100*(n/o-1) if o else 0))
PY
echo "done $(( $(date +%s) - start )) s"
