#!/usr/bin/env bash
# Session 8 call 1: branch bwd-b10 = bwd-red-v4 (dQ adds as red.global.add.v4.f32 on sm_90a) + bwd-d64-w8 (d64 backward at 8 warps/128 keys): backward tests, headline --pass bwd with peers, bf16 then f16.
set -uo pipefail
R=/tmp/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 550 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/bundle.txz').extractall()"
cd bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( time timeout 120 ./tests/gpu --test-threads 2 backward ) > $R/gpu-bwd.log 2>&1; echo "bwd tests rc $?"
grep -E "^test |test result|worst rule" $R/gpu-bwd.log | head -12; grep -E "panicked|exceeds|FAILED|rror" $R/gpu-bwd.log | head -10; el
for dt in bf16 f16; do
  l=$(left); [ $l -gt 100 ] && { ( time timeout $l ./run.sh bench run --preset headline --dtype $dt --pass bwd --peers --out $R/headline-bwd-$dt ) > $R/headline-bwd-$dt.log 2>&1; echo "bench $dt rc $?"; grep -E "^\| .*\| bwd \| [0-9]" $R/headline-bwd-$dt/report.md | head -24; }
  el
done
cd /tmp && tar czf $OUT/results.tgz res
