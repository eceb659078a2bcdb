// FlashAttention-2 backward for float32 inputs on TF32 tensor cores (params.allow_tf32).
//
// Pre-pass (flash_bwd.cu): Dsum = rowsum(dO ∘ O) - d_lse, [B, H, Tq] float32 (workspace).
// Main kernel, as flash_bwd.cu: one CTA per (key tile of BKb = 16 MTK NW keys, column split, kv head
// hk, batch b); warp w owns keys [16 MTK w, 16 MTK (w + 1)) in every phase (MTK = 2, two m16 key tiles
// per warp, in the head-dim-64 sm_90 defaults, lets each Q / dO fragment serve both; MTK = 1 elsewhere). K and V stay in shared memory,
// dK and dV (columns [split·HD/NSPLIT, (split+1)·HD/NSPLIT)) accumulate in registers. For every
// query head of the group and every query tile (BQb rows) that sees the key tile (Q, dO, lse,
// Dsum through shared memory, QST stages):
//   A: Sᵀ = K Qᵀ, dPdᵀ = V dOᵀ [keys, queries]   mma m16n8k8 tf32; A = K / V [key][d] and
//      B = Q / dO [query][d] through ldmatrix x4 (8x8 b16 matrix = 8 rows of 4 floats: thread
//      (g, t) gets the float at (row g, col t), the tf32 fragment layout)
//      P = 2^(z - log2e·lse), Z = keep_scale or 0 (dropout), dlogit = P ∘ (dPd ∘ Z - Dsum)
//      (-> dbias), dS = dlogit ∘ softcap', Pd = P ∘ Z; dS (tf32) -> shared memory [key][query]
//   B: dV += Pdᵀ dO, dK += dSᵀ Q: A = Pd / dS straight from phase A's accumulators with the k
//      index (query) permuted, A col t <-> query 2t, A col t+4 <-> query 2t+1, so a = {c0, c2, c1,
//      c3} of one n8 tile; B = dO / Q rows 2t, 2t+1 (col g) by 32-bit shared loads
//   C: dQacc[b, h, rows] += dS K (float32 atomics; A = dS from the [key][query] tile, B = K rows,
//      both by 32-bit loads with the key index permuted the same way)
// Shared rows are padded to a stride ≡ 4 (mod 32) words: ldmatrix and the loads of rows 2t, 2t+1
// at column g are bank-conflict free. Every thread rounds the chunks it copied by cp.async to tf32
// in place once they land, and scales its lse entries by log2e.
// After: dK *= scale (written with dV); dQ = scale · dQacc by a last kernel.
// Deterministic mode: no phase C; flash_bwd_dq_tf32_kernel computes dQ (and dbias) per query tile
// in registers (S = Q Kᵀ, dPd = dO Vᵀ by ldmatrix, dQ += dS K with A = dS from the accumulators
// as in phase B), so the summation order is fixed.
// Head dims are padded with zeros to HD ∈ {64, 128, 256}. HD 256 needs >= 210 KiB of shared
// memory per SM (sm_90); elsewhere it takes the full-precision SIMT kernels.
#include "cc/kernels/common/flash_cuda_common.cuh"
#include "cc/kernels/sm80/flash_bwd_tile.cuh"
#include "cc/kernels/common/flash_cuda_internal.h"

namespace flashattn {
namespace cuda {

struct Tf32BwdArgs {
  FlashBwdParams p;
  const float* dsum;  // [B, H, Tq]
  float* dq_acc;      // [B, H, Tq, HD] or null (deterministic: no phase C)
  bool vec;           // 16-byte loads, 8-byte stores (D, Dv, strides % 4 == 0, aligned bases)
};

template <int HD, int BKb, int BQb, int NW, int QST, int NSPLIT>
struct Tf32BwdCfg {
  static constexpr int kThreads = NW * 32;
  static constexpr int MTK = BKb / (16 * NW);  // m16 key tiles per warp
  static_assert(BKb == 16 * NW * MTK && (MTK == 1 || MTK == 2), "one or two m16 key tiles per warp");
  static_assert(BQb % 16 == 0 && HD % (8 * NSPLIT) == 0, "tile shapes");
  static constexpr int cmin(int a, int b) { return a < b ? a : b; }
  static constexpr int AN = BQb / 8;           // phase A: query n8 tiles per warp
  static constexpr int HDS = HD / NSPLIT;      // dK / dV / dQ columns of one CTA
  static constexpr int BN = HDS / 8;           // phase B: n8 tiles of dK, dV
  // phase C: dQ [BQb, HDS] over C_WM x C_WN warps, each CM m16 x CN n8 tiles in chunks of CC
  static constexpr int C_WM = cmin(NW, BQb / 16), C_WN = NW / C_WM;
  static constexpr int CM = BQb / 16 / C_WM, CN = BN / C_WN, CC = cmin(CN, 8);
  static_assert(C_WM * C_WN == NW && CN * C_WN == BN && CN % CC == 0, "phase C split");
  static constexpr int kSS = BQb + 4;          // dS row stride: ≡ 4 mod 16 words
  using KTile = STile<BKb, HD, 4>;
  using QTile = STile<BQb, HD, 4>;
  static constexpr size_t kSmem =
      (2 * KTile::kElems + QST * 2 * QTile::kElems + BKb * kSS + QST * 2 * BQb) * sizeof(float);
};

// q [B, Tq, H, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv], dO [B, Tq, H, Dv] float32
// -> dk [B, Tk, Hkv, D], dv [B, Tk, Hkv, Dv], dq_acc [B, H, Tq, HD] (+=), dbias [B, H, Tq, Tk].
// SC: the devices that run it (SmemClass).
template <int HD, int BKb, int BQb, int NW, int QST, int NSPLIT, bool GEN, SmemClass SC = SmemClass::kAny>
__global__ void __launch_bounds__(NW * 32) flash_bwd_tf32_kernel(const Tf32BwdArgs args) {
  FA_KERNEL_FOR(SC)
  using Cfg = Tf32BwdCfg<HD, BKb, BQb, NW, QST, NSPLIT>;
  using KTile = typename Cfg::KTile;
  using QTile = typename Cfg::QTile;
  constexpr int NT = Cfg::kThreads, kSS = Cfg::kSS, HDS = Cfg::HDS;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* sK = reinterpret_cast<float*>(smem_raw);  // [BKb, HD + 4]
  float* sV = sK + KTile::kElems;                   // [BKb, HD + 4]
  float* sQ = sV + KTile::kElems;                   // QST x [BQb, HD + 4]
  float* sdO = sQ + QST * QTile::kElems;            // QST x [BQb, HD + 4]
  float* sdS = sdO + QST * QTile::kElems;           // [BKb, BQb + 4] dS (tf32), [key][query]
  float* sL = sdS + BKb * kSS;                      // QST x [BQb] log2e * lse
  float* sDs = sL + QST * BQb;                      // QST x [BQb] Dsum

  const FlashBwdParams& p = args.p;
  const AttnShape& sh = p.shape;
  const int split = NSPLIT == 1 ? 0 : static_cast<int>(blockIdx.x % NSPLIT);
  const int64_t j0 = static_cast<int64_t>(blockIdx.x / NSPLIT) * BKb;
  const int64_t hk = blockIdx.y, b = blockIdx.z;
  const int64_t G = sh.H / sh.Hkv;
  const int64_t qlim = q_limit(p.mask, sh, b), klim = k_limit(p.mask, sh, b);
  const int nqb = static_cast<int>((sh.Tq + BQb - 1) / BQb);  // the host checks G * nqb < 2^31
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const float* q = static_cast<const float*>(p.q);
  const float* k = static_cast<const float*>(p.k);
  const float* v = static_cast<const float*>(p.v);
  const float* d_o = static_cast<const float*>(p.d_o);
  const int D = static_cast<int>(sh.D), Dv = static_cast<int>(sh.Dv);
  const uint32_t* uK = reinterpret_cast<const uint32_t*>(sK);
  const uint32_t* udS = reinterpret_cast<const uint32_t*>(sdS);

  const KeyTileUnits<BQb> units(p.mask, nqb, qlim, klim, j0, BKb, static_cast<int>(G));
  auto load_query_side = [&](int hl, int qb, int stage) {
    const int64_t h = hk * G + hl, i0 = static_cast<int64_t>(qb) * BQb;
    load_tile<float, BQb, HD, NT>(sQ + stage * QTile::kElems, q, sh.q_stride, b, h, i0, sh.Tq, D, args.vec);
    load_tile<float, BQb, HD, NT>(sdO + stage * QTile::kElems, d_o, sh.o_stride, b, h, i0, sh.Tq, Dv, args.vec);
    for (int r = tid; r < BQb; r += NT) {
      const int64_t i = i0 + r;
      const bool in = i < sh.Tq;
      const int64_t row = (b * sh.H + h) * sh.Tq + (in ? i : 0);
      cp_async4(sL + stage * BQb + r, p.lse + row, in);
      cp_async4(sDs + stage * BQb + r, args.dsum + row, in);
    }
  };
  // After cp_async_wait: round this thread's chunks of a query-side stage, lse -> log2e * lse.
  auto finish_query_side = [&](int stage) {
    round_tile_tf32<BQb, HD, NT>(sQ + stage * QTile::kElems);
    round_tile_tf32<BQb, HD, NT>(sdO + stage * QTile::kElems);
    for (int r = tid; r < BQb; r += NT) sL[stage * BQb + r] *= kLog2e;  // -inf stays -inf
  };

  constexpr int MTK = Cfg::MTK;
  // keys kr0 + 16 mk + g (+8), cols split*HDS + 8 nd + 2 tq (+1)
  float dk[MTK][HDS / 8][4], dv[MTK][HDS / 8][4];
#pragma unroll
  for (int mk = 0; mk < MTK; ++mk)
#pragma unroll
    for (int nd = 0; nd < HDS / 8; ++nd)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[mk][nd][e] = dv[mk][nd][e] = 0.f;

  const float sl2 = p.score.scale * kLog2e;
  const bool dropout = p.dropout.rate > 0.f;
  const int kr0 = warp * 16 * MTK;  // the warp's keys: kr0 + [0, 16 MTK)

  int hl = 0, qb = units.lo;
  units.seek(hl, qb);
  if (hl < G) {
    load_tile<float, BKb, HD, NT>(sK, k, sh.k_stride, b, hk, j0, sh.Tk, D, args.vec);
    load_tile<float, BKb, HD, NT>(sV, v, sh.v_stride, b, hk, j0, sh.Tk, Dv, args.vec);
    load_query_side(hl, qb, 0);
    cp_async_commit();
  }
  int n = 0;
  while (hl < G) {
    int hl_n = hl, qb_n = qb + 1;  // the next unit
    units.seek(hl_n, qb_n);
    const int64_t h = hk * G + hl, i0 = static_cast<int64_t>(qb) * BQb;
    const int st = QST == 2 ? (n & 1) : 0;
    cp_async_wait<0>();
    if (n == 0) {
      round_tile_tf32<BKb, HD, NT>(sK);
      round_tile_tf32<BKb, HD, NT>(sV);
    }
    finish_query_side(st);
    __syncthreads();  // stage st landed and rounded; all warps are done with the previous unit
    if (QST == 2 && hl_n < G) {
      load_query_side(hl_n, qb_n, st ^ 1);
      cp_async_commit();
    }
    const float* cQ = sQ + st * QTile::kElems;
    const float* cdO = sdO + st * QTile::kElems;
    const uint32_t* ucQ = reinterpret_cast<const uint32_t*>(cQ);
    const uint32_t* ucdO = reinterpret_cast<const uint32_t*>(cdO);
    const float* cL = sL + st * BQb;
    const float* cDs = sDs + st * BQb;

    // ---- phase A: Sᵀ = K Qᵀ, dPdᵀ = V dOᵀ for keys kr0 + [0, 16 MTK), all BQb queries ---------
    // (with MTK = 2 each Q / dO fragment serves both m16 key tiles)
    float sacc[MTK][Cfg::AN][4], dpacc[MTK][Cfg::AN][4];
#pragma unroll
    for (int mk = 0; mk < MTK; ++mk)
#pragma unroll
      for (int nt = 0; nt < Cfg::AN; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) sacc[mk][nt][e] = dpacc[mk][nt][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HD / 8; ++kk) {
      uint32_t ak[MTK][4], av[MTK][4];
#pragma unroll
      for (int mk = 0; mk < MTK; ++mk) {
        ldsm_x4(ak[mk], sK + KTile::off(kr0 + 16 * mk + (lane & 15), kk * 8 + (lane >> 4) * 4));
        ldsm_x4(av[mk], sV + KTile::off(kr0 + 16 * mk + (lane & 15), kk * 8 + (lane >> 4) * 4));
      }
#pragma unroll
      for (int nt2 = 0; nt2 < Cfg::AN / 2; ++nt2) {
        uint32_t bq[4], bo[4];
        const int off = QTile::off(nt2 * 16 + (lane & 7) + (lane >> 4) * 8, kk * 8 + ((lane >> 3) & 1) * 4);
        ldsm_x4(bq, cQ + off);
        ldsm_x4(bo, cdO + off);
#pragma unroll
        for (int mk = 0; mk < MTK; ++mk) {
          mma_tf32(sacc[mk][2 * nt2], ak[mk], bq);
          mma_tf32(sacc[mk][2 * nt2 + 1], ak[mk], bq + 2);
          mma_tf32(dpacc[mk][2 * nt2], av[mk], bo);
          mma_tf32(dpacc[mk][2 * nt2 + 1], av[mk], bo + 2);
        }
      }
    }
    // Element-wise: sacc <- Pd = P Z, dpacc <- dS (flash_bwd_tile.cuh; dbias from split 0 only).
    // Dropout keep bits per m16 key tile (a Philox call covers 32 keys x 8 queries: with MTK = 1 a
    // thread uses half of each call, with MTK = 2 all of it).
    uint32_t kbits[MTK] = {};
    if (GEN && dropout) drop_cols_bits<MTK, Cfg::AN>(kbits, drop_tile(p.dropout, b, h), j0 + kr0, i0, g, tq);
    const bool in_range = !GEN && tile_in_range(p.mask, i0, BQb, j0, BKb, qlim, klim);
#pragma unroll
    for (int mk = 0; mk < MTK; ++mk)
      bwd_tile_probs<float, Cfg::AN, GEN>(sacc[mk], dpacc[mk], p, b, h, i0, j0, kr0 + 16 * mk, cL, cDs, sl2,
                                          in_range, qlim, klim, GEN && dropout, kbits[mk], split == 0, g, tq);
    // To tf32 bit patterns; dS into shared memory for phase C.
    uint32_t pP[MTK][Cfg::AN][4], pS[MTK][Cfg::AN][4];
#pragma unroll
    for (int mk = 0; mk < MTK; ++mk)
#pragma unroll
      for (int nt = 0; nt < Cfg::AN; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          pP[mk][nt][e] = to_tf32(sacc[mk][nt][e]);
          pS[mk][nt][e] = to_tf32(dpacc[mk][nt][e]);
        }
    if (args.dq_acc) {
#pragma unroll
      for (int mk = 0; mk < MTK; ++mk)
#pragma unroll
        for (int nt = 0; nt < Cfg::AN; ++nt)
#pragma unroll
          for (int r = 0; r < 2; ++r)
            *reinterpret_cast<uint2*>(sdS + (kr0 + 16 * mk + g + 8 * r) * kSS + nt * 8 + 2 * tq) =
                make_uint2(pS[mk][nt][2 * r], pS[mk][nt][2 * r + 1]);
    }

    // ---- phase B: dV += Pdᵀ dO, dK += dSᵀ Q (k8 step nt = queries 8 nt + {2t, 2t+1}) ---------
    // (each dO / Q fragment serves the warp's MTK key tiles)
#pragma unroll
    for (int nt = 0; nt < Cfg::AN; ++nt) {
      uint32_t ap[MTK][4], ad[MTK][4];
#pragma unroll
      for (int mk = 0; mk < MTK; ++mk) {
        ap[mk][0] = pP[mk][nt][0], ap[mk][1] = pP[mk][nt][2], ap[mk][2] = pP[mk][nt][1], ap[mk][3] = pP[mk][nt][3];
        ad[mk][0] = pS[mk][nt][0], ad[mk][1] = pS[mk][nt][2], ad[mk][2] = pS[mk][nt][1], ad[mk][3] = pS[mk][nt][3];
      }
      const int o0 = QTile::off(nt * 8 + 2 * tq, split * HDS + g);
#pragma unroll
      for (int nd = 0; nd < HDS / 8; ++nd) {
        const uint32_t bo[2] = {ucdO[o0 + nd * 8], ucdO[o0 + QTile::kStride + nd * 8]};
#pragma unroll
        for (int mk = 0; mk < MTK; ++mk) mma_tf32(dv[mk][nd], ap[mk], bo);
        const uint32_t bq[2] = {ucQ[o0 + nd * 8], ucQ[o0 + QTile::kStride + nd * 8]};
#pragma unroll
        for (int mk = 0; mk < MTK; ++mk) mma_tf32(dk[mk][nd], ad[mk], bq);
      }
    }

    // ---- phase C: dQacc += dS K over this CTA's columns ----------------------------------------
    if (args.dq_acc) {
      __syncthreads();  // sdS complete
      const int wm = warp % Cfg::C_WM, wn = warp / Cfg::C_WM;
      const int qr0 = wm * Cfg::CM * 16, dcb = split * HDS + wn * Cfg::CN * 8;
      float* dq_rows = args.dq_acc + ((b * sh.H + h) * sh.Tq) * HD;
#pragma unroll
      for (int ch = 0; ch < Cfg::CN / Cfg::CC; ++ch) {
        const int nb = dcb + ch * Cfg::CC * 8;
        float acc[Cfg::CM][Cfg::CC][4];
#pragma unroll
        for (int mt = 0; mt < Cfg::CM; ++mt)
#pragma unroll
          for (int nt = 0; nt < Cfg::CC; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
#pragma unroll
        for (int ks = 0; ks < BKb / 8; ++ks) {
          const int key = ks * 8 + 2 * tq;  // A col t <-> key 2t, col t+4 <-> key 2t+1
          uint32_t a[Cfg::CM][4];
#pragma unroll
          for (int mt = 0; mt < Cfg::CM; ++mt) {
            const uint32_t* d0 = udS + key * kSS + qr0 + mt * 16 + g;
            a[mt][0] = d0[0];
            a[mt][1] = d0[8];
            a[mt][2] = d0[kSS];
            a[mt][3] = d0[kSS + 8];
          }
          const uint32_t* k0 = uK + KTile::off(key, nb + g);
#pragma unroll
          for (int nt = 0; nt < Cfg::CC; ++nt) {
            const uint32_t bk[2] = {k0[nt * 8], k0[KTile::kStride + nt * 8]};
#pragma unroll
            for (int mt = 0; mt < Cfg::CM; ++mt) mma_tf32(acc[mt][nt], a[mt], bk);
          }
        }
        dq_accumulate<Cfg::CM, Cfg::CC, HD>(dq_rows, acc, i0, qr0, nb, sh.Tq, g, tq);
      }
    }

    if (QST == 1) {
      __syncthreads();  // everyone is done with stage 0 and sdS
      if (hl_n < G) {
        load_query_side(hl_n, qb_n, 0);
        cp_async_commit();
      }
    }
    hl = hl_n;
    qb = qb_n;
    ++n;
  }

  // dK = scale · Σ dSᵀ Q, dV = Σ Pdᵀ dO: every key row of the tile is written (0 if unseen).
  float* dkp = static_cast<float*>(p.dk);
  float* dvp = static_cast<float*>(p.dv);
  const float scale = p.score.scale;
#pragma unroll
  for (int mk = 0; mk < MTK; ++mk)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t j = j0 + kr0 + 16 * mk + g + 8 * r;
    if (j >= sh.Tk) continue;
    float* dkr = dkp + b * sh.k_stride[0] + j * sh.k_stride[1] + hk * sh.k_stride[2];
    float* dvr = dvp + b * sh.v_stride[0] + j * sh.v_stride[1] + hk * sh.v_stride[2];
#pragma unroll
    for (int nd = 0; nd < HDS / 8; ++nd) {
      const int d = split * HDS + nd * 8 + 2 * tq;
      if (args.vec) {
        if (d < D) *reinterpret_cast<float2*>(dkr + d) = make_float2(dk[mk][nd][2 * r] * scale, dk[mk][nd][2 * r + 1] * scale);
        if (d < Dv) *reinterpret_cast<float2*>(dvr + d) = make_float2(dv[mk][nd][2 * r], dv[mk][nd][2 * r + 1]);
      } else {
        if (d < D) dkr[d] = dk[mk][nd][2 * r] * scale;
        if (d + 1 < D) dkr[d + 1] = dk[mk][nd][2 * r + 1] * scale;
        if (d < Dv) dvr[d] = dv[mk][nd][2 * r];
        if (d + 1 < Dv) dvr[d + 1] = dv[mk][nd][2 * r + 1];
      }
    }
  }
}

// ---- deterministic dQ ---------------------------------------------------------------------
template <int HD, int NW, int BK>
struct Tf32DqCfg {
  static constexpr int BQ = 16 * NW, kThreads = 32 * NW;
  using QTile = STile<BQ, HD, 4>;
  using KTile = STile<BK, HD, 4>;
  static constexpr size_t kSmem = (2 * QTile::kElems + 2 * KTile::kElems) * sizeof(float);
};

// One CTA of NW warps per (query tile of 16 NW rows, head h, batch b); warp w owns rows
// [16 w, 16 w + 16) and accumulates dQ [16, HD] in registers over the key tiles (K, V [BK, HD]
// through shared memory). q, dO [B, Tq, H, D / Dv], k, v [B, Tk, Hkv, D / Dv] -> dq [B, Tq, H, D],
// dbias [B, H, Tq, Tk].
template <int HD, int NW, int BK, bool GEN>
__global__ void __launch_bounds__(NW * 32, 1) flash_bwd_dq_tf32_kernel(const Tf32BwdArgs args) {
  using Cfg = Tf32DqCfg<HD, NW, BK>;
  using QTile = typename Cfg::QTile;
  using KTile = typename Cfg::KTile;
  constexpr int BQ = Cfg::BQ, NT = Cfg::kThreads;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* sQ = reinterpret_cast<float*>(smem_raw);  // [BQ, HD + 4]
  float* sdO = sQ + QTile::kElems;                  // [BQ, HD + 4]
  float* sK = sdO + QTile::kElems;                  // [BK, HD + 4]
  float* sV = sK + KTile::kElems;                   // [BK, HD + 4]
  const uint32_t* uK = reinterpret_cast<const uint32_t*>(sK);

  const FlashBwdParams& p = args.p;
  const AttnShape& sh = p.shape;
  const int64_t h = blockIdx.y, b = blockIdx.z, hk = h / (sh.H / sh.Hkv);
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * BQ;
  const QueryTileKeys<BQ, BK> keys(p.mask, sh, b, i0);
  const int64_t qlim = keys.qlim, klim = keys.klim, jstart = keys.jstart;
  const int ntiles = keys.ntiles;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int wr0 = warp * 16;
  const int D = static_cast<int>(sh.D), Dv = static_cast<int>(sh.Dv);
  const float sl2 = p.score.scale * kLog2e;
  const bool dropout = p.dropout.rate > 0.f;

  float lse2r[2], dsr[2];  // rows i0 + wr0 + g (+8)
  dq_row_stats(p.lse, kLog2e, args.dsum, sh, b, h, i0 + wr0, g, lse2r, dsr);
  float dq[HD / 8][4];
#pragma unroll
  for (int nd = 0; nd < HD / 8; ++nd)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[nd][e] = 0.f;

  if (ntiles > 0) {
    load_tile<float, BQ, HD, NT>(sQ, static_cast<const float*>(p.q), sh.q_stride, b, h, i0, sh.Tq, D, args.vec);
    load_tile<float, BQ, HD, NT>(sdO, static_cast<const float*>(p.d_o), sh.o_stride, b, h, i0, sh.Tq, Dv, args.vec);
  }
  for (int t = 0; t < ntiles; ++t) {
    const int64_t j0 = jstart + static_cast<int64_t>(t) * BK;
    load_tile<float, BK, HD, NT>(sK, static_cast<const float*>(p.k), sh.k_stride, b, hk, j0, sh.Tk, D, args.vec);
    load_tile<float, BK, HD, NT>(sV, static_cast<const float*>(p.v), sh.v_stride, b, hk, j0, sh.Tk, Dv, args.vec);
    cp_async_commit();
    cp_async_wait<0>();
    if (t == 0) {
      round_tile_tf32<BQ, HD, NT>(sQ);
      round_tile_tf32<BQ, HD, NT>(sdO);
    }
    round_tile_tf32<BK, HD, NT>(sK);
    round_tile_tf32<BK, HD, NT>(sV);
    __syncthreads();

    float s[BK / 8][4], dp[BK / 8][4];
#pragma unroll
    for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = dp[nt][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HD / 8; ++kk) {
      uint32_t aq[4], ao[4];
      ldsm_x4(aq, sQ + QTile::off(wr0 + (lane & 15), kk * 8 + (lane >> 4) * 4));
      ldsm_x4(ao, sdO + QTile::off(wr0 + (lane & 15), kk * 8 + (lane >> 4) * 4));
#pragma unroll
      for (int nt2 = 0; nt2 < BK / 16; ++nt2) {
        uint32_t bk[4], bv[4];
        const int off = KTile::off(nt2 * 16 + (lane & 7) + (lane >> 4) * 8, kk * 8 + ((lane >> 3) & 1) * 4);
        ldsm_x4(bk, sK + off);
        ldsm_x4(bv, sV + off);
        mma_tf32(s[2 * nt2], aq, bk);
        mma_tf32(s[2 * nt2 + 1], aq, bk + 2);
        mma_tf32(dp[2 * nt2], ao, bv);
        mma_tf32(dp[2 * nt2 + 1], ao, bv + 2);
      }
    }

    // Element-wise: s <- dS (row = query g (+8), column = key 8 nt + 2 tq (+1)).
    dq_tile_dscores<float, BK / 8, GEN>(s, dp, p, b, h, i0, BQ, i0 + wr0, j0, lse2r, dsr, sl2, qlim, klim,
                                      dropout, g, tq);

    // dQ += dS K: k8 step ks = keys 8 ks + {2t, 2t+1}; A = {c0, c2, c1, c3} of n8 tile ks.
#pragma unroll
    for (int ks = 0; ks < BK / 8; ++ks) {
      const uint32_t a[4] = {to_tf32(s[ks][0]), to_tf32(s[ks][2]), to_tf32(s[ks][1]), to_tf32(s[ks][3])};
      const uint32_t* k0 = uK + KTile::off(ks * 8 + 2 * tq, g);
#pragma unroll
      for (int nd = 0; nd < HD / 8; ++nd) {
        const uint32_t bk[2] = {k0[nd * 8], k0[KTile::kStride + nd * 8]};
        mma_tf32(dq[nd], a, bk);
      }
    }
    __syncthreads();  // every warp is done with K(t), V(t)
  }

  float* dqp = static_cast<float*>(p.dq);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = i0 + wr0 + g + 8 * r;
    if (i >= sh.Tq) continue;
    float* dst = dqp + b * sh.q_stride[0] + i * sh.q_stride[1] + h * sh.q_stride[2];
#pragma unroll
    for (int nd = 0; nd < HD / 8; ++nd) {
      const int d = nd * 8 + 2 * tq;
      const float x0 = dq[nd][2 * r] * p.score.scale, x1 = dq[nd][2 * r + 1] * p.score.scale;
      if (args.vec) {
        if (d < D) *reinterpret_cast<float2*>(dst + d) = make_float2(x0, x1);
      } else {
        if (d < D) dst[d] = x0;
        if (d + 1 < D) dst[d + 1] = x1;
      }
    }
  }
}

// dQ[b, i, h, d] = scale · dQacc[b, h, i, d] (dQacc [B, H, Tq, hd]).
__global__ void bwd_dq_convert_tf32_kernel(const FlashBwdParams p, const float* dq_acc, int hd) {
  const AttnShape& sh = p.shape;
  const int64_t n = sh.B * sh.H * sh.Tq * sh.D;
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < n;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = x % sh.D, row = x / sh.D;
    const int64_t i = row % sh.Tq, h = (row / sh.Tq) % sh.H, b = row / (sh.Tq * sh.H);
    static_cast<float*>(p.dq)[b * sh.q_stride[0] + i * sh.q_stride[1] + h * sh.q_stride[2] + d] =
        p.score.scale * dq_acc[row * hd + d];
  }
}

// ONLY: -1 instantiates the general and the index-masked kernel and picks at run time; 0 / 1
// instantiates only that one (the caller has checked). SC: the devices the caller launches it on
// (SmemClass; kAny: every one).
template <int HD, int BKb, int BQb, int NW, int QST, int NSPLIT, int ONLY = -1, SmemClass SC = SmemClass::kAny>
static cudaError_t launch_bwd_tf32(const Tf32BwdArgs& args, cudaStream_t stream) {
  using Cfg = Tf32BwdCfg<HD, BKb, BQb, NW, QST, NSPLIT>;
  const FlashBwdParams& p = args.p;
  const bool gen = ONLY == -1 ? needs_general(p.mask, p.score, p.dropout, p.dbias, true) : ONLY == 1;
  auto kernel = gen ? flash_bwd_tf32_kernel<HD, BKb, BQb, NW, QST, NSPLIT, ONLY != 0, SC>
                    : flash_bwd_tf32_kernel<HD, BKb, BQb, NW, QST, NSPLIT, ONLY == 1, SC>;
  cudaError_t err = set_dynamic_smem(kernel, static_cast<int>(Cfg::kSmem));
  if (err != cudaSuccess) return err;
  const AttnShape& s = p.shape;
  if (s.Hkv > 65535 || s.B > 65535 || (s.H / s.Hkv) * ((s.Tq + BQb - 1) / BQb) >= (int64_t(1) << 31) ||
      (s.Tk + BKb - 1) / BKb * NSPLIT >= (int64_t(1) << 31))
    return cudaErrorInvalidValue;
  dim3 grid(static_cast<unsigned>((s.Tk + BKb - 1) / BKb * NSPLIT), static_cast<unsigned>(s.Hkv),
            static_cast<unsigned>(s.B));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmem, stream>>>(args);
  return cudaGetLastError();
}

template <int HD, int NW, int BK>
static cudaError_t launch_dq_tf32(const Tf32BwdArgs& args, cudaStream_t stream) {
  using Cfg = Tf32DqCfg<HD, NW, BK>;
  const FlashBwdParams& p = args.p;
  // The general kernel only (it handles every case): deterministic mode is rare enough that the
  // index-masked variant is not worth its compile time.
  auto kernel = flash_bwd_dq_tf32_kernel<HD, NW, BK, true>;
  cudaError_t err = set_dynamic_smem(kernel, static_cast<int>(Cfg::kSmem));
  if (err != cudaSuccess) return err;
  const AttnShape& s = p.shape;
  if (s.H > 65535 || s.B > 65535) return cudaErrorInvalidValue;
  dim3 grid(static_cast<unsigned>((s.Tq + Cfg::BQ - 1) / Cfg::BQ), static_cast<unsigned>(s.H),
            static_cast<unsigned>(s.B));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmem, stream>>>(args);
  return cudaGetLastError();
}

static bool aligned16_tf32b(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

#ifdef FA_TUNING
// Tuning builds (benchmarks/tune_tf32_bwd.py): FA_TF32_BWD_CFG picks another tile configuration on a
// GPU with big_smem (keys x queries per step, warps, Q / dO stages): 1 HD 64 128 x 64, 8 warps (136.5
// KiB); 2 HD 64 128 x 32, 8 warps, 2 stages (120.5 KiB); 3 HD 128 without the general features 128 x
// 32, 8 warps, 2 stages (216.5 KiB); 4 the same with 1 stage (183.3 KiB); 5 HD 128 general 64 x 32, 4
// warps (108.3 KiB, two CTAs per SM); 3 and 5 are the sm_90 defaults since 2026-12-04, 6 and 7 the
// configurations they replaced: 6 HD 128 without the general features 64 x 32, 4 warps, 2 stages (141.5
// KiB), 7 HD 128 general 32 x 32, 2 warps (70.8 KiB); 8 HD 256 64 x 32, 4 warps, 2 column splits (204.3
// KiB), 9 HD 256 64 x 16, 4 warps, 2 splits (167.6 KiB); 10 HD 64 64 x 32, 4 warps, 2 stages (77.5 KiB), 11
// HD 64 64 x 32, 4 warps, 1 stage (60.3 KiB); 8 is the HD 256 default since 2026-12-04, 12 the one it
// replaced (32 x 32, 2 warps, 2 splits, 134.8 KiB); 13-18 two m16 key tiles per warp (MTK = 2, below:
// first run on the H200 2026-12-04): 13 HD 64 128 x 32, 4 warps, 1 stage (103.2 KiB); 14 the same, 2 stages
// (120.5 KiB); 15 HD 64 64 x 32, 2 warps (60.2 KiB); 16 HD 64 128 x 16, 4 warps, 2 stages (95.2 KiB); 17 HD
// 128 128 x 32, 4 warps, 2 column splits (183.2 KiB); 18 HD 64 128 x 16, 4 warps, 1 stage (86.6 KiB); 13
// (index masks) and 16 (general) are the HD 64 sm_90 defaults since then, 19 the configuration they
// replaced (HD 64 64 x 64, 4 warps, 85.5 KiB). 0 / unset, or a value for another bucket: the default below.
// True when it launched (err: the launch's result).
static bool launch_tuned_tf32(int hd, bool gen, bool big_smem, const Tf32BwdArgs& args, cudaStream_t stream,
                              cudaError_t& err) {
  const int tune = big_smem ? tuning_cfg("FA_TF32_BWD_CFG") : 0;
  if (hd == 64 && tune == 1) err = launch_bwd_tf32<64, 128, 64, 8, 1, 1>(args, stream);
  else if (hd == 64 && tune == 2) err = launch_bwd_tf32<64, 128, 32, 8, 2, 1>(args, stream);
  else if (hd == 128 && !gen && tune == 3) err = launch_bwd_tf32<128, 128, 32, 8, 2, 1, 0>(args, stream);
  else if (hd == 128 && !gen && tune == 4) err = launch_bwd_tf32<128, 128, 32, 8, 1, 1, 0>(args, stream);
  else if (hd == 128 && gen && tune == 5) err = launch_bwd_tf32<128, 64, 32, 4, 1, 1>(args, stream);
  else if (hd == 128 && !gen && tune == 6) err = launch_bwd_tf32<128, 64, 32, 4, 2, 1, 0>(args, stream);
  else if (hd == 128 && gen && tune == 7) err = launch_bwd_tf32<128, 32, 32, 2, 1, 1, 1>(args, stream);
  else if (hd == 256 && tune == 8) err = launch_bwd_tf32<256, 64, 32, 4, 1, 2>(args, stream);
  else if (hd == 256 && tune == 9) err = launch_bwd_tf32<256, 64, 16, 4, 1, 2>(args, stream);
  else if (hd == 64 && tune == 10) err = launch_bwd_tf32<64, 64, 32, 4, 2, 1>(args, stream);
  else if (hd == 64 && tune == 11) err = launch_bwd_tf32<64, 64, 32, 4, 1, 1>(args, stream);
  else if (hd == 256 && tune == 12) err = launch_bwd_tf32<256, 32, 32, 2, 1, 2>(args, stream);
  // Two m16 key tiles per warp (Tf32BwdCfg::MTK = 2): each Q / dO fragment serves 32 keys. 13-15 and
  // 17 without the general features only (their general kernels spill; ptxas 13.0).
  else if (hd == 64 && !gen && tune == 13) err = launch_bwd_tf32<64, 128, 32, 4, 1, 1, 0>(args, stream);
  else if (hd == 64 && !gen && tune == 14) err = launch_bwd_tf32<64, 128, 32, 4, 2, 1, 0>(args, stream);
  else if (hd == 64 && !gen && tune == 15) err = launch_bwd_tf32<64, 64, 32, 2, 1, 1, 0>(args, stream);
  else if (hd == 64 && tune == 16) err = launch_bwd_tf32<64, 128, 16, 4, 2, 1>(args, stream);
  else if (hd == 128 && !gen && tune == 17) err = launch_bwd_tf32<128, 128, 32, 4, 1, 2, 0>(args, stream);
  else if (hd == 64 && tune == 18) err = launch_bwd_tf32<64, 128, 16, 4, 1, 1>(args, stream);
  else if (hd == 64 && tune == 19) err = launch_bwd_tf32<64, 64, 64, 4, 1, 1>(args, stream);
  else return false;
  return true;
}
#endif

// Tile configurations (keys x queries per step, warps, Q/dO stages, column splits), shared memory:
//   HD 64:  sm_90, index masks only: 128 x 32, 4 warps (two m16 key tiles each), 1 stage: 103.2 KiB;
//           sm_90 with the general features: 128 x 16, 4 warps (two key tiles each), 2 stages: 95.2 KiB;
//           otherwise 64 x 64, 4 warps, 1 stage: 85.5 KiB. On the H200 the sm_90 pair is 1.05x-1.31x
//           (index masks) and 1.55x (dropout 0.1) faster than 64 x 64 (tune_tf32_bwd.py, RESULTS.md)
//   HD 128: sm_90 (>= 210 KiB per SM), index masks only: 128 x 32, 8 warps, 2 stages: 216.5 KiB;
//           sm_90 with the general features (dropout, bias, soft-cap, dense mask): 64 x 32, 4 warps,
//           1 stage: 108.3 KiB (two CTAs per SM); otherwise 32 x 32, 2 warps, 1 stage: 70.8 KiB.
//           On the H200 the sm_90 pair is 1.12x-1.27x (index masks) and 1.46x (dropout 0.1) faster
//           than the 64 x 32 / 32 x 32 ones before it (benchmarks/tune_tf32_bwd.py, RESULTS.md)
//   HD 256: sm_90 only: 64 x 32, 4 warps, 1 stage, 2 column splits (phase A computed twice, dK/dV
//           in 128 registers): 204.3 KiB; on the H200 1.69x-1.98x faster than the 32 x 32, 2-warp
//           tiles (134.8 KiB: one CTA of 2 warps per SM) before it (tune_tf32_bwd.py, RESULTS.md)
// Deterministic dQ kernel (rows x keys): HD 64: 64 x 64 (68 KiB), HD 128: 32 x 32 (66 KiB),
// HD 256: 32 x 16 (97.5 KiB).
cudaError_t bwd_tf32(const FlashBwdParams& p, const float* dsum, float* dq_acc, bool big_smem,
                     cudaStream_t stream) {
  const AttnShape& s = p.shape;
  const int hd = head_dim_bucket(s.D > s.Dv ? s.D : s.Dv);
  if (hd == 256 && !big_smem) {  // no TF32 tile fits: full float32 SIMT kernels
    cudaError_t err = cudaSuccess;
    if (s.Tq > 0 && (err = bwd_dq_simt(p, dsum, stream)) != cudaSuccess) return err;
    if (s.Tk > 0) return bwd_dkdv_simt(p, dsum, stream);
    return cudaSuccess;
  }
  const bool vec = s.D % 4 == 0 && s.Dv % 4 == 0 && s.q_stride[0] % 4 == 0 && s.q_stride[1] % 4 == 0 &&
                   s.q_stride[2] % 4 == 0 && s.k_stride[0] % 4 == 0 && s.k_stride[1] % 4 == 0 &&
                   s.k_stride[2] % 4 == 0 && s.v_stride[0] % 4 == 0 && s.v_stride[1] % 4 == 0 &&
                   s.v_stride[2] % 4 == 0 && s.o_stride[0] % 4 == 0 && s.o_stride[1] % 4 == 0 &&
                   s.o_stride[2] % 4 == 0 && aligned16_tf32b(p.q) && aligned16_tf32b(p.k) &&
                   aligned16_tf32b(p.v) && aligned16_tf32b(p.d_o) && aligned16_tf32b(p.dk) &&
                   aligned16_tf32b(p.dv);
  Tf32BwdArgs args{p, dsum, dq_acc, vec};
  cudaError_t err = cudaSuccess;
  if (dq_acc) {
    const size_t n = static_cast<size_t>(s.B * s.H * s.Tq) * hd;
    if (n > 0 && (err = cudaMemsetAsync(dq_acc, 0, n * sizeof(float), stream)) != cudaSuccess) return err;
  } else {
    args.p.dbias = nullptr;  // written by the dQ kernel
  }
  if (s.Tk > 0) {
    const bool gen = needs_general(p.mask, p.score, p.dropout, args.p.dbias, true);
    constexpr SmemClass kBig = SmemClass::kBig, kSmall = SmemClass::kSmall;
#ifdef FA_TUNING
    if (!launch_tuned_tf32(hd, gen, big_smem, args, stream, err))
#endif
    switch (hd) {
      case 64:
        if (big_smem)
          err = gen ? launch_bwd_tf32<64, 128, 16, 4, 2, 1, 1, kBig>(args, stream)
                    : launch_bwd_tf32<64, 128, 32, 4, 1, 1, 0, kBig>(args, stream);
        else
          err = launch_bwd_tf32<64, 64, 64, 4, 1, 1, -1, kSmall>(args, stream);
        break;
      case 128:
        if (big_smem)
          err = gen ? launch_bwd_tf32<128, 64, 32, 4, 1, 1, 1, kBig>(args, stream)
                    : launch_bwd_tf32<128, 128, 32, 8, 2, 1, 0, kBig>(args, stream);
        else
          err = launch_bwd_tf32<128, 32, 32, 2, 1, 1, -1, kSmall>(args, stream);
        break;
      case 256: err = launch_bwd_tf32<256, 64, 32, 4, 1, 2, -1, kBig>(args, stream); break;  // big_smem (above)
      default: return cudaErrorInvalidValue;
    }
    if (err != cudaSuccess) return err;
  }
  if (s.Tq == 0) return cudaSuccess;
  if (!dq_acc) {
    args.p.dbias = p.dbias;
    args.vec = vec && aligned16_tf32b(p.dq);
    switch (hd) {
      case 64: return launch_dq_tf32<64, 4, 64>(args, stream);
      case 128: return launch_dq_tf32<128, 2, 32>(args, stream);
      case 256: return launch_dq_tf32<256, 2, 16>(args, stream);
      default: return cudaErrorInvalidValue;
    }
  }
  return bwd_dq_convert_tf32(p, dq_acc, hd, stream);
}

cudaError_t bwd_dq_convert_tf32(const FlashBwdParams& p, const float* dq_acc, int hd, cudaStream_t stream) {
  const AttnShape& s = p.shape;
  const int64_t n = s.B * s.H * s.Tq * s.D;
  const unsigned blocks = static_cast<unsigned>(n / 256 + 1 < 65536 * 16 ? n / 256 + 1 : 65536 * 16);
  bwd_dq_convert_tf32_kernel<<<blocks, 256, 0, stream>>>(p, dq_acc, hd);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace flashattn
