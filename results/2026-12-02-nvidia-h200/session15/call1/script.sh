#!/usr/bin/env bash
# Session 15 call 1: b24 (71b5551: b23's copies under S/dP + predicated dQ adds) — the whole GPU
# suite beside memcheck on backward::shapes_bf16 and racecheck on
# backward::deterministic_bit_identical; then alone, the bf16 headline backward of the session's
# starting build (4b11661, `old`), b23 (0b31df7) and b24 alternated (b24 with FA2/cuDNN), the f16
# headline backward of b24 (FA2/cuDNN), the masks' backward (FlexAttention) of b24 and old.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 575 - ($(date +%s) - start) )); }
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
for v in old b23; do python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('.gpu/$v-bench.xz'), open('/tmp/b/bundle/bin/$v-bench','wb'))"; chmod +x /tmp/b/bundle/bin/$v-bench; done
cp .gpu/peers-fast.py .gpu/peers-flex.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT; nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv
export FLASHATTN_REQUIRE_GPU=1
( ( time timeout 190 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 185 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::shapes_bf16 > $R/san-memcheck-backwardshapes_bf16.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 185 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::deterministic_bit_identical > $R/san-racecheck-backwarddeterministic.log 2>&1; echo "racecheck rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule|backward shapes" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -60
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
H="run --preset headline --methods auto --check none --complete-path none --ceilings 4.26,798 --pass bwd --bwd-from residuals"
run bwd-old 45 ./bin/old-bench $H --dtype bf16
run bwd-b23 45 ./bin/b23-bench $H --dtype bf16
run bwd-bf16 80 ./bin/flashattn-bench $H --dtype bf16 --peers --peers-script ./bin/peers-fast.py
run bwd-old2 45 ./bin/old-bench $H --dtype bf16
run bwd-f16 80 ./bin/flashattn-bench $H --dtype f16 --peers --peers-script ./bin/peers-fast.py
M="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --pass bwd --complete-path none --check none"
run mods-window 60 ./bin/flashattn-bench $M --window 256,1024 --peers --peers-script ./bin/peers-flex.py
run mods-alibi 40 ./bin/flashattn-bench $M --alibi --peers --peers-script ./bin/peers-flex.py
run mods-old 40 ./bin/old-bench $M --alibi
run mods-old-w 40 ./bin/old-bench $M --window 256,1024
python3 - <<'PY'
import json,glob,os
R='/tmp/res'
def rows(d):
    out={}
    for fn in ['bench.jsonl','peers.jsonl']:
        p=os.path.join(R,d,fn)
        if not os.path.exists(p): continue
        for l in open(p):
            r=json.loads(l)
            if r.get('kind')=='row' and r.get('timing'): out.setdefault(r['key'],{})[r['method']]=(r['timing']['median_ms'], r.get('tflops') or 0)
    return out
old=rows('bwd-old'); old2=rows('bwd-old2'); b23=rows('bwd-b23'); new=rows('bwd-bf16'); f16=rows('bwd-f16')
for k,v in new.items():
    a=v.get('auto'); fl=v.get('torch-flash'); c=v.get('torch-cudnn')
    o=old.get(k,{}).get('auto'); o2=old2.get(k,{}).get('auto'); b=b23.get(k,{}).get('auto')
    print(k, 'new %.4f'%a[0] if a else '-', 'old %.4f'%o[0] if o else '-', 'old2 %.4f'%o2[0] if o2 else '-', 'b23 %.4f'%b[0] if b else '-',
      'new/old %.3f'%(a[0]/o[0]) if a and o else '', 'b23/old %.3f'%(b[0]/o[0]) if b and o else '', 'x_fa2 %.3f'%(fl[0]/a[0]) if a and fl else '', 'x_cudnn %.3f'%(c[0]/a[0]) if a and c else '')
for k,v in f16.items():
    a=v.get('auto'); fl=v.get('torch-flash'); c=v.get('torch-cudnn')
    print(k, 'new %.4f %.1f TF'%a if a else '-', 'x_fa2 %.3f'%(fl[0]/a[0]) if a and fl else '', 'x_cudnn %.3f'%(c[0]/a[0]) if a and c else '')
for d in ['mods-window','mods-alibi','mods-old','mods-old-w']:
    for k,v in rows(d).items():
        print(d, k, {m:'%.4f ms %.1f TF'%t for m,t in v.items()})
PY
el
cd /tmp && tar czf $OUT/results.tgz res
