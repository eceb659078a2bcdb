# Session 50: the README's test command on a GPU machine (`python -m pytest tests -q`, with -n 8), the first run
# there of conftest's on_cpu / TF_FORCE_GPU_ALLOW_GROWTH default and of every test file in one pytest call.
# TF_FORCE_GPU_ALLOW_GROWTH is deliberately left unset: conftest must set it. keras-hub's wheels carried in .whl.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
bash .device-tf/install.sh > /dev/null && . .device-tf/env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:${PYTHONPATH:-}:/tmp/site TF_CPP_MIN_LOG_LEVEL=2
unset TF_FORCE_GPU_ALLOW_GROWTH
mkdir -p $OUT/p
python3 -c "import keras_hub, keras, tensorflow as tf; print('keras_hub', keras_hub.__version__, 'keras', keras.__version__, 'tf', tf.__version__, tf.config.list_physical_devices('GPU'))"
start=$SECONDS
timeout ${P50_LIMIT:-540} python3 -m pytest tests -q -p no:cacheprovider -n ${JOBS:-8} -rfEs --durations=15 \
  > $OUT/p/all.log 2>&1
echo "README test command rc=$? in $((SECONDS - start)) s"
grep -E "^(FAILED|ERROR)" $OUT/p/all.log | cut -c1-240 | head -40
tail -1 $OUT/p/all.log
grep -E "^SKIPPED" $OUT/p/all.log | cut -c1-200 | head -25
tar czf $OUT/p50.tgz -C $OUT p && rm -rf $OUT/p; ls -la $OUT
