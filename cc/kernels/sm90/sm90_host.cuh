// Host-side helpers of the Hopper kernels: tensor maps for the copy engine (cuTensorMapEncodeTiled,
// reached through cudaGetDriverEntryPointByVersion: no link against libcuda, cudart stays static)
// the compute-capability-9.0 check (sm_90a machine code runs on 9.0 only), and the self-tests' device
// check and buffers. Used by
// sm90/flash_fwd_sm90.cu, sm90/flash_fwd_sm90_tf32.cu and sm90/flash_bwd_sm90.cu.
#ifndef TF_FLASHATTN_KERNELS_SM90_SM90_HOST_CUH_
#define TF_FLASHATTN_KERNELS_SM90_SM90_HOST_CUH_

#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cc/kernels/common/flash_params.h"

namespace flashattn {
namespace cuda {
namespace sm90 {

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// Rank-4 map over a [B, T, Hx, Dx] tensor of elem_bytes-byte elements with element strides st =
// {batch, time, head} (the last dim contiguous): dims (d, head, time, batch), box {box_d, 1, rows, 1}
// (box_d elements = 128 bytes, the widest inner box the 128-byte swizzle takes), 128-byte swizzle
// (sm90_ptx.cuh's tile layout), out-of-bounds elements read as zero. False when the driver has no
// encoder or refuses the map (alignment: base and byte strides must be multiples of 16 bytes).
inline bool tma_map_rows_of(CUtensorMap* map, CUtensorMapDataType type, int64_t elem_bytes, cuuint32_t box_d,
                            const void* ptr, int64_t B, int64_t T, int64_t Hx, int64_t Dx, const int64_t st[3],
                            int rows) {
  auto fn = tensor_map_encoder();
  if (!fn) return false;
  cuuint64_t dims[4] = {static_cast<cuuint64_t>(Dx), static_cast<cuuint64_t>(Hx), static_cast<cuuint64_t>(T),
                        static_cast<cuuint64_t>(B)};
  // Byte strides of dims 1..3; a size-1 dim gets the compact stride (never used, but it must be a
  // valid multiple of 16).
  const int64_t want[3] = {st[2], st[1], st[0]};
  cuuint64_t strides[3];
  int64_t compact = Dx * elem_bytes;
  for (int i = 0; i < 3; ++i) {
    const int64_t s = dims[i + 1] == 1 ? compact : want[i] * elem_bytes;
    strides[i] = static_cast<cuuint64_t>(s);
    compact = s * static_cast<int64_t>(dims[i + 1]);
  }
  cuuint32_t box[4] = {box_d, 1, static_cast<cuuint32_t>(rows), 1};
  cuuint32_t estr[4] = {1, 1, 1, 1};
  const CUresult r = fn(map, type, 4, const_cast<void*>(ptr), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

// A 16-bit tensor (float16 / bfloat16): box {64, 1, rows, 1}.
inline bool tma_map_rows(CUtensorMap* map, DType dt, const void* ptr, int64_t B, int64_t T, int64_t Hx, int64_t Dx,
                         const int64_t st[3], int rows) {
  const CUtensorMapDataType type =
      dt == DType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return tma_map_rows_of(map, type, 2, 64, ptr, B, T, Hx, Dx, st, rows);
}

// A float32 tensor (sm90/flash_fwd_sm90_tf32.cu): box {32, 1, rows, 1}, CU_TENSOR_MAP_DATA_TYPE_FLOAT32
// (the bits as stored; the kernel rounds to tf32 itself); element strides multiples of 4.
inline bool tma_map_rows_f32(CUtensorMap* map, const void* ptr, int64_t B, int64_t T, int64_t Hx, int64_t Dx,
                             const int64_t st[3], int rows) {
  return tma_map_rows_of(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, 32, ptr, B, T, Hx, Dx, st, rows);
}

// A rank-4 map over a [B, Hx, R, C] float32 workspace array (C contiguous), box {32, 1, rows, 1} at
// coordinates (c, hx, r, b): tma_map_rows_f32 with T = R, Dx = C (the Hopper TF32 backwards' pre-pass copies).
inline bool tma_map_ws_f32(CUtensorMap* m, const float* ptr, int64_t B, int64_t Hx, int64_t R, int64_t C, int rows) {
  const int64_t st[3] = {Hx * R * C, C, R * C};
  return tma_map_rows_f32(m, ptr, B, R, Hx, C, st, rows);
}

// Whether the current device is compute capability 9.0 (cached per device).
inline bool current_device_is_sm90() {
  static int cached[64] = {0};  // 0 unknown, 1 yes, 2 no
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  int c = dev >= 0 && dev < 64 ? cached[dev] : 0;
  if (c == 0) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
      return false;
    c = (major == 9 && minor == 0) ? 1 : 2;
    if (dev >= 0 && dev < 64) cached[dev] = c;
  }
  return c == 1;
}

// The self-tests' device check: true on compute capability 9.0; otherwise false, and msg (msg_len
// bytes, may be null) says which capability the current device has.
inline bool selftest_device_is_sm90(char* msg, int msg_len) {
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (major == 9 && minor == 0) return true;
  if (msg && msg_len > 0)
    std::snprintf(msg, msg_len, "needs compute capability 9.0, this device is %d.%d", major, minor);
  return false;
}

// The self-tests' device memory: alloc is cudaMalloc (nullptr on failure), everything freed at scope exit.
struct DeviceBuffers {
  std::vector<void*> ptrs;
  void* alloc(size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;
    ptrs.push_back(p);
    return p;
  }
  ~DeviceBuffers() {
    for (void* p : ptrs) cudaFree(p);
  }
};

// The current device's SM count (cached per device; the persistent forward's grid), 0 on error.
inline int current_device_sm_count() {
  static std::atomic<int> cached[64] = {};  // 0 unknown; atomic: launches come from many host threads
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  int n = dev >= 0 && dev < 64 ? cached[dev].load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
    if (dev >= 0 && dev < 64) cached[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace sm90
}  // namespace cuda
}  // namespace flashattn

#endif  // TF_FLASHATTN_KERNELS_SM90_SM90_HOST_CUH_
