#!/usr/bin/env bash
# Session 18 call 1: b34 (the window instances' main kernel takes the unmasked P/dS variant on
# key spans every row of the warp sees). The backward tests beside memcheck (backward shapes,
# small) and racecheck (score modifiers, small); then A/B in one process order, builds
# alternated twice (the session's start 070d03a = `bench-old`, against b34): N = 16384, B = 1,
# H = 16, d = 128 (and d = 64 windows), bf16, causal, backward from residuals, windows 256 /
# 1024 / 4096, ALiBi, softcap 30; b34's masked rows with FlexAttention in the same run; then
# Nsight Compute kernel durations of one d = 64 backward (bf16 and f16, B = 4, N = 4096): where
# f16's extra 2–3% over bf16 outside the main kernel goes.
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
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64 --methods auto --pass bwd --check none --complete-path none --no-report"
( run warm-new 150 ./bin/flashattn-bench $W ) & ( run warm-old 150 ./bin/bench-old $W ) & wait; el
( ( time timeout 200 ./tests/gpu --test-threads 8 backward:: ) > $R/tests-backward.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::shapes_bf16 > $R/san-memcheck-backwardshapes_bf16.log 2>&1; echo "memcheck rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 FLASHATTN_GPU_CASES=3 timeout 195 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu --test-threads 1 backward::random_score_modifiers_bf16 > $R/san-racecheck-backwardmods.log 2>&1; echo "racecheck rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule|backward shapes|backward random" $R/tests-backward.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-backward.log | head -60
M="run --seqlens 16384 --batch 1 --heads 16 --mask causal --dtype bf16 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --no-report"
for i in 1 2; do
  for b in old new; do
    bin=./bin/flashattn-bench; [ $b = old ] && bin=./bin/bench-old
    run ab-$b-$i-win 40 $bin $M --head-dims 64,128 --window 256,1024,4096
    run ab-$b-$i-alibi 25 $bin $M --head-dims 128 --alibi
    run ab-$b-$i-softcap 25 $bin $M --head-dims 128 --softcap 30
  done
done
F="run --seqlens 16384 --batch 1 --heads 16 --head-dims 128 --mask causal --dtype bf16 --methods auto --pass bwd --bwd-from residuals --complete-path none --check none --peers --peers-script ./bin/peers-flex.py"
run mods-window 70 ./bin/flashattn-bench $F --window 256,1024,4096
run mods-alibi 40 ./bin/flashattn-bench $F --alibi
run mods-softcap 40 ./bin/flashattn-bench $F --softcap 30
for dt in bf16 f16; do
  l=$(left); [ $l -gt 40 ] || { echo "skip ncu $dt"; continue; }
  timeout 35 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    ./bin/flashattn-bench run --seqlens 4096 --batch 4 --heads 32 --dtype $dt --head-dims 64 --mask none --methods auto --pass bwd \
    --bwd-from residuals --check none --complete-path none --reps 2 --warmup-ms 1 --no-report --out /tmp/x-$dt > $R/ncu-times-$dt.csv 2> $R/ncu-times-$dt.err
  echo "ncu $dt rc $?"; el
done
# Issue 11: where the Hopper forward's time goes at N = 1024 (8 key tiles a block) against
# N = 16384, d = 128, bf16, non-causal (the inference instance, as the headline).
for n in 1024 16384; do
  l=$(left); [ $l -gt 45 ] || { echo "skip ncu fwd $n"; continue; }
  timeout 40 ncu --clock-control none --set full --import-source no -k regex:flash_fwd_wgmma --launch-count 1 -o /tmp/fwd-$n \
    ./bin/flashattn-bench run --seqlens $n --batch $((16384 / n)) --heads 16 --dtype bf16 --head-dims 128 --mask none --methods auto \
    --check none --complete-path none --reps 1 --warmup-ms 1 --no-report --out /tmp/xf-$n > $R/ncu-fwd-$n.log 2>&1
  echo "ncu fwd $n rc $?"; el
  ncu --import /tmp/fwd-$n.ncu-rep --page details > $R/fwd-d128-n$n-details.txt 2>&1
  ncu --import /tmp/fwd-$n.ncu-rep --page source --csv --print-source sass > $R/fwd-d128-n$n-sass.csv 2>/dev/null
  grep -E "flash_fwd|Duration|Registers Per|Issue Slots Busy|Eligible Warps|No Eligible|L2 Cache Throughput|Compute \(SM\) Throughput|Memory Throughput|Tensor" $R/fwd-d128-n$n-details.txt | head -16
done
python3 - <<'PY'
import json,os,glob,csv
R='/tmp/res'
def rows(d):
    out={}
    for fn in ['bench.jsonl','peers.jsonl']:
        p=os.path.join(R,d,fn)
        if not os.path.exists(p): continue
        for l in open(p):
            r=json.loads(l)
            if r.get('kind')=='row':
                m=r['method']
                t=r.get('timing')
                if t: out.setdefault(r['key'],{})[m]=(t['median_ms'], r.get('tflops') or 0)
                else: print('no timing', d, r['key'], m, r.get('status'))
    return out
for kind in ['win','alibi','softcap']:
    o=[rows('ab-old-%d-%s'%(i,kind)) for i in (1,2)]; n=[rows('ab-new-%d-%s'%(i,kind)) for i in (1,2)]
    for k in o[0]:
        try:
            a=min(x[k]['auto'][0] for x in o); b=min(x[k]['auto'][0] for x in n)
            print('AB %s %s old %.4f new %.4f change %+.1f%%'%(kind,k,a,b,100*(b/a-1)))
        except KeyError: print('AB missing',kind,k)
for d in ['mods-window','mods-alibi','mods-softcap']:
    for k,v in rows(d).items():
        fx=v.get('torch-flex'); t=v.get('auto')
        if t: print(d,k,'auto %.4f ms %.1f TF'%t + (' flex %.4f ms %.1f TF x_flex %.3f'%(fx[0],fx[1],fx[0]/t[0]) if fx else ''))
for dt in ['bf16','f16']:
    p=os.path.join(R,'ncu-times-%s.csv'%dt)
    if not os.path.exists(p): continue
    lines=[l for l in open(p) if l.startswith('"')]
    if not lines: continue
    rd=csv.DictReader(lines)
    for r in rd:
        if r.get('Metric Name')=='gpu__time_duration.sum':
            print('ncu',dt,r['ID'],r['Kernel Name'][:60],r['Metric Value'],r['Metric Unit'])
PY
el
cd /tmp && tar czf $OUT/results.tgz res
