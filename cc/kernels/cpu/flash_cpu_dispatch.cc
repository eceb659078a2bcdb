// Picks the CPU kernel build for this processor: AVX-512 where present, else AVX2.
// TF_FLASHATTN_CPU_ISA=avx2 (read at every call) forces the AVX2 build on an AVX-512 processor,
// so its tests can run there too; nothing forces a build the processor lacks.
#include <cstdlib>
#include <cstring>

#include "cc/kernels/cpu/flash_cpu.h"

namespace flashattn {

void flash_fwd_cpu_avx2(const FlashFwdParams& p, const ParallelFor& pf, int threads);
void flash_bwd_cpu_avx2(const FlashBwdParams& p, const ParallelFor& pf, int threads);
void flash_fwd_cpu_avx512(const FlashFwdParams& p, const ParallelFor& pf, int threads);
void flash_bwd_cpu_avx512(const FlashBwdParams& p, const ParallelFor& pf, int threads);

namespace {
bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
  if (!has) return false;
  const char* isa = std::getenv("TF_FLASHATTN_CPU_ISA");
  return isa == nullptr || std::strcmp(isa, "avx2") != 0;
}
}  // namespace

bool flash_cpu_supported() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

void flash_fwd_cpu(const FlashFwdParams& p, const ParallelFor& pf, int threads) {
  HasAvx512() ? flash_fwd_cpu_avx512(p, pf, threads) : flash_fwd_cpu_avx2(p, pf, threads);
}

void flash_bwd_cpu(const FlashBwdParams& p, const ParallelFor& pf, int threads) {
  HasAvx512() ? flash_bwd_cpu_avx512(p, pf, threads) : flash_bwd_cpu_avx2(p, pf, threads);
}

}  // namespace flashattn
