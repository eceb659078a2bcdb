// The one dispatch point of the CUDA kernels: flash_fwd_cuda / flash_bwd_cuda (flash_cuda.h)
// check the device and the shape, then pick the target's kernels:
//   few query rows (any GPU)            -> sm80/flash_decode.cu (flash-decoding, key splits)
//   float32, allow_tf32, compute 9.0, D == Dv in {64, 128}, causal or no mask, GQA
//     (sm90::fwd_tf32_applies), TF_FLASHATTN_SM90_TF32 and TF_FLASHATTN_SM90 not 0,
//     FA_HAS_SM90 builds                -> sm90/flash_fwd_sm90_tf32.cu (wgmma .tf32, TMA)
//   float32                             -> sm80/flash_fwd_tf32.cu (allow_tf32) or sm80/flash_fwd_simt.cu
//   float16 / bfloat16, compute 9.0, D == Dv in {64, 128, 256},
//     index masks, soft-cap, dense mask and bias (the last two not with dropout) and dropout
//     (sm90::fwd_applies),
//     TF_FLASHATTN_SM90 not 0, FA_HAS_SM90 builds
//                                       -> sm90/flash_fwd_sm90.cu (wgmma, TMA, warp specialization)
//   float16 / bfloat16                  -> sm80/flash_fwd.cu (mma.sync, cp.async; sm_80 and newer)
// Backward: sm80/flash_bwd.cu for every dtype, except where sm90/flash_bwd_sm90.cu applies (on by
// default on 9.0, TF_FLASHATTN_SM90_BWD=0 off: float16 / bfloat16, D == Dv in {64, 128}, index masks
// (causal, window, lengths, [B, Tq] / [B, Tk] validity) or none, dropout or none, soft-cap, a dense
// mask and (D = 64) bias / dbias (those three not with dropout), deterministic mode (an ordered dQ
// reduction; TF_FLASHATTN_SM90_BWD_DET=0 leaves it to sm80's);
// D == Dv == 256 (no mask, causal, index masks, dropout; TF_FLASHATTN_SM90_BWD_D256=0 off;
// sm90::bwd_applies); bias / dbias at D == Dv == 128 and soft-cap, a dense mask, bias / dbias at
// D == Dv == 256 (no dropout; deterministic too) by the head-dim-split kernel
// (TF_FLASHATTN_SM90_BWD_SPLITD=0 off); float32 with allow_tf32: sm80/flash_bwd_tf32.cu. Per-target folders: cpu/ (the CPU
// kernels, own dispatch in cpu/flash_cpu_dispatch.cc), sm80/ (every GPU from sm_80 on), sm90/
// (Hopper-only kernels); shared pieces (params, Philox, masking rules, launch helpers) in common/.
#include <cstdint>

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

}  // namespace cuda

cudaError_t flash_fwd_cuda(const FlashFwdParams& p, cudaStream_t stream) {
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
    return cuda::fwd_tf32(p, stream);
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

cudaError_t flash_bwd_cuda(const FlashBwdParams& p, cudaStream_t stream) {
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
#endif
  return cuda::bwd(p, big_smem, stream);
}

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
