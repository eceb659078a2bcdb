# Session 39: the Hopper TF32 forward padded up (obj39t = obj39b + this tree's flash_fwd_sm90_tf32.o). Its numerics
# (every variant, the pad cases, fallbacks), memcheck of tf32sanitize, pad_bench --tf32, and its IDX kernels at the
# exact head dims against objfin's (changed code; the plain kernels' machine code is unchanged).
set -u
link() { mkdir -p $1 && tar xzf .device-tf/objfin.tgz -C $1 && { [[ -z $2 ]] || tar xzf .device-tf/$2.tgz -C $1; } &&
  OUTDIR=$1 HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1; }
link /tmp/hA ""; link /tmp/hT obj39t
R=$OUT/r; mkdir -p $R
run() { local name=$1 lim=$2; shift 2; local t0=$SECONDS
  timeout -k 5 $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? ($((SECONDS - t0)) s)"; }
run tf32 150 python3 benchmarks/sm90_check.py --phase tf32 --lib /tmp/hT --out $R
grep -E "^FAIL|tf32:" $R/tf32.log | cut -c1-220 | head -12; grep -c "^PASS t_pad" $R/tf32.log
run tf32_memcheck 120 compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/sm90_check.py --phase tf32sanitize --lib /tmp/hT
grep -E "ERROR SUMMARY|^FAIL" $R/tf32_memcheck.log | head -4
run pad_tf32 90 python3 benchmarks/pad_bench.py --lib /tmp/hT --tf32 --shapes 128,80,96,64/128 --out $R/pad_tf32.json
cat $R/pad_tf32.log | tail -17
for r in 1 2; do for v in A T; do timeout 60 python3 .device-tf/tf32idx_ab.py /tmp/h$v $v$r >> $R/idx_ab.log 2>&1; done; done
grep TF32IDX $R/idx_ab.log | sort -k3,4
tar czf $OUT/n39f.tgz -C $OUT r && rm -rf $R
