# Session 49, through TensorFlow (after the 29 parts of .device-tf/rechunk3): install, then the GPU tests with the op
# library built here from f8bb395 (first GPU run of 36cbf09's test changes, 29b48e1's gold-linked library, the pruned
# Hopper forward schedules of b8a2642 / 84be68d and their tests test_hopper_forward_kernels_run and
# test_schedule_requests_a_release_build_lacks), then a mutation: with TF_FLASHATTN_SM90_TF32_BWD_DENSE=0 the dense
# TF32 calls go to sm80's kernel, so test_features' dense_mask and all_masks TF32 cases must fail their launch check.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
bash .device-tf/install.sh > /dev/null && . .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p $OUT/r
start=$SECONDS
PYTEST_ARGS=-rA timeout ${T49_LIMIT:-420} bash benchmarks/gpu_run.sh tests > $OUT/r/tests.out 2>&1; echo "tests rc=$? in $((SECONDS - start)) s"
grep -E "passed|failed|error" $OUT/r/tests.out | tail -5
grep -E "FAILED|ERROR" $OUT/gpu_tests.log | head -20
grep -E "^(PASSED|SKIPPED|FAILED).*(hopper_forward_kernels_run|release_build_lacks)" $OUT/gpu_tests.log | cut -c1-150 | head -4
grep -c "^PASSED" $OUT/gpu_tests.log
cp $OUT/*.log $OUT/r/ 2>/dev/null
start=$SECONDS
TF_FORCE_GPU_ALLOW_GROWTH=true TF_FLASHATTN_SM90_TF32_BWD_DENSE=0 timeout 100 python3 -m pytest -q -p no:cacheprovider \
  tests/test_gpu.py -k "test_features and tf32" -rf > $OUT/r/mut_dense.out 2>&1; echo "mutation rc=$? in $((SECONDS - start)) s"
grep -E "^FAILED|passed|failed" $OUT/r/mut_dense.out | cut -c1-200
grep -c "Hopper kernels not launched: \['sm90_tf32_bwd_d64'\]" $OUT/r/mut_dense.out
tar czf $OUT/t49.tgz -C $OUT r && find $OUT -mindepth 1 ! -name t49.tgz -delete; ls -la $OUT
