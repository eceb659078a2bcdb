# Helpers for a device call's harness script (the h*.sh files under benchmarks/results/): `. benchmarks/harness_calls.sh`
# from the repository root, with $OUT set (the device tool's output folder). No TensorFlow needed.
#   harness_dir NAME TGZ [OBJ]  /tmp/NAME = the harness objects in TGZ (build_harness.sh's OUTDIR, packed), with
#                               flash_fwd_sm90.o replaced by OBJ if given, then the harness linked (HARNESS_ONLY=1)
#   harness_check NAME PHASE LIB LIMIT
#                               benchmarks/sm90_check.py --phase PHASE on LIB, output in $OUT/NAME(.log); prints rc
#                               and the summary / failure lines
#   harness_ab NAME LIB SET     loop A/B of LIB (A) against $AB_REF (B, default /tmp/hR): gpu_run.sh ab with
#                               AB_CHECKS=loop AB_LOOP_SET=SET, limit $T_AB (150 s); prints ab_summary.log's table
#   harness_profile NAME LIB [VAR=VALUE ...]
#                               ncu of our forward at D = 128, T = 4096 (gpu_run.sh profile, PROFILE_* from the
#                               arguments), limit $T_PROF (150 s); prints its duration, instructions and stalls
harness_dir() {
  mkdir -p "/tmp/$1" && tar -xzf "$2" -C "/tmp/$1"
  [[ -n ${3:-} ]] && cp "$3" "/tmp/$1/flash_fwd_sm90.o"
  OUTDIR=/tmp/$1 ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1
}
harness_check() {
  local s=$SECONDS; mkdir -p "$OUT/$1"
  timeout -k 5 "$4" python3 benchmarks/sm90_check.py --phase "$2" --lib "$3" --out "$OUT/$1" > "$OUT/$1.log" 2>&1
  echo "$1 rc=$? ($((SECONDS - s)) s)"
  grep -E "^FAIL|numerics:|variants:|bitwise_vs_v0=False|bitwise_vs_nomask=False|Error|error" "$OUT/$1.log" \
    | cut -c1-220 | head -10
}
harness_ab() {
  local s=$SECONDS; mkdir -p "$OUT/$1"
  OUT=$OUT/$1 AB_A=$2 AB_B=${AB_REF:-/tmp/hR} AB_CHECKS=loop AB_LOOP_SET=$3 timeout -k 5 "${T_AB:-150}" \
    bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
  echo "ab $1 rc=$? ($((SECONDS - s)) s)"; tail -12 "$OUT/$1/ab_summary.log"
}
harness_profile() {
  local n=$1 h=$2; shift 2; local s=$SECONDS; mkdir -p "$OUT/$n"
  env OUT="$OUT/$n" HARNESS_DIR="$h" PROFILE_DIR=fwd PROFILE_D=128 PROFILE_T=4096 PROFILE_KNAME=flash_fwd_sm90_kernel \
    "$@" timeout -k 5 "${T_PROF:-150}" bash benchmarks/gpu_run.sh profile > "$OUT/$n.log" 2>&1
  echo "== $n rc=$? ($((SECONDS - s)) s)"
  grep -E "Duration|Executed Inst|Issue Slots|^    [a-z_]+ +inst" "$OUT/$n.log" | cut -c1-120
}
