#!/usr/bin/env bash
# Session 11 call 1 (build 812e5b2, main as session 10 left it): where the time goes.
# (1) Nsight Compute on the backward (bf16, B = 4, N = 4096, non-causal, d = 64 and 128): the
#     preprocessing, main and dQ-conversion kernels' durations, stalls and per-SASS stall samples.
# (2) Decode at B = 16, 32/8 heads, d = 128, 64k: our split kernel and combine, and cuDNN's kernel
#     (through PyTorch), under ncu (grid, duration, DRAM throughput).
# (3) Decode split counts off the powers of two (B = 16, 64k/128k; B = 64, 64k), then the
#     default with cuDNN in the same run.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
python3 -c "import tarfile; tarfile.open('.gpu/base.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/ 2>/dev/null
cd /tmp/b/bundle; cat COMMIT
B=./bin/flashattn-bench
NCU="ncu --clock-control none"
for d in 64 128; do
  timeout 110 $NCU --set full --import-source no -k regex:flash_bwd --launch-count 3 -o $R/bwd-d$d \
    $B run --preset headline --dtype bf16 --head-dims $d --seqlens 4096 --mask none --methods auto --pass bwd \
    --check none --complete-path none --reps 1 --warmup-ms 1 --no-report --out $R/x$d > $R/ncu-bwd-d$d.log 2>&1
  echo "ncu bwd d$d rc $?"; el
  ncu --import $R/bwd-d$d.ncu-rep --page details > $R/bwd-d$d-details.txt 2>&1
  ncu --import $R/bwd-d$d.ncu-rep --page source --csv --print-source sass > $R/bwd-d$d-sass.csv 2>&1
  echo "import rc $?"
done
grep -E "flash_bwd|Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Eligible Warps|No Eligible" $R/bwd-d*-details.txt | head -80
el
# (2) decode under ncu: ours (one call: split kernel + combine), then cuDNN.
timeout 60 $NCU --section SpeedOfLight --section LaunchStats --section MemoryWorkloadAnalysis -o $R/dec-ours \
  $B one --dtype bf16 --batch 16 --heads 32 --kv-heads 8 --seqlen-q 1 --seqlen-k 65536 --head-dim 128 --mask none --method flash-tc > $R/ncu-dec-ours.log 2>&1
echo "ncu dec ours rc $?"
ncu --import $R/dec-ours.ncu-rep --page details > $R/dec-ours-details.txt 2>&1
cat > $R/cudnn_decode.py <<'PY'
import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
B, H, KV, N, d = 16, 32, 8, 65536, 128
q = torch.randn(B, H, 1, d, device="cuda", dtype=torch.bfloat16)
k = torch.randn(B, KV, N, d, device="cuda", dtype=torch.bfloat16)
v = torch.randn(B, KV, N, d, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(3):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
torch.cuda.synchronize()
PY
timeout 90 $NCU --section SpeedOfLight --section LaunchStats --section MemoryWorkloadAnalysis --launch-skip 3 --launch-count 8 -o $R/dec-cudnn python3 $R/cudnn_decode.py > $R/ncu-dec-cudnn.log 2>&1
echo "ncu dec cudnn rc $?"
ncu --import $R/dec-cudnn.ncu-rep --page details > $R/dec-cudnn-details.txt 2>&1
grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|Grid Size|Block Size|Registers Per|Dynamic Shared|Waves Per SM" $R/dec-ours-details.txt $R/dec-cudnn-details.txt | head -80
el
# (3) split counts (ours only), then the default with cuDNN beside it.
D="run --preset headline --dtype bf16 --head-dims 128 --seqlen-q 1 --heads 32 --kv-heads 8 --mask none --methods flash-tc --check none --complete-path none --no-report"
for s in 3 4 5 6 8 12 16 33; do
  timeout 40 $B $D --batch 16 --seqlens 65536,131072 --splits $s --out $R/split16-$s > $R/split16-$s.log 2>&1
done
for s in 1 2 3; do timeout 30 $B $D --batch 64 --seqlens 65536 --splits $s --out $R/split64-$s > $R/split64-$s.log 2>&1; done
el
for f in $R/split*/bench.jsonl; do echo "$f $(python3 -c "
import json
for l in open('$f'):
    r=json.loads(l)
    if r.get('kind')=='row': print(r['key'], r['status'], round(r['timing']['median_ms'],4) if r.get('timing') else None, round(r.get('kv_tb_s') or 0,3), end='; ')
")"; done
timeout 100 $B run --preset headline --dtype bf16 --head-dims 128 --seqlens 65536,131072 --seqlen-q 1 --batch 16 --heads 32 --kv-heads 8 --mask none --methods flash-tc --check none --complete-path none --peers --peers-script ./bin/peers-fast.py --out $R/decode16 > $R/decode16.log 2>&1
echo "decode16 rc $?"; el
grep -h "ours / torch" -A4 $R/decode16/report.md | head -8
cd /tmp && tar czf $OUT/results.tgz res
