// Hopper-native FlashAttention backward for FLOAT32 inputs on TF32 tensor cores (sm_90a only; wgmma .tf32,
// TMA, warp specialization), for calls that allow TF32 (FlashBwdParams::allow_tf32). On by default on compute
// capability 9.0 where it applies; TF_FLASHATTN_SM90_TF32_BWD=0 (read once; or TF_FLASHATTN_SM90=0) or the
// harness's set_sm90_tf32_bwd(0) turn it off, 1 .. 7 pick variant 0 .. 6 (below). Everything it does not take
// runs sm80/flash_bwd_tf32.cu (mma.sync m16n8k8 .tf32). Checked on the H200 (sessions 35 and 36, 2026-12-04;
// benchmarks/tune_tf32_bwd.py --sm90, raw results/2026-12-04-h200-sm90tf32bwd/ and 2026-12-04-h200-s36/):
// numerics 13 / 13 cases for each of the seven variants (D = 64 harness cases without other options, ragged
// tiles, GQA / MQA, causal in both alignments with rows that see no key, Tq = 1, d_lse), each launched where
// expected, compute-sanitizer memcheck clean (every variant), racecheck clean (variants 1 and 3); variant 3,
// the default, 1.28x-1.63x sm80's TF32 backward at 16k tokens (T = 4096: 181.5 TFLOP/s, causal 164.2-173.8;
// T = 16384: 194.6 / 204.3), 1.06x-1.21x variant 1 (the default before it). Through TensorFlow with variant
// 3 dispatched from flash_cuda_dispatch.cu: GPU tests 407 + 13 passed; the float32 backward at head dim 64
// 2.23x-4.25x Keras under XLA from T = 1024 (benchmarks/RESULTS.md, float32 (o)).
//
// Scope (bwd_tf32_applies): float32 with allow_tf32, D == Dv == 64, and any other D, Dv that are multiples of 4 with
// padded_head_dim 64 (padded up: tf32_head_dims_apply, sm90_tf32_bwd.cuh), the index masks (causal with any
// causal_offset, sliding window, query / key lengths, [B, Tq] / [B, Tk] validity masks; session 36, checked on
// the H200: 21 / 21 harness cases per variant, memcheck / racecheck, GPU tests through TensorFlow 407 + 13),
// GQA (H % Hkv == 0), the softmax scale, d_lse (it is in dsum), soft-cap and dropout (the FEAT instantiations of
// kDefaultVariant and kDetVariant, whatever variant is set, sm90_tf32.cuh's Tf32Feat: S^T capped before the P pass,
// dS^T times 1 - tanh^2, Tf32BwdCap; dropout's keep bits per unit by unit_keep_bits, dV from P Z, dS = P (dP Z -
// dsum), tf32_bwd_pack_p / tf32_bwd_ds); a dense mask, bias and dbias, not with dropout (the kTf32Dense
// instantiations, alone or with soft-cap: sm90_tf32_bwd.cuh's Tf32BwdDense, tf32_bwd_dense_ds; on unless
// bwd_tf32_dense_enabled says off); deterministic mode by an ordered dQ reduction
// (kDetVariant below; sm90_tf32_bwd.cuh, tf32_dq_det_warp).
// Strides multiples of 4 elements (TMA's 16 bytes) and 16-byte aligned bases (tf32_bwd_strides_apply).
// The pre-pass's room in the workspace is counted only on compute capability 9.0 (bwd_tf32_workspace_floats),
// and the launch checks that FlashBwdParams::workspace_bytes holds it (else sm80 runs).
//
// Why a pre-pass: wgmma .tf32 reads both shared-memory operands K-major only (PTX ISA: no transpose for
// .tf32). The backward's five products contract over three different indices:
//   S^T  = K_c Q^T     [keys x queries], over d      A = K [key][d]         B = Q [q][d]
//   dP^T = V_c dO^T    [keys x queries], over d      A = V [key][d]         B = dO [q][d]
//   dV  += P^T dO      [keys x d], over queries      A = P^T (registers)    B = dO^T [d][q]
//   dK  += dS^T Q      [keys x d], over queries      A = dS^T (registers)   B = Q^T [d][q]
//   dQ^T = K_c^T dS^T  [d x queries], over keys      A = K^T [d][key]       B = dS [q][key]
// so Q^T, dO^T and K^T must exist in memory, K-major. Two pre-pass kernels write them into the workspace
// (flash_bwd_workspace_bytes adds their room when this kernel may run), rounded to tf32 (cvt.rna, as every
// operand of sm80's TF32 kernels), together with rounded copies of Q and dO (Qr, dOr: the main kernel loads
// only rounded operands, except K and V, which each consumer rounds once per CTA). Q^T and
// dO^T hold the queries of each 8-query group in tf32_kperm's order (sm90_tf32.cuh), so that the S^T / dS^T
// accumulators are the A fragments of dV / dK as they are (pack_p_step). dQ^T rather than dQ because wgmma's
// M is 64 and a unit has 32 queries. benchmarks/sm90_tf32_bwd_model.py checks these layouts on the host (one
// consumer's unit through the TMA / descriptor / fragment models of sm90_tf32_model.py, variant 3's fragment
// order included, with mutants that must fail).
//
// Taken by flash_cuda_dispatch.cu's flash_bwd_impl (after the 16-bit Hopper backward's check), which falls
// back to sm80's bwd() on cudaErrorNotSupported. bwd_tf32 runs sm80's dsum pre-pass itself (bwd_dsum_tf32).
// Workspace (after sm80's TF32 parts, dsum and the dQ accumulator: bwd_tf32_workspace_floats), float32:
//   Qr, dOr [B, H, tq_pad, 64]  rounded Q / dO, rows past Tq zero           (tq_pad = Tq rounded up to 32)
//   QT, dOT [B, H, 64, tq_pad]  rounded, transposed, queries in tf32_kperm order within groups of 8, zero past Tq
//   KT      [B, Hkv, 64, tk_pad] rounded, transposed K, zero past Tk         (tk_pad = Tk rounded up to 128)
// The dQ accumulator is sm80's TF32 one ([B, H, Tq, 64] row-major, zeroed here; variant 3: blocks of 32 queries
// in fragment order over [B, H, dq_rows], tf32_dq_frag_convert_kernel), converted by sm80's
// bwd_dq_convert_tf32 into dq = scale * acc; dsum = rowsum(dO O) - d_lse comes from sm80's pre-pass
// (flash_bwd.cu), lse2 = log2e lse is computed by the producer.
//
// Design (flash_bwd_sm90.cu's D = 64 kernel, in float32):
//   Grid (ceil(Tk / 128), Hkv, B); CTA = 3 warpgroups. Warpgroup 0 produces (setmaxnreg.dec 24): thread 0
//   loads K, V (raw) and KT once (kv_full), then per unit (query head of the group x 32-query tile that sees
//   the key tile: Units, from the causal / window limits and the batch's lengths) Qr, dOr, QT, dOT into a
//   kStages ring (full[s]); warp 1 writes the unit's lse2 / dsum rows, each row's visible keys [kb, ke)
//   (row_info's rule, relative to the tile; empty for a row past the query length or off in the [B, Tq] mask)
//   and the unit's whole 16-key groups (tf32_bwd_rows_warp), and arrives on full[s] too. Warpgroups 1 and 2 consume
//   (setmaxnreg.inc 240); consumer c owns keys 64c .. 64c + 63: it rounds its rows of K and V in shared
//   memory once, then per unit
//     S^T, dP^T    8 wgmma m64n32k8 SS each (two commit groups), P^T = 2^(S^T scale log2e - lse2) under dP^T
//                  (where a warp's 16 keys x 32 queries are not all visible, tf32_bwd_needs_mask: P = 0 by
//                  selection outside the row's [kb, ke) or where the key is past the key length or off in the
//                  [B, Tk] mask, key_ok)
//     dV += P^T dO 4 wgmma m64n64k8 RS (A = pack_p_step of the S^T accumulators, B = dOT)
//     dS^T = P^T (dP^T - dsum), rounded, to registers (A of dK) and to shared memory as dS [32 q][64 keys]
//     dK += dS^T Q 4 wgmma m64n64k8 RS (B = QT)
//     (named barrier 5 + c: the warpgroup's dS stores, fenced for the async proxy, before dQ^T)
//     dQ^T = K_c^T dS^T  8 wgmma m64n32k8 SS (A = KT's panels of this consumer's keys, B = dS)
//     wait for all; release the stage (empty[s]); dQacc[q][d] += dQ^T[d][q] (16 atomics per thread)
//   Epilogue: dK * scale and dV (float2 stores; keys past Tk skipped; CTAs with no unit write zeros).
//   Variants (kVariantTab): 0 as above; 1 S^T and dP^T by wgmma RS, K_c's and V_c's A fragments
//   (64 registers) loaded from shared memory and rounded once per CTA instead of the in-place rounding, which
//   halves those products' shared-memory reads (B only); 2 as 1 with a 3-stage ring (210.9 KiB); 3 (the default)
//   as 1 with dQ^T added by the copy engine's bulk reduce-add from a staging block; 4
//   as 1 with the next unit's S^T / dP^T issued before this unit's dQ adds, dP^T running under them; 5, 6: 3 with
//   4's order, 3 with 3 stages.
//   Shared memory (float32, 128-byte swizzle in panels of 32 floats, swz128_offset_f32):
//     K, V [128 keys x 64]: 2 panels of 16 KiB each (32 KiB each); KT [64 d x 128 keys]: 4 panels of 8 KiB
//     per stage: Qr, dOr [32 x 64] (2 panels of 4 KiB: 8 KiB each), QT, dOT [64 x 32] (8 KiB each): 32 KiB
//     dS per consumer [32 q x 64 keys]: 2 panels of 4 KiB (8 KiB); rows [kStages][5][32] words; barriers
//   = 96 + 32 kStages + 16 KiB + 640 kStages + 8 (1 + 2 kStages) B (kStages = 2: 177.3 KiB; + 1 KiB alignment
//   slack); variants 3, 5, 6 add two 8 KiB dQ staging blocks.
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cc/kernels/common/flash_cuda_common.cuh"  // fast_exp2, to_tf32
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

constexpr int kD = 64;          // head dim (D == Dv)
constexpr int kBk = 128;        // keys per CTA (64 per consumer)
constexpr int kBq = 32;         // queries per unit
constexpr int kThreads = 384;   // producer warpgroup + 2 consumer warpgroups
constexpr int kProducerRegs = 24;
constexpr int kConsumerRegs = 240;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 65536, "register file");

// ST: the Qr / dOr / QT / dOT / rows ring's depth (kStages). DQB: the dQ staging blocks of the bulk
// reduce-add (variant 3), after the barriers.
template <int ST, bool DQB = false>
struct Smem {
  static constexpr int kStages = ST;
  static constexpr int kKBytes = kBk * kD * 4;    // K or V [128 x 64]: 2 panels of 128 rows
  static constexpr int kKTBytes = kD * kBk * 4;   // KT [64 x 128]: 4 panels of 64 rows
  static constexpr int kQBytes = kBq * kD * 4;    // Qr or dOr [32 x 64]: 2 panels of 32 rows
  static constexpr int kQTBytes = kD * kBq * 4;   // QT or dOT [64 x 32]: 1 panel of 64 rows
  static constexpr int kStageBytes = 2 * kQBytes + 2 * kQTBytes;
  static constexpr int kDsBytes = kBq * 64 * 4;   // dS of one consumer [32 q x 64 keys]: 2 panels
  static constexpr int kK = 0;
  static constexpr int kV = kK + kKBytes;
  static constexpr int kKT = kV + kKBytes;
  static constexpr int kStage = kKT + kKTBytes;   // + s * kStageBytes: Qr, dOr, QT, dOT
  static constexpr int kQr = 0, kDOr = kQBytes, kQT = 2 * kQBytes, kDOT = 2 * kQBytes + kQTBytes;
  static constexpr int kDs = kStage + kStages * kStageBytes;  // + c * kDsBytes
  // [kStages][kTf32BwdRowWords][kBq] 4-byte words: lse2, dsum (float), the row's visible keys [kb, ke) (int, from
  // the tile's j0), the unit's whole key groups (tf32_bwd_rows_warp)
  static constexpr int kRows = kDs + 2 * kDsBytes;
  static constexpr int kBars = kRows + kStages * kTf32BwdRowWords * kBq * 4;  // kv_full, full[kStages], empty[kStages]
  static constexpr int kBarsEnd = kBars + 8 * (1 + 2 * kStages);
  static constexpr int kDqBytes = kBq * kD * 4;                // one consumer's dQ^T block [64 d x 32 q]
  static constexpr int kDq = (kBarsEnd + 127) & ~127;          // DQB: + c * kDqBytes, fragment order
  static constexpr int kBytes = DQB ? kDq + 2 * kDqBytes : kBarsEnd;
  static constexpr int kAlloc = kBytes + 1024;                 // slack to align the base to 1024
};
static_assert(Smem<2>::kKT % 1024 == 0 && Smem<2>::kStage % 1024 == 0 && Smem<2>::kStageBytes % 1024 == 0 &&
                  Smem<2>::kDs % 1024 == 0 && Smem<3>::kDs % 1024 == 0 && Smem<2>::kDsBytes % 1024 == 0 &&
                  Smem<2>::kQBytes % 1024 == 0,
              "tiles 1024-byte aligned (the swizzle is computed from the address)");
static_assert(Smem<3, true>::kAlloc <= 227 * 1024, "over the opt-in shared memory");

// The kernel's variants (TF_FLASHATTN_SM90_TF32_BWD = 1 + variant, or the harness's set_sm90_tf32_bwd):
// kregs, S^T / dP^T by wgmma RS with K_c's and V_c's A fragments loaded into registers once per CTA (else
// SS, K and V rounded in shared memory); stages, the ring's depth; dqbulk, each consumer's dQ^T block of a unit
// staged in shared memory and added to the accumulator by one bulk reduce-add of the copy engine
// (cp.reduce.async.bulk .add.f32, 8 KiB; the accumulator then in blocks of 32 queries in fragment order,
// converted by tf32_dq_frag_convert_kernel) instead of 16 scalar atomics per thread (variant 3).
// rotate: the next unit's S^T and dP^T issued before this unit's dQ adds, dP^T left running under the adds and
// the next unit's P pass (variant 4). Variants 5 and 6: 3 with rotate, 3 with a 3-stage ring (227.0 KiB with the 1 KiB
// alignment slack: exactly the opt-in limit since the rows' fifth word; Smem's static_assert above catches any growth).
struct Tf32BwdVariant {
  bool kregs;
  int stages;
  bool dqbulk;
  bool rotate;
};
constexpr Tf32BwdVariant kVariantTab[] = {
    {false, 2, false, false}, {true, 2, false, false}, {true, 3, false, false}, {true, 2, true, false},
    {true, 2, false, true},   {true, 2, true, true},   {true, 3, true, false}};
constexpr int kVariants = sizeof(kVariantTab) / sizeof(kVariantTab[0]);
// The default: variant 3. On the H200 (tune_tf32_bwd.py --sm90, head dim 64, 16k tokens, T = 1024 / 4096 /
// 16384, causal or not; two runs, results/2026-12-04-h200-s36/tf32tune_run*.out): variant 1 1.06x-1.13x variant
// 0; 3 1.06x-1.21x 1 (the bulk dQ adds); 2 (3 stages) 0.97x-1.01x 1; 4 (rotate) 0.93x-1.02x 1; 6 (3 + 3 stages)
// 0.97x-1.04x 3 and 5 (3 + rotate) 0.98x-1.01x 3: inside the runs' spread (variant 3 at T = 4096 causal moved
// 6 % between the two runs), so the one of the best with the least shared memory.
constexpr int kDefaultVariant = 3;

struct Tf32BwdSm90Args {
  FlashBwdParams p;
  const float* dsum;  // [B, H, Tq]
  float* dq_acc;      // [B, H, Tq, 64] row-major, zeroed; dqbulk: [B, H, dq_rows / 32] blocks of [32 x 64]
  int64_t dq_rows;    // dqbulk: rows per (b, h) in dq_acc (a multiple of 32, >= Tq)
  int* dq_sem;        // DET: [B, H, sem_tiles] ordered-reduction counters, zeroed (tf32_dq_det_warp)
  int64_t sem_tiles;  // DET: tq_pad / 32
};
// Deterministic mode (p.deterministic): variant 1's form (scalar atomics, no bulk reduce-add, which keeps no order)
// with the ordered dQ reduction (the DET instantiations, sm90_tf32_bwd.cuh's tf32_dq_det_warp), whatever variant is
// set; both consumers add to the same elements of a unit's block, consumer 0 first.
constexpr int kDetVariant = 1;
static_assert(!kVariantTab[kDetVariant].dqbulk && !kVariantTab[kDetVariant].rotate, "the ordered adds' form");

// The workspace's pre-pass part (header comment), offsets in floats from its start.
struct PrepassLayout {
  int64_t tq_pad = 0, tk_pad = 0;
  int64_t qr = 0, dor = 0, qt = 0, dot = 0, kt = 0, sem = 0, floats = 0;
};
// det: the ordered reduction's counters after K^T ([B, H, tq_pad / 32] ints, one float's room each).
PrepassLayout prepass_layout(const AttnShape& s, bool det) {
  PrepassLayout w;
  w.tq_pad = (s.Tq + kBq - 1) / kBq * kBq;
  w.tk_pad = (s.Tk + kBk - 1) / kBk * kBk;
  const int64_t nq = s.B * s.H * w.tq_pad * kD;  // a multiple of 2048 floats: every part stays 256-byte aligned
  w.qr = 0;
  w.dor = w.qr + nq;
  w.qt = w.dor + nq;
  w.dot = w.qt + nq;
  w.kt = w.dot + nq;
  w.sem = w.kt + s.B * s.Hkv * kD * w.tk_pad;
  w.floats = w.sem + (det ? s.B * s.H * (w.tq_pad / kBq) : 0);
  return w;
}

// The query tiles that key tile [j0, j0 + kBk) visits: [qb_lo, qb_lo + nq) for each of the G heads of its
// kv head (unit n = hl * nq + (qb - qb_lo)): the tiles of rows [lo, hi) that may see one of its keys below
// klim (the batch's key length; none when j0 >= klim), hi <= qlim (the query length). Causal / window right:
// row i sees a key >= j0 only if key_end(i) > j0, i.e. i >= j0 - off (causal), i >= j0 - off - window_right;
// window left: a key <= j_last only if key_begin(i) = i + off - window_left <= j_last.
using Units = Tf32BwdUnits<kBk, kBq>;  // sm90_tf32_bwd.cuh

// tm_k, tm_v: K, V [B, Tk, Hkv, 64] (boxes {32, 1, 128, 1}); tm_kt: KT (boxes {32 keys, 1, 64 rows, 1});
// tm_qr, tm_dor: Qr, dOr (boxes {32, 1, 32, 1}); tm_qt, tm_dot: QT, dOT (boxes {32 queries, 1, 64 rows, 1}).
// kVariantTab[VI]: KREGS, S^T / dP^T by wgmma RS with K_c's and V_c's A fragments loaded into registers once
// per CTA (rounded on the way), else SS with K_c / V_c rounded in shared memory; the ring's depth; DQB, dQ^T
// by bulk reduce-adds. PAD: a call padded up (D or Dv below 64; the epilogue skips the columns past them). DET:
// the ordered dQ reduction (deterministic mode, kDetVariant only). FEAT: Tf32Feat bits (soft-cap, dropout).
template <int VI, bool PAD, bool DET, int FEAT>
__global__ void __launch_bounds__(kThreads, 1)
    flash_bwd_sm90_tf32_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                               const __grid_constant__ CUtensorMap tm_kt, const __grid_constant__ CUtensorMap tm_qr,
                               const __grid_constant__ CUtensorMap tm_dor, const __grid_constant__ CUtensorMap tm_qt,
                               const __grid_constant__ CUtensorMap tm_dot, const __grid_constant__ Tf32BwdSm90Args a) {
  constexpr bool KREGS = kVariantTab[VI].kregs;
  constexpr int kStages = kVariantTab[VI].stages;
  constexpr bool DQB = kVariantTab[VI].dqbulk;
  constexpr bool ROT = kVariantTab[VI].rotate;
  constexpr bool CAP = (FEAT & kTf32Cap) != 0, DROP = (FEAT & kTf32Drop) != 0, DENSE = (FEAT & kTf32Dense) != 0;
  static_assert(!DENSE || (!DROP && !ROT), "a dense mask / bias: not with dropout; the variants without rotate");
  using L = Smem<kStages, DQB>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  uint8_t* const gbase = smem_raw + (base - smem_u32(smem_raw));  // generic pointer to base
  float* rows_f = reinterpret_cast<float*>(gbase + L::kRows);
  int* rows_i = reinterpret_cast<int*>(gbase + L::kRows);
  const uint32_t kv_full = base + L::kBars;
  const uint32_t full0 = kv_full + 8, empty0 = kv_full + 8 * (1 + kStages);

  const FlashBwdParams& p = a.p;
  const AttnShape& sh = p.shape;
  const MaskParams& mk = p.mask;
  const int hk = blockIdx.y, b = blockIdx.z;
  const int G = static_cast<int>(sh.H / sh.Hkv);
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kBk;
  const int64_t qlim = q_limit(mk, sh, b), klim = k_limit(mk, sh, b);  // the batch's lengths (Tq, Tk without)
  const Units units(sh, mk, qlim, klim, j0);
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    mbar_init(kv_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full0 + 8 * s, 1 + 32);  // thread 0's expect_tx, warp 1's rows
      mbar_init(empty0 + 8 * s, 256);    // every consumer thread
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ---- Producer warpgroup ----
    setmaxnreg_dec<kProducerRegs>();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp == 0 && lane == 0 && units.n > 0) {
      tf32_bwd_load_kv<kD, kBk>(base + L::kK, base + L::kV, &tm_k, &tm_v, kv_full, hk, j0, b, L::kKTBytes);
#pragma unroll
      for (int pn = 0; pn < kBk / 32; ++pn)
        tma_load_4d(base + L::kKT + pn * kD * 128, &tm_kt, kv_full, static_cast<int>(j0) + 32 * pn, hk, 0, b);
      tf32_bwd_load_units<kD, kBq, kStages, L>(units, hk, G, b, base, &tm_qr, &tm_dor, &tm_qt, &tm_dot, full0, empty0);
    } else if (warp == 1) {
      tf32_bwd_rows_warp<kBk, kBq, kStages, true>(rows_f, rows_i, lane, p, a.dsum, units, hk, G, qlim, klim, j0, b,
                                                   full0, empty0);
    } else if (DET && warp == 3) {
      // The ordered dQ reduction: per unit, consumer 0 adds after barrier 2 (this warp + consumer 0), consumer 1
      // after barrier 3 (both consumers), this warp publishes after barrier 4 (consumer 1 + this warp).
      const Units prev(sh, mk, qlim, klim, j0 - kBk);
      tf32_dq_det_warp<kBk, kBq>(units, prev, static_cast<int>(blockIdx.x), a.dq_sem, a.sem_tiles, sh.H, hk, G, b,
                                 lane, [](int) {
                                   named_bar_sync_unaligned(2, 128 + 32);
                                   named_bar_sync_unaligned(4, 128 + 32);
                                 });
    }
    return;
  }

  // ---- Consumer warpgroups: keys 64c .. 64c + 63 of the tile ----
  setmaxnreg_inc<kConsumerRegs>();
  const int c = wg - 1;
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const float sl2 = CAP ? 1.f : p.score.scale * 1.4426950408889634f;  // CAP: S^T capped in base-2 units first
  const int key_l[2] = {16 * warp + g, 16 * warp + g + 8};  // this thread's accumulator rows (consumer-local)
  const int key_t[2] = {64 * c + key_l[0], 64 * c + key_l[1]};  // the keys' indices in the CTA's tile
  const int64_t key_g[2] = {j0 + key_t[0], j0 + key_t[1]};
  // This thread's keys inside the batch's key length and the [B, Tk] validity mask.
  const bool key_ok[2] = {key_g[0] < klim && key_visible(mk, sh, b, key_g[0]),
                          key_g[1] < klim && key_visible(mk, sh, b, key_g[1])};
  const bool warp_keys_ok = __all_sync(~0u, key_ok[0] && key_ok[1]);  // this warp's 16 keys, group 4c + warp
  uint32_t drop_key[2] = {0u, 0u};  // DROP: the Philox key (unit_keep_bits)
  if constexpr (DROP) dropout_key(p.dropout, drop_key);
  Tf32BwdDense<kBq> dn(p, key_g);  // DENSE: the unit's mask bytes and bias values (unused otherwise)

  float dv[32], dk[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) dv[i] = dk[i] = 0.f;

  const uint32_t k_rows = base + L::kK + c * 64 * 128;  // this consumer's 64 rows in each K / V panel
  const uint32_t v_rows = base + L::kV + c * 64 * 128;
  const uint32_t kt_c = base + L::kKT + 2 * c * kD * 128;  // KT panels 2c, 2c + 1: this consumer's keys
  const uint32_t ds_c = base + L::kDs + c * L::kDsBytes;
  uint8_t* const ds_gen = gbase + L::kDs + c * L::kDsBytes;
  // KREGS: K_c's and V_c's m64k8 A fragments of each k8 step k (d 8k .. 8k + 7), rounded: a[x] = row
  // key_l[x & 1], column 8k + t + 4 (x >> 1).
  uint32_t kf[KREGS ? kD / 8 : 1][4], vf[KREGS ? kD / 8 : 1][4];
  if (units.n > 0) {
    mbar_wait(kv_full, 0);
    if constexpr (KREGS) {
#pragma unroll
      for (int k = 0; k < kD / 8; ++k)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const uint32_t o = swz128_offset_f32(kBk, key_l[x & 1], 8 * k + t + 4 * (x >> 1));
          kf[k][x] = to_tf32(ld_shared_f32(k_rows + o));
          vf[k][x] = to_tf32(ld_shared_f32(v_rows + o));
        }
    } else {
      // Round this consumer's rows of K and V (raw float32 from TMA) to tf32 in place, for the async proxy.
#pragma unroll
      for (int j = 0; j < kD / 32; ++j) {
        round_tf32_smem(k_rows + j * kBk * 128, 64 * 128, tid, 128);
        round_tf32_smem(v_rows + j * kBk * 128, 64 * 128, tid, 128);
      }
      fence_proxy_async();
      named_bar_sync(5 + c, 128);
    }
  }

  // S^T = K_c Q^T and dP^T = V_c dO^T [64 keys x 32 queries], over d in k8 steps (step k: panel k / 4, byte
  // (k % 4) * 32 of each 128-byte row). One of them: acc = A B^T, A this consumer's rows of K or V (KREGS: their
  // fragments af), B the Qr / dOr tile at b_tile; its own commit group.
  auto product = [&](float(&acc)[16], const uint32_t(&af)[KREGS ? kD / 8 : 1][4], uint32_t a_rows, uint32_t b_tile) {
#pragma unroll
    for (int k = 0; k < kD / 8; ++k) {
      const uint64_t bd = wgmma_desc(b_tile + (k / 4) * kBq * 128 + (k % 4) * 32, 16, 1024);
      if constexpr (KREGS)
        wgmma_tf32_rs_m64n32k8(acc, af[k], bd, k > 0);
      else
        wgmma_tf32_ss_m64n32k8(acc, wgmma_desc(a_rows + (k / 4) * kBk * 128 + (k % 4) * 32, 16, 1024), bd, k > 0);
    }
    wgmma_commit();
  };
  // Unit nn's S^T and dP^T, after the wait for its stage (ROT: issued at the end of unit nn - 1, into sacc /
  // dpacc, which then live across the loop's back edge; also after the last unit, nn = units.n, without a wait:
  // their results unused, reading a slot the producer no longer writes, since a conditional issue made ptxas
  // serialize the kernel's wgmmas (C7515), as in flash_bwd_sm90.cu's kRotate).
  float sacc[16], dpacc[16];
  auto issue_s_dp = [&](int nn) {
    const int ss = nn % kStages;
    const uint32_t st_n = base + L::kStage + ss * L::kStageBytes;
    if (nn < units.n) mbar_wait(full0 + 8 * ss, (nn / kStages) & 1);
    wgmma_fence();
    product(sacc, kf, k_rows, st_n + L::kQr);
    product(dpacc, vf, v_rows, st_n + L::kDOr);
  };
  if constexpr (ROT) issue_s_dp(0);  // unconditional, as the issue after the last unit
  for (int n = 0; n < units.n; ++n) {
    const int s = n % kStages;
    const int64_t h = hk * G + n / units.nq, i0 = static_cast<int64_t>(units.qb_lo + n % units.nq) * kBq;
    const uint32_t st = base + L::kStage + s * L::kStageBytes;
    // DROP: the unit's keep bits, bit x for element x of S^T (keys j0 + key_t[h2], queries i0 + 8j + 2t + e: the
    // forward's mask), drawn before the wait for the unit's tiles.
    uint32_t kbits = 0u;
    if constexpr (DROP) kbits = unit_keep_bits<4>(drop_key, p.dropout, h, b, j0 + 64 * c + 16 * warp, i0, g, t);
    if constexpr (DENSE) dn.load(p, b, h, i0, t);  // before the wait for the unit's tiles
    if constexpr (!ROT) issue_s_dp(n);
    // Read before the wait, its latency under S^T's (slot s's words are visible: its full barrier was waited for).
    const bool need_mask = tf32_bwd_needs_mask<kBq>(rows_i, s, 4 * c + warp, warp_keys_ok);
    wgmma_wait<1>();  // S^T done; dP^T may still run (groups complete in order)
    fence_regs(sacc);

    // P^T in place (tf32_bwd_p_pass), with the index rule unless this warp's 16 keys x 32 queries are all visible
    // (the rows warp's word for key group 4c + warp, and the keys' key_ok). CAP: S^T capped first. DENSE: the bias
    // added in base-2 units first (the P pass then scales by 1), P = 0 after it where the dense mask hides the
    // element or the bias is -inf.
    if constexpr (CAP) Tf32BwdCap(p.score).cap(sacc);
    if constexpr (DENSE) dn.add_bias(sacc, sl2);
    const float sl2_p = DENSE ? 1.f : sl2;
    if (need_mask)
      tf32_bwd_p_pass<true, kBq>(sacc, rows_f, rows_i, s, sl2_p, t, key_t, key_ok);
    else
      tf32_bwd_p_pass<false, kBq>(sacc, rows_f, rows_i, s, sl2_p, t, key_t, key_ok);
    if constexpr (DENSE) dn.hide(sacc);
    wgmma_wait<0>();  // dP^T done
    fence_regs(dpacc);

    // dV += P^T dO: A = P^T's fragments (pack_p_step: QT / dOT hold each 8-query group in tf32_kperm order),
    // B = dOT [64 d x 32 q], k8 step kk at byte kk * 32 of its rows.
    uint32_t pa[kBq / 8][4], da[kBq / 8][4];
    tf32_bwd_pack_p<kBq, DROP>(pa, sacc, kbits, p.dropout.keep_scale);  // DROP: P Z
    tf32_bwd_unit_product<kD, kBq>(dv, pa, st + L::kDOT);

    // dS^T = P^T (dP^T - dsum): A fragments of dK (rounded) and dS [32 q][64 keys] for dQ^T. DENSE: dbias too.
    if constexpr (DENSE)
      tf32_bwd_dense_ds_unit<kBq, FEAT>(dpacc, sacc, da, ds_gen, rows_f, s, t, key_l, key_g, dn, p, b, h, i0);
    else
      tf32_bwd_ds<kBq, FEAT>(dpacc, sacc, da, ds_gen, rows_f, s, t, key_l, CAP ? Tf32BwdCap(p.score).inv_cap_log2 : 0.f,
                             kbits, p.dropout.keep_scale);
    fence_proxy_async();  // dS stores before the wgmma (async proxy) reads below

    // dK += dS^T Q: B = QT [64 d x 32 q].
    tf32_bwd_unit_product<kD, kBq>(dk, da, st + L::kQT);

    // DQB: this consumer's staging block is written again after this unit's dQ^T product; the thread that
    // issued the previous unit's bulk reduce-add waits until the copy engine has read it, and the barrier
    // below tells the rest of the warpgroup.
    if constexpr (DQB) {
      if (tid == 0) bulk_wait_read<0>();
    }
    // The warpgroup's dS stores are all done (and fenced) before dQ^T reads them.
    named_bar_sync(5 + c, 128);
    // dQ^T = K_c^T dS^T [64 d x 32 q] over this consumer's 64 keys: A = KT (panel 2c + k / 4), B = dS.
    float dqt[16];
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < 64 / 8; ++k)
      wgmma_tf32_ss_m64n32k8(dqt, wgmma_desc(kt_c + (k / 4) * kD * 128 + (k % 4) * 32, 16, 1024),
                             wgmma_desc(ds_c + (k / 4) * kBq * 128 + (k % 4) * 32, 16, 1024), k > 0);
    wgmma_commit();
    wgmma_wait<0>();  // dQ^T, and dV / dK before it (complete in order)
    fence_regs(dv);
    fence_regs(dk);
    fence_regs(dqt);
    fence_regs(pa);
    fence_regs(da);
    mbar_arrive(empty0 + 8 * s);  // Qr, dOr, QT, dOT and the rows of stage s are no longer read
    if constexpr (ROT) {
      // The next unit's S^T and dP^T issued here (its stage is the other ring slot), S^T waited for at once, so
      // that dP^T runs under this unit's dQ adds and the next unit's P pass. (With S^T in flight across the
      // loop's back edge too, ptxas serialized the kernel's wgmmas, C7514.)
      issue_s_dp(n + 1);
      wgmma_wait<1>();
    }

    if constexpr (DQB) {
      // The block of (b, h, query tile) is 8 KiB of the accumulator, in fragment order.
      static_assert(L::kDqBytes == 32 * 64 * 4, "one m64n32 dQ^T block");
      tf32_dq_add_bulk([&] { return a.dq_acc + ((static_cast<int64_t>(b) * sh.H + h) * a.dq_rows + i0) * kD; },
                       base + L::kDq + c * L::kDqBytes, dqt, tid, 7 + c);
    } else {
      // dQacc[b, h, i0 + q, d] += dQ^T[d][q]. DET: in order (consumer 0, then 1; the warp above orders the CTAs).
      if constexpr (DET) named_bar_sync_unaligned(c == 0 ? 2 : 3, c == 0 ? 128 + 32 : 256);
      tf32_dq_add_scalar(a.dq_acc + ((static_cast<int64_t>(b) * sh.H + h) * sh.Tq + i0) * kD, kD, 0, dqt, sh.Tq - i0,
                         t, key_l);
      if constexpr (DET) named_bar_sync_unaligned(c == 0 ? 3 : 4, c == 0 ? 256 : 128 + 32);
    }
  }
  if constexpr (DQB) {
    if (tid == 0) bulk_wait<0>();  // the copy engine's last adds done before the CTA (its shared memory) ends
  }
  // ROT: the unused products issued after the last unit (unconditional: ptxas serialized the kernel's wgmmas
  // (C7514) when a path skipped this wait; with none in flight it returns at once).
  if constexpr (ROT) wgmma_wait<0>();

  // Epilogue: dK = scale dK_acc, dV (tf32_bwd_store_dkdv).
  tf32_bwd_store_dkdv<kD, PAD>(p, dk, dv, key_g, hk, b, t);
}

constexpr int kPrepassThreads = 256;
// Pre-pass for Q and dO: query tile blockIdx.x (rows i0 .. i0 + 31) of head blockIdx.y, batch blockIdx.z.
// qr / dor [B, H, tq_pad, 64] = tf32(Q) / tf32(dO) (rows past Tq: 0); qt / dot [B, H, 64, tq_pad]: position
// i0 + u of row d = tf32(Q[i0 + tf32_kperm_inv(u)][d]) (0 past Tq).
__global__ void __launch_bounds__(kPrepassThreads)
    tf32_bwd_prepass_q_kernel(const __grid_constant__ FlashBwdParams p, float* __restrict__ qr, float* __restrict__ dor,
                              float* __restrict__ qt, float* __restrict__ dot, int64_t tq_pad) {
  __shared__ float sq[kBq][kD + 1], sd[kBq][kD + 1];  // + 1: the transposed reads hit 32 banks
  const AttnShape& sh = p.shape;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kBq;
  const int h = blockIdx.y, b = blockIdx.z;
  const int64_t bh = static_cast<int64_t>(b) * sh.H + h;
  tf32_prepass_load_rows<kPrepassThreads>(static_cast<const float*>(p.q) + b * sh.q_stride[0] + h * sh.q_stride[2],
                                          sh.q_stride[1], i0, sh.Tq, sh.D, sq, qr + (bh * tq_pad + i0) * kD);
  tf32_prepass_load_rows<kPrepassThreads>(static_cast<const float*>(p.d_o) + b * sh.o_stride[0] + h * sh.o_stride[2],
                                          sh.o_stride[1], i0, sh.Tq, sh.Dv, sd, dor + (bh * tq_pad + i0) * kD);
  __syncthreads();
  tf32_prepass_store_transposed<kPrepassThreads, true>(sq, qt + bh * kD * tq_pad + i0, tq_pad);
  tf32_prepass_store_transposed<kPrepassThreads, true>(sd, dot + bh * kD * tq_pad + i0, tq_pad);
}

// Pre-pass for K: key tile blockIdx.x (keys j0 .. j0 + 31) of kv head blockIdx.y, batch blockIdx.z.
// kt [B, Hkv, 64, tk_pad]: position j of row d = tf32(K[j][d]) (keys in order; 0 past Tk).
__global__ void __launch_bounds__(kPrepassThreads)
    tf32_bwd_prepass_k_kernel(const __grid_constant__ FlashBwdParams p, float* __restrict__ kt, int64_t tk_pad) {
  __shared__ float sk[32][kD + 1];
  const AttnShape& sh = p.shape;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * 32;
  const int hk = blockIdx.y, b = blockIdx.z;
  const float* k = static_cast<const float*>(p.k) + b * sh.k_stride[0] + hk * sh.k_stride[2];
  tf32_prepass_load_rows<kPrepassThreads>(k, sh.k_stride[1], j0, sh.Tk, sh.D, sk, nullptr);
  __syncthreads();
  tf32_prepass_store_transposed<kPrepassThreads, false>(sk, kt + (static_cast<int64_t>(b) * sh.Hkv + hk) * kD * tk_pad + j0,
                                                        tk_pad);
}

// Variant VI's kernel and its shared memory (the layout its body uses, Smem<stages, dqbulk>).
struct Tf32BwdLaunch {
  void (*kernel)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const CUtensorMap, const CUtensorMap,
                 const CUtensorMap, const CUtensorMap, const Tf32BwdSm90Args);
  int smem;
};
template <int VI, bool DET = false, int FEAT = 0>
Tf32BwdLaunch tf32_bwd_launch(bool padded) {
  return {padded ? flash_bwd_sm90_tf32_kernel<VI, true, DET, FEAT> : flash_bwd_sm90_tf32_kernel<VI, false, DET, FEAT>,
          Smem<kVariantTab[VI].stages, kVariantTab[VI].dqbulk>::kAlloc};
}
// The FEAT instantiations (feat: tf32_bwd_feat's bits) of variant VI (kDefaultVariant, or kDetVariant with DET).
template <int VI, bool DET>
Tf32BwdLaunch tf32_bwd_feat_launch(int feat, bool padded) {
  return tf32_feat_switch<true>(feat, [&](auto f) { return tf32_bwd_launch<VI, DET, decltype(f)::value>(padded); });
}

std::atomic<int64_t> g_launches{0};
std::atomic<int> g_override{-1};

// The switch's mode: 0 off, 1 + v on with variant v. TF_FLASHATTN_SM90_TF32_BWD (read once): unset, on with
// kDefaultVariant; "0" off; 1 .. kVariants that mode (anything else: the default); TF_FLASHATTN_SM90=0 turns it
// off too. set_bwd_tf32_enabled(mode) overrides it (0 off, 1 .. kVariants, -1 back to the environment).
int bwd_tf32_mode() {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return o <= kVariants ? o : 0;
  static const int env_mode = [] {
    const char* v = getenv("TF_FLASHATTN_SM90_TF32_BWD");
    const char* all = getenv("TF_FLASHATTN_SM90");
    if (all && strcmp(all, "0") == 0) return 0;
    if (v && strcmp(v, "0") == 0) return 0;
    const int m = v ? atoi(v) : 0;
    return m >= 1 && m <= kVariants ? m : 1 + kDefaultVariant;
  }();
  return env_mode;
}
}  // namespace

bool bwd_tf32_enabled() { return bwd_tf32_mode() != 0; }
void set_bwd_tf32_enabled(int mode) { g_override.store(mode, std::memory_order_relaxed); }

namespace {
std::atomic<int> g_dense_override{-1};
}  // namespace
// Both TF32 backwards' kTf32Dense instantiations (flash_cuda_internal.h): on unless TF_FLASHATTN_SM90_TF32_BWD_DENSE=0
// (read once) or set_bwd_tf32_dense(0) turns them off (sm80's TF32 backward then takes those calls). First run on a
// GPU 2026-12-05 (H100, kernel harness; benchmarks/RESULTS.md "Hopper TF32 kernels" (m)): tf32pad's 27 dense cases pass
// in every mode, tf32det 17 / 17, memcheck clean, 2.5x-3.4x sm80's TF32 backward with a bias and its gradient.
bool bwd_tf32_dense_enabled() {
  const int o = g_dense_override.load(std::memory_order_relaxed);
  if (o >= 0) return o != 0;
  static const bool env_on = [] {
    const char* v = getenv("TF_FLASHATTN_SM90_TF32_BWD_DENSE");
    return !(v && strcmp(v, "0") == 0);
  }();
  return env_on;
}
void set_bwd_tf32_dense(int mode) { g_dense_override.store(mode, std::memory_order_relaxed); }
int64_t bwd_tf32_launches() { return g_launches.load(std::memory_order_relaxed); }

// Shape, flags and the current device, not the masks (the XLA lowering sizes the workspace at compile time).
// A size taken under other settings (the harness's switch, another device) only makes the launch fall back:
// bwd_tf32 checks workspace_bytes.
size_t bwd_tf32_workspace_floats(const FlashBwdParams& p) {
  const AttnShape& s = p.shape;
  if (p.dtype != DType::kFloat32 || !p.allow_tf32 || !tf32_head_dims_apply(s, kD) || !bwd_tf32_enabled() ||
      !enabled() || !current_device_is_sm90())
    return 0;
  return static_cast<size_t>(prepass_layout(s, p.deterministic).floats);
}

bool bwd_tf32_applies(const FlashBwdParams& p) {
  const AttnShape& s = p.shape;
  if (bwd_tf32_workspace_floats(p) == 0 || !p.workspace || p.workspace_bytes == 0) return false;
  if (!tf32_bwd_shape_fits(s, kBq)) return false;
  // Index masks (causal, window, lengths, [B, Tq] / [B, Tk] validity), soft-cap and dropout are taken; a dense mask,
  // bias / dbias not with dropout, and only while bwd_tf32_dense_enabled.
  if (!tf32_bwd_feat_applies(p)) return false;
  if (!tf32_bwd_strides_apply(p)) return false;
  return true;  // the device: in bwd_tf32_workspace_floats
}

cudaError_t bwd_tf32(const FlashBwdParams& p, cudaStream_t stream) {
  const AttnShape& s = p.shape;
  const int mode = bwd_tf32_mode();  // read once for this call
  if (mode < 1 || mode > kVariants) return cudaErrorNotSupported;
  const PrepassLayout w = prepass_layout(s, p.deterministic);
  const Tf32BwdWorkspaceParts ws = bwd_tf32_workspace_parts(p);
  float* const dsum = ws.dsum;
  float* const dq_acc = ws.dq_acc;
  float* const prepass_ws = ws.extra;
  if (!dsum || !dq_acc || !prepass_ws || !aligned16(prepass_ws) || !aligned16(dq_acc)) return cudaErrorNotSupported;
  // The workspace must hold the pre-pass's room (a size taken with this kernel off, or on another device,
  // does not): else sm80's TF32 backward, which needs only the parts before it.
  if (p.workspace_bytes < static_cast<size_t>(prepass_ws - p.workspace + w.floats) * sizeof(float))
    return cudaErrorNotSupported;
  float* qr = prepass_ws + w.qr;
  float* dor = prepass_ws + w.dor;
  float* qt = prepass_ws + w.qt;
  float* dot = prepass_ws + w.dot;
  float* kt = prepass_ws + w.kt;
  CUtensorMap tk, tv, tkt, tqr, tdor, tqt, tdot;
  if (!tma_map_rows_f32(&tk, p.k, s.B, s.Tk, s.Hkv, s.D, s.k_stride, kBk) ||
      !tma_map_rows_f32(&tv, p.v, s.B, s.Tk, s.Hkv, s.Dv, s.v_stride, kBk) ||
      !tma_map_ws_f32(&tkt, kt, s.B, s.Hkv, kD, w.tk_pad, kD) ||
      !tma_map_ws_f32(&tqr, qr, s.B, s.H, w.tq_pad, kD, kBq) || !tma_map_ws_f32(&tdor, dor, s.B, s.H, w.tq_pad, kD, kBq) ||
      !tma_map_ws_f32(&tqt, qt, s.B, s.H, kD, w.tq_pad, kD) || !tma_map_ws_f32(&tdot, dot, s.B, s.H, kD, w.tq_pad, kD))
    return cudaErrorNotSupported;  // nothing queued yet: sm80's TF32 backward takes it
  const bool det = p.deterministic;
  if (!tf32_bwd_feat_applies(p)) return cudaErrorNotSupported;
  const int feat = tf32_bwd_feat(p);
  // Soft-cap, dropout, a dense mask / bias / dbias: kDefaultVariant's FEAT instantiations (kDetVariant's in
  // deterministic mode), whatever variant is set.
  const int variant = det ? kDetVariant : feat ? kDefaultVariant : mode - 1;
  const bool dqbulk = kVariantTab[variant].dqbulk;
  const int64_t acc_rows = tf32_dq_acc_rows<kBq>(ws, s, dqbulk);
  if (acc_rows == 0) return cudaErrorNotSupported;
  const bool pad = runs_padded(s);
  const Tf32BwdLaunch launch = det            ? tf32_bwd_feat_launch<kDetVariant, true>(feat, pad)
                               : feat         ? tf32_bwd_feat_launch<kDefaultVariant, false>(feat, pad)
                               : variant == 6 ? tf32_bwd_launch<6>(pad)
                               : variant == 5 ? tf32_bwd_launch<5>(pad)
                               : variant == 4 ? tf32_bwd_launch<4>(pad)
                               : variant == 3 ? tf32_bwd_launch<3>(pad)
                               : variant == 2 ? tf32_bwd_launch<2>(pad)
                               : variant == 1 ? tf32_bwd_launch<1>(pad)
                                              : tf32_bwd_launch<0>(pad);
  const auto kernel = launch.kernel;
  const int smem = launch.smem;
  cudaError_t err = set_dynamic_smem(kernel, smem);
  if (err != cudaSuccess) return cudaErrorNotSupported;
  // From here on no fallback: dbias zeroed (DENSE stores only the elements of the units it visits).
  if ((err = tf32_bwd_zero_dbias(p, stream)) != cudaSuccess) return err;
  if ((err = bwd_dsum_tf32(p, dsum, stream)) != cudaSuccess) return err;
  if ((err = tf32_dq_acc_zero<kD>(s, dq_acc, acc_rows, stream)) != cudaSuccess) return err;
  int* const sem = reinterpret_cast<int*>(prepass_ws + w.sem);
  if (det && (err = cudaMemsetAsync(sem, 0, static_cast<size_t>(s.B * s.H * (w.tq_pad / kBq)) * sizeof(int), stream)) !=
                 cudaSuccess)
    return err;
  tf32_bwd_prepass_q_kernel<<<dim3(static_cast<unsigned>(w.tq_pad / kBq), static_cast<unsigned>(s.H),
                                   static_cast<unsigned>(s.B)),
                              kPrepassThreads, 0, stream>>>(p, qr, dor, qt, dot, w.tq_pad);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  tf32_bwd_prepass_k_kernel<<<dim3(static_cast<unsigned>(w.tk_pad / 32), static_cast<unsigned>(s.Hkv),
                                   static_cast<unsigned>(s.B)),
                              kPrepassThreads, 0, stream>>>(p, kt, w.tk_pad);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  const Tf32BwdSm90Args args{p, dsum, dq_acc, acc_rows, det ? sem : nullptr, w.tq_pad / kBq};
  const dim3 grid(static_cast<unsigned>(w.tk_pad / kBk), static_cast<unsigned>(s.Hkv), static_cast<unsigned>(s.B));
  kernel<<<grid, kThreads, smem, stream>>>(tk, tv, tkt, tqr, tdor, tqt, tdot, args);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  err = tf32_dq_acc_finish<kD>(p, dq_acc, acc_rows, dqbulk, stream);
  if (err == cudaSuccess) g_launches.fetch_add(1, std::memory_order_relaxed);
  return err;
}

}  // namespace sm90
}  // namespace cuda
}  // namespace flashattn
