// Does __vibmax_u16x2's predicate (sm_90: VIMNMX.U16x2) equal a >= b for every 16-bit a, ties included?
#include <cstdio>
#include <cstdint>
__global__ void k(const uint32_t* thr, int nthr, unsigned long long* bad) {
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;  // a pair of draws: lo = i, hi = 65535 - i
  if (i >= 65536) return;
  uint32_t w = (i & 0xffffu) | ((65535u - i) << 16);
  for (int j = 0; j < nthr; ++j) {
    uint32_t t = thr[j];
    bool hi, lo;
    (void)__vibmax_u16x2(w, t | (t << 16), &hi, &lo);
    bool wlo = (w & 0xffffu) >= t, whi = (w >> 16) >= t;
    if (lo != wlo) atomicAdd(&bad[0], 1ull);
    if (hi != whi) atomicAdd(&bad[1], 1ull);
  }
}
int main() {
  uint32_t h[6] = {0, 1, 6554, 32768, 65534, 65535};
  uint32_t* d; unsigned long long* b; unsigned long long hb[2];
  cudaMalloc(&d, sizeof h); cudaMalloc(&b, 16); cudaMemset(b, 0, 16);
  cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
  k<<<256, 256>>>(d, 6, b);
  cudaMemcpy(hb, b, 16, cudaMemcpyDeviceToHost);
  printf("vibmax_u16x2 mismatches against a >= t: lo %llu, hi %llu (of %d each)\n", hb[0], hb[1], 65536 * 6);
  return 0;
}
