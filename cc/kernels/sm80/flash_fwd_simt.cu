// SIMT forward in full float32 arithmetic (float32 inputs; no tensor cores).
//
// One CTA of 8 warps per (8 query rows, head h, batch b); warp w owns row i0 + w. Tiles of 32
// keys go through shared memory as float32; lane l scores key j0 + l:
//   z_l = log2e * logit(q_i · k_j)      (score_elem: scale, soft-cap, bias, masks)
//   m' = max(m, max_l z_l), p_l = 2^(z_l - m'), ℓ = 2^(m - m') ℓ + Σ_l p_l
//   O[d] = 2^(m - m') O[d] + Σ_l dropout(p_l) V[j0 + l, d]  (lane owns d = lane + 32 c)
// then O /= ℓ and lse = ln2 (m + log2 ℓ).
#include "cc/kernels/common/flash_cuda_common.cuh"
#include "cc/kernels/common/flash_cuda_internal.h"

namespace flashattn {
namespace cuda {

constexpr int kSimtRows = 8;   // query rows (warps) per CTA
constexpr int kSimtKeys = 32;  // keys per tile (one per lane)

template <typename T>
__global__ void __launch_bounds__(256) fwd_simt_kernel(const FlashFwdParams p) {
  extern __shared__ float smem_f[];
  const AttnShape& sh = p.shape;
  const int D = static_cast<int>(sh.D), Dv = static_cast<int>(sh.Dv);
  float* sQ = smem_f;                        // [8, D]
  float* sK = sQ + kSimtRows * D;            // [32, D + 1] (odd stride: no bank conflicts)
  float* sV = sK + kSimtKeys * (D + 1);      // [32, Dv]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kSimtRows;
  const int64_t h = blockIdx.y, b = blockIdx.z, hk = h / (sh.H / sh.Hkv);
  const int64_t i = i0 + warp;
  const int64_t qlim = q_limit(p.mask, sh, b), klim = k_limit(p.mask, sh, b);
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);

  int64_t kbeg = 0, kend = 0;
  if (i0 < qlim) block_keys(p.mask, i0, (i0 + kSimtRows < qlim ? i0 + kSimtRows : qlim) - 1, klim, &kbeg, &kend);
  load_rows_f32(sQ, D, q, sh.q_stride, b, h, i0, kSimtRows, sh.Tq, D);
  const RowInfo ri = row_info(p.mask, sh, b, i, qlim, klim);
  float o[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) o[c] = 0.f;
  float m = neg_inf(), l = 0.f;
  for (int64_t j0 = kbeg - kbeg % kSimtKeys; j0 < kend; j0 += kSimtKeys) {
    __syncthreads();  // previous tile consumed (and sQ written, first time)
    load_rows_f32(sK, D + 1, k, sh.k_stride, b, hk, j0, kSimtKeys, sh.Tk, D);
    load_rows_f32(sV, Dv, v, sh.v_stride, b, hk, j0, kSimtKeys, sh.Tk, Dv);
    __syncthreads();
    const int64_t j = j0 + lane;
    float acc = 0.f;
    for (int d = 0; d < D; ++d) acc = fmaf(sQ[warp * D + d], sK[lane * (D + 1) + d], acc);
    const float z = score_elem<T>(acc, p.mask, p.score, sh, b, h, i, j, ri, nullptr);
    float mx = z;
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, s));
    const float mnew = fmaxf(m, mx);
    const float muse = mnew == neg_inf() ? 0.f : mnew;
    const float alpha = exp2f(m - muse);
    float pv = exp2f(z - muse);
    float sum = pv;
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, s);
    l = l * alpha + sum;
    m = mnew;
    if (p.dropout.rate > 0.f) pv = dropout_keep(p.dropout, b, h, i, j) ? pv * p.dropout.keep_scale : 0.f;
#pragma unroll
    for (int c = 0; c < 8; ++c) o[c] *= alpha;
    for (int jj = 0; jj < kSimtKeys; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, pv, jj);
#pragma unroll
      for (int c = 0; c < 8; ++c)
        if (lane + 32 * c < Dv) o[c] = fmaf(pj, sV[jj * Dv + lane + 32 * c], o[c]);
    }
  }
  if (i >= sh.Tq) return;
  const bool any = l > 0.f || l != l;
  const float inv = any ? 1.f / l : 0.f;
  T* dst = static_cast<T*>(p.o) + b * sh.o_stride[0] + i * sh.o_stride[1] + h * sh.o_stride[2];
#pragma unroll
  for (int c = 0; c < 8; ++c)
    if (lane + 32 * c < Dv) dst[lane + 32 * c] = Elem<T>::from_f(o[c] * inv);
  if (lane == 0) p.lse[(b * sh.H + h) * sh.Tq + i] = any ? (m + log2f(l)) * kLn2 : neg_inf();
}

cudaError_t fwd_simt(const FlashFwdParams& p, cudaStream_t stream) {
  const AttnShape& s = p.shape;
  const size_t smem = sizeof(float) * (kSimtRows * s.D + kSimtKeys * (s.D + 1) + kSimtKeys * s.Dv);
  if (s.H > 65535 || s.B > 65535) return cudaErrorInvalidValue;
  dim3 grid(static_cast<unsigned>((s.Tq + kSimtRows - 1) / kSimtRows), static_cast<unsigned>(s.H),
            static_cast<unsigned>(s.B));
  if (p.dtype != DType::kFloat32) return cudaErrorNotSupported;
  cudaError_t err = set_dynamic_smem(fwd_simt_kernel<float>, static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  fwd_simt_kernel<float><<<grid, 256, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace flashattn
