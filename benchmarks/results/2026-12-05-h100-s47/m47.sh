# Session 47, mutation check of test_sm80_kernels_on_hopper (after the 29 parts again): the op library carried here
# was linked with sm80/flash_bwd.cu compiled (sm_90 only) with the head-dim-128 index-masked backward marked kSmall
# instead of kBig, so its body in the sm_90 SASS is a trap. The default Hopper path never runs that kernel
# (test_features passes); with TF_FLASHATTN_SM90=0 it does, and test_sm80_kernels_on_hopper must fail.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
bash .device-tf/install.sh > /dev/null && . .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p $OUT/m
TF_FORCE_GPU_ALLOW_GROWTH=true timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "test_features or test_padding_masks_with_causal_on_the_index_path" > $OUT/m/default_path.log 2>&1; echo "default path rc=$?"
tail -2 $OUT/m/default_path.log
TF_FORCE_GPU_ALLOW_GROWTH=true timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k test_sm80_kernels_on_hopper > $OUT/m/switch_off.log 2>&1; echo "test_sm80_kernels_on_hopper rc=$?"
grep -E "passed|failed|Error|error" $OUT/m/switch_off.log | head -12
tar czf $OUT/m47.tgz -C $OUT m && rm -rf $OUT/m; ls -la $OUT
