#!/usr/bin/env bash
# Session 37 call 1 (not run: no machine was lent in session 37; build the bundle with
# build.sh first). main (7759a8e's kernels), A = v44 (the output stores' read waited a prologue
# later) and C = v44c (A and the next query tile's S_0 issued right after the last turn, d = 64
# two-consumer persistent instances, without ptxas's injected wait), in one call:
# (1) the whole GPU suite (C) beside memcheck, racecheck and synccheck of hopper::persistent_bf16
# (small) and racecheck of hopper::rows192_bf16 and of hopper::persistent_f16 (full);
# (2) forward kernel durations under ncu (locked clocks), main, A and C alternated, bf16
# d = 64/128, causal and not, N = 1024/2048/16384, and d = 256 / 192 (one Q tile: A only);
# (3) the bf16/f16 headline (d = 64/128/256) with FA2 and cuDNN (C).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 570 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/b.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; cat COMMIT; el
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt; cat $R/gpu.txt
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
( ( time timeout 230 ./tests/gpu-C --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
for job in "memcheck persistent_bf16 1" "racecheck persistent_bf16 1" "synccheck persistent_bf16 1" "racecheck rows192_bf16 1" "racecheck persistent_f16 0"; do
  set -- $job
  if [ $3 = 1 ]; then export FLASHATTN_TEST_SMALL=1; else unset FLASHATTN_TEST_SMALL; fi
  ( FLASHATTN_GPU_CASES=3 timeout 225 compute-sanitizer --tool $1 --error-exitcode 97 ./tests/gpu-C --test-threads 1 hopper::$2 > $R/san-$1-$2.log 2>&1; echo "$1 $2 rc $?" >> $R/rc.txt ) &
done
unset FLASHATTN_TEST_SMALL
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule" $R/tests-*.log | head -20
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $R/san-*.log
grep -hA16 "^---- " $R/tests-*.log | head -40
ncu1() { # build d h mask n
  local b=$1 d=$2 h=$3 mask=$4 n=$5; local bsz=$((16384 / n))
  timeout 25 ncu --metrics gpu__time_duration.sum --csv -k regex:flash_fwd_wgmma \
    ./bin/bench-$b run --seqlens $n --batch $bsz --heads $h --head-dims $d --mask $mask --dtype bf16 --methods auto --pass fwd \
    --check none --complete-path none --reps 2 --warmup-ms 1 --no-report --out /tmp/x > $R/ncu-$b-d$d-$mask-n$n.csv 2> $R/ncu-$b-d$d-$mask-n$n.err
}
for n in 1024 2048 16384; do
  for row in "64 32 none" "64 32 causal" "128 16 none" "128 16 causal"; do
    set -- $row
    for b in main A C; do
      [ $(left) -gt 100 ] || { echo "skip ncu $b $row $n"; continue; }
      ncu1 $b $1 $2 $3 $n
    done
  done
  el
done
for row in "256 8 none 1024" "192 8 none 1024"; do
  set -- $row
  for b in main A; do [ $(left) -gt 80 ] && ncu1 $b $1 $2 $3 $4; done
done
el
python3 - <<'PY'
import csv,glob,os,statistics as st,collections
R='/tmp/res'
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
                print('NCU %-20s %s %-50s main %.4f (n=%d) new %.4f (n=%d) %+.2f%%'%(os.path.basename(f)[9:-4],other,k[:50],st.median(a[k]),len(a[k]),st.median(b[k]),len(b[k]),100*(st.median(b[k])/st.median(a[k])-1)))
PY
el
H="run --preset headline --dtype bf16,f16 --head-dims 64,128,256 --methods auto --check none --complete-path none --pass fwd --peers --peers-script ./bin/peers-fast.py"
l=$(left); [ $l -gt 60 ] && run peers-headline $((l - 5)) ./bin/bench-C $H
el
cd /tmp && tar czf $OUT/results.tgz res
