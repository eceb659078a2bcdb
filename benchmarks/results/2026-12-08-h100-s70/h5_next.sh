# Next lease, harness only (~5-6 min, one call). Carry .harness_build/h67.tgz, n70_fwd.o and f384_fwd.o (single-file
# builds of flash_fwd_sm90.cu made in session 70 from its last kernel commit: `nvcc -std=c++17 -O3 -I. -Xcompiler
# -fPIC -DFA_HAS_SM90=1 [-DFA_SM90_FWD_FFMA_SOFTMAX=384] -gencode arch=compute_90a,code=sm_90a -c
# cc/kernels/sm90/flash_fwd_sm90.cu`). Run from the repository root.
# R = h67's objects with n70_fwd.o (the new defaults: FFMA softmax and IDX_UNDER_PV at D = 128); O = h67's objects as
# they are (the former defaults); F = with f384_fwd.o (FA_SM90_FWD_FFMA_SOFTMAX=384: the FFMA softmax at D = 256 too).
# 1. The new defaults against the former on the harness (fwd, fwdkeyfrac): the D = 128 rows should repeat (ai)'s UF
#    figures and the D = 64 / 256 rows read 1.000x within the noise (the same SASS there).
# 2. F's numerics, then F against R on the head-dim-256 kernels (fwd256: plain, index-masked, dropout), twice.
set -u
. benchmarks/harness_calls.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
H=.harness_build
harness_dir hR $H/h67.tgz $H/n70_fwd.o; harness_dir hO $H/h67.tgz; harness_dir hF $H/h67.tgz $H/f384_fwd.o
harness_check r_numerics numerics /tmp/hR 120
harness_check f_numerics numerics /tmp/hF 120
AB_REF=/tmp/hO harness_ab r_fwd /tmp/hR fwd
AB_REF=/tmp/hO harness_ab r_frac /tmp/hR fwdkeyfrac
harness_ab f_256 /tmp/hF fwd256
harness_ab f_256b /tmp/hF fwd256
(cd $OUT && tar -czf /tmp/h5.tgz *_numerics* r_fwd r_frac f_256 f_256b 2>/dev/null && mv /tmp/h5.tgz $OUT/)
