#!/usr/bin/env bash
# Session 30 call 2: why the window-only (transposed) step is slower: Nsight Compute sections of
# the w1024 main kernel, baseline (bench-old) and window-only (new), one launch each.
set -uo pipefail
R=/tmp/res2; rm -rf $R; mkdir -p $R
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; [tarfile.open('.gpu/%s.txz'%n).extractall('/tmp/b') for n in ('new','old')]"
cd /tmp/b/bundle
A="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --window 1024 --dtype bf16 --methods auto --pass bwd --bwd-from residuals --check none --complete-path none --reps 1 --warmup-ms 1 --no-report --out /tmp/x"
for b in old new; do
  bin=./bin/flashattn-bench; [ $b = old ] && bin=./bin/bench-old
  timeout 200 ncu --section SpeedOfLight --section WarpStateStats --section InstructionStats --section MemoryWorkloadAnalysis_Tables --section SchedulerStats --section SourceCounters \
    --metrics smsp__inst_executed.sum,smsp__sass_inst_executed_op_shared_st.sum,smsp__sass_inst_executed_op_shared_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,smsp__average_warp_latency_issue_stalled_barrier.ratio \
    -k regex:'flash_bwd_bf16_d128_w8_b1_win' -c 1 --print-details all --csv $bin $A > $R/ncu-$b.csv 2> $R/ncu-$b.err
  echo "$b rc $?"
done
cd /tmp && tar czf $OUT/results2.tgz res2
