#!/usr/bin/env bash
# Session 19 call 5: the d = 128 and 256 non-causal headline rows are bimodal from one process
# to the next (up to 10%), so call 4's min-of-two A/B cannot rank v34b against v34c nor say
# whether d = 256's persistent instance (v34c) helps. Three builds rotated four times, bf16
# headline forward at d = 128, 256 without a mask: the session's start (148e4fe, `bench-old`),
# v34b (ed44126, `bench-v34b`) and v34c (b0f9084, `flashattn-bench`); medians of the four.
set -uo pipefail
export OUT; R=$OUT/res; mkdir -p $R
start=$(date +%s)
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; [tarfile.open('.gpu/'+f).extractall('/tmp/b') for f in ('new.txz','old.txz','v34b.txz')]"
cd /tmp/b/bundle; cat COMMIT; ls bin
export FLASHATTN_REQUIRE_GPU=1
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 128,256 --methods auto --check none --complete-path none --no-report"
for b in flashattn-bench bench-old bench-v34b; do ( timeout 150 ./bin/$b $W --out /tmp/w-$b > /dev/null 2>&1 ) & done; wait
echo "warm $(( $(date +%s) - start )) s"
A="run --preset headline --dtype bf16 --head-dims 128,256 --mask none --methods auto --check none --complete-path none --no-report"
for i in 1 2 3 4; do for b in bench-old bench-v34b flashattn-bench; do
  [ $(( $(date +%s) - start )) -lt 240 ] || break
  timeout 30 ./bin/$b $A --out /tmp/r-$b-$i > $R/r-$b-$i.log 2>&1
done; done
python3 - <<'PY' | tee $R/summary.txt
import re,glob,os,statistics
R=os.environ['OUT']+'/res'
res={}
for f in sorted(glob.glob(R+'/r-*.log')):
    b=os.path.basename(f)[2:].rsplit('-',1)[0]
    for l in open(f):
        m=re.match(r'(\S+) auto: ([0-9.]+) ms',l)
        if m: res.setdefault(m.group(1),{}).setdefault(b,[]).append(float(m.group(2)))
for k,v in res.items():
    med={b:statistics.median(x) for b,x in v.items()}
    o=med.get('bench-old')
    print('%s %s | v34b/old %+.1f%% v34c/old %+.1f%%'%(k,' '.join('%s=%s'%(b,x) for b,x in v.items()),100*(med['bench-v34b']/o-1),100*(med['flashattn-bench']/o-1)))
PY
echo "done $(( $(date +%s) - start )) s"
