# Session 41, harness call 3: a dense mask and bias on the Hopper TF32 forward (obj41c: flash_fwd_sm90_tf32.o of
# this tree, over obj41b; objmut41c: it with the dense mask ignored). Forward tf32 numerics (every case and
# variant), the mutant, memcheck, speed with a bias / a dense mask against sm80's TF32 (default variant and 0).
set -u
link() { mkdir -p $1 && for o in objfin obj39f obj40 obj40b obj41b obj41c ${2:-}; do tar xzf .device-tf/$o.tgz -C $1; done &&
  OUTDIR=$1 HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1; }
link /tmp/hN; link /tmp/hM objmut41c
R=$OUT/r; mkdir -p $R
run() { local name=$1 lim=$2; shift 2; local t0=$SECONDS left=$((190 - SECONDS))
  (( left < 10 )) && { echo "$name skipped (call time)"; return; }; (( lim > left )) && lim=$left
  timeout -k 5 $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? ($((SECONDS - t0)) s)"; }
run tf32 60 python3 benchmarks/sm90_check.py --phase tf32 --lib /tmp/hN --out $R
grep -E "^FAIL|tf32:" $R/tf32.log | cut -c1-220 | head -10
grep -E "dmask|bias" $R/tf32.log | grep -v RUNNING | grep -E "v0 |default" | cut -c1-150 | head -12
run mut 40 env TF32_VARIANTS=0 python3 benchmarks/sm90_check.py --phase tf32 --lib /tmp/hM
grep -E "tf32:" $R/mut.log; grep -E "^FAIL" $R/mut.log | cut -c1-40 | sort -u | tr '\n' ' '; echo
run memcheck_fwd 40 env TF32SAN_CASES=t_dmask_bias_softcap_len,t_pad_d96_bias_keybcast_masks compute-sanitizer --tool memcheck \
  --print-limit 20 python3 benchmarks/sm90_check.py --phase tf32sanitize --lib /tmp/hN
grep -E "ERROR SUMMARY|^FAIL" $R/memcheck_fwd.log | head -4
run bench_bias 30 python3 benchmarks/pad_bench.py --lib /tmp/hN --tf32 --shapes 64,128 --t 4096,16384 --bias --out $R/pad_tf32_bias.json
run bench_mask 30 python3 benchmarks/pad_bench.py --lib /tmp/hN --tf32 --shapes 64,128 --t 4096,16384 --mask --out $R/pad_tf32_mask.json
run bench_bias_v0 20 env TF_FLASHATTN_SM90_TF32_VARIANT=0 python3 benchmarks/pad_bench.py --lib /tmp/hN --tf32 --shapes 128 --t 4096,16384 --bias --out $R/pad_tf32_bias_v0.json
grep -h "^ *\(64\|128\) " $R/bench_bias.log $R/bench_mask.log $R/bench_bias_v0.log | cut -c1-120
tar czf $OUT/n41c.tgz -C $OUT r && rm -rf $R
