// Hopper TF32 backward for FLOAT32 inputs at head dim 256 (sm_90a only; wgmma .tf32, TMA, warp specialization).
// On by default (FA_SM90_TF32_BWD_D256 1); TF_FLASHATTN_SM90_TF32_BWD_D256=0 (read once), set_bwd_tf32_d256_enabled(0)
// (the kernel harness's set_sm90_tf32_bwd256) or a build with -DFA_SM90_TF32_BWD_D256=0 gives these calls back to
// sm80's TF32 backward. First run 2026-12-07 on an H100 (RESULTS "Hopper TF32 kernels" (t)): numerics 15 / 15
// against float64, compute-sanitizer memcheck / racecheck / synccheck clean, 1.55x-2.04x sm80's TF32 backward
// (116-124 TFLOP/s from T = 4096, 16k tokens); every test file passed with it on ("GPU tests" (g64)). Variant 2
// (below) ran 2.18x-2.64x sm80's from T = 4096 (128-158 TFLOP/s), 1.26x-1.29x variant 0 in the same call, with the
// same numerics and sanitizer results (RESULTS "Hopper TF32 kernels" (u)); variant 3, the default since session 66,
// 1.02x-1.03x variant 2 (RESULTS (v)); with it the test files' parallel part and the serial part's float32 cases
// passed on an H100 ("GPU tests" (g67): all but a docs check that needed files kept off the device) and the backward
// through TensorFlow ran 1.00x-1.03x variant 2's from T = 4096 ("Float32 (TF32) through TensorFlow" (z)).
// The layouts are the plan that benchmarks/sm90_tf32_bwd_model.py's check_d256_plan multiplies out. What head dim
// 256 in float32 does to shared memory: K and V of 64 keys take 128 KiB, so the head-dim-128 kernel's Q^T / dO^T
// copies (QT, dOT) and its two ring slots do not fit. Here
//   - a CTA takes 64 keys and both consumer warpgroups work on the same unit (32 queries of one query head that
//     shares the kv head), one ring slot (Qr, dOr: 64 KiB);
//   - consumer 0 computes S^T = K Q^T and P^T, consumer 1 dP^T = V dO^T and dS^T (reading P^T from shared memory);
//   - the three remaining products run transposed, so that their A operands are fragments loaded by ld.shared from
//     the row-major tiles already there (as the head-dim-128 kernel's K^T fragments of dQ^T) and their B operands
//     are tiles the threads store with 128-byte rows:
//       dV^T = dO^T P   [256 d x 64 keys]: A = dO^T from the dOr tile, B = the P^T tile [64 keys x 32 q]
//       dK^T = Q^T dS   A = Q^T from the Qr tile, B = the dS^T tile [64 keys x 32 q]
//       dQ^T = K^T dS^T [256 d x 32 q]: A = K^T from the K tile, B = the dS tile [32 q x 64 keys]
//     each in 4 M = 64 panels of d, consumer c taking panels 2c and 2c + 1 (dV^T, dK^T: 128 accumulator registers).
// Per unit (32 queries, 64 keys):
//   consumer 0: S^T  32 wgmma m64n32k8 SS; P^T (the rows warp's words, index masks as the other TF32 backwards);
//               P^T rounded to the P^T tile
//   consumer 1: dP^T 32 wgmma m64n32k8 SS; after barrier 1 (P^T stored): dS^T = P^T (dP^T - dsum) to the dS^T and
//               dS tiles
//   both, after barrier 1 again: dV^T, dK^T 2 panels x 4 wgmma m64n64k8 RS; dQ^T 2 panels x 8 wgmma m64n32k8 RS, each
//               panel added into the row-major float32 accumulator by scalar atomics (sm80's bwd_dq_convert_tf32 after)
//   the slot (Qr, dOr, the rows' words) released when both are done; the next unit's P^T / dS^T / dS stores come
//   after its own full wait, which needs both releases, so the tiles need no barrier of their own. (Variants 1-3
//   release the slot before dQ^T: there the dS tile is kept by barrier 1 of the next unit, which each consumer
//   reaches only after its dQ^T, and the P^T / dS^T tiles by the releases, which follow their last reads.)
// Shared memory: K, V [64 x 256] (8 panels of 8 KiB each), Qr, dOr [32 x 256] (8 panels of 4 KiB), P^T, dS^T
// [64 x 32] (one panel), dS [32 x 64] (2 panels), the rows' words [5][32], 3 barriers: 217.6 KiB + alignment slack.
// Workspace (after sm80's TF32 parts): Qr, dOr [B, H, tq_pad, 256], tf32-rounded by a pre-pass.
// Scope (bwd_tf32_d256_applies): float32, allow_tf32, D == Dv == 256, index masks or none, GQA, d_lse; no soft-cap,
// dropout, dense mask, bias or deterministic mode (sm80's TF32 backward runs those); strides multiples of 4 elements.
// (Variant 0, described here, is the kernel as first run; variants 1-3, kVariants below, change the release point,
// the dQ adds and, in 3, the per-panel waits; variant 3's SASS keeps one WARPGROUP.DEPBAR for both dV^T / dK^T panels,
// and ptxas gives no C75xx warning for it.) In variants 0-2 each d-panel's products are waited for before the next
// panel's fragments are loaded.
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cc/kernels/common/flash_cuda_common.cuh"  // fast_exp2, to_tf32, q_limit, k_limit, tile_in_range
#include "cc/kernels/common/flash_cuda_internal.h"
#include "cc/kernels/common/flash_params.h"
#include "cc/kernels/sm90/sm90_host.cuh"
#include "cc/kernels/sm90/sm90_ptx.cuh"
#include "cc/kernels/sm90/sm90_tf32.cuh"
#include "cc/kernels/sm90/sm90_tf32_bwd.cuh"

#ifndef FA_SM90_TF32_BWD_D256
#define FA_SM90_TF32_BWD_D256 1
#endif

namespace flashattn {
namespace cuda {
namespace sm90 {
namespace {

constexpr int kD = 256;         // head dim (D == Dv)
constexpr int kBk = 64;         // keys per CTA
constexpr int kBq = 32;         // queries per unit
constexpr int kThreads = 384;   // producer warpgroup + 2 consumer warpgroups
constexpr int kProducerRegs = 24;
constexpr int kConsumerRegs = 240;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 65536, "register file");

// The variants (picked in one place: kVariants; the harness's set_sm90_tf32_bwd256(1 + i) runs variant i):
//   early: the slot (Qr, dOr, the rows' words) released once dV^T and dK^T are done, before dQ^T, so that the next
//          unit's loads overlap dQ^T and its adds (dQ^T reads only K and the dS tile, which the next unit writes
//          after its barrier 1, that both consumers reach only after their dQ^T); else at the end of the unit;
//   vec4:  dQ^T by 4 float4 atomics per thread and panel into the fragment-ordered blocks of [B, H, dq_rows / 32] x
//          [32 q x 256 d] (tf32_dq_frag_convert<256> after, as the head-dim-128 kernel's kVec4); else 16 scalar
//          atomics into the row-major [B, H, Tq, 256] accumulator (sm80's bwd_dq_convert_tf32 after);
//   pipe:  (variant 3) the panels' loads and adds under the other panel's products: dV^T / dK^T panel 1's A
//          fragments loaded while panel 0's 8 wgmma run (a second register set, one wait for both), and dQ^T panel
//          0's atomics issued while panel 1's 8 wgmma run: the per-panel waits that (t) left for later.
// Variant 0 is the kernel as first run (RESULTS.md "Hopper TF32 kernels" (t)). On an H100 (RESULTS (u), kernel time,
// 16k tokens, T = 1024 / 4096 / 16384, against variant 0): 1 1.08x-1.13x, 2 1.26x-1.29x, each numerics 15 / 15 and
// sanitizer-clean. Variant 3 (RESULTS (v), H100, session 66, the same objects, one process): numerics 15 / 15,
// memcheck and racecheck clean, 1.02x-1.03x variant 2 at all six shapes (2.23x-2.70x sm80's from T = 4096, 131-163
// TFLOP/s); the default since then (kDefaultVariant). A third form, consumer 0 on dV^T of all 4 d panels while
// consumer 1 computed dS and then dK^T of all 4 (a named barrier for dS before consumer 0's dQ^T), ran 0.74x-0.91x
// variant 2 in (u)'s call and was removed (6cc75a6 has it).
struct D256Variant {
  bool early, vec4, pipe;
};
constexpr D256Variant kVariants[] = {{false, false, false}, {true, false, false}, {true, true, false},
                                     {true, true, true}};
constexpr int kVariantCount = sizeof(kVariants) / sizeof(kVariants[0]);
static_assert(kVariantCount <= 9, "TF_FLASHATTN_SM90_TF32_BWD_D256 is read as one digit (d256_mode)");
constexpr int kDefaultVariant = 3;  // early + vec4 + pipe (RESULTS "Hopper TF32 kernels" (u), (v))

struct Smem {
  static constexpr int kKBytes = kBk * kD * 4;   // K or V [64 x 256]: 8 panels of 64 rows (8 KiB each)
  static constexpr int kQBytes = kBq * kD * 4;   // Qr or dOr [32 x 256]: 8 panels of 32 rows (4 KiB each)
  static constexpr int kTileBytes = kBk * kBq * 4;  // P^T, dS^T [64 keys x 32 q] (one panel); dS [32 q x 64 keys]
  static constexpr int kK = 0;
  static constexpr int kV = kK + kKBytes;
  static constexpr int kStage = kV + kKBytes;    // the one ring slot: Qr, dOr (tf32_bwd_load_units' names)
  static constexpr int kStageBytes = 2 * kQBytes;
  static constexpr int kQr = 0, kDOr = kQBytes;  // within the slot
  static constexpr int kPT = kStage + kStageBytes;
  static constexpr int kDsT = kPT + kTileBytes;
  static constexpr int kDs = kDsT + kTileBytes;
  static constexpr int kRows = kDs + kTileBytes;  // [1][kTf32BwdRowWords][kBq] words (tf32_bwd_rows_warp)
  static constexpr int kBars = kRows + kTf32BwdRowWords * kBq * 4;  // kv_full, full, empty
  static constexpr int kBarsEnd = kBars + 8 * 3;
  static constexpr int kAlloc = kBarsEnd + 1024;
};
static_assert(Smem::kV % 1024 == 0 && Smem::kStage % 1024 == 0 && Smem::kQBytes % 1024 == 0 &&
                  Smem::kPT % 1024 == 0 && Smem::kDsT % 1024 == 0 && Smem::kDs % 1024 == 0,
              "tiles 1024-byte aligned (the swizzle is computed from the address)");
static_assert(Smem::kAlloc <= 227 * 1024, "over the opt-in shared memory");

struct Tf32BwdD256Args {
  FlashBwdParams p;
  const float* dsum;  // [B, H, Tq]
  float* dq_acc;      // zeroed: [B, H, Tq, 256] row-major, or (vec4) [B, H, dq_rows / 32] fragment-ordered blocks
  int64_t dq_rows;    // vec4: the blocks' rows per (b, h), a multiple of 32, >= Tq
};

using Units = Tf32BwdUnits<kBk, kBq>;  // sm90_tf32_bwd.cuh

// A unit's [64 keys x 32 q] accumulator tile (P^T or dS^T as pack_p_step's rounded words a[kk][x]: key key_l[x & 1],
// query 8 kk + 2t + (x >> 1)) stored as a [64 keys][32 q] tile at gen (one panel of 128-byte rows, swizzled).
__device__ __forceinline__ void tf32_store_keys_tile(uint8_t* gen, const uint32_t (&a)[kBq / 8][4], int t,
                                                     const int (&key_l)[2]) {
#pragma unroll
  for (int kk = 0; kk < kBq / 8; ++kk)
#pragma unroll
    for (int x = 0; x < 4; ++x)
      *reinterpret_cast<uint32_t*>(gen + swz128_offset_f32(kBk, key_l[x & 1], 8 * kk + 2 * t + (x >> 1))) = a[kk][x];
}

// tm_k, tm_v: K, V [B, Tk, Hkv, 256] (boxes {32, 1, 64, 1}); tm_qr, tm_dor: Qr, dOr (boxes {32, 1, 32, 1}).
// V: the variant kVariants[V].
template <int V>
__global__ void __launch_bounds__(kThreads, 1)
    flash_bwd_sm90_tf32_d256_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                                    const __grid_constant__ CUtensorMap tm_qr, const __grid_constant__ CUtensorMap tm_dor,
                                    const __grid_constant__ Tf32BwdD256Args a) {
  using L = Smem;
  constexpr bool kEarly = kVariants[V].early, kVec4 = kVariants[V].vec4, kPipe = kVariants[V].pipe;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  uint8_t* const gbase = smem_raw + (base - smem_u32(smem_raw));
  float* rows_f = reinterpret_cast<float*>(gbase + L::kRows);
  int* rows_i = reinterpret_cast<int*>(gbase + L::kRows);
  const uint32_t kv_full = base + L::kBars, full = kv_full + 8, empty = kv_full + 16;

  const FlashBwdParams& p = a.p;
  const AttnShape& sh = p.shape;
  const MaskParams& mk = p.mask;
  const int hk = blockIdx.y, b = blockIdx.z;
  const int G = static_cast<int>(sh.H / sh.Hkv);
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kBk;
  const int64_t qlim = q_limit(mk, sh, b), klim = k_limit(mk, sh, b);
  const Units units(sh, mk, qlim, klim, j0);
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    mbar_init(kv_full, 1);
    mbar_init(full, 1 + 32);  // thread 0's expect_tx, warp 1's rows
    mbar_init(empty, 256);    // both consumers
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ---- Producer warpgroup ----
    setmaxnreg_dec<kProducerRegs>();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp == 0 && lane == 0 && units.n > 0) {
      tf32_bwd_load_kv<kD, kBk>(base + L::kK, base + L::kV, &tm_k, &tm_v, kv_full, hk, j0, b);
      tf32_bwd_load_units<kD, kBq, 1, L, kBk, 1>(units, hk, G, b, base, &tm_qr, &tm_dor, nullptr, nullptr, full, empty);
    } else if (warp == 1) {
      tf32_bwd_rows_warp<kBk, kBq, 1, false>(rows_f, rows_i, lane, p, a.dsum, units, hk, G, qlim, klim, j0, b, full,
                                             empty);
    }
    return;
  }

  // ---- Consumer warpgroups: every unit, consumer c taking d panels 2c, 2c + 1 ----
  setmaxnreg_inc<kConsumerRegs>();
  const int c = wg - 1;
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const float sl2 = p.score.scale * 1.4426950408889634f;
  const int key_l[2] = {16 * warp + g, 16 * warp + g + 8};  // accumulator rows of S^T / dP^T (keys in the tile)
  const int64_t key_g[2] = {j0 + key_l[0], j0 + key_l[1]};
  const bool key_ok[2] = {key_g[0] < klim && key_visible(mk, sh, b, key_g[0]),
                          key_g[1] < klim && key_visible(mk, sh, b, key_g[1])};

  // dV^T, dK^T [64 d x 64 keys] of panels 2c, 2c + 1.
  float dvt[2][32], dkt[2][32];
#pragma unroll
  for (int pp = 0; pp < 2; ++pp)
#pragma unroll
    for (int i = 0; i < 32; ++i) dvt[pp][i] = dkt[pp][i] = 0.f;

  const uint32_t k_tile = base + L::kK, v_tile = base + L::kV;
  const uint32_t qr_tile = base + L::kStage + L::kQr, dor_tile = base + L::kStage + L::kDOr;
  const uint32_t pt_tile = base + L::kPT, dst_tile = base + L::kDsT, ds_tile = base + L::kDs;
  if (units.n > 0) {
    mbar_wait(kv_full, 0);
    // K and V (raw float32 from TMA) to tf32 in place, half each consumer, for S^T, dP^T and K^T's fragments.
    round_tf32_smem(k_tile + c * (L::kKBytes / 2), L::kKBytes / 2, tid, 128);
    round_tf32_smem(v_tile + c * (L::kKBytes / 2), L::kKBytes / 2, tid, 128);
    fence_proxy_async();
  }
  named_bar_sync(5, 256);  // both consumers (uniform: units.n is the CTA's)

  for (int n = 0; n < units.n; ++n) {
    const int64_t h = hk * G + n / units.nq, i0 = static_cast<int64_t>(units.qb_lo + n % units.nq) * kBq;
    mbar_wait(full, n & 1);

    // Consumer 0: S^T = K Q^T, consumer 1: dP^T = V dO^T [64 keys x 32 queries] over d in k8 steps (step k: panel
    // k / 4, byte (k % 4) * 32 of each 128-byte row).
    float acc[16];
    const uint32_t a_tile = c == 0 ? k_tile : v_tile, b_tile = c == 0 ? qr_tile : dor_tile;
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kD / 8; ++k)
      wgmma_tf32_ss_m64n32k8(acc, tf32_bwd_desc(a_tile, (k / 4) * kBk * 128 + (k % 4) * 32, 16),
                             tf32_bwd_desc(b_tile, (k / 4) * kBq * 128 + (k % 4) * 32, 16), k > 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc);

    uint32_t tw[kBq / 8][4];  // the words of this consumer's [64 keys x 32 q] tile
    if (c == 0) {
      // P^T in place (tf32_bwd_p_pass), with the index rule unless the whole 64 x 32 tile is visible.
      if (!tile_in_range(mk, i0, kBq, j0, kBk, qlim, klim))
        tf32_bwd_p_pass<true, kBq>(acc, rows_f, rows_i, 0, sl2, t, key_l, key_ok);
      else
        tf32_bwd_p_pass<false, kBq>(acc, rows_f, rows_i, 0, sl2, t, key_l, key_ok);
      tf32_bwd_pack_p<kBq, false>(tw, acc, 0u, 0.f);
      tf32_store_keys_tile(gbase + L::kPT, tw, t, key_l);
      fence_proxy_async();  // the P^T tile: consumer 1's loads and both consumers' wgmma (async proxy)
    }
    named_bar_sync(1, 256);  // P^T stored
    if (c == 1) {
      // dS^T = P^T (dP^T - dsum), P^T read back in this consumer's accumulator layout (the rounded words); dS
      // [32 q][64 keys] for dQ^T and the dS^T tile for dK^T.
      float pacc[16];
#pragma unroll
      for (int x = 0; x < 16; ++x)
        pacc[x] = ld_shared_f32(pt_tile + swz128_offset_f32(kBk, key_l[(x >> 1) & 1], 8 * (x >> 2) + 2 * t + (x & 1)));
      tf32_bwd_ds<kBq>(acc, pacc, tw, gbase + L::kDs, rows_f, 0, t, key_l);
      tf32_store_keys_tile(gbase + L::kDsT, tw, t, key_l);
      fence_proxy_async();
    }
    named_bar_sync(1, 256);  // dS^T, dS stored

    // dV^T += dO^T P and dK^T += Q^T dS on d panels 2c, 2c + 1: A = dO^T / Q^T fragments (4 k8 steps over the unit's
    // queries), B = the P^T / dS^T tile (k8 step kk at byte kk * 32).
    auto dvdk_frags = [&](int pp, uint32_t(&fo)[kBq / 8][4], uint32_t(&fq)[kBq / 8][4]) {
#pragma unroll
      for (int k = 0; k < kBq / 8; ++k) {
        tf32_t_frag<kBq>(fo[k], dor_tile, 2 * c + pp, k, t, key_l);
        tf32_t_frag<kBq>(fq[k], qr_tile, 2 * c + pp, k, t, key_l);
      }
    };
    auto dvdk_issue = [&](int pp, uint32_t(&fo)[kBq / 8][4], uint32_t(&fq)[kBq / 8][4]) {
      fence_regs(dvt[pp]);
      fence_regs(dkt[pp]);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < kBq / 8; ++k) wgmma_tf32_rs_m64n64k8(dvt[pp], fo[k], tf32_bwd_desc(pt_tile, k * 32, 16), 1);
#pragma unroll
      for (int k = 0; k < kBq / 8; ++k) wgmma_tf32_rs_m64n64k8(dkt[pp], fq[k], tf32_bwd_desc(dst_tile, k * 32, 16), 1);
      wgmma_commit();
    };
    if constexpr (kPipe) {
      // Panel 1's fragments loaded while panel 0's products run (two register sets), one wait for both.
      uint32_t fo[2][kBq / 8][4], fq[2][kBq / 8][4];
      dvdk_frags(0, fo[0], fq[0]);
      dvdk_issue(0, fo[0], fq[0]);
      dvdk_frags(1, fo[1], fq[1]);
      dvdk_issue(1, fo[1], fq[1]);
      wgmma_wait<0>();
#pragma unroll
      for (int pp = 0; pp < 2; ++pp) {
        fence_regs(fo[pp]);
        fence_regs(fq[pp]);
        fence_regs(dvt[pp]);
        fence_regs(dkt[pp]);
      }
    } else {
#pragma unroll
      for (int pp = 0; pp < 2; ++pp) {
        uint32_t fo[kBq / 8][4], fq[kBq / 8][4];
        dvdk_frags(pp, fo, fq);
        dvdk_issue(pp, fo, fq);
        // The fragments are read by the tensor cores after issue: waited for before the next panel's loads reuse
        // their registers.
        wgmma_wait<0>();
        fence_regs(fo);
        fence_regs(fq);
        fence_regs(dvt[pp]);
        fence_regs(dkt[pp]);
      }
    }

    if constexpr (kEarly) mbar_arrive(empty);  // Qr, dOr and the rows' words read (dQ^T reads K and dS only)

    // dQ^T = K^T dS^T [256 d x 32 q] on d panels 2c, 2c + 1 over the 64 keys: A = K^T's fragments, B = dS (k8 step k:
    // panel k / 4, byte (k % 4) * 32); each panel added into dQacc[b, h, i0 + q, 64 panel + d] (scalar), or into
    // sub-block `panel` of block (b, h, i0 / 32) (vec4).
    float* const dq_rows = a.dq_acc + ((static_cast<int64_t>(b) * sh.H + h) * (kVec4 ? a.dq_rows : sh.Tq) + i0) * kD;
    auto dq_issue = [&](int pp, uint32_t(&af)[kBk / 8][4], float(&dqt)[16]) {
#pragma unroll
      for (int k = 0; k < kBk / 8; ++k) tf32_t_frag<kBk>(af[k], k_tile, 2 * c + pp, k, t, key_l);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < kBk / 8; ++k)
        wgmma_tf32_rs_m64n32k8(dqt, af[k], tf32_bwd_desc(ds_tile, (k / 4) * kBq * 128 + (k % 4) * 32, 16), k > 0);
      wgmma_commit();
    };
    auto dq_add = [&](int pp, float(&dqt)[16]) {
      if constexpr (kVec4) {
        // Fragment order: float4 j * 128 + tid = dqt[4j .. 4j + 3] (rows past Tq land in the padding, which the
        // conversion skips).
        float4* mine = reinterpret_cast<float4*>(dq_rows + (2 * c + pp) * (kBq * 64)) + tid;
#pragma unroll
        for (int j = 0; j < kBq / 8; ++j)
          atomicAdd(mine + j * 128, make_float4(dqt[4 * j], dqt[4 * j + 1], dqt[4 * j + 2], dqt[4 * j + 3]));
      } else {
        tf32_dq_add_scalar(dq_rows, kD, 64 * (2 * c + pp), dqt, sh.Tq - i0, t, key_l);
      }
    };
    if constexpr (kPipe) {
      // Panel 0's adds while panel 1's products run (the fragments' registers reused once panel 0's are done).
      uint32_t af[kBk / 8][4];
      float dqt[2][16];
      dq_issue(0, af, dqt[0]);
      wgmma_wait<0>();
      fence_regs(dqt[0]);
      fence_regs(af);
      dq_issue(1, af, dqt[1]);
      dq_add(0, dqt[0]);
      wgmma_wait<0>();
      fence_regs(dqt[1]);
      fence_regs(af);
      dq_add(1, dqt[1]);
    } else {
#pragma unroll
      for (int pp = 0; pp < 2; ++pp) {
        uint32_t af[kBk / 8][4];
        float dqt[16];
        dq_issue(pp, af, dqt);
        wgmma_wait<0>();
        fence_regs(dqt);
        fence_regs(af);
        dq_add(pp, dqt);
      }
    }
    if constexpr (!kEarly) mbar_arrive(empty);  // Qr, dOr, the rows' words and the three tiles: read
  }

  // Epilogue: dV[key][d] = dV^T[d][key], dK = scale dK^T, accumulator element i of panel P: d = 64 P + key_l[(i >> 1)
  // & 1], key j0 + 8 (i >> 2) + 2t + (i & 1) (scalar stores; keys past Tk skipped).
  const float scale = p.score.scale;
  auto dk_at = [&](int64_t key, int d) -> float& {
    return static_cast<float*>(p.dk)[b * sh.k_stride[0] + key * sh.k_stride[1] + hk * sh.k_stride[2] + d];
  };
  auto dv_at = [&](int64_t key, int d) -> float& {
    return static_cast<float*>(p.dv)[b * sh.v_stride[0] + key * sh.v_stride[1] + hk * sh.v_stride[2] + d];
  };
#pragma unroll
  for (int x = 0; x < 2; ++x)
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int64_t key = j0 + 8 * (i >> 2) + 2 * t + (i & 1);
      const int d = 64 * (2 * c + x) + key_l[(i >> 1) & 1];
      if (key >= sh.Tk) continue;
      dk_at(key, d) = scale * dkt[x][i];
      dv_at(key, d) = dvt[x][i];
    }
}

constexpr int kPrepassThreads = 256;
// Pre-pass for Q and dO: query tile blockIdx.x (rows i0 .. i0 + 31) of head blockIdx.y, batch blockIdx.z. qr / dor
// [B, H, tq_pad, 256] = tf32(Q) / tf32(dO) (rows past Tq: 0).
__global__ void __launch_bounds__(kPrepassThreads)
    tf32_bwd_d256_prepass_kernel(const __grid_constant__ FlashBwdParams p, float* __restrict__ qr,
                                 float* __restrict__ dor, int64_t tq_pad) {
  const AttnShape& sh = p.shape;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kBq;
  const int h = blockIdx.y, b = blockIdx.z;
  const int64_t bh = static_cast<int64_t>(b) * sh.H + h;
  const float* q = static_cast<const float*>(p.q) + b * sh.q_stride[0] + h * sh.q_stride[2];
  const float* d_o = static_cast<const float*>(p.d_o) + b * sh.o_stride[0] + h * sh.o_stride[2];
  constexpr int kC4 = kD / 4;  // float4 per row
  for (int i = threadIdx.x; i < kBq * kC4; i += kPrepassThreads) {
    const int r = i / kC4, col = 4 * (i % kC4);
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f), y = x;
    if (i0 + r < sh.Tq) {
      x = *reinterpret_cast<const float4*>(q + (i0 + r) * sh.q_stride[1] + col);
      y = *reinterpret_cast<const float4*>(d_o + (i0 + r) * sh.o_stride[1] + col);
    }
    const int64_t o = (bh * tq_pad + i0 + r) * kD + col;
    __stcg(reinterpret_cast<uint4*>(qr + o), make_uint4(to_tf32(x.x), to_tf32(x.y), to_tf32(x.z), to_tf32(x.w)));
    __stcg(reinterpret_cast<uint4*>(dor + o), make_uint4(to_tf32(y.x), to_tf32(y.y), to_tf32(y.z), to_tf32(y.w)));
  }
}

std::atomic<int64_t> g_launches{0};
std::atomic<int> g_override{-1};

// The mode: 0 off, 1 + i on with variant i. The override (set_bwd_tf32_d256_enabled: 0 off, 1 .. kVariantCount,
// -1 back to the rule) first; else TF_FLASHATTN_SM90_TF32_BWD_D256 (read once: "0" off, "1" .. "4" on with variant
// 0 .. 3, as the harness's modes), unset or anything else: the build's FA_SM90_TF32_BWD_D256 (default 1: on) with
// kDefaultVariant; on only where the other Hopper TF32 backwards are on (bwd_tf32_enabled).
int d256_mode() {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return o <= kVariantCount ? o : 0;
  static const int env_mode = [] {
    const char* v = getenv("TF_FLASHATTN_SM90_TF32_BWD_D256");
    if (v && v[0] >= '0' && v[0] <= '0' + kVariantCount && v[1] == 0) return v[0] - '0';
    return FA_SM90_TF32_BWD_D256 != 0 ? 1 + kDefaultVariant : 0;
  }();
  return env_mode != 0 && bwd_tf32_enabled() ? env_mode : 0;
}

using D256Kernel = void (*)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const CUtensorMap,
                            const Tf32BwdD256Args);
constexpr D256Kernel kD256Kernels[] = {flash_bwd_sm90_tf32_d256_kernel<0>, flash_bwd_sm90_tf32_d256_kernel<1>,
                                       flash_bwd_sm90_tf32_d256_kernel<2>, flash_bwd_sm90_tf32_d256_kernel<3>};
static_assert(sizeof(kD256Kernels) / sizeof(kD256Kernels[0]) == kVariantCount, "one kernel per variant");

struct PrepassLayout {
  int64_t tq_pad = 0, qr = 0, dor = 0, floats = 0;
};
PrepassLayout prepass_layout(const AttnShape& s) {
  PrepassLayout w;
  w.tq_pad = (s.Tq + kBq - 1) / kBq * kBq;
  w.qr = 0;
  w.dor = s.B * s.H * w.tq_pad * kD;  // a multiple of 8192 floats: 256-byte aligned parts
  w.floats = 2 * w.dor;
  return w;
}
}  // namespace

void set_bwd_tf32_d256_enabled(int mode) { g_override.store(mode, std::memory_order_relaxed); }
int64_t bwd_tf32_d256_launches() { return g_launches.load(std::memory_order_relaxed); }

size_t bwd_tf32_d256_workspace_floats(const FlashBwdParams& p) {
  const AttnShape& s = p.shape;
  if (p.dtype != DType::kFloat32 || !p.allow_tf32 || s.D != kD || s.Dv != kD || d256_mode() == 0 || !enabled() ||
      !current_device_is_sm90())
    return 0;
  return static_cast<size_t>(prepass_layout(s).floats);
}

bool bwd_tf32_d256_applies(const FlashBwdParams& p) {
  const AttnShape& s = p.shape;
  if (bwd_tf32_d256_workspace_floats(p) == 0 || !p.workspace || p.workspace_bytes == 0) return false;
  if (!tf32_bwd_shape_fits(s, kBq)) return false;
  // The index masks or none: no soft-cap, dropout, dense mask / bias, deterministic mode (sm80's TF32 backward).
  if (p.deterministic || tf32_bwd_feat(p) != 0 || !tf32_bwd_feat_applies(p)) return false;
  return tf32_bwd_strides_apply(p);
}

cudaError_t bwd_tf32_d256(const FlashBwdParams& p, cudaStream_t stream) {
  const AttnShape& s = p.shape;  // (flash_bwd_impl called bwd_tf32_d256_applies first)
  const int mode = d256_mode();
  if (mode == 0) return cudaErrorNotSupported;  // (switched off since applies())
  const D256Variant var = kVariants[mode - 1];
  const PrepassLayout w = prepass_layout(s);
  const Tf32BwdWorkspaceParts ws = bwd_tf32_workspace_parts(p);
  const int64_t acc_rows = tf32_dq_acc_rows<kBq>(ws, s, var.vec4);
  if (!ws.dsum || !ws.dq_acc || !ws.extra || !aligned16(ws.extra) || !aligned16(ws.dq_acc) || acc_rows == 0)
    return cudaErrorNotSupported;
  if (p.workspace_bytes < static_cast<size_t>(ws.extra - p.workspace + w.floats) * sizeof(float))
    return cudaErrorNotSupported;
  float* qr = ws.extra + w.qr;
  float* dor = ws.extra + w.dor;
  CUtensorMap tk, tv, tqr, tdor;
  if (!tma_map_rows_f32(&tk, p.k, s.B, s.Tk, s.Hkv, s.D, s.k_stride, kBk) ||
      !tma_map_rows_f32(&tv, p.v, s.B, s.Tk, s.Hkv, s.Dv, s.v_stride, kBk) ||
      !tma_map_ws_f32(&tqr, qr, s.B, s.H, w.tq_pad, kD, kBq) || !tma_map_ws_f32(&tdor, dor, s.B, s.H, w.tq_pad, kD, kBq))
    return cudaErrorNotSupported;
  const D256Kernel kernel = kD256Kernels[mode - 1];
  cudaError_t err = set_dynamic_smem(kernel, Smem::kAlloc);
  if (err != cudaSuccess) return cudaErrorNotSupported;
  // From here on no fallback.
  if ((err = bwd_dsum_tf32(p, ws.dsum, stream)) != cudaSuccess) return err;
  if ((err = tf32_dq_acc_zero<kD>(s, ws.dq_acc, acc_rows, stream)) != cudaSuccess) return err;
  tf32_bwd_d256_prepass_kernel<<<dim3(static_cast<unsigned>(w.tq_pad / kBq), static_cast<unsigned>(s.H),
                                      static_cast<unsigned>(s.B)),
                                 kPrepassThreads, 0, stream>>>(p, qr, dor, w.tq_pad);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  const Tf32BwdD256Args args{p, ws.dsum, ws.dq_acc, acc_rows};
  const dim3 grid(static_cast<unsigned>((s.Tk + kBk - 1) / kBk), static_cast<unsigned>(s.Hkv),
                  static_cast<unsigned>(s.B));
  kernel<<<grid, kThreads, Smem::kAlloc, stream>>>(tk, tv, tqr, tdor, args);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  err = tf32_dq_acc_finish<kD>(p, ws.dq_acc, acc_rows, var.vec4, stream);
  if (err == cudaSuccess) g_launches.fetch_add(1, std::memory_order_relaxed);
  return err;
}

}  // namespace sm90
}  // namespace cuda
}  // namespace flashattn
