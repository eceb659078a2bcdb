# Session 70: the op library built with FA_SM90_FWD_IDX_UNDER_PV=1 FA_SM90_FWD_FFMA_SOFTMAX=1 (UF, .harness_build/uf_lib)
# through TensorFlow: the GPU tests' parallel part on it, then the 36-shape bf16 table with anchors, ours R (the
# defaults, this tree's library) and ours UF alternating, R UF R UF.
set -u
. .device-tf/env.sh; export TF_CPP_MIN_LOG_LEVEL=2
rm -rf /tmp/uf && mkdir /tmp/uf && tar -cf - --exclude=./.harness_build --exclude=./.whl --exclude=./.device-tf . | tar -xf - -C /tmp/uf
cp .harness_build/uf_lib/* /tmp/uf/tf_flashattn/; md5sum tf_flashattn/_tf_flashattn_ops*.so /tmp/uf/tf_flashattn/_tf_flashattn_ops*.so
tail -1 /tmp/uf/tf_flashattn/_build_info.py
s=$SECONDS
(cd /tmp/uf && PYTHONPATH=/tmp/uf:$PYTHONPATH:/tmp/site timeout -k 5 ${T_TEST:-290} python3 -m pytest -q -n 8 tests -p no:cacheprovider -rfEs \
  --deselect tests/test_build.py::test_results_folders_are_all_cited \
  --deselect "tests/test_build.py::test_docs_name_only_files_that_exist[benchmarks/RESULTS.md]" \
  -k "not ((deterministic or past_2_to_31 or dense_backward_switch or command_buffers) and not (float32 or tf32))" \
  > $OUT/uf_tests.log 2>&1); echo "uf tests rc=$? ($((SECONDS - s)) s)"
grep -E "^(FAILED|ERROR)" $OUT/uf_tests.log | cut -c1-200 | head -20; tail -2 $OUT/uf_tests.log
d=$OUT/ab; mkdir -p $d; s=$SECONDS
timeout 120 python3 .device-tf/anchors_torch.py $d/anchors.json > $d/anchors.log 2>&1; echo "anchors rc=$? in $((SECONDS - s)) s"
for r in R1 UF1 R2 UF2; do
  s=$SECONDS; root=$PWD; [[ $r == UF* ]] && root=/tmp/uf
  (cd $root && PYTHONPATH=$root:$PYTHONPATH:/tmp/site BENCH_INNER=1 BENCH_IMPLS= BENCH_KERAS_D= timeout 100 python3 benchmarks/gpu_attention.py \
    $d/ours_$r.json > $d/ours_$r.log 2>&1); echo "ours $r rc=$? in $((SECONDS - s)) s"
done
