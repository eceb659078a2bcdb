# Session 53, call 12: FA_SM90_BWD_DESC_ADD (DB against DA, as call 11) on the D = 128 backward's shapes
# (harness_loop_ab.py's d128 set), where call 11's one D = 128 row came out 1.037x.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
[[ -d .harness_build/DB ]] || tar xzf .harness_build/cand54.tgz -C .harness_build
AB_A=.harness_build/DB AB_B=.harness_build/DA AB_CHECKS=loop AB_LOOP_SET=d128 timeout -k 5 200 \
  bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
echo "d128 loop rc=$?"; tail -6 $OUT/ab_summary.log
