// Pieces shared by the Hopper TF32 kernels (sm90/flash_fwd_sm90_tf32.cu, sm90/flash_bwd_sm90_tf32.cu):
// the k8-step permutation that lets wgmma accumulators serve as register A fragments, the in-place
// rounding of a shared-memory tile, and the accumulator -> A fragment packing. Include only from
// sources compiled for sm_90a alone, after sm90_ptx.cuh and common/flash_cuda_common.cuh (to_tf32).
#ifndef TF_FLASHATTN_KERNELS_SM90_SM90_TF32_CUH_
#define TF_FLASHATTN_KERNELS_SM90_SM90_TF32_CUH_

#include <cstdint>
#include <type_traits>

#include "cc/kernels/common/flash_cuda_common.cuh"  // to_tf32
#include "cc/kernels/sm90/sm90_ptx.cuh"

namespace flashattn {
namespace cuda {
namespace sm90 {

// The optional features of the TF32 kernels (the forward's index-masked kernels and both backwards: their FEAT
// template argument, bits of Tf32Feat): soft-cap (s = c tanh(scale S / c), sm80's score_elem), dropout
// (flash_dropout.cuh's mask, the CPU's and sm80's bit for bit) and a dense mask and / or bias (with dbias in the
// backwards; not with dropout), each its own instantiation so that the kernels without it carry none of its code.
enum Tf32Feat : int { kTf32Cap = 1, kTf32Drop = 2, kTf32Dense = 4 };
// The soft-cap and dropout bits of a call.
__host__ __device__ inline int tf32_feat(float softcap, float dropout_rate) {
  return (softcap != 0.f ? kTf32Cap : 0) | (dropout_rate > 0.f ? kTf32Drop : 0);
}
// The one switch from a call's feature bits to the instantiation: f(std::integral_constant<int, FEAT>{}) for the
// sets the kernels are instantiated for (soft-cap, dropout, both; with kDense also a dense mask / bias alone or
// with soft-cap); 0 for any other set (the callers refuse those before).
template <bool kDense, class F>
auto tf32_feat_switch(int feat, F&& f) -> decltype(f(std::integral_constant<int, 0>{})) {
  switch (feat) {
    case kTf32Cap: return f(std::integral_constant<int, kTf32Cap>{});
    case kTf32Drop: return f(std::integral_constant<int, kTf32Drop>{});
    case kTf32Cap | kTf32Drop: return f(std::integral_constant<int, kTf32Cap | kTf32Drop>{});
    default: break;
  }
  if constexpr (kDense) {
    if (feat == kTf32Dense) return f(std::integral_constant<int, kTf32Dense>{});
    if (feat == (kTf32Dense | kTf32Cap)) return f(std::integral_constant<int, kTf32Dense | kTf32Cap>{});
  }
  return f(std::integral_constant<int, 0>{});
}

// Position of index j (a key in the forward's V^T, a query in the backward's Q^T / dO^T) within its
// k8 step: 2u at position u, 2u + 1 at position u + 4 (j's step and panel unchanged). A wgmma m64nN
// accumulator holds columns 8kk + 2t, 8kk + 2t + 1 in thread t, which are then columns t, t + 4 of the
// step's m64k8 .tf32 A fragment (pack_p_step): the accumulators serve as the A operand without a
// shuffle, when the B operand's rows (K-major, the contraction index) are stored in this order.
__host__ __device__ constexpr int tf32_kperm(int j) { return (j & ~7) | ((j & 1) << 2) | ((j & 7) >> 1); }
// The index at position `pos`: the inverse of tf32_kperm (position u < 4 holds 2u, u + 4 holds 2u + 1).
__host__ __device__ constexpr int tf32_kperm_inv(int pos) { return (pos & ~7) | ((pos & 3) << 1) | ((pos >> 2) & 1); }
static_assert(tf32_kperm_inv(tf32_kperm(5)) == 5 && tf32_kperm_inv(tf32_kperm(62)) == 62 && tf32_kperm(tf32_kperm_inv(3)) == 3,
              "tf32_kperm_inv inverts tf32_kperm");

// Rounds `bytes` (a multiple of 16) of float32 at addr to tf32 in place, n threads numbered tid
// (16 bytes per thread and step: consecutive threads on consecutive chunks).
__device__ __forceinline__ void round_tf32_smem(uint32_t addr, int bytes, int tid, int n) {
  for (int off = tid * 16; off < bytes; off += n * 16) {
    uint32_t x, y, z, w;
    ld_shared_v4_u32(addr + off, x, y, z, w);
    st_shared_v4_u32(addr + off, to_tf32(__uint_as_float(x)), to_tf32(__uint_as_float(y)),
                     to_tf32(__uint_as_float(z)), to_tf32(__uint_as_float(w)));
  }
}

// acc [64 x N] += A B by one wgmma m64nNk8 .tf32 RS (N = 64, 128 or 256: the head dim), A this thread's fragments,
// B at desc_b.
template <int N>
__device__ __forceinline__ void wgmma_tf32_rs_acc(float (&acc)[N / 2], const uint32_t (&a)[4], uint64_t desc_b) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma N");
  if constexpr (N == 256) wgmma_tf32_rs_m64n256k8(acc, a, desc_b, 1);
  else if constexpr (N == 128) wgmma_tf32_rs_m64n128k8(acc, a, desc_b, 1);
  else wgmma_tf32_rs_m64n64k8(acc, a, desc_b, 1);
}

// S [64 x N] (= or +=, accumulate) A B by one wgmma m64nNk8 .tf32 SS (N = 32 or 64: the keys of a K tile).
template <int N>
__device__ __forceinline__ void wgmma_tf32_ss_s(float (&acc)[N / 2], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  static_assert(N == 32 || N == 64, "wgmma N");
  if constexpr (N == 64) wgmma_tf32_ss_m64n64k8(acc, desc_a, desc_b, accumulate);
  else wgmma_tf32_ss_m64n32k8(acc, desc_a, desc_b, accumulate);
}

// The accumulators of one k8 step kk (s4 = acc + 4 kk: columns 8kk + 2t, +1 of rows g, g + 8) as the
// m64k8 .tf32 A fragment under tf32_kperm, rounded (cvt.rna): a[0] = A[g][t] = acc column 2t of row g,
// a[1] = A[g + 8][t], a[2] = A[g][t + 4] = column 2t + 1, a[3] = A[g + 8][t + 4].
__device__ __forceinline__ void pack_p_step(uint32_t (&a)[4], const float* s4) {
  a[0] = to_tf32(s4[0]);
  a[1] = to_tf32(s4[2]);
  a[2] = to_tf32(s4[1]);
  a[3] = to_tf32(s4[3]);
}

}  // namespace sm90
}  // namespace cuda
}  // namespace flashattn

#endif  // TF_FLASHATTN_KERNELS_SM90_SM90_TF32_CUH_
