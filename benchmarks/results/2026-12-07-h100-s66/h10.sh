# h7.sh reordered for a short budget (session 66): WG=2 numerics and A/B timing, the backward's mode 4 against mode 3,
# the clock probe (h9.sh), then the sanitizers, the bitwise comparison and ncu.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
A=/tmp/hA; B=/tmp/hB; mkdir -p $A $B /tmp/n65 && tar -xzf .harness_build/N65.tgz -C /tmp/n65
cp /tmp/n65/N65/* $A/ && cp /tmp/n65/N65/* $B/ && cp .harness_build/wg2.o $A/flash_fwd_sm90_tf32.o
for d in $A $B; do OUTDIR=$d ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh > /dev/null 2>&1; echo "link $d rc=$?"; done
s=$SECONDS; TF32_D=256 timeout -k 5 100 python3 benchmarks/sm90_check.py --phase tf32 --lib $A --out /tmp/oa > $OUT/a_tf32.log 2>&1
echo "A tf32 rc=$? in $((SECONDS - s)) s"; grep -v Warn $OUT/a_tf32.log | tail -4
s=$SECONDS
for r in A1:$A B1:$B A2:$A B2:$B; do
  timeout -k 5 45 python3 benchmarks/harness_loop_ab.py time ${r#*:} ${r%%:*} tf32d256 >> $OUT/ab_loop.log 2>&1
done
echo "loop A/B in $((SECONDS - s)) s"; python3 benchmarks/harness_loop_ab.py summary $OUT/ab_loop.log > $OUT/ab_summary.txt 2>&1; cat $OUT/ab_summary.txt
# The head-dim-256 TF32 backward's variant 3 (mode 4: the d panels pipelined; compiled only) against the default (mode
# 3): numerics of the 15 cases each, TFLOP/s, then memcheck / racecheck of mode 4.
s=$SECONDS; SM90_D256_MODES=3,4 HARNESS_DIR=$B timeout -k 5 90 python3 benchmarks/tune_tf32_bwd.py --sm90-d256 > $OUT/bwd_v3.log 2>&1
echo "bwd d256 modes 3,4 rc=$? in $((SECONDS - s)) s"; grep -v Warn $OUT/bwd_v3.log | grep -E "numerics|\| 256" | head -20
bash .harness_build/s65/h9.sh
for tool in memcheck racecheck; do
  s=$SECONDS
  cases=tf_d256,t256_empty_rows_causal,t256_drop_softcap_causal
  [[ $tool == memcheck ]] || cases=tf_d256,t256_valid_causal_gqa
  TF32SAN_CASES=$cases timeout -k 5 70 compute-sanitizer --tool $tool --print-limit 20 \
    python3 benchmarks/sm90_check.py --phase tf32sanitize --lib $A --out /tmp/oa >> $OUT/a_sanitize.log 2>&1
  echo "$tool rc=$? in $((SECONDS - s)) s"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/a_sanitize.log | tail -1
done
for x in A:$A B:$B; do
  TF32_D=256 timeout -k 5 60 python3 benchmarks/sm90_check.py --phase tf32save --lib ${x#*:} --save /tmp/s_${x%%:*}.pt > /tmp/save_${x%%:*}.log 2>&1
  echo "tf32save ${x%%:*} rc=$?"
done
python3 benchmarks/sm90_check.py --phase densecmp --a /tmp/s_A.pt --b /tmp/s_B.pt > $OUT/cmp.log 2>&1; echo "densecmp rc=$?"; tail -4 $OUT/cmp.log
for tool in memcheck racecheck; do
  s=$SECONDS
  SM90_D256_MODES=4 D256SAN_CASES=t256_tiny,t256_window_no_key,t256_causal_gqa HARNESS_DIR=$B timeout -k 5 90 \
    compute-sanitizer --tool $tool --print-limit 20 python3 benchmarks/tune_tf32_bwd.py --sm90-d256 --sanitize >> $OUT/bwd_v3_san.log 2>&1
  echo "bwd mode 4 $tool rc=$? in $((SECONDS - s)) s"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/bwd_v3_san.log | tail -1
done
# Last, if time is left: what bounds the head-dim-256 TF32 backward's default (variant 2): ncu --set full of one launch
# (profile_one.py 4096 256 0 fp32 tf32, B = 4) and its stall table.
s=$SECONDS; PROFILE_B=4 HARNESS_DIR=$B timeout -k 5 90 ncu --clock-control none -k regex:flash_bwd_sm90_tf32_d256_kernel \
  --launch-count 1 --set full -o /tmp/b256 python3 benchmarks/profile_one.py 4096 256 0 fp32 tf32 > /dev/null 2>&1
echo "ncu bwd d256 rc=$? in $((SECONDS - s)) s"
ncu -i /tmp/b256.ncu-rep --page details 2>/dev/null | grep -E "Duration|Throughput|Pipe|Issue Slots|Eligible|Registers" > $OUT/ncu_b256.txt
ncu -i /tmp/b256.ncu-rep --page source --print-source sass --csv 2>/dev/null | gzip > /tmp/src_b256.csv.gz
python3 benchmarks/ncu_stalls.py /tmp/src_b256.csv.gz 25 >> $OUT/ncu_b256.txt 2>&1; head -40 $OUT/ncu_b256.txt
