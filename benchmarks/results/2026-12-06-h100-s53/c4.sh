# Session 53, call 4: the index-masked and bias D = 64 kernels through TensorFlow, one call per step
# (dense_tf_bench.py), main's op library (carried in .harness_build/so_main/) against the candidates' (left in
# tf_flashattn/ by call 2), alternating processes: main, cand, main, cand.
set -u
. .device-tf/env.sh
export PYTHONPATH=$PWD/benchmarks:$PWD${PYTHONPATH:+:$PYTHONPATH} TF_CPP_MIN_LOG_LEVEL=2
so=tf_flashattn/_tf_flashattn_ops.cpython-311-x86_64-linux-gnu.so
mkdir -p /root/libs && cp $so /root/libs/cand.so && cp .harness_build/so_main/$(basename $so) /root/libs/main.so
md5sum /root/libs/*.so
mkdir -p $OUT/dense
for run in 1 2; do
  for lib in main cand; do
    cp /root/libs/$lib.so $so
    start=$SECONDS
    BENCH_DENSE_D=64 BENCH_DENSE_FEATURES=none,key_mask,key_mask_causal BENCH_DENSE_KERAS=0 timeout 200 \
      python3 benchmarks/dense_tf_bench.py $OUT/dense/pad_${lib}_$run.json > $OUT/dense/pad_${lib}_$run.log 2>&1
    echo "pad $lib $run rc=$? in $((SECONDS - start)) s"
    start=$SECONDS
    BENCH_T=4096 BENCH_DENSE_D=64 BENCH_DENSE_FEATURES=none,bias BENCH_DENSE_KERAS=0 timeout 120 \
      python3 benchmarks/dense_tf_bench.py $OUT/dense/bias_${lib}_$run.json > $OUT/dense/bias_${lib}_$run.log 2>&1
    echo "bias $lib $run rc=$? in $((SECONDS - start)) s"
  done
done
cp /root/libs/cand.so $so
python3 - <<'PY'
import glob, json, os
out = os.environ["OUT"] + "/dense"
rows = {}
for path in sorted(glob.glob(out + "/*.json")):
    kind, lib, run = os.path.basename(path)[:-5].split("_")
    for r in json.load(open(path)):
        for metric in ("fwd_bwd_ms_inner1", "fwd_ms_inner1", "fwd_ms_inner8"):
            rows.setdefault((r["feature"], r["T"], metric), {}).setdefault(lib, []).append(r[metric])
for (feature, T, metric), v in sorted(rows.items()):
    m, c = v.get("main", []), v.get("cand", [])
    ratio = (sum(m) / len(m)) / (sum(c) / len(c)) if m and c else float("nan")
    print(f"{feature:16s} T={T:5d} {metric:18s} main {m} cand {c} speed-up {ratio:.3f}")
PY
