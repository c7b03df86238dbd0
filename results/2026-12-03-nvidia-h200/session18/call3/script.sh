#!/usr/bin/env bash
# Session 18 call 3: is v32's d = 128 non-causal +1.3 to +8.9% (call 2, N = 2048–8192) the TMA
# store? Three builds rotated three times on the bf16 headline forward at d = 128 without a mask
# (min of three medians a row): the session's start (070d03a, `bench-old`), v32 (`flashattn-bench`)
# and v32's kernels with the host passing no O map at d = 128 (`bench-noo`: the register stores,
# a host-only change built for this call, not committed).
set -uo pipefail
export OUT; R=$OUT/res; mkdir -p $R
start=$(date +%s)
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; [tarfile.open('.gpu/'+f).extractall('/tmp/b') for f in ('new.txz','old.txz','noo.txz')]"
cd /tmp/b/bundle; cat COMMIT; ls bin
export FLASHATTN_REQUIRE_GPU=1
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 128 --methods auto --check none --complete-path none --no-report"
for b in flashattn-bench bench-old bench-noo; do ( timeout 150 ./bin/$b $W --out /tmp/w-$b > /dev/null 2>&1 ) & done; wait
echo "warm $(( $(date +%s) - start )) s"
A="run --preset headline --dtype bf16 --head-dims 128 --mask none --methods auto --check none --complete-path none --no-report"
for i in 1 2 3; do for b in bench-old flashattn-bench bench-noo; do
  [ $(( $(date +%s) - start )) -lt 200 ] || break
  timeout 30 ./bin/$b $A --out /tmp/r-$b-$i > /tmp/r-$b-$i.log 2>&1
done; done
grep -h " auto: " /tmp/r-*.log > /dev/null
python3 - <<'PY' | tee $R/summary.txt
import re,glob
res={}
for f in sorted(glob.glob('/tmp/r-*.log')):
    b=f.split('/r-')[1].rsplit('-',1)[0]
    for l in open(f):
        m=re.match(r'(\S+) auto: ([0-9.]+) ms',l)
        if m: res.setdefault(m.group(1),{}).setdefault(b,[]).append(float(m.group(2)))
for k,v in res.items():
    o=min(v.get('bench-old',[0])); n=min(v.get('flashattn-bench',[0])); q=min(v.get('bench-noo',[0]))
    print('%s old %s v32 %s v32-no-O-map %s | v32/old %+.1f%% noO/old %+.1f%%'%(k,v.get('bench-old'),v.get('flashattn-bench'),v.get('bench-noo'),100*(n/o-1),100*(q/o-1)))
PY
echo "done $(( $(date +%s) - start )) s"
