# Session 53, call 7: ncu of the Hopper backward (main's harness objects OA from call 1, still on the machine) at the
# two shapes under the bars most often: D = 128 T = 4096 without a mask, D = 64 T = 4096 causal (the ORD kernel),
# B = 4, H = 2048 / D, bf16; our kernel only (PROFILE_FA2=0's choice; cuDNN is not in the harness).
set -u
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section InstructionStats --section Occupancy \
  --section LaunchStats --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,\
regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,\
regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active"
mkdir -p $OUT/ncu
for shape in "128 0" "64 1"; do
  set -- $shape
  f=$OUT/ncu/bwd_D$1_T4096_causal$2.txt
  PROFILE_B=4 HARNESS_DIR=.harness_build/OA timeout 150 ncu --clock-control none --kernel-name regex:flash_bwd_sm90 \
    --launch-count 1 $SECTIONS python3 benchmarks/profile_one.py 4096 $1 $2 bf16 > $f 2>&1
  echo "== D=$1 causal=$2 rc=$?"
  grep -E "Duration|Executed Ipc Active|Issue Slots Busy|Executed Instructions  |Registers Per|L2 Cache Throughput|Mem Busy|Compute \(SM\) Throughput" $f | head -12
  grep -E "issue_stalled" $f | awk '$NF > 0.1' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
  grep -E "sm__(inst_executed_pipe|pipe)_" $f | awk '$NF + 0 > 3'
done
