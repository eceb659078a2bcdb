# After h5_next.sh in the same lease (~8 min, one call): FA_SM90_FWD_D256_SCHED, the plain D = 256 forward on an
# overlapped schedule. Carry .harness_build/h67.tgz, n70_fwd.o, d2_fwd.o, d3_fwd.o, d3f_fwd.o (single-file builds of
# flash_fwd_sm90.cu from session 70's last kernel commit, as h5_next.sh's, with -DFA_SM90_FWD_D256_SCHED=2, =3, and =3
# with -DFA_SM90_FWD_FFMA_SOFTMAX=384). R = h67's objects with n70_fwd.o (the defaults).
# For D2, D3, D3F: numerics (the D = 256 cases run the new schedule by default); for D3 the variants phase on schedule 5 only
# (SM90_VARIANTS=5: every plain D = 256 case, D256_VARIANT_CASES, runs the new schedule there, bit for bit against
# schedule 0; the defaults phase expects it for edges_d256_127_129_causal and pad_d192_dv128_causal); memcheck and
# racecheck of the sanitize phase (its plain D = 256 cases on the new schedule) for D3; then D3, D2 and D3F against R
# on fwd256 (the plain D = 256 rows move; the index-masked and dropout rows are the same kernels: controls).
set -u
. benchmarks/harness_calls.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
H=.harness_build
[[ -d /tmp/hR ]] || harness_dir hR $H/h67.tgz $H/n70_fwd.o
for x in d2 d3 d3f; do harness_dir h$x $H/h67.tgz $H/${x}_fwd.o; done
for x in d2 d3 d3f; do harness_check ${x}_numerics numerics /tmp/h$x 120; done
SM90_VARIANTS=5 harness_check d3_variants variants /tmp/hd3 150
for tool in memcheck racecheck; do
  s=$SECONDS; timeout -k 5 100 compute-sanitizer --tool $tool --print-limit 20 python3 benchmarks/sm90_check.py \
    --phase sanitize --lib /tmp/hd3 > $OUT/d3_$tool.log 2>&1
  echo "d3 $tool rc=$? ($((SECONDS - s)) s)"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^FAIL" $OUT/d3_$tool.log | head -5
done
harness_ab d3_256 /tmp/hd3 fwd256
harness_ab d2_256 /tmp/hd2 fwd256
harness_ab d3f_256 /tmp/hd3f fwd256
(cd $OUT && tar -czf /tmp/h6.tgz d2_* d3_* d3f_* 2>/dev/null && mv /tmp/h6.tgz $OUT/)
