// Pieces shared by the Hopper TF32 backwards (sm90/flash_bwd_sm90_tf32.cu at head dim 64, sm90/flash_bwd_sm90_tf32_d128.cu
// at 128): which query tiles a key tile visits, the rows warp's per-row words, the P^T pass with the index masks,
// dS^T, the dK / dV epilogue, and dQ's conversion from the fragment-ordered accumulator. Both kernels hold S^T / dP^T [keys x BQ queries] accumulators of a wgmma m64nBQ
// (element x = 4j + 2h2 + e: key row key_l[h2] = 16 warp + g + 8 h2 of the warpgroup's 64, query 8j + 2t + e).
// Include only from sources compiled for sm_90a alone, after sm90_tf32.cuh.
#ifndef TF_FLASHATTN_KERNELS_SM90_SM90_TF32_BWD_CUH_
#define TF_FLASHATTN_KERNELS_SM90_SM90_TF32_BWD_CUH_

#include <cstdint>

#include "cc/kernels/common/flash_cuda_common.cuh"  // fast_exp2
#include "cc/kernels/common/flash_cuda_internal.h"  // aligned16, strides_mult4
#include "cc/kernels/common/flash_dropout.cuh"       // unit_keep_bits (dropout)
#include "cc/kernels/common/flash_params.h"
#include "cc/kernels/sm90/sm90_ptx.cuh"
#include "cc/kernels/sm90/sm90_tf32.cuh"

// FA_SM90_TF32_BWD_DESC_ADD (1 by default; 0 gives back the descriptors built whole): the head-dim-128 TF32
// backward's wgmma descriptors (flash_bwd_sm90_tf32_d128.cu, and tf32_bwd_unit_product below, shared with head dim
// 64) built once per operand tile and stepped by adding each k8 step's offset (wgmma_desc_add), as the 16-bit D = 128
// backward does by default (flash_bwd_sm90.cu's FA_SM90_BWD_DESC_ADD: 2-7 % faster there), instead of built whole
// (mask, shift, or) for every step. Its products are m64n32k8 / m64n128k8 steps, 4 to 16 per product: more
// descriptors per unit of tensor work than the 16-bit kernels'. The descriptors, and so the outputs, are the same.
// (The head-dim-64 kernel's own products keep wgmma_desc: routed through tf32_bwd_desc even at 0 its SASS moved.)
// On the H100 (2026-12-06, session 54, kernel harness loop, float32 on the TF32 kernels): 1.020x-1.023x at head dim
// 128 (T = 4096 and 16384, causal or not), 1.013x at head dim 64 (its unit product); numerics, padding masks and
// deterministic mode pass (benchmarks/RESULTS.md, "Hopper TF32 kernels" (o)).
#ifndef FA_SM90_TF32_BWD_DESC_ADD
#define FA_SM90_TF32_BWD_DESC_ADD 1
#endif

namespace flashattn {
namespace cuda {
namespace sm90 {

// The descriptor of the operand tile at `tile`, `offset` bytes on (a multiple of 16), the layout's LBO `lbo`,
// SBO 1024 (FA_SM90_TF32_BWD_DESC_ADD: the tile's plus the offset).
__device__ __forceinline__ uint64_t tf32_bwd_desc(uint32_t tile, uint32_t offset, uint32_t lbo) {
  return wgmma_desc_at<FA_SM90_TF32_BWD_DESC_ADD != 0>(tile, offset, lbo);
}

// The head dims a Hopper TF32 backward of head dim kd takes: tf32_head_dims_apply(s, kd) (flash_cuda_internal.h).
// Padded up, the tensor maps of K and V carry the real D / Dv (the copy engine fills the columns past them with
// zeros), the pre-passes write zeros past them in Qr, dOr, QT, dOT, K^T, so that S^T, dP^T and every product are
// exact, and the epilogue and the dQ conversion store no column past D / Dv.
// Host: strides and bases the TF32 backwards take: every element stride a multiple of 4 (TMA's 16-byte strides, the
// pre-passes' float4 loads), non-negative; q, k, v, o, dO, dq, dk, dv 16-byte aligned.
inline bool tf32_bwd_strides_apply(const FlashBwdParams& p) {
  return strides_mult4(p.shape) && aligned16(p.q) && aligned16(p.k) && aligned16(p.v) && aligned16(p.o) && aligned16(p.d_o) &&
         aligned16(p.dq) && aligned16(p.dk) && aligned16(p.dv);
}

// Host: the shapes a Hopper TF32 backward's launch takes (grid (key tiles, Hkv, B): Hkv and B under 65536; T under
// 2^30; Tf32BwdUnits::n, the units of a key tile over the G query heads of its kv head, an int).
inline bool tf32_bwd_shape_fits(const AttnShape& s, int bq) {
  return s.B > 0 && s.H > 0 && s.Tq > 0 && s.Tk > 0 && s.Hkv > 0 && s.H % s.Hkv == 0 && s.B <= 65535 &&
         s.Hkv <= 65535 && s.H <= 65535 && s.Tq <= (1ll << 30) && s.Tk <= (1ll << 30) &&
         (s.Tq + bq - 1) / bq * (s.H / s.Hkv) < (1ll << 31);
}

// The query tiles (BQ rows) that key tile [j0, j0 + BK) visits: [qb_lo, qb_lo + nq) for each of the G heads of its
// kv head (unit n = hl * nq + (qb - qb_lo)): the tiles of rows [lo, hi) that may see one of its keys below klim
// (the batch's key length; none when j0 >= klim), hi <= qlim (the query length). Causal / window right: row i sees
// a key >= j0 only if key_end(i) > j0, i.e. i >= j0 - off (causal), i >= j0 - off - window_right; window left: a
// key <= j_last only if key_begin(i) = i + off - window_left <= j_last. (benchmarks/sm90_tf32_bwd_model.py checks
// this rule against plain visibility.)
template <int BK, int BQ>
struct Tf32BwdUnits {
  int qb_lo = 0, nq = 0, n = 0;
  __device__ Tf32BwdUnits(const AttnShape& sh, const MaskParams& m, int64_t qlim, int64_t klim, int64_t j0) {
    const int64_t off = m.causal_offset;
    int64_t lo = 0, hi = qlim;
    if (m.causal && j0 - off > lo) lo = j0 - off;
    if (m.window_right >= 0 && j0 - off - m.window_right > lo) lo = j0 - off - m.window_right;
    const int64_t j_last = (j0 + BK < klim ? j0 + BK : klim) - 1;
    if (m.window_left >= 0 && m.window_left < hi - (j_last - off + 1)) hi = j_last - off + 1 + m.window_left;
    if (j0 >= klim || hi <= lo) return;
    qb_lo = static_cast<int>(lo / BQ);
    nq = static_cast<int>((hi + BQ - 1) / BQ - lo / BQ);
    n = nq * static_cast<int>(sh.H / sh.Hkv);
  }
};

// Deterministic mode (p.deterministic; the kernels' DET instantiations): each (b, h, BQ-query tile) block of the dQ
// accumulator receives its contributions in one fixed order, as flash_bwd_sm90.cu's ordered reduction ("Deterministic
// mode" there, whose argument holds here): across CTAs by increasing key tile x, within a CTA in the consumers'
// order. The key tiles that visit a query tile are one contiguous range of x (Tf32BwdUnits' lo and hi are
// non-decreasing in j0, and a CTA without units sits in an empty prefix or suffix of x), so key tile x waits only
// when key tile x - 1 visits the same query tile (`prev`), for the block's counter to reach x; after its adds it
// publishes x + 1 (release). CTA x waits only on CTA x - 1 of the same kv head and batch, one linear block index
// lower (grid (key tiles, Hkv, B)), which is running or done. Counters: sem [B, H, tiles] ints, zeroed by the
// launch. The producer's warp 3 polls and publishes; `between(n)` (the consumers' named barriers of unit n: go,
// then done) runs between its wait and its publish, so the consumers' loop gains only barriers.
template <int BK, int BQ, class Between>
__device__ __forceinline__ void tf32_dq_det_warp(const Tf32BwdUnits<BK, BQ>& units, const Tf32BwdUnits<BK, BQ>& prev,
                                                 int x, int* sem, int64_t tiles, int64_t H, int hk, int G, int b,
                                                 int lane, Between between) {
  for (int n = 0; n < units.n; ++n) {
    const int64_t h = static_cast<int64_t>(hk) * G + n / units.nq;
    const int qb = units.qb_lo + n % units.nq;
    int* s = sem + (static_cast<int64_t>(b) * H + h) * tiles + qb;
    if (lane == 0 && x > 0 && prev.n > 0 && qb >= prev.qb_lo && qb < prev.qb_lo + prev.nq)
      while (ld_acquire_gpu(s) < x) {
      }
    __syncwarp();
    between(n);
    if (lane == 0) red_release_gpu_max(s, x + 1);
  }
}

// The rows warp's words for row i of a unit: lse2 = log2e lse and dsum (rows past Tq any finite value: their
// elements are masked to 0; lse = -inf, a row that sees no key, gives lse2 = -inf with every element masked), and
// the row's visible keys [kb, ke) as score_elem's rule (row_info): [key_begin(i), key_end(i, klim)) relative to
// j0, clipped to [0, BK]; empty where the row is past the query length or off in the [B, Tq] validity mask (the
// [B, Tk] one: the consumers' key_ok). Stored in rows [kStages][kTf32BwdRowWords][BQ] (4-byte words) of ring slot
// s: lse2, dsum, kb, ke, and the unit's key groups that every row sees whole (tf32_bwd_rows_warp's WHOLE).
constexpr int kTf32BwdRowWords = 5;
struct Tf32BwdRowWords {
  float lse2 = 0.f, dsum = 0.f;
  int kb = 0, ke = 0;
};
template <int BK>
__device__ __forceinline__ Tf32BwdRowWords tf32_bwd_row_words(const FlashBwdParams& p, const float* dsum, int64_t qlim,
                                                              int64_t klim, int64_t j0, int b, int64_t h, int64_t i) {
  const AttnShape& sh = p.shape;
  const MaskParams& mk = p.mask;
  const int64_t row = (b * sh.H + h) * sh.Tq + i;
  Tf32BwdRowWords w;
  if (i < sh.Tq) {
    w.lse2 = p.lse[row] * 1.4426950408889634f;
    w.dsum = dsum[row];
  }
  if (i < qlim && (!mk.q_valid || mk.q_valid[b * sh.Tq + i])) {
    const int64_t lo = mk.key_begin(i) - j0, hi = mk.key_end(i, klim) - j0;
    w.kb = static_cast<int>(lo < 0 ? 0 : (lo > BK ? BK : lo));
    w.ke = static_cast<int>(hi < 0 ? 0 : (hi > BK ? BK : hi));
  }
  return w;
}

// The producer's rows warp (lane = its lane): for each unit n of the key tile (query head hk G + n / nq, rows
// (qb_lo + n % nq) BQ + lane), once the consumers released ring slot n % STAGES (empty), the rows' words into the
// slot, then its arrival on full. (Reading unit n + 1's words before waiting for its slot, to hide the global loads'
// latency, measured no faster on the H200: results/2026-12-04-h200-s37/pf64.out, pf128.out.) WHOLE: word 4 (the
// same in each row's entry), bit q set when every row of the unit sees all of the tile's keys [16 q, 16 q + 16)
// (kb <= 16 q, ke >= 16 q + 16; a row past the query length or off in the [B, Tq] mask sees none): a consumer warp
// whose 16 keys are group q then runs the P pass without the per-element rule (tf32_bwd_needs_mask). On the H200
// (results/2026-12-04-h200-s38/) the head-dim-64 kernel gained 2-4 % at causal shapes from it, against the former
// per-consumer tile_in_range after the S^T wait; the head-dim-128 kernel, whose two consumers each wait for their
// own slot's words every unit, lost 3-5 % to the votes, and keeps tile_in_range (WHOLE false).
template <int BK, int BQ, int STAGES, bool WHOLE>
__device__ __forceinline__ void tf32_bwd_rows_warp(float* rows_f, int* rows_i, int lane, const FlashBwdParams& p,
                                                   const float* dsum, const Tf32BwdUnits<BK, BQ>& units, int hk,
                                                   int G, int64_t qlim, int64_t klim, int64_t j0, int b,
                                                   uint32_t full0, uint32_t empty0) {
  static_assert(BQ == 32 && BK % 16 == 0 && BK / 16 <= 31, "a lane per row; a bit per key group");
  constexpr int W = kTf32BwdRowWords;
  auto words = [&](int n) {
    const int64_t h = static_cast<int64_t>(hk) * G + n / units.nq;
    const int64_t i = static_cast<int64_t>(units.qb_lo + n % units.nq) * BQ + lane;
    return tf32_bwd_row_words<BK>(p, dsum, qlim, klim, j0, b, h, i);
  };
  for (int n = 0; n < units.n; ++n) {
    const int s = n % STAGES;
    if (n >= STAGES) mbar_wait(empty0 + 8 * s, ((n / STAGES) - 1) & 1);
    const Tf32BwdRowWords w = words(n);
    rows_f[(W * s) * BQ + lane] = w.lse2;
    rows_f[(W * s + 1) * BQ + lane] = w.dsum;
    rows_i[(W * s + 2) * BQ + lane] = w.kb;
    rows_i[(W * s + 3) * BQ + lane] = w.ke;
    if constexpr (WHOLE) {
      int whole = 0;
#pragma unroll
      for (int q = 0; q < BK / 16; ++q) whole |= (__all_sync(~0u, w.kb <= 16 * q && w.ke >= 16 * q + 16) ? 1 : 0) << q;
      rows_i[(W * s + 4) * BQ + lane] = whole;
    }
    mbar_arrive(full0 + 8 * s);  // release: the stores above are visible to the waiting consumers
  }
}

// The producer thread's K and V tiles [BK keys x D] of kv head hk, keys j0 .. (D / 32 panels of BK rows, 128-byte
// swizzle) by TMA into k_dst / v_dst, completing on kv_full, which expects their bytes and extra_bytes more (the
// head-dim-64 kernel's K^T, loaded after by the caller).
template <int D, int BK>
__device__ __forceinline__ void tf32_bwd_load_kv(uint32_t k_dst, uint32_t v_dst, const CUtensorMap* tm_k,
                                                 const CUtensorMap* tm_v, uint32_t kv_full, int hk, int64_t j0, int b,
                                                 int extra_bytes = 0) {
  mbar_arrive_expect_tx(kv_full, 2 * BK * D * 4 + extra_bytes);
#pragma unroll
  for (int j = 0; j < D / 32; ++j) {
    tma_load_4d(k_dst + j * BK * 128, tm_k, kv_full, 32 * j, hk, static_cast<int>(j0), b);
    tma_load_4d(v_dst + j * BK * 128, tm_v, kv_full, 32 * j, hk, static_cast<int>(j0), b);
  }
}

// The producer thread's per-unit loads: for each unit n of the key tile (query head hk G + n / nq, rows
// (qb_lo + n % nq) BQ ..), once the consumers released ring slot n % STAGES (empty), Qr, dOr (D / 32 panels of BQ
// rows each) and QT, dOT (one panel) by TMA into the slot at base + L::kStage + s L::kStageBytes, completing on
// full[s]. L: the kernel's shared-memory layout (kStage, kStageBytes, kQr, kDOr, kQT, kDOT). PARTS: 1 loads Qr and
// dOr only, 2 QT and dOT only (a kernel that releases the two halves of a slot at different times gives each its
// own thread and barriers), 3 both.
template <int D, int BQ, int STAGES, class L, int BK, int PARTS = 3>
__device__ __forceinline__ void tf32_bwd_load_units(const Tf32BwdUnits<BK, BQ>& units, int hk, int G, int b,
                                                    uint32_t base, const CUtensorMap* tm_qr, const CUtensorMap* tm_dor,
                                                    const CUtensorMap* tm_qt, const CUtensorMap* tm_dot, uint32_t full0,
                                                    uint32_t empty0) {
  static_assert(PARTS >= 1 && PARTS <= 3, "PARTS: 1 Qr / dOr, 2 QT / dOT, 3 both");
  constexpr int kBytes = ((PARTS & 1) ? 2 * BQ * D * 4 : 0) + ((PARTS & 2) ? 2 * D * BQ * 4 : 0);
  static_assert(PARTS != 3 || kBytes == L::kStageBytes, "a slot holds Qr, dOr, QT and dOT");
  for (int n = 0; n < units.n; ++n) {
    const int s = n % STAGES;
    if (n >= STAGES) mbar_wait(empty0 + 8 * s, ((n / STAGES) - 1) & 1);
    const int h = hk * G + n / units.nq, i0 = (units.qb_lo + n % units.nq) * BQ;
    const uint32_t bar = full0 + 8 * s, st = base + L::kStage + s * L::kStageBytes;
    mbar_arrive_expect_tx(bar, kBytes);
    if constexpr ((PARTS & 1) != 0) {
#pragma unroll
      for (int j = 0; j < D / 32; ++j) {
        tma_load_4d(st + L::kQr + j * BQ * 128, tm_qr, bar, 32 * j, h, i0, b);
        tma_load_4d(st + L::kDOr + j * BQ * 128, tm_dor, bar, 32 * j, h, i0, b);
      }
    }
    if constexpr ((PARTS & 2) != 0) {
      tma_load_4d(st + L::kQT, tm_qt, bar, i0, h, 0, b);
      tma_load_4d(st + L::kDOT, tm_dot, bar, i0, h, 0, b);
    }
  }
}

// Whether a consumer warp's P pass for the unit in slot s needs the per-element rule: unless every row sees all of
// its 16 keys (group = the first key's index in the CTA's tile / 16; the rows warp's word 4, tf32_bwd_rows_warp's
// WHOLE) and they all pass key_ok (keys_ok: the warp's __all_sync of it, the key length and the [B, Tk] mask).
template <int BQ>
__device__ __forceinline__ bool tf32_bwd_needs_mask(const int* rows_i, int s, int group, bool keys_ok) {
  return !keys_ok || !((rows_i[(kTf32BwdRowWords * s + 4) * BQ] >> group) & 1);
}

// P^T = 2^(S^T scale log2e - lse2) in place (sl2 = scale log2e; rows_f / rows_i: slot s's words). MASKED: P = 0
// unless key_ok[h2] (key length, [B, Tk] mask) and kl[h2], the key's index in the CTA's tile, lies in the row's
// [kb, ke).
template <bool MASKED, int BQ>
__device__ __forceinline__ void tf32_bwd_p_pass(float (&sacc)[BQ / 2], const float* rows_f, const int* rows_i, int s,
                                                float sl2, int t, const int (&kl)[2], const bool (&key_ok)[2]) {
  const float* lse2_s = rows_f + (kTf32BwdRowWords * s) * BQ;
  const int* kb_s = rows_i + (kTf32BwdRowWords * s + 2) * BQ;
  const int* ke_s = rows_i + (kTf32BwdRowWords * s + 3) * BQ;
#pragma unroll
  for (int j = 0; j < BQ / 8; ++j) {
    const float2 l2 = *reinterpret_cast<const float2*>(lse2_s + 8 * j + 2 * t);
    int2 kb2 = make_int2(0, 0), ke2 = make_int2(0, 0);
    if constexpr (MASKED) {
      kb2 = *reinterpret_cast<const int2*>(kb_s + 8 * j + 2 * t);
      ke2 = *reinterpret_cast<const int2*>(ke_s + 8 * j + 2 * t);
    }
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int x = 4 * j + 2 * h2 + e;
        float pv = fast_exp2(sacc[x] * sl2 - (e ? l2.y : l2.x));
        if constexpr (MASKED) {
          if (!key_ok[h2] || kl[h2] < (e ? kb2.y : kb2.x) || kl[h2] >= (e ? ke2.y : ke2.x)) pv = 0.f;
        }
        sacc[x] = pv;
      }
  }
}

// Soft-cap (the kernels' kTf32Cap instantiations; s = c tanh(scale S / c), sm80's score_elem): the constants of
// softcap_log2 / softcap_ds (common/flash_cuda_common.cuh), taken once per thread. S^T is capped in place in
// base-2 units (cap) before the P pass, which then multiplies by 1 (the kernels' sl2) instead of scale log2e;
// tf32_bwd_ds multiplies dS^T by 1 - tanh^2, tanh recovered from P and the row's lse2 (as the 16-bit backward: no
// registers carry it).
struct Tf32BwdCap {
  float scale, inv_cap, cap_log2, inv_cap_log2;
  __device__ explicit Tf32BwdCap(const ScoreParams& sp)
      : scale(sp.scale),
        inv_cap(1.f / sp.softcap),
        cap_log2(sp.softcap * 1.4426950408889634f),
        inv_cap_log2(1.f / (sp.softcap * 1.4426950408889634f)) {}
  template <int N>
  __device__ __forceinline__ void cap(float (&sacc)[N]) const {
#pragma unroll
    for (int x = 0; x < N; ++x) sacc[x] = softcap_log2(sacc[x], scale, inv_cap, cap_log2);
  }
};

// A dense mask [B, H, Tq, Tk] (bool) and / or an additive float32 bias of that shape (both broadcast through their
// strides, any strides), and / or dbias [B, H, Tq, Tk] (float32, compact): the backwards' kTf32Dense instantiations
// (not with dropout), score_elem's rule element by element as in the Hopper TF32 forward. A consumer thread's
// elements of one unit (x = 4j + 2h2 + e of S^T: key key_g[h2], query i0 + 8j + 2t + e) are loaded at the start of
// the unit (load: before the wait for its tiles, so that their latency hides under S^T's). Rows past Tq read row
// Tq - 1 and keys past Tk read key Tk - 1, so every load stays inside the tensors; the index masks hide those
// elements. Per unit: add_bias before the P pass (which then scales by 1), hide after it, tf32_bwd_dense_ds for dS^T
// and dbias.
template <int BQ>
struct Tf32BwdDense {
  static constexpr int kN = BQ / 2;  // this thread's elements of a unit's S^T
  int64_t km[2], kb[2];              // the keys' offsets in the mask / bias (clamped to Tk - 1)
  uint32_t mv[kN];                   // the mask's bytes (1 without a mask)
  float bv[kN];                      // the bias (0 without one)
  __device__ Tf32BwdDense(const FlashBwdParams& p, const int64_t (&key_g)[2]) {
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const int64_t k = key_g[h2] < p.shape.Tk ? key_g[h2] : p.shape.Tk - 1;
      km[h2] = k * p.mask.mask_stride[3];
      kb[h2] = k * p.score.bias_stride[3];
    }
  }
  // The unit of query head h, rows i0 .. i0 + BQ - 1, batch b.
  __device__ __forceinline__ void load(const FlashBwdParams& p, int b, int64_t h, int64_t i0, int t) {
    const MaskParams& mk = p.mask;
    const ScoreParams& sp = p.score;
    const int64_t Tq = p.shape.Tq;
    const bool* mb = mk.mask ? mk.mask + b * mk.mask_stride[0] + h * mk.mask_stride[1] : nullptr;
    const float* bb =
        sp.bias ? static_cast<const float*>(sp.bias) + b * sp.bias_stride[0] + h * sp.bias_stride[1] : nullptr;
#pragma unroll
    for (int j = 0; j < BQ / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t q = i0 + 8 * j + 2 * t + e, r = q < Tq ? q : Tq - 1;
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2) {
          const int x = 4 * j + 2 * h2 + e;
          mv[x] = mb ? static_cast<uint32_t>(mb[r * mk.mask_stride[2] + km[h2]]) : 1u;
          bv[x] = bb ? bb[r * sp.bias_stride[2] + kb[h2]] : 0.f;
        }
      }
  }
  // S^T (CAP: capped in base-2 units already, sl2 = 1) to base-2 scores with the bias: sl2 S + log2e b.
  __device__ __forceinline__ void add_bias(float (&sacc)[kN], float sl2) const {
#pragma unroll
    for (int x = 0; x < kN; ++x) sacc[x] = fmaf(bv[x], 1.4426950408889634f, sacc[x] * sl2);
  }
  // P = 0 where the mask hides the element or the bias is -inf (a row whose visible biases are all -inf has
  // lse = -inf, where 2^(-inf + inf) would be NaN).
  __device__ __forceinline__ void hide(float (&sacc)[kN]) const {
#pragma unroll
    for (int x = 0; x < kN; ++x)
      if (mv[x] == 0u || bv[x] == -INFINITY) sacc[x] = 0.f;
  }
};

// Dropout (FEAT & kTf32Drop): the factor Z of element x of a unit's S^T (keep_scale where bit x of the unit's keep
// bits, unit_keep_bits<4> of flash_dropout.cuh, is set, else 0).
__device__ __forceinline__ float tf32_drop_z(uint32_t kbits, int x, float keep_scale) {
  return ((kbits >> x) & 1u) ? keep_scale : 0.f;
}

// P^T's A fragments of dV += P^T dO (pack_p_step of each k8 step); DROP: of Pd^T = P^T Z (sm80's rule: dV takes the
// dropped P), sacc itself unchanged (dS^T needs P).
template <int BQ, bool DROP>
__device__ __forceinline__ void tf32_bwd_pack_p(uint32_t (&pa)[BQ / 8][4], const float (&sacc)[BQ / 2], uint32_t kbits,
                                                float keep_scale) {
#pragma unroll
  for (int kk = 0; kk < BQ / 8; ++kk) {
    if constexpr (DROP) {
      float pz[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) pz[e] = sacc[4 * kk + e] * tf32_drop_z(kbits, 4 * kk + e, keep_scale);
      pack_p_step(pa[kk], pz);
    } else {
      pack_p_step(pa[kk], sacc + 4 * kk);
    }
  }
}

// dS^T's accumulators dpacc as dK's A fragments da (pack_p_step: rounded) and, for dQ^T, to shared memory as dS
// [BQ q][64 keys] at ds_gen (swizzled, 2 panels of 32 keys; the same rounded bits).
template <int BQ>
__device__ __forceinline__ void tf32_bwd_ds_out(const float (&dpacc)[BQ / 2], uint32_t (&da)[BQ / 8][4], uint8_t* ds_gen,
                                                int t, const int (&key_l)[2]) {
#pragma unroll
  for (int kk = 0; kk < BQ / 8; ++kk) {
    pack_p_step(da[kk], dpacc + 4 * kk);
    // da[kk] = {(g, 2t), (g + 8, 2t), (g, 2t + 1), (g + 8, 2t + 1)} of step kk: rows key_l[x & 1],
    // query 8kk + 2t + (x >> 1).
#pragma unroll
    for (int x = 0; x < 4; ++x)
      *reinterpret_cast<uint32_t*>(ds_gen + swz128_offset_f32(BQ, 8 * kk + 2 * t + (x >> 1), key_l[x & 1])) = da[kk][x];
  }
}

// dS^T = P^T (dP^T - dsum) into dpacc, then as dK's A fragments da (rounded) and, for dQ^T, to shared memory as dS
// [BQ q][64 keys] at ds_gen (swizzled, 2 panels of 32 keys; the same rounded bits). FEAT (Tf32Feat bits): with
// kTf32Drop dP^T is Z dP^T first (sm80's rule, dS = P (dP Z - dsum); kbits, keep_scale: tf32_drop_z); with kTf32Cap
// dS^T is times 1 - tanh^2 (softcap_ds with inv_cap_log2 and the rows' lse2). Both: P (1 - tanh^2) (dP Z - dsum).
template <int BQ, int FEAT = 0>
__device__ __forceinline__ void tf32_bwd_ds(float (&dpacc)[BQ / 2], const float (&sacc)[BQ / 2], uint32_t (&da)[BQ / 8][4],
                                            uint8_t* ds_gen, const float* rows_f, int s, int t, const int (&key_l)[2],
                                            float inv_cap_log2 = 0.f, uint32_t kbits = 0u, float keep_scale = 0.f) {
  constexpr bool CAP = (FEAT & kTf32Cap) != 0, DROP = (FEAT & kTf32Drop) != 0;
  const float* dsum_s = rows_f + (kTf32BwdRowWords * s + 1) * BQ;
  const float* lse2_s = rows_f + (kTf32BwdRowWords * s) * BQ;
#pragma unroll
  for (int j = 0; j < BQ / 8; ++j) {
    const float2 dsm = *reinterpret_cast<const float2*>(dsum_s + 8 * j + 2 * t);
    float2 l2 = make_float2(0.f, 0.f);
    if constexpr (CAP) l2 = *reinterpret_cast<const float2*>(lse2_s + 8 * j + 2 * t);
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int x = 4 * j + 2 * h2 + e;
        float dp = dpacc[x];
        if constexpr (DROP) dp *= tf32_drop_z(kbits, x, keep_scale);
        if constexpr (CAP)
          dpacc[x] = softcap_ds(sacc[x], dp, e ? dsm.y : dsm.x, e ? l2.y : l2.x, inv_cap_log2);
        else
          dpacc[x] = sacc[x] * (dp - (e ? dsm.y : dsm.x));
      }
  }
  tf32_bwd_ds_out<BQ>(dpacc, da, ds_gen, t, key_l);
}

// dS^T with a dense mask / bias / dbias (kTf32Dense; not with dropout): dlogit = P^T (dP^T - dsum) (sm80's order)
// stored to dbias at the unit's elements inside [Tq, Tk] (dbias_u: p.dbias at row i0 of the unit's (b, h), null
// without dbias; rows_left = Tq - i0; every other element keeps the launcher's 0, tf32_bwd_zero_dbias); CAP: dS^T =
// dlogit (1 - tanh^2), tanh recovered from P with the bias taken out, (log2 P + lse2 - log2e b) / (c log2e) (a P of
// 0 has dS = 0 whatever the factor). Then as tf32_bwd_ds: dK's A fragments and dS in shared memory.
template <int BQ, int FEAT>
__device__ __forceinline__ void tf32_bwd_dense_ds(float (&dpacc)[BQ / 2], const float (&sacc)[BQ / 2],
                                                  uint32_t (&da)[BQ / 8][4], uint8_t* ds_gen, const float* rows_f,
                                                  int s, int t, const int (&key_l)[2], const Tf32BwdDense<BQ>& dn,
                                                  float inv_cap_log2, float* dbias_u, int64_t Tk, int64_t rows_left,
                                                  const int64_t (&key_g)[2]) {
  static_assert((FEAT & kTf32Dense) != 0 && (FEAT & kTf32Drop) == 0, "a dense mask / bias, not with dropout");
  constexpr bool CAP = (FEAT & kTf32Cap) != 0;
  const float* dsum_s = rows_f + (kTf32BwdRowWords * s + 1) * BQ;
  const float* lse2_s = rows_f + (kTf32BwdRowWords * s) * BQ;
#pragma unroll
  for (int j = 0; j < BQ / 8; ++j) {
    const float2 dsm = *reinterpret_cast<const float2*>(dsum_s + 8 * j + 2 * t);
    float2 l2 = make_float2(0.f, 0.f);
    if constexpr (CAP) l2 = *reinterpret_cast<const float2*>(lse2_s + 8 * j + 2 * t);
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int x = 4 * j + 2 * h2 + e, q = 8 * j + 2 * t + e;
        const float pv = sacc[x];
        float dl = pv * (dpacc[x] - (e ? dsm.y : dsm.x));
        if (dbias_u && q < rows_left && key_g[h2] < Tk) dbias_u[q * Tk + key_g[h2]] = dl;
        if constexpr (CAP) {
          const float th = (__log2f(pv) + (e ? l2.y : l2.x) - 1.4426950408889634f * dn.bv[x]) * inv_cap_log2;
          dl *= pv > 0.f ? 1.f - th * th : 1.f;
        }
        dpacc[x] = dl;
      }
  }
  tf32_bwd_ds_out<BQ>(dpacc, da, ds_gen, t, key_l);
}

// tf32_bwd_dense_ds for the unit of query head h, rows i0 .., batch b: the call both kernels make (dbias_u formed
// from p.dbias, null without dbias; soft-cap's factor when FEAT has kTf32Cap).
template <int BQ, int FEAT>
__device__ __forceinline__ void tf32_bwd_dense_ds_unit(float (&dpacc)[BQ / 2], const float (&sacc)[BQ / 2],
                                                       uint32_t (&da)[BQ / 8][4], uint8_t* ds_gen, const float* rows_f,
                                                       int s, int t, const int (&key_l)[2], const int64_t (&key_g)[2],
                                                       const Tf32BwdDense<BQ>& dn, const FlashBwdParams& p, int b,
                                                       int64_t h, int64_t i0) {
  const AttnShape& sh = p.shape;
  float* dbias_u = p.dbias ? p.dbias + ((static_cast<int64_t>(b) * sh.H + h) * sh.Tq + i0) * sh.Tk : nullptr;
  tf32_bwd_dense_ds<BQ, FEAT>(dpacc, sacc, da, ds_gen, rows_f, s, t, key_l, dn,
                              (FEAT & kTf32Cap) ? Tf32BwdCap(p.score).inv_cap_log2 : 0.f, dbias_u, sh.Tk, sh.Tq - i0,
                              key_g);
}

// dbias zeroed before a kTf32Dense launch (after the launcher's last fallback to sm80, which zeroes it itself):
// the kernels store only the elements of the units they visit.
inline cudaError_t tf32_bwd_zero_dbias(const FlashBwdParams& p, cudaStream_t stream) {
  if (!p.dbias) return cudaSuccess;
  const AttnShape& s = p.shape;
  return cudaMemsetAsync(p.dbias, 0, static_cast<size_t>(s.B * s.H * s.Tq * s.Tk) * sizeof(float), stream);
}

// The call's Tf32Feat bits for the backwards: tf32_feat's soft-cap and dropout, kTf32Dense for a dense mask, a bias
// or dbias.
inline int tf32_bwd_feat(const FlashBwdParams& p) {
  return tf32_feat(p.score.softcap, p.dropout.rate) | (p.mask.mask || p.score.bias || p.dbias ? kTf32Dense : 0);
}
// Whether the backwards take the call's features: any but a dense mask / bias / dbias with dropout (sm80's TF32
// backward takes those), and the dense ones only while bwd_tf32_dense_enabled() (on by default: see there).
inline bool tf32_bwd_feat_applies(const FlashBwdParams& p) {
  const int f = tf32_bwd_feat(p);
  return !(f & kTf32Dense) || (!(f & kTf32Drop) && bwd_tf32_dense_enabled());
}

// dQacc[q][d0 + d] += dQ^T[d][q] by scalar atomics: dqt is a wgmma m64n32 accumulator of dQ^T (element x = 4j +
// 2h2 + e: d = key_l[h2], q = 8j + 2t + e), acc the query tile's first row of a row-major accumulator of row stride
// ld; rows q >= rows_left (past Tq) skipped.
__device__ __forceinline__ void tf32_dq_add_scalar(float* acc, int ld, int d0, const float (&dqt)[16], int64_t rows_left,
                                                   int t, const int (&key_l)[2]) {
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int q = 8 * j + 2 * t + e;
      if (q < rows_left) {
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2) atomicAdd(acc + q * ld + d0 + key_l[h2], dqt[4 * j + 2 * h2 + e]);
      }
    }
}

// dQ^T's m64n32 accumulator dqt added into an 8 KiB fragment-ordered block of the accumulator (blk(): its address,
// formed by thread 0 alone) by the copy engine: the consumer warpgroup (thread tid, named barrier bar) stores it to
// its staging block stage (float4 j * 128 + tid = dqt[4j .. 4j + 3]: a warp's 32 consecutive float4, conflict-free),
// fenced for the async proxy; thread 0 then issues the bulk reduce-add and commits it (before stage is written
// again, thread 0 waits with bulk_wait_read and tells the warpgroup).
template <class Blk>
__device__ __forceinline__ void tf32_dq_add_bulk(Blk blk, uint32_t stage, const float (&dqt)[16], int tid, int bar) {
#pragma unroll
  for (int j = 0; j < 4; ++j)
    st_shared_v4_f32(stage + (j * 128 + tid) * 16, dqt[4 * j], dqt[4 * j + 1], dqt[4 * j + 2], dqt[4 * j + 3]);
  fence_proxy_async();  // the stores above before the copy engine's (async proxy) read
  named_bar_sync(bar, 128);
  if (tid == 0) {
    bulk_reduce_add_f32(blk(), stage, 32 * 64 * 4);
    bulk_commit();
  }
}

// The m64k8 A fragment of M^T for d panel `panel` (rows d = 64 panel + key_l[x & 1]) and k8 step k (columns
// 8k + t + 4 (x >> 1) of M's rows), M a row-major tile of `Rows` rows as TMA lands it at `tile` (panels of Rows rows
// of 128 bytes, 128-byte swizzle): K^T from the K tile (dQ^T at head dims 128 and 256), dO^T / Q^T from the dOr / Qr
// tiles (dV^T, dK^T at 256).
template <int Rows>
__device__ __forceinline__ void tf32_t_frag(uint32_t (&a)[4], uint32_t tile, int panel, int k, int t,
                                            const int (&key_l)[2]) {
#pragma unroll
  for (int x = 0; x < 4; ++x)
    a[x] = __float_as_uint(
        ld_shared_f32(tile + swz128_offset_f32(Rows, 8 * k + t + 4 * (x >> 1), 64 * panel + key_l[x & 1])));
}

// acc [64 keys x D] += A B over one unit's BQ queries (dV += P^T dO, dK += dS^T Q): A the k8 steps' fragments,
// B a one-panel [D x BQ] tile at b_tile (k8 step kk at byte kk * 32); its own commit group.
template <int D, int BQ>
__device__ __forceinline__ void tf32_bwd_unit_product(float (&acc)[D / 2], uint32_t (&a)[BQ / 8][4], uint32_t b_tile) {
  fence_regs(acc);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < BQ / 8; ++kk) wgmma_tf32_rs_acc<D>(acc, a[kk], tf32_bwd_desc(b_tile, kk * 32, 16));
  wgmma_commit();
}

// The pre-passes' pieces (THREADS threads; D = D1 - 1 columns, the kernel's head dim, a row of sm padded by one
// float so that the transposed reads hit 32 banks). Rows row0 .. row0 + R - 1 of a [rows, cols] float32 tensor at
// src (row stride ld; rows at or past limit and columns at or past cols (a multiple of 4, <= D: a head dim padded
// up) read as 0), rounded to tf32 (cvt.rna, as the main kernels' K / V rounding and sm80's TF32 kernels), into sm;
// out (may be null): the rounded rows also stored compactly at out + r * D (one 16-byte .cg store each: the main
// kernel's TMA reads them from L2).
template <int THREADS, int R, int D1>
__device__ __forceinline__ void tf32_prepass_load_rows(const float* src, int64_t ld, int64_t row0, int64_t limit,
                                                       int cols, float (&sm)[R][D1], float* out) {
  constexpr int kD = D1 - 1, kC4 = kD / 4;  // float4 per row
  for (int i = threadIdx.x; i < R * kC4; i += THREADS) {
    const int r = i / kC4, col = 4 * (i % kC4);
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row0 + r < limit && col < cols) x = *reinterpret_cast<const float4*>(src + (row0 + r) * ld + col);
    const uint4 xr = make_uint4(to_tf32(x.x), to_tf32(x.y), to_tf32(x.z), to_tf32(x.w));
    if (out) __stcg(reinterpret_cast<uint4*>(out + r * kD + col), xr);
    sm[r][col] = __uint_as_float(xr.x), sm[r][col + 1] = __uint_as_float(xr.y);
    sm[r][col + 2] = __uint_as_float(xr.z), sm[r][col + 3] = __uint_as_float(xr.w);
  }
}
// sm's rows transposed: out[d * ld + u] = sm[PERM ? tf32_kperm_inv(u) : u][d] for u < R (a warp: 32 consecutive
// positions of one row d).
template <int THREADS, bool PERM, int R, int D1>
__device__ __forceinline__ void tf32_prepass_store_transposed(const float (&sm)[R][D1], float* out, int64_t ld) {
  for (int i = threadIdx.x; i < (D1 - 1) * R; i += THREADS) {
    const int d = i / R, u = i % R;
    out[d * ld + u] = sm[PERM ? tf32_kperm_inv(u) : u][d];
  }
}

// Epilogue: dK = scale dK_acc, dV [64 keys x D] accumulators (rows key_g[h2], columns 8j + 2t, +1) to p.dk / p.dv of
// kv head hk, batch b (float2 stores; keys past Tk skipped). PAD (a call padded up): columns past the real D / Dv
// skipped too (both even: a pair is stored whole or not at all); the kernels for the exact head dims have no such
// check (PAD = false), so that their machine code stays as it was measured.
template <int D, bool PAD>
__device__ __forceinline__ void tf32_bwd_store_dkdv(const FlashBwdParams& p, const float (&dk)[D / 2],
                                                    const float (&dv)[D / 2], const int64_t (&key_g)[2], int hk, int b,
                                                    int t) {
  const AttnShape& sh = p.shape;
  const float scale = p.score.scale;
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    if (key_g[h2] >= sh.Tk) continue;
    float* dkr = static_cast<float*>(p.dk) + b * sh.k_stride[0] + key_g[h2] * sh.k_stride[1] + hk * sh.k_stride[2];
    float* dvr = static_cast<float*>(p.dv) + b * sh.v_stride[0] + key_g[h2] * sh.v_stride[1] + hk * sh.v_stride[2];
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      if (!PAD || 8 * j + 2 * t < sh.D)
        *reinterpret_cast<float2*>(dkr + 8 * j + 2 * t) =
            make_float2(scale * dk[4 * j + 2 * h2], scale * dk[4 * j + 2 * h2 + 1]);
      if (!PAD || 8 * j + 2 * t < sh.Dv)
        *reinterpret_cast<float2*>(dvr + 8 * j + 2 * t) = make_float2(dv[4 * j + 2 * h2], dv[4 * j + 2 * h2 + 1]);
    }
  }
}

// dq[b, i, h, d] = scale * dQ^T[d][q] from a fragment-ordered accumulator: per (b, h) dq_rows / 32 blocks of
// [32 q x HD d], each HD / 64 sub-blocks of 8 KiB (d 64 sub .. 64 sub + 63) in which float4 j * 128 + tid holds a
// consumer thread's dQ^T accumulators x = 4j .. 4j + 3 of an m64n32 wgmma (x = 4j + 2h2 + e: d 16 (tid / 32) +
// (tid % 32) / 4 + 8 h2, q 8j + 2 (tid % 4) + e). One block of 256 threads per (b, h, 32-query tile)
// (grid-stride), through a [32][HD + 1] shared tile; rows past Tq and columns past D (padded up) are not written.
template <int HD>
__global__ void __launch_bounds__(256) tf32_dq_frag_convert_kernel(const FlashBwdParams p, const float* acc,
                                                                  int64_t dq_rows) {
  constexpr int kRows = 32;
  __shared__ float tile[kRows][HD + 1];
  const AttnShape& sh = p.shape;
  const int64_t tiles = dq_rows / kRows, blocks = sh.B * sh.H * tiles;
  for (int64_t blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
    const float4* src = reinterpret_cast<const float4*>(acc) + blk * (kRows * HD / 4);
#pragma unroll
    for (int m = 0; m < HD / 32; ++m) {
      const int f = m * 256 + static_cast<int>(threadIdx.x), sub = f / 512, j = (f % 512) / 128, tid = f % 128;
      const int d0 = 64 * sub + 16 * (tid / 32) + (tid % 32) / 4, q0 = 8 * j + 2 * (tid % 4);
      const float4 v = src[f];
      tile[q0][d0] = v.x;
      tile[q0 + 1][d0] = v.y;
      tile[q0][d0 + 8] = v.z;
      tile[q0 + 1][d0 + 8] = v.w;
    }
    __syncthreads();
    const int64_t bh = blk / tiles, h = bh % sh.H, b = bh / sh.H, i0 = (blk % tiles) * kRows;
    float* dq = static_cast<float*>(p.dq) + b * sh.q_stride[0] + h * sh.q_stride[2];
#pragma unroll
    for (int m = 0; m < HD / 16; ++m) {
      const int x = m * 256 + static_cast<int>(threadIdx.x), r = x / (HD / 2), c2 = x % (HD / 2);
      if (i0 + r < sh.Tq && 2 * c2 < sh.D)
        *reinterpret_cast<float2*>(dq + (i0 + r) * sh.q_stride[1] + 2 * c2) =
            make_float2(p.score.scale * tile[r][2 * c2], p.score.scale * tile[r][2 * c2 + 1]);
    }
    __syncthreads();  // the tile is written again for the next block
  }
}

// Its launch: one block per (b, h, 32-query tile), at most 2^20 (the kernel strides over the rest).
template <int HD>
inline cudaError_t tf32_dq_frag_convert(const FlashBwdParams& p, const float* acc, int64_t dq_rows, cudaStream_t stream) {
  const int64_t nb = p.shape.B * p.shape.H * (dq_rows / 32);
  tf32_dq_frag_convert_kernel<HD><<<static_cast<unsigned>(nb < (1 << 20) ? nb : (1 << 20)), 256, 0, stream>>>(
      p, acc, dq_rows);
  return cudaGetLastError();
}

// The dQ accumulator of the Hopper TF32 backwards (flash_bwd_sm90_tf32.cu, _d128.cu, _d256.cu), in one of two
// layouts: row-major [B, H, Tq, HD] (sm80's, converted by bwd_dq_convert_tf32) or, BLOCKED, fragment-ordered
// blocks of 32 rows (tf32_dq_frag_convert) over the workspace's dq_rows rows per (b, h).
// Its rows per (b, h): Tq, or when BLOCKED dq_rows, which must be a multiple of the kernel's query tile BQ and at
// least Tq; 0 where it is not (the caller falls back before launching anything).
template <int BQ>
inline int64_t tf32_dq_acc_rows(const Tf32BwdWorkspaceParts& ws, const AttnShape& s, bool blocked) {
  if (!blocked) return s.Tq;
  return ws.dq_rows % BQ == 0 && ws.dq_rows >= s.Tq ? ws.dq_rows : 0;
}
// Zeroes its rows x HD floats per (b, h) before the backward kernel adds into them.
template <int HD>
inline cudaError_t tf32_dq_acc_zero(const AttnShape& s, float* acc, int64_t rows, cudaStream_t stream) {
  return cudaMemsetAsync(acc, 0, static_cast<size_t>(s.B * s.H * rows * HD) * sizeof(float), stream);
}
// dq = scale * the accumulator, in either layout.
template <int HD>
inline cudaError_t tf32_dq_acc_finish(const FlashBwdParams& p, const float* acc, int64_t rows, bool blocked,
                                      cudaStream_t stream) {
  return blocked ? tf32_dq_frag_convert<HD>(p, acc, rows, stream)
                 : bwd_dq_convert_tf32(p, acc, HD, stream);  // sm80's, the same row-major layout
}

}  // namespace sm90
}  // namespace cuda
}  // namespace flashattn

#endif  // TF_FLASHATTN_KERNELS_SM90_SM90_TF32_BWD_CUH_
