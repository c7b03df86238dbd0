#!/usr/bin/env bash
# Session 20 call 3: v37 (lazy rescale in the Hopper inference instances). The whole GPU suite;
# A/B against main 1792dda (`bench-old`): bf16 headline forward d = 64, 128, 256, both masks,
# the two builds alternated four times (medians).
set -uo pipefail
export OUT; R=$OUT/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 450 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b'); tarfile.open('.gpu/old.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 15 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out /tmp/o-$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64 --methods auto --check none --complete-path none --no-report"
( run warm-new 150 ./bin/flashattn-bench $W ) & ( run warm-old 150 ./bin/bench-old $W ) & wait; el
( time timeout 170 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?"; el
grep -hE "^test .*FAILED|test result" $R/tests-all.log | head -20
grep -hA16 "^---- " $R/tests-all.log | head -40
A="run --preset headline --dtype bf16 --head-dims 64,128,256 --methods auto --check none --complete-path none --no-report"
for i in 1 2 3 4; do
  run ab-old-$i 25 ./bin/bench-old $A; run ab-new-$i 25 ./bin/flashattn-bench $A
done
python3 - <<'PY' | tee $R/summary.txt
import re,glob,os,statistics
R=os.environ['OUT']+'/res'
res={}
for f in sorted(glob.glob(R+'/ab-*.log')):
    b=os.path.basename(f).split('-')[1]
    for l in open(f):
        m=re.match(r'(\S+) auto: ([0-9.]+) ms',l)
        if m: res.setdefault(m.group(1),{}).setdefault(b,[]).append(float(m.group(2)))
for k,v in res.items():
    o=statistics.median(v.get('old',[0])); n=statistics.median(v.get('new',[0]))
    print('AB %s old %s new %s change(median) %+.1f%%'%(k,v.get('old'),v.get('new'),100*(n/o-1) if o else 0))
PY
cd $R && tar czf $OUT/res.tgz . && cd / && rm -rf $R
el
