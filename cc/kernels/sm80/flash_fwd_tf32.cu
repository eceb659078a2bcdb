// FlashAttention-2 forward for float32 inputs on TF32 tensor cores (params.allow_tf32).
//
// Same schedule as flash_fwd.cu: one CTA of NW warps per (query tile of BQ = 16 MT NW rows,
// head h, batch b), warp w owns rows [16 MT w, 16 MT (w+1)); K/V tiles of BK keys stream through
// shared memory (single K and V buffer: V(t) loads during Q·K(t)ᵀ and the softmax, K(t+1) during
// P·V(t)). Shared-memory tiles are float32 [rows][HD + 4] (16-byte padding: stride ≡ 4 mod 32
// words, so ldmatrix rows and the 32-bit loads below are bank-conflict free). After each
// cp.async group lands, every thread rounds the chunks it copied to tf32 in place (cvt.rna), so
// the fragments need no conversion. Per key tile, with mma.sync m16n8k8 tf32 (fp32 accumulators):
//   S = Q Kᵀ       A = Q [q][d] through ldmatrix x4 (a 8x8 b16 matrix = 8 rows of 4 floats, so
//                  thread (g, t) gets the float at (row g, col t): exactly the tf32 A layout);
//                  B = K [key][d] (= col-major Kᵀ), ldmatrix x4 = two n8 tiles.
//   z, m, P, ℓ     as flash_fwd.cu (GEN: score_elem per element; else scale folded into exp2)
//   O += P V       A = P from the S accumulators without shuffles: the k index of the k8 step is
//                  permuted (A col t <-> key 2t, A col t+4 <-> key 2t+1), so a = {c0, c2, c1, c3}
//                  of one n8 accumulator tile; B = V rows 2t and 2t+1 (col g) by 32-bit loads.
// Epilogue: O /= ℓ, lse = ln2 (m + log2 ℓ) (ℓ = 0: O = 0, lse = -inf). Head dims are padded with
// zeros to HD ∈ {64, 128, 256}.
#include "cc/kernels/common/flash_cuda_common.cuh"
#include "cc/kernels/common/flash_cuda_internal.h"
#include "cc/kernels/sm80/flash_fwd_tile.cuh"

namespace flashattn {
namespace cuda {

struct Tf32FwdArgs {
  FlashFwdParams p;
  bool vec;  // 16-byte loads (D, Dv, strides % 4 == 0, aligned bases)
};

template <int HD, int MT, int BK, int NW>
struct Tf32FwdCfg {
  static constexpr int kThreads = NW * 32, BQ = 16 * MT * NW;
  using QTile = STile<BQ, HD, 4>;
  using KTile = STile<BK, HD, 4>;
  static constexpr size_t kSmem = (QTile::kElems + 2 * KTile::kElems) * sizeof(float);
};

// q [B, Tq, H, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv] float32 -> o [B, Tq, H, Dv], lse [B, H, Tq].
// SC: the devices that run it (SmemClass).
template <int HD, int MT, int BK, int NW, bool GEN, SmemClass SC = SmemClass::kAny>
__global__ void __launch_bounds__(NW * 32) flash_fwd_tf32_kernel(const Tf32FwdArgs args) {
  FA_KERNEL_FOR(SC)
  using Cfg = Tf32FwdCfg<HD, MT, BK, NW>;
  using QTile = typename Cfg::QTile;
  using KTile = typename Cfg::KTile;
  constexpr int NT = Cfg::kThreads, BQ = Cfg::BQ;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* sQ = reinterpret_cast<float*>(smem_raw);  // [BQ, HD + 4]
  float* sK = sQ + QTile::kElems;                   // [BK, HD + 4]
  float* sV = sK + KTile::kElems;                   // [BK, HD + 4]
  const uint32_t* uV = reinterpret_cast<const uint32_t*>(sV);

  const FlashFwdParams& p = args.p;
  const AttnShape& sh = p.shape;
  const bool reverse = p.mask.causal || p.mask.window_right >= 0;  // long tiles first
  const int64_t qb = reverse ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int64_t h = blockIdx.y, b = blockIdx.z, hk = h / (sh.H / sh.Hkv);
  const int64_t i0 = qb * BQ;
  const QueryTileKeys<BQ, BK> keys(p.mask, sh, b, i0);
  const int64_t qlim = keys.qlim, klim = keys.klim, jstart = keys.jstart;
  const int ntiles = keys.ntiles;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int wr0 = warp * 16 * MT;
  const float* q = static_cast<const float*>(p.q);
  const float* k = static_cast<const float*>(p.k);
  const float* v = static_cast<const float*>(p.v);
  const int D = static_cast<int>(sh.D), Dv = static_cast<int>(sh.Dv);

  float o[MT][HD / 8][4];  // rows wr0 + 16 mt + g (+8), cols 8 nd + 2 tq (+1)
  float mrow[MT][2], lrow[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nd = 0; nd < HD / 8; ++nd)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][nd][e] = 0.f;
    mrow[mt][0] = mrow[mt][1] = neg_inf();
    lrow[mt][0] = lrow[mt][1] = 0.f;
  }

  if (ntiles > 0) {
    load_tile<float, BQ, HD, NT>(sQ, q, sh.q_stride, b, h, i0, sh.Tq, D, args.vec);
    load_tile<float, BK, HD, NT>(sK, k, sh.k_stride, b, hk, jstart, sh.Tk, D, args.vec);
    cp_async_commit();
  }
  const bool dropout = p.dropout.rate > 0.f;

  for (int t = 0; t < ntiles; ++t) {
    const int64_t j0 = jstart + static_cast<int64_t>(t) * BK;
    cp_async_wait<0>();
    if (t == 0) round_tile_tf32<BQ, HD, NT>(sQ);
    round_tile_tf32<BK, HD, NT>(sK);
    __syncthreads();  // K(t) landed and rounded; every warp is done with V(t-1)
    load_tile<float, BK, HD, NT>(sV, v, sh.v_stride, b, hk, j0, sh.Tk, Dv, args.vec);
    cp_async_commit();

    // S[BQ, BK] = Q Kᵀ.
    float s[MT][BK / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HD / 8; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        ldsm_x4(a[mt], sQ + QTile::off(wr0 + mt * 16 + (lane & 15), kk * 8 + (lane >> 4) * 4));
#pragma unroll
      for (int nt2 = 0; nt2 < BK / 16; ++nt2) {
        uint32_t bb[4];  // {b0, b1} of keys nt2*16 + [0, 8), then of [8, 16)
        ldsm_x4(bb, sK + KTile::off(nt2 * 16 + (lane & 7) + (lane >> 4) * 8, kk * 8 + ((lane >> 3) & 1) * 4));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_tf32(s[mt][2 * nt2], a[mt], bb);
          mma_tf32(s[mt][2 * nt2 + 1], a[mt], bb + 2);
        }
      }
    }

    const float mul = fwd_tile_scores<float, MT, BK / 8, GEN>(s, p, b, h, i0, BQ, i0 + wr0, j0, qlim, klim, g, tq);
    fwd_online_softmax(s, o, mrow, lrow, mul);
    if (GEN && dropout) fwd_tile_dropout(s, p.dropout, b, h, i0 + wr0, j0, g, tq);

    cp_async_wait<0>();
    round_tile_tf32<BK, HD, NT>(sV);
    __syncthreads();  // V(t) landed and rounded; every warp is done with K(t)
    if (t + 1 < ntiles) {
      load_tile<float, BK, HD, NT>(sK, k, sh.k_stride, b, hk, j0 + BK, sh.Tk, D, args.vec);
      cp_async_commit();
    }

    // O += P V, k8 step ks = keys [8 ks, 8 ks + 8) in the order 2t, 2t+1 (see the header).
#pragma unroll
    for (int ks = 0; ks < BK / 8; ++ks) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        a[mt][0] = to_tf32(s[mt][ks][0]);
        a[mt][1] = to_tf32(s[mt][ks][2]);
        a[mt][2] = to_tf32(s[mt][ks][1]);
        a[mt][3] = to_tf32(s[mt][ks][3]);
      }
      const uint32_t* v0 = uV + KTile::off(ks * 8 + 2 * tq, g);
#pragma unroll
      for (int nd = 0; nd < HD / 8; ++nd) {
        uint32_t bb[2] = {v0[nd * 8], v0[KTile::kStride + nd * 8]};
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma_tf32(o[mt][nd], a[mt], bb);
      }
    }
  }

  fwd_epilogue<float>(o, mrow, lrow, p, b, h, i0 + wr0, args.vec, g, tq);
}

template <int HD, int MT, int BK, int NW, bool GEN, SmemClass SC = SmemClass::kAny>
static cudaError_t launch_fwd_tf32(const Tf32FwdArgs& args, cudaStream_t stream) {
  using Cfg = Tf32FwdCfg<HD, MT, BK, NW>;
  auto kernel = flash_fwd_tf32_kernel<HD, MT, BK, NW, GEN, SC>;
  cudaError_t err = set_dynamic_smem(kernel, static_cast<int>(Cfg::kSmem));
  if (err != cudaSuccess) return err;
  const AttnShape& s = args.p.shape;
  if (s.H > 65535 || s.B > 65535) return cudaErrorInvalidValue;
  dim3 grid(static_cast<unsigned>((s.Tq + Cfg::BQ - 1) / Cfg::BQ), static_cast<unsigned>(s.H),
            static_cast<unsigned>(s.B));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmem, stream>>>(args);
  return cudaGetLastError();
}

// The same tiles for both kernels: the general one (GEN) when gen, else the index-masked one.
template <int HD, int MT, int BK, int NW, SmemClass SC = SmemClass::kAny>
static cudaError_t launch_fwd_tf32_either(bool gen, const Tf32FwdArgs& args, cudaStream_t stream) {
  return gen ? launch_fwd_tf32<HD, MT, BK, NW, true, SC>(args, stream)
             : launch_fwd_tf32<HD, MT, BK, NW, false, SC>(args, stream);
}

static bool aligned16_tf32(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

// Tile configurations (shared memory <= 99 KiB, so they run on sm_86 / sm_89 too, except HD 256's on
// GPUs with >= 210 KiB per SM):
// index-masked kernels 4 warps x 32 rows (K/V fragments reused over two m-tiles), general ones
// 8 warps x 16 rows (fewer registers for the per-element score function).
//   HD 64:  BQ 128, BK 64: 68 KiB      HD 128: BQ 128, BK 32: 99 KiB (101376 B, the sm_86 limit)
//   HD 256: BQ 64,  BK 16: 97.5 KiB; with >= 210 KiB per SM (big_smem: sm_90) BQ 128, BK 32, 8 warps:
//           195 KiB, on the H200 1.11x-1.24x faster (tune_tf32_bwd.py --fwd, RESULTS.md)
cudaError_t fwd_tf32(const FlashFwdParams& p, bool big_smem, cudaStream_t stream) {
  const AttnShape& s = p.shape;
  const bool vec = s.D % 4 == 0 && s.Dv % 4 == 0 && s.q_stride[0] % 4 == 0 && s.q_stride[1] % 4 == 0 &&
                   s.q_stride[2] % 4 == 0 && s.k_stride[0] % 4 == 0 && s.k_stride[1] % 4 == 0 &&
                   s.k_stride[2] % 4 == 0 && s.v_stride[0] % 4 == 0 && s.v_stride[1] % 4 == 0 &&
                   s.v_stride[2] % 4 == 0 && s.o_stride[0] % 4 == 0 && s.o_stride[1] % 4 == 0 &&
                   s.o_stride[2] % 4 == 0 && aligned16_tf32(p.q) && aligned16_tf32(p.k) &&
                   aligned16_tf32(p.v) && aligned16_tf32(p.o);
  const Tf32FwdArgs args{p, vec};
  const bool gen = needs_general(p.mask, p.score, p.dropout, nullptr, true);
  const int hd = head_dim_bucket(s.D > s.Dv ? s.D : s.Dv);
#ifdef FA_TUNING
  // Tuning builds (benchmarks/tune_tf32_bwd.py --fwd): FA_TF32_FWD_CFG picks other head-dim-256 tiles
  // (query rows per CTA x keys per step, warps): 1 128 x 16, 8 warps (162.5 KiB); 2 128 x 32, 8 warps
  // (195 KiB; the big_smem default since 2026-12-04); 3 64 x 16, 4 warps (97.5 KiB; the default before,
  // and elsewhere). 0 / unset: the default below.
  if (hd == 256) {
    const int tune = tuning_cfg("FA_TF32_FWD_CFG");
    if (tune == 1) return launch_fwd_tf32_either<256, 1, 16, 8>(gen, args, stream);
    if (tune == 2) return launch_fwd_tf32_either<256, 1, 32, 8>(gen, args, stream);
    if (tune == 3) return launch_fwd_tf32_either<256, 1, 16, 4>(gen, args, stream);
  }
#endif
  switch (hd) {
    case 64:
      return gen ? launch_fwd_tf32<64, 1, 64, 8, true>(args, stream) : launch_fwd_tf32<64, 2, 64, 4, false>(args, stream);
    case 128:
      return gen ? launch_fwd_tf32<128, 1, 32, 8, true>(args, stream)
                 : launch_fwd_tf32<128, 2, 32, 4, false>(args, stream);
    case 256:
      return big_smem ? launch_fwd_tf32_either<256, 1, 32, 8, SmemClass::kBig>(gen, args, stream)
                      : launch_fwd_tf32_either<256, 1, 16, 4, SmemClass::kSmall>(gen, args, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace cuda
}  // namespace flashattn
