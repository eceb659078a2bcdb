// CPU FlashAttention forward and backward.
//
// Forward, per work unit (b, h, block of BQ query rows), following the seed algorithm:
//   for each block of BK keys the row can see:
//     S = scale * Q Kᵀ (then soft-cap, + bias, masks -> -inf)
//     m_new = max(m, rowmax S);  P = exp(S - m_new);  ℓ = ℓ·exp(m - m_new) + rowsum P
//     O = O·exp(m - m_new) + dropout(P) V
//   O /= ℓ;  lse = m + log ℓ.
// Backward, by recomputation from lse (P = exp(S - lse)) with D = rowsum(dO ∘ O):
//   pass 1, per (b, kv head, key block): dV = Σ Pdᵀ dO, dK = scale Σ dSᵀ Q over the query heads
//           of the group and the query blocks that see the keys (each unit owns its dK/dV);
//   pass 2, per (b, h, query block):     dQ = scale Σ dS K (each unit owns its dQ rows).
// with dP = dropout(dO Vᵀ), dS = P ∘ (dP - D) (times the soft-cap derivative).
// Two passes recompute S twice but need no atomics and are deterministic.
// All accumulation is in float32 (float64 for float64 inputs).
#include "cc/kernels/cpu/flash_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <limits>
#include <thread>
#include <type_traits>
#include <utility>

namespace flashattn {
namespace {

constexpr int64_t kBlockQ = 128;  // query rows per tile
constexpr int64_t kBlockK = 64;  // keys per tile (compile-time: the inner loops vectorize)
constexpr int64_t kKeyChunk = 4;  // key blocks per sweep over the queries in the backward

// ---- storage types ----------------------------------------------------------------------
struct BF16 {
  uint16_t bits;
};
using F16 = _Float16;

template <typename Acc> inline Acc load(const float* p) { return static_cast<Acc>(*p); }
template <typename Acc> inline Acc load(const double* p) { return static_cast<Acc>(*p); }
template <typename Acc> inline Acc load(const F16* p) { return static_cast<Acc>(static_cast<float>(*p)); }
template <typename Acc> inline Acc load(const BF16* p) {
  const uint32_t u = static_cast<uint32_t>(p->bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return static_cast<Acc>(f);
}

template <typename Acc> inline void store(float* p, Acc x) { *p = static_cast<float>(x); }
template <typename Acc> inline void store(double* p, Acc x) { *p = static_cast<double>(x); }
template <typename Acc> inline void store(F16* p, Acc x) { *p = static_cast<F16>(static_cast<float>(x)); }
template <typename Acc> inline void store(BF16* p, Acc x) {
  const float f = static_cast<float>(x);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays NaN
    p->bits = static_cast<uint16_t>((u >> 16) | 0x40u);
    return;
  }
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  p->bits = static_cast<uint16_t>(u >> 16);
}

// NaN-propagating max: a NaN score makes the row NaN, never silently ignored.
template <typename Acc>
inline Acc nan_max(Acc a, Acc b) { return (b > a || b != b) ? b : a; }

// ---- scratch buffers -------------------------------------------------------------------
// n elements from the scratch pool (flash_cpu.h: cpu_scratch_acquire, flash_cpu_scratch.cc), zero-filled as a
// std::vector's unless kUninit (for buffers every element of which is written before it is read).
// Each call's buffers are blocks its previous calls used, so no call page-faults them in again.
struct Uninit {};
constexpr Uninit kUninit{};

template <typename Acc>
class Scratch {
 public:
  Scratch() = default;
  Scratch(int64_t n, Uninit) : n_(n) {
    if (n_ > 0) p_ = static_cast<Acc*>(cpu_scratch_acquire(static_cast<size_t>(n_) * sizeof(Acc), &bytes_));
  }
  explicit Scratch(int64_t n, Acc fill = Acc(0)) : Scratch(n, kUninit) { std::fill(begin(), end(), fill); }
  Scratch(Scratch&& o) noexcept : p_(o.p_), n_(o.n_), bytes_(o.bytes_) { o.p_ = nullptr; o.n_ = 0; }
  Scratch& operator=(Scratch&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    if (p_) cpu_scratch_release(p_, bytes_);
  }
  Acc* data() { return p_; }
  const Acc* data() const { return p_; }
  Acc* begin() { return p_; }
  Acc* end() { return p_ + n_; }
  int64_t size() const { return n_; }
  Acc& operator[](int64_t i) { return p_[i]; }
  const Acc& operator[](int64_t i) const { return p_[i]; }

 private:
  Acc* p_ = nullptr;
  int64_t n_ = 0;
  size_t bytes_ = 0;
};

// ---- tile matrix products --------------------------------------------------------------
// One register-blocked product serves every tile product of both directions:
//   C[r][e] (+)= Σ_d A[r][d] · B[d][e]    A: [rows, kdim] at a[r * ars + d * acs] (so Aᵀ is
//   free: swap the strides), B: [kdim, n] (ldb), C: [rows, n] (ldc)
// float32 uses GCC vector types of this build's width (16 lanes with AVX-512, 8 with AVX2);
// float64 (gradient checks only) uses plain loops.
#if defined(__AVX512F__)
constexpr int kLanes = 16;
constexpr int kRowBlock = 4;  // 4 rows x 4 vectors = 16 of the 32 zmm registers
#else
constexpr int kLanes = 8;
constexpr int kRowBlock = 2;  // 2 rows x 4 vectors = 8 of the 16 ymm registers
#endif
constexpr int kVecBlock = 4;
typedef float VecF __attribute__((vector_size(kLanes * sizeof(float))));

inline VecF load_vec(const float* p) {
  VecF v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store_vec(float* p, VecF v) { std::memcpy(p, &v, sizeof(v)); }

template <int RB, int NV>
inline void gemm_micro(const float* __restrict a, int64_t ars, int64_t acs, const float* __restrict b,
                       int64_t ldb, float* __restrict c, int64_t ldc, int64_t kdim,
                       bool accumulate) {
  VecF acc[RB][NV];
  for (int i = 0; i < RB; ++i)
    for (int j = 0; j < NV; ++j)
      acc[i][j] = accumulate ? load_vec(c + i * ldc + j * kLanes) : VecF{};
  for (int64_t d = 0; d < kdim; ++d) {
    VecF bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = load_vec(b + d * ldb + j * kLanes);
    for (int i = 0; i < RB; ++i) {
      const float x = a[i * ars + d * acs];
      for (int j = 0; j < NV; ++j) acc[i][j] += x * bv[j];
    }
  }
  for (int i = 0; i < RB; ++i)
    for (int j = 0; j < NV; ++j) store_vec(c + i * ldc + j * kLanes, acc[i][j]);
}

template <int RB>
inline void gemm_rows(const float* a, int64_t ars, int64_t acs, const float* b, int64_t ldb,
                      float* c, int64_t ldc, int64_t kdim, int64_t nvec, bool accumulate) {
  for (int64_t j = 0; j < nvec; j += kVecBlock) {
    const int64_t o = j * kLanes;
    switch (std::min<int64_t>(kVecBlock, nvec - j)) {
      case 4: gemm_micro<RB, 4>(a, ars, acs, b + o, ldb, c + o, ldc, kdim, accumulate); break;
      case 3: gemm_micro<RB, 3>(a, ars, acs, b + o, ldb, c + o, ldc, kdim, accumulate); break;
      case 2: gemm_micro<RB, 2>(a, ars, acs, b + o, ldb, c + o, ldc, kdim, accumulate); break;
      default: gemm_micro<RB, 1>(a, ars, acs, b + o, ldb, c + o, ldc, kdim, accumulate); break;
    }
  }
}

void gemm(const float* a, int64_t ars, int64_t acs, const float* b, int64_t ldb, float* c,
          int64_t ldc, int64_t rows, int64_t kdim, int64_t n, bool accumulate) {
  const int64_t nvec = n / kLanes;
  int64_t r = 0;
  for (; r + kRowBlock <= rows; r += kRowBlock)
    gemm_rows<kRowBlock>(a + r * ars, ars, acs, b, ldb, c + r * ldc, ldc, kdim, nvec, accumulate);
  for (; r < rows; ++r)
    gemm_rows<1>(a + r * ars, ars, acs, b, ldb, c + r * ldc, ldc, kdim, nvec, accumulate);
  for (int64_t e = nvec * kLanes; e < n; ++e) {  // columns past the last full vector
    for (int64_t i = 0; i < rows; ++i) {
      float acc = accumulate ? c[i * ldc + e] : 0.f;
      for (int64_t d = 0; d < kdim; ++d) acc += a[i * ars + d * acs] * b[d * ldb + e];
      c[i * ldc + e] = acc;
    }
  }
}

void gemm(const double* a, int64_t ars, int64_t acs, const double* b, int64_t ldb, double* c,
          int64_t ldc, int64_t rows, int64_t kdim, int64_t n, bool accumulate) {
  for (int64_t i = 0; i < rows; ++i) {
    double* ci = c + i * ldc;
    if (!accumulate) std::fill(ci, ci + n, 0.0);
    for (int64_t d = 0; d < kdim; ++d) {
      const double x = a[i * ars + d * acs];
      for (int64_t e = 0; e < n; ++e) ci[e] += x * b[d * ldb + e];
    }
  }
}

// C[r][c] = Σ_d A[r][d] · Bt[d][c]     A: [rows, K], Bt: [K, kBlockK], C: [rows, kBlockK]
template <typename Acc>
void tile_a_bt(const Acc* a, const Acc* bt, Acc* c, int64_t rows, int64_t kdim) {
  gemm(a, kdim, 1, bt, kBlockK, c, kBlockK, rows, kdim, kBlockK, false);
}

// Out[r][e] += Σ_c P[r][c] · B[c][e]   P: [rows, kBlockK], B: [cols, n], Out: [rows, n]
template <typename Acc>
void tile_p_b(const Acc* p, const Acc* b, Acc* out, int64_t rows, int64_t cols, int64_t n) {
  gemm(p, kBlockK, 1, b, n, out, n, rows, cols, n, true);
}

// Out[c][e] += Σ_r P[r][c] · A[r][e]   P: [rows, kBlockK], A: [rows, n], Out: [cols, n]
template <typename Acc>
void tile_pt_a(const Acc* p, const Acc* a, Acc* out, int64_t rows, int64_t cols, int64_t n) {
  gemm(p, 1, kBlockK, a, n, out, n, cols, rows, n, true);  // Pᵀ by strides
}

// e^r for r in [-ln2/2, ln2/2]: degree-7 Taylor, on a float or on every lane of a vector (the
// same operations, so exp_sub and exp_vec agree bit for bit).
template <typename T>
inline T exp_taylor7(T r) {
  T p = T{} + 1.f / 5040.f;
  p = p * r + 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  return p;
}

// x[c] = exp(x[c] - sub) for c < n. float32: a branch-free polynomial the compiler vectorizes
// (Cody-Waite reduction, degree-7 Taylor on [-ln2/2, ln2/2], ~1 ulp); exp(-inf) = 0, NaN stays.
inline void exp_sub(float* x, int64_t n, float sub) {
  for (int64_t c = 0; c < n; ++c) {
    const float v = x[c] - sub;
    const float t = std::min(std::max(v, -87.0f), 88.0f);
    const float k = (t * 1.44269504088896341f + 12582912.f) - 12582912.f;  // round(t / ln2)
    const float r = (t - k * 0.693145751953125f) - k * 1.42860682030941723212e-6f;
    const float p = exp_taylor7(r);
    const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, 4);
    float e = p * scale;
    e = v < -87.0f ? 0.f : e;
    e = v > 88.0f ? std::numeric_limits<float>::infinity() : e;
    x[c] = v != v ? v : e;
  }
}

inline void exp_sub(double* x, int64_t n, double sub) {
  for (int64_t c = 0; c < n; ++c) x[c] = std::exp(x[c] - sub);
}

// Row reductions over n (a multiple of kLanes) elements, lane-parallel for float32.
typedef int32_t VecI __attribute__((vector_size(kLanes * sizeof(int32_t))));
inline float row_max(const float* x, int64_t n) {  // NaN if any element is NaN
  VecF m = load_vec(x);
  VecI nan = m != m;
  for (int64_t c = kLanes; c < n; c += kLanes) {
    const VecF v = load_vec(x + c);
    m = v > m ? v : m;
    nan |= v != v;
  }
  float out = m[0];
  for (int i = 0; i < kLanes; ++i) {
    if (nan[i]) return std::numeric_limits<float>::quiet_NaN();
    out = std::max(out, m[i]);
  }
  return out;
}
inline float row_sum(const float* x, int64_t n) {
  VecF acc = load_vec(x);
  for (int64_t c = kLanes; c < n; c += kLanes) acc += load_vec(x + c);
  float out = 0.f;
  for (int i = 0; i < kLanes; ++i) out += acc[i];
  return out;
}
inline double row_max(const double* x, int64_t n) {
  double m = x[0];
  for (int64_t c = 1; c < n; ++c) m = (x[c] > m || x[c] != x[c]) ? x[c] : m;
  return m;
}
inline double row_sum(const double* x, int64_t n) {
  double acc = 0;
  for (int64_t c = 0; c < n; ++c) acc += x[c];
  return acc;
}

// z[c] = keep * keep_scale for columns j0 .. j0+n-1 of one row (any j0): a Philox call gives
// this row's draws of 4 columns {c, c + 8, c + 16, c + 24} of a 32-column block (the other 4
// draws are row ± 8's; flash_params.h).
template <typename Acc>
void dropout_scales(const DropoutParams& dp, int64_t b, int64_t h, int64_t row, int64_t j0,
                    int64_t n, Acc* z) {
  const Acc ks = static_cast<Acc>(dp.keep_scale);
  uint32_t key[2];
  dropout_key(dp, key);
  const uint32_t c1 = dropout_ctr_row(row);
  const int kr = static_cast<int>((row >> 3) & 1) * 4;
  const int64_t end = j0 + n;
  for (int64_t blk = j0 & ~int64_t(31); blk < end; blk += 32)
    for (int64_t c = 0; c < 8; ++c) {
      if (blk + c + 24 < j0 || blk + c >= end) continue;  // none of its 4 columns in range
      uint32_t w[4];
      dropout_call(key, dropout_ctr_col(blk + c), c1, b, h, w);
      for (int q = 0; q < 4; ++q) {
        const int64_t col = blk + c + 8 * q;
        if (col >= j0 && col < end) z[col - j0] = dropout_draw(w, kr + q) >= dp.threshold ? ks : Acc(0);
      }
    }
}

// Loads rows [t0, t0+rows) of head `h` of x ([B, T, heads, n] with strides) as Acc [rows, n].
template <typename T, typename Acc>
void load_rows(const T* x, const int64_t stride[3], int64_t b, int64_t h, int64_t t0,
               int64_t rows, int64_t n, Acc* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* src = x + b * stride[0] + (t0 + r) * stride[1] + h * stride[2];
    for (int64_t e = 0; e < n; ++e) out[r * n + e] = load<Acc>(src + e);
  }
}

// Same, transposed into [n, kBlockK], zero-filled past `rows`.
template <typename T, typename Acc>
void load_rows_t(const T* x, const int64_t stride[3], int64_t b, int64_t h, int64_t t0,
                 int64_t rows, int64_t n, Acc* out) {
  std::fill(out, out + n * kBlockK, Acc(0));
  for (int64_t r = 0; r < rows; ++r) {
    const T* src = x + b * stride[0] + (t0 + r) * stride[1] + h * stride[2];
    for (int64_t e = 0; e < n; ++e) out[e * kBlockK + r] = load<Acc>(src + e);
  }
}

// A tensor [B, T, heads, n] converted once to Acc and cut into tiles of `block` rows:
// [B, heads, ceil(T / block), tile], a tile being [block, n] (or [n, block] when transposed),
// zero past T. Converting (and transposing K) once, instead of per tile pair, keeps the tile
// loops to products alone; it costs one O(N) copy.
template <typename Acc>
struct Packed {
  Scratch<Acc> data;
  int64_t heads = 0, nblocks = 0, tile = 0;
  const Acc* at(int64_t b, int64_t h, int64_t blk) const {
    return data.data() + ((b * heads + h) * nblocks + blk) * tile;
  }
};

template <typename Acc, typename T>
Packed<Acc> pack(const T* x, const int64_t stride[3], int64_t batch, int64_t len, int64_t heads,
                 int64_t n, int64_t block, bool transposed, const ParallelFor& parallel_for) {
  Packed<Acc> pk;
  pk.heads = heads;
  pk.nblocks = (len + block - 1) / block;
  pk.tile = block * n;
  pk.data = Scratch<Acc>(batch * heads * pk.nblocks * pk.tile, kUninit);  // every tile written below
  parallel_for(batch * heads * pk.nblocks, pk.tile * 4, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t blk = u % pk.nblocks, h = (u / pk.nblocks) % heads, b = u / (pk.nblocks * heads);
      const int64_t t0 = blk * block, rows = std::min(block, len - t0);
      Acc* dst = pk.data.data() + u * pk.tile;
      if (transposed) {
        load_rows_t(x, stride, b, h, t0, rows, n, dst);
      } else {
        std::fill(dst, dst + pk.tile, Acc(0));
        load_rows(x, stride, b, h, t0, rows, n, dst);
      }
    }
  });
  return pk;
}

// ---- what a (query block, key block) tile sees ------------------------------------------
struct RowRange {
  int64_t begin, end;  // keys [begin, end) a block of rows may see (union over its rows)
};

// Per-batch limits from the lengths.
inline int64_t q_limit(const MaskParams& m, const AttnShape& s, int64_t b) {
  return m.q_lengths ? std::min<int64_t>(std::max<int32_t>(m.q_lengths[b], 0), s.Tq) : s.Tq;
}
inline int64_t k_limit(const MaskParams& m, const AttnShape& s, int64_t b) {
  return m.k_lengths ? std::min<int64_t>(std::max<int32_t>(m.k_lengths[b], 0), s.Tk) : s.Tk;
}

// Keys [begin, end) that rows [i0, i1) can see; key_begin/key_end are monotone in the row.
inline RowRange block_keys(const MaskParams& m, int64_t i0, int64_t i1, int64_t klim) {
  RowRange r{m.key_begin(i0), std::min(m.key_end(i1 - 1, klim), klim)};
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

// Computes the scores of a tile and, for the backward, their soft-cap derivative.
//   s: [rows, kBlockK] holds Q Kᵀ on entry; on exit the final logits (-inf where masked).
//   dcap (optional): [rows, kBlockK] 1 - tanh² of the soft-cap (1 without soft-cap).
template <typename T, typename Acc>
void finish_scores(const MaskParams& m, const ScoreParams& sp, int64_t b, int64_t h,
                   int64_t tq, int64_t tk, int64_t i0, int64_t rows, int64_t j0,
                   int64_t cols, int64_t qlim, int64_t klim, Acc* s, Acc* dcap) {
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  const Acc scale = static_cast<Acc>(sp.scale);
  const Acc cap = static_cast<Acc>(sp.softcap);
  const T* bias = static_cast<const T*>(sp.bias);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    Acc* sr = s + r * kBlockK;
    Acc* dr = dcap ? dcap + r * kBlockK : nullptr;
    const bool row_ok = i < qlim && (!m.q_valid || m.q_valid[b * tq + i]);
    // Columns [lo, hi) of this tile pass the causal/window/length limits (a contiguous range).
    const int64_t lo = std::min(cols, std::max<int64_t>(0, m.key_begin(i) - j0));
    const int64_t hi = row_ok ? std::max(lo, std::min(cols, std::min(m.key_end(i, klim), klim) - j0)) : lo;
    for (int64_t c = 0; c < kBlockK; ++c) sr[c] *= scale;
    if (cap != Acc(0)) {
      for (int64_t c = lo; c < hi; ++c) {
        const Acc t = std::tanh(sr[c] / cap);
        sr[c] = cap * t;
        if (dr) dr[c] = Acc(1) - t * t;
      }
    }
    if (bias) {
      const T* brow = bias + b * sp.bias_stride[0] + h * sp.bias_stride[1] + i * sp.bias_stride[2];
      for (int64_t c = lo; c < hi; ++c) sr[c] += load<Acc>(brow + (j0 + c) * sp.bias_stride[3]);
    }
    for (int64_t c = 0; c < lo; ++c) sr[c] = neg_inf;
    for (int64_t c = hi; c < kBlockK; ++c) sr[c] = neg_inf;
    if (m.k_valid) {
      const bool* kv = m.k_valid + b * tk + j0;
      for (int64_t c = lo; c < hi; ++c) sr[c] = kv[c] ? sr[c] : neg_inf;
    }
    if (m.mask) {
      const bool* mrow = m.mask + b * m.mask_stride[0] + h * m.mask_stride[1] + i * m.mask_stride[2];
      for (int64_t c = lo; c < hi; ++c)
        sr[c] = mrow[(j0 + c) * m.mask_stride[3]] ? sr[c] : neg_inf;
    }
  }
}

// ---- forward ------------------------------------------------------------------------------
template <typename T, typename Acc>
void fwd_impl(const FlashFwdParams& p, const ParallelFor& parallel_for) {
  const AttnShape& sh = p.shape;
  const int64_t nqb = (sh.Tq + kBlockQ - 1) / kBlockQ;
  const int64_t units = sh.B * sh.H * nqb;
  if (units == 0) return;
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  T* o = static_cast<T*>(p.o);
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  const int64_t cost = kBlockQ * sh.Tk * (sh.D + sh.Dv) * 2 + kBlockQ * sh.Tk * 20;
  const Packed<Acc> kt_all = pack<Acc>(k, sh.k_stride, sh.B, sh.Tk, sh.Hkv, sh.D, kBlockK, true,
                                       parallel_for);   // Kᵀ tiles [D, kBlockK]
  const Packed<Acc> v_all = pack<Acc>(v, sh.v_stride, sh.B, sh.Tk, sh.Hkv, sh.Dv, kBlockK, false,
                                      parallel_for);    // V tiles [kBlockK, Dv]

  parallel_for(units, cost, [&](int64_t begin, int64_t end) {
    Scratch<Acc> qt(kBlockQ * sh.D);
    Scratch<Acc> s(kBlockQ * kBlockK);
    Scratch<Acc> acc(kBlockQ * sh.Dv, kUninit), m(kBlockQ, kUninit), l(kBlockQ, kUninit);  // set per unit
    Scratch<Acc> z(kBlockK);
    for (int64_t u = begin; u < end; ++u) {
      const int64_t qb = u % nqb, h = (u / nqb) % sh.H, b = u / (nqb * sh.H);
      const int64_t hk = h / sh.group();
      const int64_t i0 = qb * kBlockQ, rows = std::min(kBlockQ, sh.Tq - i0);
      const int64_t qlim = q_limit(p.mask, sh, b), klim = k_limit(p.mask, sh, b);
      std::fill(acc.begin(), acc.end(), Acc(0));
      std::fill(m.begin(), m.end(), neg_inf);
      std::fill(l.begin(), l.end(), Acc(0));
      const RowRange keys = i0 < qlim ? block_keys(p.mask, i0, i0 + rows, klim) : RowRange{0, 0};
      if (keys.end > keys.begin) load_rows(q, sh.q_stride, b, h, i0, rows, sh.D, qt.data());
      for (int64_t j0 = keys.begin - keys.begin % kBlockK; j0 < keys.end; j0 += kBlockK) {
        const int64_t cols = std::min(kBlockK, sh.Tk - j0);
        const Acc* kt = kt_all.at(b, hk, j0 / kBlockK);
        const Acc* vt = v_all.at(b, hk, j0 / kBlockK);
        tile_a_bt(qt.data(), kt, s.data(), rows, sh.D);  // S = Q Kᵀ
        finish_scores<T, Acc>(p.mask, p.score, b, h, sh.Tq, sh.Tk, i0, rows, j0, cols, qlim,
                              klim, s.data(), nullptr);
        for (int64_t r = 0; r < rows; ++r) {
          Acc* sr = s.data() + r * kBlockK;
          Acc mx = m[r];
          mx = nan_max(mx, row_max(sr, kBlockK));  // padding columns hold -inf
          if (mx == neg_inf) {  // nothing visible yet in this row
            std::fill(sr, sr + kBlockK, Acc(0));
            continue;
          }
          const Acc alpha = m[r] == neg_inf ? Acc(0) : std::exp(m[r] - mx);  // rescales the past
          exp_sub(sr, kBlockK, mx);  // P = exp(S - m_new); masked and padding columns give 0
          const Acc sum = row_sum(sr, kBlockK);
          if (p.dropout.rate > 0.f) {
            dropout_scales(p.dropout, b, h, i0 + r, j0, cols, z.data());
            for (int64_t c = 0; c < cols; ++c) sr[c] *= z[c];
          }
          l[r] = l[r] * alpha + sum;
          m[r] = mx;
          Acc* ar = acc.data() + r * sh.Dv;
          for (int64_t e = 0; e < sh.Dv; ++e) ar[e] *= alpha;
        }
        tile_p_b(s.data(), vt, acc.data(), rows, cols, sh.Dv);  // O += P V
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        const bool any = l[r] > Acc(0) || l[r] != l[r];
        const Acc inv = any ? Acc(1) / l[r] : Acc(0);
        T* dst = o + b * sh.o_stride[0] + i * sh.o_stride[1] + h * sh.o_stride[2];
        for (int64_t e = 0; e < sh.Dv; ++e) store<Acc>(dst + e, acc[r * sh.Dv + e] * inv);
        p.lse[(b * sh.H + h) * sh.Tq + i] =
            any ? static_cast<float>(m[r] + std::log(l[r])) : -std::numeric_limits<float>::infinity();
      }
    }
  });
}

// ---- decode path ----------------------------------------------------------------------------
// Few query rows (decoding against a KV cache: Tq = 1, or a few with speculative decoding). The
// tiled forward above spends such calls on O(N) work: it converts and transposes all of K and V
// (a copy as large as the cache), then every query head reads its kv head's tiles again. Here the
// G = H / Hkv query heads of a group and their Tq rows (R = G * Tq rows) meet each key block
// together, so K and V are read once per kv head, from the input, a block of kBlockK keys at a
// time. Work units are (batch, chunk of kv heads, key split), a chunk being all kv heads unless
// their state passes kDecodeChunkFloats. Per key block a unit stages K (converted to float,
// transposed by in-register tile transposes) and V (converted) of all its kv heads key by key
// (stage_block): one key's rows of all kv heads are adjacent in memory, so the cache is read in
// long sequential runs. Then, per kv head:
//   S = Q Kᵀ (the tile product), masks / soft-cap / bias (finish_scores, shared with the tiled
//   path), the online softmax of kLanes rows at a time (their maxima and sums from one vector fold,
//   their rescaling factors from one vector exp), dropout (dropout_scales, the same Philox draws),
//   O += P V (the tile product).
// When the batch gives too few units for the threads, the keys are split (flash-decoding): each
// split keeps its own (m, ℓ, O) per row and a second pass merges them in split order with the
// log-sum-exp,
//   m = max_s m_s,  ℓ = Σ_s ℓ_s e^{m_s - m},  O = Σ_s O_s e^{m_s - m} / ℓ,  lse = m + log ℓ.
// No atomics and a fixed order: the result depends on the shape and the split count only.
// decode = 0 (auto) takes this path for Tq <= kDecodeAutoTq: on the 2-core test machine it beat
// the tiled forward at every Tq measured up to 256 (B = 1-4, Tk = 4096, GQA 1/4/8, float32,
// KV-cache causal: 4.9x-7.7x at Tq = 16, 1.2x-4.3x at 64, 1.1x-2.3x at 256), but its per-unit
// state (Q and O of G * Tq rows) grows with Tq, so the automatic choice stops at 64.
constexpr int64_t kDecodeAutoTq = 64;
constexpr int64_t kDecodeMaxTq = 256;  // decode = 1 (forced on) applies for Tq <= this
constexpr int64_t kMinSplitBlocks = 4;  // an automatic split gets at least this many key blocks
// Floats a unit's kv heads may hold: Q and O of their rows plus one staged K/V block (4 MiB, beyond
// L2: chunks of all kv heads measured faster than chunks that fit L2, e.g. 32 kv heads at D = 128,
// Tq = 1: 195 vs 260 cycles per key and head with 16-head chunks, since whole rows of K and V are
// then read in one sequential run).
constexpr int64_t kDecodeChunkFloats = int64_t{1} << 20;

// Shuffles between two vectors x, y that swap, in every block of 2W lanes, x's upper W lanes
// with y's lower W lanes: lane l of the first result is fold_lo<W>(l) of the pair (x then y, as
// __builtin_shufflevector numbers them), lane l of the second fold_hi<W>(l).
template <int W>
constexpr int fold_lo(int l) {
  return (l % (2 * W)) < W ? (l / (2 * W)) * 2 * W + l % (2 * W)
                           : kLanes + (l / (2 * W)) * 2 * W + l % (2 * W) - W;
}
template <int W>
constexpr int fold_hi(int l) {
  return (l % (2 * W)) < W ? (l / (2 * W)) * 2 * W + W + l % (2 * W)
                           : kLanes + (l / (2 * W)) * 2 * W + l % (2 * W);
}
using LaneSeq = std::make_integer_sequence<int, kLanes>;

template <int W, int... L>
inline void swap_blocks(VecF& x, VecF& y, std::integer_sequence<int, L...>) {
  const VecF a = x, b = y;
  x = __builtin_shufflevector(a, b, fold_lo<W>(L)...);
  y = __builtin_shufflevector(a, b, fold_hi<W>(L)...);
}

// In-register transpose of a kLanes x kLanes tile (v[i] = row i): level W swaps the off-diagonal
// W x W blocks of every 2W x 2W block, then the levels below transpose each block.
template <int W>
inline void transpose_tile(VecF* v) {
  for (int i = 0; i < kLanes; ++i)
    if (!(i & W)) swap_blocks<W>(v[i], v[i + W], LaneSeq{});
  if constexpr (W > 1) transpose_tile<W / 2>(v);
}

// Reduces each of v[0..2W) over its lanes with op, kLanes vectors at once: afterwards lane i of
// v[0] is op over the lanes of the original v[i]. (The transpose's shuffles, then op.)
template <int W, typename Op>
inline void fold_rows(VecF* v, Op op) {
  for (int i = 0; i < W; ++i) {
    VecF x = v[i], y = v[i + W];
    swap_blocks<W>(x, y, LaneSeq{});
    v[i] = op(x, y);
  }
  if constexpr (W > 1) fold_rows<W / 2>(v, op);
}

inline VecF splat(float x) { return VecF{} + x; }
// NaN-propagating lane-wise max (a NaN lane stays NaN).
inline VecF nan_max_vec(VecF a, VecF b) { return ((b > a) | (b != b)) ? b : a; }

// exp of every lane: exp_sub's polynomial on vectors (the same operations).
inline VecF exp_vec(VecF v) {
  VecF t = v < splat(-87.0f) ? splat(-87.0f) : v;
  t = t > splat(88.0f) ? splat(88.0f) : t;
  const VecF k = (t * 1.44269504088896341f + 12582912.f) - 12582912.f;  // round(t / ln2)
  const VecF r = (t - k * 0.693145751953125f) - k * 1.42860682030941723212e-6f;
  const VecF p = exp_taylor7(r);
  const VecI bits = (__builtin_convertvector(k, VecI) + 127) << 23;
  VecF scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  VecF e = p * scale;
  e = v < splat(-87.0f) ? splat(0.f) : e;
  e = v > splat(88.0f) ? splat(std::numeric_limits<float>::infinity()) : e;
  return v != v ? v : e;
}

// Online-softmax step of rows [0, rows) of s ([rows, kBlockK]: logits in, P = exp(S - m_new)
// out) with their running maxima m and sums ℓ (float arrays padded to a multiple of kLanes;
// padding: m = -inf, ℓ = 0). alpha[r] = e^{m_old - m_new}, the factor for row r's O (0 while the
// row has seen nothing). ℓ sums P before dropout. Returns whether any row has seen a key.
inline bool softmax_rows(float* s, int64_t rows, float* m, float* l, float* alpha) {
  const float ninf = -std::numeric_limits<float>::infinity();
  bool seen = false;
  for (int64_t r0 = 0; r0 < rows; r0 += kLanes) {
    const int64_t n = std::min<int64_t>(kLanes, rows - r0);
    VecF v[kLanes];
    for (int i = 0; i < kLanes; ++i) {
      v[i] = splat(ninf);
      if (i >= n) continue;
      const float* sr = s + (r0 + i) * kBlockK;
      for (int64_t c = 0; c < kBlockK; c += kLanes) v[i] = nan_max_vec(v[i], load_vec(sr + c));
    }
    fold_rows<kLanes / 2>(v, nan_max_vec);
    const VecF m_old = load_vec(m + r0), m_new = nan_max_vec(m_old, v[0]);
    const VecF a = m_old == splat(ninf) ? splat(0.f) : exp_vec(m_old - m_new);
    for (int i = 0; i < kLanes; ++i) {
      v[i] = VecF{};
      if (i >= n) continue;
      float* sr = s + (r0 + i) * kBlockK;
      if (m_new[i] == ninf) {  // nothing visible yet in this row
        std::fill(sr, sr + kBlockK, 0.f);
        continue;
      }
      seen = true;
      exp_sub(sr, kBlockK, m_new[i]);  // masked and padding columns give 0
      for (int64_t c = 0; c < kBlockK; c += kLanes) v[i] += load_vec(sr + c);
    }
    fold_rows<kLanes / 2>(v, [](VecF x, VecF y) { return x + y; });
    store_vec(l + r0, load_vec(l + r0) * a + v[0]);
    store_vec(m + r0, m_new);
    store_vec(alpha + r0, a);
  }
  return seen;
}

inline bool softmax_rows(double* s, int64_t rows, double* m, double* l, double* alpha) {
  const double ninf = -std::numeric_limits<double>::infinity();
  bool seen = false;
  for (int64_t r = 0; r < rows; ++r) {
    double* sr = s + r * kBlockK;
    const double mx = nan_max(m[r], row_max(sr, kBlockK));
    alpha[r] = m[r] == ninf ? 0.0 : std::exp(m[r] - mx);
    if (mx == ninf) {
      std::fill(sr, sr + kBlockK, 0.0);
      continue;
    }
    seen = true;
    exp_sub(sr, kBlockK, mx);
    l[r] = l[r] * alpha[r] + row_sum(sr, kBlockK);
    m[r] = mx;
  }
  return seen;
}

// kLanes values of a row of T from p as floats (n < kLanes: the first n, zeros after).
typedef uint16_t VecU16 __attribute__((vector_size(kLanes * sizeof(uint16_t))));
typedef uint32_t VecU32 __attribute__((vector_size(kLanes * sizeof(uint32_t))));
template <typename T>
inline VecF load_row_vec(const T* p, int64_t n) {
  if (n >= kLanes) {
    if constexpr (std::is_same<T, float>::value) return load_vec(p);
    if constexpr (std::is_same<T, BF16>::value) {  // bfloat16: the upper half of a float32
      VecU16 h;
      std::memcpy(&h, p, sizeof(h));
      const VecU32 w = __builtin_convertvector(h, VecU32) << 16;
      VecF f;
      std::memcpy(&f, &w, sizeof(f));
      return f;
    }
    if constexpr (std::is_same<T, F16>::value) {  // F16C (GCC converts _Float16 vectors by lane)
      VecF f;
#if defined(__AVX512F__)
      __m256i h;
      std::memcpy(&h, p, sizeof(h));
      const __m512 x = _mm512_cvtph_ps(h);
#else
      __m128i h;
      std::memcpy(&h, p, sizeof(h));
      const __m256 x = _mm256_cvtph_ps(h);
#endif
      std::memcpy(&f, &x, sizeof(f));
      return f;
    }
  }
  float tmp[kLanes];
  for (int e = 0; e < kLanes; ++e) tmp[e] = e < n ? load<float>(p + e) : 0.f;
  return load_vec(tmp);
}

// Stages key block [j0, j0 + cols) of kv heads [hk0, hk0 + nh) for both products, as Acc:
//   kt [nh, dp, kBlockK]: K transposed (zero past cols and past D); float: kLanes x kLanes tiles
//                         transposed in registers;
//   vb [nh, kBlockK, Dv]: V.
// Both walk the block key by key, every kv head of a key before the next key: one key's rows of
// all kv heads are adjacent in memory ([B, T, Hkv, D]), so the block is read as a few long
// sequential runs (about 1.5x the bandwidth of reading it head by head, which jumps to another
// row, often another 4 KiB page, every D values).
template <typename T, typename Acc>
void stage_block(const T* k, const T* v, const AttnShape& sh, int64_t b, int64_t hk0, int64_t nh,
                 int64_t j0, int64_t cols, int64_t dp, Acc* kt, Acc* vb) {
  const T* ks = k + b * sh.k_stride[0] + j0 * sh.k_stride[1] + hk0 * sh.k_stride[2];
  if constexpr (std::is_same<Acc, float>::value) {
    for (int64_t c0 = 0; c0 < kBlockK; c0 += kLanes) {
      for (int64_t hl = 0; hl < nh; ++hl) {
        for (int64_t d0 = 0; d0 < dp; d0 += kLanes) {
          VecF t[kLanes];
          for (int i = 0; i < kLanes; ++i) {
            t[i] = c0 + i < cols ? load_row_vec(ks + (c0 + i) * sh.k_stride[1] +
                                                    hl * sh.k_stride[2] + d0, sh.D - d0)
                                 : VecF{};
          }
          transpose_tile<kLanes / 2>(t);
          Acc* dst = kt + (hl * dp + d0) * kBlockK + c0;
          for (int i = 0; i < kLanes; ++i) store_vec(dst + i * kBlockK, t[i]);
        }
      }
    }
  } else {
    for (int64_t hl = 0; hl < nh; ++hl)
      load_rows_t(k, sh.k_stride, b, hk0 + hl, j0, cols, sh.D, kt + hl * dp * kBlockK);
  }
  const T* vs = v + b * sh.v_stride[0] + j0 * sh.v_stride[1] + hk0 * sh.v_stride[2];
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t hl = 0; hl < nh; ++hl) {
      const T* src = vs + j * sh.v_stride[1] + hl * sh.v_stride[2];
      Acc* dst = vb + (hl * kBlockK + j) * sh.Dv;
      int64_t e = 0;
      if constexpr (std::is_same<Acc, float>::value)
        for (; e + kLanes <= sh.Dv; e += kLanes) store_vec(dst + e, load_row_vec(src + e, kLanes));
      for (; e < sh.Dv; ++e) dst[e] = load<Acc>(src + e);
    }
  }
}

// Whether the decode path runs (p.decode: 0 auto, 1 on, -1 off).
inline bool use_decode(const FlashFwdParams& p) {
  if (p.decode < 0) return false;
  return p.shape.Tq <= (p.decode > 0 ? kDecodeMaxTq : kDecodeAutoTq);
}

// How the decode path cuts the work: units of (batch, chunk of hc kv heads, key split). Chunks:
// as many heads as keep the unit's Q, O and staged block within kDecodeChunkFloats. Splits:
// p.num_splits when forced (at most one per key block), else enough units for about four per
// thread, no split shorter than kMinSplitBlocks key blocks. With few keys and few units, finer
// head chunks.
struct DecodePlan {
  int64_t hc = 1, nhc = 1, splits = 1;
};

inline DecodePlan decode_plan(const FlashFwdParams& p, int threads) {
  const AttnShape& sh = p.shape;
  DecodePlan pl;
  const int64_t per_head = (sh.group() * sh.Tq + kBlockK) * (sh.D + sh.Dv + kLanes);
  pl.hc = std::max<int64_t>(1, std::min<int64_t>(sh.Hkv, kDecodeChunkFloats / per_head));
  pl.nhc = (sh.Hkv + pl.hc - 1) / pl.hc;
  const int64_t nkb = std::max<int64_t>(1, (sh.Tk + kBlockK - 1) / kBlockK);
  const int64_t base = sh.B * pl.nhc;
  if (p.num_splits > 0) {
    pl.splits = std::min<int64_t>(p.num_splits, nkb);
  } else if (base < 4 * threads) {
    pl.splits = std::max<int64_t>(
        1, std::min<int64_t>((4 * threads + base - 1) / base, nkb / kMinSplitBlocks));
  }
  if (base * pl.splits < 2 * threads && pl.nhc < sh.Hkv) {
    pl.nhc = std::min<int64_t>(sh.Hkv, (2 * threads + sh.B * pl.splits - 1) / (sh.B * pl.splits));
    pl.hc = (sh.Hkv + pl.nhc - 1) / pl.nhc;
    pl.nhc = (sh.Hkv + pl.hc - 1) / pl.hc;
  }
  return pl;
}

template <typename T, typename Acc>
void fwd_decode(const FlashFwdParams& p, const ParallelFor& parallel_for, int threads) {
  const AttnShape& sh = p.shape;
  const int64_t G = sh.group(), R = G * sh.Tq;
  if (sh.B == 0 || sh.Hkv == 0 || R == 0) return;
  const DecodePlan pl = decode_plan(p, threads);
  const int64_t S = pl.splits, HC = pl.hc;
  const int64_t units = sh.B * pl.nhc * S;
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  T* o = static_cast<T*>(p.o);
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  constexpr int64_t lanes = std::is_same<Acc, float>::value ? kLanes : 1;
  const int64_t dp = (sh.D + lanes - 1) / lanes * lanes;  // head dim of Q and Kᵀ, zero padded
  const int64_t Rp = (R + lanes - 1) / lanes * lanes;     // rows of m, ℓ, alpha, padded
  // Partial states of the splits (S > 1), per (unit, head of the chunk, row): O unnormalized
  // [.., Dv], m and ℓ.
  const int64_t part_rows = S > 1 ? units * HC * R : 0;
  Scratch<Acc> part_o(part_rows * sh.Dv), part_m(part_rows), part_l(part_rows);
  const int64_t cost = (sh.Tk / S + 1) * HC * (R * (sh.D + sh.Dv) * 2 + R * 20 + (sh.D + sh.Dv) * 4);

  // Output row r of kv head hk (query head hk * G + r / Tq, row r % Tq) from its unnormalized
  // state: O / ℓ and lse = m + log ℓ, or 0 and -inf for a row that saw no key.
  auto write_row = [&](int64_t b, int64_t hk, int64_t r, const Acc* out, Acc mx, Acc sum) {
    const int64_t h = hk * G + r / sh.Tq, i = r % sh.Tq;
    const bool any = sum > Acc(0) || sum != sum;
    const Acc inv = any ? Acc(1) / sum : Acc(0);
    T* dst = o + b * sh.o_stride[0] + i * sh.o_stride[1] + h * sh.o_stride[2];
    for (int64_t e = 0; e < sh.Dv; ++e) store<Acc>(dst + e, out[e] * inv);
    p.lse[(b * sh.H + h) * sh.Tq + i] =
        any ? static_cast<float>(mx + std::log(sum)) : -std::numeric_limits<float>::infinity();
  };

  parallel_for(units, cost, [&](int64_t begin, int64_t end) {
    Scratch<Acc> qt(HC * R * dp), alpha(Rp);
    Scratch<Acc> acc(HC * R * sh.Dv, kUninit), m(HC * Rp, kUninit), l(HC * Rp, kUninit);  // set per unit
    Scratch<Acc> s(Rp * kBlockK, Acc(0)), z(kBlockK), kt(HC * dp * kBlockK),
        vb(HC * kBlockK * sh.Dv);
    for (int64_t u = begin; u < end; ++u) {
      const int64_t split = u % S, chunk = (u / S) % pl.nhc, b = u / (S * pl.nhc);
      const int64_t hk0 = chunk * HC, nh = std::min(HC, sh.Hkv - hk0);
      const int64_t qlim = q_limit(p.mask, sh, b), klim = k_limit(p.mask, sh, b);
      std::fill(acc.begin(), acc.end(), Acc(0));
      std::fill(m.begin(), m.end(), neg_inf);
      std::fill(l.begin(), l.end(), Acc(0));
      // Key blocks any row of the batch may see, cut into S contiguous parts.
      const int64_t rows_seen = std::min(qlim, sh.Tq);
      const RowRange keys = rows_seen > 0 ? block_keys(p.mask, 0, rows_seen, klim) : RowRange{0, 0};
      const int64_t kb_lo = keys.begin / kBlockK;
      const int64_t nb = keys.end > keys.begin ? (keys.end + kBlockK - 1) / kBlockK - kb_lo : 0;
      const int64_t kb0 = kb_lo + nb * split / S, kb1 = kb_lo + nb * (split + 1) / S;
      for (int64_t hl = 0; hl < nh && kb1 > kb0; ++hl) {  // Q rows of the chunk, width dp
        for (int64_t g = 0; g < G; ++g) {
          for (int64_t i = 0; i < sh.Tq; ++i) {
            Acc* dst = qt.data() + (hl * R + g * sh.Tq + i) * dp;
            load_rows(q, sh.q_stride, b, (hk0 + hl) * G + g, i, 1, sh.D, dst);
            std::fill(dst + sh.D, dst + dp, Acc(0));
          }
        }
      }
      for (int64_t kb = kb0; kb < kb1; ++kb) {
        const int64_t j0 = kb * kBlockK, cols = std::min(kBlockK, sh.Tk - j0);
        stage_block(k, v, sh, b, hk0, nh, j0, cols, dp, kt.data(), vb.data());
        for (int64_t hl = 0; hl < nh; ++hl) {
          const int64_t hk = hk0 + hl;
          Acc* ah = acc.data() + hl * R * sh.Dv;
          Acc* mh = m.data() + hl * Rp;
          gemm(qt.data() + hl * R * dp, dp, 1, kt.data() + hl * dp * kBlockK, kBlockK, s.data(),
               kBlockK, R, dp, kBlockK, false);  // S = Q Kᵀ
          for (int64_t g = 0; g < G; ++g)
            finish_scores<T, Acc>(p.mask, p.score, b, hk * G + g, sh.Tq, sh.Tk, 0, sh.Tq, j0, cols,
                                  qlim, klim, s.data() + g * sh.Tq * kBlockK, nullptr);
          if (!softmax_rows(s.data(), R, mh, l.data() + hl * Rp, alpha.data())) continue;
          for (int64_t r = 0; r < R; ++r) {
            if (mh[r] == neg_inf) continue;  // nothing seen yet: P and O are 0
            if (p.dropout.rate > 0.f) {
              Acc* sr = s.data() + r * kBlockK;
              dropout_scales(p.dropout, b, hk * G + r / sh.Tq, r % sh.Tq, j0, cols, z.data());
              for (int64_t c = 0; c < cols; ++c) sr[c] *= z[c];
            }
            if (alpha[r] != Acc(1)) {
              Acc* ar = ah + r * sh.Dv;
              for (int64_t e = 0; e < sh.Dv; ++e) ar[e] *= alpha[r];
            }
          }
          gemm(s.data(), kBlockK, 1, vb.data() + hl * kBlockK * sh.Dv, sh.Dv, ah, sh.Dv, R, cols,
               sh.Dv, true);  // O += P V
        }
      }
      for (int64_t hl = 0; hl < nh; ++hl) {
        const Acc* ah = acc.data() + hl * R * sh.Dv;
        const Acc* mh = m.data() + hl * Rp;
        const Acc* lh = l.data() + hl * Rp;
        if (S == 1) {
          for (int64_t r = 0; r < R; ++r) write_row(b, hk0 + hl, r, ah + r * sh.Dv, mh[r], lh[r]);
          continue;
        }
        const int64_t row0 = (u * HC + hl) * R;
        std::copy(ah, ah + R * sh.Dv, part_o.begin() + row0 * sh.Dv);
        std::copy(mh, mh + R, part_m.begin() + row0);
        std::copy(lh, lh + R, part_l.begin() + row0);
      }
    }
  });
  if (S == 1) return;

  // Merge, per (b, kv head, row), the S partial states in split order.
  parallel_for(sh.B * sh.Hkv * R, S * (sh.Dv * 3 + 30), [&](int64_t begin, int64_t end) {
    Scratch<Acc> out(sh.Dv);
    for (int64_t x = begin; x < end; ++x) {
      const int64_t r = x % R, hk = (x / R) % sh.Hkv, b = x / (R * sh.Hkv);
      const int64_t u0 = (b * pl.nhc + hk / HC) * S, hl = hk % HC;  // unit of split 0
      auto row = [&](int64_t t) { return ((u0 + t) * HC + hl) * R + r; };
      Acc mx = neg_inf;
      for (int64_t t = 0; t < S; ++t) mx = nan_max(mx, part_m[row(t)]);
      std::fill(out.begin(), out.end(), Acc(0));
      Acc sum = 0;
      for (int64_t t = 0; t < S && mx != neg_inf; ++t) {
        const Acc ms = part_m[row(t)];
        if (ms == neg_inf) continue;  // the split saw no key of this row
        const Acc w = std::exp(ms - mx);
        sum += part_l[row(t)] * w;
        const Acc* po = part_o.data() + row(t) * sh.Dv;
        for (int64_t e = 0; e < sh.Dv; ++e) out[e] += po[e] * w;
      }
      write_row(b, hk, r, out.data(), mx, sum);
    }
  });
}

// ---- backward ----------------------------------------------------------------------------
// Recomputes one tile: on exit s holds P (0 where masked), ds holds dS = P ∘ (dP - D) with the
// soft-cap derivative applied (dL/d(q·k·scale)), and, when dbias_tile is non-null, dL/d(logit).
// pd receives dropout(P) (the P that multiplied V); dpd is scratch.
template <typename T, typename Acc>
struct BwdTile {
  const FlashBwdParams& p;
  Scratch<Acc> s, ds, pd, dcap;
  explicit BwdTile(const FlashBwdParams& params)
      : p(params), s(kBlockQ * kBlockK), ds(kBlockQ * kBlockK), pd(kBlockQ * kBlockK),
        dcap(kBlockQ * kBlockK) {}

  // qt: [rows, D], kt: [D, kBlockK], dot: [rows, Dv], vt: [Dv, kBlockK], lse/dsum: [rows]
  void run(int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
           int64_t qlim, int64_t klim, const Acc* qt, const Acc* kt, const Acc* dot,
           const Acc* vt, const Acc* lse, const Acc* dsum, float* dbias_rows) {
    const AttnShape& sh = p.shape;
    tile_a_bt(qt, kt, s.data(), rows, sh.D);  // S = Q Kᵀ
    finish_scores<T, Acc>(p.mask, p.score, b, h, sh.Tq, sh.Tk, i0, rows, j0, cols, qlim, klim,
                          s.data(), p.score.softcap != 0.f ? dcap.data() : nullptr);
    tile_a_bt(dot, vt, ds.data(), rows, sh.Dv);  // dPd = dO Vᵀ
    const bool drop = p.dropout.rate > 0.f;
    Acc z[kBlockK];
    for (int64_t r = 0; r < rows; ++r) {
      Acc* sr = s.data() + r * kBlockK;
      Acc* dr = ds.data() + r * kBlockK;
      Acc* pr = pd.data() + r * kBlockK;
      const Acc* cr = dcap.data() + r * kBlockK;
      float* bias_row = dbias_rows ? dbias_rows + r * sh.Tk + j0 : nullptr;
      if (lse[r] == -std::numeric_limits<Acc>::infinity()) {
        std::fill(sr, sr + kBlockK, Acc(0));  // the row sees no key
      } else {
        exp_sub(sr, kBlockK, lse[r]);  // P = exp(S - lse), 0 where masked
      }
      const Acc d = dsum[r];
      if (drop) {  // z = keep * keep_scale per visible element, from the same Philox draws
        dropout_scales(p.dropout, b, h, i0 + r, j0, kBlockK, z);
        for (int64_t c = 0; c < kBlockK; ++c) {
          pr[c] = sr[c] * z[c];  // P is 0 where masked and past cols: z there does not matter
          dr[c] *= z[c];
        }
      } else {
        std::copy(sr, sr + kBlockK, pr);
      }
      for (int64_t c = 0; c < kBlockK; ++c) {  // dS = P ∘ (dP - D), 0 where P is
        const Acc pc = sr[c];
        dr[c] = pc != Acc(0) ? pc * (dr[c] - d) : Acc(0);
      }
      if (bias_row)
        for (int64_t c = 0; c < cols; ++c) bias_row[c] = static_cast<float>(dr[c]);
      if (p.score.softcap != 0.f)
        for (int64_t c = 0; c < kBlockK; ++c) dr[c] *= cr[c];
    }
  }
};

template <typename T, typename Acc>
void bwd_impl(const FlashBwdParams& p, const ParallelFor& parallel_for, int threads) {
  const AttnShape& sh = p.shape;
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const T* o = static_cast<const T*>(p.o);
  const T* d_o = static_cast<const T*>(p.d_o);
  const Acc scale = static_cast<Acc>(p.score.scale);
  const int64_t nqb = (sh.Tq + kBlockQ - 1) / kBlockQ;
  const int64_t nkb = (sh.Tk + kBlockK - 1) / kBlockK;

  // D = rowsum(dO ∘ O) - d_lse, [B, H, Tq] (d lse / d logit = P, so d_lse joins D).
  Scratch<Acc> dsum(sh.B * sh.H * sh.Tq);
  parallel_for(sh.B * sh.H * sh.Tq, sh.Dv * 4, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t i = u % sh.Tq, h = (u / sh.Tq) % sh.H, b = u / (sh.Tq * sh.H);
      const int64_t off = b * sh.o_stride[0] + i * sh.o_stride[1] + h * sh.o_stride[2];
      Acc acc = 0;
      for (int64_t e = 0; e < sh.Dv; ++e) acc += load<Acc>(d_o + off + e) * load<Acc>(o + off + e);
      dsum[u] = p.d_lse ? acc - static_cast<Acc>(p.d_lse[u]) : acc;
    }
  });

  // Every operand converted and tiled once (O(N) copies): Q and dO in query blocks, K in key
  // blocks both ways round, V transposed.
  const Packed<Acc> q_all = pack<Acc>(q, sh.q_stride, sh.B, sh.Tq, sh.H, sh.D, kBlockQ, false,
                                      parallel_for);   // [kBlockQ, D]
  const Packed<Acc> do_all = pack<Acc>(d_o, sh.o_stride, sh.B, sh.Tq, sh.H, sh.Dv, kBlockQ, false,
                                       parallel_for);  // [kBlockQ, Dv]
  const Packed<Acc> kt_all = pack<Acc>(k, sh.k_stride, sh.B, sh.Tk, sh.Hkv, sh.D, kBlockK, true,
                                       parallel_for);  // [D, kBlockK]
  const Packed<Acc> k_all = pack<Acc>(k, sh.k_stride, sh.B, sh.Tk, sh.Hkv, sh.D, kBlockK, false,
                                      parallel_for);   // [kBlockK, D]
  const Packed<Acc> vt_all = pack<Acc>(v, sh.v_stride, sh.B, sh.Tk, sh.Hkv, sh.Dv, kBlockK, true,
                                       parallel_for);  // [Dv, kBlockK]
  // lse and D of query block (b, h, i0).
  auto load_row_stats = [&](int64_t b, int64_t h, int64_t i0, int64_t rows, Acc* lse, Acc* ds) {
    for (int64_t r = 0; r < rows; ++r) {
      lse[r] = static_cast<Acc>(p.lse[(b * sh.H + h) * sh.Tq + i0 + r]);
      ds[r] = dsum[(b * sh.H + h) * sh.Tq + i0 + r];
    }
  };
  const int64_t tile_cost = kBlockQ * kBlockK * (2 * sh.D + 2 * sh.Dv + 30);

  // dK, dV of key blocks [kb0, kb1) of kv head hk (written out), over the query heads of the
  // group and the query blocks that see them. dk/dv hold (kb1 - kb0) blocks. With dq_group
  // ([group, Tq, D] float, this kv head's query heads) it also accumulates dQ and writes dbias:
  // the single-pass schedule. Several key blocks per sweep keep each query tile (Q, dO, dQ) in
  // cache across them.
  auto key_blocks = [&](BwdTile<T, Acc>& tile, int64_t b, int64_t hk, int64_t kb0, int64_t kb1,
                        Acc* lse, Acc* ds, Acc* dk, Acc* dv, Acc* dq_group) {
    const int64_t qlim = q_limit(p.mask, sh, b), klim = k_limit(p.mask, sh, b);
    std::fill(dk, dk + (kb1 - kb0) * kBlockK * sh.D, Acc(0));
    std::fill(dv, dv + (kb1 - kb0) * kBlockK * sh.Dv, Acc(0));
    for (int64_t h = hk * sh.group(); kb0 * kBlockK < klim && h < (hk + 1) * sh.group(); ++h) {
      for (int64_t qb = 0; qb < nqb; ++qb) {
        const int64_t i0 = qb * kBlockQ, rows = std::min(kBlockQ, sh.Tq - i0);
        if (i0 >= qlim) break;
        const RowRange keys = block_keys(p.mask, i0, i0 + rows, klim);
        const Acc* qt = q_all.at(b, h, qb);
        const Acc* dot = do_all.at(b, h, qb);
        float* dbias_rows = (dq_group && p.dbias)
                                ? p.dbias + ((b * sh.H + h) * sh.Tq + i0) * sh.Tk : nullptr;
        bool stats = false;
        for (int64_t kb = kb0; kb < kb1; ++kb) {
          const int64_t j0 = kb * kBlockK, cols = std::min(kBlockK, sh.Tk - j0);
          if (keys.end <= j0 || keys.begin >= j0 + cols) continue;
          if (!stats) load_row_stats(b, h, i0, rows, lse, ds);
          stats = true;
          Acc* dkb = dk + (kb - kb0) * kBlockK * sh.D;
          Acc* dvb = dv + (kb - kb0) * kBlockK * sh.Dv;
          tile.run(b, h, i0, rows, j0, cols, qlim, klim, qt, kt_all.at(b, hk, kb), dot,
                   vt_all.at(b, hk, kb), lse, ds, dbias_rows);
          tile_pt_a(tile.pd.data(), dot, dvb, rows, cols, sh.Dv);  // dV += Pdᵀ dO
          tile_pt_a(tile.ds.data(), qt, dkb, rows, cols, sh.D);   // dK += dSᵀ Q
          if (dq_group) {  // dQ += dS K
            Acc* dq = dq_group + ((h - hk * sh.group()) * sh.Tq + i0) * sh.D;
            tile_p_b(tile.ds.data(), k_all.at(b, hk, kb), dq, rows, cols, sh.D);
          }
        }
      }
    }
    T* dkp = static_cast<T*>(p.dk);
    T* dvp = static_cast<T*>(p.dv);
    for (int64_t j = kb0 * kBlockK; j < std::min(kb1 * kBlockK, sh.Tk); ++j) {
      const int64_t c = j - kb0 * kBlockK;
      T* dkr = dkp + b * sh.k_stride[0] + j * sh.k_stride[1] + hk * sh.k_stride[2];
      T* dvr = dvp + b * sh.v_stride[0] + j * sh.v_stride[1] + hk * sh.v_stride[2];
      for (int64_t e = 0; e < sh.D; ++e) store<Acc>(dkr + e, dk[c * sh.D + e] * scale);
      for (int64_t e = 0; e < sh.Dv; ++e) store<Acc>(dvr + e, dv[c * sh.Dv + e]);
    }
  };
  auto store_dq = [&](const Acc* dq, int64_t b, int64_t h, int64_t i0, int64_t rows) {
    T* dqp = static_cast<T*>(p.dq);
    for (int64_t r = 0; r < rows; ++r) {
      T* dst = dqp + b * sh.q_stride[0] + (i0 + r) * sh.q_stride[1] + h * sh.q_stride[2];
      for (int64_t e = 0; e < sh.D; ++e) store<Acc>(dst + e, dq[r * sh.D + e] * scale);
    }
  };

  if (sh.B * sh.Hkv >= 2 * threads) {
    // Single pass, one unit per (b, kv head): enough units to keep every thread busy, and each
    // owns dK, dV, dQ and dbias of its heads, so S and dP are computed once per tile.
    parallel_for(sh.B * sh.Hkv, tile_cost * nqb * nkb * sh.group(), [&](int64_t begin, int64_t end) {
      BwdTile<T, Acc> tile(p);
      Scratch<Acc> lse(kBlockQ), ds(kBlockQ);
      // dk, dv set by key_blocks, dq per unit
      Scratch<Acc> dk(kKeyChunk * kBlockK * sh.D, kUninit), dv(kKeyChunk * kBlockK * sh.Dv, kUninit);
      Scratch<Acc> dq(sh.group() * sh.Tq * sh.D, kUninit);
      for (int64_t u = begin; u < end; ++u) {
        const int64_t hk = u % sh.Hkv, b = u / sh.Hkv;
        std::fill(dq.begin(), dq.end(), Acc(0));
        if (p.dbias) {
          float* first = p.dbias + (b * sh.H + hk * sh.group()) * sh.Tq * sh.Tk;
          std::fill(first, first + sh.group() * sh.Tq * sh.Tk, 0.f);
        }
        for (int64_t kb = 0; kb < nkb; kb += kKeyChunk)
          key_blocks(tile, b, hk, kb, std::min(nkb, kb + kKeyChunk), lse.data(), ds.data(),
                     dk.data(), dv.data(), dq.data());
        for (int64_t g = 0; g < sh.group(); ++g)
          store_dq(dq.data() + g * sh.Tq * sh.D, b, hk * sh.group() + g, 0, sh.Tq);
      }
    });
    return;
  }

  // Otherwise two passes that parallelize over blocks too. Pass 1: dK, dV per key block.
  parallel_for(sh.B * sh.Hkv * nkb, tile_cost * nqb * sh.group(), [&](int64_t begin, int64_t end) {
    BwdTile<T, Acc> tile(p);
    Scratch<Acc> lse(kBlockQ), ds(kBlockQ);
    Scratch<Acc> dk(kBlockK * sh.D, kUninit), dv(kBlockK * sh.Dv, kUninit);  // set by key_blocks
    for (int64_t u = begin; u < end; ++u) {
      const int64_t kb = u % nkb, hk = (u / nkb) % sh.Hkv, b = u / (nkb * sh.Hkv);
      key_blocks(tile, b, hk, kb, kb + 1, lse.data(), ds.data(), dk.data(), dv.data(), nullptr);
    }
  });

  // Pass 2: dQ (and dbias rows) per (b, h, query block).
  parallel_for(sh.B * sh.H * nqb, tile_cost * nkb, [&](int64_t begin, int64_t end) {
    BwdTile<T, Acc> tile(p);
    Scratch<Acc> lse(kBlockQ), ds(kBlockQ), dq(kBlockQ * sh.D, kUninit);  // dq set per unit
    for (int64_t u = begin; u < end; ++u) {
      const int64_t qb = u % nqb, h = (u / nqb) % sh.H, b = u / (nqb * sh.H);
      const int64_t hk = h / sh.group();
      const int64_t i0 = qb * kBlockQ, rows = std::min(kBlockQ, sh.Tq - i0);
      const int64_t qlim = q_limit(p.mask, sh, b), klim = k_limit(p.mask, sh, b);
      float* dbias_rows = p.dbias ? p.dbias + ((b * sh.H + h) * sh.Tq + i0) * sh.Tk : nullptr;
      if (dbias_rows) std::fill(dbias_rows, dbias_rows + rows * sh.Tk, 0.f);
      std::fill(dq.begin(), dq.end(), Acc(0));
      const RowRange keys = i0 < qlim ? block_keys(p.mask, i0, i0 + rows, klim) : RowRange{0, 0};
      if (keys.end > keys.begin) load_row_stats(b, h, i0, rows, lse.data(), ds.data());
      const Acc* qt = q_all.at(b, h, qb);
      const Acc* dot = do_all.at(b, h, qb);
      for (int64_t j0 = keys.begin - keys.begin % kBlockK; j0 < keys.end; j0 += kBlockK) {
        const int64_t cols = std::min(kBlockK, sh.Tk - j0), kb = j0 / kBlockK;
        tile.run(b, h, i0, rows, j0, cols, qlim, klim, qt, kt_all.at(b, hk, kb), dot,
                 vt_all.at(b, hk, kb), lse.data(), ds.data(), dbias_rows);
        tile_p_b(tile.ds.data(), k_all.at(b, hk, kb), dq.data(), rows, cols, sh.D);  // dQ += dS K
      }
      store_dq(dq.data(), b, h, i0, rows);
    }
  });
}

}  // namespace

// This file is compiled once per instruction set (see build_ops.py); FA_CPU_ISA names the
// entry points, and flash_cpu_dispatch.cc picks one at run time.
#ifndef FA_CPU_ISA
#error "compile with -DFA_CPU_ISA=<isa> (see build_ops.py)"
#endif
#define FA_CONCAT2(a, b) a##_##b
#define FA_CONCAT(a, b) FA_CONCAT2(a, b)

void FA_CONCAT(flash_fwd_cpu, FA_CPU_ISA)(const FlashFwdParams& p, const ParallelFor& pf,
                                          int threads) {
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  if (use_decode(p)) {
    switch (p.dtype) {
      case DType::kFloat32: return fwd_decode<float, float>(p, pf, threads);
      case DType::kFloat64: return fwd_decode<double, double>(p, pf, threads);
      case DType::kFloat16: return fwd_decode<F16, float>(p, pf, threads);
      case DType::kBFloat16: return fwd_decode<BF16, float>(p, pf, threads);
    }
  }
  switch (p.dtype) {
    case DType::kFloat32: return fwd_impl<float, float>(p, pf);
    case DType::kFloat64: return fwd_impl<double, double>(p, pf);
    case DType::kFloat16: return fwd_impl<F16, float>(p, pf);
    case DType::kBFloat16: return fwd_impl<BF16, float>(p, pf);
  }
}

void FA_CONCAT(flash_bwd_cpu, FA_CPU_ISA)(const FlashBwdParams& p, const ParallelFor& pf,
                                          int threads) {
  switch (p.dtype) {
    case DType::kFloat32: return bwd_impl<float, float>(p, pf, threads);
    case DType::kFloat64: return bwd_impl<double, double>(p, pf, threads);
    case DType::kFloat16: return bwd_impl<F16, float>(p, pf, threads);
    case DType::kBFloat16: return bwd_impl<BF16, float>(p, pf, threads);
  }
}

}  // namespace flashattn
