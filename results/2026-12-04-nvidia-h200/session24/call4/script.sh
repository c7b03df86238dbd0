#!/usr/bin/env bash
# Session 24 call 4 (578334e): b39b (the ALiBi instance forms each score's whole exponent, two
# FMAs a score with the causal mask). The backward GPU tests beside memcheck
# (backward::shapes_bf16, small) and racecheck (backward::random_score_modifiers_bf16, small);
# A/B against b37 (82e824a = `bench-b37`), builds alternated twice: N = 16384, B = 1, H = 16,
# d = 128, backward from residuals, ALiBi causal and not (bf16), ALiBi causal f16, plain
# causal as the control; then the masked rows of issue 13 with FlexAttention in the same run
# (ALiBi); Nsight Compute kernel durations of the ALiBi and plain causal backward.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 575 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b'); tarfile.open('.gpu/old.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py .gpu/peers-flex.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT; ls bin
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 128 --mask causal --alibi --methods auto --pass bwd --check none --complete-path none --no-report"
( run warm-new 150 ./bin/flashattn-bench $W ) & ( run warm-b37 150 ./bin/bench-b37 $W ) & wait; el
( ( time timeout 210 ./tests/gpu --test-threads 8 backward:: ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::shapes_bf16 > $R/san-memcheck-backwardshapes_bf16.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 200 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::random_score_modifiers_bf16 > $R/san-racecheck-backwardmods.log 2>&1; echo "racecheck rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule|backward shapes|backward random" $R/tests-all.log | head -40
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -60
M="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --no-report"
for i in 1 2; do
  for b in b37 new; do
    bin=./bin/flashattn-bench; [ $b = b37 ] && bin=./bin/bench-b37
    run ab-$b-$i-alibi 35 $bin $M --alibi --mask none,causal --dtype bf16
    run ab-$b-$i-alibif16 22 $bin $M --alibi --mask causal --dtype f16
    run ab-$b-$i-plain 22 $bin $M --mask causal --dtype bf16
  done
done
F="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --peers --peers-script ./bin/peers-flex.py"
run mods-alibi 40 ./bin/flashattn-bench $F --alibi
for m in alibi plain; do
  l=$(left); [ $l -gt 40 ] || { echo "skip ncu $m"; continue; }
  extra=""; [ $m = alibi ] && extra="--alibi"
  timeout 35 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    ./bin/flashattn-bench run --seqlens 16384 --batch 1 --heads 16 --dtype bf16 --head-dims 128 --mask causal $extra --methods auto --pass bwd \
    --bwd-from residuals --check none --complete-path none --reps 2 --warmup-ms 1 --no-report --out /tmp/x-$m > $R/ncu-times-$m.csv 2> $R/ncu-times-$m.err
  echo "ncu $m rc $?"; el
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
                t=r.get('timing')
                if t: out.setdefault(r['key']+('' if not r.get('tiles') else ' tiles='+r['tiles']),{})[r['method']]=(t['median_ms'], r.get('tflops') or 0)
                else: print('no timing', d, r['key'], r['method'], r.get('status'))
    return out
for kind in ['alibi','alibif16','plain']:
    o=[rows('ab-b37-%d-%s'%(i,kind)) for i in (1,2)]
    for nb in ['new']:
        n=[rows('ab-%s-%d-%s'%(nb,i,kind)) for i in (1,2)]
        if not n[0]: continue
        for k in o[0]:
            try:
                a=min(x[k]['auto'][0] for x in o); b=min(x[k]['auto'][0] for x in n)
                print('AB %s %s %s b37 %.4f %s %.4f change %+.1f%% (runs b37 %s %s %s)'%(kind,nb,k,a,nb,b,100*(b/a-1),[round(x[k]['auto'][0],4) for x in o],nb,[round(x[k]['auto'][0],4) for x in n]))
            except KeyError: print('AB missing',kind,nb,k)
for d in ['mods-alibi']:
    for k,v in rows(d).items():
        fx=v.get('torch-flex'); t=v.get('auto')
        if t: print(d,k,'auto %.4f ms %.1f TF'%t + (' flex %.4f ms %.1f TF x_flex %.3f'%(fx[0],fx[1],fx[0]/t[0]) if fx else ''))
PY
for m in alibi plain; do echo "ncu $m"; awk -F'","' '/gpu__time/{gsub(/"/,"",$NF); print $5, $NF}' $R/ncu-times-$m.csv 2>/dev/null | grep flash_bwd | head -9; done
el
cd /tmp && tar czf $OUT/results.tgz res
