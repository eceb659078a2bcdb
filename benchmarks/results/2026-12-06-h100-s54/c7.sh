# Session 54, call 7: call 5's timing of our two op libraries again (call 5 ran the anchors, then found TensorFlow's
# environment unset: its install.sh had run in call "install" already and failed the second time, so env.sh was not
# sourced). The anchors are call 5's (bench1/, bench2/ anchors.json, this machine minutes before). Order: main, cand,
# cand, main. The candidates' library stays in tf_flashattn/ for call 6.
set -u
. .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TF_CPP_MIN_LOG_LEVEL=2
so=tf_flashattn/_tf_flashattn_ops.cpython-311-x86_64-linux-gnu.so
md5sum /root/libs/*.so
i=0
for lib in main cand cand main; do
  i=$((i + 1)); run=$(( (i + 1) / 2 ))
  d=$OUT/bench$run; mkdir -p $d
  cp /root/libs/$lib.so $so
  start=$SECONDS
  BENCH_INNER=1 BENCH_IMPLS= BENCH_KERAS_D= timeout 100 python3 benchmarks/gpu_attention.py $d/ours_$lib.json \
    > /root/ours_${lib}_$run.log 2>&1; echo "ours $lib $run rc=$? in $((SECONDS - start)) s"
  tail -2 /root/ours_${lib}_$run.log
done
cp /root/libs/cand.so $so
