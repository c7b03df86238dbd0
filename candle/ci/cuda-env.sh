# The CUDA 13.0 toolchain for building flashattn-candle with the real `cuda` feature (candle's
# own CUDA kernels, compiled by nvcc; cudarc linked to libcuda, cuBLAS, cuRAND, NVRTC and the
# CUDA runtime) on a machine without the CUDA toolkit and without a GPU. Source it from the
# repository root:
#   . candle/ci/cuda-env.sh
#   cargo build --release -p flashattn-candle --features cuda --tests --examples
# It installs candle/ci/cuda-requirements.txt (NVIDIA's wheels on PyPI) into target/cuda-wheels
# once, adds what the wheels lack for linking (the unversioned lib*.so names, and a stub
# libcuda.so: the real one comes with the driver on the GPU machine), and exports the
# environment that candle-kernels' build script (cudaforge) and cudarc's build script read.
# The binaries built so need, on the GPU machine, the driver's libcuda.so.1 and the CUDA 13
# libraries cudart, cuBLAS(Lt) and cuRAND (`cargo xtask bundle --candle-cuda --candle-cuda-libs`
# carries those from target/cuda-wheels).

_fa_cuda_env() {
  local repo wheels root req stamp
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  req="$repo/candle/ci/cuda-requirements.txt"
  wheels="$repo/target/cuda-wheels"
  root="$wheels/nvidia/cu13"
  stamp="$wheels/.installed-from"
  if ! cmp -s "$req" "$stamp" 2>/dev/null; then
    echo "cuda-env: installing $req into $wheels" >&2
    rm -rf "$wheels"
    python3 -m pip install --quiet --disable-pip-version-check --no-input --no-deps \
      --target "$wheels" -r "$req" || { echo "cuda-env: pip install failed" >&2; return 1; }
    cp "$req" "$stamp"
  fi
  [ -x "$root/bin/nvcc" ] || { echo "cuda-env: no $root/bin/nvcc" >&2; return 1; }

  # The linker's names: libcudart.so -> libcudart.so.13, and so on.
  local so base
  for so in "$root"/lib/lib*.so.*; do
    base="${so##*/}"
    base="${base%%.so.*}.so"
    case "$base" in *.alt.so|libnvrtc-builtins*) continue ;; esac
    [ -e "$root/lib/$base" ] || ln -s "${so##*/}" "$root/lib/$base"
  done

  # A stub libcuda.so (soname libcuda.so.1, as the driver's and the toolkit's own stub), for
  # linking only: every cu* name in cuda.h, each returning CUDA_ERROR_STUB_LIBRARY (34).
  if [ ! -f "$root/lib/stubs/libcuda.so" ]; then
    mkdir -p "$root/lib/stubs"
    grep -ohE '\bcu[A-Z][A-Za-z0-9_]*\b' "$root"/include/cuda.h | sort -u |
      sed 's/.*/int &(void) { return 34; }/' > "$root/lib/stubs/libcuda-stub.c"
    cc -shared -fPIC -fno-builtin -w -Wl,-soname,libcuda.so.1 -o "$root/lib/stubs/libcuda.so" \
      "$root/lib/stubs/libcuda-stub.c" || { echo "cuda-env: could not build the libcuda stub" >&2; return 1; }
  fi

  export CUDA_ROOT="$root" CUDA_HOME="$root" CUDA_PATH="$root" CUDA_TOOLKIT_ROOT_DIR="$root"
  export NVCC="$root/bin/nvcc"
  # cudarc's build script runs `nvcc --version` from PATH for the CUDA version.
  export PATH="$root/bin:$PATH"
  # The H200 (sm_90); candle-kernels builds PTX and its static kernels for this one.
  export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
  export LIBRARY_PATH="$root/lib:$root/lib/stubs${LIBRARY_PATH:+:$LIBRARY_PATH}"
  # No runtime library path is set: nothing built here can run without a GPU.
}
_fa_cuda_env
