# Session 40, harness call: the Hopper TF32 backwards at head dims padded up (obj40: flash_bwd_sm90_tf32.o,
# flash_bwd_sm90_tf32_d128.o of this tree, and flash_bwd_sm90.o / flash_fwd_sm90_tf32.o whose device code equals
# obj39f's). tf32pad numerics (every variant / dQ mode), the exact head dims' numerics, mutants, memcheck, speed.
set -u
link() { mkdir -p $1 && tar xzf .device-tf/objfin.tgz -C $1 && tar xzf .device-tf/obj39f.tgz -C $1 &&
  tar xzf .device-tf/obj40.tgz -C $1 && { [[ -z ${2:-} ]] || tar xzf .device-tf/$2.tgz -C $1; } &&
  OUTDIR=$1 HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1; }
link /tmp/hN; link /tmp/hO obj40old; link /tmp/hM1 objmut40_1; link /tmp/hM2 objmut40_2
R=$OUT/r; mkdir -p $R
run() { local name=$1 lim=$2; shift 2; local t0=$SECONDS left=$((545 - SECONDS))
  (( left < 20 )) && { echo "$name skipped (call time)"; return; }; (( lim > left )) && lim=$left
  timeout -k 5 $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? ($((SECONDS - t0)) s)"; }
run tf32pad 150 python3 benchmarks/sm90_bwd_check.py --phase tf32pad --lib /tmp/hN --out $R
grep -E "^FAIL|tf32pad:" $R/tf32pad.log | cut -c1-260 | head -12
for m in 1 2; do
  run mut$m 90 env TF32PAD_MODES=1 python3 benchmarks/sm90_bwd_check.py --phase tf32pad --lib /tmp/hM$m
  grep -E "tf32pad:" $R/mut$m.log; grep -E "^FAIL" $R/mut$m.log | cut -c1-40 | tr '\n' ' '; echo
done
run d64 90 env HARNESS_DIR=/tmp/hN SM90_TUNE_MODES=4 python3 benchmarks/tune_tf32_bwd.py --sm90 --quick
grep -E "numerics|ALL|SOME" $R/d64.log | head -4
run d128 90 env HARNESS_DIR=/tmp/hN SM90_D128_MODES=2 python3 benchmarks/tune_tf32_bwd.py --sm90-d128 --quick
grep -E "numerics|ALL|SOME" $R/d128.log | head -4
run memcheck 150 env TF32PAD_MODES=1 TF32PAD_CASES=tbpad_d80,tbpad_d40_causal_tl,tbpad_d60_dv32_dlse,tbpad_d96_masks_poison,tbpad_d44_compact,tbpad_d128_dv64_causal \
  compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/sm90_bwd_check.py --phase tf32pad --lib /tmp/hN
grep -E "ERROR SUMMARY|tf32pad:|^FAIL" $R/memcheck.log | head -5
run bench 150 python3 benchmarks/pad_bench.py --lib /tmp/hN --tf32 --shapes 80,96,40,64/128,64,128 --t 4096,16384 --out $R/pad_tf32.json
grep -v "Warn\|f = lambda" $R/bench.log | tail -25 | cut -c1-190
for r in 1; do for v in O N; do
  run ab_$v$r 60 python3 benchmarks/pad_bench.py --lib /tmp/h$v --tf32 --shapes 64,128 --t 4096
done; done
grep -h "^ *\(64\|128\) " $R/ab_*.log | cut -c1-190
tar czf $OUT/n40a.tgz -C $OUT r && rm -rf $R
