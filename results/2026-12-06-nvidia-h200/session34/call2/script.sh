#!/usr/bin/env bash
# Session 34 call 2. "old" = main 02026b0; "new" = v42 kept for d = 64 only (two Q tiles in the d = 64
# persistent instances, 128 and 192 rows; d = 128/192 persistent back to one Q tile and their
# output tile, SASS key loops as old). (1) the whole GPU suite (new; call 1's ran out of time at
# backward::shapes_f16), racecheck and memcheck of hopper::rows192_bf16 (small: the 192-row
# instances); (2) forward kernel durations under ncu (clocks locked), old and new alternated: bf16
# d = 64 causal and not, N = 1024/2048/4096/16384, d = 128 non-causal N = 1024 (control);
# (3) if time is left, the bf16 d = 64 headline forward with PyTorch's backends (event-timed).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 430 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/b.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; ls bin tests; cat COMMIT
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt; cat $R/gpu.txt
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64 --mask none --methods auto --pass fwd --check none --complete-path none --no-report"
( run warm-old 120 ./bin/bench-old $W ) &
( ( time timeout 200 ./tests/gpu-new --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 200 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu-new --test-threads 1 hopper::rows192_bf16 > $R/san-racecheck-rows192.log 2>&1; echo "racecheck rows192 rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu-new --test-threads 1 hopper::rows192_bf16 > $R/san-memcheck-rows192.log 2>&1; echo "memcheck rows192 rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule" $R/tests-*.log | head -20
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $R/san-*.log
grep -hA16 "^---- " $R/tests-*.log | head -40
for row in "64 32 causal" "64 32 none" "128 16 none"; do
  set -- $row; d=$1; h=$2; mask=$3
  for n in 1024 2048 4096 16384; do
    [ $d = 128 ] && [ $n != 1024 ] && continue
    for b in old new; do
      l=$(left); [ $l -gt 15 ] || { echo "skip ncu $b $d $mask $n"; continue; }
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
            print('NCU %-18s %-52s old %.4f (n=%d) new %.4f (n=%d) %+.2f%%'%(os.path.basename(f)[8:-4],k[:52],st.median(a[k]),len(a[k]),st.median(b[k]),len(b[k]),100*(st.median(b[k])/st.median(a[k])-1)))
PY
el
H="run --preset headline --dtype bf16 --head-dims 64 --methods auto --check none --complete-path none --pass fwd --peers --peers-script ./bin/peers-fast.py"
l=$(left); [ $l -gt 80 ] && run peers-d64 $((l - 10)) ./bin/bench-new $H
grep -h "torch-cudnn" $R/peers-d64.log 2>/dev/null | head -12
el
cd /tmp && tar czf $OUT/results.tgz res
