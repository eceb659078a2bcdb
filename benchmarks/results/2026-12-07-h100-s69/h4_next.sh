# Next lease, harness only (~4 min): is FA_SM90_FWD_FFMA_SOFTMAX's loss in the index-masked forward tied to the k_valid
# bytes or to masked tiles? Loop A/B against R (h67.tgz's objects, the defaults) with full key lengths (no k_valid),
# an all-true [B, T] key mask, and one with the last 10 % invalid (AB_LOOP_SET=fwdkeyfrac), for F (FFMA) and P
# (PARTIAL_EARLY, the removed candidate, as a second layout change of the same loop); then ncu of R and F on the
# 10 % key mask (stall reasons, no_instruction among them). Carry .harness_build/h67.tgz, ffma_fwd.o, pe_fwd.o
# (single-file builds of flash_fwd_sm90.cu, calls.md's flags: ffma_fwd.o with -DFA_SM90_FWD_FFMA_SOFTMAX=1 from this
# tree, pe_fwd.o with -DFA_SM90_FWD_PARTIAL_EARLY=1 from 44517cd's). Run from the repository root.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for d in hR hP hF; do mkdir -p /tmp/$d && tar -xzf .harness_build/h67.tgz -C /tmp/$d; done
cp .harness_build/pe_fwd.o /tmp/hP/flash_fwd_sm90.o; cp .harness_build/ffma_fwd.o /tmp/hF/flash_fwd_sm90.o
for d in hR hP hF; do OUTDIR=/tmp/$d ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1; done
ab() {  # name, candidate lib, set
  local s=$SECONDS; mkdir -p $OUT/$1
  OUT=$OUT/$1 AB_A=$2 AB_B=/tmp/hR AB_CHECKS=loop AB_LOOP_SET=$3 timeout -k 5 ${T_AB:-150} bash benchmarks/gpu_run.sh ab \
    > /dev/null 2>&1; echo "ab $1 rc=$? ($((SECONDS - s)) s)"; tail -9 $OUT/$1/ab_summary.log
}
prof() {  # name, harness dir, then env assignments
  local n=$1 h=$2; shift 2; local s=$SECONDS; mkdir -p $OUT/$n
  env OUT=$OUT/$n HARNESS_DIR=$h PROFILE_DIR=fwd PROFILE_D=128 PROFILE_T=4096 PROFILE_KNAME=flash_fwd_sm90_kernel "$@" \
    timeout -k 5 ${T_PROF:-150} bash benchmarks/gpu_run.sh profile > $OUT/$n.log 2>&1
  echo "== $n rc=$? ($((SECONDS - s)) s)"; grep -E "Duration|Executed Inst|Issue Slots|^    [a-z_]+ +inst" $OUT/$n.log | cut -c1-120
}
ab f_frac /tmp/hF fwdkeyfrac
ab p_frac /tmp/hP fwdkeyfrac
prof kv10R /tmp/hR PROFILE_FA2=0 PROFILE_FEATS=kvalid10
prof kv10F /tmp/hF PROFILE_FA2=0 PROFILE_FEATS=kvalid10
(cd $OUT && tar -czf /tmp/h4.tgz f_* p_* kv10* 2>/dev/null && mv /tmp/h4.tgz $OUT/)
