#!/usr/bin/env bash
# Session 34 call 1. "old" = main 02026b0 (session 33's last refactor, never run on a GPU); "new" =
# the same with two Q tiles in the Hopper forward's persistent instances (v42: the next query tile's
# Q lands while the current one runs; each tile's output staged in its own Q tile). The backward's
# PTX is the same in both, so the new build's suite also verifies main's backward.
# (1) the whole GPU suite (new), memcheck of backward::shapes_bf16 (small, with the two 16 MiB
# window cases of the per-tile conversion), memcheck and racecheck of hopper::persistent_bf16
# (small); (2) forward kernel durations under ncu (clocks locked), old and new, bf16 d = 64/128,
# causal and not, N = 1024/4096/16384; (3) issue 13's w1024 backward against FlexAttention;
# (4) cuDNN's forward launch configuration at N = 1024, d = 128.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 565 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/b.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; ls bin tests; cat COMMIT
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt; cat $R/gpu.txt
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64 --mask none --methods auto --pass fwd --check none --complete-path none --no-report"
( run warm-old 150 ./bin/bench-old $W ) &
( ( time timeout 230 ./tests/gpu-new --test-threads 6 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 230 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu-new --test-threads 1 backward::shapes_bf16 > $R/san-memcheck-bwd-shapes_bf16.log 2>&1; echo "memcheck bwd shapes rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 230 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu-new --test-threads 1 hopper::persistent_bf16 > $R/san-memcheck-persistent.log 2>&1; echo "memcheck persistent rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 230 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu-new --test-threads 1 hopper::persistent_bf16 > $R/san-racecheck-persistent.log 2>&1; echo "racecheck persistent rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule" $R/tests-*.log | head -20
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $R/san-*.log
grep -hA16 "^---- " $R/tests-*.log | head -40
# Forward kernel durations under ncu (clocks locked at base), one process a row, old and new alternated.
for row in "128 16 none" "64 32 none" "128 16 causal" "64 32 causal"; do
  set -- $row; d=$1; h=$2; mask=$3
  for n in 1024 4096 16384; do
    for b in old new; do
      l=$(left); [ $l -gt 100 ] || { echo "skip ncu $b $d $mask $n"; continue; }
      bsz=$((16384 / n))
      timeout 25 ncu --metrics gpu__time_duration.sum --csv -k regex:flash_fwd \
        ./bin/bench-$b run --seqlens $n --batch $bsz --heads $h --head-dims $d --mask $mask --dtype bf16 --methods auto --pass fwd \
        --check none --complete-path none --reps 2 --warmup-ms 1 --no-report --out /tmp/x > $R/ncu-$b-d$d-$mask-n$n.csv 2> $R/ncu-$b-d$d-$mask-n$n.err
    done
  done
  el
done
python3 - <<'PY'
import os,csv,glob,statistics as st
R='/tmp/res'
def durs(f):
    v=[]
    try:
        for r in csv.reader(open(f)):
            if len(r)>5 and r[-3]=='gpu__time_duration.sum':
                x=float(r[-1].replace(',','')); u=r[-2]
                v.append(x/1000 if u in ('us','usecond') else x/1e6 if u in ('ns','nsecond') else x)
    except Exception as e: print('parse',f,e)
    return v
for f in sorted(glob.glob(R+'/ncu-old-*.csv')):
    g=f.replace('ncu-old-','ncu-new-')
    a,b=durs(f),durs(g)
    if a and b:
        print('NCU %s old %.4f ms (n=%d, %s) new %.4f ms (n=%d, %s) change %+.1f%%'%(os.path.basename(f)[8:-4],st.median(a),len(a),[round(x,4) for x in a],st.median(b),len(b),[round(x,4) for x in b],100*(st.median(b)/st.median(a)-1)))
    else: print('NCU missing',f,len(a),len(b))
PY
el
F="run --seqlens 16384 --batch 1 --heads 16 --mask causal --dtype bf16 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --peers --peers-script ./bin/peers-flex.py --window 1024"
run flex-d128 90 ./bin/bench-new $F --head-dims 128
grep -h "torch-flex" $R/flex-*.log | head
grep -h "^| .bf16.*| auto | bwd" $R/flex-*/report.md | head -4
el
l=$(left); if [ $l -gt 40 ]; then
  timeout 35 ncu --section LaunchStats --section Occupancy --nvtx --nvtx-include "prof/" python3 ./bin/cudnn_ncu.py 16 16 1024 128 0 cudnn > $R/ncu-cudnn-d128-none.txt 2>&1
  echo "ncu cudnn rc $?"
  grep -hE "^  [a-zA-Z_].*\(|Duration|Grid Size|Block Size|Registers Per|Dynamic Shared|Static Shared|Waves Per SM|Cluster Size|Theoretical Occupancy" $R/ncu-cudnn-*.txt | head -30
fi
el
cd /tmp && tar czf $OUT/results.tgz res
