#!/usr/bin/env bash
# Session 37 call 2: the ncu A/B of call 1 again, which timed out for main and A there (their
# PTX was not in the JIT cache, and the roofline ceilings were measured under ncu inside the 25 s
# limit; C's PTX had been compiled by the suite). Same bundle (.gpu/b.txz from call1/build.sh).
# First each build's PTX is compiled once outside ncu (in parallel), then ncu times the forward
# kernels of main, A (v44) and C (v44c) alternated, with the ceilings given and tiles `auto`.
# Run as `BUDGET=260 bash script.sh` (seconds for the whole script); results go to $OUT/res as
# they are measured.
set -uo pipefail
R=$OUT/res; mkdir -p $R   # written in place: a cut run still returns what it measured
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( ${BUDGET:-380} - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/b.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; cat COMMIT; el
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt; cat $R/gpu.txt
common="--dtype bf16 --methods auto --tiles auto --pass fwd --check none --complete-path none --ceilings 3.03,795 --no-report"
for b in main A C; do
  ( ./bin/bench-$b run --seqlens 1024 --batch 16 --heads 32 --head-dims 64 --mask none $common --reps 3 --out /tmp/w$b > $R/warm-$b.log 2>&1 ) &
done
wait; el; tail -n 2 $R/warm-*.log
ncu1() { # build d h mask n tag
  local b=$1 d=$2 h=$3 mask=$4 n=$5 tag=$6; local bsz=$((16384 / n))
  timeout 40 ncu --metrics gpu__time_duration.sum --csv -k regex:flash_fwd_wgmma \
    ./bin/bench-$b run --seqlens $n --batch $bsz --heads $h --head-dims $d --mask $mask $common \
    --reps 3 --warmup-ms 1 --out /tmp/x > $R/ncu-$b-d$d-$mask-n$n-$tag.csv 2> $R/ncu-$b-d$d-$mask-n$n-$tag.err
}
for row in "64 32 causal 1024 r1" "64 32 none 1024 r1" "128 16 none 1024 r1" "128 16 causal 1024 r1" \
           "64 32 none 2048 r1" "128 16 none 2048 r1" "64 32 none 1024 r2" "128 16 none 1024 r2" \
           "64 32 none 16384 r1" "64 32 causal 2048 r1"; do
  set -- $row
  for b in main A C; do
    [ $(left) -gt 45 ] || { echo "skip ncu $b $row"; continue; }
    ncu1 $b $1 $2 $3 $4 $5
  done
  el
done
python3 - <<'PY' | tee $R/summary.txt
import csv,glob,os,statistics as st,collections
import os; R=os.environ['OUT']+'/res'
def durs(f):
    v=collections.defaultdict(list)
    try:
        for r in csv.reader(open(f)):
            if len(r)>5 and r[-3]=='gpu__time_duration.sum':
                x=float(r[-1].replace(',','')); u=r[-2]
                ms=x/1000 if u in ('us','usecond') else x/1e6 if u in ('ns','nsecond') else x
                name=[c for c in r if c.startswith('flash_fwd')]
                v[name[0] if name else '?'].append(ms)
    except Exception as e: print('parse',f,e)
    return v
for f in sorted(glob.glob(R+'/ncu-main-*.csv')):
    a=durs(f)
    for other in ('A','C'):
        g=f.replace('ncu-main-','ncu-%s-'%other)
        if not os.path.exists(g): continue
        b=durs(g)
        for k in a:
            if k in b:
                print('NCU %-24s %s %-50s main %.4f (n=%d, %.4f-%.4f) new %.4f (n=%d, %.4f-%.4f) %+.2f%%'%(os.path.basename(f)[9:-4],other,k[:50],st.median(a[k]),len(a[k]),min(a[k]),max(a[k]),st.median(b[k]),len(b[k]),min(b[k]),max(b[k]),100*(st.median(b[k])/st.median(a[k])-1)))
PY
el

