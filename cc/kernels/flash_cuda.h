// CUDA FlashAttention launchers. No framework headers: a params struct in, a CUDA status out.
// Compiles with g++ given the CUDA include dir (only cuda_runtime_api types are used).
//
// Dtypes: float16 and bfloat16 run on tensor cores (mma.sync m16n8k16, float32 accumulation);
// float32 runs on TF32 tensor cores (mma.sync m16n8k8, inputs rounded to tf32) when
// params.allow_tf32, else a full-precision SIMT kernel; float64 returns cudaErrorNotSupported.
// On compute capability 9.0 some float16 / bfloat16 forwards and backwards run the Hopper kernels
// (wgmma, TMA) instead: flash_cuda_dispatch.cu says which.
// Needs compute capability >= 8.0 (cudaErrorUnsupportedPtxVersion-style error otherwise:
// the launchers return cudaErrorInvalidDeviceFunction on older GPUs without launching).
#ifndef TF_FLASHATTN_KERNELS_FLASH_CUDA_H_
#define TF_FLASHATTN_KERNELS_FLASH_CUDA_H_

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "cc/kernels/common/flash_params.h"

namespace flashattn {

// Bytes of device workspace flash_fwd_cuda needs for these params (the decoding path's partial
// results; in builds with the Hopper kernels, the TF32 forward's pre-pass buffers when its opt-in
// variant 3 is selected: sm90/flash_fwd_sm90_tf32.cu; 0 when neither applies). Depends on the shape,
// dtype and the params' fields only, not on the device or the tensors' addresses (the XLA lowering
// computes it at compile time: it may then count calls that will not need it, never fewer). The
// caller allocates at least this many bytes, 256-byte aligned, and sets params.workspace.
size_t flash_fwd_workspace_bytes(const FlashFwdParams& params);

// Forward: writes o [B, Tq, H, Dv] and lse [B, H, Tq] (natural log, -inf for rows with no key).
// No host synchronization: every pointer in params is device memory (the dropout seed and the
// lengths included), and launch settings are cached per device.
cudaError_t flash_fwd_cuda(const FlashFwdParams& params, cudaStream_t stream);

// Bytes of device workspace flash_bwd_cuda needs for these params (shape, dtype and
// deterministic flag are read). The caller allocates at least this many bytes, 256-byte
// aligned, and sets params.workspace to it. Layout (float32):
//   [B, H, Tq] (+pad)   D = rowsum(dO * O) - d_lse
//   [B, H, Tq] (+pad)   log2(e) * lse           (float16 / bfloat16 only)
//   [B, H, Tq128, Dpad] dQ accumulator          (float16 / bfloat16, non-deterministic mode only;
//                                                Tq128: Tq rounded up to 128, each query tile's
//                                                block in the kernel's fragment order)
// float32 with allow_tf32 (TF32 tensor cores), non-deterministic mode: D, then the dQ accumulator
// [B, H, Tq, Dpad] row-major (no lse2 rows); otherwise float32 needs D only. The Hopper
// backward (sm90/flash_bwd_sm90.cu) uses the same parts and size (its own element order within
// each 64-row block of the dQ accumulator), so this size serves both paths.
size_t flash_bwd_workspace_bytes(const FlashBwdParams& params);

// Backward by recomputation: writes dq, dk, dv in full and dbias when non-null.
// params.deterministic: bitwise reproducible (no floating-point atomics).
cudaError_t flash_bwd_cuda(const FlashBwdParams& params, cudaStream_t stream);

// A Keras seed generator's next state (FlashAttn>NextSeed's GPU kernel, tf_flashattn/seeds.py):
// next = state + [0, 1] (int64, wrapping), one thread on `stream`. state, next: device int64 [2].
cudaError_t next_seed_cuda(const int64_t* state, int64_t* next, cudaStream_t stream);

}  // namespace flashattn

// The GPU-time probe (flash_cuda_dispatch.cu; TF_FLASHATTN_GPU_TIMING prints it) for tools, exported with
// C names so that Python reaches them through ctypes on the loaded library (benchmarks/gpu_attention.py).
// collect(1): time every forward / backward call made from now on (CUDA events around the call on its
// stream, read once completed: no wait), forgetting what was collected before (also calls of that earlier
// collection still running); collect(0): stop (calls made before it are kept for take, also those still
// running). Returns 0.
extern "C" int tf_flashattn_gpu_timing_collect(int on);
// The collected calls of direction 0 (forward) or 1 (backward) completed so far, oldest first: the GPU
// time of each call (ms) into ms, and the GPU time from the previous timed call's end to its start on the
// same stream (ms) into gaps, at most cap of each (*n_gaps: how many gaps were written; a call on another
// stream or the first after collect has none). Returns the number of calls collected (also those past
// cap), -1 for another direction; all are then forgotten. Calls still running are left for the next
// take: synchronize first.
extern "C" int tf_flashattn_gpu_timing_take(int direction, float* ms, float* gaps, int cap, int* n_gaps);

// The Hopper kernels' launch counts so far in this process (host-side counters, read without a wait), for tests
// and tools through ctypes (tests/test_gpu.py): counts[0] the float16 / bfloat16 forward, [1] its backward, [2] the
// float32 (TF32) forward, [3] the TF32 backward at head dim 64, [4] at head dim 128 (others padded up to those), [5]
// the head-dim-256 TF32 backward. Writes the first min(cap, n) of them and returns n: 6, or 0 in builds
// without the Hopper kernels.
extern "C" int tf_flashattn_kernel_launches(int64_t* counts, int cap);

#endif  // TF_FLASHATTN_KERNELS_FLASH_CUDA_H_
