// Hopper-native FlashAttention forward for FLOAT32 inputs on TF32 tensor cores (sm_90a only; wgmma
// .tf32, TMA, warp specialization), for calls that allow TF32 (FlashFwdParams::allow_tf32).
// On by default on compute capability 9.0 (TF_FLASHATTN_SM90_TF32=0 turns it off, read once; the
// harness's set_sm90_tf32 overrides it); otherwise sm80/flash_fwd_tf32.cu (mma.sync m16n8k8 .tf32)
// runs, as it does for everything this kernel does not take. Checked on the H200 (2026-12-01, sessions
// 18 and 19, benchmarks/RESULTS.md (i) and (j)): self-tests 7 / 7 exact, numerics 26 / 26 cases for every
// variant (1 and 3 bit for bit equal to 0 in all of them, D = 64 included), memcheck and racecheck clean,
// the GPU tests with variant 3 forced (the default by shape, tf32_default_variant: 3 from 8 query tiles
// per K / V tile, else 1, was chosen after that run; the rule itself has not run on a GPU yet).
// benchmarks/sm90_check.py --phase tf32selftest /
// tf32 / tf32bench / tf32sanitize check it (gpu_run.sh sm90, SM90_PHASES=tf32selftest,tf32,tf32bench,
// tf32sanitize).
//
// Scope (fwd_tf32_applies; FA_SM90_TF32_D256 below adds a kernel for D == Dv == 256 with no mask or causal):
// float32 q / k / v / o, D, Dv <= 128 (multiples of 4; kernels for 64 and 128, other head dims and Dv != D padded
// up to padded_head_dim: the tensor maps carry the real D / Dv, so the copy engine fills the columns past them with
// zeros, the pre-pass writes its copies padded with zeros, and the index-masked kernels, which such calls run, do
// not store O's columns past Dv), GQA (H % Hkv == 0), the
// softmax scale, causal (any causal_offset) or no mask, and (the IDX kernels) windows, lengths, [B, Tq] /
// [B, Tk] validity masks, soft-cap, dropout, a dense mask and bias (Tf32Feat; a dense mask or bias not with dropout:
// those calls keep sm80's TF32 kernel). The
// plain kernels' PTX is unchanged by IDX (compared up to labels). Strides multiples of 4 elements
// (16 bytes, what TMA needs), 16-byte aligned bases. Tq, Tk arbitrary; rows that see no key give O = 0
// and lse = -inf, as sm80/flash_fwd_tile.cuh.
//
// What differs from the 16-bit forward (flash_fwd_sm90.cu, whose schedule 0 this follows):
//   wgmma .tf32 takes k8 per instruction and no transpose: both shared-memory operands must be
//   K-major (PTX ISA, wgmma.mma_async: imm-trans-a / -b only for .f16 / .bf16). S = Q K^T is K-major
//   as it is (Q [rows, D], K [keys, D]); O += P V is not (V [keys, Dv] has Dv contiguous: MN-major
//   for B with K = keys). So the producer warpgroup's three idle warps (the transposers) write each V
//   tile, after its TMA load, transposed into a K-major V^T buffer [Dv rows][keys], and rounded to
//   tf32 on the way; the consumers read V^T.
//   Rounding: as sm80/flash_fwd_tf32.cu, every operand is rounded to tf32 with cvt.rna before the MMA
//   (the tensor cores would otherwise use the top 19 bits, i.e. truncate): Q by the consumer
//   warpgroups in shared memory once (each its own 64 rows), K by the transposers in place after its
//   TMA load (not in variant 2, below), V while transposing, P in registers when packed; variants 1
//   and 2 load Q's A fragments into registers instead (rounded on the way).
//
// Tiles (kBr = 128 query rows per CTA, 64 per consumer warpgroup; kBc = 64 keys per K / V tile):
//   Shared memory, float32, 128-byte swizzle in panels of 32 floats (sm90_ptx.cuh, swz128_offset_f32):
//     Q [128 x D]          D = 128: 64 KiB   D = 64: 32 KiB   (loaded once)
//     K [64 x D] x 2 stages         2 x 32 KiB        2 x 16 KiB
//     V [64 x D] x 1 (raw, as TMA writes it; read only by the transposers)   32 / 16 KiB
//     V^T [D x 64] x 2 stages       2 x 32 KiB        2 x 16 KiB
//   = 224 KiB at D = 128 (229,376 B + 88 B of barriers + 1 KiB alignment slack = 230,488 B of the
//   232,448 B opt-in limit), 112 KiB at D = 64. 128-key tiles at D = 128 would need 64 KiB per K / V /
//   V^T buffer (no room next to a 64 KiB Q); a third stage at D = 128 does not fit either. D = 64
//   keeps the same tiles (one code path; its smem would allow more stages: not tried).
//   Registers: consumers S 32 + O D/2 floats, P 32 words, in variants 1 / 2 Q's D/2 words
//   (setmaxnreg 224; ptxas 13.0 uses up to 216); producer warpgroup 56 (the transposers hold 8 floats
//   at a time; ptxas uses up to 38): 128 x 56 + 256 x 224 = 64,512 = 384 x 168, the launch's pool
//   (__launch_bounds__(384, 1)).
//   V^T layout: the B operand of O += P V, N = Dv rows x K = 64 keys, K-major: key panel j (keys 32j ..
//   32j+31) at j * Dv * 128, row d at d * 128, the keys of each k8 step permuted (tf32_kperm): key 2u of
//   the step at position u, key 2u + 1 at position u + 4 (u < 4). So the S accumulators are the
//   register A fragment of the step without a shuffle (as sm80's TF32 kernel permutes its k8 steps):
//   thread (g, t) holds S[g][8kk + 2t], S[g][8kk + 2t + 1], S[g+8][8kk + 2t], S[g+8][8kk + 2t + 1] =
//   sacc[4kk + 0 .. 3], and A column u is key 2u, column u + 4 key 2u + 1, so a = {sacc[4kk], sacc[4kk +
//   2], sacc[4kk + 1], sacc[4kk + 3]} (a[0] = A[g][t], a[1] = A[g+8][t], a[2] = A[g][t+4], a[3] =
//   A[g+8][t+4]). benchmarks/sm90_tf32_model.py checks this mapping and every descriptor address
//   against the layout the transposers write, on the host.
//   Per key tile and consumer warpgroup: S = Q K^T, D/8 wgmma m64n64k8 SS (k8 step k: panel k / 4 at
//   byte (k % 4) * 32 of the row, SBO = 1024); online softmax as flash_fwd_sm90.cu's plain kernel
//   (scale folded into exp2, the CTA-uniform causal branch); P packed (cvt.rna); O += P V, 8 wgmma
//   m64nDk8 RS, B = V^T with the same K-major descriptor form (k8 step kk: key panel kk / 4 at byte
//   (kk % 4) * 32). One tile at a time per warpgroup (schedule 0's order: no S / P V overlap inside a
//   warpgroup, which would hold K and V^T longer than 2 stages allow); the two consumer warpgroups
//   interleave on the tensor cores.
// Variants (kTf32Sched below; TF_FLASHATTN_SM90_TF32_VARIANT): 0 as above, 1 Q's A fragments in
// registers (S = Q K^T by wgmma RS; the default for short queries), 2 as 1 without K's rounding, 3 (the
// default from 8 query tiles per K / V tile) as 1 with K rounded and V rounded and transposed by a pre-pass kernel into the
// forward's workspace, so that TMA loads K and V^T as the consumers read them (no transposer work, no
// raw V buffer use); see their comment for the shared-memory traffic that motivates them, and
// "Variant 3" below for its workspace, pre-pass and barriers.
// Barriers (mbarriers; counts in parentheses), tile n of the CTA's key tiles, stage s = n % 2:
//   q_full (1 + tx)          producer: Q's TMA bytes
//   v_full (1 + tx)          producer: V_n's TMA bytes into the raw buffer (phase n)
//   v_empty (96)             transposers: done reading the raw V_n (phase n); the producer waits for
//                            phase n - 1 before loading V_n
//   k_full[s] (1 + tx)       producer: K_n's TMA bytes (phase n / 2)
//   kv_ready[s] (96)         transposers: K_n rounded and V_n^T written, fenced for the async proxy
//   k_empty[s] (256)         consumers: done with K_n (right after their S = Q K^T product); the
//                            producer waits for tile n - 2's phase before loading K_n into stage s
//   vt_empty[s] (256)        consumers: done with V_n^T (after their P V product); the transposers wait
//                            for tile n - 2's phase before writing V_n^T into stage s
//   (K's stage is released before the softmax and P V, so K_{n+2}'s load starts a softmax and a P V
//   product earlier than a joint K / V^T release would let it.)
// Producer thread per tile: K_n (after k_empty of n - 2), then V_n (after v_empty of n - 1).
// Transposers per tile: k_full(n); round K; v_full(n); vt_empty(n - 2); V^T; arrive v_empty; fence;
// arrive kv_ready. Consumers: kv_ready(n); S; arrive k_empty; softmax; P V; arrive vt_empty. No cycle
// (each wait is on an earlier tile's step or an earlier step of the same tile), and no buffer is
// written before its readers released it: benchmarks/sm90_tf32_model.py runs this protocol under
// random interleavings.
//
// Variant 3 (the default where tf32_default_variant picks it; TF_FLASHATTN_SM90_TF32_VARIANT=3 or
// set_tf32_variant(3) force it):
//   Workspace (flash_fwd_workspace_bytes, tf32_prepass_layout; float32, 256-byte aligned base):
//     Kr  [B, Tk, Hkv, D] compact at 0: tf32(K) (cvt.rna), same shape as K, so the tensor map is K's
//         with compact strides (rows past Tk zero-filled by TMA, as K's are);
//     VT  [B, Hkv, D, tk_pad] at vt_off (Kr's bytes rounded up to 256): tf32(V) transposed, keys
//         contiguous, tk_pad = Tk rounded up to kBc = 64 (every box in bounds); position u of each
//         8-key group holds key tf32_kperm^-1(u) (the V^T tile's permutation, so that a TMA box
//         lands exactly as transpose_v_tile writes it: a box {32 positions, D rows, 1, 1} per key
//         panel j at vt + j * D * 128, 128-byte swizzle), keys in [Tk, tk_pad) written 0 (as TMA's
//         zero fill of V past Tk in variant 0): the consumers see variant 0's V^T bit for bit.
//     bytes = round_up(4 B Tk Hkv D, 256) + 4 B Hkv D tk_pad: about K's and V's size together.
//   Pre-pass (tf32_prepass_kernel<D>, 256 threads, grid (ceil(Tk / 64), Hkv, B)): one 64-key tile of
//   K and V per CTA, float4 loads (16-byte aligned: fwd_tf32_applies), K rounded straight to Kr, V
//   rounded into shared memory [64][D + 1] and written out transposed (a warp on 32 consecutive
//   positions of one d row: coalesced). Same stream, before the main kernel: the kernel boundary
//   orders its global writes before the main kernel's TMA reads.
//   Main kernel (kS.prepass): the producer thread loads K_n from Kr into K[s] (k_full[s], as before)
//   and V_n^T from VT into V^T[s] (the kv_ready[s] barrier, initialized with count 1, becomes
//   vt_full[s]: 1 + tx); the consumers wait k_full[s] before S and vt_full[s] before P V; k_empty[s] /
//   vt_empty[s] as before (the producer waits tile n - 2's release before loading K_n / V_n^T). Warps
//   1..3 of the producer warpgroup do nothing; v_full, v_empty and the raw V buffer go unused.
//   Cost of the pre-pass: it reads K and V once and writes them once (4 x 4 B Tk Hkv D bytes of
//   HBM traffic per call), where the main kernel reads them ceil(Tq / 128) x H / Hkv times (mostly from
//   L2). At the harness's shapes (B T = 16384, H = Hkv = 16, D = 128: K and V 134 MB each) that is
//   537 MB, ~0.13 ms at ~4 TB/s, against the main kernel's ~0.69 / 2.75 / 11 ms at T = 1,024 / 4,096 /
//   16,384 (4 B H T^2 D FLOP at ~200 TFLOP/s, no mask; twice the share when causal): +19% / +5% / +1%,
//   for a main kernel that the shared-memory model puts at least as fast as variant 2 (192 KiB per key
//   tile: kTf32Sched's comment; variant 2, 256 KiB, measured 1.12x variant 1 on the H200 where the
//   model said 1.25x). Measured on the H200 (2026-12-01, RESULTS (j), tf32bench: both kernels in one
//   call): 1.02x-1.51x variant 1 from T = 1,024 (D = 128: 215.8 / 282.8 / 309.7 TFLOP/s at T = 1,024 /
//   4,096 / 16,384 without a mask), 1.98x-2.05x sm80's TF32 kernel at T = 16,384; through TensorFlow, one
//   call per step, variant 3 ran 0.7x-1.0x variant 1 at T = 512 (the pre-pass's share), hence
//   tf32_default_variant. The workspace costs K's and V's size in device memory.
#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cc/kernels/common/flash_cuda_common.cuh"  // QueryTileKeys, fast_exp2, to_tf32
#include "cc/kernels/common/flash_cuda_internal.h"
#include "cc/kernels/common/flash_dropout.cuh"  // drop_tile, drop_rows_visit (dropout)
#include "cc/kernels/common/flash_params.h"
#include "cc/kernels/sm90/sm90_host.cuh"
#include "cc/kernels/sm90/sm90_ptx.cuh"
#include "cc/kernels/sm90/sm90_tf32.cuh"  // tf32_kperm, round_tf32_smem, pack_p_step

namespace flashattn {
namespace cuda {
namespace sm90 {
namespace {

constexpr int kBr = 128;           // query rows per CTA (64 per consumer warpgroup)
constexpr int kBc = 64;            // keys per K / V tile
constexpr int kStages = 2;         // K and V^T stages (the raw V buffer is single)
constexpr int kThreads = 384;      // producer warpgroup + 2 consumer warpgroups
constexpr int kTransposers = 96;   // warps 1..3 of the producer warpgroup
// Registers after setmaxnreg. ptxas 13.0 (sm_90a) allots the producer warpgroup's code (the transposers'
// loop) up to 38 and the consumers up to 216 (variants 1 / 2 at D = 128; 172 in variant 0): both fit
// with a margin.
constexpr int kProducerRegs = 56;
constexpr int kConsumerRegs = 224;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kThreads * 168, "the launch's register pool");
static_assert(kProducerRegs % 8 == 0 && kConsumerRegs % 8 == 0, "setmaxnreg takes multiples of 8");

// FA_SM90_TF32_D256 (default 1; 0 gives float32 at head dim 256 back to sm80's TF32 kernel, which ran 0.76x-0.98x
// Keras under XLA from T = 4096 without a mask on the H200, benchmarks/RESULTS.md "Float32 (TF32) through TensorFlow"
// (v)): this kernel at head dim 256, for D == Dv == 256 with no mask or causal (the plain
// kernel; no index masks, soft-cap, dropout, dense mask or bias), variant 3 only (the pre-pass: K and V^T rounded in
// the workspace), with Q kept in shared memory (its A fragments would take 128 registers next to O's 128). Float32
// tiles at D = 256 take 1 KiB per row, so the tiles shrink (Tf32Tiles): one consumer warpgroup of 64 query rows and
// 32-key tiles, two stages: Q 64 KiB + 2 x (K 32 + V^T 32) KiB = 192 KiB in use (Tf32Smem keeps the raw V
// buffer's 32 KiB unused: 225 KiB, one CTA per SM either way): FA_SM90_TF32_D256_WG=1 (below). The default,
// FA_SM90_TF32_D256_WG=2, builds two warpgroups of 64 rows each instead. Per key tile the warpgroup runs S = Q K^T
// (32 wgmma m64n32k8 SS: Q's 2 KiB and K's 1 KiB per step from shared memory, 24 clocks at 128 B / clock against the
// tensor cores' 16, so this product is shared-memory bound in this model) and O += P V (4 wgmma m64n256k8 RS).
// Measured on the H100 (2026-12-07, RESULTS.md "Hopper TF32 kernels (float32), kernel harness" (q)): the 12 D = 256 cases
// and 3 fallbacks pass against float64 / torch TF32 / sm80, self-test 8 exact, memcheck clean, and 1.39x-1.87x
// sm80's TF32 kernel (kernel time, 16k tokens; 216 TFLOP/s at T = 16384). A form that issued S_{n+1} before tile
// n's softmax (one warpgroup's tensor cores otherwise idle during it) gave the same bits and no gain (0.97x-1.01x),
// so it was removed.
#ifndef FA_SM90_TF32_D256
#define FA_SM90_TF32_D256 1
#endif
constexpr bool kTf32D256 = FA_SM90_TF32_D256 != 0;
// FA_SM90_TF32_D256_FEAT (default 1; with FA_SM90_TF32_D256; checked in the kernel harness on the H200, RESULTS.md
// "Hopper TF32 kernels (float32), kernel harness" (r): numerics, the dropout mask and memcheck pass, 1.56x-2.38x
// sm80's TF32 kernel; and by the TensorFlow GPU tests, RESULTS.md "GPU tests" (g63); 0 keeps sm80's kernel there):
// the head-dim-256 kernel's index-masked instantiations too (IDX: windows, lengths, [B, Tq] / [B, Tk] validity
// masks), with soft-cap, dropout, a dense mask and bias (FEAT; a dense mask or bias not with dropout), as at 64 and
// 128, still D == Dv == 256 only (no padding up to 256). Gemma's attention (head dim 256, soft-cap) with a padding
// mask, in float32, runs here instead of sm80's TF32 kernel. What the 64- and 128-key code assumes holds at 32-key tiles: the
// key-validity words are kBc / 32 = 1 per tile, the dense loads kBc / 2 per thread in batches of 8, and dropout's
// fragment visit (drop_rows_visit<kBc / 8 = 4>) needs j0 a multiple of 32.
#ifndef FA_SM90_TF32_D256_FEAT
#define FA_SM90_TF32_D256_FEAT 1
#endif
constexpr bool kTf32D256Feat = kTf32D256 && FA_SM90_TF32_D256_FEAT != 0;
// FA_SM90_TF32_D256_WG: the head-dim-256 kernel's consumer warpgroups (64 query rows each), 2 (the default) or 1.
// With one (the kernel measured in RESULTS.md (q) / (r)) a single warpgroup runs S = Q K^T, its wait, the softmax and
// P V in turn, so the tensor cores idle during the softmax and each wait: ncu on the H100 (2026-12-07, session 65,
// RESULTS "Hopper TF32 kernels" (u); B = 4, T = 4096, no mask) read the tensor pipe 44 % busy, L2 45 %, L1 48 %, and
// 19 % of the warp-state samples on the wait for P V, 4 % on the wait for S: latency, not a throughput limit. With two,
// the CTA takes 128 query rows, as at head dims 64 / 128, so that one warpgroup's softmax overlaps the other's
// products, and each K / V^T byte loaded serves twice the rows (half the L2 traffic per FLOP). The shared memory then
// holds Q 128 KiB + 2 K stages + 1 V^T stage of 32 KiB each = 224 KiB (no raw V buffer: the pre-pass variant only):
// V^T_{n+1} is loaded once both warpgroups have finished P V_n, during their S_{n+1} and softmax.
// benchmarks/sm90_tf32_model.py checks the protocol with one V^T stage and the layout on the host. With 2 the seven
// head-dim-256 kernels use 168 registers at launch, the consumers up to R207 after setmaxnreg, no spills (nvcc 13.0).
// Measured on the H100 (2026-12-07, session 66, RESULTS "Hopper TF32 kernels" (v); kernel harness): numerics 67 / 67
// (the 31 head-dim-256 cases against float64 / torch TF32 / sm80), o and lse bit for bit equal to one warpgroup's in
// 32 / 32 cases, memcheck and racecheck clean, and 1.04x-1.39x one warpgroup's speed on the 10 float32 shapes of
// harness_loop_ab.py's tf32d256 set (1.22x-1.24x without a mask from T = 4096). The default since then; 1 builds the
// one-warpgroup form.
#ifndef FA_SM90_TF32_D256_WG
#define FA_SM90_TF32_D256_WG 2
#endif
static_assert(FA_SM90_TF32_D256_WG == 1 || FA_SM90_TF32_D256_WG == 2, "FA_SM90_TF32_D256_WG is 1 or 2");
// The CTA's tiles per head dim: D = 64 and 128 as above (kBr, kBc, 2 consumer warpgroups, 2 K and 2 V^T stages, a
// raw V buffer); D = 256 (kWide): 32-key tiles and FA_SM90_TF32_D256_WG consumer warpgroups; with one, no setmaxnreg
// (256 threads: ptxas may give each up to 255) and the D = 128 layout's buffers (the raw V one unused); with two,
// setmaxnreg kWideProducerRegs / kWideConsumerRegs and one V^T stage, no raw V buffer (Tf32Smem).
template <int D>
struct Tf32Tiles {
  static constexpr bool kWide = D == 256;
  static constexpr int kConsumers = kWide ? FA_SM90_TF32_D256_WG : 2;
  static constexpr int kBr = 64 * kConsumers;
  static constexpr int kBc = kWide ? 32 : 64;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr bool kSetmaxnreg = kConsumers == 2;
  static constexpr int kVTStages = kWide && kConsumers == 2 ? 1 : kStages;  // K keeps kStages
  static constexpr bool kRawV = !(kWide && kConsumers == 2);
};
// Head dim 256 with two consumer warpgroups: O's 128 floats per consumer thread (with S 16, P 16): more registers for
// the consumers than kConsumerRegs; the producer thread only issues TMA loads (the pre-pass variant: no transposers).
constexpr int kWideProducerRegs = 40;
constexpr int kWideConsumerRegs = 232;
static_assert(128 * kWideProducerRegs + 256 * kWideConsumerRegs <= kThreads * 168, "the launch's register pool");
static_assert(kWideProducerRegs % 8 == 0 && kWideConsumerRegs % 8 == 0, "setmaxnreg takes multiples of 8");
static_assert(Tf32Tiles<128>::kBr == kBr && Tf32Tiles<128>::kBc == kBc && Tf32Tiles<128>::kThreads == kThreads &&
                  Tf32Tiles<64>::kBr == kBr && Tf32Tiles<64>::kBc == kBc,
              "head dims 64 and 128 keep the tiles above");

// Variants (TF_FLASHATTN_SM90_TF32_VARIANT, read once, or the harness's set_sm90_tf32_variant;
// default by shape: tf32_default_variant, kTf32DefaultVariant's comment).
// Shared-memory traffic per key tile and
// CTA at D = 128 (the budget: 128 B / clock per SM; the tile's 4.2 MFLOP take ~2,050 clocks of the
// tensor cores at TF32's 2,048 FLOP / clock / SM, the H200's 495 TFLOP/s): variant 0 384 KiB (wgmma
// reads of Q 2 x 32, K 2 x 32, V^T 2 x 32; TMA writes of K and V 64; the transposers' V read and V^T
// write 64 and K's rounding 64), ~3,070 clocks, so shared memory, not the tensor cores, bounds it (a
// model, not a measurement); variant 1 320 KiB (~2,560), variant 2 256 KiB (~2,050).
//   0  Q in shared memory (S = Q K^T by wgmma SS), K rounded in place by the transposers: every operand
//      rounded with cvt.rna, as sm80/flash_fwd_tf32.cu (the reference of the bitwise checks)
//   1  Q in registers: each consumer thread loads its A fragments of Q once (D / 8 k8 steps x 4 words,
//      rounded on the way: 64 registers at D = 128) and S = Q K^T runs as wgmma RS (A from
//      registers, B = K K-major); K rounded as in 0. Same operand values as 0 (expected bit for bit
//      equal unless the RS and SS forms accumulate differently).
//   2  1 without K's rounding: the tensor cores take K's top 19 bits (truncation), as a TF32 GEMM on
//      unrounded inputs does; not sm80's numerics (the tf32 phase judges it against the same bars).
//   3  (the default from 8 query tiles per K / V tile: tf32_default_variant) 1 with K and V^T prepared once per call by a pre-pass kernel
//      (tf32_prepass_kernel: K rounded, V rounded and transposed, into the workspace) and TMA-loaded
//      from there: no K rounding (64 KiB) and no transposer V read / V^T write (64 KiB) in the main
//      kernel, so 192 KiB per key tile (wgmma reads of K and V^T 128, TMA writes of K and V^T 64:
//      ~1,540 clocks, under the tensor cores' ~2,050 in this model), with every operand rounded
//      (cvt.rna) as in 0: expected bit for bit equal to 0 (same operand values, same wgmma forms and
//      order as 1). Needs flash_fwd_workspace_bytes' workspace (the header's "Variant 3").
struct Tf32Sched {
  bool q_regs, round_k, prepass;
};
constexpr Tf32Sched kTf32Sched[] = {{false, true, false}, {true, true, false}, {true, false, false}, {true, false, true}};
constexpr int kTf32Variants = sizeof(kTf32Sched) / sizeof(kTf32Sched[0]);
constexpr int kTf32PrepassVariant = 3;
static_assert(kTf32Sched[kTf32PrepassVariant].prepass, "variant 3 is the pre-pass one");
// The default (no variant set explicitly: tf32_default_variant), at D = 64 and 128 alike: variant 3 when
// each K / V tile is read by at least kPrepassMinReaders CTAs (query tiles of kBr rows times the query heads
// of its kv head: ceil(Tq / 128) H / Hkv >= 8, so T >= 1,024 without GQA), else variant 1. On the H200
// (2026-12-01, session 19, benchmarks/RESULTS.md (j)) variants 1 and 3 were bit for bit equal to variant 0
// in all 26 cases of sm90_check.py's tf32 phase (D = 64 included, after the fix of `qa` in the kernel),
// variant 1 ran 1.03x-1.09x variant 0 and variant 3 1.02x-1.51x variant 1 from T = 1,024 (tf32bench,
// its pre-pass included); at T = 512 (4 query tiles) through TensorFlow variant 3 ran 0.7x-1.0x variant
// 1: the pre-pass (a read and a write of K and V) costs about as much as the main kernel saves when few
// CTAs read each tile. The threshold was measured with H = Hkv only; with GQA it counts the query heads
// as further readers (each CTA of the group reads the same rounded K / V^T), a model.
constexpr int kTf32DefaultVariant = 1;
constexpr int64_t kPrepassMinReaders = 8;
// The variants a release build compiles for the kernels of head dim D (dense: the dense mask / bias ones): the ones
// the dispatch picks when none is asked for, 1 and 3, and 0 for the dense kernels at D = 128 (tf32_default_variant).
// Variant 2 and the other variant-0 kernels exist for kernel work only: FA_TUNING builds compile every variant
// (NVCC_EXTRA=-DFA_TUNING for the harness). They were 26 of this file's 56 attention kernels (2026-12-05: the full
// build at 10 minutes on the 2-core CI machine). A release build runs the default for a variant asked for that the
// call's kernel lacks (tf32_variant_for).
constexpr bool tf32_variant_built(int v, int D, bool dense) {
  if (D == 256) return v == 3;  // FA_SM90_TF32_D256 (below): the pre-pass variant, Q in shared memory
#ifdef FA_TUNING
  (void)D, (void)dense;
  return v >= 0 && v < kTf32Variants;
#else
  return v == kTf32DefaultVariant || v == kTf32PrepassVariant || (v == 0 && D == 128 && dense);
#endif
}

template <int D>
struct Tf32Smem {
  static constexpr int kQBytes = Tf32Tiles<D>::kBr * D * 4;
  static constexpr int kKVBytes = Tf32Tiles<D>::kBc * D * 4;  // one K, V or V^T tile
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kQBytes;                   // + stage * kKVBytes
  static constexpr int kVRaw = kK + kStages * kKVBytes;     // one buffer (Tf32Tiles' kRawV)
  static constexpr int kVT = kVRaw + (Tf32Tiles<D>::kRawV ? kKVBytes : 0);  // + stage * kKVBytes
  static constexpr int kBars = kVT + Tf32Tiles<D>::kVTStages * kKVBytes;  // (each barrier array has kStages)
  static constexpr int kQFull = kBars, kVFull = kBars + 8, kVEmpty = kBars + 16;
  static constexpr int kKFull = kBars + 24;                 // + 8 * stage
  static constexpr int kKVReady = kKFull + 8 * kStages;     // + 8 * stage
  static constexpr int kKEmpty = kKVReady + 8 * kStages;    // + 8 * stage
  static constexpr int kVTEmpty = kKEmpty + 8 * kStages;    // + 8 * stage
  static constexpr int kBytes = kVTEmpty + 8 * kStages;
  static constexpr int kAlloc = kBytes + 1024;              // slack to align the base to 1024
};
static_assert(Tf32Smem<128>::kAlloc <= 227 * 1024, "D = 128 exceeds the opt-in shared memory");
static_assert(Tf32Smem<128>::kAlloc == 230488, "the header's figure");
static_assert(Tf32Smem<64>::kK % 1024 == 0 && Tf32Smem<64>::kVRaw % 1024 == 0 && Tf32Smem<64>::kVT % 1024 == 0 &&
                  Tf32Smem<128>::kVT % 1024 == 0,
              "tiles 1024-byte aligned (the swizzle is computed from the address)");

// Byte offset of V^T's element (d, key) in a V^T tile of dv rows.
__host__ __device__ __forceinline__ uint32_t vt_offset(int dv, int d, int key) {
  return swz128_offset_f32(dv, d, tf32_kperm(key));
}

// V^T [DV x kBc] at vt (K-major, keys permuted, rounded to tf32) from the raw V tile [kBc x DV] at
// vraw (TMA's layout), by n threads numbered tid (whole warps): work item (kg, db) = keys 8kg .. 8kg+7
// x columns 32db .. 32db+31, lane = column. Loads: 8 of one 128-byte row of a panel per warp (no
// bank conflict); stores: two 16-byte chunks of row d per lane, the 8 lanes of a quarter warp on 8
// rows d with distinct (d % 8), so distinct chunks (no bank conflict).
template <int DV>
__device__ __forceinline__ void transpose_v_tile(uint32_t vt, uint32_t vraw, int tid, int n) {
  constexpr int kGroups = kBc / 8;
  constexpr int kItems = kGroups * (DV / 32);
  const int lane = tid & 31;
  for (int it = tid >> 5; it < kItems; it += n >> 5) {
    const int kg = it % kGroups, d = 32 * (it / kGroups) + lane;
    uint32_t x[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = to_tf32(ld_shared_f32(vraw + swz128_offset_f32(kBc, 8 * kg + e, d)));
    // Positions 0..3 of the step hold keys 0, 2, 4, 6; positions 4..7 keys 1, 3, 5, 7 (tf32_kperm).
    st_shared_v4_u32(vt + swz128_offset_f32(DV, d, 8 * kg), x[0], x[2], x[4], x[6]);
    st_shared_v4_u32(vt + swz128_offset_f32(DV, d, 8 * kg + 4), x[1], x[3], x[5], x[7]);
  }
}


// Q's A fragments for S = Q K^T from registers (variants 1 / 2): rows r0 and r0 + 8 (r0 = 16 warp + g
// of the warpgroup's rows) of a Q tile of R rows at q (TMA's layout), k8 step k = columns 8k .. 8k+7
// as stored (B = K is not permuted): qa[k] = {Q[r0][8k+t], Q[r0+8][8k+t], Q[r0][8k+t+4],
// Q[r0+8][8k+t+4]}, rounded. The 8 rows of a warp's lanes sit in 8 distinct 16-byte chunks.
template <int D, int R>
__device__ __forceinline__ void load_q_frags(uint32_t (&qa)[D / 8][4], uint32_t q, int r0, int t) {
#pragma unroll
  for (int k = 0; k < D / 8; ++k)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      qa[k][e] = to_tf32(ld_shared_f32(q + swz128_offset_f32(R, r0 + 8 * (e & 1), 8 * k + t + 4 * (e >> 1))));
}

// q [B, Tq, H, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, D] float32 through tm_q / tm_k / tm_v (rank 4:
// d, head, time, batch; boxes {32, 1, kBr, 1} for q, {32, 1, kBc, 1} for k / v: Tf32Tiles); o [B, Tq, H, D]
// float32 and lse [B, H, Tq] from p. Grid (ceil(Tq / kBr), H, B), longest causal rows first.
// V: the variant (kTf32Sched). Variant 3 (kS.prepass): tm_k maps the workspace's Kr, tm_v its VT
// (rank 4: key position, d, head, batch; box {32, D, 1, 1}: tf32_prepass_maps); see "Variant 3" in the
// header. IDX: the index masks (window, lengths, [B, Tq] / [B, Tk] validity masks; fwd_tf32_applies), each row's
// visible keys [kb, ke) and the key tile's validity bits applied in tiles not tile_in_range; else (causal or no
// mask) the CTA-uniform key_end rule below. FEAT (with IDX only; Tf32Feat bits): soft-cap, dropout, a dense mask
// and bias.
template <int D, int V, bool IDX = false, int FEAT = 0>
__global__ void __launch_bounds__(Tf32Tiles<D>::kThreads, 1)
    flash_fwd_sm90_tf32_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                               const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ FlashFwdParams p) {
  using L = Tf32Smem<D>;
  using TT = Tf32Tiles<D>;
  // This head dim's tiles (the namespace's kBr / kBc at D = 64 and 128).
  constexpr int kBr = TT::kBr, kBc = TT::kBc, kConsumerThreads = 128 * TT::kConsumers;
  constexpr Tf32Sched kS = kTf32Sched[V];
  constexpr bool kQRegs = kS.q_regs && !TT::kWide;  // head dim 256: Q in shared memory (FA_SM90_TF32_D256)
  static_assert(!TT::kWide || (kS.prepass && (kTf32D256Feat || (!IDX && FEAT == 0))),
                "head dim 256: the pre-pass kernel, plain unless FA_SM90_TF32_D256_FEAT");
  static_assert(!TT::kWide || (L::kAlloc == 230488 && L::kVT % 1024 == 0),
                "head dim 256: the same bytes as 128 (one warpgroup: Q 64 KiB, 2 K, a raw V, 2 V^T of 32 KiB; two: Q "
                "128 KiB, 2 K, 1 V^T)");
  static_assert(!TT::kWide || TT::kConsumers == 1 || kS.prepass, "two warpgroups at 256: the pre-pass variant");
  constexpr int kVTS = TT::kVTStages;  // V^T stages (K: kStages)
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t q_full = base + L::kQFull, v_full = base + L::kVFull, v_empty = base + L::kVEmpty;
  const uint32_t k_full0 = base + L::kKFull, kv_ready0 = base + L::kKVReady;
  const uint32_t k_empty0 = base + L::kKEmpty, vt_empty0 = base + L::kVTEmpty;
  const AttnShape& sh = p.shape;
  const int m_block = gridDim.x - 1 - blockIdx.x;  // longest causal rows first
  const int h = blockIdx.y, b = blockIdx.z;
  const int64_t m0 = static_cast<int64_t>(m_block) * kBr;
  // The key tiles this query tile visits (sm80's rule: the union of its rows' key ranges (causal, window,
  // lengths), in kBc-key tiles from j_first); producer, transposers and consumers loop over the same ones.
  // (IDX: extra tiles a row does not see are masked whole.)
  const QueryTileKeys<kBr, kBc> keys(p.mask, sh, b, m0);
  const int n_tiles = keys.ntiles;
  const int j_first = static_cast<int>(keys.jstart);
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    mbar_init(v_full, 1);
    mbar_init(v_empty, kTransposers);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(k_full0 + 8 * s, 1);
      mbar_init(kv_ready0 + 8 * s, kS.prepass ? 1 : kTransposers);  // variant 3: vt_full[s] (1 + tx)
      mbar_init(k_empty0 + 8 * s, kConsumerThreads);
      mbar_init(vt_empty0 + 8 * s, kConsumerThreads);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    if constexpr (TT::kSetmaxnreg) setmaxnreg_dec<TT::kWide ? kWideProducerRegs : kProducerRegs>();
    const int tid = threadIdx.x;
    if (tid == 0 && n_tiles > 0) {
      // ---- Producer thread: every TMA load. ----
      const int hkv = h / static_cast<int>(sh.H / sh.Hkv);
      tma_prefetch_map(&tm_k);
      tma_prefetch_map(&tm_v);
      mbar_arrive_expect_tx(q_full, L::kQBytes);
#pragma unroll
      for (int j = 0; j < D / 32; ++j)
        tma_load_4d(base + L::kQ + j * kBr * 128, &tm_q, q_full, 32 * j, h, static_cast<int>(m0), b);
      if constexpr (kS.prepass) {
        // Variant 3: K_n from the workspace's Kr (rounded), V_n^T from its VT (rounded, transposed,
        // keys permuted), each into its stage once the consumers released tile n - 2's (V^T: tile n - kVTS's).
        for (int n = 0; n < n_tiles; ++n) {
          const int key0 = j_first + n * kBc, s = n % kStages, sv = n % kVTS;
          if (n >= kStages) mbar_wait(k_empty0 + 8 * s, ((n / kStages) - 1) & 1);  // S of tile n - 2 done
          mbar_arrive_expect_tx(k_full0 + 8 * s, L::kKVBytes);
#pragma unroll
          for (int j = 0; j < D / 32; ++j)
            tma_load_4d(base + L::kK + s * L::kKVBytes + j * kBc * 128, &tm_k, k_full0 + 8 * s, 32 * j, hkv, key0, b);
          if (n >= kVTS) mbar_wait(vt_empty0 + 8 * sv, ((n / kVTS) - 1) & 1);  // P V of tile n - kVTS done
          mbar_arrive_expect_tx(kv_ready0 + 8 * sv, L::kKVBytes);  // vt_full[sv]
#pragma unroll
          for (int j = 0; j < kBc / 32; ++j)
            tma_load_4d(base + L::kVT + sv * L::kKVBytes + j * D * 128, &tm_v, kv_ready0 + 8 * sv, key0 + 32 * j, 0, hkv,
                        b);
        }
      } else {
        for (int n = 0; n < n_tiles; ++n) {
          const int key0 = j_first + n * kBc, s = n % kStages;
          if (n >= kStages) mbar_wait(k_empty0 + 8 * s, ((n / kStages) - 1) & 1);  // S of tile n - 2 done
          mbar_arrive_expect_tx(k_full0 + 8 * s, L::kKVBytes);
#pragma unroll
          for (int j = 0; j < D / 32; ++j)
            tma_load_4d(base + L::kK + s * L::kKVBytes + j * kBc * 128, &tm_k, k_full0 + 8 * s, 32 * j, hkv, key0, b);
          if (n >= 1) mbar_wait(v_empty, (n - 1) & 1);  // the transposers have read V_{n-1}
          mbar_arrive_expect_tx(v_full, L::kKVBytes);
#pragma unroll
          for (int j = 0; j < D / 32; ++j) tma_load_4d(base + L::kVRaw + j * kBc * 128, &tm_v, v_full, 32 * j, hkv, key0, b);
        }
      }
    } else if (tid >= 32) {
      // ---- Transposers (warps 1..3): V^T and K's rounding (idle in variant 3). ----
      if constexpr (kS.prepass) return;
      const int ttid = tid - 32;
      for (int n = 0; n < n_tiles; ++n) {
        const int s = n % kStages;
        const uint32_t vt = base + L::kVT + s * L::kKVBytes;
        mbar_wait(k_full0 + 8 * s, (n / kStages) & 1);
        if constexpr (kS.round_k) round_tf32_smem(base + L::kK + s * L::kKVBytes, L::kKVBytes, ttid, kTransposers);
        mbar_wait(v_full, n & 1);
        if (n >= kStages) mbar_wait(vt_empty0 + 8 * s, ((n / kStages) - 1) & 1);  // P V of tile n - 2 done
        transpose_v_tile<D>(vt, base + L::kVRaw, ttid, kTransposers);
        // The proxy fence first: it orders this thread's generic-proxy writes (K rounded, V^T) before the
        // consumers' wgmma reads, and its generic reads of the raw V before the producer's next TMA
        // write into that buffer (the async proxy), which v_empty releases.
        fence_proxy_async();
        mbar_arrive(v_empty);  // this thread's reads of the raw V are done
        mbar_arrive(kv_ready0 + 8 * s);
      }
    }
    return;
  }

  // ---- Consumer warpgroups: 64 query rows each. ----
  if constexpr (TT::kSetmaxnreg) setmaxnreg_inc<TT::kWide ? kWideConsumerRegs : kConsumerRegs>();
  const int c = wg - 1;
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t Tq = sh.Tq;
  const int64_t wrow0 = m0 + c * 64 + warp * 16;  // this warp's 16 rows
  const int64_t row[2] = {wrow0 + g, wrow0 + g + 8};
  const float scale_log2 = p.score.scale * 1.4426950408889634f;
  // CAP: soft-cap (s = c tanh(scale S / c), sm80's score_elem), S capped in base-2 units in place of the scaling
  // (softcap_log2, common/flash_cuda_common.cuh, as flash_fwd_sm90.cu's IDX kernel). Its own instantiations, so
  // that the other kernels' machine code stays as measured.
  constexpr bool CAP = (FEAT & kTf32Cap) != 0, DROP = (FEAT & kTf32Drop) != 0, DENSE = (FEAT & kTf32Dense) != 0;
  static_assert(FEAT == 0 || IDX, "soft-cap, dropout, a dense mask and bias in the index-masked kernels");
  static_assert(!(DENSE && DROP), "a dense mask or bias not with dropout (sm80's kernels take those calls)");
  const float softcap = CAP ? p.score.softcap : 0.f;
  // DROP: the Philox key, once (flash_fwd_sm90.cu's apply_dropout; the mask is flash_params.h's rule).
  DropTile drop{};
  if constexpr (DROP) drop = drop_tile(p.dropout, b, h);
  const float inv_cap = softcap != 0.f ? 1.f / softcap : 0.f;
  const float cap_log2 = softcap * 1.4426950408889634f;
  // DENSE: a dense mask [B, H, Tq, Tk] (bool) and / or an additive float32 bias of that shape (both broadcast
  // through their strides, any column stride), element by element as sm80's score_elem: x = log2e (softcap(scale
  // S) + bias), -inf where the mask is false. Row pointers of this thread's two rows, once (dense_row_ptrs).
  const bool* mrow[2] = {nullptr, nullptr};
  const float* brow[2] = {nullptr, nullptr};
  if constexpr (DENSE) {
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) dense_row_ptrs(p.mask, p.score, sh.Tq, b, h, row[h2], mrow[h2], brow[h2]);
  }
  // Keys [0, ke) row i sees (key_end: causal or Tk); ke_cta of the CTA's first row (non-decreasing in
  // the row, so a tile the first row sees whole every row does: one CTA-uniform branch per tile, as
  // flash_fwd_sm90.cu's plain kernel). Rows past Tq are never written.
  int ke[2];
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) ke[h2] = static_cast<int>(p.mask.key_end(row[h2], sh.Tk));  // <= Tk
  const int ke_cta = static_cast<int>(p.mask.key_end(m0, sh.Tk));
  // IDX: row_info's rule per row, [key_begin(i), key_end(i, klim)), empty for a row past the query length or
  // off in the [B, Tq] mask (it then gives O = 0, lse = -inf as one that sees no key).
  // Kept as int, clipped to [0, klim] (klim <= Tk < 2^31: fwd_tf32_params_apply), to spare registers.
  int ikb[2] = {0, 0}, ike[2] = {0, 0};
  if constexpr (IDX) {
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const int64_t i = row[h2];
      if (i < keys.qlim && (!p.mask.q_valid || p.mask.q_valid[static_cast<int64_t>(b) * Tq + i])) {
        const int64_t kb = p.mask.key_begin(i), ke_i = p.mask.key_end(i, keys.klim);  // ke_i in [0, klim]
        ikb[h2] = static_cast<int>(kb < keys.klim ? kb : keys.klim);
        ike[h2] = static_cast<int>(ke_i);
      }
    }
  }

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const uint32_t q_tile = base + L::kQ + c * 64 * 128;  // this warpgroup's 64 rows in each panel

  // Variants 1 / 2 / 3: Q's A fragments in registers (load_q_frags), rounded.
  uint32_t qa[D / 8][4];  // (variants 1 / 2 / 3 only; unused otherwise)
  // At D = 64 they are also zeroed first, so that they are defined on every path into the key-tile loop
  // (the `n_tiles > 0` branch below is the only other definition). Without it ptxas 13.0 gave their
  // registers R88..R119 to the loop's P packing (the PTX's virtual registers were distinct): from the
  // second key tile on S was P_{n-1} K^T, the H200's wrong D = 64 outputs of variants 1 / 2
  // (2026-12-01; results/2026-12-01-h200-i/cand7_tf32_fwd_summary.log agrees: the one D = 64 case with a
  // single key tile per CTA, t_edges_65_63_causal_tl, passed, and t_empty_rows_causal_d64 went wrong from
  // row 364, the first whose causal range reaches the second key tile, on: 364 - 300 = 64).
  // benchmarks/sm90_tf32_sass_check.py finds such a clobber in the SASS; D = 128 had none
  // and keeps its code unchanged (no zeroing). With the fix, variants 1 and 3 at D = 64 were bit for bit
  // equal to variant 0 in all 10 D = 64 cases on the H200 (2026-12-01, session 19).
  // Variant 3 (a new kernel) zeroes them at D = 128 too.
  if constexpr (kQRegs && (D == 64 || kS.prepass)) {
#pragma unroll
    for (int k = 0; k < D / 8; ++k)
#pragma unroll
      for (int e = 0; e < 4; ++e) qa[k][e] = 0u;
  }
  if (n_tiles > 0) {
    mbar_wait(q_full, 0);
    if constexpr (kQRegs) {
      load_q_frags<D, kBr>(qa, base + L::kQ, c * 64 + warp * 16 + g, t);
    } else {
      // Q to tf32, this warpgroup's rows of each 32-column panel (the other warpgroup's are its own).
#pragma unroll
      for (int j = 0; j < D / 32; ++j) round_tf32_smem(q_tile + j * kBr * 128, 64 * 128, tid, 128);
      fence_proxy_async();
      named_bar_sync(1 + c, 128);
    }
  }
  // One tile at a time (S_n, its wait, the softmax, P_n V_n, its wait).
  for (int n = 0; n < n_tiles; ++n) {
    const int s = n % kStages;
    const int j0 = j_first + n * kBc;
    if constexpr (kS.prepass) mbar_wait(k_full0 + 8 * s, (n / kStages) & 1);  // K_n's TMA bytes
    else mbar_wait(kv_ready0 + 8 * s, (n / kStages) & 1);
    // S = Q K^T [64 x kBc], contraction over D in k8 steps.
    float sacc[kBc / 2];
    const uint32_t k_tile = base + L::kK + s * L::kKVBytes;
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < D / 8; ++k) {
      const uint32_t koff = (k % 4) * 32;  // k8 step within the 128-byte row
      const uint64_t db = wgmma_desc(k_tile + (k / 4) * kBc * 128 + koff, 16, 1024);
      if constexpr (kQRegs) {
        wgmma_tf32_rs_m64n64k8(sacc, qa[k], db, k > 0);
      } else {
        const uint64_t da = wgmma_desc(q_tile + (k / 4) * kBr * 128 + koff, 16, 1024);
        wgmma_tf32_ss_s<kBc>(sacc, da, db, k > 0);
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(sacc);
    mbar_arrive(k_empty0 + 8 * s);  // this thread is done with K[s]
    // x = S * scale * log2e (CAP: c log2e tanh(scale S / c)), -inf where masked. IDX: outside the
    // row's [kb, ke) or the tile's key-validity bits, in tiles not tile_in_range. Else: where key j0 + jl >= ke(row)
    // (only in tiles the first row does not see whole).
    if constexpr (CAP) {
#pragma unroll
      for (int i = 0; i < kBc / 2; ++i) sacc[i] = softcap_log2(sacc[i], p.score.scale, inv_cap, cap_log2);
    } else {
#pragma unroll
      for (int i = 0; i < kBc / 2; ++i) sacc[i] *= scale_log2;
    }
    if constexpr (IDX) {
      if constexpr (DENSE) {
        // Before the index masks below (which then set -inf wherever those hide an element, whatever its bias: a
        // non-finite bias there is never used, as in score_elem): the dense mask's bytes and the bias' values of
        // kDenseBatch elements at a time, loaded first (each load predicated on its column being below Tk; the
        // index masks hide every element past it), then used: the bias added (log2e b), -inf where the mask is
        // false.
        constexpr int kDenseBatch = 8;
        const int64_t lim = sh.Tk - j0;
        const int64_t ms = p.mask.mask_stride[3], bs = p.score.bias_stride[3];
#pragma unroll
        for (int i0 = 0; i0 < kBc / 2; i0 += kDenseBatch) {
          bool mv[kDenseBatch];
          float bv[kDenseBatch];
#pragma unroll
          for (int u = 0; u < kDenseBatch; ++u) {
            const int i = i0 + u, col = 8 * (i / 4) + 2 * t + (i & 1), h2 = (i / 2) & 1;
            const bool in = col < lim;
            mv[u] = !mrow[h2] || !in || mrow[h2][(j0 + col) * ms];
            bv[u] = brow[h2] && in ? brow[h2][(j0 + col) * bs] : 0.f;
          }
#pragma unroll
          for (int u = 0; u < kDenseBatch; ++u) {
            const int i = i0 + u;
            // One explicit fma: as `sacc[i] + bv[u] * log2e`, with sacc[i] itself a product (soft-cap's cap * tanh)
            // nvcc fused either product, differently per variant (S elements 0 and 31 in variant 3, only 31 in 0 / 1),
            // so variant 3 was not the same bits as 0 with a dense mask or bias and soft-cap.
            sacc[i] = mv[u] ? __fmaf_rn(bv[u], 1.4426950408889634f, sacc[i]) : -INFINITY;
          }
        }
      }
      if (!tile_in_range(p.mask, m0, kBr, j0, kBc, keys.qlim, keys.klim)) {  // CTA-uniform
        // The tile's key validity, bit x of kv[w] = key j0 + 32 w + x inside the key length and the [B, Tk]
        // mask (lane x loads one key of each word).
        uint32_t kv[kBc / 32];
#pragma unroll
        for (int w = 0; w < kBc / 32; ++w) {
          const int64_t j = static_cast<int64_t>(j0) + 32 * w + lane;
          kv[w] = p.mask.k_valid ? __ballot_sync(0xffffffffu, j < keys.klim && p.mask.k_valid[b * sh.Tk + j]) : ~0u;
        }
        int lo[2], hi[2];  // the rows' [kb, ke) relative to j0, clipped to [0, kBc]
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2) {
          const int a = ikb[h2] - j0, z = ike[h2] - j0;
          lo[h2] = static_cast<int>(a < 0 ? 0 : (a > kBc ? kBc : a));
          hi[h2] = static_cast<int>(z < 0 ? 0 : (z > kBc ? kBc : z));
        }
#pragma unroll
        for (int i = 0; i < kBc / 2; ++i) {
          const int col = 8 * (i / 4) + 2 * t + (i & 1), h2 = (i / 2) & 1;  // sacc[i]: row h2, key j0 + col
          if (col < lo[h2] || col >= hi[h2] || !((kv[i / 16] >> (col & 31)) & 1u)) sacc[i] = -INFINITY;
        }
      }
    } else if (j0 + kBc > ke_cta) {
      const int lim[2] = {ke[0] - j0 - 2 * t, ke[1] - j0 - 2 * t};
#pragma unroll
      for (int i = 0; i < kBc / 2; ++i)
        if (8 * (i / 4) + (i & 1) >= lim[(i / 2) & 1]) sacc[i] = -INFINITY;
    }
    // Online softmax, per row half h2 (rows g and g + 8 of this warp).
    float alpha[2];
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kBc / 8; ++j) mx = fmaxf(mx, fmaxf(sacc[4 * j + 2 * h2], sacc[4 * j + 2 * h2 + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[h2], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // rows with nothing visible yet
      alpha[h2] = fast_exp2(m[h2] - m_use);
      m[h2] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kBc / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = fast_exp2(sacc[4 * j + 2 * h2 + e] - m_use);
          sacc[4 * j + 2 * h2 + e] = pv;
          sum += pv;
        }
      l[h2] = l[h2] * alpha[h2] + sum;  // this thread's partial sum; the quad reduces at the end
    }
    // DROP: dropout on P after the row sum (sm80's fwd_tile_dropout): the m64n(kBc) accumulator gives warp w rows
    // wrow0 + g (+ 8), keys j0 + 8 nt + 2 t + e as sacc[4 nt + e'] (e' = 2 h2 + e), flash_dropout.cuh's m16n8
    // fragment (j0 a multiple of kBc, 64 or 32 at head dim 256; drop_rows_visit needs 32): one Philox call per 8 elements, the mask of the CPU, sm80 and the 16-bit
    // Hopper forward. P V then takes P Z (Z = keep_scale where kept, else 0); l stays the sum of P.
    if constexpr (DROP) {
      drop_rows_visit<kBc / 8, true>(drop, wrow0, j0, g, t, [&](int nt, int e, bool keep) {
        sacc[4 * nt + e] *= keep ? drop.scale : 0.f;
      });
    }
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        o[4 * j + 2 * h2] *= alpha[h2];
        o[4 * j + 2 * h2 + 1] *= alpha[h2];
      }
    uint32_t pa[kBc / 8][4];
#pragma unroll
    for (int kk = 0; kk < kBc / 8; ++kk) pack_p_step(pa[kk], sacc + 4 * kk);
    // O += P V: contraction over the tile's keys in k8 steps, B = V^T (K-major, keys permuted).
    const int sv = n % kVTS;  // (s but with one V^T stage: two warpgroups at head dim 256)
    const uint32_t vt_tile = base + L::kVT + sv * L::kKVBytes;
    if constexpr (kS.prepass) mbar_wait(kv_ready0 + 8 * sv, (n / kVTS) & 1);  // vt_full[sv]: V_n^T's TMA bytes
    fence_regs(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBc / 8; ++kk)
      wgmma_tf32_rs_acc<D>(o, pa[kk], wgmma_desc(vt_tile + (kk / 4) * D * 128 + (kk % 4) * 32, 16, 1024));
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(pa);
    mbar_arrive(vt_empty0 + 8 * sv);  // this thread is done with V^T[sv]
  }

  // Epilogue: O / l into o [B, Tq, H, D] (float2 stores); lse [B, H, Tq].
  float inv[2];
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    float lt = l[h2];
    lt += __shfl_xor_sync(0xffffffffu, lt, 1);
    lt += __shfl_xor_sync(0xffffffffu, lt, 2);
    const bool any = lt > 0.f || lt != lt;  // l = 0: no key visible (O = 0, lse = -inf)
    inv[h2] = any ? 1.f / lt : 0.f;
    const int64_t i = row[h2];
    if (i < Tq && t == 0)
      p.lse[(static_cast<int64_t>(b) * sh.H + h) * Tq + i] = any ? (m[h2] + log2f(lt)) * 0.6931471805599453f : -INFINITY;
  }
  float* out = static_cast<float*>(p.o);
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    const int64_t i = row[h2];
    if (i < Tq) {
      float* orow = out + b * sh.o_stride[0] + i * sh.o_stride[1] + h * sh.o_stride[2];
      const int dv = static_cast<int>(sh.Dv);  // <= D, even; below D only in the IDX kernels (fwd_tf32)
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        if (!IDX || 8 * j + 2 * t < dv)
          *reinterpret_cast<float2*>(orow + 8 * j + 2 * t) =
              make_float2(o[4 * j + 2 * h2] * inv[h2], o[4 * j + 2 * h2 + 1] * inv[h2]);
    }
  }
}


// Variant 3's workspace (header, "Variant 3"): Kr at 0, VT at vt_off; bytes in all.
struct Tf32PrepassLayout {
  int64_t tk_pad = 0, vt_off = 0, bytes = 0;
};
Tf32PrepassLayout tf32_prepass_layout(const AttnShape& s) {
  Tf32PrepassLayout w;
  w.tk_pad = (s.Tk + kBc - 1) / kBc * kBc;
  const int64_t D = padded_head_dim(s);  // the copies are padded up to the kernel's head dim
  w.vt_off = (s.B * s.Tk * s.Hkv * D * 4 + 255) / 256 * 256;
  w.bytes = w.vt_off + s.B * s.Hkv * D * w.tk_pad * 4;
  return w;
}

// The tensor maps of Kr and VT in workspace ws. Kr: K's map (tma_map_rows_f32) with compact strides. VT
// [B, Hkv, D, tk_pad]: rank 4 (position, d, head, batch), strides increasing with the dimension (as every
// other map here), box {32 positions, D rows, 1, 1} (the same shared-memory box as {32, 1, D, 1}: row d
// at d * 128), 128-byte swizzle; every box in bounds (tk_pad a multiple of 64). Kr's boxes: k_rows keys (the main
// kernel's key tile, Tf32Tiles).
bool tf32_prepass_maps(const AttnShape& s, void* ws, CUtensorMap* tk, CUtensorMap* tvt, int k_rows) {
  const Tf32PrepassLayout w = tf32_prepass_layout(s);
  const int64_t D = padded_head_dim(s);
  const int64_t kr_stride[3] = {s.Tk * s.Hkv * D, s.Hkv * D, D};
  if (!tma_map_rows_f32(tk, ws, s.B, s.Tk, s.Hkv, D, kr_stride, k_rows)) return false;
  auto fn = tensor_map_encoder();
  if (!fn) return false;
  cuuint64_t dims[4] = {static_cast<cuuint64_t>(w.tk_pad), static_cast<cuuint64_t>(D), static_cast<cuuint64_t>(s.Hkv),
                        static_cast<cuuint64_t>(s.B)};
  cuuint64_t strides[3] = {static_cast<cuuint64_t>(w.tk_pad * 4), static_cast<cuuint64_t>(D * w.tk_pad * 4),
                           static_cast<cuuint64_t>(s.Hkv * D * w.tk_pad * 4)};
  cuuint32_t box[4] = {32, static_cast<cuuint32_t>(D), 1, 1};
  cuuint32_t estr[4] = {1, 1, 1, 1};
  return fn(tvt, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, static_cast<char*>(ws) + w.vt_off, dims, strides, box, estr,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

constexpr int kPrepassThreads = 256;
// One pass over keys key0 .. key0 + PK - 1 of the pre-pass's tile (PK = 64, or 32 twice at head dim 256: 64 x 257
// floats of sv would pass the 48 KiB of static shared memory). Positions u of the pass hold its keys
// tf32_kperm_inv(u): the permutation stays within groups of 8.
template <int D, int PK>
__device__ __forceinline__ void tf32_prepass_keys(const FlashFwdParams& p, float* __restrict__ kr, float* __restrict__ vt,
                                                  int64_t tk_pad, int64_t key0, float (&sv)[PK][D + 1]) {
  const AttnShape& sh = p.shape;
  const int hkv = blockIdx.y, b = blockIdx.z;
  const float* k = static_cast<const float*>(p.k) + b * sh.k_stride[0] + hkv * sh.k_stride[2];
  const float* v = static_cast<const float*>(p.v) + b * sh.v_stride[0] + hkv * sh.v_stride[2];
  constexpr int kC4 = D / 4;  // float4 per row
  for (int i = threadIdx.x; i < PK * kC4; i += kPrepassThreads) {
    const int r = i / kC4, c = 4 * (i % kC4);
    const int64_t key = key0 + r;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f), y = x;
    if (key < sh.Tk) {
      if (c < sh.D) x = *reinterpret_cast<const float4*>(k + key * sh.k_stride[1] + c);
      if (c < sh.Dv) y = *reinterpret_cast<const float4*>(v + key * sh.v_stride[1] + c);
      // One 16-byte store (a plain float4 / uint4 store of the rounded values became 4 st.global.u32 in nvcc
      // 13.0's PTX); .cg: the main kernel's TMA reads it from L2.
      __stcg(reinterpret_cast<uint4*>(kr + ((b * sh.Tk + key) * sh.Hkv + hkv) * D + c),
             make_uint4(to_tf32(x.x), to_tf32(x.y), to_tf32(x.z), to_tf32(x.w)));
    }
    sv[r][c] = __uint_as_float(to_tf32(y.x));
    sv[r][c + 1] = __uint_as_float(to_tf32(y.y));
    sv[r][c + 2] = __uint_as_float(to_tf32(y.z));
    sv[r][c + 3] = __uint_as_float(to_tf32(y.w));
  }
  __syncthreads();
  float* out = vt + (static_cast<int64_t>(b) * sh.Hkv + hkv) * D * tk_pad + key0;
  for (int i = threadIdx.x; i < D * PK; i += kPrepassThreads) {
    const int d = i / PK, u = i % PK;  // a warp: 32 consecutive positions of one row d
    out[d * tk_pad + u] = sv[tf32_kperm_inv(u)][d];
  }
}

// Variant 3's pre-pass: key tile blockIdx.x (keys key0 .. key0 + 63) of kv head
// blockIdx.y, batch blockIdx.z. kr [B, Tk, Hkv, D] = tf32(K) (compact); vt [B, Hkv, D, tk_pad]: position
// key0 + u of row d = tf32(V[key0 + tf32_kperm_inv(u)][d]), 0 for keys past Tk; padded up (the call's D or Dv
// below the kernel's D, multiples of 4), 0 in the columns of kr past D and the rows of vt past Dv. cvt.rna as the main
// kernel's transposers and round_tf32_smem (to_tf32): the same bits.
template <int D>
__global__ void __launch_bounds__(kPrepassThreads)
    tf32_prepass_kernel(const __grid_constant__ FlashFwdParams p, float* __restrict__ kr, float* __restrict__ vt,
                        int64_t tk_pad) {
  const int64_t key0 = static_cast<int64_t>(blockIdx.x) * kBc;
  if constexpr (D == 256) {
    __shared__ float sv[kBc / 2][D + 1];  // V's keys of one pass, rounded; + 1: the transposed reads hit 32 banks
    tf32_prepass_keys<D, kBc / 2>(p, kr, vt, tk_pad, key0, sv);
    __syncthreads();  // the first pass's reads of sv are done
    tf32_prepass_keys<D, kBc / 2>(p, kr, vt, tk_pad, key0 + kBc / 2, sv);
  } else {
    __shared__ float sv[kBc][D + 1];  // V's tile, rounded; + 1: the transposed reads hit 32 banks
    tf32_prepass_keys<D, kBc>(p, kr, vt, tk_pad, key0, sv);
  }
}

// ---- Host side ---------------------------------------------------------------------------------
std::atomic<int64_t> g_tf32_launches{0};
std::atomic<int> g_tf32_override{-1};
std::atomic<int> g_tf32_variant_override{-1};
std::atomic<int> g_tf32_last_variant{-1};

// The main kernel's launch (its shared-memory attribute set by the caller) on tensor maps tq, tk and tv (V^T in
// variant 3), and the launch counters.
template <int D, int V, bool IDX, int FEAT>
cudaError_t launch_tf32_main(const FlashFwdParams& p, cudaStream_t stream, const CUtensorMap& tq, const CUtensorMap& tk,
                             const CUtensorMap& tv) {
  const AttnShape& s = p.shape;
  using TT = Tf32Tiles<D>;
  const dim3 grid(static_cast<unsigned>((s.Tq + TT::kBr - 1) / TT::kBr), static_cast<unsigned>(s.H),
                  static_cast<unsigned>(s.B));
  flash_fwd_sm90_tf32_kernel<D, V, IDX, FEAT><<<grid, TT::kThreads, Tf32Smem<D>::kAlloc, stream>>>(tq, tk, tv, p);
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) {
    g_tf32_launches.fetch_add(1, std::memory_order_relaxed);
    g_tf32_last_variant.store(V, std::memory_order_relaxed);
  }
  return err;
}

template <int D, int V, bool IDX, int FEAT>
cudaError_t launch_tf32(const FlashFwdParams& p, cudaStream_t stream) {
  const AttnShape& s = p.shape;
  CUtensorMap tq, tk, tv;
  // The real D (q, k) and Dv (v): the columns past them load as zeros (padded up).
  if (!tma_map_rows_f32(&tq, p.q, s.B, s.Tq, s.H, s.D, s.q_stride, kBr) ||
      !tma_map_rows_f32(&tk, p.k, s.B, s.Tk, s.Hkv, s.D, s.k_stride, kBc) ||
      !tma_map_rows_f32(&tv, p.v, s.B, s.Tk, s.Hkv, s.Dv, s.v_stride, kBc))
    return cudaErrorNotSupported;  // the dispatch falls back to sm80's TF32 kernel
  const cudaError_t err = set_dynamic_smem(flash_fwd_sm90_tf32_kernel<D, V, IDX, FEAT>, Tf32Smem<D>::kAlloc);
  if (err != cudaSuccess) return err;
  return launch_tf32_main<D, V, IDX, FEAT>(p, stream, tq, tk, tv);
}

// Variant 3: the pre-pass into p.workspace (at least tf32_prepass_layout(s).bytes,
// 256-byte aligned: flash_fwd_workspace_bytes), then the main kernel with tm_k / tm_v on the
// workspace's Kr / VT. Every tensor map and the shared-memory attribute first, so that
// cudaErrorNotSupported (sm80's fallback) leaves no work queued.
template <int D, bool IDX, int FEAT>
cudaError_t launch_tf32_prepass(const FlashFwdParams& p, cudaStream_t stream) {
  constexpr int V = kTf32PrepassVariant;
  const AttnShape& s = p.shape;
  const Tf32PrepassLayout w = tf32_prepass_layout(s);
  float* kr = static_cast<float*>(p.workspace);
  float* vt = reinterpret_cast<float*>(static_cast<char*>(p.workspace) + w.vt_off);
  CUtensorMap tq, tk, tvt;
  if (!tma_map_rows_f32(&tq, p.q, s.B, s.Tq, s.H, s.D, s.q_stride, Tf32Tiles<D>::kBr) ||
      !tf32_prepass_maps(s, p.workspace, &tk, &tvt, Tf32Tiles<D>::kBc))
    return cudaErrorNotSupported;
  cudaError_t err = set_dynamic_smem(flash_fwd_sm90_tf32_kernel<D, V, IDX, FEAT>, Tf32Smem<D>::kAlloc);
  if (err != cudaSuccess) return err;
  const dim3 pgrid(static_cast<unsigned>(w.tk_pad / kBc), static_cast<unsigned>(s.Hkv), static_cast<unsigned>(s.B));
  tf32_prepass_kernel<D><<<pgrid, kPrepassThreads, 0, stream>>>(p, kr, vt, w.tk_pad);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return launch_tf32_main<D, V, IDX, FEAT>(p, stream, tq, tk, tvt);
}

template <int D, bool IDX, int FEAT = 0>
cudaError_t launch_tf32_variant(const FlashFwdParams& p, cudaStream_t stream, int v) {
  static_assert(kTf32Variants == 4, "one case per variant");
  // This kernel's head-dim bucket only (the pre-pass layout and the kernel both use D), and padded up (D or Dv
  // below it) only in the IDX kernels, whose O stores check the column (fwd_tf32 sends such calls there): else
  // nothing is queued and sm80's TF32 kernel takes the call.
  const AttnShape& s = p.shape;
  if (padded_head_dim(s) != D || (!IDX && runs_padded(s))) return cudaErrorNotSupported;
  // (tf32_variant_for passes only variants built for this kernel: the `break`s are not reached; were one reached,
  // nothing is queued and sm80's TF32 kernel takes the call.)
  constexpr bool kDense = (FEAT & kTf32Dense) != 0;
  if constexpr (D == 256) {  // FA_SM90_TF32_D256: the pre-pass variant only (tf32_variant_built)
    static_assert(kTf32D256Feat || (!IDX && FEAT == 0), "head dim 256: the plain kernel unless FA_SM90_TF32_D256_FEAT");
    return v == kTf32PrepassVariant ? launch_tf32_prepass<D, IDX, FEAT>(p, stream) : cudaErrorNotSupported;
  } else {
    switch (v) {
      case 1: return launch_tf32<D, 1, IDX, FEAT>(p, stream);
      case 2: if constexpr (tf32_variant_built(2, D, kDense)) return launch_tf32<D, 2, IDX, FEAT>(p, stream); break;
      case 3: return launch_tf32_prepass<D, IDX, FEAT>(p, stream);
      default: if constexpr (tf32_variant_built(0, D, kDense)) return launch_tf32<D, 0, IDX, FEAT>(p, stream); break;
    }
    return cudaErrorNotSupported;
  }
}

}  // namespace

bool tf32_enabled() {
  const int o = g_tf32_override.load(std::memory_order_relaxed);
  if (o >= 0) return o != 0;
  static const bool env_on = [] {  // on unless exactly "0"
    const char* v = getenv("TF_FLASHATTN_SM90_TF32");
    return !(v && v[0] == '0' && v[1] == '\0');
  }();
  return env_on;
}

void set_tf32_enabled(int mode) { g_tf32_override.store(mode < 0 ? -1 : (mode ? 1 : 0), std::memory_order_relaxed); }

int64_t fwd_tf32_launches() { return g_tf32_launches.load(std::memory_order_relaxed); }

int tf32_variants() { return kTf32Variants; }

namespace {
// The variant asked for explicitly: set_tf32_variant's override, else TF_FLASHATTN_SM90_TF32_VARIANT (read
// once; a whole decimal number in [0, kTf32Variants)); -1 when neither.
int tf32_explicit_variant() {
  const int o = g_tf32_variant_override.load(std::memory_order_relaxed);
  if (o >= 0) return o;
  static const int env_v = [] {
    const char* v = getenv("TF_FLASHATTN_SM90_TF32_VARIANT");
    if (!v || !*v) return -1;
    char* end = nullptr;
    const long x = strtol(v, &end, 10);
    return *end == '\0' && x >= 0 && x < kTf32Variants ? static_cast<int>(x) : -1;
  }();
  return env_v;
}
}  // namespace

int tf32_variant() {
  const int e = tf32_explicit_variant();
  return e >= 0 ? e : kTf32DefaultVariant;
}

int tf32_default_variant(const AttnShape& s, bool dense) {
  // A dense mask or bias at head dim 128: variant 0 (Q in shared memory). The variants that keep Q's fragments in
  // registers spill there with the dense loads (ptxas 13.0: 68-128 bytes), and variant 0 ran 1.12x-1.15x the
  // default, variant 3, with a bias [1, H, T, T] on the H200 (2026-12-04, RESULTS.md "Hopper TF32 kernels" (l)).
  if (dense && padded_head_dim(s) == 128) return 0;
  if (padded_head_dim(s) == 256) return kTf32PrepassVariant;  // the only one at 256 (FA_SM90_TF32_D256)
  const int64_t readers = (s.Tq + kBr - 1) / kBr * (s.Hkv > 0 ? s.H / s.Hkv : 1);
  return readers >= kPrepassMinReaders ? kTf32PrepassVariant : kTf32DefaultVariant;
}

int tf32_variant_for(const AttnShape& s, bool dense) {
  const int e = tf32_explicit_variant();
  return e >= 0 && tf32_variant_built(e, padded_head_dim(s), dense) ? e : tf32_default_variant(s, dense);
}

bool set_tf32_variant(int v) {
  if (v >= kTf32Variants) return false;
  g_tf32_variant_override.store(v < 0 ? -1 : v, std::memory_order_relaxed);
  return true;
}

int last_tf32_variant() { return g_tf32_last_variant.load(std::memory_order_relaxed); }

namespace {
// The call's FEAT bits (Tf32Feat): tf32_feat's soft-cap and dropout, kTf32Dense for a dense mask or bias.
int fwd_feat(const FlashFwdParams& p) {
  return tf32_feat(p.score.softcap, p.dropout.rate) | (p.mask.mask || p.score.bias ? kTf32Dense : 0);
}

// fwd_tf32_applies without the pointers' alignment and the device: what the workspace size may depend on
// (flash_fwd_workspace_bytes: shape, dtype and the params' fields; XLA asks at compile time).
bool fwd_tf32_params_apply(const FlashFwdParams& p) {
  const AttnShape& s = p.shape;
  if (p.dtype != DType::kFloat32 || !p.allow_tf32) return false;
  // Head dims 64 and 128, and any other D, Dv <= 128 (multiples of 4: TMA's 16 bytes) padded up. With
  // FA_SM90_TF32_D256, D == Dv == 256 with no mask or causal (the plain kernel), and with FA_SM90_TF32_D256_FEAT
  // the rest below too.
  if (kTf32D256 && s.D == 256 && s.Dv == 256) {
    if (!kTf32D256Feat && (p.mask.has_index_masks() || fwd_feat(p) != 0)) return false;
  } else if (!tf32_head_dims_apply(s, 64) && !tf32_head_dims_apply(s, 128)) {
    return false;
  }
  if (s.Tk <= 0 || s.Tq <= 0 || s.Tq > (1ll << 31) - kBr || s.Tk > (1ll << 31) - kBc) return false;
  if (s.H > 65535 || s.B > 65535 || s.Hkv <= 0 || s.H % s.Hkv != 0) return false;
  // Causal (any offset), windows, lengths, [B, T] validity masks, soft-cap, dropout, a dense mask and bias (the
  // IDX kernels for all but causal; a dense mask or bias not with dropout).
  const int feat = fwd_feat(p);
  if ((feat & kTf32Dense) && (feat & kTf32Drop)) return false;
  // TMA: 16-byte aligned bases and byte strides (element strides multiples of 4); o's float2 stores too.
  return strides_mult4(s);
}
}  // namespace

bool fwd_tf32_applies(const FlashFwdParams& p) {
  if (!fwd_tf32_params_apply(p)) return false;
  if (!aligned16(p.q) || !aligned16(p.k) || !aligned16(p.v) || !aligned16(p.o)) return false;
  return current_device_is_sm90();
}

size_t fwd_tf32_workspace_bytes(const FlashFwdParams& p) {
  const AttnShape& s = p.shape;
  if (s.B <= 0 || s.H <= 0 || !fwd_tf32_params_apply(p) ||
      tf32_variant_for(s, (fwd_feat(p) & kTf32Dense) != 0) != kTf32PrepassVariant)
    return 0;
  return static_cast<size_t>(tf32_prepass_layout(s).bytes);
}

cudaError_t fwd_tf32(const FlashFwdParams& p, cudaStream_t stream) {
  // The variant set explicitly, else by shape (tf32_variant_for; kTf32DefaultVariant's comment). Variant 3
  // without a workspace (a caller that did not ask flash_fwd_workspace_bytes): variant 1, the same bits.
  const int d = padded_head_dim(p.shape);  // 64, 128, or 256 with FA_SM90_TF32_D256 (fwd_tf32_params_apply)
  const int feat = fwd_feat(p);
  int v = tf32_variant_for(p.shape, (feat & kTf32Dense) != 0);
  if ((feat & kTf32Dense) && (feat & kTf32Drop)) return cudaErrorNotSupported;  // sm80's (params_apply refuses it)
  if constexpr (kTf32D256) {
    // Head dim 256: the pre-pass kernel, which needs its workspace (without one, sm80's TF32 kernel); with
    // FA_SM90_TF32_D256_FEAT its IDX and FEAT instantiations as below, else the plain kernel only.
    if (d == 256) {
      if (p.workspace == nullptr) return cudaErrorNotSupported;
#if FA_SM90_TF32_D256 && FA_SM90_TF32_D256_FEAT  // (not `if constexpr`: outside a template it would still instantiate)
      if (feat)
        return tf32_feat_switch<true>(feat, [&](auto f) {
          return launch_tf32_variant<256, true, decltype(f)::value>(p, stream, v);
        });
      if (p.mask.has_index_masks()) return launch_tf32_variant<256, true>(p, stream, v);
#else
      if (feat || p.mask.has_index_masks()) return cudaErrorNotSupported;  // (params_apply refuses them)
#endif
      return launch_tf32_variant<256, false>(p, stream, v);
    }
  }
  if (v == kTf32PrepassVariant && p.workspace == nullptr) v = kTf32DefaultVariant;
  // The index-masked kernels (IDX) for the index masks, the FEAT options and calls padded up (their O stores check
  // the column); causal alone keeps the plain ones. Soft-cap, dropout, a dense mask and bias: the IDX kernels' FEAT
  // instantiations (Tf32Feat), switched here only.
  if (feat)
    return tf32_feat_switch<true>(feat, [&](auto f) {
      constexpr int F = decltype(f)::value;
      return d == 128 ? launch_tf32_variant<128, true, F>(p, stream, v) : launch_tf32_variant<64, true, F>(p, stream, v);
    });
  if (p.mask.has_index_masks() || runs_padded(p.shape))
    return d == 128 ? launch_tf32_variant<128, true>(p, stream, v) : launch_tf32_variant<64, true>(p, stream, v);
  return d == 128 ? launch_tf32_variant<128, false>(p, stream, v) : launch_tf32_variant<64, false>(p, stream, v);
}

// ---- Self-test of the building blocks (0-7 checked on the H200, 2026-12-01) --------------------------
namespace {

// Test 0: four TMA boxes {32, 1, 64, 1} (the 4 column panels of rows t0 .. t0+63 of head h, batch b)
// of a [B, T, H, 128] float32 tensor into one swizzled tile, read back through swz128_offset_f32;
// bits as stored (no rounding), rows past T zero. out [64, 128].
// Test 1 (mode 1): the same load of a V tile, then the kernel's transposer (warps 1..3,
// transpose_v_tile<128>) into V^T, then the kernel's K rounding (round_tf32_smem, same 96 threads)
// of the raw tile: out [128 (d), 64 (key)] V^T read through vt_offset, then [64, 128] the rounded tile.
__global__ void selftest_tf32_tma_kernel(const __grid_constant__ CUtensorMap tm, float* out, int h, int t0, int b,
                                         int mode) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  constexpr int kTile = 64 * 128 * 4;
  const uint32_t vt = base + kTile, bar = base + 2 * kTile;
  const uint8_t* tile = smem_raw + (base - raw);
  if (threadIdx.x == 0) {
    mbar_init(bar, 1);
    mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(bar, kTile);
    for (int j = 0; j < 4; ++j) tma_load_4d(base + j * 64 * 128, &tm, bar, 32 * j, h, t0, b);
  }
  mbar_wait(bar, 0);
  if (mode == 0) {
    for (int i = threadIdx.x; i < 64 * 128; i += blockDim.x)
      out[i] = *reinterpret_cast<const float*>(tile + swz128_offset_f32(64, i / 128, i % 128));
    return;
  }
  if (threadIdx.x >= 32) transpose_v_tile<128>(vt, base, threadIdx.x - 32, kTransposers);
  __syncthreads();
  if (threadIdx.x >= 32) round_tf32_smem(base, kTile, threadIdx.x - 32, kTransposers);
  __syncthreads();
  for (int i = threadIdx.x; i < 128 * 64; i += blockDim.x)
    out[i] = *reinterpret_cast<const float*>(tile + kTile + vt_offset(128, i / 64, i % 64));
  for (int i = threadIdx.x; i < 64 * 128; i += blockDim.x)
    out[128 * 64 + i] = *reinterpret_cast<const float*>(tile + swz128_offset_f32(64, i / 128, i % 128));
}

// Test 7: variant 3's V^T path. After tf32_prepass_kernel<128> into a workspace, the two TMA boxes of key
// tile key0 of VT (as the main kernel's producer loads them: tm maps VT by tf32_prepass_maps) into one
// V^T tile, read back through vt_offset: out [128 (d), 64 (key)].
__global__ void selftest_tf32_vt_kernel(const __grid_constant__ CUtensorMap tm, float* out, int h, int key0, int b) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  constexpr int kTile = 128 * 64 * 4;
  const uint32_t bar = base + kTile;
  const uint8_t* tile = smem_raw + (base - raw);
  if (threadIdx.x == 0) {
    mbar_init(bar, 1);
    mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(bar, kTile);
    for (int j = 0; j < kBc / 32; ++j) tma_load_4d(base + j * 128 * 128, &tm, bar, key0 + 32 * j, 0, h, b);
  }
  mbar_wait(bar, 0);
  for (int i = threadIdx.x; i < 128 * 64; i += blockDim.x)
    out[i] = *reinterpret_cast<const float*>(tile + vt_offset(128, i / 64, i % 64));
}

// Tests 2-5: one warpgroup, the kernel's products on small exact values (multiples of 1/2 in
// {-1/2, 0, 1/2}: S = Q K^T is a multiple of 1/4 below 32 in magnitude, tf32-exact; O = P V a
// multiple of 1/8 below 1024, float32-exact): Q [64, 128] and K [64 (keys), 128] stored by plain stores
// into swizzled tiles (64 rows), V [64 (keys), DV] into the raw layout, V^T by the transposer.
// S = Q K^T by 16 wgmma m64n64k8 SS (out s [64, 64]); P = S packed into A fragments (ALT: the
// diagnostic order {c0, c1, c2, c3} instead of the kernel's {c0, c2, c1, c3}); O = P V by 8 wgmma
// m64nDVk8 RS from V^T (out o [64, DV]). QREGS: S by 16 wgmma m64n64k8 RS instead, A = Q's fragments
// loaded by the kernel's load_q_frags (variants 1 / 2's S = Q K^T form). (Test 6 contracts over 128
// columns, one key tile, no loop: it could not see what broke variants 1 / 2 at D = 64, the kernel's
// register allocation giving Q's fragments to the loop's P; benchmarks/sm90_tf32_sass_check.py checks
// that from the SASS.)
template <int DV, bool ALT, bool QREGS = false>
__global__ void selftest_tf32_mma_kernel(const float* q, const float* k, const float* v, float* s_out, float* o_out) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* tile = smem_raw + (base - raw);
  const uint32_t q_tile = base, k_tile = base + 64 * 128 * 4, v_raw = k_tile + 64 * 128 * 4, vt = v_raw + 64 * DV * 4;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  for (int i = tid; i < 64 * 128; i += 128) {
    *reinterpret_cast<float*>(tile + swz128_offset_f32(64, i / 128, i % 128)) = q[i];
    *reinterpret_cast<float*>(tile + (k_tile - base) + swz128_offset_f32(64, i / 128, i % 128)) = k[i];
  }
  for (int i = tid; i < 64 * DV; i += 128)
    *reinterpret_cast<float*>(tile + (v_raw - base) + swz128_offset_f32(64, i / DV, i % DV)) = v[i];
  __syncthreads();
  if (tid >= 32) transpose_v_tile<DV>(vt, v_raw, tid - 32, kTransposers);
  fence_proxy_async();
  __syncthreads();
  float sacc[32];
  uint32_t qa[16][4];
  if constexpr (QREGS) load_q_frags<128, 64>(qa, q_tile, warp * 16 + g, t);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 16; ++kk) {
    const uint64_t db = wgmma_desc(k_tile + (kk / 4) * 64 * 128 + (kk % 4) * 32, 16, 1024);
    if constexpr (QREGS)
      wgmma_tf32_rs_m64n64k8(sacc, qa[kk], db, kk > 0);
    else
      wgmma_tf32_ss_m64n64k8(sacc, wgmma_desc(q_tile + (kk / 4) * 64 * 128 + (kk % 4) * 32, 16, 1024), db, kk > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(sacc);
  store_acc_rows<64>(sacc, s_out, tid);
  uint32_t pa[8][4];
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    if constexpr (ALT) {
#pragma unroll
      for (int e = 0; e < 4; ++e) pa[kk][e] = to_tf32(sacc[4 * kk + e]);
    } else {
      pack_p_step(pa[kk], sacc + 4 * kk);
    }
  }
  float acc[DV / 2];
#pragma unroll
  for (int i = 0; i < DV / 2; ++i) acc[i] = 0.f;
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) wgmma_tf32_rs_acc<DV>(acc, pa[kk], wgmma_desc(vt + (kk / 4) * DV * 128 + (kk % 4) * 32, 16, 1024));
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(acc);
  fence_regs(pa);
  if constexpr (QREGS) fence_regs(qa);
  store_acc_rows<DV>(acc, o_out, tid);
}

// cvt.rna.tf32.f32 on the host: round to nearest on the top 19 bits, ties away from zero; infinities
// and NaN unchanged (the inputs here are finite).
float host_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & ~0x1fffu;
  std::memcpy(&x, &u, 4);
  return x;
}

// A float with all 23 mantissa bits in play (so that rounding matters), from (i, j, salt).
float test_float(int i, int j, int salt) {
  uint32_t x = static_cast<uint32_t>(i * 7919 + j * 104729 + salt * 1299709) * 2654435761u;
  x ^= x >> 15;
  x *= 2246822519u;
  x ^= x >> 13;
  return (static_cast<float>(x & 0xffffff) / 16777216.f - 0.5f) * 8.f;
}

// {-1/2, 0, 1/2} from (i, j, salt).
float test_half(int i, int j, int salt) {
  uint32_t x = static_cast<uint32_t>(i * 131 + j * 71 + salt * 29) * 2654435761u;
  x ^= x >> 16;
  return (static_cast<int>(x % 3) - 1) * 0.5f;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

}  // namespace

int tf32_selftest(int which, double* max_err, char* msg, int msg_len) {
  auto say = [&](const char* fmt, auto... args) {
    if (msg && msg_len > 0) std::snprintf(msg, msg_len, fmt, args...);
  };
  *max_err = 0.0;
  if (!selftest_device_is_sm90(msg, msg_len)) return -1;
  if (which < 0 || which >= kFwdTf32Selftests) { say("no test %d", which); return -1; }
  DeviceBuffers buf;
  cudaError_t err = cudaSuccess;
  if (which == 7) {
    // Variant 3's pre-pass and V^T load: [B, Tk, H, 128] K and V with Tk = 100 (keys
    // 100..127 of the last tile past Tk: tk_pad 128), the workspace NaN-poisoned first. Checks, bit for bit:
    // Kr = rna(K) everywhere; VT at every position of every row = rna(V) of key tf32_kperm_inv(position),
    // 0 past Tk; key tile 1 (keys 64..127) of head h, batch b TMA-loaded through tf32_prepass_maps' map
    // into a V^T tile = the transposer's V^T (read through vt_offset).
    const int B = 2, Tk = 100, H = 3, D = 128, h = 2, b = 1, key0 = 64;
    const size_t n = static_cast<size_t>(B) * Tk * H * D;
    std::vector<float> k(n), v(n);
    auto idx = [&](int bb, int tt, int hh, int dd) { return ((static_cast<size_t>(bb) * Tk + tt) * H + hh) * D + dd; };
    for (int bb = 0; bb < B; ++bb)
      for (int tt = 0; tt < Tk; ++tt)
        for (int hh = 0; hh < H; ++hh)
          for (int dd = 0; dd < D; ++dd) {
            k[idx(bb, tt, hh, dd)] = test_float(bb * 1000 + tt, hh * 1000 + dd, 5);
            v[idx(bb, tt, hh, dd)] = test_float(bb * 1000 + tt, hh * 1000 + dd, 6);
          }
    FlashFwdParams p;
    p.dtype = DType::kFloat32;
    p.allow_tf32 = true;
    AttnShape& sh = p.shape;
    sh.B = B, sh.Tq = 1, sh.Tk = Tk, sh.H = H, sh.Hkv = H, sh.D = D, sh.Dv = D;
    const int64_t st[3] = {static_cast<int64_t>(Tk) * H * D, H * D, D};
    for (int i = 0; i < 3; ++i) sh.k_stride[i] = sh.v_stride[i] = st[i];
    const Tf32PrepassLayout w = tf32_prepass_layout(sh);
    void* dk = buf.alloc(n * 4);
    void* dv = buf.alloc(n * 4);
    void* ws = buf.alloc(static_cast<size_t>(w.bytes));
    float* dout = static_cast<float*>(buf.alloc(128 * 64 * 4));
    if (!dk || !dv || !ws || !dout) { say("cudaMalloc failed"); return -1; }
    cudaMemcpy(dk, k.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, v.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemset(ws, 0xff, static_cast<size_t>(w.bytes));  // NaN
    cudaMemset(dout, 0xff, 128 * 64 * 4);
    p.k = dk;
    p.v = dv;
    CUtensorMap tk, tvt;
    if (!tf32_prepass_maps(sh, ws, &tk, &tvt, kBc)) {
      say("cuTensorMapEncodeTiled of the workspace's Kr / VT failed (or no driver entry point)");
      return -1;
    }
    float* wf = static_cast<float*>(ws);
    float* vt = reinterpret_cast<float*>(static_cast<char*>(ws) + w.vt_off);
    tf32_prepass_kernel<128><<<dim3(static_cast<unsigned>(w.tk_pad / kBc), H, B), kPrepassThreads>>>(p, wf, vt, w.tk_pad);
    err = cudaGetLastError();
    const int smem = 128 * 64 * 4 + 8 + 1024;
    if (err == cudaSuccess) err = cudaFuncSetAttribute(selftest_tf32_vt_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err == cudaSuccess) {
      selftest_tf32_vt_kernel<<<1, 128, smem>>>(tvt, dout, h, key0, b);
      err = cudaDeviceSynchronize();
    }
    if (err != cudaSuccess) { say("kernel failed: %s", cudaGetErrorString(err)); return 0; }
    std::vector<float> kr(n), vth(static_cast<size_t>(B) * H * D * w.tk_pad), out(128 * 64);
    cudaMemcpy(kr.data(), wf, n * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(vth.data(), vt, vth.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost);
    auto vval = [&](int bb, int key, int hh, int dd) { return key < Tk ? host_tf32(v[idx(bb, key, hh, dd)]) : 0.f; };
    int bad_k = 0, bad_vt = 0, bad_tile = 0;
    auto note = [&](float got, float want) {
      const double e = std::fabs(static_cast<double>(got) - want);
      *max_err = std::isnan(e) ? INFINITY : std::max(*max_err, e);
    };
    for (size_t i = 0; i < n; ++i)
      if (!same_bits(kr[i], host_tf32(k[i]))) { ++bad_k; note(kr[i], host_tf32(k[i])); }
    for (int bb = 0; bb < B; ++bb)
      for (int hh = 0; hh < H; ++hh)
        for (int dd = 0; dd < D; ++dd)
          for (int64_t pos = 0; pos < w.tk_pad; ++pos) {
            const float got = vth[((static_cast<size_t>(bb) * H + hh) * D + dd) * w.tk_pad + pos];
            const float want = vval(bb, tf32_kperm_inv(static_cast<int>(pos)), hh, dd);
            if (!same_bits(got, want)) { ++bad_vt; note(got, want); }
          }
    for (int i = 0; i < 128 * 64; ++i) {
      const float want = vval(b, key0 + i % 64, h, i / 64);
      if (!same_bits(out[i], want)) { ++bad_tile; note(out[i], want); }
    }
    if (bad_k || bad_vt || bad_tile) {
      say("pre-pass: Kr %d of %zu differ, VT %d of %zu differ; the TMA-loaded V^T tile %d of 8192 differ (bits)", bad_k,
          n, bad_vt, vth.size(), bad_tile);
      return 0;
    }
    say("pre-pass Kr = rna(K), VT = rna(V) transposed with keys permuted (0 past Tk = %d, tk_pad %lld), TMA of a V^T "
        "tile from it = the transposer's layout: bits exact", Tk, static_cast<long long>(w.tk_pad));
    return 1;
  }
  if (which <= 1) {
    const int B = 2, T = 100, H = 3, D = 128, h = 2, t0 = 64, b = 1;  // rows 100..127 past T
    std::vector<float> x(static_cast<size_t>(B) * T * H * D);
    auto idx = [&](int bb, int tt, int hh, int dd) { return ((static_cast<size_t>(bb) * T + tt) * H + hh) * D + dd; };
    for (int bb = 0; bb < B; ++bb)
      for (int tt = 0; tt < T; ++tt)
        for (int hh = 0; hh < H; ++hh)
          for (int dd = 0; dd < D; ++dd) x[idx(bb, tt, hh, dd)] = test_float(bb * 1000 + tt, hh * 1000 + dd, 3);
    auto val = [&](int r, int d) { return t0 + r < T ? x[idx(b, t0 + r, h, d)] : 0.f; };  // tile row r
    void* dx = buf.alloc(x.size() * 4);
    const int n_out = which == 0 ? 64 * 128 : 2 * 64 * 128;
    float* dout = static_cast<float*>(buf.alloc(n_out * 4));
    if (!dx || !dout) { say("cudaMalloc failed"); return -1; }
    cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
    cudaMemset(dout, 0xff, n_out * 4);  // NaN
    CUtensorMap tm;
    const int64_t st[3] = {static_cast<int64_t>(T) * H * D, H * D, D};
    if (!tma_map_rows_f32(&tm, dx, B, T, H, D, st, 64)) {
      say("cuTensorMapEncodeTiled (float32) failed (or no driver entry point)");
      return -1;
    }
    const int smem = 2 * 64 * 128 * 4 + 8 + 1024;
    err = cudaFuncSetAttribute(selftest_tf32_tma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err == cudaSuccess) {
      selftest_tf32_tma_kernel<<<1, 128, smem>>>(tm, dout, h, t0, b, which);
      err = cudaDeviceSynchronize();
    }
    if (err != cudaSuccess) { say("kernel failed: %s", cudaGetErrorString(err)); return 0; }
    std::vector<float> out(n_out);
    cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost);
    // want(i): element i of out.
    auto want = [&](int i) {
      if (which == 0) return val(i / 128, i % 128);
      if (i < 128 * 64) return host_tf32(val(i % 64, i / 64));  // V^T (d, key) = tf32(V[key][d])
      i -= 128 * 64;
      return host_tf32(val(i / 128, i % 128));
    };
    int bad = 0, first = -1;
    for (int i = 0; i < n_out; ++i)
      if (!same_bits(out[i], want(i))) {
        if (first < 0) first = i;
        ++bad;
        const double e = std::fabs(static_cast<double>(out[i]) - want(i));
        *max_err = std::isnan(e) ? INFINITY : std::max(*max_err, e);
      }
    if (bad) {
      say("%d of %d elements differ (bits); first at %d: got %.9g want %.9g", bad, n_out, first, out[first], want(first));
      return 0;
    }
    if (which == 0)
      say("TMA float32 4 x {32,1,64,1} boxes, 128B swizzle, rows %d..%d zero-filled past T=%d: bits exact", T, t0 + 63, T);
    else
      say("V^T by the transposer warps (keys permuted, cvt.rna) and K rounding in place: bits equal the host's rna");
    return 1;
  }
  // Tests 2-6 and 8 (the head-dim-256 P V form: FA_SM90_TF32_D256 builds only).
  if (which == 8 && !kTf32D256) { say("not built (FA_SM90_TF32_D256 is 0)"); return -1; }
  const int DV = which == 4 ? 64 : which == 8 ? 256 : 128;
  const bool alt = which == 5, qregs = which == 6;
  std::vector<float> q(64 * 128), k(64 * 128), v(64 * DV);
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 128; ++j) {
      q[i * 128 + j] = test_half(i, j, 1);
      k[i * 128 + j] = test_half(i, j, 2);
    }
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < DV; ++j) v[i * DV + j] = test_half(i, j, 3);
  std::vector<double> s_ref(64 * 64, 0.0), o_ref(64 * DV, 0.0);
  for (int i = 0; i < 64; ++i)
    for (int n = 0; n < 64; ++n)
      for (int j = 0; j < 128; ++j) s_ref[i * 64 + n] += static_cast<double>(q[i * 128 + j]) * k[n * 128 + j];
  for (int i = 0; i < 64; ++i)
    for (int d = 0; d < DV; ++d)
      for (int n = 0; n < 64; ++n) o_ref[i * DV + d] += s_ref[i * 64 + n] * v[n * DV + d];
  float* dq = static_cast<float*>(buf.alloc(q.size() * 4));
  float* dk = static_cast<float*>(buf.alloc(k.size() * 4));
  float* dv = static_cast<float*>(buf.alloc(v.size() * 4));
  float* ds = static_cast<float*>(buf.alloc(64 * 64 * 4));
  float* dout = static_cast<float*>(buf.alloc(64 * DV * 4));
  if (!dq || !dk || !dv || !ds || !dout) { say("cudaMalloc failed"); return -1; }
  cudaMemcpy(dq, q.data(), q.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dk, k.data(), k.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
  cudaMemset(ds, 0xff, 64 * 64 * 4);
  cudaMemset(dout, 0xff, 64 * DV * 4);
  const int smem = 2 * 64 * 128 * 4 + 2 * 64 * DV * 4 + 1024;
  auto run = [&](auto kernel) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    kernel<<<1, 128, smem>>>(dq, dk, dv, ds, dout);
    return cudaDeviceSynchronize();
  };
#if FA_SM90_TF32_D256  // (not `if constexpr`: outside a template it would still name the kernel)
  if (DV == 256) err = run(selftest_tf32_mma_kernel<256, false>);
#endif
  if (DV != 256)
    err = alt     ? run(selftest_tf32_mma_kernel<128, true>)
          : qregs ? run(selftest_tf32_mma_kernel<128, false, true>)
          : DV == 64 ? run(selftest_tf32_mma_kernel<64, false>) : run(selftest_tf32_mma_kernel<128, false>);
  if (err != cudaSuccess) { say("kernel failed: %s", cudaGetErrorString(err)); return 0; }
  std::vector<float> s(64 * 64), o(64 * DV);
  cudaMemcpy(s.data(), ds, s.size() * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(o.data(), dout, o.size() * 4, cudaMemcpyDeviceToHost);
  const bool check_s = which == 2 || which == 6;
  const std::vector<float>& got = check_s ? s : o;
  const std::vector<double>& ref = check_s ? s_ref : o_ref;
  const int cols = check_s ? 64 : DV;
  int bad = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(got[i] - ref[i]);
    if (!(e == 0.0)) {
      if (first < 0) first = static_cast<int>(i);
      ++bad;
      *max_err = std::isnan(e) ? INFINITY : std::max(*max_err, e);
    }
  }
  const char* what[] = {"", "", "wgmma m64n64k8 .tf32 SS, A and B K-major (S = Q K^T form)",
                        "wgmma m64n128k8 .tf32 RS, A from the S accumulators {c0,c2,c1,c3}, B = V^T from the transposer (D = 128 P V form)",
                        "wgmma m64n64k8 .tf32 RS, A from the S accumulators, B = V^T (D = 64 P V form)",
                        "DIAGNOSTIC (expected FAIL): test 3 with A packed {c0,c1,c2,c3}; if this passes and test 3 "
                        "fails, the A order is a0 (g,t), a1 (g,t+4), a2 (g+8,t), a3 (g+8,t+4): swap a[1] / a[2] in "
                        "pack_p_step and load_q_frags",
                        "wgmma m64n64k8 .tf32 RS, A = Q's fragments by load_q_frags, B = K K-major (variants 1 / 2's S = Q K^T)",
                        "", "wgmma m64n256k8 .tf32 RS, A from the S accumulators, B = V^T (D = 256 P V form)"};
  if (bad && !check_s && !alt) {
    // Tell whether S itself was right (a P V failure with a bad S is test 2's).
    int sbad = 0;
    for (int i = 0; i < 64 * 64; ++i) sbad += !(s[i] == s_ref[i]);
    say("%s: %d of %d differ (S: %d of 4096 differ); first at (%d, %d): got %g want %g", what[which], bad,
        static_cast<int>(got.size()), sbad, first / cols, first % cols, got[first], ref[first]);
    return 0;
  }
  if (!bad && qregs) {  // the P V product of the same run too (A from these S accumulators)
    for (int i = 0; i < 64 * DV; ++i) bad += !(o[i] == o_ref[i]);
    if (bad) {
      say("%s: S exact, but O = P V after it: %d of %d differ", what[which], bad, 64 * DV);
      return 0;
    }
  }
  if (bad) {
    say("%s: %d of %d differ; first at (%d, %d): got %g want %g", what[which], bad, static_cast<int>(got.size()),
        first / cols, first % cols, got[first], ref[first]);
    return 0;
  }
  say("%s: exact (64 x %d)", what[which], cols);
  return 1;
}

}  // namespace sm90
}  // namespace cuda
}  // namespace flashattn
