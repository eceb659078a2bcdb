// TensorFlow kernels of FlashAttn>FlashAttention and FlashAttn>FlashAttentionGrad.
//
// The one place that turns tensors into the kernels' params structs (cc/kernels/flash_params.h)
// and the kernels' status into TensorFlow errors. Every input check lives in FillCommon and
// names the argument and the shape it expects.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU  // before any Eigen header: makes Eigen::GpuDevice complete
#endif

#include <cmath>
#include <string>

#include "cc/kernels/flash_cpu.h"
#include "cc/kernels/flash_params.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/util/work_sharder.h"

#if GOOGLE_CUDA
#include <cuda_runtime_api.h>

#include "cc/kernels/flash_cuda.h"
#include "tensorflow/core/util/determinism.h"
#include "tsl/platform/tensor_float_32_utils.h"
#endif

namespace tf_flashattn {

using ::tensorflow::DataType;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::errors::InvalidArgument;

using CPUDevice = Eigen::ThreadPoolDevice;

namespace {

template <typename T> flashattn::DType DTypeOf();
template <> flashattn::DType DTypeOf<float>() { return flashattn::DType::kFloat32; }
template <> flashattn::DType DTypeOf<double>() { return flashattn::DType::kFloat64; }
template <> flashattn::DType DTypeOf<Eigen::half>() { return flashattn::DType::kFloat16; }
template <> flashattn::DType DTypeOf<Eigen::bfloat16>() { return flashattn::DType::kBFloat16; }

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

bool Absent(const Tensor& t) { return t.dims() == 1 && t.dim_size(0) == 0; }

// Validates an optional tensor broadcastable to [B, H, Tq, Tk] and returns its element strides
// (0 along broadcast dims).
Status BroadcastStrides(const Tensor& t, const char* name, const int64_t full[4],
                        int64_t strides[4]) {
  const std::string expected = ::tensorflow::strings::StrCat(
      "[", full[0], ", ", full[1], ", ", full[2], ", ", full[3], "]");
  if (t.dims() != 4)
    return InvalidArgument(name, " must be rank 4 and broadcastable to [batch, num_heads, "
                           "query_len, key_len] = ", expected, ", got shape ",
                           t.shape().DebugString());
  int64_t stride = 1;
  for (int d = 3; d >= 0; --d) {
    const int64_t n = t.dim_size(d);
    if (n != 1 && n != full[d])
      return InvalidArgument(name, " of shape ", t.shape().DebugString(),
                             " does not broadcast to [batch, num_heads, query_len, key_len] = ",
                             expected, " (dim ", d, " is ", n, ")");
    strides[d] = (n == 1) ? 0 : stride;
    stride *= n;
  }
  return ::tensorflow::OkStatus();
}

Status CheckLengths(const Tensor& t, const char* name, int64_t b, int64_t limit,
                    const int32_t** out) {
  *out = nullptr;
  if (Absent(t)) return ::tensorflow::OkStatus();
  if (t.dims() != 1 || t.dim_size(0) != b)
    return InvalidArgument(name, " must have shape [batch] = [", b, "], got ",
                           t.shape().DebugString());
  const auto v = t.flat<int32_t>();
  for (int64_t i = 0; i < b; ++i) {
    if (v(i) < 0 || v(i) > limit)
      return InvalidArgument(name, "[", i, "] = ", v(i), " is out of range [0, ", limit, "]");
  }
  *out = v.data();
  return ::tensorflow::OkStatus();
}

Status CheckValid(const Tensor& t, const char* name, int64_t b, int64_t len, const bool** out) {
  *out = nullptr;
  if (Absent(t)) return ::tensorflow::OkStatus();
  if (t.dims() != 2 || t.dim_size(0) != b || t.dim_size(1) != len)
    return InvalidArgument(name, " must have shape [batch, length] = [", b, ", ", len, "], got ",
                           t.shape().DebugString());
  *out = t.flat<bool>().data();
  return ::tensorflow::OkStatus();
}

// Checks inputs 0..9 (query, key, value, mask, bias, query_lengths, key_lengths, query_valid,
// key_valid, seed) and fills the parts of the params that the two directions share.
template <typename Params>
Status FillCommon(OpKernelContext* ctx, const Attrs& attrs, Params* p) {
  const Tensor& q = ctx->input(0);  // [B, Tq, H, D]
  const Tensor& k = ctx->input(1);  // [B, Tk, Hkv, D]
  const Tensor& v = ctx->input(2);  // [B, Tk, Hkv, Dv]
  if (q.dims() != 4)
    return InvalidArgument("query must be rank 4 [batch, query_len, num_heads, head_dim], got ",
                           q.shape().DebugString());
  if (k.dims() != 4)
    return InvalidArgument("key must be rank 4 [batch, key_len, num_kv_heads, head_dim], got ",
                           k.shape().DebugString());
  if (v.dims() != 4)
    return InvalidArgument("value must be rank 4 [batch, key_len, num_kv_heads, value_dim], got ",
                           v.shape().DebugString());
  flashattn::AttnShape& s = p->shape;
  s.B = q.dim_size(0); s.Tq = q.dim_size(1); s.H = q.dim_size(2); s.D = q.dim_size(3);
  s.Tk = k.dim_size(1); s.Hkv = k.dim_size(2); s.Dv = v.dim_size(3);
  if (k.dim_size(0) != s.B || k.dim_size(3) != s.D)
    return InvalidArgument("key must have shape [batch, key_len, num_kv_heads, head_dim] = [", s.B,
                           ", key_len, num_kv_heads, ", s.D, "] to match query ",
                           q.shape().DebugString(), ", got ", k.shape().DebugString());
  if (v.dim_size(0) != s.B || v.dim_size(1) != s.Tk || v.dim_size(2) != s.Hkv)
    return InvalidArgument("value must have shape [batch, key_len, num_kv_heads, value_dim] = [",
                           s.B, ", ", s.Tk, ", ", s.Hkv, ", value_dim] to match key ",
                           k.shape().DebugString(), ", got ", v.shape().DebugString());
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
  const Tensor& mask = ctx->input(3);
  if (!Absent(mask)) {
    TF_RETURN_IF_ERROR(BroadcastStrides(mask, "mask", full, m.mask_stride));
    m.mask = mask.flat<bool>().data();
  }
  const Tensor& bias = ctx->input(4);
  flashattn::ScoreParams& sc = p->score;
  sc.scale = attrs.scale;
  sc.softcap = attrs.softcap;
  if (!Absent(bias)) {
    TF_RETURN_IF_ERROR(BroadcastStrides(bias, "bias", full, sc.bias_stride));
    sc.bias = bias.data();
  }
  TF_RETURN_IF_ERROR(CheckLengths(ctx->input(5), "query_lengths", s.B, s.Tq, &m.q_lengths));
  TF_RETURN_IF_ERROR(CheckLengths(ctx->input(6), "key_lengths", s.B, s.Tk, &m.k_lengths));
  TF_RETURN_IF_ERROR(CheckValid(ctx->input(7), "query_mask", s.B, s.Tq, &m.q_valid));
  TF_RETURN_IF_ERROR(CheckValid(ctx->input(8), "key_mask", s.B, s.Tk, &m.k_valid));

  const Tensor& seed = ctx->input(9);
  if (seed.dims() != 1 || seed.dim_size(0) != 2)
    return InvalidArgument("seed must have shape [2] (int64), got ", seed.shape().DebugString());
  flashattn::DropoutParams& dp = p->dropout;
  dp.rate = attrs.dropout_rate;
  if (dp.rate > 0.f) {
    const double t = std::floor(static_cast<double>(dp.rate) * 4294967296.0);
    dp.threshold = static_cast<uint32_t>(std::min(t, 4294967295.0));
    dp.keep_scale = 1.f / (1.f - dp.rate);
    const auto sv = seed.flat<int64_t>();
    flashattn::dropout_key_from_seed(sv(0), sv(1), dp.key);
  }
  return ::tensorflow::OkStatus();
}

flashattn::ParallelFor CpuParallelFor(OpKernelContext* ctx) {
  auto* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  return [pool](int64_t n, int64_t cost, const std::function<void(int64_t, int64_t)>& fn) {
    pool->ParallelFor(n, cost, fn);
  };
}

}  // namespace

// Device-specific launch: Launcher<CPUDevice> and Launcher<GPUDevice> below.
template <typename Device>
struct Launcher;

template <typename Device, typename T>
class FlashAttentionOp : public OpKernel {
 public:
  explicit FlashAttentionOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, attrs_.Read(c));
  }

  void Compute(OpKernelContext* ctx) override {
    flashattn::FlashFwdParams p;
    p.dtype = DTypeOf<T>();
    OP_REQUIRES_OK(ctx, FillCommon(ctx, attrs_, &p));
    const flashattn::AttnShape& s = p.shape;
    Tensor* out = nullptr;
    Tensor* lse = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({s.B, s.Tq, s.H, s.Dv}), &out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({s.B, s.H, s.Tq}), &lse));
    p.q = ctx->input(0).data();
    p.k = ctx->input(1).data();
    p.v = ctx->input(2).data();
    p.o = out->data();
    p.lse = lse->flat<float>().data();
    if (out->NumElements() == 0 && lse->NumElements() == 0) return;
    Launcher<Device>::Fwd(ctx, p);
  }

 private:
  Attrs attrs_;
};

template <typename Device, typename T>
class FlashAttentionGradOp : public OpKernel {
 public:
  explicit FlashAttentionGradOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, attrs_.Read(c));
  }

  void Compute(OpKernelContext* ctx) override {
    flashattn::FlashBwdParams p;
    p.dtype = DTypeOf<T>();
    OP_REQUIRES_OK(ctx, FillCommon(ctx, attrs_, &p));
    const flashattn::AttnShape& s = p.shape;
    const TensorShape o_shape({s.B, s.Tq, s.H, s.Dv});
    const TensorShape lse_shape({s.B, s.H, s.Tq});
    OP_REQUIRES(ctx, ctx->input(10).shape() == o_shape,
                InvalidArgument("output must have shape ", o_shape.DebugString(), ", got ",
                                ctx->input(10).shape().DebugString()));
    OP_REQUIRES(ctx, ctx->input(11).shape() == lse_shape,
                InvalidArgument("lse must have shape ", lse_shape.DebugString(), ", got ",
                                ctx->input(11).shape().DebugString()));
    OP_REQUIRES(ctx, ctx->input(12).shape() == o_shape,
                InvalidArgument("d_output must have shape ", o_shape.DebugString(), ", got ",
                                ctx->input(12).shape().DebugString()));
    const Tensor& d_lse = ctx->input(13);
    OP_REQUIRES(ctx, Absent(d_lse) || d_lse.shape() == lse_shape,
                InvalidArgument("d_lse must have shape ", lse_shape.DebugString(),
                                " or [0], got ", d_lse.shape().DebugString()));
    Tensor *dq = nullptr, *dk = nullptr, *dv = nullptr, *dbias = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ctx->input(0).shape(), &dq));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, ctx->input(1).shape(), &dk));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, ctx->input(2).shape(), &dv));
    const bool with_bias = p.score.bias != nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            3, with_bias ? TensorShape({s.B, s.H, s.Tq, s.Tk}) : TensorShape({0}),
                            &dbias));
    p.q = ctx->input(0).data();
    p.k = ctx->input(1).data();
    p.v = ctx->input(2).data();
    p.o = ctx->input(10).data();
    p.lse = ctx->input(11).flat<float>().data();
    p.d_o = ctx->input(12).data();
    p.d_lse = Absent(d_lse) ? nullptr : d_lse.flat<float>().data();
    p.dq = dq->data();
    p.dk = dk->data();
    p.dv = dv->data();
    p.dbias = with_bias ? dbias->flat<float>().data() : nullptr;
    if (dq->NumElements() == 0 && dk->NumElements() == 0 && dv->NumElements() == 0) return;
    Launcher<Device>::Bwd(ctx, p);
  }

 private:
  Attrs attrs_;
};

// ---- CPU ----------------------------------------------------------------------------------
Status CheckCpu() {
  if (flashattn::flash_cpu_supported()) return ::tensorflow::OkStatus();
  return ::tensorflow::errors::Unimplemented(
      "tf_flashattn's CPU kernels need a processor with AVX2, FMA and F16C (x86-64 since 2013); "
      "this one lacks them");
}

template <>
struct Launcher<CPUDevice> {
  static void Fwd(OpKernelContext* ctx, const flashattn::FlashFwdParams& p) {
    OP_REQUIRES_OK(ctx, CheckCpu());
    flashattn::flash_fwd_cpu(p, CpuParallelFor(ctx));
  }
  static void Bwd(OpKernelContext* ctx, flashattn::FlashBwdParams& p) {
    OP_REQUIRES_OK(ctx, CheckCpu());
    flashattn::flash_bwd_cpu(p, CpuParallelFor(ctx),
                             ctx->device()->tensorflow_cpu_worker_threads()->num_threads);
  }
};

#define REGISTER_CPU(T)                                                                    \
  REGISTER_KERNEL_BUILDER(                                                                 \
      Name("FlashAttn>FlashAttention").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
      FlashAttentionOp<CPUDevice, T>);                                                     \
  REGISTER_KERNEL_BUILDER(Name("FlashAttn>FlashAttentionGrad")                             \
                              .Device(::tensorflow::DEVICE_CPU)                            \
                              .TypeConstraint<T>("T"),                                     \
                          FlashAttentionGradOp<CPUDevice, T>);

REGISTER_CPU(float)
REGISTER_CPU(double)
REGISTER_CPU(Eigen::half)
REGISTER_CPU(Eigen::bfloat16)
#undef REGISTER_CPU

#if GOOGLE_CUDA
// ---- GPU ----------------------------------------------------------------------------------
using GPUDevice = Eigen::GpuDevice;

namespace {

Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return ::tensorflow::OkStatus();
  if (err == cudaErrorInvalidDeviceFunction || err == cudaErrorNoKernelImageForDevice)
    return ::tensorflow::errors::Unimplemented(
        what, ": tf_flashattn's CUDA kernels need an NVIDIA GPU of compute capability 8.0 or "
        "newer (A100, RTX 30xx/40xx, H100/H200); this one is older (", cudaGetErrorString(err),
        "). Run the op on the CPU: with tf.device('/CPU:0').");
  return ::tensorflow::errors::Internal(what, " failed: ", cudaGetErrorString(err));
}

// The lengths live in host memory (they are range-checked there); the kernels read them on the
// device, so they are copied over on the op's stream.
Status LengthsToDevice(OpKernelContext* ctx, cudaStream_t stream, flashattn::MaskParams* m,
                       Tensor* q_dev, Tensor* k_dev) {
  const int32_t* host[2] = {m->q_lengths, m->k_lengths};
  Tensor* dev[2] = {q_dev, k_dev};
  const int32_t** out[2] = {&m->q_lengths, &m->k_lengths};
  const int64_t b = ctx->input(0).dim_size(0);
  for (int i = 0; i < 2; ++i) {
    if (host[i] == nullptr) continue;
    TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_INT32, TensorShape({b}), dev[i]));
    int32_t* d = dev[i]->flat<int32_t>().data();
    TF_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(d, host[i], b * sizeof(int32_t), cudaMemcpyHostToDevice, stream),
        "copying the lengths to the GPU"));
    *out[i] = d;
  }
  return ::tensorflow::OkStatus();
}

}  // namespace

template <>
struct Launcher<GPUDevice> {
  static void Fwd(OpKernelContext* ctx, const flashattn::FlashFwdParams& params) {
    cudaStream_t stream = ctx->eigen_device<GPUDevice>().stream();
    flashattn::FlashFwdParams p = params;
    // float32: TF32 tensor cores when TensorFlow's TF32 setting is on (its matmuls follow it too:
    // tf.config.experimental.enable_tensor_float_32_execution).
    p.allow_tf32 = p.dtype == flashattn::DType::kFloat32 && ::tsl::tensor_float_32_execution_enabled();
    Tensor q_len, k_len;
    OP_REQUIRES_OK(ctx, LengthsToDevice(ctx, stream, &p.mask, &q_len, &k_len));
    OP_REQUIRES_OK(ctx, CudaStatus(flashattn::flash_fwd_cuda(p, stream), "FlashAttention forward"));
  }
  static void Bwd(OpKernelContext* ctx, flashattn::FlashBwdParams& p) {
    cudaStream_t stream = ctx->eigen_device<GPUDevice>().stream();
    Tensor q_len, k_len, workspace;
    OP_REQUIRES_OK(ctx, LengthsToDevice(ctx, stream, &p.mask, &q_len, &k_len));
    p.deterministic = ::tensorflow::OpDeterminismRequired();
    p.allow_tf32 = p.dtype == flashattn::DType::kFloat32 && ::tsl::tensor_float_32_execution_enabled();
    const size_t bytes = flashattn::flash_bwd_workspace_bytes(p);
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(::tensorflow::DT_FLOAT,
                                           TensorShape({static_cast<int64_t>((bytes + 3) / 4)}),
                                           &workspace));
    p.workspace = workspace.flat<float>().data();
    OP_REQUIRES_OK(ctx, CudaStatus(flashattn::flash_bwd_cuda(p, stream), "FlashAttention backward"));
  }
};

#define REGISTER_GPU(T)                                                                    \
  REGISTER_KERNEL_BUILDER(Name("FlashAttn>FlashAttention")                                 \
                              .Device(::tensorflow::DEVICE_GPU)                            \
                              .TypeConstraint<T>("T")                                      \
                              .HostMemory("query_lengths")                                 \
                              .HostMemory("key_lengths")                                   \
                              .HostMemory("seed"),                                         \
                          FlashAttentionOp<GPUDevice, T>);                                 \
  REGISTER_KERNEL_BUILDER(Name("FlashAttn>FlashAttentionGrad")                             \
                              .Device(::tensorflow::DEVICE_GPU)                            \
                              .TypeConstraint<T>("T")                                      \
                              .HostMemory("query_lengths")                                 \
                              .HostMemory("key_lengths")                                   \
                              .HostMemory("seed"),                                         \
                          FlashAttentionGradOp<GPUDevice, T>);

REGISTER_GPU(float)
REGISTER_GPU(Eigen::half)
REGISTER_GPU(Eigen::bfloat16)
#undef REGISTER_GPU
#endif  // GOOGLE_CUDA

}  // namespace tf_flashattn
