// FlashAttention-2 forward on tensor cores (float16 / bfloat16), and the forward launcher.
//
// One CTA of NW warps per (query tile of BQ rows, head h, batch b). Warp w owns rows
// [w*16*MT, (w+1)*16*MT) of the tile. K/V tiles of BK keys stream through shared memory by
// cp.async, double-buffered (STAGES = 2: tile t+1 loads during tile t) or single-buffered
// (STAGES = 1: V(t) loads during Q·K(t)ᵀ, K(t+1) during P·V(t)). Shared-memory rows are padded
// by 16 bytes (conflict-free ldmatrix, linear addresses). Per key tile:
//   S = Q Kᵀ                            (mma m16n8k16, fp32 accumulators in registers)
//   z = log2e * logit(S)                (GEN kernels: full score function per element;
//                                        others: scale * log2e folded into exp2, -inf by index
//                                        only on tiles crossing causal/window/length limits)
//   m' = max(m, rowmax z);  P = 2^(z - m');  α = 2^(m - m')
//   ℓ = α ℓ + rowsum P;  O = α O + dropout(P) V       (P converted to 16 bits in registers)
// and at the end O /= ℓ, lse = ln2 * (m + log2 ℓ) (rows with ℓ = 0: O = 0, lse = -inf).
// The head dim is padded with zeros to HD ∈ {64, 128, 256}.
#include "cc/kernels/flash_cuda.h"

#include "cc/kernels/common/flash_cuda_common.cuh"
#include "cc/kernels/common/flash_cuda_internal.h"
#include "cc/kernels/sm80/flash_fwd_tile.cuh"

namespace flashattn {
namespace cuda {

struct FwdArgs {
  FlashFwdParams p;
  bool vec;  // 16-byte loads/stores are legal (see load_tile)
};

template <typename T, int HD, int MT, int BK, int NW, int STAGES>
struct FwdCfg {
  static constexpr int kWarps = NW, kThreads = NW * 32;
  static constexpr int BQ = 16 * MT * kWarps;
  using QTile = STile<BQ, HD>;
  using KTile = STile<BK, HD>;
  static constexpr size_t kSmem = (QTile::kElems + 2 * STAGES * KTile::kElems) * sizeof(T);
};

// DROP: the index-masked kernel (GEN false) with dropout. SC: the devices that run it (SmemClass).
template <typename T, int HD, int MT, int BK, int NW, int STAGES, bool GEN, bool DROP = false,
          SmemClass SC = SmemClass::kAny>
__global__ void __launch_bounds__(NW * 32) flash_fwd_kernel(const FwdArgs args) {
  FA_KERNEL_FOR(SC)
  using Cfg = FwdCfg<T, HD, MT, BK, NW, STAGES>;
  constexpr int NT = NW * 32;
  using QTile = typename Cfg::QTile;
  using KTile = typename Cfg::KTile;
  constexpr int BQ = Cfg::BQ;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // [BQ, HD]
  T* sK = sQ + QTile::kElems;               // STAGES x [BK, HD]
  T* sV = sK + STAGES * KTile::kElems;      // STAGES x [BK, HD]

  const FlashFwdParams& p = args.p;
  const AttnShape& sh = p.shape;
  // Causal-like tiles do unequal work: start the long ones (high query index) first.
  const bool reverse = p.mask.causal || p.mask.window_right >= 0;
  const int64_t qb = reverse ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int64_t h = blockIdx.y, b = blockIdx.z, hk = h / (sh.H / sh.Hkv);
  const int64_t i0 = qb * BQ;
  const QueryTileKeys<BQ, BK> keys(p.mask, sh, b, i0);
  const int64_t qlim = keys.qlim, klim = keys.klim, jstart = keys.jstart;
  const int ntiles = keys.ntiles;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int wr0 = warp * 16 * MT;
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);

  float o[MT][HD / 8][4];  // O accumulator: rows wr0 + mt*16 + g (+8), cols nd*8 + 2tq (+1)
  float mrow[MT][2], lrow[MT][2];  // running max (base 2) and this thread's partial row sum
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
    load_tile<T, BQ, HD, NT>(sQ, q, sh.q_stride, b, h, i0, sh.Tq, static_cast<int>(sh.D), args.vec);
    load_tile<T, BK, HD, NT>(sK, k, sh.k_stride, b, hk, jstart, sh.Tk, static_cast<int>(sh.D), args.vec);
    if (STAGES == 2)
      load_tile<T, BK, HD, NT>(sV, v, sh.v_stride, b, hk, jstart, sh.Tk, static_cast<int>(sh.Dv), args.vec);
    cp_async_commit();
  }
  // Head-dim k-steps and output tiles past D / Dv are computed on the zero padding (no runtime
  // guards: they cost the compiler address rematerialization around every ldmatrix).
  constexpr int ksteps = HD / 16, dvsteps = HD / 16;
  const bool dropout = DROP || (GEN && p.dropout.rate > 0.f);

  for (int t = 0; t < ntiles; ++t) {
    const int64_t j0 = jstart + static_cast<int64_t>(t) * BK;
    // Pipeline. STAGES == 2: K(t+1), V(t+1) stream in during all of tile t. STAGES == 1 (one K
    // and one V buffer): V(t) streams in during S = Q K(t)ᵀ and the softmax, K(t+1) during P V(t).
    const int st = STAGES == 2 ? (t & 1) : 0;
    cp_async_wait<0>();
    __syncthreads();  // K(t) (and V(t)) landed; every warp is done with tile t-1
    if (STAGES == 2) {
      if (t + 1 < ntiles) {
        load_tile<T, BK, HD, NT>(sK + (st ^ 1) * KTile::kElems, k, sh.k_stride, b, hk, j0 + BK, sh.Tk,
                                  static_cast<int>(sh.D), args.vec);
        load_tile<T, BK, HD, NT>(sV + (st ^ 1) * KTile::kElems, v, sh.v_stride, b, hk, j0 + BK, sh.Tk,
                                  static_cast<int>(sh.Dv), args.vec);
        cp_async_commit();
      }
    } else {
      load_tile<T, BK, HD, NT>(sV, v, sh.v_stride, b, hk, j0, sh.Tk, static_cast<int>(sh.Dv), args.vec);
      cp_async_commit();
    }
    const T* cK = sK + st * KTile::kElems;
    const T* cV = sV + st * KTile::kElems;

    // S[BQ, BK] = Q Kᵀ: A = Q (row-major [q][d]), B = K stored [key][d] (= col-major Kᵀ).
    float s[MT][BK / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      if (kk < ksteps) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          ldsm_x4(a[mt], sQ + QTile::off(wr0 + mt * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8));
#pragma unroll
        for (int nt2 = 0; nt2 < BK / 16; ++nt2) {
          uint32_t bb[4];
          ldsm_x4(bb, cK + KTile::off(nt2 * 16 + (lane & 7) + (lane >> 4) * 8,
                                      kk * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            Elem<T>::mma(s[mt][2 * nt2], a[mt], bb);
            Elem<T>::mma(s[mt][2 * nt2 + 1], a[mt], bb + 2);
          }
        }
      }
    }

    // Scores (masks, and the full score function in GEN kernels), online softmax, dropout.
    const float mul = fwd_tile_scores<T, MT, BK / 8, GEN>(s, p, b, h, i0, BQ, i0 + wr0, j0, qlim, klim, g, tq);
    fwd_online_softmax(s, o, mrow, lrow, mul);
    if (dropout) fwd_tile_dropout(s, p.dropout, b, h, i0 + wr0, j0, g, tq);

    if (STAGES == 1) {
      cp_async_wait<0>();
      __syncthreads();  // V(t) landed; every warp is done with K(t)
      if (t + 1 < ntiles) {
        load_tile<T, BK, HD, NT>(sK, k, sh.k_stride, b, hk, j0 + BK, sh.Tk, static_cast<int>(sh.D), args.vec);
        cp_async_commit();
      }
    }
    // O += P V: A = P from registers (two n8 accumulator tiles form one k16 A fragment),
    // B = V stored [key][d] (row-major K x N) through ldmatrix.trans.
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        a[mt][0] = Elem<T>::pack(s[mt][2 * ks][0], s[mt][2 * ks][1]);
        a[mt][1] = Elem<T>::pack(s[mt][2 * ks][2], s[mt][2 * ks][3]);
        a[mt][2] = Elem<T>::pack(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
        a[mt][3] = Elem<T>::pack(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
      }
#pragma unroll
      for (int nd2 = 0; nd2 < HD / 16; ++nd2) {
        if (nd2 < dvsteps) {
          uint32_t bb[4];
          ldsm_x4_t(bb, cV + KTile::off(ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                        nd2 * 16 + (lane >> 4) * 8));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            Elem<T>::mma(o[mt][2 * nd2], a[mt], bb);
            Elem<T>::mma(o[mt][2 * nd2 + 1], a[mt], bb + 2);
          }
        }
      }
    }
  }

  // O leaves through this warp's rows of the Q tile (only this warp read them).
  fwd_epilogue<T, MT, HD / 8, QTile::kStride>(o, mrow, lrow, p, b, h, i0 + wr0, args.vec, g, tq,
                                             sQ + QTile::off(wr0, 0));
}

template <typename T, int HD, int MT, int BK, int NW, int STAGES, bool GEN, bool DROP = false,
          SmemClass SC = SmemClass::kAny>
cudaError_t launch_fwd(const FlashFwdParams& p, bool vec, cudaStream_t stream) {
  using Cfg = FwdCfg<T, HD, MT, BK, NW, STAGES>;
  auto kernel = flash_fwd_kernel<T, HD, MT, BK, NW, STAGES, GEN, DROP, SC>;
  cudaError_t err = set_dynamic_smem(kernel, static_cast<int>(Cfg::kSmem));
  if (err != cudaSuccess) return err;
  const int64_t nqb = (p.shape.Tq + Cfg::BQ - 1) / Cfg::BQ;
  if (p.shape.H > 65535 || p.shape.B > 65535) return cudaErrorInvalidValue;
  dim3 grid(static_cast<unsigned>(nqb), static_cast<unsigned>(p.shape.H),
            static_cast<unsigned>(p.shape.B));
  FwdArgs args{p, vec};
  kernel<<<grid, Cfg::kThreads, Cfg::kSmem, stream>>>(args);
  return cudaGetLastError();
}

// Tile configurations. Index-masked kernels: 4 warps x 32 rows (MT = 2: K/V fragments reused
// over two m-tiles), except HD 256 (4 warps x 16 rows; on sm_90 64-key tiles, 99 KiB, two
// CTAs per SM, FlashAttention-2's choice for H100-class GPUs: 262.6 -> 270.0 TFLOP/s at T = 16k on
// the H200 against the former 8 warps x 16 rows, 132 KiB, one CTA per SM); general kernels
// (element masks, bias, soft-cap): 8 warps x 16 rows, fewer registers; dropout alone: the
// index-masked configurations with the draws (DROP). HD 128: single
// K/V buffers (68 KiB) measured faster than double (102 KiB) on the H200 (320 vs 310 TFLOP/s at
// T = 16k).
// FA_TUNING builds select other variants at run time with FA_FWD_CFG (tune_configs.py): 1 double
// buffer (HD 128), 3 single buffer (HD 64), 4 HD 256 8 warps x 32 keys, 6 HD 256 4 warps x 32
// keys (the default without sm_90's shared memory), 8 the former HD 256 default on sm_90, 9 HD 256
// 4 warps with double-buffered 32-key tiles; 5 one m-tile per warp (64-query tiles: more CTAs,
// fewer registers, for short sequences; HD 64 / 128), 7 one m-tile per warp with 8 warps (HD 64).
// At T = 512 on the H200 (seventh round, harness) 5 is slower not causal (HD 128: 245.5 vs 283.4)
// and faster causal (HD 64: 164.1 vs 147.1, FA2 154.7; HD 128: 183.3 vs 177.8): a candidate
// for short causal sequences, not yet timed at other lengths or through TensorFlow.
template <typename T>
cudaError_t fwd_tc(const FlashFwdParams& p, bool vec, bool big_smem, cudaStream_t stream) {
  // Dropout alone keeps the index-masked configurations (DROP kernels: one Philox call per 8
  // elements, common/flash_dropout.cuh); other per-element features take the general kernels.
  const bool gen = needs_general(p.mask, p.score, DropoutParams{}, nullptr, true);
  const bool drop = p.dropout.rate > 0.f;
#ifdef FA_TUNING
  const int tune = !gen && !drop && big_smem ? tuning_cfg("FA_FWD_CFG") : 0;
#endif
  switch (head_dim_bucket(p.shape.D > p.shape.Dv ? p.shape.D : p.shape.Dv)) {
    case 64:
      FA_TUNE(3, launch_fwd<T, 64, 2, 64, 4, 1, false>(p, vec, stream));
      FA_TUNE(5, launch_fwd<T, 64, 1, 64, 4, 2, false>(p, vec, stream));
      FA_TUNE(7, launch_fwd<T, 64, 1, 64, 8, 2, false>(p, vec, stream));
      if (gen) return launch_fwd<T, 64, 1, 64, 8, 1, true>(p, vec, stream);
      return drop ? launch_fwd<T, 64, 2, 64, 4, 2, false, true>(p, vec, stream)
                  : launch_fwd<T, 64, 2, 64, 4, 2, false>(p, vec, stream);
    case 128:
      FA_TUNE(1, launch_fwd<T, 128, 2, 64, 4, 2, false>(p, vec, stream));
      FA_TUNE(5, launch_fwd<T, 128, 1, 64, 4, 1, false>(p, vec, stream));
      if (gen) return launch_fwd<T, 128, 1, 64, 8, 1, true>(p, vec, stream);
      return drop ? launch_fwd<T, 128, 2, 64, 4, 1, false, true>(p, vec, stream)
                  : launch_fwd<T, 128, 2, 64, 4, 1, false>(p, vec, stream);
    case 256:
      FA_TUNE(4, launch_fwd<T, 256, 1, 32, 8, 1, false>(p, vec, stream));
      FA_TUNE(6, launch_fwd<T, 256, 1, 32, 4, 1, false>(p, vec, stream));
      FA_TUNE(8, launch_fwd<T, 256, 1, 64, 8, 1, false>(p, vec, stream));
      FA_TUNE(9, launch_fwd<T, 256, 1, 32, 4, 2, false>(p, vec, stream));
      if (gen) return launch_fwd<T, 256, 1, 32, 4, 1, true>(p, vec, stream);
      if (drop)
        return big_smem ? launch_fwd<T, 256, 1, 64, 4, 1, false, true, SmemClass::kBig>(p, vec, stream)
                        : launch_fwd<T, 256, 1, 32, 4, 1, false, true, SmemClass::kSmall>(p, vec, stream);
      return big_smem ? launch_fwd<T, 256, 1, 64, 4, 1, false, false, SmemClass::kBig>(p, vec, stream)
                      : launch_fwd<T, 256, 1, 32, 4, 1, false, false, SmemClass::kSmall>(p, vec, stream);
    default: return cudaErrorInvalidValue;
  }
}

// The fp16 / bf16 forward of this target (the dispatch in flash_cuda_dispatch.cu calls it).
cudaError_t fwd_tc(const FlashFwdParams& p, bool vec, bool big_smem, cudaStream_t stream) {
  return p.dtype == DType::kFloat16 ? fwd_tc<__half>(p, vec, big_smem, stream)
                                    : fwd_tc<__nv_bfloat16>(p, vec, big_smem, stream);
}

}  // namespace cuda
}  // namespace flashattn
