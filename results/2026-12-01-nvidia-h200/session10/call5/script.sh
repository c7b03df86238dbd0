#!/usr/bin/env bash
# Session 10 call 5: main with b13 (backward dV/dK/dQ on wgmma) and v28 (decode variants):
# the whole GPU suite and compute-sanitizer on the changed paths; backward headline against the
# previous build (mid, c7f2472) with FA2/cuDNN; masks (window/softcap/ALiBi) fwd+bwd with
# FlexAttention; the decode variants at B = 16/64 with cuDNN.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 570 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b'); tarfile.open('.gpu/mid.txz').extractall('/tmp/b/bundle')"
cp .gpu/peers-fast.py .gpu/peers-flex.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 300 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
san() {
  ( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 290 compute-sanitizer --tool $1 --error-exitcode 97 ./tests/gpu --test-threads 1 $2 > $R/san-$1-$(echo $2 | tr -d ':').log 2>&1; echo "$1 $2 rc $?" >> $R/rc.txt ) &
}
san memcheck backward::shapes_bf16
san racecheck backward::shapes_bf16
san memcheck attention::split_kv_bf16
san racecheck attention::split_kv_bf16
san racecheck attention::paged_cache_bf16
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA14 "^---- " $R/tests-all.log | head -60
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
run bwd-new 100 ./bin/flashattn-bench run --preset headline --dtype bf16 --methods auto --pass bwd --check none --peers --peers-script ./bin/peers-fast.py
run bwd-mid 40 ./mid/flashattn-bench run --preset headline --dtype bf16 --methods auto --pass bwd --check none
M="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --pass fwd,bwd --peers --peers-script ./bin/peers-flex.py --complete-path none --check none"
run mods-window 110 ./bin/flashattn-bench $M --window 256,1024,4096
run mods-softcap 45 ./bin/flashattn-bench $M --softcap 30
run mods-alibi 45 ./bin/flashattn-bench $M --alibi
l=$(left); if [ $l -gt 40 ]; then ( timeout $(( l < 70 ? l - 5 : 65 )) ./bin/decode --tiles 16x16,16x32,16x128 --batch 16,64 --caches 65536,131072 ) > $R/decode-variants.log 2>&1; echo "decode variants rc $?"; el; fi
run decode16 80 ./bin/flashattn-bench run --preset headline --dtype bf16 --head-dims 128 --seqlens 65536,131072 --seqlen-q 1 --batch 16 --heads 32 --kv-heads 8 --mask none --methods flash-tc --tiles auto,16x16,16x32 --check none --complete-path none --peers --peers-script ./bin/peers-fast.py
for f in bwd-new bwd-mid; do echo "== $f"; grep -h "| bwd | gpu | ok" $R/$f/report.md | awk -F'|' '{print $2,$8}'; done
grep -h "ours / " -A12 $R/mods-*/report.md | grep "^|" | head -40
cat $R/decode-variants.log | head -30
grep -h "ours / torch" -A8 $R/decode16/report.md | head -10
cd /tmp && tar czf $OUT/results.tgz res
