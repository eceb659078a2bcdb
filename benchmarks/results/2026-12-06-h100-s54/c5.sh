# Session 54, call 5 (a fresh machine: call 4 found the first machine gone and TensorFlow missing, so the parts came
# over again): the 36-shape table through TensorFlow, one call per step, twice, each run after its own
# FlashAttention-2 / cuDNN anchors (PyTorch SDPA, the same GPU). Each run times two op libraries in turn: main's
# (tf_flashattn/'s, md5 dbc1b4c9...: FA_SM90_BWD_DESC_ADD) and the candidates' (/root/libs/cand.so, carried with the
# last TensorFlow part: main's tree at de30058 with FA_SM90_FWD_FFMA_SOFTMAX and FA_SM90_TF32_BWD_DESC_ADD at 1).
# Order: run 1 main then cand, run 2 cand then main. The candidates' library stays in tf_flashattn/ for call 6.
set -u
bash .device-tf/install.sh > /dev/null && . .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TF_CPP_MIN_LOG_LEVEL=2
so=tf_flashattn/_tf_flashattn_ops.cpython-311-x86_64-linux-gnu.so
cp $so /root/libs/main.so; md5sum /root/libs/*.so
for run in 1 2; do
  d=$OUT/bench$run; mkdir -p $d
  start=$SECONDS
  python3 .device-tf/anchors_torch.py $d/anchors.json > /root/anchors$run.log 2>&1; echo "anchors $run rc=$? in $((SECONDS - start)) s"
  if [ $run = 1 ]; then libs="main cand"; else libs="cand main"; fi
  for lib in $libs; do
    cp /root/libs/$lib.so $so
    start=$SECONDS
    BENCH_INNER=1 BENCH_IMPLS= BENCH_KERAS_D= timeout 150 python3 benchmarks/gpu_attention.py $d/ours_$lib.json \
      > /root/ours_${lib}_$run.log 2>&1; echo "ours $lib $run rc=$? in $((SECONDS - start)) s"
    tail -2 /root/ours_${lib}_$run.log
  done
done
cp /root/libs/cand.so $so
# (the tables are made on the CPU machine from the six JSON files: results_table.py anchors.json ours_<lib>.json)
