// Dropout draws for the tensor-core tiles: the mma.sync tiles of sm80/ (16-bit forward and
// backward, TF32) and the sm90/ forward and backward: a wgmma m64nN accumulator gives each
// warp's 16 rows the m16n8 layout below (one 8-column n-tile after the other), so they share
// these helpers (the Hopper backward: drop_cols_bits<1, 8>, one 16-key m-tile per warp).
// The rule is flash_params.h's: element (row, col) is the 16-bit draw k = 4 ((row / 8) % 2) + (col / 8) % 4
// of the Philox call with counter (8 (col / 32) + col % 8, 8 (row / 16) + row % 8, h, b), kept
// when draw >= t16. One call covers rows {r, r + 8} x columns {c, c + 8, c + 16, c + 24}: in an
// m16n8 accumulator fragment (element e of n-tile nt: fragment row g + 8 (e / 2), fragment
// column nt * 8 + 2 tq + e % 2; g = lane / 4, tq = lane % 4) those 8 elements belong to one
// thread in both orientations the kernels use:
//   rows x keys (forward, dQ kernels): rows g, g + 8 of an m-tile, keys 2 tq + c of 4 n-tiles;
//   keys x queries (key-tile backward): keys g, g + 8 of 2 m-tiles, queries 2 tq + c of 2 n-tiles,
// so each thread draws one call per 8 of its elements, with no exchange between lanes (where a
// thread holds only part of a call's block, e.g. 16-key tiles, it draws the call for 4).
// No framework headers.
#ifndef TF_FLASHATTN_KERNELS_COMMON_FLASH_DROPOUT_CUH_
#define TF_FLASHATTN_KERNELS_COMMON_FLASH_DROPOUT_CUH_

#include "cc/kernels/common/flash_cuda_common.cuh"

namespace flashattn {
namespace cuda {

// A tile's dropout state: the Philox key (from the device seed), thr = t16 << 16 (draw k is kept
// when word k / 2 >= thr for odd k, when (word k / 2) << 16 >= thr for even k), the keep scale.
struct DropTile {
  uint32_t k0, k1, thr, h, b;
  float scale;
};

__device__ __forceinline__ DropTile drop_tile(const DropoutParams& dp, int64_t b, int64_t h) {
  uint32_t key[2];
  dropout_key(dp, key);
  return DropTile{key[0], key[1], dp.threshold << 16, static_cast<uint32_t>(h),
                  static_cast<uint32_t>(b), dp.keep_scale};
}

// kU32: philox_round_u32 (the same words; flash_params.h says where each form is faster).
template <bool kU32 = false>
__device__ __forceinline__ void drop_call(const DropTile& d, uint32_t c0, uint32_t c1,
                                          uint32_t (&w)[4]) {
  w[0] = c0;
  w[1] = c1;
  w[2] = d.h;
  w[3] = d.b;
  philox4x32_10<kU32>(w, d.k0, d.k1);
}

// Draw `k` of word w passes (hi: the high half, else the low half).
__device__ __forceinline__ bool drop_pass(uint32_t w, bool hi, uint32_t thr) {
  return (hi ? w : w << 16) >= thr;
}

// Rows x keys: f(nt, e, keep) for the 4 NT elements of one m-tile whose rows start at rm0
// (a multiple of 16), keys at j0 + nt * 8 + 2 tq + e % 2. NT % 4 == 0: j0 a multiple of 32, one
// call per 8 elements; NT == 2: j0 a multiple of 16, one call per 4 elements. kU32: drop_call's.
template <int NT, bool kU32 = false, typename F>
__device__ __forceinline__ void drop_rows_visit(const DropTile& d, int64_t rm0, int64_t j0, int g,
                                                int tq, F&& f) {
  static_assert(NT % 4 == 0 || NT == 2, "n-tiles per key tile");
  const uint32_t c1 = static_cast<uint32_t>(((rm0 >> 4) << 3) | g);
  if (NT % 4 == 0) {
#pragma unroll
    for (int n4 = 0; n4 < NT / 4; ++n4)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        uint32_t w[4];
        drop_call<kU32>(d, static_cast<uint32_t>((((j0 >> 5) + n4) << 3) | (2 * tq + c)), c1, w);
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int n = 0; n < 4; ++n)  // draw k = 4 r + n: word 2 r + n / 2, half n % 2
            f(4 * n4 + n, 2 * r + c, drop_pass(w[2 * r + n / 2], n & 1, d.thr));
      }
  } else {
    const bool upper = (j0 >> 4) & 1;  // the n-tiles are draws 2, 3 of their 32-key block
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      uint32_t w[4];
      drop_call<kU32>(d, static_cast<uint32_t>(((j0 >> 5) << 3) | (2 * tq + c)), c1, w);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t wr = upper ? w[2 * r + 1] : w[2 * r];
#pragma unroll
        for (int n = 0; n < 2; ++n) f(n, 2 * r + c, drop_pass(wr, n & 1, d.thr));
      }
    }
  }
}

// Keys x queries: f(mt, nt, e, keep) for the [AM][AN][4] elements of a warp whose keys start at
// jm0 (m-tile mt: keys jm0 + mt * 16 + g + 8 (e / 2); a multiple of 32 when AM is even, of 16
// otherwise) and queries at qn0 (n-tile nt: queries qn0 + nt * 8 + 2 tq + e % 2; a multiple of 16,
// AN even). AM even: one call per 8 elements; AM odd: one per 4.
template <int AM, int AN, typename F>
__device__ __forceinline__ void drop_cols_visit(const DropTile& d, int64_t jm0, int64_t qn0, int g,
                                                int tq, F&& f) {
  static_assert(AN % 2 == 0, "n-tiles in pairs");
#pragma unroll
  for (int p = 0; p < AN / 2; ++p)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const uint32_t c1 = static_cast<uint32_t>((((qn0 >> 4) + p) << 3) | (2 * tq + c));
      if (AM % 2 == 0) {
#pragma unroll
        for (int mp = 0; mp < AM / 2; ++mp) {
          uint32_t w[4];
          drop_call(d, static_cast<uint32_t>((((jm0 >> 5) + mp) << 3) | g), c1, w);
#pragma unroll
          for (int u = 0; u < 2; ++u)
#pragma unroll
            for (int mm = 0; mm < 2; ++mm)
#pragma unroll
              for (int r = 0; r < 2; ++r)  // draw k = 4 u + 2 mm + r: word 2 u + mm, half r
                f(2 * mp + mm, 2 * p + u, 2 * r + c, drop_pass(w[2 * u + mm], r, d.thr));
        }
      } else {
#pragma unroll
        for (int mt = 0; mt < AM; ++mt) {
          const int64_t jm = jm0 + mt * 16;
          const bool upper = (jm >> 4) & 1;
          uint32_t w[4];
          drop_call(d, static_cast<uint32_t>(((jm >> 5) << 3) | g), c1, w);
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const uint32_t wu = upper ? w[2 * u + 1] : w[2 * u];
#pragma unroll
            for (int r = 0; r < 2; ++r) f(mt, 2 * p + u, 2 * r + c, drop_pass(wu, r, d.thr));
          }
        }
      }
    }
}

// Keep bits of one m-tile in the rows x keys orientation: bit nt * 4 + e. kU32: drop_call's.
template <int NT, bool kU32 = false>
__device__ __forceinline__ uint32_t drop_rows_bits(const DropTile& d, int64_t rm0, int64_t j0,
                                                   int g, int tq) {
  static_assert(NT * 4 <= 32, "one word of bits");
  uint32_t bits = 0;
  drop_rows_visit<NT, kU32>(d, rm0, j0, g, tq, [&](int nt, int e, bool keep) {
    bits |= static_cast<uint32_t>(keep) << (nt * 4 + e);
  });
  return bits;
}

// Keep bits of a warp's m-tiles in the keys x queries orientation: bit nt * 4 + e of bits[mt].
template <int AM, int AN>
__device__ __forceinline__ void drop_cols_bits(uint32_t (&bits)[AM], const DropTile& d,
                                               int64_t jm0, int64_t qn0, int g, int tq) {
  static_assert(AN * 4 <= 32, "one word of bits per m-tile");
#pragma unroll
  for (int mt = 0; mt < AM; ++mt) bits[mt] = 0;
  drop_cols_visit<AM, AN>(d, jm0, qn0, g, tq, [&](int mt, int nt, int e, bool keep) {
    bits[mt] |= static_cast<uint32_t>(keep) << (nt * 4 + e);
  });
}

// The Hopper backwards' keep bits of one unit for this thread's S^T elements (keys x queries): drop_cols_bits<1, AN>
// of the unit's (head h, batch b) Philox stream with the CTA's key (dropout_key), keys from jm0, queries from qn0
// (the TF32 backwards draw them before waiting for the unit's tiles; sm90/flash_bwd_sm90.cu there or, at D = 128,
// under the unit's S^T and dP^T products: its FA_SM90_BWD_DROP128).
template <int AN>
__device__ __forceinline__ uint32_t unit_keep_bits(const uint32_t (&drop_key)[2], const DropoutParams& d, int64_t h,
                                                   int b, int64_t jm0, int64_t qn0, int g, int t) {
  uint32_t bits[1];
  const DropTile dt{drop_key[0], drop_key[1], d.threshold << 16, static_cast<uint32_t>(h), static_cast<uint32_t>(b),
                    d.keep_scale};
  drop_cols_bits<1, AN>(bits, dt, jm0, qn0, g, t);
  return bits[0];
}

// unit_keep_bits<AN> split between the two warps of a pair (FA_SM90_BWD_DROP_PAIR in sm90/flash_bwd_sm90.cu): warps
// 2 k and 2 k + 1 hold the m-tiles mine = 0 / 1 (keys jp0 + 16 mine + g, + 8) of one 32-key block from jp0 (a multiple
// of 32), and each Philox call of drop_cols_visit<2, AN> covers both. This thread draws the calls of column parity
// c = mine only (AN / 2 calls instead of AN): it returns its own bits of those calls (bit nt * 4 + e, e % 2 == mine)
// and sets `other` to its partner's bits of the same calls, which the partner lacks. own | (the partner's `other`)
// is unit_keep_bits<AN>(..., jp0 + 16 mine, ...) bit for bit.
template <int AN>
__device__ __forceinline__ uint32_t unit_keep_bits_pair(const uint32_t (&drop_key)[2], const DropoutParams& d,
                                                        int64_t h, int b, int64_t jp0, int64_t qn0, int g, int t,
                                                        int mine, uint32_t& other) {
  static_assert(AN % 2 == 0 && AN * 4 <= 32, "n-tiles in pairs, one word of bits");
  const DropTile dt{drop_key[0], drop_key[1], d.threshold << 16, static_cast<uint32_t>(h), static_cast<uint32_t>(b),
                    d.keep_scale};
  const uint32_t c0 = static_cast<uint32_t>(((jp0 >> 5) << 3) | g);
  uint32_t bits[2] = {0u, 0u};  // m-tile mm's bits at e = 2 r (shifted by mine below)
#pragma unroll
  for (int p = 0; p < AN / 2; ++p) {
    const uint32_t c1 = static_cast<uint32_t>((((qn0 >> 4) + p) << 3) | (2 * t + mine));
    uint32_t w[4];
    drop_call(dt, c0, c1, w);
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int mm = 0; mm < 2; ++mm)
#pragma unroll
        for (int r = 0; r < 2; ++r)  // draw k = 4 u + 2 mm + r: word 2 u + mm, half r (drop_cols_visit's)
          bits[mm] |= static_cast<uint32_t>(drop_pass(w[2 * u + mm], r, dt.thr)) << ((2 * p + u) * 4 + 2 * r);
  }
  other = (mine ? bits[0] : bits[1]) << mine;
  return (mine ? bits[1] : bits[0]) << mine;
}

}  // namespace cuda
}  // namespace flashattn

#endif  // TF_FLASHATTN_KERNELS_COMMON_FLASH_DROPOUT_CUH_
