# Session 57, call 1 (prepared in session 56; /root/ok_<build> marks the builds that call 2 then times): candidates for the dropout bar and FFMA, harness only
# (.harness_build/cand57.tgz; carry it). D2 = main's objects at session 56's defaults (FA_SM90_BWD_DROP128 2); each
# other build is D2 with one object rebuilt (the tarball holds only that object; the rest are copied from D2):
#   U1: flash_bwd_sm90.o, -DFA_SM90_BWD_DROP_UNDER=1 (draws under S^T / dP^T where the loop is not rotated: D = 64,
#       D = 128 DET)
#   D3: flash_bwd_sm90.o, -DFA_SM90_BWD_DROP128=3 (2 + the early dV issue; spills 64 / 72 bytes)
#   P1: flash_bwd_sm90.o, -DFA_SM90_BWD_DROP_PAIR=1 (each Philox call drawn once per warp pair, halves exchanged
#       through shared memory and a 64-thread named barrier)
#   F1: flash_fwd_sm90.o, -DFA_SM90_FWD_DROP_UNDER=1 (the forward's draws under Q K^T)
#   F2: flash_fwd_sm90.o, -DFA_SM90_FWD_FFMA_SOFTMAX=1 (with the masked tiles' loop without its multiply by 1)
#   F3: flash_fwd_sm90.o, -DFA_SM90_FWD_DROP64_3WG=1 (the D = 64 dropout forward on 3 consumers, schedule 11)
# Every candidate must give O, lse, dK, dV (and dQ in deterministic mode) bit for bit D2's (sm90_bwd_check.py's
# splitdsave with SAVE_SET=drop, then splitdcmp; its runs include the forward). Then numerics, sanitizers for P1 (shared memory and barriers are new), dropout_speed.py.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tar xzf .harness_build/cand57.tgz -C .harness_build
for b in U1 D3 P1 F1 F2 F3; do cp -n .harness_build/D2/*.o .harness_build/$b/; done
for b in D2 U1 D3 P1 F1 F2 F3; do OUTDIR=.harness_build/$b ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1; done
for b in D2 P1 U1 D3 F3 F1; do
  SAVE_SET=drop timeout -k 5 90 python3 benchmarks/sm90_bwd_check.py --phase splitdsave --lib .harness_build/$b \
    --save /root/sv_$b.pt > $OUT/sv_save_$b.log 2>&1
  echo "splitdsave $b rc=$?"; grep "^splitdsave" $OUT/sv_save_$b.log
done
for b in P1 U1 D3 F3 F1; do
  python3 benchmarks/sm90_bwd_check.py --phase splitdcmp --a /root/sv_$b.pt --b /root/sv_D2.pt > $OUT/sv_cmp_$b.log 2>&1
  rc=$?; echo "splitdcmp $b vs D2 rc=$rc"; [[ $rc == 0 ]] && touch /root/ok_$b; grep -E "^FAIL|^splitdcmp" $OUT/sv_cmp_$b.log | head -5
done
for b in P1 U1 D3; do
  for ph in numerics det; do
    timeout -k 5 60 python3 benchmarks/sm90_bwd_check.py --phase $ph --lib .harness_build/$b > $OUT/${b}_$ph.log 2>&1
    echo "bwd $ph $b rc=$?"; grep -E "^FAIL|numerics" $OUT/${b}_$ph.log | cut -c1-200 | tail -3
  done
done
for tool in memcheck racecheck; do
  SANITIZE_PREFIX=drop,bpad_d80 timeout -k 5 100 compute-sanitizer --tool $tool --print-limit 20 python3 \
    benchmarks/sm90_bwd_check.py --phase sanitize --lib .harness_build/P1 > $OUT/P1_$tool.log 2>&1
  echo "$tool P1 rc=$?"; grep -E "^FAIL|^numerics|SUMMARY" $OUT/P1_$tool.log | head -4
done
for b in F3 F1 F2; do
  timeout -k 5 150 python3 benchmarks/sm90_check.py --phase numerics --lib .harness_build/$b > $OUT/${b}_numerics.log 2>&1
  rc=$?; echo "fwd numerics $b rc=$rc"; [[ $rc == 0 && $b == F2 ]] && touch /root/ok_$b; grep -E "^FAIL|^numerics" $OUT/${b}_numerics.log | cut -c1-200 | head -6
done
for b in D2 P1 U1 D3 F3 F1; do
  d=$OUT/ds_$b; mkdir -p $d
  timeout -k 5 90 python3 benchmarks/dropout_speed.py --lib .harness_build/$b --head-dims 64,128 --out $d > $d/ds.log 2>&1
  echo "dropout_speed $b rc=$?"; grep -E "^\| [0-9]|mask checks" $d/ds.log | tail -9
done
