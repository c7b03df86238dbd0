#!/usr/bin/env bash
# Session 22 call 3: d = 129…192 in 112-key tiles under Auto from 4096 queries a sequence (2048
# causal; host only). The whole GPU suite; d = 32 inference on the mma.sync kernel (Auto) against
# the Hopper kernel padded to 64 columns (flash-hopper), N = 1024 … 16384, twice (first with the
# oracle check); the head-dims sweep and the bf16/f16 headline (d = 64, 128, 256) with FA2 and
# cuDNN in the same run.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 570 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 192 --methods auto --check none --complete-path none --no-report"
run warm 150 ./bin/flashattn-bench $W
( time timeout 200 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt
el; cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule" $R/tests-all.log | head -30
grep -hA16 "^---- " $R/tests-all.log | head -40
A="run --preset head-dims --seqlens 1024,2048,4096,8192,16384 --dtype bf16,f16 --head-dims 32 --mask none,causal --methods auto,flash-hopper --complete-path none --pass fwd --no-report"
run ab32-check 120 ./bin/flashattn-bench $A --check oracle
for i in 1 2; do run ab32-$i 45 ./bin/flashattn-bench $A --check none; done
H="run --methods auto --check none --complete-path none --ceilings 4.26,798 --pass fwd --peers --peers-script ./bin/peers-fast.py"
run peers-headdims 120 ./bin/flashattn-bench $H --preset head-dims --mask none,causal
run peers-headline 150 ./bin/flashattn-bench $H --preset headline --dtype bf16,f16 --head-dims 64,128,256
el
cd /tmp && tar czf $OUT/results.tgz res
