#!/usr/bin/env bash
# Session 15 call 3 (b26 on b23; b24/b25 reverted): the whole GPU suite beside memcheck on
# backward::shapes_bf16 and racecheck on backward::deterministic_bit_identical (its small set now
# holds d = 64's two-warpgroup block); then the bf16 and f16 headline backward with d = 64's
# default block and the two-warpgroup block (--tiles auto,64x128) and FA2/cuDNN in the same run;
# the masks' backward (FlexAttention); ncu of the two-warpgroup d = 64 main kernel.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 575 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py .gpu/peers-flex.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 200 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::shapes_bf16 > $R/san-memcheck-backwardshapes_bf16.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::deterministic_bit_identical > $R/san-racecheck-backwarddeterministic.log 2>&1; echo "racecheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool synccheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::deterministic_bit_identical > $R/san-synccheck-backwarddeterministic.log 2>&1; echo "synccheck rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule|backward shapes" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -60
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
H="run --preset headline --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd --bwd-from residuals --tiles auto,64x128 --peers --peers-script ./bin/peers-fast.py"
run bwd-bf16 90 ./bin/flashattn-bench $H --dtype bf16
run bwd-f16 90 ./bin/flashattn-bench $H --dtype f16
M="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --pass bwd --complete-path none --check none --peers --peers-script ./bin/peers-flex.py"
run mods-window 60 ./bin/flashattn-bench $M --window 256,1024
run mods-alibi 40 ./bin/flashattn-bench $M --alibi
run mods-softcap 40 ./bin/flashattn-bench $M --softcap 30
l=$(left); if [ $l -gt 40 ]; then
  timeout $(( l - 15 )) ncu --clock-control none --set full --import-source no -k regex:flash_bwd_bf16_d64_w8 --launch-count 1 -o $R/bwd-d64w8 \
    ./bin/flashattn-bench run --preset headline --dtype bf16 --head-dims 64 --seqlens 4096 --mask none --methods auto --tiles 64x128 --pass bwd \
    --check none --complete-path none --reps 1 --warmup-ms 1 --no-report --out $R/x64 > $R/ncu-bwd-d64w8.log 2>&1
  echo "ncu rc $?"; el
  ncu --import $R/bwd-d64w8.ncu-rep --page details > $R/bwd-d64w8-details.txt 2>&1
  ncu --import $R/bwd-d64w8.ncu-rep --page source --csv --print-source sass > $R/bwd-d64w8-sass.csv 2>&1
  grep -E "flash_bwd|Duration|Registers Per|Issue Slots Busy|Eligible Warps|No Eligible|L2 Cache Throughput" $R/bwd-d64w8-details.txt | head -20
  rm -f $R/bwd-d64w8.ncu-rep
fi
python3 - <<'PY'
import json,os
R='/tmp/res'
def rows(d):
    out={}
    for fn in ['bench.jsonl','peers.jsonl']:
        p=os.path.join(R,d,fn)
        if not os.path.exists(p): continue
        for l in open(p):
            r=json.loads(l)
            if r.get('kind')=='row' and r.get('timing'):
                m=r['method']+('@'+r['tiles'] if r.get('tiles') else '')
                out.setdefault(r['key'],{})[m]=(r['timing']['median_ms'], r.get('tflops') or 0)
    return out
for d in ['bwd-bf16','bwd-f16','mods-window','mods-alibi','mods-softcap']:
    for k,v in rows(d).items():
        fl=v.get('torch-flash'); c=v.get('torch-cudnn'); fx=v.get('torch-flex')
        parts=[]
        for m,t in v.items():
            if m.startswith('torch'): continue
            parts.append('%s %.4f ms %.1f TF'%(m,t[0],t[1]) + (' x_fa2 %.3f'%(fl[0]/t[0]) if fl else '') + (' x_cudnn %.3f'%(c[0]/t[0]) if c else '') + (' x_flex %.3f'%(fx[0]/t[0]) if fx else ''))
        print(d, k, ' | '.join(parts))
PY
el
cd /tmp && tar czf $OUT/results.tgz res
