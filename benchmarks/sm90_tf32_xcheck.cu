// Host cross-check of flash_fwd_sm90_tf32.cu's layout functions (swz128_offset_f32, tf32_kperm,
// vt_offset; variant 3's tf32_kperm_inv and tf32_prepass_layout) against benchmarks/sm90_tf32_model.py's
// transcriptions, no GPU needed:
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
  // Variant 3: tf32_kperm_inv and the workspace layout (tk_pad, vt_off, bytes) of a few shapes.
  for (int j = 0; j < 64; ++j) std::printf("I %d %d\n", j, tf32_kperm_inv(j));
  for (int tk : {1, 64, 100, 128, 203, 4096})
    for (int d : {64, 128}) {
      flashattn::AttnShape s;
      s.B = 3, s.Tk = tk, s.Hkv = 5, s.D = d;
      const Tf32PrepassLayout w = tf32_prepass_layout(s);
      std::printf("W %d %d %lld %lld %lld\n", tk, d, static_cast<long long>(w.tk_pad), static_cast<long long>(w.vt_off),
                  static_cast<long long>(w.bytes));
    }
  return 0;
}
