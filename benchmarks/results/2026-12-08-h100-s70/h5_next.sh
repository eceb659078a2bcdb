# Next lease, harness only (~8 min, one call). Carry .harness_build/h67.tgz, n70_fwd.o and i3_fwd.o (single-file
# builds of flash_fwd_sm90.cu made in session 70 from its last commit: `nvcc -std=c++17 -O3 -I. -Xcompiler -fPIC
# -DFA_HAS_SM90=1 [flags] -gencode arch=compute_90a,code=sm_90a -c cc/kernels/sm90/flash_fwd_sm90.cu`; flags: none,
# -DFA_SM90_FWD_IDX64_3WG=1). Run from the repository root. The harness module is compiled from this tree (it calls
# fwd_idx64_wide and fwd_d256_schedule), so every forward object here must be from a tree that has them.
# R = h67's objects with n70_fwd.o (the defaults: the FFMA softmax and IDX_UNDER_PV at D = 128);
# I = with i3_fwd.o (FA_SM90_FWD_IDX64_3WG: the D = 64 index-masked kernel on schedule 8, 3 consumer warpgroups).
# 1. I: numerics, the variants phase on schedules 5 and 8 (every VARIANT_CASES case, the w3i_ ones around the 192-row
#    tile included, bit for bit against schedule 0; the defaults phase: k_valid_all_true_d64 must run 8), memcheck
#    and racecheck of its vsanitize cases on schedule 8; then I against R on the index-masked kernels.
set -u
. benchmarks/harness_calls.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
H=.harness_build
harness_dir hR $H/h67.tgz $H/n70_fwd.o; harness_dir hI $H/h67.tgz $H/i3_fwd.o
harness_check i_numerics numerics /tmp/hI 120
SM90_VARIANTS=5,8 harness_check i_variants variants /tmp/hI 200
for tool in memcheck racecheck; do
  s=$SECONDS; SM90_VARIANTS=8 timeout -k 5 120 compute-sanitizer --tool $tool --print-limit 20 python3 \
    benchmarks/sm90_check.py --phase vsanitize --lib /tmp/hI > $OUT/i_v$tool.log 2>&1
  echo "i $tool rc=$? ($((SECONDS - s)) s)"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^FAIL" $OUT/i_v$tool.log | head -5
done
harness_ab i_mask /tmp/hI fwdmask
harness_ab i_frac /tmp/hI fwdkeyfrac
(cd $OUT && tar -czf /tmp/h5.tgz i_* 2>/dev/null && mv /tmp/h5.tgz $OUT/)
