# Session 59, call 5 (after the TensorFlow bring-over; carry the candidate op library chosen from calls 1-3 as
# tf_flashattn's library, e.g. .harness_build/so_s58_S2/, and install.sh / env.sh): the 36-shape table through
# TensorFlow, one call per step, twice, each right after its own FlashAttention-2 / cuDNN anchors; two libraries in each
# run: "cand" (carried) and "main" (/root/libs/main.so from call 4); run 1: cand, main; run 2: main, cand.
set -u
bash .device-tf/install.sh > /dev/null; . .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TF_CPP_MIN_LOG_LEVEL=2
so=$(ls tf_flashattn/_tf_flashattn_ops*.so); mkdir -p /root/libs && cp $so /root/libs/cand.so; md5sum /root/libs/*.so
for run in 1 2; do
  d=$OUT/bench$run; mkdir -p $d
  start=$SECONDS
  python3 .device-tf/anchors_torch.py $d/anchors.json > /root/anchors_$run.log 2>&1; echo "anchors $run rc=$? in $((SECONDS - start)) s"
  if [[ $run == 1 ]]; then libs="cand main"; else libs="main cand"; fi
  for lib in $libs; do
    cp /root/libs/$lib.so $so
    start=$SECONDS
    BENCH_INNER=1 BENCH_IMPLS= BENCH_KERAS_D= timeout 150 python3 benchmarks/gpu_attention.py $d/ours_$lib.json \
      > /root/ours_${lib}_$run.log 2>&1; echo "ours $lib $run rc=$? in $((SECONDS - start)) s"
  done
  for lib in cand main; do
    python3 benchmarks/results_table.py $d/anchors.json $d/ours_$lib.json > $d/table_$lib.md 2>&1
  done
  tail -37 $d/table_cand.md | cut -d'|' -f1-4,8-11
done
cp /root/libs/cand.so $so
