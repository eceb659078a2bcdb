// Per-tile steps of the forward kernels shared by the 16-bit (flash_fwd.cu) and the TF32
// (flash_fwd_tf32.cu) kernels. Both hold a warp's scores S and output O in mma accumulator
// fragments of the same layout (m16n8 for bf16/fp16 m16n8k16 and for tf32 m16n8k8): element
// [mt][nt][e] of a warp whose rows start at row0 is row row0 + mt*16 + g + 8*(e/2), column
// nt*8 + 2*tq + e%2 (g = lane / 4, tq = lane % 4). No framework headers.
#ifndef TF_FLASHATTN_KERNELS_FLASH_FWD_TILE_CUH_
#define TF_FLASHATTN_KERNELS_FLASH_FWD_TILE_CUH_

#include "cc/kernels/common/flash_cuda_common.cuh"
#include "cc/kernels/common/flash_dropout.cuh"

namespace flashattn {
namespace cuda {

// Scores of one key tile in place. GEN: s becomes z = log2e * logit by the full score function
// and the result is 1. Otherwise s stays raw (the caller's exp2 applies the returned factor
// scale * log2e) and only tiles not tile_in_range (crossing the causal/window/length limits, or
// every tile under a [B, Tq] / [B, Tk] validity mask) get -inf where the key is outside
// [key_begin(i), key_end(i)) or masked by the validity masks, or the row is past qlim or
// invalid. The CTA's query tile is
// [i0, i0 + BQ); this warp's rows start at row0; the key tile at j0.
template <typename T, int MT, int NT, bool GEN>
__device__ __forceinline__ float fwd_tile_scores(float (&s)[MT][NT][4], const FlashFwdParams& p,
                                                 int64_t b, int64_t h, int64_t i0, int BQ,
                                                 int64_t row0, int64_t j0, int64_t qlim,
                                                 int64_t klim, int g, int tq) {
  const AttnShape& sh = p.shape;
  if (!GEN) {
    if (!tile_in_range(p.mask, i0, BQ, j0, NT * 8, qlim, klim)) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int64_t i = row0 + mt * 16 + g + 8 * r;
          const RowInfo ri = row_info(p.mask, sh, b, i, qlim, klim);
          const int64_t lo = ri.ok ? ri.kb - j0 : 0, hi = ri.ok ? ri.ke - j0 : 0;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int jl = nt * 8 + 2 * tq + c;
              if (jl < lo || jl >= hi || !key_visible(p.mask, sh, b, j0 + jl))
                s[mt][nt][2 * r + c] = neg_inf();
            }
        }
    }
    return p.score.scale * kLog2e;
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t i = row0 + mt * 16 + g + 8 * r;
      const RowInfo ri = row_info(p.mask, sh, b, i, qlim, klim);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int64_t j = j0 + nt * 8 + 2 * tq + c;
          s[mt][nt][2 * r + c] =
              score_elem<T>(s[mt][nt][2 * r + c], p.mask, p.score, sh, b, h, i, j, ri, nullptr);
        }
    }
  return 1.f;
}

// Online softmax (base 2) over one key tile: m' = max(m, rowmax(mul * s)), P = 2^(mul * s - m'),
// ℓ = 2^(m - m') ℓ + rowsum P, O *= 2^(m - m'); s becomes P. The row max is reduced over the 4
// threads of a quad; ℓ stays this thread's partial sum (reduced in the epilogue).
template <int MT, int NT, int ND>
__device__ __forceinline__ void fwd_online_softmax(float (&s)[MT][NT][4], float (&o)[MT][ND][4],
                                                   float (&mrow)[MT][2], float (&lrow)[MT][2],
                                                   float mul) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = neg_inf();
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
      mx = warp_quad_max(mx) * mul;
      const float mnew = fmaxf(mrow[mt][r], mx);
      const float muse = mnew == neg_inf() ? 0.f : mnew;  // row with nothing visible yet
      const float alpha = fast_exp2(mrow[mt][r] - muse);
      mrow[mt][r] = mnew;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float pv = fast_exp2(fmaf(s[mt][nt][2 * r + c], mul, -muse));
          s[mt][nt][2 * r + c] = pv;
          sum += pv;
        }
      lrow[mt][r] = lrow[mt][r] * alpha + sum;
#pragma unroll
      for (int nd = 0; nd < ND; ++nd) {
        o[mt][nd][2 * r] *= alpha;
        o[mt][nd][2 * r + 1] *= alpha;
      }
    }
}

// Dropout on P after the row sum: P_ij *= keep(b, h, i, j) * keep_scale, one Philox call per 8
// elements of the thread (common/flash_dropout.cuh; row0 a multiple of 16, j0 of 32, or of 16
// when NT == 2).
template <int MT, int NT>
__device__ __forceinline__ void fwd_tile_dropout(float (&s)[MT][NT][4], const DropoutParams& dp,
                                                 int64_t b, int64_t h, int64_t row0, int64_t j0,
                                                 int g, int tq) {
  const DropTile d = drop_tile(dp, b, h);  // key from the device seed, once per tile
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    drop_rows_visit<NT>(d, row0 + mt * 16, j0, g, tq, [&](int nt, int e, bool keep) {
      s[mt][nt][e] *= keep ? d.scale : 0.f;
    });
}

// Epilogue: O /= ℓ into o [B, Tq, H, Dv] (rows past Tq skipped), lse = ln2 (m + log2 ℓ); rows
// with ℓ = 0 (nothing visible) give O = 0 and lse = -inf. vec: pairs of elements are stored
// with one aligned store. With `stage` (16-bit T and vec only): the warp's 16 * MT rows
// [16 * MT, ND * 8] (row stride STRIDE elements; shared memory only this warp reads, i.e. its
// own rows of the Q tile) take O first, then go out in 16-byte stores, lanes along a row: whole
// 32-byte sectors, where a quad's fragment stores cover 16 bytes of a row (half a sector).
template <typename T, int MT, int ND, int STRIDE = 0>
__device__ __forceinline__ void fwd_epilogue(const float (&o)[MT][ND][4], const float (&mrow)[MT][2],
                                             const float (&lrow)[MT][2], const FlashFwdParams& p,
                                             int64_t b, int64_t h, int64_t row0, bool vec, int g,
                                             int tq, T* stage = nullptr) {
  static_assert(STRIDE == 0 || sizeof(T) == 2, "staged epilogue: 16-bit types");
  const AttnShape& sh = p.shape;
  T* out = static_cast<T*>(p.o);
  const bool staged = STRIDE > 0 && vec && stage != nullptr;
  if (staged) __syncwarp();  // every lane done reading its Q rows
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float l = warp_quad_sum(lrow[mt][r]);
      const int row = mt * 16 + g + 8 * r;
      const int64_t i = row0 + row;
      const bool any = l > 0.f || l != l;
      const float inv = any ? 1.f / l : 0.f;
      if (staged) {
#pragma unroll
        for (int nd = 0; nd < ND; ++nd)
          Elem<T>::store2(stage + row * STRIDE + nd * 8 + 2 * tq, o[mt][nd][2 * r] * inv,
                          o[mt][nd][2 * r + 1] * inv);
      } else if (i < sh.Tq) {
        T* dst = out + b * sh.o_stride[0] + i * sh.o_stride[1] + h * sh.o_stride[2];
#pragma unroll
        for (int nd = 0; nd < ND; ++nd) {
          const int col = nd * 8 + 2 * tq;
          if (vec) {
            if (col < sh.Dv) Elem<T>::store2(dst + col, o[mt][nd][2 * r] * inv, o[mt][nd][2 * r + 1] * inv);
          } else {
            if (col < sh.Dv) dst[col] = Elem<T>::from_f(o[mt][nd][2 * r] * inv);
            if (col + 1 < sh.Dv) dst[col + 1] = Elem<T>::from_f(o[mt][nd][2 * r + 1] * inv);
          }
        }
      }
      if (tq == 0 && i < sh.Tq)
        p.lse[(b * sh.H + h) * sh.Tq + i] = any ? (mrow[mt][r] + log2f(l)) * kLn2 : neg_inf();
    }
  if (!staged) return;
  __syncwarp();
  constexpr int kChunks = ND;  // 16-byte chunks per row: ND * 8 elements of 2 bytes
  static_assert(16 * MT * kChunks % 32 == 0, "whole passes of the warp");
  const int lane = g * 4 + tq;
#pragma unroll
  for (int it = 0; it < 16 * MT * kChunks / 32; ++it) {
    const int c = it * 32 + lane;
    const int row = c / kChunks, col = (c % kChunks) * 8;
    const int64_t i = row0 + row;
    // vec: Dv % 8 == 0, so a chunk is wholly inside or wholly past Dv.
    if (i < sh.Tq && col < sh.Dv)
      *reinterpret_cast<uint4*>(out + b * sh.o_stride[0] + i * sh.o_stride[1] + h * sh.o_stride[2] + col) =
          *reinterpret_cast<const uint4*>(stage + row * STRIDE + col);
  }
}

}  // namespace cuda
}  // namespace flashattn

#endif  // TF_FLASHATTN_KERNELS_FLASH_FWD_TILE_CUH_
