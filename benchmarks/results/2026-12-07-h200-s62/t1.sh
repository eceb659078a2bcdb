# Session 62, GPU tests (carry the op library built from 9679352 with FA_SM90_FWD_SKIP_RESCALE 2 and
# FA_SM90_FWD_SOFTMAX_UNDER_PV 1 as tf_flashattn's .so and _build_info.py, .device-tf/env.sh, .whl): every test file,
# the parallel part then the serial one (README's `python -m pytest tests -q` in two parts).
set -u
mkdir -p /root/libs && cp tf_flashattn/_tf_flashattn_ops*.so /root/libs/g2.so && md5sum /root/libs/g2.so
s=$SECONDS; ALLTESTS_PART=parallel timeout -k 10 300 bash benchmarks/gpu_run.sh alltests; echo "parallel: $((SECONDS - s)) s"
s=$SECONDS; ALLTESTS_PART=serial timeout -k 10 280 bash benchmarks/gpu_run.sh alltests; echo "serial: $((SECONDS - s)) s"
