#!/usr/bin/env bash
# Session 8 call 2: softcap and ALiBi on the GPU (masked instances, fwd+bwd) and bwd-b10 merged: whole GPU suite, then N=16384 d128 bf16 causal fwd,bwd with FlexAttention in the same run: plain, window 256/1024/4096, softcap 30, ALiBi, softcap+ALiBi.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 580 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/bundle.txz').extractall()"
cd bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( time timeout 230 ./tests/gpu ) > $R/gpu-suite.log 2>&1; echo "suite rc $?"
grep -E "FAILED|test result|panicked|worst rule|exceeds" $R/gpu-suite.log | head -16; el
( time timeout 100 ./run.sh python ) > $R/python-tests.log 2>&1; echo "python rc $?"; grep -E "passed|failed|rror" $R/python-tests.log | tail -3; el
B="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --pass fwd,bwd --peers"
for v in "plain:" "window:--window 256,1024,4096" "softcap:--softcap 30" "alibi:--alibi" "both:--softcap 30 --alibi"; do
  name=${v%%:*}; flags=${v#*:}
  l=$(left); [ $l -gt 45 ] || break
  ( time timeout $l ./run.sh bench $B $flags --out $R/mods-$name ) > $R/mods-$name.log 2>&1; echo "bench $name rc $?"
  grep -E "^\| .*\| (fwd|bwd) \| [0-9]" $R/mods-$name/report.md | head -8; el
done
l=$(left); [ $l -gt 40 ] && { ( timeout $l ./bin/backward bf16 128 ) > $R/bwd-example.txt 2>&1; echo "example rc $?"; tail -12 $R/bwd-example.txt; }
cd /tmp && tar czf $OUT/results.tgz res
