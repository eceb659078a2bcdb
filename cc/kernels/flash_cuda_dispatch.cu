// The one dispatch point of the CUDA kernels: flash_fwd_cuda / flash_bwd_cuda (flash_cuda.h)
// check the device and the shape, then pick the target's kernels:
//   few query rows (any GPU)            -> sm80/flash_decode.cu (flash-decoding, key splits)
//   float32, allow_tf32, compute 9.0, D, Dv <= 128 (multiples of 4; 64 and 128, others padded up), causal
//     or none, index masks, soft-cap, dropout, dense mask and bias (not with dropout), GQA
//     (sm90::fwd_tf32_applies; FA_SM90_TF32_D256 builds also D == Dv == 256, causal or none, nothing else),
//     TF_FLASHATTN_SM90_TF32 and TF_FLASHATTN_SM90 not 0,
//     FA_HAS_SM90 builds                -> sm90/flash_fwd_sm90_tf32.cu (wgmma .tf32, TMA)
//   float32                             -> sm80/flash_fwd_tf32.cu (allow_tf32) or sm80/flash_fwd_simt.cu
//   float16 / bfloat16, compute 9.0, D, Dv <= 256 (multiples of 8; the kernels of 64, 128 and 256,
//     other head dims and Dv != D padded up to head_dim_bucket(max(D, Dv))),
//     index masks, soft-cap, dense mask and bias (the last two not with dropout) and dropout
//     (sm90::fwd_applies),
//     TF_FLASHATTN_SM90 not 0, FA_HAS_SM90 builds
//                                       -> sm90/flash_fwd_sm90.cu (wgmma, TMA, warp specialization)
//   float16 / bfloat16                  -> sm80/flash_fwd.cu (mma.sync, cp.async; sm_80 and newer)
// Backward: sm80/flash_bwd.cu for every dtype, except where sm90/flash_bwd_sm90.cu applies (on by
// default on 9.0, TF_FLASHATTN_SM90_BWD=0 off: float16 / bfloat16, head dims 64 and 128 (any D, Dv <= 256
// run the kernels of head_dim_bucket(max(D, Dv)), padded up, as the forward), index masks
// (causal, window, lengths, [B, Tq] / [B, Tk] validity) or none, dropout or none, soft-cap, a dense
// mask and (D = 64) bias / dbias (those three not with dropout), deterministic mode (an ordered dQ
// reduction; TF_FLASHATTN_SM90_BWD_DET=0 leaves it to sm80's);
// head dim 256 (no mask, causal, index masks, dropout; TF_FLASHATTN_SM90_BWD_D256=0 off;
// sm90::bwd_applies); bias / dbias at head dim 128 and soft-cap, a dense mask, bias / dbias at
// head dim 256 (no dropout; deterministic too) by the head-dim-split kernel
// (TF_FLASHATTN_SM90_BWD_SPLITD=0 off); float32 with allow_tf32: sm90/flash_bwd_sm90_tf32.cu on 9.0 where
// sm90::bwd_tf32_applies (D == Dv == 64, or D, Dv multiples of 4 padded up to 64; index masks, soft-cap and
// dropout, deterministic mode too, a dense mask and bias / dbias (not with dropout; TF_FLASHATTN_SM90_TF32_BWD_DENSE=0
// off); TF_FLASHATTN_SM90_TF32_BWD=0 off), sm90/flash_bwd_sm90_tf32_d128.cu where
// sm90::bwd_tf32_d128_applies (D, Dv padded up to 128, the same limits and switches), sm90/flash_bwd_sm90_tf32_d256.cu
// where sm90::bwd_tf32_d256_applies (D == Dv == 256, index masks or none; TF_FLASHATTN_SM90_TF32_BWD_D256=0 off), else
// sm80/flash_bwd_tf32.cu.
// Per-target folders: cpu/ (the CPU kernels, own dispatch in cpu/flash_cpu_dispatch.cc), sm80/ (every GPU from
// sm_80 on), sm90/ (Hopper-only kernels); shared pieces (params, Philox, masking rules, launch helpers) in common/.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include <cuda_runtime.h>

#include "cc/kernels/common/flash_cuda_internal.h"
#include "cc/kernels/common/flash_params.h"
#include "cc/kernels/flash_cuda.h"

namespace flashattn {
namespace cuda {

cudaError_t check_device(bool* big_smem) {
  static int cached[64] = {0};  // 0 unknown, 1 ok, 2 too old; +4: >= 210 KiB shared memory per SM
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  int c = dev < 64 ? cached[dev] : 0;
  if (c == 0) {
    int major = 0, smem_sm = 0;
    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
    if (err != cudaSuccess) return err;
    c = (major >= 8 ? 1 : 2) + (smem_sm >= 210 * 1024 ? 4 : 0);
    if (dev < 64) cached[dev] = c;
  }
  if (big_smem) *big_smem = (c & 4) != 0;
  return (c & 3) == 1 ? cudaSuccess : cudaErrorInvalidDeviceFunction;
}

// TF_FLASHATTN_GPU_TIMING=1 or =N (read once; for maintainers): the GPU time of every forward / backward call,
// from a CUDA event recorded on the call's stream before its first piece of work to one after its last
// (memsets, side kernels and main kernel together), and the GPU time from one call's end to the next
// call's start on the same stream (what else ran there, or idle time); printed to stderr as the mean and
// median of every 20 (or N) calls of a direction (the median of the gaps leaves out the few where the
// caller waited for the GPU). The same code serves every caller (the TensorFlow op, the XLA custom
// calls, the kernel harness), so their figures compare directly. Events are read when they have
// completed (cudaEventQuery), so the probe adds no wait; off, it costs one test of a static flag and one of
// an atomic one. Calls captured into a CUDA graph are not timed. Tools switch it on for a while and read
// every call's figures through tf_flashattn_gpu_timing_collect / _take (flash_cuda.h; gpu_attention.py).
class GpuTimer {
 public:
  explicit GpuTimer(const char* what) : what_(what) {}
  // Calls per printed mean: TF_FLASHATTN_GPU_TIMING=1 20, =N (2 .. 100000) N; 0 off.
  static int window() {
    static const int v = [] {
      const char* e = getenv("TF_FLASHATTN_GPU_TIMING");
      const long n = e != nullptr ? strtol(e, nullptr, 10) : 0;
      return n == 1 ? 20 : n >= 2 && n <= 100000 ? static_cast<int>(n) : 0;
    }();
    return v;
  }
  // Collection for tf_flashattn_gpu_timing_take (on whatever the environment says).
  static std::atomic<bool>& collecting() {
    static std::atomic<bool> v{false};
    return v;
  }
  // Which collection a call belongs to (0: none): tf_flashattn_gpu_timing_collect(1) starts the next one.
  static std::atomic<unsigned>& generation() {
    static std::atomic<unsigned> v{0};
    return v;
  }
  static bool on() { return window() > 0 || collecting().load(std::memory_order_relaxed); }
  // Whether to time a call on `stream`: on, and the stream not being captured into a CUDA graph (XLA's
  // command buffers; an event query during capture would invalidate it).
  static bool wanted(cudaStream_t stream) {
    if (!on()) return false;
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &st) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return st == cudaStreamCaptureStatusNone;
  }
  // Forgets what was collected and the last call (so no gap reaches back before this point).
  void reset() {
    std::lock_guard<std::mutex> lock(mu_);
    drain();
    release(&last_.end);
    last_ = Call{nullptr, nullptr, nullptr, -1, 0u};
    taken_calls_.clear();
    taken_gaps_.clear();
  }
  // The collected call times and gaps (ms) of the calls completed so far, at most cap of each; returns the
  // number of calls collected (all of them, also past cap) and forgets them.
  int take(float* ms, float* gaps, int cap, int* n_gaps) {
    std::lock_guard<std::mutex> lock(mu_);
    drain();
    const int n = static_cast<int>(taken_calls_.size());
    const int g = static_cast<int>(std::min<size_t>(taken_gaps_.size(), std::max(cap, 0)));
    std::copy_n(taken_calls_.begin(), std::min(n, std::max(cap, 0)), ms);
    std::copy_n(taken_gaps_.begin(), g, gaps);
    if (n_gaps != nullptr) *n_gaps = g;
    taken_calls_.clear();
    taken_gaps_.clear();
    return n;
  }
  // Before the call's work: its start event (null when events cannot be made).
  cudaEvent_t start(cudaStream_t stream) { return record(stream); }
  // After the call's work (err: the call's status; failed calls are not timed).
  void stop(cudaEvent_t begin, cudaStream_t stream, cudaError_t err) {
    if (begin == nullptr) return;
    cudaEvent_t end = err == cudaSuccess ? record(stream) : nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    if (end == nullptr) {
      cudaEventDestroy(begin);
    } else {
      int dev = 0;
      cudaGetDevice(&dev);
      const unsigned gen = collecting().load(std::memory_order_relaxed) ? generation().load() : 0u;
      pending_.push_back({begin, end, stream, dev, gen});
    }
    drain();
  }

 private:
  struct Call {
    cudaEvent_t begin, end;
    cudaStream_t stream;
    int dev;
    unsigned gen;  // the collection it was made in (generation()), 0 for none
  };
  cudaEvent_t record(cudaStream_t stream) {
    cudaEvent_t e = nullptr;
    if (cudaEventCreate(&e) != cudaSuccess) return nullptr;
    if (cudaEventRecord(e, stream) != cudaSuccess) {
      cudaEventDestroy(e);
      return nullptr;
    }
    return e;
  }
  void release(cudaEvent_t* e) {
    if (*e != nullptr) cudaEventDestroy(*e);
    *e = nullptr;
  }
  // The completed calls, in order (one stream's calls complete in order). A query that neither succeeds
  // nor answers "not ready" drops its call (not timed); the runtime's last error is cleared after either.
  void drain() {
    while (!pending_.empty()) {
      const cudaError_t q = cudaEventQuery(pending_.front().end);
      if (q == cudaErrorNotReady) {
        cudaGetLastError();
        break;
      }
      Call c = pending_.front();
      pending_.pop_front();
      if (q != cudaSuccess) {
        cudaGetLastError();
        release(&c.begin);
        release(&c.end);
        continue;
      }
      float ms = 0.f, gap = 0.f;
      bool failed = false;  // an event of another device or context: not timed, not an error for the caller
      const bool printing = window() > 0;
      const bool collect = c.gen != 0 && c.gen == generation().load() && taken_calls_.size() < kMaxTaken;
      if (cudaEventElapsedTime(&ms, c.begin, c.end) == cudaSuccess) {
        if (printing) calls_.push_back(ms);
        if (collect) taken_calls_.push_back(ms);
      } else {
        failed = true;
      }
      if (last_.end != nullptr && last_.stream == c.stream && last_.dev == c.dev) {
        if (cudaEventElapsedTime(&gap, last_.end, c.begin) == cudaSuccess) {
          if (printing) gaps_.push_back(gap);
          if (collect) taken_gaps_.push_back(gap);
        } else {
          failed = true;
        }
      }
      if (failed) cudaGetLastError();
      release(&c.begin);
      release(&last_.end);
      last_ = c;
      if (printing && static_cast<int>(calls_.size()) == window()) {
        fprintf(stderr, "tf_flashattn GPU timing: %s: %zu calls, %.4f ms per call on the GPU (median %.4f); %zu gaps "
                "between calls on one stream, %.4f ms each (median %.4f)\n", what_, calls_.size(), mean(calls_),
                median(calls_), gaps_.size(), mean(gaps_), median(gaps_));
        calls_.clear();
        gaps_.clear();
      }
    }
  }
  static double mean(const std::vector<float>& v) {
    double sum = 0.0;
    for (float x : v) sum += x;
    return v.empty() ? 0.0 : sum / v.size();
  }
  static double median(std::vector<float> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
  }
  const char* what_;
  std::mutex mu_;
  std::deque<Call> pending_;
  Call last_{nullptr, nullptr, nullptr, -1, 0u};
  std::vector<float> calls_, gaps_;  // ms of the window's calls, and of the gaps before them
  static constexpr size_t kMaxTaken = size_t{1} << 20;  // collected calls kept until taken (later ones dropped)
  std::vector<float> taken_calls_, taken_gaps_;  // the same, collected for take()
};

// impl(p, stream), timed by timer() when the probe wants this call.
template <typename Params>
cudaError_t timed(GpuTimer& (*timer)(), cudaError_t (*impl)(const Params&, cudaStream_t), const Params& p,
                  cudaStream_t stream) {
  if (!GpuTimer::wanted(stream)) return impl(p, stream);
  cudaEvent_t begin = timer().start(stream);
  const cudaError_t err = impl(p, stream);
  timer().stop(begin, stream, err);
  return err;
}

// One probe per direction, never destroyed (the process may exit with events pending).
GpuTimer& fwd_timer() {
  static GpuTimer* t = new GpuTimer("forward");
  return *t;
}
GpuTimer& bwd_timer() {
  static GpuTimer* t = new GpuTimer("backward");
  return *t;
}

}  // namespace cuda

namespace {
cudaError_t flash_fwd_impl(const FlashFwdParams& p, cudaStream_t stream);
cudaError_t flash_bwd_impl(const FlashBwdParams& p, cudaStream_t stream);
}  // namespace

cudaError_t flash_fwd_cuda(const FlashFwdParams& p, cudaStream_t stream) {
  return cuda::timed(cuda::fwd_timer, flash_fwd_impl, p, stream);
}

cudaError_t flash_bwd_cuda(const FlashBwdParams& p, cudaStream_t stream) {
  return cuda::timed(cuda::bwd_timer, flash_bwd_impl, p, stream);
}

}  // namespace flashattn

extern "C" int tf_flashattn_gpu_timing_collect(int on) {
  using flashattn::cuda::GpuTimer;
  GpuTimer::collecting().store(false);
  if (on != 0) {  // a new collection: what is still running of an earlier one is not kept
    GpuTimer::generation().fetch_add(1);
    flashattn::cuda::fwd_timer().reset();
    flashattn::cuda::bwd_timer().reset();
    GpuTimer::collecting().store(true);
  }
  return 0;
}

extern "C" int tf_flashattn_gpu_timing_take(int direction, float* ms, float* gaps, int cap, int* n_gaps) {
  if (direction != 0 && direction != 1) return -1;
  return (direction == 0 ? flashattn::cuda::fwd_timer() : flashattn::cuda::bwd_timer()).take(ms, gaps, cap, n_gaps);
}

extern "C" int tf_flashattn_kernel_launches(int64_t* counts, int cap) {
#if FA_HAS_SM90
  namespace sm90 = flashattn::cuda::sm90;
  const int64_t n[] = {sm90::fwd_launches(), sm90::bwd_launches(), sm90::fwd_tf32_launches(), sm90::bwd_tf32_launches(),
                       sm90::bwd_tf32_d128_launches(), sm90::bwd_tf32_d256_launches()};
  constexpr int kN = static_cast<int>(sizeof(n) / sizeof(n[0]));
  for (int i = 0; i < kN && i < cap; ++i) counts[i] = n[i];
  return kN;
#else
  (void)counts;
  (void)cap;
  return 0;
#endif
}

namespace flashattn {

namespace {

cudaError_t flash_fwd_impl(const FlashFwdParams& p, cudaStream_t stream) {
  bool big_smem = false;
  cudaError_t err = cuda::check_device(&big_smem);
  if (err != cudaSuccess) return err;
  const AttnShape& s = p.shape;
  if (s.B == 0 || s.Tq == 0 || s.H == 0) return cudaSuccess;
  if (s.Hkv <= 0 || s.H % s.Hkv != 0 || s.D > 256 || s.Dv > 256) return cudaErrorInvalidValue;
  if (cuda::decode_applies(p)) return cuda::fwd_decode(p, stream);  // few query rows
  if (p.dtype == DType::kFloat32) {
    if (!p.allow_tf32) return cuda::fwd_simt(p, stream);
#if FA_HAS_SM90
    // Hopper TF32 (sm90/flash_fwd_sm90_tf32.cu) where it applies, unless TF_FLASHATTN_SM90_TF32=0 or
    // TF_FLASHATTN_SM90=0; it answers
    // cudaErrorNotSupported when it cannot make its tensor maps, and sm80's TF32 kernel takes over.
    if (cuda::sm90::enabled() && cuda::sm90::tf32_enabled() && cuda::sm90::fwd_tf32_applies(p)) {
      err = cuda::sm90::fwd_tf32(p, stream);
      if (err != cudaErrorNotSupported) return err;
    }
#endif
    return cuda::fwd_tf32(p, big_smem, stream);
  }
  if (p.dtype == DType::kFloat64) return cudaErrorNotSupported;
#if FA_HAS_SM90
  // Hopper (sm90/flash_fwd_sm90.cu) where it applies and TF_FLASHATTN_SM90 is not 0; it answers
  // cudaErrorNotSupported when it cannot make its tensor maps, and sm80 takes over.
  if (cuda::sm90::enabled() && cuda::sm90::fwd_applies(p)) {
    err = cuda::sm90::fwd(p, stream);
    if (err != cudaErrorNotSupported) return err;
  }
#endif
  return cuda::fwd_tc(p, cuda::vec8(s, p.q, p.k, p.v, p.o), big_smem, stream);
}

cudaError_t flash_bwd_impl(const FlashBwdParams& p, cudaStream_t stream) {
  bool big_smem = false;
  cudaError_t err = cuda::check_device(&big_smem);
  if (err != cudaSuccess) return err;
  const AttnShape& s = p.shape;
  if (s.Hkv <= 0 || s.H % s.Hkv != 0 || s.D > 256 || s.Dv > 256) return cudaErrorInvalidValue;
  if (p.dtype == DType::kFloat64) return cudaErrorNotSupported;
#if FA_HAS_SM90
  // Hopper backward (sm90/flash_bwd_sm90.cu) where bwd_applies (on unless TF_FLASHATTN_SM90_BWD=0
  // or TF_FLASHATTN_SM90=0, or set_bwd_enabled(0)); same workspace as sm80's.
  if (cuda::sm90::bwd_applies(p)) {
    err = cuda::sm90::bwd(p, stream);
    if (err != cudaErrorNotSupported) return err;
  }
  // Hopper TF32 backward (sm90/flash_bwd_sm90_tf32.cu) where bwd_tf32_applies (float32 with allow_tf32, D, Dv
  // padded up to 64, the index masks (causal, window, lengths, [B, T] validity), soft-cap and dropout, a dense mask
  // and bias / dbias (not with dropout) where bwd_tf32_dense_enabled; on unless TF_FLASHATTN_SM90_TF32_BWD=0); its
  // pre-pass room follows sm80's TF32 workspace (bwd_workspace_bytes adds it).
  if (cuda::sm90::bwd_tf32_applies(p)) {
    err = cuda::sm90::bwd_tf32(p, stream);
    if (err != cudaErrorNotSupported) return err;
  }
  // Its head-dim-128 form (sm90/flash_bwd_sm90_tf32_d128.cu; the same switch).
  if (cuda::sm90::bwd_tf32_d128_applies(p)) {
    err = cuda::sm90::bwd_tf32_d128(p, stream);
    if (err != cudaErrorNotSupported) return err;
  }
  // Head dim 256 (sm90/flash_bwd_sm90_tf32_d256.cu).
  if (cuda::sm90::bwd_tf32_d256_applies(p)) {
    err = cuda::sm90::bwd_tf32_d256(p, stream);
    if (err != cudaErrorNotSupported) return err;
  }
#endif
  return cuda::bwd(p, big_smem, stream);
}

}  // namespace

// The decoding path's partial results, or (Hopper TF32 forward, variant 3 only: opt-in) its pre-pass's K
// and V^T, or (Hopper 16-bit forward, schedule 10 only: the causal plain D = 128 kernel's default) its tile
// counter; the same order of checks as flash_fwd_cuda, from the params alone (no device: XLA asks at
// compile time; on another device the Hopper forwards do not run and the bytes go unused).
size_t flash_fwd_workspace_bytes(const FlashFwdParams& p) {
  if (cuda::decode_applies(p)) return cuda::decode_workspace_bytes(p);
#if FA_HAS_SM90
  if (p.dtype == DType::kFloat32 && p.allow_tf32 && cuda::sm90::enabled() && cuda::sm90::tf32_enabled())
    return cuda::sm90::fwd_tf32_workspace_bytes(p);
  if (cuda::sm90::enabled()) return cuda::sm90::fwd_workspace_bytes(p);
#endif
  return 0;
}

size_t flash_bwd_workspace_bytes(const FlashBwdParams& p) { return cuda::bwd_workspace_bytes(p); }

namespace {
__global__ void next_seed_kernel(const int64_t* state, int64_t* next) {
  next[0] = state[0];
  next[1] = static_cast<int64_t>(static_cast<uint64_t>(state[1]) + 1u);  // wraps, as TensorFlow's add
}
}  // namespace

cudaError_t next_seed_cuda(const int64_t* state, int64_t* next, cudaStream_t stream) {
  next_seed_kernel<<<1, 1, 0, stream>>>(state, next);
  return cudaGetLastError();
}

}  // namespace flashattn
