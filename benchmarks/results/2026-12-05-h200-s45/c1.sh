# Session 45, device call 1 (one call: the lease budget left no room for more): harness objects built on the
# CPU machine (ARCHS=90, -DFA_TUNING, tree a39fc7b; .harness_build/h90.tgz), linked there. (1) the dense mask /
# bias TF32 backwards (off by default): tf32pad's dense cases, every mode; tf32det; (2) the forward's drop_bits
# schedules 11 / 12 / 13 (tuning builds): variants phase (dropout cases, bitwise vs schedule 0), dropout_speed
# for schedules 0 (the default), 12 and 11; (3) pad_bench's TF32 bias table.
set -u
hb=/tmp/hb_sm90; mkdir -p $hb && tar xzf .harness_build/h90.tgz -C $hb
OUTDIR=$hb HARNESS_ONLY=1 ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1
R=$OUT/r; mkdir -p $R
run() { local name=$1 lim=$2; shift 2; local t0=$SECONDS left=$((${C1_DEADLINE:-555} - SECONDS))
  (( left < 15 )) && { echo "$name skipped (call time)"; return; }; (( lim > left )) && lim=$left
  timeout -k 5 $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? ($((SECONDS - t0)) s)"; }
DENSE=$(python3 -c "
import sys; sys.path.insert(0, 'benchmarks'); import sm90_bwd_check as m
print(','.join(c['name'] for c in m.TF32_PAD_CASES if c['name'].startswith(('tbbias', 'tbmask'))))")
run tf32pad 170 env TF32PAD_CASES=$DENSE python3 benchmarks/sm90_bwd_check.py --phase tf32pad --lib $hb --out $R
grep -E "^FAIL|tf32pad:|NOT taken|Error" $R/tf32pad.log | cut -c1-260 | head -14
run variants 80 env SM90_VARIANTS=11,12,13 python3 benchmarks/sm90_check.py --phase variants --lib $hb --out $R
grep -E "^FAIL|^variant |Error" $R/variants.log | cut -c1-260 | head -20
for v in -1 12; do
  run ds_v$v 75 python3 benchmarks/dropout_speed.py --lib $hb --out $R/ds_v$v --head-dims 64,128 --drop-variant $v
  grep -E "^\| [0-9]|mask checks|Error" $R/ds_v$v.log | head -12
done
run pad 70 python3 benchmarks/pad_bench.py --lib $hb --tf32 --bias --shapes 64,128 --t 4096,16384 --out $R/pad_tf32_bias.json
grep -vE "^\s*$" $R/pad.log | tail -12
run tf32det 90 python3 benchmarks/sm90_bwd_check.py --phase tf32det --lib $hb --out $R
grep -E "^FAIL|tf32det:|Error" $R/tf32det.log | cut -c1-260 | head -8
run ds_v11 75 python3 benchmarks/dropout_speed.py --lib $hb --out $R/ds_v11 --head-dims 64,128 --drop-variant 11
grep -E "^\| [0-9]|mask checks|Error" $R/ds_v11.log | head -12
