# Session 53, call 14: compute-sanitizer memcheck and racecheck of DB's backward (call 11's objects) on the D = 128
# sanitize cases (odd sizes, causal both alignments, GQA, tile edges, a deterministic one).
set -u
for tool in memcheck racecheck; do
  t0=$SECONDS
  SANITIZE_PREFIX=odd_d128,gqa4_d128_causal_br,tiles_65_129_causal,empty_rows_causal timeout -k 5 80 \
    compute-sanitizer --tool $tool --print-limit 20 python3 benchmarks/sm90_bwd_check.py --phase sanitize \
    --lib .harness_build/DB > $OUT/${tool}_bwd_DB.log 2>&1
  echo "$tool DB rc=$? ($((SECONDS - t0)) s)"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^numerics|^FAIL" $OUT/${tool}_bwd_DB.log | cut -c1-200 | head -4
done
