#!/usr/bin/env bash
# Session 19 call 3: v34b (the persistent instances with their loop rewritten for ptxas's
# uniform datapath). The whole GPU suite beside memcheck, racecheck and synccheck on
# hopper::persistent_bf16 (small set); A/B against the session's start (148e4fe = `bench-old`),
# alternated twice: bf16 headline forward d = 64, 128, and d = 96, 192 at N = 4096 (B = 4,
# H = 16); then v34b's bf16 and f16 headline forward (d = 64, 128, 256) with FA2 and cuDNN.
set -uo pipefail
export OUT; R=$OUT/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 560 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b'); tarfile.open('.gpu/old.txz').extractall('/tmp/b')"
cp .gpu/peers-fast.py /tmp/b/bundle/bin/
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64 --methods auto --check none --complete-path none --no-report"
( run warm-new 150 ./bin/flashattn-bench $W ) & ( run warm-old 150 ./bin/bench-old $W ) & wait; el
( ( time timeout 200 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
for tool in memcheck racecheck synccheck; do
  ( FLASHATTN_TEST_SMALL=1 timeout 190 compute-sanitizer --tool $tool --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::persistent_bf16 > $R/san-$tool-persistent_bf16.log 2>&1; echo "$tool rc $?" >> $R/rc.txt ) &
done
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|persistent" $R/tests-all.log | head -20
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -40
A="run --preset headline --dtype bf16 --head-dims 64,128 --methods auto --check none --complete-path none --no-report"
B="run --seqlens 4096 --batch 4 --heads 16 --head-dims 96,192 --dtype bf16 --methods auto --check none --complete-path none --no-report"
for i in 1 2; do
  run ab-old-$i 40 ./bin/bench-old $A; run ab-new-$i 40 ./bin/flashattn-bench $A
  run hd-old-$i 30 ./bin/bench-old $B; run hd-new-$i 30 ./bin/flashattn-bench $B
done
python3 - <<'PY' | tee $R/summary-ab.txt
import re,glob,os
R=os.environ['OUT']+'/res'
res={}
for f in sorted(glob.glob(R+'/ab-*.log')+glob.glob(R+'/hd-*.log')):
    b=os.path.basename(f).split('-')[1]
    for l in open(f):
        m=re.match(r'(\S+) auto: ([0-9.]+) ms',l)
        if m: res.setdefault(m.group(1),{}).setdefault(b,[]).append(float(m.group(2)))
for k,v in res.items():
    o=min(v.get('old',[0])); n=min(v.get('new',[0]))
    print('AB %s old %s new %s change %+.1f%%'%(k,v.get('old'),v.get('new'),100*(n/o-1) if o else 0))
PY
H="run --preset headline --head-dims 64,128,256 --methods auto --check none --complete-path none --ceilings 4.26,798 --peers --peers-script ./bin/peers-fast.py"
run fwd-bf16 110 ./bin/flashattn-bench $H --dtype bf16
run fwd-f16 110 ./bin/flashattn-bench $H --dtype f16
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
                rows.setdefault(r['key'],{})[r['method']]=(r['timing']['median_ms'], r.get('tflops') or 0)
    for k,v in rows.items():
        fl=v.get('torch-flash'); c=v.get('torch-cudnn'); t=v.get('auto')
        if t: print(d,k,'auto %.4f ms %.1f TF'%t + (' x_fa2 %.3f'%(fl[0]/t[0]) if fl else '') + (' x_cudnn %.3f'%(c[0]/t[0]) if c else ''))
PY
cd $R && tar czf $OUT/res.tgz . && cd / && rm -rf $R
el
