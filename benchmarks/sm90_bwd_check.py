"""Checks and times the Hopper backward (cc/kernels/sm90/flash_bwd_sm90.cu, the default backward on
compute capability 9.0) through the kernel harness, without TensorFlow, on an H100/H200 (python3
with torch, triton and pybind11):

  ARCHS=90 bash benchmarks/build_harness.sh
  python3 benchmarks/sm90_bwd_check.py --phase selftest|det|numerics|d256|bench|sanitize|order|obench|splitd|
      splitdbench|splitdsave|padded|tf32pad|tf32det|tf32dropexact [--lib DIR] [--out DIR]
  python3 benchmarks/sm90_bwd_check.py --phase splitdcmp --a FILE --b FILE

The sm90 backward is switched per call with the harness's set_sm90_bwd(1 / 0), so one process compares
it with our sm80 backward; its launch counter (sm90_info()["bwd_launches"]) shows which path ran.
Phases (each its own process in `gpu_run.sh sm90bwd`, under a timeout):
  selftest  the forward's building blocks (sm90_selftest) and the backward's (sm90_bwd_selftest): wgmma
            m64n64k16 from two K-major operands (S^T = K Q^T), from two MN-major operands (dQ = dS K with
            dS stored transposed; B from column panel 0 and 1, and from key row 64 with K = 64), and the
            S^T accumulators repacked as register A operands for dV += P^T dO; the D = 256 kernel's forms
            (m64n32k16 K-major from row 32, m64n128k16 with B MN-major over two panels for dV / dK, and with A
            and B MN-major from panels 2, 3 for dQ); the D = 128 split kernel's (m64n64k16 with A K-major and B
            MN-major from panel 1 for dV_c / dK_c, with A and B MN-major over 64-row panels for dQ_c).
  numerics  dq / dk / dv on odd shapes (Tq, Tk not multiples of the 64 / 128 tiles, B*H > 1, GQA ratios
            1 and 4 and MQA, causal with both alignments, rows that see no key, Tk = 1, Tq = 1, d_lse,
            D = 64 and 128) and bigger ones, bf16 and fp16, against a float64 torch autograd reference;
            bar: ours <= 3x the same-precision unfused reference's error + a floor (as
            kernel_harness_check.py); also our sm80 backward's error and max |sm90 - sm80|, that
            the sm90 path ran exactly once per case (and the sm80 run did not take it), and that the
            dq rows of query rows that see no key and the dk / dv rows of keys that no row sees are
            exactly 0 (as the reference's and sm80's; sm80's reported).
            MASK_CASES: the index masks (the kernel's IDX instantiation): sliding window (left only,
            right only, both, with causal, KV-cache offsets, rows that see no key), q / k lengths
            (random, 0, full, 1), [B, Tq] / [B, Tk] validity masks (random, all true, whole batch rows
            false), with GQA / MQA and causal, d_lse, tile-edge sizes, D = 64 and 128; inputs built
            by sm90_check.py's inputs() (+ bwd_inputs() here for q_valid all true / batch rows all
            false). "poison_kv": K and V NaN in the 128-key tiles that no row sees (sm90_check's
            poisoned(), without its q rows): a key-tile CTA that visited a unit there would turn dQ
            into NaN. "nomask_bitwise" (masks that hide nothing: all-true validity, full lengths, a
            window wider than Tk): dk and dv equal bit for bit to the sm90 backward without the masks
            (the first kernel), dq within 1e-2 of its max (atomics in no fixed order). Also soft-cap,
            a dense mask and an additive bias (the IDX kernel without dropout): the bias cases check
            dbias ([B, H, Tq, Tk] float32) against autograd's too (a tenth of the floor), bitwise in
            deterministic mode, and exactly 0 on the masked elements and those with a bias of -inf.
            DROP_CASES: dropout 0.1 and 0.5 (the DROP kernel) with no mask, causal (both alignments,
            rows that see no key), window, lengths, validity masks, GQA / MQA, tile-edge sizes, Tq = 1,
            d_lse, D = 64 and 128, bf16 and fp16: the references multiply P by the harness's host keep
            mask (dropout_keep) and keep_scale; the same bars and sm80 comparison as above.
            DROP_EXACT_CASES (phase_drop_exact): q = 0, dO one-hot in row % D, so round(dV n / keep_scale)
            counts the kept (head, row) pairs of each (key, row % D) class: the backward's keep mask
            (regenerated in the S^T layout) against the host mask, exactly.
  d256      the head-dim-256 kernel (flash_bwd_sm90_d256_kernel, on by default; this script sets
            TF_FLASHATTN_SM90_BWD_D256=1 in case the caller's environment turned it off): D256_CASES as numerics (no mask, causal
            with both alignments, odd Tq / Tk, rows that see no key with exact zeros, GQA 4, MQA, Tq = 1,
            Tk = 1, d_lse, bigger ones; the index masks: window, lengths, validity, poison_kv, a bitwise
            no-mask check; dropout 0.1 / 0.5 with and without masks, and the exact keep-mask check through
            dV (D256_DROP_EXACT_CASES); bf16 and fp16; each must launch the sm90 backward once), and two
            calls it must refuse (soft-cap, a dense mask: sm80's, no sm90 launch).
  det       deterministic mode (TensorFlow's op determinism; the kernel's DET instantiations: dQ contributions
            added in key-tile order behind per-block counters): DET_CASES (no mask, causal with both alignments,
            GQA / MQA, D = 64, 128 and 256, the index masks, dropout, the split kernel's score options (bias at
            D = 128; soft-cap, dense mask, bias at D = 256), many key tiles per query tile) as numerics,
            plus: two deterministic sm90 runs (the workspace NaN-poisoned in between) bitwise equal in dq, dk,
            dv; against the default (atomic) sm90 run dk / dv bit for bit and dq within 1e-2 of its max
            (whether its dq differed bitwise is reported: it usually does with many key tiles); the sm90 path
            taken by each deterministic run (launch counter), the comparison sm80 run in deterministic mode.
  bench     backward TFLOP/s (FlashAttention's count: 2.5 x 4 B H T^2 D, halved when causal) at D = 128
            (H = 16), D = 64 (H = 32) and D = 256 (H = 8; the D = 256 kernel), T in {4096, 16384},
            B*T = 16384, causal and not, bf16 (and fp16 at T = 4096, D = 128 and 256): ours on sm90, ours on sm80 (same library), FlashAttention-2 and cuDNN (SDPA);
            then milliseconds of the index-masked kernel at D = 128, T = 4096 (all-true key mask, 10 %
            key padding, causal window 1024, and dropout 0.1 without a mask and causal: the DROP kernel)
            against sm80 and the plain sm90 backward (bench_masks); then deterministic against default
            milliseconds (sm90 DET, sm90 default, sm80 deterministic) at D = 128 / 64 / 256, T = 4096 (bench_det).
            HARNESS_TIMING=loop times the first table's rows (ours and the SDPA anchors) and bench_det's as
            gpu_attention.py times ours through TensorFlow, 10 calls back to back (kernel_harness_check.bench_ms).
  order     the key-tile orders (flash_bwd_sm90.cu, "Tile order"; set_sm90_bwd_order): NUM_CASES, MASK_CASES,
            D256_CASES, ORDER_CASES (more pairs and key tiles: several balanced groups) and DET_CASES, bf16,
            each run in order 0 and then in ORDER_RUNS (order 1 with the automatic group, G = 2, G = 4,
            G = 1 (the ORD kernel in the launch order), order 2): dk, dv (dbias) bit for bit equal to order 0's,
            dq within 1e-2 of its max (the atomics' order; bitwise in deterministic mode), the sm90 path
            taken once per run, and the order the launch used (sm90_info's last_bwd_order_g / _big)
            the one expected (order_expected: causal, >= 2 pairs, no dropout or bias; else 0, the plain
            kernel). expect_sm80 cases are skipped.
  obench    backward TFLOP/s per tile order at D = 128 (H = 16), D = 64 (H = 32), D = 256 (H = 8), T in {2048,
            4096, 8192, 16384}, B*T = 16384, causal and not, bf16: order 0, order 1 (automatic group and
            twice it), order 2, order 1 with G = 1 (the ORD kernel's own code in the launch order), order 0
            again (drift), beside FlashAttention-2 and cuDNN (SDPA) in the same process; without a
            causal mask the orders do not apply (order 0, order 2 for the fallback, order 0 again).
            OBENCH_ALT=n: causal shapes only, orders 0 and 1 alternated n times (the clock drifts within a
            shape's runs: o0_again ran at 0.89x-1.0x o0 on the H200), medians and their ratio.
  tf32pad   the Hopper TF32 backwards at head dims padded up to 64 / 128 (TF32_PAD_CASES, float32 with
            allow_tf32, every variant / dQ mode; TF32PAD_CASES=a,b and TF32PAD_MODES=1 narrow it).
  tf32det   the Hopper TF32 backwards in deterministic mode (TF32_DET_CASES: repeat bitwise, dK / dV bitwise equal
            to the default run's, the float64 reference).
  tf32dropexact  DROP_EXACT_CASES on the Hopper TF32 backwards: their dropout mask through dV against the host's,
            exactly.
  splitd    the split kernel's score options (flash_bwd_sm90_split_score_kernel; on by default since
            session 19; this phase sets TF_FLASHATTN_SM90_BWD_SPLITD=1 for its own process):
            SPLITD_CASES as numerics, bf16 and fp16: at D = 128 bias / dbias (bias alone, without dbias,
            broadcast [1, H, Tq, Tk], [B, 1, Tq, Tk], [B, 1, 1, Tk], causal both alignments, GQA / MQA, lengths,
            window + validity, -inf on some elements, whole key columns and whole rows, with a dense mask (rows
            fully masked) and soft-cap (also a cap of 5 that bends the scores), d_lse, Tq = 1, Tk = 1, odd sizes,
            poisoned K / V), at D = 256 soft-cap,
            the dense mask and bias / dbias likewise; each must launch the sm90 backward once (bias with
            dropout: sm80's, no launch); dbias exactly 0 where masked or -inf.
  splitdsave the split kernel's dq / dk / dv / dbias on SPLITD_CASES and three timings of the D = 128 bias specs
            of splitdbench, saved (--save FILE); splitdcmp --a FILE --b FILE (no GPU) compares two such files from
            two builds (o, lse, dk, dv, dbias bit for bit, dq bit for bit in deterministic mode (cases named
            *_det), else within 1e-2, the timings side by side): the bias read ahead (FA_SM90_BWD_BIAS_AHEAD,
            default 1) against the build with -DFA_SM90_BWD_BIAS_AHEAD=0. SAVE_SET=main: the D <= 128 kernel's
            cases; SAVE_SET=drop: DROP_CASES and each in deterministic mode (FA_SM90_BWD_DROP128 and the other
            dropout forms against their former code), no timings.
  splitdbench milliseconds of the split kernel's score options against our sm80 backward (phase_splitdbench:
            D = 128 bias with / without dbias, causal and not; D = 256 soft-cap and bias; T = 4096, B = 4, bf16);
            also sets TF_FLASHATTN_SM90_BWD_SPLITD=1.
  sanitize  small odd cases, bf16, for compute-sanitizer (five of them with index masks: a KV-cache
            window with GQA at D = 64, validity masks with all-false batch rows, lengths with a causal
            window and a key length 0, and two at D = 64 without a causal mask (all index masks at once;
            a two-sided window with GQA and MQA); two in deterministic mode; seven at D = 256 and three more there in
            deterministic mode; six of SPLITD_CASES and two of them in deterministic mode, so
            this phase sets TF_FLASHATTN_SM90_BWD_SPLITD=1 too, which moves none of the others); SANITIZE_PREFIX=sd
            keeps only the cases whose name starts with it (the split kernel's, comma-separated for several:
            SANITIZE_PREFIX=d256,sd), SANITIZE_SUFFIX=_det those whose name ends with it.
Writes OUT/sm90_bwd_<phase>.json.
"""
import argparse
import json
import os
import sys

import torch

# The deterministic sm90 backward takes every deterministic call it can unless TF_FLASHATTN_SM90_BWD_DET=0
# (flash_bwd_sm90.cu, bwd_det_mode; read once, at the first backward): this script checks all of them, so it
# sets 1 for its own process when unset.
os.environ.setdefault("TF_FLASHATTN_SM90_BWD_DET", "1")
# The head-dim-256 kernel (flash_bwd_sm90_d256_kernel) is on by default; TF_FLASHATTN_SM90_BWD_D256=0
# (read once, at the first backward) would keep the D256_CASES below off it, so this script sets 1.
os.environ["TF_FLASHATTN_SM90_BWD_D256"] = "1"

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_harness_check import (DEV, Harness, bench_ms, err, index_visibility, make_inputs,  # noqa: E402
                                  print_ab_times, reference, same_bits, torch_sdpa_ms)
from sm90_check import SENTINEL, bucket, inputs, poisoned, run_fwd, sentinel_ok, visibility, wide_width, widen  # noqa: E402

NUM_CASES = [
    dict(name="odd_d128", B=2, Tq=113, Tk=203, H=3, D=128),
    dict(name="odd_d128_causal_br", B=2, Tq=113, Tk=203, H=3, D=128, causal=True, offset=203 - 113),
    dict(name="odd_d128_causal_tl", B=2, Tq=203, Tk=113, H=3, D=128, causal=True, offset=0),
    dict(name="empty_rows_causal", B=2, Tq=300, Tk=77, H=2, D=128, causal=True, offset=77 - 300),
    dict(name="gqa4_d128_causal_br", B=3, Tq=257, Tk=390, H=8, Hkv=2, D=128, causal=True, offset=390 - 257),
    dict(name="gqa4_d128", B=2, Tq=190, Tk=260, H=8, Hkv=2, D=128),
    dict(name="mqa_d128_causal_tl", B=2, Tq=321, Tk=200, H=4, Hkv=1, D=128, causal=True),
    dict(name="tk1", B=2, Tq=130, Tk=1, H=2, D=128),
    dict(name="tq1", B=2, Tq=1, Tk=300, H=4, D=128),
    dict(name="tiles_exact_causal", B=1, Tq=128, Tk=256, H=2, D=128, causal=True, offset=128),
    dict(name="tiles_65_129_causal", B=2, Tq=65, Tk=129, H=2, D=128, causal=True),
    dict(name="tiles_63_127", B=2, Tq=63, Tk=127, H=2, D=128),
    dict(name="dlse_scale", B=2, Tq=129, Tk=255, H=2, D=128, scale=0.3, dlse=True),
    dict(name="odd_d64", B=2, Tq=113, Tk=203, H=3, D=64),
    dict(name="odd_d64_causal_br", B=2, Tq=203, Tk=300, H=3, D=64, causal=True, offset=97),
    dict(name="gqa4_d64_causal_tl", B=2, Tq=300, Tk=200, H=8, Hkv=2, D=64, causal=True),
    dict(name="empty_rows_d64", B=2, Tq=200, Tk=70, H=2, D=64, causal=True, offset=70 - 200),
    dict(name="big_d128", B=2, Tq=2048, Tk=2048, H=4, D=128),
    dict(name="big_d128_causal", B=1, Tq=4096, Tk=4096, H=4, D=128, causal=True),
    dict(name="big_d64_causal", B=1, Tq=2048, Tk=2048, H=8, D=64, causal=True),
]
# The index masks (window, lengths, validity; flash_bwd_sm90.cu's IDX kernel). Lengths / validity
# options as sm90_check.py's inputs() and kernel_harness_check.make_inputs() (qlen / klen random with
# batch 0 full, qvalid / kvalid 20 % false, qlen_vals / klen_vals, kvalid_all) and bwd_inputs() below
# (qvalid_all, qvalid_false_b / kvalid_false_b: these batches' rows all false).
MASK_CASES = [
    # sliding window
    dict(name="win_left_d128", B=2, Tq=700, Tk=700, H=2, D=128, wl=100, poison_kv=True),
    dict(name="win_both_d128", B=2, Tq=700, Tk=700, H=2, D=128, wl=100, wr=20, poison_kv=True),
    dict(name="win_right_d64", B=2, Tq=300, Tk=333, H=3, D=64, wr=30),
    dict(name="win_left_off_d64", B=1, Tq=520, Tk=640, H=2, D=64, wl=64, offset=120, poison_kv=True),
    dict(name="win_causal_d128", B=2, Tq=600, Tk=650, H=2, D=128, causal=True, offset=50, wl=150),
    dict(name="win_kvcache_d128", B=2, Tq=128, Tk=1000, H=2, D=128, causal=True, offset=1000 - 128, wl=100,
         poison_kv=True),
    dict(name="win_kvcache_odd_d64", B=2, Tq=77, Tk=611, H=4, Hkv=2, D=64, causal=True, offset=611 - 77, wl=63,
         poison_kv=True),
    dict(name="win_causal_tl_empty_rows", B=2, Tq=300, Tk=200, H=2, D=64, causal=True, offset=-150, wl=30),
    dict(name="win_gqa_mqa_d64", B=2, Tq=390, Tk=410, H=4, Hkv=1, D=64, wl=90, wr=10),
    dict(name="win_edges_d128", B=2, Tq=129, Tk=257, H=2, D=128, wl=64, wr=0),
    dict(name="win_wide_bitwise", B=2, Tq=203, Tk=300, H=2, D=128, wl=10000, wr=10000, nomask_bitwise=True),
    # q / k lengths
    dict(name="len_random_d128", B=3, Tq=300, Tk=333, H=2, D=128, qlen=True, klen=True),
    dict(name="len_zero_full_d128", B=3, Tq=300, Tk=333, H=2, D=128, qlen_vals=[300, 65, 0],
         klen_vals=[333, 0, 129]),
    dict(name="len_causal_d64", B=3, Tq=260, Tk=390, H=2, D=64, qlen=True, klen=True, causal=True, offset=130),
    dict(name="len_gqa_causal_br", B=2, Tq=257, Tk=390, H=8, Hkv=2, D=128, qlen_vals=[200, 257],
         klen_vals=[390, 250], causal=True, offset=390 - 257),
    dict(name="len_skip_tiles", B=3, Tq=200, Tk=1000, H=2, D=128, qlen_vals=[200, 1, 129], klen_vals=[130, 700, 257],
         poison_kv=True),
    dict(name="len_edges_d64", B=2, Tq=63, Tk=127, H=2, D=64, qlen_vals=[63, 1], klen_vals=[127, 1]),
    dict(name="len_window_causal", B=3, Tq=600, Tk=650, H=2, D=128, causal=True, offset=50, wl=150,
         qlen_vals=[600, 333, 70], klen_vals=[650, 400, 0], poison_kv=True),
    dict(name="len_full_bitwise", B=2, Tq=190, Tk=260, H=4, Hkv=2, D=64, qlen_vals=[190, 190], klen_vals=[260, 260],
         causal=True, offset=70, nomask_bitwise=True),
    # [B, Tq] / [B, Tk] validity masks
    dict(name="valid_qk_d128", B=2, Tq=300, Tk=333, H=3, D=128, qvalid=True, kvalid=True),
    dict(name="valid_k_causal_gqa", B=2, Tq=257, Tk=257, H=4, Hkv=2, D=128, kvalid=True, causal=True),
    dict(name="valid_q_d64_odd", B=2, Tq=113, Tk=203, H=3, D=64, qvalid=True),
    dict(name="valid_false_rows", B=3, Tq=200, Tk=190, H=2, D=128, qvalid=True, kvalid=True, qvalid_false_b=[1],
         kvalid_false_b=[2]),
    dict(name="valid_false_rows_d64_causal", B=3, Tq=150, Tk=260, H=4, Hkv=1, D=64, qvalid=True, kvalid=True,
         qvalid_false_b=[0], kvalid_false_b=[1], causal=True, offset=110),
    dict(name="valid_all_true_bitwise", B=2, Tq=300, Tk=333, H=2, D=128, qvalid_all=True, kvalid_all=True,
         nomask_bitwise=True),
    dict(name="valid_all_true_causal_d64", B=2, Tq=200, Tk=200, H=2, D=64, kvalid_all=True, causal=True,
         nomask_bitwise=True),
    # everything at once, d_lse and a scale
    dict(name="all_masks_dlse", B=3, Tq=300, Tk=400, H=4, Hkv=2, D=128, causal=True, offset=100, wl=200,
         qlen=True, klen=True, kvalid=True, qvalid=True, dlse=True, scale=0.3),
    dict(name="all_masks_d64", B=2, Tq=259, Tk=131, H=2, D=64, wl=50, wr=70, qlen_vals=[259, 100],
         klen_vals=[100, 131], kvalid=True),
    # bigger
    dict(name="big_win_causal_d128", B=1, Tq=4096, Tk=4096, H=4, D=128, causal=True, wl=1024),
    dict(name="big_kvalid_d64", B=2, Tq=2048, Tk=2048, H=4, D=64, kvalid=True, qlen=True),
    # Soft-cap (the IDX kernel's soft-cap branches: tanh in place before the P pass, 1 - tanh^2 in
    # the dS pass, tanh recovered from P), alone, causal with GQA, with lengths.
    dict(name="softcap_d128", B=2, Tq=113, Tk=203, H=3, D=128, softcap=20.0),
    dict(name="softcap_causal_gqa_d64", B=2, Tq=200, Tk=260, H=4, Hkv=2, D=64, softcap=30.0, causal=True,
         offset=60),
    dict(name="softcap_lengths_d128", B=3, Tq=300, Tk=333, H=2, D=128, softcap=10.0, qlen=True, klen=True),
    # A dense mask (the IDX kernel's dense-mask copy of the P pass, every unit), broadcast both ways and over
    # the keys (column stride 0), with soft-cap, causal, lengths and GQA.
    dict(name="dmask_d128", B=2, Tq=113, Tk=203, H=3, D=128, mask=(1, 0)),
    dict(name="dmask_causal_gqa_d64", B=2, Tq=200, Tk=260, H=4, Hkv=2, D=64, mask=(1, 1), causal=True, offset=60),
    dict(name="dmask_softcap_lengths", B=3, Tq=300, Tk=333, H=2, D=128, mask=(0, 1), softcap=15.0, qlen=True,
         klen=True),
    dict(name="dmask_keybcast_causal_d128", B=2, Tq=150, Tk=203, H=3, D=128, mask=(1, 1, 0), causal=True,
         offset=53, qlen=True),
    # An additive bias and dbias (the D = 64 IDX kernel's bias copies: the bias in the masked P pass, dbias =
    # P (dP - dsum) stored in the dS pass): broadcast over the batch (head bias [1, H, Tq, Tk]), full [B, H,
    # Tq, Tk], with causal + lengths + GQA, with soft-cap (tanh recovered from P less the bias) and d_lse;
    # dbias checked against autograd's too, and exactly 0 where masked (dbias_dead). bias_neginf: -inf bias
    # entries (10 %, and every key of some rows of head 1: lse = -inf there), with a dense mask and soft-cap.
    # expect_sm80: calls the Hopper backward refuses (bias at D = 128, bias with dropout), which must run
    # sm80's (no sm90 launch) with the same checks.
    dict(name="bias_h_d64", B=2, Tq=77, Tk=203, H=3, D=64, bias=(0, 1)),
    dict(name="bias_full_d64", B=2, Tq=77, Tk=203, H=3, D=64, bias=(1, 1)),
    dict(name="bias_causal_len_gqa_d64", B=3, Tq=77, Tk=203, H=4, Hkv=2, D=64, bias=(1, 1), causal=True,
         offset=203 - 77, qlen_vals=[77, 40, 60], klen_vals=[203, 150, 70]),
    dict(name="bias_softcap_len_d64", B=2, Tq=77, Tk=203, H=4, Hkv=2, D=64, bias=(1, 0), softcap=20.0, qlen=True,
         klen=True, dlse=True, scale=0.3),
    dict(name="bias_neginf_mask_d64", B=2, Tq=77, Tk=203, H=3, D=64, bias=(1, 1), bias_neginf=True, mask=(0, 1),
         softcap=30.0),
    dict(name="bias_h_d128_sm80", B=2, Tq=77, Tk=203, H=3, D=128, bias=(0, 1), expect_sm80=True),
    dict(name="bias_causal_len_gqa_d128_sm80", B=3, Tq=77, Tk=203, H=4, Hkv=2, D=128, bias=(1, 1), causal=True,
         offset=203 - 77, qlen_vals=[77, 40, 60], klen_vals=[203, 150, 70], expect_sm80=True),
    dict(name="bias_drop_d64_sm80", B=2, Tq=77, Tk=203, H=3, D=64, bias=(1, 1), dropout=0.1, seed=(3, 4),
         expect_sm80=True),
]
# Dropout (flash_bwd_sm90.cu's DROP kernel: the IDX kernel with the forward's keep mask regenerated in
# the S^T layout). The forward (our Hopper one) and the backward both run with the case's rate and
# seed; the float64 / same-precision references multiply P by the harness's host keep mask
# (dropout_keep: flash_params.h's rule) and keep_scale, as sm90_check.py's dropout cases do.
DROP_CASES = [
    dict(name="drop01_d128", B=2, Tq=300, Tk=333, H=3, D=128, dropout=0.1, seed=(77, -5)),
    dict(name="drop05_d128_causal_br", B=2, Tq=257, Tk=390, H=2, D=128, dropout=0.5, causal=True,
         offset=390 - 257, seed=(3, 9)),
    dict(name="drop05_d64_causal_gqa", B=2, Tq=260, Tk=300, H=4, Hkv=2, D=64, dropout=0.5, causal=True,
         offset=40, seed=(3, 9)),
    dict(name="drop01_d64_mqa", B=2, Tq=190, Tk=260, H=4, Hkv=1, D=64, dropout=0.1, seed=(1, 2)),
    dict(name="drop01_tiles_63_127", B=2, Tq=63, Tk=127, H=2, D=128, dropout=0.1, seed=(5, 6)),
    dict(name="drop05_tiles_65_129", B=2, Tq=65, Tk=129, H=2, D=64, dropout=0.5, causal=True, seed=(-7, 1 << 40)),
    dict(name="drop01_tq1", B=2, Tq=1, Tk=300, H=2, D=128, dropout=0.1, seed=(8, 8)),
    dict(name="drop05_tk1", B=2, Tq=130, Tk=1, H=2, D=64, dropout=0.5, seed=(8, 9)),
    dict(name="drop05_empty_rows", B=2, Tq=300, Tk=77, H=2, D=128, dropout=0.5, causal=True, offset=77 - 300,
         seed=(9, 10)),
    dict(name="drop01_window", B=2, Tq=600, Tk=650, H=2, D=128, dropout=0.1, causal=True, offset=50, wl=150,
         seed=(11, 12)),
    dict(name="drop05_window_both_d64", B=2, Tq=300, Tk=333, H=3, D=64, dropout=0.5, wl=60, wr=20, seed=(13, 14)),
    dict(name="drop01_lengths", B=3, Tq=300, Tk=333, H=2, D=128, dropout=0.1, qlen_vals=[300, 65, 0],
         klen_vals=[333, 0, 129], seed=(15, 16)),
    dict(name="drop05_valid_gqa_d64", B=3, Tq=150, Tk=260, H=4, Hkv=2, D=64, dropout=0.5, qvalid=True, kvalid=True,
         qvalid_false_b=[0], causal=True, offset=110, seed=(17, 18)),
    dict(name="drop01_all_masks_dlse", B=3, Tq=300, Tk=400, H=4, Hkv=2, D=128, dropout=0.1, causal=True,
         offset=100, wl=200, qlen=True, klen=True, kvalid=True, qvalid=True, dlse=True, scale=0.3, seed=(19, 20)),
    dict(name="drop01_big_d128_causal", B=1, Tq=2048, Tk=2048, H=4, D=128, dropout=0.1, causal=True, seed=(21, 22)),
    dict(name="drop05_big_d64", B=2, Tq=1024, Tk=1024, H=4, D=64, dropout=0.5, seed=(23, 24)),
]
# Head dim 256 (flash_bwd_sm90_d256_kernel, TF_FLASHATTN_SM90_BWD_D256=1 set above; key tiles of 64
# keys, so the tile edges are at multiples of 64): no mask and causal with both alignments, odd Tq / Tk,
# rows that see no key (exact zeros), GQA 4, MQA, Tq = 1, Tk = 1, d_lse with a scale, bigger ones, and the
# index masks (its IDX instantiation: window, lengths, validity, with poisoned K / V where no row looks and
# one bitwise check against the kernel without masks), dropout (its DROP instantiation; and
# D256_DROP_EXACT_CASES, the exact keep-mask check through dV); each must launch the sm90 backward once (the
# same launch counter as D = 64 / 128). expect_sm80: what the D = 256 kernel does not take (soft-cap, a
# dense mask: sm80's, no sm90 launch).
D256_CASES = [
    dict(name="d256_odd", B=2, Tq=113, Tk=203, H=3, D=256),
    dict(name="d256_odd_causal_br", B=2, Tq=113, Tk=203, H=3, D=256, causal=True, offset=203 - 113),
    dict(name="d256_odd_causal_tl", B=2, Tq=203, Tk=113, H=3, D=256, causal=True, offset=0),
    dict(name="d256_empty_rows_causal", B=2, Tq=300, Tk=77, H=2, D=256, causal=True, offset=77 - 300),
    dict(name="d256_gqa4_causal_br", B=3, Tq=257, Tk=390, H=8, Hkv=2, D=256, causal=True, offset=390 - 257),
    dict(name="d256_gqa4", B=2, Tq=190, Tk=260, H=8, Hkv=2, D=256),
    dict(name="d256_mqa_causal_tl", B=2, Tq=321, Tk=200, H=4, Hkv=1, D=256, causal=True),
    dict(name="d256_tk1", B=2, Tq=130, Tk=1, H=2, D=256),
    dict(name="d256_tq1", B=2, Tq=1, Tk=300, H=4, D=256),
    dict(name="d256_tq1_causal_br", B=2, Tq=1, Tk=300, H=4, D=256, causal=True, offset=299),
    dict(name="d256_tiles_exact_causal", B=1, Tq=128, Tk=256, H=2, D=256, causal=True, offset=128),
    dict(name="d256_tiles_65_129_causal", B=2, Tq=65, Tk=129, H=2, D=256, causal=True),
    dict(name="d256_tiles_63_127", B=2, Tq=63, Tk=127, H=2, D=256),
    dict(name="d256_dlse_scale", B=2, Tq=129, Tk=255, H=2, D=256, scale=0.3, dlse=True),
    dict(name="d256_big", B=2, Tq=1024, Tk=1024, H=4, D=256),
    dict(name="d256_big_causal", B=1, Tq=2048, Tk=2048, H=4, D=256, causal=True),
    # index masks (the IDX instantiation)
    dict(name="d256_win_left", B=2, Tq=400, Tk=400, H=2, D=256, wl=100, poison_kv=True),
    dict(name="d256_win_both_gqa", B=2, Tq=300, Tk=333, H=4, Hkv=2, D=256, wl=60, wr=20),
    dict(name="d256_win_kvcache", B=2, Tq=77, Tk=611, H=4, Hkv=2, D=256, causal=True, offset=611 - 77, wl=63,
         poison_kv=True),
    dict(name="d256_win_causal_tl_empty_rows", B=2, Tq=300, Tk=200, H=2, D=256, causal=True, offset=-150, wl=30),
    dict(name="d256_len_zero_full", B=3, Tq=300, Tk=333, H=2, D=256, qlen_vals=[300, 65, 0], klen_vals=[333, 0, 129]),
    dict(name="d256_len_causal", B=3, Tq=260, Tk=390, H=2, D=256, qlen=True, klen=True, causal=True, offset=130),
    dict(name="d256_len_skip_tiles", B=3, Tq=200, Tk=1000, H=2, D=256, qlen_vals=[200, 1, 129],
         klen_vals=[130, 700, 257], poison_kv=True),
    dict(name="d256_valid_false_rows", B=3, Tq=200, Tk=190, H=2, D=256, qvalid=True, kvalid=True,
         qvalid_false_b=[1], kvalid_false_b=[2]),
    dict(name="d256_valid_k_causal_mqa", B=2, Tq=257, Tk=257, H=4, Hkv=1, D=256, kvalid=True, causal=True),
    dict(name="d256_all_masks_dlse", B=3, Tq=300, Tk=400, H=4, Hkv=2, D=256, causal=True, offset=100, wl=200,
         qlen=True, klen=True, kvalid=True, qvalid=True, dlse=True, scale=0.3),
    dict(name="d256_valid_all_true_bitwise", B=2, Tq=300, Tk=333, H=2, D=256, qvalid_all=True, kvalid_all=True,
         nomask_bitwise=True),
    # dropout (the DROP instantiation: the index-masked kernel with the forward's keep mask)
    dict(name="d256_drop01", B=2, Tq=300, Tk=333, H=3, D=256, dropout=0.1, seed=(77, -5)),
    dict(name="d256_drop05_causal_br_gqa", B=2, Tq=257, Tk=390, H=4, Hkv=2, D=256, dropout=0.5, causal=True,
         offset=390 - 257, seed=(3, 9)),
    dict(name="d256_drop05_empty_rows", B=2, Tq=300, Tk=77, H=2, D=256, dropout=0.5, causal=True, offset=77 - 300,
         seed=(9, 10)),
    dict(name="d256_drop01_lengths_window", B=3, Tq=300, Tk=333, H=2, D=256, dropout=0.1, qlen_vals=[300, 65, 0],
         klen_vals=[333, 0, 129], wl=100, seed=(15, 16)),
    dict(name="d256_drop01_tq1", B=2, Tq=1, Tk=300, H=2, D=256, dropout=0.1, seed=(8, 8)),
    # calls the D = 256 kernel refuses: sm80's
    dict(name="d256_softcap_sm80", B=2, Tq=113, Tk=203, H=3, D=256, softcap=20.0, expect_sm80=True),
    dict(name="d256_dmask_sm80", B=2, Tq=113, Tk=203, H=3, D=256, mask=(1, 0), expect_sm80=True),
]
# The split kernel's score options (flash_bwd_sm90.cu, flash_bwd_sm90_split_score_kernel; on by default,
# TF_FLASHATTN_SM90_BWD_SPLITD=0 turns them off; phase splitd sets it to 1 for its own process): at D = 128 an additive bias with dbias (the D <= 128 kernel's BIAS copies, D = 64 only,
# send it to sm80 without the switch), at D = 256 soft-cap, a dense mask, bias / dbias. 64-key tiles, so the
# tile edges are at multiples of 64. Bias broadcast through its strides: (0, 1) [1, H, Tq, Tk], (1, 0)
# [B, 1, Tq, Tk], bias_bk [B, 1, 1, Tk] (bwd_inputs); bias_neginf: -inf at 10 % of the elements and on every key
# of some rows of head 1 (lse = -inf there); bias_neginf_keys: -inf on whole key columns (every row) and every
# key of some rows of head 0; mask_rows_false: the dense mask false on whole rows. Each is judged as phase
# numerics (float64 reference, our sm80 backward, dbias exactly 0 where masked or -inf) and must launch the sm90
# backward once; expect_sm80: calls the switch must still leave on sm80 (bias with dropout).
# The D <= 128 kernel's BIAS instantiation (D = 64): NUM_CASES' bias cases it takes, and a larger one over many
# tiles with a dense mask and causal rows (phase splitdsave's A / B check of its bias copy of the P pass).
BIAS64_AB_CASES_EXTRA = [
    dict(name="ab_bias_mask_causal_d64", B=2, Tq=700, Tk=900, H=4, Hkv=2, D=64, bias=(1, 1), mask=(0, 1), causal=True,
         offset=200, klen=True),
    dict(name="ab_bias_bk_d64", B=2, Tq=333, Tk=517, H=3, D=64, bias=(1, 0), bias_bk=True),
]
BIAS64_AB_CASES = [c for c in NUM_CASES if c.get("bias") and c["D"] == 64] + BIAS64_AB_CASES_EXTRA
# The index-masked kernel's dense mask copy of the P pass (a dense mask without bias or dropout, D = 64 and 128):
# NUM_CASES' and two larger ones (one with a key-broadcast mask, column stride 0).
DMASK_AB_CASES = [c for c in NUM_CASES if c.get("mask") and not c.get("bias") and not c.get("dropout")
                  and c["D"] in (64, 128) and not c.get("expect_sm80")] + [
    dict(name="ab_dmask_causal_len_d128", B=2, Tq=700, Tk=900, H=4, Hkv=2, D=128, mask=(1, 0), causal=True, offset=200,
         klen=True, qlen=True),
    dict(name="ab_dmask_keybcast_d64", B=2, Tq=333, Tk=517, H=3, D=64, mask=(1, 1, 0)),
]
SPLITD_CASES = [
    # D = 128: bias / dbias
    dict(name="sd128_bias_h", B=2, Tq=77, Tk=203, H=3, D=128, bias=(0, 1)),
    dict(name="sd128_bias_full", B=2, Tq=77, Tk=203, H=3, D=128, bias=(1, 1)),
    dict(name="sd128_bias_bk", B=2, Tq=150, Tk=260, H=4, D=128, bias=(1, 0), bias_bk=True),
    dict(name="sd128_bias_causal_br", B=2, Tq=130, Tk=203, H=2, D=128, bias=(1, 1), causal=True, offset=203 - 130),
    dict(name="sd128_bias_causal_tl_gqa", B=2, Tq=203, Tk=130, H=4, Hkv=2, D=128, bias=(0, 1), causal=True),
    dict(name="sd128_bias_causal_len_gqa", B=3, Tq=77, Tk=203, H=4, Hkv=2, D=128, bias=(1, 1), causal=True,
         offset=203 - 77, qlen_vals=[77, 40, 60], klen_vals=[203, 150, 70]),
    dict(name="sd128_bias_mqa", B=2, Tq=190, Tk=260, H=4, Hkv=1, D=128, bias=(1, 1)),
    dict(name="sd128_bias_softcap_len_dlse", B=2, Tq=77, Tk=203, H=4, Hkv=2, D=128, bias=(1, 0), softcap=20.0,
         qlen=True, klen=True, dlse=True, scale=0.3),
    dict(name="sd128_bias_neginf_mask_softcap", B=2, Tq=77, Tk=203, H=3, D=128, bias=(1, 1), bias_neginf=True,
         mask=(0, 1), softcap=30.0),
    dict(name="sd128_bias_neginf_keys", B=2, Tq=150, Tk=203, H=3, D=128, bias=(1, 0), bias_neginf_keys=True),
    dict(name="sd128_bias_mask_rows", B=2, Tq=150, Tk=203, H=3, D=128, bias=(0, 1), mask=(1, 1), mask_rows_false=True),
    dict(name="sd128_bias_window_valid", B=3, Tq=200, Tk=190, H=2, D=128, bias=(1, 1), wl=60, wr=20, qvalid=True,
         kvalid=True, qvalid_false_b=[1]),
    # a KV-cache window (causal, bottom-right): keys below 384 are seen by no row and poisoned (NaN K / V); a
    # left window alone (wl=100 without causal) lets row 0 see every key, and poisons nothing
    dict(name="sd128_bias_win_poison", B=2, Tq=77, Tk=611, H=4, Hkv=2, D=128, bias=(0, 1), causal=True,
         offset=611 - 77, wl=63, poison_kv=True),
    dict(name="sd128_bias_tq1", B=2, Tq=1, Tk=300, H=4, D=128, bias=(1, 1)),
    dict(name="sd128_bias_tk1", B=2, Tq=130, Tk=1, H=2, D=128, bias=(1, 1)),
    dict(name="sd128_bias_tiles_63_127", B=2, Tq=63, Tk=127, H=2, D=128, bias=(1, 1)),
    dict(name="sd128_bias_tiles_65_129_causal", B=2, Tq=65, Tk=129, H=2, D=128, bias=(0, 1), causal=True),
    dict(name="sd128_bias_nodbias", B=2, Tq=150, Tk=203, H=3, D=128, bias=(1, 1), no_dbias=True),
    dict(name="sd128_bias_big_causal", B=1, Tq=1024, Tk=1024, H=4, D=128, bias=(0, 1), causal=True),
    # soft-cap that bends the scores (|scale S| ~ 3 against a cap of 5): at a cap of 20 / 30 with scores ~ N(0, 1)
    # 1 - tanh^2 is within 1 % of 1, and a dS pass without it passes the bf16 rows of those cases
    dict(name="sd128_bias_softcap_tight", B=2, Tq=150, Tk=203, H=3, D=128, bias=(1, 1), softcap=5.0, scale=0.3),
    dict(name="sd128_bias_drop_sm80", B=2, Tq=77, Tk=203, H=3, D=128, bias=(1, 1), dropout=0.1, seed=(3, 4),
         expect_sm80=True),
    # D = 256: soft-cap, dense mask, bias / dbias
    dict(name="sd256_softcap", B=2, Tq=113, Tk=203, H=3, D=256, softcap=20.0),
    dict(name="sd256_softcap_causal_gqa", B=2, Tq=200, Tk=260, H=4, Hkv=2, D=256, softcap=30.0, causal=True,
         offset=60),
    dict(name="sd256_softcap_tight", B=2, Tq=113, Tk=203, H=3, D=256, softcap=5.0, scale=0.2),
    dict(name="sd256_dmask", B=2, Tq=113, Tk=203, H=3, D=256, mask=(1, 0)),
    dict(name="sd256_dmask_rows_causal_gqa", B=2, Tq=200, Tk=260, H=4, Hkv=2, D=256, mask=(1, 1),
         mask_rows_false=True, causal=True, offset=60),
    dict(name="sd256_dmask_softcap_win_poison", B=2, Tq=77, Tk=611, H=2, D=256, mask=(0, 1), softcap=15.0,
         causal=True, offset=611 - 77, wl=100, poison_kv=True),
    dict(name="sd256_bias_h", B=2, Tq=77, Tk=203, H=3, D=256, bias=(0, 1)),
    dict(name="sd256_bias_bk", B=2, Tq=150, Tk=260, H=4, D=256, bias=(1, 0), bias_bk=True),
    dict(name="sd256_bias_causal_len_gqa", B=3, Tq=77, Tk=203, H=4, Hkv=2, D=256, bias=(1, 1), causal=True,
         offset=203 - 77, qlen_vals=[77, 40, 60], klen_vals=[203, 150, 70]),
    dict(name="sd256_bias_softcap_len_dlse", B=2, Tq=77, Tk=203, H=4, Hkv=2, D=256, bias=(1, 0), softcap=20.0,
         qlen=True, klen=True, dlse=True, scale=0.3),
    dict(name="sd256_bias_neginf_mask_softcap", B=2, Tq=77, Tk=203, H=3, D=256, bias=(1, 1), bias_neginf=True,
         mask=(0, 1), softcap=30.0),
    dict(name="sd256_bias_neginf_keys", B=2, Tq=150, Tk=203, H=3, D=256, bias=(1, 0), bias_neginf_keys=True),
    dict(name="sd256_bias_tq1", B=2, Tq=1, Tk=300, H=4, D=256, bias=(1, 1)),
    dict(name="sd256_bias_tiles_65_129_causal", B=2, Tq=65, Tk=129, H=2, D=256, bias=(0, 1), causal=True),
    dict(name="sd256_bias_nodbias_mask", B=2, Tq=150, Tk=203, H=3, D=256, bias=(1, 1), mask=(1, 0), no_dbias=True),
    dict(name="sd256_bias_big_causal", B=1, Tq=1024, Tk=1024, H=2, D=256, bias=(0, 1), causal=True),
    dict(name="sd256_bias_drop_sm80", B=2, Tq=77, Tk=203, H=3, D=256, bias=(1, 1), dropout=0.1, seed=(3, 4),
         expect_sm80=True),
]
# Other head dims, padded up to the kernels of head_dim_bucket(max(D, Dv)) (phase padded; the split switch on):
# the main kernel at 64 / 128 (D = 80, 96, 40, 32, 112; Dv != D both ways), the head-dim-256 kernel (192 / 128,
# 160, 248 / 8), each with causal both alignments, GQA / MQA, the index masks with poisoned keys, d_lse, dropout,
# soft-cap and a dense mask, bias / dbias (the BIAS kernel at 64, the split kernel at 128 and 256), deterministic
# mode. "wide" (sm90_check.widen()): q, k, v, dO and o as the first D / Dv columns of buffers as wide as the
# kernel's head dim, NaN past them in the inputs, SENTINEL in dq, dk, dv, checked after the call (a store past
# D / Dv, or a read past them, fails the case).
PAD_CASES = [
    dict(name="bpad_d80", wide=True, B=2, Tq=113, Tk=203, H=3, D=80),
    dict(name="bpad_d96_causal_br_gqa", wide=True, B=3, Tq=257, Tk=390, H=8, Hkv=2, D=96, causal=True,
         offset=390 - 257),
    dict(name="bpad_d40_causal_tl", wide=True, B=2, Tq=203, Tk=113, H=3, D=40, causal=True),
    dict(name="bpad_d32_mqa", B=2, Tq=190, Tk=260, H=4, Hkv=1, D=32),
    dict(name="bpad_d112_tiles_65_129_causal", wide=True, B=2, Tq=65, Tk=129, H=2, D=112, causal=True),
    dict(name="bpad_dv64_d128", wide=True, B=2, Tq=129, Tk=255, H=2, D=128, Dv=64),
    dict(name="bpad_d64_dv128_causal", wide=True, B=2, Tq=255, Tk=129, H=2, D=64, Dv=128, causal=True),
    dict(name="bpad_d192_dv128_causal_gqa", wide=True, B=2, Tq=300, Tk=333, H=4, Hkv=2, D=192, Dv=128,
         causal=True, offset=33),
    dict(name="bpad_d160_window_poison", B=2, Tq=700, Tk=700, H=2, D=160, wl=100, wr=20, poison_kv=True),
    dict(name="bpad_d248_dv8_dlse", wide=True, B=2, Tq=127, Tk=129, H=2, D=248, Dv=8, dlse=True),
    dict(name="bpad_d96_masks_poison", wide=True, B=3, Tq=600, Tk=650, H=2, D=96, causal=True, offset=50, wl=150,
         qlen_vals=[600, 333, 70], klen_vals=[650, 400, 0], qvalid=True, poison_kv=True),
    dict(name="bpad_d80_dropout_klen", wide=True, B=2, Tq=300, Tk=333, H=3, D=80, dropout=0.1, klen=True,
         seed=(77, -5)),
    dict(name="bpad_d160_dropout_causal_gqa", B=2, Tq=260, Tk=300, H=4, Hkv=2, D=160, dropout=0.5, causal=True,
         offset=40, seed=(3, 9)),
    dict(name="bpad_d96_softcap_dmask", wide=True, B=2, Tq=257, Tk=300, H=4, Hkv=2, D=96, softcap=20.0,
         mask=(1, 1), klen=True),
    dict(name="bpad_d40_bias_causal", wide=True, B=2, Tq=260, Tk=390, H=3, D=40, bias=(0, 1), causal=True,
         offset=130),
    dict(name="bpad_d96_bias_len_gqa", wide=True, B=3, Tq=77, Tk=203, H=4, Hkv=2, D=96, bias=(1, 1), causal=True,
         offset=203 - 77, qlen_vals=[77, 40, 60], klen_vals=[203, 150, 70]),
    dict(name="bpad_d200_bias_softcap", wide=True, B=2, Tq=77, Tk=203, H=4, Hkv=2, D=200, bias=(1, 0),
         softcap=20.0),
    dict(name="bpad_d96_det_causal", wide=True, B=2, Tq=300, Tk=333, H=4, Hkv=2, D=96, causal=True, offset=33,
         deterministic=True),
    dict(name="bpad_d160_det", B=2, Tq=200, Tk=333, H=3, D=160, deterministic=True),
    dict(name="bpad_d96_big_causal", B=1, Tq=2048, Tk=2048, H=4, D=96, causal=True),
    dict(name="bpad_d80_big", B=2, Tq=1024, Tk=1024, H=4, D=80),
]
# The Hopper TF32 backwards (flash_bwd_sm90_tf32.cu at 64, flash_bwd_sm90_tf32_d128.cu at 128) at other head dims,
# padded up (phase tf32pad): float32 with allow_tf32, D, Dv multiples of 4 up to 128, each run under every variant of
# the kernel it takes (head dim 64: set_sm90_tf32_bwd 1 .. 7; 128: set_sm90_tf32_bwd128 1 .. 4, the dQ modes),
# against the float64 reference (TF32 floors, as kernel_harness_check.py), sm80's TF32 backward, the exact zeros of
# dead rows / keys, and the sentinel of "wide" cases (as PAD_CASES). tbpad_d44_compact: compact strides of 44 / 176
# elements (multiples of 4, not 8). expect_sm80: calls the Hopper TF32 backwards must refuse. tbpad_d80_det: deterministic
# mode (the ordered dQ reduction; phase tf32det checks it).
TF32_PAD_CASES = [
    dict(name="tbpad_d80", wide=True, B=2, Tq=113, Tk=203, H=3, D=80),
    dict(name="tbpad_d96_causal_br_gqa", wide=True, B=3, Tq=257, Tk=390, H=8, Hkv=2, D=96, causal=True,
         offset=390 - 257),
    dict(name="tbpad_d40_causal_tl", wide=True, B=2, Tq=203, Tk=113, H=3, D=40, causal=True),
    dict(name="tbpad_d36", wide=True, B=2, Tq=200, Tk=333, H=3, D=36),
    dict(name="tbpad_d44_compact", B=2, Tq=150, Tk=260, H=4, Hkv=2, D=44),
    dict(name="tbpad_d64_dv128", wide=True, B=2, Tq=129, Tk=255, H=2, D=64, Dv=128),
    dict(name="tbpad_d128_dv64_causal", wide=True, B=2, Tq=255, Tk=129, H=2, D=128, Dv=64, causal=True),
    dict(name="tbpad_d60_dv32_dlse", wide=True, B=2, Tq=127, Tk=129, H=2, D=60, Dv=32, dlse=True),
    dict(name="tbpad_d96_masks_poison", wide=True, B=3, Tq=600, Tk=650, H=2, D=96, causal=True, offset=50, wl=150,
         qlen_vals=[600, 333, 70], klen_vals=[650, 400, 0], qvalid=True, poison_kv=True),
    dict(name="tbpad_d48_window_kvalid", wide=True, B=2, Tq=300, Tk=333, H=2, D=48, wl=60, wr=20, kvalid=True),
    dict(name="tbpad_d112_tq1", B=3, Tq=1, Tk=17, H=2, D=112),
    dict(name="tbpad_d80_big", B=2, Tq=1024, Tk=1024, H=4, D=80),
    dict(name="tbpad_d96_big_causal", B=1, Tq=2048, Tk=2048, H=4, D=96, causal=True),
    dict(name="tbpad_d80_det", B=2, Tq=100, Tk=150, H=2, D=80, deterministic=True),
    # Soft-cap (the CAP instantiations, which run the default variant / dQ mode whatever mode is set): alone at both
    # head dims, with a tight cap and a scale (tanh saturated), causal both alignments, GQA, masks, padded, long.
    dict(name="tbcap_d64", B=2, Tq=113, Tk=203, H=3, D=64, softcap=20.0),
    dict(name="tbcap_d128_tight", B=2, Tq=150, Tk=203, H=3, D=128, softcap=5.0, scale=0.3),
    dict(name="tbcap_d64_causal_br_gqa", B=2, Tq=200, Tk=260, H=4, Hkv=2, D=64, softcap=30.0, causal=True,
         offset=60),
    dict(name="tbcap_d128_causal_tl_dlse", B=2, Tq=260, Tk=200, H=2, D=128, softcap=10.0, causal=True, dlse=True),
    dict(name="tbcap_d96_masks_poison", wide=True, B=3, Tq=600, Tk=650, H=2, D=96, softcap=15.0, causal=True,
         offset=50, wl=150, qlen_vals=[600, 333, 70], klen_vals=[650, 400, 0], qvalid=True, poison_kv=True),
    dict(name="tbcap_d40_kvalid", wide=True, B=2, Tq=300, Tk=333, H=2, D=40, softcap=20.0, kvalid=True),
    dict(name="tbcap_d128_big", B=1, Tq=2048, Tk=2048, H=4, D=128, softcap=30.0),
    dict(name="tbcap_d64_big_causal", B=1, Tq=2048, Tk=2048, H=4, D=64, softcap=30.0, causal=True),
    # Dropout (the kTf32Drop instantiations, the default variant / dQ mode whatever mode is set; the reference takes
    # the host's keep mask): both head dims, GQA, causal both alignments, lengths and masks, with soft-cap, padded,
    # rate 0.5, long.
    dict(name="tbdrop_d64", B=2, Tq=113, Tk=203, H=3, D=64, dropout=0.1, seed=(1, 2)),
    dict(name="tbdrop_d128_causal_br_gqa", B=2, Tq=200, Tk=260, H=4, Hkv=2, D=128, dropout=0.2, seed=(3, 4),
         causal=True, offset=60),
    dict(name="tbdrop_d64_causal_tl_dlse", B=2, Tq=260, Tk=200, H=2, D=64, dropout=0.1, seed=(5, 6), causal=True,
         dlse=True),
    dict(name="tbdrop_d80_masks_poison", wide=True, B=3, Tq=600, Tk=650, H=2, D=80, dropout=0.5, seed=(-7, 1 << 40),
         causal=True, offset=50, wl=150, qlen_vals=[600, 333, 70], klen_vals=[650, 400, 0], qvalid=True,
         poison_kv=True),
    dict(name="tbdrop_softcap_d128", B=2, Tq=150, Tk=203, H=3, D=128, dropout=0.1, seed=(7, 8), softcap=10.0),
    dict(name="tbdrop_softcap_d40_kvalid", wide=True, B=2, Tq=300, Tk=333, H=2, D=40, dropout=0.1, seed=(9, 10),
         softcap=20.0, kvalid=True),
    dict(name="tbdrop_d128_big", B=1, Tq=2048, Tk=2048, H=4, D=128, dropout=0.1, seed=(11, 12)),
    dict(name="tbdrop_d64_big_causal", B=1, Tq=2048, Tk=2048, H=4, D=64, dropout=0.1, seed=(13, 14), causal=True),
    # A dense mask, bias and dbias (the kTf32Dense instantiations, alone or with soft-cap; the default variant / dQ
    # mode whatever mode is set; set_sm90_tf32_bwd_dense(1) for these runs, tf32_backward): bias broadcast over the
    # batch, full, [B, 1, 1, Tk] and [B, H, Tq, 1] (key stride 0); with causal in both alignments, GQA, lengths,
    # windows and validity masks; soft-cap (tanh recovered with the bias taken out), tight, with d_lse; -inf bias at
    # random elements, whole rows (lse = -inf) and key columns; NaN / +inf bias where the masks hide the element; the
    # dense mask alone; bias without dbias; one query, one key; padded head dims; 2048 tokens. dbias against the
    # float64 reference (a tenth of the TF32 floor) and exactly 0 where hidden or -inf.
    dict(name="tbbias_h_d64", B=2, Tq=77, Tk=203, H=3, D=64, bias=(0, 1)),
    dict(name="tbbias_full_d128", B=2, Tq=77, Tk=203, H=3, D=128, bias=(1, 1)),
    dict(name="tbbias_bk_d64", B=2, Tq=150, Tk=260, H=4, D=64, bias=(1, 0), bias_bk=True),
    dict(name="tbbias_keystride0_d128", B=2, Tq=150, Tk=260, H=2, D=128, bias=(1, 1, 0)),
    dict(name="tbbias_causal_br_d128", B=2, Tq=130, Tk=203, H=2, D=128, bias=(1, 1), causal=True, offset=203 - 130),
    dict(name="tbbias_causal_tl_gqa_d64", B=2, Tq=203, Tk=130, H=4, Hkv=2, D=64, bias=(0, 1), causal=True),
    dict(name="tbbias_causal_len_gqa_d128", B=3, Tq=77, Tk=203, H=4, Hkv=2, D=128, bias=(1, 1), causal=True,
         qlen_vals=[77, 40, 0], klen_vals=[203, 100, 150]),
    dict(name="tbbias_window_valid_d64", B=3, Tq=200, Tk=190, H=2, D=64, bias=(1, 1), wl=60, wr=20, qvalid=True,
         kvalid=True),
    dict(name="tbbias_softcap_len_dlse_d64", B=2, Tq=77, Tk=203, H=4, Hkv=2, D=64, bias=(1, 0), softcap=20.0,
         qlen_vals=[77, 30], dlse=True),
    dict(name="tbbias_softcap_tight_d128", B=2, Tq=150, Tk=203, H=3, D=128, bias=(1, 1), softcap=5.0, scale=0.3),
    dict(name="tbbias_neginf_mask_softcap_d128", B=2, Tq=77, Tk=203, H=3, D=128, bias=(1, 1), bias_neginf=True,
         mask=(1, 1), softcap=20.0),
    dict(name="tbbias_neginf_rows_softcap_d64", B=2, Tq=150, Tk=203, H=3, D=64, bias=(1, 1), bias_neginf=True,
         softcap=10.0),
    dict(name="tbbias_neginf_keys_d128", B=2, Tq=150, Tk=203, H=3, D=128, bias=(1, 0), bias_neginf_keys=True),
    dict(name="tbbias_nan_hidden_d64", B=2, Tq=150, Tk=203, H=3, D=64, bias=(1, 1), mask=(1, 1), causal=True,
         bias_nan_hidden=True),
    dict(name="tbbias_nan_hidden_d128", B=2, Tq=150, Tk=203, H=3, D=128, bias=(1, 1), mask=(0, 1), wl=50,
         klen_vals=[203, 120], bias_nan_hidden=True),
    dict(name="tbmask_rows_d64", B=2, Tq=150, Tk=203, H=3, D=64, mask=(1, 1), mask_rows_false=True),
    dict(name="tbmask_causal_gqa_d128", B=2, Tq=203, Tk=260, H=4, Hkv=2, D=128, mask=(0, 1), causal=True, offset=57),
    dict(name="tbbias_nodbias_d64", B=2, Tq=150, Tk=203, H=3, D=64, bias=(1, 1), no_dbias=True),
    dict(name="tbbias_tq1_d128", B=2, Tq=1, Tk=300, H=4, D=128, bias=(1, 1)),
    dict(name="tbbias_tk1_d64", B=2, Tq=130, Tk=1, H=2, D=64, bias=(1, 1), mask=(1, 1)),
    dict(name="tbbias_pad_d40_causal", wide=True, B=2, Tq=260, Tk=390, H=3, D=40, bias=(0, 1), causal=True),
    dict(name="tbbias_pad_d96_len_gqa", wide=True, B=3, Tq=77, Tk=203, H=4, Hkv=2, D=96, bias=(1, 1), causal=True,
         qlen_vals=[77, 50, 1], klen_vals=[203, 64, 129]),
    dict(name="tbbias_pad_d80_mask_softcap", wide=True, B=2, Tq=113, Tk=203, H=3, D=80, bias=(1, 0), mask=(1, 0),
         softcap=15.0),
    dict(name="tbbias_big_causal_d128", B=1, Tq=2048, Tk=2048, H=4, D=128, bias=(0, 1), causal=True),
    dict(name="tbbias_big_mask_d64", B=1, Tq=2048, Tk=2048, H=4, D=64, bias=(0, 1), mask=(0, 1)),
    # Refused: a bias with dropout (sm80's TF32 backward), and a dense mask / bias with the switch off.
    dict(name="tbbias_drop_sm80", B=2, Tq=100, Tk=150, H=2, D=80, bias=(1, 1), dropout=0.1, seed=(3, 4),
         expect_sm80=True),
    dict(name="tbbias_dense_off", B=2, Tq=100, Tk=150, H=2, D=64, bias=(1, 1), mask=(1, 1), dense_off=True),
    dict(name="tbpad_d132_sm80", B=2, Tq=100, Tk=150, H=2, D=132, expect_sm80=True),
]
# The Hopper TF32 backwards in deterministic mode (phase tf32det: the DET instantiations, their ordered dQ reduction):
# head dims 64 and 128 and padded ones, GQA, causal both alignments, index masks, d_lse, and long walks (T = 2048
# without a mask: 16 / 32 key tiles add to every dQ block in order).
TF32_DET_CASES = [
    dict(name="tdet_d64_ragged_gqa", B=2, Tq=300, Tk=517, H=4, Hkv=2, D=64),
    dict(name="tdet_d64_causal_br", B=2, Tq=517, Tk=300, H=2, D=64, causal=True, offset=300 - 517),
    dict(name="tdet_d64_long", B=1, Tq=2048, Tk=2048, H=2, D=64, dlse=True),
    dict(name="tdet_d64_long_causal_gqa", B=1, Tq=2048, Tk=2048, H=4, Hkv=2, D=64, causal=True),
    dict(name="tdet_d128_ragged_gqa", B=2, Tq=300, Tk=517, H=4, Hkv=2, D=128),
    dict(name="tdet_d128_causal_tl", B=2, Tq=300, Tk=517, H=2, D=128, causal=True),
    dict(name="tdet_d128_long", B=1, Tq=2048, Tk=2048, H=2, D=128),
    dict(name="tdet_d128_window_lengths", B=3, Tq=600, Tk=650, H=2, D=128, causal=True, offset=50, wl=150,
         qlen_vals=[600, 333, 70], klen_vals=[650, 400, 0], qvalid=True),
    dict(name="tdet_d80_causal_gqa_wide", wide=True, B=2, Tq=257, Tk=390, H=8, Hkv=2, D=80, causal=True, offset=133),
    dict(name="tdet_d40_kvalid_wide", wide=True, B=2, Tq=300, Tk=333, H=2, D=40, kvalid=True),
    dict(name="tdet_d64_softcap_causal_gqa", B=2, Tq=517, Tk=600, H=4, Hkv=2, D=64, softcap=20.0, causal=True,
         offset=83),
    dict(name="tdet_d128_softcap_long", B=1, Tq=2048, Tk=2048, H=2, D=128, softcap=10.0),
    dict(name="tdet_d96_softcap_wide", wide=True, B=2, Tq=300, Tk=333, H=2, D=96, softcap=5.0, scale=0.3),
    dict(name="tdet_d64_drop_causal_gqa", B=2, Tq=517, Tk=600, H=4, Hkv=2, D=64, dropout=0.1, seed=(1, 2),
         causal=True, offset=83),
    dict(name="tdet_d128_drop_softcap_long", B=1, Tq=2048, Tk=2048, H=2, D=128, dropout=0.2, seed=(3, 4), softcap=20.0),
    dict(name="tdet_d64_bias_causal_gqa", B=2, Tq=517, Tk=600, H=4, Hkv=2, D=64, bias=(0, 1), causal=True, offset=83),
    dict(name="tdet_d128_bias_mask_softcap_long", B=1, Tq=2048, Tk=2048, H=2, D=128, bias=(1, 1), mask=(1, 1),
         softcap=20.0),
]
D256_DROP_EXACT_CASES = [
    dict(name="d256_dvexact_05_gqa", B=2, Tq=333, Tk=257, H=4, Hkv=2, D=256, dropout=0.5, seed=(-7, 1 << 40)),
    dict(name="d256_dvexact_01_klen", B=2, Tq=130, Tk=500, H=2, D=256, dropout=0.1, klen_vals=[500, 260],
         seed=(21, 22)),
]
# Exact keep-mask checks of the backward (phase numerics, bf16 and fp16; phase_drop_exact): q = 0 (every
# visible key of row i has P = 1 / n(i)), every row sees the same n keys (no mask, or k_lengths per batch),
# dO[i] = one-hot(i % D), so dV[j, d] n / keep_scale = the number of kept (h, i) pairs of key j with
# i = d (mod D), summed over the kv head's query heads: an integer, the kernel's S^T-layout mask against
# the host mask, exactly.
DROP_EXACT_CASES = [
    dict(name="dvexact_01_d128", B=2, Tq=200, Tk=300, H=3, D=128, dropout=0.1, seed=(5, 6)),
    dict(name="dvexact_05_d64_gqa", B=2, Tq=333, Tk=257, H=4, Hkv=2, D=64, dropout=0.5, seed=(-7, 1 << 40)),
    dict(name="dvexact_05_klen", B=2, Tq=130, Tk=500, H=2, D=128, dropout=0.5, klen_vals=[500, 260], seed=(21, 22)),
]
# Deterministic mode (phase det): cases of the lists above with deterministic=True (the names get "_det"),
# and bigger ones, where 32 key tiles add to each dQ block (the default atomics then usually differ bitwise
# from run to run, the deterministic runs must not).
_DET_FROM = ("odd_d128", "odd_d128_causal_br", "odd_d128_causal_tl", "empty_rows_causal", "gqa4_d128_causal_br",
             "mqa_d128_causal_tl", "tk1", "tq1", "tiles_65_129_causal", "dlse_scale", "odd_d64", "odd_d64_causal_br",
             "gqa4_d64_causal_tl", "empty_rows_d64", "win_kvcache_odd_d64", "win_causal_tl_empty_rows",
             "win_gqa_mqa_d64", "len_zero_full_d128", "len_skip_tiles", "len_window_causal", "valid_false_rows",
             "all_masks_dlse", "drop01_lengths", "drop05_d64_causal_gqa", "softcap_causal_gqa_d64",
             "dmask_causal_gqa_d64", "bias_causal_len_gqa_d64",
             # D = 256: the split kernel's DET instantiations (no mask / causal, IDX, DROP)
             "d256_odd_causal_br", "d256_gqa4_causal_br", "d256_mqa_causal_tl", "d256_tk1", "d256_tq1",
             "d256_tiles_65_129_causal", "d256_dlse_scale", "d256_win_kvcache", "d256_len_zero_full",
             "d256_valid_false_rows", "d256_drop05_causal_br_gqa", "d256_drop01_lengths_window",
             # the split kernel's score options (its SCORE instantiations' DET copies): bias / dbias at D = 128,
             # soft-cap, the dense mask, bias / dbias at D = 256
             "sd128_bias_causal_tl_gqa", "sd128_bias_causal_len_gqa", "sd128_bias_softcap_len_dlse",
             "sd128_bias_neginf_mask_softcap", "sd128_bias_tiles_65_129_causal", "sd128_bias_tk1",
             "sd256_softcap_causal_gqa", "sd256_dmask_rows_causal_gqa", "sd256_bias_softcap_len_dlse",
             "sd256_bias_neginf_keys", "sd256_bias_tiles_65_129_causal")
DET_CASES = [dict(c, name=c["name"] + "_det", deterministic=True)
             for c in NUM_CASES + MASK_CASES + DROP_CASES + D256_CASES + SPLITD_CASES if c["name"] in _DET_FROM] + [
    dict(name="big_d128_det", B=1, Tq=4096, Tk=4096, H=4, D=128, deterministic=True),
    dict(name="big_d64_gqa_det", B=2, Tq=2048, Tk=4096, H=8, Hkv=2, D=64, deterministic=True),
    dict(name="big_d128_causal_det", B=1, Tq=4096, Tk=4096, H=4, D=128, causal=True, deterministic=True),
    dict(name="big_d64_window_det", B=1, Tq=4096, Tk=4096, H=4, D=64, wl=1000, wr=300, deterministic=True),
    dict(name="big_d256_det", B=1, Tq=2048, Tk=2048, H=4, D=256, deterministic=True),
    dict(name="big_d256_causal_det", B=1, Tq=2048, Tk=2048, H=4, D=256, causal=True, deterministic=True),
]
SANITIZE = ("bpad_d80", "bpad_d96_causal_br_gqa", "bpad_d64_dv128_causal", "bpad_d192_dv128_causal_gqa",
            "bpad_d248_dv8_dlse", "bpad_d96_masks_poison", "bpad_d80_dropout_klen", "bpad_d96_softcap_dmask",
            "bpad_d40_bias_causal", "bpad_d96_bias_len_gqa", "bpad_d200_bias_softcap", "bpad_d96_det_causal",
            "odd_d128", "odd_d128_causal_br", "empty_rows_causal", "gqa4_d128_causal_br", "tiles_65_129_causal",
            "odd_d64", "gqa4_d64_causal_tl", "win_kvcache_odd_d64", "valid_false_rows", "len_window_causal",
            "drop05_d64_causal_gqa", "drop01_lengths", "odd_d64_causal_br_det", "win_kvcache_odd_d64_det",
            "odd_d128_causal_br_det", "len_window_causal_det", "d256_odd_causal_br_det",
            "d256_drop05_causal_br_gqa_det", "d256_win_kvcache_det", "sd128_bias_causal_len_gqa_det",
            "sd256_dmask_rows_causal_gqa_det",
            "dmask_softcap_lengths", "dmask_causal_gqa_d64", "dmask_keybcast_causal_d128", "bias_softcap_len_d64",
            "bias_causal_len_gqa_d64",
            "bias_neginf_mask_d64",
            # the index-masked D = 64 kernel in the launch order (no causal mask: FA_SM90_BWD_KEEP64_IDX's kernel)
            "all_masks_d64", "win_gqa_mqa_d64",
            "d256_odd_causal_br", "d256_empty_rows_causal", "d256_gqa4", "d256_tiles_65_129_causal",
            "d256_win_kvcache", "d256_len_zero_full", "d256_drop05_causal_br_gqa",
            # the split kernel's score options (the sanitize phase sets TF_FLASHATTN_SM90_BWD_SPLITD=1, which
            # moves none of the cases above)
            "sd128_bias_causal_len_gqa", "sd128_bias_neginf_mask_softcap", "sd128_bias_tiles_63_127",
            "sd256_bias_softcap_len_dlse", "sd256_dmask_rows_causal_gqa", "sd256_bias_neginf_keys")
# The tile orders (phase order): causal cases with more (b, kv head) pairs and key tiles than the lists above,
# so that order 1's groups are several and unequal (15 pairs in groups of at most 2 / 4: 8 groups 2+..+1,
# 4 groups 4, 4, 4, 3), GQA, top-left alignment, D = 64 / 128 / 256, and deterministic mode.
ORDER_CASES = [
    dict(name="ord_d128_causal_15pairs", B=5, Tq=700, Tk=700, H=3, D=128, causal=True),
    dict(name="ord_d64_causal_gqa_tl", B=5, Tq=900, Tk=640, H=6, Hkv=3, D=64, causal=True, offset=0),
    dict(name="ord_d256_causal_15pairs", B=3, Tq=500, Tk=520, H=5, D=256, causal=True, offset=20),
    dict(name="ord_d128_win_len", B=5, Tq=600, Tk=650, H=3, D=128, causal=True, offset=50, wl=150,
         qlen_vals=[600, 333, 70, 599, 1], klen_vals=[650, 400, 0, 129, 650]),
    dict(name="ord_d128_causal_det", B=5, Tq=700, Tk=700, H=3, D=128, causal=True, deterministic=True),
    dict(name="ord_d64_causal_gqa_det", B=5, Tq=900, Tk=900, H=6, Hkv=3, D=64, causal=True, deterministic=True),
    # More CTAs than the H200's 132 SMs (one CTA per SM): the deterministic chain's wait on key tile x - 1
    # under orders 1 / 2 is exercised only when not every CTA is resident at once (480 and 360 CTAs).
    dict(name="ord_d128_causal_det_waves", B=5, Tq=2048, Tk=2048, H=6, D=128, causal=True, deterministic=True),
    dict(name="ord_d64_causal_gqa_det_waves", B=3, Tq=3000, Tk=3000, H=10, Hkv=5, D=64, causal=True,
         deterministic=True),
    dict(name="ord_d256_causal_waves", B=3, Tq=1500, Tk=1500, H=5, D=256, causal=True),
    dict(name="ord_d256_causal_det_waves", B=3, Tq=1500, Tk=1500, H=5, D=256, causal=True, deterministic=True),
]
# (label, order, group) of the order phase's runs after order 0; obench's (with G from the automatic size).
ORDER_RUNS = (("1", 1, 0), ("1_G2", 1, 2), ("1_G4", 1, 4), ("1_G1_ctrl", 1, 1), ("2", 2, 0))
L2_GROUP_BYTES = 20 << 20  # flash_bwd_sm90.cu's kGroupBytes (bwd_auto_group)
GRADS = ("dq", "dk", "dv")
MASK_KEYS = ("qlen", "klen", "qvalid", "kvalid")  # the tensors of the index masks in a case's inputs


def grads_of(t):
    """The gradients the backward writes for inputs t: dq, dk, dv, and dbias when it was given one (backward():
    with a bias, unless the case says no_dbias)."""
    return GRADS + (("dbias",) if t.get("dbias") is not None else ())


def bwd_inputs(c, dt, gen):
    """sm90_check.py's inputs() (make_inputs + qlen_vals / klen_vals / kvalid_all), and: qvalid_all (an
    all-true [B, Tq] mask), qvalid_false_b / kvalid_false_b (those batches' validity rows all false),
    bias_neginf (the bias, made compact, -inf at 10 % of its elements and at every key of the rows i % 7 == 3
    of head 1), bias_bk (the bias [B, 1, 1, Tk] expanded: query and head strides 0), bias_neginf_keys (the bias,
    made compact, -inf at the keys j % 11 == 5 of every row and at every key of the rows i % 9 == 2 of head 0),
    mask_rows_false (the dense mask, made compact, false on the rows i % 8 == 3), bias_nan_hidden (the bias, made
    compact, NaN where the dense mask is false and +inf where the index masks hide the element: never used)."""
    t = inputs(c, dt, gen)
    if c.get("bias_bk"):  # [B, 1, 1, Tk]: query and head strides 0
        B, H, Tq, Tk = c["B"], c["H"], c["Tq"], c["Tk"]
        t["bias"] = torch.randn(B, 1, 1, Tk, device=DEV, generator=gen).to(dt).expand(B, H, Tq, Tk)
    if c.get("bias_neginf_keys"):
        bias = t["bias"].contiguous()
        bias[..., 5::11] = float("-inf")
        bias[:, 0, 2::9, :] = float("-inf")
        t["bias"] = bias
    if c.get("mask_rows_false"):
        mask = t["mask"].contiguous()
        mask[:, :, 3::8, :] = False
        t["mask"] = mask
    if c.get("bias_neginf"):
        bias = t["bias"].contiguous()
        bias[torch.rand(bias.shape, device=DEV, generator=gen) < 0.1] = float("-inf")
        bias[:, 1, 3::7, :] = float("-inf")
        t["bias"] = bias
    if c.get("bias_nan_hidden"):
        bias = t["bias"].contiguous()
        if t.get("mask") is not None:
            bias[~t["mask"]] = float("nan")
        bias[~index_visibility(c, t)[:, None].expand(bias.shape)] = float("inf")
        t["bias"] = bias
    if c.get("qvalid_all"):
        t["qvalid"] = torch.ones(c["B"], c["Tq"], dtype=torch.bool, device=DEV)
    for key, n in (("qvalid", "Tq"), ("kvalid", "Tk")):
        for b in c.get(f"{key}_false_b", ()):
            if t.get(key) is None:
                t[key] = torch.ones(c["B"], c[n], dtype=torch.bool, device=DEV)
            t[key][b] = False
    return t


def kv_poisoned(c, t):
    """sm90_check.py's poisoned() (K / V NaN in the 128-key tiles outside every row's visible keys)
    with q as it was: rows past q_lengths are still read by the backward's units (their P and dS are
    0, but dK += dS^T Q would take 0 * NaN)."""
    p = poisoned(c, t)
    p["q"] = t["q"]
    return p


def dead_rows_keys(c, t):
    """([B, Tq], [B, Tk]) bool: the query rows that see no key and the keys that no row sees
    (sm90_check.visibility()'s causal / window / lengths, and the validity masks). Their dq rows,
    resp. dk / dv rows, are 0 exactly in the reference and in our kernels (sm80's: P = 0, dS = 0,
    zero accumulators written)."""
    vis = visibility(c, t)
    if t.get("qvalid") is not None:
        vis &= t["qvalid"][:, :, None]
    if t.get("kvalid") is not None:
        vis &= t["kvalid"][:, None, :]
    return ~vis.any(2), ~vis.any(1)


def dbias_dead(c, t):
    """[B, H, Tq, Tk] bool: the elements that are masked (causal / window / lengths, validity, the dense
    mask) or have a bias of -inf: P = 0 there, so dbias must be exactly 0 (the reference's is). The 16-bit
    sm90 kernel stores only where P != 0, its launch zeroes dbias first; the Hopper TF32 backwards' dense
    kernels store P (dP - dsum) at every element of the units they visit, +-0 where P = 0, the rest zeroed
    first (tf32_bwd_zero_dbias); sm80 stores P (dP - dsum) = +-0 or zeroes. (== 0 holds for -0 too.)"""
    vis = visibility(c, t)[:, None]  # [B, 1, Tq, Tk]
    if t.get("qvalid") is not None:
        vis = vis & t["qvalid"][:, None, :, None]
    if t.get("kvalid") is not None:
        vis = vis & t["kvalid"][:, None, None, :]
    if t.get("mask") is not None:
        vis = vis & t["mask"]
    return ~vis.expand(t["bias"].shape) | (t["bias"].detach() == float("-inf"))


def exact_zeros(g, dead_q, dead_k, dead_b=None):
    """Whether the gradients g are exactly 0 on the dead query rows (dq) and dead keys (dk, dv), and dbias
    on the dead elements dead_b (when given)."""
    ok = bool((g["dq"][dead_q] == 0).all() and (g["dk"][dead_k] == 0).all() and (g["dv"][dead_k] == 0).all())
    return ok and (dead_b is None or bool((g["dbias"][dead_b] == 0).all()))


def forward(h, c, t):
    """The forward (o, lse into NaN-filled buffers, as sm90_check.py runs it), then the backward's
    workspace."""
    run_fwd(h, c, t)
    t["ws"] = torch.empty(max(h.ws_bytes(c, t), 4) // 4, device=DEV)


def nan_grads(t):
    """dq, dk, dv NaN-filled (a "wide" case's with its input's strides, SENTINEL past its columns)."""
    for n, like in (("dq", "q"), ("dk", "k"), ("dv", "v")):
        t[n] = torch.full_like(t[like], float("nan"))
        if wide_width(t[like]):
            t[n] = widen(torch.full(t[like].shape, float("nan"), device=DEV, dtype=t[like].dtype),
                         wide_width(t[like]), SENTINEL)


def backward(h, c, t, sm90):
    """Our backward on the sm90 (True) or sm80 (False) path; returns (grads, sm90 launches). With a bias,
    dbias too ([B, H, Tq, Tk] float32, NaN-filled before the call)."""
    nan_grads(t)
    if t.get("bias") is not None and not c.get("no_dbias"):  # no_dbias: a bias without its gradient
        B, Tq, H = t["q"].shape[:3]
        t["dbias"] = torch.full((B, H, Tq, t["k"].shape[1]), float("nan"), device=DEV)
    h.m.set_sm90_bwd(1 if sm90 else 0)
    n0 = h.m.sm90_info()["bwd_launches"]
    try:
        h.bwd(c, t)
        torch.cuda.synchronize()
    finally:
        h.m.set_sm90_bwd(-1)
    t["sentinel_ok"] = all(sentinel_ok(t[n]) for n in GRADS)  # no store past D / Dv ("wide" cases)
    return {n: t[n].clone() for n in grads_of(t)}, h.m.sm90_info()["bwd_launches"] - n0


def where_bad(mine, ref, bound, tdim=1):
    """(count of bad (b, t, h) rows, first one, sample of t) for a [B, T, H, D] gradient (dbias [B, H, Tq,
    Tk]: (b, h, q) rows, tdim=2)."""
    d = (mine.double() - ref.double()).abs().amax(-1)
    bad = (d > bound) | ~torch.isfinite(d)
    idx = bad.nonzero()
    return int(bad.sum()), (idx[0].tolist() if len(idx) else None), sorted(set(idx[:, tdim].tolist()))[:16]


def env_selected(cases, var):
    """The cases named in the environment variable var (comma-separated), all of them when it is unset."""
    only = [n for n in os.environ.get(var, "").split(",") if n]
    return [c for c in cases if not only or c["name"] in only]


def tf32_bound(ref, low_err, floor=1.5e-2):
    """kernel_harness_check.py's TF32 error bar for a gradient: 3x torch's float32 error with TF32 matmuls plus a
    floor of 1.5e-2 of the reference's largest finite magnitude (at least 1); dbias: a tenth of that floor
    (TF32_DBIAS_FLOOR), as phase numerics' dbias."""
    fin = torch.isfinite(ref)
    scale = max(1.0, float(ref[fin].abs().max())) if bool(fin.any()) else 1.0
    return 3.0 * low_err + floor * scale, scale


TF32_DBIAS_FLOOR = 1.5e-3


def tf32_backward(h, c, t, mode64, mode128, dense=1, mode256=-1):
    """Our float32 backward with allow_tf32 under set_sm90_tf32_bwd(mode64), set_sm90_tf32_bwd128(mode128) and
    set_sm90_tf32_bwd256(mode256) (0: sm80's TF32 backward; -1: the default) and set_sm90_tf32_bwd_dense(dense) (the
    dense mask / bias / dbias instantiations: 1 on, 0 off); gradients NaN-filled first (nan_grads); with a bias, dbias too ([B, H, Tq, Tk]
    float32, NaN-filled; not for no_dbias cases). Returns (grads, the Hopper TF32 backwards' launches)."""
    nan_grads(t)
    t.pop("dbias", None)
    if t.get("bias") is not None and not c.get("no_dbias"):
        B, Tq, H = t["q"].shape[:3]
        t["dbias"] = torch.full((B, H, Tq, t["k"].shape[1]), float("nan"), device=DEV)
    launches = lambda: sum(h.m.sm90_info()[k] for k in ("tf32_bwd_launches", "tf32_bwd128_launches",
                                                          "tf32_bwd256_launches"))
    h.m.set_sm90_tf32_bwd(mode64)
    h.m.set_sm90_tf32_bwd128(mode128)
    h.m.set_sm90_tf32_bwd256(mode256)
    h.m.set_sm90_tf32_bwd_dense(dense)
    n0 = launches()
    try:
        h.bwd(c, t)
        torch.cuda.synchronize()
    finally:
        h.m.set_sm90_tf32_bwd(-1)
        h.m.set_sm90_tf32_bwd128(-1)
        h.m.set_sm90_tf32_bwd256(-1)
        h.m.set_sm90_tf32_bwd_dense(-1)
    t["sentinel_ok"] = all(sentinel_ok(t[n]) for n in GRADS)
    return {n: t[n].clone() for n in grads_of(t)}, launches() - n0


FEATURE_KEYS = ("softcap", "dropout", "bias", "mask")  # options whose kernels run one variant / dQ mode whatever is set


def phase_tf32pad(h, log, cases):
    """TF32_PAD_CASES (see there). TF32PAD_CASES (comma-separated names) and TF32PAD_MODES (e.g. "1" : the first
    mode of each kernel only) narrow it (compute-sanitizer runs)."""
    from kernel_harness_check import tf32_matmuls
    mode_cap = int(os.environ.get("TF32PAD_MODES", "0"))
    rows = []
    gen = torch.Generator(device=DEV)
    gen.manual_seed(0)
    for c0 in env_selected(cases, "TF32PAD_CASES"):
        c = dict(c0, tf32=True)
        print(f"RUNNING {c['name']} tf32", file=log, flush=True)
        t = bwd_inputs(c, torch.float32, gen)
        tr = kv_poisoned(c, t) if c.get("poison_kv") else t
        forward(h, c, tr)
        sm80, took80 = tf32_backward(h, c, tr, 0, 0, mode256=0)
        keep = h.case_keep(c)
        ref = reference(c, t, torch.float64, keep)
        with tf32_matmuls():
            low = reference(c, t, torch.float32, keep)
        dead_q, dead_k = dead_rows_keys(c, t)
        dead_b = dbias_dead(c, t) if "dbias" in sm80 else None
        if c.get("expect_sm80") or c.get("dense_off"):
            modes = [(-1, -1)]
        elif bucket(c) == 64:
            modes = [(m, -1) for m in range(1, 8)]
        else:
            modes = [(-1, m) for m in range(1, 5)]
        if any(c.get(k) for k in FEATURE_KEYS):  # the feature kernels ignore the mode: its first and last
            modes = sorted(set([modes[0], modes[-1]]), key=modes.index)
        if mode_cap:
            modes = modes[:mode_cap]
        for m64, m128 in modes:
            # dense_off: a dense mask / bias with set_sm90_tf32_bwd_dense(0), which sm80's TF32 backward must take
            ours, took = tf32_backward(h, c, tr, m64, m128, dense=0 if c.get("dense_off") else 1)
            want = 0 if c.get("expect_sm80") or c.get("dense_off") else 1
            row = dict(case=c["name"], dtype="tf32", mode64=m64, mode128=m128, launched=int(took), expected=want,
                       sm80_run_launched=int(took80), dead_rows=int(dead_q.sum()), dead_keys=int(dead_k.sum()),
                       exact_zeros=exact_zeros(ours, dead_q, dead_k, dead_b), sentinel_ok=tr["sentinel_ok"])
            if dead_b is not None:
                row["dead_dbias"] = int(dead_b.sum())
            ok = took == want and took80 == 0 and row["exact_zeros"] and row["sentinel_ok"]
            for n in ours:  # dq, dk, dv and dbias (its floor a tenth)
                e, e80, el = err(ours[n], ref[n]), err(sm80[n], ref[n]), err(low[n], ref[n])
                bound, scale = tf32_bound(ref[n], el[0], TF32_DBIAS_FLOOR if n == "dbias" else 1.5e-2)
                # kernel_harness_check.py's TF32 bar, and within reach of sm80's TF32 backward's own error
                good = e[0] <= bound and e[0] <= 4.0 * e80[0] + 2e-3 * scale
                ok &= good
                row[n] = dict(max=e[0], rel=e[1], sm80_max=e80[0], torch_tf32_max=el[0], ok=good)
                if not good:
                    cnt, first, sample = where_bad(ours[n], ref[n], bound, 2 if n == "dbias" else 1)
                    row[n].update(bad_rows=cnt, first_bad=first, bad_t_sample=sample)
            row["ok"] = bool(ok)
            rows.append(row)
            extra = "" if took == want else f" (Hopper TF32 launches {took}, expected {want})"
            if took80:
                extra += f" (the sm80 run launched ours {took80}x)"
            if not row["sentinel_ok"]:
                extra += " (a store past D / Dv: the sentinel columns changed)"
            if not row["exact_zeros"]:
                extra += (f" (dead rows / keys / dbias elements {row['dead_rows']} / {row['dead_keys']} / "
                          f"{row.get('dead_dbias', '-')} not exactly 0)")
            brief = " ".join(f"{n}={row[n]['max']:.2e} (sm80 {row[n]['sm80_max']:.2e}, torch {row[n]['torch_tf32_max']:.2e})"
                             for n in ours)
            where = " ".join(f"{n}: bad_rows={row[n]['bad_rows']} first={row[n]['first_bad']} t={row[n]['bad_t_sample']}"
                             for n in ours if "bad_rows" in row[n])
            print(f"{'PASS' if ok else 'FAIL'} {c['name']:<26} modes {m64:>2} / {m128:>2} {brief}{extra} {where}",
                  file=log, flush=True)
        del t, tr, ref, low, sm80
    print(f"tf32pad: {sum(r['ok'] for r in rows)} / {len(rows)} pass", file=log, flush=True)
    return rows


def phase_tf32det(h, log, cases):
    """TF32_DET_CASES (see there), float32 with allow_tf32, deterministic: the Hopper TF32 backward must launch; two
    runs (the second on a NaN-poisoned workspace) bitwise equal; dK / dV bitwise equal to the default (atomic) run's,
    dQ within 1e-2 of it; the float64 reference with the TF32 floors; dead rows / keys exactly 0; the sentinel of
    "wide" cases. TF32DET_CASES (comma-separated names) narrows it (compute-sanitizer runs)."""
    from kernel_harness_check import tf32_matmuls
    rows = []
    gen = torch.Generator(device=DEV)
    gen.manual_seed(3)
    for c0 in env_selected(cases, "TF32DET_CASES"):
        c = dict(c0, tf32=True, deterministic=True)
        print(f"RUNNING {c['name']} tf32 det", file=log, flush=True)
        t = bwd_inputs(c, torch.float32, gen)
        forward(h, c, t)
        ours, took = tf32_backward(h, c, t, -1, -1)
        sentinel = t["sentinel_ok"]
        t["ws"].fill_(float("nan"))
        again, took2 = tf32_backward(h, c, t, -1, -1)
        nd, took_nd = tf32_backward(h, dict(c, deterministic=False), t, -1, -1)
        keep = h.case_keep(c)
        ref = reference(c, t, torch.float64, keep)
        with tf32_matmuls():
            low = reference(c, t, torch.float32, keep)
        dead_q, dead_k = dead_rows_keys(c, t)
        dead_b = dbias_dead(c, t) if "dbias" in ours else None
        # dbias (plain stores, one per element) bit for bit the default run's, as dK / dV
        row = dict(case=c["name"], launched=int(took), repeat_launched=int(took2), default_launched=int(took_nd),
                   repeat_bitwise=all(torch.equal(again[n], ours[n]) for n in ours),
                   dkdv_bitwise_vs_default=all(torch.equal(nd[n], ours[n]) for n in ours if n != "dq"),
                   dq_close_vs_default=dq_within(ours["dq"], nd["dq"]),
                   default_dq_differs=not torch.equal(nd["dq"], ours["dq"]),
                   exact_zeros=exact_zeros(ours, dead_q, dead_k, dead_b), sentinel_ok=sentinel)
        ok = (took == 1 and took2 == 1 and took_nd == 1 and row["repeat_bitwise"] and row["dkdv_bitwise_vs_default"]
              and row["dq_close_vs_default"] and row["exact_zeros"] and sentinel)
        for n in ours:
            e, el = err(ours[n], ref[n]), err(low[n], ref[n])
            good = e[0] <= tf32_bound(ref[n], el[0], TF32_DBIAS_FLOOR if n == "dbias" else 1.5e-2)[0]
            ok &= good
            row[n] = dict(max=e[0], torch_tf32_max=el[0], ok=good)
        row["ok"] = bool(ok)
        rows.append(row)
        flags = " ".join(f"{k}={row[k]}" for k in ("launched", "repeat_launched", "default_launched", "repeat_bitwise",
                                                    "dkdv_bitwise_vs_default", "dq_close_vs_default", "default_dq_differs",
                                                    "exact_zeros", "sentinel_ok"))
        brief = " ".join(f"{n}={row[n]['max']:.2e} (torch {row[n]['torch_tf32_max']:.2e})" for n in ours)
        print(f"{'PASS' if ok else 'FAIL'} {c['name']:<26} {brief} {flags}", file=log, flush=True)
        del t, ref, low, ours, again, nd
    print(f"tf32det: {sum(r['ok'] for r in rows)} / {len(rows)} pass", file=log, flush=True)
    return rows


def phase_selftest(h, log):
    rows = h.m.sm90_selftest() + h.m.sm90_bwd_selftest()
    for r in rows:
        print(f"SELFTEST {r['result']:<7} {r['name']:<34} max_err={r['max_err']:.3g}  {r['detail']}", file=log, flush=True)
    if not rows:
        print("SELFTEST none: harness built without the sm90 kernels (ARCHS must include 90)", file=log, flush=True)
    return rows


def phase_numerics(h, log, cases, dtypes):
    rows = []
    gen = torch.Generator(device=DEV)
    gen.manual_seed(0)
    for c in cases:
        for dt in dtypes:
            dname = str(dt).split(".")[-1]
            print(f"RUNNING {c['name']} {dname}", file=log, flush=True)
            t = bwd_inputs(c, dt, gen)
            tr = kv_poisoned(c, t) if c.get("poison_kv") else t  # what the kernels read
            forward(h, c, tr)
            o_sentinel = sentinel_ok(tr["o"])
            ours, took = backward(h, c, tr, True)
            ours_sentinel = tr["sentinel_ok"] and o_sentinel
            det = None
            if c.get("deterministic"):  # a second run on a NaN-poisoned workspace, and the default (atomic) run
                tr["ws"].fill_(float("nan"))
                again, took2 = backward(h, c, tr, True)
                nd, took_nd = backward(h, dict(c, deterministic=False), tr, True)
                # dbias (no atomics either way): bit for bit equal to the default run's, as dk / dv.
                det = dict(repeat_bitwise=all(torch.equal(again[n], ours[n]) for n in ours), repeat_sm90_launched=int(took2),
                           dkdv_bitwise_vs_default=all(torch.equal(nd[n], ours[n]) for n in ours if n != "dq"),
                           default_sm90_launched=int(took_nd), default_dq_differs=not torch.equal(nd["dq"], ours["dq"]))
                det["dq_close_vs_default"] = dq_within(ours["dq"], nd["dq"])
                del again, nd
            sm80, took80 = backward(h, c, tr, False)
            keep = h.case_keep(c)  # dropout: the host keep mask (flash_params.h's rule), as sm90_check.py
            ref = reference(c, t, torch.float64, keep)
            low = reference(c, t, dt, keep)
            row = dict(case=c["name"], dtype=dname, sm90_launched=int(took), sm80_run_launched_sm90=int(took80))
            want = 0 if c.get("expect_sm80") else 1  # expect_sm80: a call the Hopper backward must refuse
            ok = took == want and took80 == 0
            if c.get("wide"):
                row["sentinel_ok"] = ours_sentinel
                ok &= ours_sentinel
            if det is not None:
                row.update(det)
                ok &= (det["repeat_bitwise"] and det["repeat_sm90_launched"] == 1 and det["default_sm90_launched"] == 1
                       and det["dkdv_bitwise_vs_default"] and det["dq_close_vs_default"])
            # Rows that see no key / keys no row sees: dq / dk, dv exactly 0 (sm80's too, reported); with a bias,
            # dbias exactly 0 on the masked elements.
            dead_q, dead_k = dead_rows_keys(c, t)
            dead_b = dbias_dead(c, t) if "dbias" in ours else None
            row.update(dead_rows=int(dead_q.sum()), dead_keys=int(dead_k.sum()),
                       exact_zeros=exact_zeros(ours, dead_q, dead_k, dead_b),
                       sm80_exact_zeros=exact_zeros(sm80, dead_q, dead_k, dead_b))
            if dead_b is not None:
                row["dead_dbias"] = int(dead_b.sum())
            ok &= row["exact_zeros"]
            bitwise = None
            if c.get("nomask_bitwise"):  # masks that hide nothing: the first kernel's dk / dv bit for bit
                tn = {k: v for k, v in tr.items() if k not in MASK_KEYS}
                cn = {k: v for k, v in c.items() if k not in ("wl", "wr")}
                plain, took_n = backward(h, cn, tn, True)
                bitwise = bool(torch.equal(plain["dk"], ours["dk"]) and torch.equal(plain["dv"], ours["dv"]))
                dq_close = dq_within(ours["dq"], plain["dq"])
                row.update(bitwise_vs_nomask=bitwise, dq_close_vs_nomask=dq_close, nomask_sm90_launched=int(took_n))
                ok &= bitwise and dq_close and took_n == 1
            floor = {torch.float16: 2e-3, torch.bfloat16: 1e-2}[dt]
            for n in ours:  # dq, dk, dv (and dbias: a tenth of the floor, as kernel_harness_check.py)
                e = err(ours[n], ref[n])
                e80 = err(sm80[n], ref[n])
                el = err(low[n], ref[n])
                fin = torch.isfinite(ref[n])
                scale = max(1.0, float(ref[n][fin].abs().max())) if bool(fin.any()) else 1.0
                bound = 3.0 * el[0] + floor * (0.1 if n == "dbias" else 1.0) * scale
                good = e[0] <= bound
                ok &= good
                vs80 = float((ours[n].double() - sm80[n].double()).abs().max()) if ours[n].numel() else 0.0
                row[n] = dict(max=e[0], rel=e[1], sm80_max=e80[0], torch_max=el[0], sm90_vs_sm80=vs80, ok=good)
                if not good:
                    cnt, first, sample = where_bad(ours[n], ref[n], bound, 2 if n == "dbias" else 1)
                    row[n].update(bad_rows=cnt, first_bad=first, bad_t_sample=sample)
            row["ok"] = bool(ok)
            rows.append(row)
            extra = ("" if took == want else f" (sm90 path NOT taken: {took} launches)" if want
                     else f" (sm90 path taken, not refused: {took} launches)")
            if took80 != 0:
                extra += f" (the sm80 run took the sm90 path: {took80} launches)"
            if c.get("wide") and not ours_sentinel:
                extra += " (a store past D / Dv: the sentinel columns changed)"
            if row["dead_rows"] or row["dead_keys"] or row.get("dead_dbias"):
                extra += (f" dead rows/keys{'/dbias' if 'dead_dbias' in row else ''} {row['dead_rows']}/{row['dead_keys']}"
                          f"{'/' + str(row['dead_dbias']) if 'dead_dbias' in row else ''}: exact_zeros={row['exact_zeros']}"
                          f" (sm80 {row['sm80_exact_zeros']})")
            if det is not None:
                extra += (f" det: repeat_bitwise={det['repeat_bitwise']} dkdv(dbias)_bitwise_vs_default="
                          f"{det['dkdv_bitwise_vs_default']} dq_close_vs_default={det['dq_close_vs_default']}"
                          f" default_dq_differs={det['default_dq_differs']}")
                if det["repeat_sm90_launched"] != 1 or det["default_sm90_launched"] != 1:
                    extra += (f" (sm90 NOT taken: repeat {det['repeat_sm90_launched']}, default "
                              f"{det['default_sm90_launched']} launches)")
            if bitwise is not None:
                extra += f" bitwise_vs_nomask={bitwise} dq_close_vs_nomask={row['dq_close_vs_nomask']}"
                if row["nomask_sm90_launched"] != 1:
                    extra += f" (no-mask run: sm90 path NOT taken: {row['nomask_sm90_launched']} launches)"
            brief = " ".join(f"{n}={row[n]['max']:.2e} (sm80 {row[n]['sm80_max']:.2e}, torch {row[n]['torch_max']:.2e})"
                             for n in ours)
            where = " ".join(f"{n}: bad_rows={row[n]['bad_rows']} first={row[n]['first_bad']} t={row[n]['bad_t_sample']}"
                             for n in ours if "bad_rows" in row[n])
            print(f"{'PASS' if ok else 'FAIL'} {c['name']:<22} {dname:<9} {brief}{extra} {where}", file=log, flush=True)
            del t, tr, ref, low, ours, sm80, keep
    return rows


def phase_drop_exact(h, log, cases, dtypes, tf32=False):
    """DROP_EXACT_CASES (see there): round(dV n / keep_scale) against the host mask's counts, exactly, on
    the sm90 path (and the sm80 backward's, reported); dV rows of keys past k_lengths exactly 0. tf32: float32
    with allow_tf32 (dtypes [torch.float32]) on the Hopper TF32 backwards (tf32_backward; P Z rounded to tf32 for
    dV moves the counts by far less than 0.5 at these sizes)."""
    from kernel_harness_check import dropout_keep_scale
    rows = []
    gen = torch.Generator(device=DEV)
    gen.manual_seed(4)
    for c0 in cases:
        for dt in dtypes:
            dname = "tf32" if tf32 else str(dt).split(".")[-1]
            c = dict(c0, tf32=True) if tf32 else c0
            print(f"RUNNING {c['name']} {dname}", file=log, flush=True)
            t = bwd_inputs(c, dt, gen)
            B, Tq, H, D, Tk = c["B"], c["Tq"], c["H"], c["D"], c["Tk"]
            Hkv = c.get("Hkv", H)
            G = H // Hkv
            t["q"].zero_()
            onehot = torch.nn.functional.one_hot(torch.arange(Tq, device=DEV) % D, D).to(dt)  # [Tq, D]
            t["do"] = onehot[None, :, None, :].expand(B, Tq, H, D).contiguous()
            forward(h, c, t)
            if tf32:
                ours, took = tf32_backward(h, c, t, -1, -1)
                sm80, took80 = tf32_backward(h, c, t, 0, 0, mode256=0)
            else:
                ours, took = backward(h, c, t, True)
                sm80, took80 = backward(h, c, t, False)
            keep = h.case_keep(c)  # [B, H, Tq, Tk]
            vis = visibility(c, t)  # [B, Tq, Tk]: every row of a batch sees the same n keys here
            n = vis.sum(-1).double()  # [B, Tq]
            kv = (keep & vis[:, None]).double().reshape(B, Hkv, G, Tq, Tk).sum(2)  # [B, Hkv, Tq, Tk]
            want = torch.einsum("bhqk,qd->bkhd", kv, onehot.double())  # [B, Tk, Hkv, D] kept pairs per class
            nk = n[:, :1, None, None]  # [B, 1, 1, 1] (the same for every row of batch b)
            live = (vis.any(1))[:, :, None, None].expand_as(want)  # keys some row sees
            scale = dropout_keep_scale(c["dropout"])
            r = dict(case=c["name"], dtype=dname, sm90_launched=int(took), sm80_run_launched_sm90=int(took80))
            ok = took == 1 and took80 == 0 and bool((n == n[:, :1]).all())
            for tag, g in (("sm90", ours), ("sm80", sm80)):
                got = g["dv"].double() * nk / scale
                diff = (got.round() != want) & live
                dead_zero = bool((g["dv"][~live] == 0).all())
                dev = (got - want).abs()[live].max().item() if bool(live.any()) else 0.0
                r[tag] = dict(mismatched=int(diff.sum()), of=int(live.sum()), max_dev=dev, dead_keys_zero=dead_zero)
                if tag == "sm90":
                    ok &= int(diff.sum()) == 0 and dead_zero
            r["ok"] = bool(ok)
            rows.append(r)
            print(f"{'PASS' if ok else 'FAIL'} {c['name']:<22} {dname:<9} dV mask classes wrong {r['sm90']['mismatched']}"
                  f" of {r['sm90']['of']} (max |dV n / scale - count| {r['sm90']['max_dev']:.3f}; sm80 wrong "
                  f"{r['sm80']['mismatched']}, {r['sm80']['max_dev']:.3f}){'' if took == 1 else ' (sm90 NOT taken)'}"
                  f"{'' if took80 == 0 else ' (the sm80 run took the sm90 path)'}", file=log, flush=True)
            del t, ours, sm80, keep
    return rows


def auto_group(c):
    """flash_bwd_sm90.cu's bwd_auto_group: the (b, kv head) pairs whose Q + dO, lse2 + dsum and dQ accumulator
    fit in 20 MiB, at least 1."""
    G = c["H"] // c.get("Hkv", c["H"])
    return max(1, L2_GROUP_BYTES // (G * c["Tq"] * (8 * c["D"] + 8)))


def order_expected(c, order, group):
    """(order_g, order_big) that flash_bwd_sm90.cu's bwd_tile_order gives case c: (0, 0), the plain kernel, unless
    causal with >= 2 pairs and an ORD kernel (no dropout, no bias, no soft-cap or dense mask at D = 256: the
    split kernel's SCORE instantiations have no ORD copy); order 2 one group of all pairs; order 1 balanced
    groups of at most `group` (0: auto_group) pairs; a group of 1 is the launch order ((1, 0), the ORD kernel
    with the identity map, when group 1 is given)."""
    pairs = c["B"] * c.get("Hkv", c["H"])
    score256 = c["D"] == 256 and bool(c.get("softcap") or c.get("mask"))
    if not c.get("causal") or pairs < 2 or c.get("dropout") or c.get("bias") or score256:
        return (0, 0)
    g = min(pairs, pairs if order == 2 else group if group > 0 else auto_group(c))
    if g < 2:
        return (1, 0) if order == 1 and group == 1 else (0, 0)
    ng = -(-pairs // g)
    return (pairs // ng, pairs % ng)


def backward_ordered(h, c, t, order, group):
    """backward(h, c, t, True) under tile order (order, group) (set_sm90_bwd_order; the environment's again
    after); returns (grads, sm90 launches, (last_bwd_order_g, last_bwd_order_big))."""
    h.m.set_sm90_bwd_order(order, group)
    try:
        g, took = backward(h, c, t, True)
    finally:
        h.m.set_sm90_bwd_order(-1, 0)
    info = h.m.sm90_info()
    return g, took, (info["last_bwd_order_g"], info["last_bwd_order_big"])


def dq_within(dq, ref):
    """dq within 1e-2 of ref's largest magnitude everywhere (runs whose dQ atomics add in another order)."""
    scale = float(ref.double().abs().max()) if ref.numel() else 0.0
    diff = float((dq.double() - ref.double()).abs().max()) if dq.numel() else 0.0
    return diff <= 1e-2 * scale


def bench_inputs(h, c, dt=torch.bfloat16, before_forward=None):
    """The timing phases' inputs of case c: make_inputs from seed 1, `before_forward(t)` (extra inputs), our
    forward (its output and lse, the backward's inputs), and empty dq / dk / dv for the backward to write."""
    gen = torch.Generator(device=DEV)
    gen.manual_seed(1)
    t = make_inputs(c, dt, gen)
    if before_forward is not None:
        before_forward(t)
    forward(h, c, t)
    for n, like in (("dq", "q"), ("dk", "k"), ("dv", "v")):
        t[n] = torch.empty_like(t[like])
    return t


def key_mask_padded(B, T, pct):
    """bench_inputs' before_forward for a [B, T] key mask with the last pct % of each sequence invalid."""
    def add(t):
        t["kvalid"] = torch.ones(B, T, dtype=torch.bool, device=DEV)
        if pct:
            t["kvalid"][:, T - T * pct // 100:] = False
    return add


def feature_bench_inputs(h, feature, B, T, H, D, causal):
    """The case and bench_inputs of a timed feature (phases splitdbench and splitdsave), Tq = Tk = T:
    bias_head_dbias / bias_head_nodbias (a head-broadcast bias [1, H, T, T], with or without a dbias buffer
    [B, H, T, T] float32), softcap_30, dmask_batch (a dense mask [B, 1, T, T]), key_mask (a [B, T] key mask,
    20 % of the keys invalid), plain (none of them)."""
    c = dict(B=B, Tq=T, Tk=T, H=H, D=D, causal=causal)
    c.update({"bias_head_dbias": dict(bias=(0, 1)), "bias_head_nodbias": dict(bias=(0, 1)),
              "softcap_30": dict(softcap=30.0), "dmask_batch": dict(mask=(1, 0)),
              "key_mask": dict(kvalid=True), "plain": {}}[feature])
    t = bench_inputs(h, c)
    if feature == "bias_head_dbias":
        t["dbias"] = torch.empty((B, H, T, T), device=DEV)
    return c, t


def phase_order(h, log, cases):
    """Phase order (module docstring): each case in order 0, then in each of ORDER_RUNS; bf16."""
    rows = []
    gen = torch.Generator(device=DEV)
    gen.manual_seed(0)
    for c in cases:
        if c.get("expect_sm80"):
            continue
        print(f"RUNNING {c['name']} bfloat16", file=log, flush=True)
        t = bwd_inputs(c, torch.bfloat16, gen)
        tr = kv_poisoned(c, t) if c.get("poison_kv") else t
        forward(h, c, tr)
        base, took0, used0 = backward_ordered(h, c, tr, 0, 0)
        det = bool(c.get("deterministic"))
        row = dict(case=c["name"], dtype="bfloat16", deterministic=det, order0_sm90_launched=int(took0),
                   order0_used=list(used0), runs={})
        ok = took0 == 1 and tuple(used0) == (0, 0)
        notes = []
        for label, order, group in ORDER_RUNS:
            print(f"RUNNING {c['name']} run {label}", file=log, flush=True)  # a hang names the run too
            g, took, used = backward_ordered(h, c, tr, order, group)
            want = order_expected(c, order, group)
            same = {n: bool(torch.equal(g[n], base[n])) for n in g}
            dq_scale = float(base["dq"].double().abs().max()) if base["dq"].numel() else 0.0
            dq_diff = float((g["dq"].double() - base["dq"].double()).abs().max()) if g["dq"].numel() else 0.0
            good = (took == 1 and tuple(used) == want and all(same[n] for n in g if n != "dq")
                    and (same["dq"] if det else dq_diff <= 1e-2 * dq_scale))
            row["runs"][label] = dict(order=order, group=group, used=list(used), expected=list(want),
                                      sm90_launched=int(took), bitwise=same, dq_max_diff=dq_diff, dq_scale=dq_scale,
                                      ok=bool(good))
            ok &= good
            notes.append(f"{label}:{'ok' if good else 'BAD'}(g={used[0]},{used[1]}"
                         f"{'' if tuple(used) == want else ' want ' + str(want)}"
                         f"{'' if took == 1 else f' launches {took}'}"
                         f"{'' if all(same[n] for n in g if n != 'dq') else ' dk/dv/dbias differ'}"
                         f"{' dq bitwise' if same['dq'] else f' dq {dq_diff:.1e}'})")
            del g
        row["ok"] = bool(ok)
        rows.append(row)
        print(f"{'PASS' if ok else 'FAIL'} {c['name']:<30} {'det ' if det else ''}{' '.join(notes)}", file=log, flush=True)
        del t, tr, base
    return rows


def phase_obench(h, log):
    """Phase obench (module docstring): TFLOP/s per tile order beside FA2 and cuDNN; then the table."""
    import triton.testing as tt
    rows = []
    # OBENCH_ALT=n: causal shapes only, orders 0 and 1 (automatic group) alternated n times (o0#i, o1#i), so
    # that a drift of the clock during a shape's runs falls on both; its own table at the end.
    alt = int(os.environ.get("OBENCH_ALT", "0") or 0)
    for D, H in ((128, 16), (64, 32), (256, 8)):
        for T in (2048, 4096, 8192, 16384):
            for causal in ((True,) if alt else (False, True)):
                B = 16384 // T
                c = dict(B=B, Tq=T, Tk=T, H=H, D=D, causal=causal)
                print(f"RUNNING obench D={D} T={T} causal={int(causal)}", file=log, flush=True)
                t = bench_inputs(h, c)
                fl = 2.5 * 4 * B * H * T * T * D / (2 if causal else 1)
                ga = auto_group(c)
                runs = [("o0", 0, 0)]
                if alt:
                    runs = [(f"o{o}#{i}", o, 0) for i in range(alt) for o in (0, 1)]
                elif causal:
                    # o1_G{ga}: order 1 as by default (group 0: the automatic size, which is ga)
                    runs += [(f"o1_G{ga}", 1, 0), (f"o1_G{2 * ga}", 1, 2 * ga), ("o2", 2, 0), ("o1_G1_ctrl", 1, 1)]
                else:
                    runs += [("o2", 2, 0)]
                runs += [("o0_again", 0, 0)]
                r = dict(B=B, T=T, H=H, D=D, causal=causal, dtype="bfloat16", auto_group=ga, pairs=B * H, orders={})
                h.m.set_sm90_bwd(1)
                try:
                    for label, order, group in runs:
                        h.m.set_sm90_bwd_order(order, group)
                        n0 = h.m.sm90_info()["bwd_launches"]
                        try:
                            ms = tt.do_bench(lambda c=c, t=t: h.bwd(c, t), warmup=25, rep=100, return_mode="median")
                            info = h.m.sm90_info()
                            r["orders"][label] = dict(ms=ms, tflops=round(fl / ms / 1e9, 1), order=order, group=group,
                                                      used=[info["last_bwd_order_g"], info["last_bwd_order_big"]],
                                                      sm90_path_taken=info["bwd_launches"] > n0)
                        except Exception as e:  # noqa: a launch error is reported, the other rows still run
                            r["orders"][label] = dict(error=str(e)[:200], order=order, group=group)
                finally:
                    h.m.set_sm90_bwd_order(-1, 0)
                    h.m.set_sm90_bwd(-1)
                sd = torch_sdpa_ms(t, causal)
                for k in ("flash_bwd_ms", "cudnn_bwd_ms"):
                    if k in sd:
                        r[k] = sd[k]
                        r[k.replace("_ms", "_tflops")] = round(fl / sd[k] / 1e9, 1)
                rows.append(r)
                print("OBENCH " + json.dumps(r), file=log, flush=True)
                del t
    if alt:
        print(f"\nTFLOP/s backward, causal, orders 0 and 1 (automatic group) alternated {alt} times (OBENCH_ALT); "
              "per order the median of its runs, and the ratio of the medians", file=log)
        print("                  D    T      o0 runs                        o1 runs                        o1/o0  "
              "o0/cuDNN o1/cuDNN", file=log)
        for r in rows:
            o = r["orders"]
            cu = r.get("cudnn_bwd_tflops")
            per = {k: [v["tflops"] for lab, v in o.items() if lab.startswith(k + "#") and v.get("tflops")]
                   for k in ("o0", "o1")}
            med = {k: sorted(x)[len(x) // 2] if x else None for k, x in per.items()}
            fmt = lambda x: " ".join(f"{v:.1f}" for v in x)
            ratio = round(med["o1"] / med["o0"], 3) if med["o0"] and med["o1"] else "-"
            print(f"                  {r['D']:<4} {r['T']:<6} {fmt(per['o0']):<30} {fmt(per['o1']):<30} {ratio:<6} "
                  + " ".join(f"{round(med[k] / cu, 3) if med[k] and cu else '-':<8}" for k in ("o0", "o1")),
                  file=log, flush=True)
        return rows
    print("\nTFLOP/s backward per tile order (2.5 x 4 B H T^2 D, /2 causal; B*T = 16384, bf16; o1_Gn: order 1 "
          "with n pairs per group (the automatic size, twice it), o1_G1_ctrl: the ORD kernel in the launch order, "
          "o0_again: order 0 at the end (drift); best: the best order against o0)", file=log)
    print("                  D    T      causal o0     o1a    o1_2a  o2     ctrl   o0again FA2    cuDNN  best     "
          "best/o0 o0/cuDNN best/cuDNN", file=log)
    for r in rows:
        o = r["orders"]
        tf = lambda k: o.get(k, {}).get("tflops")
        ga = r["auto_group"]
        cols = [tf("o0"), tf(f"o1_G{ga}"), tf(f"o1_G{2 * ga}"), tf("o2"), tf("o1_G1_ctrl"), tf("o0_again")]
        # Runs that fell back to the plain kernel (used [0, 0], e.g. o1 with an automatic group of 1) are no
        # candidates: their difference from o0 is noise.
        cand = {k: v.get("tflops") for k, v in o.items() if v.get("tflops") and not k.startswith("o0")
                and k != "o1_G1_ctrl" and list(v.get("used", [1, 1])) != [0, 0]}
        best = max(cand, key=cand.get) if cand else None
        b0, cu = tf("o0"), r.get("cudnn_bwd_tflops")
        f = lambda x: f"{x:<6}" if x else "-     "
        taken = all(v.get("sm90_path_taken") for v in o.values())
        print(f"                  {r['D']:<4} {r['T']:<6} {int(r['causal']):<6} " + " ".join(f(x) for x in cols) + " "
              + f"{f(r.get('flash_bwd_tflops'))} {f(cu)} {(best or '-'):<8} "
              + f"{round(cand[best] / b0, 3) if best and b0 else '-':<7} {round(b0 / cu, 3) if b0 and cu else '-':<8} "
              + f"{round(cand[best] / cu, 3) if best and cu else '-'}{'' if taken else '  (sm90 NOT taken)'}",
              file=log, flush=True)
    return rows


def phase_bench(h, log, quick):
    rows = []
    shapes = []
    for D, H in ((128, 16), (64, 32), (256, 8)):  # D = 256: flash_bwd_sm90_d256_kernel
        for T in ((4096,) if quick else (4096, 16384)):
            for causal in (False, True):
                shapes.append((D, H, T, causal, torch.bfloat16))
    shapes += [(128, 16, 4096, False, torch.float16), (256, 8, 4096, False, torch.float16)]
    for D, H, T, causal, dt in shapes:
        B = max(1, 16384 // T)
        c = dict(B=B, Tq=T, Tk=T, H=H, D=D, causal=causal)
        t = bench_inputs(h, c, dt)
        fl = 2.5 * 4 * B * H * T * T * D / (2 if causal else 1)
        r = dict(B=B, T=T, H=H, D=D, causal=causal, dtype=str(dt).split(".")[-1])
        time_sm90_and_sm80(h, c, t, r)
        sd = torch_sdpa_ms(t, causal)
        r.update({k: v for k, v in sd.items() if "_fwd" not in k})
        for k in list(r):
            if k.endswith("_bwd_ms"):
                r[k.replace("_ms", "_tflops")] = round(fl / r[k] / 1e9, 1)
        rows.append(r)
        print("BENCH " + json.dumps(r), file=log, flush=True)
        del t
    print("\nTFLOP/s backward (2.5 x 4 B H T^2 D, /2 causal; B*T = 16384)", file=log)
    print("                  D    T      causal dtype  sm90   sm80   FA2    cuDNN  sm90/cuDNN sm90/sm80", file=log)
    for r in rows:
        cu, s9, s8 = r.get("cudnn_bwd_tflops"), r.get("sm90_bwd_tflops"), r.get("sm80_bwd_tflops")
        print(f"                  {r['D']:<4} {r['T']:<6} {int(r['causal']):<6} {r['dtype']:<6} "
              f"{s9 if s9 else '-':<6} {s8:<6} {r.get('flash_bwd_tflops', '-'):<6} {cu if cu else '-':<6} "
              f"{round(s9 / cu, 2) if cu and s9 else '-':<10} {round(s9 / s8, 2) if s9 else '-'}"
              f"{'' if r['sm90_path_taken'] else '  (sm90 NOT taken)'}", file=log, flush=True)
    rows += bench_masks(h, log, rows)
    rows += bench_det(h, log)
    return rows


def bench_det(h, log):
    """Deterministic mode (the DET kernels' ordered dQ reduction) against the default atomics, milliseconds:
    D = 128 (H = 16), D = 64 (H = 32) and D = 256 (H = 8), T = 4096, B = 4, bf16, causal and not: sm90
    deterministic, sm90 default, sm80 deterministic (what deterministic mode ran before)."""
    rows = []
    for D, H in ((128, 16), (64, 32), (256, 8)):
        for causal in (False, True):
            c = dict(B=4, Tq=4096, Tk=4096, H=H, D=D, causal=causal, deterministic=True)
            t = bench_inputs(h, c)  # its forward: the workspace for the deterministic mode (the larger one)
            r = dict(B=4, T=4096, H=H, D=D, causal=causal, dtype="bfloat16")
            time_sm90_and_sm80(h, c, t, r)  # sm90 deterministic, sm80 deterministic
            r["sm90_det_bwd_ms"], r["sm80_det_bwd_ms"] = r.pop("sm90_bwd_ms", None), r.pop("sm80_bwd_ms")
            r["det_path_taken"] = r.pop("sm90_path_taken")
            h.m.set_sm90_bwd(1)
            cd = dict(c, deterministic=False)
            r["sm90_default_bwd_ms"] = bench_ms(lambda t=t: h.bwd(cd, t))  # as time_sm90_and_sm80 times the others
            h.m.set_sm90_bwd(-1)
            rows.append(r)
            print("BENCH " + json.dumps(r), file=log, flush=True)
            del t
    print("\nms backward, deterministic mode against the default, T = 4096, B = 4, bf16", file=log)
    print("                  D    causal sm90det sm90    sm80det det/default sm80det/sm90det", file=log)
    for r in rows:
        d9, s9, d8 = r.get("sm90_det_bwd_ms"), r["sm90_default_bwd_ms"], r["sm80_det_bwd_ms"]
        f = lambda x: f"{x:.3f}" if x else "-"
        print(f"                  {r['D']:<4} {int(r['causal']):<6} {f(d9):<7} {f(s9):<7} {f(d8):<7} "
              f"{round(d9 / s9, 2) if d9 else '-':<11} {round(d8 / d9, 2) if d9 else '-'}"
              f"{'' if r['det_path_taken'] else '  (sm90 NOT taken)'}", file=log, flush=True)
    return rows


def time_sm90_and_sm80(h, c, t, r):
    """Backward milliseconds of case c on inputs t into row r: the sm90 kernel (sm90_bwd_ms, whether it
    launched: sm90_path_taken; a launch error as sm90_error), then the sm80 one (sm80_bwd_ms)."""
    h.m.set_sm90_bwd(1)
    n0 = h.m.sm90_info()["bwd_launches"]
    try:
        r["sm90_bwd_ms"] = bench_ms(lambda: h.bwd(c, t))
    except Exception as e:  # noqa: a launch error is reported, the other rows still run
        r["sm90_error"] = str(e)[:200]
    r["sm90_path_taken"] = h.m.sm90_info()["bwd_launches"] > n0
    h.m.set_sm90_bwd(0)
    r["sm80_bwd_ms"] = bench_ms(lambda: h.bwd(c, t))
    h.m.set_sm90_bwd(-1)


def bench_masks(h, log, plain_rows):
    """The index-masked kernel (IDX) at D = 128, H = 16, T = 4096, B = 4, bf16, milliseconds: an all-true
    [B, Tk] key mask (every unit unmasked: the IDX kernel's overhead against the plain one), a key mask
    with the last 10 % of each sequence padded, and a causal sliding window of 1024 keys; then dropout 0.1
    without a mask and causal (the DROP kernel); each on sm90 and sm80, with the plain sm90 backward of
    the same shape (no mask / causal) for reference. At D = 64 (H = 32): the two key-mask rows and a
    head-broadcast bias [1, H, T, T] with dbias at T = 2048 (the bias copy of the D = 64 IDX kernel). At D = 256
    (H = 8): the padded key mask and dropout 0.1 (the D = 256 kernel's IDX and DROP instantiations)."""
    rows = []
    B, T = 4, 4096
    plain = {(r["D"], r["T"], r["causal"]): r.get("sm90_bwd_ms") for r in plain_rows if r["dtype"] == "bfloat16"}
    features = [(f, 128) for f in ("key_mask_true", "key_mask_pad10", "causal_window_1024", "dropout_0.1",
                                   "dropout_0.1_causal")]
    # D = 64 (H = 32): the IDX kernel with and without a bias (the bias copy makes that kernel larger; its
    # no-bias rows are compared with the build before bias), the bias head-broadcast [1, H, T, T], T = 2048.
    features += [(f, 64) for f in ("key_mask_true", "key_mask_pad10", "bias_head")]
    # D = 256 (H = 8): the D = 256 kernel's IDX and DROP instantiations.
    features += [(f, 256) for f in ("key_mask_pad10", "dropout_0.1")]
    for feature, D in features:
        H = 2048 // D
        T_ = 2048 if feature == "bias_head" else T
        c = dict(B=B, Tq=T_, Tk=T_, H=H, D=D)
        if feature == "bias_head":
            c.update(bias=(0, 1))
        if feature == "causal_window_1024":
            c.update(causal=True, wl=1024)
        if feature.startswith("dropout"):  # the DROP kernel (fused dropout, rate 0.1)
            c.update(dropout=0.1, seed=(1, 2), causal=feature.endswith("causal"))
        key_mask = (key_mask_padded(B, T, 10 if feature == "key_mask_pad10" else 0)
                    if feature.startswith("key_mask") else None)
        t = bench_inputs(h, c, before_forward=key_mask)
        if t.get("bias") is not None:
            t["dbias"] = torch.empty((B, H, T_, T_), device=DEV)
        r = dict(B=B, T=T_, H=H, D=D, dtype="bfloat16", feature=feature)
        time_sm90_and_sm80(h, c, t, r)
        r["plain_sm90_bwd_ms"] = plain.get((D, T_, bool(c.get("causal"))))
        rows.append(r)
        print("BENCH " + json.dumps(r), file=log, flush=True)
        del t
    print("\nms backward with index masks / dropout / bias, T = 4096 (bias: 2048), B = 4, H = 2048 / D, bf16 "
          "(plain: the sm90 backward without the mask / dropout, causal for the window and the causal dropout "
          "row)", file=log)
    print("                  feature             D   sm90    sm80    plain   sm80/sm90 sm90/plain", file=log)
    for r in rows:
        s9, s8, pl = r.get("sm90_bwd_ms"), r["sm80_bwd_ms"], r.get("plain_sm90_bwd_ms")
        f = lambda x: f"{x:.3f}" if x else "-"
        print(f"                  {r['feature']:<19} {r['D']:<3} {f(s9):<7} {f(s8):<7} {f(pl):<7} "
              f"{round(s8 / s9, 2) if s9 else '-':<9} {round(s9 / pl, 2) if s9 and pl else '-'}"
              f"{'' if r['sm90_path_taken'] else '  (sm90 NOT taken)'}", file=log, flush=True)
    return rows


def phase_splitdbench(h, log):
    """Phase splitdbench (module docstring): milliseconds of the split kernel's score options
    (TF_FLASHATTN_SM90_BWD_SPLITD=1, set by main()) against our sm80 backward, B = 4, T = 4096, bf16: at D = 128
    (H = 16) a head-broadcast bias [1, H, T, T] with dbias, causal and not, and without dbias (not causal); at
    D = 256 (H = 8) soft-cap 30 and the bias with dbias (not causal). dbias ([B, H, T, T] float32, 4 GiB at D =
    128) is zeroed and written inside the timed call on both paths."""
    rows = []
    B, T = 4, 4096
    specs = [(128, "bias_head_dbias", False), (128, "bias_head_dbias", True), (128, "bias_head_nodbias", False),
             (256, "softcap_30", False), (256, "bias_head_dbias", False)]
    for D, feature, causal in specs:
        H = 2048 // D
        print(f"RUNNING splitdbench D={D} {feature} causal={int(causal)}", file=log, flush=True)
        c, t = feature_bench_inputs(h, feature, B, T, H, D, causal)
        r = dict(B=B, T=T, H=H, D=D, causal=causal, dtype="bfloat16", feature=feature)
        time_sm90_and_sm80(h, c, t, r)
        rows.append(r)
        print("BENCH " + json.dumps(r), file=log, flush=True)
        del t
    print("\nms backward, the split kernel's score options (TF_FLASHATTN_SM90_BWD_SPLITD=1) against sm80, T = 4096, "
          "B = 4, H = 2048 / D, bf16", file=log)
    print("                  feature             D   causal sm90    sm80    sm80/sm90", file=log)
    for r in rows:
        s9, s8 = r.get("sm90_bwd_ms"), r["sm80_bwd_ms"]
        f = lambda x: f"{x:.3f}" if x else "-"
        print(f"                  {r['feature']:<19} {r['D']:<3} {int(r['causal']):<6} {f(s9):<7} {f(s8):<7} "
              f"{round(s8 / s9, 2) if s9 else '-'}{'' if r['sm90_path_taken'] else '  (sm90 NOT taken)'}",
              file=log, flush=True)
    return rows


def phase_splitdsave(h, log, path):
    """Phase splitdsave (module docstring): the split kernel's outputs on SPLITD_CASES (those it takes, bf16
    and fp16, inputs from seed 0 in list order as phase numerics) and the D = 64 BIAS kernel's on
    BIAS64_AB_CASES and the index-masked kernel's on DMASK_AB_CASES, saved to `path` with the milliseconds of the
    D = 128 bias specs of splitdbench, two D = 64 ones, a dense mask [B, 1, T, T] at D = 128 and 64 and a [B, T]
    key mask at D = 128 (sm90 only, three repetitions each); phase splitdcmp compares two such files (this
    build against a reference: e.g. one made with -DFA_SM90_BWD_BIAS_AHEAD=0 or -DFA_SM90_BWD_BIAS_BATCH=0).
    SAVE_SET=main saves the D <= 128 kernel's outputs instead (NUM_CASES, MASK_CASES, DROP_CASES, DET_CASES) with
    the milliseconds of plain D = 128 / 64 calls (causal and not) and a D = 128 key mask: two builds of that kernel
    compared. SAVE_SET=drop: DROP_CASES and each of them in deterministic mode, without timings. Each output is
    saved with the forward's o and lse."""
    import triton.testing as tt
    gen = torch.Generator(device=DEV)
    gen.manual_seed(0)
    out, launches = {}, {}
    save_set = os.environ.get("SAVE_SET", "splitd")
    main_set = save_set == "main"
    cases = (NUM_CASES + MASK_CASES + DROP_CASES + DET_CASES if main_set else
             DROP_CASES + [dict(c, name=c["name"] + "_det", deterministic=True) for c in DROP_CASES]
             if save_set == "drop" else SPLITD_CASES + BIAS64_AB_CASES + DMASK_AB_CASES)
    for c in cases:
        if c.get("expect_sm80"):
            continue
        for dt in (torch.bfloat16, torch.float16):
            key = f"{c['name']}/{str(dt).split('.')[-1]}"
            print(f"RUNNING {key}", file=log, flush=True)
            t = bwd_inputs(c, dt, gen)
            tr = kv_poisoned(c, t) if c.get("poison_kv") else t
            forward(h, c, tr)
            g, took = backward(h, c, tr, True)
            out[key] = dict({n: v.cpu() for n, v in g.items()}, o=tr["o"].cpu(), lse=tr["lse"].cpu())
            launches[key] = int(took)
            del t, tr, g
    bench = []
    B, T = 4, 4096
    specs = (() if save_set == "drop" else
             ((128, "plain", False), (128, "plain", True), (64, "plain", False), (64, "plain", True),
              (128, "key_mask", False)) if main_set else
             ((128, "bias_head_dbias", False), (128, "bias_head_dbias", True), (128, "bias_head_nodbias", False),
              (64, "bias_head_dbias", False), (64, "bias_head_dbias", True), (128, "dmask_batch", False),
              (64, "dmask_batch", False), (128, "key_mask", False)))
    for D, feature, causal in specs:
        H = 2048 // D
        c, t = feature_bench_inputs(h, feature, B, T, H, D, causal)
        h.m.set_sm90_bwd(1)
        n0 = h.m.sm90_info()["bwd_launches"]
        ms = [tt.do_bench(lambda c=c, t=t: h.bwd(c, t), warmup=25, rep=100, return_mode="median") for _ in range(3)]
        r = dict(D=D, T=T, B=B, H=H, feature=feature, causal=causal, sm90_bwd_ms=ms,
                 sm90_path_taken=h.m.sm90_info()["bwd_launches"] > n0)
        h.m.set_sm90_bwd(-1)
        bench.append(r)
        print("BENCH " + json.dumps(r), file=log, flush=True)
        del t
    torch.save(dict(out=out, launches=launches, bench=bench), path)
    print(f"splitdsave: {len(out)} outputs, {sum(v == 1 for v in launches.values())} with one sm90 launch -> {path}",
          file=log, flush=True)
    return bench


def phase_splitdcmp(log, path_a, path_b):
    """Phase splitdcmp: two splitdsave files (a: this build, b: the reference build): o, lse, dk, dv, dbias bit for
    bit equal, dq too in deterministic mode (cases named *_det: the ordered reduction), else within 1e-2 of its max
    (atomics in no fixed order), every case launched once in both; the milliseconds side by side (b / a > 1: a
    faster)."""
    a, b = torch.load(path_a), torch.load(path_b)
    rows = []
    for key in a["out"]:
        ga, gb = a["out"][key], b["out"].get(key)
        row = dict(case=key, launched=(a["launches"][key], b["launches"].get(key)))
        ok = gb is not None and row["launched"] == (1, 1)
        if gb is not None:
            for n in ga:
                det = key.split("/")[0].endswith("_det")
                row[n] = dq_within(ga[n], gb[n]) if n == "dq" and not det else same_bits(ga[n], gb[n])
                ok &= row[n]
        row["ok"] = bool(ok)
        rows.append(row)
        names = ("o", "lse", "dq", "dk", "dv", "dbias")
        print(f"{'PASS' if ok else 'FAIL'} {key:<40} " + " ".join(f"{n}={row[n]}" for n in names if n in row)
              + f" launched={row['launched']}", file=log, flush=True)
    print(f"splitdcmp: {sum(r['ok'] for r in rows)} / {len(rows)} equal (o, lse, dk, dv, dbias bitwise; dq bitwise in "
          f"deterministic mode, else within 1e-2)",
          file=log, flush=True)
    print("ms (sm90, three medians each): D feature causal | a (this build) | b (reference) | b / a", file=log)
    print_ab_times(log, a["bench"], b["bench"], "sm90_bwd_ms",
                   lambda r: f"{r['D']:<4} {r['feature']:<18} {int(r['causal'])}")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", required=True,
                    choices=("selftest", "det", "numerics", "d256", "bench", "sanitize", "order", "obench", "splitd",
                             "splitdbench", "splitdsave", "splitdcmp", "padded", "tf32pad", "tf32det",
                             "tf32dropexact"))
    ap.add_argument("--lib", default=".harness_build")
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--save", default=None, help="splitdsave: the file to write")
    ap.add_argument("--a", default=None, help="splitdcmp: this build's splitdsave file")
    ap.add_argument("--b", default=None, help="splitdcmp: the reference build's splitdsave file")
    args = ap.parse_args()
    if args.phase == "splitdcmp":  # no GPU work: two saved files
        phase_splitdcmp(sys.stdout, args.a, args.b)
        return
    # The split kernel's score options (flash_bwd_sm90.cu, bwd_splitd_enabled: read once, at the first
    # backward; on by default): on for these phases' processes, whatever the caller's. In sanitize, det and order
    # it moves only the SPLITD_CASES there (sd*: the other cases have no bias at D = 128 and no score option at
    # D = 256, and none is expect_sm80). Off for every other phase, whatever the caller's: their expect_sm80 cases
    # (bias_*_d128_sm80, d256_softcap_sm80, d256_dmask_sm80) are the calls the switch moves to the split kernel.
    os.environ["TF_FLASHATTN_SM90_BWD_SPLITD"] = ("1" if args.phase in ("splitd", "splitdbench", "splitdsave", "sanitize",
                                                                        "det", "order", "padded") else "0")
    h = Harness(args.lib)
    log = sys.stdout
    print(f"device: {torch.cuda.get_device_name()}  sm90: {h.m.sm90_info()}", file=log, flush=True)
    if args.phase == "selftest":
        rows = phase_selftest(h, log)
    elif args.phase == "numerics":
        rows = phase_numerics(h, log, NUM_CASES, (torch.bfloat16, torch.float16))
        n_plain = len(rows)
        rows += phase_numerics(h, log, MASK_CASES, (torch.bfloat16, torch.float16))
        masked = rows[n_plain:]
        print(f"numerics (index masks): {sum(r['ok'] for r in masked)} / {len(masked)} pass", file=log, flush=True)
        n_prev = len(rows)
        rows += phase_numerics(h, log, DROP_CASES, (torch.bfloat16, torch.float16))
        rows += phase_drop_exact(h, log, DROP_EXACT_CASES, (torch.bfloat16, torch.float16))
        dropped = rows[n_prev:]
        print(f"numerics (dropout): {sum(r['ok'] for r in dropped)} / {len(dropped)} pass", file=log, flush=True)
        print(f"numerics: {sum(r['ok'] for r in rows)} / {len(rows)} pass", file=log, flush=True)
    elif args.phase == "d256":
        rows = phase_numerics(h, log, D256_CASES, (torch.bfloat16, torch.float16))
        rows += phase_drop_exact(h, log, D256_DROP_EXACT_CASES, (torch.bfloat16, torch.float16))
        print(f"numerics (D = 256): {sum(r['ok'] for r in rows)} / {len(rows)} pass", file=log, flush=True)
    elif args.phase == "det":
        rows = phase_numerics(h, log, DET_CASES, (torch.bfloat16, torch.float16))
        print(f"numerics (deterministic): {sum(r['ok'] for r in rows)} / {len(rows)} pass", file=log, flush=True)
    elif args.phase == "padded":
        rows = phase_numerics(h, log, PAD_CASES, (torch.bfloat16, torch.float16))
        print(f"numerics (padded head dims): {sum(r['ok'] for r in rows)} / {len(rows)} pass", file=log, flush=True)
    elif args.phase == "tf32pad":
        rows = phase_tf32pad(h, log, TF32_PAD_CASES)
    elif args.phase == "tf32det":
        rows = phase_tf32det(h, log, TF32_DET_CASES)
    elif args.phase == "tf32dropexact":  # DROP_EXACT_CASES on the Hopper TF32 backwards
        rows = phase_drop_exact(h, log, DROP_EXACT_CASES, [torch.float32], tf32=True)
        print(f"tf32dropexact: {sum(r['ok'] for r in rows)} / {len(rows)} pass", file=log, flush=True)
    elif args.phase == "splitd":
        rows = phase_numerics(h, log, SPLITD_CASES, (torch.bfloat16, torch.float16))
        print(f"numerics (split kernel, score options): {sum(r['ok'] for r in rows)} / {len(rows)} pass", file=log,
              flush=True)
    elif args.phase == "splitdbench":
        rows = phase_splitdbench(h, log)
    elif args.phase == "splitdsave":
        rows = phase_splitdsave(h, log, args.save)
    elif args.phase == "sanitize":
        # SANITIZE_PREFIX (e.g. "sd"): only the sanitize cases whose name starts with it (racecheck of the whole
        # list runs past a device call's budget before the last cases).
        # SANITIZE_PREFIX may name several, comma-separated; SANITIZE_SUFFIX (e.g. "_det") keeps only the
        # cases whose name ends with it.
        prefix = tuple(os.environ.get("SANITIZE_PREFIX", "").split(","))
        suffix = os.environ.get("SANITIZE_SUFFIX", "")
        rows = phase_numerics(h, log, [c for c in NUM_CASES + MASK_CASES + DROP_CASES + DET_CASES + D256_CASES
                                       + SPLITD_CASES + PAD_CASES if c["name"] in SANITIZE and c["name"].startswith(prefix)
                                       and c["name"].endswith(suffix)],
                              (torch.bfloat16,))
        print(f"numerics: {sum(r['ok'] for r in rows)} / {len(rows)} pass", file=log, flush=True)
    elif args.phase == "order":
        rows = phase_order(h, log, NUM_CASES + MASK_CASES + D256_CASES + ORDER_CASES + DET_CASES)
        print(f"order: {sum(r['ok'] for r in rows)} / {len(rows)} pass", file=log, flush=True)
    elif args.phase == "obench":
        rows = phase_obench(h, log)
    else:
        rows = phase_bench(h, log, args.quick)
    if args.out:
        os.makedirs(args.out, exist_ok=True)  # (a folder not made yet lost every phase's JSON at the end)
        with open(os.path.join(args.out, f"sm90_bwd_{args.phase}.json"), "w") as f:
            json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
