// Hopper-native FlashAttention backward for FLOAT32 inputs on TF32 tensor cores (sm_90a only; wgmma
// .tf32, TMA, warp specialization), for calls that allow TF32 (FlashBwdParams::allow_tf32).
// UNTESTED ON A GPU (written 2026-12-01 on a machine without one): opt-in with the forward's switch,
// TF_FLASHATTN_SM90_TF32=1 (read once; the harness's set_sm90_tf32 overrides it; tf32_enabled() of
// flash_fwd_sm90_tf32.cu), and otherwise sm80/flash_bwd_tf32.cu (mma.sync m16n8k8 .tf32) runs, as it
// does for everything this kernel does not take, and when this launcher answers cudaErrorNotSupported
// (tensor maps refused; nothing queued then). benchmarks/sm90_bwd_check.py --phase tf32selftest /
// tf32 / tf32sanitize check it (gpu_run.sh sm90bwd, SM90BWD_PHASES=tf32selftest,tf32,tf32sanitize).
//
// Scope (bwd_tf32_applies): float32 with allow_tf32, D == Dv in {64, 128}, GQA (H % Hkv == 0), the
// softmax scale, causal (any causal_offset) or no mask, d_lse (through the pre-pass's Dsum, as sm80);
// no window, lengths, validity masks, dense mask, bias / dbias, soft-cap, dropout or deterministic
// mode (those calls keep sm80's TF32 backward). Strides multiples of 4 elements and 16-byte aligned
// bases (TMA; the float2 stores of dK / dV), a workspace (flash_bwd_workspace_bytes: the same one as
// sm80's TF32 backward: Dsum [B, H, Tq], then the dQ accumulator, used here as [B, H, tq_pad, D]).
//
// Inputs / outputs exactly as sm80's TF32 backward: the pre-pass bwd_dsum_tf32 (sm80/flash_bwd.cu's
// bwd_dsum_kernel<float, true>: Dsum = rowsum(tf32(dO) o O) - d_lse) fills Dsum; this kernel adds
// dS K into the zeroed dQ accumulator and writes dK = scale dS^T Q and dV = P^T dO (every key row <
// Tk, zeros where no row sees the key); bwd_dq_tf32_sm90_convert_kernel writes dQ = scale dQacc.
// Rounding as sm80's: every MMA operand is rounded to tf32 with cvt.rna (Q, dO, K, V in shared
// memory by the transposers, P and dS in registers when packed).
//
// The five products per (key tile, query unit), wgmma .tf32 (k8 per instruction, no transpose: both
// shared-memory operands K-major, PTX ISA; see flash_fwd_sm90_tf32.cu's header):
//   S^T  = K Q^T        M = 64 keys, N = 32 queries, K = D:      D/8 wgmma m64n32k8 SS, A = K [keys x D],
//                       B = Q [queries x D], both K-major as TMA writes them (panel k/4, byte (k%4)*32)
//   dP^T = V dO^T       the same form, A = V, B = dO
//   dV  += P^T dO       M = 64 keys, N = D, K = 32 queries:      4 wgmma m64nDk8 RS, A = P^T from the S^T
//                       accumulators (the forward's k8 permutation: a = {c0, c2, c1, c3}), B = dO^T
//                       [D x 32 queries] K-major, queries of each k8 step permuted (tf32_kperm)
//   dK  += dS^T Q       the same form, A = dS^T from the dP^T accumulators, B = Q^T (permuted)
//   dQ^T = K^T dS^T     M = D (D/64 blocks), N = 32 queries, K = 64 keys: D/64 x 8 wgmma m64n32k8 SS,
//                       A = K^T [D x 64 keys] K-major (keys natural order), B = dS [32 queries x 64
//                       keys] K-major, stored by the consumer from its dS^T registers (natural order)
//   dQacc += dQ         staged [32 queries][D] in shared memory, one bulk reduce-add (cp.reduce.async
//                       .bulk .add.f32) into the accumulator's 32 x D block (rows contiguous)
// dQ is computed transposed (M = D) because the query unit has 32 rows (wgmma's M is 64).
//
// Tiles: one CTA per key tile of kBk = 64 keys of one kv head (grid (ceil(Tk / 64), Hkv, B)); the
// CTA walks the units (query head hl of the group, query tile of kBq = 32 rows) that see the tile
// (causal: from the tile of the first row whose causal range reaches key j0). 256 threads: warpgroup
// 0 = producer warp (thread 0: every TMA load) + 3 transposer warps; warpgroup 1 = the consumer
// (all five products, the element-wise pass, dK / dV in registers). No setmaxnreg: 256 threads x 255
// registers fit the register file (__launch_bounds__(256, 1)).
// Shared memory, float32, 128-byte swizzle in panels of 32 floats (sm90_ptx.cuh, swz128_offset_f32):
//                          D = 128     D = 64
//   K  [64 x D]            32 KiB      16 KiB   (TMA; rounded in place by the transposers)
//   V  [64 x D]            32          16       (the same)
//   K^T [D x 64]           32          16       (transposers, once per CTA)
//   Q  [32 x D] x 2 stages 2 x 16      2 x 8    (TMA; rounded in place)
//   dO [32 x D] x 2 stages 2 x 16      2 x 8
//   Q^T [D x 32]           1 x 16      2 x 8    (transposers, per unit; queries permuted; stages:
//   dO^T [D x 32]          1 x 16      2 x 8     bwd_tf32_tstages, 2 at D = 64 only)
//   dS [32 x 64]           8           8        (consumer)
//   dQ staging [32 x D]    16          8        (consumer, linear: the accumulator block's layout)
//   rows 2 x (lse2, Dsum) x 32 floats, barriers
//   = 216 KiB + 512 + 80 B (+ 1 KiB alignment slack) at D = 128: 222,800 B of the 232,448 B opt-in;
//   D = 64: 128 KiB (132,688 B; one CTA per SM either way). A second Q^T / dO^T stage at D = 128 would
//   need 32 KiB more (248 KiB). A 64-row query unit at D = 128 would need 4 x 32 KiB for Q, dO, Q^T, dO^T of one
//   stage next to 96 KiB of K, V, K^T: no room; hence 32-row units and the transposed dQ.
// Registers (consumer, D = 128): dK, dV 64 + 64, S^T, dP^T 16 + 16, P, dS packed 16 + 16, dQ^T 32.
// ptxas 13.0 (sm_90a): 220 registers at D = 128, 144 at D = 64, 0 spills.
// Expected bottlenecks (estimates, not measured): (1) shared-memory bandwidth: an m64n32k8 .tf32 SS
// instruction (S^T, dP^T, dQ^T) reads 2 KiB of A and 1 KiB of B for 16 tensor-core clocks at the TF32
// rate (2,048 FLOP / clock / SM), 192 B / clock against the SM's 128: these 48 instructions per unit
// (D = 128) take ~24 clocks each instead of 16, ~1,150 clocks, plus ~510 for the 8 m64n128k8 RS, while
// the transposers move ~96 KiB per unit (read, in-place rounding, transposed write: ~770 clocks of
// the same bandwidth); (2) one consumer warpgroup per SM issues every product with its element-wise
// work in between; (3) at D = 128 the transposers' Q^T / dO^T of unit n + 1 wait for the dV / dK
// products of unit n (one stage), overlapping only the dQ^T product and the staging. Per unit 2.6
// MFLOP (FlashAttention's count) in ~2,000-3,000 clocks would be 210-320 TFLOP/s on 132 SMs at 1.83
// GHz; with the serialization above a guess of 150-250 (XLA's TF32 backward: 124 at D = 128). Next
// steps if measured so: K and V as register A fragments at D = 64 (64 registers: halves the S^T /
// dP^T reads), 64-query units where shared memory allows (m64n64k8: 128 B / clock).
// Barriers (mbarriers; counts in parentheses), unit n, stage s = n % 2:
//   kv_full (1 + tx)   producer: K and V bytes
//   kv_ready (96)      transposers: K, V rounded, K^T written, fenced
//   full[s] (1 + tx)   producer: Q_n, dO_n bytes into stage s (phase n / 2)
//   ready[ts] (96)     transposers: Q_n, dO_n rounded in place, Q^T[ts], dO^T[ts] written, rows[s] (lse2,
//                      Dsum) written, fenced (ts = n % T, T = bwd_tf32_tstages; phase n / T)
//   t_empty[ts] (128)  consumer: done with Q^T[ts], dO^T[ts] of unit n (its dV / dK products waited for);
//                      the transposers wait for unit n - T's phase before writing unit n's
//   empty[s] (128)     consumer: done with Q_n, dO_n (S^T, dP^T waited for) and rows[s]; the producer
//                      waits for unit n - 2's phase before loading unit n into stage s
// Producer per unit: empty[s] (n - 2), load. Transposers: full[s] (n); t_empty[ts] (n - T); transpose
// and round; rows; fence; arrive ready[ts]. Consumer: ready[ts] (n); S^T, dP^T; P, dS; arrive empty[s];
// dV, dK issued; dS stored (named barrier 1, after thread 0 saw the previous bulk reduce-add's read
// done); dQ^T issued; wait for dV / dK, arrive t_empty[ts]; wait dQ^T; staging; named barrier 2; thread
// 0 reduce-add. (rows[s] of unit n is written after full[s] of unit n, i.e. after the consumer released
// stage s of unit n - 2.)
// Every wait is on an earlier unit's step or an earlier step of the same unit; no buffer is written
// before its readers released it: benchmarks/sm90_tf32_bwd_model.py runs this protocol under random
// interleavings and checks the descriptor addresses against the layouts written here.
#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cc/kernels/common/flash_cuda_common.cuh"  // fast_exp2, to_tf32
#include "cc/kernels/common/flash_cuda_internal.h"
#include "cc/kernels/common/flash_params.h"
#include "cc/kernels/sm90/sm90_host.cuh"
#include "cc/kernels/sm90/sm90_ptx.cuh"

namespace flashattn {
namespace cuda {
namespace sm90 {
namespace {

constexpr int kBk = 64;            // keys per CTA
constexpr int kBq = 32;            // query rows per unit
constexpr int kThreads = 256;      // producer warpgroup + 1 consumer warpgroup
constexpr int kTransposers = 96;   // warps 1..3
constexpr int kConsumerThreads = 128;
constexpr float kLog2eF = 1.4426950408889634f;

// Stages of the transposed Q^T / dO^T buffers: 2 at D = 64 (the transposers write unit n + 1's while the
// consumer's dV / dK products of unit n read unit n's), 1 at D = 128 (no room: header).
template <int D>
constexpr int bwd_tf32_tstages() { return D == 64 ? 2 : 1; }

template <int D>
struct BwdTf32Smem {
  static constexpr int kTSt = bwd_tf32_tstages<D>();
  static constexpr int kKVBytes = kBk * D * 4;  // K, V, K^T
  static constexpr int kQBytes = kBq * D * 4;   // Q, dO, Q^T, dO^T, dQ staging
  static constexpr int kK = 0;
  static constexpr int kV = kK + kKVBytes;
  static constexpr int kKT = kV + kKVBytes;
  static constexpr int kQ = kKT + kKVBytes;         // + stage * kQBytes
  static constexpr int kDO = kQ + 2 * kQBytes;      // + stage * kQBytes
  static constexpr int kQT = kDO + 2 * kQBytes;    // + tstage * kQBytes
  static constexpr int kDOT = kQT + kTSt * kQBytes; // + tstage * kQBytes
  static constexpr int kDS = kDOT + kTSt * kQBytes; // [32 x 64] float
  static constexpr int kStage = kDS + kBq * kBk * 4;
  static constexpr int kRows = kStage + kQBytes;    // stage s: lse2 [32] at + 256 s, Dsum at + 256 s + 128
  static constexpr int kBars = kRows + 2 * 256;
  static constexpr int kKVFull = kBars, kKVReady = kBars + 8;
  static constexpr int kReady = kBars + 16;         // + 8 * tstage
  static constexpr int kTEmpty = kBars + 32;        // + 8 * tstage
  static constexpr int kFull = kBars + 48;          // + 8 * stage
  static constexpr int kEmpty = kFull + 16;         // + 8 * stage
  static constexpr int kBytes = kEmpty + 16;
  static constexpr int kAlloc = kBytes + 1024;      // slack to align the base to 1024
};
static_assert(BwdTf32Smem<128>::kAlloc <= 227 * 1024, "D = 128 exceeds the opt-in shared memory");
static_assert(BwdTf32Smem<128>::kAlloc == 222800 && BwdTf32Smem<64>::kAlloc == 132688, "the header's figures");
static_assert(BwdTf32Smem<128>::kDS % 1024 == 0 && BwdTf32Smem<64>::kDS % 1024 == 0 &&
                  BwdTf32Smem<64>::kQT % 1024 == 0 && BwdTf32Smem<64>::kDOT % 1024 == 0,
              "tiles 1024-byte aligned (the swizzle is computed from the address)");

// Position of row j of a k8 step in a transposed K-major buffer: 2u at u, 2u + 1 at u + 4 (as the
// forward's tf32_kperm), so that the S^T / dP^T accumulators are the A fragments of dV / dK as they are.
__host__ __device__ constexpr int bwd_kperm(int j) { return (j & ~7) | ((j & 1) << 2) | ((j & 7) >> 1); }

// dst = src^T: src [ROWS x COLS] (TMA's layout, panels of 32 columns, R = ROWS), dst [COLS x ROWS]
// (panels of 32 rows of src, R = COLS), rows of src permuted within each k8 step when PERM; every
// element rounded to tf32 (cvt.rna) on the way, and written back rounded into src in place. n threads
// numbered tid (whole warps). Work item (rg, cb): src rows 8rg .. 8rg+7 x columns 32cb .. 32cb+31,
// lane = column: 8 loads of one 128-byte row each per warp (no bank conflict), the same 8 stores back,
// two 16-byte stores into dst row c (the 8 lanes of a quarter warp on 8 distinct rows c % 8: distinct
// chunks, no bank conflict).
template <int ROWS, int COLS, bool PERM>
__device__ __forceinline__ void transpose_round_tile(uint32_t dst, uint32_t src, int tid, int n) {
  constexpr int kGroups = ROWS / 8;
  constexpr int kItems = kGroups * (COLS / 32);
  const int lane = tid & 31;
  for (int it = tid >> 5; it < kItems; it += n >> 5) {
    const int rg = it % kGroups, c = 32 * (it / kGroups) + lane;
    uint32_t x[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const uint32_t a = src + swz128_offset_f32(ROWS, 8 * rg + e, c);
      x[e] = to_tf32(ld_shared_f32(a));
      st_shared_u32(a, x[e]);
    }
    if constexpr (PERM) {  // positions 0..3: rows 0, 2, 4, 6 of the step; 4..7: rows 1, 3, 5, 7
      st_shared_v4_u32(dst + swz128_offset_f32(COLS, c, 8 * rg), x[0], x[2], x[4], x[6]);
      st_shared_v4_u32(dst + swz128_offset_f32(COLS, c, 8 * rg + 4), x[1], x[3], x[5], x[7]);
    } else {
      st_shared_v4_u32(dst + swz128_offset_f32(COLS, c, 8 * rg), x[0], x[1], x[2], x[3]);
      st_shared_v4_u32(dst + swz128_offset_f32(COLS, c, 8 * rg + 4), x[4], x[5], x[6], x[7]);
    }
  }
}

// Rounds `bytes` (a multiple of 16) of float32 at addr to tf32 in place (16 bytes per thread and step).
__device__ __forceinline__ void round_tf32_inplace(uint32_t addr, int bytes, int tid, int n) {
  for (int off = tid * 16; off < bytes; off += n * 16) {
    uint32_t x, y, z, w;
    ld_shared_v4_u32(addr + off, x, y, z, w);
    st_shared_v4_u32(addr + off, to_tf32(__uint_as_float(x)), to_tf32(__uint_as_float(y)),
                     to_tf32(__uint_as_float(z)), to_tf32(__uint_as_float(w)));
  }
}

// wgmma m64n32k8 .tf32, both operands K-major in shared memory (S^T, dP^T, dQ^T). Operand list
// written out as the forward's forms.
__device__ __forceinline__ void wgmma_tf32_ss_m64n32k8(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "%16, %17, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

template <int D>
__device__ __forceinline__ void wgmma_tf32_rs_nd(float (&acc)[D / 2], const uint32_t (&a)[4], uint64_t desc) {
  static_assert(D == 64 || D == 128, "wgmma N");
  if constexpr (D == 128) wgmma_tf32_rs_m64n128k8(acc, a, desc, 1);
  else wgmma_tf32_rs_m64n64k8(acc, a, desc, 1);
}

// X^T = A B^T over K = D in k8 steps: A [64 x D] (R = 64) and B [32 x D] (R = 32), both as TMA writes
// them (S^T = K Q^T, dP^T = V dO^T).
template <int D>
__device__ __forceinline__ void mma_rows_x_queries(float (&acc)[16], uint32_t a_tile, uint32_t b_tile) {
#pragma unroll
  for (int k = 0; k < D / 8; ++k) {
    const uint32_t koff = (k % 4) * 32;
    wgmma_tf32_ss_m64n32k8(acc, wgmma_desc(a_tile + (k / 4) * kBk * 128 + koff, 16, 1024),
                           wgmma_desc(b_tile + (k / 4) * kBq * 128 + koff, 16, 1024), k > 0);
  }
}

// acc [64 x D] += A [64 x 32] (registers, 4 k8 steps) B: B^T [D x 32] K-major at bt (one panel, R = D,
// rows of each step permuted): dV += P^T dO (bt = dO^T), dK += dS^T Q (bt = Q^T).
template <int D>
__device__ __forceinline__ void mma_acc_update(float (&acc)[D / 2], const uint32_t (&a)[4][4], uint32_t bt) {
#pragma unroll
  for (int kk = 0; kk < kBq / 8; ++kk) wgmma_tf32_rs_nd<D>(acc, a[kk], wgmma_desc(bt + kk * 32, 16, 1024));
}

// dQ^T [D x 32] = K^T dS^T: A = K^T [D x 64] (two panels of 32 keys, R = D; M block m at row 64 m),
// B = dS [32 x 64] (two panels, R = 32). dq[m] is M block m.
template <int D>
__device__ __forceinline__ void mma_dq(float (&dq)[D / 64][16], uint32_t kt, uint32_t ds) {
#pragma unroll
  for (int m = 0; m < D / 64; ++m)
#pragma unroll
    for (int kk = 0; kk < kBk / 8; ++kk)
      wgmma_tf32_ss_m64n32k8(dq[m], wgmma_desc(kt + (kk / 4) * D * 128 + m * 64 * 128 + (kk % 4) * 32, 16, 1024),
                             wgmma_desc(ds + (kk / 4) * kBq * 128 + (kk % 4) * 32, 16, 1024), kk > 0);
}

// Accumulators (m64n32) of one k8 step kk as the A fragment of the next product (tf32, cvt.rna): A
// [keys x queries] with query 2u at column u and 2u + 1 at column u + 4 (bwd_kperm).
__device__ __forceinline__ void pack_step(uint32_t (&a)[4], const float* c4) {
  a[0] = to_tf32(c4[0]);
  a[1] = to_tf32(c4[2]);
  a[2] = to_tf32(c4[1]);
  a[3] = to_tf32(c4[3]);
}

// dS^T accumulators (keys 16w + g + 8h, queries 8j + 2t + e) into dS [32 queries x 64 keys]
// (K-major for dQ^T, natural key order), as tf32 bits: 4-byte stores, no bank conflict (chunk
// (key / 4) ^ (query % 8) takes 8 values over g / 4 and t; word key % 4 over g % 4).
__device__ __forceinline__ void store_ds(uint32_t ds, const uint32_t (&pd)[4][4], int warp, int g, int t) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      // pd[kk] = {c0, c2, c1, c3}: x = 0 (key g, q 2t), 1 (g + 8, 2t), 2 (g, 2t + 1), 3 (g + 8, 2t + 1)
      const int key = 16 * warp + g + 8 * (x & 1), q = 8 * kk + 2 * t + (x >> 1);
      st_shared_u32(ds + swz128_offset_f32(kBq, q, key), pd[kk][x]);
    }
}

// dQ^T accumulators (d = 64 m + 16 w + g + 8 h, q = 8 j + 2 t + e) into the staging block [32 x D]
// (row-major, the accumulator's layout).
template <int D>
__device__ __forceinline__ void store_dq_staging(uint32_t st, const float (&dq)[D / 64][16], int warp, int g, int t) {
#pragma unroll
  for (int m = 0; m < D / 64; ++m)
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int d = 64 * m + 16 * warp + g + 8 * ((i / 2) & 1), q = 8 * (i / 4) + 2 * t + (i & 1);
      st_shared_u32(st + (q * D + d) * 4, __float_as_uint(dq[m][i]));
    }
}

// q [B, Tq, H, D], k / v [B, Tk, Hkv, D], d_o [B, Tq, H, D] float32 through tm_q / tm_k / tm_v / tm_do
// (boxes {32, 1, 32 or 64, 1}); dsum [B, H, Tq]; dq_acc [B, H, tq_pad, D] (+=); dk, dv from p.
template <int D>
__global__ void __launch_bounds__(kThreads, 1)
    flash_bwd_sm90_tf32_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                               const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                               const __grid_constant__ FlashBwdParams p, const float* __restrict__ dsum,
                               float* __restrict__ dq_acc, int64_t tq_pad) {
  using L = BwdTf32Smem<D>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  constexpr int kTSt = L::kTSt;
  const uint32_t kv_full = base + L::kKVFull, kv_ready = base + L::kKVReady, ready0 = base + L::kReady;
  const uint32_t t_empty0 = base + L::kTEmpty, full0 = base + L::kFull, empty0 = base + L::kEmpty;
  const float* rows_f = reinterpret_cast<const float*>(smem_raw + (base - smem_u32(smem_raw)) + L::kRows);
  const AttnShape& sh = p.shape;
  const int kt_idx = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const int64_t j0 = static_cast<int64_t>(kt_idx) * kBk;
  const int G = static_cast<int>(sh.H / sh.Hkv);
  const int nqb = static_cast<int>((sh.Tq + kBq - 1) / kBq);
  // Units: (hl, qb) for hl < G, qb in [qb_lo, nqb): causal, the tile of the first row whose causal range
  // reaches key j0 (key_end(i) > j0 <=> i >= j0 - causal_offset); rows before it see none of the tile.
  int qb_lo = 0;
  if (p.mask.causal) {
    const int64_t i_min = j0 - p.mask.causal_offset > 0 ? j0 - p.mask.causal_offset : 0;
    qb_lo = i_min >= sh.Tq ? nqb : static_cast<int>(i_min / kBq);
  }
  const int per_head = nqb - qb_lo;
  const int n_units = G * per_head;
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    mbar_init(kv_full, 1);
    mbar_init(kv_ready, kTransposers);
    for (int ts = 0; ts < kTSt; ++ts) {
      mbar_init(ready0 + 8 * ts, kTransposers);
      mbar_init(t_empty0 + 8 * ts, kConsumerThreads);
    }
    for (int s = 0; s < 2; ++s) {
      mbar_init(full0 + 8 * s, 1);
      mbar_init(empty0 + 8 * s, kConsumerThreads);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    const int tid = threadIdx.x;
    if (tid == 0 && n_units > 0) {
      // ---- Producer thread: every TMA load. ----
      tma_prefetch_map(&tm_q);
      tma_prefetch_map(&tm_do);
      mbar_arrive_expect_tx(kv_full, 2 * L::kKVBytes);
#pragma unroll
      for (int j = 0; j < D / 32; ++j) {
        tma_load_4d(base + L::kK + j * kBk * 128, &tm_k, kv_full, 32 * j, hk, static_cast<int>(j0), b);
        tma_load_4d(base + L::kV + j * kBk * 128, &tm_v, kv_full, 32 * j, hk, static_cast<int>(j0), b);
      }
      for (int n = 0; n < n_units; ++n) {
        const int s = n & 1;
        const int h = hk * G + n / per_head, i0 = (qb_lo + n % per_head) * kBq;
        if (n >= 2) mbar_wait(empty0 + 8 * s, ((n >> 1) - 1) & 1);  // unit n - 2 released stage s
        mbar_arrive_expect_tx(full0 + 8 * s, 2 * L::kQBytes);
#pragma unroll
        for (int j = 0; j < D / 32; ++j) {
          tma_load_4d(base + L::kQ + s * L::kQBytes + j * kBq * 128, &tm_q, full0 + 8 * s, 32 * j, h, i0, b);
          tma_load_4d(base + L::kDO + s * L::kQBytes + j * kBq * 128, &tm_do, full0 + 8 * s, 32 * j, h, i0, b);
        }
      }
    } else if (tid >= 32 && n_units > 0) {
      // ---- Transposers (warps 1..3): roundings, K^T, Q^T, dO^T, the unit's rows. ----
      const int ttid = tid - 32;
      mbar_wait(kv_full, 0);
      transpose_round_tile<kBk, D, false>(base + L::kKT, base + L::kK, ttid, kTransposers);
      round_tf32_inplace(base + L::kV, L::kKVBytes, ttid, kTransposers);
      fence_proxy_async();
      mbar_arrive(kv_ready);
      float* rows = const_cast<float*>(rows_f);
      for (int n = 0; n < n_units; ++n) {
        const int s = n & 1, ts = n % kTSt;
        const int h = hk * G + n / per_head;
        const int64_t i0 = static_cast<int64_t>(qb_lo + n % per_head) * kBq;
        mbar_wait(full0 + 8 * s, (n >> 1) & 1);
        // The consumer is done with Q^T[ts], dO^T[ts] of unit n - kTSt.
        if (n >= kTSt) mbar_wait(t_empty0 + 8 * ts, ((n / kTSt) - 1) & 1);
        transpose_round_tile<kBq, D, true>(base + L::kQT + ts * L::kQBytes, base + L::kQ + s * L::kQBytes, ttid,
                                           kTransposers);
        transpose_round_tile<kBq, D, true>(base + L::kDOT + ts * L::kQBytes, base + L::kDO + s * L::kQBytes, ttid,
                                           kTransposers);
        if (ttid < kBq) {  // rows past Tq: lse2 = +inf (P = 0), Dsum = 0
          const int64_t i = i0 + ttid;
          const int64_t row = (static_cast<int64_t>(b) * sh.H + h) * sh.Tq + i;
          rows[64 * s + ttid] = i < sh.Tq ? p.lse[row] * kLog2eF : INFINITY;
          rows[64 * s + 32 + ttid] = i < sh.Tq ? dsum[row] : 0.f;
        }
        fence_proxy_async();  // generic-proxy writes before the consumer's wgmma reads
        mbar_arrive(ready0 + 8 * ts);
      }
    }
    return;
  }

  // ---- Consumer warpgroup: keys 16 warp + g (+ 8) of the tile in every accumulator. ----
  const int tid = threadIdx.x - 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const float scale_log2 = p.score.scale * kLog2eF;
  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;
  const bool tile_cut = j0 + kBk > sh.Tk;  // keys past Tk in this tile
  if (n_units > 0) mbar_wait(kv_ready, 0);
  for (int n = 0; n < n_units; ++n) {
    const int s = n & 1, ts = n % kTSt;
    const int h = hk * G + n / per_head;
    const int64_t i0 = static_cast<int64_t>(qb_lo + n % per_head) * kBq;
    const float* lse2 = rows_f + 64 * s;
    const float* ds_row = rows_f + 64 * s + 32;
    mbar_wait(ready0 + 8 * ts, (n / kTSt) & 1);
    // S^T = K Q^T, dP^T = V dO^T (two commit groups: P is computed while dP^T runs).
    float sacc[16], dpacc[16];
    wgmma_fence();
    mma_rows_x_queries<D>(sacc, base + L::kK, base + L::kQ + s * L::kQBytes);
    wgmma_commit();
    mma_rows_x_queries<D>(dpacc, base + L::kV, base + L::kDO + s * L::kQBytes);
    wgmma_commit();
    wgmma_wait<1>();
    fence_regs(sacc);
    // Masked elements (key >= Tk, or causal key > row + causal_offset) get P = 0 by selection, so
    // dS = 0 too; only in units that cross a limit (the first row does not see the whole tile).
    const bool need_mask = tile_cut || (p.mask.causal && j0 + kBk > i0 + p.mask.causal_offset + 1);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int q = 8 * (i / 4) + 2 * t + (i & 1);
      float pv = fast_exp2(sacc[i] * scale_log2 - lse2[q]);
      if (need_mask) {
        const int64_t key = j0 + 16 * warp + g + 8 * ((i / 2) & 1);
        const bool vis = key < sh.Tk && (!p.mask.causal || key <= i0 + q + p.mask.causal_offset);
        pv = vis ? pv : 0.f;
      }
      sacc[i] = pv;
    }
    wgmma_wait<0>();
    fence_regs(dpacc);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int q = 8 * (i / 4) + 2 * t + (i & 1);
      dpacc[i] = sacc[i] * (dpacc[i] - ds_row[q]);
    }
    mbar_arrive(empty0 + 8 * s);  // Q_n, dO_n and rows[s] read
    uint32_t pa[4][4], pd[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      pack_step(pa[kk], sacc + 4 * kk);
      pack_step(pd[kk], dpacc + 4 * kk);
    }
    // dV += P^T dO, dK += dS^T Q (one commit group).
    fence_regs(dv);
    fence_regs(dk);
    wgmma_fence();
    mma_acc_update<D>(dv, pa, base + L::kDOT + ts * L::kQBytes);
    mma_acc_update<D>(dk, pd, base + L::kQT + ts * L::kQBytes);
    wgmma_commit();
    // dS into shared memory for dQ: the previous unit's dQ^T product (waited for) no longer reads it.
    store_ds(base + L::kDS, pd, warp, g, t);
    fence_proxy_async();
    if (tid == 0 && n > 0) bulk_wait_read<0>();  // the previous reduce-add has read the staging block
    named_bar_sync(1, kConsumerThreads);
    float dq[D / 64][16];
    wgmma_fence();
    mma_dq<D>(dq, base + L::kKT, base + L::kDS);
    wgmma_commit();
    wgmma_wait<1>();  // dV, dK done: Q^T, dO^T free
    fence_regs(dv);
    fence_regs(dk);
    fence_regs(pa);
    fence_regs(pd);
    mbar_arrive(t_empty0 + 8 * ts);
    wgmma_wait<0>();
#pragma unroll
    for (int m = 0; m < D / 64; ++m) fence_regs(dq[m]);
    store_dq_staging<D>(base + L::kStage, dq, warp, g, t);
    fence_proxy_async();
    named_bar_sync(2, kConsumerThreads);
    if (tid == 0) {
      float* dst = dq_acc + ((static_cast<int64_t>(b) * sh.H + h) * tq_pad + i0) * D;
      bulk_reduce_add_f32(dst, base + L::kStage, L::kQBytes);
      bulk_commit();
    }
  }

  // Epilogue: dK * scale, dV (float2 stores), keys < Tk; zeros for keys no row sees.
  float* dkp = static_cast<float*>(p.dk);
  float* dvp = static_cast<float*>(p.dv);
  const float scale = p.score.scale;
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    const int64_t j = j0 + 16 * warp + g + 8 * h2;
    if (j >= sh.Tk) continue;
    float* dkr = dkp + b * sh.k_stride[0] + j * sh.k_stride[1] + hk * sh.k_stride[2];
    float* dvr = dvp + b * sh.v_stride[0] + j * sh.v_stride[1] + hk * sh.v_stride[2];
#pragma unroll
    for (int jj = 0; jj < D / 8; ++jj) {
      *reinterpret_cast<float2*>(dkr + 8 * jj + 2 * t) =
          make_float2(dk[4 * jj + 2 * h2] * scale, dk[4 * jj + 2 * h2 + 1] * scale);
      *reinterpret_cast<float2*>(dvr + 8 * jj + 2 * t) = make_float2(dv[4 * jj + 2 * h2], dv[4 * jj + 2 * h2 + 1]);
    }
  }
  if (tid == 0) bulk_wait<0>();  // the last reduce-add's writes (and its read of the staging block)
}

// dQ [B, Tq, H, D] = scale * dQacc [B, H, tq_pad, D] (float4 per step).
template <int D>
__global__ void bwd_dq_tf32_sm90_convert_kernel(const FlashBwdParams p, const float* dq_acc, int64_t tq_pad) {
  const AttnShape& sh = p.shape;
  const int64_t n4 = sh.B * sh.H * sh.Tq * (D / 4);
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < n4;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int d4 = static_cast<int>(x % (D / 4));
    const int64_t row = x / (D / 4);
    const int64_t i = row % sh.Tq, bh = row / sh.Tq;
    const int64_t h = bh % sh.H, b = bh / sh.H;
    float4 v = *reinterpret_cast<const float4*>(dq_acc + (bh * tq_pad + i) * D + 4 * d4);
    const float sc = p.score.scale;
    v.x *= sc;
    v.y *= sc;
    v.z *= sc;
    v.w *= sc;
    *reinterpret_cast<float4*>(static_cast<float*>(p.dq) + b * sh.q_stride[0] + i * sh.q_stride[1] +
                               h * sh.q_stride[2] + 4 * d4) = v;
  }
}

// ---- Host side ---------------------------------------------------------------------------------
std::atomic<int64_t> g_bwd_tf32_launches{0};

template <int D>
cudaError_t launch_bwd_tf32(const FlashBwdParams& p, cudaStream_t stream) {
  const AttnShape& s = p.shape;
  CUtensorMap tq, tk, tv, tdo;
  if (!tma_map_rows_f32(&tq, p.q, s.B, s.Tq, s.H, D, s.q_stride, kBq) ||
      !tma_map_rows_f32(&tk, p.k, s.B, s.Tk, s.Hkv, D, s.k_stride, kBk) ||
      !tma_map_rows_f32(&tv, p.v, s.B, s.Tk, s.Hkv, D, s.v_stride, kBk) ||
      !tma_map_rows_f32(&tdo, p.d_o, s.B, s.Tq, s.H, D, s.o_stride, kBq))
    return cudaErrorNotSupported;  // nothing queued yet: the dispatch falls back to sm80's TF32 backward
  float* dsum = nullptr;
  float* dq_acc = nullptr;
  int64_t tq_pad = 0;
  bwd_tf32_workspace(p, &dsum, &dq_acc, &tq_pad);
  auto kernel = flash_bwd_sm90_tf32_kernel<D>;
  const int smem = BwdTf32Smem<D>::kAlloc;
  cudaError_t err = set_dynamic_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  if ((err = bwd_dsum_tf32(p, dsum, stream)) != cudaSuccess) return err;
  const size_t acc_floats = static_cast<size_t>(s.B * s.H * tq_pad) * D;
  if ((err = cudaMemsetAsync(dq_acc, 0, acc_floats * sizeof(float), stream)) != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>((s.Tk + kBk - 1) / kBk), static_cast<unsigned>(s.Hkv), static_cast<unsigned>(s.B));
  kernel<<<grid, kThreads, smem, stream>>>(tq, tk, tv, tdo, p, dsum, dq_acc, tq_pad);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  const int64_t n4 = s.B * s.H * s.Tq * (D / 4);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(n4 / 256 + 1, 65536 * 16));
  bwd_dq_tf32_sm90_convert_kernel<D><<<blocks, 256, 0, stream>>>(p, dq_acc, tq_pad);
  err = cudaGetLastError();
  if (err == cudaSuccess) g_bwd_tf32_launches.fetch_add(1, std::memory_order_relaxed);
  return err;
}

}  // namespace

int64_t bwd_tf32_launches() { return g_bwd_tf32_launches.load(std::memory_order_relaxed); }

bool bwd_tf32_applies(const FlashBwdParams& p) {
  const AttnShape& s = p.shape;
  if (p.dtype != DType::kFloat32 || !p.allow_tf32 || p.deterministic || !p.workspace) return false;
  if (s.D != s.Dv || (s.D != 64 && s.D != 128)) return false;
  if (s.Tk <= 0 || s.Tq <= 0 || s.Tq > (1ll << 31) - 2 * kBq || s.Tk > (1ll << 31) - 2 * kBk) return false;
  if (s.B <= 0 || s.H <= 0 || s.H > 65535 || s.B > 65535 || s.Hkv <= 0 || s.Hkv > 65535 || s.H % s.Hkv != 0)
    return false;
  // Units per CTA (G x query tiles) counted in int.
  if ((s.H / s.Hkv) * ((s.Tq + kBq - 1) / kBq) >= (1ll << 31)) return false;
  const MaskParams& m = p.mask;
  if (m.window_left >= 0 || m.window_right >= 0 || m.q_lengths || m.k_lengths || m.q_valid || m.k_valid || m.mask)
    return false;
  if (p.score.bias || p.dbias || p.score.softcap != 0.f || p.dropout.rate > 0.f) return false;
  // TMA (q, k, v, d_o) and the float2 / float4 stores of dk, dv, dq: 16-byte bases, strides of 4.
  for (int i = 0; i < 3; ++i) {
    if (s.q_stride[i] < 0 || s.k_stride[i] < 0 || s.v_stride[i] < 0 || s.o_stride[i] < 0) return false;
    if (s.q_stride[i] % 4 || s.k_stride[i] % 4 || s.v_stride[i] % 4 || s.o_stride[i] % 4) return false;
  }
  if (!aligned16(p.q) || !aligned16(p.k) || !aligned16(p.v) || !aligned16(p.o) || !aligned16(p.d_o) ||
      !aligned16(p.dq) || !aligned16(p.dk) || !aligned16(p.dv) || !aligned16(p.workspace))
    return false;
  return current_device_is_sm90();
}

cudaError_t bwd_tf32(const FlashBwdParams& p, cudaStream_t stream) {
  return p.shape.D == 128 ? launch_bwd_tf32<128>(p, stream) : launch_bwd_tf32<64>(p, stream);
}

// ---- Self-test of the building blocks (UNTESTED ON A GPU when written) -------------------------
namespace {

// One CTA of 128 threads (one warpgroup; warps 1..3 also act as the transposers, as in the kernel).
// Inputs stored by plain stores into swizzled tiles as TMA would write them: A [64 x 128] (K or V),
// B [32 x 128] (Q or dO), C [32 x D] (the dO / Q of the update products), all small exact values
// (multiples of 1/2 in {-1/2, 0, 1/2}: every product below is exact in float32).
//   mode 0: S^T = A B^T [64 x 32] by 16 wgmma m64n32k8 SS (the S^T / dP^T form). out [64 x 32].
//   mode 1: the transposer on C [32 x D] with PERM (Q^T / dO^T) and on A [64 x 128] without (K^T),
//           on full-mantissa floats (test_float): out [D x 32] C^T read through the permuted layout,
//           then [128 x 64] A^T, then [32 x D] C rounded in place, then [64 x 128] A rounded in place
//           (bits against the host's rna).
//   mode 2: X = (A B^T) C [64 x D]: S^T as mode 0, packed (pack_step) as the A fragments, B = C^T by the
//           transposer (PERM), 4 wgmma m64nDk8 RS (the dV / dK form). out [64 x D].
//   mode 3: Y^T = A^T (A B^T)^T [128 x 32]: S^T as mode 0, stored by store_ds into the dS tile, A^T
//           by the transposer, D/64 x 8 wgmma m64n32k8 SS (mma_dq, the dQ^T form with D = 128), then
//           store_dq_staging: out [32 x 128] = Y = (A B^T)^T A (row-major, as the staging block).
template <int D>
__global__ void selftest_bwd_tf32_kernel(const float* a, const float* bq, const float* c, float* out, int mode) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* tile = smem_raw + (base - raw);
  const uint32_t a_t = base, at_t = base + 32768, b_t = base + 65536, c_t = b_t + 16384, ct_t = c_t + 16384,
                 ds_t = ct_t + 16384, st_t = ds_t + 8192;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  for (int i = tid; i < 64 * 128; i += 128)
    *reinterpret_cast<float*>(tile + swz128_offset_f32(64, i / 128, i % 128)) = a[i];
  for (int i = tid; i < 32 * 128; i += 128)
    *reinterpret_cast<float*>(tile + (b_t - base) + swz128_offset_f32(32, i / 128, i % 128)) = bq[i];
  for (int i = tid; i < 32 * D; i += 128)
    *reinterpret_cast<float*>(tile + (c_t - base) + swz128_offset_f32(32, i / D, i % D)) = c[i];
  __syncthreads();
  if (mode == 1 || mode == 2 || mode == 3) {
    if (tid >= 32) {
      transpose_round_tile<kBq, D, true>(ct_t, c_t, tid - 32, kTransposers);
      transpose_round_tile<kBk, 128, false>(at_t, a_t, tid - 32, kTransposers);
    }
    fence_proxy_async();
    __syncthreads();
  }
  if (mode == 1) {
    for (int i = tid; i < D * 32; i += 128)
      out[i] = *reinterpret_cast<const float*>(tile + (ct_t - base) + swz128_offset_f32(D, i / 32, bwd_kperm(i % 32)));
    for (int i = tid; i < 128 * 64; i += 128)
      out[D * 32 + i] = *reinterpret_cast<const float*>(tile + (at_t - base) + swz128_offset_f32(128, i / 64, i % 64));
    for (int i = tid; i < 32 * D; i += 128)
      out[D * 32 + 128 * 64 + i] = *reinterpret_cast<const float*>(tile + (c_t - base) + swz128_offset_f32(32, i / D, i % D));
    for (int i = tid; i < 64 * 128; i += 128)
      out[2 * D * 32 + 128 * 64 + i] = *reinterpret_cast<const float*>(tile + swz128_offset_f32(64, i / 128, i % 128));
    return;
  }
  float sacc[16];
  wgmma_fence();
  mma_rows_x_queries<128>(sacc, a_t, b_t);
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(sacc);
  if (mode == 0) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int r = warp * 16 + g + 8 * ((i / 2) & 1), col = 8 * (i / 4) + 2 * t + (i & 1);
      out[r * 32 + col] = sacc[i];
    }
    return;
  }
  uint32_t pa[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) pack_step(pa[kk], sacc + 4 * kk);
  if (mode == 2) {
    float acc[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc[i] = 0.f;
    fence_regs(acc);
    wgmma_fence();
    mma_acc_update<D>(acc, pa, ct_t);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc);
    fence_regs(pa);
#pragma unroll
    for (int i = 0; i < D / 2; ++i) {
      const int r = warp * 16 + g + 8 * ((i / 2) & 1), col = 8 * (i / 4) + 2 * t + (i & 1);
      out[r * D + col] = acc[i];
    }
    return;
  }
  // mode 3 (D = 128 for A^T's 128 rows)
  store_ds(ds_t, pa, warp, g, t);
  fence_proxy_async();
  __syncthreads();
  float dq[2][16];
  wgmma_fence();
  mma_dq<128>(dq, at_t, ds_t);
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(dq[0]);
  fence_regs(dq[1]);
  store_dq_staging<128>(st_t, dq, warp, g, t);
  __syncthreads();
  for (int i = tid; i < 32 * 128; i += 128) out[i] = *reinterpret_cast<const float*>(tile + (st_t - base) + 4 * i);
}

float bt_host_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & ~0x1fffu;
  std::memcpy(&x, &u, 4);
  return x;
}
float bt_float(int i, int j, int salt) {
  uint32_t x = static_cast<uint32_t>(i * 7919 + j * 104729 + salt * 1299709) * 2654435761u;
  x ^= x >> 15;
  x *= 2246822519u;
  x ^= x >> 13;
  return (static_cast<float>(x & 0xffffff) / 16777216.f - 0.5f) * 8.f;
}
float bt_half(int i, int j, int salt) {
  uint32_t x = static_cast<uint32_t>(i * 131 + j * 71 + salt * 29) * 2654435761u;
  x ^= x >> 16;
  return (static_cast<int>(x % 3) - 1) * 0.5f;
}

}  // namespace

// which: 0 S^T form (m64n32k8 SS); 1 transposers (Q^T permuted + K^T natural, in-place rounding),
// bits; 2 / 3 dV / dK form at D = 128 / 64 (RS, A from the S^T accumulators, B = the permuted
// transpose); 4 dQ^T form (dS stored by store_ds, A = K^T, m64n32k8 SS, staging layout).
int bwd_tf32_selftest(int which, double* max_err, char* msg, int msg_len) {
  auto say = [&](const char* fmt, auto... args) {
    if (msg && msg_len > 0) std::snprintf(msg, msg_len, fmt, args...);
  };
  *max_err = 0.0;
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (major != 9 || minor != 0) {
    say("needs compute capability 9.0, this device is %d.%d", major, minor);
    return -1;
  }
  if (which < 0 || which >= kBwdTf32Selftests) {
    say("no test %d", which);
    return -1;
  }
  const int D = which == 3 ? 64 : 128;
  const int mode = which == 0 ? 0 : which == 1 ? 1 : which == 4 ? 3 : 2;
  std::vector<float> a(64 * 128), bq(32 * 128), c(32 * D);
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 128; ++j) a[i * 128 + j] = mode == 1 ? bt_float(i, j, 1) : bt_half(i, j, 1);
  for (int i = 0; i < 32; ++i)
    for (int j = 0; j < 128; ++j) bq[i * 128 + j] = bt_half(i, j, 2);
  for (int i = 0; i < 32; ++i)
    for (int j = 0; j < D; ++j) c[i * D + j] = mode == 1 ? bt_float(i, j, 3) : bt_half(i, j, 3);
  // S^T[r][q] = sum_d a[r][d] bq[q][d] (multiples of 1/4, |.| <= 32: exact).
  std::vector<double> st(64 * 32, 0.0);
  for (int r = 0; r < 64; ++r)
    for (int q = 0; q < 32; ++q)
      for (int d = 0; d < 128; ++d) st[r * 32 + q] += static_cast<double>(a[r * 128 + d]) * bq[q * 128 + d];
  std::vector<double> want;
  if (mode == 0) {
    want = st;
  } else if (mode == 1) {
    for (int d = 0; d < D; ++d)
      for (int q = 0; q < 32; ++q) want.push_back(bt_host_tf32(c[q * D + d]));
    for (int d = 0; d < 128; ++d)
      for (int r = 0; r < 64; ++r) want.push_back(bt_host_tf32(a[r * 128 + d]));
    for (float x : c) want.push_back(bt_host_tf32(x));
    for (float x : a) want.push_back(bt_host_tf32(x));
  } else if (mode == 2) {
    want.assign(64 * D, 0.0);
    for (int r = 0; r < 64; ++r)
      for (int d = 0; d < D; ++d)
        for (int q = 0; q < 32; ++q) want[r * D + d] += st[r * 32 + q] * c[q * D + d];
  } else {
    want.assign(32 * 128, 0.0);  // Y[q][d] = sum_r S^T[r][q] a[r][d]
    for (int q = 0; q < 32; ++q)
      for (int d = 0; d < 128; ++d)
        for (int r = 0; r < 64; ++r) want[q * 128 + d] += st[r * 32 + q] * a[r * 128 + d];
  }
  std::vector<void*> ptrs;
  auto alloc = [&](size_t bytes) -> float* {
    void* q = nullptr;
    if (cudaMalloc(&q, bytes) != cudaSuccess) return nullptr;
    ptrs.push_back(q);
    return static_cast<float*>(q);
  };
  auto free_all = [&] {
    for (void* q : ptrs) cudaFree(q);
  };
  float* da = alloc(a.size() * 4);
  float* db = alloc(bq.size() * 4);
  float* dc = alloc(c.size() * 4);
  float* dout = alloc(want.size() * 4);
  if (!da || !db || !dc || !dout) {
    free_all();
    say("cudaMalloc failed");
    return -1;
  }
  cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(db, bq.data(), bq.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice);
  cudaMemset(dout, 0xff, want.size() * 4);  // NaN
  const int smem = 65536 + 3 * 16384 + 8192 + 16384 + 1024;
  auto run = [&](auto kernel) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    kernel<<<1, 128, smem>>>(da, db, dc, dout, mode);
    return cudaDeviceSynchronize();
  };
  const cudaError_t err = D == 64 ? run(selftest_bwd_tf32_kernel<64>) : run(selftest_bwd_tf32_kernel<128>);
  if (err != cudaSuccess) {
    free_all();
    say("kernel failed: %s", cudaGetErrorString(err));
    return 0;
  }
  std::vector<float> got(want.size());
  cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost);
  free_all();
  int bad = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same = mode == 1 ? [&] {
      const float w = static_cast<float>(want[i]);
      return std::memcmp(&got[i], &w, 4) == 0;
    }() : got[i] == want[i];
    if (!same) {
      if (first < 0) first = static_cast<int>(i);
      ++bad;
      const double e = std::fabs(got[i] - want[i]);
      *max_err = std::isnan(e) ? INFINITY : std::max(*max_err, e);
    }
  }
  const char* what[] = {"wgmma m64n32k8 .tf32 SS, both K-major (S^T = K Q^T / dP^T = V dO^T form)",
                        "transposers: Q^T [D x 32] queries permuted + K^T [128 x 64], cvt.rna, in-place rounding (bits)",
                        "wgmma m64n128k8 .tf32 RS, A from the n32 S^T accumulators, B = permuted C^T (dV / dK form, D = 128)",
                        "wgmma m64n64k8 .tf32 RS, A from the n32 S^T accumulators, B = permuted C^T (dV / dK form, D = 64)",
                        "dQ^T = K^T dS^T: store_ds, K^T by the transposer, 2 x 8 wgmma m64n32k8 SS, staging layout"};
  if (bad) {
    say("%s: %d of %d differ; first at %d: got %.9g want %.9g", what[which], bad, static_cast<int>(got.size()), first,
        got[first], want[first]);
    return 0;
  }
  say("%s: exact (%d values)", what[which], static_cast<int>(got.size()));
  return 1;
}

}  // namespace sm90
}  // namespace cuda
}  // namespace flashattn
