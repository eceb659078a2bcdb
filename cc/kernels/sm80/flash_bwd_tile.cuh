// The element-wise step of the backward, shared by the 16-bit (flash_bwd.cu) and the TF32
// (flash_bwd_tf32.cu) key-tile kernels. Both hold Sᵀ = K Qᵀ and dPdᵀ = V dOᵀ of a warp in mma
// accumulator fragments of the same layout: for one m16 tile whose keys start at kr0 (within the
// key tile j0), element [nt][e] is key kr0 + g + 8 (e / 2), query nt*8 + 2 tq + e % 2 (within the
// query tile i0). No framework headers.
#ifndef TF_FLASHATTN_KERNELS_FLASH_BWD_TILE_CUH_
#define TF_FLASHATTN_KERNELS_FLASH_BWD_TILE_CUH_

#include "cc/kernels/common/flash_cuda_common.cuh"
#include "cc/kernels/common/flash_dropout.cuh"

namespace flashattn {
namespace cuda {

// (The work units of a key-tile CTA, KeyTileUnits, are in common/flash_cuda_common.cuh: the
// Hopper backward, sm90/flash_bwd_sm90.cu, visits the same query tiles.)

// dQacc += acc for the [CM m16 x CC n8] accumulator tile of query rows i0 + qr0 + ... and
// columns nb + ... of dq_rows ([Tq, HD] float32 of one (b, h)); rows past Tq are skipped. One row
// pointer per row and constant offsets per n-tile (immediates in the atomics); float2 atomics
// on sm_90.
template <int CM, int CC, int HD>
__device__ __forceinline__ void dq_accumulate(float* dq_rows, const float (&acc)[CM][CC][4],
                                              int64_t i0, int qr0, int nb, int64_t Tq, int g,
                                              int tq) {
  // 32-bit offsets inside the tile (rows < 2^31 / HD of it); one 64-bit base per call.
  float* tile = dq_rows + i0 * HD + (nb + 2 * tq);
  const int64_t left = Tq - i0;
  const int rows = left < (int64_t(1) << 30) ? static_cast<int>(left) : (1 << 30);
#pragma unroll
  for (int mt = 0; mt < CM; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = qr0 + mt * 16 + g + 8 * r;
      if (i >= rows) continue;
      float* dst = tile + i * HD;
#pragma unroll
      for (int nt = 0; nt < CC; ++nt) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        atomicAdd(reinterpret_cast<float2*>(dst + nt * 8), make_float2(acc[mt][nt][2 * r], acc[mt][nt][2 * r + 1]));
#else
        atomicAdd(dst + nt * 8, acc[mt][nt][2 * r]);
        atomicAdd(dst + nt * 8 + 1, acc[mt][nt][2 * r + 1]);
#endif
      }
    }
}

// dQacc += acc in fragment order (the 16-bit kernels): a query tile's [BQb, HD] block of dQacc
// holds, for chunk ch, n8 tile (mt, nt) and thread t, the 4 accumulator elements at
// ((ch * CM * CC + mt * CC + nt) * NT + t) * 4, so each atomic of a warp covers 512 contiguous
// bytes (the row-major tile takes 8 rows of 32 bytes per atomic). bwd_dq_frag_convert_kernel
// (flash_bwd.cu) reads it back. Rows past Tq land in the padding rows
// of the last tile (dQacc rows are padded to a multiple of kDqRowPad).
constexpr int kDqRowPad = 128;
template <int CM, int CC, int NT>
__device__ __forceinline__ void dq_accumulate_frag(float* chunk, const float (&acc)[CM][CC][4]) {
  float* dst = chunk + threadIdx.x * 4;
#pragma unroll
  for (int mt = 0; mt < CM; ++mt)
#pragma unroll
    for (int nt = 0; nt < CC; ++nt) {
      float* d = dst + (mt * CC + nt) * NT * 4;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      atomicAdd(reinterpret_cast<float4*>(d),
                make_float4(acc[mt][nt][0], acc[mt][nt][1], acc[mt][nt][2], acc[mt][nt][3]));
#else
#pragma unroll
      for (int e = 0; e < 4; ++e) atomicAdd(d + e, acc[mt][nt][e]);
#endif
    }
}

// s <- Pd = P Z and dp <- dS = P (dPd Z - Dsum) softcap', with P = 2^(z - log2e lse) (z the
// base-2 logit) and Z = keep_scale or 0 (dropout: bit nt * 4 + e of kbits, from drop_cols_bits)
// or 1. The warp's queries start at i0
// (a warp that owns queries [qc0, ...) of the CTA's tile passes i0 + qc0, and cL / cDs offset by
// qc0 too); cL / cDs: log2e lse and Dsum of those queries. GEN: the full score function per element (dlogit to dbias when
// write_dbias); otherwise s is the raw product (scale * log2e = sl2 applied here) and only tiles
// not in_range (crossing causal/window/length limits) are masked, by index.
template <typename T, int AN, bool GEN>
__device__ __forceinline__ void bwd_tile_probs(float (&s)[AN][4], float (&dp)[AN][4],
                                               const FlashBwdParams& p, int64_t b, int64_t h,
                                               int64_t i0, int64_t j0, int kr0, const float* cL,
                                               const float* cDs, float sl2, bool in_range,
                                               int64_t qlim, int64_t klim, bool dropout,
                                               uint32_t kbits, bool write_dbias, int g, int tq) {
  const AttnShape& sh = p.shape;
  // Z of element [nt][e]: keep_scale or 0 from kbits (drop_cols_bits), 1 without dropout.
  auto zf = [&](int nt, int e) {
    return !dropout ? 1.f : ((kbits >> (nt * 4 + e)) & 1u) ? p.dropout.keep_scale : 0.f;
  };
  if (!GEN) {
    if (in_range) {
#pragma unroll
      for (int nt = 0; nt < AN; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int ql = nt * 8 + 2 * tq + (e & 1);
          const float pv = fast_exp2(fmaf(s[nt][e], sl2, -cL[ql]));
          if (dropout) {
            const float z = zf(nt, e);
            dp[nt][e] = pv * (dp[nt][e] * z - cDs[ql]);
            s[nt][e] = pv * z;
          } else {
            dp[nt][e] = pv * (dp[nt][e] - cDs[ql]);
            s[nt][e] = pv;
          }
        }
    } else {  // causal/window/length limits cross the tile, or validity masks: mask by index
#pragma unroll
      for (int nt = 0; nt < AN; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int ql = nt * 8 + 2 * tq + c;
          const RowInfo ri = row_info(p.mask, sh, b, i0 + ql, qlim, klim);
          const int64_t lo = ri.ok ? ri.kb - j0 : 0, hi = ri.ok ? ri.ke - j0 : 0;
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int jl = kr0 + g + 8 * r;
            const int e = 2 * r + c;
            const bool vis = jl >= lo && jl < hi && key_visible(p.mask, sh, b, j0 + jl);
            const float pv = vis ? fast_exp2(fmaf(s[nt][e], sl2, -cL[ql])) : 0.f;
            const float z = zf(nt, e);
            dp[nt][e] = pv * (dp[nt][e] * z - cDs[ql]);
            s[nt][e] = pv * z;
          }
        }
    }
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t j = j0 + kr0 + g + 8 * r;  // key
#pragma unroll
      for (int nt = 0; nt < AN; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int ql = nt * 8 + 2 * tq + c;  // query within the tile
          const int64_t i = i0 + ql;
          const int e = 2 * r + c;
          float dcap = 1.f;
          const RowInfo ri = row_info(p.mask, sh, b, i, qlim, klim);
          const float z = score_elem<T>(s[nt][e], p.mask, p.score, sh, b, h, i, j, ri, &dcap);
          const float pv = z == neg_inf() ? 0.f : fast_exp2(z - cL[ql]);
          const float ze = zf(nt, e);
          const float dlogit = pv * (dp[nt][e] * ze - cDs[ql]);
          if (write_dbias && p.dbias && i < sh.Tq && j < sh.Tk)
            p.dbias[((b * sh.H + h) * sh.Tq + i) * sh.Tk + j] = dlogit;
          s[nt][e] = pv * ze;
          dp[nt][e] = dlogit * dcap;
        }
    }
  }
}

// log2e * lse and Dsum of this thread's two rows row0 + g (+8) of head h in the dQ kernels (0
// past Tq). lse_scale: log2e for a natural-log lse, 1 for one already in base 2.
__device__ __forceinline__ void dq_row_stats(const float* lse, float lse_scale, const float* dsum,
                                             const AttnShape& sh, int64_t b, int64_t h,
                                             int64_t row0, int g, float (&lse2r)[2],
                                             float (&dsr)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = row0 + g + 8 * r;
    const int64_t row = (b * sh.H + h) * sh.Tq + i;
    lse2r[r] = i < sh.Tq ? lse[row] * lse_scale : 0.f;
    dsr[r] = i < sh.Tq ? dsum[row] : 0.f;
  }
}

// The same step in the query-row orientation of the deterministic dQ kernels (flash_bwd_dq.cu,
// flash_bwd_tf32.cu): s (S = Q Kᵀ of one m16 tile of rows row0 + g (+8), keys j0 + nt*8 + 2 tq
// (+1)) <- dS, from dp (dPd = dO Vᵀ); lse2r / dsr: log2e lse and Dsum of this thread's two rows.
// The CTA's query tile is [i0, i0 + BQ), the key tile [j0, j0 + NT * 8).
template <typename T, int NT, bool GEN>
__device__ __forceinline__ void dq_tile_dscores(float (&s)[NT][4], const float (&dp)[NT][4],
                                                const FlashBwdParams& p, int64_t b, int64_t h,
                                                int64_t i0, int BQ, int64_t row0, int64_t j0,
                                                const float (&lse2r)[2], const float (&dsr)[2],
                                                float sl2, int64_t qlim, int64_t klim,
                                                bool dropout, int g, int tq) {
  const AttnShape& sh = p.shape;
  if (!GEN) {
    if (tile_in_range(p.mask, i0, BQ, j0, NT * 8, qlim, klim)) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pv = fast_exp2(fmaf(s[nt][e], sl2, -lse2r[e >> 1]));
          s[nt][e] = pv * (dp[nt][e] - dsr[e >> 1]);
        }
    } else {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const RowInfo ri = row_info(p.mask, sh, b, row0 + g + 8 * r, qlim, klim);
        const int64_t lo = ri.ok ? ri.kb - j0 : 0, hi = ri.ok ? ri.ke - j0 : 0;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int jl = nt * 8 + 2 * tq + c, e = 2 * r + c;
            const bool vis = jl >= lo && jl < hi && key_visible(p.mask, sh, b, j0 + jl);
            const float pv = vis ? fast_exp2(fmaf(s[nt][e], sl2, -lse2r[r])) : 0.f;
            s[nt][e] = pv * (dp[nt][e] - dsr[r]);
          }
      }
    }
  } else {
    // Keep bits of this thread's elements, one Philox call per 8 (4 when NT == 2).
    const uint32_t kbits = dropout ? drop_rows_bits<NT>(drop_tile(p.dropout, b, h), row0, j0, g, tq) : 0u;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t i = row0 + g + 8 * r;
      const RowInfo ri = row_info(p.mask, sh, b, i, qlim, klim);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int64_t j = j0 + nt * 8 + 2 * tq + c;
          const int e = 2 * r + c;
          float dcap = 1.f;
          const float z = score_elem<T>(s[nt][e], p.mask, p.score, sh, b, h, i, j, ri, &dcap);
          const float pv = z == neg_inf() ? 0.f : fast_exp2(z - lse2r[r]);
          const float zf = !dropout ? 1.f : ((kbits >> (nt * 4 + e)) & 1u) ? p.dropout.keep_scale : 0.f;
          const float dlogit = pv * (dp[nt][e] * zf - dsr[r]);
          if (p.dbias && i < sh.Tq && j < sh.Tk) p.dbias[((b * sh.H + h) * sh.Tq + i) * sh.Tk + j] = dlogit;
          s[nt][e] = dlogit * dcap;
        }
    }
  }
}

}  // namespace cuda
}  // namespace flashattn

#endif  // TF_FLASHATTN_KERNELS_FLASH_BWD_TILE_CUH_
