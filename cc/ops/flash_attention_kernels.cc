// TensorFlow kernels of FlashAttn>FlashAttention, FlashAttn>FlashAttentionGrad and FlashAttn>NextSeed.
//
// The one place that turns tensors into the kernels' params structs (cc/kernels/common/flash_params.h)
// and the kernels' status into TensorFlow errors. Every input check lives in FillShapes
// (flash_attention_common.h, shared with the XLA lowering) or FillCommon and names the argument.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU  // before any Eigen header: makes Eigen::GpuDevice complete
#endif

#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cc/kernels/cpu/flash_cpu.h"
#include "cc/kernels/common/flash_params.h"
#include "cc/ops/flash_attention_common.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
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

// Checks inputs 0..9 (FillShapes) and fills the params' data pointers, range-checks the lengths
// (host memory on every device) and points the dropout seed at input 9 (the kernel device's
// memory: the CUDA kernels derive the Philox key from it on the GPU). Nothing here waits for the
// GPU.
template <typename Params>
Status FillCommon(OpKernelContext* ctx, const Attrs& attrs, Params* p) {
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
    for (int64_t i = 0; i < v.size(); ++i) {
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
    OP_REQUIRES_OK(ctx, FillCommon(ctx, attrs_, &p));
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
    OP_REQUIRES_OK(ctx, FillCommon(ctx, attrs_, &p));
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

// FlashAttn>NextSeed: seed = the int64 [2] state of a Keras SeedGenerator, then state += [0, 1]
// (keras.random.SeedGenerator.next(); tf_flashattn/seeds.py takes it in eager mode, where a read and
// an update would be two dispatches). The variable gets a new tensor, as AssignVariableOp gives it,
// instead of an update in place: the output keeps the old buffer without a copy, and whatever else
// still holds that buffer (an earlier read) never sees it change.
template <typename Device>
class NextSeedOp : public OpKernel {
 public:
  explicit NextSeedOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    ::tensorflow::core::RefCountPtr<::tensorflow::Var> var;
    const Status found = ::tensorflow::LookupResource(ctx, ::tensorflow::HandleFromInput(ctx, 0), &var);
    OP_REQUIRES(ctx, found.ok(),
                ::tensorflow::errors::FailedPrecondition(
                    "next_seed: could not find the seed generator's state variable (", found.message(),
                    "); it may have been deleted or not initialized"));
    ::tensorflow::mutex_lock lock(*var->mu());
    Tensor* state = var->tensor();
    OP_REQUIRES(ctx, var->is_initialized && state->IsInitialized(),
                ::tensorflow::errors::FailedPrecondition(
                    "next_seed: the seed generator's state variable is not initialized"));
    OP_REQUIRES(ctx, state->dtype() == ::tensorflow::DT_INT64 && state->shape() == TensorShape({2}),
                InvalidArgument("next_seed: the seed generator's state must be an int64 variable of "
                                "shape [2]; got ", ::tensorflow::DataTypeString(state->dtype()), " ",
                                state->shape().DebugString()));
    Tensor next;  // allocated as TensorFlow allocates variables (host copies pinned where possible)
    ::tensorflow::AllocatorAttributes attr;
    attr.set_gpu_compatible(true);
    attr.set_nic_compatible(true);
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(::tensorflow::DT_INT64, TensorShape({2}), &next, attr));
    Launcher<Device>::NextSeed(ctx, *state, &next);
    if (!ctx->status().ok()) return;
    ctx->set_output(0, *state);
    *state = next;
  }
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
    flashattn::flash_fwd_cpu(p, CpuParallelFor(ctx),
                             ctx->device()->tensorflow_cpu_worker_threads()->num_threads);
  }
  static void Bwd(OpKernelContext* ctx, flashattn::FlashBwdParams& p) {
    OP_REQUIRES_OK(ctx, CheckCpu());
    flashattn::flash_bwd_cpu(p, CpuParallelFor(ctx),
                             ctx->device()->tensorflow_cpu_worker_threads()->num_threads);
  }
  static void NextSeed(OpKernelContext*, const Tensor& state, Tensor* next) {
    const auto s = state.flat<int64_t>();
    auto n = next->flat<int64_t>();
    n(0) = s(0);
    n(1) = static_cast<int64_t>(static_cast<uint64_t>(s(1)) + 1u);  // wraps, as TensorFlow's add
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
REGISTER_KERNEL_BUILDER(Name("FlashAttn>NextSeed").Device(::tensorflow::DEVICE_CPU), NextSeedOp<CPUDevice>);

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

// Host-to-device copies that never wait for the GPU. The lengths are HostMemory inputs: int32
// tensors live in host memory in TensorFlow, and an input declared in device memory would make
// TensorFlow copy them over itself, in a graph with a copy whose completion waits for everything
// queued on the GPU before it (measured on the H200: a tf.function call then took as long on the
// host as on the GPU). The producer's host memory may be pageable, and a cudaMemcpyAsync from
// pageable memory may wait for the stream too, so the bytes are first copied into a ring of
// pinned memory; a region is reused once the copy that read it has completed (an event per copy),
// and the host waits only if 4 MiB of staged bytes are still queued.
class PinnedStaging {
 public:
  cudaError_t CopyToDevice(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return cudaSuccess;
    const size_t n = (bytes + 255) / 256 * 256;
    if (n > kCapacity) return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream);
    std::lock_guard<std::mutex> lock(mu_);
    if (buf_ == nullptr) {
      cudaError_t err = cudaHostAlloc(reinterpret_cast<void**>(&buf_), kCapacity, cudaHostAllocPortable);
      if (err != cudaSuccess) { buf_ = nullptr; return err; }
    }
    size_t off = 0;
    cudaError_t err = Reserve(n, &off);
    if (err != cudaSuccess) return err;
    std::memcpy(buf_ + off, src, bytes);
    err = cudaMemcpyAsync(dst, buf_ + off, bytes, cudaMemcpyHostToDevice, stream);
    cudaEvent_t ev = nullptr;
    if (err == cudaSuccess) err = NewEvent(&ev);
    if (err == cudaSuccess) err = cudaEventRecord(ev, stream);
    if (err != cudaSuccess) {
      if (ev) cudaEventDestroy(ev);
      cudaStreamSynchronize(stream);  // an error path: nothing may still read the region
      return err;
    }
    pending_.push_back({off, off + n, ev});
    head_ = off + n;
    return cudaSuccess;
  }

 private:
  static constexpr size_t kCapacity = size_t{4} << 20;
  struct Region { size_t begin, end; cudaEvent_t done; };

  cudaError_t NewEvent(cudaEvent_t* ev) {
    if (!free_events_.empty()) { *ev = free_events_.back(); free_events_.pop_back(); return cudaSuccess; }
    return cudaEventCreateWithFlags(ev, cudaEventDisableTiming);
  }
  void PopFront() {
    free_events_.push_back(pending_.front().done);
    pending_.pop_front();
  }
  // Frees the regions whose copies completed, then finds n free bytes after head_ (or from 0),
  // waiting for the oldest copies only while the ring is full.
  cudaError_t Reserve(size_t n, size_t* off) {
    while (!pending_.empty() && cudaEventQuery(pending_.front().done) == cudaSuccess) PopFront();
    for (;;) {
      if (pending_.empty()) { head_ = 0; *off = 0; return cudaSuccess; }
      const size_t tail = pending_.front().begin;  // oldest bytes still in use
      if (head_ > tail) {            // used: [tail, head_)
        if (head_ + n <= kCapacity) { *off = head_; return cudaSuccess; }
        if (n <= tail) { *off = 0; return cudaSuccess; }
      } else if (head_ + n <= tail) {  // used: [tail, end) and [0, head_)
        *off = head_;
        return cudaSuccess;
      }
      cudaError_t err = cudaEventSynchronize(pending_.front().done);
      if (err != cudaSuccess) return err;
      PopFront();
    }
  }

  std::mutex mu_;
  char* buf_ = nullptr;
  size_t head_ = 0;
  std::deque<Region> pending_;
  std::vector<cudaEvent_t> free_events_;
};

// One ring per device (its events belong to that device); they live for the process.
PinnedStaging& Staging() {
  static std::mutex mu;
  static std::map<int, PinnedStaging*> rings;
  int dev = 0;
  cudaGetDevice(&dev);
  std::lock_guard<std::mutex> lock(mu);
  PinnedStaging*& ring = rings[dev];
  if (ring == nullptr) ring = new PinnedStaging();
  return *ring;
}

// The lengths (host memory, range-checked in FillCommon) to device memory on the op's stream.
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
    TF_RETURN_IF_ERROR(CudaStatus(Staging().CopyToDevice(d, host[i], b * sizeof(int32_t), stream),
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
    Tensor q_len, k_len, workspace;
    OP_REQUIRES_OK(ctx, LengthsToDevice(ctx, stream, &p.mask, &q_len, &k_len));
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
    Tensor q_len, k_len, workspace;
    OP_REQUIRES_OK(ctx, LengthsToDevice(ctx, stream, &p.mask, &q_len, &k_len));
    p.deterministic = ::tensorflow::OpDeterminismRequired();
    p.allow_tf32 = p.dtype == flashattn::DType::kFloat32 && ::tsl::tensor_float_32_execution_enabled();
    const size_t bytes = flashattn::flash_bwd_workspace_bytes(p);
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(::tensorflow::DT_FLOAT,
                                           TensorShape({static_cast<int64_t>((bytes + 3) / 4)}),
                                           &workspace));
    p.workspace = workspace.flat<float>().data();
    p.workspace_bytes = static_cast<size_t>(workspace.NumElements()) * sizeof(float);
    OP_REQUIRES_OK(ctx, CudaStatus(flashattn::flash_bwd_cuda(p, stream), "FlashAttention backward"));
  }
  static void NextSeed(OpKernelContext* ctx, const Tensor& state, Tensor* next) {
    cudaStream_t stream = ctx->eigen_device<GPUDevice>().stream();
    OP_REQUIRES_OK(ctx, CudaStatus(flashattn::next_seed_cuda(state.flat<int64_t>().data(),
                                                             next->flat<int64_t>().data(), stream),
                                   "next_seed"));
  }
};

// The lengths in host memory (see PinnedStaging); the seed, like every other input, in device
// memory (the kernels read it there: no copy to the host, which would wait for the GPU).
#define REGISTER_GPU(T)                                                                    \
  REGISTER_KERNEL_BUILDER(Name("FlashAttn>FlashAttention")                                 \
                              .Device(::tensorflow::DEVICE_GPU)                            \
                              .TypeConstraint<T>("T")                                      \
                              .HostMemory("query_lengths")                                 \
                              .HostMemory("key_lengths"),                                  \
                          FlashAttentionOp<GPUDevice, T>);                                 \
  REGISTER_KERNEL_BUILDER(Name("FlashAttn>FlashAttentionGrad")                             \
                              .Device(::tensorflow::DEVICE_GPU)                            \
                              .TypeConstraint<T>("T")                                      \
                              .HostMemory("query_lengths")                                 \
                              .HostMemory("key_lengths"),                                  \
                          FlashAttentionGradOp<GPUDevice, T>);

REGISTER_GPU(float)
REGISTER_GPU(Eigen::half)
REGISTER_GPU(Eigen::bfloat16)
#undef REGISTER_GPU
// The state variable's handle in host memory (as every resource handle); its tensor, the output and
// the new state in device memory.
REGISTER_KERNEL_BUILDER(Name("FlashAttn>NextSeed").Device(::tensorflow::DEVICE_GPU).HostMemory("state"),
                        NextSeedOp<GPUDevice>);
#endif  // GOOGLE_CUDA

}  // namespace tf_flashattn
