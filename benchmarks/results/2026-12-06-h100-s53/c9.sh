# Session 53, call 9: ncu of cuDNN's backward kernel (PyTorch SDPA, cudnn_one.py) at call 7's two shapes, for the
# same sections as our kernel's profile there.
set -u
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section InstructionStats --section Occupancy \
  --section LaunchStats --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,\
regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,\
regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active"
mkdir -p $OUT/ncu
d=benchmarks/results/2026-12-06-h100-s53
for shape in "128 0" "64 1"; do
  set -- $shape
  f=$OUT/ncu/cudnn_bwd_D$1_T4096_causal$2.txt
  timeout 150 ncu --clock-control none --kernel-name "regex:(?i)(bprop|bwd|backward|dgrad)" \
    --launch-count 1 $SECTIONS python3 $d/cudnn_one.py 4096 $1 $2 > $f 2>&1
  echo "== cuDNN D=$1 causal=$2 rc=$?"
  grep -E "^  [a-z_0-9]+.*\(" $f | grep -v "==PROF==" | head -3
  grep -E "Duration|Executed Ipc Active|Issue Slots Busy|Executed Instructions  |Registers Per|Threads  |Block Size|Grid Size|L2 Cache Throughput|Mem Busy|Compute \(SM\) Throughput" $f | head -14
  grep -E "issue_stalled" $f | awk '$NF > 0.1' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
  grep -E "sm__(inst_executed_pipe|pipe)_" $f | awk '$NF + 0 > 3' | grep -v TriageCompute
done
