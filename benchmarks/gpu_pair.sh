#!/usr/bin/env bash
# Two queues of gpu_run.sh modes on a two-GPU machine (the device tool's nvidia-h200-x2), one
# queue per GPU, at the same time: what would take two calls on one GPU takes one.
#
#   bash benchmarks/gpu_pair.sh "sm90,sm90bwd" "async"          # GPU 0 runs sm90 then sm90bwd,
#                                                                # GPU 1 runs async
#   PAIR_ENV0="ASYNC_PARTS=train" PAIR_ENV1="KERASHUB_PARTS=main" bash benchmarks/gpu_pair.sh ...
#
# Each mode runs as `bash benchmarks/gpu_run.sh MODE` with CUDA_VISIBLE_DEVICES set to its GPU and
# its own output folder ($OUT/gpu0/MODE, $OUT/gpu1/MODE; gpu_run.sh writes there), stdout and
# stderr in MODE.log beside them; PAIR_ENV0 / PAIR_ENV1 are extra VAR=value words for that queue.
# At the end everything is packed into $OUT/pair.tgz (the device tool brings back at most 8
# files) and the last lines of each log are printed. Runs from the repository root.
set -uo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 MODES_FOR_GPU0 MODES_FOR_GPU1 (comma-separated)" >&2; exit 2; }
out=${OUT:?OUT must name the output folder}
work=$(mktemp -d)
queue() {  # queue GPU MODES EXTRA_ENV
  local gpu=$1 modes=$2 extra=$3 mode
  for mode in ${modes//,/ }; do
    mkdir -p "$work/gpu$gpu/$mode"
    echo "== gpu $gpu: $mode ($(date +%T))" >> "$work/gpu$gpu/queue.log"
    # shellcheck disable=SC2086
    env CUDA_VISIBLE_DEVICES=$gpu OUT="$work/gpu$gpu/$mode" $extra \
      bash benchmarks/gpu_run.sh "$mode" > "$work/gpu$gpu/$mode.log" 2>&1
    echo "   rc=$? ($(date +%T))" >> "$work/gpu$gpu/queue.log"
  done
}
queue 0 "$1" "${PAIR_ENV0:-}" &
queue 1 "$2" "${PAIR_ENV1:-}" &
wait
for g in 0 1; do
  cat "$work/gpu$g/queue.log"
  for f in "$work/gpu$g"/*.log; do
    [[ $(basename "$f") == queue.log ]] && continue
    echo "---- gpu $g: $(basename "$f")"; tail -25 "$f"
  done
done
tar -C "$work" -czf "$out/pair.tgz" . && rm -rf "$work"
