#!/usr/bin/env bash
# Session 13 call 6 (924b4ae, the final code: call 3's kernels, the forward's host checks shared
# by Device::attention and Device::attention_for_backward): the whole GPU suite.
set -uo pipefail
R=/tmp/res; rm -rf $R; mkdir -p $R
python3 -c "import tarfile; tarfile.open('.gpu/new.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; cat COMMIT
export FLASHATTN_REQUIRE_GPU=1
( time timeout 220 ./tests/gpu --test-threads 8 ) > $R/tests-all.log 2>&1; echo "suite rc $?"
grep -hE "^test .*FAILED|test result|backward shapes|backward random" $R/tests-all.log | head -20
grep -hA16 "^---- " $R/tests-all.log | head -60
cd /tmp && tar czf $OUT/results.tgz res
