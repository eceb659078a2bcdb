# Session 45, the short form of c1.sh once the lease budget had shrunk (C1_DEADLINE seconds in all): the drop_bits
# schedules first (variants phase: dropout cases, bitwise vs schedule 0; dropout_speed for the default and 12),
# then the dense TF32 backward cases in their first mode only, then schedule 11's speed.
set -u
hb=/tmp/hb_sm90; mkdir -p $hb && tar xzf .harness_build/h90.tgz -C $hb
OUTDIR=$hb HARNESS_ONLY=1 ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1
R=$OUT/r; mkdir -p $R
run() { local name=$1 lim=$2; shift 2; local t0=$SECONDS left=$((${C1_DEADLINE:-300} - SECONDS))
  (( left < 15 )) && { echo "$name skipped (call time)"; return; }; (( lim > left )) && lim=$left
  timeout -k 5 $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? ($((SECONDS - t0)) s)"; }
run variants 70 env SM90_VARIANTS=11,12,13 python3 benchmarks/sm90_check.py --phase variants --lib $hb --out $R
grep -E "^FAIL|^variant |Error" $R/variants.log | cut -c1-260 | head -20
for v in 12 -1; do
  run ds_v$v 70 python3 benchmarks/dropout_speed.py --lib $hb --out $R/ds_v$v --head-dims 64,128 --drop-variant $v
  grep -E "^\| [0-9]|mask checks|Error" $R/ds_v$v.log | head -12
done
DENSE=$(python3 -c "
import sys; sys.path.insert(0, 'benchmarks'); import sm90_bwd_check as m
print(','.join(c['name'] for c in m.TF32_PAD_CASES if c['name'].startswith(('tbbias', 'tbmask'))))")
run tf32pad 150 env TF32PAD_CASES=$DENSE TF32PAD_MODES=1 python3 benchmarks/sm90_bwd_check.py --phase tf32pad --lib $hb --out $R
grep -E "^FAIL|tf32pad:|NOT taken|Error" $R/tf32pad.log | cut -c1-260 | head -14
run ds_v11 70 python3 benchmarks/dropout_speed.py --lib $hb --out $R/ds_v11 --head-dims 64,128 --drop-variant 11
grep -E "^\| [0-9]|mask checks|Error" $R/ds_v11.log | head -12
