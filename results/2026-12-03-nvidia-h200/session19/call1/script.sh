#!/usr/bin/env bash
# Session 19 call 1: v34 (the Hopper forward's persistent instances). The whole GPU suite
# (hopper::persistent_* among it) beside memcheck, racecheck and synccheck on
# hopper::persistent_bf16 (small set); then A/B in one process order, builds alternated twice
# (the session's start 148e4fe = `bench-old`, against v34): bf16 headline forward at d = 64, 128
# (non-causal rows run the persistent instances, causal rows the one-tile ones: the control).
set -uo pipefail
export OUT; R=$OUT/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 560 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b'); tarfile.open('.gpu/old.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; cat COMMIT; ls bin
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 30 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out $R/$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64 --methods auto --check none --complete-path none --no-report"
( run warm-new 150 ./bin/flashattn-bench $W ) & ( run warm-old 150 ./bin/bench-old $W ) & wait; el
( ( time timeout 230 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
for tool in memcheck racecheck synccheck; do
  ( FLASHATTN_TEST_SMALL=1 timeout 220 compute-sanitizer --tool $tool --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::persistent_bf16 > $R/san-$tool-persistent_bf16.log 2>&1; echo "$tool rc $?" >> $R/rc.txt ) &
done
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|worst rule|persistent" $R/tests-all.log | head -30
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -60
A="run --preset headline --dtype bf16 --head-dims 64,128 --methods auto --check none --complete-path none --no-report"
run ab-old-1 40 ./bin/bench-old $A
run ab-new-1 40 ./bin/flashattn-bench $A
run ab-old-2 40 ./bin/bench-old $A
run ab-new-2 40 ./bin/flashattn-bench $A
python3 - <<'PY' | tee $R/summary.txt
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
cd $R && tar czf $OUT/res.tgz . && cd / && rm -rf $R
el
