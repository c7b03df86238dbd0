#!/usr/bin/env bash
# Session 16 call 4: the final build (b29's kernels; b30 reverted). The whole GPU suite beside
# memcheck on backward::shapes_bf16 and racecheck/synccheck on
# backward::deterministic_bit_identical (small sets); then the bf16 and f16 headline backward
# (d = 64, 128, 256) with FA2 and cuDNN in the same run, and the masks' backward against
# FlexAttention (N = 16384, d = 128, causal).
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 575 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py .gpu/peers-flex.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT; ls bin
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64 --methods auto --pass bwd --check none --complete-path none --no-report"
run warm 150 ./bin/flashattn-bench $W
( ( time timeout 200 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::shapes_bf16 > $R/san-memcheck-backwardshapes_bf16.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::deterministic_bit_identical > $R/san-racecheck-backwarddeterministic.log 2>&1; echo "racecheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool synccheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::deterministic_bit_identical > $R/san-synccheck-backwarddeterministic.log 2>&1; echo "synccheck rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule|backward shapes|backward random" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -60
H="run --preset headline --head-dims 64,128,256 --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd --bwd-from residuals --peers --peers-script ./bin/peers-fast.py"
run bwd-bf16 110 ./bin/flashattn-bench $H --dtype bf16
run bwd-f16 110 ./bin/flashattn-bench $H --dtype f16
M="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --pass bwd --complete-path none --check none --peers --peers-script ./bin/peers-flex.py"
run mods-window 60 ./bin/flashattn-bench $M --window 256,1024
run mods-alibi 40 ./bin/flashattn-bench $M --alibi
run mods-softcap 40 ./bin/flashattn-bench $M --softcap 30
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
            if r.get('kind')=='row':
                m=r['method']+('@'+r['tiles'] if r.get('tiles') else '')
                t=r.get('timing')
                if t: out.setdefault(r['key'],{})[m]=(t['median_ms'], r.get('tflops') or 0)
                else: print('no timing', d, r['key'], m, r.get('status'))
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
