// Device helpers shared by the sm80/ CUDA kernels (flash_fwd*.cu, flash_bwd*.cu, flash_decode.cu)
// and, for the masking rules, the sm90/ ones:
// element types, tensor-core mma.sync / ldmatrix / cp.async wrappers, shared-memory tile
// addressing and the score function (scale, soft-cap, bias, masks) shared by forward and
// backward. No framework headers.
#ifndef TF_FLASHATTN_KERNELS_FLASH_CUDA_COMMON_CUH_
#define TF_FLASHATTN_KERNELS_FLASH_CUDA_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cc/kernels/common/flash_params.h"

namespace flashattn {
namespace cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }

// ---- which targets compile a kernel's body --------------------------------------------------------
// The sm80/ kernels pick their tiles by big_smem (check_device: >= 210 KiB of shared memory per SM).
// Among the targets built, the sm_80 SASS runs only on compute 8.x devices (at most 164 KiB per SM: never
// big_smem) and the sm_90 SASS only on compute 9.0 devices (228 KiB: always big_smem). So a kernel that
// the dispatch launches only with big_smem (kBig) or only without (kSmall) gets its body in the other
// target's SASS as a __trap() alone: sm80's fwd / bwd / TF32 sources compile in 343 s instead of 456 s
// (both targets, on the 2-core machine; build_ops.py's 10-minute bar), and every kernel kept is the same
// code as before. Other targets (TF_FLASHATTN_CUDA_ARCHS): sm_86 / sm_89 as sm_80; newer ones compile every body.
// This holds because the library carries SASS only (build_ops.py: code=sm_XX, no PTX): PTX JIT-compiled
// on a newer device would keep the traps of the target it was generated for.
enum class SmemClass { kAny, kBig, kSmall };

template <SmemClass SC>
__host__ __device__ constexpr bool kernel_body_built() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  return SC != SmemClass::kBig;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
  return SC != SmemClass::kSmall;
#else
  return true;
#endif
}

// A kernel's first statement: where the target being compiled never runs a kernel of class SC, its body
// is a trap, and the rest is unreachable, which the device compiler drops at once (sm80/flash_bwd.cu at
// sm_80: 78 -> 40 s). A dispatch error would then not leave outputs silently unwritten: the trap ends the
// kernel with an error that the next synchronizing CUDA call reports, and the context stays unusable.
#define FA_KERNEL_FOR(SC)                                          \
  if constexpr (!::flashattn::cuda::kernel_body_built<SC>()) {     \
    __trap();                                                      \
    return;                                                        \
  }

// ---- element types --------------------------------------------------------------------
template <typename T> struct Elem;
template <> struct Elem<__half> {
  static __device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
  static __device__ __forceinline__ __half from_f(float x) { return __float2half_rn(x); }
  // Two floats into one 32-bit register, a in the low half (the lower column index).
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  // Two adjacent elements with one 4-byte store (dst 4-byte aligned).
  static __device__ __forceinline__ void store2(__half* dst, float a, float b) {
    *reinterpret_cast<uint32_t*>(dst) = pack(a, b);
  }
  // c[16x8] += a[16x16] * b[16x8], fp16 operands, fp32 accumulators.
  static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
template <> struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 from_f(float x) { return __float2bfloat16_rn(x); }
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ void store2(__nv_bfloat16* dst, float a, float b) {
    *reinterpret_cast<uint32_t*>(dst) = pack(a, b);
  }
  static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
template <> struct Elem<float> {
  static __device__ __forceinline__ float to_f(float x) { return x; }
  static __device__ __forceinline__ float from_f(float x) { return x; }
  // Two adjacent elements with one 8-byte store (dst 8-byte aligned).
  static __device__ __forceinline__ void store2(float* dst, float a, float b) {
    *reinterpret_cast<float2*>(dst) = make_float2(a, b);
  }
};

// ---- PTX wrappers -------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16-byte global->shared copy; writes zeros when !pred (src-size 0: nothing is read).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)),
               "l"(gmem), "r"(pred ? 16 : 0));
}
// 16-byte global->shared copy, always taken.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}
// 4-byte global->shared copy (zero when !pred).
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool pred) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(pred ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Four 8x8 b16 matrices; lane l gives the row address of matrix l/8, row l%8.
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// ---- shared-memory tiles ------------------------------------------------------------------
// A [ROWS, COLS] tile of ESIZE-byte elements (2: float16 / bfloat16, 4: float32 for the TF32
// kernels). Each row is padded by one 16-byte chunk (kChunk elements), so that ldmatrix's 8 rows
// (stride COLS*ESIZE + 16 bytes) hit 8 distinct bank groups. (An XOR swizzle saves the padding
// but costs integer instructions per ldmatrix address; padding keeps addresses linear, so
// unrolled loops use immediate offsets.)
template <int ROWS, int COLS, int ESIZE = 2>
struct STile {
  static constexpr bool kSwizzle = false;
  static constexpr int kChunk = 16 / ESIZE;  // elements per 16-byte chunk
  static constexpr int kStride = kSwizzle ? COLS : COLS + kChunk;
  static constexpr int kElems = ROWS * kStride;
  // Element offset of (r, c); c's chunk (c / kChunk) is swizzled, c % kChunk kept.
  static __device__ __forceinline__ int off(int r, int c) {
    if (kSwizzle) {
      if (ESIZE == 2) return r * COLS + ((((c >> 3) ^ (r & 7))) << 3) + (c & 7);
      return r * COLS + ((((c >> 2) ^ (r & 7))) << 2) + (c & 3);
    }
    return r * kStride + c;
  }
};

// Scalar fallback of load_tile for one 16-byte chunk (8 16-bit or 4 float elements; odd head
// dims, unaligned strides): out of line, so the hot 16-byte path stays small.
template <typename T>
__device__ __noinline__ void load_chunk_scalar(T* dst, const T* row, bool row_ok, int col, int n) {
  constexpr int kChunk = 16 / sizeof(T);
  alignas(16) T tmp[kChunk];
#pragma unroll
  for (int e = 0; e < kChunk; ++e) tmp[e] = (row_ok && col + e < n) ? row[col + e] : Elem<T>::from_f(0.f);
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(tmp);
}

// Loads rows [t0, t0 + ROWS) of head h of x ([B, T, heads, n], strides st) into a tile, as
// COLS columns: columns >= n and rows >= t_end are zero. vec: n, strides % (16 / sizeof(T)) == 0
// and a 16-byte aligned base, so 16-byte cp.async copies are used; otherwise scalar loads.
// Thread tid copies chunks (row r0 + it * RPI, column c0) for it = 0, 1, ...
template <typename T, int ROWS, int COLS, int NTHREADS>
__device__ __forceinline__ void load_tile(T* tile, const T* x, const int64_t st[3], int64_t b,
                                          int64_t h, int64_t t0, int64_t t_end, int n, bool vec) {
  using Tile = STile<ROWS, COLS, sizeof(T)>;
  constexpr int kChunk = Tile::kChunk;
  constexpr int kCPR = COLS / kChunk;       // chunks per row
  static_assert(NTHREADS % kCPR == 0, "threads must cover whole rows");
  constexpr int RPI = NTHREADS / kCPR;      // rows per iteration
  constexpr int kIters = (ROWS + RPI - 1) / RPI;
  const int r0 = threadIdx.x / kCPR, c0 = (threadIdx.x % kCPR) * kChunk;
  const int64_t rows_left = t_end - t0 - r0;  // this thread's chunk it exists when it * RPI < rows_left
  const T* src = x + b * st[0] + h * st[2] + (t0 + r0) * st[1] + c0;
  const int64_t step = static_cast<int64_t>(RPI) * st[1];
  T* dst = tile + Tile::off(r0, c0);
  constexpr int kDstStep = RPI * Tile::kStride;
  // The vec test sits outside the unrolled loops, so the 16-byte path is straight-line code with
  // strength-reduced addresses (a branch per chunk cost ~30 instructions per chunk).
  if (vec) {
    const bool col_ok = c0 < n;
    if (col_ok && rows_left > static_cast<int64_t>(kIters - 1) * RPI && (ROWS % RPI == 0 || r0 + (kIters - 1) * RPI < ROWS)) {
#pragma unroll
      for (int it = 0; it < kIters; ++it) cp_async16(dst + it * kDstStep, src + it * step);  // full tile
    } else {
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        if (ROWS % RPI != 0 && r0 + it * RPI >= ROWS) break;
        const bool ok = col_ok && it * RPI < rows_left;
        cp_async16(dst + it * kDstStep, ok ? src + it * step : x, ok);
      }
    }
  } else {
    for (int it = 0; it < kIters; ++it) {
      if (ROWS % RPI != 0 && r0 + it * RPI >= ROWS) break;
      const bool ok = it * RPI < rows_left;
      load_chunk_scalar(dst + it * kDstStep, ok ? src + it * step - c0 : x, ok, c0, n);
    }
  }
}

// ---- TF32 (float32 inputs on tensor cores, sm80/flash_fwd_tf32.cu / flash_bwd_tf32.cu) ----
// float -> tf32 bit pattern, rounded to nearest (ties away), low 13 mantissa bits zero.
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t u;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(u) : "f"(x));
  return u;
}
// c[16x8] += a[16x8] * b[8x8], tf32 operands, fp32 accumulators. With g = lane / 4, t = lane % 4:
// a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); b0 (k t, n g), b1 (k t+4, n g);
// c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1).
__device__ __forceinline__ void mma_tf32(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// Rounds to tf32, in place, the chunks of a float tile that this thread copied with
// load_tile<float, ROWS, COLS, NTHREADS> (same chunk assignment), after cp_async_wait: a
// thread sees its own cp.async writes without a barrier, so no extra __syncthreads is needed.
template <int ROWS, int COLS, int NTHREADS>
__device__ __forceinline__ void round_tile_tf32(float* tile) {
  using Tile = STile<ROWS, COLS, 4>;
  constexpr int kCPR = COLS / 4;
  static_assert(NTHREADS % kCPR == 0, "threads must cover whole rows");
  constexpr int RPI = NTHREADS / kCPR;
  constexpr int kIters = (ROWS + RPI - 1) / RPI;
  const int r0 = threadIdx.x / kCPR, c0 = (threadIdx.x % kCPR) * 4;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int r = r0 + it * RPI;
    if (ROWS % RPI != 0 && r >= ROWS) break;
    float4* p = reinterpret_cast<float4*>(tile + Tile::off(r, c0));
    float4 x = *p;
    x.x = __uint_as_float(to_tf32(x.x));
    x.y = __uint_as_float(to_tf32(x.y));
    x.z = __uint_as_float(to_tf32(x.z));
    x.w = __uint_as_float(to_tf32(x.w));
    *p = x;
  }
}

// Rows [t0, t0 + rows) of head h of x ([B, T, heads, n], strides st) as float32 into dst, row
// stride ld (n, or n + 1 against bank conflicts), zero for rows >= t_end; every thread of the
// CTA takes part (the SIMT kernels' tile loads).
template <typename T>
__device__ __forceinline__ void load_rows_f32(float* dst, int ld, const T* x, const int64_t st[3],
                                              int64_t b, int64_t h, int64_t t0, int rows,
                                              int64_t t_end, int n) {
  for (int idx = threadIdx.x; idx < rows * n; idx += blockDim.x) {
    const int r = idx / n, c = idx % n;
    const int64_t t = t0 + r;
    dst[r * ld + c] = t < t_end ? Elem<T>::to_f(x[b * st[0] + t * st[1] + h * st[2] + c]) : 0.f;
  }
}

// Fast 2^x (MUFU.EX2, denormals flushed); 2^-inf = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// ---- scores -------------------------------------------------------------------------------
// Per-batch limits from the lengths (as the CPU kernel).
__device__ __forceinline__ int64_t q_limit(const MaskParams& m, const AttnShape& s, int64_t b) {
  if (!m.q_lengths) return s.Tq;
  const int64_t v = m.q_lengths[b];
  return v < 0 ? 0 : (v > s.Tq ? s.Tq : v);
}
__device__ __forceinline__ int64_t k_limit(const MaskParams& m, const AttnShape& s, int64_t b) {
  if (!m.k_lengths) return s.Tk;
  const int64_t v = m.k_lengths[b];
  return v < 0 ? 0 : (v > s.Tk ? s.Tk : v);
}

// What one query row sees: keys [kb, ke) (causal/window/lengths) and row validity.
struct RowInfo {
  int64_t kb, ke;
  bool ok;
};
__device__ __forceinline__ RowInfo row_info(const MaskParams& m, const AttnShape& s, int64_t b,
                                            int64_t i, int64_t qlim, int64_t klim) {
  RowInfo r;
  r.ok = i < qlim && (!m.q_valid || m.q_valid[b * s.Tq + i]);
  r.kb = m.key_begin(i);
  const int64_t ke = m.key_end(i, klim);
  r.ke = ke < klim ? ke : klim;
  return r;
}

// The logit of element (i, j) in base-2 units (log2e * (softcap(scale * acc) + bias)), or -inf
// where masked. dcap receives d softcap(x)/dx = 1 - tanh^2 (1 without soft-cap).
template <typename T>
__device__ __forceinline__ float score_elem(float acc, const MaskParams& m, const ScoreParams& sp,
                                            const AttnShape& s, int64_t b, int64_t h, int64_t i,
                                            int64_t j, const RowInfo& ri, float* dcap) {
  bool ok = ri.ok && j >= ri.kb && j < ri.ke;
  if (ok && m.k_valid) ok = m.k_valid[b * s.Tk + j];
  if (ok && m.mask)
    ok = m.mask[b * m.mask_stride[0] + h * m.mask_stride[1] + i * m.mask_stride[2] +
                j * m.mask_stride[3]];
  float x = acc * sp.scale;
  float d = 1.f;
  if (sp.softcap != 0.f) {
    const float t = tanhf(x / sp.softcap);
    x = sp.softcap * t;
    d = 1.f - t * t;
  }
  if (ok && sp.bias) {
    const T* bias = static_cast<const T*>(sp.bias);
    x += Elem<T>::to_f(bias[b * sp.bias_stride[0] + h * sp.bias_stride[1] +
                             i * sp.bias_stride[2] + j * sp.bias_stride[3]]);
  }
  if (dcap) *dcap = d;
  return ok ? x * kLog2e : neg_inf();
}

// The Hopper forwards' dense-mask and bias row pointers: row i of head h, batch b of the [B, H, Tq, Tk] tensors
// (through their strides; left as they are where a tensor is absent). Rows past Tq (never visible) point at row
// Tq - 1, so that reads for them stay inside the tensors.
template <typename T>
__device__ __forceinline__ void dense_row_ptrs(const MaskParams& mk, const ScoreParams& sp, int64_t Tq, int64_t b,
                                               int64_t h, int64_t i, const bool*& mrow, const T*& brow) {
  const int64_t r = i >= Tq ? Tq - 1 : i;
  if (mk.mask) mrow = mk.mask + b * mk.mask_stride[0] + h * mk.mask_stride[1] + r * mk.mask_stride[2];
  if (sp.bias)
    brow = static_cast<const T*>(sp.bias) + b * sp.bias_stride[0] + h * sp.bias_stride[1] + r * sp.bias_stride[2];
}

// The Hopper kernels' soft-cap (sm90/flash_bwd_sm90.cu, the TF32 forward and backwards): score_elem's rule in
// base-2 units with the scale and log2e folded in, and the backward's factor recovered from P.
// Soft-cap of one S element in base-2 units, in place before the P pass: c log2e tanh(scale S / c)
// (cap_log2 = c log2e, inv_cap = 1 / c; sm80's score_elem, s = c tanh(scale S / c)).
__device__ __forceinline__ float softcap_log2(float s, float scale, float inv_cap, float cap_log2) {
  return cap_log2 * tanhf((s * scale) * inv_cap);
}
// dS of one element under soft-cap without a bias: P (1 - tanh^2) (dP - dsum), tanh recovered from P
// itself: tanh = (log2 P + l2) / (c log2e) (inv_cap_log2 = 1 / (c log2e)), exact up to ex2 / lg2's
// rounding; a P of 0 (masked or underflowed) has dS = 0 whatever the factor.
__device__ __forceinline__ float softcap_ds(float pv, float dp, float dsm, float l2, float inv_cap_log2) {
  const float th = (__log2f(pv) + l2) * inv_cap_log2;
  const float dcap = pv > 0.f ? 1.f - th * th : 1.f;
  return pv * dcap * (dp - dsm);
}
// True when the run needs the general per-element path: a dense mask, bias, soft-cap, dropout,
// dbias or a non-positive scale, and the [B, Tq] / [B, Tk] validity masks unless the caller's
// index path takes them (valid_by_index: the tiled kernels do, see key_visible; the decoding
// path does not). Otherwise only causal/window/lengths mask, by index.
inline bool needs_general(const MaskParams& m, const ScoreParams& sp, const DropoutParams& dp,
                          const float* dbias, bool valid_by_index = false) {
  return m.mask || (!valid_by_index && (m.q_valid || m.k_valid)) || sp.bias ||
         sp.softcap != 0.f || !(sp.scale > 0.f) || dp.rate > 0.f || dbias;
}

// Key j of batch b passes the [B, Tk] validity mask (true without one). The index path's masking
// loops (tiles not tile_in_range) check it per key, row_info checks the [B, Tq] one per row:
// a padding mask from Keras (all true in most training batches) then costs a byte load per key
// of a tile instead of the general kernels.
__device__ __forceinline__ bool key_visible(const MaskParams& m, const AttnShape& s, int64_t b,
                                            int64_t j) {
  return !m.k_valid || m.k_valid[b * s.Tk + j];
}

// True when every element of the tile rows [i0, i0+rows) x keys [j0, j0+cols) is inside the
// causal/window/length limits and no validity mask applies (index masks only). key_begin /
// key_end are non-decreasing in the row, so the corners decide.
__device__ __forceinline__ bool tile_in_range(const MaskParams& m, int64_t i0, int rows, int64_t j0,
                                              int cols, int64_t qlim, int64_t klim) {
  if (m.q_valid || m.k_valid) return false;
  if (i0 + rows > qlim || j0 + cols > klim) return false;
  if (!m.causal && m.window_left < 0 && m.window_right < 0) return true;  // lengths only
  if (m.key_begin(i0 + rows - 1) > j0) return false;
  if (m.key_end(i0, klim) < j0 + cols) return false;
  return true;
}

// Keys [begin, end) that rows [i0, i_last] can see (union), clipped to [0, klim).
__device__ __forceinline__ void block_keys(const MaskParams& m, int64_t i0, int64_t i_last,
                                           int64_t klim, int64_t* begin, int64_t* end) {
  int64_t kb = m.key_begin(i0);
  int64_t ke = m.key_end(i_last, klim);
  if (ke > klim) ke = klim;
  if (ke < kb) ke = kb;
  *begin = kb;
  *end = ke;
}

// The key tiles that the query tile [i0, i0 + BQ) of batch b visits (forward and dQ kernels):
// the keys any of its rows sees (causal/window/lengths), in tiles of BK from jstart (a multiple of
// BK); ntiles = 0 when there are none. qlim / klim: the batch's query and key length limits.
template <int BQ, int BK>
struct QueryTileKeys {
  int64_t qlim, klim, jstart = 0;
  int ntiles = 0;
  __device__ __forceinline__ QueryTileKeys(const MaskParams& m, const AttnShape& sh, int64_t b,
                                           int64_t i0)
      : qlim(q_limit(m, sh, b)), klim(k_limit(m, sh, b)) {
    int64_t kbeg = 0, kend = 0;
    if (i0 < qlim) block_keys(m, i0, (i0 + BQ < qlim ? i0 + BQ : qlim) - 1, klim, &kbeg, &kend);
    jstart = kbeg - kbeg % BK;
    ntiles = kend > kbeg ? static_cast<int>((kend - jstart + BK - 1) / BK) : 0;
  }
};

// The work units of a key-tile CTA (the key-tile backward kernels: sm80/flash_bwd.cu,
// sm80/flash_bwd_tf32.cu, sm90/flash_bwd_sm90.cu): (hl, qb) = query head hk * G + hl of the kv
// head's group, query tile qb (rows [qb * BQb, qb * BQb + BQb)); only tiles that see some key of
// [j0, j0 + BKb). key_begin / key_end are non-decreasing in the row, so "i0 < qlim and
// key_begin(i0) < j0 + BKb" holds for a prefix [0, hi) of the tiles and
// "min(key_end(last row), klim) > j0" for a suffix: the candidates [lo, hi) are found by
// bisection once per CTA (no divide per unit); sees() then drops tiles whose rows see no key.
template <int BQb>
struct KeyTileUnits {
  const MaskParams& m;
  int64_t qlim, klim;
  int G, lo = 0, hi = 0;

  __device__ __forceinline__ KeyTileUnits(const MaskParams& mask, int nqb, int64_t qlim_,
                                          int64_t klim_, int64_t j0, int BKb, int G_)
      : m(mask), qlim(qlim_), klim(klim_), G(G_) {
    int l = 0, r = nqb;
    while (l < r) {
      const int mid = (l + r) >> 1;
      const int64_t i0 = static_cast<int64_t>(mid) * BQb;
      if (i0 < qlim && m.key_begin(i0) < j0 + BKb) l = mid + 1; else r = mid;
    }
    hi = l;
    l = 0;
    r = hi;
    while (l < r) {
      const int mid = (l + r) >> 1;
      if (last_row_end(mid) > j0) r = mid; else l = mid + 1;
    }
    lo = l;
  }
  // min(key_end(last row of tile qb), klim).
  __device__ __forceinline__ int64_t last_row_end(int qb) const {
    const int64_t end = static_cast<int64_t>(qb) * BQb + BQb;
    const int64_t ke = m.key_end((end < qlim ? end : qlim) - 1, klim);
    return ke < klim ? ke : klim;
  }
  // Without a left window edge every row starts at key 0, and last_row_end grows with qb, so
  // every qb >= lo (last_row_end(qb) > j0 >= 0) sees the key tile.
  __device__ __forceinline__ bool sees(int qb) const {
    if (m.window_left < 0) return true;
    return last_row_end(qb) > m.key_begin(static_cast<int64_t>(qb) * BQb);
  }
  // Moves (hl, qb) to the first valid unit at or after it (hl == G: none left).
  __device__ __forceinline__ void seek(int& hl, int& qb) const {
    while (hl < G) {
      if (qb >= hi) {
        ++hl;
        qb = lo;
        continue;
      }
      if (sees(qb)) return;
      ++qb;
    }
  }
};

// Grouped longest-first tile orders (the Hopper kernels': the backward's key tiles, bwd_tile; the
// forward's query tiles, TileOrder): `pairs` (batch, head) pairs in groups of consecutive pairs, the
// first `big` groups of g + 1 pairs, the others of g; within a group of gs pairs, index i =
// (tiles of the groups before) + gs x + (pair - the group's first pair), x in [0, n). From i, the
// position x (slowest within the group) and the pair.
__device__ __forceinline__ void grouped_tile(int i, int n, int g, int big, int& x, int& pair) {
  const int big_tiles = big * (g + 1) * n;  // the tiles of the larger groups
  int gs, p0;                               // this group's pairs and its first pair
  if (i < big_tiles) {
    gs = g + 1;
    p0 = i / (gs * n) * gs;
  } else {
    gs = g;
    p0 = big * (g + 1) + (i - big_tiles) / (gs * n) * gs;
  }
  const int r = i - p0 * n;  // within the group: r = gs x + (pair - p0)
  x = r / gs;
  pair = p0 + (r - x * gs);
}

__device__ __forceinline__ float warp_quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float warp_quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace cuda
}  // namespace flashattn

#endif  // TF_FLASHATTN_KERNELS_FLASH_CUDA_COMMON_CUH_
