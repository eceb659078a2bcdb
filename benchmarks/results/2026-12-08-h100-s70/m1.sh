# memcheck of the D = 64 / 128 TF32 backwards' tile-edge tests (session 69's filter missed them)
set -u
. .device-tf/env.sh; export PYTHONPATH=$PWD:$PYTHONPATH:/tmp/site TF_CPP_MIN_LOG_LEVEL=2
md5sum tf_flashattn/_tf_flashattn_ops*.so
s=$SECONDS
timeout -k 5 ${T_MC:-300} compute-sanitizer --tool memcheck --print-limit 20 python3 -m pytest -q -p no:cacheprovider -x \
  tests/test_gpu.py -k "tf32_tile_edges" > $OUT/memcheck.log 2>&1; echo "memcheck rc=$? ($((SECONDS - s)) s)"
grep -E "ERROR SUMMARY|passed|failed|error" $OUT/memcheck.log | tail -5
