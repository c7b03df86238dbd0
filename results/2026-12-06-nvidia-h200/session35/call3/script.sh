#!/usr/bin/env bash
# Session 35 call 3: v43 (3522a74: the next query tile's first Q·Kᵀ issued with the last P·V, in
# the persistent Hopper instances with two Q tiles) against main ca487dd ("old"), in one call.
# (1) whole GPU suite (new) beside memcheck, racecheck and synccheck of hopper::persistent_bf16
# (small), racecheck of hopper::rows192_bf16; (2) forward kernel durations under ncu (locked clocks), old
# and new alternated, bf16 d = 64/128, causal and not, N = 1024/2048/4096/16384; (3) the bf16/f16
# headline (d = 64/128/256) with FA2 and cuDNN in the same run (event-timed, new).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 560 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/b.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; cat COMMIT; el
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt; cat $R/gpu.txt
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64 --mask none --methods auto --pass fwd --check none --complete-path none --no-report"
( run warm-old 120 ./bin/bench-old $W ) &
( ( time timeout 220 ./tests/gpu-new --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
for job in "memcheck persistent_bf16" "racecheck persistent_bf16" "synccheck persistent_bf16" "racecheck rows192_bf16"; do
  set -- $job
  ( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 215 compute-sanitizer --tool $1 --error-exitcode 97 ./tests/gpu-new --test-threads 1 hopper::$2 > $R/san-$1-$2.log 2>&1; echo "$1 $2 rc $?" >> $R/rc.txt ) &
done
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule" $R/tests-*.log | head -20
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $R/san-*.log
grep -hA16 "^---- " $R/tests-*.log | head -40
for n in 1024 2048 16384 4096; do
  for row in "128 16 none" "128 16 causal" "64 32 none" "64 32 causal"; do
    set -- $row; d=$1; h=$2; mask=$3
    for b in old new; do
      l=$(left); [ $l -gt 110 ] || { echo "skip ncu $b $d $mask $n"; continue; }
      bsz=$((16384 / n))
      timeout 25 ncu --metrics gpu__time_duration.sum --csv -k regex:flash_fwd_wgmma \
        ./bin/bench-$b run --seqlens $n --batch $bsz --heads $h --head-dims $d --mask $mask --dtype bf16 --methods auto --pass fwd \
        --check none --complete-path none --reps 2 --warmup-ms 1 --no-report --out /tmp/x > $R/ncu-$b-d$d-$mask-n$n.csv 2> $R/ncu-$b-d$d-$mask-n$n.err
    done
  done
  el
done
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
for f in sorted(glob.glob(R+'/ncu-old-*.csv')):
    a=durs(f); b=durs(f.replace('ncu-old-','ncu-new-'))
    for k in a:
        if k in b:
            print('NCU %-20s %-52s old %.4f (n=%d) new %.4f (n=%d) %+.2f%%'%(os.path.basename(f)[8:-4],k[:52],st.median(a[k]),len(a[k]),st.median(b[k]),len(b[k]),100*(st.median(b[k])/st.median(a[k])-1)))
PY
el
H="run --preset headline --dtype bf16,f16 --head-dims 64,128,256 --methods auto --check none --complete-path none --pass fwd --peers --peers-script ./bin/peers-fast.py"
l=$(left); [ $l -gt 60 ] && run peers-headline $((l - 5)) ./bin/bench-new $H
el
cd /tmp && tar czf $OUT/results.tgz res
