// Shape checks and params filling shared by the TensorFlow kernels (flash_attention_kernels.cc)
// and the XLA lowering (flash_attention_xla.cc) of FlashAttn>FlashAttention(Grad). Every check
// names the argument and the shape it expects.
#ifndef TF_FLASHATTN_OPS_FLASH_ATTENTION_COMMON_H_
#define TF_FLASHATTN_OPS_FLASH_ATTENTION_COMMON_H_

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cc/kernels/common/flash_params.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tf_flashattn {

using ::tensorflow::OpKernelConstruction;
using ::tensorflow::Status;
using ::tensorflow::TensorShape;
using ::tensorflow::errors::InvalidArgument;

template <typename T> flashattn::DType DTypeOf();
template <> inline flashattn::DType DTypeOf<float>() { return flashattn::DType::kFloat32; }
template <> inline flashattn::DType DTypeOf<double>() { return flashattn::DType::kFloat64; }
template <> inline flashattn::DType DTypeOf<Eigen::half>() { return flashattn::DType::kFloat16; }
template <> inline flashattn::DType DTypeOf<Eigen::bfloat16>() { return flashattn::DType::kBFloat16; }

constexpr int64_t kMaxHeadDim = 256;

// Attributes shared by the forward and the gradient op.
struct Attrs {
  float scale = 1.f, softcap = 0.f, dropout_rate = 0.f;
  bool causal = false;
  int64_t causal_offset = 0, window_left = -1, window_right = -1;

  Status Read(OpKernelConstruction* c) {
    TF_RETURN_IF_ERROR(c->GetAttr("scale", &scale));
    TF_RETURN_IF_ERROR(c->GetAttr("softcap", &softcap));
    TF_RETURN_IF_ERROR(c->GetAttr("dropout_rate", &dropout_rate));
    TF_RETURN_IF_ERROR(c->GetAttr("causal", &causal));
    TF_RETURN_IF_ERROR(c->GetAttr("causal_offset", &causal_offset));
    TF_RETURN_IF_ERROR(c->GetAttr("window_left", &window_left));
    TF_RETURN_IF_ERROR(c->GetAttr("window_right", &window_right));
    if (!std::isfinite(scale)) return InvalidArgument("scale must be finite, got ", scale);
    if (!(softcap >= 0.f) || !std::isfinite(softcap))
      return InvalidArgument("softcap (attn_logits_soft_cap) must be a finite value >= 0, got ",
                             softcap);
    if (!(dropout_rate >= 0.f && dropout_rate < 1.f))
      return InvalidArgument("dropout_rate must be in [0, 1), got ", dropout_rate);
    if (window_left < -1 || window_right < -1)
      return InvalidArgument("window_left and window_right must be >= 0 (or -1 for unbounded), got ",
                             window_left, " and ", window_right);
    return ::tensorflow::OkStatus();
  }
};

inline bool Absent(const TensorShape& t) { return t.dims() == 1 && t.dim_size(0) == 0; }

// Validates an optional tensor broadcastable to [B, H, Tq, Tk] and returns its element strides
// (0 along broadcast dims).
inline Status BroadcastStrides(const TensorShape& t, const char* name, const int64_t full[4],
                               int64_t strides[4]) {
  const std::string expected = ::tensorflow::strings::StrCat(
      "[", full[0], ", ", full[1], ", ", full[2], ", ", full[3], "]");
  if (t.dims() != 4)
    return InvalidArgument(name, " must be rank 4 and broadcastable to [batch, num_heads, "
                           "query_len, key_len] = ", expected, ", got shape ",
                           t.DebugString());
  int64_t stride = 1;
  for (int d = 3; d >= 0; --d) {
    const int64_t n = t.dim_size(d);
    if (n != 1 && n != full[d])
      return InvalidArgument(name, " of shape ", t.DebugString(),
                             " does not broadcast to [batch, num_heads, query_len, key_len] = ",
                             expected, " (dim ", d, " is ", n, ")");
    strides[d] = (n == 1) ? 0 : stride;
    stride *= n;
  }
  return ::tensorflow::OkStatus();
}

inline Status CheckLengthsShape(const TensorShape& t, const char* name, int64_t b) {
  if (Absent(t)) return ::tensorflow::OkStatus();
  if (t.dims() != 1 || t.dim_size(0) != b)
    return InvalidArgument(name, " must have shape [batch] = [", b, "], got ", t.DebugString());
  return ::tensorflow::OkStatus();
}

inline Status CheckValidShape(const TensorShape& t, const char* name, int64_t b, int64_t len) {
  if (Absent(t)) return ::tensorflow::OkStatus();
  if (t.dims() != 2 || t.dim_size(0) != b || t.dim_size(1) != len)
    return InvalidArgument(name, " must have shape [batch, length] = [", b, ", ", len, "], got ",
                           t.DebugString());
  return ::tensorflow::OkStatus();
}

// Checks the shapes of inputs 0..9 (query, key, value, mask, bias, query_lengths, key_lengths,
// query_valid, key_valid, seed) and fills the shape-dependent parts of the params that the two
// directions share (shape, strides, mask/score/dropout settings; no data pointers, no Philox key).
// Used by the TensorFlow kernels and by the XLA lowering (flash_attention_xla.cc).
template <typename Params>
Status FillShapes(const TensorShape* const in[10], const Attrs& attrs, Params* p) {
  const TensorShape& q = *in[0];  // [B, Tq, H, D]
  const TensorShape& k = *in[1];  // [B, Tk, Hkv, D]
  const TensorShape& v = *in[2];  // [B, Tk, Hkv, Dv]
  if (q.dims() != 4)
    return InvalidArgument("query must be rank 4 [batch, query_len, num_heads, head_dim], got ",
                           q.DebugString());
  if (k.dims() != 4)
    return InvalidArgument("key must be rank 4 [batch, key_len, num_kv_heads, head_dim], got ",
                           k.DebugString());
  if (v.dims() != 4)
    return InvalidArgument("value must be rank 4 [batch, key_len, num_kv_heads, value_dim], got ",
                           v.DebugString());
  flashattn::AttnShape& s = p->shape;
  s.B = q.dim_size(0); s.Tq = q.dim_size(1); s.H = q.dim_size(2); s.D = q.dim_size(3);
  s.Tk = k.dim_size(1); s.Hkv = k.dim_size(2); s.Dv = v.dim_size(3);
  if (k.dim_size(0) != s.B || k.dim_size(3) != s.D)
    return InvalidArgument("key must have shape [batch, key_len, num_kv_heads, head_dim] = [", s.B,
                           ", key_len, num_kv_heads, ", s.D, "] to match query ",
                           q.DebugString(), ", got ", k.DebugString());
  if (v.dim_size(0) != s.B || v.dim_size(1) != s.Tk || v.dim_size(2) != s.Hkv)
    return InvalidArgument("value must have shape [batch, key_len, num_kv_heads, value_dim] = [",
                           s.B, ", ", s.Tk, ", ", s.Hkv, ", value_dim] to match key ",
                           k.DebugString(), ", got ", v.DebugString());
  if (s.D < 1 || s.D > kMaxHeadDim)
    return InvalidArgument("head_dim (last dim of query and key) must be in [1, ", kMaxHeadDim,
                           "], got ", s.D);
  if (s.Dv < 1 || s.Dv > kMaxHeadDim)
    return InvalidArgument("value_dim (last dim of value) must be in [1, ", kMaxHeadDim,
                           "], got ", s.Dv);
  if (s.Hkv == 0 ? s.H != 0 : s.H % s.Hkv != 0)
    return InvalidArgument("num_heads of query (", s.H, ") must be a multiple of num_kv_heads of "
                           "key and value (", s.Hkv, ")");
  s.q_stride[2] = s.D; s.q_stride[1] = s.H * s.D; s.q_stride[0] = s.Tq * s.H * s.D;
  s.k_stride[2] = s.D; s.k_stride[1] = s.Hkv * s.D; s.k_stride[0] = s.Tk * s.Hkv * s.D;
  s.v_stride[2] = s.Dv; s.v_stride[1] = s.Hkv * s.Dv; s.v_stride[0] = s.Tk * s.Hkv * s.Dv;
  s.o_stride[2] = s.Dv; s.o_stride[1] = s.H * s.Dv; s.o_stride[0] = s.Tq * s.H * s.Dv;

  const int64_t full[4] = {s.B, s.H, s.Tq, s.Tk};
  flashattn::MaskParams& m = p->mask;
  m.causal = attrs.causal;
  m.causal_offset = attrs.causal_offset;
  m.window_left = attrs.window_left;
  m.window_right = attrs.window_right;
  const TensorShape& mask = *in[3];
  if (!Absent(mask)) TF_RETURN_IF_ERROR(BroadcastStrides(mask, "mask", full, m.mask_stride));
  const TensorShape& bias = *in[4];
  flashattn::ScoreParams& sc = p->score;
  sc.scale = attrs.scale;
  sc.softcap = attrs.softcap;
  if (!Absent(bias)) TF_RETURN_IF_ERROR(BroadcastStrides(bias, "bias", full, sc.bias_stride));
  TF_RETURN_IF_ERROR(CheckLengthsShape(*in[5], "query_lengths", s.B));
  TF_RETURN_IF_ERROR(CheckLengthsShape(*in[6], "key_lengths", s.B));
  TF_RETURN_IF_ERROR(CheckValidShape(*in[7], "query_mask", s.B, s.Tq));
  TF_RETURN_IF_ERROR(CheckValidShape(*in[8], "key_mask", s.B, s.Tk));

  // The seed: [2], or [0] (absent, never read) without dropout. An absent [0] input is an empty
  // constant under XLA; a [2] placeholder of zeros became a broadcast kernel there (a splat constant),
  // one launch per call inside a decoding loop.
  const TensorShape& seed = *in[9];
  const bool seed_absent = Absent(seed);
  if (!seed_absent && (seed.dims() != 1 || seed.dim_size(0) != 2))
    return InvalidArgument("seed must have shape [2] (int64), or [0] without dropout; got ",
                           seed.DebugString());
  flashattn::DropoutParams& dp = p->dropout;
  flashattn::dropout_set_rate(dp, attrs.dropout_rate);  // t16 and keep_scale (flash_params.h)
  if (seed_absent && dp.rate > 0.f)
    return InvalidArgument("dropout_rate > 0 needs a seed of shape [2] (int64); got shape [0]");
  return ::tensorflow::OkStatus();
}


// Checks the gradient op's inputs 10..13 (output, lse, d_output, d_lse) against the shape that
// FillShapes read from query/key/value.
inline Status CheckGradShapes(const TensorShape& output, const TensorShape& lse,
                              const TensorShape& d_output, const TensorShape& d_lse,
                              const flashattn::AttnShape& s) {
  const TensorShape o_shape({s.B, s.Tq, s.H, s.Dv});
  const TensorShape lse_shape({s.B, s.H, s.Tq});
  if (output != o_shape)
    return InvalidArgument("output must have shape ", o_shape.DebugString(), ", got ",
                           output.DebugString());
  if (lse != lse_shape)
    return InvalidArgument("lse must have shape ", lse_shape.DebugString(), ", got ",
                           lse.DebugString());
  if (d_output != o_shape)
    return InvalidArgument("d_output must have shape ", o_shape.DebugString(), ", got ",
                           d_output.DebugString());
  if (!Absent(d_lse) && d_lse != lse_shape)
    return InvalidArgument("d_lse must have shape ", lse_shape.DebugString(), " or [0], got ",
                           d_lse.DebugString());
  return ::tensorflow::OkStatus();
}

// The decoding path's settings from the environment (for tests and benchmarks; the defaults
// choose from the shape): TF_FLASHATTN_DECODE = auto (default) | on | off,
// TF_FLASHATTN_DECODE_SPLITS = 0 (chosen from the shape and the machine) or n >= 1 (forced).
// Read at each call (two getenv calls), so a test can switch them between calls.
inline Status ReadDecodeSettings(flashattn::FlashFwdParams* p) {
  const char* mode = std::getenv("TF_FLASHATTN_DECODE");
  if (mode != nullptr && *mode != '\0') {
    if (std::strcmp(mode, "auto") == 0) p->decode = 0;
    else if (std::strcmp(mode, "on") == 0) p->decode = 1;
    else if (std::strcmp(mode, "off") == 0) p->decode = -1;
    else return InvalidArgument("TF_FLASHATTN_DECODE must be auto, on or off; got '", mode, "'");
  }
  const char* splits = std::getenv("TF_FLASHATTN_DECODE_SPLITS");
  if (splits != nullptr && *splits != '\0') {
    char* end = nullptr;
    const long n = std::strtol(splits, &end, 10);
    if (*end != '\0' || n < 0 || n > 1024)
      return InvalidArgument("TF_FLASHATTN_DECODE_SPLITS must be an integer in [0, 1024]; got '",
                             splits, "'");
    p->num_splits = static_cast<int>(n);
  }
  return ::tensorflow::OkStatus();
}

}  // namespace tf_flashattn

#endif  // TF_FLASHATTN_OPS_FLASH_ATTENTION_COMMON_H_
