#!/usr/bin/env bash
# Device calls on the lent GPU. Writes logs and JSON to $OUT. Modes, one or several comma-separated
# (e.g. `bash benchmarks/gpu_run.sh tune,tests`):
#   harness   no TensorFlow needed: kernel harness (pybind11, built there with nvcc) numerics +
#             speed vs torch SDPA in one process, tile-configuration timings, compute-sanitizer (~4 min)
#   profile   no TensorFlow needed (builds the harness unless tune/harness did in the lease): ncu of
#             our backward and FlashAttention-2's at T=4096 D=128 bf16, side by side, with stall
#             reasons and each pipe's use (~1 min); PROFILE_DIR=fwd|bwd, PROFILE_D, PROFILE_T, PROFILE_B (default
#             16384 / PROFILE_T), PROFILE_CFG (our variant); PROFILE_KNAME (our kernel's name regex),
#             PROFILE_FEATS (profile_one.py's features, e.g. dropout), PROFILE_FA2=0 (ours alone); PROFILE_ANCHOR=cudnn
#             profiles cuDNN's kernels (SDPA's cuDNN backend) instead of FlashAttention-2's: those launched inside
#             profile_fa2.py's NVTX range of that direction (PROFILE_ANCHOR_LAUNCHES of them, default 4; their names
#             are not assumed); PROFILE_DTYPE=tf32 profiles the float32
#             TF32 kernel of that direction instead (sm80/flash_*_tf32.cu; FlashAttention-2 has no
#             float32, so ours alone; PROFILE_CFG then sets FA_TF32_BWD_CFG / FA_TF32_FWD_CFG; the
#             forward at head dims 64 and 128 runs the Hopper TF32 kernel unless TF_FLASHATTN_SM90_TF32=0)
#   sm90      no TensorFlow needed: the Hopper forward (cc/kernels/sm90/): harness build (ARCHS=90),
#             ptxas report and cuobjdump -sass counts (HGMMA, UTMALDG, SYNCS, setmaxnreg) of its object,
#             then benchmarks/sm90_check.py's phases, each in its own process under a timeout (building-
#             block self-tests, numerics vs float64 / same-precision torch / our sm80 forward, TFLOP/s vs
#             sm80, FlashAttention-2 and cuDNN; these run the default schedule), and compute-sanitizer
#             memcheck of small cases; then the schedules of the D = 64 / 128 forward (TF_FLASHATTN_SM90_FWD_VARIANT,
#             default 5; phases variants: numerics of each and bitwise equality with variant 0, the first
#             schedule, vbench: TFLOP/s of each next to FA2 and cuDNN, vsanitize under memcheck) (~6 min);
#             the schedules the build has: a release build the defaults and 0, SM90_TUNING=1 (FA_TUNING) all.
#             SM90_PHASES (default all) limits the sm90_check.py phases, e.g. SM90_PHASES=variants,vbench;
#             SM90_SASS=0 skips the ptxas report and SASS counts (a minute of the call);
#             racecheck and synccheck (compute-sanitizer's tools on the sanitize cases) run only when named;
#             so does vcap (the variants phase with the persistent schedule's grid capped at 2 CTAs);
#             vgroup (in the default phases) runs the variants phase with TF_FLASHATTN_SM90_TILE_GROUP=2,
#             the causal tile order's sections of 2 pairs, so that small cases span several (uneven) ones.
#             The float32 TF32 forward (cc/kernels/sm90/flash_fwd_sm90_tf32.cu, on by default) is checked
#             only when named: tf32selftest, tf32 (numerics vs float64 / torch TF32 / our
#             sm80 TF32), tf32dropexact (its dropout mask against the host's, exactly), tf32bench, tf32sanitize
#             (memcheck), tf32racecheck, tf32synccheck, e.g.
#             SM90_PHASES=tf32selftest,tf32,tf32bench,tf32sanitize (sm90_check.py sets
#             TF_FLASHATTN_SM90_TF32=1 for its own process); with SM90_SASS not 0 its ptxas report,
#             HGMMA .TF32 counts and benchmarks/sm90_tf32_sass_check.py (Q's registers kept through the
#             key-tile loop) too; SM90_BUDGET (seconds) caps the tf32 phases together.
#             Files: OUT/sm90_summary.log and OUT/sm90.tar.gz (logs and JSON)
#   sm90bwd   no TensorFlow needed: the Hopper backward (cc/kernels/sm90/flash_bwd_sm90.cu): harness
#             build (ARCHS=90), ptxas report and SASS counts, benchmarks/sm90_bwd_check.py's phases
#             (self-tests of the forward's and the backward's wgmma forms; dq/dk/dv vs float64 torch
#             autograd and our sm80 backward, no mask / causal, the index masks (window, lengths,
#             validity) and dropout (0.1, 0.5; with an exact keep-mask check through dV), each case
#             must launch the sm90 backward; backward TFLOP/s vs sm80, FA2 and cuDNN, with a dropout
#             0.1 row) and compute-sanitizer memcheck of small cases (~6 min). SM90BWD_PHASES (default
#             selftest,det,numerics,d256,padded,tf32pad,tf32det,tf32dropexact,bench,sanitize; det: deterministic
#             mode; d256: the head-dim-256 kernel's numerics; padded: other head dims and Dv != D, padded up to the
#             kernels' (PAD_CASES); tf32pad / tf32det / tf32dropexact: the Hopper TF32 backwards
#             (flash_bwd_sm90_tf32*.cu) at padded head dims and with soft-cap and dropout, in deterministic mode, and
#             their dropout mask exactly; racecheck, synccheck on request; tf32sanitize, tf32racecheck on request:
#             tf32pad's TF32SAN_CASES (dense mask / bias, soft-cap, dropout by default) under memcheck / racecheck;
#             order, obench on request: the key-tile orders of TF_FLASHATTN_SM90_BWD_ORDER, their numerics against order 0 and their TFLOP/s
#             beside FA2 and cuDNN, ~10 s and ~1 min on the H200; OBENCH_ALT=n alternates orders 0 and 1;
#             splitd, splitdbench on request: the split kernel's score options, on by default
#             (TF_FLASHATTN_SM90_BWD_SPLITD=1 set by sm90_bwd_check.py for those phases and sanitize, 0 for
#             the others): bias / dbias at D = 128, soft-cap, dense mask, bias at D = 256,
#             numerics and ms against sm80) limits the phases; SM90BWD_BUDGET (default 560 s) caps
#             the phases' timeouts together (a timed-out phase names its last case). Files:
#             OUT/sm90bwd_summary.log and OUT/sm90bwd.tar.gz
#   ab        no TensorFlow needed: two harness builds, a latency change against its former code, outputs
#             bit for bit and timings: AB_A and AB_B, folders of kernel objects (ARCHS=90; B as A with the
#             changed object rebuilt with the macro that gives the former code back, README "For
#             maintainers"), AB_CHECKS (default splitd,dense): splitd runs sm90_bwd_check.py --phase
#             splitdsave with A, B, A, B and --phase splitdcmp on each pair, dense sm90_check.py --phase
#             densesave / densecmp the same way (~1.5 min), loop benchmarks/harness_loop_ab.py (the backward
#             timed in a loop and by do_bench, A, B, A, B, A, B, then the table; ~40 s; AB_LOOP_SET=mask
#             times the D = 64 index-masked kernel's shapes instead, AB_LOOP_SET=feat dropout and bias, AB_LOOP_SET=d128 the D = 128 kernel, AB_LOOP_SET=drop128 its dropout kernel (and a key mask, unchanged by FA_SM90_BWD_DROP128), AB_LOOP_SET=drop64 the same at D = 64, AB_LOOP_SET=fwd the forward, AB_LOOP_SET=fwdmask its index-masked kernels, AB_LOOP_SET=fwdkeyfrac those kernels with full key lengths, a [B, T] key mask all true and one with 10 % of the keys invalid, AB_LOOP_SET=fwd256 its head-dim-256 kernels (plain, index-masked, dropout), AB_LOOP_SET=fwdping its dropout kernels and head dim 256, AB_LOOP_SET=tf32d256 the float32 (TF32) forward at head dim 256 with and without masks and features; SAVE_SET=main makes
#             splitd compare the D <= 128 kernel's outputs instead, SAVE_SET=all makes dense compare every
#             forward case (sm90_check.py's NUM_CASES and long rows) instead). Files: OUT/ab_summary.log and the logs
#   tf32tune  no TensorFlow needed: the harness build (FA_TUNING), then benchmarks/tune_tf32_bwd.py: the
#             float32 backward's TF32 tile configurations (FA_TF32_BWD_CFG in flash_bwd_tf32.cu), their
#             numerics, dK / dV bits against the default, and TFLOP/s at 16k tokens; TF32TUNE_ARGS adds
#             arguments (--quick: T = 4096 only; --fwd: the head-dim-256 forward's tiles instead,
#             FA_TF32_FWD_CFG in flash_fwd_tf32.cu; --sm90: the Hopper TF32 backward's variants,
#             cc/kernels/sm90/flash_bwd_sm90_tf32.cu, against sm80's; --sm90-d128: its head-dim-128 form,
#             flash_bwd_sm90_tf32_d128.cu; --sm90-d256: the head-dim-256 one, flash_bwd_sm90_tf32_d256.cu,
#             and with --sanitize only a few small cases' numerics, for compute-sanitizer). File: OUT/tune_tf32_bwd.log
#   tune      no TensorFlow needed: the harness build, tile-configuration timings at T=16384 (D=64,
#             128, 256) and T=512 (D=64, 128), numerics of each variant first, and compute-sanitizer
#             over the index-masked bf16 kernels (~2.5 min)
# After TensorFlow was brought over (../shared/device/README.md; benchmarks/device_parts.sh splits its parts to
# fit a call beside this repository and lists the calls), carrying .device-tf/env.sh and the
# op library built here (tf_flashattn/_tf_flashattn_ops*.so + tf_flashattn/_build_info.py):
#   tests     tests/test_gpu.py, tests/test_xla.py (XLA:GPU), tests/test_gpu_decode.py and the Keras-facing
#             files that need no keras-hub (test_layers.py, test_keras_integration.py, test_kv_cache.py: on
#             a GPU their float32 checks must run without TF32, conftest's full_float32), JOBS workers
#             (default 8) (~5 min); GPU_TESTS_EXTRA adds test files (those that need keras-hub, such as
#             test_kerashub.py: carry .whl, see kerashub)
#   alltests  every file in tests/, as the README's `python -m pytest tests -q` runs them on a GPU machine, in two
#             calls' worth: ALLTESTS_PART=parallel (default) all but the tests that start a TensorFlow process of their
#             own on the GPU or take most of its memory, JOBS workers (default 8; the whole directory in one pytest
#             call took 298 s on the H100, 2026-12-06, RESULTS "GPU tests" (c50)); ALLTESTS_PART=serial those, one at
#             a time (`serial` below; its 19 deterministic-mode cases alone took 270 s there); ALLTESTS_PART=both
#             the two one after the other in one call (480 s on the H200, 2026-12-07, RESULTS "GPU tests" (g62)).
#             Needs keras-hub's wheels carried in .whl (see kerashub). OUT/alltests_<part>.log
#   memory    O(N) memory at T=131072
#   train     training throughput, both layers under Keras' XLA (more than 140 s per context: give it a
#             call; TRAIN_ARGS="--contexts 16384" etc. splits it)
#   oldbuild  the XLA layout tests against an older op library carried in .device-tf/old/ (a copy
#             of the tf_flashattn package with its .so; e71678f's: custom calls without layout
#             constraints), to show whether they catch the old behaviour on this GPU (~1 min)
#   maxctx    the longest-context check under XLA, short form: ours at MAXCTX_FLASH (default 262144)
#             and Keras' layer at MAXCTX_KERAS (default 32768, where it ran out of memory before),
#             batch 1, one warm-up and one timed step each (~2-3 min)
#   xlacheck  one training step of the example model with XLA vs without (our layer and Keras'), at
#             contexts 4096 and 16384, and the layouts XLA gave our custom calls (~2 min)
#   async     host time per call (benchmarks/host_overhead.py), the short-sequence rows one call per
#             step (BENCH_INNER=1, T=512,1024) and the example model's training step at contexts 1024
#             and 4096 (without XLA; under XLA with dropout 0.1), each for this build ("after") and
#             for the older package in .device-tf/old ("before": a copy of the tf_flashattn package
#             with its .so; this tree's scripts run both), one after the other in the same call (~6 min);
#             ASYNC_PARTS=overhead or train runs one half
#   decode    decoding through TensorFlow, one call per step: ours vs Keras under XLA
#             (benchmarks/gpu_decode.py, ~2 min)
#   kerashub  a KerasHub Llama (8 layers, dim 2048, 16/4 heads, mixed_bfloat16, XLA) trained with
#             `fit` with and without enable_flash_attention() (benchmarks/kerashub_train.py); needs
#             the keras-hub wheels carried in .whl; KERASHUB_ARGS adds arguments. KERASHUB_PARTS,
#             comma-separated (default main):
#               main    contexts 4096 and 16384, both (~4 min; kerashub_train.{log,json})
#               maxctx  the longest context trained at, batch 1, one fresh process a try: by
#                       default ours doubling from 65536 with a 420 s budget (Keras' attention:
#                       8192 trains, 16384 out of memory, measured); MAXCTX_ARGS replaces the
#                       search arguments (~7 min; kerashub_maxctx.{log,json})
#               diag    at 4096: the op alone (no mask / key_lengths / key_mask), the model with
#                       keras / flash under XLA and without, and an nsys kernel summary of flash
#                       when nsys exists
#                       (~6-7 min; kerashub_diag.log, kerashub_diag.tgz)
#   generate  the example's generate at context 8192 (model dim 1024, 16 heads, 8 layers, bf16;
#             benchmarks/generate_throughput.py): the KV-cached loop with its decode steps under
#             XLA, the same loop without XLA, and the recompute loop; then both loops greedily
#             on a float32 copy (TF32 off) for the bf16 divergence check (GENERATE_ARGS replaces
#             the arguments)
#   hdecode   no TensorFlow needed: the kernel harness's decoding checks and timings against
#             FlashAttention-2 and cuDNN (kernel_harness_check.py --decode); HDECODE_SWEEP=1: the
#             decoding kernel's variants instead (tuning build, benchmarks/decode_sweep.py)
#   hdropout  no TensorFlow needed: dropout's mask (GPU forward against the harness's host mask) and
#             its cost, bf16 forward / backward at [1, 16384, 16, 128] and [4, 4096, 16, 128] with
#             dropout 0 and 0.1 (benchmarks/dropout_speed.py; < 2 min with the harness build)
#   float32   the float32 (TF32) table through TensorFlow against Keras under XLA, one call per step
#             (16k tokens, hidden 1024; RESULTS.md "Float32 (TF32) through TensorFlow"): F32_D head dims
#             (default 64,128,256), F32_T (default 1024,4096,16384); OUT/float32.json, float32.log (~2 min)
#   bench     anchors_torch.py (~75 s), ours at all shapes (~35 s), then the comparisons
#             (BENCH_IMPLS, default keras,keras_nofold,keras_xla) at D=128,64,256 (BENCH_KERAS_D,
#             only head dims in BENCH_D): 392.7 s in all on the H200 (2026-11-29, seventh round;
#             Keras under XLA 191 s of it). It overran 600 s before: Keras' causal
#             rows without XLA spent 36/64/134 s in Grappler's constant folding at T=512/1024/2048
#             (D=128), so causal "keras" rows run only up to BENCH_FOLD_MAX mask elements (2^26:
#             D=256, T=512) and keras_nofold covers every shape. BENCH_SPLIT=1 on nvidia-h200-x2
#             runs the comparisons on the second GPU meanwhile; BENCH_D=128 then BENCH_D=64,256
#             splits it over two calls. Then OUT/table.md (benchmarks/results_table.py). RESULTS.md's table,
#             one call per step without Keras' rows: BENCH_INNER=1 BENCH_IMPLS= BENCH_KERAS_D= (~100 s).
set -uo pipefail
what=${1:-all}
# Modes are the names this header lists; a misspelt one would otherwise run nothing and exit 0.
known=" all $(grep -oE '^#   [a-z0-9]+ ' "$0" | tr -d '#' | xargs) "
for m in ${what//,/ }; do
  [[ $known == *" $m "* ]] || { echo "gpu_run.sh: unknown mode '$m' (known:$known)" >&2; exit 2; }
done
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee $OUT/gpu.txt
has() { [[ ,$what, == *,$1,* || $what == all ]]; }
if has harness || has tune || has tf32tune; then
  NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -2
fi
if has tf32tune; then
  python3 benchmarks/tune_tf32_bwd.py ${TF32TUNE_ARGS:-} 2>&1 | grep -v Warn | tee $OUT/tune_tf32_bwd.log
fi
if [[ ,$what, == *,sm90,* ]]; then (
  d=$OUT/sm90; mkdir -p $d
  hb=${SM90_OUTDIR:-/tmp/hb_sm90}
  # SM90_TUNING=1: a tuning build (FA_TUNING), with the schedules a release build leaves out (1, 2, 3, 4, 6, 9; 7 and
  # 10 but for the plain D = 128 kernel; the dense kernel's 0 at D 64 / 128; TF32 variant 2, and 0 but for dense D 128).
  NVCC_EXTRA=$([[ ${SM90_TUNING:-0} == 1 ]] && echo -DFA_TUNING) OUTDIR=$hb ARCHS=90 bash benchmarks/build_harness.sh \
    > $d/build.log 2>&1; echo "build rc=$?" | tee -a $d/build.log
  tail -1 $d/build.log
  # SM90_SASS=0 skips the ptxas report (a minute of nvcc on one core) and the SASS counts.
  if [[ ${SM90_SASS:-1} != 0 ]]; then
  /usr/local/cuda/bin/nvcc -std=c++17 -O3 -I. -Xcompiler -fPIC -gencode arch=compute_90a,code=sm_90a \
    -DFA_HAS_SM90=1 $([[ ${SM90_TUNING:-0} == 1 ]] && echo -DFA_TUNING) -Xptxas -v -c cc/kernels/sm90/flash_fwd_sm90.cu \
    -o /tmp/sm90_ptxas.o > $d/ptxas.log 2>&1
  grep -E "registers|spill|warning" $d/ptxas.log | sort | uniq -c | head -12
  obj=$hb/flash_fwd_sm90.o
  { echo "== $obj: elf"; cuobjdump -lelf $obj
    cuobjdump -sass $obj > $d/sm90.sass 2>&1
    for ins in HGMMA UTMALDG UTMAPF SYNCS USETMAXREG WARPGROUP HMMA LDL STL; do
      echo "$ins $(grep -c "$ins" $d/sm90.sass)"; done
    echo "== per kernel HGMMA count"; awk '/Function :/{f=$3} /HGMMA/{n[f]++} END{for(k in n) print n[k], k}' $d/sm90.sass
    echo "== sm80 objects carry no sm_90a:"; cuobjdump -lelf $hb/flash_fwd.o; } > $d/sass_counts.txt 2>&1
  gzip -f $d/sm90.sass
  cat $d/sass_counts.txt | head -20
  fi
  phases=${SM90_PHASES:-selftest,numerics,bench,sanitize,variants,vgroup,vbench,vsanitize}
  has_ph() { [[ ,$phases, == *,$1,* ]]; }
  # SM90_BUDGET (seconds, unset: no cap) caps the TF32 phases' timeouts together, as SM90BWD_BUDGET
  # does for sm90bwd: a hung phase then cannot push the call past its limit before the logs are packed.
  tdeadline=$((SECONDS + ${SM90_BUDGET:-100000}))
  tcap() { local left=$((tdeadline - SECONDS - 10)); (( left < $1 )) && echo $left || echo $1; }
  if [[ ${SM90_SASS:-1} != 0 && ,$phases, == *,tf32* ]]; then
    /usr/local/cuda/bin/nvcc -std=c++17 -O3 -I. -Xcompiler -fPIC -gencode arch=compute_90a,code=sm_90a \
      -DFA_HAS_SM90=1 -Xptxas -v -c cc/kernels/sm90/flash_fwd_sm90_tf32.cu -o /tmp/sm90_tf32_ptxas.o > $d/tf32_ptxas.log 2>&1
    grep -E "registers|spill|warning|C7519" $d/tf32_ptxas.log | sort | uniq -c | head -12
    { cuobjdump -sass $hb/flash_fwd_sm90_tf32.o > $d/sm90_tf32.sass 2>&1
      for ins in HGMMA UTMALDG SYNCS USETMAXREG LDL STL; do echo "$ins $(grep -c "$ins" $d/sm90_tf32.sass)"; done
      echo "== per kernel HGMMA count (expected 24 at D = 128, 16 at D = 64, 24 in each mma self-test)"
      awk '/Function :/{f=$3} /HGMMA/{n[f]++} END{for(k in n) print n[k], k}' $d/sm90_tf32.sass
      grep -o "HGMMA[^ ]*" $d/sm90_tf32.sass | sort | uniq -c; } > $d/tf32_sass_counts.txt 2>&1
    gzip -f $d/sm90_tf32.sass
    head -12 $d/tf32_sass_counts.txt
    # Q's register fragments (variants 1 / 2 / 3) must survive the key-tile loop (ptxas once gave them to P
    # at D = 64): benchmarks/sm90_tf32_sass_check.py, from the SASS alone.
    python3 benchmarks/sm90_tf32_sass_check.py $hb/flash_fwd_sm90_tf32.o > $d/tf32_sass_check.txt 2>&1
    echo "tf32 SASS check (Q registers kept through the loop) rc=$?"; grep -E "CLOBBERED|checked" $d/tf32_sass_check.txt
  fi
  for ph in selftest:60 numerics:200 bench:240 variants:150 vbench:100 tf32selftest:60 tf32:240 tf32dropexact:60 tf32bench:240; do
    has_ph ${ph%%:*} || continue
    lim=${ph#*:}; [[ ${ph%%:*} == tf32* ]] && lim=$(tcap $lim)
    (( lim >= 15 )) || { echo "phase ${ph%%:*} skipped: SM90_BUDGET spent"; continue; }
    t0=$SECONDS
    timeout -k 5 $lim python3 benchmarks/sm90_check.py --phase ${ph%%:*} --lib $hb --out $d > $d/${ph%%:*}.log 2>&1
    rc=$?
    echo "phase ${ph%%:*} rc=$rc ($((SECONDS - t0)) s)" | tee -a $d/${ph%%:*}.log
    # numerics runs the D = 256 cases (the newest kernel) last: when it timed out or died, the
    # later phases leave D = 256 out (a hung kernel would otherwise eat bench's and memcheck's limits).
    if [[ ${ph%%:*} == numerics && $rc != 0 ]]; then
      export SM90_SKIP_D256=1; echo "numerics rc=$rc: SM90_SKIP_D256=1 for the later phases"
    fi
    grep -E "SELFTEST|^FAIL|numerics:|variants:|tf32:|^tf32 variant |^variant |TFLOP|^ +[0-9]+ |NOT taken|NOT bitwise|launches [0-9]+, expected|bitwise_vs_nomask=False|bitwise_vs_v0=False|Error|error" \
      $d/${ph%%:*}.log | head -70
  done
  # The variants phase again under a check's switch: vcap caps the persistent schedule's grid at 2 CTAs
  # (TF_FLASHATTN_SM90_PERSISTENT_CTAS), so that its small cases walk many tiles per CTA: q_empty
  # phases past the first, key-less tiles in the middle of a walk, the ring's phases across tiles;
  # vgroup runs the causal tile order in sections of 2 (batch, head) pairs (TF_FLASHATTN_SM90_TILE_GROUP;
  # flash_fwd_sm90.cu's TileOrder): several sections, uneven ones too.
  for spec in vcap:TF_FLASHATTN_SM90_PERSISTENT_CTAS=2 vgroup:TF_FLASHATTN_SM90_TILE_GROUP=2; do
    ph=${spec%%:*}
    has_ph $ph || continue
    t0=$SECONDS; mkdir -p $d/$ph
    env ${spec#*:} timeout -k 5 150 python3 benchmarks/sm90_check.py --phase variants \
      --lib $hb --out $d/$ph > $d/$ph.log 2>&1
    echo "phase $ph rc=$? ($((SECONDS - t0)) s)" | tee -a $d/$ph.log
    grep -E "^FAIL|variants:|defaults:|^variant |bitwise_vs_v0=False|Error|error" $d/$ph.log | head -20
  done
  if has_ph sanitize; then
    timeout -k 5 200 compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/sm90_check.py \
      --phase sanitize --lib $hb > $d/memcheck.log 2>&1; echo "memcheck rc=$?" | tee -a $d/memcheck.log
    grep -E "ERROR SUMMARY|Invalid|^FAIL|^PASS" $d/memcheck.log | head -12
  fi
  if has_ph vsanitize; then
    t0=$SECONDS
    timeout -k 5 240 compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/sm90_check.py \
      --phase vsanitize --lib $hb > $d/vmemcheck.log 2>&1; echo "variants memcheck rc=$? ($((SECONDS - t0)) s)" | tee -a $d/vmemcheck.log
    grep -E "ERROR SUMMARY|Invalid|^FAIL|^variant " $d/vmemcheck.log | head -12
  fi
  if has_ph tf32sanitize && (( $(tcap 240) < 15 )); then echo "tf32sanitize skipped: SM90_BUDGET spent"
  elif has_ph tf32sanitize; then
    t0=$SECONDS
    timeout -k 5 $(tcap 240) compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/sm90_check.py \
      --phase tf32sanitize --lib $hb > $d/tf32_memcheck.log 2>&1; echo "tf32 memcheck rc=$? ($((SECONDS - t0)) s)" | tee -a $d/tf32_memcheck.log
    grep -E "ERROR SUMMARY|Invalid|^FAIL|^PASS" $d/tf32_memcheck.log | head -12
  fi
  # The TF32 forward's sanitize cases under racecheck / synccheck (named only: tf32racecheck, tf32synccheck).
  for tool in racecheck synccheck; do
    has_ph tf32$tool || continue
    t0=$SECONDS
    timeout -k 5 300 compute-sanitizer --tool $tool --print-limit 20 python3 benchmarks/sm90_check.py \
      --phase tf32sanitize --lib $hb > $d/tf32_$tool.log 2>&1; echo "tf32 $tool rc=$? ($((SECONDS - t0)) s)" | tee -a $d/tf32_$tool.log
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|Barrier|^FAIL" $d/tf32_$tool.log | head -12
  done
  # Opt-in (not in the default phases): the sanitize cases under racecheck (shared-memory hazards)
  # and synccheck (barrier misuse), e.g. SM90_PHASES=racecheck,synccheck.
  for tool in racecheck synccheck; do
    has_ph $tool || continue
    t0=$SECONDS
    timeout -k 5 200 compute-sanitizer --tool $tool --print-limit 20 python3 benchmarks/sm90_check.py \
      --phase sanitize --lib $hb > $d/$tool.log 2>&1; echo "$tool rc=$? ($((SECONDS - t0)) s)" | tee -a $d/$tool.log
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|Barrier|^FAIL" $d/$tool.log | head -12
  done
) 2>&1 | tee $OUT/sm90_summary.log
  tar -C $OUT -czf $OUT/sm90.tar.gz sm90 && rm -rf $OUT/sm90
fi
if [[ ,$what, == *,sm90bwd,* ]]; then (
  d=$OUT/sm90bwd; mkdir -p $d
  hb=${SM90_OUTDIR:-/tmp/hb_sm90}
  # The phase timeouts below add up to more than a device call's 600 s: each phase gets at most what
  # is left of SM90BWD_BUDGET (default 560 s from here), so a hang (say in a new kernel's barrier
  # protocol) shortens the later phases instead of the call being cut before its summary and tarball.
  deadline=$((SECONDS + ${SM90BWD_BUDGET:-560}))
  cap() { local left=$((deadline - SECONDS - 10)); (( left < $1 )) && echo $left || echo $1; }
  OUTDIR=$hb ARCHS=90 bash benchmarks/build_harness.sh > $d/build.log 2>&1; echo "build rc=$?" | tee -a $d/build.log
  tail -1 $d/build.log
  # SM90_SASS=0 skips the ptxas report and the SASS counts, as for sm90.
  if [[ ${SM90_SASS:-1} != 0 ]]; then
  /usr/local/cuda/bin/nvcc -std=c++17 -O3 -I. -Xcompiler -fPIC -gencode arch=compute_90a,code=sm_90a \
    -DFA_HAS_SM90=1 -Xptxas -v -c cc/kernels/sm90/flash_bwd_sm90.cu -o /tmp/sm90bwd_ptxas.o > $d/ptxas.log 2>&1
  grep -E "registers|spill|warning|C75" $d/ptxas.log | sed 's/_ZN9flashattn.*//' | sort | uniq -c | head -12
  obj=$hb/flash_bwd_sm90.o
  { cuobjdump -sass $obj > $d/sm90bwd.sass 2>&1
    for ins in HGMMA UTMALDG SYNCS USETMAXREG WARPGROUP REDG UBLKRED LDL STL; do echo "$ins $(grep -c "$ins" $d/sm90bwd.sass)"; done
    echo "== per kernel HGMMA count (expected 48 at D = 128 without dropout or DET (the rotated loop issues S^T and dP^T again), 32 with them; at D = 64 32 in the launch-order kernels without DET, dropout or bias, IDX (index-masked) or not (dQ by columns, lagged: 8 more after the loop), 24 in the plain ORD twin, 20 in the other IDX and the DET ones, 44 in flash_bwd_sm90_d256_kernel (all instantiations), 28 / 44 in flash_bwd_sm90_split_score_kernel at D = 128 / 256, 29 in the self-test, 17 in the D = 256 self-test, 9 in the D = 128 split self-test)"
    awk '/Function :/{f=$3} /HGMMA/{n[f]++} END{for(k in n) print n[k], k}' $d/sm90bwd.sass; } > $d/sass_counts.txt 2>&1
  gzip -f $d/sm90bwd.sass
  cat $d/sass_counts.txt | cut -c1-160 | head -22
  fi
  phases=${SM90BWD_PHASES:-selftest,det,numerics,d256,padded,tf32pad,tf32det,tf32dropexact,bench,sanitize}
  for ph in selftest:45 det:150 numerics:360 d256:240 padded:120 tf32pad:300 tf32det:150 tf32dropexact:60 splitd:240 bench:240 order:200 obench:300 splitdbench:120; do
    [[ ,$phases, == *,${ph%%:*},* ]] || continue
    lim=$(cap ${ph#*:})
    (( lim >= 15 )) || { echo "phase ${ph%%:*} skipped: SM90BWD_BUDGET spent"; continue; }
    t0=$SECONDS
    timeout -k 5 $lim python3 benchmarks/sm90_bwd_check.py --phase ${ph%%:*} --lib $hb --out $d > $d/${ph%%:*}.log 2>&1
    rc=$?
    echo "phase ${ph%%:*} rc=$rc ($((SECONDS - t0)) s of $lim)" | tee -a $d/${ph%%:*}.log
    # A timeout (124 / 137): the case it was in (a hang shows here).
    if (( rc == 124 || rc == 137 )); then grep "^RUNNING" $d/${ph%%:*}.log | tail -1 | sed 's/^/  timed out in: /'; fi
    grep -E "SELFTEST|^FAIL|numerics|^order:|^tf32pad:|^tf32det:|^tf32dropexact:|TFLOP|^ +[0-9]+ |^ +(D  |feature|key_mask|causal_window|dropout|bias_head|softcap_30)|NOT taken|took the sm90|=False|Error|error" $d/${ph%%:*}.log | cut -c1-400 | head -60
  done
  lim=$(cap 150)
  if [[ ,$phases, == *,sanitize,* ]] && (( lim < 15 )); then echo "memcheck skipped: SM90BWD_BUDGET spent"
  elif [[ ,$phases, == *,sanitize,* ]]; then
    t0=$SECONDS
    timeout -k 5 $lim compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/sm90_bwd_check.py \
      --phase sanitize --lib $hb > $d/memcheck.log 2>&1; rc=$?
    echo "memcheck rc=$rc ($((SECONDS - t0)) s of $lim)" | tee -a $d/memcheck.log
    if (( rc == 124 || rc == 137 )); then grep "^RUNNING" $d/memcheck.log | tail -1 | sed 's/^/  timed out in: /'; fi
    grep -E "ERROR SUMMARY|Invalid|^FAIL|^PASS|numerics:" $d/memcheck.log | cut -c1-300 | head -20
  fi
  # Opt-in: tf32sanitize / tf32racecheck, tf32pad's TF32SAN_CASES (default: dense mask / bias, soft-cap and
  # dropout cases of both Hopper TF32 backwards), the first mode of each, under memcheck / racecheck.
  for ph in tf32sanitize tf32racecheck; do
    [[ ,$phases, == *,$ph,* ]] || continue
    lim=$(cap 240)
    (( lim < 15 )) && { echo "$ph skipped: SM90BWD_BUDGET spent"; continue; }
    tool=$([[ $ph == tf32sanitize ]] && echo memcheck || echo racecheck)
    t0=$SECONDS
    TF32PAD_CASES=${TF32SAN_CASES:-tbbias_h_d64,tbbias_neginf_mask_softcap_d128,tbbias_pad_d96_len_gqa,tbmask_rows_d64,tbbias_tk1_d64,tbcap_d64,tbdrop_d128_causal_br_gqa} \
      TF32PAD_MODES=1 timeout -k 5 $lim compute-sanitizer --tool $tool --print-limit 20 python3 \
      benchmarks/sm90_bwd_check.py --phase tf32pad --lib $hb > $d/$ph.log 2>&1
    echo "$ph rc=$? ($((SECONDS - t0)) s of $lim)" | tee -a $d/$ph.log
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|Invalid|^FAIL|^tf32pad:" $d/$ph.log | cut -c1-300 | head -12
  done
  # Opt-in (not in the default phases): the sanitize cases under racecheck (shared-memory hazards)
  # and synccheck (barrier misuse), e.g. SM90BWD_PHASES=racecheck,synccheck.
  for tool in racecheck synccheck; do
    [[ ,$phases, == *,$tool,* ]] || continue
    lim=$(cap 200)
    (( lim < 15 )) && { echo "$tool skipped: SM90BWD_BUDGET spent"; continue; }
    t0=$SECONDS
    timeout -k 5 $lim compute-sanitizer --tool $tool --print-limit 20 python3 benchmarks/sm90_bwd_check.py \
      --phase sanitize --lib $hb > $d/$tool.log 2>&1
    echo "$tool rc=$? ($((SECONDS - t0)) s of $lim)" | tee -a $d/$tool.log
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|Barrier|^FAIL" $d/$tool.log | cut -c1-300 | head -12
  done
) 2>&1 | tee $OUT/sm90bwd_summary.log
  tar -C $OUT -czf $OUT/sm90bwd.tar.gz sm90bwd && rm -rf $OUT/sm90bwd
fi
if [[ ,$what, == *,ab,* ]]; then (
  : "${AB_A:?the folder of the objects of this build}" "${AB_B:?the folder of the reference objects}"
  for dir in "$AB_A" "$AB_B"; do
    OUTDIR=$dir ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1
  done
  checks=${AB_CHECKS:-splitd,dense}
  for chk in ${checks//,/ }; do
    if [[ $chk == loop ]]; then  # the backward timed in a loop and by do_bench, A and B alternating
      for r in A1:$AB_A B1:$AB_B A2:$AB_A B2:$AB_B A3:$AB_A B3:$AB_B; do
        timeout -k 5 90 python3 benchmarks/harness_loop_ab.py time ${r#*:} ${r%%:*} ${AB_LOOP_SET:-plain} \
          >> $OUT/ab_loop.log 2>&1
      done
      python3 benchmarks/harness_loop_ab.py summary $OUT/ab_loop.log
      continue
    fi
    case $chk in
      splitd) script=benchmarks/sm90_bwd_check.py; save=splitdsave; cmp=splitdcmp;;
      dense) script=benchmarks/sm90_check.py; save=densesave; cmp=densecmp;;
      *) echo "ab: unknown check '$chk' (splitd, dense, loop)"; continue;;
    esac
    for r in a1:$AB_A b1:$AB_B a2:$AB_A b2:$AB_B; do
      t0=$SECONDS
      timeout -k 5 150 python3 $script --phase $save --lib ${r#*:} --save /tmp/ab_${chk}_${r%%:*}.pt \
        > $OUT/ab_${chk}_save_${r%%:*}.log 2>&1
      echo "$save ${r%%:*} rc=$? ($((SECONDS - t0)) s): $(grep -E "^$save:" $OUT/ab_${chk}_save_${r%%:*}.log)"
    done
    for k in 1 2; do
      python3 $script --phase $cmp --a /tmp/ab_${chk}_a$k.pt --b /tmp/ab_${chk}_b$k.pt > $OUT/ab_${chk}_cmp$k.log 2>&1
      grep -E "^FAIL|^$cmp:|^ms |^  " $OUT/ab_${chk}_cmp$k.log | head -16
    done
  done
) 2>&1 | tee $OUT/ab_summary.log
fi
if has harness; then
  python3 benchmarks/kernel_harness_check.py --out $OUT > $OUT/harness.log 2>&1; tail -40 $OUT/harness.log
fi
if has harness || has tune; then
  for D in 64 128 256; do python3 benchmarks/tune_configs.py $D 16384 2>&1 | grep -v Warn | tee -a $OUT/tune.log; done
  for D in 64 128; do python3 benchmarks/tune_configs.py $D 512 2>&1 | grep -v Warn | tee -a $OUT/tune.log; done
  if has harness; then bash benchmarks/sanitize.sh > $OUT/sanitize.log 2>&1
  else QUICK=1 bash benchmarks/sanitize.sh > $OUT/sanitize.log 2>&1; fi
  tail -20 $OUT/sanitize.log
fi
if has profile; then
  # HARNESS_DIR (e.g. /tmp/hb_sm90 from an sm90bwd call earlier in the lease) skips the build.
  ls ${HARNESS_DIR:-.harness_build}/flash_harness.cpython-*.so > /dev/null 2>&1 || \
    NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1
  SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section InstructionStats --section Occupancy \
    --section LaunchStats --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,\
regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,\
regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active"
  # PROFILE_DIR fwd|bwd (default bwd), PROFILE_D (default 128), PROFILE_T (default 4096), PROFILE_B
  # (default 16384 / PROFILE_T, as in the benchmark); ours with
  # that direction's variant (FA_FWD_CFG or FA_BWD_CFG) = PROFILE_CFG.
  dir=${PROFILE_DIR:-bwd}; pd=${PROFILE_D:-128}; pt=${PROFILE_T:-4096}
  export PROFILE_B=${PROFILE_B:-$(( 16384 / pt > 0 ? 16384 / pt : 1 ))}  # the benchmark's 16k tokens
  tag=${dir}_D${pd}_T${pt}
  fa2=$([[ $dir == bwd ]] && echo flash_bwd_dq_dk_dv || echo 'flash_fwd_(splitkv_)?kernel')
  # bf16: ours and FlashAttention-2; tf32: ours alone (FA2 has no float32).
  if [[ ${PROFILE_DTYPE:-bf16} == tf32 ]]; then
    tag=${tag}_tf32; cfgvar=FA_TF32_${dir^^}_CFG; kname=flash_${dir}_tf32_kernel; pargs="fp32 tf32"; profiled=ours
  else
    cfgvar=FA_${dir^^}_CFG; kname=flash_${dir}_kernel; pargs=bf16; profiled="ours fa2"
  fi
  # PROFILE_KNAME: the kernel-name regex for ours (e.g. flash_fwd_sm90_kernel, the Hopper forward);
  # PROFILE_FEATS: profile_one.py's features (e.g. dropout); PROFILE_FA2=0 profiles ours alone.
  [[ -n ${PROFILE_KNAME:-} ]] && kname=$PROFILE_KNAME
  [[ -n ${PROFILE_FEATS:-} ]] && { pargs="$pargs ${PROFILE_FEATS}"; tag=${tag}_${PROFILE_FEATS//,/_}; }
  [[ ${PROFILE_FA2:-1} == 0 ]] && profiled=ours
  env "$cfgvar=${PROFILE_CFG:-0}" ncu --clock-control none \
    --kernel-name regex:$kname --launch-count 1 $SECTIONS \
    python3 benchmarks/profile_one.py $pt $pd 0 $pargs > $OUT/ncu_ours_$tag.txt 2>&1
  if [[ $profiled == *fa2* && ${PROFILE_ANCHOR:-fa2} == cudnn ]]; then
    profiled=${profiled/fa2/cudnn}
    PROFILE_BACKEND=cudnn ncu --clock-control none --nvtx --nvtx-include "$dir/" \
      --launch-count ${PROFILE_ANCHOR_LAUNCHES:-4} $SECTIONS python3 benchmarks/profile_fa2.py $pt $pd 0 \
      > $OUT/ncu_cudnn_$tag.txt 2>&1
  elif [[ $profiled == *fa2* ]]; then
    ncu --clock-control none --kernel-name "regex:$fa2" --launch-count 1 $SECTIONS \
      python3 benchmarks/profile_fa2.py $pt $pd 0 > $OUT/ncu_fa2_$tag.txt 2>&1
  fi
  for f in $profiled; do echo "== $f $dir D=$pd T=$pt"
    grep -E "Context [0-9]+, Stream [0-9]+" $OUT/ncu_${f}_$tag.txt | cut -c1-160  # the kernels profiled
    grep -E "Duration|Executed Ipc Active|Issue Slots Busy|Executed Instructions  |Registers Per|L2 Cache Throughput|Mem Busy" $OUT/ncu_${f}_$tag.txt | head -24
    grep -E "issue_stalled" $OUT/ncu_${f}_$tag.txt | awk '$NF > 0.1' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
    # Each pipe's share of its peak (instructions issued to it; cycles it was busy), where above 1 %.
    grep -E "sm__(inst_executed_pipe|pipe)_" $OUT/ncu_${f}_$tag.txt | awk '$NF + 0 > 1'; done
fi
if has hdecode && [[ ${HDECODE_SWEEP:-0} == 1 ]]; then
  # The decoding kernel's variants (tuning build) against FA2 and cuDNN: benchmarks/decode_sweep.py
  # (DECODE_SWEEP_ARGS, e.g. --quick), instead of kernel_harness_check.py --decode (~2.5 min).
  [[ -f .harness_build/tune/flash_harness.cpython-312-x86_64-linux-gnu.so ]] || \
    NVCC_EXTRA=-DFA_TUNING ARCHS=90 OUTDIR=.harness_build/tune bash benchmarks/build_harness.sh 2>&1 | tail -2
  python3 benchmarks/decode_sweep.py --lib .harness_build/tune --out $OUT ${DECODE_SWEEP_ARGS:-} \
    > $OUT/decode_sweep.out 2>&1
  grep -v "^|---" $OUT/decode_sweep.out | tail -150
elif has hdecode; then
  [[ -f .harness_build/flash_harness.cpython-312-x86_64-linux-gnu.so ]] || \
    ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -2
  python3 benchmarks/kernel_harness_check.py --decode --out $OUT > $OUT/harness_decode.log 2>&1
  tail -60 $OUT/harness_decode.log
fi
if has hdropout; then
  # Always rebuilt (a warm machine keeps .harness_build from an earlier call, maybe older kernels).
  ARCHS=90 OUTDIR=.harness_build/dropout bash benchmarks/build_harness.sh 2>&1 | tail -2
  python3 benchmarks/dropout_speed.py --lib .harness_build/dropout --out $OUT > $OUT/dropout_speed.log 2>&1
  echo "dropout_speed.py exit $?"
  tail -40 $OUT/dropout_speed.log
fi
has tests || [[ ,$what, == *,alltests,* ]] || has memory || has train || has bench || has xlacheck || has maxctx || has oldbuild || \
  has async || has decode || has kerashub || has generate || has float32 || exit 0  # the rest needs TensorFlow
. .device-tf/env.sh
export PYTHONPATH=$PWD:${PYTHONPATH:-} TF_CPP_MIN_LOG_LEVEL=2
# The tests that take most of the GPU (4 GiB tensors past 2^31 elements) or start their own TensorFlow process
# (determinism, XLA command buffers): run next to the others they ran out of memory at start-up (seen on the
# H200, and on the H100 2026-12-06), so `tests` and `alltests` run them one at a time.
serial="deterministic or past_2_to_31 or dense_backward_switch or command_buffers"
# Which op library the calls below run (its md5, and build_ops.py's record of TF_FLASHATTN_CUDA_DEFINES).
echo "op library: $(md5sum tf_flashattn/_tf_flashattn_ops*.so 2>/dev/null | cut -c1-32)" \
  "$(grep -h '^CUDA_DEFINES' tf_flashattn/_build_info.py 2>/dev/null || echo 'CUDA_DEFINES not recorded')"
# keras-hub and the wheels it imports, carried in .whl (the machine has no index), into /tmp/site once a machine.
keras_hub_wheels() {
  [[ -d /tmp/site/keras_hub ]] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target /tmp/site .whl/*.whl || return
  export PYTHONPATH=$PYTHONPATH:/tmp/site
}
if has tests; then
  # In parallel, then one at a time the serial ones above.
  # GPU_TESTS_EXTRA: more test files run the same way (e.g. the Keras-wide and KerasHub tests,
  # which need keras-hub: carry .whl, see kerashub below).
  [[ -n ${GPU_TESTS_EXTRA:-} ]] && keras_hub_wheels
  TF_FORCE_GPU_ALLOW_GROWTH=true python3 -m pytest -q tests/test_gpu.py tests/test_xla.py tests/test_gpu_decode.py \
    -p no:cacheprovider -n ${JOBS:-8} -k "not ($serial)" ${PYTEST_ARGS:-} > $OUT/gpu_tests.log 2>&1
  TF_FORCE_GPU_ALLOW_GROWTH=true python3 -m pytest -q tests/test_gpu.py tests/test_xla.py -p no:cacheprovider \
    -k "$serial" ${PYTEST_ARGS:-} >> $OUT/gpu_tests.log 2>&1
  # The Keras-facing files whole (-k above would drop test_kv_cache's "..._is_deterministic").
  TF_FORCE_GPU_ALLOW_GROWTH=true python3 -m pytest -q tests/test_layers.py tests/test_keras_integration.py \
    tests/test_kv_cache.py ${GPU_TESTS_EXTRA:-} -p no:cacheprovider -n ${JOBS:-8} ${PYTEST_ARGS:-} >> $OUT/gpu_tests.log 2>&1
  grep -E "^(FAILED|ERROR)|^E  " $OUT/gpu_tests.log | head -40; grep -E "passed|failed" $OUT/gpu_tests.log
fi
if [[ ,$what, == *,alltests,* ]]; then  # not in "all" (it runs the tests mode)
  keras_hub_wheels
  parts=${ALLTESTS_PART:-parallel}
  [[ $parts == both ]] && parts="parallel serial"
  for part in $parts; do
    s=$SECONDS
    # TF_FORCE_GPU_ALLOW_GROWTH left to tests/conftest.py, as for a user running the README's command.
    case $part in
      parallel) python3 -m pytest -q tests -p no:cacheprovider -n ${JOBS:-8} -k "not ($serial)" -rfEs \
                  ${PYTEST_ARGS:-} > $OUT/alltests_$part.log 2>&1;;
      serial) python3 -m pytest -q tests -p no:cacheprovider -k "$serial" -rfEs ${PYTEST_ARGS:-} \
                > $OUT/alltests_$part.log 2>&1;;
      *) echo "alltests: ALLTESTS_PART is parallel, serial or both, not '$part'"; exit 2;;
    esac
    echo "alltests $part rc=$? ($((SECONDS - s)) s)"
    grep -E "^(FAILED|ERROR)|^E  " $OUT/alltests_$part.log | cut -c1-240 | head -40
    grep -E "^SKIPPED" $OUT/alltests_$part.log | cut -c1-200 | head -20; tail -1 $OUT/alltests_$part.log
  done
fi
if has oldbuild; then
  # From another directory, so that the old package on PYTHONPATH wins over the repository's.
  (cd /tmp && PYTHONPATH=$OLDPWD/.device-tf/old:$PYTHONPATH python3 -c \
     "import tf_flashattn; print('package:', tf_flashattn.__file__)" 2>&1 | tail -1
   PYTHONPATH=$OLDPWD/.device-tf/old:$PYTHONPATH python3 -m pytest -q $OLDPWD/tests/test_xla.py \
     -p no:cacheprovider -k "transposed or layer_under or pin_every or dynamic" > $OUT/oldbuild.log 2>&1
   grep -E "^(FAILED|ERROR)|passed|failed" $OUT/oldbuild.log)
fi
if has async; then
  quiet() { grep -v "^WARNING\|^I0000\|^W0000\|^E0000"; }
  for build in after before; do
    if [[ $build == before ]]; then dir=$PWD/.device-tf/old; else dir=$PWD; fi
    # This tree's benchmark scripts for both builds (an older tree's scripts may carry fixed bugs:
    # 76d2b3e's train_throughput.py lost its "before" rows to a KeyError); only the package differs.
    (export PYTHONPATH=$dir:$PYTHONPATH
     echo "== $build: $(cd /tmp && python3 -c 'import tf_flashattn; print(tf_flashattn.__file__)' 2>/dev/null)"
     if [[ ${ASYNC_PARTS:-overhead,train} == *overhead* ]]; then
       python3 benchmarks/host_overhead.py --label $build --calls 10 --repeats 2 \
         --json $OUT/host_overhead_$build.json 2>&1 | quiet
       BENCH_INNER=1 BENCH_T=512,1024 BENCH_KERAS_D= python3 benchmarks/gpu_attention.py \
         $OUT/short_rows_$build.json 2>&1 | quiet | tail -6
     fi
     if [[ ${ASYNC_PARTS:-overhead,train} == *train* ]]; then
       python3 benchmarks/train_throughput.py --only flash --contexts 1024 4096 --flash-no-xla --steps 6 \
         --json $OUT/train_noxla_$build.json 2>&1 | quiet | tail -3
       python3 benchmarks/train_throughput.py --only flash --contexts 1024 4096 --dropout 0.1 --steps 6 \
         --json $OUT/train_xla_dropout_$build.json 2>&1 | quiet | tail -3
     fi) 2>&1 | tee -a $OUT/async.log
  done
fi
if has decode; then
  python3 benchmarks/gpu_decode.py --json $OUT/gpu_decode.json ${DECODE_ARGS:-} 2>&1 \
    | grep -v "^WARNING\|^I0000\|^W0000" | tee $OUT/gpu_decode.log | tail -80
fi
if has kerashub; then
  keras_hub_wheels
  quiet() { grep -v "^WARNING\|^I0000\|^W0000\|^E0000"; }
  parts=${KERASHUB_PARTS:-main}
  if [[ ,$parts, == *,main,* ]]; then
    python3 benchmarks/kerashub_train.py --contexts 4096,16384 --json $OUT/kerashub_train.json \
      ${KERASHUB_ARGS:-} 2>&1 | quiet | tee $OUT/kerashub_train.log | tail -12
  fi
  if [[ ,$parts, == *,maxctx,* ]]; then
    # MAXCTX_ARGS: where the search starts. Known on the H200 (2026-11-30): Keras' attention trains
    # at 8192 and runs out of memory at 16384 (batch 1); ours trains at 32768 and 65536 was not
    # tried. The default continues from there.
    python3 benchmarks/kerashub_train.py --max-context-only ${MAXCTX_ARGS:---variants flash \
      --max-context-start flash=65536 --max-context-limit flash=262144 --max-context-known \
      flash=32768 --max-context-budget 420} --json $OUT/kerashub_maxctx.json ${KERASHUB_ARGS:-} 2>&1 \
      | quiet | tee $OUT/kerashub_maxctx.log | tail -12
  fi
  if [[ ,$parts, == *,diag,* ]]; then
    d=/tmp/kerashub_diag; mkdir -p $d
    { python3 benchmarks/kerashub_train.py --contexts 4096 --variants keras,flash \
        --op-paths --steps 4 --json $d/xla.json ${KERASHUB_ARGS:-} 2>&1 | quiet
      echo "== without XLA (--jit false)"
      python3 benchmarks/kerashub_train.py --contexts 4096 --variants keras,flash --jit false \
        --steps 3 --json $d/nojit.json ${KERASHUB_ARGS:-} 2>&1 | quiet
      if command -v nsys >/dev/null; then
        for v in flash; do
          echo "== nsys: top GPU kernels of 3 timed steps, $v at 4096"
          timeout 240 nsys profile -t cuda --capture-range=cudaProfilerApi --capture-range-end=stop \
            -f true -o $d/nsys_$v python3 benchmarks/kerashub_train.py --contexts 4096 \
            --variants $v --warmup 2 --steps 3 --profile --json $d/nsys_$v.json > $d/nsys_$v.out 2>&1
          nsys stats -q -r cuda_gpu_kern_sum -f csv -o $d/kern_$v $d/nsys_$v.nsys-rep > /dev/null 2>&1
          python3 - $d/kern_${v}_cuda_gpu_kern_sum.csv <<'PY'
import csv, sys
try:
    rows = list(csv.DictReader(open(sys.argv[1])))
except OSError as e:
    sys.exit(f"  no kernel summary ({e})")
total = sum(float(r["Total Time (ns)"]) for r in rows) or 1.0
print(f"  all kernels {total / 1e6:.1f} ms")
for r in rows[:15]:
    t = float(r["Total Time (ns)"])
    print(f"  {t / 1e6:8.1f} ms {100 * t / total:5.1f}% x{r['Instances']:>5} {r['Name'][:110]}")
PY
        done
      else
        echo "== nsys not found: no kernel summary"
      fi
    } 2>&1 | tee $OUT/kerashub_diag.log | tail -60
    rm -f $d/*.sqlite $d/*.nsys-rep; tar czf $OUT/kerashub_diag.tgz -C /tmp kerashub_diag
  fi
fi
if has generate; then
  python3 benchmarks/generate_throughput.py ${GENERATE_ARGS:---context 8192 --dim 1024 --heads 16 --layers 8 \
    --dtype bf16 --tokens 128 --repeats 2 --check-float32} \
    --json $OUT/generate.json 2>&1 | grep -v "^WARNING\|^I0000\|^W0000" | tee $OUT/generate.log | tail -16
fi
if has maxctx; then
  for lc in flash:${MAXCTX_FLASH:-262144} keras:${MAXCTX_KERAS:-32768}; do
    python3 benchmarks/train_throughput.py --max-context --skip-rows --only ${lc%%:*} \
      --max-context-start ${lc#*:} --max-context-limit ${lc#*:} 2>&1 \
      | grep -v "^WARNING\|^I0000\|^W0000" | tee -a $OUT/maxctx.log | tail -4
  done
fi
if has xlacheck; then
  python3 benchmarks/xla_model_check.py --contexts ${XLACHECK_CONTEXTS:-4096 16384} --dump /tmp/xla_dump 2>&1 \
    | grep -v "^WARNING\|^I0000\|^W0000" | tee $OUT/xla_model_check.log | tail -30
fi
if has memory; then
  python3 benchmarks/gpu_memory.py 2>&1 | tail -8 | tee $OUT/gpu_memory.log
fi
if has train; then
  python3 benchmarks/train_throughput.py ${TRAIN_ARGS:-} 2>&1 | grep -v "^WARNING\|^I0000\|^W0000" \
    | tee $OUT/train.log | tail -8
fi
if [[ ,$what, == *,float32,* ]]; then
  BENCH_DTYPE=float32 BENCH_HIDDEN=1024 BENCH_INNER=1 BENCH_D=${F32_D:-64,128,256} BENCH_T=${F32_T:-1024,4096,16384} \
    BENCH_KERAS_D=${F32_D:-64,128,256} timeout -k 10 500 python3 benchmarks/gpu_attention.py $OUT/float32.json \
    > $OUT/float32.log 2>&1
  echo "float32 rc=$?"; grep -v "^I0000\|^WARNING: All log" $OUT/float32.log | tail -5
fi
if has bench; then (
  # Anchors first: a run cut short still has them next to the rows it wrote (written row by row).
  # BENCH_SPLIT=1 on two GPUs (kind nvidia-h200-x2): Keras' rows run on the second GPU meanwhile
  # (their XLA compilations share the host's cores with our timing), and ours and the anchors
  # share the first, one after the other. Default: all on one GPU.
  keras_d=${BENCH_KERAS_D-128,64,256}
  export BENCH_IMPLS=${BENCH_IMPLS-keras,keras_nofold,keras_xla}
  if [[ ${BENCH_SPLIT:-0} == 1 && $(nvidia-smi -L | wc -l) -ge 2 ]]; then
    CUDA_VISIBLE_DEVICES=1 BENCH_OURS=0 BENCH_KERAS_D=$keras_d timeout -k 10 560 \
      python3 benchmarks/gpu_attention.py $OUT/keras.json > $OUT/keras.log 2>&1 &
    keras_pid=$!
    export CUDA_VISIBLE_DEVICES=0
    keras_d=""
  fi
  python3 .device-tf/anchors_torch.py $OUT/anchors.json > $OUT/anchors.log 2>&1
  tail -2 $OUT/anchors.log
  BENCH_KERAS_D=$keras_d python3 benchmarks/gpu_attention.py $OUT/ours.json > $OUT/ours.log 2>&1
  tail -3 $OUT/ours.log
  if [[ -n ${keras_pid:-} ]]; then
    wait $keras_pid; echo "Keras rows on GPU 1: exit status $?"; tail -3 $OUT/keras.log
  fi
  # The table of this call (RESULTS.md's form), Keras' rows beside ours where they ran.
  python3 benchmarks/results_table.py $OUT/anchors.json $OUT/ours.json $(ls $OUT/keras.json 2>/dev/null) \
    > $OUT/table.md 2>&1; head -40 $OUT/table.md
) fi
