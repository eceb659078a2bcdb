// SIMT backward in float32 arithmetic, no atomics (deterministic): the float32 path. (bwd_dq_simt
// also takes 16-bit inputs: a reference for the tensor-core kernels, not used by the launcher.)
//
// dQ kernel: 8 warps per CTA, warp w owns query row i = i0 + w; key tiles of 32 through shared
// memory, lane l handles key j = j0 + l:
//   P = 2^(z - log2e·lse), Z = keep_scale or 0, dlogit = P (Z dO·v_j - Dsum_i), dS = dlogit softcap'
//   dQ[d] += Σ_l dS_l K[j, d]            (lane owns d = lane + 32 c), dQ *= scale at the end.
// dK/dV kernel: 8 warps per CTA, warp w owns key j = j0 + w of kv head hk; for every query head of
// the group and every query tile of 32 rows that sees the keys, lane l handles row i = q0 + l:
//   dV[d] += Σ_l P_l Z_l dO[i, d],   dK[d] += Σ_l dS_l Q[i, d],   dK *= scale at the end.
#include "cc/kernels/common/flash_cuda_common.cuh"
#include "cc/kernels/common/flash_cuda_internal.h"

namespace flashattn {
namespace cuda {

constexpr int kBRows = 8;   // rows (warps) per CTA
constexpr int kBTile = 32;  // keys (dq) / queries (dkdv) per tile, one per lane

// One element's backward quantities; returns dS (d loss / d(scale q.k)), sets pd = P Z and
// dlogit = d loss / d logit (before the soft-cap derivative; what dbias holds).
template <typename T>
__device__ __forceinline__ float bwd_elem(const FlashBwdParams& p, float acc, float dpd, float lse2,
                                          float dsv, int64_t b, int64_t h, int64_t i, int64_t j,
                                          const RowInfo& ri, float* pd, float* dlogit_out) {
  const AttnShape& sh = p.shape;
  float dcap = 1.f;
  const float z = score_elem<T>(acc, p.mask, p.score, sh, b, h, i, j, ri, &dcap);
  const float pv = z == neg_inf() ? 0.f : exp2f(z - lse2);
  float zf = 1.f;
  if (p.dropout.rate > 0.f) zf = dropout_keep(p.dropout, b, h, i, j) ? p.dropout.keep_scale : 0.f;
  const float dlogit = pv * (dpd * zf - dsv);
  *pd = pv * zf;
  *dlogit_out = dlogit;
  return dlogit * dcap;
}

template <typename T>
__global__ void __launch_bounds__(256) bwd_dq_simt_kernel(const FlashBwdParams p, const float* dsum) {
  extern __shared__ float smem_f[];
  const AttnShape& sh = p.shape;
  const int D = static_cast<int>(sh.D), Dv = static_cast<int>(sh.Dv);
  float* sQ = smem_f;                       // [8, D]
  float* sdO = sQ + kBRows * D;             // [8, Dv]
  float* sK = sdO + kBRows * Dv;            // [32, D + 1]
  float* sV = sK + kBTile * (D + 1);        // [32, Dv + 1]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kBRows;
  const int64_t h = blockIdx.y, b = blockIdx.z, hk = h / (sh.H / sh.Hkv);
  const int64_t i = i0 + warp;
  const int64_t qlim = q_limit(p.mask, sh, b), klim = k_limit(p.mask, sh, b);
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const T* d_o = static_cast<const T*>(p.d_o);
  load_rows_f32(sQ, D, q, sh.q_stride, b, h, i0, kBRows, sh.Tq, D);
  load_rows_f32(sdO, Dv, d_o, sh.o_stride, b, h, i0, kBRows, sh.Tq, Dv);
  int64_t kbeg = 0, kend = 0;
  if (i0 < qlim) block_keys(p.mask, i0, (i0 + kBRows < qlim ? i0 + kBRows : qlim) - 1, klim, &kbeg, &kend);
  const RowInfo ri = row_info(p.mask, sh, b, i, qlim, klim);
  const int64_t row = (b * sh.H + h) * sh.Tq + i;
  const float lse2 = i < sh.Tq ? p.lse[row] * kLog2e : 0.f;
  const float dsv = i < sh.Tq ? dsum[row] : 0.f;
  float dq[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) dq[c] = 0.f;
  for (int64_t j0 = kbeg - kbeg % kBTile; j0 < kend; j0 += kBTile) {
    __syncthreads();
    load_rows_f32(sK, D + 1, k, sh.k_stride, b, hk, j0, kBTile, sh.Tk, D);
    load_rows_f32(sV, Dv + 1, v, sh.v_stride, b, hk, j0, kBTile, sh.Tk, Dv);
    __syncthreads();
    const int64_t j = j0 + lane;
    float acc = 0.f, dpd = 0.f;
    for (int d = 0; d < D; ++d) acc = fmaf(sQ[warp * D + d], sK[lane * (D + 1) + d], acc);
    for (int d = 0; d < Dv; ++d) dpd = fmaf(sdO[warp * Dv + d], sV[lane * (Dv + 1) + d], dpd);
    float pd, dlogit;
    const float ds = bwd_elem<T>(p, acc, dpd, lse2, dsv, b, h, i, j, ri, &pd, &dlogit);
    if (p.dbias && i < sh.Tq && j < sh.Tk) p.dbias[row * sh.Tk + j] = dlogit;
    for (int jj = 0; jj < kBTile; ++jj) {
      const float dsj = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
      for (int c = 0; c < 8; ++c)
        if (lane + 32 * c < D) dq[c] = fmaf(dsj, sK[jj * (D + 1) + lane + 32 * c], dq[c]);
    }
  }
  if (i >= sh.Tq) return;
  T* dst = static_cast<T*>(p.dq) + b * sh.q_stride[0] + i * sh.q_stride[1] + h * sh.q_stride[2];
#pragma unroll
  for (int c = 0; c < 8; ++c)
    if (lane + 32 * c < D) dst[lane + 32 * c] = Elem<T>::from_f(dq[c] * p.score.scale);
}

template <typename T>
__global__ void __launch_bounds__(256) bwd_dkdv_simt_kernel(const FlashBwdParams p, const float* dsum) {
  extern __shared__ float smem_f[];
  const AttnShape& sh = p.shape;
  const int D = static_cast<int>(sh.D), Dv = static_cast<int>(sh.Dv);
  float* sKr = smem_f;                      // [8, D]   this CTA's key rows
  float* sVr = sKr + kBRows * D;            // [8, Dv]
  float* sQ = sVr + kBRows * Dv;            // [32, D + 1]
  float* sdO = sQ + kBTile * (D + 1);       // [32, Dv + 1]
  float* sL = sdO + kBTile * (Dv + 1);      // [32] log2e * lse
  float* sDs = sL + kBTile;                 // [32] Dsum
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kBRows;
  const int64_t hk = blockIdx.y, b = blockIdx.z, G = sh.H / sh.Hkv;
  const int64_t j = j0 + warp;
  const int64_t qlim = q_limit(p.mask, sh, b), klim = k_limit(p.mask, sh, b);
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const T* d_o = static_cast<const T*>(p.d_o);
  load_rows_f32(sKr, D, k, sh.k_stride, b, hk, j0, kBRows, sh.Tk, D);
  load_rows_f32(sVr, Dv, v, sh.v_stride, b, hk, j0, kBRows, sh.Tk, Dv);
  float dk[8], dv[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) dk[c] = dv[c] = 0.f;
  for (int64_t h = hk * G; j0 < klim && h < (hk + 1) * G; ++h) {
    for (int64_t q0 = 0; q0 < qlim; q0 += kBTile) {
      int64_t kb, ke;
      block_keys(p.mask, q0, (q0 + kBTile < qlim ? q0 + kBTile : qlim) - 1, klim, &kb, &ke);
      if (ke <= kb || ke <= j0 || kb >= j0 + kBRows) continue;
      __syncthreads();
      load_rows_f32(sQ, D + 1, q, sh.q_stride, b, h, q0, kBTile, sh.Tq, D);
      load_rows_f32(sdO, Dv + 1, d_o, sh.o_stride, b, h, q0, kBTile, sh.Tq, Dv);
      for (int x = threadIdx.x; x < kBTile; x += blockDim.x) {
        const int64_t r = q0 + x;
        sL[x] = r < sh.Tq ? p.lse[(b * sh.H + h) * sh.Tq + r] * kLog2e : 0.f;
        sDs[x] = r < sh.Tq ? dsum[(b * sh.H + h) * sh.Tq + r] : 0.f;
      }
      __syncthreads();
      const int64_t i = q0 + lane;
      float acc = 0.f, dpd = 0.f;
      for (int d = 0; d < D; ++d) acc = fmaf(sKr[warp * D + d], sQ[lane * (D + 1) + d], acc);
      for (int d = 0; d < Dv; ++d) dpd = fmaf(sVr[warp * Dv + d], sdO[lane * (Dv + 1) + d], dpd);
      const RowInfo ri = row_info(p.mask, sh, b, i, qlim, klim);
      float pd, dlogit;
      const float ds = bwd_elem<T>(p, acc, dpd, sL[lane], sDs[lane], b, h, i, j, ri, &pd, &dlogit);
      for (int ii = 0; ii < kBTile; ++ii) {
        const float pdi = __shfl_sync(0xffffffffu, pd, ii);
        const float dsi = __shfl_sync(0xffffffffu, ds, ii);
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          if (lane + 32 * c < Dv) dv[c] = fmaf(pdi, sdO[ii * (Dv + 1) + lane + 32 * c], dv[c]);
          if (lane + 32 * c < D) dk[c] = fmaf(dsi, sQ[ii * (D + 1) + lane + 32 * c], dk[c]);
        }
      }
    }
  }
  if (j >= sh.Tk) return;
  T* dkr = static_cast<T*>(p.dk) + b * sh.k_stride[0] + j * sh.k_stride[1] + hk * sh.k_stride[2];
  T* dvr = static_cast<T*>(p.dv) + b * sh.v_stride[0] + j * sh.v_stride[1] + hk * sh.v_stride[2];
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    if (lane + 32 * c < D) dkr[lane + 32 * c] = Elem<T>::from_f(dk[c] * p.score.scale);
    if (lane + 32 * c < Dv) dvr[lane + 32 * c] = Elem<T>::from_f(dv[c]);
  }
}

template <typename T>
static cudaError_t launch_dq(const FlashBwdParams& p, const float* dsum, cudaStream_t stream) {
  const AttnShape& s = p.shape;
  const size_t smem = sizeof(float) * (kBRows * (s.D + s.Dv) + kBTile * (s.D + 1 + s.Dv + 1));
  cudaError_t err = set_dynamic_smem(bwd_dq_simt_kernel<T>, static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  dim3 grid(static_cast<unsigned>((s.Tq + kBRows - 1) / kBRows), static_cast<unsigned>(s.H),
            static_cast<unsigned>(s.B));
  bwd_dq_simt_kernel<T><<<grid, 256, smem, stream>>>(p, dsum);
  return cudaGetLastError();
}

cudaError_t bwd_dq_simt(const FlashBwdParams& p, const float* dsum, cudaStream_t stream) {
  if (p.shape.H > 65535 || p.shape.B > 65535) return cudaErrorInvalidValue;
  switch (p.dtype) {
    case DType::kFloat32: return launch_dq<float>(p, dsum, stream);
    case DType::kFloat16: return launch_dq<__half>(p, dsum, stream);
    case DType::kBFloat16: return launch_dq<__nv_bfloat16>(p, dsum, stream);
    default: return cudaErrorNotSupported;
  }
}

cudaError_t bwd_dkdv_simt(const FlashBwdParams& p, const float* dsum, cudaStream_t stream) {
  const AttnShape& s = p.shape;
  if (p.dtype != DType::kFloat32) return cudaErrorNotSupported;
  if (s.Hkv > 65535 || s.B > 65535) return cudaErrorInvalidValue;
  const size_t smem = sizeof(float) * (kBRows * (s.D + s.Dv) + kBTile * (s.D + 1 + s.Dv + 1) + 2 * kBTile);
  cudaError_t err = set_dynamic_smem(bwd_dkdv_simt_kernel<float>, static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  dim3 grid(static_cast<unsigned>((s.Tk + kBRows - 1) / kBRows), static_cast<unsigned>(s.Hkv),
            static_cast<unsigned>(s.B));
  bwd_dkdv_simt_kernel<float><<<grid, 256, smem, stream>>>(p, dsum);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace flashattn
