// XLA lowering of FlashAttn>FlashAttention and FlashAttn>FlashAttentionGrad, so that the ops run
// inside tf.function(jit_compile=True) and Keras models compiled with XLA (Keras' default on a
// GPU). Each op becomes one XLA custom call through the typed XLA FFI, which runs the same
// kernels as the TensorFlow kernels (flash_attention_kernels.cc): the CPU kernel on XLA's intra-op
// thread pool ("Host"), the CUDA kernels on XLA's stream ("CUDA").
//
// Compile time (tf2xla): the shapes are checked by the same FillShapes as the TensorFlow kernels
// (every error names the argument); attributes, TensorFlow's determinism and TF32 settings go
// into the custom call's attributes. Run time (FFI handler): the params are filled again from
// the buffers' shapes, and the data pointers set. No handler waits for the device: the CUDA
// kernels read the lengths and the dropout seed in device memory. Unlike the TensorFlow kernels,
// which check the lengths on the host, the lowering does not range-check them at run time (that
// would need their values on the host): the kernels clamp them to [0, length].
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cc/kernels/cpu/flash_cpu.h"
#include "cc/kernels/common/flash_params.h"
#include "cc/ops/flash_attention_common.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/util/determinism.h"
#include "tsl/platform/tensor_float_32_utils.h"
#include "xla/ffi/api/ffi.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape_util.h"

#if GOOGLE_CUDA
#include <cuda_runtime_api.h>

#include "cc/kernels/flash_cuda.h"
#endif

namespace xla {
namespace ffi {
const XLA_FFI_Api* GetXlaFfiApi();  // exported by libtensorflow_framework (xla/ffi/ffi_api.h)
}  // namespace ffi
}  // namespace xla

namespace tf_flashattn {
namespace {

namespace ffi = ::xla::ffi;
using ::tensorflow::XlaOpKernel;
using ::tensorflow::XlaOpKernelContext;

constexpr int kFwdInputs = 10;   // query .. seed
constexpr int kGradInputs = 14;  // + output, lse, d_output, d_lse
constexpr const char* kInputNames[kGradInputs] = {
    "query", "key", "value", "mask", "bias", "query_lengths", "key_lengths", "query_valid",
    "key_valid", "seed", "output", "lse", "d_output", "d_lse"};
constexpr char kFwdTarget[] = "tf_flashattn_fwd";
constexpr char kGradTarget[] = "tf_flashattn_bwd";

// ---- compile time ------------------------------------------------------------------------
// A float in the MLIR attribute text, independent of the process's locale (snprintf's "%e"
// would print a decimal comma after setlocale(LC_NUMERIC, ...), which the parser rejects).
std::string SciFloat(float x) {
  char buf[48];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific, 9);
  return std::string(buf, r.ptr);
}

// MLIR attribute dictionary of the custom call (typed FFI attributes, decoded by name below).
std::string FfiAttributes(const Attrs& a, bool deterministic, bool allow_tf32) {
  auto i64 = [](const char* name, long long v) { return std::string(name) + " = " + std::to_string(v) + " : i64"; };
  return "{scale = " + SciFloat(a.scale) + " : f32, softcap = " + SciFloat(a.softcap) +
         " : f32, dropout_rate = " + SciFloat(a.dropout_rate) + " : f32, " + i64("causal", a.causal ? 1 : 0) +
         ", " + i64("causal_offset", a.causal_offset) + ", " + i64("window_left", a.window_left) + ", " +
         i64("window_right", a.window_right) + ", " + i64("deterministic", deterministic ? 1 : 0) + ", " +
         i64("allow_tf32", allow_tf32 ? 1 : 0) + "}";
}

template <bool kGrad>
class FlashAttentionXlaOp : public XlaOpKernel {
 public:
  explicit FlashAttentionXlaOp(OpKernelConstruction* c)
      : XlaOpKernel(c),
        gpu_(c->device_type() == ::tensorflow::DeviceType(::tensorflow::DEVICE_GPU_XLA_JIT)) {
    OP_REQUIRES_OK(c, attrs_.Read(c));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    constexpr int n = kGrad ? kGradInputs : kFwdInputs;
    std::vector<TensorShape> shapes(n);
    const TensorShape* ptrs[kFwdInputs];
    for (int i = 0; i < n; ++i) {
      // The kernels take static shapes: a bounded-dynamic dimension (its static size an upper
      // bound) would make them attend to the padding.
      const absl::StatusOr<xla::Shape> xs = ctx->InputXlaShape(i);
      OP_REQUIRES_OK(ctx, xs.status());
      OP_REQUIRES(ctx, !xs->is_dynamic(),
                  ::tensorflow::errors::Unimplemented(
                      "tf_flashattn: `", kInputNames[i], "` has a dynamic dimension under XLA (",
                      xs->ToString(),
                      "); the op needs static shapes inside jit_compile"));
      shapes[i] = ctx->InputShape(i);
    }
    for (int i = 0; i < kFwdInputs; ++i) ptrs[i] = &shapes[i];
    typename std::conditional<kGrad, flashattn::FlashBwdParams, flashattn::FlashFwdParams>::type p;
    OP_REQUIRES_OK(ctx, FillShapes(ptrs, attrs_, &p));
    const flashattn::AttnShape& s = p.shape;
    if (kGrad) OP_REQUIRES_OK(ctx, CheckGradShapes(shapes[10], shapes[11], shapes[12], shapes[13], s));
    const ::tensorflow::DataType dt = ctx->input_type(0);
    const bool gpu = gpu_;
    OP_REQUIRES(ctx, !(gpu && dt == ::tensorflow::DT_DOUBLE),
                ::tensorflow::errors::Unimplemented(
                    "tf_flashattn: float64 attention runs on the CPU only (the CUDA kernels take "
                    "float16, bfloat16 and float32)"));
    const bool deterministic = gpu && ::tensorflow::OpDeterminismRequired();
    const bool allow_tf32 =
        gpu && dt == ::tensorflow::DT_FLOAT && ::tsl::tensor_float_32_execution_enabled();

    std::vector<xla::XlaOp> operands(n);
    for (int i = 0; i < n; ++i) operands[i] = ctx->Input(i);
    const xla::PrimitiveType t = ctx->input_xla_type(0);
    // Every operand and result is pinned to the row-major (descending) layout the kernels read
    // and write: a custom call without layout constraints lets XLA's layout assignment hand it
    // any layout its producers or users prefer (e.g. a dot's {3,1,2,0}), and the FFI buffer
    // carries no layout, so the kernels would read a permuted buffer as row-major. (On the H200,
    // without the constraints, a model with the layers compiled by XLA trained to a different
    // loss at context 16384 while the op alone was right, and tests/test_xla.py's transposed-
    // operand and layer-under-XLA tests fail; with them both are right.) With the constraints XLA
    // inserts copies instead.
    auto shape = [](xla::PrimitiveType type, const TensorShape& ts) {
      return xla::ShapeUtil::MakeShapeWithDescendingLayout(type, ts.dim_sizes());
    };
    std::vector<xla::Shape> operand_shapes(n);
    for (int i = 0; i < n; ++i) operand_shapes[i] = shape(ctx->input_xla_type(i), shapes[i]);
    std::vector<xla::Shape> outs;
    if constexpr (kGrad) {
      const bool with_bias = !Absent(shapes[4]);
      // The CUDA backward's workspace (Dsum, lse2, dQ accumulator) is a fifth result that XLA
      // allocates with the others: its size depends on shapes and flags known here. (The FFI
      // scratch allocator returned no memory under TensorFlow's XLA launch on the H200.)
      int64_t ws_bytes = 0;
#if GOOGLE_CUDA
      if (gpu) {
        flashattn::FlashBwdParams wp;
        wp.shape = s;
        wp.dtype = dt == ::tensorflow::DT_HALF       ? flashattn::DType::kFloat16
                   : dt == ::tensorflow::DT_BFLOAT16 ? flashattn::DType::kBFloat16
                                                     : flashattn::DType::kFloat32;
        wp.deterministic = deterministic;
        wp.allow_tf32 = allow_tf32;
        ws_bytes = static_cast<int64_t>(flashattn::flash_bwd_workspace_bytes(wp));
      }
#endif
      outs = {shape(t, shapes[0]), shape(t, shapes[1]), shape(t, shapes[2]),
              shape(xla::F32, with_bias ? TensorShape({s.B, s.H, s.Tq, s.Tk}) : TensorShape({0})),
              shape(xla::U8, TensorShape({ws_bytes}))};
    } else {
      // The CUDA forward's workspace (the decoding path's partial results), a third result.
      int64_t ws_bytes = 0;
#if GOOGLE_CUDA
      if (gpu) {
        flashattn::FlashFwdParams wp = p;
        wp.dtype = dt == ::tensorflow::DT_HALF       ? flashattn::DType::kFloat16
                   : dt == ::tensorflow::DT_BFLOAT16 ? flashattn::DType::kBFloat16
                                                     : flashattn::DType::kFloat32;
        wp.allow_tf32 = allow_tf32;
        OP_REQUIRES_OK(ctx, ReadDecodeSettings(&wp));
        ws_bytes = static_cast<int64_t>(flashattn::flash_fwd_workspace_bytes(wp));
      }
#endif
      outs = {shape(t, TensorShape({s.B, s.Tq, s.H, s.Dv})), shape(xla::F32, TensorShape({s.B, s.H, s.Tq})),
              shape(xla::U8, TensorShape({ws_bytes}))};
    }
    // A forward with few query rows (decoding: Tq <= kAliasMaxTq) and Dv == D writes its output into
    // the query's buffer: output 0 aliases operand 0 (same shape, dtype and layout). In a decoding
    // loop whose next query is this output, XLA otherwise writes the output elsewhere and copies it
    // into the loop's buffer at every step; where the query stays live after the call, XLA copies the
    // (small) query instead. Every CUDA forward reads a tile's query rows (into shared memory) before
    // it writes that tile's output rows, and no other tile reads them (decoding's key splits write
    // partial results to the workspace and the merge writes the output after them), so the kernels
    // are right in place. Not for training shapes: there the query is live until the backward, and
    // the copy XLA would make of it is as large as the output.
    constexpr int64_t kAliasMaxTq = 16;
    std::vector<std::pair<xla::ShapeIndex, std::pair<int64_t, xla::ShapeIndex>>> aliasing;
    if (!kGrad && gpu && s.Tq <= kAliasMaxTq && s.Dv == s.D)
      aliasing.push_back({xla::ShapeIndex({0}), {0, xla::ShapeIndex()}});
    xla::XlaOp call = xla::CustomCallWithLayout(
        ctx->builder(), kGrad ? kGradTarget : kFwdTarget, operands,
        xla::ShapeUtil::MakeTupleShape(outs), operand_shapes,
        FfiAttributes(attrs_, deterministic, allow_tf32),
        /*has_side_effect=*/false, /*output_operand_aliasing=*/aliasing, /*literal=*/nullptr,
        xla::CustomCallSchedule::SCHEDULE_NONE, xla::CustomCallApiVersion::API_VERSION_TYPED_FFI);
    for (int i = 0; i < (kGrad ? 4 : 2); ++i) ctx->SetOutput(i, xla::GetTupleElement(call, i));
  }

 private:
  Attrs attrs_;
  bool gpu_;  // compiling for XLA:GPU (else XLA:CPU)
};

REGISTER_XLA_OP(Name("FlashAttn>FlashAttention"), FlashAttentionXlaOp<false>);
REGISTER_XLA_OP(Name("FlashAttn>FlashAttentionGrad"), FlashAttentionXlaOp<true>);

// ---- run time (FFI handlers) -------------------------------------------------------------
struct CallAttrs {
  Attrs a;
  bool deterministic = false, allow_tf32 = false;
};

ffi::Error ToFfi(const Status& st) {
  if (st.ok()) return ffi::Error::Success();
  return ffi::Error(ffi::ErrorCode::kInvalidArgument, std::string(st.message()));
}

bool DTypeFromFfi(ffi::DataType t, flashattn::DType* out) {
  switch (t) {
    case ffi::DataType::F32: *out = flashattn::DType::kFloat32; return true;
    case ffi::DataType::F16: *out = flashattn::DType::kFloat16; return true;
    case ffi::DataType::BF16: *out = flashattn::DType::kBFloat16; return true;
    case ffi::DataType::F64: *out = flashattn::DType::kFloat64; return true;
    default: return false;
  }
}

TensorShape ShapeOf(const ffi::AnyBuffer& b) {
  TensorShape ts;
  for (int64_t d : b.dimensions()) ts.AddDim(d);
  return ts;
}

// Fills the params shared by both directions from the first 10 arguments (every pointer in the
// memory of the handler's device, the seed's too: the kernels read it there).
template <typename Params>
ffi::Error FillFromBuffers(const ffi::RemainingArgs& args, const CallAttrs& ca, Params* p,
                           std::vector<ffi::AnyBuffer>* bufs) {
  for (size_t i = 0; i < args.size(); ++i) {
    auto b = args.get<ffi::AnyBuffer>(i);
    if (!b.has_value()) return b.error();
    bufs->push_back(*b);
  }
  if (bufs->size() < static_cast<size_t>(kFwdInputs))
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "tf_flashattn: too few custom call operands");
  std::vector<TensorShape> shapes;
  for (const auto& b : *bufs) shapes.push_back(ShapeOf(b));
  const TensorShape* ptrs[kFwdInputs];
  for (int i = 0; i < kFwdInputs; ++i) ptrs[i] = &shapes[i];
  if (!DTypeFromFfi((*bufs)[0].element_type(), &p->dtype))
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "tf_flashattn: unsupported dtype");
  ffi::Error err = ToFfi(FillShapes(ptrs, ca.a, p));
  if (err.failure()) return err;
  const auto& in = *bufs;
  auto data = [&](int i) -> const void* { return Absent(shapes[i]) ? nullptr : in[i].untyped_data(); };
  p->q = in[0].untyped_data();
  p->k = in[1].untyped_data();
  p->v = in[2].untyped_data();
  p->mask.mask = static_cast<const bool*>(data(3));
  p->score.bias = data(4);
  p->mask.q_lengths = static_cast<const int32_t*>(data(5));
  p->mask.k_lengths = static_cast<const int32_t*>(data(6));
  p->mask.q_valid = static_cast<const bool*>(data(7));
  p->mask.k_valid = static_cast<const bool*>(data(8));
  if (p->dropout.rate > 0.f) p->dropout.seed = static_cast<const int64_t*>(in[9].untyped_data());
  return ffi::Error::Success();
}

// The gradient's extra arguments (output, lse, d_output, d_lse) and results (dq, dk, dv, dbias,
// then the workspace: u8[bytes], empty on the CPU).
ffi::Error FillGrad(const std::vector<ffi::AnyBuffer>& in, const ffi::RemainingRets& rets,
                    flashattn::FlashBwdParams* p, bool* empty) {
  if (in.size() != static_cast<size_t>(kGradInputs) || rets.size() != 5)
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "tf_flashattn: bad gradient custom call");
  p->o = in[10].untyped_data();
  p->lse = static_cast<const float*>(in[11].untyped_data());
  p->d_o = in[12].untyped_data();
  p->d_lse = Absent(ShapeOf(in[13])) ? nullptr : static_cast<const float*>(in[13].untyped_data());
  void* out[4];
  size_t total = 0;
  for (int i = 0; i < 4; ++i) {
    auto r = rets.get<ffi::AnyBuffer>(i);
    if (!r.has_value()) return r.error();
    out[i] = (*r)->untyped_data();
    if (i < 3) total += (*r)->element_count();
  }
  p->dq = out[0];
  p->dk = out[1];
  p->dv = out[2];
  p->dbias = p->score.bias ? static_cast<float*>(out[3]) : nullptr;
  *empty = total == 0;
  return ffi::Error::Success();
}

// The forward's results: output, lse, then the workspace (u8[bytes], empty on the CPU).
ffi::Error FwdOutputs(const ffi::RemainingRets& rets, flashattn::FlashFwdParams* p, bool* empty) {
  if (rets.size() != 3)
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "tf_flashattn: bad forward custom call");
  auto o = rets.get<ffi::AnyBuffer>(0);
  if (!o.has_value()) return o.error();
  auto lse = rets.get<ffi::AnyBuffer>(1);
  if (!lse.has_value()) return lse.error();
  p->o = (*o)->untyped_data();
  p->lse = static_cast<float*>((*lse)->untyped_data());
  *empty = (*o)->element_count() == 0 && (*lse)->element_count() == 0;
  return ffi::Error::Success();
}

CallAttrs MakeAttrs(float scale, float softcap, float dropout_rate, int64_t causal,
                    int64_t causal_offset, int64_t window_left, int64_t window_right,
                    int64_t deterministic, int64_t allow_tf32) {
  CallAttrs c;
  c.a.scale = scale;
  c.a.softcap = softcap;
  c.a.dropout_rate = dropout_rate;
  c.a.causal = causal != 0;
  c.a.causal_offset = causal_offset;
  c.a.window_left = window_left;
  c.a.window_right = window_right;
  c.deterministic = deterministic != 0;
  c.allow_tf32 = allow_tf32 != 0;
  return c;
}

#define TF_FLASHATTN_FFI_ATTRS                                                              \
  .Attr<float>("scale").Attr<float>("softcap").Attr<float>("dropout_rate")                   \
      .Attr<int64_t>("causal").Attr<int64_t>("causal_offset").Attr<int64_t>("window_left")   \
      .Attr<int64_t>("window_right").Attr<int64_t>("deterministic").Attr<int64_t>("allow_tf32")
#define TF_FLASHATTN_FFI_ATTR_PARAMS                                                       \
  float scale, float softcap, float dropout_rate, int64_t causal, int64_t causal_offset,  \
      int64_t window_left, int64_t window_right, int64_t deterministic, int64_t allow_tf32
#define TF_FLASHATTN_FFI_ATTR_ARGS                                                          \
  scale, softcap, dropout_rate, causal, causal_offset, window_left, window_right, deterministic, \
      allow_tf32

// -- Host (CPU) --
// A parallel-for over XLA's intra-op thread pool. Shards are pulled from a shared counter by the
// caller and by tasks scheduled on the pool, and the caller waits only for shards that others
// took: if the pool is busy (or the caller is its only thread), the caller does them all. The
// state is shared, so a task that starts after the loop is over finds no shard and returns.
flashattn::ParallelFor PoolParallelFor(ffi::ThreadPool* pool, int64_t* threads) {
  const int64_t nt = pool->num_threads();
  *threads = nt > 0 ? nt : 1;
  return [pool, nt](int64_t n, int64_t, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    struct State {
      std::function<void(int64_t, int64_t)> fn;
      int64_t n = 0, shards = 0;
      std::atomic<int64_t> next{0}, done{0};
      std::mutex mu;
      std::condition_variable cv;
    };
    auto st = std::make_shared<State>();
    st->fn = fn;
    st->n = n;
    st->shards = std::min<int64_t>(n, nt > 0 ? 4 * (nt + 1) : 1);
    auto work = [](const std::shared_ptr<State>& s) {
      for (int64_t i; (i = s->next.fetch_add(1)) < s->shards;) {
        s->fn(s->n * i / s->shards, s->n * (i + 1) / s->shards);
        if (s->done.fetch_add(1) + 1 == s->shards) {
          std::lock_guard<std::mutex> lock(s->mu);
          s->cv.notify_all();
        }
      }
    };
    for (int64_t t = 0; t < std::min<int64_t>(nt, st->shards - 1); ++t) pool->Schedule([st, work] { work(st); });
    work(st);
    std::unique_lock<std::mutex> lock(st->mu);
    st->cv.wait(lock, [&] { return st->done.load() == st->shards; });
  };
}

ffi::Error CpuCheck() {
  if (flashattn::flash_cpu_supported()) return ffi::Error::Success();
  return ffi::Error(ffi::ErrorCode::kUnimplemented,
                    "tf_flashattn's CPU kernels need a processor with AVX2, FMA and F16C");
}

ffi::Error FwdHost(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                   TF_FLASHATTN_FFI_ATTR_PARAMS) {
  const CallAttrs ca = MakeAttrs(TF_FLASHATTN_FFI_ATTR_ARGS);
  flashattn::FlashFwdParams p;
  std::vector<ffi::AnyBuffer> bufs;
  ffi::Error err = FillFromBuffers(args, ca, &p, &bufs);
  if (err.failure()) return err;
  bool empty = false;
  if ((err = FwdOutputs(rets, &p, &empty)).failure() || empty) return err;
  if ((err = CpuCheck()).failure()) return err;
  if ((err = ToFfi(ReadDecodeSettings(&p))).failure()) return err;
  int64_t threads = 1;
  const flashattn::ParallelFor pf = PoolParallelFor(&pool, &threads);
  flashattn::flash_fwd_cpu(p, pf, static_cast<int>(threads));
  return ffi::Error::Success();
}

ffi::Error BwdHost(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                   TF_FLASHATTN_FFI_ATTR_PARAMS) {
  const CallAttrs ca = MakeAttrs(TF_FLASHATTN_FFI_ATTR_ARGS);
  flashattn::FlashBwdParams p;
  std::vector<ffi::AnyBuffer> bufs;
  ffi::Error err = FillFromBuffers(args, ca, &p, &bufs);
  if (err.failure()) return err;
  bool empty = false;
  if ((err = FillGrad(bufs, rets, &p, &empty)).failure()) return err;
  if (empty) return ffi::Error::Success();
  if ((err = CpuCheck()).failure()) return err;
  int64_t threads = 1;
  const flashattn::ParallelFor pf = PoolParallelFor(&pool, &threads);
  flashattn::flash_bwd_cpu(p, pf, static_cast<int>(threads));
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER(kFwdHost, FwdHost,
                       ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().RemainingArgs().RemainingRets()
                           TF_FLASHATTN_FFI_ATTRS);
XLA_FFI_DEFINE_HANDLER(kBwdHost, BwdHost,
                       ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().RemainingArgs().RemainingRets()
                           TF_FLASHATTN_FFI_ATTRS);
XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kFwdTarget, "Host", kFwdHost);
XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kGradTarget, "Host", kBwdHost);

#if GOOGLE_CUDA
// -- CUDA --
ffi::Error CudaError(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ffi::Error::Success();
  return ffi::Error(ffi::ErrorCode::kInternal,
                    std::string("tf_flashattn ") + what + ": " + cudaGetErrorString(e));
}

ffi::Error FwdCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                   TF_FLASHATTN_FFI_ATTR_PARAMS) {
  const CallAttrs ca = MakeAttrs(TF_FLASHATTN_FFI_ATTR_ARGS);
  flashattn::FlashFwdParams p;
  std::vector<ffi::AnyBuffer> bufs;
  ffi::Error err = FillFromBuffers(args, ca, &p, &bufs);
  if (err.failure()) return err;
  bool empty = false;
  if ((err = FwdOutputs(rets, &p, &empty)).failure() || empty) return err;
  p.allow_tf32 = ca.allow_tf32;
  if ((err = ToFfi(ReadDecodeSettings(&p))).failure()) return err;
  const size_t bytes = flashattn::flash_fwd_workspace_bytes(p);
  auto ws = rets.get<ffi::AnyBuffer>(2);
  if (!ws.has_value()) return ws.error();
  if ((*ws)->size_bytes() < bytes)
    return ffi::Error(ffi::ErrorCode::kInternal, "tf_flashattn: forward workspace too small");
  if (bytes > 0) p.workspace = (*ws)->untyped_data();
  return CudaError(flashattn::flash_fwd_cuda(p, stream), "forward");
}

ffi::Error BwdCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                   TF_FLASHATTN_FFI_ATTR_PARAMS) {
  const CallAttrs ca = MakeAttrs(TF_FLASHATTN_FFI_ATTR_ARGS);
  flashattn::FlashBwdParams p;
  std::vector<ffi::AnyBuffer> bufs;
  ffi::Error err = FillFromBuffers(args, ca, &p, &bufs);
  if (err.failure()) return err;
  bool empty = false;
  if ((err = FillGrad(bufs, rets, &p, &empty)).failure()) return err;
  p.deterministic = ca.deterministic;
  p.allow_tf32 = ca.allow_tf32;
  const size_t bytes = flashattn::flash_bwd_workspace_bytes(p);
  auto ws = rets.get<ffi::AnyBuffer>(4);
  if (!ws.has_value()) return ws.error();
  if ((*ws)->size_bytes() < bytes)
    return ffi::Error(ffi::ErrorCode::kInternal, "tf_flashattn: backward workspace too small");
  if (bytes > 0) {
    p.workspace = static_cast<float*>((*ws)->untyped_data());
    p.workspace_bytes = (*ws)->size_bytes();
  }
  if (empty && !p.dbias) return ffi::Error::Success();
  return CudaError(flashattn::flash_bwd_cuda(p, stream), "backward");
}

XLA_FFI_DEFINE_HANDLER(kFwdCuda, FwdCuda,
                       ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().RemainingArgs()
                           .RemainingRets() TF_FLASHATTN_FFI_ATTRS);
XLA_FFI_DEFINE_HANDLER(kBwdCuda, BwdCuda,
                       ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().RemainingArgs()
                           .RemainingRets()
                           TF_FLASHATTN_FFI_ATTRS);
// Command buffers: XLA:GPU records runs of device work into CUDA graphs and replays them without the
// host work of each launch (its default takes custom calls whose handler has the trait; a handler
// without it splits the graph around itself). The CUDA handlers qualify: given the same buffers and
// attributes they launch the same kernels and memsets on XLA's stream, use no device memory but the
// buffers XLA passes (the workspace included), and never wait for or query the stream (lengths and
// the dropout seed are read on the device). Host-side state they keep (device figures, kernel
// attributes, occupancy) is the same at every call. What a replay does not redo: reading the
// decoding settings (TF_FLASHATTN_DECODE*) and the kernels' runtime switches (the harness's
// set_enabled / set_fwd_variant / set_bwd_enabled) and counting launches -- a recorded call keeps
// what they were when it was recorded. TF_FLASHATTN_XLA_COMMAND_BUFFER=0, read when the library
// loads, registers the handlers without the trait (every call then launched by the host).
XLA_FFI_Handler_Traits CudaHandlerTraits() {
  const char* v = std::getenv("TF_FLASHATTN_XLA_COMMAND_BUFFER");
  if (v != nullptr && std::strcmp(v, "0") == 0) return 0;
  return XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE;
}
XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kFwdTarget, "CUDA", kFwdCuda, CudaHandlerTraits());
XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kGradTarget, "CUDA", kBwdCuda, CudaHandlerTraits());
#endif  // GOOGLE_CUDA

}  // namespace
}  // namespace tf_flashattn
