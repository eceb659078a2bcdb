# After h5_next.sh and h6_next.sh in the same lease (~8 min, one call). Carry .harness_build/h67.tgz, n70_fwd.o,
# o70_fwd.o, f384_fwd.o, d3i_fwd.o (single-file builds of flash_fwd_sm90.cu from session 70's last commit, as
# h5_next.sh's; o70: -DFA_SM90_FWD_FFMA_SOFTMAX=0 -DFA_SM90_FWD_IDX_UNDER_PV=0, whose SASS equals h67's
# flash_fwd_sm90.o, 42 / 42 functions; f384: -DFA_SM90_FWD_FFMA_SOFTMAX=384; d3i: -DFA_SM90_FWD_D256_SCHED=3
# -DFA_SM90_FWD_D256_IDX_SCHED=2 -DFA_SM90_FWD_IDX_UNDER_PV=384).
# 1. F (f384: the FFMA softmax at D = 256 too): numerics, then against R (the defaults) on fwd256.
# 2. DI (d3i: h6's D3 plus the index-masked D = 256 kernel without dropout on schedule 2 with its softmax under P V;
#    ptxas: no spills, 66 exp2 before the P V wait, 32 of them soft-cap's): numerics, the variants phase on schedule 5
#    (D256_IDX_VARIANT_CASES join in, bit for bit against schedule 0), memcheck of the sanitize phase (its
#    causal_window_lengths_d256 and softcap_causal_gqa_d256 run schedule 2), then against R on fwd256 (the key-mask rows).
# 3. The new defaults (R) against the former (O) on fwd and fwdkeyfrac: the D = 128 rows should repeat RESULTS "Hopper
#    forward kernel" (ai)'s UF figures, the D = 64 / 256 rows read 1.000x within the noise (the same SASS there).
set -u
. benchmarks/harness_calls.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
H=.harness_build
[[ -d /tmp/hR ]] || harness_dir hR $H/h67.tgz $H/n70_fwd.o
harness_dir hO $H/h67.tgz $H/o70_fwd.o; harness_dir hF $H/h67.tgz $H/f384_fwd.o; harness_dir hDI $H/h67.tgz $H/d3i_fwd.o
harness_check f_numerics numerics /tmp/hF 120
harness_ab f_256 /tmp/hF fwd256
harness_check di_numerics numerics /tmp/hDI 120
SM90_VARIANTS=5 harness_check di_variants variants /tmp/hDI 150
s=$SECONDS; timeout -k 5 100 compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/sm90_check.py \
  --phase sanitize --lib /tmp/hDI > $OUT/di_memcheck.log 2>&1
echo "di memcheck rc=$? ($((SECONDS - s)) s)"; grep -E "ERROR SUMMARY|^FAIL" $OUT/di_memcheck.log | head -5
harness_ab di_256 /tmp/hDI fwd256
AB_REF=/tmp/hO harness_ab r_fwd /tmp/hR fwd
AB_REF=/tmp/hO harness_ab r_frac /tmp/hR fwdkeyfrac
(cd $OUT && tar -czf /tmp/h7.tgz r_fwd r_frac f_* di_* 2>/dev/null && mv /tmp/h7.tgz $OUT/)
