# After h5_next.sh and h6_next.sh in the same lease (~5 min): F = FA_SM90_FWD_FFMA_SOFTMAX=384 (f384_fwd.o: the FFMA
# softmax at D = 256 too): numerics, then against R on the head-dim-256 kernels (fwd256); then the new defaults (R:
# h67's objects with n70_fwd.o) against the former
# (O: with o70_fwd.o, built with -DFA_SM90_FWD_FFMA_SOFTMAX=0 -DFA_SM90_FWD_IDX_UNDER_PV=0 from the same tree; its
# SASS equals h67's flash_fwd_sm90.o, 42 / 42 functions). The D = 128 rows should repeat RESULTS "Hopper forward
# kernel" (ai)'s UF figures, the D = 64 / 256 rows read 1.000x within the noise (the same SASS there). Carry h67.tgz,
# n70_fwd.o, o70_fwd.o, f384_fwd.o.
set -u
. benchmarks/harness_calls.sh
H=.harness_build
[[ -d /tmp/hR ]] || harness_dir hR $H/h67.tgz $H/n70_fwd.o
harness_dir hO $H/h67.tgz $H/o70_fwd.o; harness_dir hF $H/h67.tgz $H/f384_fwd.o
harness_check f_numerics numerics /tmp/hF 120
harness_ab f_256 /tmp/hF fwd256
AB_REF=/tmp/hO harness_ab r_fwd /tmp/hR fwd
AB_REF=/tmp/hO harness_ab r_frac /tmp/hR fwdkeyfrac
(cd $OUT && tar -czf /tmp/h7.tgz r_fwd r_frac f_* 2>/dev/null && mv /tmp/h7.tgz $OUT/)
