// Hopper TF32 backward for FLOAT32 inputs at head dim 128 (sm_90a only; wgmma .tf32, TMA, warp specialization).
// On with the head-dim-64 kernel (TF_FLASHATTN_SM90_TF32_BWD=0 turns both off; the harness's set_sm90_tf32_bwd128
// switches this one alone). flash_bwd_sm90_tf32.cu (head dim 64) is the model; what differs is what head
// dim 128 in float32 does to shared memory: K, V and K^T of 128 keys alone would take 192 KiB, so
//   - a CTA takes 64 keys, and its two consumer warpgroups take alternate units (32-query tiles of the query heads
//     that share the kv head), each with dK / dV accumulators for all 64 keys (summed through shared memory at the
//     end); each consumer owns one slot of the 2-stage ring (unit n: slot n % 2 = the consumer), whose two halves
//     have their own barriers: Qr, dOr and the rows warp's words (full / empty, loaded by thread 0) are released
//     after dS^T, QT and dOT (fullb / emptyb, loaded by warp 2) after dK, so that the next unit's loads run under
//     this one's products (on the H200 1.04x-1.12x the speed with one barrier per slot, released after dK, which
//     left the consumers waiting ~19 % of their time for their slot: results/2026-12-04-h200-s38/);
//   - K^T is not kept: dQ^T = K^T dS^T runs as wgmma RS, its A fragments (K^T, 64 d x 8 keys per k8 step) loaded
//     from the rounded K tile by ld.shared, in two M = 64 halves of d (registers: dK, dV 128 + 32 fragments + 16);
//   - S^T and dP^T are wgmma SS (K, V rounded in place once per CTA): their A fragments in registers would take 128.
// Per unit (consumer c, 32 queries, all 64 keys; stage slot c):
//   S^T  = K Q^T     16 wgmma m64n32k8 SS     dP^T = V dO^T   16 wgmma m64n32k8 SS
//   P^T = 2^(S^T scale log2e - lse2) (index masks as flash_bwd_sm90_tf32.cu: the rows warp's [kb, ke), key_ok)
//   dV += P^T dO     4 wgmma m64n128k8 RS (B = dOT [128 d x 32 q])
//   dS^T = P^T (dP^T - dsum): A fragments of dK, and dS [32 q][64 keys] to shared memory (B of dQ^T)
//   dK += dS^T Q     4 wgmma m64n128k8 RS (B = QT)
//   dQ^T (2 halves)  8 wgmma m64n32k8 RS each (A = K^T fragments, B = dS); QT, dOT released after the first
//                    half's wait (dV, dK done); each half added into the float32 accumulator (DqAdd: by default
//                    4 float4 atomics per thread into fragment-ordered blocks)
// Shared memory: K, V [64 keys x 128] (4 panels of 8 KiB each, 32 KiB each); per stage: Qr, dOr [32 x 128]
// (4 panels of 4 KiB), QT, dOT [128 x 32] (one panel of 16 KiB) = 64 KiB; dS per consumer [32 q x 64 keys] (2
// panels of 4 KiB); rows [2][5][32] words; 9 barriers. 208 KiB + 1.25 KiB + 72 B (+ 1 KiB alignment slack); the bulk
// dQ mode adds two 8 KiB staging blocks after the barriers (225.4 KiB + the slack, under the 227 KiB opt-in limit).
// Workspace (after sm80's TF32 parts): Qr, dOr [B, H, tq_pad, 128], QT, dOT [B, H, 128, tq_pad] (tf32_kperm order
// within groups of 8 queries), as the head-dim-64 kernel's pre-pass (no K^T).
// Scope (bwd_tf32_d128_applies): float32, allow_tf32, D == Dv == 128 and any other D, Dv that are multiples of 4
// with padded_head_dim 128 (padded up: tf32_head_dims_apply, sm90_tf32_bwd.cuh), index masks or none, GQA,
// d_lse, deterministic mode (an ordered dQ reduction: kDetDqMode below), soft-cap and dropout (the FEAT
// instantiations of kDefaultDqMode and kDetDqMode, whatever mode is set; as the head-dim-64 kernel, sm90_tf32_bwd.cuh),
// a dense mask, bias and dbias as the head-dim-64 kernel (not with dropout; while bwd_tf32_dense_enabled, the default);
// strides multiples of 4 elements.
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "cc/kernels/common/flash_cuda_common.cuh"  // fast_exp2, to_tf32, q_limit, k_limit, tile_in_range
#include "cc/kernels/common/flash_cuda_internal.h"
#include "cc/kernels/common/flash_params.h"
#include "cc/kernels/sm90/sm90_host.cuh"
#include "cc/kernels/sm90/sm90_ptx.cuh"
#include "cc/kernels/sm90/sm90_tf32.cuh"
#include "cc/kernels/sm90/sm90_tf32_bwd.cuh"

namespace flashattn {
namespace cuda {
namespace sm90 {
namespace {

constexpr int kD = 128;         // head dim (D == Dv)
constexpr int kBk = 64;         // keys per CTA (both consumers)
constexpr int kBq = 32;         // queries per unit
constexpr int kStages = 2;      // one ring slot per consumer
constexpr int kThreads = 384;   // producer warpgroup + 2 consumer warpgroups
constexpr int kProducerRegs = 24;
constexpr int kConsumerRegs = 240;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 65536, "register file");

// How each half of dQ^T reaches the float32 accumulator dq_acc (the dQ modes, picked in one place: kDqModes):
//   kScalar: 16 scalar atomics per thread into [B, H, Tq, 128] row-major (sm80's bwd_dq_convert_tf32 after);
//   kVec4: 4 float4 atomics per thread into the fragment-ordered blocks of [B, H, dq_rows / 32] x [32 q x 128 d]
//          (tf32_dq_frag_convert_kernel<128> after, sm90_tf32_bwd.cuh);
//   kBulk: the half staged in shared memory (8 KiB per consumer, fragment order) and added into those blocks by one
//          bulk reduce-add of the copy engine (as the head-dim-64 kernel's variant 3).
enum class DqAdd { kScalar, kVec4, kBulk };
// Mode 3 is mode 1 with dQ^T's K^T fragments loaded from 4 row addresses per half and immediate offsets (kKtRows:
// row 8k + t + 4 (x >> 1) of the K tile has the same swizzle phase for every k8 step k, so step k's word is step
// 0's plus 1024 k bytes): 112 fewer instructions in each of its two kernels (2936 / 3136 against mode 1's 3048 /
// 3248, ptxas 13.0; spills unchanged), the same words loaded, so the same results. Not the default: on the H100
// (kernel harness, 16k tokens, two processes; RESULTS.md "Hopper TF32 kernels" (s)) 1.7 %-5.4 % faster than mode 1
// with a causal mask and at T = 1024, but 0.3 %-2.5 % slower without a mask from T = 4096.
constexpr DqAdd kDqModes[] = {DqAdd::kScalar, DqAdd::kVec4, DqAdd::kBulk, DqAdd::kVec4};
constexpr bool kKtRows[] = {false, false, false, true};
constexpr int kDqModeCount = sizeof(kDqModes) / sizeof(kDqModes[0]);
static_assert(sizeof(kKtRows) / sizeof(kKtRows[0]) == kDqModeCount, "one K^T load form per mode");
// The default: kVec4. On the H200 (tune_tf32_bwd.py --sm90-d128, 16k tokens, hidden 1024, T = 1024 / 4096 / 16384,
// causal or not; results/2026-12-04-h200-s37/d128m.out): kVec4 1.13x-1.24x kScalar, kBulk 0.95x-1.06x kVec4 (better
// at T = 1024, worse at 16384 without a mask); kVec4 needs no shared memory of its own. With the split slots
// (results/2026-12-04-h200-s38/call5/sp1_128.out, T = 4096): kBulk 0.95x kVec4 without a mask, 0.95x causal.
constexpr int kDefaultDqMode = 1;

template <bool BULK>
struct Smem {
  static constexpr int kKBytes = kBk * kD * 4;     // K or V [64 x 128]: 4 panels of 64 rows (8 KiB each)
  static constexpr int kQBytes = kBq * kD * 4;     // Qr or dOr [32 x 128]: 4 panels of 32 rows (4 KiB each)
  static constexpr int kQTBytes = kD * kBq * 4;    // QT or dOT [128 x 32]: one panel of 128 rows
  static constexpr int kStageBytes = 2 * kQBytes + 2 * kQTBytes;
  static constexpr int kDsBytes = kBq * kBk * 4;   // dS of one consumer [32 q x 64 keys]: 2 panels
  static constexpr int kK = 0;
  static constexpr int kV = kK + kKBytes;
  static constexpr int kStage = kV + kKBytes;      // + s * kStageBytes: Qr, dOr, QT, dOT
  static constexpr int kQr = 0, kDOr = kQBytes, kQT = 2 * kQBytes, kDOT = 2 * kQBytes + kQTBytes;
  static constexpr int kDs = kStage + kStages * kStageBytes;  // + c * kDsBytes
  static constexpr int kRows = kDs + 2 * kDsBytes;  // [kStages][kTf32BwdRowWords][kBq] words (tf32_bwd_rows_warp)
  // kv_full, full[kStages], empty[kStages] (the slots' Qr / dOr / rows half), fullb[kStages], emptyb[kStages]
  // (their QT / dOT half)
  static constexpr int kBars = kRows + kStages * kTf32BwdRowWords * kBq * 4;
  static constexpr int kBarsEnd = kBars + 8 * (1 + 4 * kStages);
  static constexpr int kDqBytes = kBq * 64 * 4;    // BULK: one half of dQ^T [32 q x 64 d] per consumer
  static constexpr int kDq = (kBarsEnd + 127) & ~127;  // BULK: + c * kDqBytes
  static constexpr int kBytes = BULK ? kDq + 2 * kDqBytes : kBarsEnd;
  static constexpr int kAlloc = kBytes + 1024;
  static constexpr int kReduce = kStage;           // the end's dK / dV exchange: 128 floats x 128 threads
};
static_assert(Smem<false>::kV % 1024 == 0 && Smem<false>::kStage % 1024 == 0 &&
                  Smem<false>::kStageBytes % 1024 == 0 && Smem<false>::kDs % 1024 == 0 &&
                  Smem<false>::kQBytes % 1024 == 0 && Smem<false>::kQTBytes % 1024 == 0,
              "tiles 1024-byte aligned (the swizzle is computed from the address)");
static_assert(Smem<true>::kAlloc <= 227 * 1024, "over the opt-in shared memory");
static_assert(128 * 128 * 4 <= kStages * Smem<false>::kStageBytes, "the dK / dV exchange fits the stage slots");

// kKtRows: af[k][x] for k = K .. kBk / 8 - 1, the word at a0 + 1024 k (step k of fragment word x; a0: step 0's).
template <int K>
__device__ __forceinline__ void tf32_kt_frags(uint32_t (&af)[kBk / 8][4], int x, uint32_t a0) {
  if constexpr (K < kBk / 8) {
    af[K][x] = ld_shared_u32_imm<1024 * K>(a0);
    tf32_kt_frags<K + 1>(af, x, a0);
  }
}

struct Tf32BwdD128Args {
  FlashBwdParams p;
  const float* dsum;  // [B, H, Tq]
  float* dq_acc;      // zeroed; kScalar: [B, H, Tq, 128] row-major; else [B, H, dq_rows / 32] fragment-ordered blocks
  int64_t dq_rows;    // not kScalar: rows per (b, h) in dq_acc (a multiple of 32, >= Tq)
  int* dq_sem;        // DET: [B, H, sem_tiles] ordered-reduction counters, zeroed (tf32_dq_det_warp)
  int64_t sem_tiles;  // DET: tq_pad / 32
};
// Deterministic mode (p.deterministic): the default dQ mode's float4 atomics (not the bulk reduce-add, which keeps no
// order) with the ordered dQ reduction (the DET instantiations, sm90_tf32_bwd.cuh's tf32_dq_det_warp), whatever mode
// is set. A unit's block gets one contributor per CTA (its consumer, both halves).
constexpr int kDetDqMode = 1;
static_assert(kDqModes[kDetDqMode] != DqAdd::kBulk, "the ordered adds' form");

struct PrepassLayout {
  int64_t tq_pad = 0;
  int64_t qr = 0, dor = 0, qt = 0, dot = 0, sem = 0, floats = 0;
};
// det: the ordered reduction's counters after dOT ([B, H, tq_pad / 32] ints, one float's room each).
PrepassLayout prepass_layout(const AttnShape& s, bool det) {
  PrepassLayout w;
  w.tq_pad = (s.Tq + kBq - 1) / kBq * kBq;
  const int64_t nq = s.B * s.H * w.tq_pad * kD;  // a multiple of 4096 floats: 256-byte aligned parts
  w.qr = 0;
  w.dor = nq;
  w.qt = 2 * nq;
  w.dot = 3 * nq;
  w.sem = 4 * nq;
  w.floats = w.sem + (det ? s.B * s.H * (w.tq_pad / kBq) : 0);
  return w;
}

using Units = Tf32BwdUnits<kBk, kBq>;  // sm90_tf32_bwd.cuh

// tm_k, tm_v: K, V [B, Tk, Hkv, 128] (boxes {32, 1, 64, 1}); tm_qr, tm_dor: Qr, dOr (boxes {32, 1, 32, 1});
// tm_qt, tm_dot: QT, dOT (boxes {32 queries, 1, 128 rows, 1}). MI: the dQ mode kDqModes[MI] (and kKtRows[MI]). PAD: a call padded up
// (D or Dv below 128; the epilogue skips the columns past them). DET: the ordered dQ reduction (deterministic mode,
// kDetDqMode only). FEAT: Tf32Feat bits (soft-cap: S^T capped before the P pass, dS^T times 1 - tanh^2; dropout).
template <int MI, bool PAD, bool DET, int FEAT>
__global__ void __launch_bounds__(kThreads, 1)
    flash_bwd_sm90_tf32_d128_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                                    const __grid_constant__ CUtensorMap tm_qr, const __grid_constant__ CUtensorMap tm_dor,
                                    const __grid_constant__ CUtensorMap tm_qt, const __grid_constant__ CUtensorMap tm_dot,
                                    const __grid_constant__ Tf32BwdD128Args a) {
  constexpr DqAdd DQ = kDqModes[MI];
  constexpr bool BULK = DQ == DqAdd::kBulk;
  constexpr bool KT_ROWS = kKtRows[MI];
  constexpr bool CAP = (FEAT & kTf32Cap) != 0, DROP = (FEAT & kTf32Drop) != 0, DENSE = (FEAT & kTf32Dense) != 0;
  static_assert(!DENSE || !DROP, "a dense mask / bias: not with dropout");
  using L = Smem<BULK>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  uint8_t* const gbase = smem_raw + (base - smem_u32(smem_raw));
  float* rows_f = reinterpret_cast<float*>(gbase + L::kRows);
  int* rows_i = reinterpret_cast<int*>(gbase + L::kRows);
  const uint32_t kv_full = base + L::kBars;
  const uint32_t full0 = kv_full + 8, empty0 = kv_full + 8 * (1 + kStages);
  const uint32_t fullb0 = kv_full + 8 * (1 + 2 * kStages), emptyb0 = kv_full + 8 * (1 + 3 * kStages);

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
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full0 + 8 * s, 1 + 32);  // thread 0's expect_tx, warp 1's rows
      mbar_init(empty0 + 8 * s, 128);    // the slot's consumer
      mbar_init(fullb0 + 8 * s, 1);      // warp 2's expect_tx
      mbar_init(emptyb0 + 8 * s, 128);   // the slot's consumer
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ---- Producer warpgroup ----
    setmaxnreg_dec<kProducerRegs>();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp == 0 && lane == 0 && units.n > 0) {
      tf32_bwd_load_kv<kD, kBk>(base + L::kK, base + L::kV, &tm_k, &tm_v, kv_full, hk, j0, b);
      // Qr, dOr here, QT, dOT from warp 2: each half of a slot is loaded as soon as its consumer released it.
      tf32_bwd_load_units<kD, kBq, kStages, L, kBk, 1>(units, hk, G, b, base, &tm_qr, &tm_dor, &tm_qt, &tm_dot, full0,
                                                       empty0);
    } else if (warp == 2 && lane == 0 && units.n > 0) {
      tf32_bwd_load_units<kD, kBq, kStages, L, kBk, 2>(units, hk, G, b, base, &tm_qr, &tm_dor, &tm_qt, &tm_dot, fullb0,
                                                       emptyb0);
    } else if (warp == 1) {
      tf32_bwd_rows_warp<kBk, kBq, kStages, false>(rows_f, rows_i, lane, p, a.dsum, units, hk, G, qlim, klim, j0, b,
                                                   full0, empty0);
    } else if (DET && warp == 3) {
      // The ordered dQ reduction: unit n's consumer (n % 2) adds both halves between barrier 2 + n % 2 (this warp +
      // that consumer) and barrier 9 + n % 2.
      const Units prev(sh, mk, qlim, klim, j0 - kBk);
      tf32_dq_det_warp<kBk, kBq>(units, prev, static_cast<int>(blockIdx.x), a.dq_sem, a.sem_tiles, sh.H, hk, G, b,
                                 lane, [](int n) {
                                   named_bar_sync_unaligned(2 + n % 2, 128 + 32);
                                   named_bar_sync_unaligned(9 + n % 2, 128 + 32);
                                 });
    }
    return;
  }

  // ---- Consumer warpgroups: units c, c + 2, ... on stage slot c; all 64 keys ----
  setmaxnreg_inc<kConsumerRegs>();
  const int c = wg - 1;
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const float sl2 = CAP ? 1.f : p.score.scale * 1.4426950408889634f;  // CAP: S^T capped in base-2 units first
  const int key_l[2] = {16 * warp + g, 16 * warp + g + 8};  // this thread's accumulator rows (keys in the tile)
  const int64_t key_g[2] = {j0 + key_l[0], j0 + key_l[1]};
  const bool key_ok[2] = {key_g[0] < klim && key_visible(mk, sh, b, key_g[0]),
                          key_g[1] < klim && key_visible(mk, sh, b, key_g[1])};
  uint32_t drop_key[2] = {0u, 0u};  // DROP: the Philox key (unit_keep_bits)
  if constexpr (DROP) dropout_key(p.dropout, drop_key);
  Tf32BwdDense<kBq> dn(p, key_g);  // DENSE: the unit's mask bytes and bias values (unused otherwise)

  float dv[64], dk[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) dv[i] = dk[i] = 0.f;

  const uint32_t k_tile = base + L::kK, v_tile = base + L::kV;
  const uint32_t ds_c = base + L::kDs + c * L::kDsBytes;
  uint8_t* const ds_gen = gbase + L::kDs + c * L::kDsBytes;
  if (units.n > 0) {
    mbar_wait(kv_full, 0);
    // K and V (raw float32 from TMA) to tf32 in place, half each consumer, for the async proxy (S^T, dP^T) and
    // for the K^T fragments of dQ^T.
    round_tf32_smem(k_tile + c * (L::kKBytes / 2), L::kKBytes / 2, tid, 128);
    round_tf32_smem(v_tile + c * (L::kKBytes / 2), L::kKBytes / 2, tid, 128);
    fence_proxy_async();
  }
  named_bar_sync(5, 256);  // both consumers (uniform: units.n is the CTA's)

  for (int n = c; n < units.n; n += 2) {
    const int s = c;  // n % kStages
    const int64_t h = hk * G + n / units.nq, i0 = static_cast<int64_t>(units.qb_lo + n % units.nq) * kBq;
    const uint32_t st = base + L::kStage + s * L::kStageBytes;
    // DROP: the unit's keep bits, bit x for element x of S^T (keys j0 + key_l[h2], queries i0 + 8j + 2t + e),
    // drawn before the wait for the unit's tiles.
    uint32_t kbits = 0u;
    if constexpr (DROP) kbits = unit_keep_bits<4>(drop_key, p.dropout, h, b, j0 + 16 * warp, i0, g, t);
    if constexpr (DENSE) dn.load(p, b, h, i0, t);  // before the wait for the unit's tiles
    mbar_wait(full0 + 8 * s, (n / kStages) & 1);

    // S^T = K Q^T and dP^T = V dO^T [64 keys x 32 queries] over d in k8 steps (step k: panel k / 4, byte
    // (k % 4) * 32 of each 128-byte row); one commit group each.
    float sacc[16], dpacc[16];
    wgmma_fence();
    auto product = [&](float(&acc)[16], uint32_t a_tile, uint32_t b_tile) {  // acc = A B^T, its own commit group
#pragma unroll
      for (int k = 0; k < kD / 8; ++k)
        wgmma_tf32_ss_m64n32k8(acc, tf32_bwd_desc(a_tile, (k / 4) * kBk * 128 + (k % 4) * 32, 16),
                               tf32_bwd_desc(b_tile, (k / 4) * kBq * 128 + (k % 4) * 32, 16), k > 0);
      wgmma_commit();
    };
    product(sacc, k_tile, st + L::kQr);
    product(dpacc, v_tile, st + L::kDOr);
    wgmma_wait<1>();
    fence_regs(sacc);

    // P^T in place (tf32_bwd_p_pass), with the index rule unless the whole 64 x 32 tile is visible (tile_in_range:
    // the rows warp's whole-group word cost this kernel 3-5 %, see tf32_bwd_rows_warp).
    // DENSE: the bias added first (the P pass then scales by 1), P = 0 after it where the dense mask hides the element
    // or the bias is -inf (as the head-dim-64 kernel).
    const bool need_mask = !tile_in_range(mk, i0, kBq, j0, kBk, qlim, klim);
    if constexpr (CAP) Tf32BwdCap(p.score).cap(sacc);
    if constexpr (DENSE) dn.add_bias(sacc, sl2);
    const float sl2_p = DENSE ? 1.f : sl2;
    if (need_mask)
      tf32_bwd_p_pass<true, kBq>(sacc, rows_f, rows_i, s, sl2_p, t, key_l, key_ok);
    else
      tf32_bwd_p_pass<false, kBq>(sacc, rows_f, rows_i, s, sl2_p, t, key_l, key_ok);
    if constexpr (DENSE) dn.hide(sacc);
    wgmma_wait<0>();
    fence_regs(dpacc);

    // dV += P^T dO: A = P^T's fragments, B = dOT [128 d x 32 q] (one panel; k8 step kk at byte kk * 32).
    uint32_t pa[kBq / 8][4], da[kBq / 8][4];
    tf32_bwd_pack_p<kBq, DROP>(pa, sacc, kbits, p.dropout.keep_scale);  // DROP: P Z
    mbar_wait(fullb0 + 8 * s, (n / kStages) & 1);  // QT, dOT
    tf32_bwd_unit_product<kD, kBq>(dv, pa, st + L::kDOT);

    // dS^T = P^T (dP^T - dsum): A fragments of dK (rounded) and dS [32 q][64 keys] for dQ^T. DENSE: dbias too.
    if constexpr (DENSE)
      tf32_bwd_dense_ds_unit<kBq, FEAT>(dpacc, sacc, da, ds_gen, rows_f, s, t, key_l, key_g, dn, p, b, h, i0);
    else
      tf32_bwd_ds<kBq, FEAT>(dpacc, sacc, da, ds_gen, rows_f, s, t, key_l, CAP ? Tf32BwdCap(p.score).inv_cap_log2 : 0.f,
                             kbits, p.dropout.keep_scale);
    fence_proxy_async();
    mbar_arrive(empty0 + 8 * s);  // Qr, dOr (S^T, dP^T waited for) and the rows: read

    // dK += dS^T Q: B = QT [128 d x 32 q].
    tf32_bwd_unit_product<kD, kBq>(dk, da, st + L::kQT);
    // BULK: the previous unit's second half was read from the staging block before this unit's first is
    // written there (thread 0 issued it and waits; the barrier tells the warpgroup).
    if constexpr (BULK) {
      if (tid == 0) bulk_wait_read<0>();
    }
    named_bar_sync(7 + c, 128);  // the warpgroup's dS stores before dQ^T reads them

    // dQ^T = K^T dS^T [128 d x 32 q] over the 64 keys, in two halves of 64 d: A = K^T's m64k8 fragments of k8
    // step k (keys 8k .. 8k + 7), a[x] = K[8k + t + 4 (x >> 1)][64 m + key_l[x & 1]] from the rounded K tile.
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      uint32_t af[kBk / 8][4];
      if constexpr (KT_ROWS) {
#pragma unroll
        for (int x = 0; x < 4; ++x)
          tf32_kt_frags<0>(af, x, k_tile + swz128_offset_f32(kBk, t + 4 * (x >> 1), 64 * m + key_l[x & 1]));
      } else {
#pragma unroll
        for (int k = 0; k < kBk / 8; ++k) tf32_t_frag<kBk>(af[k], k_tile, m, k, t, key_l);
      }
      float dqt[16];
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < kBk / 8; ++k)
        wgmma_tf32_rs_m64n32k8(dqt, af[k], tf32_bwd_desc(ds_c, (k / 4) * kBq * 128 + (k % 4) * 32, 16), k > 0);
      wgmma_commit();
      wgmma_wait<0>();  // (m = 0: dV and dK too, committed before)
      fence_regs(dqt);
      fence_regs(af);
      if (m == 0) {
        fence_regs(dv);
        fence_regs(dk);
        fence_regs(pa);
        fence_regs(da);
        mbar_arrive(emptyb0 + 8 * s);  // QT, dOT read
      }
      if constexpr (DET) {  // this unit's turn in the block's order (the warp above), for both halves
        if (m == 0) named_bar_sync_unaligned(2 + c, 128 + 32);
      }
      if constexpr (DQ == DqAdd::kScalar) {
        // dQacc[b, h, i0 + q, 64 m + d] += dQ^T[d][q].
        tf32_dq_add_scalar(a.dq_acc + ((static_cast<int64_t>(b) * sh.H + h) * sh.Tq + i0) * kD, kD, 64 * m, dqt,
                           sh.Tq - i0, t, key_l);
      } else {
        // Sub-block m of block (b, h, i0 / 32), fragment order: float4 j * 128 + tid = dqt[4j .. 4j + 3] (rows
        // past Tq land in the padding, which the conversion skips).
        float* blk = a.dq_acc + ((static_cast<int64_t>(b) * sh.H + h) * a.dq_rows + i0) * kD + m * (kBq * 64);
        if constexpr (DQ == DqAdd::kVec4) {
          float4* mine = reinterpret_cast<float4*>(blk) + tid;
#pragma unroll
          for (int j = 0; j < kBq / 8; ++j)
            atomicAdd(mine + j * 128, make_float4(dqt[4 * j], dqt[4 * j + 1], dqt[4 * j + 2], dqt[4 * j + 3]));
        } else {
          static_assert(L::kDqBytes == 32 * 64 * 4, "one m64n32 dQ^T half");
          if (m == 1) {  // the first half was read from the staging block before the second is written there
            if (tid == 0) bulk_wait_read<0>();
            named_bar_sync(7 + c, 128);
          }
          tf32_dq_add_bulk([&] { return blk; }, base + L::kDq + c * L::kDqBytes, dqt, tid, 7 + c);
        }
      }
      if constexpr (DET) {
        if (m == 1) named_bar_sync_unaligned(9 + c, 128 + 32);
      }
    }
  }

  if constexpr (BULK) {
    if (tid == 0) bulk_wait<0>();  // the copy engine's last adds done before the CTA (its shared memory) ends
  }
  // dK, dV summed over the two consumers through the stage slots (every unit done: barrier 6 after both loops),
  // in fragment order: float4 i * 128 + tid holds dk / dv[4i .. 4i + 3] of consumer-1 thread tid.
  named_bar_sync(6, 256);
  float4* red = reinterpret_cast<float4*>(gbase + L::kReduce);
  if (c == 1) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      red[i * 128 + tid] = make_float4(dk[4 * i], dk[4 * i + 1], dk[4 * i + 2], dk[4 * i + 3]);
      red[(16 + i) * 128 + tid] = make_float4(dv[4 * i], dv[4 * i + 1], dv[4 * i + 2], dv[4 * i + 3]);
    }
  }
  named_bar_sync(6, 256);
  if (c == 1) return;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const float4 x = red[i * 128 + tid], y = red[(16 + i) * 128 + tid];
    dk[4 * i] += x.x, dk[4 * i + 1] += x.y, dk[4 * i + 2] += x.z, dk[4 * i + 3] += x.w;
    dv[4 * i] += y.x, dv[4 * i + 1] += y.y, dv[4 * i + 2] += y.z, dv[4 * i + 3] += y.w;
  }
  // Epilogue: dK = scale dK_acc, dV (tf32_bwd_store_dkdv).
  tf32_bwd_store_dkdv<kD, PAD>(p, dk, dv, key_g, hk, b, t);
}

constexpr int kPrepassThreads = 256;
// Pre-pass for Q and dO at head dim 128 (as flash_bwd_sm90_tf32.cu's at 64): query tile blockIdx.x (rows i0 .. i0 +
// 31) of head blockIdx.y, batch blockIdx.z. qr / dor [B, H, tq_pad, 128] = tf32(Q) / tf32(dO) (rows past Tq: 0);
// qt / dot [B, H, 128, tq_pad]: position i0 + u of row d = tf32(Q[i0 + tf32_kperm_inv(u)][d]) (0 past Tq).
__global__ void __launch_bounds__(kPrepassThreads)
    tf32_bwd_d128_prepass_kernel(const __grid_constant__ FlashBwdParams p, float* __restrict__ qr,
                                 float* __restrict__ dor, float* __restrict__ qt, float* __restrict__ dot,
                                 int64_t tq_pad) {
  __shared__ float sm[2][kBq][kD + 1];  // Q, dO; + 1: the transposed reads hit 32 banks
  const AttnShape& sh = p.shape;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kBq;
  const int h = blockIdx.y, b = blockIdx.z;
  const int64_t bh = static_cast<int64_t>(b) * sh.H + h;
  const float* q = static_cast<const float*>(p.q) + b * sh.q_stride[0] + h * sh.q_stride[2];
  const float* d_o = static_cast<const float*>(p.d_o) + b * sh.o_stride[0] + h * sh.o_stride[2];
  tf32_prepass_load_rows<kPrepassThreads>(q, sh.q_stride[1], i0, sh.Tq, sh.D, sm[0], qr + (bh * tq_pad + i0) * kD);
  tf32_prepass_load_rows<kPrepassThreads>(d_o, sh.o_stride[1], i0, sh.Tq, sh.Dv, sm[1], dor + (bh * tq_pad + i0) * kD);
  __syncthreads();
  tf32_prepass_store_transposed<kPrepassThreads, true>(sm[0], qt + bh * kD * tq_pad + i0, tq_pad);
  tf32_prepass_store_transposed<kPrepassThreads, true>(sm[1], dot + bh * kD * tq_pad + i0, tq_pad);
}

std::atomic<int64_t> g_launches{0};
std::atomic<int> g_override{-1};

// The mode: 0 off, 1 + i on with dQ mode kDqModes[i]. The override (set_bwd_tf32_d128_enabled: 0 off, 1 ..
// kDqModeCount, -1 back to the rule) first; else on with kDefaultDqMode where the head-dim-64 Hopper TF32 backward
// is on (bwd_tf32_enabled: off with TF_FLASHATTN_SM90_TF32_BWD=0 or TF_FLASHATTN_SM90=0). Read once per call.
int d128_mode() {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return o <= kDqModeCount ? o : 0;
  return bwd_tf32_enabled() ? 1 + kDefaultDqMode : 0;
}

// The kernel of dQ mode i and its shared memory.
struct D128Launch {
  void (*kernel)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const CUtensorMap, const CUtensorMap,
                 const CUtensorMap, const Tf32BwdD128Args);
  int smem;
};
template <int I, bool DET = false, int FEAT = 0>
D128Launch d128_launch(bool padded) {
  return {padded ? flash_bwd_sm90_tf32_d128_kernel<I, true, DET, FEAT>
                 : flash_bwd_sm90_tf32_d128_kernel<I, false, DET, FEAT>,
          Smem<kDqModes[I] == DqAdd::kBulk>::kAlloc};
}
constexpr D128Launch (*kD128Launches[])(bool) = {d128_launch<0>, d128_launch<1>, d128_launch<2>, d128_launch<3>};
// The FEAT instantiations (feat: tf32_bwd_feat's bits) of dQ mode I (kDefaultDqMode, or kDetDqMode with DET).
template <int I, bool DET>
D128Launch d128_feat_launch(int feat, bool padded) {
  return tf32_feat_switch<true>(feat, [&](auto f) { return d128_launch<I, DET, decltype(f)::value>(padded); });
}
static_assert(sizeof(kD128Launches) / sizeof(kD128Launches[0]) == kDqModeCount, "one launch per dQ mode");
}  // namespace

void set_bwd_tf32_d128_enabled(int mode) { g_override.store(mode, std::memory_order_relaxed); }
int64_t bwd_tf32_d128_launches() { return g_launches.load(std::memory_order_relaxed); }

size_t bwd_tf32_d128_workspace_floats(const FlashBwdParams& p) {
  const AttnShape& s = p.shape;
  if (p.dtype != DType::kFloat32 || !p.allow_tf32 || !tf32_head_dims_apply(s, kD) || d128_mode() == 0 ||
      !enabled() || !current_device_is_sm90())
    return 0;
  return static_cast<size_t>(prepass_layout(s, p.deterministic).floats);
}

bool bwd_tf32_d128_applies(const FlashBwdParams& p) {
  const AttnShape& s = p.shape;
  if (bwd_tf32_d128_workspace_floats(p) == 0 || !p.workspace || p.workspace_bytes == 0) return false;
  if (!tf32_bwd_shape_fits(s, kBq)) return false;
  // Index masks, soft-cap and dropout; a dense mask, bias / dbias not with dropout, while bwd_tf32_dense_enabled.
  if (!tf32_bwd_feat_applies(p)) return false;
  if (!tf32_bwd_strides_apply(p)) return false;
  return true;
}

cudaError_t bwd_tf32_d128(const FlashBwdParams& p, cudaStream_t stream) {
  const AttnShape& s = p.shape;
  const int mode = d128_mode();
  if (mode == 0) return cudaErrorNotSupported;
  const bool det = p.deterministic, pad = runs_padded(s);
  if (!tf32_bwd_feat_applies(p)) return cudaErrorNotSupported;
  const int feat = tf32_bwd_feat(p);
  // Soft-cap, dropout, a dense mask / bias / dbias: kDefaultDqMode's FEAT instantiations (kDetDqMode's in deterministic mode), whatever mode is set.
  const DqAdd dq_mode = kDqModes[det ? kDetDqMode : feat ? kDefaultDqMode : mode - 1];
  const D128Launch launch = det    ? d128_feat_launch<kDetDqMode, true>(feat, pad)
                            : feat ? d128_feat_launch<kDefaultDqMode, false>(feat, pad)
                                   : kD128Launches[mode - 1](pad);
  const PrepassLayout w = prepass_layout(s, det);
  const Tf32BwdWorkspaceParts ws = bwd_tf32_workspace_parts(p);
  const bool blocked = dq_mode != DqAdd::kScalar;
  const int64_t acc_rows = tf32_dq_acc_rows<kBq>(ws, s, blocked);
  if (!ws.dsum || !ws.dq_acc || !ws.extra || !aligned16(ws.extra) || !aligned16(ws.dq_acc) || acc_rows == 0)
    return cudaErrorNotSupported;
  if (p.workspace_bytes < static_cast<size_t>(ws.extra - p.workspace + w.floats) * sizeof(float))
    return cudaErrorNotSupported;
  float* qr = ws.extra + w.qr;
  float* dor = ws.extra + w.dor;
  float* qt = ws.extra + w.qt;
  float* dot = ws.extra + w.dot;
  CUtensorMap tk, tv, tqr, tdor, tqt, tdot;
  if (!tma_map_rows_f32(&tk, p.k, s.B, s.Tk, s.Hkv, s.D, s.k_stride, kBk) ||
      !tma_map_rows_f32(&tv, p.v, s.B, s.Tk, s.Hkv, s.Dv, s.v_stride, kBk) ||
      !tma_map_ws_f32(&tqr, qr, s.B, s.H, w.tq_pad, kD, kBq) ||
      !tma_map_ws_f32(&tdor, dor, s.B, s.H, w.tq_pad, kD, kBq) ||
      !tma_map_ws_f32(&tqt, qt, s.B, s.H, kD, w.tq_pad, kD) || !tma_map_ws_f32(&tdot, dot, s.B, s.H, kD, w.tq_pad, kD))
    return cudaErrorNotSupported;
  cudaError_t err = set_dynamic_smem(launch.kernel, launch.smem);
  if (err != cudaSuccess) return cudaErrorNotSupported;
  // From here on no fallback: dbias zeroed (DENSE stores only the elements of the units it visits).
  if ((err = tf32_bwd_zero_dbias(p, stream)) != cudaSuccess) return err;
  if ((err = bwd_dsum_tf32(p, ws.dsum, stream)) != cudaSuccess) return err;
  if ((err = tf32_dq_acc_zero<kD>(s, ws.dq_acc, acc_rows, stream)) != cudaSuccess) return err;
  int* const sem = reinterpret_cast<int*>(ws.extra + w.sem);
  if (det && (err = cudaMemsetAsync(sem, 0, static_cast<size_t>(s.B * s.H * (w.tq_pad / kBq)) * sizeof(int), stream)) !=
                 cudaSuccess)
    return err;
  tf32_bwd_d128_prepass_kernel<<<dim3(static_cast<unsigned>(w.tq_pad / kBq), static_cast<unsigned>(s.H),
                                      static_cast<unsigned>(s.B)),
                                 kPrepassThreads, 0, stream>>>(p, qr, dor, qt, dot, w.tq_pad);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  const Tf32BwdD128Args args{p, ws.dsum, ws.dq_acc, acc_rows, det ? sem : nullptr, w.tq_pad / kBq};
  const dim3 grid(static_cast<unsigned>((s.Tk + kBk - 1) / kBk), static_cast<unsigned>(s.Hkv),
                  static_cast<unsigned>(s.B));
  launch.kernel<<<grid, kThreads, launch.smem, stream>>>(tk, tv, tqr, tdor, tqt, tdot, args);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  err = tf32_dq_acc_finish<kD>(p, ws.dq_acc, acc_rows, blocked, stream);
  if (err == cudaSuccess) g_launches.fetch_add(1, std::memory_order_relaxed);
  return err;
}

}  // namespace sm90
}  // namespace cuda
}  // namespace flashattn
