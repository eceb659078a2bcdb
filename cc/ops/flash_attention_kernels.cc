// TensorFlow kernels of FlashAttn>FlashAttention and FlashAttn>FlashAttentionGrad.
//
// The one place that turns tensors into the kernels' params structs (cc/kernels/flash_params.h)
// and the kernels' status into TensorFlow errors. Every input check lives in FillShapes
// (flash_attention_common.h, shared with the XLA lowering) or FillCommon and names the argument.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU  // before any Eigen header: makes Eigen::GpuDevice complete
#endif

#include <cmath>
#include <string>

#include "cc/kernels/flash_cpu.h"
#include "cc/kernels/flash_params.h"
#include "cc/ops/flash_attention_common.h"
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

bool Absent(const Tensor& t) { return ::tf_flashattn::Absent(t.shape()); }

// Checks inputs 0..9 (FillShapes) and fills the params' data pointers. Every input lives in the
// memory of the kernel's device, so nothing here waits for the GPU: the CUDA kernels read the
// lengths and the dropout seed in device memory. check_lengths (CPU: the lengths are host memory)
// range-checks the lengths; the CUDA kernels clamp them to [0, length] instead (documented).
template <typename Params>
Status FillCommon(OpKernelContext* ctx, const Attrs& attrs, bool check_lengths, Params* p) {
  const TensorShape* shapes[10];
  for (int i = 0; i < 10; ++i) shapes[i] = &ctx->input(i).shape();
  TF_RETURN_IF_ERROR(FillShapes(shapes, attrs, p));
  if (!Absent(ctx->input(3))) p->mask.mask = ctx->input(3).flat<bool>().data();
  if (!Absent(ctx->input(4))) p->score.bias = ctx->input(4).data();
  const char* names[2] = {"query_lengths", "key_lengths"};
  const int64_t limits[2] = {p->shape.Tq, p->shape.Tk};
  const int32_t** lengths[2] = {&p->mask.q_lengths, &p->mask.k_lengths};
  for (int x = 0; x < 2; ++x) {
    const Tensor& t = ctx->input(5 + x);
    if (Absent(t)) continue;
    const auto v = t.flat<int32_t>();
    for (int64_t i = 0; check_lengths && i < v.size(); ++i) {
      if (v(i) < 0 || v(i) > limits[x])
        return InvalidArgument(names[x], "[", i, "] = ", v(i), " is out of range [0, ", limits[x], "]");
    }
    *lengths[x] = v.data();
  }
  if (!Absent(ctx->input(7))) p->mask.q_valid = ctx->input(7).flat<bool>().data();
  if (!Absent(ctx->input(8))) p->mask.k_valid = ctx->input(8).flat<bool>().data();
  if (p->dropout.rate > 0.f) p->dropout.seed = ctx->input(9).flat<int64_t>().data();
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
    OP_REQUIRES_OK(ctx, FillCommon(ctx, attrs_, Launcher<Device>::kCheckLengths, &p));
    OP_REQUIRES_OK(ctx, ReadDecodeSettings(&p));
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
    OP_REQUIRES_OK(ctx, FillCommon(ctx, attrs_, Launcher<Device>::kCheckLengths, &p));
    const flashattn::AttnShape& s = p.shape;
    OP_REQUIRES_OK(ctx, CheckGradShapes(ctx->input(10).shape(), ctx->input(11).shape(),
                                        ctx->input(12).shape(), ctx->input(13).shape(), s));
    const Tensor& d_lse = ctx->input(13);
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
  static constexpr bool kCheckLengths = true;  // host memory: out-of-range lengths are errors
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

}  // namespace

template <>
struct Launcher<GPUDevice> {
  // The lengths stay in device memory (no copy to the host, which would wait for the GPU); the
  // kernels clamp them to [0, length].
  static constexpr bool kCheckLengths = false;
  static void Fwd(OpKernelContext* ctx, const flashattn::FlashFwdParams& params) {
    cudaStream_t stream = ctx->eigen_device<GPUDevice>().stream();
    flashattn::FlashFwdParams p = params;
    // float32: TF32 tensor cores when TensorFlow's TF32 setting is on (its matmuls follow it too:
    // tf.config.experimental.enable_tensor_float_32_execution).
    p.allow_tf32 = p.dtype == flashattn::DType::kFloat32 && ::tsl::tensor_float_32_execution_enabled();
    Tensor workspace;
    const size_t bytes = flashattn::flash_fwd_workspace_bytes(p);
    if (bytes > 0) {
      OP_REQUIRES_OK(ctx, ctx->allocate_temp(::tensorflow::DT_FLOAT,
                                             TensorShape({static_cast<int64_t>((bytes + 3) / 4)}),
                                             &workspace));
      p.workspace = workspace.flat<float>().data();
    }
    OP_REQUIRES_OK(ctx, CudaStatus(flashattn::flash_fwd_cuda(p, stream), "FlashAttention forward"));
  }
  static void Bwd(OpKernelContext* ctx, flashattn::FlashBwdParams& p) {
    cudaStream_t stream = ctx->eigen_device<GPUDevice>().stream();
    Tensor workspace;
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

// Every input in device memory: the lengths and the seed too (the kernels read them there).
#define REGISTER_GPU(T)                                                                    \
  REGISTER_KERNEL_BUILDER(Name("FlashAttn>FlashAttention")                                 \
                              .Device(::tensorflow::DEVICE_GPU)                            \
                              .TypeConstraint<T>("T"),                                     \
                          FlashAttentionOp<GPUDevice, T>);                                 \
  REGISTER_KERNEL_BUILDER(Name("FlashAttn>FlashAttentionGrad")                             \
                              .Device(::tensorflow::DEVICE_GPU)                            \
                              .TypeConstraint<T>("T"),                                     \
                          FlashAttentionGradOp<GPUDevice, T>);

REGISTER_GPU(float)
REGISTER_GPU(Eigen::half)
REGISTER_GPU(Eigen::bfloat16)
#undef REGISTER_GPU
#endif  // GOOGLE_CUDA

}  // namespace tf_flashattn
