#!/usr/bin/env bash
# Builds the CUDA kernels and the ctypes harness into $OUTDIR/libflash_harness.so.
#   ARCHS="80 86 89 90" (default) or e.g. ARCHS=90 for a quick build; JOBS=2 parallel nvcc.
# Run from the repository root. Prints the wall time of the whole build.
set -euo pipefail
OUTDIR=${OUTDIR:-.harness_build}
ARCHS=${ARCHS:-"80 86 89 90"}
JOBS=${JOBS:-2}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
mkdir -p "$OUTDIR"
GENCODE=""
for a in $ARCHS; do GENCODE="$GENCODE -gencode arch=compute_$a,code=sm_$a"; done
start=$(date +%s)
ls cc/kernels/flash_fwd*.cu cc/kernels/flash_bwd*.cu | xargs -P "$JOBS" -I{} sh -c \
  "$NVCC -std=c++17 -O3 -I. -Xcompiler -fPIC $GENCODE ${NVCC_EXTRA:-} -c {} -o $OUTDIR/\$(basename {} .cu).o"
g++ -std=c++17 -O2 -fPIC -I. -I/usr/local/cuda/include -c cc/harness/flash_harness.cc -o "$OUTDIR/flash_harness.o"
g++ -shared -o "$OUTDIR/libflash_harness.so" "$OUTDIR"/*.o -L/usr/local/cuda/lib64 \
  -Wl,--exclude-libs,libcudart_static.a -lcudart_static -ldl -lrt -lpthread -static-libstdc++ -static-libgcc
end=$(date +%s)
echo "build of [$ARCHS] took $((end - start)) s -> $OUTDIR/libflash_harness.so"
