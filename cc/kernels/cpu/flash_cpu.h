// CPU FlashAttention: the tiled algorithm of the seed documents, run on host threads.
// No framework headers: the caller provides a parallel-for over independent work units.
#ifndef TF_FLASHATTN_KERNELS_FLASH_CPU_H_
#define TF_FLASHATTN_KERNELS_FLASH_CPU_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "cc/kernels/common/flash_params.h"

namespace flashattn {

// Runs fn(begin, end) over [0, n) in shards; cost_per_unit is a rough cycle count per unit.
using ParallelFor =
    std::function<void(int64_t n, int64_t cost_per_unit, const std::function<void(int64_t, int64_t)>& fn)>;

// Whether this processor runs the CPU kernels (they need AVX2, FMA and F16C).
bool flash_cpu_supported();

// Scratch memory of the CPU kernels (flash_cpu_scratch.cc): a block of at least `bytes` bytes,
// 64-byte aligned, contents undefined; *block_bytes receives its size, to be passed back to
// cpu_scratch_release. Released blocks stay in a process-wide pool for later calls, up to
// TF_FLASHATTN_CPU_SCRATCH_MB (read once; default 256, 0 keeps none); past that the blocks
// released longest ago are freed.
// TF_FLASHATTN_CPU_SCRATCH_POISON=1 (read once; tests) fills every block handed out with 0xFF
// bytes, NaN as float or double, so that a kernel reading scratch it did not write shows it.
// Thread-safe. Throws std::bad_alloc when memory runs out.
void* cpu_scratch_acquire(size_t bytes, size_t* block_bytes);
void cpu_scratch_release(void* block, size_t block_bytes);
// The blocks the pool has allocated afresh in this process (not taken from released ones), and their bytes:
// tests read them through ctypes (tests/test_cpu_scratch.py) to see that calls after the first reuse blocks.
// Writes {blocks, bytes} to out[0], out[1] and returns 2.
extern "C" int tf_flashattn_cpu_scratch_fresh(int64_t* out);

// Forward: writes o [B, Tq, H, Dv] and lse [B, H, Tq] for every row (0 / -inf where masked).
// Few query rows (params.decode, flash_cpu.cc: decode path) take the decoding path: the query
// heads of a GQA group together, K and V read once per kv head, and the keys split across
// threads when B x Hkv is too small for num_threads (0: std::thread::hardware_concurrency()).
// The split count depends on the shape and num_threads only: results are deterministic.
void flash_fwd_cpu(const FlashFwdParams& params, const ParallelFor& parallel_for,
                   int num_threads = 0);

// Backward by recomputation: writes dq, dk, dv (and dbias when non-null) in full.
// num_threads (of parallel_for) picks the schedule: one pass per (batch, kv head) when there are
// enough of those for every thread, else two passes that also split the sequence.
void flash_bwd_cpu(const FlashBwdParams& params, const ParallelFor& parallel_for, int num_threads);

}  // namespace flashattn

#endif  // TF_FLASHATTN_KERNELS_FLASH_CPU_H_
