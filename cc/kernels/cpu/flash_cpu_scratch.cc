// The CPU kernels' scratch pool (flash_cpu.h: cpu_scratch_acquire / cpu_scratch_release), compiled
// once and shared by the per-instruction-set builds of flash_cpu.cc. No framework headers.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "cc/kernels/cpu/flash_cpu.h"

namespace flashattn {

// The CPU kernels' O(N) buffers (the packed operands, D, per-shard tiles and accumulators) are
// taken from here rather than allocated afresh at every call: glibc serves blocks of a few MB with
// mmap and hands them back to the system when they are freed (its per-thread arenas trim too), so
// each call page-faulted its buffers in again, the kernel zeroing every page first. Measured on a
// 2-core machine (benchmarks/RESULTS.md, CPU, "Scratch memory"): at B = 8, T = 128, H = 12, D = 64,
// float32, ten backward calls page-faulted 37,385 times before, 97 times with the pool, and forward +
// backward took 21-22 ms a call before, 13.5-15 ms with it. Block sizes are powers of two (at least
// 4 KiB), so a free block of the right class fits any request of it.
namespace {
class ScratchPool {
 public:
  static ScratchPool& get() {
    static ScratchPool* pool = new ScratchPool();  // never destroyed: kernels may run at exit
    return *pool;
  }
  void* acquire(size_t bytes, size_t* block_bytes) {
    size_t cls = 4096;
    while (cls < bytes) cls <<= 1;
    *block_bytes = cls;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = free_.rbegin(); it != free_.rend(); ++it) {  // the latest released first
        if (it->first != cls) continue;
        void* block = it->second;
        free_.erase(std::next(it).base());
        cached_ -= cls;
        return block;
      }
    }
    void* block = std::aligned_alloc(64, cls);
    if (block == nullptr) throw std::bad_alloc();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++fresh_blocks_;
      fresh_bytes_ += static_cast<int64_t>(cls);
    }
    return block;
  }
  void fresh(int64_t* out) {
    std::lock_guard<std::mutex> lock(mu_);
    out[0] = fresh_blocks_;
    out[1] = fresh_bytes_;
  }
  void* acquire_checked(size_t bytes, size_t* block_bytes) {
    void* block = acquire(bytes, block_bytes);
    if (poison_) std::memset(block, 0xFF, *block_bytes);  // NaN in every float / double
    return block;
  }
  // Keeps the block for reuse, freeing the blocks released longest ago when the pool would
  // otherwise pass its limit (so a changed shape's blocks displace the old shape's).
  void release(void* block, size_t cls) {
    std::vector<void*> drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cls > limit_) {
        drop.push_back(block);
      } else {
        while (cached_ + cls > limit_) {
          drop.push_back(free_.front().second);
          cached_ -= free_.front().first;
          free_.pop_front();
        }
        free_.emplace_back(cls, block);
        cached_ += cls;
      }
    }
    for (void* b : drop) std::free(b);
  }

 private:
  ScratchPool() {
    const char* poison = std::getenv("TF_FLASHATTN_CPU_SCRATCH_POISON");
    poison_ = poison != nullptr && std::strcmp(poison, "1") == 0;
    const char* mb = std::getenv("TF_FLASHATTN_CPU_SCRATCH_MB");
    char* end = nullptr;
    const long long v = mb && *mb ? std::strtoll(mb, &end, 10) : -1;
    limit_ = (v >= 0 && end && *end == '\0') ? static_cast<size_t>(v) << 20 : size_t{256} << 20;
  }
  std::mutex mu_;
  std::deque<std::pair<size_t, void*>> free_;  // released blocks (size, address), oldest first
  size_t cached_ = 0, limit_ = 0;
  int64_t fresh_blocks_ = 0, fresh_bytes_ = 0;  // blocks allocated afresh (tf_flashattn_cpu_scratch_fresh)
  bool poison_ = false;
};
}  // namespace

void* cpu_scratch_acquire(size_t bytes, size_t* block_bytes) {
  return ScratchPool::get().acquire_checked(bytes, block_bytes);
}
void cpu_scratch_release(void* block, size_t block_bytes) { ScratchPool::get().release(block, block_bytes); }

extern "C" int tf_flashattn_cpu_scratch_fresh(int64_t* out) {
  ScratchPool::get().fresh(out);
  return 2;
}

}  // namespace flashattn
