// Deterministic dQ on tensor cores (float16 / bfloat16): the dQ half of the backward without
// atomics, for params.deterministic (dK/dV come from flash_bwd_kernel with its phase C off).
//
// One CTA of NW warps per (query tile of BQ = 16 NW rows, head h, batch b); warp w owns rows
// [16 w, 16 w + 16). dQ accumulates in registers over the key tiles the rows see (K and V of a
// tile through shared memory), each CTA owning its rows, so the sum order is fixed:
//   S = Q Kᵀ,  dPd = dO Vᵀ                              (mma m16n8k16, fp32 accumulators)
//   P = 2^(z - log2e·lse), Z = keep_scale or 0 (dropout), dlogit = P ∘ (dPd ∘ Z - Dsum) (-> dbias)
//   dS = dlogit ∘ softcap'
//   dQ += dS K      (dS converted to 16 bits in registers as the A operand, K via ldmatrix.trans)
// and at the end dQ *= scale. Shared memory: Q, dO [BQ, HD], K, V [BK, HD], rows padded 16 B.
#include "cc/kernels/common/flash_cuda_common.cuh"
#include "cc/kernels/sm80/flash_bwd_tile.cuh"
#include "cc/kernels/common/flash_cuda_internal.h"

namespace flashattn {
namespace cuda {

struct DqArgs {
  FlashBwdParams p;
  const float* dsum;  // [B, H, Tq]
  const float* lse2;  // [B, H, Tq] log2e * lse
  bool vec;
};

template <int HD, int NW, int BK>
struct DqCfg {
  static constexpr int BQ = 16 * NW, kThreads = 32 * NW;
  using QTile = STile<BQ, HD>;
  using KTile = STile<BK, HD>;
  template <typename T>
  static constexpr size_t smem() { return (2 * QTile::kElems + 2 * KTile::kElems) * sizeof(T); }
};

template <typename T, int HD, int NW, int BK, bool GEN>
__global__ void __launch_bounds__(NW * 32) flash_bwd_dq_kernel(const DqArgs args) {
  using Cfg = DqCfg<HD, NW, BK>;
  using QTile = typename Cfg::QTile;
  using KTile = typename Cfg::KTile;
  constexpr int BQ = Cfg::BQ, NT = Cfg::kThreads;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // [BQ, HD]
  T* sdO = sQ + QTile::kElems;              // [BQ, HD]
  T* sK = sdO + QTile::kElems;              // [BK, HD]
  T* sV = sK + KTile::kElems;               // [BK, HD]

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

  // This thread's two rows: i0 + wr0 + g (+8).
  float lse2r[2], dsr[2];
  dq_row_stats(args.lse2, 1.f, args.dsum, sh, b, h, i0 + wr0, g, lse2r, dsr);
  float dq[HD / 8][4];
#pragma unroll
  for (int nd = 0; nd < HD / 8; ++nd)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[nd][e] = 0.f;

  if (ntiles > 0) {
    load_tile<T, BQ, HD, NT>(sQ, static_cast<const T*>(p.q), sh.q_stride, b, h, i0, sh.Tq, D, args.vec);
    load_tile<T, BQ, HD, NT>(sdO, static_cast<const T*>(p.d_o), sh.o_stride, b, h, i0, sh.Tq, Dv, args.vec);
  }
  for (int t = 0; t < ntiles; ++t) {
    const int64_t j0 = jstart + static_cast<int64_t>(t) * BK;
    load_tile<T, BK, HD, NT>(sK, static_cast<const T*>(p.k), sh.k_stride, b, hk, j0, sh.Tk, D, args.vec);
    load_tile<T, BK, HD, NT>(sV, static_cast<const T*>(p.v), sh.v_stride, b, hk, j0, sh.Tk, Dv, args.vec);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();  // K(t), V(t) (and Q, dO) landed

    // S = Q Kᵀ and dPd = dO Vᵀ: A = [query][d] tiles, B = [key][d] tiles (col-major Kᵀ / Vᵀ).
    float s[BK / 8][4], dp[BK / 8][4];
#pragma unroll
    for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = dp[nt][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t aq[4], ao[4];
      ldsm_x4(aq, sQ + QTile::off(wr0 + (lane & 15), kk * 16 + (lane >> 4) * 8));
      ldsm_x4(ao, sdO + QTile::off(wr0 + (lane & 15), kk * 16 + (lane >> 4) * 8));
#pragma unroll
      for (int nt2 = 0; nt2 < BK / 16; ++nt2) {
        uint32_t bk[4], bv[4];
        ldsm_x4(bk, sK + KTile::off(nt2 * 16 + (lane & 7) + (lane >> 4) * 8, kk * 16 + ((lane >> 3) & 1) * 8));
        ldsm_x4(bv, sV + KTile::off(nt2 * 16 + (lane & 7) + (lane >> 4) * 8, kk * 16 + ((lane >> 3) & 1) * 8));
        Elem<T>::mma(s[2 * nt2], aq, bk);
        Elem<T>::mma(s[2 * nt2 + 1], aq, bk + 2);
        Elem<T>::mma(dp[2 * nt2], ao, bv);
        Elem<T>::mma(dp[2 * nt2 + 1], ao, bv + 2);
      }
    }

    // Element-wise: s <- dS (row i = query, column j = key).
    dq_tile_dscores<T, BK / 8, GEN>(s, dp, p, b, h, i0, BQ, i0 + wr0, j0, lse2r, dsr, sl2, qlim, klim,
                                      dropout, g, tq);

    // dQ += dS K: A = dS (two n8 accumulator tiles = one k16 A fragment), B = K [key][d] trans.
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
      uint32_t a[4];
      a[0] = Elem<T>::pack(s[2 * ks][0], s[2 * ks][1]);
      a[1] = Elem<T>::pack(s[2 * ks][2], s[2 * ks][3]);
      a[2] = Elem<T>::pack(s[2 * ks + 1][0], s[2 * ks + 1][1]);
      a[3] = Elem<T>::pack(s[2 * ks + 1][2], s[2 * ks + 1][3]);
#pragma unroll
      for (int nd2 = 0; nd2 < HD / 16; ++nd2) {
        uint32_t bb[4];
        ldsm_x4_t(bb, sK + KTile::off(ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, nd2 * 16 + (lane >> 4) * 8));
        Elem<T>::mma(dq[2 * nd2], a, bb);
        Elem<T>::mma(dq[2 * nd2 + 1], a, bb + 2);
      }
    }
    __syncthreads();  // every warp is done with K(t), V(t) before they are overwritten
  }

  // dQ = scale · Σ dS K for every row of the tile (0 for rows that see no key).
  T* dqp = static_cast<T*>(p.dq);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = i0 + wr0 + g + 8 * r;
    if (i >= sh.Tq) continue;
    T* dst = dqp + b * sh.q_stride[0] + i * sh.q_stride[1] + h * sh.q_stride[2];
#pragma unroll
    for (int nd = 0; nd < HD / 8; ++nd) {
      const int d = nd * 8 + 2 * tq;
      const float x0 = dq[nd][2 * r] * p.score.scale, x1 = dq[nd][2 * r + 1] * p.score.scale;
      if (args.vec) {
        if (d < D) *reinterpret_cast<uint32_t*>(dst + d) = Elem<T>::pack(x0, x1);
      } else {
        if (d < D) dst[d] = Elem<T>::from_f(x0);
        if (d + 1 < D) dst[d + 1] = Elem<T>::from_f(x1);
      }
    }
  }
}

template <typename T, int HD, int NW, int BK>
static cudaError_t launch_dq(const DqArgs& args, cudaStream_t stream) {
  using Cfg = DqCfg<HD, NW, BK>;
  const FlashBwdParams& p = args.p;
  const bool gen = needs_general(p.mask, p.score, p.dropout, p.dbias, true);
  auto kernel = gen ? flash_bwd_dq_kernel<T, HD, NW, BK, true> : flash_bwd_dq_kernel<T, HD, NW, BK, false>;
  const size_t smem = Cfg::template smem<T>();
  cudaError_t err = set_dynamic_smem(kernel, static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  const AttnShape& s = p.shape;
  if (s.H > 65535 || s.B > 65535) return cudaErrorInvalidValue;
  dim3 grid(static_cast<unsigned>((s.Tq + Cfg::BQ - 1) / Cfg::BQ), static_cast<unsigned>(s.H),
            static_cast<unsigned>(s.B));
  kernel<<<grid, Cfg::kThreads, smem, stream>>>(args);
  return cudaGetLastError();
}

// Shared memory (padded rows): HD 64: 37 KiB, HD 128: 70 KiB, HD 256: 68 KiB.
template <typename T>
static cudaError_t dq_tc(const DqArgs& args, int hd, cudaStream_t stream) {
  switch (hd) {
    case 64: return launch_dq<T, 64, 4, 64>(args, stream);
    case 128: return launch_dq<T, 128, 4, 64>(args, stream);
    case 256: return launch_dq<T, 256, 2, 32>(args, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t bwd_dq_tc(const FlashBwdParams& p, const float* dsum, const float* lse2, bool vec, int hd,
                      cudaStream_t stream) {
  DqArgs args{p, dsum, lse2, vec};
  if (p.dtype == DType::kFloat16) return dq_tc<__half>(args, hd, stream);
  if (p.dtype == DType::kBFloat16) return dq_tc<__nv_bfloat16>(args, hd, stream);
  return cudaErrorNotSupported;
}

}  // namespace cuda
}  // namespace flashattn
