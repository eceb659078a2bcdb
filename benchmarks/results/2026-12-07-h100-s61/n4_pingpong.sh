# Session 61, harness call (carry .harness_build/cand61.tgz: M = main's ARCHS=90 objects; P = M with flash_fwd_sm90.o
# built with -DFA_SM90_FWD_DROP_PINGPONG=1 -DFA_SM90_FWD_D256_PINGPONG=1). The one-tile ping-pong candidates: P's
# numerics (every forward case, the dropout masks exactly), P against M bit for bit on every forward case (SAVE_SET=all:
# P's dropout and head-dim-256 kernels on the ping-pong schedule against M's schedule 0), memcheck and synccheck of the
# sanitize cases, then the loop A/B of the kernels they move (set fwdping).
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
[[ -d .harness_build/P ]] || tar xzf .harness_build/cand61.tgz -C .harness_build
cp --update=none .harness_build/M/*.o .harness_build/P/
for b in M P; do OUTDIR=.harness_build/$b ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1; done
s=$SECONDS
timeout -k 5 150 python3 benchmarks/sm90_check.py --phase numerics --lib .harness_build/P > $OUT/P_numerics.log 2>&1
echo "== P numerics rc=$? ($((SECONDS - s)) s)"; grep -E "^FAIL|^numerics" $OUT/P_numerics.log | cut -c1-200 | head -8
s=$SECONDS
AB_A=.harness_build/P AB_B=.harness_build/M AB_CHECKS=dense SAVE_SET=all bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
echo "== P vs M dense, every forward case ($((SECONDS - s)) s)"; grep -vE "^build" $OUT/ab_summary.log | head -20
mv $OUT/ab_summary.log $OUT/ab_summary_dense.log
for tool in memcheck synccheck; do s=$SECONDS
  timeout -k 5 150 compute-sanitizer --tool $tool --print-limit 20 python3 benchmarks/sm90_check.py --phase sanitize \
    --lib .harness_build/P > $OUT/P_$tool.log 2>&1
  echo "== P $tool rc=$? ($((SECONDS - s)) s)"; grep -E "ERROR SUMMARY|Invalid|Barrier|^FAIL" $OUT/P_$tool.log | head -6
done
s=$SECONDS
AB_A=.harness_build/P AB_B=.harness_build/M AB_CHECKS=loop AB_LOOP_SET=fwdping bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
echo "== P vs M loop, set fwdping ($((SECONDS - s)) s)"; tail -14 $OUT/ab_summary.log
mv $OUT/ab_summary.log $OUT/ab_summary_fwdping.log
