# Session 67, after the 20 parts (carry .device-tf/install.sh, env.sh, small, stubs, .whl, the op library built here
# from 1dd5c7d's tree as tf_flashattn's .so and _build_info.py): install, keras-hub's wheels; the float32 (TF32) table
# at head dim 256 against Keras under XLA (the head-dim-256 TF32 defaults of 167a6ef through TensorFlow), then the
# parallel part of every test file (README's `python -m pytest tests -q` on a GPU machine).
set -u
s=$SECONDS; bash .device-tf/install.sh > /dev/null; echo "install rc=$? in $((SECONDS - s)) s"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl; echo "wheels rc=$?"
md5sum tf_flashattn/_tf_flashattn_ops*.so; tail -1 tf_flashattn/_build_info.py
mkdir -p $OUT/f32; s=$SECONDS; OUT=$OUT/f32 F32_D=256 timeout -k 5 ${T_F32:-160} bash benchmarks/gpu_run.sh float32
echo "float32: $((SECONDS - s)) s"
export PYTEST_ARGS="--deselect tests/test_build.py::test_results_folders_are_all_cited --deselect tests/test_build.py::test_docs_name_only_files_that_exist[benchmarks/RESULTS.md]"
s=$SECONDS; ALLTESTS_PART=parallel timeout -k 10 ${T_PAR:-330} bash benchmarks/gpu_run.sh alltests; echo "parallel: $((SECONDS - s)) s"
