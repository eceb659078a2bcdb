# Next lease, harness only (~7-8 min, one call). R = h67.tgz's objects (the defaults; this tree's default build gives
# the same SASS). Carry .harness_build/h67.tgz and the single-file builds of flash_fwd_sm90.cu (calls.md's flags):
# ffma_fwd.o (-DFA_SM90_FWD_FFMA_SOFTMAX=1), u_fwd.o (-DFA_SM90_FWD_IDX_UNDER_PV=1), uf_fwd.o (both). Run from the
# repository root.
# 1. Is FA_SM90_FWD_FFMA_SOFTMAX's loss in the index-masked forward tied to the k_valid bytes or to masked tiles?
#    F against R with full key lengths (no k_valid), an all-true [B, T] key mask, and one with the last 10 % invalid
#    (AB_LOOP_SET=fwdkeyfrac); ncu of R and F on the 10 % key mask (stall reasons, no_instruction among them).
# 2. FA_SM90_FWD_IDX_UNDER_PV (U) and U with FFMA (UF): numerics, then loop A/B against R on the index-masked
#    kernels (fwdmask, fwdkeyfrac) and, for UF, the plain ones (fwd); ncu of U and UF with nothing masked (klen).
set -u
. benchmarks/harness_calls.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
H=.harness_build
harness_dir hR $H/h67.tgz; harness_dir hF $H/h67.tgz $H/ffma_fwd.o
harness_dir hU $H/h67.tgz $H/u_fwd.o; harness_dir hUF $H/h67.tgz $H/uf_fwd.o
harness_check u_numerics numerics /tmp/hU 120
harness_check uf_numerics numerics /tmp/hUF 120
harness_ab f_frac /tmp/hF fwdkeyfrac
harness_ab u_frac /tmp/hU fwdkeyfrac
harness_ab uf_frac /tmp/hUF fwdkeyfrac
harness_ab u_mask /tmp/hU fwdmask
harness_ab uf_fwd /tmp/hUF fwd
harness_profile kv10R /tmp/hR PROFILE_FA2=0 PROFILE_FEATS=kvalid10
harness_profile kv10F /tmp/hF PROFILE_FA2=0 PROFILE_FEATS=kvalid10
harness_profile klenU /tmp/hU PROFILE_FA2=0 PROFILE_FEATS=klen  # against (ah)'s klenR 875.7 us, the plain kernel's 834.1
harness_profile klenUF /tmp/hUF PROFILE_FA2=0 PROFILE_FEATS=klen
(cd $OUT && tar -czf /tmp/h4.tgz *_numerics* *_frac *_mask *_fwd kv10* klen* 2>/dev/null && mv /tmp/h4.tgz $OUT/)
