#!/usr/bin/env bash
# Session 19 call 4: v34c (the persistent instances read their tile parameters again each tile;
# d = 256 gets one, its output staged in the Q tile). The Hopper tests (hopper::*) beside
# memcheck, racecheck and synccheck on hopper::persistent_bf16 (small set: d = 64, 128, 256);
# A/B against the session's start (148e4fe = `bench-old`), alternated twice: bf16 headline
# forward d = 64, 128, 256; then the bf16 forward at d = 96 and 192 (N = 4096, B = 4, H = 16,
# non-causal and causal) with FA2 and cuDNN.
set -uo pipefail
export OUT; R=$OUT/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 480 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b'); tarfile.open('.gpu/old.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 20 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 256 --methods auto --check none --complete-path none --no-report"
( run warm-new 150 ./bin/flashattn-bench $W ) & ( run warm-old 150 ./bin/bench-old $W ) & wait; el
( ( time timeout 150 ./tests/gpu --test-threads 8 hopper:: ) > $R/tests-hopper.log 2>&1; echo "hopper rc $?" >> $R/rc.txt ) &
for tool in memcheck racecheck synccheck; do
  ( FLASHATTN_TEST_SMALL=1 timeout 140 compute-sanitizer --tool $tool --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::persistent_bf16 > $R/san-$tool-persistent_bf16.log 2>&1; echo "$tool rc $?" >> $R/rc.txt ) &
done
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|persistent" $R/tests-hopper.log | head -20
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-hopper.log | head -40
A="run --preset headline --dtype bf16 --head-dims 64,128,256 --mask none --methods auto --check none --complete-path none --no-report"
for i in 1 2; do run ab-old-$i 40 ./bin/bench-old $A; run ab-new-$i 40 ./bin/flashattn-bench $A; done
python3 - <<'PY' | tee $R/summary-ab.txt
import re,glob,os
R=os.environ['OUT']+'/res'
res={}
for f in sorted(glob.glob(R+'/ab-*.log')):
    b=os.path.basename(f).split('-')[1]
    for l in open(f):
        m=re.match(r'(\S+) auto: ([0-9.]+) ms',l)
        if m: res.setdefault(m.group(1),{}).setdefault(b,[]).append(float(m.group(2)))
for k,v in res.items():
    o=min(v.get('old',[0])); n=min(v.get('new',[0]))
    print('AB %s old %s new %s change %+.1f%%'%(k,v.get('old'),v.get('new'),100*(n/o-1) if o else 0))
PY
run hd-peers 120 ./bin/flashattn-bench run --seqlens 4096 --batch 4 --heads 16 --head-dims 96,192 --dtype bf16 --mask none,causal --methods auto --check none --complete-path none --peers --peers-script ./bin/peers-fast.py
python3 - <<'PY' | tee $R/summary-peers.txt
import json,os
R=os.environ['OUT']+'/res'
rows={}
for fn in ['bench.jsonl','peers.jsonl']:
    p=os.path.join(R,'hd-peers',fn)
    if not os.path.exists(p): continue
    for l in open(p):
        r=json.loads(l)
        if r.get('kind')=='row' and r.get('timing'):
            rows.setdefault(r['key'],{})[r['method']]=(r['timing']['median_ms'], r.get('tflops') or 0)
for k,v in rows.items():
    fl=v.get('torch-flash'); c=v.get('torch-cudnn'); t=v.get('auto')
    if t: print(k,'auto %.4f ms %.1f TF'%t + (' x_fa2 %.3f'%(fl[0]/t[0]) if fl else '') + (' x_cudnn %.3f'%(c[0]/t[0]) if c else ''))
PY
cd $R && tar czf $OUT/res.tgz . && cd / && rm -rf $R
el
