# Next lease, harness only: FA_SM90_FWD_PARTIAL_EARLY (RESULTS "Hopper forward kernel" (ag)) with and without the FFMA
# macro, against R = h67.tgz's objects (the defaults; flash_fwd_sm90.o's SASS equals this tree's default build).
# Carry .harness_build/h67.tgz, pe_fwd.o (-DFA_SM90_FWD_PARTIAL_EARLY=1), ffma_pe_fwd.o (and FFMA_SOFTMAX=1), ffma_fwd.o.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for d in hR hP hFP hF; do mkdir -p /tmp/$d && tar -xzf .harness_build/h67.tgz -C /tmp/$d; done
cp .harness_build/pe_fwd.o /tmp/hP/flash_fwd_sm90.o; cp .harness_build/ffma_pe_fwd.o /tmp/hFP/flash_fwd_sm90.o
cp .harness_build/ffma_fwd.o /tmp/hF/flash_fwd_sm90.o
for d in hR hP hFP hF; do OUTDIR=/tmp/$d ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1; done
chk() {  # name, phase, lib, limit
  local s=$SECONDS; mkdir -p $OUT/$1
  timeout -k 5 $4 python3 benchmarks/sm90_check.py --phase $2 --lib $3 --out $OUT/$1 > $OUT/$1.log 2>&1
  echo "$1 rc=$? ($((SECONDS - s)) s)"
  grep -E "^FAIL|numerics:|variants:|bitwise_vs_v0=False|bitwise_vs_nomask=False|Error|error" $OUT/$1.log | cut -c1-220 | head -10
}
ab() {  # name, candidate lib, set
  local s=$SECONDS; mkdir -p $OUT/$1
  OUT=$OUT/$1 AB_A=$2 AB_B=/tmp/hR AB_CHECKS=loop AB_LOOP_SET=$3 timeout -k 5 ${T_AB:-150} bash benchmarks/gpu_run.sh ab \
    > /dev/null 2>&1; echo "ab $1 rc=$? ($((SECONDS - s)) s)"; tail -12 $OUT/$1/ab_summary.log
}
chk fp_numerics numerics /tmp/hFP 120
ab fp_mask /tmp/hFP fwdmask
ab p_mask /tmp/hP fwdmask
ab f_mask /tmp/hF fwdmask
ab fp_fwd /tmp/hFP fwd
(cd $OUT && tar -czf /tmp/h2.tgz fp_* p_* f_* 2>/dev/null && mv /tmp/h2.tgz $OUT/)
