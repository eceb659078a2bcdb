// Kernel-level harness: a plain C ABI over the CUDA launchers (cc/kernels/flash_cuda.h), called
// from Python through ctypes with raw device pointers (torch's tensor.data_ptr()), so the kernels
// can be checked and timed against PyTorch on the same buffers without TensorFlow.
// (A C ABI instead of pybind11: the .so is built on a machine whose Python differs from the GPU
// machine's python3.12; ctypes needs no Python headers.)
//
// Build: see benchmarks/build_harness.sh. Used by benchmarks/kernel_harness_check.py.
//
// iv (int64[40]):  0 dtype (0 f32, 1 f16, 2 bf16), 1 B, 2 Tq, 3 Tk, 4 H, 5 Hkv, 6 D, 7 Dv,
//                  8-10 q strides (batch, time, head), 11-13 k, 14-16 v, 17-19 o (and dO),
//                  20 causal, 21 causal_offset, 22 window_left, 23 window_right,
//                  24-27 mask strides, 28-31 bias strides, 32 seed0, 33 seed1, 34 deterministic,
//                  35 allow_tf32
// fv (double[4]):  0 scale, 1 softcap, 2 dropout rate
// ptrs (uint64[20]): 0 q, 1 k, 2 v, 3 o, 4 lse, 5 mask, 6 bias, 7 q_lengths, 8 k_lengths,
//                  9 q_valid, 10 k_valid, 11 dO, 12 dq, 13 dk, 14 dv, 15 dbias, 16 workspace,
//                  17 d_lse, 18 stream
#include <algorithm>
#include <cmath>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "cc/kernels/flash_cuda.h"

namespace {

using namespace flashattn;

template <typename P>
void fill_common(P* p, const int64_t* iv, const double* fv, const uint64_t* ptrs) {
  p->dtype = static_cast<DType>(iv[0]);
  AttnShape& s = p->shape;
  s.B = iv[1]; s.Tq = iv[2]; s.Tk = iv[3]; s.H = iv[4]; s.Hkv = iv[5]; s.D = iv[6]; s.Dv = iv[7];
  for (int x = 0; x < 3; ++x) {
    s.q_stride[x] = iv[8 + x];
    s.k_stride[x] = iv[11 + x];
    s.v_stride[x] = iv[14 + x];
    s.o_stride[x] = iv[17 + x];
  }
  MaskParams& m = p->mask;
  m.causal = iv[20] != 0;
  m.causal_offset = iv[21];
  m.window_left = iv[22];
  m.window_right = iv[23];
  m.mask = reinterpret_cast<const bool*>(ptrs[5]);
  for (int x = 0; x < 4; ++x) {
    m.mask_stride[x] = iv[24 + x];
    p->score.bias_stride[x] = iv[28 + x];
  }
  m.q_lengths = reinterpret_cast<const int32_t*>(ptrs[7]);
  m.k_lengths = reinterpret_cast<const int32_t*>(ptrs[8]);
  m.q_valid = reinterpret_cast<const bool*>(ptrs[9]);
  m.k_valid = reinterpret_cast<const bool*>(ptrs[10]);
  p->score.scale = static_cast<float>(fv[0]);
  p->score.softcap = static_cast<float>(fv[1]);
  p->score.bias = reinterpret_cast<const void*>(ptrs[6]);
  DropoutParams& dp = p->dropout;
  dp.rate = static_cast<float>(fv[2]);
  if (dp.rate > 0.f) {
    const double t = std::floor(static_cast<double>(dp.rate) * 4294967296.0);
    dp.threshold = static_cast<uint32_t>(std::min(t, 4294967295.0));
    dp.keep_scale = 1.f / (1.f - dp.rate);
    dropout_key_from_seed(iv[32], iv[33], dp.key);
  }
  p->q = reinterpret_cast<const void*>(ptrs[0]);
  p->k = reinterpret_cast<const void*>(ptrs[1]);
  p->v = reinterpret_cast<const void*>(ptrs[2]);
  p->allow_tf32 = iv[35] != 0;
}

FlashBwdParams make_bwd(const int64_t* iv, const double* fv, const uint64_t* ptrs) {
  FlashBwdParams p;
  fill_common(&p, iv, fv, ptrs);
  p.o = reinterpret_cast<const void*>(ptrs[3]);
  p.lse = reinterpret_cast<const float*>(ptrs[4]);
  p.d_o = reinterpret_cast<const void*>(ptrs[11]);
  p.dq = reinterpret_cast<void*>(ptrs[12]);
  p.dk = reinterpret_cast<void*>(ptrs[13]);
  p.dv = reinterpret_cast<void*>(ptrs[14]);
  p.dbias = reinterpret_cast<float*>(ptrs[15]);
  p.workspace = reinterpret_cast<float*>(ptrs[16]);
  p.d_lse = reinterpret_cast<const float*>(ptrs[17]);
  p.deterministic = iv[34] != 0;
  return p;
}

}  // namespace

extern "C" {

int fa_fwd(const int64_t* iv, const double* fv, const uint64_t* ptrs) {
  FlashFwdParams p;
  fill_common(&p, iv, fv, ptrs);
  p.o = reinterpret_cast<void*>(ptrs[3]);
  p.lse = reinterpret_cast<float*>(ptrs[4]);
  return static_cast<int>(flash_fwd_cuda(p, reinterpret_cast<cudaStream_t>(ptrs[18])));
}

long long fa_bwd_workspace_bytes(const int64_t* iv, const double* fv, const uint64_t* ptrs) {
  return static_cast<long long>(flash_bwd_workspace_bytes(make_bwd(iv, fv, ptrs)));
}

int fa_bwd(const int64_t* iv, const double* fv, const uint64_t* ptrs) {
  const FlashBwdParams p = make_bwd(iv, fv, ptrs);
  return static_cast<int>(flash_bwd_cuda(p, reinterpret_cast<cudaStream_t>(ptrs[18])));
}

// Host: keep mask [B, H, Tq, Tk] (1 keep, 0 drop) for the reference, from the shared Philox code.
int fa_dropout_mask(const int64_t* iv, const double* fv, uint8_t* out) {
  FlashFwdParams p;
  uint64_t ptrs[20] = {0};
  fill_common(&p, iv, fv, ptrs);
  const AttnShape& s = p.shape;
  int64_t x = 0;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.Tq; ++i)
        for (int64_t j = 0; j < s.Tk; ++j) out[x++] = dropout_keep(p.dropout, b, h, i, j) ? 1 : 0;
  return 0;
}

const char* fa_error_string(int err) { return cudaGetErrorString(static_cast<cudaError_t>(err)); }

}  // extern "C"
