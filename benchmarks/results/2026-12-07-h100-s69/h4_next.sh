# Next lease, harness only (~6 min, one call). R = h67.tgz's objects (the defaults; this tree's default build gives
# the same SASS). Carry .harness_build/h67.tgz and the single-file builds of flash_fwd_sm90.cu (calls.md's flags):
# ffma_fwd.o (-DFA_SM90_FWD_FFMA_SOFTMAX=1), u_fwd.o (-DFA_SM90_FWD_IDX_UNDER_PV=1), uf_fwd.o (both). Run from the
# repository root.
# 1. Is FA_SM90_FWD_FFMA_SOFTMAX's loss in the index-masked forward tied to the k_valid bytes or to masked tiles?
#    F against R with full key lengths (no k_valid), an all-true [B, T] key mask, and one with the last 10 % invalid
#    (AB_LOOP_SET=fwdkeyfrac); ncu of R and F on the 10 % key mask (stall reasons, no_instruction among them).
# 2. FA_SM90_FWD_IDX_UNDER_PV (U) and U with FFMA (UF): numerics, then loop A/B against R on the index-masked
#    kernels (fwdmask, fwdkeyfrac) and, for UF, the plain ones (fwd); ncu of U and UF with nothing masked (klen).
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for d in hR hF hU hUF; do mkdir -p /tmp/$d && tar -xzf .harness_build/h67.tgz -C /tmp/$d; done
cp .harness_build/ffma_fwd.o /tmp/hF/flash_fwd_sm90.o; cp .harness_build/u_fwd.o /tmp/hU/flash_fwd_sm90.o
cp .harness_build/uf_fwd.o /tmp/hUF/flash_fwd_sm90.o
for d in hR hF hU hUF; do OUTDIR=/tmp/$d ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1; done
chk() {  # name, phase, lib, limit
  local s=$SECONDS; mkdir -p $OUT/$1
  timeout -k 5 $4 python3 benchmarks/sm90_check.py --phase $2 --lib $3 --out $OUT/$1 > $OUT/$1.log 2>&1
  echo "$1 rc=$? ($((SECONDS - s)) s)"
  grep -E "^FAIL|numerics:|variants:|bitwise_vs_v0=False|bitwise_vs_nomask=False|Error|error" $OUT/$1.log | cut -c1-220 | head -10
}
ab() {  # name, candidate lib, set
  local s=$SECONDS; mkdir -p $OUT/$1
  OUT=$OUT/$1 AB_A=$2 AB_B=/tmp/hR AB_CHECKS=loop AB_LOOP_SET=$3 timeout -k 5 ${T_AB:-150} bash benchmarks/gpu_run.sh ab \
    > /dev/null 2>&1; echo "ab $1 rc=$? ($((SECONDS - s)) s)"; tail -10 $OUT/$1/ab_summary.log
}
prof() {  # name, harness dir, then env assignments
  local n=$1 h=$2; shift 2; local s=$SECONDS; mkdir -p $OUT/$n
  env OUT=$OUT/$n HARNESS_DIR=$h PROFILE_DIR=fwd PROFILE_D=128 PROFILE_T=4096 PROFILE_KNAME=flash_fwd_sm90_kernel "$@" \
    timeout -k 5 ${T_PROF:-150} bash benchmarks/gpu_run.sh profile > $OUT/$n.log 2>&1
  echo "== $n rc=$? ($((SECONDS - s)) s)"; grep -E "Duration|Executed Inst|Issue Slots|^    [a-z_]+ +inst" $OUT/$n.log | cut -c1-120
}
chk u_numerics numerics /tmp/hU 120
chk uf_numerics numerics /tmp/hUF 120
ab f_frac /tmp/hF fwdkeyfrac
ab u_frac /tmp/hU fwdkeyfrac
ab uf_frac /tmp/hUF fwdkeyfrac
ab u_mask /tmp/hU fwdmask
ab uf_fwd /tmp/hUF fwd
prof kv10R /tmp/hR PROFILE_FA2=0 PROFILE_FEATS=kvalid10
prof kv10F /tmp/hF PROFILE_FA2=0 PROFILE_FEATS=kvalid10
prof klenU /tmp/hU PROFILE_FA2=0 PROFILE_FEATS=klen    # against (ah)'s klenR 875.7 us and the plain kernel's 834.1
prof klenUF /tmp/hUF PROFILE_FA2=0 PROFILE_FEATS=klen
(cd $OUT && tar -czf /tmp/h4.tgz *_numerics* *_frac *_mask *_fwd kv10* klen* 2>/dev/null && mv /tmp/h4.tgz $OUT/)
