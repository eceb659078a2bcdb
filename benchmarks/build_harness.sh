#!/usr/bin/env bash
# Builds the CUDA kernels and the pybind11 harness module `flash_harness` (cc/harness/flash_harness.cc)
# for the python3 on PATH into $OUTDIR/flash_harness<EXT_SUFFIX> (e.g. .cpython-312-x86_64-linux-gnu.so).
# No TensorFlow; cudart linked statically. Needs nvcc, g++, and pybind11 + Python headers for python3.
#   ARCHS="80 90" (default, as build_ops.py) or e.g. ARCHS=90 for a quick build; JOBS parallel nvcc (default nproc);
#   NVCC (default /usr/local/cuda/bin/nvcc); PYTHON (default python3); NVCC_EXTRA (e.g. -DFA_TUNING);
#   HARNESS_ONLY=1: reuse the kernel objects already in $OUTDIR (compile only missing ones), rebuild
#   the module (they must be for the same ARCHS / NVCC_EXTRA).
# Run from the repository root. Prints the wall time of the whole build.
#
# On the GPU machine (python3 with torch and pybind11):
#   bash benchmarks/build_harness.sh && python3 benchmarks/kernel_harness_check.py
#   (quick: ARCHS=90 bash benchmarks/build_harness.sh && python3 benchmarks/kernel_harness_check.py --quick)
# Without a GPU, the module still imports and checks its arguments:
#   ARCHS=90 bash benchmarks/build_harness.sh
#   PYTHONPATH=.harness_build python3 -c "import flash_harness, numpy as np; flash_harness.fwd(*[np.zeros((1, 1, 1, 8), np.float32)] * 5, scale=1.0)"
#   -> ValueError: q: expected a CUDA device tensor, got a tensor on DLPack device type 1 (CPU)
set -euo pipefail
OUTDIR=${OUTDIR:-.harness_build}
ARCHS=${ARCHS:-"80 90"}
JOBS=${JOBS:-$(nproc)}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
PYTHON=${PYTHON:-python3}
PYINC=$("$PYTHON" -m pybind11 --includes) || { echo "pybind11 is missing for $PYTHON (pip install pybind11)" >&2; exit 1; }
EXT=$("$PYTHON" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
mkdir -p "$OUTDIR"
GENCODE=""
for a in $ARCHS; do GENCODE="$GENCODE -gencode arch=compute_$a,code=sm_$a"; done
# Hopper-only sources (cc/kernels/sm90/) are built for sm_90a alone, and only when 90 is in ARCHS;
# everything (the harness too) then sees FA_HAS_SM90=1, as in build_ops.py.
SM90_SOURCES=""
HAS_SM90=""
if [[ " $ARCHS " == *" 90 "* ]]; then
  SM90_SOURCES=$(ls cc/kernels/sm90/*.cu 2>/dev/null || true)
  [[ -n $SM90_SOURCES ]] && HAS_SM90=-DFA_HAS_SM90=1
fi
SOURCES="$(ls cc/kernels/*.cu cc/kernels/*/*.cu | grep -v '^cc/kernels/sm90/') $SM90_SOURCES"
OBJS=""
for f in $SOURCES; do OBJS="$OBJS $OUTDIR/$(basename "$f" .cu).o"; done
start=$(date +%s)
BUILD=$SOURCES
if [[ ${HARNESS_ONLY:-0} == 1 ]]; then
  BUILD=""
  for f in $SOURCES; do [[ -f $OUTDIR/$(basename "$f" .cu).o ]] || BUILD="$BUILD $f"; done
fi
if [[ -n ${BUILD// /} ]]; then
  SM90_GENCODE="-gencode arch=compute_90a,code=sm_90a"
  echo $BUILD | tr ' ' '\n' | xargs -P "$JOBS" -I{} sh -c \
    "case {} in cc/kernels/sm90/*) G='$SM90_GENCODE';; *) G='$GENCODE';; esac; \
     $NVCC -std=c++17 -O3 -I. -Xcompiler -fPIC \$G $HAS_SM90 ${NVCC_EXTRA:-} -c {} -o $OUTDIR/\$(basename {} .cu).o"
fi
g++ -std=c++17 -O2 -fPIC -fvisibility=hidden -I. -I"$CUDA_HOME/include" $PYINC $HAS_SM90 \
  -c cc/harness/flash_harness.cc -o "$OUTDIR/flash_harness.o"
rm -f "$OUTDIR/libflash_harness.so"  # the former ctypes library
# shellcheck disable=SC2086
g++ -shared -o "$OUTDIR/flash_harness$EXT" "$OUTDIR/flash_harness.o" $OBJS -L"$CUDA_HOME/lib64" \
  -Wl,--exclude-libs,libcudart_static.a -lcudart_static -ldl -lrt -lpthread -static-libstdc++ -static-libgcc
end=$(date +%s)
echo "build of [$ARCHS] took $((end - start)) s -> $OUTDIR/flash_harness$EXT"
