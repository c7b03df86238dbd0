#!/usr/bin/env bash
# Session 20 call 1: v35 (causal persistent grid, tiles from a counter) and v36 (d = 64
# instances of 192 rows, three consumer warpgroups, behind a tile override). The whole GPU
# suite; memcheck, racecheck, synccheck on hopper::persistent_bf16 and hopper::rows192_bf16
# (small sets); A/B against main (cbb3f8d = `bench-old`) on the causal bf16 headline d = 64, 128,
# rotated three times (medians); d = 64 at 128 against 192 rows, bf16 headline both masks, in one
# process, twice.
set -uo pipefail
export OUT; R=$OUT/res; mkdir -p $R
start=$(date +%s)
el() { echo "elapsed $(( $(date +%s) - start ))"; }
left() { echo $(( 560 - ($(date +%s) - start) )); }
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b'); tarfile.open('.gpu/old.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
run() { local name=$1 lim=$2; shift 2; l=$(left); [ $l -gt 20 ] || { echo "skip $name"; return; }; [ $lim -lt $l ] || lim=$l; ( time timeout $lim "$@" --out /tmp/o-$name ) > $R/$name.log 2>&1; echo "$name rc $?"; el; }
W="run --seqlens 1024 --batch 1 --heads 2 --head-dims 64 --methods auto --check none --complete-path none --no-report"
( run warm-new 150 ./bin/flashattn-bench $W ) & ( run warm-old 150 ./bin/bench-old $W ) & wait; el
( ( time timeout 200 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?" >> $R/rc.txt ) &
for t in persistent_bf16 rows192_bf16; do for tool in memcheck racecheck synccheck; do
  ( FLASHATTN_TEST_SMALL=1 timeout 190 compute-sanitizer --tool $tool --error-exitcode 97 ./tests/gpu --test-threads 1 hopper::$t > $R/san-$tool-$t.log 2>&1; echo "$tool $t rc $?" >> $R/rc.txt ) &
done; done
wait; el
cat $R/rc.txt
grep -hE "^test .*FAILED|test result|persistent|rows192" $R/tests-all.log | head -20
for f in $R/san-*.log; do echo "$f: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test result' $f | tr '\n' ' ')"; done
grep -hA16 "^---- " $R/tests-all.log | head -40
A="run --preset headline --dtype bf16 --head-dims 64,128 --mask causal --methods auto --check none --complete-path none --no-report"
T="run --preset headline --dtype bf16 --head-dims 64 --methods flash-hopper --tiles 128x128,192x128 --check none --complete-path none --no-report"
for i in 1 2 3; do
  run ab-old-$i 30 ./bin/bench-old $A; run ab-new-$i 30 ./bin/flashattn-bench $A
  [ $i -le 2 ] && run tiles-$i 40 ./bin/flashattn-bench $T
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
t={}
for f in sorted(glob.glob(R+'/tiles-*.log')):
    for l in open(f):
        m=re.match(r'(\S+) flash-hopper (\S+): ([0-9.]+) ms',l)
        if m: t.setdefault(m.group(1),{}).setdefault(m.group(2),[]).append(float(m.group(3)))
for k,v in t.items():
    a=min(v.get('128x128',[0])); b=min(v.get('192x128',[0]))
    print('TILES %s 128 %s 192 %s change(min) %+.1f%%'%(k,v.get('128x128'),v.get('192x128'),100*(b/a-1) if a else 0))
PY
cd $R && tar czf $OUT/res.tgz . && cd / && rm -rf $R
el
