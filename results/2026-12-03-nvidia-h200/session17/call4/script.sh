#!/usr/bin/env bash
# Session 17 call 4: the final build's Python wheel (c7150b5: b32's kernels, b31 at d = 256),
# its CUDA backward tests through torch.autograd (d = 256 among them: the tensor maps of the
# external entry point's Q and dO).
set -uo pipefail
export CUDA_CACHE_MAXSIZE=4294967296
python3 -c "import tarfile; tarfile.open('.gpu/py.txz').extractall('/tmp/b')"
cd /tmp/b/bundle; cat COMMIT
( time timeout 330 ./run.sh python -k backward -q ) > $OUT/python-backward.log 2>&1; echo "python rc $?"
tail -15 $OUT/python-backward.log
