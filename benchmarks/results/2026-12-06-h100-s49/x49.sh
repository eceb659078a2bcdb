# Session 49, second lease: the Keras-facing test files on the GPU (last run on a GPU 2026-11-30, before the Hopper
# kernels): Keras integration (enable_flash_attention), KerasHub models, the KV cache, the Keras layers. Op library
# of f8bb395 (as in t49.sh); keras-hub 0.32.0 and the wheels it imports that the machine lacks, carried in .whl.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
bash .device-tf/install.sh > /dev/null && . .device-tf/env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:${PYTHONPATH:-}:/tmp/site TF_CPP_MIN_LOG_LEVEL=2
mkdir -p $OUT/x
python3 -c "import keras_hub, keras, tensorflow as tf; print('keras_hub', keras_hub.__version__, 'keras', keras.__version__, 'tf', tf.__version__)"
start=$SECONDS
TF_FORCE_GPU_ALLOW_GROWTH=true timeout ${X49_LIMIT:-420} python3 -m pytest -q -p no:cacheprovider -n ${JOBS:-8} -rA \
  tests/test_keras_integration.py tests/test_kerashub.py tests/test_kv_cache.py tests/test_layers.py > $OUT/x/extra.log 2>&1
echo "extra tests rc=$? in $((SECONDS - start)) s"
grep -E "^(FAILED|ERROR)" $OUT/x/extra.log | cut -c1-220 | head -30
tail -1 $OUT/x/extra.log
grep -E "^SKIPPED" $OUT/x/extra.log | cut -c1-200 | head -10
tar czf $OUT/x49.tgz -C $OUT x && rm -rf $OUT/x; ls -la $OUT
