# Session 63: the head-dim-128 Hopper TF32 backward's dQ mode 3 (kKtRows: K^T's fragments from 4 row addresses and
# immediate offsets, 112 fewer instructions a kernel; never timed on a GPU) against the default mode 1, in the kernel
# harness: M's objects (9679352's ARCHS=90 harness objects; flash_bwd_sm90_tf32_d128.cu unchanged since) linked here,
# then tune_tf32_bwd.py --sm90-d128 with SM90_D128_MODES=2,4 (harness modes 1 + dQ mode: numerics of both on the
# 13 cases against float64, then TFLOP/s against sm80's, mode 0), twice in two processes.
set -u
hb=/tmp/hb63; mkdir -p $hb && tar -xzf .harness_build/s63/M.tgz -C $hb
s=$SECONDS; OUTDIR=$hb ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh > $OUT/hbuild.log 2>&1; echo "harness build rc=$? in $((SECONDS - s)) s"; tail -2 $OUT/hbuild.log
for r in 1 2; do
  s=$SECONDS
  HARNESS_DIR=$hb SM90_D128_MODES=2,4 timeout ${H2_LIMIT:-150} python3 benchmarks/tune_tf32_bwd.py --sm90-d128 2>&1 | grep -v Warn > $OUT/tune_d128_$r.log
  echo "tune run $r rc=$? in $((SECONDS - s)) s"; tail -24 $OUT/tune_d128_$r.log
done
