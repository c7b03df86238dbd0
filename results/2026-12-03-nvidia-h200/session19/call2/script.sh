#!/usr/bin/env bash
# Session 19 call 2: why v34's persistent grid is slower at N >= 8192 (call 1: d = 128 +7.6 to
# +11.6%, d = 64 +1.8 to +3.7%) while faster at N = 1024. Nsight Compute (--set full, clocks not
# locked) of the forward kernel, the session's start (`bench-old`, one tile a block) against v34
# (persistent), bf16 non-causal: d = 128 N = 8192 (B = 2, H = 16) and d = 64 N = 16384 (B = 1,
# H = 32); then the two d = 128 rows alternated three times more.
set -uo pipefail
export OUT; R=$OUT/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b'); tarfile.open('.gpu/old.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64,128 --methods auto --check none --complete-path none --no-report"
( timeout 150 ./bin/flashattn-bench $W --out /tmp/w1 > /dev/null 2>&1 ) & ( timeout 150 ./bin/bench-old $W --out /tmp/w2 > /dev/null 2>&1 ) & wait; el
for cfg in "128 8192 2 16" "64 16384 1 32"; do
  set -- $cfg; d=$1; n=$2; b=$3; h=$4
  for bin in bench-old flashattn-bench; do
    tag=$bin-d$d-n$n
    timeout 60 ncu --clock-control none --set full --import-source no -k regex:flash_fwd_wgmma --launch-count 1 -o /tmp/$tag \
      ./bin/$bin run --seqlens $n --batch $b --heads $h --dtype bf16 --head-dims $d --mask none --methods auto \
      --check none --complete-path none --reps 1 --warmup-ms 1 --no-report --out /tmp/x-$tag > $R/ncu-$tag.log 2>&1
    echo "ncu $tag rc $?"; el
    ncu --import /tmp/$tag.ncu-rep --page details > $R/$tag-details.txt 2>&1
    ncu --import /tmp/$tag.ncu-rep --page source --csv --print-source sass > $R/$tag-sass.csv 2>/dev/null
    grep -E "flash_fwd|Duration|SM Frequency|DRAM Throughput|L2 Hit|L1/TEX Hit|Issue Slots Busy|Eligible Warps|No Eligible|L2 Cache Throughput|Compute \(SM\) Throughput|Memory Throughput|Dynamic Shared" $R/$tag-details.txt | head -20
  done
done
A="run --seqlens 8192,16384 --batch 2 --heads 16 --head-dims 128 --dtype bf16 --mask none --methods auto --check none --complete-path none --no-report"
for i in 1 2 3; do for bin in bench-old flashattn-bench; do timeout 40 ./bin/$bin $A --out /tmp/a-$bin-$i > $R/ab-$bin-$i.log 2>&1; done; done
grep -h " auto: " $R/ab-*.log
cd $R && tar czf $OUT/res.tgz . && cd / && rm -rf $R
el
