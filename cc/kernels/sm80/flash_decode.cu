// Decoding path of the CUDA forward (flash-decoding, issue 14): a few query rows per sequence
// (one new token, or a few with speculative decoding) against a long cache of keys and values.
// The work is reading K and V once, so everything here is arranged for memory bandwidth.
//
// When (decode_applies): params.decode = 1 (forced: any Tq, though each 16-row tile then reads K
// and V again, from L2), or 0 (auto) and Tq <= 16; float16, bfloat16 or float32 (full float32 FMA
// whatever allow_tf32 says: decoding is bound by memory, not arithmetic); no dropout (decoding is
// inference: with dropout > 0 the tiled kernels, which implement it, run instead); head dims up
// to 256, any (not only powers of two); any strides.
// Every mask kind is kept: causal with causal_offset (bottom-right for a KV cache), window
// left/right, q/k lengths (clamped to [0, T]), q/k valid, the dense mask and the bias (broadcast
// by strides), soft-cap and scale.
//
// Work split. The query heads of a GQA group share their K and V, so they are processed
// together: for batch b and kv head hk, the R = G * Tq rows (G = H / Hkv) are ordered
// query-major, row r = i * G + (h - hk * G), and cut into row tiles of RT rows (RT = 16, one m16
// tile of the tensor cores; RT = 8 for float32). One CTA per (batch, kv head, row tile, split):
// the keys its rows see ([kbeg, kend), the union over the rows of the causal / window / length
// limits), in tiles of 16 keys from kbeg rounded down, are cut into `splits` contiguous runs of
// whole tiles, one per CTA; inside a CTA warp w takes tiles w, w + nw, w + 2 nw, ... of its run.
// Each warp streams its tiles through its own ring of `stages` shared-memory buffers (K and V
// tiles [16, HD], 16-byte cp.async copies, stages - 1 tiles in flight, warp-level
// synchronization only) and keeps an online softmax over its keys (base 2):
//   S = Q Kᵀ       16-bit: mma m16n8k16, Q fragments in registers (HD <= 128), fp32 accumulators;
//                  float32: FMA on CUDA cores, a lane per (key, half of the head dim)
//   z = log2e * logit(S)           score_elem (scale, soft-cap, bias, masks), or by index only
//   m' = max(m, rowmax z);  P = 2^(z - m');  ℓ = 2^(m - m') ℓ + rowsum P;  O = 2^(m - m') O + P V
// The warps' states meet in shared memory: m = max_w m_w, ℓ = Σ_w 2^(m_w - m) ℓ_w, O likewise.
// One split: O / ℓ and lse = ln2 (m + log2 ℓ) go to o and lse directly. Several: each CTA writes
// its (O / ℓ, lse) in float32 to the workspace and a merge kernel combines a row's splits in a
// fixed order, by the log-sum-exp (deterministic, no atomics):
//   lse = log Σ_s e^(lse_s),  O = Σ_s e^(lse_s - lse) O_s.
// A row that sees no key gets O = 0 and lse = -inf, as in the tiled kernels.
// Tuning builds' variants of the merge (FA_DECODE_MERGE, DecCfg::merge): the merge kernel as a
// programmatic dependent launch; or no merge kernel: the split CTA that completes a (batch, kv
// head, row tile) last (a counter per unit in the workspace, zeroed before the grid) merges its
// rows with the merge kernel's code, splits in the same order (the same bits); see
// dec_fused_merge. And 32-key tiles (FA_DECODE_KT=32): one wait and one softmax step per 32 keys.
// On compute capability 9.x (16-bit, head-dim bucket 128, 16-byte aligned k / v) K and V are brought
// by the Hopper copy engine instead of cp.async: decode_async_kernel with LOAD 2 (tma) is the
// default there (benchmarks/RESULTS.md "Decoding": 0.92x-1.52x FlashAttention-2's bandwidth at the
// four bar shapes against 0.87x-1.43x with cp.async). Its K/V loads (FA_DECODE_LOAD in tuning
// builds): tensor-map (TMA) boxes per warp (2, the default), bulk copies of key rows (1), or TMA
// stages shared by the CTA's warps and filled by a producer warp (3); the same tiles per warp and
// the same arithmetic as the cp.async kernel (the same bits at the same warps and splits).
//
// Splits: a forced params.num_splits (clamped to 256 and to the key tiles of Tk), else chosen
// from the shape and the GPU (SM count and CTAs per SM, queried once per device and cached):
// with base = B * Hkv * row tiles CTAs per split, the s minimizing
// waves(base * s) * (bytes of K and V per CTA + a fixed cost per CTA) (+ the merge when s > 1).
// flash_fwd_workspace_bytes bounds s from the shape alone (XLA asks at compile time): no split
// when base >= 512, else at most ceil(1024 / base), 256 and the key tiles of Tk; the workspace
// holds the partials of that many splits and base counters (the fused merge's).
//
// Shared memory per CTA: the Q tile, nw warps x stages x (K tile, V tile), the warps' (m, ℓ);
// rows padded by one 16-byte chunk (conflict-free ldmatrix). The warp count (4, fewer for large
// head dims where shared memory is small) and the stages (2 to 4) are chosen per GPU so that two
// CTAs fit on an SM where they can (H100/H200: HD 128 bf16 4 warps x 3 stages, 107 KiB).
// Loads: 16-byte cp.async when q, k, v are 16-byte aligned with D, Dv and their strides multiples
// of 8 (float32: 4) elements; element loads otherwise. Head dims are padded with zeros to
// HD in {64, 128, 256} (float32: {128, 256}); rows outside [kbeg, kend) are zero-filled, so a
// cache's unfilled tail is never read.
#include "cc/kernels/flash_cuda.h"

#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "cc/kernels/common/flash_cuda_common.cuh"
#include "cc/kernels/common/flash_cuda_internal.h"
#include "cc/kernels/sm80/flash_fwd_tile.cuh"
// decode_async_kernel (K/V by the Hopper copy engine) is built where the library has sm_90 code
// (FA_HAS_SM90) and in tuning builds: LOAD 2 (tma) is the default kernel on compute capability 9.x
// for 16-bit inputs in the head-dim bucket 128; LOAD 1 and 3 and the merge variants are tuning-only.
#if defined(FA_TUNING) || defined(FA_HAS_SM90)
#define FA_DECODE_ASYNC 1
#else
#define FA_DECODE_ASYNC 0
#endif
#if FA_DECODE_ASYNC
// Tensor maps (host) and the mbarrier / TMA / bulk-copy PTX helpers (sm_90 PTX, used behind
// __CUDA_ARCH__ >= 900 only).
#include "cc/kernels/sm90/sm90_host.cuh"
#include "cc/kernels/sm90/sm90_ptx.cuh"
#endif

namespace flashattn {
namespace cuda {
namespace {

constexpr int kDecKeys = 16;         // keys per warp tile (the k16 of P V)
constexpr int kDecRowsTc = 16;       // rows per CTA, tensor-core kernel (one m16 tile)
constexpr int kDecRowsSimt = 8;      // rows per CTA, float32 kernel
constexpr int kDecMaxWarps = 4;     // the automatic configuration's warps per CTA
#ifdef FA_TUNING
constexpr int kDecLaunchWarps = 8;   // tuning builds: FA_DECODE_WARPS up to 8
#else
constexpr int kDecLaunchWarps = kDecMaxWarps;
#endif
constexpr int kDecMaxStages = 4;
constexpr int64_t kDecAutoMaxTq = 16;        // decode = 0: the decoding path up to this Tq
constexpr int kDecMaxSplits = 256;
constexpr int64_t kDecNoSplitBase = 512;     // CTAs without splitting that need no split
constexpr int64_t kDecSplitCtaCap = 1024;    // at most about this many CTAs from splitting
// Split cost model (bytes of K and V that one CTA reads in the same time, at full occupancy):
// a CTA's fixed cost (Q load, pipeline fill, epilogue) and the merge kernel's.
constexpr double kDecCtaCost = 32768.0;
constexpr double kDecMergeCost = 65536.0;

// One query row of a CTA (float32 kernel, in shared memory): its head, position, visible keys.
struct RowMeta {
  int64_t kb, ke, i, h;
  int ok;
  int pad;
};

// Shared-memory layout of a CTA with nw warps and ns stages. ESIZE: element bytes of Q / K / V.
//   [ROWS, LD] Q tile | nw x ns x ([16, LD] K, [16, LD] V) | [nw, ROWS, 2] (m, ℓ) | [ROWS] RowMeta
// After the main loop the rings hold the warps' outputs [nw, ROWS, LDC] float32.
template <int HD, int ESIZE, int ROWS, int KT = kDecKeys>
struct DecSmem {
  static constexpr int kLd = HD + 16 / ESIZE;  // tile row stride (elements)
  static constexpr int kLdc = HD + 8;          // combine buffer row stride (floats)
  static constexpr size_t kQBytes = static_cast<size_t>(ROWS) * kLd * ESIZE;
  static constexpr size_t kStageBytes = static_cast<size_t>(2) * KT * kLd * ESIZE;
  static_assert(kQBytes % 16 == 0 && kStageBytes % 16 == 0, "16-byte aligned regions");
  static_assert(static_cast<size_t>(ROWS) * kLdc * 4 <= kStageBytes,
                "a warp's output fits in one stage of its ring");
  // qn: Q tiles at the start (1; nw in the tuning builds' warp-unit mode, a Q tile per warp).
  __host__ __device__ static constexpr size_t ring_off(int qn = 1) { return static_cast<size_t>(qn) * kQBytes; }
  __host__ __device__ static constexpr size_t ml_off(int nw, int ns, int qn = 1) {
    return ring_off(qn) + static_cast<size_t>(nw) * ns * kStageBytes;
  }
  __host__ __device__ static constexpr size_t meta_off(int nw, int ns, int qn = 1) {
    return (ml_off(nw, ns, qn) + static_cast<size_t>(nw) * ROWS * 2 * sizeof(float) + 15) / 16 * 16;
  }
  __host__ __device__ static constexpr size_t bytes(int nw, int ns, int qn = 1) {
    return meta_off(nw, ns, qn) + ROWS * sizeof(RowMeta);
  }
};

struct DecodeArgs {
  FlashFwdParams p;
  float* ws_o;    // [splits, B, H, Tq, dvp] float32: each split's O / ℓ (splits > 1)
  float* ws_lse;  // [splits, B, H, Tq] float32: each split's lse (natural log)
  int splits;     // CTAs per (batch, kv head, row tile)
  int row_tiles;  // ceil(G * Tq / rows per CTA)
  int stages;     // ring buffers per warp, 2 .. 7
  int dvp;        // Dv rounded up to 4
  bool vec_in;    // 16-byte loads of q, k, v
  bool vec_out;   // 4-element stores of o
  bool gen;       // element masks, bias, soft-cap or scale <= 0: score_elem per element
  unsigned* ws_cnt;  // [B * Hkv * row_tiles]: split CTAs done per unit (tuning builds' fused merge)
};

// ---- device helpers ---------------------------------------------------------------------

// cp.async.wait_group with a run-time count (n <= 7; the stage count is chosen at run time).
__device__ __forceinline__ void cp_async_wait_dyn(int n) {
  switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    case 6: cp_async_wait<6>(); break;
    default: cp_async_wait<0>(); break;
  }
}

// Four adjacent elements of o (4-element aligned: vec_out).
__device__ __forceinline__ void store4(__half* dst, float a, float b, float c, float d) {
  *reinterpret_cast<uint2*>(dst) = make_uint2(Elem<__half>::pack(a, b), Elem<__half>::pack(c, d));
}
__device__ __forceinline__ void store4(__nv_bfloat16* dst, float a, float b, float c, float d) {
  *reinterpret_cast<uint2*>(dst) =
      make_uint2(Elem<__nv_bfloat16>::pack(a, b), Elem<__nv_bfloat16>::pack(c, d));
}
__device__ __forceinline__ void store4(float* dst, float a, float b, float c, float d) {
  *reinterpret_cast<float4*>(dst) = make_float4(a, b, c, d);
}

// What a CTA works on: blockIdx.x = ((b * Hkv + hk) * row_tiles + row tile) * splits + split.
// (Tuning builds' warp-unit mode: what a warp works on, id = blockIdx.x * warps + warp =
// ((b * splits + split) * row_tiles + row tile) * Hkv + hk: the warps of a CTA take neighbouring
// kv heads of the same keys.)
struct DecBlock {
  int64_t b, hk, row0;     // batch, kv head, first row of the tile
  int split;
  int64_t qlim, klim;      // the batch's length limits
  int64_t kbeg, kend;      // keys some row of the tile sees
  int64_t kin_lo, kin_hi;  // keys every row of the tile sees (causal / window / lengths)
  int64_t jstart;          // first key of tile 0: kbeg rounded down to kDecKeys
  int64_t t_lo, t_hi;      // this split's key tiles [t_lo, t_hi)
};

template <int KT = kDecKeys>
__device__ __forceinline__ DecBlock dec_block(const DecodeArgs& a, int rows, int64_t id, bool hk_fast = false) {
  const FlashFwdParams& p = a.p;
  const AttnShape& sh = p.shape;
  DecBlock k;
  int64_t rt;
  if (hk_fast) {
    k.hk = id % sh.Hkv;
    id /= sh.Hkv;
    rt = id % a.row_tiles;
    id /= a.row_tiles;
    k.split = static_cast<int>(id % a.splits);
    k.b = id / a.splits;
  } else {
    k.split = static_cast<int>(id % a.splits);
    id /= a.splits;
    rt = id % a.row_tiles;
    id /= a.row_tiles;
    k.hk = id % sh.Hkv;
    k.b = id / sh.Hkv;
  }
  k.row0 = rt * rows;
  k.qlim = q_limit(p.mask, sh, k.b);
  k.klim = k_limit(p.mask, sh, k.b);
  const int64_t G = sh.H / sh.Hkv, R = G * sh.Tq;
  const int64_t i_lo = k.row0 / G;
  int64_t i_hi = ((k.row0 + rows < R ? k.row0 + rows : R) - 1) / G;
  if (i_hi > k.qlim - 1) i_hi = k.qlim - 1;
  k.kbeg = k.kend = k.kin_lo = k.kin_hi = k.jstart = k.t_lo = k.t_hi = 0;
  if (i_lo <= i_hi) {
    // key_begin / key_end do not decrease with the row: the first and last rows bound the rest.
    block_keys(p.mask, i_lo, i_hi, k.klim, &k.kbeg, &k.kend);
    k.kin_lo = p.mask.key_begin(i_hi);
    k.kin_hi = p.mask.key_end(i_lo, k.klim);
    if (k.kend > k.kbeg) {
      k.jstart = k.kbeg - k.kbeg % KT;
      const int64_t total = (k.kend - k.jstart + KT - 1) / KT;
      k.t_lo = total * k.split / a.splits;
      k.t_hi = total * (k.split + 1) / a.splits;
    }
  }
  return k;
}

// 16-byte copies with an L2 hint (tuning builds' variants): HINT 1 prefetches the 256-byte L2
// segment around the address, 2 marks the line evict-first (K and V are read once), 0 none.
template <int HINT>
__device__ __forceinline__ void dec_cp16(void* smem, const void* gmem, bool pred, uint64_t policy) {
  if constexpr (HINT == 1) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
                 "r"(pred ? 16 : 0));
  } else if constexpr (HINT == 2) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(smem_addr(smem)),
                 "l"(gmem), "r"(pred ? 16 : 0), "l"(policy));
  } else {
    cp_async16(smem, gmem, pred);
  }
}
template <int HINT>
__device__ __forceinline__ uint64_t dec_l2_policy() {
  uint64_t pol = 0;
  if constexpr (HINT == 2) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}

// Keys j0 .. j0 + 15 of kv head hk of x ([B, Tk, Hkv, n], strides st) into a [16, LD] tile (one
// warp): rows outside [lo, hi) become zero; columns >= n are not written (zero from the start).
template <typename T, int HD, int LD, int HINT = 0, int NK = kDecKeys>
__device__ __forceinline__ void dec_load_kv(T* dst, const T* x, const int64_t st[3], int64_t b,
                                            int64_t hk, int64_t j0, int64_t lo, int64_t hi, int n,
                                            bool vec, int lane, uint64_t policy = 0) {
  constexpr int kChunk = 16 / sizeof(T), kCpr = HD / kChunk;  // elements per chunk, chunks per row
  static_assert(NK * kCpr % 32 == 0, "whole passes of the warp");
  const T* base = x + b * st[0] + hk * st[2];
  if (vec) {
    const int nc = n / kChunk;
#pragma unroll
    for (int it = 0; it < NK * kCpr / 32; ++it) {
      const int idx = it * 32 + lane, r = idx / kCpr, c = idx % kCpr;
      if (c < nc) {
        const int64_t t = j0 + r;
        const bool ok = t >= lo && t < hi;
        dec_cp16<HINT>(dst + r * LD + c * kChunk, ok ? base + t * st[1] + c * kChunk : x, ok, policy);
      }
    }
  } else {
    for (int idx = lane; idx < NK * n; idx += 32) {
      const int r = idx / n, c = idx - r * n;
      const int64_t t = j0 + r;
      dst[r * LD + c] = t >= lo && t < hi ? base[t * st[1] + c] : Elem<T>::from_f(0.f);
    }
  }
}

// The CTA's query rows into the [ROWS, LD] Q tile (threads tid of nthr): tile row r is row0 + r of the
// group, i.e. q[b, i, hk * G + g] with (i, g) = divmod(row0 + r, G); zero past the R rows and
// past D (columns up to HD).
template <typename T, int HD, int ROWS, int LD>
__device__ __forceinline__ void dec_load_q(T* sq, const FlashFwdParams& p, int64_t b, int64_t hk,
                                           int64_t row0, bool vec, int tid, int nthr) {
  const AttnShape& sh = p.shape;
  const T* q = static_cast<const T*>(p.q);
  const int64_t G = sh.H / sh.Hkv, R = G * sh.Tq;
  const int D = static_cast<int>(sh.D);
  constexpr int kChunk = 16 / sizeof(T), kCpr = HD / kChunk;
  if (vec) {
    const int nc = D / kChunk;
    for (int idx = tid; idx < ROWS * kCpr; idx += nthr) {
      const int r = idx / kCpr, c = idx % kCpr;
      T* d = sq + r * LD + c * kChunk;
      const int64_t row = row0 + r;
      if (c < nc) {
        const bool ok = row < R;
        const int64_t i = ok ? row / G : 0, h = ok ? hk * G + row % G : 0;
        cp_async16(d, ok ? q + b * sh.q_stride[0] + i * sh.q_stride[1] + h * sh.q_stride[2] + c * kChunk : q,
                   ok);
      } else {
        *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  } else {
    for (int idx = tid; idx < ROWS * HD; idx += nthr) {
      const int r = idx / HD, c = idx % HD;
      const int64_t row = row0 + r;
      T x = Elem<T>::from_f(0.f);
      if (row < R && c < D)
        x = q[b * sh.q_stride[0] + (row / G) * sh.q_stride[1] + (hk * G + row % G) * sh.q_stride[2] + c];
      sq[r * LD + c] = x;
    }
  }
}

// Zeroes this warp's ring (the head-dim padding columns that the loads never write).
__device__ __forceinline__ void dec_zero_ring(void* ring, size_t bytes, int lane) {
  uint4* r = static_cast<uint4*>(ring);
  for (size_t x = lane; x < bytes / 16; x += 32) r[x] = make_uint4(0u, 0u, 0u, 0u);
}

// The CTA's epilogue, threads tid of nthr: merges the nw warps' states (buf [nw, rows, ldc] float32
// outputs, ml [nw, rows, 2] running max (base 2) and sum) per row, then writes O / ℓ and the lse
// to o and lse (one split) or to the workspace (several). Rows past the lengths or not q_valid
// get O = 0 and lse = -inf.
template <typename T>
__device__ __forceinline__ void dec_finish(const DecodeArgs& a, const DecBlock& blk, const float* buf,
                                           const float* ml, int nw, int rows, int ldc, int tid, int nthr) {
  const FlashFwdParams& p = a.p;
  const AttnShape& sh = p.shape;
  const int64_t G = sh.H / sh.Hkv, R = G * sh.Tq;
  const int Dv = static_cast<int>(sh.Dv);
  const int nc = Dv > 0 ? (Dv + 3) / 4 : 1;  // 4-column items per row (one, for the lse, at Dv 0)
  for (int it = tid; it < rows * nc; it += nthr) {
    const int row = it / nc, c = (it - row * nc) * 4;
    const int64_t r = blk.row0 + row;
    if (r >= R) continue;
    const int64_t i = r / G, h = blk.hk * G + r % G;
    float m = neg_inf();
    for (int w = 0; w < nw; ++w) m = fmaxf(m, ml[(w * rows + row) * 2]);
    const float muse = m == neg_inf() ? 0.f : m;
    float l = 0.f, acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int w = 0; w < nw; ++w) {
      const float wt = fast_exp2(ml[(w * rows + row) * 2] - muse);
      l = fmaf(wt, ml[(w * rows + row) * 2 + 1], l);
      if (c < Dv) {
        const float4 x = *reinterpret_cast<const float4*>(buf + static_cast<size_t>(w * rows + row) * ldc + c);
        acc[0] = fmaf(wt, x.x, acc[0]);
        acc[1] = fmaf(wt, x.y, acc[1]);
        acc[2] = fmaf(wt, x.z, acc[2]);
        acc[3] = fmaf(wt, x.w, acc[3]);
      }
    }
    const bool ok = i < blk.qlim && (!p.mask.q_valid || p.mask.q_valid[blk.b * sh.Tq + i]);
    if (!ok) l = 0.f;
    const bool any = l > 0.f || l != l;
    const float inv = any ? 1.f / l : 0.f;
    const float lse = any ? (m + log2f(l)) * kLn2 : neg_inf();
    if (a.splits == 1) {
      if (c < Dv) {
        T* dst = static_cast<T*>(p.o) + blk.b * sh.o_stride[0] + i * sh.o_stride[1] + h * sh.o_stride[2] + c;
        if (a.vec_out) {
          store4(dst, acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv);
        } else {
          for (int e = 0; e < 4 && c + e < Dv; ++e) dst[e] = Elem<T>::from_f(acc[e] * inv);
        }
      }
      if (c == 0) p.lse[(blk.b * sh.H + h) * sh.Tq + i] = lse;
    } else {
      const int64_t x = ((static_cast<int64_t>(blk.split) * sh.B + blk.b) * sh.H + h) * sh.Tq + i;
      if (c < Dv)
        *reinterpret_cast<float4*>(a.ws_o + x * a.dvp + c) =
            make_float4(acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv);
      if (c == 0) a.ws_lse[x] = lse;
    }
  }
}

// ---- merge of the splits ---------------------------------------------------------------------
// Row (b, h, i) = row index (b * H + h) * Tq + i (the lse order) of the splits' partial results, one
// warp: lse = log Σ_s e^(lse_s), O = Σ_s e^(lse_s - lse) O_s, splits in order 0 .. S - 1. Shared by
// the merge kernel and the tuning builds' fused merge (the same arithmetic in the same order: the
// same bits). CG: loads through L2 only (partials that other CTAs of the running grid wrote).
template <typename T, bool CG = false>
__device__ __forceinline__ void dec_merge_row(const DecodeArgs& a, int64_t row, int lane) {
  const FlashFwdParams& p = a.p;
  const AttnShape& sh = p.shape;
  const int64_t nrows = sh.B * sh.H * sh.Tq;
  const int64_t i = row % sh.Tq, bh = row / sh.Tq, h = bh % sh.H, b = bh / sh.H;
  const float* ls = a.ws_lse + row;  // split s at ls[s * nrows]
  auto ld = [](const float* x) { return CG ? __ldcg(x) : *x; };
  float m = neg_inf();
  for (int s = 0; s < a.splits; ++s) {
    const float x = ld(ls + s * nrows);
    m = x > m || x != x ? x : m;  // a NaN sticks
  }
  const bool any = m != neg_inf();
  float lse = neg_inf();
  if (any) {
    float l = 0.f;
    for (int s = 0; s < a.splits; ++s) l += exp2f((ld(ls + s * nrows) - m) * kLog2e);
    lse = m + logf(l);
  }
  T* dst = static_cast<T*>(p.o) + b * sh.o_stride[0] + i * sh.o_stride[1] + h * sh.o_stride[2];
  const int Dv = static_cast<int>(sh.Dv);
  for (int c = lane * 4; c < Dv; c += 128) {
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    if (any) {
      for (int s = 0; s < a.splits; ++s) {
        const float wt = exp2f((ld(ls + s * nrows) - lse) * kLog2e);
        const float4* src = reinterpret_cast<const float4*>(a.ws_o + (s * nrows + row) * a.dvp + c);
        const float4 x = CG ? __ldcg(src) : *src;
        acc[0] = fmaf(wt, x.x, acc[0]);
        acc[1] = fmaf(wt, x.y, acc[1]);
        acc[2] = fmaf(wt, x.z, acc[2]);
        acc[3] = fmaf(wt, x.w, acc[3]);
      }
    }
    if (a.vec_out) {
      store4(dst + c, acc[0], acc[1], acc[2], acc[3]);
    } else {
      for (int e = 0; e < 4 && c + e < Dv; ++e) dst[c + e] = Elem<T>::from_f(acc[e]);
    }
  }
  if (lane == 0) p.lse[row] = lse;
}

// Programmatic dependent launch (sm_90+; no-ops elsewhere, and in a grid launched without the
// attribute): wait for the preceding grid's completion and memory; let the next grid launch.
__device__ __forceinline__ void dec_griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void dec_griddep_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Tuning builds' fused merge (all threads of the CTA, after dec_finish wrote this split's partials
// to the workspace): the CTA that completes its unit (b, hk, row tile) last merges the unit's rows
// in split order with dec_merge_row, in place of the merge kernel. Counters zeroed before the grid
// (PDL: wait for the zeroing grid before the first atomic). Ordering: each thread's partial stores,
// its fence, the barrier, thread 0's fence, then its atomicAdd (release); the last CTA's thread 0
// sees S - 1 earlier increments (a release sequence: every RMW of the counter reads the one
// before), fences (acquire), and the barrier passes that on to the threads that read the partials
// (L2 loads: nothing stale in L1).
template <typename T, bool PDL>
__device__ __forceinline__ void dec_fused_merge(const DecodeArgs& a, const DecBlock& blk, int* flag, int rows) {
  const AttnShape& sh = a.p.shape;
  __threadfence();
  __syncthreads();  // every thread's partials written and fenced; dec_finish's shared reads done
  if (threadIdx.x == 0) {
    __threadfence();
    if (PDL) dec_griddep_wait();
    unsigned* cnt = a.ws_cnt + blockIdx.x / a.splits;
    const bool last = atomicAdd(cnt, 1u) == static_cast<unsigned>(a.splits - 1);
    if (last) __threadfence();
    *flag = last ? 1 : 0;
  }
  __syncthreads();
  if (*flag == 0) return;
  const int64_t G = sh.H / sh.Hkv, R = G * sh.Tq;
  const int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int r = warp; r < rows; r += nw) {
    const int64_t row = blk.row0 + r;
    if (row >= R) break;
    const int64_t i = row / G, h = blk.hk * G + row % G;
    dec_merge_row<T, true>(a, (blk.b * sh.H + h) * sh.Tq + i, lane);
  }
}

// A warp's ring of ns stages (each a [16, LD] K tile, then a [16, LD] V tile): issue() copies the
// warp's next key tile, tile t0 + u * stride of the CTA's keys (u = 0 .. nu - 1), into the next
// slot and commits a group (an empty one past the last tile), so that after an issue
// cp_async_wait_dyn(ns - 1) means the oldest tile has landed; tile u sits in slot u % ns.
template <typename T, int HD, int LD, int HINT = 0, int KT = kDecKeys>
struct DecKvRing {
  T* ring;
  const T* k;
  const T* v;
  const AttnShape& sh;
  const DecBlock& blk;
  int64_t t0;
  int stride, nu, ns, D, Dv;
  bool vec;
  int lane;
  uint64_t policy;
  int u = 0, slot = 0;
  __device__ __forceinline__ void issue() {
    if (u < nu) {
      const int64_t j0 = blk.jstart + (t0 + static_cast<int64_t>(u) * stride) * KT;
      T* sk = ring + slot * (2 * KT * LD);
      dec_load_kv<T, HD, LD, HINT, KT>(sk, k, sh.k_stride, blk.b, blk.hk, j0, blk.kbeg, blk.kend, D, vec, lane,
                                       policy);
      dec_load_kv<T, HD, LD, HINT, KT>(sk + KT * LD, v, sh.v_stride, blk.b, blk.hk, j0, blk.kbeg, blk.kend, Dv,
                                       vec, lane, policy);
    }
    cp_async_commit();
    ++u;
    slot = slot + 1 == ns ? 0 : slot + 1;
  }
};

// ---- float16 / bfloat16: tensor cores ------------------------------------------------------
// Warp layout of S and O (m16n8 accumulators, g = lane / 4, tq = lane % 4): element [nt][e] is
// tile row g + 8 (e / 2), column nt * 8 + 2 tq + e % 2 (a key of the tile for S, a head-dim
// column for O).
// MODE (tuning builds' variants; 0 otherwise): bit 0, warp units: each warp is a unit of its own
// (see DecBlock), with its own Q tile, walking every key tile of its split, and finishes alone;
// bits 1-2: the L2 hint of the K / V copies (dec_cp16); bit 3 (kDecFused): the fused merge
// (dec_fused_merge) instead of the merge kernel; bit 4 (kDecKt32): key tiles of 32 keys (one
// online-softmax step, one wait per 32 keys; splits in 32-key tiles); bit 5 (kDecPdl): this grid
// lets the next one launch at its start (the merge kernel under PDL) and, with the fused merge,
// waits for the counter-zeroing grid before its first atomic.
constexpr int kDecFused = 8, kDecKt32 = 16, kDecPdl = 32;

// A warp's [16 rows, KT keys] tile S after Q Kᵀ (decode_tc_kernel's loop body and the load
// variants' decode_tc_tile): the scores (the full score function per element, or -inf by index
// where the tile crosses a row's limits, the scale then folded into the softmax's exp2), the
// online-softmax step on o / mrow / lrow, and P packed as the A fragments of O += P V (each two n8
// score tiles form one k16 fragment).
template <typename T, int KT, int ND>
__device__ __forceinline__ void dec_softmax_pack(const DecodeArgs& a, const DecBlock& blk, float (&s)[1][KT / 8][4],
                                                 int64_t j0, const int64_t (&hr)[2], const int64_t (&ir)[2],
                                                 const RowInfo (&ri)[2], float (&o)[1][ND][4], float (&mrow)[1][2],
                                                 float (&lrow)[1][2], float scale_log2, int tq,
                                                 uint32_t (&pa)[KT / 16][4]) {
  constexpr int NT = KT / 8, KH = KT / 16;
  const FlashFwdParams& p = a.p;
  float mul = 1.f;
  if (a.gen) {
#pragma unroll
    for (int x = 0; x < 2; ++x)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c)
          s[0][nt][2 * x + c] = score_elem<T>(s[0][nt][2 * x + c], p.mask, p.score, p.shape, blk.b, hr[x], ir[x],
                                              j0 + nt * 8 + 2 * tq + c, ri[x], nullptr);
  } else {
    mul = scale_log2;
    if (!(j0 >= blk.kin_lo && j0 + KT <= blk.kin_hi)) {
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const int64_t lo = ri[x].ok ? ri[x].kb - j0 : 0, hi = ri[x].ok ? ri[x].ke - j0 : 0;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int jl = nt * 8 + 2 * tq + c;
            if (jl < lo || jl >= hi) s[0][nt][2 * x + c] = neg_inf();
          }
      }
    }
  }
  fwd_online_softmax<1, NT, ND>(s, o, mrow, lrow, mul);
#pragma unroll
  for (int kh = 0; kh < KH; ++kh) {
    pa[kh][0] = Elem<T>::pack(s[0][2 * kh][0], s[0][2 * kh][1]);
    pa[kh][1] = Elem<T>::pack(s[0][2 * kh][2], s[0][2 * kh][3]);
    pa[kh][2] = Elem<T>::pack(s[0][2 * kh + 1][0], s[0][2 * kh + 1][1]);
    pa[kh][3] = Elem<T>::pack(s[0][2 * kh + 1][2], s[0][2 * kh + 1][3]);
  }
}

// The two rows g and g + 8 of a warp's 16-row tile (rows blk.row0 + g + 8x of the block's R
// (query, head) rows, G query heads per kv head): head hr, query position ir and visible keys ri;
// rows past R get zeros and an empty RowInfo. Shared by decode_tc_kernel and decode_async_kernel.
__device__ __forceinline__ void dec_rows(const FlashFwdParams& p, const AttnShape& sh, const DecBlock& blk, int g,
                                         int64_t R, int64_t G, int64_t (&hr)[2], int64_t (&ir)[2], RowInfo (&ri)[2]) {
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    const int64_t row = blk.row0 + g + 8 * x;
    const bool in = row < R;
    ir[x] = in ? row / G : 0;
    hr[x] = in ? blk.hk * G + row % G : 0;
    ri[x] = in ? row_info(p.mask, sh, blk.b, ir[x], blk.qlim, blk.klim) : RowInfo{0, 0, false};
  }
}

// A warp's partial state into shared memory for dec_finish: its O rows g and g + 8 into buf
// ([nw, RT, ldc] floats, row warp * RT + row) and their (m, l) into sML ([nw, RT, 2]; l summed over
// the quad first). Shared by decode_tc_kernel and decode_async_kernel.
template <int ND>
__device__ __forceinline__ void dec_store_partial(float* buf, float* sML, int ldc, int warp, int RT, int g, int tq,
                                                  const float (&o)[1][ND][4], const float (&mrow)[1][2],
                                                  const float (&lrow)[1][2]) {
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    const int row = g + 8 * x;
    const float l = warp_quad_sum(lrow[0][x]);
    float* dst = buf + static_cast<size_t>(warp * RT + row) * ldc;
#pragma unroll
    for (int nd = 0; nd < ND; ++nd)
      *reinterpret_cast<float2*>(dst + nd * 8 + 2 * tq) = make_float2(o[0][nd][2 * x], o[0][nd][2 * x + 1]);
    if (tq == 0) {
      sML[(warp * RT + row) * 2] = mrow[0][x];
      sML[(warp * RT + row) * 2 + 1] = l;
    }
  }
}

template <typename T, int HD, int MODE = 0>
__global__ void __launch_bounds__(kDecLaunchWarps * 32) decode_tc_kernel(const DecodeArgs a) {
  constexpr bool kUnits = (MODE & 1) != 0;
  constexpr int kHint = (MODE >> 1) & 3;
  constexpr bool kFused = (MODE & kDecFused) != 0, kPdl = (MODE & kDecPdl) != 0;
  static_assert(!(kUnits && kFused), "warp units finish per warp: no fused merge");
  constexpr int KT = (MODE & kDecKt32) ? 32 : kDecKeys, NT = KT / 8, KH = KT / 16;
  using L = DecSmem<HD, 2, kDecRowsTc, KT>;
  constexpr int RT = kDecRowsTc, LD = L::kLd, ND = HD / 8;
  constexpr bool kQRegs = HD <= 128;  // Q fragments in registers (HD 256: read from shared memory)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const FlashFwdParams& p = a.p;
  const AttnShape& sh = p.shape;
  const int nw = blockDim.x >> 5, ns = a.stages;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int64_t G = sh.H / sh.Hkv, R = G * sh.Tq;
  // Warp units: unit blockIdx.x * nw + warp of B * Hkv * row_tiles * splits (past the end: idle).
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * nw + warp;
  const bool active = !kUnits || unit < sh.B * sh.Hkv * a.row_tiles * a.splits;
  if (kPdl) dec_griddep_launch();
  const DecBlock blk = kUnits ? dec_block<KT>(a, RT, active ? unit : 0, true) : dec_block<KT>(a, RT, blockIdx.x);
  const int D = static_cast<int>(sh.D), Dv = static_cast<int>(sh.Dv);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  constexpr int kSlot = 2 * KT * LD;  // elements per stage: K tile, then V tile
  const int qn = kUnits ? nw : 1;                                                 // Q tiles
  T* sQ = reinterpret_cast<T*>(smem_raw + (kUnits ? warp * L::kQBytes : 0));     // [RT, LD]
  T* ring = reinterpret_cast<T*>(smem_raw + L::ring_off(qn)) + static_cast<size_t>(warp) * ns * kSlot;
  float* sML = reinterpret_cast<float*>(smem_raw + L::ml_off(nw, ns, qn));      // [nw, RT, 2]

  if (D < HD || Dv < HD) dec_zero_ring(ring, static_cast<size_t>(ns) * kSlot * sizeof(T), lane);
  __syncwarp();
  if (kUnits) {
    dec_load_q<T, HD, RT, LD>(sQ, p, blk.b, blk.hk, blk.row0, a.vec_in, lane, 32);
  } else {
    dec_load_q<T, HD, RT, LD>(sQ, p, blk.b, blk.hk, blk.row0, a.vec_in, threadIdx.x, blockDim.x);
  }
  cp_async_commit();

  // This thread's rows g and g + 8: head, position and visible keys.
  int64_t hr[2], ir[2];
  RowInfo ri[2];
  dec_rows(p, sh, blk, g, R, G, hr, ir, ri);

  // This warp's key tiles: t_lo + warp + u * nw, u < nu (warp units: t_lo + u); tile u in slot u % ns.
  const int64_t t0 = kUnits ? blk.t_lo : blk.t_lo + warp;
  const int tstride = kUnits ? 1 : nw;
  const int64_t mine = active ? blk.t_hi - t0 : 0;
  const int nu = mine > 0 ? static_cast<int>((mine + tstride - 1) / tstride) : 0;
  DecKvRing<T, HD, LD, kHint, KT> kv{ring, k, v, sh, blk, t0, tstride, nu, ns, D, Dv, a.vec_in, lane,
                                 dec_l2_policy<kHint>()};
  for (int x = 0; x < ns - 1; ++x) kv.issue();
  cp_async_wait_dyn(ns - 1);  // this thread's Q copies (the oldest group) landed ...
  __syncthreads();            // ... and every thread's
  uint32_t qa[kQRegs ? HD / 16 : 1][4];
  if (kQRegs) {
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk)
      ldsm_x4(qa[kQRegs ? kk : 0], sQ + (lane & 15) * LD + kk * 16 + (lane >> 4) * 8);
  }

  float o[1][ND][4];
  float mrow[1][2] = {{neg_inf(), neg_inf()}}, lrow[1][2] = {{0.f, 0.f}};
#pragma unroll
  for (int nd = 0; nd < ND; ++nd)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[0][nd][e] = 0.f;
  const float scale_log2 = p.score.scale * kLog2e;

  int slot = 0;
  for (int u = 0; u < nu; ++u) {
    kv.issue();                 // tile u + ns - 1, into the slot that tile u - 1 used
    cp_async_wait_dyn(ns - 1);  // tile u landed (this lane's copies) ...
    __syncwarp();               // ... and the other lanes'
    const T* sk = ring + slot * kSlot;
    const T* sv = sk + KT * LD;
    const int64_t j0 = blk.jstart + (t0 + static_cast<int64_t>(u) * tstride) * KT;

    // S [16 rows, KT keys] = Q Kᵀ: A = Q [row][d], B = K stored [key][d] (col-major Kᵀ).
    float s[1][NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[0][nt][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t af[4], bb[4];
      if (kQRegs) {
#pragma unroll
        for (int e = 0; e < 4; ++e) af[e] = qa[kQRegs ? kk : 0][e];
      } else {
        ldsm_x4(af, sQ + (lane & 15) * LD + kk * 16 + (lane >> 4) * 8);
      }
#pragma unroll
      for (int kh = 0; kh < KH; ++kh) {
        ldsm_x4(bb, sk + (kh * 16 + (lane & 7) + (lane >> 4) * 8) * LD + kk * 16 + ((lane >> 3) & 1) * 8);
        Elem<T>::mma(s[0][2 * kh], af, bb);
        Elem<T>::mma(s[0][2 * kh + 1], af, bb + 2);
      }
    }

    // Scores, softmax and P: dec_softmax_pack. O += P V: B = V [key][d] through ldmatrix.trans.
    uint32_t pa[KH][4];
    dec_softmax_pack<T, KT, ND>(a, blk, s, j0, hr, ir, ri, o, mrow, lrow, scale_log2, tq, pa);
#pragma unroll
    for (int nd2 = 0; nd2 < HD / 16; ++nd2) {
#pragma unroll
      for (int kh = 0; kh < KH; ++kh) {
        uint32_t bb[4];
        ldsm_x4_t(bb, sv + (kh * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + nd2 * 16 + (lane >> 4) * 8);
        Elem<T>::mma(o[0][2 * nd2], pa[kh], bb);
        Elem<T>::mma(o[0][2 * nd2 + 1], pa[kh], bb + 2);
      }
    }
    __syncwarp();  // every lane is done with this slot before it is refilled
    slot = slot + 1 == ns ? 0 : slot + 1;
  }

  cp_async_wait<0>();
  __syncthreads();  // every warp is done with its ring: the rings take the warps' outputs
  float* buf = reinterpret_cast<float*>(smem_raw + L::ring_off(qn));  // [nw, RT, kLdc]
  dec_store_partial(buf, sML, L::kLdc, warp, RT, g, tq, o, mrow, lrow);
  if (kUnits) {
    __syncwarp();
    if (active)
      dec_finish<T>(a, blk, buf + static_cast<size_t>(warp) * RT * L::kLdc, sML + warp * RT * 2, 1, RT, L::kLdc,
                    lane, 32);
  } else {
    __syncthreads();
    dec_finish<T>(a, blk, buf, sML, nw, RT, L::kLdc, threadIdx.x, blockDim.x);
    if constexpr (kFused) {
      if (a.splits > 1) dec_fused_merge<T, kPdl>(a, blk, reinterpret_cast<int*>(sML), RT);
    }
  }
}

// ---- float32: CUDA cores ---------------------------------------------------------------------
// Scores: lane (kk = lane % 16, half = lane / 16) dots key kk with the 8 rows over the head-dim
// chunks 8c + 4 half .. + 3 (float4), then one shuffle adds the halves. P V: lane owns head-dim
// columns lane + 32 cc.
template <int HD>
__global__ void __launch_bounds__(kDecLaunchWarps * 32) decode_simt_kernel(const DecodeArgs a) {
  using L = DecSmem<HD, 4, kDecRowsSimt>;
  constexpr int RT = kDecRowsSimt, KT = kDecKeys, LD = L::kLd, NC = HD / 32;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const FlashFwdParams& p = a.p;
  const AttnShape& sh = p.shape;
  const int nw = blockDim.x >> 5, ns = a.stages;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const DecBlock blk = dec_block(a, RT, blockIdx.x);
  const int64_t G = sh.H / sh.Hkv, R = G * sh.Tq;
  const int D = static_cast<int>(sh.D), Dv = static_cast<int>(sh.Dv);
  const float* k = static_cast<const float*>(p.k);
  const float* v = static_cast<const float*>(p.v);
  constexpr int kSlot = 2 * KT * LD;
  float* sQ = reinterpret_cast<float*>(smem_raw);  // [RT, LD]
  float* ring = reinterpret_cast<float*>(smem_raw + L::kQBytes) + static_cast<size_t>(warp) * ns * kSlot;
  float* sML = reinterpret_cast<float*>(smem_raw + L::ml_off(nw, ns));
  RowMeta* meta = reinterpret_cast<RowMeta*>(smem_raw + L::meta_off(nw, ns));  // [RT]

  if (D < HD || Dv < HD) dec_zero_ring(ring, static_cast<size_t>(ns) * kSlot * sizeof(float), lane);
  __syncwarp();
  dec_load_q<float, HD, RT, LD>(sQ, p, blk.b, blk.hk, blk.row0, a.vec_in, threadIdx.x, blockDim.x);
  cp_async_commit();
  if (threadIdx.x < RT) {
    const int64_t row = blk.row0 + threadIdx.x;
    RowMeta mt{0, 0, 0, 0, 0, 0};
    if (row < R) {
      mt.i = row / G;
      mt.h = blk.hk * G + row % G;
      const RowInfo ri = row_info(p.mask, sh, blk.b, mt.i, blk.qlim, blk.klim);
      mt.kb = ri.kb;
      mt.ke = ri.ke;
      mt.ok = ri.ok ? 1 : 0;
    }
    meta[threadIdx.x] = mt;
  }

  const int64_t mine = blk.t_hi - blk.t_lo - warp;
  const int nu = mine > 0 ? static_cast<int>((mine + nw - 1) / nw) : 0;
  DecKvRing<float, HD, LD> kv{ring, k, v, sh, blk, blk.t_lo + warp, nw, nu, ns, D, Dv, a.vec_in, lane, 0};
  for (int x = 0; x < ns - 1; ++x) kv.issue();
  cp_async_wait_dyn(ns - 1);
  __syncthreads();  // Q and the row metadata are in place

  const int kk = lane & 15, half = lane >> 4;
  const int dchunks = (D + 7) / 8;  // 8-column chunks (one float4 per half); the padding is zero
  float m[RT], l[RT], o[RT][NC];
#pragma unroll
  for (int r = 0; r < RT; ++r) {
    m[r] = neg_inf();
    l[r] = 0.f;
#pragma unroll
    for (int cc = 0; cc < NC; ++cc) o[r][cc] = 0.f;
  }

  int slot = 0;
  for (int u = 0; u < nu; ++u) {
    kv.issue();
    cp_async_wait_dyn(ns - 1);
    __syncwarp();
    const float* sk = ring + slot * kSlot;
    const float* sv = sk + KT * LD;
    const int64_t j0 = blk.jstart + (blk.t_lo + warp + static_cast<int64_t>(u) * nw) * KT;

    float acc[RT];
#pragma unroll
    for (int r = 0; r < RT; ++r) acc[r] = 0.f;
    const float* krow = sk + kk * LD + 4 * half;
#pragma unroll 2
    for (int c = 0; c < dchunks; ++c) {
      const float4 kv = *reinterpret_cast<const float4*>(krow + 8 * c);
#pragma unroll
      for (int r = 0; r < RT; ++r) {
        const float4 qv = *reinterpret_cast<const float4*>(sQ + r * LD + 8 * c + 4 * half);
        acc[r] = fmaf(qv.x, kv.x, fmaf(qv.y, kv.y, fmaf(qv.z, kv.z, fmaf(qv.w, kv.w, acc[r]))));
      }
    }
    // z = log2e * logit for key j0 + kk (both halves hold it), online softmax over the 16 keys.
    float pz[RT];
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      const float x = acc[r] + __shfl_xor_sync(0xffffffffu, acc[r], 16);
      const RowMeta& mt = meta[r];
      const RowInfo ri{mt.kb, mt.ke, mt.ok != 0};
      const float z = score_elem<float>(x, p.mask, p.score, sh, blk.b, mt.h, mt.i, j0 + kk, ri, nullptr);
      float mx = z;
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float mnew = fmaxf(m[r], mx);
      const float muse = mnew == neg_inf() ? 0.f : mnew;
      const float alpha = exp2f(m[r] - muse);
      const float e = exp2f(z - muse);
      float sum = e;
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      l[r] = l[r] * alpha + sum;
      m[r] = mnew;
#pragma unroll
      for (int cc = 0; cc < NC; ++cc) o[r][cc] *= alpha;
      pz[r] = e;
    }
    // O += P V
#pragma unroll 4
    for (int j = 0; j < KT; ++j) {
      float vv[NC];
#pragma unroll
      for (int cc = 0; cc < NC; ++cc) vv[cc] = sv[j * LD + lane + 32 * cc];
#pragma unroll
      for (int r = 0; r < RT; ++r) {
        const float pj = __shfl_sync(0xffffffffu, pz[r], j);
#pragma unroll
        for (int cc = 0; cc < NC; ++cc) o[r][cc] = fmaf(pj, vv[cc], o[r][cc]);
      }
    }
    __syncwarp();
    slot = slot + 1 == ns ? 0 : slot + 1;
  }

  cp_async_wait<0>();
  __syncthreads();
  float* buf = reinterpret_cast<float*>(smem_raw + L::kQBytes);  // [nw, RT, kLdc]
#pragma unroll
  for (int r = 0; r < RT; ++r) {
#pragma unroll
    for (int cc = 0; cc < NC; ++cc) buf[static_cast<size_t>(warp * RT + r) * L::kLdc + lane + 32 * cc] = o[r][cc];
    if (lane == 0) {
      sML[(warp * RT + r) * 2] = m[r];
      sML[(warp * RT + r) * 2 + 1] = l[r];
    }
  }
  __syncthreads();
  dec_finish<float>(a, blk, buf, sML, nw, RT, L::kLdc, threadIdx.x, blockDim.x);
}

// ---- merge kernel ------------------------------------------------------------------------------
// One warp per row (dec_merge_row). PDL (tuning builds): launched as a programmatic dependent of the
// split kernel, it waits for that grid's completion here.
template <typename T, bool PDL = false>
__global__ void __launch_bounds__(128) decode_merge_kernel(const DecodeArgs a) {
  if (PDL) dec_griddep_wait();
  const AttnShape& sh = a.p.shape;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 4 + (threadIdx.x >> 5);
  if (row >= sh.B * sh.H * sh.Tq) return;
  dec_merge_row<T>(a, row, threadIdx.x & 31);
}

#ifdef FA_TUNING
// Tuning builds' fused merge: the unit counters to zero before the split kernel, which may start
// at once (PDL) and waits for this grid before its first atomic.
__global__ void dec_zero_counters(unsigned* cnt, int64_t n) {
  dec_griddep_launch();
  for (int64_t x = threadIdx.x; x < n; x += blockDim.x) cnt[x] = 0u;
}
#endif
#if FA_DECODE_ASYNC

// ---- K/V brought by the Hopper copy engine (FA_DECODE_LOAD; LOAD 2 the default on 9.x) -------
// The H200 figures (benchmarks/RESULTS.md "Decoding") put the default kernel's steady state at
// about 4.1 TB/s (FA2 4.7, cuDNN 4.6 at B = 64) whatever the warps x stages (4x2 and 4x3 give the
// same, 73 and 107 KiB), the L2 hints or the layout ([B, Hkv, Tk, D] +2.5 %): not a lack of bytes
// in flight but the cost of moving them, 16-byte cp.async by every thread (per 16-key tile and
// warp, 16 copies per thread, each with its own 64-bit address and bounds arithmetic, through the
// LSU and the L1's miss tracking). These variants keep everything else of decode_tc_kernel (the
// CTA's work, the tile of each warp, the arithmetic of decode_tc_tile below: o and lse bit for bit
// the default's at the same warps and splits) and change only how K and V reach shared memory:
//   LOAD 1 (bulk): cp.async.bulk (the copy engine's 1D form, no tensor map) of whole key rows: lane
//     r < 16 copies K row r of the tile, lane 16 + r V row r (256 bytes at D = 128), completing on
//     the slot's mbarrier (lane 0 announces the bytes first); one copy instruction per lane per tile
//     instead of 16, no address arithmetic per 16 bytes, and the padded row layout stays (rows
//     outside [kbeg, kend) are zeroed by their lane instead of copied).
//   LOAD 2 (tma): the tensor copy engine (cp.async.bulk.tensor) over K and V as [B, Tk, Hkv, D]
//     (sm90_host.cuh's tma_map_rows, box {64, 1, 16, 1}): lane 0 of each warp issues 4 boxes per
//     tile (K and V, two 64-column panels each, 2 KiB) on the slot's mbarrier; 128-byte-swizzled
//     panels (sm90_ptx.cuh's layout: the ldmatrix rows of a phase land in 8 distinct 16-byte bank
//     groups, conflict-free like the padded rows). Rows past Tk arrive as zeros; rows inside Tk but
//     outside [kbeg, kend) (first / last tile only) are read and then zeroed by the warp.
//   LOAD 3 (tma_cta): one stage per CTA shared by its warps: nw x 16 keys per stage (4 warps: 64
//     keys, 32 KiB), 4 boxes of nw x 16 rows issued by a producer warp (one more warp; full / empty
//     mbarriers per stage, FlashAttention-3's pattern); warp w computes rows 16 w .. 16 w + 15 of
//     each stage, i.e. the same tiles t_lo + w + u nw as the default. Fewer, larger transactions
//     (8 KiB boxes, the CTA's keys in one run), and the loads never wait behind a warp's softmax.
// Not handled (the plan declines to the default kernel): other head-dim buckets or float32,
// q / k / v not 16-byte aligned (vec_in) or D, Dv < 8, a device other than compute capability 9.x
// or a build without sm_90 code (FA_HAS_SM90), a tensor map the driver refuses; with
// FA_DECODE_MODE or FA_DECODE_KT=32. Every mask kind, both 16-bit dtypes and the merge variants
// (FA_DECODE_MERGE, MODE bits kDecFused / kDecPdl) work as in the default.
constexpr int kDecLoadBulk = 1, kDecLoadTma = 2, kDecLoadTmaCta = 3;

// Shared memory of the load variants (16-bit, HD 128, RT = 16 rows, 16-key tiles), byte offsets:
//   bulk: DecSmem's layout, then nw x ns mbarriers (slot s of warp w: w * ns + s).
//   tma / tma_cta: from a 1024-byte aligned base (alloc has 1 KiB of slack): the ring (tma: nw x
//   ns slots of 8 KiB per warp, [K panel 0 | K panel 1 | V panel 0 | V panel 1] of [16, 64] each;
//   tma_cta: ns stages of nw x 8 KiB, the same four panels of [nw x 16, 64]), the Q tile [RT, LD],
//   (m, ℓ) [nw, RT, 2], the mbarriers (tma: nw x ns; tma_cta: full[ns], then empty[ns]).
// After the main loop the ring takes the warps' outputs [nw, RT, kLdc] float32 (ns >= 2: fits).
struct DecAsyncLayout {
  uint32_t ring, q, ml, bars, bytes, alloc;
};
__host__ __device__ __forceinline__ DecAsyncLayout dec_async_layout(int load, int nw, int ns) {
  using L = DecSmem<128, 2, kDecRowsTc>;
  DecAsyncLayout y;
  if (load == kDecLoadBulk) {
    y.q = 0;
    y.ring = static_cast<uint32_t>(L::ring_off());
    y.ml = static_cast<uint32_t>(L::ml_off(nw, ns));
    y.bars = static_cast<uint32_t>((L::bytes(nw, ns) + 7) / 8 * 8);
    y.bytes = y.bars + 8u * nw * ns;
    y.alloc = y.bytes;
  } else {
    y.ring = 0;
    y.q = 8192u * nw * ns;
    y.ml = y.q + static_cast<uint32_t>(L::kQBytes);
    y.bars = y.ml + static_cast<uint32_t>(nw * kDecRowsTc * 2 * sizeof(float));
    y.bytes = y.bars + 8u * (load == kDecLoadTmaCta ? 2 * ns : nw * ns);
    y.alloc = y.bytes + 1024u;
  }
  return y;
}

// One 16-key tile of a warp: decode_tc_kernel's loop body for KT = 16 and Q in registers (HD <=
// 128), the same operations in the same order (the same bits), with the K / V shared-memory
// addresses from kaddr(row, chunk) / vaddr(row, chunk): the 16-byte chunk `chunk` (columns
// 8 chunk .. 8 chunk + 7) of tile row `row`.
template <typename T, int HD, typename KA, typename VA>
__device__ __forceinline__ void decode_tc_tile(const DecodeArgs& a, const DecBlock& blk, const uint32_t (&qa)[HD / 16][4],
                                               KA kaddr, VA vaddr, int64_t j0, const int64_t (&hr)[2],
                                               const int64_t (&ir)[2], const RowInfo (&ri)[2],
                                               float (&o)[1][HD / 8][4], float (&mrow)[1][2], float (&lrow)[1][2],
                                               float scale_log2, int lane) {
  constexpr int KT = kDecKeys, NT = KT / 8, ND = HD / 8;
  const int tq = lane & 3;
  float s[1][NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[0][nt][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    uint32_t af[4], bb[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) af[e] = qa[kk][e];
    ldsm_x4(bb, kaddr((lane & 7) + (lane >> 4) * 8, kk * 2 + ((lane >> 3) & 1)));
    Elem<T>::mma(s[0][0], af, bb);
    Elem<T>::mma(s[0][1], af, bb + 2);
  }
  uint32_t pa[1][4];
  dec_softmax_pack<T, KT, ND>(a, blk, s, j0, hr, ir, ri, o, mrow, lrow, scale_log2, tq, pa);
#pragma unroll
  for (int nd2 = 0; nd2 < HD / 16; ++nd2) {
    uint32_t bb[4];
    ldsm_x4_t(bb, vaddr((lane & 7) + ((lane >> 3) & 1) * 8, nd2 * 2 + (lane >> 4)));
    Elem<T>::mma(o[0][2 * nd2], pa[0], bb);
    Elem<T>::mma(o[0][2 * nd2 + 1], pa[0], bb + 2);
  }
}

// The load variants' kernel (LOAD 1-3 above; MODE: the merge bits kDecFused / kDecPdl as in
// decode_tc_kernel). Warps: nw = blockDim.x / 32 compute warps, plus the producer warp (the last)
// for tma_cta (at most kDecLaunchWarps warps in all: a bound of 288 threads would cap ptxas at 168
// registers, with spills). tmk / tmv: K and V tensor maps (box rows 16 for tma, nw x 16 for tma_cta; unused by
// bulk). Device code for sm_90 and later only (TMA, cp.async.bulk, mbarrier transaction counts);
// the host launches it on compute capability 9.x alone.
template <typename T, int HD, int LOAD, int MODE>
__global__ void __launch_bounds__(kDecLaunchWarps * 32)
    decode_async_kernel(const DecodeArgs a, const __grid_constant__ CUtensorMap tmk,
                        const __grid_constant__ CUtensorMap tmv) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  static_assert(HD == 128 && sizeof(T) == 2, "16-bit, head-dim bucket 128");
  static_assert(LOAD >= kDecLoadBulk && LOAD <= kDecLoadTmaCta, "LOAD 1-3");
  constexpr bool kFused = (MODE & kDecFused) != 0, kPdl = (MODE & kDecPdl) != 0;
  constexpr bool kSwz = LOAD != kDecLoadBulk;     // 128-byte-swizzled panels (tensor maps)
  constexpr bool kProd = LOAD == kDecLoadTmaCta;  // producer warp, CTA-wide stages
  using L = DecSmem<HD, 2, kDecRowsTc>;
  constexpr int RT = kDecRowsTc, KT = kDecKeys, LD = L::kLd, ND = HD / 8;
  constexpr uint32_t kPanel = KT * 128;  // bytes of a [16 rows, 64 columns] panel
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const FlashFwdParams& p = a.p;
  const AttnShape& sh = p.shape;
  const int nw = static_cast<int>(blockDim.x >> 5) - (kProd ? 1 : 0), ns = a.stages;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const bool producer = kProd && warp == nw;
  const int64_t G = sh.H / sh.Hkv, R = G * sh.Tq;
  if (kPdl) dec_griddep_launch();
  const DecBlock blk = dec_block(a, RT, blockIdx.x);
  const int D = static_cast<int>(sh.D), Dv = static_cast<int>(sh.Dv);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const DecAsyncLayout lay = dec_async_layout(LOAD, nw, ns);
  unsigned char* base = smem_raw;
  if (kSwz) base += (1024u - smem_addr(smem_raw) % 1024u) % 1024u;
  T* sQ = reinterpret_cast<T*>(base + lay.q);  // [RT, LD]
  unsigned char* ring = base + lay.ring;
  float* sML = reinterpret_cast<float*>(base + lay.ml);  // [nw, RT, 2]
  const uint32_t bar0 = smem_addr(base + lay.bars);
  // Stage geometry: bytes per slot and per panel, the first row of this warp's tile in a panel.
  const uint32_t pst = kProd ? nw * kPanel : kPanel;  // panel bytes (swizzled layouts)
  const int r0 = kProd ? KT * warp : 0;

  if (threadIdx.x == 0) {
    const int nb = kProd ? 2 * ns : nw * ns;
    for (int i = 0; i < nb; ++i) sm90::mbar_init(bar0 + 8 * i, kProd && i >= ns ? nw : 1);
    sm90::mbar_fence_init();
  }
  if (LOAD == kDecLoadBulk && (D < HD || Dv < HD)) {
    // Head-dim padding columns (the copies write D / Dv columns); then ordered before the copies.
    dec_zero_ring(ring + static_cast<size_t>(warp) * ns * L::kStageBytes, static_cast<size_t>(ns) * L::kStageBytes,
                  lane);
    sm90::fence_proxy_async();
  }
  __syncthreads();  // barriers initialized (and visible to the copy engine)
  dec_load_q<T, HD, RT, LD>(sQ, p, blk.b, blk.hk, blk.row0, a.vec_in, threadIdx.x, blockDim.x);
  cp_async_commit();

  int64_t hr[2], ir[2];
  RowInfo ri[2];
  dec_rows(p, sh, blk, g, R, G, hr, ir, ri);

  // This warp's key tiles t_lo + warp + u * nw, u < nu (the default's); tile u in slot u % ns, its
  // (u / ns)-th use (mbarrier parity (u / ns) & 1). tma_cta: stage u holds tiles t_lo + u * nw ..
  // + nw - 1, nst stages.
  const int64_t t0 = blk.t_lo + warp;
  const int64_t mine = producer ? 0 : blk.t_hi - t0;
  const int nu = mine > 0 ? static_cast<int>((mine + nw - 1) / nw) : 0;
  const int64_t all = blk.t_hi - blk.t_lo;
  const int nst = all > 0 ? static_cast<int>((all + nw - 1) / nw) : 0;
  const int cb = static_cast<int>(blk.b), chk = static_cast<int>(blk.hk);

  // bulk / tma: tile u of this warp into its slot (u < nu; lane 0 announces the bytes first).
  auto issue = [&](int u) {
    if (u >= nu) return;
    const int slot = u % ns;
    const int64_t j0 = blk.jstart + (t0 + static_cast<int64_t>(u) * nw) * KT;
    const uint32_t bar = bar0 + 8 * (warp * ns + slot);
    if constexpr (LOAD == kDecLoadBulk) {
      unsigned char* st = ring + static_cast<size_t>(warp * ns + slot) * L::kStageBytes;
      if (lane == 0) {
        const int64_t lo = j0 > blk.kbeg ? j0 : blk.kbeg, hi = j0 + KT < blk.kend ? j0 + KT : blk.kend;
        sm90::mbar_arrive_expect_tx(bar, static_cast<uint32_t>(hi - lo) * static_cast<uint32_t>(D + Dv) * 2u);
      }
      __syncwarp();
      const bool isv = lane >= 16;
      const int r = lane & 15, n = isv ? Dv : D;
      const int64_t t = j0 + r;
      unsigned char* dst = st + (isv ? KT * LD * 2 : 0) + r * LD * 2;
      if (t >= blk.kbeg && t < blk.kend) {
        const int64_t* xs = isv ? sh.v_stride : sh.k_stride;
        const T* src = (isv ? v : k) + blk.b * xs[0] + t * xs[1] + blk.hk * xs[2];
        sm90::bulk_load(smem_addr(dst), src, static_cast<uint32_t>(n) * 2u, bar);
      } else {
        for (int c = 0; c < n / 8; ++c) reinterpret_cast<uint4*>(dst)[c] = make_uint4(0u, 0u, 0u, 0u);
        sm90::fence_proxy_async();  // before a later copy into the same row
      }
    } else if constexpr (LOAD == kDecLoadTma) {
      if (lane == 0) {
        const uint32_t d = smem_addr(ring + static_cast<size_t>(warp * ns + slot) * 4 * kPanel);
        const int j = static_cast<int>(j0);
        sm90::mbar_arrive_expect_tx(bar, 4 * kPanel);
        sm90::tma_load_4d(d, &tmk, bar, 0, chk, j, cb);
        sm90::tma_load_4d(d + kPanel, &tmk, bar, 64, chk, j, cb);
        sm90::tma_load_4d(d + 2 * kPanel, &tmv, bar, 0, chk, j, cb);
        sm90::tma_load_4d(d + 3 * kPanel, &tmv, bar, 64, chk, j, cb);
      }
    }
  };
  // tma_cta (producer warp, lane 0): stage u into slot u % ns once its previous use is released.
  auto issue_stage = [&](int u) {
    const int slot = u % ns;
    const uint32_t full = bar0 + 8 * slot;
    if (u >= ns) sm90::mbar_wait(bar0 + 8 * (ns + slot), ((u / ns) - 1) & 1);
    const uint32_t d = smem_addr(ring) + static_cast<uint32_t>(slot) * 4 * pst;
    const int j = static_cast<int>(blk.jstart + (blk.t_lo + static_cast<int64_t>(u) * nw) * KT);
    sm90::mbar_arrive_expect_tx(full, 4 * pst);
    sm90::tma_load_4d(d, &tmk, full, 0, chk, j, cb);
    sm90::tma_load_4d(d + pst, &tmk, full, 64, chk, j, cb);
    sm90::tma_load_4d(d + 2 * pst, &tmv, full, 0, chk, j, cb);
    sm90::tma_load_4d(d + 3 * pst, &tmv, full, 64, chk, j, cb);
  };

  // Prologue: every slot filled (ns tiles / stages in flight), overlapping the Q load.
  if constexpr (kProd) {
    if (producer && lane == 0) {
      sm90::tma_prefetch_map(&tmk);
      sm90::tma_prefetch_map(&tmv);
      for (int u = 0; u < nst && u < ns; ++u) issue_stage(u);
    }
    __syncwarp();
  } else {
    if (kSwz && lane == 0 && nu > 0) {
      sm90::tma_prefetch_map(&tmk);
      sm90::tma_prefetch_map(&tmv);
    }
    for (int u = 0; u < ns; ++u) issue(u);
  }
  cp_async_wait<0>();  // this thread's Q copies landed ...
  __syncthreads();     // ... and every thread's

  float o[1][ND][4];
  float mrow[1][2] = {{neg_inf(), neg_inf()}}, lrow[1][2] = {{0.f, 0.f}};
#pragma unroll
  for (int nd = 0; nd < ND; ++nd)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[0][nd][e] = 0.f;
  if (producer) {
    if (lane == 0)
      for (int u = ns; u < nst; ++u) issue_stage(u);
    __syncwarp();
  } else {
    uint32_t qa[HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) ldsm_x4(qa[kk], sQ + (lane & 15) * LD + kk * 16 + (lane >> 4) * 8);
    const float scale_log2 = p.score.scale * kLog2e;

    for (int u = 0; u < nu; ++u) {
      const int slot = u % ns;
      const int64_t j0 = blk.jstart + (t0 + static_cast<int64_t>(u) * nw) * KT;
      sm90::mbar_wait(bar0 + 8 * (kProd ? slot : warp * ns + slot), (u / ns) & 1);
      __syncwarp();
      unsigned char* kt;
      if constexpr (LOAD == kDecLoadBulk) {
        kt = ring + static_cast<size_t>(warp * ns + slot) * L::kStageBytes;
      } else if constexpr (LOAD == kDecLoadTma) {
        kt = ring + static_cast<size_t>(warp * ns + slot) * 4 * kPanel;
      } else {
        kt = ring + static_cast<size_t>(slot) * 4 * pst;
      }
      if constexpr (kSwz) {
        // Rows inside Tk but outside [kbeg, kend) arrived with the box: zero them (first / last tile).
        if (j0 < blk.kbeg || j0 + KT > blk.kend) {
          for (int x = lane; x < KT * 32; x += 32) {  // (row, panel 0-3, chunk)
            const int r = x & 15, pn = x >> 7, c = (x >> 4) & 7;
            const int64_t t = j0 + r;
            if (t < blk.kbeg || t >= blk.kend)
              *reinterpret_cast<uint4*>(kt + pn * pst + (r0 + r) * 128 + c * 16) = make_uint4(0u, 0u, 0u, 0u);
          }
          sm90::fence_proxy_async();  // before the copy engine refills the slot
          __syncwarp();
        }
        // Chunk c of row r (of this warp's 16) in panel c / 8: swizzled 16-byte position (c % 8) ^ (r % 8).
        auto kaddr = [&](int r, int c) {
          return reinterpret_cast<const T*>(kt + (c >> 3) * pst + (r0 + r) * 128 + (((c & 7) ^ (r & 7)) << 4));
        };
        auto vaddr = [&](int r, int c) {
          return reinterpret_cast<const T*>(kt + (2 + (c >> 3)) * pst + (r0 + r) * 128 + (((c & 7) ^ (r & 7)) << 4));
        };
        decode_tc_tile<T, HD>(a, blk, qa, kaddr, vaddr, j0, hr, ir, ri, o, mrow, lrow, scale_log2, lane);
      } else {
        const T* sk = reinterpret_cast<const T*>(kt);
        const T* sv = sk + KT * LD;
        auto kaddr = [&](int r, int c) { return sk + r * LD + c * 8; };
        auto vaddr = [&](int r, int c) { return sv + r * LD + c * 8; };
        decode_tc_tile<T, HD>(a, blk, qa, kaddr, vaddr, j0, hr, ir, ri, o, mrow, lrow, scale_log2, lane);
      }
      __syncwarp();  // every lane is done with this slot
      if constexpr (kProd) {
        if (lane == 0) sm90::mbar_arrive(bar0 + 8 * (ns + slot));
      } else {
        issue(u + ns);
      }
    }
  }

  // Every copy a warp issued was waited for by it (tma_cta: warp 0 waits for every stage).
  __syncthreads();  // every warp is done with the ring: it takes the warps' outputs
  float* buf = reinterpret_cast<float*>(ring);  // [nw, RT, kLdc]
  if (!producer) {
    dec_store_partial(buf, sML, L::kLdc, warp, RT, g, tq, o, mrow, lrow);
  }
  __syncthreads();
  dec_finish<T>(a, blk, buf, sML, nw, RT, L::kLdc, threadIdx.x, blockDim.x);
  if constexpr (kFused) {
    if (a.splits > 1) dec_fused_merge<T, kPdl>(a, blk, reinterpret_cast<int*>(sML), RT);
  }
#endif
}
#endif

// ---- host side ---------------------------------------------------------------------------------

struct DevInfo {
  int sms = 0, smem_block = 0, smem_sm = 0;  // SMs, opt-in shared memory per CTA and per SM
  int major = 0;                             // compute capability (PDL from 9)
};

// The current device's figures, queried once per device.
cudaError_t dec_device_info(DevInfo* out) {
  static std::mutex mu;
  static std::map<int, DevInfo> cache;
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(dev);
  if (it != cache.end()) {
    *out = it->second;
    return cudaSuccess;
  }
  DevInfo d;
  err = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&d.smem_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&d.smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, dev);
  if (err != cudaSuccess) return err;
  cache[dev] = d;
  *out = d;
  return cudaSuccess;
}

// CTAs of `kernel` per SM with this block size and shared memory, once per (kernel, device, size).
int dec_ctas_per_sm(const void* kernel, int threads, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int, size_t>, int> cache;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 1;
  const auto key = std::make_tuple(kernel, dev, threads, smem);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem) != cudaSuccess) {
    cudaGetLastError();  // not sticky; count one
    n = 1;
  }
  if (n < 1) n = 1;
  cache[key] = n;
  return n;
}

struct DecCfg {
  int warps, stages;
  size_t smem;
  int mode = 0;   // decode_tc_kernel's MODE (tuning builds; 0 otherwise)
  int merge = 0;  // tuning builds, several splits: 0 merge kernel, 1 merge kernel under PDL, 2 fused
                  // merge (counters zeroed by cudaMemsetAsync), 3 fused (zeroed by a kernel, PDL)
  int load = 0;   // tuning builds: 0 cp.async (decode_tc_kernel), else decode_async_kernel's LOAD
};

// Warps and stages for this GPU: the most stages (up to kDecMaxStages) with 4 warps and two CTAs
// per SM, else one CTA per SM, else fewer warps.
template <int HD, int ESIZE, int ROWS, int KT = kDecKeys>
DecCfg dec_config_auto(const DevInfo& di) {
  using L = DecSmem<HD, ESIZE, ROWS, KT>;
  for (int nw = kDecMaxWarps; nw >= 1; nw /= 2)
    for (int per_sm = 2; per_sm >= 1; --per_sm) {
      size_t budget = static_cast<size_t>(di.smem_sm) / per_sm;
      budget = budget > 1024 ? budget - 1024 : 0;  // the runtime's reserve per CTA
      if (budget > static_cast<size_t>(di.smem_block)) budget = di.smem_block;
      for (int ns = kDecMaxStages; ns >= 2; --ns)
        if (L::bytes(nw, ns) <= budget) return {nw, ns, L::bytes(nw, ns)};
    }
  return {1, 2, L::bytes(1, 2)};
}

#if FA_DECODE_ASYNC
// Shared memory of decode_async_kernel (FA_DECODE_LOAD in tuning builds, LOAD 2 by default) with nw compute warps and
// ns stages, and its automatic choice as dec_config_auto's: 4 warps, the most stages (up to
// kDecMaxStages) with two CTAs per SM, else one, else fewer warps.
size_t dec_async_smem(int load, int nw, int ns) { return dec_async_layout(load, nw, ns).alloc; }
DecCfg dec_config_async_auto(const DevInfo& di, int load) {
  for (int nw = kDecMaxWarps; nw >= 1; nw /= 2)
    for (int per_sm = 2; per_sm >= 1; --per_sm) {
      size_t budget = static_cast<size_t>(di.smem_sm) / per_sm;
      budget = budget > 1024 ? budget - 1024 : 0;
      if (budget > static_cast<size_t>(di.smem_block)) budget = di.smem_block;
      for (int ns = kDecMaxStages; ns >= 2; --ns)
        if (dec_async_smem(load, nw, ns) <= budget) return {nw, ns, dec_async_smem(load, nw, ns)};
    }
  return {1, 2, dec_async_smem(load, 1, 2)};
}
#endif

// Tuning builds (benchmarks/decode_sweep.py): FA_DECODE_WARPS (1-8) and FA_DECODE_STAGES (2-7)
// set both; FA_DECODE_MODE (HD 128, 16-bit: 1 warp units, 2 / 4 the L2 prefetch / evict-first
// hint, 3 / 5 warp units with the hint), FA_DECODE_CTAS=1 (shared memory padded so that one
// CTA fits on an SM) apply with them or with the automatic choice. FA_DECODE_MERGE (1-3, see
// DecCfg::merge) and FA_DECODE_KT=32 (32-key tiles) apply to HD 128 16-bit without MODE.
// FA_DECODE_LOAD (1 bulk, 2 tma, 3 tma_cta: decode_async_kernel's K/V loads; unset: 2, the
// default build's choice; 0: the cp.async kernel) applies to HD 128 16-bit without MODE and KT=32, with MERGE, WARPS (tma_cta: compute warps, one producer warp
// more), STAGES and CTAS, when async_ok (dec_async_ok: the device and the tensors allow it).
template <int HD, int ESIZE, int ROWS>
DecCfg dec_config(const DevInfo& di, bool async_ok = false) {
#ifdef FA_TUNING
  const int tw = tuning_cfg("FA_DECODE_WARPS"), ts = tuning_cfg("FA_DECODE_STAGES");
  int tm = tuning_cfg("FA_DECODE_MODE");
  if (tm < 0 || tm > 5 || HD != 128 || ESIZE != 2) tm = 0;
  const bool tc128 = HD == 128 && ESIZE == 2;
  int merge = tuning_cfg("FA_DECODE_MERGE");
  if (merge < 0 || merge > 3 || !tc128 || tm != 0) merge = 0;
  const bool kt32 = tuning_cfg("FA_DECODE_KT") == 32 && tc128 && tm == 0;
  if (merge >= 2) tm |= kDecFused;
  if (merge == 1 || merge == 3) tm |= kDecPdl;
  if (kt32) tm |= kDecKt32;
  // Unset: the default build's choice (tma where async_ok); 0: the cp.async kernel.
  int load = getenv("FA_DECODE_LOAD") ? tuning_cfg("FA_DECODE_LOAD") : kDecLoadTma;
  if (load < kDecLoadBulk || load > kDecLoadTmaCta || !tc128 || !async_ok || (tm & (7 | kDecKt32)) != 0) load = 0;
  DecCfg c{0, 0, 0, tm, merge};
  c.load = load;
  // (tma_cta: at most kDecLaunchWarps threads with its producer warp.)
  if (tw >= 1 && tw <= kDecLaunchWarps - (load == kDecLoadTmaCta ? 1 : 0) && ts >= 2 && ts <= 7) {
    c.warps = tw;
    c.stages = ts;
  } else {
    const DecCfg d = load ? dec_config_async_auto(di, load)
                          : kt32 ? dec_config_auto<HD, ESIZE, ROWS, 32>(di) : dec_config_auto<HD, ESIZE, ROWS>(di);
    c.warps = d.warps;
    c.stages = d.stages;
  }
  c.smem = load ? dec_async_smem(load, c.warps, c.stages)
           : kt32 ? DecSmem<HD, ESIZE, ROWS, 32>::bytes(c.warps, c.stages)
                  : DecSmem<HD, ESIZE, ROWS>::bytes(c.warps, c.stages, (tm & 1) ? c.warps : 1);
  if (tuning_cfg("FA_DECODE_CTAS") == 1 && c.smem <= static_cast<size_t>(di.smem_sm) / 2)
    c.smem = static_cast<size_t>(di.smem_sm) / 2 + 1024;  // two no longer fit
  if (c.smem <= static_cast<size_t>(di.smem_block)) return c;
#elif FA_DECODE_ASYNC
  // The default on compute capability 9.x (16-bit, HD 128, async_ok): K and V by the tensor copy
  // engine (tma), warps and stages as dec_config_auto's (H200: 4 x 3, two CTAs per SM).
  if (async_ok && HD == 128 && ESIZE == 2) {
    const DecCfg d = dec_config_async_auto(di, kDecLoadTma);
    DecCfg c{d.warps, d.stages, d.smem};
    c.load = kDecLoadTma;
    if (c.smem <= static_cast<size_t>(di.smem_block)) return c;
  }
#endif
  return dec_config_auto<HD, ESIZE, ROWS>(di);
}

// Splits geometry from the shape only (shared with flash_fwd_workspace_bytes).
struct DecGeom {
  int rows;           // rows per CTA
  int64_t row_tiles;  // ceil(G * Tq / rows)
  int64_t base;       // CTAs per split: B * Hkv * row_tiles
  int64_t tiles;      // key tiles of Tk
  int cap;            // most splits: the forced count, or the auto bound
};

DecGeom dec_geom(const FlashFwdParams& p) {
  const AttnShape& s = p.shape;
  DecGeom g;
  g.rows = p.dtype == DType::kFloat32 ? kDecRowsSimt : kDecRowsTc;
  const int64_t R = s.H / s.Hkv * s.Tq;
  g.row_tiles = (R + g.rows - 1) / g.rows;
  g.base = s.B * s.Hkv * g.row_tiles;
  g.tiles = (s.Tk + kDecKeys - 1) / kDecKeys;
  int64_t cap;
  if (p.num_splits >= 1) {
    cap = p.num_splits;
  } else {
    cap = g.base >= kDecNoSplitBase || g.base <= 0 ? 1 : (kDecSplitCtaCap + g.base - 1) / g.base;
  }
  if (cap > kDecMaxSplits) cap = kDecMaxSplits;
  if (cap > g.tiles) cap = g.tiles;
  g.cap = cap < 1 ? 1 : static_cast<int>(cap);
  return g;
}

// Workspace layout for `splits`: ws_o [splits, B, H, Tq, dvp], then (256-byte aligned) ws_lse,
// then (256-byte aligned) ws_cnt [units = B * Hkv * row tiles] (the tuning builds' fused merge).
size_t dec_ws_o_bytes(const AttnShape& s, int splits) {
  const int64_t dvp = (s.Dv + 3) / 4 * 4;
  const size_t b = static_cast<size_t>(splits) * s.B * s.H * s.Tq * dvp * sizeof(float);
  return (b + 255) / 256 * 256;
}
size_t dec_ws_cnt_off(const AttnShape& s, int splits) {
  const size_t b = static_cast<size_t>(splits) * s.B * s.H * s.Tq * sizeof(float);
  return dec_ws_o_bytes(s, splits) + (b + 255) / 256 * 256;
}
size_t dec_ws_bytes(const AttnShape& s, int splits, int64_t units) {
  if (splits <= 1) return 0;
  return dec_ws_cnt_off(s, splits) + static_cast<size_t>(units) * sizeof(unsigned);
}

// The split count minimizing the modelled time (see the top of the file), at most cap.
int dec_choose_splits(const DecGeom& g, int slots, double bytes_per_tile) {
  int best = 1;
  double best_cost = 0.0;
  for (int s = 1; s <= g.cap; ++s) {
    const int64_t waves = (g.base * s + slots - 1) / slots;
    const int64_t tiles = (g.tiles + s - 1) / s;
    const double cost = static_cast<double>(waves) * (static_cast<double>(tiles) * bytes_per_tile + kDecCtaCost) +
                        (s > 1 ? kDecMergeCost : 0.0);
    if (s == 1 || cost < best_cost) {
      best = s;
      best_cost = cost;
    }
  }
  return best;
}

// CTAs for `units` units of work (one per CTA, or one per warp in the warp-unit mode).
int64_t dec_ctas(int64_t units, const DecCfg& cfg) {
  return (cfg.mode & 1) ? (units + cfg.warps - 1) / cfg.warps : units;
}

bool aligned_to(const void* ptr, size_t n) { return reinterpret_cast<uintptr_t>(ptr) % n == 0; }

// 16-byte loads of q, k, v (ESIZE: element bytes): D, Dv and every stride multiples of 16 bytes,
// the three base addresses 16-byte aligned.
template <int ESIZE>
bool dec_vec_in(const FlashFwdParams& p) {
  const AttnShape& s = p.shape;
  constexpr int kVec = 16 / ESIZE;
  return s.D % kVec == 0 && s.Dv % kVec == 0 && s.q_stride[0] % kVec == 0 && s.q_stride[1] % kVec == 0 &&
         s.q_stride[2] % kVec == 0 && s.k_stride[0] % kVec == 0 && s.k_stride[1] % kVec == 0 &&
         s.k_stride[2] % kVec == 0 && s.v_stride[0] % kVec == 0 && s.v_stride[1] % kVec == 0 &&
         s.v_stride[2] % kVec == 0 && aligned_to(p.q, 16) && aligned_to(p.k, 16) && aligned_to(p.v, 16);
}

#if FA_DECODE_ASYNC
// Whether decode_async_kernel can take these params on this device (the rest of its conditions:
// dec_config): a build with sm_90 code (FA_HAS_SM90: its device code is empty below sm_90) on
// compute capability 9.x, 16-bit, 16-byte loads (TMA: base and strides multiples of 16 bytes;
// bulk copies: 16-byte rows), D and Dv >= 8, TMA's 32-bit coordinates.
bool dec_async_ok(const FlashFwdParams& p, const DevInfo& di) {
#ifdef FA_HAS_SM90
  const AttnShape& s = p.shape;
  return di.major == 9 && (p.dtype == DType::kFloat16 || p.dtype == DType::kBFloat16) && s.D >= 8 && s.Dv >= 8 &&
         dec_vec_in<2>(p) && s.B <= INT_MAX && s.Hkv <= INT_MAX && s.Tk <= INT_MAX - 4096;
#else
  (void)p;
  (void)di;
  return false;
#endif
}

using DecAsyncKernel = void (*)(DecodeArgs, CUtensorMap, CUtensorMap);
template <typename T, int HD, int LOAD>
DecAsyncKernel dec_async_pick(int merge_bits) {
  switch (merge_bits) {
    case 0: return decode_async_kernel<T, HD, LOAD, 0>;
    case kDecFused: return decode_async_kernel<T, HD, LOAD, kDecFused>;
    case kDecPdl: return decode_async_kernel<T, HD, LOAD, kDecPdl>;
    case kDecPdl | kDecFused: return decode_async_kernel<T, HD, LOAD, kDecPdl | kDecFused>;
    default: return nullptr;
  }
}
// decode_async_kernel for cfg.load and the merge bits of cfg.mode (nothing else is set with a load).
template <typename T, int HD>
DecAsyncKernel dec_async_kernel_for(const DecCfg& cfg) {
  if constexpr (HD == 128 && sizeof(T) == 2) {
#ifndef FA_TUNING
    // The default build instantiates the default alone (tma, the merge kernel).
    return cfg.load == kDecLoadTma && cfg.mode == 0 ? decode_async_kernel<T, HD, kDecLoadTma, 0> : nullptr;
#else
    if ((cfg.mode & ~(kDecFused | kDecPdl)) != 0) return nullptr;
    switch (cfg.load) {
      case kDecLoadBulk: return dec_async_pick<T, HD, kDecLoadBulk>(cfg.mode);
      case kDecLoadTma: return dec_async_pick<T, HD, kDecLoadTma>(cfg.mode);
      case kDecLoadTmaCta: return dec_async_pick<T, HD, kDecLoadTmaCta>(cfg.mode);
      default: return nullptr;
    }
#endif
  }
  return nullptr;
}
// Threads per CTA of the plan's split kernel: the warps, and tma_cta's producer warp.
int dec_threads(const DecCfg& cfg) { return cfg.warps * 32 + (cfg.load == kDecLoadTmaCta ? 32 : 0); }
#endif

// What dec_launch runs for these params on this device (the kernel's shared-memory limit is
// raised on the way: the occupancy query needs it).
struct DecPlan {
  void (*kernel)(DecodeArgs);
  DecCfg cfg;
  DecGeom geom;
  int splits, ctas_per_sm;
#if FA_DECODE_ASYNC
  DecAsyncKernel akernel = nullptr;  // set: the load variant (cfg.load) runs instead of kernel
  CUtensorMap tmk, tmv;              // its K / V tensor maps (tma, tma_cta)
#endif
};

template <typename T, int HD>
cudaError_t dec_plan(const FlashFwdParams& p, const DevInfo& di, DecPlan* plan) {
  constexpr bool kTc = !std::is_same<T, float>::value;
  constexpr int ESIZE = sizeof(T), ROWS = kTc ? kDecRowsTc : kDecRowsSimt;
  if constexpr (kTc) {
    plan->kernel = decode_tc_kernel<T, HD>;
  } else {
    plan->kernel = decode_simt_kernel<HD>;
  }
#if FA_DECODE_ASYNC
  plan->cfg = dec_config<HD, ESIZE, ROWS>(di, kTc && HD == 128 && dec_async_ok(p, di));
#else
  plan->cfg = dec_config<HD, ESIZE, ROWS>(di);
#endif
#if FA_DECODE_ASYNC
  if constexpr (kTc && HD == 128) {
#ifdef FA_TUNING
    switch (plan->cfg.mode) {
      case 1: plan->kernel = decode_tc_kernel<T, HD, 1>; break;
      case 2: plan->kernel = decode_tc_kernel<T, HD, 2>; break;
      case 3: plan->kernel = decode_tc_kernel<T, HD, 3>; break;
      case 4: plan->kernel = decode_tc_kernel<T, HD, 4>; break;
      case 5: plan->kernel = decode_tc_kernel<T, HD, 5>; break;
      case kDecFused: plan->kernel = decode_tc_kernel<T, HD, kDecFused>; break;
      case kDecKt32: plan->kernel = decode_tc_kernel<T, HD, kDecKt32>; break;
      case kDecKt32 | kDecFused: plan->kernel = decode_tc_kernel<T, HD, kDecKt32 | kDecFused>; break;
      case kDecPdl: plan->kernel = decode_tc_kernel<T, HD, kDecPdl>; break;
      case kDecPdl | kDecFused: plan->kernel = decode_tc_kernel<T, HD, kDecPdl | kDecFused>; break;
      case kDecPdl | kDecKt32: plan->kernel = decode_tc_kernel<T, HD, kDecPdl | kDecKt32>; break;
      case kDecPdl | kDecKt32 | kDecFused:
        plan->kernel = decode_tc_kernel<T, HD, kDecPdl | kDecKt32 | kDecFused>;
        break;
      default: break;
    }
#endif
    // The load variants: tensor maps (box rows: a warp's tile, or tma_cta's stage); declined to the
    // configuration without FA_DECODE_LOAD (the same merge variant) if the driver refuses a map.
    if (plan->cfg.load != 0) {
      const AttnShape& s = p.shape;
      bool ok = true;
      if (plan->cfg.load == kDecLoadBulk) {
        plan->tmk = CUtensorMap{};  // unused
        plan->tmv = CUtensorMap{};
      } else {
        const int rows = kDecKeys * (plan->cfg.load == kDecLoadTmaCta ? plan->cfg.warps : 1);
        ok = sm90::tma_map_rows(&plan->tmk, p.dtype, p.k, s.B, s.Tk, s.Hkv, s.D, s.k_stride, rows) &&
             sm90::tma_map_rows(&plan->tmv, p.dtype, p.v, s.B, s.Tk, s.Hkv, s.Dv, s.v_stride, rows);
      }
      plan->akernel = ok ? dec_async_kernel_for<T, HD>(plan->cfg) : nullptr;
      if (plan->akernel == nullptr) plan->cfg = dec_config<HD, ESIZE, ROWS>(di, false);
    }
  }
#endif
  cudaError_t err = set_dynamic_smem(plan->kernel, static_cast<int>(plan->cfg.smem));
  if (err != cudaSuccess) return err;
  plan->ctas_per_sm = dec_ctas_per_sm(reinterpret_cast<const void*>(plan->kernel), plan->cfg.warps * 32,
                                      plan->cfg.smem);
#if FA_DECODE_ASYNC
  if (plan->akernel != nullptr) {
    err = set_dynamic_smem(plan->akernel, static_cast<int>(plan->cfg.smem));
    if (err != cudaSuccess) return err;
    plan->ctas_per_sm =
        dec_ctas_per_sm(reinterpret_cast<const void*>(plan->akernel), dec_threads(plan->cfg), plan->cfg.smem);
  }
#endif
  plan->geom = dec_geom(p);
  plan->splits = 1;
  if (p.num_splits >= 1) {
    plan->splits = plan->geom.cap;
  } else if (plan->geom.cap > 1) {
    // Warp units: the model's CTAs are warps, its slots the warps that fit.
    const int slots = di.sms * plan->ctas_per_sm * ((plan->cfg.mode & 1) ? plan->cfg.warps : 1);
    plan->splits = dec_choose_splits(plan->geom, slots > 0 ? slots : 1,
                                     static_cast<double>(kDecKeys) * (p.shape.D + p.shape.Dv) * ESIZE);
  }
  return cudaSuccess;
}

template <typename T, int HD>
cudaError_t dec_launch(const FlashFwdParams& p, const DevInfo& di, cudaStream_t stream) {
  constexpr int ESIZE = sizeof(T);
  const AttnShape& s = p.shape;
  DecPlan plan;
  cudaError_t err = dec_plan<T, HD>(p, di, &plan);
  if (err != cudaSuccess) return err;
  const DecCfg& cfg = plan.cfg;
  const DecGeom& geom = plan.geom;
  const int threads = cfg.warps * 32;
  const int splits = p.workspace == nullptr ? 1 : plan.splits;

  // Vector access: 16-byte loads of q, k, v; 4-element stores of o.
  const bool vec_in = dec_vec_in<ESIZE>(p);
  const bool vec_out = s.Dv % 4 == 0 && s.o_stride[0] % 4 == 0 && s.o_stride[1] % 4 == 0 &&
                       s.o_stride[2] % 4 == 0 && aligned_to(p.o, 4 * ESIZE);

  DecodeArgs a;
  a.p = p;
  a.splits = splits;
  a.row_tiles = static_cast<int>(geom.row_tiles);
  a.stages = cfg.stages;
  a.dvp = static_cast<int>((s.Dv + 3) / 4 * 4);
  a.vec_in = vec_in;
  a.vec_out = vec_out;
  a.gen = needs_general(p.mask, p.score, p.dropout, nullptr);
  a.ws_o = splits > 1 ? static_cast<float*>(p.workspace) : nullptr;
  a.ws_lse = splits > 1 ? reinterpret_cast<float*>(static_cast<char*>(p.workspace) + dec_ws_o_bytes(s, splits))
                        : nullptr;
  a.ws_cnt = nullptr;
  const int64_t ctas = dec_ctas(geom.base * splits, cfg);
  const int64_t merge_ctas = (s.B * s.H * s.Tq + 3) / 4;
  if (ctas > INT_MAX || merge_ctas > INT_MAX || geom.row_tiles > INT_MAX) return cudaErrorInvalidValue;
#ifdef FA_TUNING
  // Tuning builds' merge variants (DecCfg::merge; the kernel's MODE matches, see dec_config).
  const int merge = splits > 1 ? cfg.merge : 0;
  const bool pdl = di.major >= 9;  // else plain stream order (griddepcontrol: no-ops)
  auto launch_pdl = [&](auto kernel, int64_t grid, int nthr, size_t smem, auto&&... args) {
    cudaLaunchConfig_t lc = {};
    lc.gridDim = dim3(static_cast<unsigned>(grid));
    lc.blockDim = dim3(nthr);
    lc.dynamicSmemBytes = smem;
    lc.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    lc.attrs = attr;
    lc.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&lc, kernel, args...);
  };
  // The split kernel: the plan's (decode_tc_kernel) or its load variant (decode_async_kernel), as a
  // programmatic dependent of the preceding grid or in plain stream order.
  auto launch_split = [&](bool as_pdl) -> cudaError_t {
    if (plan.akernel != nullptr) {
      const int athreads = dec_threads(cfg);
      if (as_pdl) return launch_pdl(plan.akernel, ctas, athreads, cfg.smem, a, plan.tmk, plan.tmv);
      plan.akernel<<<static_cast<unsigned>(ctas), athreads, cfg.smem, stream>>>(a, plan.tmk, plan.tmv);
    } else {
      if (as_pdl) return launch_pdl(plan.kernel, ctas, threads, cfg.smem, a);
      plan.kernel<<<static_cast<unsigned>(ctas), threads, cfg.smem, stream>>>(a);
    }
    return cudaGetLastError();
  };
  if (merge >= 2) {
    a.ws_cnt = reinterpret_cast<unsigned*>(static_cast<char*>(p.workspace) + dec_ws_cnt_off(s, splits));
    if (merge == 2) {
      err = cudaMemsetAsync(a.ws_cnt, 0, static_cast<size_t>(geom.base) * sizeof(unsigned), stream);
      if (err == cudaSuccess) err = launch_split(false);
    } else {
      dec_zero_counters<<<1, 256, 0, stream>>>(a.ws_cnt, geom.base);
      err = cudaGetLastError();
      if (err == cudaSuccess) err = launch_split(true);
    }
    return err != cudaSuccess ? err : cudaGetLastError();
  }
  if (merge == 1) {
    err = launch_split(false);
    if (err != cudaSuccess) return err;
    err = launch_pdl(decode_merge_kernel<T, true>, merge_ctas, 128, 0, a);
    return err != cudaSuccess ? err : cudaGetLastError();
  }
#endif
#if FA_DECODE_ASYNC
  if (plan.akernel != nullptr) {  // the load variant, then the merge kernel as below
    plan.akernel<<<static_cast<unsigned>(ctas), dec_threads(cfg), cfg.smem, stream>>>(a, plan.tmk, plan.tmv);
    err = cudaGetLastError();
    if (err != cudaSuccess || splits == 1) return err;
    decode_merge_kernel<T><<<static_cast<unsigned>(merge_ctas), 128, 0, stream>>>(a);
    return cudaGetLastError();
  }
#endif
  plan.kernel<<<static_cast<unsigned>(ctas), threads, cfg.smem, stream>>>(a);
  err = cudaGetLastError();
  if (err != cudaSuccess || splits == 1) return err;
  decode_merge_kernel<T><<<static_cast<unsigned>(merge_ctas), 128, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

bool decode_applies(const FlashFwdParams& p) {
  const AttnShape& s = p.shape;
  if (p.decode < 0 || p.dtype == DType::kFloat64 || p.dropout.rate > 0.f) return false;
  if (s.Hkv <= 0 || s.H % s.Hkv != 0 || s.D > 256 || s.Dv > 256 || s.D < 0 || s.Dv < 0) return false;
  return p.decode == 1 || s.Tq <= kDecAutoMaxTq;
}

namespace {
// Calls f.template operator()<T, HD>() for the params' dtype and head-dim bucket.
template <typename F>
cudaError_t dec_dispatch(const FlashFwdParams& p, F&& f) {
  const int64_t d = p.shape.D > p.shape.Dv ? p.shape.D : p.shape.Dv;
  switch (p.dtype) {
    case DType::kFloat32:
      return d <= 128 ? f.template operator()<float, 128>() : f.template operator()<float, 256>();
    case DType::kFloat16:
      switch (head_dim_bucket(d)) {
        case 64: return f.template operator()<__half, 64>();
        case 128: return f.template operator()<__half, 128>();
        default: return f.template operator()<__half, 256>();
      }
    case DType::kBFloat16:
      switch (head_dim_bucket(d)) {
        case 64: return f.template operator()<__nv_bfloat16, 64>();
        case 128: return f.template operator()<__nv_bfloat16, 128>();
        default: return f.template operator()<__nv_bfloat16, 256>();
      }
    default: return cudaErrorNotSupported;
  }
}

struct LaunchFn {
  const FlashFwdParams& p;
  const DevInfo& di;
  cudaStream_t stream;
  template <typename T, int HD>
  cudaError_t operator()() const { return dec_launch<T, HD>(p, di, stream); }
};

struct PlanFn {
  const FlashFwdParams& p;
  const DevInfo& di;
  DecodePlan* out;
  template <typename T, int HD>
  cudaError_t operator()() const {
    DecPlan plan;
    const cudaError_t err = dec_plan<T, HD>(p, di, &plan);
    if (err != cudaSuccess) return err;
    out->applies = true;
    out->splits = plan.splits;
    out->warps = plan.cfg.warps;
    out->stages = plan.cfg.stages;
    out->smem_bytes = static_cast<int>(plan.cfg.smem);
    out->ctas_per_sm = plan.ctas_per_sm;
    out->sms = di.sms;
    out->row_tiles = plan.geom.row_tiles;
    out->ctas = dec_ctas(plan.geom.base * plan.splits, plan.cfg);
    out->head_dim_bucket = HD;
    return cudaSuccess;
  }
};
}  // namespace

cudaError_t fwd_decode(const FlashFwdParams& p, cudaStream_t stream) {
  DevInfo di;
  cudaError_t err = dec_device_info(&di);
  if (err != cudaSuccess) return err;
  return dec_dispatch(p, LaunchFn{p, di, stream});
}

cudaError_t decode_plan(const FlashFwdParams& p, DecodePlan* plan) {
  *plan = DecodePlan();
  if (!decode_applies(p)) return cudaSuccess;
  cudaError_t err = check_device();
  if (err != cudaSuccess) return err;
  DevInfo di;
  err = dec_device_info(&di);
  if (err != cudaSuccess) return err;
  return dec_dispatch(p, PlanFn{p, di, plan});
}

size_t decode_workspace_bytes(const FlashFwdParams& p) {
  const AttnShape& s = p.shape;
  if (!decode_applies(p) || s.B <= 0 || s.Tq <= 0 || s.H <= 0) return 0;
  const DecGeom g = dec_geom(p);
  return dec_ws_bytes(s, g.cap, g.base);
}

}  // namespace cuda

}  // namespace flashattn
