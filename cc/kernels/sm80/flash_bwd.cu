// FlashAttention-2 backward on tensor cores (float16 / bfloat16), and the backward launcher.
//
// Pre-pass: Dsum = rowsum(dO ∘ O) - d_lse and lse2 = log2e · lse, [B, H, Tq] float32 (workspace).
// Main kernel: one CTA per (key tile of BKb keys, kv head hk, batch b); K and V of the tile stay
// in shared memory, dK and dV accumulate in registers. For every query head h of the group and
// every query tile (BQb rows) that sees the key tile (Q, dO, lse, Dsum through shared memory):
//   Sᵀ = K Qᵀ, dPdᵀ = V dOᵀ                          (phase A, mma; [keys, queries])
//   P = 2^(z - log2e·lse) (z = log2e·logit), Z = keep_scale where dropout keeps, else 0
//   dlogit = P ∘ (dPd ∘ Z - Dsum)   (written to dbias when asked)
//   dS = dlogit ∘ softcap'          Pd = P ∘ Z    -> 16-bit [keys, queries]: dS to shared memory
//                                   (for phase C), Pd/dS kept in registers for phase B when
//                                   each warp owns the same keys in both phases (kRegP)
//   dV += Pdᵀ dO,  dK += dSᵀ Q                       (phase B, mma, registers)
//   dQacc[b, h, rows] += dS K                          (phase C, mma + float32 atomics, the
//                                                       tile's block in fragment order)
// After: dK *= scale, written with dV; a last kernel writes dQ = scale · dQacc
// (bwd_dq_frag_convert_kernel).
// Deterministic mode skips phase C and computes dQ per query tile without atomics
// (flash_bwd_dq.cu).
#include "cc/kernels/flash_cuda.h"

#include "cc/kernels/common/flash_cuda_common.cuh"
#include "cc/kernels/sm80/flash_bwd_tile.cuh"
#include "cc/kernels/common/flash_cuda_internal.h"

namespace flashattn {
namespace cuda {

struct BwdArgs {
  FlashBwdParams p;
  const float* dsum;  // [B, H, Tq]
  const float* lse2;  // [B, H, Tq] log2e * lse
  float* dq_acc;      // [B, H, tq_pad, HD] in fragment order (dq_accumulate_frag), or null
                      // (deterministic: no phase C)
  int64_t tq_pad;     // Tq rounded up to kDqRowPad
  bool vec;
};

// Where phase C of a configuration puts dQacc elements (dq_accumulate_frag), for the convert kernel.
struct DqFragLayout {
  int bq, threads, c_wm, cm, cn, cc;
};

// Warp layouts: AWM / BWM warps along the keys in phases A / B, CWM along the queries in phase C
// (0: as many as the tile allows, up to NW); the other warps split the other dimension.
template <int HD, int BKb, int BQb, int NW, int QST, int AWM = 0, int BWM = 0, int CWM = 0>
struct BwdCfg {
  static constexpr int kThreads = NW * 32;
  static constexpr int cmin(int a, int b) { return a < b ? a : b; }
  // phase A: Sᵀ [BKb, BQb]; warps A_WM x A_WN, each AM m16 x AN n8 tiles
  static constexpr int A_WM = AWM ? AWM : cmin(NW, BKb / 16), A_WN = NW / A_WM;
  static constexpr int AM = BKb / 16 / A_WM, AN = BQb / 8 / A_WN;
  // phase B: dK, dV [BKb, HD]
  static constexpr int B_WM = BWM ? BWM : cmin(NW, BKb / 16), B_WN = NW / B_WM;
  static constexpr int BM = BKb / 16 / B_WM, BN = HD / 8 / B_WN;
  // phase C: dQ [BQb, HD], in chunks of CC n8 tiles
  static constexpr int C_WM = CWM ? CWM : cmin(NW, BQb / 16), C_WN = NW / C_WM;
  static constexpr int CM = BQb / 16 / C_WM, CN = HD / 8 / C_WN, CC = cmin(CN, 8);
  static_assert(AN % 2 == 0 && BN % 2 == 0 && CC % 2 == 0 && CN % CC == 0, "tile shapes");
  // Every warp layout covers its tile once (dq_accumulate_frag's block is exactly BQb x HD).
  static_assert(A_WM * A_WN == NW && B_WM * B_WN == NW && C_WM * C_WN == NW, "warp layouts");
  static_assert(CM * CN * 128 * NW == BQb * HD, "dQ block");
  // Phase B can take Pd/dS straight from phase A's registers when each warp owns the same keys
  // (all queries) in both phases.
  static constexpr bool kRegP = A_WN == 1 && B_WN == 1 && AM == BM;
  using KTile = STile<BKb, HD>;
  using QTile = STile<BQb, HD>;
  using PTile = STile<BKb, BQb>;
  template <typename T>
  static constexpr size_t smem() {
    return (2 * KTile::kElems + QST * 2 * QTile::kElems + (kRegP ? 1 : 2) * PTile::kElems) * sizeof(T) +
           QST * 2 * BQb * sizeof(float);
  }
};

// DROP: the index-masked kernel (GEN false) with dropout. SC: the devices that run it (SmemClass).
template <typename T, int HD, int BKb, int BQb, int NW, int QST, bool GEN, int AWM, int BWM, int CWM,
          bool DROP = false, SmemClass SC = SmemClass::kAny>
__global__ void __launch_bounds__(NW * 32) flash_bwd_kernel(const BwdArgs args) {
  FA_KERNEL_FOR(SC)
  using Cfg = BwdCfg<HD, BKb, BQb, NW, QST, AWM, BWM, CWM>;
  using KTile = typename Cfg::KTile;
  using QTile = typename Cfg::QTile;
  using PTile = typename Cfg::PTile;
  constexpr int NT = Cfg::kThreads;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);   // [BKb, HD]
  T* sV = sK + KTile::kElems;                // [BKb, HD]
  T* sQ = sV + KTile::kElems;                // QST x [BQb, HD]
  T* sdO = sQ + QST * QTile::kElems;         // QST x [BQb, HD]
  T* sP = sdO + QST * QTile::kElems;         // [BKb, BQb]  Pd (dropped P), unless kRegP
  T* sdS = sP + (Cfg::kRegP ? 0 : PTile::kElems);  // [BKb, BQb]  dS
  float* sL = reinterpret_cast<float*>(sdS + PTile::kElems);  // QST x [BQb] log2e * lse
  float* sDs = sL + QST * BQb;                                // QST x [BQb] Dsum

  const FlashBwdParams& p = args.p;
  const AttnShape& sh = p.shape;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * BKb;
  const int64_t hk = blockIdx.y, b = blockIdx.z;
  const int64_t qlim = q_limit(p.mask, sh, b), klim = k_limit(p.mask, sh, b);
  const int nqb = static_cast<int>((sh.Tq + BQb - 1) / BQb);  // int: the host checks nqb < 2^31
  const int G = static_cast<int>(sh.H / sh.Hkv);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const T* d_o = static_cast<const T*>(p.d_o);
  const int D = static_cast<int>(sh.D), Dv = static_cast<int>(sh.Dv);

  const KeyTileUnits<BQb> units(p.mask, nqb, qlim, klim, j0, BKb, G);
  auto load_query_side = [&](int hl, int qb, int stage) {
    const int64_t h = hk * G + hl, i0 = static_cast<int64_t>(qb) * BQb;
    load_tile<T, BQb, HD, NT>(sQ + stage * QTile::kElems, q, sh.q_stride, b, h, i0, sh.Tq, D, args.vec);
    load_tile<T, BQb, HD, NT>(sdO + stage * QTile::kElems, d_o, sh.o_stride, b, h, i0, sh.Tq, Dv,
                              args.vec);
    // Asynchronous too: a plain load here would hold its warp for a global-memory latency.
    // (one pass when the CTA has a thread per row: no loop for the compiler to unroll)
    for (int r = tid; r < BQb; r += NT) {
      const int64_t i = i0 + r;
      const bool in = i < sh.Tq;
      const int64_t row = (b * sh.H + h) * sh.Tq + (in ? i : 0);
      cp_async4(sL + stage * BQb + r, args.lse2 + row, in);
      cp_async4(sDs + stage * BQb + r, args.dsum + row, in);
      if (NT >= BQb) break;
    }
  };

  float dk[Cfg::BM][Cfg::BN][4], dv[Cfg::BM][Cfg::BN][4];
#pragma unroll
  for (int mt = 0; mt < Cfg::BM; ++mt)
#pragma unroll
    for (int nt = 0; nt < Cfg::BN; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[mt][nt][e] = dv[mt][nt][e] = 0.f;

  const float sl2 = p.score.scale * kLog2e;
  // Padded head-dim columns (zeros) are computed rather than skipped: no runtime guards.
  constexpr int ksteps = HD / 16, dvsteps = HD / 16;
  const bool dropout = DROP || (GEN && p.dropout.rate > 0.f);

  int hl = 0, qb = units.lo;
  units.seek(hl, qb);
  if (hl < G) {
    load_tile<T, BKb, HD, NT>(sK, k, sh.k_stride, b, hk, j0, sh.Tk, D, args.vec);
    load_tile<T, BKb, HD, NT>(sV, v, sh.v_stride, b, hk, j0, sh.Tk, Dv, args.vec);
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
    __syncthreads();  // stage st landed; all warps are done with the previous unit
    if (QST == 2 && hl_n < G) {
      load_query_side(hl_n, qb_n, st ^ 1);
      cp_async_commit();
    }
    const T* cQ = sQ + st * QTile::kElems;
    const T* cdO = sdO + st * QTile::kElems;
    const float* cL = sL + st * BQb;
    const float* cDs = sDs + st * BQb;

    // ---- phase A: Sᵀ = K Qᵀ and dPdᵀ = V dOᵀ, then P, dS into shared memory ----------------
    uint32_t pP[Cfg::AM][Cfg::AN / 2][4], pS[Cfg::AM][Cfg::AN / 2][4];  // Pd, dS as 16-bit pairs
    {
      const int wm = warp % Cfg::A_WM, wn = warp / Cfg::A_WM;
      const int kr0 = wm * Cfg::AM * 16, qc0 = wn * Cfg::AN * 8;
      float sacc[Cfg::AM][Cfg::AN][4], dpacc[Cfg::AM][Cfg::AN][4];
#pragma unroll
      for (int mt = 0; mt < Cfg::AM; ++mt)
#pragma unroll
        for (int nt = 0; nt < Cfg::AN; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) sacc[mt][nt][e] = dpacc[mt][nt][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        if (kk < ksteps) {
          uint32_t a[Cfg::AM][4];
#pragma unroll
          for (int mt = 0; mt < Cfg::AM; ++mt)
            ldsm_x4(a[mt], sK + KTile::off(kr0 + mt * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8));
#pragma unroll
          for (int nt2 = 0; nt2 < Cfg::AN / 2; ++nt2) {
            uint32_t bb[4];
            ldsm_x4(bb, cQ + QTile::off(qc0 + nt2 * 16 + (lane & 7) + (lane >> 4) * 8,
                                        kk * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
            for (int mt = 0; mt < Cfg::AM; ++mt) {
              Elem<T>::mma(sacc[mt][2 * nt2], a[mt], bb);
              Elem<T>::mma(sacc[mt][2 * nt2 + 1], a[mt], bb + 2);
            }
          }
        }
        if (kk < dvsteps) {
          uint32_t a[Cfg::AM][4];
#pragma unroll
          for (int mt = 0; mt < Cfg::AM; ++mt)
            ldsm_x4(a[mt], sV + KTile::off(kr0 + mt * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8));
#pragma unroll
          for (int nt2 = 0; nt2 < Cfg::AN / 2; ++nt2) {
            uint32_t bb[4];
            ldsm_x4(bb, cdO + QTile::off(qc0 + nt2 * 16 + (lane & 7) + (lane >> 4) * 8,
                                         kk * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
            for (int mt = 0; mt < Cfg::AM; ++mt) {
              Elem<T>::mma(dpacc[mt][2 * nt2], a[mt], bb);
              Elem<T>::mma(dpacc[mt][2 * nt2 + 1], a[mt], bb + 2);
            }
          }
        }
      }
      // Element-wise: sacc <- Pd = P Z, dpacc <- dS (see the header comment).
      const bool in_range = !GEN && tile_in_range(p.mask, i0, BQb, j0, BKb, qlim, klim);
      uint32_t kbits[Cfg::AM];  // dropout keep bits: one Philox call per 8 elements (AM even)
#pragma unroll
      for (int mt = 0; mt < Cfg::AM; ++mt) kbits[mt] = 0u;
      if (dropout)
        drop_cols_bits<Cfg::AM, Cfg::AN>(kbits, drop_tile(p.dropout, b, h), j0 + kr0, i0 + qc0, g, tq);
#pragma unroll
      for (int mt = 0; mt < Cfg::AM; ++mt)
        bwd_tile_probs<T, Cfg::AN, GEN>(sacc[mt], dpacc[mt], p, b, h, i0 + qc0, j0, kr0 + mt * 16,
                                        cL + qc0, cDs + qc0, sl2, in_range, qlim, klim, dropout,
                                        kbits[mt], true, g, tq);
      // 16-bit pairs, in A-fragment order: pk[mt][ks][2 * (nt & 1) + r] holds n-tile nt = 2 ks + (nt & 1).
#pragma unroll
      for (int mt = 0; mt < Cfg::AM; ++mt)
#pragma unroll
        for (int nt = 0; nt < Cfg::AN; ++nt)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            pP[mt][nt >> 1][2 * (nt & 1) + r] = Elem<T>::pack(sacc[mt][nt][2 * r], sacc[mt][nt][2 * r + 1]);
            pS[mt][nt >> 1][2 * (nt & 1) + r] = Elem<T>::pack(dpacc[mt][nt][2 * r], dpacc[mt][nt][2 * r + 1]);
            const int jl = kr0 + mt * 16 + g + 8 * r, qe = qc0 + nt * 8 + 2 * tq;
            *reinterpret_cast<uint32_t*>(sdS + PTile::off(jl, qe)) = pS[mt][nt >> 1][2 * (nt & 1) + r];
            if (!Cfg::kRegP)
              *reinterpret_cast<uint32_t*>(sP + PTile::off(jl, qe)) = pP[mt][nt >> 1][2 * (nt & 1) + r];
          }
    }

    // ---- phase B: dV += Pdᵀ dO, dK += dSᵀ Q (A = [key][query] in registers or shared memory,
    // B = [query][d] tiles through ldmatrix.trans) ---------------------------------------------
    if (!Cfg::kRegP) __syncthreads();
    {
      const int wm = warp % Cfg::B_WM, wn = warp / Cfg::B_WM;
      const int kr0 = wm * Cfg::BM * 16, dc0 = wn * Cfg::BN * 8;
#pragma unroll
      for (int ks = 0; ks < BQb / 16; ++ks) {
        uint32_t ap[Cfg::BM][4], ad[Cfg::BM][4];
#pragma unroll
        for (int mt = 0; mt < Cfg::BM; ++mt) {
          if (Cfg::kRegP) {
#pragma unroll
            for (int x = 0; x < 4; ++x) {
              ap[mt][x] = pP[mt < Cfg::AM ? mt : 0][ks < Cfg::AN / 2 ? ks : 0][x];
              ad[mt][x] = pS[mt < Cfg::AM ? mt : 0][ks < Cfg::AN / 2 ? ks : 0][x];
            }
          } else {
            ldsm_x4(ap[mt], sP + PTile::off(kr0 + mt * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
            ldsm_x4(ad[mt], sdS + PTile::off(kr0 + mt * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
          }
        }
#pragma unroll
        for (int nt2 = 0; nt2 < Cfg::BN / 2; ++nt2) {
          const int n0 = dc0 + nt2 * 16;
          const int row = ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, col = n0 + (lane >> 4) * 8;
          if (true) {  // n0 < Dv (zero padding beyond)
            uint32_t bb[4];
            ldsm_x4_t(bb, cdO + QTile::off(row, col));
#pragma unroll
            for (int mt = 0; mt < Cfg::BM; ++mt) {
              Elem<T>::mma(dv[mt][2 * nt2], ap[mt], bb);
              Elem<T>::mma(dv[mt][2 * nt2 + 1], ap[mt], bb + 2);
            }
          }
          if (true) {  // n0 < D
            uint32_t bb[4];
            ldsm_x4_t(bb, cQ + QTile::off(row, col));
#pragma unroll
            for (int mt = 0; mt < Cfg::BM; ++mt) {
              Elem<T>::mma(dk[mt][2 * nt2], ad[mt], bb);
              Elem<T>::mma(dk[mt][2 * nt2 + 1], ad[mt], bb + 2);
            }
          }
        }
      }
    }
    if (Cfg::kRegP) __syncthreads();  // sdS complete before phase C

    // ---- phase C: dQacc += dS K (A = dS from the [key][query] tile via ldmatrix.trans) ------
    if (args.dq_acc) {
      const int wm = warp % Cfg::C_WM, wn = warp / Cfg::C_WM;
      const int qr0 = wm * Cfg::CM * 16, dc0 = wn * Cfg::CN * 8;
      float* dq_tile = args.dq_acc + ((b * sh.H + h) * args.tq_pad + i0) * HD;  // [BQb * HD]
#pragma unroll
      for (int ch = 0; ch < Cfg::CN / Cfg::CC; ++ch) {
        const int nb = dc0 + ch * Cfg::CC * 8;
        float acc[Cfg::CM][Cfg::CC][4];
#pragma unroll
        for (int mt = 0; mt < Cfg::CM; ++mt)
#pragma unroll
          for (int nt = 0; nt < Cfg::CC; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
#pragma unroll
        for (int ks = 0; ks < BKb / 16; ++ks) {
          uint32_t a[Cfg::CM][4];
#pragma unroll
          for (int mt = 0; mt < Cfg::CM; ++mt)
            ldsm_x4_t(a[mt], sdS + PTile::off(ks * 16 + (lane & 7) + (lane >> 4) * 8,
                                              qr0 + mt * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
          for (int nt2 = 0; nt2 < Cfg::CC / 2; ++nt2) {
            const int n0 = nb + nt2 * 16;
            if (true) {  // n0 < D
              uint32_t bb[4];
              ldsm_x4_t(bb, sK + KTile::off(ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                            n0 + (lane >> 4) * 8));
#pragma unroll
              for (int mt = 0; mt < Cfg::CM; ++mt) {
                Elem<T>::mma(acc[mt][2 * nt2], a[mt], bb);
                Elem<T>::mma(acc[mt][2 * nt2 + 1], a[mt], bb + 2);
              }
            }
          }
        }
        dq_accumulate_frag<Cfg::CM, Cfg::CC, NT>(dq_tile + ch * (Cfg::CM * Cfg::CC * NT * 4), acc);
      }
    }

    if (QST == 1) {
      __syncthreads();  // everyone is done with stage 0 and sP/sdS
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
  {
    const int wm = warp % Cfg::B_WM, wn = warp / Cfg::B_WM;
    const int kr0 = wm * Cfg::BM * 16, dc0 = wn * Cfg::BN * 8;
    T* dkp = static_cast<T*>(p.dk);
    T* dvp = static_cast<T*>(p.dv);
    const float scale = p.score.scale;
#pragma unroll
    for (int mt = 0; mt < Cfg::BM; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t j = j0 + kr0 + mt * 16 + g + 8 * r;
        if (j >= sh.Tk) continue;
        T* dkr = dkp + b * sh.k_stride[0] + j * sh.k_stride[1] + hk * sh.k_stride[2];
        T* dvr = dvp + b * sh.v_stride[0] + j * sh.v_stride[1] + hk * sh.v_stride[2];
#pragma unroll
        for (int nt = 0; nt < Cfg::BN; ++nt) {
          const int d = dc0 + nt * 8 + 2 * tq;
          if (args.vec) {
            if (d < D)
              *reinterpret_cast<uint32_t*>(dkr + d) =
                  Elem<T>::pack(dk[mt][nt][2 * r] * scale, dk[mt][nt][2 * r + 1] * scale);
            if (d < Dv)
              *reinterpret_cast<uint32_t*>(dvr + d) = Elem<T>::pack(dv[mt][nt][2 * r], dv[mt][nt][2 * r + 1]);
          } else {
            if (d < D) dkr[d] = Elem<T>::from_f(dk[mt][nt][2 * r] * scale);
            if (d + 1 < D) dkr[d + 1] = Elem<T>::from_f(dk[mt][nt][2 * r + 1] * scale);
            if (d < Dv) dvr[d] = Elem<T>::from_f(dv[mt][nt][2 * r]);
            if (d + 1 < Dv) dvr[d + 1] = Elem<T>::from_f(dv[mt][nt][2 * r + 1]);
          }
        }
      }
  }
}

// Dsum[b, h, i] = Σ_e dO[b, i, h, e] · O[b, i, h, e] - d_lse[b, h, i] and lse2 = log2e · lse:
// one warp per row. TF32 (float32 with allow_tf32): dO is rounded to tf32 as the dP = dO Vᵀ
// products see it, so that Dsum = Σ_j P_ij dP_ij holds to float32 rounding instead of to tf32
// rounding (dS = P (dP - Dsum) cancels; with one key, dS is exactly 0 and so is dK).
// dsum_term: one element's product (both kernels below); dsum_store: a row's two outputs.
template <typename T, bool kTf32>
__device__ __forceinline__ float dsum_term(T o, T d_o) {
  float g = Elem<T>::to_f(d_o);
  if (kTf32) g = __uint_as_float(to_tf32(g));
  return Elem<T>::to_f(o) * g;
}
__device__ __forceinline__ void dsum_store(const FlashBwdParams& p, float* dsum, float* lse2, int64_t row, float acc) {
  dsum[row] = p.d_lse ? acc - p.d_lse[row] : acc;
  if (lse2) lse2[row] = p.lse[row] * kLog2e;
}
template <typename T, bool kTf32 = false>
__global__ void bwd_dsum_kernel(const FlashBwdParams p, float* dsum, float* lse2) {
  const AttnShape& sh = p.shape;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= sh.B * sh.H * sh.Tq) return;
  const int64_t i = row % sh.Tq, h = (row / sh.Tq) % sh.H, b = row / (sh.Tq * sh.H);
  const int64_t off = b * sh.o_stride[0] + i * sh.o_stride[1] + h * sh.o_stride[2];
  const T* o = static_cast<const T*>(p.o) + off;
  const T* d_o = static_cast<const T*>(p.d_o) + off;
  float acc = 0.f;
  for (int64_t e = lane; e < sh.Dv; e += 32) acc += dsum_term<T, kTf32>(o[e], d_o[e]);
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
  if (lane == 0) dsum_store(p, dsum, lse2, row, acc);
}

// bwd_dsum_kernel with 16-byte loads: kG threads per row (each kVec elements a load, the row's 16-byte pieces
// dealt round-robin), the rows taken in memory order (b, i, h), so that a warp's loads are contiguous when O is
// [B, Tq, H, Dv]; the one-warp-per-row kernel made 2-byte loads and spent its time per row (H200, D = 64, B = 4,
// T = 4096, H = 32: 149 µs, twice its time at D = 128 for the same bytes). Sums in another order than
// bwd_dsum_kernel (float rounding). bwd_dsum picks it (16-byte o, d_o and strides; 8, 16 or a multiple of 32
// pieces per row).
template <typename T, bool kTf32, int kG>
__global__ void __launch_bounds__(256) bwd_dsum_vec_kernel(const FlashBwdParams p, float* dsum, float* lse2) {
  constexpr int kVec = 16 / sizeof(T);
  static_assert(32 % kG == 0, "a row's threads within one warp");
  const AttnShape& sh = p.shape;
  const int gl = threadIdx.x % kG;
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kG;  // (b, i, h)
  const bool live = r < sh.B * sh.H * sh.Tq;  // every lane takes part in the shuffles below
  const int64_t rr = live ? r : 0;
  const int64_t h = rr % sh.H, i = (rr / sh.H) % sh.Tq, b = rr / (sh.H * sh.Tq);
  const int64_t off = b * sh.o_stride[0] + i * sh.o_stride[1] + h * sh.o_stride[2];
  const T* o = static_cast<const T*>(p.o) + off;
  const T* d_o = static_cast<const T*>(p.d_o) + off;
  float acc = 0.f;
  if (live) {
    for (int64_t e = gl * kVec; e < sh.Dv; e += kG * kVec) {
      const uint4 ov = *reinterpret_cast<const uint4*>(o + e);
      const uint4 gv = *reinterpret_cast<const uint4*>(d_o + e);
      const T* oe = reinterpret_cast<const T*>(&ov);
      const T* ge = reinterpret_cast<const T*>(&gv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc += dsum_term<T, kTf32>(oe[k], ge[k]);
    }
  }
#pragma unroll
  for (int s = kG / 2; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
  if (live && gl == 0) dsum_store(p, dsum, lse2, (b * sh.H + h) * sh.Tq + i, acc);
}

// dQ[b, i, h, d] = scale · dQacc, dQacc in fragment order (dq_accumulate_frag with layout L):
// one float4 (a thread's 2 rows x 2 columns of one n8 tile) per step.
template <typename T>
__global__ void bwd_dq_frag_convert_kernel(const FlashBwdParams p, const float* dq_acc, int hd, int64_t tq_pad,
                                           DqFragLayout L) {
  const AttnShape& sh = p.shape;
  const int64_t n4 = sh.B * sh.H * tq_pad * hd / 4, tiles_per_bh = tq_pad / L.bq;
  const int tile4 = L.bq * hd / 4;
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < n4;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t tile = x / tile4;  // (b * H + h) * tiles_per_bh + query tile
    const int w = static_cast<int>(x % tile4);
    const int t = w % L.threads, vi = w / L.threads;
    const int nt = vi % L.cc, mt = (vi / L.cc) % L.cm, ch = vi / (L.cc * L.cm);
    const int warp = t >> 5, g = (t & 31) >> 2, tq = t & 3;
    const int row = (warp % L.c_wm) * L.cm * 16 + mt * 16 + g;
    const int col = (warp / L.c_wm) * L.cn * 8 + ch * L.cc * 8 + nt * 8 + 2 * tq;
    if (col >= sh.D) continue;
    const int64_t bh = tile / tiles_per_bh, h = bh % sh.H, b = bh / sh.H;
    const int64_t i0 = (tile % tiles_per_bh) * L.bq + row;
    const float4 v = reinterpret_cast<const float4*>(dq_acc)[x];
    const float vals[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t i = i0 + 8 * r;
      if (i >= sh.Tq) continue;
      T* dst = static_cast<T*>(p.dq) + b * sh.q_stride[0] + i * sh.q_stride[1] + h * sh.q_stride[2] + col;
      dst[0] = Elem<T>::from_f(p.score.scale * vals[2 * r]);
      if (col + 1 < sh.D) dst[1] = Elem<T>::from_f(p.score.scale * vals[2 * r + 1]);
    }
  }
}

// ONLY: 1 the general kernel, 0 the index-masked one (the caller has checked which applies).
// DROP (with ONLY == 0): the index-masked kernel with dropout. SC: the devices the caller launches it on
// (SmemClass; kAny: every one).
template <typename T, int HD, int BKb, int BQb, int NW, int QST, int ONLY, int AWM = 0, int BWM = 0, int CWM = 0,
          bool DROP = false, SmemClass SC = SmemClass::kAny>
cudaError_t launch_bwd(const BwdArgs& args, cudaStream_t stream, DqFragLayout* layout) {
  static_assert(ONLY == 0 || ONLY == 1, "ONLY: the general (1) or the index-masked (0) kernel");
  static_assert(!DROP || ONLY == 0, "DROP: the index-masked kernel");
  using Cfg = BwdCfg<HD, BKb, BQb, NW, QST, AWM, BWM, CWM>;
  static_assert(kDqRowPad % BQb == 0, "dQacc row padding");
  *layout = DqFragLayout{BQb, Cfg::kThreads, Cfg::C_WM, Cfg::CM, Cfg::CN, Cfg::CC};
  auto kernel = flash_bwd_kernel<T, HD, BKb, BQb, NW, QST, ONLY == 1, AWM, BWM, CWM, DROP, SC>;
  const size_t smem = Cfg::template smem<T>();
  cudaError_t err =
      set_dynamic_smem(kernel, static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  const AttnShape& s = args.p.shape;
  if (s.Hkv > 65535 || s.B > 65535 || (s.Tq + BQb - 1) / BQb >= (int64_t(1) << 31) - 1)
    return cudaErrorInvalidValue;
  dim3 grid(static_cast<unsigned>((s.Tk + BKb - 1) / BKb), static_cast<unsigned>(s.Hkv),
            static_cast<unsigned>(s.B));
  kernel<<<grid, Cfg::kThreads, smem, stream>>>(args);
  return cudaGetLastError();
}

// Tile configurations: keys x queries per step, warps, Q/dO stages, warp layouts. Shared memory
// <= 91 KiB (fits sm_86 / sm_89) except the index-masked kernels on devices with >= 210 KiB per
// SM (sm_90): more keys per CTA and 8 warps halve the dQ atomics and the Q/dO reloads (one CTA
// per SM). Measured on the H200 at T = 16k (bf16, TFLOP/s, 2026-11-29, tune_configs.py):
// HD 64: 128x64 (8 warps, A 8x1) 212 -> 128x128 with FlashAttention-2's layouts (A 4x2, B 4x2,
// C 2x4) 237 -> dQ warps 4x2 248; HD 128: 64x64x4w 178, 128x64 (A 8x1) 235 -> FlashAttention-2's
// layouts 263 (64x64 tiles with 4 warps, two CTAs per SM: 192); HD 256: 32x32x4w 107 -> 64x64x8w
// 182 -> layouts 2x2 188. Scalar dQ atomics instead of float2: 221 vs 269 at HD 128. With the dQ
// accumulator in fragment order (dq_accumulate_frag): HD 64 273, HD 128 303, HD 256 224; HD 256
// with double-buffered Q and dO tiles (217 KiB; FlashAttention-2 double-buffers Q only, 176 KiB) 240.
// FA_TUNING builds select other variants at run time with FA_BWD_CFG (tune_configs.py): 2 the
// first 8-warp defaults; 10, 11 other layouts (HD 128); 12 the former default of HD 64; 8 and 13
// former defaults of HD 256 (13: one Q/dO stage).
template <typename T>
cudaError_t bwd_tc(const BwdArgs& args, int hd, bool big_smem, cudaStream_t stream, DqFragLayout* layout) {
  const FlashBwdParams& p = args.p;
  // Dropout alone keeps the index-masked configurations (DROP kernels: the draws are per 8
  // elements, common/flash_dropout.cuh); other per-element features take the general kernels.
  const bool idx = !needs_general(p.mask, p.score, DropoutParams{}, p.dbias, true) && big_smem;
  const bool drop = p.dropout.rate > 0.f;
  // Past the idx cases: the general kernel (any device; with big_smem always, since idx was false), or
  // the index-masked kernel of the small tiles (without big_smem only).
  const bool gen = needs_general(p.mask, p.score, p.dropout, p.dbias, true);
  constexpr SmemClass kBig = SmemClass::kBig, kSmall = SmemClass::kSmall;
#ifdef FA_TUNING
  const int tune = idx && !drop ? tuning_cfg("FA_BWD_CFG") : 0;
#endif
  switch (hd) {
    case 64:
      FA_TUNE(2, launch_bwd<T, 64, 128, 64, 8, 2, 0>(args, stream, layout));
      FA_TUNE(12, launch_bwd<T, 64, 128, 128, 8, 2, 0, 4, 4, 2>(args, stream, layout));
      if (idx && drop) return launch_bwd<T, 64, 128, 128, 8, 2, 0, 4, 4, 4, true, kBig>(args, stream, layout);
      if (idx) return launch_bwd<T, 64, 128, 128, 8, 2, 0, 4, 4, 4, false, kBig>(args, stream, layout);  // 178 KiB
      if (gen) return launch_bwd<T, 64, 128, 64, 8, 2, 1>(args, stream, layout);  // 91 KiB
      return launch_bwd<T, 64, 128, 64, 8, 2, 0, 0, 0, 0, false, kSmall>(args, stream, layout);
    case 128:
      FA_TUNE(2, launch_bwd<T, 128, 128, 64, 8, 2, 0>(args, stream, layout));
      FA_TUNE(10, launch_bwd<T, 128, 128, 64, 8, 2, 0, 4, 4, 4>(args, stream, layout));
      FA_TUNE(11, launch_bwd<T, 128, 128, 64, 8, 2, 0, 2, 4, 2>(args, stream, layout));
      if (idx && drop) return launch_bwd<T, 128, 128, 64, 8, 2, 0, 4, 4, 2, true, kBig>(args, stream, layout);
      if (idx) return launch_bwd<T, 128, 128, 64, 8, 2, 0, 4, 4, 2, false, kBig>(args, stream, layout);  // 173 KiB
      if (gen) return launch_bwd<T, 128, 64, 64, 4, 1, 1>(args, stream, layout);
      return launch_bwd<T, 128, 64, 64, 4, 1, 0, 0, 0, 0, false, kSmall>(args, stream, layout);
    case 256:
      FA_TUNE(8, launch_bwd<T, 256, 64, 64, 8, 1, 0>(args, stream, layout));
      FA_TUNE(13, launch_bwd<T, 256, 64, 64, 8, 1, 0, 2, 2, 2>(args, stream, layout));  // 150 KiB
      if (idx && drop) return launch_bwd<T, 256, 64, 64, 8, 2, 0, 2, 2, 2, true, kBig>(args, stream, layout);
      if (idx) return launch_bwd<T, 256, 64, 64, 8, 2, 0, 2, 2, 2, false, kBig>(args, stream, layout);  // 217 KiB
      if (gen) return launch_bwd<T, 256, 32, 32, 4, 1, 1>(args, stream, layout);
      return launch_bwd<T, 256, 32, 32, 4, 1, 0, 0, 0, 0, false, kSmall>(args, stream, layout);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T, bool kTf32 = false>
cudaError_t bwd_dsum(const FlashBwdParams& p, float* dsum, float* lse2, cudaStream_t stream) {
  const AttnShape& s = p.shape;
  const int64_t rows = s.B * s.H * s.Tq;
  // bwd_dsum_vec_kernel: 16-byte loads of o and d_o (which share o's strides), kG = the row's 16-byte pieces
  // (at most 32: a warp); else one warp per row.
  const int64_t pieces = s.Dv * static_cast<int64_t>(sizeof(T)) / 16;
  bool vec = s.Dv * static_cast<int64_t>(sizeof(T)) % 16 == 0 && aligned16(p.o) && aligned16(p.d_o) &&
             (pieces == 8 || pieces == 16 || (pieces > 0 && pieces % 32 == 0));
  for (int i = 0; i < 3; ++i) vec = vec && s.o_stride[i] * static_cast<int64_t>(sizeof(T)) % 16 == 0;
  if (vec) {
    const int64_t threads = rows * (pieces < 32 ? pieces : 32);
    const unsigned blocks = static_cast<unsigned>((threads + 255) / 256);
    if (pieces == 8) bwd_dsum_vec_kernel<T, kTf32, 8><<<blocks, 256, 0, stream>>>(p, dsum, lse2);
    else if (pieces == 16) bwd_dsum_vec_kernel<T, kTf32, 16><<<blocks, 256, 0, stream>>>(p, dsum, lse2);
    else bwd_dsum_vec_kernel<T, kTf32, 32><<<blocks, 256, 0, stream>>>(p, dsum, lse2);
    return cudaGetLastError();
  }
  bwd_dsum_kernel<T, kTf32><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(p, dsum, lse2);
  return cudaGetLastError();
}

static size_t dsum_floats(const AttnShape& s) {
  return static_cast<size_t>((s.B * s.H * s.Tq + 63) / 64 * 64);  // keeps dQacc 256-byte aligned
}

// Row arrays (Dsum, lse2) in the workspace exist for the tensor-core path (both modes).
static bool uses_tc(const FlashBwdParams& p) {
  return p.dtype == DType::kFloat16 || p.dtype == DType::kBFloat16;
}

// dQacc rows per (b, h): Tq padded so that every query tile owns a whole block.
static int64_t dq_rows_padded(const AttnShape& s) { return (s.Tq + kDqRowPad - 1) / kDqRowPad * kDqRowPad; }

static bool uses_dq_acc(const FlashBwdParams& p) {
  return !p.deterministic && (p.dtype == DType::kFloat16 || p.dtype == DType::kBFloat16 ||
                              (p.dtype == DType::kFloat32 && p.allow_tf32));
}

// Deterministic mode where sm90/flash_bwd_sm90.cu's ordered dQ reduction may run (builds with the
// Hopper kernels, float16 / bfloat16, D, Dv <= 256 and multiples of 8 (padded up to
// head_dim_bucket(max(D, Dv)) there):
// shape and flags only, as the XLA
// lowering sizes the workspace from those at compile time, without the masks): the dQ accumulator
// as in the non-deterministic mode, then one int counter per (b, h, 64-row query tile). sm80's
// deterministic backward uses neither (it runs on any GPU with this size). The non-deterministic
// workspace is unchanged.
static bool uses_dq_sem(const FlashBwdParams& p) {
#if FA_HAS_SM90
  const AttnShape& s = p.shape;
  return p.deterministic && uses_tc(p) && s.D > 0 && s.Dv > 0 && s.D % 8 == 0 && s.Dv % 8 == 0 &&
         padded_head_dim(s) != 0;
#else
  (void)p;
  return false;
#endif
}
// Deterministic float32 with TF32 where a Hopper TF32 backward may run (sm90/flash_bwd_sm90_tf32*.cu: shape, flags
// and the device, as their workspace sizes): its ordered dQ reduction needs the dQ accumulator too (its counters are
// in its own part, after). sm80's deterministic TF32 backward does not use it (flash_bwd_impl passes none).
static bool uses_tf32_det_acc(const FlashBwdParams& p) {
#if FA_HAS_SM90
  return p.deterministic && p.dtype == DType::kFloat32 && p.allow_tf32 &&
         (sm90::bwd_tf32_workspace_floats(p) > 0 || sm90::bwd_tf32_d128_workspace_floats(p) > 0);
#else
  (void)p;
  return false;
#endif
}
static size_t dq_sem_ints(const AttnShape& s) { return static_cast<size_t>(s.B * s.H * (dq_rows_padded(s) / 64)); }
// The dQ accumulator's floats: [B, H, dq_rows_padded, head_dim_bucket(max(D, Dv))].
static size_t dq_acc_floats(const AttnShape& s) {
  return static_cast<size_t>(s.B * s.H * dq_rows_padded(s)) * static_cast<size_t>(padded_head_dim(s));
}

size_t bwd_workspace_bytes(const FlashBwdParams& p) {
  const AttnShape& s = p.shape;
  size_t floats = dsum_floats(s) * (uses_tc(p) ? 2 : 1);
  if (uses_dq_acc(p) || uses_dq_sem(p) || uses_tf32_det_acc(p)) floats += dq_acc_floats(s);
  if (uses_dq_sem(p)) floats += dq_sem_ints(s);  // int32, 4 bytes as a float
#if FA_HAS_SM90
  // The Hopper TF32 backward's pre-pass copies (sm90/flash_bwd_sm90_tf32.cu), after the parts above.
  floats += sm90::bwd_tf32_workspace_floats(p);
  floats += sm90::bwd_tf32_d128_workspace_floats(p);  // (the three are for head dims 64, 128 and 256: two are 0)
  floats += sm90::bwd_tf32_d256_workspace_floats(p);
#endif
  return floats * sizeof(float);
}

BwdWorkspaceParts bwd_workspace_parts(const FlashBwdParams& p) {
  const AttnShape& s = p.shape;
  BwdWorkspaceParts w;
  w.tq_pad = dq_rows_padded(s);
  w.hd = padded_head_dim(s);
  if (!p.workspace || !uses_tc(p)) return w;
  w.dsum = p.workspace;
  w.lse2 = p.workspace + dsum_floats(s);
  if (uses_dq_acc(p)) w.dq_acc = p.workspace + 2 * dsum_floats(s);
  if (uses_dq_sem(p)) {
    w.dq_acc = p.workspace + 2 * dsum_floats(s);
    w.dq_sem = reinterpret_cast<int*>(w.dq_acc + dq_acc_floats(s));
  }
  return w;
}

Tf32BwdWorkspaceParts bwd_tf32_workspace_parts(const FlashBwdParams& p) {
  const AttnShape& s = p.shape;
  Tf32BwdWorkspaceParts w;
  if (!p.workspace || p.dtype != DType::kFloat32 || !p.allow_tf32) return w;
  w.dsum = p.workspace;
  if (!uses_dq_acc(p) && !uses_tf32_det_acc(p)) return w;
  w.dq_acc = p.workspace + dsum_floats(s);
  w.dq_rows = dq_rows_padded(s);
  w.extra = w.dq_acc + dq_acc_floats(s);
  return w;
}

cudaError_t bwd_dsum_tf32(const FlashBwdParams& p, float* dsum, cudaStream_t stream) {
  return bwd_dsum<float, true>(p, dsum, nullptr, stream);
}

cudaError_t bwd_dsum_tc(const FlashBwdParams& p, float* dsum, float* lse2, cudaStream_t stream) {
  if (p.dtype == DType::kFloat16) return bwd_dsum<__half>(p, dsum, lse2, stream);
  if (p.dtype == DType::kBFloat16) return bwd_dsum<__nv_bfloat16>(p, dsum, lse2, stream);
  return cudaErrorInvalidValue;
}

// This target's backward (all dtypes but float64), after flash_bwd_cuda's checks.
cudaError_t bwd(const FlashBwdParams& p, bool big_smem, cudaStream_t stream) {
  const AttnShape& s = p.shape;
  cudaError_t err = cudaSuccess;
  if (p.dbias && s.B * s.H * s.Tq * s.Tk > 0) {
    err = cudaMemsetAsync(p.dbias, 0, static_cast<size_t>(s.B * s.H * s.Tq * s.Tk) * sizeof(float), stream);
    if (err != cudaSuccess) return err;
  }
  if (s.B == 0 || s.H == 0 || (s.Tq == 0 && s.Tk == 0)) return cudaSuccess;
  if (p.workspace == nullptr && s.Tq > 0) return cudaErrorInvalidValue;  // Tq == 0: no rows to keep
  float* dsum = p.workspace;
  float* lse2 = uses_tc(p) ? p.workspace + dsum_floats(s) : nullptr;
  if (s.Tq > 0) {
    if (p.dtype == DType::kFloat32)
      err = p.allow_tf32 ? bwd_dsum<float, true>(p, dsum, nullptr, stream)
                         : bwd_dsum<float>(p, dsum, nullptr, stream);
    else if (p.dtype == DType::kFloat16) err = bwd_dsum<__half>(p, dsum, lse2, stream);
    else err = bwd_dsum<__nv_bfloat16>(p, dsum, lse2, stream);
    if (err != cudaSuccess) return err;
  }
  if (p.dtype == DType::kFloat32) {
    if (p.allow_tf32)  // TF32 tensor cores (flash_bwd_tf32.cu); dQacc after Dsum in the workspace
      return bwd_tf32(p, dsum, uses_dq_acc(p) ? p.workspace + dsum_floats(s) : nullptr,
                            big_smem, stream);
    if (s.Tq > 0 && (err = bwd_dq_simt(p, dsum, stream)) != cudaSuccess) return err;
    if (s.Tk > 0) return bwd_dkdv_simt(p, dsum, stream);
    return cudaSuccess;
  }
  const int hd = padded_head_dim(s);
  const bool vec = vec8(p.shape, p.q, p.k, p.v, p.o) && aligned16(p.d_o) && aligned16(p.dk) &&
                   aligned16(p.dv);
  BwdArgs args{p, dsum, lse2, nullptr, dq_rows_padded(s), vec};
  if (uses_dq_acc(p)) {
    args.dq_acc = p.workspace + 2 * dsum_floats(s);
    if (!aligned16(args.dq_acc)) return cudaErrorMisalignedAddress;  // float4 atomics
    const size_t n = static_cast<size_t>(s.B * s.H * args.tq_pad) * hd;
    if (n > 0 && (err = cudaMemsetAsync(args.dq_acc, 0, n * sizeof(float), stream)) != cudaSuccess) return err;
  } else {
    args.p.dbias = nullptr;  // written by bwd_dq_tc
  }
  // With no keys nothing is accumulated; any complete layout then writes dQ = 0 (4 warps x 16 rows).
  DqFragLayout layout{64, 128, 4, 1, hd / 8, hd / 8 < 8 ? hd / 8 : 8};
  if (s.Tk > 0) {
    err = p.dtype == DType::kFloat16 ? bwd_tc<__half>(args, hd, big_smem, stream, &layout)
                                     : bwd_tc<__nv_bfloat16>(args, hd, big_smem, stream, &layout);
    if (err != cudaSuccess) return err;
  }
  if (s.Tq == 0) return cudaSuccess;
  if (!args.dq_acc) return bwd_dq_tc(p, dsum, lse2, vec && aligned16(p.dq), hd, stream);
  const int64_t n4 = s.B * s.H * args.tq_pad * hd / 4;
  const unsigned blocks = static_cast<unsigned>(n4 / 256 + 1 < 65536 * 16 ? n4 / 256 + 1 : 65536 * 16);
  if (p.dtype == DType::kFloat16)
    bwd_dq_frag_convert_kernel<__half><<<blocks, 256, 0, stream>>>(p, args.dq_acc, hd, args.tq_pad, layout);
  else
    bwd_dq_frag_convert_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(p, args.dq_acc, hd, args.tq_pad,
                                                                                layout);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace flashattn
