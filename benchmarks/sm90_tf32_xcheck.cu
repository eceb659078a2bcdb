// Host cross-check of flash_fwd_sm90_tf32.cu's layout functions (swz128_offset_f32, tf32_kperm,
// vt_offset) against benchmarks/sm90_tf32_model.py's transcriptions, no GPU needed:
//   nvcc -std=c++17 -I. -gencode arch=compute_90a,code=sm_90a -DFA_HAS_SM90=1 benchmarks/sm90_tf32_xcheck.cu \
//     -o /tmp/sm90_tf32_xcheck && /tmp/sm90_tf32_xcheck > /tmp/xcheck.txt && \
//     python3 benchmarks/sm90_tf32_model.py --cxx /tmp/xcheck.txt
#include <cstdio>

#include "cc/kernels/sm90/flash_fwd_sm90_tf32.cu"

int main() {
  using namespace flashattn::cuda::sm90;
  for (int R : {64, 128})
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 128; ++c) std::printf("S %d %d %d %u\n", R, r, c, swz128_offset_f32(R, r, c));
  for (int j = 0; j < 64; ++j) std::printf("P %d %d\n", j, tf32_kperm(j));
  for (int dv : {64, 128})
    for (int d = 0; d < dv; ++d)
      for (int key = 0; key < 64; ++key) std::printf("V %d %d %d %u\n", dv, d, key, vt_offset(dv, d, key));
  return 0;
}
