#!/usr/bin/env bash
# Session 27 call 1: where the window backward's time goes (issue 13, w1024 at 0.92x
# FlexAttention), N = 16384, B = 1, H = 16, d = 128, bf16, causal, window 1024, from residuals.
# Builds (bin/): flashattn-bench = main after the session-26 revert (PTX of 1ec4810);
# bench-nodq = the window instances without the dQ product and adds (variant-nodq-noadd.py);
# bench-protoA = the window instances as the plan's kernel A (protoA.py: transposed scores,
# P^T/dS^T in registers, register-A dV/dK, one barrier a step, no dQ). Timing only for the two
# variants (their dQ is not computed). (1) Nsight Compute kernel durations of the three builds;
# (2) sections of the baseline's and protoA's window main kernels; (3) FlexAttention's kernels
# under Nsight Compute (durations, launch shapes, registers, shared memory).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 140 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
C=results/2026-12-05-nvidia-h200/session27/call1
cp benches/peers.py $C/flex-w1024-shape.json /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT; ls bin
export FLASHATTN_REQUIRE_GPU=1
A="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --pass bwd --bwd-from residuals --check none --complete-path none --no-report --window 1024"
ncu_t() { local tag=$1; shift; l=$(left); [ $l -gt 25 ] || { echo "skip $tag"; return; }
  timeout 45 ncu --metrics gpu__time_duration.sum --csv -k regex:flash_bwd "$@" --reps 2 --warmup-ms 1 --out /tmp/x > $R/ncu-$tag.csv 2> $R/ncu-$tag.err; echo "ncu $tag rc $?"; el; }
for b in flashattn-bench bench-protoA bench-nodq; do ncu_t $b ./bin/$b $A; done
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats"
for b in bench-protoA flashattn-bench; do
  l=$(left); [ $l -gt 40 ] || { echo "skip sections $b"; continue; }
  timeout 50 ncu $S -k regex:flash_bwd_bf16_d128.*win -c 1 ./bin/$b $A --reps 1 --warmup-ms 1 --out /tmp/x > $R/sections-$b.txt 2>&1; echo "sections $b rc $?"; el
done
P="python3 ./bin/peers.py --shapes ./bin/flex-w1024-shape.json --backends flex --passes bwd --warmup-ms 2 --rep-ms 5 --ref-max-pairs 0"
M=gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_per_block_dynamic,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem
l=$(left); [ $l -gt 45 ] && { timeout $((l-5)) ncu --metrics $M --csv -c 30 $P --out /tmp/flex1.jsonl > $R/flex-ncu.csv 2> $R/flex-ncu.err; echo "flex ncu rc $?"; }; el
python3 - <<'PY'
import csv,glob,statistics as st,os
for f in sorted(glob.glob('/tmp/res/ncu-*.csv')):
    d={}
    for r in csv.reader(open(f)):
        if len(r)>5 and r[-3]=='gpu__time_duration.sum':
            x=float(r[-1].replace(',','')); u=r[-2]
            v=x/1000 if u in ('us','usecond') else x/1e6 if u in ('ns','nsecond') else x
            d.setdefault(r[4],[]).append(v)
    for k,v in d.items(): print('NCU',os.path.basename(f)[4:-4],k,'median %.4f ms n=%d'%(st.median(v),len(v)), [round(x,4) for x in v])
PY
for f in $R/sections-*.txt; do echo "== $f"; grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|Issue Slots Busy|Eligible Warps|No Eligible|Executed Ipc A|Registers Per|Achieved Occupancy|Warp Cycles Per Issued" $f | head -14; done
grep -vE "^==" $R/flex-ncu.csv | awk -F'","' '{print $5" | "$(NF-3)" | "$NF}' | cut -c1-160 | head -70
cd /tmp && tar czf $OUT/results.tgz res; el
