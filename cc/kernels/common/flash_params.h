// Parameters of the FlashAttention kernels. This header knows no framework: the TensorFlow
// glue (cc/ops/) fills these structs from tensors, the CPU and CUDA kernels read them.
//
// Layouts (element strides, int64, innermost dimension contiguous):
//   q    [B, Tq, H,   D ]     k [B, Tk, Hkv, D]     v [B, Tk, Hkv, Dv]
//   o    [B, Tq, H,   Dv]     lse [B, H, Tq] float32 (natural log; -inf for a fully masked row)
//   mask [B, H, Tq, Tk] bool, broadcast dims have stride 0
//   bias [B, H, Tq, Tk] same dtype as q, broadcast dims have stride 0
//   q_lengths [B] int32, k_lengths [B] int32, q_valid [B, Tq] bool, k_valid [B, Tk] bool
#ifndef TF_FLASHATTN_KERNELS_FLASH_PARAMS_H_
#define TF_FLASHATTN_KERNELS_FLASH_PARAMS_H_

#include <cstdint>

#if defined(__CUDACC__)
#define FA_HD __host__ __device__ __forceinline__
#else
#define FA_HD inline
#endif

namespace flashattn {

enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2, kFloat64 = 3 };

// Which keys a query row may see, besides the per-element masks.
// Row i sees key j when (with d = i + causal_offset):
//   causal:        j <= d
//   window_left>=0:  j >= d - window_left
//   window_right>=0: j <= d + window_right
struct MaskParams {
  bool causal = false;
  int64_t causal_offset = 0;   // 0: Keras (j <= i); Tk - Tq: KV-cache (bottom-right)
  int64_t window_left = -1;    // -1: unbounded
  int64_t window_right = -1;   // -1: unbounded
  const bool* mask = nullptr;  // [B, H, Tq, Tk] broadcast via strides, or null
  int64_t mask_stride[4] = {0, 0, 0, 0};
  const int32_t* q_lengths = nullptr;  // [B] or null
  const int32_t* k_lengths = nullptr;  // [B] or null
  const bool* q_valid = nullptr;       // [B, Tq] or null
  const bool* k_valid = nullptr;       // [B, Tk] or null

  // A window, lengths or a [B, T] validity mask: what the index-masked kernels take beyond causal alone.
  FA_HD bool has_index_masks() const {
    return window_left >= 0 || window_right >= 0 || q_lengths || k_lengths || q_valid || k_valid;
  }

  // First key (inclusive) and last key (exclusive) row i can see, from causal/window only.
  FA_HD int64_t key_begin(int64_t i) const {
    if (window_left < 0) return 0;
    const int64_t lo = i + causal_offset - window_left;
    return lo < 0 ? 0 : lo;
  }
  FA_HD int64_t key_end(int64_t i, int64_t tk) const {
    int64_t hi = tk;
    if (causal && i + causal_offset + 1 < hi) hi = i + causal_offset + 1;
    if (window_right >= 0 && i + causal_offset + window_right + 1 < hi)
      hi = i + causal_offset + window_right + 1;
    return hi < 0 ? 0 : hi;
  }
};

struct AttnShape {
  int64_t B = 0, Tq = 0, Tk = 0, H = 0, Hkv = 0, D = 0, Dv = 0;
  // Element strides of q/k/v/o: batch, time, head (the head dim is contiguous).
  int64_t q_stride[3] = {0, 0, 0};
  int64_t k_stride[3] = {0, 0, 0};
  int64_t v_stride[3] = {0, 0, 0};
  int64_t o_stride[3] = {0, 0, 0};
  FA_HD int64_t group() const { return H / Hkv; }
};

struct ScoreParams {
  float scale = 1.f;        // softmax scale applied to q.k
  float softcap = 0.f;      // 0: off; else s = softcap * tanh(s / softcap), before the bias
  const void* bias = nullptr;  // [B, H, Tq, Tk] broadcast via strides, dtype of q, or null
  int64_t bias_stride[4] = {0, 0, 0, 0};
};

struct DropoutParams {
  float rate = 0.f;              // probability of dropping; 0: off
  uint32_t threshold = 0;        // t16: drop when the element's 16-bit draw < t16 (dropout_set_rate)
  float keep_scale = 1.f;        // 65536 / (65536 - t16): E[keep * keep_scale] = 1 exactly
  // The int64[2] seed, in the memory of the device that runs the kernel (CUDA: device memory,
  // read by the kernels, so no host round trip; CPU: host memory). Required when rate > 0.
  const int64_t* seed = nullptr;
};

struct FlashFwdParams {
  DType dtype = DType::kFloat32;
  AttnShape shape;
  MaskParams mask;
  ScoreParams score;
  DropoutParams dropout;
  const void* q = nullptr;  // [B, Tq, H, D]
  const void* k = nullptr;  // [B, Tk, Hkv, D]
  const void* v = nullptr;  // [B, Tk, Hkv, Dv]
  void* o = nullptr;        // [B, Tq, H, Dv]
  float* lse = nullptr;     // [B, H, Tq]
  bool allow_tf32 = false;  // CUDA float32: TF32 tensor cores (TensorFlow's TF32 setting)
  // Decoding path (few query rows, keys split across blocks / threads, partial results merged by
  // their log-sum-exp). decode: 0 chosen from the shape, 1 forced on (where it applies), -1 off.
  // num_splits: 0 chosen from the shape and the machine, n >= 1 forced (decode path only).
  int decode = 0;
  int num_splits = 0;
  // CUDA: device scratch of at least flash_fwd_workspace_bytes(params) bytes, 256-byte aligned
  // (flash_cuda.h); may be null when that is 0.
  void* workspace = nullptr;
};

struct FlashBwdParams {
  DType dtype = DType::kFloat32;
  AttnShape shape;
  MaskParams mask;
  ScoreParams score;
  DropoutParams dropout;
  const void* q = nullptr;     // [B, Tq, H, D]
  const void* k = nullptr;     // [B, Tk, Hkv, D]
  const void* v = nullptr;     // [B, Tk, Hkv, Dv]
  const void* o = nullptr;     // [B, Tq, H, Dv]   forward output
  const float* lse = nullptr;  // [B, H, Tq]       forward log-sum-exp
  const void* d_o = nullptr;   // [B, Tq, H, Dv]   same strides as o
  const float* d_lse = nullptr;  // [B, H, Tq]     gradient of lse, or null
  void* dq = nullptr;          // [B, Tq, H, D]    same strides as q
  void* dk = nullptr;          // [B, Tk, Hkv, D]  same strides as k
  void* dv = nullptr;          // [B, Tk, Hkv, Dv] same strides as v
  float* dbias = nullptr;      // [B, H, Tq, Tk] contiguous float32 (dL/d(score)), or null
  float* workspace = nullptr;  // device scratch for the CUDA backward (see flash_cuda.h)
  size_t workspace_bytes = 0;  // its size (0: not given; the Hopper TF32 backward, whose part of the
                               // workspace depends on the device, then does not run)
  bool deterministic = false;  // CUDA: no order-dependent atomics (bitwise reproducible)
  bool allow_tf32 = false;     // CUDA float32: TF32 tensor cores (TensorFlow's TF32 setting)
};

// ---------------------------------------------------------------------------------------
// Dropout: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"), one
// 16-bit draw per element, eight elements per Philox call. The keep decision is a pure function
// of (seed, b, h, row, col):
//   call (its counter):  (8 * (col / 32) + col % 8,  8 * (row / 16) + row % 8,  h,  b)  (uint32)
//   draw:                16-bit half k = 4 * ((row / 8) % 2) + (col / 8) % 4 of the output,
//                        i.e. bits 16 * (k % 2) .. 16 * (k % 2) + 15 of word k / 2
//   keep:                draw >= t16,  t16 = min(round(rate * 65536), 65535)
//   kept value:          P * keep_scale,  keep_scale = 65536 / (65536 - t16) (float32)
// so the rate applied is t16 / 65536 (within 2^-17 of the requested one) and E[keep * keep_scale]
// = 1 exactly. One call covers rows {r, r + 8} x columns {c, c + 8, c + 16, c + 24} (r % 16 < 8,
// c % 32 < 8): the 8 elements one thread holds of a 16 x 32 block in an mma.sync m16n8
// accumulator fragment, in either orientation (rows x keys in the forward and the dQ kernels,
// keys x queries in the key-tile backward), so the GPU tiles draw one call per 8 elements
// without exchanging words between lanes (common/flash_dropout.cuh). CPU and CUDA share this
// code, so their masks are bit-identical (tests/reference.py has a NumPy copy).

// The high word of a * b (__umulhi on the device).
FA_HD uint32_t mulhi_u32(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

// One round with 64-bit products.
FA_HD void philox_round(uint32_t ctr[4], const uint32_t key[2]) {
  const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * ctr[0];
  const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * ctr[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  const uint32_t c0 = hi1 ^ ctr[1] ^ key[0], c2 = hi0 ^ ctr[3] ^ key[1];
  ctr[0] = c0; ctr[1] = lo1; ctr[2] = c2; ctr[3] = lo0;
}

// The same round with each product as 32-bit halves (mulhi_u32 and the low word).
FA_HD void philox_round_u32(uint32_t ctr[4], const uint32_t key[2]) {
  const uint32_t hi0 = mulhi_u32(0xD2511F53u, ctr[0]), lo0 = 0xD2511F53u * ctr[0];
  const uint32_t hi1 = mulhi_u32(0xCD9E8D57u, ctr[2]), lo1 = 0xCD9E8D57u * ctr[2];
  const uint32_t c0 = hi1 ^ ctr[1] ^ key[0], c2 = hi0 ^ ctr[3] ^ key[1];
  ctr[0] = c0; ctr[1] = lo1; ctr[2] = c2; ctr[3] = lo0;
}

// Ten rounds. kU32: philox_round_u32, the same words bit for bit (tests/test_dropout_philox.py
// compiles both forms on the host and compares them with tests/reference.py's). Inside the Hopper
// forward's tile loop nvcc 13.0 compiles the 64-bit products with an integer add on each high half
// (about 15 more instructions per call); the 32-bit form has none and made the forward with dropout
// 1.08x-1.10x faster on the H200 (benchmarks/RESULTS.md, "Dropout cost" (x)). In the Hopper backward
// it made the backward with dropout 1-4 % slower (measured in the same call), so only the forward's
// rows x keys draws take it (flash_dropout.cuh, drop_rows_visit's kU32).
//
// FA_PHILOX_ROUNDS (10): for timing experiments only, what the dropout cost would be with fewer rounds (a build of
// the kernel harness with -DFA_PHILOX_ROUNDS=7 or 0, then benchmarks/dropout_speed.py). Any other value than 10
// draws a mask unlike the CPU's, reference.py's and every other build's (dropout_speed.py's mask checks fail, as
// they should); build_ops.py never sets it.
#ifndef FA_PHILOX_ROUNDS
#define FA_PHILOX_ROUNDS 10
#endif
template <bool kU32 = false>
FA_HD void philox4x32_10(uint32_t ctr[4], uint32_t k0, uint32_t k1) {
  uint32_t key[2] = {k0, k1};
#pragma unroll
  for (int r = 0; r < FA_PHILOX_ROUNDS; ++r) {
    if constexpr (kU32) philox_round_u32(ctr, key);
    else philox_round(ctr, key);
    key[0] += 0x9E3779B9u;
    key[1] += 0xBB67AE85u;
  }
}

// Seed (two int64 words) to Philox key.
FA_HD void dropout_key_from_seed(int64_t s0, int64_t s1, uint32_t key[2]) {
  uint64_t x = static_cast<uint64_t>(s0) ^ (static_cast<uint64_t>(s1) * 0x9E3779B97F4A7C15ull +
                                             0x632BE59BD9B4E019ull);
  // splitmix64 finalizer, so nearby seeds give unrelated keys.
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  key[0] = static_cast<uint32_t>(x);
  key[1] = static_cast<uint32_t>(x >> 32);
}

// The Philox key of dp's seed (on the device, read through the read-only cache). The tile
// functions derive it once per tile and pass it to dropout_call / dropout_keep_key;
// dropout_keep derives it at every call (the SIMT kernels, host-side masks).
FA_HD void dropout_key(const DropoutParams& dp, uint32_t key[2]) {
#if defined(__CUDA_ARCH__)
  dropout_key_from_seed(__ldg(reinterpret_cast<const long long*>(dp.seed)),
                        __ldg(reinterpret_cast<const long long*>(dp.seed) + 1), key);
#else
  dropout_key_from_seed(dp.seed[0], dp.seed[1], key);
#endif
}

// Rate -> threshold and scale (the rule above). Host code: the op, the harness, the CPU kernels.
inline void dropout_set_rate(DropoutParams& dp, float rate) {
  dp.rate = rate;
  dp.threshold = 0;
  dp.keep_scale = 1.f;
  if (!(rate > 0.f)) return;
  double t = static_cast<double>(rate) * 65536.0 + 0.5;
  t = t < 65535.0 ? t : 65535.0;
  dp.threshold = static_cast<uint32_t>(t);  // floor(rate * 65536 + 1/2), at most 65535
  dp.keep_scale = static_cast<float>(65536.0 / (65536.0 - static_cast<double>(dp.threshold)));
}

// The Philox call's counter words 0 and 1 of element (row, col) and its half index k.
FA_HD uint32_t dropout_ctr_col(int64_t col) {
  return static_cast<uint32_t>(((col >> 5) << 3) | (col & 7));
}
FA_HD uint32_t dropout_ctr_row(int64_t row) {
  return static_cast<uint32_t>(((row >> 4) << 3) | (row & 7));
}
FA_HD int dropout_half_index(int64_t row, int64_t col) {
  return static_cast<int>(((row >> 3) & 1) * 4 + ((col >> 3) & 3));
}

// The four output words of the call with counter (c0, c1, h, b) under `key`.
FA_HD void dropout_call(const uint32_t key[2], uint32_t c0, uint32_t c1, int64_t b, int64_t h,
                        uint32_t out[4]) {
  out[0] = c0;
  out[1] = c1;
  out[2] = static_cast<uint32_t>(h);
  out[3] = static_cast<uint32_t>(b);
  philox4x32_10(out, key[0], key[1]);
}

// The 16-bit draw k (0..7) of a call's words.
FA_HD uint32_t dropout_draw(const uint32_t w[4], int k) {
  return (w[k >> 1] >> (16 * (k & 1))) & 0xFFFFu;
}

// Whether element (b, h, row, col) is kept, under dp's key (from dropout_key): one whole call per
// element (the SIMT kernels and host-side masks; the tiles share calls, common/flash_dropout.cuh).
FA_HD bool dropout_keep_key(const DropoutParams& dp, const uint32_t key[2], int64_t b, int64_t h,
                            int64_t row, int64_t col) {
  uint32_t w[4];
  dropout_call(key, dropout_ctr_col(col), dropout_ctr_row(row), b, h, w);
  return dropout_draw(w, dropout_half_index(row, col)) >= dp.threshold;
}

FA_HD bool dropout_keep(const DropoutParams& dp, int64_t b, int64_t h, int64_t row,
                        int64_t col) {
  uint32_t key[2];
  dropout_key(dp, key);
  return dropout_keep_key(dp, key, b, h, row, col);
}

}  // namespace flashattn

#endif  // TF_FLASHATTN_KERNELS_FLASH_PARAMS_H_
