#!/usr/bin/env bash
# Session 11 call 5: main 3d49e3a (b15 kept, b14 and the interleaved decode splits reverted; its
# PTX is e8e3dc0's) — whole GPU suite and compute-sanitizer on the backward; the bf16 and f16
# headline backward with FA2/cuDNN in the same run; the masked backward (window 1024, softcap 30,
# ALiBi) with FlexAttention.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 420 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py .gpu/peers-flex.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 200 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
san() {
  ( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 190 compute-sanitizer --tool $1 --error-exitcode 97 ./tests/gpu --test-threads 1 $2 > $R/san-$1-$(echo $2 | tr -d ':').log 2>&1; echo "$1 $2 rc $?" >> $R/rc.txt ) &
}
san memcheck backward::shapes_bf16
san racecheck backward::shapes_bf16
san memcheck backward::deterministic_bit_identical
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA14 "^---- " $R/tests-all.log | head -50
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
B="run --preset headline --methods auto --pass bwd --check none --complete-path none --peers --peers-script ./bin/peers-fast.py"
run bwd-bf16 90 ./bin/flashattn-bench $B --dtype bf16
run bwd-f16 90 ./bin/flashattn-bench $B --dtype f16
M="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --pass bwd --peers --peers-script ./bin/peers-flex.py --complete-path none --check none"
run mods-window 50 ./bin/flashattn-bench $M --window 1024
run mods-softcap 50 ./bin/flashattn-bench $M --softcap 30
run mods-alibi 50 ./bin/flashattn-bench $M --alibi
for f in bwd-bf16 bwd-f16 mods-window mods-softcap mods-alibi; do echo "== $f"; grep -h "ours / torch" -A22 $R/$f/report.md | grep "^| \`"; done
cd /tmp && tar czf $OUT/results.tgz res
