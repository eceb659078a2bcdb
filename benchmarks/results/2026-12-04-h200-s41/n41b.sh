# Session 41, harness call 2: dropout (and soft-cap) on the Hopper TF32 kernels (obj41b: flash_fwd_sm90_tf32.o,
# flash_bwd_sm90_tf32.o, flash_bwd_sm90_tf32_d128.o, flash_bwd_sm90.o of this tree; objmut41b: the two TF32 backwards
# without Z in dS). Forward tf32 numerics (every case and variant), the exact mask check, backward tf32pad (the
# tbcap / tbdrop cases, every mode) and tf32det (all), the mutant, memcheck, speed against sm80's TF32.
set -u
link() { mkdir -p $1 && for o in objfin obj39f obj40 obj40b obj41b ${2:-}; do tar xzf .device-tf/$o.tgz -C $1; done &&
  OUTDIR=$1 HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1; }
link /tmp/hN; link /tmp/hM objmut41b
R=$OUT/r; mkdir -p $R
run() { local name=$1 lim=$2; shift 2; local t0=$SECONDS left=$((560 - SECONDS))
  (( left < 15 )) && { echo "$name skipped (call time)"; return; }; (( lim > left )) && lim=$left
  timeout -k 5 $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? ($((SECONDS - t0)) s)"; }
DROPS=tbdrop_d64,tbdrop_d128_causal_br_gqa,tbdrop_d64_causal_tl_dlse,tbdrop_d80_masks_poison,tbdrop_softcap_d128,tbdrop_softcap_d40_kvalid,tbdrop_d128_big,tbdrop_d64_big_causal
CAPS=tbcap_d64,tbcap_d128_tight,tbcap_d64_causal_br_gqa,tbcap_d128_causal_tl_dlse,tbcap_d96_masks_poison,tbcap_d40_kvalid,tbcap_d128_big,tbcap_d64_big_causal
run tf32 120 python3 benchmarks/sm90_check.py --phase tf32 --lib /tmp/hN --out $R
grep -E "^FAIL|tf32:" $R/tf32.log | cut -c1-220 | head -10
grep -E "drop" $R/tf32.log | grep -v RUNNING | cut -c1-150 | head -12
run dropexact 60 python3 benchmarks/sm90_check.py --phase tf32dropexact --lib /tmp/hN --out $R
grep -E "PASS|FAIL|tf32dropexact:" $R/dropexact.log | cut -c1-160
run tf32pad 150 env TF32PAD_CASES=$DROPS,$CAPS,tbpad_bias_sm80 python3 benchmarks/sm90_bwd_check.py --phase tf32pad --lib /tmp/hN --out $R
grep -E "^FAIL|tf32pad:" $R/tf32pad.log | cut -c1-260 | head -12
run tf32det 90 python3 benchmarks/sm90_bwd_check.py --phase tf32det --lib /tmp/hN --out $R
grep -E "^FAIL|tf32det:" $R/tf32det.log | cut -c1-260 | head -8
run mut 60 env TF32PAD_MODES=1 TF32PAD_CASES=$DROPS python3 benchmarks/sm90_bwd_check.py --phase tf32pad --lib /tmp/hM
grep -E "tf32pad:" $R/mut.log; grep -E "^FAIL" $R/mut.log | cut -c1-40 | tr '\n' ' '; echo
run bench0 60 python3 benchmarks/pad_bench.py --lib /tmp/hN --tf32 --shapes 64,128 --t 4096,16384 --out $R/pad_tf32_nodrop.json
run bench01 60 python3 benchmarks/pad_bench.py --lib /tmp/hN --tf32 --shapes 64,128,96 --t 4096,16384 --dropout 0.1 --out $R/pad_tf32_drop.json
grep -h "^ *\(64\|128\|96\) " $R/bench0.log $R/bench01.log | cut -c1-190
run memcheck_bwd 80 env TF32PAD_MODES=1 TF32PAD_CASES=tbdrop_d64,tbdrop_d80_masks_poison,tbdrop_softcap_d128,tbdrop_softcap_d40_kvalid \
  compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/sm90_bwd_check.py --phase tf32pad --lib /tmp/hN
grep -E "ERROR SUMMARY|tf32pad:|^FAIL" $R/memcheck_bwd.log | head -5
run memcheck_fwd 80 env TF32SAN_CASES=t_drop_causal_gqa_d64,t_drop_softcap_d128,t_pad_d80_drop05_masks compute-sanitizer --tool memcheck \
  --print-limit 20 python3 benchmarks/sm90_check.py --phase tf32sanitize --lib /tmp/hN
grep -E "ERROR SUMMARY|^FAIL" $R/memcheck_fwd.log | head -4
run racecheck_bwd 80 env TF32PAD_MODES=1 TF32PAD_CASES=tbdrop_d64,tbdrop_softcap_d128 \
  compute-sanitizer --tool racecheck --print-limit 20 python3 benchmarks/sm90_bwd_check.py --phase tf32pad --lib /tmp/hN
grep -E "RACECHECK SUMMARY|ERROR SUMMARY|tf32pad:|^FAIL" $R/racecheck_bwd.log | head -5
tar czf $OUT/n41b.tgz -C $OUT r && rm -rf $R
