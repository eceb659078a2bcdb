// Tensor-core rate of the Hopper backward's wgmma forms alone (no softmax, no loads, no barriers): how fast
// the D = 128 backward's products could run if nothing else held them up. Each CTA (one per SM: 132, 150 KiB
// of shared memory each) runs W = 1 or 2 consumer warpgroups (the kernel's 2), each issuing its form ITERS times on operands that stay
// in shared memory (and registers), committing and waiting as the kernel does; CUDA events time the launch.
// Forms (per warpgroup and iteration; the shared-memory layouts and descriptors of flash_bwd_sm90.cu):
//   s_t    S^T = K_c Q^T: 8 x m64n64k16, A and B K-major in shared memory (also dP^T = V_c dO^T)
//   dq     dQ_c = dS K: 8 x m64n64k16 <1, 1>, A and B MN-major in shared memory
//   dkv    dV += P^T dO: 4 x m64n128k16, A from registers, B MN-major (also dK += dS^T Q)
//   s128   the forward's S = Q K^T: 8 x m64n128k16, both K-major (for comparison)
//   unit   one backward unit's products in the kernel's order and groups: S^T, dP^T, wait 1, wait 0, dV,
//          dK, dQ, wait 0 (5 of the forms above: 1 x 64 x 64 x 128 x 3 + 2 x 64 x 128 x 64 MACs)
// Prints TFLOP/s (2 flops per MAC) per form and warpgroup count, and the fraction of 989 TFLOP/s (the H100 /
// H200 SXM dense bf16 figure). Operands hold small bf16 values (not zeros: tensor-core power depends on data).
//   nvcc -std=c++17 -O3 -I. -gencode arch=compute_90a,code=sm_90a benchmarks/sm90_wgmma_rate.cu -o /tmp/wr && /tmp/wr
#include <cuda_runtime.h>

#include <cstdio>

#include "cc/kernels/sm90/sm90_ptx.cuh"

using namespace flashattn::cuda::sm90;
using Bf = __nv_bfloat16;

namespace {

constexpr int kSmem = 150 * 1024;  // one CTA per SM
constexpr int kBk = 128, kBq = 64;
enum Form { kST = 0, kDQ = 1, kDKV = 2, kS128 = 3, kUnit = 4 };
const char* kNames[] = {"s_t", "dq", "dkv", "s128", "unit"};
// MACs per warpgroup and iteration.
constexpr double kMacs[] = {64.0 * 64 * 128, 64.0 * 64 * 128, 64.0 * 128 * 64, 64.0 * 128 * 128,
                            3 * 64.0 * 64 * 128 + 2 * 64.0 * 128 * 64};

template <int kForm>
__global__ void __launch_bounds__(256, 1) rate_kernel(int iters, float* sink) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* tile = smem_raw + (base - raw);
  // 112 KiB of small values: K / V [128 x 128] (two 64-column panels of 128 rows), Q / dO [64 x 128], dS^T
  // [128 x 64], at the kernel's offsets below.
  for (int i = threadIdx.x; i < 112 * 1024 / 2; i += blockDim.x)
    reinterpret_cast<Bf*>(tile)[i] = __float2bfloat16(((i * 37) % 17 - 8) * 0.0625f);
  fence_proxy_async();
  __syncthreads();
  const int c = threadIdx.x / 128;  // consumer warpgroup: the operands of consumer c
  const uint32_t k_t = base, v_t = base + 32768, q_t = base + 65536, do_t = base + 81920, ds_t = base + 98304;
  const uint32_t k_rows = k_t + c * 64 * 128, v_rows = v_t + c * 64 * 128;
  uint32_t pa[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int x = 0; x < 4; ++x) pa[kk][x] = 0x3c003c00u ^ (threadIdx.x * 0x00010001u & 0x00ff00ffu);
  auto s_t = [&](float (&d)[32], uint32_t rows, uint32_t b) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint32_t koff = (k / 4) * kBk * 128 + (k % 4) * 32, qoff = (k / 4) * kBq * 128 + (k % 4) * 32;
      wgmma_ss_m64n64k16<0, 0>(WgmmaType<Bf>{}, d, wgmma_desc(rows + koff, 16, 1024), wgmma_desc(b + qoff, 16, 1024), 1);
    }
  };
  auto dkv = [&](float (&d)[64], uint32_t b) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_rs_m64nDk16_tb<Bf, 128>(d, pa[kk], wgmma_desc(b + kk * 2048, kBq * 128, 1024));
  };
  auto dq_form = [&](float (&d)[32]) {
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)
      wgmma_ss_m64n64k16<1, 1>(WgmmaType<Bf>{}, d, wgmma_desc(ds_t + 16 * kk * 128, kBk * 128, 1024),
                               wgmma_desc(k_t + c * kBk * 128 + kk * 2048, kBk * 128, 1024), 1);
  };
  // Every product accumulates (scale-d 1) into accumulators kept across the iterations and summed into `sink`
  // at the end: ptxas drops wgmmas whose results are never read. The unit form's dQ adds into S^T's registers
  // (the kernel's dQ lives after P and dS are packed), so that it stays within the kernel's 208 accumulator
  // and A-fragment registers.
  float d32[32], d32b[32], dk[64], dv[64];
#pragma unroll
  for (int i = 0; i < 32; ++i) d32[i] = d32b[i] = 0.f;
#pragma unroll
  for (int i = 0; i < 64; ++i) dk[i] = dv[i] = 0.f;
  for (int it = 0; it < iters; ++it) {
    if constexpr (kForm == kST || kForm == kDQ) {
      float (&d)[32] = d32;
      wgmma_fence();
      if constexpr (kForm == kST) s_t(d, k_rows, q_t);
      else dq_form(d);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(d);
    } else if constexpr (kForm == kDKV) {
      wgmma_fence();
      dkv(dv, do_t);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(dv);
    } else if constexpr (kForm == kS128) {
      float (&d)[64] = dk;
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < 8; ++k)
        wgmma_ss_m64n128k16(WgmmaType<Bf>{}, d, wgmma_desc(q_t + (k / 4) * kBq * 128 + (k % 4) * 32, 16, 1024),
                            wgmma_desc(k_t + (k / 4) * kBk * 128 + (k % 4) * 32, 16, 1024), 1);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(d);
    } else {  // kUnit
      float (&sacc)[32] = d32;
      float (&dpacc)[32] = d32b;
      float (&dq)[32] = d32;
      wgmma_fence();
      s_t(sacc, k_rows, q_t);
      wgmma_commit();
      s_t(dpacc, v_rows, do_t);
      wgmma_commit();
      wgmma_wait<1>();
      fence_regs(sacc);
      wgmma_wait<0>();
      fence_regs(dpacc);
      fence_regs(dv);
      wgmma_fence();
      dkv(dv, do_t);
      wgmma_commit();
      fence_regs(dk);
      wgmma_fence();
      dkv(dk, q_t);
      wgmma_commit();
      wgmma_fence();
      dq_form(dq);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(dv);
      fence_regs(dk);
      fence_regs(dq);
    }
  }
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < 32; ++i) sum += d32[i] + d32b[i];
#pragma unroll
  for (int i = 0; i < 64; ++i) sum += dk[i] + dv[i];
  if (sum == 1.2345e-30f) sink[threadIdx.x] = sum;
}

template <int kForm>
float time_form(int sms, int w, int iters, float* sink) {
  cudaFuncSetAttribute(rate_kernel<kForm>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  rate_kernel<kForm><<<sms, 128 * w, kSmem>>>(10, sink);  // warm-up
  cudaEventRecord(e0);
  rate_kernel<kForm><<<sms, 128 * w, kSmem>>>(iters, sink);
  cudaEventRecord(e1);
  float ms = -1.f;
  if (cudaEventSynchronize(e1) == cudaSuccess && cudaGetLastError() == cudaSuccess) cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms;
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int iters = 4000;
  float* sink = nullptr;
  cudaMalloc(&sink, 256 * sizeof(float));
  std::printf("form  warpgroups  TFLOP/s  of 989\n");
  for (int form = kST; form <= kUnit; ++form)
    for (int w = 1; w <= 2; ++w) {
      const float ms = form == kST     ? time_form<kST>(sms, w, iters, sink)
                       : form == kDQ   ? time_form<kDQ>(sms, w, iters, sink)
                       : form == kDKV  ? time_form<kDKV>(sms, w, iters, sink)
                       : form == kS128 ? time_form<kS128>(sms, w, iters, sink)
                                       : time_form<kUnit>(sms, w, iters, sink);
      if (ms <= 0.f) {
        std::printf("%-5s %d  error: %s\n", kNames[form], w, cudaGetErrorString(cudaGetLastError()));
        return 1;
      }
      const double tflops = 2.0 * kMacs[form] * iters * w * sms / (ms * 1e-3) / 1e12;
      std::printf("%-5s %d           %7.1f  %.2f\n", kNames[form], w, tflops, tflops / 989.0);
    }
  return 0;
}
