#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over one small forward and backward of each kernel
# family, on the GPU machine, through the harness (build it first: bash benchmarks/build_harness.sh).
#   bash benchmarks/sanitize.sh            -> prints one line per run and "sanitize: N runs, M with errors"
#   QUICK=1 bash benchmarks/sanitize.sh    -> only the bf16 index-masked kernels (D = 64, 128, 256)
# Families: bf16 index-masked (causal), bf16 general (bias, mask, dropout), fp16 GQA, bf16
# deterministic (dQ kernel), float32 SIMT, float32 TF32, TF32 deterministic; D = 64, 128, 256.
set -uo pipefail
runs=0; bad=0
check() {  # tool, then profile_one.py arguments
  local tool=$1; shift
  local log
  log=$(compute-sanitizer --tool "$tool" --error-exitcode 9 python3 benchmarks/profile_one.py "$@" 2>&1)
  local rc=$?
  runs=$((runs + 1))
  local summary
  summary=$(echo "$log" | grep -E "ERROR SUMMARY|RACECHECK SUMMARY" | tail -1)
  if [[ $rc -ne 0 ]]; then bad=$((bad + 1)); echo "$log" | tail -30; fi
  echo "$tool $* -> rc=$rc ${summary}"
}
for tool in memcheck racecheck; do
  check $tool 200 128 1 bf16
  if [[ ${QUICK:-0} == 1 ]]; then
    check $tool 300 64 0 bf16
    check $tool 150 256 1 bf16
    continue
  fi
  check $tool 200 64 0 bf16 bias,mask,dropout
  check $tool 150 256 1 fp16 gqa
  check $tool 200 128 0 bf16 det,bias
  check $tool 100 64 1 fp32
  check $tool 200 128 1 fp32 tf32,gqa
  check $tool 130 256 0 fp32 tf32,bias,dropout
  check $tool 200 80 0 fp32 tf32,det
done
echo "sanitize: $runs runs, $bad with errors"
