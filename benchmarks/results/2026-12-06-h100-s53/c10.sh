# Session 53, call 10: ncu of the forward at D = 128, T = 4096 without a mask (B = 4, H = 16, bf16): ours (main's
# harness objects OA, flash_fwd_sm90 kernels) and cuDNN's (cudnn_one.py, its fprop kernel).
set -u
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section InstructionStats --section Occupancy \
  --section LaunchStats --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,\
regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,\
regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active"
mkdir -p $OUT/ncu
d=benchmarks/results/2026-12-06-h100-s53
PROFILE_B=4 HARNESS_DIR=.harness_build/OA timeout 150 ncu --clock-control none --kernel-name regex:flash_fwd_sm90 \
  --launch-count 1 $SECTIONS python3 benchmarks/profile_one.py 4096 128 0 bf16 > $OUT/ncu/fwd_D128_T4096.txt 2>&1
echo "ours rc=$?"
timeout 150 ncu --clock-control none --kernel-name "regex:(?i)fprop" --launch-count 1 $SECTIONS \
  python3 $d/cudnn_one.py 4096 128 0 > $OUT/ncu/cudnn_fwd_D128_T4096.txt 2>&1
echo "cudnn rc=$?"
for f in $OUT/ncu/fwd_D128_T4096.txt $OUT/ncu/cudnn_fwd_D128_T4096.txt; do
  echo "== $(basename $f)"
  grep -E "^  [a-zA-Z_0-9]+.*\(" $f | grep -v "==PROF==" | head -2 | cut -c1-160
  grep -E "Duration|Executed Ipc Active|Issue Slots Busy|Executed Instructions  |Registers Per|Block Size|Grid Size|L2 Cache Throughput|Mem Busy|Compute \(SM\) Throughput" $f | head -14
  grep -E "issue_stalled" $f | awk '$NF > 0.1' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
  grep -E "sm__(inst_executed_pipe|pipe)_" $f | awk '$NF + 0 > 3' | grep -v "TriageCompute\|hmma_type\|tensor_type\|xu_realtime"
done
