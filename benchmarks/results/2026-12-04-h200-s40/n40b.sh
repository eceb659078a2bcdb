# Session 40, harness call 2: the Hopper TF32 backwards in deterministic mode (obj40b: flash_bwd_sm90_tf32.o,
# flash_bwd_sm90_tf32_d128.o with the DET instantiations, flash_bwd.o (sm80: the dQ accumulator for deterministic
# TF32), flash_bwd_sm90.o (the poll / publish helpers moved to sm90_ptx.cuh; device code as obj39f's)).
set -u
link() { mkdir -p $1 && tar xzf .device-tf/objfin.tgz -C $1 && tar xzf .device-tf/obj39f.tgz -C $1 &&
  tar xzf .device-tf/obj40.tgz -C $1 && { [[ -z ${2:-} ]] || tar xzf .device-tf/$2.tgz -C $1; } &&
  OUTDIR=$1 HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1; }
link /tmp/hD obj40b
R=$OUT/r; mkdir -p $R
run() { local name=$1 lim=$2; shift 2; local t0=$SECONDS left=$((545 - SECONDS))
  (( left < 20 )) && { echo "$name skipped (call time)"; return; }; (( lim > left )) && lim=$left
  timeout -k 5 $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? ($((SECONDS - t0)) s)"; }
run tf32det 120 python3 benchmarks/sm90_bwd_check.py --phase tf32det --lib /tmp/hD --out $R
grep -E "^FAIL|tf32det:" $R/tf32det.log | cut -c1-330 | head -12
grep -E "^PASS" $R/tf32det.log | grep -o "tdet_[a-z0-9_]*\|default_dq_differs=[A-Za-z]*" | paste - - | head -12
run tf32pad 120 python3 benchmarks/sm90_bwd_check.py --phase tf32pad --lib /tmp/hD --out $R
grep -E "^FAIL|tf32pad:" $R/tf32pad.log | cut -c1-260 | head -6
run d64 90 env HARNESS_DIR=/tmp/hD SM90_TUNE_MODES=4 python3 benchmarks/tune_tf32_bwd.py --sm90 --quick
grep -E "numerics|ALL|SOME" $R/d64.log | head -4
run d128 90 env HARNESS_DIR=/tmp/hD SM90_D128_MODES=2 python3 benchmarks/tune_tf32_bwd.py --sm90-d128 --quick
grep -E "numerics|ALL|SOME" $R/d128.log | head -4
run racecheck 120 env TF32DET_CASES=tdet_d64_ragged_gqa,tdet_d64_causal_br,tdet_d128_ragged_gqa,tdet_d128_window_lengths,tdet_d80_causal_gqa_wide,tdet_d40_kvalid_wide compute-sanitizer --tool racecheck --print-limit 10 python3 benchmarks/sm90_bwd_check.py --phase tf32det --lib /tmp/hD
grep -E "RACECHECK SUMMARY|ERROR SUMMARY|tf32det:" $R/racecheck.log | head -3
run memcheck 120 env TF32DET_CASES=tdet_d64_ragged_gqa,tdet_d64_causal_br,tdet_d128_ragged_gqa,tdet_d128_window_lengths,tdet_d80_causal_gqa_wide,tdet_d40_kvalid_wide compute-sanitizer --tool memcheck --print-limit 10 python3 benchmarks/sm90_bwd_check.py --phase tf32det --lib /tmp/hD
grep -E "ERROR SUMMARY|tf32det:" $R/memcheck.log | head -3
run bench 120 python3 benchmarks/pad_bench.py --lib /tmp/hD --tf32 --det --shapes 64,128,80 --t 4096,16384 --out $R/pad_tf32_det.json
grep -v "Warn\|f = lambda" $R/bench.log | tail -13 | cut -c1-230
tar czf $OUT/n40b.tgz -C $OUT r && rm -rf $R
