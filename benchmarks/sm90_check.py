"""Checks and times the Hopper forward (cc/kernels/sm90/flash_fwd_sm90.cu) through the kernel harness,
without TensorFlow, on an H100/H200 (python3 with torch, triton and pybind11):

  ARCHS=90 bash benchmarks/build_harness.sh
  python3 benchmarks/sm90_check.py --phase selftest|numerics|bench|sanitize|variants|vbench|vsanitize|
      tf32selftest|tf32|tf32bench|tf32sanitize|tf32dropexact|densesave [--lib DIR] [--out DIR]
  python3 benchmarks/sm90_check.py --phase densecmp --a FILE --b FILE

Phases (each its own process in `gpu_run.sh sm90`, under a timeout, so a hang in one still leaves the
others' answers):
  selftest  the building blocks one at a time (flash_harness.sm90_selftest): a TMA load of one tile into
            a 128-byte-swizzled buffer read back, wgmma m64n128k16 from two K-major shared-memory
            operands (S = Q K^T), wgmma with A from registers and B MN-major (O += P V; also with the
            descriptor's LBO / SBO swapped, to tell which convention the hardware takes), the n64 form and
            the n256 form (D = 256's P V; its S = Q K^T form is sm90_bwd_check.py's bwd selftest 0).
  numerics  the whole forward on odd shapes (Tq, Tk not multiples of 128, B*H > 1, GQA, causal with the
            bottom-right and top-left offsets, rows that see no key, strided q/k/v, D = 64) and on big
            ones, bf16 and fp16, against a float64 torch reference; the error bar is the same-precision
            unfused reference's error (ours <= 2x that + a floor, as kernel_harness_check.py). Each case
            also checks that the sm90 path ran (launch counter) and compares with our sm80 forward.
            D = 256 (64-key tiles; first passed on the H200 on 2026-12-01): the "_d256"
            cases, tile edges 63 / 65 / 127 / 129, causal both alignments, a KV-cache offset, every
            index mask, GQA, fully masked rows, strided q/k/v, dropout (and two exact-mask cases); they
            run after every other case, and SM90_SKIP_D256=1 leaves them out of numerics, bench and
            sanitize (gpu_run.sh sets it for the later phases when numerics timed out or died).
            Index masks (q/k lengths, [B, Tq] / [B, Tk] validity, sliding window, with causal and its
            offset), fully masked rows, and dropout (0.1, 0.5; the reference multiplies P by the
            harness's host dropout_mask, flash_params.h's rule). "poison" cases fill the K/V keys outside
            every query tile's visible tiles (and the q rows past q_lengths) with NaN in our inputs
            only: a tile loaded or computed that should be skipped turns O into NaN. An all-true key
            mask must give the no-mask output bit for bit. DROP_EXACT_CASES: q = 0 (uniform P) and
            V one-hot in key % D, so round(O * visible / keep_scale) counts the kept keys of each
            (row, key % D) class: the GPU mask against the host mask, exactly.
  bench     TFLOP/s (4 B H T^2 D, halved when causal) at D = 128 (and 64, 256), T in {1024, 4096, 16384}
            (D = 64 / 256: 4096 and 16384; H = 16 at D = 256),
            B*T = 16384, H = 16 (32 at D = 64), causal and not, bf16 (and fp16 at T = 4096): ours on
            sm90, ours on sm80 (set_sm90(0), same library), FlashAttention-2 and cuDNN (torch SDPA).
            Then at D = 128, T = 4096 / 16384, bf16: dropout 0.1 (FA2 with dropout_p = 0.1), an all-true
            [B, Tk] key mask (KerasHub's training padding mask) and a key mask with the last 10 % of
            each sequence padded (FA2 without a mask: it takes none), each against sm80 and against
            sm90 without the feature.
  sanitize  one small odd case per dtype / causal setting (D = 64, 128, 256), for compute-sanitizer.
  variants  the schedules of the plain D = 128 kernel (flash_fwd_sm90.cu's kSched, picked by
            set_sm90_fwd_variant; 5 is the default, 0 the first schedule and the reference here, 7
            schedule 5 on a persistent grid (one CTA per SM looping over tiles); the
            other phases run the default): every NUM_CASES case at D = 64 / 128 (the dropout
            ones only at DROP_VARIANT, when it is not 0), bf16 and fp16, for each variant 1 .. n-1 against the float64 reference (the same bar as
            numerics), plus whether the variant really ran (last_fwd_variant) and whether its O and lse
            equal variant 0's bit for bit (expected: every variant does the same arithmetic in the
            same order).
            Variants 8 and 9 (WIDE_VARIANTS: 3 consumer warpgroups, 192-row query tiles; checked on
            the H200 since, 8 the default of that kernel) exist for the plain D = 64 kernel only (no index masks, soft-cap, dense
            mask, bias or dropout): other cases must report variant 5 as run (their fallback), and
            D64_3WG_CASES add D = 64 shapes around the 192-row tile (ragged last tiles, rows 64 / 128 /
            192 apart, causal both alignments, rows that see no key, GQA, strided q/k/v). Expected
            bitwise equal to variant 0 as well (each row's arithmetic and key-tile order unchanged:
            flash_fwd_sm90.cu, schedule 8's comment); the pass bar stays the numerics tolerance.
  vbench    TFLOP/s of every variant at D = 128 and 64, H = 2048 / D, T in {4096, 16384} (B*T = 16384),
            causal and not, bf16, next to FlashAttention-2 and cuDNN (torch SDPA) and our sm80 forward;
            variant 0 timed first and again last (drift); WIDE_VARIANTS at D = 64 only. VBENCH_D=128,
            VBENCH_T=1024,4096 and VBENCH_CAUSAL=0 (0,1 by default) choose other shapes.
  SM90_VARIANTS=5,7,10 limits the schedules of variants, vbench and vsanitize to those listed.
  vsanitize small odd D = 128 cases (and D = 64 ones for WIDE_VARIANTS) for each variant 1 .. n-1, for
            compute-sanitizer.
  The float32 TF32 forward (cc/kernels/sm90/flash_fwd_sm90_tf32.cu; on by default, these phases set
  TF_FLASHATTN_SM90_TF32=1 for their own process all the same; a variant asked for by set_sm90_tf32_variant
  runs at D = 64 too, where the default is 0):
  tf32selftest  its building blocks one at a time (flash_harness.sm90_tf32_selftest): TMA of a float32 tile
            (bits as stored, zero fill), the transposer warps' V^T (keys permuted, cvt.rna) and K's rounding
            against the host's rna bit for bit, wgmma m64n64k8 .tf32 SS (S = Q K^T), wgmma m64n128k8 /
            m64n64k8 .tf32 RS with A from the S accumulators and B = V^T (exact on small values), a
            diagnostic with the other register order of A (expected FAIL: it tells the mapping apart), and
            wgmma m64n64k8 .tf32 RS with A = Q's fragments loaded from shared memory (variants 1 / 2), and
            variant 3's pre-pass (K and V^T into a NaN-poisoned workspace) with a TMA load of a V^T tile
            from it, against the host's rna and the transposer's layout bit for bit.
            Test 8, wgmma m64n256k8 .tf32 RS (the head-dim-256 P V form), runs in FA_SM90_TF32_D256
            builds ("not run" in others).
  tf32      TF32_CASES (float32 inputs, allow_tf32): odd Tq / Tk around the 128-row / 64-key tiles, causal
            both alignments with rows that see no key, a KV-cache offset, GQA 2 / 4, MQA, Tq = 1 (decode
            off), Tk = 1, strided q/k/v, the softmax scale, D = 64 / 128, big ones (2048, 4096 causal),
            against a float64 reference: bar 2x torch's own TF32 attention error (float32 with
            torch.backends.cuda.matmul.allow_tf32 = True) + 2e-3 x max|ref| (kernel_harness_check.py's tf32
            bar), and also 2x our sm80 TF32 kernel's error + the same floor; the sm90 TF32 path must have
            run (tf32_fwd_launches, last_tf32_variant) and repeat bit for bit; every variant
            (flash_fwd_sm90_tf32.cu's kTf32Sched: 0 Q in shared memory, 1 Q in registers, 2 as 1 with K
            truncated, 3 as 1 with K / V^T from a pre-pass into the workspace), each against the same bars
            and at D = 64 too (set explicitly), 1 and 2 reported bit for bit against 0, 3 required bit for
            bit equal to 0 and run on an explicit NaN-poisoned workspace of fwd_workspace_bytes (which must
            be variant 3's size there and 0 for the other variants); then the default (variant override
            -1, TF_FLASHATTN_SM90_TF32_VARIANT unset) must run tf32_default_variant's choice (3 when
            ceil(Tq / 128) H / Hkv >= 8, else 1), bit for bit equal to 0, asking variant 3's workspace
            exactly when it runs 3. TF32_VARIANTS=0 (a comma list) runs only those variants before the
            default (0 must be among them for the default's bitwise check).
            TF32_FALLBACK_CASES (a dense mask with dropout, D not a multiple of 4, padded up to 256, and the
            head-dim-256 features where SM90_TF32_D256_FEAT=0) must not launch it and stay
            right (sm80's TF32 kernel). TF32_D256_CASES (D = Dv = 256, no mask or causal: odd and tile-edge
            sizes, both causal alignments, rows that see no key, GQA, Tk = 1, strided q/k/v, big ones) are
            cases ours must run (the pre-pass variant only; FA_SM90_TF32_D256, on by default); SM90_TF32_D256=0,
            for a harness built with NVCC_EXTRA=-DFA_SM90_TF32_D256=0, moves them to the fallbacks.
            TF32_D256_FEAT_CASES (index masks, soft-cap, dropout, a dense mask and bias at 256) are ours too
            and tf32dropexact takes the head-dim-256 cases (FA_SM90_TF32_D256_FEAT, on by default);
            SM90_TF32_D256_FEAT=0, for a harness built with NVCC_EXTRA=-DFA_SM90_TF32_D256_FEAT=0, moves them to
            the fallbacks. TF32_D=256 narrows both lists to that head dim.
  tf32bench TFLOP/s at D = 128 (H = 16), 64 (H = 32) and, unless SM90_TF32_D256=0, 256 (H = 8; TF32BENCH_D=256
            for that one alone), T in {1024, 4096, 16384}, B*T = 16384, causal and
            not: ours sm90 TF32 (each variant; variant 3's time includes its pre-pass), ours sm80 TF32
            (set_sm90_tf32(0)), torch SDPA in float32 with allow_tf32: the efficient backend (mem-efficient,
            cutlass) and the math backend (T <= 4096).
  tf32save  o / lse of TF32_CASES (TF32_D narrows them) on the TF32 forward's default variant, saved (--save FILE)
            in densesave's form for densecmp against another build (a candidate schedule that must give the same bits)
  densesave o / lse of DENSE_AB_CASES (a dense mask and / or bias, the DENSE kernel; schedules 0 and the
            default, bf16 and fp16) and three timings of a head-broadcast bias and a batch-broadcast dense mask,
            and of the index-masked kernel with a padding mask and with soft-cap, saved (--save FILE);
            densecmp --a FILE --b FILE (no GPU) compares two such files from two builds (o, lse bit for bit,
            the timings side by side): e.g. a change against main's objects, or the dense rows' L2 prefetch
            (FA_SM90_FWD_DENSE_PREFETCH, default 2 tiles ahead) against -DFA_SM90_FWD_DENSE_PREFETCH=0.
            SAVE_SET=all: every NUM_CASES case and LONG_AB_CASES (rows up to 8192 keys) instead, each kernel,
            without the timings (e.g. -DFA_SM90_FWD_SOFTMAX_UNDER_PV=0 against the default, which must be bit for bit).
  tf32dropexact DROP_EXACT_CASES (head dims up to 128; 256 too unless SM90_TF32_D256_FEAT=0) on the TF32 forward: its
            dropout mask against the host's,
            exactly.
  tf32sanitize  TF32_SANITIZE cases (small, each shape class) for compute-sanitizer (memcheck; racecheck and
            synccheck on request in gpu_run.sh); TF32SAN_CASES (comma-separated names) narrows it.
Writes OUT/sm90_<phase>.json.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_harness_check import (DEV, Harness, err, make_inputs, print_ab_times, reference,  # noqa: E402
                                  same_bits, tf32_matmuls, torch_sdpa_ms, index_visibility as visibility)

NUM_CASES = [
    # name, shape; decode=-1 keeps few-row cases on the tiled path (the decoding path takes Tq <= 16).
    dict(name="odd_d128", B=2, Tq=113, Tk=203, H=3, D=128),
    dict(name="odd_d128_causal_br", B=2, Tq=113, Tk=203, H=3, D=128, causal=True, offset=203 - 113),
    dict(name="odd_d128_causal_tl", B=2, Tq=203, Tk=113, H=3, D=128, causal=True, offset=0),
    dict(name="empty_rows_causal", B=2, Tq=300, Tk=77, H=2, D=128, causal=True, offset=77 - 300),
    dict(name="gqa_d128", B=3, Tq=257, Tk=390, H=8, Hkv=2, D=128, causal=True, offset=390 - 257),
    dict(name="tk1", B=2, Tq=130, Tk=1, H=2, D=128),
    dict(name="tq1_forced", B=2, Tq=1, Tk=300, H=4, D=128, decode=-1),
    dict(name="tile_edges", B=1, Tq=256, Tk=384, H=2, D=128, causal=True, offset=128),
    dict(name="strided_qkv", B=2, Tq=200, Tk=200, H=4, D=128, causal=True, packed=True),
    dict(name="scale", B=2, Tq=129, Tk=255, H=2, D=128, scale=0.3),
    dict(name="odd_d64", B=2, Tq=113, Tk=203, H=3, D=64),
    dict(name="odd_d64_causal", B=2, Tq=203, Tk=300, H=3, D=64, causal=True, offset=97),
    dict(name="big_d128", B=2, Tq=2048, Tk=2048, H=8, D=128),
    dict(name="big_d128_causal", B=1, Tq=4096, Tk=4096, H=8, D=128, causal=True),
    dict(name="big_d64_causal", B=1, Tq=4096, Tk=4096, H=8, D=64, causal=True),
    # k_ramp: key j's K times 1 + (k_ramp - 1) j / (Tk - 1), so that each row's max keeps rising tile after tile
    # (by about 30 in the exponent's base-2 units over the row): the online softmax's rescale every tile, and
    # FA_SM90_FWD_SKIP_RESCALE=2's kept max with P up to 2^8 and its updates once passed by more.
    dict(name="k_ramp_d128", B=1, Tq=300, Tk=2100, H=2, D=128, k_ramp=6.0),
    dict(name="k_ramp_d64_causal_dropout", B=1, Tq=700, Tk=2100, H=2, D=64, k_ramp=6.0, causal=True,
         offset=1400, dropout=0.1, seed=(21, 22)),
    dict(name="k_ramp_d256_kvalid", B=2, Tq=130, Tk=1100, H=2, D=256, k_ramp=6.0, kvalid=True),
    # Index masks (random lengths with batch 0 full, validity masks 20 % false) and dropout.
    dict(name="lengths_d128", B=3, Tq=300, Tk=333, H=2, D=128, qlen=True, klen=True),
    dict(name="lengths_causal_d64", B=3, Tq=260, Tk=390, H=2, D=64, qlen=True, klen=True, causal=True,
         offset=130),
    dict(name="qk_valid_d128", B=2, Tq=300, Tk=333, H=3, D=128, qvalid=True, kvalid=True),
    dict(name="k_valid_causal_gqa", B=2, Tq=257, Tk=257, H=4, Hkv=2, D=128, kvalid=True, causal=True),
    dict(name="k_valid_all_true", B=2, Tq=300, Tk=333, H=2, D=128, kvalid_all=True, nomask_bitwise=True),
    # The same at D = 64 and with causal masks: the index-masked kernel (IDX) with an all-true key
    # mask against the plain one (IDX = false, taken without window / lengths / validity masks).
    dict(name="k_valid_all_true_d64", B=2, Tq=300, Tk=333, H=2, D=64, kvalid_all=True, nomask_bitwise=True),
    dict(name="k_valid_all_true_causal_d64", B=2, Tq=300, Tk=333, H=2, D=64, causal=True, offset=333 - 300,
         kvalid_all=True, nomask_bitwise=True),
    dict(name="k_valid_all_true_causal_tl", B=2, Tq=333, Tk=300, H=2, D=128, causal=True, offset=0,
         kvalid_all=True, nomask_bitwise=True),
    dict(name="window_d128", B=2, Tq=700, Tk=700, H=2, D=128, wl=100, wr=20, poison=True),
    dict(name="window_left_d64", B=1, Tq=520, Tk=640, H=2, D=64, wl=64, offset=120, poison=True),
    dict(name="causal_window_lengths", B=3, Tq=600, Tk=650, H=2, D=128, causal=True, offset=50, wl=150,
         qlen_vals=[600, 333, 70], klen_vals=[650, 400, 0], poison=True),
    dict(name="skip_tiles_klen", B=3, Tq=200, Tk=1000, H=2, D=128, qlen_vals=[200, 1, 129],
         klen_vals=[130, 700, 257], poison=True),
    dict(name="kvcache_window", B=2, Tq=128, Tk=1000, H=2, D=128, causal=True, offset=1000 - 128, wl=100,
         poison=True),
    dict(name="masked_rows_all", B=2, Tq=300, Tk=200, H=2, D=64, causal=True, offset=-150, wl=30, qvalid=True),
    # Soft-cap (the index-masked kernel's soft-cap branch), alone and with masks and dropout.
    dict(name="softcap_d128", B=2, Tq=300, Tk=333, H=2, D=128, softcap=20.0),
    dict(name="softcap_causal_window_d64", B=2, Tq=260, Tk=390, H=2, D=64, softcap=30.0, causal=True, offset=130,
         wl=100, qlen=True),
    dict(name="softcap_dropout_gqa", B=2, Tq=257, Tk=300, H=4, Hkv=2, D=128, softcap=15.0, dropout=0.1,
         seed=(4, 5)),
    # A dense mask and bias (the index-masked kernel, element by element), broadcast both ways,
    # with soft-cap, causal, lengths and GQA.
    dict(name="dense_mask_d128", B=2, Tq=300, Tk=333, H=2, D=128, mask=(1, 0)),
    dict(name="bias_d64_causal", B=2, Tq=260, Tk=390, H=3, D=64, bias=(0, 1), causal=True, offset=130),
    dict(name="mask_bias_softcap_gqa", B=2, Tq=257, Tk=300, H=4, Hkv=2, D=128, mask=(1, 1), bias=(1, 1),
         softcap=20.0, klen=True),
    # Broadcast over the keys too (column stride 0: one value per row), alone and beside a full tensor.
    dict(name="keybcast_mask_bias_d128", B=2, Tq=300, Tk=333, H=2, D=128, mask=(1, 0, 0), bias=(0, 1, 0),
         causal=True, offset=33, qlen=True),
    dict(name="keybcast_bias_mask_d64", B=2, Tq=260, Tk=390, H=3, D=64, mask=(1, 1), bias=(1, 0, 0), klen=True),
    dict(name="dropout_01", B=2, Tq=300, Tk=333, H=3, D=128, dropout=0.1, seed=(77, -5)),
    dict(name="dropout_05_causal_gqa", B=2, Tq=260, Tk=300, H=4, Hkv=2, D=64, dropout=0.5, causal=True,
         offset=40, seed=(3, 9)),
    dict(name="dropout_masks", B=3, Tq=300, Tk=400, H=2, D=128, dropout=0.1, causal=True, offset=100, wl=200,
         qlen=True, klen=True, kvalid=True, qvalid=True, seed=(11, 12)),
    # Head dim 256 (64-key tiles, schedule 0): sizes one off the 64- and
    # 128-tile edges, causal both alignments and a KV-cache offset, the index masks, GQA, rows that
    # see no key, dropout, strided q/k/v. The poison cases use 64-key granularity here (poisoned()).
    dict(name="odd_d256", B=2, Tq=113, Tk=203, H=3, D=256),
    dict(name="edges_d256_63_65", B=2, Tq=63, Tk=65, H=2, D=256),
    dict(name="edges_d256_65_63_causal", B=2, Tq=65, Tk=63, H=2, D=256, causal=True, offset=0),
    dict(name="edges_d256_127_129", B=2, Tq=127, Tk=129, H=2, D=256),
    dict(name="edges_d256_129_127_causal_br", B=2, Tq=129, Tk=127, H=2, D=256, causal=True, offset=127 - 129),
    dict(name="edges_d256_127_129_causal", B=2, Tq=127, Tk=129, H=2, D=256, causal=True, offset=129 - 127),
    dict(name="odd_d256_causal_br", B=2, Tq=113, Tk=203, H=3, D=256, causal=True, offset=203 - 113),
    dict(name="odd_d256_causal_tl", B=2, Tq=203, Tk=113, H=3, D=256, causal=True, offset=0),
    dict(name="empty_rows_causal_d256", B=2, Tq=300, Tk=77, H=2, D=256, causal=True, offset=77 - 300),
    dict(name="tile_edges_d256", B=1, Tq=256, Tk=384, H=2, D=256, causal=True, offset=64, poison=True),
    dict(name="kvcache_d256", B=2, Tq=65, Tk=999, H=2, D=256, causal=True, offset=999 - 65, poison=True),
    dict(name="kvcache_window_d256", B=2, Tq=128, Tk=1000, H=2, D=256, causal=True, offset=1000 - 128, wl=100,
         poison=True),
    dict(name="window_d256", B=2, Tq=700, Tk=700, H=2, D=256, wl=100, wr=20, poison=True),
    dict(name="gqa_d256", B=3, Tq=257, Tk=390, H=8, Hkv=2, D=256, causal=True, offset=390 - 257),
    dict(name="tk1_d256", B=2, Tq=130, Tk=1, H=2, D=256),
    dict(name="tq1_forced_d256", B=2, Tq=1, Tk=300, H=4, D=256, decode=-1),
    dict(name="strided_qkv_d256", B=2, Tq=200, Tk=200, H=4, D=256, causal=True, packed=True),
    dict(name="scale_d256", B=2, Tq=129, Tk=255, H=2, D=256, scale=0.3),
    dict(name="lengths_d256", B=3, Tq=300, Tk=333, H=2, D=256, qlen=True, klen=True),
    dict(name="qk_valid_d256", B=2, Tq=300, Tk=333, H=3, D=256, qvalid=True, kvalid=True),
    dict(name="k_valid_causal_gqa_d256", B=2, Tq=257, Tk=257, H=4, Hkv=2, D=256, kvalid=True, causal=True),
    dict(name="k_valid_all_true_d256", B=2, Tq=300, Tk=333, H=2, D=256, kvalid_all=True, nomask_bitwise=True),
    dict(name="causal_window_lengths_d256", B=3, Tq=600, Tk=650, H=2, D=256, causal=True, offset=50, wl=150,
         qlen_vals=[600, 333, 70], klen_vals=[650, 400, 0], poison=True),
    dict(name="skip_tiles_klen_d256", B=3, Tq=200, Tk=1000, H=2, D=256, qlen_vals=[200, 1, 129],
         klen_vals=[65, 700, 257], poison=True),
    dict(name="masked_rows_all_d256", B=2, Tq=300, Tk=200, H=2, D=256, causal=True, offset=-150, wl=30,
         qvalid=True),
    dict(name="softcap_causal_gqa_d256", B=2, Tq=300, Tk=333, H=4, Hkv=2, D=256, softcap=50.0, causal=True,
         offset=33),
    dict(name="mask_bias_d256", B=2, Tq=200, Tk=333, H=2, D=256, mask=(1, 0), bias=(1, 1), causal=True,
         offset=133),
    dict(name="keybcast_mask_d256", B=2, Tq=200, Tk=333, H=2, D=256, mask=(0, 1, 0), bias=(1, 1)),
    dict(name="big_d256", B=1, Tq=2048, Tk=2048, H=8, D=256),
    dict(name="big_d256_causal", B=1, Tq=4096, Tk=4096, H=4, D=256, causal=True),
    dict(name="dropout_01_d256", B=2, Tq=300, Tk=333, H=3, D=256, dropout=0.1, seed=(77, -5)),
    dict(name="dropout_05_causal_gqa_d256", B=2, Tq=260, Tk=300, H=4, Hkv=2, D=256, dropout=0.5, causal=True,
         offset=40, seed=(3, 9)),
    dict(name="dropout_masks_d256", B=3, Tq=300, Tk=400, H=2, D=256, dropout=0.1, causal=True, offset=100, wl=200,
         qlen=True, klen=True, kvalid=True, qvalid=True, seed=(11, 12)),
] + [
    # Other head dims, padded up to the kernel of head_dim_bucket(max(D, Dv)) (the copy engine's zero
    # fill past the real D / Dv; O's columns past Dv not stored: run_fwd fills o with NaN first, so a
    # column left unwritten or a store past Dv into the next head fails): D = 80 and 96 (128's kernels,
    # the plain schedules 7 / 10 and the index-masked one), 40 and 32 (64's: the three-consumer schedule
    # 8), 160 and 248 (256's), Dv != D both ways (DeepSeek's 192 / 128), with causal both alignments,
    # GQA, the index masks with poisoned keys, dropout, soft-cap, a dense mask and bias, strided q/k/v.
    # "wide": q, k, v and o as the first D / Dv columns of buffers as wide as the kernel's head dim (widen():
    # NaN past them in the inputs, SENTINEL in o, checked after the call).
    dict(name="pad_d80", wide=True, B=2, Tq=113, Tk=203, H=3, D=80),
    dict(name="pad_d96_causal_br", wide=True, B=2, Tq=113, Tk=203, H=3, D=96, causal=True, offset=203 - 113),
    dict(name="pad_d96_causal_tl_gqa", B=2, Tq=203, Tk=113, H=4, Hkv=2, D=96, causal=True, offset=0),
    dict(name="pad_d40", wide=True, B=2, Tq=200, Tk=333, H=3, D=40),
    dict(name="pad_d32_causal_gqa", B=2, Tq=257, Tk=390, H=8, Hkv=2, D=32, causal=True, offset=390 - 257),
    dict(name="pad_dv64_d128", wide=True, B=2, Tq=129, Tk=255, H=2, D=128, Dv=64),
    dict(name="pad_d64_dv128_causal", wide=True, B=2, Tq=255, Tk=129, H=2, D=64, Dv=128, causal=True, offset=0),
    dict(name="pad_d192_dv128_causal", wide=True, B=2, Tq=300, Tk=333, H=4, Hkv=2, D=192, Dv=128, causal=True, offset=33),
    dict(name="pad_d160_window", B=2, Tq=700, Tk=700, H=2, D=160, wl=100, wr=20, poison=True),
    dict(name="pad_d248_dv8", wide=True, B=2, Tq=127, Tk=129, H=2, D=248, Dv=8),
    dict(name="pad_d96_masks", wide=True, B=3, Tq=600, Tk=650, H=2, D=96, causal=True, offset=50, wl=150,
         qlen_vals=[600, 333, 70], klen_vals=[650, 400, 0], poison=True),
    dict(name="pad_d80_dropout_klen", wide=True, B=2, Tq=300, Tk=333, H=3, D=80, dropout=0.1, klen=True, seed=(77, -5)),
    dict(name="pad_d96_mask_bias_softcap", wide=True, B=2, Tq=257, Tk=300, H=4, Hkv=2, D=96, mask=(1, 1), bias=(1, 1),
         softcap=20.0, klen=True),
    dict(name="pad_d72_strided", B=2, Tq=200, Tk=200, H=4, D=72, causal=True, packed=True),
    dict(name="pad_d96_big_causal", B=1, Tq=4096, Tk=4096, H=4, D=96, causal=True),
    dict(name="pad_d80_big", B=2, Tq=2048, Tk=2048, H=4, D=80),
]

# Exact dropout-mask checks (phase numerics, bf16 and fp16): see the module docstring.
DROP_EXACT_CASES = [
    dict(name="drop_exact_01", B=2, Tq=200, Tk=384, H=3, D=128, dropout=0.1, seed=(5, 6)),
    dict(name="drop_exact_05", B=2, Tq=200, Tk=384, H=3, D=128, dropout=0.5, seed=(-7, 1 << 40)),
    dict(name="drop_exact_05_d64_causal", B=1, Tq=300, Tk=300, H=2, D=64, dropout=0.5, causal=True, seed=(8, 8)),
    dict(name="drop_exact_01_klen", B=2, Tq=130, Tk=500, H=2, D=128, dropout=0.1, klen_vals=[500, 260],
         seed=(21, 22)),
    # Head dim 256 (the 16-bit kernel's 64-key tiles: the Philox words of a 32-key block come from one tile half;
    # the TF32 kernel's 32-key tiles, unless SM90_TF32_D256_FEAT=0, take one block each).
    dict(name="drop_exact_05_d256", B=2, Tq=200, Tk=600, H=3, D=256, dropout=0.5, seed=(5, 6)),
    dict(name="drop_exact_01_d256_causal", B=1, Tq=300, Tk=300, H=2, D=256, dropout=0.1, causal=True,
         offset=0, seed=(8, 8)),
]


def bucket(c):
    """The head dim of the kernel a case runs: head_dim_bucket(max(D, Dv)) (flash_cuda_internal.h)."""
    d = max(c["D"], c.get("Dv", c["D"]))
    return 64 if d <= 64 else 128 if d <= 128 else 256


SENTINEL = 7.0  # the columns past a "wide" case's D / Dv in its output buffers: no store may reach them


def widen(x, w, fill=float("nan")):
    """x [B, T, H, d] as the first d columns of a [B, T, H, w] buffer (w > d; the rest = fill): strides of w
    per head, so that a kernel reading or writing a column past d meets fill (NaN in the inputs, SENTINEL in
    the outputs) instead of the next head's data."""
    if w <= x.shape[-1]:
        return x
    base = torch.full((*x.shape[:-1], w), fill, device=x.device, dtype=x.dtype)
    base[..., :x.shape[-1]] = x
    return base[..., :x.shape[-1]]


def wide_width(x):
    """The buffer width of a widen()ed x (its head stride), or None for a compact one."""
    return x.stride(2) if x.dim() == 4 and x.stride(2) > x.shape[-1] and x.stride(3) == 1 else None


def sentinel_ok(x):
    """Whether the columns of x's widen() buffer past x's own still hold SENTINEL (True for a compact x)."""
    w = wide_width(x)
    if w is None:
        return True
    full = torch.as_strided(x, (*x.shape[:-1], w), x.stride())
    return bool((full[..., x.shape[-1]:] == SENTINEL).all())


def poisoned(c, t):
    """Copy of t with K/V NaN at the keys outside [floor128(first visible key), ceil128(last + 1)) of
    each batch (no query tile's key tiles reach them: the kernels must neither load nor use them) and
    q NaN at the rows past q_lengths. At D = 256 the sm90 key tiles are 64 keys: floor64 / ceil64
    (sm80's D = 256 tiles are 32 or 64 keys, so its output stays finite too)."""
    p = dict(t)
    p["k"], p["v"], p["q"] = t["k"].clone(), t["v"].clone(), t["q"].clone()
    vis = visibility(c, t).any(1)  # [B, Tk]
    Tk = vis.shape[1]
    bc = 64 if bucket(c) == 256 else 128
    for b in range(vis.shape[0]):
        idx = vis[b].nonzero()
        lo, hi = (0, 0) if len(idx) == 0 else (int(idx[0]) // bc * bc, -(-(int(idx[-1]) + 1) // bc) * bc)
        keep = torch.zeros(Tk, dtype=torch.bool, device=DEV)
        keep[lo:hi] = True
        p["k"][b, ~keep] = float("nan")
        p["v"][b, ~keep] = float("nan")
        if t.get("qlen") is not None:
            p["q"][b, int(t["qlen"][b]):] = float("nan")
    for n in ("k", "v", "q"):  # clone() made the widen()ed ones compact
        if wide_width(t[n]):
            p[n] = widen(p[n], wide_width(t[n]))
    return p


def inputs(c, dt, gen):
    t = make_inputs(c, dt, gen)
    B, Tk = c["B"], c["Tk"]
    if c.get("k_ramp"):
        ramp = torch.linspace(1.0, c["k_ramp"], Tk, device=DEV)[None, :, None, None]
        t["k"] = (t["k"].float() * ramp).to(dt)
    if "qlen_vals" in c:
        t["qlen"] = torch.tensor(c["qlen_vals"], dtype=torch.int32, device=DEV)
    if "klen_vals" in c:
        t["klen"] = torch.tensor(c["klen_vals"], dtype=torch.int32, device=DEV)
    if c.get("kvalid_all"):
        t["kvalid"] = torch.ones(B, Tk, dtype=torch.bool, device=DEV)
    if c.get("bias_nan_masked"):  # NaN and +inf bias wherever the index masks hide an element (never to be read)
        vis = visibility(c, t)[:, None]  # [B, 1, Tq, Tk]
        if t.get("kvalid") is not None:
            vis = vis & t["kvalid"][:, None, None, :]
        bias = t["bias"].contiguous().clone()
        bad = torch.where(torch.rand(bias.shape, device=DEV, generator=gen) < 0.5, float("nan"), float("inf"))
        t["bias"] = torch.where(vis, bias, bad.to(bias.dtype))
    if c.get("packed"):  # q, k, v as views of one [B, T, 3, H, D] tensor: strides 3*H*D per time step
        B, T, H, D = t["q"].shape
        qkv = torch.stack([t["q"], t["k"], t["v"]], dim=2)
        t["q"], t["k"], t["v"] = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    if c.get("wide"):  # q, k, v, do with NaN columns past D / Dv up to the kernel's head dim (widen())
        for n in ("q", "k", "v", "do"):
            t[n] = widen(t[n], bucket(c))
    return t


def run_fwd(h, c, t):
    """o (NaN-filled; a "wide" case's as widen()'s view with SENTINEL past Dv, as d_o, whose strides it
    must share in the backward) and lse from the forward."""
    B, Tq, H, _ = t["q"].shape
    Dv = t["v"].shape[3]
    t["o"] = torch.full((B, Tq, H, Dv), float("nan"), device=DEV, dtype=t["q"].dtype)
    if c.get("wide"):
        t["o"] = widen(t["o"], bucket(c), SENTINEL)
    t["lse"] = torch.full((B, H, Tq), float("nan"), device=DEV)
    h.fwd(c, t)
    torch.cuda.synchronize()


def phase_selftest(h, log):
    rows = h.m.sm90_selftest()
    for r in rows:
        print(f"SELFTEST {r['result']:<7} {r['name']:<34} max_err={r['max_err']:.3g}  {r['detail']}", file=log, flush=True)
    if not rows:
        print("SELFTEST none: harness built without the sm90 kernels (ARCHS must include 90)", file=log, flush=True)
    return rows


def judge(ours, ref, low, dt, row, sm80=None):
    """Whether o and lse are within the error bar against the float64 reference ref: 2x the
    same-precision torch error (low) plus a floor scaled by the reference's magnitude. Fills
    row["o"] / row["lse"] (with our sm80 kernel's error when sm80 is given) and, for a bad o,
    where its bad rows are."""
    ok = True
    for name in ("o", "lse"):
        e = err(ours[name], ref[name])
        el = err(low[name], ref[name])
        fin = torch.isfinite(ref[name])
        scale = max(1.0, float(ref[name][fin].abs().max())) if bool(fin.any()) else 1.0
        floor = {torch.float16: 2e-3, torch.bfloat16: 1e-2}[dt]
        bound = 2.0 * el[0] + floor * scale
        good = e[0] <= bound
        ok &= good
        row[name] = dict(max=e[0], rel=e[1], torch_max=el[0], ok=good)
        if sm80 is not None:
            row[name]["sm80_max"] = err(sm80[name], ref[name])[0]
        if not good and name == "o":  # where: first bad (b, t, h) and how many rows are off
            d = (ours["o"].double() - ref["o"]).abs().amax(-1)  # [B, Tq, H]
            bad = (d > bound) | ~torch.isfinite(d)
            idx = bad.nonzero()
            row["o_bad_rows"] = int(bad.sum())
            row["o_first_bad"] = idx[0].tolist() if len(idx) else None
            row["o_bad_row_indices_sample"] = sorted(set(idx[:, 1].tolist()))[:16]
    return ok


def phase_numerics(h, log, cases, dtypes):
    rows = []
    gen = torch.Generator(device=DEV)
    gen.manual_seed(0)
    for c in cases:
        for dt in dtypes:
            dname = str(dt).split(".")[-1]
            print(f"RUNNING {c['name']} {dname}", file=log, flush=True)
            t = inputs(c, dt, gen)
            tr = poisoned(c, t) if c.get("poison") else t  # what the kernels read
            h.m.set_sm90(1)
            n0 = h.m.sm90_info()["fwd_launches"]
            run_fwd(h, c, tr)
            took = h.m.sm90_info()["fwd_launches"] - n0
            ours = {"o": tr["o"].clone(), "lse": tr["lse"].clone()}
            ours_sentinel = sentinel_ok(tr["o"])
            bitwise = took_nomask = None
            if c.get("nomask_bitwise"):  # an all-true key mask: the no-mask output, bit for bit
                tn = dict(tr)
                tn.pop("kvalid")
                n1 = h.m.sm90_info()["fwd_launches"]
                run_fwd(h, c, tn)
                took_nomask = h.m.sm90_info()["fwd_launches"] - n1  # both runs must be sm90's
                bitwise = bool(torch.equal(tn["o"], ours["o"]) and torch.equal(tn["lse"], ours["lse"]))
            h.m.set_sm90(0)
            run_fwd(h, c, tr)
            h.m.set_sm90(-1)
            sm80 = {"o": tr["o"].clone(), "lse": tr["lse"].clone()}
            keep = h.case_keep(c)
            ref = reference(c, t, torch.float64, keep)
            low = reference(c, t, dt, keep)
            row = dict(case=c["name"], dtype=dname, sm90_launched=int(took))
            ok = took == 1
            if c.get("wide"):  # no store past Dv (ours: `ours` is a compact clone, tr["o"] holds sm80's now)
                row["sentinel_ok"] = ours_sentinel
                ok &= ours_sentinel
            if bitwise is not None:
                row["bitwise_vs_nomask"] = bitwise
                row["nomask_sm90_launched"] = int(took_nomask)
                ok &= bitwise and took_nomask == 1
            ok &= judge(ours, ref, low, dt, row, sm80)
            row["ok"] = bool(ok)
            rows.append(row)
            extra = "" if took == 1 else f" (sm90 path NOT taken: {took} launches)"
            if c.get("wide") and not ours_sentinel:
                extra += " (a store past Dv: the sentinel columns changed)"
            if bitwise is not None:
                extra += f" bitwise_vs_nomask={bitwise}"
                if took_nomask != 1:
                    extra += f" (no-mask run: sm90 path NOT taken: {took_nomask} launches)"
            where = f" bad_rows={row.get('o_bad_rows')} first={row.get('o_first_bad')} t={row.get('o_bad_row_indices_sample')}" \
                if "o_bad_rows" in row else ""
            print(f"{'PASS' if ok else 'FAIL'} {c['name']:<22} {dname:<9} o={row['o']['max']:.2e} (sm80 "
                  f"{row['o']['sm80_max']:.2e}, torch {row['o']['torch_max']:.2e}) lse={row['lse']['max']:.2e} "
                  f"(sm80 {row['lse']['sm80_max']:.2e}){extra}{where}", file=log, flush=True)
            del t, tr, ref, low
    return rows


def phase_drop_exact(h, log, cases, dtypes, tf32=False):
    """q = 0, so every visible key of a row has P = 1 / n(row); V[j] = one-hot(j % D), so
    O[i, d] * n(i) / keep_scale = #kept visible keys j = d (mod D) of row i: an integer. tf32: float32 inputs with
    allow_tf32 (dtypes [torch.float32]), the Hopper TF32 forward (its launch counter; P Z rounded to tf32 moves
    the count by far less than 0.5 at these sizes)."""
    from kernel_harness_check import dropout_keep_scale
    rows = []
    gen = torch.Generator(device=DEV)
    gen.manual_seed(4)
    for c0 in cases:
        for dt in dtypes:
            dname = "tf32" if tf32 else str(dt).split(".")[-1]
            c = dict(c0, tf32=True) if tf32 else c0
            t = inputs(c, dt, gen)
            B, D, Tk = c["B"], c["D"], c["Tk"]
            t["q"].zero_()
            onehot = torch.nn.functional.one_hot(torch.arange(Tk, device=DEV) % D, D).to(dt)  # [Tk, D]
            t["v"] = onehot[None, :, None, :].expand(B, Tk, t["v"].shape[2], D).contiguous()
            counter = "tf32_fwd_launches" if tf32 else "fwd_launches"
            h.m.set_sm90(1)
            n0 = h.m.sm90_info()[counter]
            run_fwd(h, c, t)
            took = h.m.sm90_info()[counter] - n0
            h.m.set_sm90(-1)
            keep = h.case_keep(c)  # [B, H, Tq, Tk]
            vis = visibility(c, t)  # [B, Tq, Tk]
            n = vis.sum(-1).double()  # [B, Tq]
            kv = (keep & vis[:, None]).double()  # [B, H, Tq, Tk]
            want = torch.einsum("bhqk,kd->bhqd", kv, onehot.double())  # kept keys per class
            got = t["o"].double().permute(0, 2, 1, 3) * n[:, None, :, None] / dropout_keep_scale(c["dropout"])
            live = (n > 0)[:, None, :, None].expand_as(want)
            diff = (got.round() != want) & live
            dead_ok = bool((t["o"].permute(0, 2, 1, 3)[~live] == 0).all())
            frac = (got - want).abs()[live].max().item() if bool(live.any()) else 0.0
            ok = took == 1 and int(diff.sum()) == 0 and dead_ok
            r = dict(case=c["name"], dtype=dname, sm90_launched=int(took), mismatched=int(diff.sum()),
                     of=int(live.sum()), max_dev=frac, empty_rows_zero=dead_ok, ok=ok)
            rows.append(r)
            print(f"{'PASS' if ok else 'FAIL'} {c['name']:<22} {dname:<9} mask classes wrong {r['mismatched']} of "
                  f"{r['of']} (max |O n / scale - count| {frac:.3f}){'' if took == 1 else ' (sm90 NOT taken)'}",
                  file=log, flush=True)
    return rows


def time_sm90_and_sm80(h, c, t, r):
    """Forward milliseconds of case c on inputs t into row r: the sm90 kernel (sm90_fwd_ms; whether it
    launched: sm90_path_taken), then the sm80 one (sm80_fwd_ms)."""
    import triton.testing as tt
    h.m.set_sm90(1)
    n0 = h.m.sm90_info()["fwd_launches"]
    r["sm90_fwd_ms"] = tt.do_bench(lambda: h.fwd(c, t), warmup=25, rep=100, return_mode="median")
    r["sm90_path_taken"] = h.m.sm90_info()["fwd_launches"] > n0
    h.m.set_sm90(0)
    r["sm80_fwd_ms"] = tt.do_bench(lambda: h.fwd(c, t), warmup=25, rep=100, return_mode="median")
    h.m.set_sm90(-1)


def phase_bench(h, log, quick):
    rows = []
    shapes = []
    for D, H in ((128, 16), (64, 32)) + (() if skip_d256(log) else ((256, 16),)):
        for T in ((4096,) if quick else (1024, 4096, 16384)):
            if D in (64, 256) and T == 1024:
                continue
            for causal in (False, True):
                shapes.append((D, H, T, causal, torch.bfloat16))
    shapes += [(128, 16, 4096, False, torch.float16), (128, 16, 4096, True, torch.float16)]
    for D, H, T, causal, dt in shapes:
        B = max(1, 16384 // T)
        c = dict(B=B, Tq=T, Tk=T, H=H, D=D, causal=causal)
        gen = torch.Generator(device=DEV)
        gen.manual_seed(1)
        t = make_inputs(c, dt, gen)
        run_fwd(h, c, t)
        fl = 4 * B * H * T * T * D / (2 if causal else 1)
        r = dict(B=B, T=T, H=H, D=D, causal=causal, dtype=str(dt).split(".")[-1])
        time_sm90_and_sm80(h, c, t, r)
        sd = torch_sdpa_ms(t, causal)
        r.update({k: v for k, v in sd.items() if "_bwd" not in k})
        for k in list(r):
            if k.endswith("_fwd_ms"):
                r[k.replace("_ms", "_tflops")] = round(fl / r[k] / 1e9, 1)
        rows.append(r)
        print("BENCH " + json.dumps(r), file=log, flush=True)
        del t
    rows += bench_features(h, log, quick, rows)
    print("\nTFLOP/s forward   D    T      causal dtype  sm90   sm80   FA2    cuDNN  sm90/cuDNN", file=log)
    for r in rows:
        if r.get("feature"):
            continue
        cu = r.get("cudnn_fwd_tflops")
        print(f"                  {r['D']:<4} {r['T']:<6} {int(r['causal']):<6} {r['dtype']:<6} "
              f"{r['sm90_fwd_tflops']:<6} {r['sm80_fwd_tflops']:<6} {r.get('flash_fwd_tflops', '-'):<6} "
              f"{cu if cu else '-':<6} {round(r['sm90_fwd_tflops'] / cu, 2) if cu else '-'}"
              f"{'' if r['sm90_path_taken'] else '  (sm90 NOT taken)'}", file=log, flush=True)
    print("\nTFLOP/s forward with features, bf16 (FA2: with dropout_p for dropout, without a mask for the key masks)",
          file=log)
    print("  D    T      feature          sm90   sm80   FA2    sm90/sm80 sm90/FA2 sm90 vs plain sm90", file=log)
    for r in rows:
        if not r.get("feature"):
            continue
        f = lambda k: r.get(k, "-")
        rat = lambda a, b: round(r[a] / r[b], 2) if r.get(a) and r.get(b) else "-"
        print(f"  {r['D']:<4} {r['T']:<6} {r['feature']:<16} {f('sm90_fwd_tflops'):<6} {f('sm80_fwd_tflops'):<6} "
              f"{f('flash_fwd_tflops'):<6} {rat('sm90_fwd_tflops', 'sm80_fwd_tflops'):<9} "
              f"{rat('sm90_fwd_tflops', 'flash_fwd_tflops'):<8} {f('vs_plain')}"
              f"{'' if r['sm90_path_taken'] else '  (sm90 NOT taken)'}", file=log, flush=True)
    return rows


# The 3-consumer schedules (flash_fwd_sm90.cu's kSched 8 and 9: 192-row query tiles) of the plain
# D = 64 kernel, each with the schedule that every other call asking for it runs (kWideFallback).
WIDE_VARIANTS = {8: 5, 9: 5}
# D = 64 plain cases around the 192-row query tile (the variants phase only; NUM_CASES covers the
# default schedule): Tq one past / short of a tile, Tq = 64 and 130 (consumers without rows), causal
# bottom-right and top-left with tile edges, a whole 192-row tile that sees no key, GQA, strided q/k/v.
D64_3WG_CASES = [
    dict(name="w3_ragged_193", B=2, Tq=193, Tk=450, H=3, D=64),
    dict(name="w3_tq64", B=2, Tq=64, Tk=300, H=2, D=64),
    dict(name="w3_tq130_causal_br", B=2, Tq=130, Tk=333, H=2, D=64, causal=True, offset=333 - 130),
    dict(name="w3_causal_br", B=2, Tq=385, Tk=500, H=2, D=64, causal=True, offset=500 - 385),
    dict(name="w3_causal_tl", B=2, Tq=500, Tk=385, H=2, D=64, causal=True, offset=0),
    dict(name="w3_tile_edges", B=1, Tq=384, Tk=384, H=2, D=64, causal=True, offset=0),
    dict(name="w3_empty_rows", B=2, Tq=450, Tk=150, H=2, D=64, causal=True, offset=150 - 450),
    dict(name="w3_gqa_causal", B=2, Tq=191, Tk=257, H=6, Hkv=2, D=64, causal=True, offset=257 - 191),
    dict(name="w3_strided", B=2, Tq=250, Tk=250, H=4, D=64, causal=True, packed=True),
    dict(name="w3_big", B=1, Tq=1000, Tk=1500, H=4, D=64, scale=0.3),
    # The D = 64 index-masked kernel around the same tile (its schedule 8 with FA_SM90_FWD_IDX64_3WG; 5 otherwise):
    # key / query validity with a ragged last tile, lengths with a causal mask and a query tile that sees no key,
    # a window with poisoned keys, soft-cap, an all-true key mask against the plain kernel bit for bit.
    dict(name="w3i_kvalid_193", B=2, Tq=193, Tk=450, H=3, D=64, kvalid=True, qvalid=True),
    dict(name="w3i_lengths_causal", B=3, Tq=385, Tk=500, H=2, D=64, causal=True, offset=500 - 385,
         qlen_vals=[385, 191, 1], klen_vals=[500, 193, 64], poison=True),
    dict(name="w3i_window", B=1, Tq=600, Tk=640, H=2, D=64, wl=150, wr=10, offset=40, poison=True),
    dict(name="w3i_softcap_gqa", B=2, Tq=250, Tk=300, H=6, Hkv=2, D=64, softcap=25.0, causal=True, offset=50),
    dict(name="w3i_all_true", B=2, Tq=385, Tk=390, H=2, D=64, kvalid_all=True, nomask_bitwise=True),
]
# The causal tile order's sections (flash_fwd_sm90.cu's TileOrder, kGridSectionBytes): one section of all pairs
# at these sizes; with TF_FLASHATTN_SM90_TILE_GROUP=2 (gpu_run.sh's vgroup) 5 pairs in sections of 2, 2, 1 and 9
# pairs (3 GQA groups of 3 query heads) in sections of 5 and 4 (query tiles of 128 rows, and of 192 for schedule 8).
SECTION_CASES = [
    dict(name="sections_h5_causal", B=1, Tq=300, Tk=300, H=5, D=128, causal=True),
    dict(name="sections_gqa_b3_causal_br", B=3, Tq=200, Tk=330, H=3, Hkv=1, D=64, causal=True, offset=130),
]
VARIANT_CASES = [c for c in NUM_CASES if bucket(c) in (64, 128)] + D64_3WG_CASES + SECTION_CASES
# The dropout kernel runs schedule 0 or this one (flash_fwd_sm90.cu's kDropVariant): dropout cases
# check only it against schedule 0.
DROP_VARIANT = 0  # (5 before 2026-12-03; with 0 the variants phase skips the dropout cases)
# A dense mask or bias runs its own instantiation (flash_fwd_sm90.cu's DENSE kernel) on schedule 0 or this
# one (kDenseVariant).
DENSE_VARIANT = 1
# Case keys that take the index-masked kernel (flash_fwd_sm90.cu's needs_idx() and fwd()).
IDX_KEYS = ("qlen", "klen", "qlen_vals", "klen_vals", "qvalid", "kvalid", "kvalid_all", "softcap", "mask", "bias",
            "dropout")


# ---- The float32 TF32 forward (flash_fwd_sm90_tf32.cu) -------------------------------------------
TF32_CASES = [
    dict(name="t_odd_d128", B=2, Tq=113, Tk=203, H=3, D=128),
    dict(name="t_odd_d64", B=2, Tq=113, Tk=203, H=3, D=64),
    dict(name="t_edges_63_65", B=2, Tq=63, Tk=65, H=2, D=128),
    dict(name="t_edges_129_127_d64", B=2, Tq=129, Tk=127, H=2, D=64),
    dict(name="t_edges_128_128", B=1, Tq=128, Tk=128, H=2, D=128),
    dict(name="t_edges_127_129_causal", B=2, Tq=127, Tk=129, H=2, D=128, causal=True, offset=129 - 127),
    dict(name="t_edges_65_63_causal_tl", B=2, Tq=65, Tk=63, H=2, D=64, causal=True, offset=0),
    dict(name="t_causal_br_d128", B=2, Tq=113, Tk=203, H=3, D=128, causal=True, offset=203 - 113),
    dict(name="t_causal_tl_d128", B=2, Tq=203, Tk=113, H=3, D=128, causal=True, offset=0),
    dict(name="t_causal_br_d64", B=2, Tq=203, Tk=300, H=3, D=64, causal=True, offset=97),
    dict(name="t_empty_rows_causal", B=2, Tq=300, Tk=77, H=2, D=128, causal=True, offset=77 - 300),
    dict(name="t_empty_rows_causal_d64", B=2, Tq=450, Tk=150, H=2, D=64, causal=True, offset=150 - 450),
    dict(name="t_kvcache", B=2, Tq=65, Tk=999, H=2, D=128, causal=True, offset=999 - 65),
    dict(name="t_gqa2_causal", B=3, Tq=257, Tk=390, H=8, Hkv=4, D=128, causal=True, offset=390 - 257),
    dict(name="t_gqa4_d64", B=2, Tq=191, Tk=257, H=8, Hkv=2, D=64),
    dict(name="t_mqa", B=2, Tq=200, Tk=333, H=4, Hkv=1, D=128, causal=True, offset=333 - 200),
    dict(name="t_tq1_forced", B=2, Tq=1, Tk=300, H=4, D=128, decode=-1),
    dict(name="t_tq1_forced_d64_causal", B=2, Tq=1, Tk=77, H=2, D=64, causal=True, offset=76, decode=-1),
    dict(name="t_tk1", B=2, Tq=130, Tk=1, H=2, D=128),
    dict(name="t_strided_qkv", B=2, Tq=200, Tk=200, H=4, D=128, causal=True, packed=True),
    dict(name="t_scale", B=2, Tq=129, Tk=255, H=2, D=64, scale=0.3),
    dict(name="t_tile_edges_causal", B=1, Tq=256, Tk=384, H=2, D=128, causal=True, offset=128),
    dict(name="t_big_d128", B=2, Tq=2048, Tk=2048, H=8, D=128),
    dict(name="t_big_d64", B=2, Tq=2048, Tk=2048, H=8, D=64),
    dict(name="t_big_d128_causal", B=1, Tq=4096, Tk=4096, H=8, D=128, causal=True),
    dict(name="t_big_d64_causal_odd", B=1, Tq=2047, Tk=3001, H=4, D=64, causal=True, offset=3001 - 2047),
    # Index masks (the IDX kernels, session 36): windows, lengths (0 possible), [B, T] validity masks.
    dict(name="t_window", B=2, Tq=300, Tk=300, H=2, D=128, wl=50, wr=10),
    dict(name="t_lengths_d64", B=3, Tq=300, Tk=333, H=2, D=64, qlen=True, klen=True),
    dict(name="t_valid_causal_gqa", B=2, Tq=257, Tk=390, H=4, Hkv=2, D=128, qvalid=True, kvalid=True, causal=True,
         offset=390 - 257),
    dict(name="t_kvalid_d64", B=2, Tq=200, Tk=517, H=2, D=64, kvalid=True),
    dict(name="t_window_left_len_d64", B=2, Tq=400, Tk=450, H=2, D=64, wl=70, causal=True, klen=True),
    dict(name="t_window_no_key", B=1, Tq=300, Tk=260, H=2, D=128, wl=0, wr=0, offset=-50),
    # Other head dims and Dv != D, padded up to 64 / 128 (the IDX kernels; "wide": sm90_check.widen(), NaN past
    # D / Dv in q, k, v, a sentinel past Dv in o, checked after every run); the big ones take the pre-pass
    # variant by default (its copies padded with zeros).
    dict(name="t_pad_d80", wide=True, B=2, Tq=113, Tk=203, H=3, D=80),
    dict(name="t_pad_d96_causal_br_gqa", wide=True, B=2, Tq=257, Tk=390, H=8, Hkv=2, D=96, causal=True,
         offset=390 - 257),
    dict(name="t_pad_d40_causal_tl", wide=True, B=2, Tq=203, Tk=113, H=3, D=40, causal=True, offset=0),
    dict(name="t_pad_d64_dv128", wide=True, B=2, Tq=113, Tk=203, H=2, D=64, Dv=128),
    dict(name="t_pad_d128_dv64_causal", wide=True, B=2, Tq=129, Tk=255, H=2, D=128, Dv=64, causal=True,
         offset=255 - 129),
    dict(name="t_pad_d36", B=2, Tq=200, Tk=333, H=3, D=36),
    dict(name="t_pad_d96_masks", wide=True, B=3, Tq=300, Tk=333, H=2, D=96, wl=60, wr=20, klen=True, kvalid=True),
    dict(name="t_pad_d80_big", B=2, Tq=2048, Tk=2048, H=4, D=80),
    dict(name="t_pad_d112_big_causal", wide=True, B=1, Tq=4096, Tk=4096, H=4, D=112, causal=True),
    # Soft-cap (the IDX kernels): alone, with causal / GQA / a tight cap and a scale (tanh saturated), padded with
    # the index masks, and long (the pre-pass variant by default).
    dict(name="t_softcap_d128", B=2, Tq=300, Tk=333, H=2, D=128, softcap=20.0),
    dict(name="t_softcap_causal_gqa_d64", B=2, Tq=257, Tk=390, H=4, Hkv=2, D=64, softcap=5.0, scale=0.5,
         causal=True, offset=390 - 257),
    dict(name="t_pad_d96_softcap_masks", wide=True, B=3, Tq=300, Tk=333, H=2, D=96, softcap=10.0, wl=60, wr=20,
         klen=True, kvalid=True),
    dict(name="t_softcap_big_d128_causal", B=1, Tq=2048, Tk=2048, H=4, D=128, softcap=30.0, causal=True),
    # Dropout (the reference takes the host's keep mask, flash_params.h's rule): alone at both head dims, with GQA,
    # causal and lengths, with soft-cap, padded, rate 0.5, long.
    dict(name="t_drop_d128", B=2, Tq=300, Tk=333, H=2, D=128, dropout=0.1, seed=(5, 6)),
    dict(name="t_drop_causal_gqa_d64", B=2, Tq=257, Tk=390, H=4, Hkv=2, D=64, dropout=0.2, seed=(7, 8), causal=True,
         offset=390 - 257, klen=True),
    dict(name="t_drop_softcap_d128", B=2, Tq=200, Tk=260, H=3, D=128, dropout=0.1, seed=(9, 10), softcap=20.0),
    dict(name="t_pad_d80_drop05_masks", wide=True, B=3, Tq=300, Tk=333, H=2, D=80, dropout=0.5, seed=(-7, 1 << 40),
         wl=60, wr=20, qlen=True, kvalid=True),
    dict(name="t_drop_big_d64", B=1, Tq=2048, Tk=2048, H=4, D=64, dropout=0.1, seed=(11, 12)),
    # A dense mask and bias (the kTf32Dense instantiations): batch- / head-broadcast, with causal / GQA, with
    # soft-cap and lengths, padded with key-broadcast tensors (whole rows masked) and the index masks, long.
    dict(name="t_dmask_d128", B=2, Tq=300, Tk=300, H=2, D=128, mask=(1, 0)),
    dict(name="t_bias_causal_gqa_d64", B=2, Tq=257, Tk=390, H=4, Hkv=2, D=64, bias=(0, 1), causal=True,
         offset=390 - 257),
    dict(name="t_dmask_bias_softcap_len", B=2, Tq=200, Tk=333, H=2, D=128, mask=(1, 1), bias=(1, 1), softcap=20.0,
         klen=True),
    dict(name="t_pad_d96_bias_keybcast_masks", wide=True, B=2, Tq=300, Tk=333, H=2, D=96, bias=(1, 1, 0),
         mask=(1, 0, 0), wl=60, kvalid=True),
    dict(name="t_bias_big_d128", B=1, Tq=2048, Tk=2048, H=4, D=128, bias=(0, 1)),
    # bias_nan_masked: NaN / +inf bias where the index masks hide an element (the output must not see them, as
    # sm80's score_elem never reads them).
    dict(name="t_bias_nan_masked_causal", B=2, Tq=200, Tk=260, H=2, D=128, bias=(1, 1), bias_nan_masked=True,
         causal=True, offset=60, klen=True),
    dict(name="t_dmask_bias_nan_window_d64", B=2, Tq=257, Tk=300, H=4, Hkv=2, D=64, mask=(1, 0), bias=(1, 1),
         bias_nan_masked=True, wl=50, kvalid=True, softcap=20.0),
]
# Calls the TF32 kernel does not take (fwd_tf32_applies): sm80's TF32 kernel must run them (no launch of ours).
TF32_FALLBACK_CASES = [
    dict(name="tf_dense_mask_dropout", B=2, Tq=300, Tk=300, H=2, D=128, mask=(1, 0), dropout=0.1, seed=(1, 2)),
    dict(name="tf_d66", B=2, Tq=113, Tk=203, H=2, D=66),  # not a multiple of 4 (TMA's 16 bytes)
    dict(name="tf_d160_dv128", B=2, Tq=113, Tk=203, H=2, D=160, Dv=128),  # padded up to 256
    dict(name="tf_bias_dropout", B=2, Tq=200, Tk=200, H=2, D=128, bias=(1, 1), dropout=0.1, seed=(3, 4)),
]
# Head dim 256 (flash_fwd_sm90_tf32.cu's FA_SM90_TF32_D256, on by default: D == Dv == 256, no mask or causal, the
# pre-pass variant with 128-row query tiles (64 with FA_SM90_TF32_D256_WG=1) and 32-key tiles): ours must run the first list. SM90_TF32_D256=0 (a harness
# built with NVCC_EXTRA=-DFA_SM90_TF32_D256=0) makes the first of them (tf_d256) a fallback case instead. The index masks
# and features at 256: TF32_D256_FEAT_CASES below; padded up to 256, and a dense mask with dropout: sm80's in any build.
TF32_D256_CASES = [
    dict(name="tf_d256", B=2, Tq=113, Tk=203, H=2, D=256),
    dict(name="t256_edges_63_33", B=2, Tq=63, Tk=33, H=2, D=256),
    dict(name="t256_edges_65_31_causal_tl", B=2, Tq=65, Tk=31, H=2, D=256, causal=True, offset=0),
    dict(name="t256_edges_64_64", B=1, Tq=64, Tk=64, H=2, D=256),
    dict(name="t256_causal_br", B=2, Tq=113, Tk=203, H=3, D=256, causal=True, offset=203 - 113),
    dict(name="t256_causal_tl", B=2, Tq=203, Tk=113, H=3, D=256, causal=True, offset=0),
    dict(name="t256_empty_rows_causal", B=2, Tq=300, Tk=77, H=2, D=256, causal=True, offset=77 - 300),
    dict(name="t256_gqa4_causal", B=2, Tq=191, Tk=257, H=8, Hkv=2, D=256, causal=True, offset=257 - 191),
    dict(name="t256_tk1", B=2, Tq=130, Tk=1, H=2, D=256),
    dict(name="t256_strided_qkv", B=2, Tq=200, Tk=200, H=4, D=256, causal=True, packed=True),
    dict(name="t256_big", B=1, Tq=2048, Tk=2048, H=4, D=256),
    dict(name="t256_big_causal_odd", B=1, Tq=2047, Tk=3001, H=4, D=256, causal=True, offset=3001 - 2047),
]
# Head dim 256 with the index masks, soft-cap, dropout, a dense mask or bias (FA_SM90_TF32_D256_FEAT, on by default):
# ours must run these; SM90_TF32_D256_FEAT=0 (a harness built with NVCC_EXTRA=-DFA_SM90_TF32_D256_FEAT=0) makes them
# fallback cases (sm80's TF32 kernel must run them).
TF32_D256_FEAT_CASES = [
    dict(name="tf_d256_window", B=2, Tq=300, Tk=300, H=2, D=256, wl=50, wr=10),
    dict(name="tf_d256_softcap", B=2, Tq=113, Tk=203, H=2, D=256, softcap=30.0),
    dict(name="t256_lengths", B=3, Tq=300, Tk=333, H=2, D=256, qlen=True, klen=True),
    dict(name="t256_valid_causal_gqa", B=2, Tq=257, Tk=390, H=4, Hkv=2, D=256, qvalid=True, kvalid=True, causal=True,
         offset=390 - 257),
    dict(name="t256_window_no_key", B=1, Tq=300, Tk=260, H=2, D=256, wl=0, wr=0, offset=-50),
    dict(name="t256_softcap_causal_gqa_klen", B=2, Tq=257, Tk=390, H=4, Hkv=2, D=256, softcap=5.0, scale=0.5,
         causal=True, offset=390 - 257, klen=True),
    dict(name="t256_drop", B=2, Tq=300, Tk=333, H=2, D=256, dropout=0.1, seed=(5, 6)),
    dict(name="t256_drop_softcap_causal", B=2, Tq=200, Tk=260, H=3, D=256, dropout=0.2, seed=(9, 10), softcap=20.0,
         causal=True, offset=60),
    dict(name="t256_dmask", B=2, Tq=300, Tk=300, H=2, D=256, mask=(1, 0)),
    dict(name="t256_bias_causal_gqa", B=2, Tq=257, Tk=390, H=4, Hkv=2, D=256, bias=(0, 1), causal=True,
         offset=390 - 257),
    dict(name="t256_dmask_bias_softcap_len", B=2, Tq=200, Tk=333, H=2, D=256, mask=(1, 1), bias=(1, 1), softcap=20.0,
         klen=True),
    dict(name="t256_bias_nan_masked_window", B=2, Tq=257, Tk=300, H=4, Hkv=2, D=256, mask=(1, 0), bias=(1, 1),
         bias_nan_masked=True, wl=50, kvalid=True, softcap=20.0),
    dict(name="t256_softcap_big_causal", B=1, Tq=2048, Tk=2048, H=4, D=256, softcap=30.0, causal=True),
    # (a review's additions) dropout with a window and masks (j_first > 0, 32 mod 64), long dropout, key-broadcast
    # dense mask and bias with whole rows masked, NaN bias under causal + lengths, strided q / k / v with lengths,
    # one query row (63 rows of the tile past Tq), one ragged key tile.
    dict(name="t256_drop05_window_masks", B=3, Tq=300, Tk=333, H=2, D=256, dropout=0.5, seed=(-7, 1 << 40), wl=60,
         wr=20, qlen=True, kvalid=True),
    dict(name="t256_drop_big", B=1, Tq=2048, Tk=2048, H=4, D=256, dropout=0.1, seed=(11, 12)),
    dict(name="t256_keybcast_bias_mask_window", B=2, Tq=300, Tk=333, H=2, D=256, bias=(1, 1, 0), mask=(1, 0, 0),
         wl=60, kvalid=True),
    dict(name="t256_bias_nan_masked_causal", B=2, Tq=200, Tk=260, H=2, D=256, bias=(1, 1), bias_nan_masked=True,
         causal=True, offset=60, klen=True),
    dict(name="t256_strided_qkv_klen", B=2, Tq=200, Tk=200, H=4, D=256, packed=True, klen=True),
    dict(name="t256_tq1_klen", B=2, Tq=1, Tk=300, H=4, D=256, decode=-1, klen=True),
    dict(name="t256_one_ragged_tile", B=2, Tq=70, Tk=20, H=2, D=256, kvalid=True, wl=5),
]
TF32_D256_FALLBACK_CASES = [
    dict(name="tf_d160_dv256", B=2, Tq=113, Tk=203, H=2, D=160, Dv=256),
    dict(name="tf_d256_dmask_dropout", B=2, Tq=300, Tk=300, H=2, D=256, mask=(1, 0), dropout=0.1, seed=(1, 2)),
]
D256 = os.environ.get("SM90_TF32_D256", "1") != "0"  # the build's FA_SM90_TF32_D256 (on by default)
D256_FEAT = D256 and os.environ.get("SM90_TF32_D256_FEAT", "1") != "0"  # FA_SM90_TF32_D256_FEAT (on by default)
if D256:
    TF32_CASES = TF32_CASES + TF32_D256_CASES + (TF32_D256_FEAT_CASES if D256_FEAT else [])
    TF32_FALLBACK_CASES = TF32_FALLBACK_CASES + TF32_D256_FALLBACK_CASES + ([] if D256_FEAT else TF32_D256_FEAT_CASES)
else:
    TF32_FALLBACK_CASES = TF32_FALLBACK_CASES + TF32_D256_CASES[:1] + TF32_D256_FALLBACK_CASES + TF32_D256_FEAT_CASES
# Small cases for compute-sanitizer (each runs every variant twice): ragged tiles at both head dims, causal with
# a ragged key tile, rows that see no key, GQA, one query row, strided q/k/v.
TF32_SANITIZE = ("t_odd_d128", "t_odd_d64", "t_edges_127_129_causal", "t_empty_rows_causal", "t_gqa4_d64",
                 "t_tq1_forced", "t_strided_qkv", "t_valid_causal_gqa", "t_window_no_key", "t_pad_d80",
                 "t_pad_d40_causal_tl", "t_pad_d64_dv128", "t_pad_d96_masks", "t_softcap_causal_gqa_d64",
                 "t_pad_d96_softcap_masks", "t_drop_causal_gqa_d64", "t_drop_softcap_d128", "t_pad_d80_drop05_masks",
                 "t_dmask_bias_softcap_len", "t_pad_d96_bias_keybcast_masks", "tf_d256", "t256_edges_65_31_causal_tl",
                 "t256_empty_rows_causal", "t256_gqa4_causal",  # (the t256 / tf_d256 ones unless SM90_TF32_D256=0)
                 "t256_valid_causal_gqa", "t256_drop_softcap_causal", "t256_bias_nan_masked_window")  # (FEAT ones)


def tf32_d_cases(cases):
    """The cases of the kernel head dims in TF32_D (comma-separated, e.g. TF32_D=256), or all when it is unset."""
    dims = [int(d) for d in os.environ.get("TF32_D", "").split(",") if d]
    return [c for c in cases if not dims or bucket(c) in dims]


def tf32_launches(h):
    return h.m.sm90_info().get("tf32_fwd_launches", 0)


def phase_tf32_selftest(h, log):
    rows = h.m.sm90_tf32_selftest()
    for r in rows:
        note = "  (diagnostic: FAIL expected)" if "expect_FAIL" in r["name"] else ""
        print(f"SELFTEST {r['result']:<7} {r['name']:<40} max_err={r['max_err']:.3g}  {r['detail']}{note}",
              file=log, flush=True)
    if not rows:
        print("SELFTEST none: harness built without the sm90 kernels (ARCHS must include 90)", file=log, flush=True)
    return rows


def tf32_variant_list(h):
    return list(range(h.m.sm90_info().get("tf32_variants", 1)))


def release_build(h):
    """A harness built without FA_TUNING: not every 16-bit schedule is in it (and likewise for the TF32 variants)."""
    info = h.m.sm90_info()
    return len(info.get("fwd_variants_built", [])) < info.get("fwd_variants", 1)


def tf32_variant_built(c, v, release):
    """flash_fwd_sm90_tf32.cu's tf32_variant_built: a release build has variants 1 and 3, and 0 for the dense mask /
    bias kernel at head dim 128 (the others then run the default); FA_TUNING builds have every variant."""
    dense = bool(c.get("mask") or c.get("bias"))
    if bucket(c) == 256:  # FA_SM90_TF32_D256: the pre-pass variant only, in every build
        return v == TF32_PREPASS_VARIANT
    return not release or v in (1, TF32_PREPASS_VARIANT) or (v == 0 and dense and bucket(c) == 128)


# flash_fwd_sm90_tf32.cu: the default by shape (tf32_default_variant: the pre-pass variant when each K / V tile
# has at least kPrepassMinReaders readers, query tiles of 128 rows times the query heads per kv head, else
# kTf32DefaultVariant) and the pre-pass variant's workspace (tf32_prepass_layout).
TF32_PREPASS_VARIANT = 3
TF32_PREPASS_MIN_READERS = 8


def tf32_default_variant(c):
    """flash_fwd_sm90_tf32.cu's tf32_default_variant: 0 with a dense mask or bias at head dim 128 (padded up
    included), else 3 from TF32_PREPASS_MIN_READERS readers per K / V tile, else 1."""
    if (c.get("mask") or c.get("bias")) and bucket(c) == 128:
        return 0
    if bucket(c) == 256:
        return TF32_PREPASS_VARIANT
    readers = (c["Tq"] + 127) // 128 * (c["H"] // c.get("Hkv", c["H"]))
    return TF32_PREPASS_VARIANT if readers >= TF32_PREPASS_MIN_READERS else 1


def tf32_prepass_bytes(c):
    B, Tk, Hkv, D = c["B"], c["Tk"], c.get("Hkv", c["H"]), bucket(c)  # the copies padded up
    tk_pad = (Tk + 63) // 64 * 64
    return (B * Tk * Hkv * D * 4 + 255) // 256 * 256 + B * Hkv * D * tk_pad * 4


def phase_tf32(h, log, cases, fallback_cases=()):
    """Each case: sm80's TF32 kernel (set_sm90_tf32(0)), the float64 reference and torch's float32 attention
    with TF32 matmuls once; then for each variant of ours (flash_fwd_sm90_tf32.cu's kTf32Sched, picked by
    set_sm90_tf32_variant; switched on through the environment, TF_FLASHATTN_SM90_TF32=1 set by main(), with
    set_sm90_tf32(-1)) two runs (bitwise repeat), the launch counter and last_tf32_variant. Variant 1 (Q in
    registers) is reported against variant 0 bit for bit (bitwise_vs_v0; expected, not required). Fallback
    cases run once and must launch nothing of ours."""
    rows = []
    gen = torch.Generator(device=DEV)
    gen.manual_seed(0)
    variants = tf32_variant_list(h)
    if os.environ.get("TF32_VARIANTS"):  # e.g. TF32_VARIANTS=0: variant 0 and the default only (with 0 listed)
        variants = [int(v) for v in os.environ["TF32_VARIANTS"].split(",") if int(v) in variants]
    release = release_build(h)
    for c0, expect in [(c, True) for c in cases] + [(c, False) for c in fallback_cases]:
        c = dict(c0, tf32=True)
        print(f"RUNNING {c['name']} tf32", file=log, flush=True)
        t = inputs(c, torch.float32, gen)
        h.m.set_sm90_tf32(0)
        run_fwd(h, c, t)
        sm80 = {"o": t["o"].clone(), "lse": t["lse"].clone()}
        h.m.set_sm90_tf32(-1)  # the environment: TF_FLASHATTN_SM90_TF32=1 (main())
        keep = h.case_keep(c)
        ref = reference(c, t, torch.float64, keep)
        with tf32_matmuls():
            low = reference(c, t, torch.float32, keep)
        # v0: the first variant's output (variant 0's, but in a release harness, which lacks most variant-0 kernels);
        # the others must equal it bit for bit as variant 3 does.
        v0 = None
        case_variants = [v for v in variants if tf32_variant_built(c, v, release)]
        if expect and not case_variants:  # e.g. TF32_VARIANTS=0 at head dim 256 (variant 3 only): not run, a failure
            rows.append(dict(case=c["name"], dtype="tf32", variant="none", ok=False, expect_sm90=True))
            print(f"FAIL {c['name']:<26} no variant of {variants} is built for this case", file=log, flush=True)
            continue
        for v in (case_variants if expect else variants[:1]):
            h.m.set_sm90_tf32_variant(v)
            # Variant 3: its workspace, explicit and NaN-poisoned (every byte it reads must be written by its
            # pre-pass); fwd_workspace_bytes must be its size there and 0 for the others (no decoding path here).
            ws_bytes = h.fwd_ws_bytes(c, t)
            ws_want = tf32_prepass_bytes(c) if expect and v == TF32_PREPASS_VARIANT else 0
            t.pop("fws", None)
            if v == TF32_PREPASS_VARIANT and ws_bytes > 0:
                t["fws"] = torch.full((ws_bytes,), 0xff, dtype=torch.uint8, device=DEV)
            n0 = tf32_launches(h)
            run_fwd(h, c, t)
            took = tf32_launches(h) - n0
            ran = h.m.sm90_info().get("last_tf32_variant", -1)
            ours = {"o": t["o"].clone(), "lse": t["lse"].clone()}
            sentinel = sentinel_ok(t["o"])  # "wide" cases: no store past Dv
            run_fwd(h, c, t)
            took = tf32_launches(h) - n0
            repeat = bool(torch.equal(t["o"], ours["o"]) and torch.equal(t["lse"], ours["lse"]))
            t.pop("fws", None)
            row = dict(case=c["name"], dtype="tf32", variant=v, sm90_tf32_launched=int(took), expect_sm90=expect,
                       repeat_bitwise=repeat, ws_bytes=int(ws_bytes), ws_bytes_expected=ws_want)
            # A variant set explicitly (set_sm90_tf32_variant) runs at D = 64 too (fwd_tf32, tf32_variant_for).
            ok = took == (2 if expect else 0) and repeat and (not expect or ran == v) and ws_bytes == ws_want and sentinel
            if c.get("wide"):
                row["sentinel_ok"] = sentinel
            if not expect and TF32_PREPASS_VARIANT in variants:  # no pre-pass workspace where ours does not run
                h.m.set_sm90_tf32_variant(TF32_PREPASS_VARIANT)
                row["ws_bytes_v3"] = int(h.fwd_ws_bytes(c, t))
                h.m.set_sm90_tf32_variant(v)
                ok &= row["ws_bytes_v3"] == 0
            if expect:
                row["ran_variant"] = ran
                if v0 is None:
                    v0 = ours
                else:
                    row["bitwise_vs_v0"] = bool(torch.equal(ours["o"], v0["o"]) and torch.equal(ours["lse"], v0["lse"]))
                    if v == TF32_PREPASS_VARIANT:  # every operand rounded as in 0, same wgmma forms: required
                        ok &= row["bitwise_vs_v0"]
            for name in ("o", "lse"):
                e = err(ours[name], ref[name])
                el = err(low[name], ref[name])
                e80 = err(sm80[name], ref[name])
                fin = torch.isfinite(ref[name])
                scale = max(1.0, float(ref[name][fin].abs().max())) if bool(fin.any()) else 1.0
                floor = 2e-3 * scale
                good = e[0] <= 2.0 * el[0] + floor and e[0] <= 2.0 * e80[0] + floor
                ok &= good
                row[name] = dict(max=e[0], rel=e[1], torch_tf32_max=el[0], sm80_max=e80[0], ok=good)
                if not good and name == "o":
                    d = (ours["o"].double() - ref["o"]).abs().amax(-1)  # [B, Tq, H]
                    bad = (d > 2.0 * el[0] + floor) | ~torch.isfinite(d)
                    idx = bad.nonzero()
                    row["o_bad_rows"] = int(bad.sum())
                    row["o_first_bad"] = idx[0].tolist() if len(idx) else None
                    row["o_bad_row_indices_sample"] = sorted(set(idx[:, 1].tolist()))[:16]
            row["ok"] = bool(ok)
            rows.append(row)
            extra = ""
            if took != (2 if expect else 0):
                extra += f" (sm90 TF32 launches {took}, expected {2 if expect else 0})"
            if expect and ran != v:
                extra += f" (ran variant {ran})"
            if not repeat:
                extra += " (repeat NOT bitwise equal)"
            if not sentinel:
                extra += " (a store past Dv: the sentinel columns changed)"
            if ws_bytes != ws_want:
                extra += f" (fwd_workspace_bytes {ws_bytes}, expected {ws_want})"
            if "bitwise_vs_v0" in row:
                extra += f" bitwise_vs_v0={row['bitwise_vs_v0']}"
            where = f" bad_rows={row.get('o_bad_rows')} first={row.get('o_first_bad')} t={row.get('o_bad_row_indices_sample')}" \
                if "o_bad_rows" in row else ""
            print(f"{'PASS' if ok else 'FAIL'} {c['name']:<26} {('v%d' % v) if expect else 'fallback':<8} "
                  f"o={row['o']['max']:.2e} (sm80 {row['o']['sm80_max']:.2e}, torch tf32 {row['o']['torch_tf32_max']:.2e}) "
                  f"lse={row['lse']['max']:.2e} (sm80 {row['lse']['sm80_max']:.2e}){extra}{where}", file=log, flush=True)
        h.m.set_sm90_tf32_variant(-1)
        if expect and v0 is not None and "TF_FLASHATTN_SM90_TF32_VARIANT" not in os.environ:
            # The dispatch's default (no variant set): tf32_default_variant's choice, bit for bit equal to
            # variant 0 (variants 1 and 3 were, in every case on the H200); the workspace exactly when it is 3.
            n0 = tf32_launches(h)
            ws_bytes = h.fwd_ws_bytes(c, t)
            run_fwd(h, c, t)
            ran = h.m.sm90_info().get("last_tf32_variant", -1)
            want = tf32_default_variant(c)
            same = bool(torch.equal(t["o"], v0["o"]) and torch.equal(t["lse"], v0["lse"]))
            ws_want = tf32_prepass_bytes(c) if want == TF32_PREPASS_VARIANT else 0
            ok = tf32_launches(h) - n0 == 1 and ran == want and same and ws_bytes == ws_want
            rows.append(dict(case=c["name"], dtype="tf32", variant="default", ran_variant=ran, expected_variant=want,
                             bitwise_vs_v0=same, ws_bytes=int(ws_bytes), ok=bool(ok), expect_sm90=expect))
            print(f"{'PASS' if ok else 'FAIL'} {c['name']:<26} default  ran variant {ran} (expected {want}), "
                  f"bitwise_vs_v0={same}, fwd_workspace_bytes {ws_bytes}", file=log, flush=True)
        del t, ref, low
    for v in variants + ["default"]:
        vr = [r for r in rows if r.get("variant") == v and r["expect_sm90"]]
        print(f"tf32 variant {v}: {sum(r['ok'] for r in vr)} / {len(vr)} pass", file=log, flush=True)
    return rows


def phase_tf32_bench(h, log):
    import triton.testing as tt
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel, SDPBackend
    rows = []
    release = release_build(h)
    dims = ((128, 16), (64, 32)) + (((256, 8),) if D256 else ())
    if os.environ.get("TF32BENCH_D"):  # e.g. TF32BENCH_D=256: those head dims only
        dims = tuple(x for x in dims if str(x[0]) in os.environ["TF32BENCH_D"].split(","))
    for D, H in dims:
        for T in (1024, 4096, 16384):
            for causal in (False, True):
                B = max(1, 16384 // T)
                c = dict(B=B, Tq=T, Tk=T, H=H, D=D, causal=causal, tf32=True)
                gen = torch.Generator(device=DEV)
                gen.manual_seed(1)
                t = make_inputs(c, torch.float32, gen)
                run_fwd(h, c, t)
                fl = 4 * B * H * T * T * D / (2 if causal else 1)
                r = dict(B=B, T=T, H=H, D=D, causal=causal, dtype="float32 (tf32)")
                h.m.set_sm90_tf32(-1)
                r["sm90_path_taken"] = True
                # The variants this build has for the case (a release harness: 1 and 3); sm90_fwd_ms is the first's.
                built = [v for v in tf32_variant_list(h) if tf32_variant_built(c, v, release)]
                r["sm90_fwd_variant"] = built[0]
                for v in built:
                    h.m.set_sm90_tf32_variant(v)
                    n0 = tf32_launches(h)
                    key = "sm90_fwd_ms" if v == built[0] else f"sm90v{v}_fwd_ms"
                    r[key] = tt.do_bench(lambda: h.fwd(c, t), warmup=25, rep=100, return_mode="median")
                    r["sm90_path_taken"] &= tf32_launches(h) > n0 and h.m.sm90_info()["last_tf32_variant"] == v
                h.m.set_sm90_tf32_variant(-1)
                h.m.set_sm90_tf32(0)
                r["sm80_fwd_ms"] = tt.do_bench(lambda: h.fwd(c, t), warmup=25, rep=100, return_mode="median")
                h.m.set_sm90_tf32(-1)
                qh, kh, vh = (t[n].permute(0, 2, 1, 3).contiguous() for n in ("q", "k", "v"))
                with tf32_matmuls():
                    for name, be in (("torch_efficient", SDPBackend.EFFICIENT_ATTENTION), ("torch_math", SDPBackend.MATH)):
                        if name == "torch_math" and T > 4096:
                            continue  # the math backend materializes [B, H, T, T]: 17 GB at T = 16384
                        try:
                            with sdpa_kernel(be):
                                r[f"{name}_fwd_ms"] = tt.do_bench(
                                    lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal),
                                    warmup=10, rep=50, return_mode="median")
                        except Exception as e:  # noqa
                            r[f"{name}_error"] = str(e)[:100]
                for k in list(r):
                    if k.endswith("_fwd_ms"):
                        r[k.replace("_ms", "_tflops")] = round(fl / r[k] / 1e9, 1)
                rows.append(r)
                print("TF32BENCH " + json.dumps(r), file=log, flush=True)
                # (no `del` of the loop's tensors here: its lambdas name them; the next iteration rebinds them)
    print("\nTFLOP/s forward, float32 with TF32 (torch: SDPA in float32 with matmul.allow_tf32 = True; "
          "efficient = the mem-efficient (cutlass) backend, math = the unfused one, T <= 4096; first = variant 0, "
          "or in a release harness the first variant it has, sm90_fwd_variant)", file=log)
    print("  D    T      causal first  sm90v1 sm90v2 sm90v3 sm80   torch_eff torch_math best/sm80", file=log)
    for r in rows:
        f = lambda k: r.get(k, "-")
        best = max(r.get(k, 0) for k in ("sm90_fwd_tflops", "sm90v1_fwd_tflops", "sm90v2_fwd_tflops",
                                         "sm90v3_fwd_tflops"))
        print(f"  {r['D']:<4} {r['T']:<6} {int(r['causal']):<6} {f('sm90_fwd_tflops'):<6} {f('sm90v1_fwd_tflops'):<6} "
              f"{f('sm90v2_fwd_tflops'):<6} {f('sm90v3_fwd_tflops'):<6} {f('sm80_fwd_tflops'):<6} "
              f"{f('torch_efficient_fwd_tflops'):<9} {f('torch_math_fwd_tflops'):<10} "
              f"{round(best / r['sm80_fwd_tflops'], 2)}"
              f"{'' if r['sm90_path_taken'] else '  (sm90 TF32 NOT taken)'}", file=log, flush=True)
    # The index masks (the IDX kernels) at T = 4096, 16k tokens: the default variant against sm80's TF32 kernel.
    print("\n  D    mask                                      sm90 ms  sm80 ms  sm80/sm90", file=log)
    for D, H in ((128, 16), (64, 32)):
        for label, extra in (("none", {}), ("[B, Tk] padding mask, all true", dict(kvalid_all=True)),
                             ("[B, Tq] / [B, Tk] masks 80 % true, causal", dict(qvalid=True, kvalid=True, causal=True)),
                             ("causal, window 512", dict(causal=True, wl=512))):
            c = dict(B=4, Tq=4096, Tk=4096, H=H, D=D, tf32=True, **extra)
            gen = torch.Generator(device=DEV)
            gen.manual_seed(1)
            t = inputs(c, torch.float32, gen)
            run_fwd(h, c, t)
            h.m.set_sm90_tf32(-1)
            n0 = tf32_launches(h)
            ms90 = tt.do_bench(lambda: h.fwd(c, t), warmup=25, rep=100, return_mode="median")
            taken = tf32_launches(h) > n0
            h.m.set_sm90_tf32(0)
            ms80 = tt.do_bench(lambda: h.fwd(c, t), warmup=25, rep=100, return_mode="median")
            h.m.set_sm90_tf32(-1)
            rows.append(dict(D=D, mask=label, sm90_ms=ms90, sm80_ms=ms80, sm90_path_taken=taken))
            print(f"  {D:<4} {label:<41} {ms90:7.3f}  {ms80:7.3f}  {ms80 / ms90:.2f}x"
                  f"{'' if taken else '  (sm90 TF32 NOT taken)'}", file=log, flush=True)
            # (no `del` of the loop's tensors here: its lambdas name them; the next iteration rebinds them)
    return rows


# Schedules left out of the phases unless SM90_VARIANTS names them (one not yet run on a GPU: a hang there
# cannot take the other schedules' checks with it). Schedule 10 ran on the H200 on 2026-12-02.
PENDING_VARIANTS = ()


def variant_names(h):
    """Schedules 1 .. n-1 of the library but PENDING_VARIANTS, or those of them listed in SM90_VARIANTS
    (e.g. 5,7,10); only those this build has (a release build: the defaults and 0; FA_TUNING builds all,
    gpu_run.sh sm90 with SM90_TUNING=1)."""
    info = h.m.sm90_info()
    n = info.get("fwd_variants", 1)
    built = info.get("fwd_variants_built", list(range(n)))
    if len(built) < n:
        print(f"schedules {[v for v in range(n) if v not in built]} left out: not in this build (FA_TUNING builds "
              f"have them)", flush=True)
    names = [v for v in range(1, n) if v in built]
    if os.environ.get("SM90_VARIANTS"):
        return [v for v in names if str(v) in os.environ["SM90_VARIANTS"].split(",")]
    return [v for v in names if v not in PENDING_VARIANTS]


def is_plain(c):
    """Case c runs the plain kernel (no index masks, soft-cap, dropout, dense mask or bias; causal alone is plain)."""
    return not any(c.get(k) for k in IDX_KEYS) and c.get("wl", -1) < 0 and c.get("wr", -1) < 0


def is_idx_nodrop(c):
    """Case c runs the index-masked kernel without dropout, a dense mask or bias (index masks, soft-cap)."""
    return not is_plain(c) and not (c.get("dropout") or c.get("mask") or c.get("bias"))


# The head-dim-256 cases (the padded ones included) of the plain kernel and of the index-masked one without dropout,
# which the variants phase takes where that kernel has a schedule besides 0 (FA_SM90_FWD_D256_SCHED /
# FA_SM90_FWD_D256_IDX_SCHED: sm90_info()['fwd_d256_schedule'] / ['fwd_d256_idx_schedule']).
D256_VARIANT_CASES = [c for c in NUM_CASES if bucket(c) == 256 and is_plain(c)]
D256_IDX_VARIANT_CASES = [c for c in NUM_CASES if bucket(c) == 256 and is_idx_nodrop(c)]


def schedule_flags(h):
    """The build's switches that move kernels between schedules (flash_fwd_sm90.cu's FA_SM90_FWD_IDX64_3WG,
    FA_SM90_FWD_D256_SCHED, FA_SM90_FWD_D256_IDX_SCHED), from sm90_info(): expected_variant's and default_schedule's
    keyword arguments."""
    info = h.m.sm90_info()
    return dict(idx64_wide=bool(info.get("fwd_idx64_wide", False)), d256=int(info.get("fwd_d256_schedule", 0)),
                d256_idx=int(info.get("fwd_d256_idx_schedule", 0)))


def expected_variant(c, v, release=False, idx64_wide=False, d256=0, d256_idx=0):
    """The schedule that case c runs when variant v is asked for: v, but WIDE_VARIANTS' fallback
    outside the plain D = 64 kernel, and DENSE_VARIANT for any v but 0 with a dense mask or bias. In a release
    build (`release`: not every schedule built) a kernel runs its default for a schedule it lacks
    (flash_fwd_sm90.cu's schedule_built_for, fwd_schedule): the plain D = 128 kernel has 0, 5, 7 and 10 (its default 7,
    10 with a causal mask), the plain D = 64 one 0, 5 and 8 (default 8), the index-masked ones 0 and 5 (default 5),
    and the dense kernel has DENSE_VARIANT alone; 8 and 9 run 5 outside the plain D = 64 kernel in every build.
    idx64_wide (sm90_info()['fwd_idx64_wide'], FA_SM90_FWD_IDX64_3WG): the D = 64 index-masked kernel without dropout
    has 8 too, as the plain one (its default; 9 only in FA_TUNING builds). Head dim 256 runs schedule 0 whatever is
    asked for, but d256 (sm90_info()['fwd_d256_schedule'], FA_SM90_FWD_D256_SCHED) for its plain kernel and d256_idx
    (['fwd_d256_idx_schedule'], FA_SM90_FWD_D256_IDX_SCHED) for its index-masked one without dropout unless 0 is
    asked for (the variants phase takes those cases only then: D256_VARIANT_CASES, D256_IDX_VARIANT_CASES)."""
    if bucket(c) == 256:
        if v == 0:
            return 0
        return d256 if is_plain(c) else d256_idx if is_idx_nodrop(c) else 0
    if c.get("mask") or c.get("bias"):
        return v if v == 0 and not release else DENSE_VARIANT
    plain = is_plain(c)
    # the kernels that have the 3-consumer schedules at D = 64
    wide = bucket(c) == 64 and (plain or (idx64_wide and not c.get("dropout")))
    if release and v not in WIDE_VARIANTS:
        has = {0, 5} | ({8} if wide else {7, 10} if bucket(c) == 128 and plain else set())
        if v not in has:
            if bucket(c) == 128 and plain:
                return 10 if c.get("causal") else 7
            return 8 if wide else 5
    if v not in WIDE_VARIANTS:
        return v
    return v if wide else WIDE_VARIANTS[v]


# The schedule each kind of call runs when none is asked for (flash_fwd_sm90.cu's launch_sched, launch_dense
# and fwd_typed): case name -> schedule. D = 128 without index masks: the persistent schedules (10 with a causal mask).
DEFAULT_SCHEDULES = {"odd_d128": 7, "odd_d128_causal_br": 10, "qk_valid_d128": 5, "odd_d64": 8, "odd_d64_causal": 8,
                     "dropout_masks": DROP_VARIANT, "mask_bias_softcap_gqa": DENSE_VARIANT,
                     "edges_d256_127_129_causal": 0,
                     # padded up (head_dim_bucket(max(D, Dv))): the schedules of their bucket
                     "pad_d80": 7, "pad_d96_causal_br": 10, "pad_d40": 8, "pad_d96_masks": 5,
                     "pad_d192_dv128_causal": 0,
                     # the D = 64 index-masked kernel (8 where it has schedule 8: default_schedule)
                     "k_valid_all_true_d64": 5}


def default_schedule(c, idx64_wide=False, d256=0, d256_idx=0):
    """DEFAULT_SCHEDULES' entry for case c in a build with schedule_flags' switches: the D = 64 index-masked kernel
    without dropout runs 8 with idx64_wide; at D = 256 what expected_variant gives for any request but 0."""
    if bucket(c) == 256:
        return expected_variant(c, -1, d256=d256, d256_idx=d256_idx)
    if bucket(c) == 64 and idx64_wide and is_idx_nodrop(c):
        return 8
    return DEFAULT_SCHEDULES[c["name"]]


def phase_defaults(h, log):
    """With no schedule asked for (TF_FLASHATTN_SM90_FWD_VARIANT unset, set_sm90_fwd_variant(-1)), the schedule
    each DEFAULT_SCHEDULES case ran, and its numerics against the float64 reference."""
    rows = []
    if os.environ.get("TF_FLASHATTN_SM90_FWD_VARIANT"):
        print("DEFAULTS skipped: TF_FLASHATTN_SM90_FWD_VARIANT is set", file=log, flush=True)
        return rows
    gen = torch.Generator(device=DEV)
    gen.manual_seed(3)
    flags = schedule_flags(h)
    h.m.set_sm90(1)
    h.m.set_sm90_fwd_variant(-1)
    for c in [c for c in NUM_CASES if c["name"] in DEFAULT_SCHEDULES]:
        t = inputs(c, torch.bfloat16, gen)
        keep = h.case_keep(c)
        ref = reference(c, t, torch.float64, keep)
        low = reference(c, t, torch.bfloat16, keep)
        run_fwd(h, c, t)
        ran = h.m.sm90_info()["last_fwd_variant"]
        row = dict(case=c["name"], dtype="bfloat16", expected_variant=default_schedule(c, **flags), ran_variant=ran)
        ok = judge({"o": t["o"], "lse": t["lse"]}, ref, low, torch.bfloat16, row) and ran == row["expected_variant"]
        row["ok"] = bool(ok)
        rows.append(row)
        print(f"{'PASS' if ok else 'FAIL'} default {c['name']:<26} ran schedule {ran} (expected "
              f"{row['expected_variant']}) o={row['o']['max']:.2e}", file=log, flush=True)
    h.m.set_sm90(-1)
    print(f"defaults: {sum(r['ok'] for r in rows)} / {len(rows)} ran their default schedule and pass", file=log, flush=True)
    return rows


def phase_variants(h, log, cases, dtypes, skip_fallbacks=False):
    """Each case: the float64 / same-precision references once, variant 0, then each other variant.
    skip_fallbacks (vsanitize): leave out the variants that case c would run as another one
    (expected_variant(c, v) != v: WIDE_VARIANTS outside the plain D = 64 kernel), which the variants
    phase checks already; under memcheck they only cost time."""
    rows = []
    gen = torch.Generator(device=DEV)
    gen.manual_seed(0)
    variants = variant_names(h)
    if not variants:
        print("VARIANTS none: harness without sm90 schedules", file=log, flush=True)
        return rows
    release = release_build(h)
    flags = schedule_flags(h)
    h.m.set_sm90(1)
    for c in cases:
        for dt in dtypes:
            dname = str(dt).split(".")[-1]
            t = inputs(c, dt, gen)
            tr = poisoned(c, t) if c.get("poison") else t
            keep = h.case_keep(c)
            ref = reference(c, t, torch.float64, keep)
            low = reference(c, t, dt, keep)
            h.m.set_sm90_fwd_variant(0)
            run_fwd(h, c, tr)
            v0 = {"o": tr["o"].clone(), "lse": tr["lse"].clone()}
            for v in variants:
                if c.get("dropout") and v != DROP_VARIANT:
                    continue
                if skip_fallbacks and expected_variant(c, v, release, **flags) != v:
                    continue
                h.m.set_sm90_fwd_variant(v)
                n0 = h.m.sm90_info()["fwd_launches"]
                run_fwd(h, c, tr)
                info = h.m.sm90_info()
                took = info["fwd_launches"] - n0
                ran = info["last_fwd_variant"]
                want = expected_variant(c, v, release, **flags)
                ours = {"o": tr["o"], "lse": tr["lse"]}
                bitwise = bool(torch.equal(ours["o"], v0["o"]) and torch.equal(ours["lse"], v0["lse"]))
                row = dict(case=c["name"], dtype=dname, variant=v, ran_variant=ran, sm90_launched=int(took),
                           bitwise_vs_v0=bitwise)
                ok = took == 1 and ran == want
                ok &= judge(ours, ref, low, dt, row)
                row["ok"] = bool(ok)
                rows.append(row)
                print(f"{'PASS' if ok else 'FAIL'} v{v} {c['name']:<22} {dname:<9} o={row['o']['max']:.2e} "
                      f"(torch {row['o']['torch_max']:.2e}) lse={row['lse']['max']:.2e} bitwise_vs_v0={bitwise}"
                      f"{'' if took == 1 and ran == v else f' (ran variant {ran}, {took} launches)'}"
                      f"{'' if want == v else f' (fallback {want} expected)'}"
                      f"{' bad_rows=%s first=%s' % (row['o_bad_rows'], row['o_first_bad']) if 'o_bad_rows' in row else ''}",
                      file=log, flush=True)
            del t, tr, ref, low, v0
    h.m.set_sm90_fwd_variant(-1)
    h.m.set_sm90(-1)
    for v in variants:
        vr = [r for r in rows if r["variant"] == v]
        print(f"variant {v}: {sum(r['ok'] for r in vr)} / {len(vr)} pass, "
              f"{sum(r['bitwise_vs_v0'] for r in vr)} / {len(vr)} bitwise equal to variant 0", file=log, flush=True)
    return rows


def sdpa_fwd_ms(t, causal):
    """Forward milliseconds of torch SDPA's FlashAttention-2 and cuDNN backends (inputs requiring grad,
    as torch_sdpa_ms, so the figures match the bench phase's)."""
    import triton.testing as tt
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel, SDPBackend
    r = {}
    qh, kh, vh = (x.permute(0, 2, 1, 3).contiguous().requires_grad_() for x in (t["q"], t["k"], t["v"]))
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(be):
                r[f"{name}_fwd_ms"] = tt.do_bench(lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal),
                                                  warmup=25, rep=100, return_mode="median")
        except Exception as e:  # noqa
            r[f"{name}_error"] = str(e)[:100]
    return r


def phase_vbench(h, log):
    import triton.testing as tt
    rows = []
    variants = [0] + variant_names(h)
    dims = [int(d) for d in os.environ.get("VBENCH_D", "128,64").split(",")]
    lengths = [int(x) for x in os.environ.get("VBENCH_T", "4096,16384").split(",")]
    causals = [bool(int(x)) for x in os.environ.get("VBENCH_CAUSAL", "0,1").split(",")]
    for D, T, causal in [(D, T, causal) for D in dims for T in lengths for causal in causals]:
        H = 2048 // D
        B = 16384 // T
        c = dict(B=B, Tq=T, Tk=T, H=H, D=D, causal=causal)
        gen = torch.Generator(device=DEV)
        gen.manual_seed(1)
        t = make_inputs(c, torch.bfloat16, gen)
        fl = 4 * B * H * T * T * D / (2 if causal else 1)
        r = dict(B=B, T=T, H=H, D=D, causal=causal, dtype="bfloat16")
        h.m.set_sm90(1)
        for v in [v for v in variants if D == 64 or v not in WIDE_VARIANTS] + [0]:
            h.m.set_sm90_fwd_variant(v)
            run_fwd(h, c, t)
            ran = h.m.sm90_info()["last_fwd_variant"]
            ms = tt.do_bench(lambda: h.fwd(c, t), warmup=25, rep=100, return_mode="median")
            key = f"v{v}_fwd_ms" if f"v{v}_fwd_ms" not in r else f"v{v}_again_fwd_ms"
            r[key] = ms
            if ran != v:
                r[f"v{v}_ran"] = ran
        h.m.set_sm90_fwd_variant(-1)
        h.m.set_sm90(0)
        r["sm80_fwd_ms"] = tt.do_bench(lambda: h.fwd(c, t), warmup=25, rep=100, return_mode="median")
        h.m.set_sm90(-1)
        r.update(sdpa_fwd_ms(t, causal))
        for k in list(r):
            if k.endswith("_fwd_ms"):
                r[k.replace("_ms", "_tflops")] = round(fl / r[k] / 1e9, 1)
        rows.append(r)
        print("VBENCH " + json.dumps(r), file=log, flush=True)
        # (no `del` of the loop's tensors here: its lambdas name them; the next iteration rebinds them)
    names = [f"v{v}" for v in variants] + ["v0_again", "sm80", "flash", "cudnn"]
    dflt = h.m.sm90_info().get("fwd_default_variant", 0)
    print(f"\nTFLOP/s forward, bf16, by schedule (the defaults at D = 128: 10 with a causal mask, 7 without, "
          f"v{dflt} with index masks; "
          "v0 = the first schedule, v0_again: v0 timed last)", file=log)
    print("  D    T      causal " + " ".join(f"{n:<8}" for n in names) + " best/cuDNN", file=log)
    for r in rows:
        vals = [r.get(f"{n}_fwd_tflops") for n in names]
        best = max(r.get(f"v{v}_fwd_tflops", 0) for v in variants)
        cu = r.get("cudnn_fwd_tflops")
        print(f"  {r['D']:<4} {r['T']:<6} {int(r['causal']):<6} " + " ".join(f"{v if v else '-':<8}" for v in vals) +
              f" {round(best / cu, 2) if cu else '-'}" +
              "".join(f"  (v{v} ran {r[f'v{v}_ran']})" for v in variants if f"v{v}_ran" in r), file=log, flush=True)
    return rows


def feature_inputs(feature, B, T, H, D):
    """The case and bf16 inputs (seed 1) of a timed feature, not causal, Tq = Tk = T: dropout_0.1, softcap_30,
    bias_h (a bias broadcast over the batch), dense_mask_b (a dense mask broadcast over the heads),
    key_mask_true / key_mask_pad10 (a [B, Tk] key mask, all true / the last 10 % of the keys false)."""
    c = dict(B=B, Tq=T, Tk=T, H=H, D=D)
    if feature == "dropout_0.1":
        c.update(dropout=0.1, seed=(1, 2))
    elif feature == "softcap_30":
        c.update(softcap=30.0)
    elif feature == "bias_h":
        c.update(bias=(0, 1))
    elif feature == "dense_mask_b":
        c.update(mask=(1, 0))
    gen = torch.Generator(device=DEV)
    gen.manual_seed(1)
    t = make_inputs(c, torch.bfloat16, gen)
    if feature.startswith("key_mask"):
        t["kvalid"] = torch.ones(B, T, dtype=torch.bool, device=DEV)
        if feature == "key_mask_pad10":
            t["kvalid"][:, T - T // 10:] = False
    return c, t


def bench_features(h, log, quick, plain_rows):
    """D = 128, bf16, not causal: dropout 0.1, an all-true key mask, a key mask with 10 % padding,
    soft-cap 30, a bias broadcast over the batch, a dense mask broadcast over the heads."""
    import triton.testing as tt
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel, SDPBackend
    rows = []
    for T in ((4096,) if quick else (4096, 16384)):
        B, H, D = max(1, 16384 // T), 16, 128
        fl = 4 * B * H * T * T * D
        plain = [r for r in plain_rows if (r["D"], r["T"], r["causal"], r["dtype"]) == (D, T, False, "bfloat16")]
        for feature in ("dropout_0.1", "key_mask_true", "key_mask_pad10", "softcap_30", "bias_h", "dense_mask_b"):
            c, t = feature_inputs(feature, B, T, H, D)
            run_fwd(h, c, t)
            r = dict(B=B, T=T, H=H, D=D, causal=False, dtype="bfloat16", feature=feature)
            time_sm90_and_sm80(h, c, t, r)
            qh, kh, vh = (t[n].permute(0, 2, 1, 3) for n in ("q", "k", "v"))
            p = c.get("dropout", 0.0)
            try:
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    r["flash_fwd_ms"] = tt.do_bench(lambda: F.scaled_dot_product_attention(qh, kh, vh, dropout_p=p),
                                                    warmup=25, rep=100, return_mode="median")
            except Exception as e:  # noqa
                r["flash_error"] = str(e)[:100]
            for k in list(r):
                if k.endswith("_fwd_ms"):
                    r[k.replace("_ms", "_tflops")] = round(fl / r[k] / 1e9, 1)
            if plain:
                r["vs_plain"] = round(r["sm90_fwd_tflops"] / plain[0]["sm90_fwd_tflops"], 3)
            rows.append(r)
            print("BENCH " + json.dumps(r), file=log, flush=True)
            del t
    return rows


def skip_d256(log=None):
    """SM90_SKIP_D256=1 (gpu_run.sh sets it when the numerics phase timed out or died): the phases leave
    out their D = 256 cases, so that a hanging or crashing D = 256 kernel costs one phase, not all."""
    skip = os.environ.get("SM90_SKIP_D256", "") == "1"
    if skip and log is not None:
        print("SM90_SKIP_D256=1: D = 256 cases left out", file=log, flush=True)
    return skip


DENSE_AB_CASES = [c for c in NUM_CASES if c.get("mask") or c.get("bias")] + [
    dict(name="ab_bias_causal_lengths_d128", B=3, Tq=300, Tk=650, H=2, D=128, bias=(1, 1), causal=True, offset=350,
         qlen_vals=[300, 129, 0], klen_vals=[650, 400, 77]),
    dict(name="ab_bias_kvcache_d256", B=2, Tq=65, Tk=999, H=2, D=256, bias=(0, 1), causal=True, offset=999 - 65),
    dict(name="ab_mask_bias_big_d64", B=1, Tq=2048, Tk=2048, H=4, D=64, mask=(1, 0), bias=(0, 1)),
]


# SAVE_SET=all (densesave): long rows too, where a row's max settles (FA_SM90_FWD_SKIP_RESCALE skips O's rescale
# there), on the plain kernel (no mask, causal) and the index-masked one (a key mask; dropout).
LONG_AB_CASES = [
    dict(name="ab_long_d128", B=1, Tq=1024, Tk=8192, H=2, D=128),
    dict(name="ab_long_d128_causal", B=1, Tq=4096, Tk=4096, H=2, D=128, causal=True, offset=0),
    dict(name="ab_long_d64", B=1, Tq=1024, Tk=8192, H=2, D=64),
    dict(name="ab_long_d256", B=1, Tq=512, Tk=4096, H=2, D=256),
    dict(name="ab_long_d128_kvalid", B=2, Tq=512, Tk=4100, H=2, D=128, kvalid=True),
    dict(name="ab_long_d128_drop", B=1, Tq=512, Tk=4096, H=2, D=128, dropout=0.1, seed=(3, 4)),
    dict(name="ab_long_d64_drop_causal", B=1, Tq=2048, Tk=2048, H=2, D=64, dropout=0.1, causal=True, offset=0,
         seed=(5, 6)),
]


def phase_densesave(h, log, path):
    """Phase densesave: o / lse of DENSE_AB_CASES (a dense mask and / or bias: the DENSE kernel; bf16 and fp16,
    schedules 0 and the default), saved to `path` with three timings each of a head-broadcast bias and a
    batch-broadcast dense mask (D = 128, T = 4096 and 16384, B T = 16384, H = 16; the bias at D = 64 (H = 32) and
    256 (H = 8), T = 4096), and of the index-masked kernel without a dense tensor (a key mask with 10 %
    padding, soft-cap 30; D = 128, T = 4096). Phase densecmp compares two such files (this build against
    a reference build). SAVE_SET=all: every NUM_CASES case and LONG_AB_CASES instead (each kernel: plain,
    index-masked, dropout, dense), without the timings; a case that does not launch the sm90 forward (the
    decoding path) is left out."""
    import triton.testing as tt
    gen = torch.Generator(device=DEV)
    gen.manual_seed(0)
    out = {}
    save_all = os.environ.get("SAVE_SET", "") == "all"
    left_out = 0
    for c in (NUM_CASES + LONG_AB_CASES if save_all else DENSE_AB_CASES):
        for dt in (torch.bfloat16, torch.float16):
            t = inputs(c, dt, gen)
            for v in (0, -1):
                h.m.set_sm90_fwd_variant(v)
                n0 = h.m.sm90_info()["fwd_launches"]
                run_fwd(h, c, t)
                key = f"{c['name']}/{str(dt).split('.')[-1]}/v{v}"
                launched = h.m.sm90_info()["fwd_launches"] - n0
                if save_all and launched == 0:
                    left_out += 1
                    continue
                out[key] = dict(o=t["o"].cpu(), lse=t["lse"].cpu(), launched=launched)
            h.m.set_sm90_fwd_variant(-1)
            del t
    bench = []
    specs = (() if save_all else
             ((128, 4096, "bias_h"), (128, 4096, "dense_mask_b"), (128, 16384, "bias_h"), (128, 16384, "dense_mask_b"),
              (64, 4096, "bias_h"), (256, 4096, "bias_h"), (128, 4096, "key_mask_pad10"), (128, 4096, "softcap_30")))
    for D, T, feature in specs:
        H = 2048 // D
        B = 16384 // T
        c, t = feature_inputs(feature, B, T, H, D)
        run_fwd(h, c, t)
        n0 = h.m.sm90_info()["fwd_launches"]
        ms = [tt.do_bench(lambda c=c, t=t: h.fwd(c, t), warmup=25, rep=100, return_mode="median") for _ in range(3)]
        r = dict(D=D, T=T, B=B, H=H, feature=feature, sm90_fwd_ms=ms, sm90_path_taken=h.m.sm90_info()["fwd_launches"] > n0,
                 tflops=round(4 * B * H * T * T * D / min(ms) / 1e9, 1))
        bench.append(r)
        print("BENCH " + json.dumps(r), file=log, flush=True)
        del t
    torch.save(dict(out=out, bench=bench), path)
    print(f"densesave: {len(out)} outputs" + (" (SAVE_SET=all)" if save_all else "") +
          f", {sum(v['launched'] == 1 for v in out.values())} with one sm90 launch" +
          (f", {left_out} left out (no sm90 launch)" if save_all else "") + f" -> {path}", file=log, flush=True)
    return bench


def phase_tf32save(h, log, cases, path):
    """Phase tf32save: o and lse of each case on the TF32 forward's default variant (a NaN-poisoned workspace where
    it asks for one), saved as densesave's file (no timings), for densecmp against another build's: e.g. a candidate
    schedule that must give the same bits (session 61 checked a head-dim-256 form this way: TF32_D=256)."""
    gen = torch.Generator(device=DEV)
    gen.manual_seed(0)
    out = {}
    h.m.set_sm90_tf32(-1)
    h.m.set_sm90_tf32_variant(-1)
    for c0 in cases:
        c = dict(c0, tf32=True)
        t = inputs(c, torch.float32, gen)
        ws_bytes = h.fwd_ws_bytes(c, t)
        if ws_bytes > 0:
            t["fws"] = torch.full((ws_bytes,), 0xff, dtype=torch.uint8, device=DEV)
        n0 = tf32_launches(h)
        run_fwd(h, c, t)
        out[c["name"]] = dict(o=t["o"].cpu(), lse=t["lse"].cpu(), launched=int(tf32_launches(h) - n0))
        print(f"tf32save {c['name']}: launched {out[c['name']]['launched']}", file=log, flush=True)
    torch.save(dict(out=out, bench=[]), path)
    return [dict(case=k, ok=v["launched"] == 1) for k, v in out.items()]


def phase_densecmp(log, path_a, path_b):
    """Phase densecmp: two densesave files (a: this build, b: the reference): o and lse bit for bit, one sm90
    launch each; the timings side by side (b / a > 1: a faster). The script exits 1 unless all are equal."""
    a, b = torch.load(path_a), torch.load(path_b)
    rows = []
    for key, ra in a["out"].items():
        rb = b["out"].get(key)
        ok = rb is not None and ra["launched"] == 1 and rb["launched"] == 1 and all(
            same_bits(ra[n], rb[n]) for n in ("o", "lse"))
        rows.append(dict(case=key, ok=bool(ok)))
        print(f"{'PASS' if ok else 'FAIL'} {key}", file=log, flush=True)
    print(f"densecmp: {sum(r['ok'] for r in rows)} / {len(rows)} equal (o, lse bitwise, one sm90 launch each)",
          file=log, flush=True)
    print("ms (sm90, three medians each): D T feature | a (this build) | b (reference) | b / a | a TFLOP/s", file=log)
    print_ab_times(log, a["bench"], b["bench"], "sm90_fwd_ms", lambda r: f"{r['D']:<4} {r['T']:<6} {r['feature']:<13}",
                   lambda r: f" | {r['tflops']}")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", required=True,
                    choices=("selftest", "numerics", "bench", "sanitize", "variants", "vbench", "vsanitize",
                             "tf32selftest", "tf32", "tf32bench", "tf32sanitize", "tf32dropexact", "tf32save",
                             "densesave", "densecmp"))
    ap.add_argument("--lib", default=".harness_build")
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--save", default=None, help="densesave / tf32save: the file to write")
    ap.add_argument("--a", default=None, help="densecmp: this build's densesave file")
    ap.add_argument("--b", default=None, help="densecmp: the reference build's densesave file")
    args = ap.parse_args()
    if args.phase == "densecmp":  # no GPU work: two saved files; exit status 1 unless every output is equal
        rows = phase_densecmp(sys.stdout, args.a, args.b)
        sys.exit(0 if rows and all(r["ok"] for r in rows) else 1)
    if args.phase.startswith("tf32"):
        # The TF32 forward's switch (read once, at its first use): on for this process, whatever the caller's.
        os.environ["TF_FLASHATTN_SM90_TF32"] = "1"
    h = Harness(args.lib)
    log = sys.stdout
    print(f"device: {torch.cuda.get_device_name()}  sm90: {h.m.sm90_info()}", file=log, flush=True)
    if args.phase == "selftest":
        rows = phase_selftest(h, log)
    elif args.phase == "numerics":
        # D = 64 / 128 (and their exact dropout cases) first, D = 256 (the newest kernel) last: a hang
        # or crash there loses none of the others' lines.
        dts = (torch.bfloat16, torch.float16)
        rows = phase_numerics(h, log, [c for c in NUM_CASES if bucket(c) != 256], dts)
        rows += phase_drop_exact(h, log, [c for c in DROP_EXACT_CASES if c["D"] != 256], dts)
        if skip_d256(log):
            print(f"numerics: {sum(r['ok'] for r in rows)} / {len(rows)} pass (D = 256 skipped)", file=log, flush=True)
        else:
            print(f"numerics: {sum(r['ok'] for r in rows)} / {len(rows)} pass (D = 64 / 128; D = 256 next)", file=log, flush=True)
            rows += phase_numerics(h, log, [c for c in NUM_CASES if bucket(c) == 256], dts)
            rows += phase_drop_exact(h, log, [c for c in DROP_EXACT_CASES if c["D"] == 256], dts)
            print(f"numerics: {sum(r['ok'] for r in rows)} / {len(rows)} pass", file=log, flush=True)
    elif args.phase == "sanitize":
        names = ["odd_d128", "odd_d128_causal_br", "empty_rows_causal", "odd_d64", "qk_valid_d128",
                 "causal_window_lengths", "dropout_masks", "mask_bias_softcap_gqa", "softcap_causal_window_d64",
                 "keybcast_mask_bias_d128", "keybcast_bias_mask_d64", "pad_d80", "pad_d96_causal_tl_gqa",
                 "pad_d40", "pad_d64_dv128_causal", "pad_d96_masks", "pad_d80_dropout_klen",
                 "pad_d96_mask_bias_softcap", "pad_d72_strided"]
        if not skip_d256(log):
            names += ["edges_d256_127_129_causal", "dropout_masks_d256", "mask_bias_d256", "keybcast_mask_d256",
                      "pad_d192_dv128_causal", "pad_d248_dv8", "causal_window_lengths_d256", "softcap_causal_gqa_d256"]
        rows = phase_numerics(h, log, [c for c in NUM_CASES if c["name"] in names], (torch.bfloat16,))
    elif args.phase == "variants":
        rows = phase_defaults(h, log)
        flags = schedule_flags(h)
        rows += phase_variants(h, log, VARIANT_CASES + (D256_VARIANT_CASES if flags["d256"] else []) +
                               (D256_IDX_VARIANT_CASES if flags["d256_idx"] else []), (torch.bfloat16, torch.float16))
        print(f"variants: {sum(r['ok'] for r in rows)} / {len(rows)} pass", file=log, flush=True)
    elif args.phase == "vsanitize":
        cases = [c for c in VARIANT_CASES if c["name"] in ("odd_d128_causal_br", "empty_rows_causal",
                                                            "causal_window_lengths", "w3_ragged_193",
                                                            "w3_causal_br", "w3_empty_rows", "w3i_kvalid_193",
                                                            "w3i_lengths_causal")]
        rows = phase_variants(h, log, cases, (torch.bfloat16,), skip_fallbacks=True)
    elif args.phase == "vbench":
        rows = phase_vbench(h, log)
    elif args.phase == "tf32selftest":
        rows = phase_tf32_selftest(h, log)
    elif args.phase == "tf32":  # TF32_D narrows both lists
        rows = phase_tf32(h, log, tf32_d_cases(TF32_CASES), tf32_d_cases(TF32_FALLBACK_CASES))
        print(f"tf32: {sum(r['ok'] for r in rows)} / {len(rows)} pass (every variant; fallback cases once)",
              file=log, flush=True)
    elif args.phase == "tf32save":  # TF32_CASES (TF32_D narrows them) on the default variant, saved for densecmp
        rows = phase_tf32save(h, log, tf32_d_cases(TF32_CASES), args.save)
    elif args.phase == "tf32dropexact":  # DROP_EXACT_CASES up to head dim 128 (256 too with D256_FEAT), float32 with TF32
        rows = phase_drop_exact(h, log, [c for c in DROP_EXACT_CASES if c["D"] <= 128 or D256_FEAT], [torch.float32],
                                tf32=True)
        print(f"tf32dropexact: {sum(r['ok'] for r in rows)} / {len(rows)} pass", file=log, flush=True)
    elif args.phase == "tf32sanitize":  # TF32SAN_CASES (comma-separated names of TF32_SANITIZE) narrows it
        only = [n for n in os.environ.get("TF32SAN_CASES", "").split(",") if n]
        rows = phase_tf32(h, log, [c for c in TF32_CASES
                                   if c["name"] in TF32_SANITIZE and (not only or c["name"] in only)])
    elif args.phase == "tf32bench":
        rows = phase_tf32_bench(h, log)
    elif args.phase == "densesave":
        rows = phase_densesave(h, log, args.save)
    else:
        rows = phase_bench(h, log, args.quick)
    if args.out:
        os.makedirs(args.out, exist_ok=True)  # (a folder not made yet lost every phase's JSON at the end)
        with open(os.path.join(args.out, f"sm90_{args.phase}.json"), "w") as f:
            json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
