#!/usr/bin/env bash
# Session 20 call 2: v35b (every consumer thread arrives on Q-empty in the causal persistent
# instances) and v36 as the default for d <= 64 from 2048 queries. The whole GPU suite;
# racecheck of hopper::persistent_bf16 and hopper::rows192_bf16, memcheck of rows192 (small
# sets); then the bf16 and f16 headline forward at d = 64, 128 with FlashAttention-2 and cuDNN
# in the same run.
set -uo pipefail
export OUT; R=$OUT/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 565 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 20 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64 --methods auto --check none --complete-path none --no-report"
run warm 150 ./bin/flashattn-bench $W
( ( time timeout 200 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 timeout 230 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::persistent_bf16 > $R/san-racecheck-persistent_bf16.log 2>&1; echo "racecheck persistent rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 timeout 200 compute-sanitizer --tool racecheck --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::rows192_bf16 > $R/san-racecheck-rows192_bf16.log 2>&1; echo "racecheck rows192 rc $?" >> $R/rc.txt ) &
( FLASHATTN_TEST_SMALL=1 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::rows192_bf16 > $R/san-memcheck-rows192_bf16.log 2>&1; echo "memcheck rows192 rc $?" >> $R/rc.txt ) &
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|persistent|rows192" $R/tests-all.log | head -20
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result|Race' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -40
H="run --preset headline --head-dims 64,128 --methods auto --check none --complete-path none --ceilings 4.26,798 --peers --peers-script ./bin/peers-fast.py"
run fwd-bf16 100 ./bin/flashattn-bench $H --dtype bf16
run fwd-f16 100 ./bin/flashattn-bench $H --dtype f16
python3 - <<'PY' | tee $R/summary-peers.txt
import json,os
R=os.environ['OUT']+'/res'
for d in ['fwd-bf16','fwd-f16']:
    rows={}
    for fn in ['bench.jsonl','peers.jsonl']:
        p=os.path.join(R,d,fn)
        if not os.path.exists(p): continue
        for l in open(p):
            r=json.loads(l)
            if r.get('kind')=='row' and r.get('timing'):
                rows.setdefault(r['key'],{}).setdefault(r['method'],(r['timing']['median_ms'], r.get('tflops') or 0))
    for k,v in rows.items():
        fl=v.get('torch-flash'); c=v.get('torch-cudnn'); t=v.get('auto')
        if t: print(d,k,'auto %.4f ms %.1f TF'%t + (' x_fa2 %.3f'%(fl[0]/t[0]) if fl else '') + (' x_cudnn %.3f'%(c[0]/t[0]) if c else ''))
PY
cd $R && tar czf $OUT/res.tgz . && cd / && rm -rf $R
el
