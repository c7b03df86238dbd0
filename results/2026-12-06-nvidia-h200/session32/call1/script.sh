#!/usr/bin/env bash
# Session 32 call 1: b46 (dQ written by the main kernel: each query tile's last key block
# converts it; "new" also keeps the accumulator zeroed between calls, "nork" zeroes it in the
# preprocessing kernel as before) against main ("old", dba98c3: the key-major fix, PTX of 01f1973).
# (1) JIT warm-up of the three builds; (2) the GPU suite's backward tests on new, memcheck and
# racecheck of backward::shapes_bf16 (small); (3) a quick A/B at N = 16384, H = 16, d = 128,
# causal, windows 256/1024/4096 and plain, from residuals, alternated three times.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 570 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/b.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; ls bin tests; cat COMMIT
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt; cat $R/gpu.txt
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64,128,256 --mask causal --methods auto --pass bwd --bwd-from residuals --check none --complete-path none --no-report --window 256"
( run warm-new 150 ./bin/bench-new $W ) & ( run warm-old 150 ./bin/bench-old $W ) & wait; el
( ( time timeout 200 ./tests/gpu-new --test-threads 4 backward:: ) > $R/tests-backward.log 2>&1; echo "backward tests rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu-new --test-threads 1 backward::shapes_bf16 > $R/san-memcheck-shapes_bf16.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=2 timeout 200 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu-new --test-threads 1 backward::shapes_bf16 > $R/san-racecheck-shapes_bf16.log 2>&1; echo "racecheck rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule" $R/tests-*.log | head -20
grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $R/san-*.log
grep -hA16 "^---- " $R/tests-*.log | head -40
bin_of() { echo ./bin/bench-$1; }
M="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --no-report --mask causal"
for i in 1 2 3; do
  for b in old new nork; do
    run ab-$b-$i-win 40 $(bin_of $b) $M --window 256,1024,4096 --dtype bf16
    run ab-$b-$i-plain 30 $(bin_of $b) $M --dtype bf16
  done
done
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
                t=r.get('timing'); k=r['key']
                if t and not r.get('tiles'): out.setdefault(k,{})[r['method']]=(t['median_ms'], r.get('tflops') or 0)
    return out
for kind in ['win','plain']:
    o=[rows('ab-old-%d-%s'%(i,kind)) for i in (1,2,3)]
    for v in ('new','nork'):
        n=[rows('ab-%s-%d-%s'%(v,i,kind)) for i in (1,2,3)]
        for k in o[0]:
            try:
                a=min(x[k]['auto'][0] for x in o); b=min(x[k]['auto'][0] for x in n)
                print('AB %s %s %s old %.4f new %.4f change %+.1f%% (runs old %s new %s)'%(v,kind,k,a,b,100*(b/a-1),[round(x[k]['auto'][0],4) for x in o],[round(x[k]['auto'][0],4) for x in n]))
            except (KeyError,ValueError): pass
PY
el
cd /tmp && tar czf $OUT/results.tgz res
