# Session 41, harness call 1: soft-cap on the Hopper TF32 kernels (obj41: flash_fwd_sm90_tf32.o,
# flash_bwd_sm90_tf32.o, flash_bwd_sm90_tf32_d128.o, flash_bwd_sm90.o of this tree; objmut41: the two TF32 backwards
# without the 1 - tanh^2 factor). Forward tf32 numerics (every case and variant), backward tf32pad (the tbcap cases,
# every mode) and tf32det (all), the mutant, memcheck of both, speed with and without soft-cap against sm80's TF32.
set -u
link() { mkdir -p $1 && for o in objfin obj39f obj40 obj40b obj41 ${2:-}; do tar xzf .device-tf/$o.tgz -C $1; done &&
  OUTDIR=$1 HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1; }
link /tmp/hN; link /tmp/hM objmut41
R=$OUT/r; mkdir -p $R
run() { local name=$1 lim=$2; shift 2; local t0=$SECONDS left=$((560 - SECONDS))
  (( left < 15 )) && { echo "$name skipped (call time)"; return; }; (( lim > left )) && lim=$left
  timeout -k 5 $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? ($((SECONDS - t0)) s)"; }
CAPS=tbcap_d64,tbcap_d128_tight,tbcap_d64_causal_br_gqa,tbcap_d128_causal_tl_dlse,tbcap_d96_masks_poison,tbcap_d40_kvalid,tbcap_d128_big,tbcap_d64_big_causal
run tf32pad 120 env TF32PAD_CASES=$CAPS python3 benchmarks/sm90_bwd_check.py --phase tf32pad --lib /tmp/hN --out $R
grep -E "^FAIL|tf32pad:" $R/tf32pad.log | cut -c1-260 | head -12
run tf32det 90 python3 benchmarks/sm90_bwd_check.py --phase tf32det --lib /tmp/hN --out $R
grep -E "^FAIL|tf32det:" $R/tf32det.log | cut -c1-260 | head -8
run mut 60 env TF32PAD_MODES=1 TF32PAD_CASES=$CAPS python3 benchmarks/sm90_bwd_check.py --phase tf32pad --lib /tmp/hM
grep -E "tf32pad:" $R/mut.log; grep -E "^FAIL" $R/mut.log | cut -c1-40 | tr '\n' ' '; echo
run bench0 60 python3 benchmarks/pad_bench.py --lib /tmp/hN --tf32 --shapes 64,128 --t 4096,16384 --out $R/pad_tf32_nocap.json
run bench30 60 python3 benchmarks/pad_bench.py --lib /tmp/hN --tf32 --shapes 64,128,96 --t 4096,16384 --softcap 30 --out $R/pad_tf32_cap.json
grep -h "^ *\(64\|128\|96\) " $R/bench0.log $R/bench30.log | cut -c1-190
run tf32 200 python3 benchmarks/sm90_check.py --phase tf32 --lib /tmp/hN --out $R
grep -E "^FAIL|tf32:" $R/tf32.log | cut -c1-220 | head -10
grep -E "softcap" $R/tf32.log | cut -c1-160 | head -12
run memcheck_bwd 80 env TF32PAD_MODES=1 TF32PAD_CASES=tbcap_d64,tbcap_d128_tight,tbcap_d96_masks_poison,tbcap_d40_kvalid \
  compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/sm90_bwd_check.py --phase tf32pad --lib /tmp/hN
grep -E "ERROR SUMMARY|tf32pad:|^FAIL" $R/memcheck_bwd.log | head -5
run memcheck_fwd 80 env TF32SAN_CASES=t_softcap_causal_gqa_d64,t_pad_d96_softcap_masks compute-sanitizer --tool memcheck \
  --print-limit 20 python3 benchmarks/sm90_check.py --phase tf32sanitize --lib /tmp/hN
grep -E "ERROR SUMMARY|^FAIL" $R/memcheck_fwd.log | head -4
tar czf $OUT/n41a.tgz -C $OUT r && rm -rf $R
