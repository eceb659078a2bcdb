// Hopper-native FlashAttention forward (sm_90a only): float16 / bfloat16, kernels for head dims 64, 128
// and 256; any other D and Dv <= 256 (multiples of 8) run the kernel of head_dim_bucket(max(D, Dv)),
// padded up: the tensor maps carry the real D / Dv, so the copy engine fills the columns past them with
// zeros (S = Q K^T and O = P V exact), and O's columns past Dv are not stored (the copy engine clips its
// stores; the register epilogue checks the column). GQA allowed; q/k/v any strides that are multiples of
// 8 elements (16 bytes, what TMA needs).
// Masks by index, with sm80's semantics (common/flash_cuda_common.cuh): causal (any
// causal_offset), sliding window, q/k lengths and the [B, Tq] / [B, Tk] validity masks; and
// dropout (common/flash_dropout.cuh, bit-identical to sm80 and the CPU); soft-cap in the index-masked
// kernel; a dense mask and bias (contiguous along the keys or broadcast over them; not with dropout:
// then sm80's general kernels) in that kernel's DENSE instantiation, element by element as sm80's
// score_elem: "Dense mask and bias" below. The dispatch
// (flash_cuda_dispatch.cu) takes it through fwd_applies() and falls back to sm80/flash_fwd.cu otherwise. Checked on an H200: the causal-only
// prototype on 2026-11-30 (benchmarks/RESULTS.md "Hopper forward kernel": self-tests, numerics,
// memcheck, the TensorFlow GPU tests with it on), the index masks, dropout and the schedules below
// on 2026-12-01 (sm90_check.py's numerics, every schedule bitwise equal to variant 0, memcheck).
// sm90_selftest() (below, exposed by the kernel harness) checks the building blocks one at a time
// so that a failure says which. D = 256 (below) on 2026-12-01 too (64 numerics rows, memcheck).
//
// Building blocks: hand-written inline PTX (sm90_ptx.cuh), not CuTe/CUTLASS. The pieces this
// kernel needs are few (mbarrier, one TMA load form, one descriptor form, a few wgmma shapes,
// setmaxnreg), each a few lines; headers-only CUTLASS would add ~seconds-to-minutes of template
// compile time per instantiation on the 2-core build machine and a 20 MB include tree to carry to
// the GPU machine, and hide the layouts that this first version must get right by reading. The
// tensor maps come from the driver's cuTensorMapEncodeTiled through cudaGetDriverEntryPointByVersion
// (no link against libcuda; cudart is static); they are encoded on the host at every call (a few
// microseconds, no synchronization) and passed as __grid_constant__ kernel parameters.
//
// Design (FlashAttention-3's, simplified):
//   CTA = 3 warpgroups (384 threads): warpgroup 0 is the producer (one thread issues TMA; the
//   group gives its registers away with setmaxnreg.dec to 24), warpgroups 1 and 2 are consumers
//   (setmaxnreg.inc to 240), each owning 64 of the CTA's kBr = 128 query rows.
//   Shared memory: Q tile [128 x D] (loaded once), and a kStages = 2 ring of K and V tiles
//   [kBc keys x D] (kBc = kKeyTile<D>: 128, or 64 at D = 256), all 128-byte swizzled (D / 64 panels
//   of 64 columns). Barriers:
//   q_full; full[s] (producer's arrive.expect_tx + TMA bytes), empty[s] (256 consumer arrivals).
//   D = 128: 32 KiB Q + 2 x (32 + 32) KiB K/V = 160 KiB (+1 KiB alignment, barriers).
//   Per key tile, each consumer warpgroup:
//     S = Q K^T        8 (D/16) wgmma m64n128k16, both operands from shared memory (K-major)
//     online softmax   S * scale * log2e, row max over the quad, m, l, O *= 2^(m_old - m_new)
//     P (registers)    S's accumulators repacked as the A fragments of m64k16 (16-bit pairs)
//     O += P V         8 (kBc/16) wgmma m64nDk16, A = P from registers, B = V (MN-major, transposed
//                      by the instruction)
//     release the stage (arrive on empty[s]).
//   Epilogue: O / l straight from registers to o [B, Tq, H, Dv]; lse = ln2 (m + log2 l), -inf and
//   O = 0 for rows that see no key (as sm80/flash_fwd_tile.cuh does).
//   Registers per consumer thread (D = 128): S 64 + O 64 + P 32 floats/words + row state.
// Head dim 256 (Gemma; the kernel <T, 256, IDX, DROP, 0>, schedule 0 only):
//   Tiles: kBr = 128 query rows (64 per consumer warpgroup), kBc = 64 keys (kKeyTile<256>).
//   Shared memory: Q 128 x 256 x 2 B = 64 KiB + 2 stages x (K + V) 2 x 64 x 256 x 2 B = 128 KiB
//   = 192 KiB, + 40 B of barriers + 1 KiB alignment slack = 197,672 B of the 227 KiB opt-in limit
//   (a third stage, 256 KiB, or 128-key tiles, 320 KiB, do not fit).
//   Registers per consumer thread (setmaxnreg 240): O 64 x 256 / 128 threads = 128 floats, S 64 x 64
//   / 128 = 32 floats, P 4 k16 steps x 4 = 16 words, m, l, the row ranges; ptxas -v (sm_90a, CUDA
//   13.0): 168 registers at launch (the 384-thread bound), 0 spills, 0 stack, dropout included. The
//   overlap / ping-pong schedules would hold S_{n+1} and P_n together (+48) next to O: not tried.
//   Swizzle panels: a 256-column row is 4 panels of 64 columns (128 bytes, one swizzle atom); Q's
//   panel j at j x 128 x 128 B, K's and V's at j x 64 x 128 B; TMA loads each tile as 4 boxes
//   {64, 1, rows, 1}.
//   S = Q K^T: 16 (D/16) wgmma m64n64k16 SS, both K-major: the k-th step reads panel k / 4 at byte
//   (k % 4) x 32 of the row (SBO = 1024, the next 8 rows), as at D = 128 with twice the panels.
//   O += P V: 4 (kBc/16) wgmma m64n256k16 RS, B = V MN-major: the kk-th step starts at row 16 kk of
//   panel 0, LBO = 64 x 128 B (the next 64-column panel along N: the instruction walks all 4),
//   SBO = 1024 (the next 8 keys).
//   Dropout: the same Philox layout on 8 n-tiles per key tile (j0 a multiple of 64, so of 32).
//   Masks: the grid's query tiles run longest first (causal: grouped over a few (batch, head) pairs,
//   kGridSectionBytes). The key tiles a query tile visits are
//   QueryTileKeys' (the union of its rows' causal / window / length ranges): the producer loads
//   only those and the consumers loop over the same ones. Per tile and warp, only warps with a
//   live row whose range does not cover the tile, or with a key failing k_valid, mask element-
//   wise (invalid rows and rows past q_lengths see no key: O = 0, lse = -inf).
//   Plain instantiation (<IDX = false>, calls with no window, lengths or validity mask; causal
//   allowed; needs_idx() on the host): the CTA masks the tiles its first row does not see whole
//   (key_end(row), non-decreasing in the row), one CTA-uniform branch per tile around the
//   element-wise masking. The IDX kernel's first form (row_info, 32 k_valid byte loads per thread
//   and tile, a vote and an `if (need_mask)` per element) compiled to 64 branches per 128-key tile
//   in the loop body (one per S element; ptxas 13.0, sm_90a, D = 64 and 128, every schedule),
//   taken on every tile without a mask; the first version (dab104b: a branch-free select on a
//   CTA-uniform predicate) had none. Splitting this instantiation out gave the plain calls +30%;
//   the IDX kernel stayed at ~300-327 TFLOP/s against 580-620 (D = 128, H200, all-true key mask or
//   dropout 0.1). Now the IDX kernel too branches
//   once per tile and warp, on the vote, between a masked loop (selects, no branches) and the plain
//   kernel's scale-only loop (with FA_SM90_FWD_FFMA_SOFTMAX, the plain kernel's deferred scale), and an all-true
//   k_valid costs kBc / 32 byte loads per lane issued
//   before the waits and one more vote (softmax_tile, load_key_bytes): 6 branches in the loop body
//   instead of 67 at D = 64 and 128, 35 at D = 256 (benchmarks/sass_order.py --branches). Same values either way (S * scale, -inf
//   where invisible; with FA_SM90_FWD_FFMA_SOFTMAX S unscaled in both kernels where they defer the scale):
//   the outputs are the IDX kernel's bit for bit. On the H200 (2026-12-01, phase
//   bench, D = 128 bf16): an all-true key mask 554 / 574 TFLOP/s at T = 4096 / 16384 (0.97x the
//   plain kernel; 318-327 before), a key mask with 10 % padding 522 / 558. Dropout 0.1 stays at
//   328 / 339 (0.58x): its cost is the Philox mask, not the branches.
//   Dropout (the <IDX = true, DROP = true> instantiation): P *= keep * keep_scale after the row
//   sum, one Philox call per 8 elements on the m16n8 fragment that each warp's part of the m64nN
//   accumulator is. At D = 64 keep_scale joins 1 / l in the epilogue instead (kDropScaleInEpilogue).
// Schedules (kSched below; the plain kernel at D = 64 and 128, picked at run time by
// TF_FLASHATTN_SM90_FWD_VARIANT or the harness's set_sm90_fwd_variant): variant 0 is the schedule
// above; the others add 3 K/V stages, the softmax / next-tile QK^T overlap inside a warpgroup, the
// two consumer warpgroups' ping-pong (named barriers), O stored through shared memory by TMA. The
// default is variant 5 (all four; kDefaultVariant): on the H200 (gpu_run.sh sm90, phase vbench,
// bf16, H = 16, B*T = 16384) 463 / 412 / 484 / 465 TFLOP/s against variant 0's 419 / 355 / 438 /
// 432 at T = 4096 / 4096 causal / 16384 / 16384 causal, with O and lse equal to variant 0's bit for
// bit. At D = 64 the plain kernel's default is variant 8 (three consumer warpgroups, below); its other
// kernels run variant 5. D = 256 keeps
// the schedule above (variant 0); dropout at D = 64 and 128 runs kDropVariant (now 0, see there), a dense
// mask or bias kDenseVariant (1). Variant 7 is variant 5 on a persistent grid: one CTA per SM, each
// looping over (m_block, head, batch) tiles in a static order (TileOrder), the producer loading the
// next tile's K / V while the consumers finish the previous tile's products and epilogue (see the
// kernel's comment); the default of the plain D = 128 kernel without a causal mask (launch_sched).
// Its first tile order (FlashAttention-3's: 32 MiB sections of (batch, head) pairs, longest rows
// first) kept 16 heads' K / V in flight at D = 128, T = 4096 and read 3.3x the HBM bytes of the
// one-CTA-per-tile grid (ncu on the H200: 674 MB against 201, L2 hits 77 % against 86 %): 0.92x-0.97x
// variant 5 there (2026-12-01 / 02). Without a causal mask the tiles now go head after head as the
// grid's blockIdx order does (tile_order()): 201 MB, 88 % hits, and 1.01x-1.07x variant 5's TFLOP/s
// at T = 1024 .. 16384 in the harness (2026-12-02, vbench, three processes), O and lse equal to variant
// 0's bit for bit. With a causal mask the static order leaves the tiles unbalanced (0.74x-0.91x variant
// 5 at T = 16384, any section size tried): there the plain kernel runs variant 10, variant 7 taking each
// next tile from a counter in the workspace (kDynamicVariant, 1.00x-1.04x variant 5 at T = 2048 .. 16384;
// variant 5's grid when the caller passes no workspace); the index-masked kernel keeps variant 5's grid
// and the hardware's dynamic dispatch of it.
// Variants 8 and 9 (8 the default of the plain D = 64 kernel; the plain kernel at D = 64 only, other calls run 5):
// FlashAttention-3's head-dim-64 tile, 3 consumer warpgroups and 192 query rows per CTA, variant 8
// with the ping-pong as a round-robin ring, 9 without it (see their comment at kSched).
// Dense mask and bias (the <IDX = true, DROP = false, DENSE = true> instantiation, whenever either is
// given; the IDX kernel without DENSE has no code for them): each consumer thread reads the mask bytes
// and bias values of its 64 S elements per tile (32 at D = 256) kDenseBatch at a time, every load of a
// batch issued before any is used: on tiles inside Tk whose rows allow it (contiguous, aligned; a
// warp-uniform choice) a column pair as one 2-byte mask / 4-byte bias load, else element by element
// predicated on the column being below Tk (rows past Tq read row Tq - 1); one pointer per row and tile
// plus immediates; a tensor broadcast over the keys (column stride 0) is read once per row. Rows are
// prefetched into L2 two key tiles ahead (prefetch_dense, FA_SM90_FWD_DENSE_PREFETCH). The former code
// (one `if` per element around the mask load and the bias load that depended on it, in the IDX kernel
// itself) compiled to a branch per element with each load waited for before the next: 2 x 64 memory
// round trips in a row per tile and thread. The DENSE kernel runs schedule 1 (kDenseVariant: three
// stages, no overlap; schedule 5's overlap holds S, P and O at once and spilled with the batches, 25
// LDL / STL in the loop) or 0 when asked. On the H200 (2026-12-02, sm90_check.py densesave / densecmp
// against the former builds, benchmarks/RESULTS.md "(l)" and "(m)"): o and lse bit for bit the former
// code's (40 / 40, both schedules and dtypes); at D = 128 a head-broadcast bias 2.0x faster with the
// batches, then 1.11x with the pairs (189-193 TFLOP/s), a batch-broadcast dense mask 1.3x and 1.3x
// (182), about a third of the plain kernel; and the IDX kernel without the dense code 1.05x faster
// with a padding mask, 1.34x with soft-cap.
// Not yet here (issue 16): the dense mask / bias tile brought into shared memory by the producer (TMA);
// an atomic tile counter for the persistent grid (see tile_order()); a dense mask or bias together
// with dropout.
#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>  // std::true_type (softmax_tile's paired reads)
#include <vector>

#include "cc/kernels/common/flash_cuda_common.cuh"  // QueryTileKeys, row_info, fast_exp2, Elem<T>::pack, grouped_tile
#include "cc/kernels/common/flash_cuda_internal.h"
#include "cc/kernels/common/flash_dropout.cuh"      // drop_tile, drop_rows_visit
#include "cc/kernels/common/flash_params.h"
#include "cc/kernels/sm90/sm90_host.cuh"
#include "cc/kernels/sm90/sm90_ptx.cuh"

namespace flashattn {
namespace cuda {
namespace sm90 {
namespace {

constexpr int kBr = 128;      // query rows per CTA (64 per consumer warpgroup)
// Keys per K/V tile, a compile-time function of the head dim: 128 for D <= 128, 64 at D = 256
// (shared memory: 64 KiB of Q + 2 stages x 2 x 32 KiB of K / V; registers: S is 32 floats next to
// O's 128; see the header).
template <int D>
constexpr int kKeyTile = D <= 128 ? 128 : 64;
constexpr int kBcMax = 128;   // the largest key tile (fwd_applies' bound on Tk)
constexpr int kConsumers = 2; // consumer warpgroups
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kProducerRegs = 24;
constexpr int kConsumerRegs = 240;
static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= 65536, "register file");

// Schedules of the consumer warpgroups, chosen at run time by fwd_schedule for the plain
// (no-dropout) kernel at D = 64 and 128 (defaults kDefaultVariantD64, 8, and kDefaultVariant, 5);
// the dropout kernel at D = 64 and 128 runs kDropVariant unless variant 0 is asked for; every other
// instantiation (D = 256) is variant 0, the first
// schedule, measured on the H200 at dab104b and the reference of the bitwise checks. The others
// apply FlashAttention-3's ideas to it:
//   stages     K/V ring depth (3 at D = 128: 32 KiB Q + 3 x 64 KiB K/V = 224 KiB of the 227 allowed)
//   overlap    inside a warpgroup, S_{n+1} = Q K_{n+1}^T and O += P_n V_n are issued together and the
//              softmax of S_{n+1} runs while the P V product is still on the tensor cores (wgmma
//              wait_group 1); the P V of a tile overlaps the next tile's softmax
//   pingpong   (with overlap) the two consumer warpgroups take turns issuing their products (named
//              barriers 1 and 2), so that one's softmax runs while the other's products do
//   tma_store  O written into the warpgroup's (then idle) Q rows in shared memory and stored by TMA
//   persistent grid min(tiles, SMs), each CTA looping over tiles (TileOrder; static stride), the
//              K / V ring, its barriers' phases and the ping-pong turns running on from tile to
//              tile, a q_empty barrier between a tile's epilogue and the next tile's Q load
//              (flash_fwd_sm90_kernel's comment); with overlap and ping-pong only (schedule 5's)
//   consumers  consumer warpgroups: 2 (128 query rows per CTA), or 3 (192 rows, 512 threads; the
//              ping-pong a round-robin ring): schedules 8 and 9, the plain D = 64 kernel only
//              (8 is its default; see their comment below)
//   dynamic    (persistent) each next tile from an atomic counter in the workspace instead of the
//              static stride, handed from the producer to the consumers through a shared-memory
//              ring: schedule 10 (kDynamicVariant; the default of the plain D = 128 kernel with a causal mask)
// The arithmetic is the same in every variant, in the same order (per tile: the persistent grid
// changes which CTA computes a tile and when, not how): O and lse are expected to match variant 0
// bit for bit.
struct Sched {
  int stages;
  bool overlap, pingpong, tma_store;
  bool persistent = false;
  int consumers = 2;  // consumer warpgroups (3: the 192-row query tile of schedules 8 and 9)
  bool dynamic = false;  // (persistent) tiles from an atomic counter in the workspace, not a static stride
};
// FA_SM90_FWD_DROP64_3WG (default 0): the D = 64 dropout kernel on schedule 11, schedule 0 (one tile at a time, 2
// stages) with 3 consumer warpgroups and 192-row query tiles as schedules 8 / 9 (setmaxnreg 160), so that a third
// warpgroup's products run under each one's softmax and Philox draws. Only that kernel (launch_sched; Tq within the
// 192-row tiles' bound, else schedule 0); ptxas 13.0: 12 bytes of spill stores. On the H100 (2026-12-06, RESULTS.md
// "Dropout cost, kernel harness" (ae)): O and lse bit for bit schedule 0's, numerics 190 / 190, but the forward with
// dropout slower, 1.04x-1.06x schedule 0's time at T = 16384 (dropout_speed.py, do_bench); kept off.
#ifndef FA_SM90_FWD_DROP64_3WG
#define FA_SM90_FWD_DROP64_3WG 0
#endif
// FA_SM90_FWD_IDX64_3WG (0; a candidate, not yet run on a GPU): the D = 64 index-masked kernel (index masks and
// soft-cap, without dropout, a dense mask or bias) on schedule 8, the plain D = 64 kernel's default (3 consumer
// warpgroups, 192-row query tiles, setmaxnreg 160), where it runs schedule 5 (2 consumers) today. Schedule 8 made the
// plain D = 64 forward 1.05x-1.16x schedule 5's on the H200 (RESULTS.md "Hopper forward kernel" (f)); the
// index-masked D = 64 forward is the slow one (session 70's harness, H100, T = 4096: a [B, Tk] key mask with 10 % of
// the keys invalid 1.53 ms, an all-true one 1.37 ms, the plain kernel 1.26 ms). ptxas 13.0 fits it in the consumers'
// 160 registers without spills (168 on schedule 5; the loop 2,427 instructions on both).
#ifndef FA_SM90_FWD_IDX64_3WG
#define FA_SM90_FWD_IDX64_3WG 0
#endif
// FA_SM90_FWD_D256_SCHED (0; a candidate, not yet run on a GPU): the schedule of the plain D = 256 kernel (no index
// masks, soft-cap, dropout, dense mask or bias), 0 today: one tile at a time per consumer warpgroup, the softmax
// between the products. 2, 3 or 6 give it the overlapped forms of D = 64 / 128 on their 2 stages of 64-key tiles (the
// softmax of tile n under the P V product of tile n - 1; 3 with the two warpgroups' turns, 6 with those and O stored
// by the copy engine), as FlashAttention-3 overlaps its head-dim-256 forward. ptxas 13.0: no spills for any of them
// (the consumers' 240 registers hold O's 128 floats, S and P), and the softmax's 34 MUFU.EX2 between the waits for S
// and for P V (benchmarks/sass_order.py --check). Session 61's D256_PINGPONG (turns on schedule 0, without the
// overlap) was slower ("Dropout cost" (ag)). FA_SM90_FWD_D256_IDX_SCHED (0, or 2; a candidate too) does the same for
// the index-masked D = 256 kernel without dropout (index masks, soft-cap: Gemma's head dim 256 with a padding mask):
// on schedule 2 ptxas gives it no spills, on 3 20 bytes (scratch builds), so 2 only. Asking for schedule 0
// (TF_FLASHATTN_SM90_FWD_VARIANT=0, set_fwd_variant(0)) still runs 0: the bit-for-bit reference of sm90_check.py's
// variants phase. The dense-mask / bias and dropout kernels at D = 256 keep schedule 0.
#ifndef FA_SM90_FWD_D256_SCHED
#define FA_SM90_FWD_D256_SCHED 0
#endif
#ifndef FA_SM90_FWD_D256_IDX_SCHED
#define FA_SM90_FWD_D256_IDX_SCHED 0
#endif
static_assert(FA_SM90_FWD_D256_SCHED == 0 || FA_SM90_FWD_D256_SCHED == 2 || FA_SM90_FWD_D256_SCHED == 3 ||
                  FA_SM90_FWD_D256_SCHED == 6,
              "FA_SM90_FWD_D256_SCHED: 0, 2, 3 or 6 (2 stages: 64-key tiles at D = 256 fit no third)");
static_assert(FA_SM90_FWD_D256_IDX_SCHED == 0 || FA_SM90_FWD_D256_IDX_SCHED == 2,
              "FA_SM90_FWD_D256_IDX_SCHED: 0 or 2 (3 and 6 spill in the index-masked kernel)");
// The D = 256 kernel's schedule when schedule 0 is not asked for (fwd_typed; DENSE and DROP kernels: 0).
template <bool IDX, bool DROP, bool DENSE>
constexpr int kD256Sched = DROP || DENSE ? 0 : IDX ? FA_SM90_FWD_D256_IDX_SCHED : FA_SM90_FWD_D256_SCHED;
constexpr Sched kSched[] = {
    {2, false, false, false},  // 0: the first schedule (D = 256 always runs it)
    {3, false, false, false},  // 1
    {2, true, false, false},   // 2
    {2, true, true, false},    // 3
    {3, true, true, false},    // 4
    {3, true, true, true},     // 5: the default at D = 128 (H200: 1.08x-1.16x variant 0's TFLOP/s)
    {2, true, true, true},     // 6
    {3, true, true, true, true},  // 7: schedule 5 on a persistent grid (D = 128 plain, no causal mask: default)
    {3, true, true, true, false, 3},   // 8: schedule 5 with 3 consumers, round-robin turns (D = 64 plain only; its default)
    {3, true, false, true, false, 3},  // 9: 8 without the turns (D = 64 plain only)
    {3, true, true, true, true, 2, true},  // 10: 7 with dynamic tiles (D = 128 plain, causal: default)
#if FA_SM90_FWD_DROP64_3WG
    {2, false, false, false, false, 3},  // 11: 0 with 3 consumers (the D = 64 dropout kernel only)
#endif
};
constexpr int kNumVariants = sizeof(kSched) / sizeof(kSched[0]);
// Tried and removed (2026-12-03, benchmarks/RESULTS.md "Hopper forward kernel" (x)): FlashAttention-3's
// 128 x 176 tile for the plain D = 128 kernel without a causal mask (wgmma m64n176k16, 2 K / V stages:
// 3 would need 296 KiB), commit 0a1bd09, 0.87x-0.94x schedule 7; with K and V on barriers of their own
// (K released after S, V after P V; 92501a9) 0.97x-1.03x schedule 7 from T = 2048 to 8192 and 0.99x-1.07x
// at 16384, and the same split on schedule 7's 3 stages of 128 keys no consistent gain: kept out, as each
// adds kernels to the build for no default.
// Tried and removed (2026-12-06, benchmarks/RESULTS.md "Hopper forward kernel" (z), commits 06bda8b and 465392a):
// head dim 256 on the schedules that fit its shared memory (2, 3, 6: 2 stages, 2 consumers; no spills but 20 bytes
// in the index-masked kernel on 3), 0.81x-0.90x schedule 0's TFLOP/s at T = 4096 / 8192, causal and not (H100,
// vbench); and the wgmma descriptors stepped by adding each k16 step's offset (wgmma_desc_add; the key-tile loop's
// uniform-datapath instructions 115 -> 66 at D = 128), 0.978x-1.022x the forward's time at D = 64, 128 and 256
// (harness loop), no gain, where the same change made the D = 128 backward 2-7 % faster (flash_bwd_sm90.cu's
// FA_SM90_BWD_DESC_ADD).
// Tried and removed (2026-12-07, session 67, benchmarks/RESULTS.md "Hopper forward kernel" (af), commit 1c8eda2's
// FA_SM90_FWD_SPLIT_Q): on the persistent schedules 7 and 10, each consumer warpgroup's 64 Q rows with a q_full /
// q_empty pair of its own (64-row TMA boxes) and the ping-pong's turns running on across tiles, so that one
// warpgroup's next Q loads while the other finishes its tile (here the next Q waits for both warpgroups' O stores).
// Every schedule bit for bit schedule 0's, capped grid too; synccheck and racecheck clean; but 0.990x-1.010x by the
// loop and 0.999x-1.002x by do_bench at D = 128 without a mask, T = 4096 to 16384 (H100): the Q load between tiles is
// not what keeps this forward 1-3 % behind cuDNN at T = 4096.
// Tried and removed (2026-12-06, session 55, benchmarks/RESULTS.md "Hopper forward kernel" (ab), commit 070350a's
// FA_SM90_FWD_TREE_MAX): softmax_tile's row maxima as trees (depth 5 over a thread's 32 values of a row) with both row
// halves' quad shuffles side by side, instead of one chain of kBc / 8 + 1 dependent FMNMX per row half, for a shorter
// latency before a tile's first exp2. Numerics 190 / 190; harness loop 0.997x-1.039x the chain at D = 64, 128 and
// 256 (do_bench 0.996x-1.019x; D = 128 0.999x-1.007x): no gain worth the second code path.
constexpr int kDefaultVariant = 5;     // D = 128 (the plain kernel: kPersistentVariant, causal kDynamicVariant)
constexpr int kDefaultVariantD64 = 8;  // D = 64 (the plain kernel; the others run kWideFallback, 5)
// FA_SM90_FWD_FFMA_SOFTMAX (default 128: the D = 128 kernels; see its values below): the online softmax takes the row max of the unscaled S and scales that
// (one multiply per row), then P = 2^(S * scale_log2 - m) with one FFMA per element (FlashAttention-3's form),
// instead of S * scale_log2 for every element first and 2^(x - m) after (an FMUL and an FADD per element). Only where
// the scale is positive, which keeps the order of S (the max commutes with the scale; a negative one would make it a
// min): otherwise the former code runs. In softmax_tile of the plain kernel, and of the index-masked kernels (with
// dropout too) without a dense mask, bias or soft-cap: there S stays unscaled on every tile, masked ones included
// (-inf where not visible, as the plain kernel's causal and last tiles), so an all-true padding mask still equals no
// mask bit for bit (sm90_check.py's nomask_bitwise cases; a helper's review of the first form of this change found
// that its masked tiles, kept scaled, broke this on every row's last tile). With a dense mask, bias or soft-cap the
// former code runs (the exponent multiplies by 1: an FFMA equal to the former FADD bit for bit). The row max m is the
// former one bit for bit (rounding is monotone); P differs in its last bits (one rounding fewer), the same in every
// schedule. A row whose max S times the scale overflows to +inf on its last key tile ends with P = 0 (O = 0, lse =
// -inf) where the former code gave NaN (not with a dense mask, bias or soft-cap; on an earlier tile both give NaN, from
// alpha = 2^(inf - inf)); S that large needs |q . k| near 3e38 / scale_log2.
// Measured on the H100 (2026-12-06, session 54) with the plain kernel's form only (the index-masked one kept the
// former code; it spilled 32 bytes on schedule 5 in session 53's attempt): harness loop 1.007x-1.119x
// (do_bench 1.005x-1.135x) at D = 64, 128 and 256, T = 4096 to 16384; through TensorFlow (the 36-shape table, two
// runs, T >= 4096) the forward 1.04x-1.06x faster at D = 64, 1.00x-1.03x at 128, 0.99x-1.02x at 256; numerics pass
// but for the 10 nomask_bitwise cases, as expected of that version (benchmarks/RESULTS.md, "Hopper forward kernel"
// (aa)). This version (index-masked kernels too), on the H100 (2026-12-06, session 55, "Hopper forward kernel" (ab)):
// numerics 190 / 190 (the nomask_bitwise cases included), variants 493 / 493, memcheck clean (racecheck did not finish
// in its 200 s); harness loop A/B against the defaults, two runs: plain kernels 0.996x-1.042x (D = 128 1.001x-1.030x),
// dropout 1.009x-1.054x, but the index-masked kernels 0.964x-1.019x (a [B, Tk] key mask at D = 128 0.979x-0.994x, a
// causal window at D = 64 0.964x / 0.990x). On top of today's defaults (SKIP_RESCALE 2, SOFTMAX_UNDER_PV 1; H100,
// 2026-12-07, session 67, RESULTS.md "Hopper forward kernel" (af)): numerics 196 / 196, the plain kernels 1.018x-1.043x
// (D = 128 without a mask 1.018x-1.034x), the index-masked ones without dropout again 0.949x-0.985x, as session 55's form
// with one masking loop did (this one keeps two copies of it, mask_pass below: 7,312 SASS instructions against 6,472
// at D = 128, schedule 5). Off until the masked kernels' loss was understood and the GPU tests had run with it.
// Tried and removed (2026-12-07, session 69, benchmarks/RESULTS.md "Hopper forward kernel" (ah), commit 44517cd's
// FA_SM90_FWD_PARTIAL_EARLY): softmax_tile's per-tile test `partial` computed with the tile's k_valid loads, before the
// stage and S waits, after the SASS showed that this macro moves it after the wait for S. On the H100, a [B, Tk] key
// mask at D = 128, T = 4096, against the defaults (loop / do_bench): alone 0.941x / 0.962x, with this macro 0.947x /
// 0.945x, this macro alone 0.968x / 0.959x in the same call: not the cause of the index-masked kernels' loss with this
// macro, and a loss of its own. Nsight Compute in that call (one launch each): with full key lengths and no k_valid
// bytes, this macro makes the D = 128 index-masked kernel 2.9 % faster (850 against 876 us), so the loss measured
// with a key mask may be tied to its k_valid bytes or masked tiles (AB_LOOP_SET=fwdkeyfrac tells them apart).
// Default 128 since session 70 (2026-12-08, H100, RESULTS.md "Hopper forward kernel" (ai)): with
// FA_SM90_FWD_IDX_UNDER_PV the D = 128 index-masked kernels gain too (a [B, Tk] key mask 1.000x-1.035x, full lengths
// 1.022x-1.030x) where this macro alone lost 3 %; at D = 64 those kernels lose with it, up to 4 % alone and 4-7 % with
// FA_SM90_FWD_IDX_UNDER_PV, and D = 256's were not measured with it, so D = 64 and 256 keep the former code. Its
// values, as FA_SM90_FWD_IDX_UNDER_PV's (fwd_switch_on): 0 no kernel, 1 every head dim (what 1 meant in the
// single-file builds of sessions 54-69), else the head dims whose kernels take it, summed: 64, 128, 256, or e.g.
// 384 for 128 and 256 (each head dim is a bit of its own). A head dim's plain and index-masked kernels always agree,
// so an all-true key mask still gives the no-mask output bit for bit.
#ifndef FA_SM90_FWD_FFMA_SOFTMAX
#define FA_SM90_FWD_FFMA_SOFTMAX 128
#endif
// A per-head-dim switch's value v: on for every head dim (1), else for the head dims that v sums (64, 128 and 256 are
// bits of their own).
constexpr bool fwd_switch_on(int v, int D) { return v == 1 || (v & D) != 0; }
constexpr bool fwd_switch_valid(int v) { return v == 0 || v == 1 || (v > 0 && (v & ~(64 | 128 | 256)) == 0); }
static_assert(fwd_switch_on(1, 64) && fwd_switch_on(128, 128) && !fwd_switch_on(128, 64) && !fwd_switch_on(128, 256) &&
                  fwd_switch_on(384, 256) && fwd_switch_on(384, 128) && !fwd_switch_on(384, 64) &&
                  !fwd_switch_on(0, 128) && !fwd_switch_valid(2) && !fwd_switch_valid(96) && fwd_switch_valid(448),
              "fwd_switch_on / fwd_switch_valid");
static_assert(fwd_switch_valid(FA_SM90_FWD_FFMA_SOFTMAX),
              "FA_SM90_FWD_FFMA_SOFTMAX: 0, 1 (every head dim) or a sum of head dims among 64, 128, 256");
template <int D>
constexpr bool kFfmaSoftmax = fwd_switch_on(FA_SM90_FWD_FFMA_SOFTMAX, D);
// FA_SM90_FWD_SKIP_RESCALE (default 2, with FA_SM90_FWD_SOFTMAX_UNDER_PV 1; 0 gives the former forward back, which
// rescales O on every tile and keeps every tile's max; where each level takes effect: fwd_tile_consumer's
// kSkipRescaleK and kKeepMaxK). On the H200 (benchmarks/RESULTS.md "Hopper forward kernel" (ac), (ad), (ae)):
// level 1 alone 1.010x-1.022x at D = 128 without a mask from T = 8192, nothing elsewhere; level 2 alone 0.984x-1.017x; level 2
// with the softmax under P V, in every kernel, 1.016x-1.036x at D = 128 without a mask and 1.007x-1.023x at D = 64,
// but in the index-masked kernels 0.87x-0.94x with dropout and 0.96x-0.98x at D = 64. With this scope (the vote in
// the plain kernel only, the kept max in every kernel without dropout): 1.022x-1.031x at D = 128 without a mask
// (two runs), the index-masked kernels 0.990x-1.027x; numerics, variants and memcheck pass (RESULTS (ae)):
//   1: rescale_o skips O *= alpha when no row of the warp moved its max on this tile (alpha exactly 1 in all 16 rows:
//      a vote, warp-uniform, after the P V product's wait, so no accumulator is in flight). O * 1 is O bit for bit (no
//      FTZ in these builds; NaN stays NaN), so the outputs are the former code's. For independent scores a row's max
//      moves on tile n with probability 1 / (n + 1), so a warp skips about a third of the tiles at T = 4096 and two
//      thirds at 16384 (fewer with causal masks' shorter rows); 64 FMULs per thread at D = 128 (32 at 64, 128 at 256)
//      against about 350 other instructions per tile between a warpgroup's P V wait and its next issue.
//   2: 1 (in the plain kernel), and a row keeps its running max m unless the tile's max exceeds it by more than
//      kRescaleSlack (8, in the exponent's base-2 units), so P = 2^(S - m) <= 256 (bf16 / fp16 hold it; l and O in
//      float32), in every kernel but the dropout ones (kKeepMaxK: they keep the former code bit for bit). The result is
//      the same softmax (O = sum P V / sum P and lse = m + log l for any m), rounded differently: not the former code's
//      bits. After a row's first tiles its max rarely jumps by 2^8, so nearly every tile skips the rescale
//      (FlashAttention-4's conditional rescaling).
#ifndef FA_SM90_FWD_SKIP_RESCALE
#define FA_SM90_FWD_SKIP_RESCALE 2
#endif
constexpr bool kSkipRescale = FA_SM90_FWD_SKIP_RESCALE != 0;
constexpr float kRescaleSlack = 8.f;  // level 2's slack, in the exponent's base-2 units
// FA_SM90_FWD_SOFTMAX_UNDER_PV (default 1, 0 the former code; in the plain kernel only: kSoftmaxUnderPvK. On the
// H200 it is bit for bit the former code but not faster alone, 0.963x-1.014x, RESULTS.md "Hopper forward kernel" (ac); with SKIP_RESCALE 2
// the pair gains 1.016x-1.036x at D = 128 without a mask, as above): on the overlapped schedules (5, 7, 8,
// 10: the plain kernels' defaults), tile n's softmax is meant to run while P_{n-1} V_{n-1} is on the tensor cores
// (the source waits for that product after the softmax). ptxas 13.0 hoists the wait (WARPGROUP.DEPBAR.LE gsb0, 0x0)
// to the top of the basic block that holds the softmax: in the SASS of the D = 128 kernel on schedule 7 only the 64
// FMULs of S's scale run under the product; the row maxima, the 64 exp2 and the sums come after the wait. Counted in
// the SASS as MUFU.EX2 between the wait for S_n (DEPBAR.LE gsb0, 0x1) and that one: 0 in the plain kernels on
// schedules 5, 7, 8 and 10 (66 after it), and 64 of 130 in the index-masked ones on schedule 5 (those 64 are
// soft-cap's tanhf, in a branch that a call without soft-cap skips, next to 64 MUFU.RCP; session 69 read them: the
// softmax's 66 come after the wait on every path). 1 puts the softmax behind an always-taken branch (sh.Tk > 0, which the
// compiler cannot fold), so that the wait is in another basic block and the softmax runs under the product as
// written: 66 (130) between the two waits, none after. The same operations on the same values: the same bits.
#ifndef FA_SM90_FWD_SOFTMAX_UNDER_PV
#define FA_SM90_FWD_SOFTMAX_UNDER_PV 1
#endif
constexpr bool kSoftmaxUnderPv = FA_SM90_FWD_SOFTMAX_UNDER_PV != 0;
// FA_SM90_FWD_IDX_UNDER_PV (default 128, see below): the softmax under P V (the branch above) in the
// index-masked kernels without dropout too, without the skipped rescale's vote. Session 58's US1 / US2 ("Hopper forward
// kernel" (ad)) put both in every kernel: the D = 128 key-mask kernel gained 1.001x-1.022x, the D = 64 masked ones lost
// 2-4 % and the dropout ones 6-13 % (those run schedule 0, where the softmax under P V does not apply: the vote's
// cost). This form leaves the vote and the dropout kernels out. Nsight Compute (session 69, "Hopper forward kernel"
// (ah)): with nothing masked the D = 128 index-masked kernel takes 1.05x the plain kernel's time, and in its SASS
// every exp2 of the softmax comes after the wait for P V (sass_order.py --check counts 64 before it: soft-cap's tanhf;
// 130 with this macro). The same operations on the same values: the same bits, so an all-true key mask still gives
// the no-mask output bit for bit.
// Measured (session 70, H100, RESULTS.md "Hopper forward kernel" (ai); U = this macro, UF = with
// FA_SM90_FWD_FFMA_SOFTMAX, both for every head dim, loop A/B against the former defaults): U alone loses 2-8 % in
// the index-masked kernels (D = 64 5-8 %), UF gains 0-3.5 % at D = 128 but loses 4-7 % at D = 64. Default 128 (the
// D = 128 index-masked kernels without dropout), with FA_SM90_FWD_FFMA_SOFTMAX's values (fwd_switch_on).
#ifndef FA_SM90_FWD_IDX_UNDER_PV
#define FA_SM90_FWD_IDX_UNDER_PV 128
#endif
static_assert(fwd_switch_valid(FA_SM90_FWD_IDX_UNDER_PV),
              "FA_SM90_FWD_IDX_UNDER_PV: 0, 1 (every head dim) or a sum of head dims among 64, 128, 256");
template <int D>
constexpr bool kIdxUnderPv = fwd_switch_on(FA_SM90_FWD_IDX_UNDER_PV, D);
// The dropout kernel's schedule at D = 64 and 128 (schedule 0 when the variant asked for is 0). Schedule 0:
// on the H200 (2026-12-03, benchmarks/dropout_speed.py, schedule 0 against the former default 5, four
// alternating processes each, benchmarks/RESULTS.md "Dropout cost" (z)) the forward with dropout 0.1 took
// 0.90x-0.95x schedule 5's time at D = 64 and 0.96x-1.00x at D = 128 (means; B T = 16384, T = 4096 and
// 16384, causal or not); schedule 5's overlap keeps S, P and O live together beside the Philox code. With 0
// the dropout kernel has one instantiation per head dim and dtype (launch_sched).
constexpr int kDropVariant = 0;
// FA_SM90_FWD_DROP_UNDER (default 0: the tile's keep bits drawn after its softmax, apply_dropout): on the one-tile-at-
// a-time schedule the dropout kernel runs (0), the tile's keep bits drawn while its S = Q K^T product runs (between
// its issue and the wait; kBc / 2 bits per thread in registers), then applied after the softmax as apply_dropout
// applies them (a select, and at D > 64 the keep scale). The same bits on the same elements, so the same outputs
// (bit for bit, H100, 2026-12-06), but slower: the forward with dropout 1.10x-1.16x the default's time at T = 16384
// (dropout_speed.py; RESULTS.md "Dropout cost, kernel harness" (ae)); the kBc / 2 bits held across the product cost
// more than the overlap gives. Kept off.
#ifndef FA_SM90_FWD_DROP_UNDER
#define FA_SM90_FWD_DROP_UNDER 0
#endif
// Tried and removed (2026-12-05, benchmarks/RESULTS.md "Dropout cost" (aa), commit a39fc7b): the keep bits drawn
// by the producer warpgroup's warps 1 .. 3 into a shared-memory ring (the consumers reading 64 bits per thread per
// tile instead of drawing 8 Philox calls), on schedules 0, 6 and 5. Bitwise equal to schedule 0, but the three
// warps could not draw fast enough: on the H100 the forward with dropout 0.1 took 2.5x-3.8x the time without
// (schedule 0 here: 1.5x-1.8x). The draws stay with the consumers' eight warps.
// The dense mask / bias kernel's schedule at D = 64 and 128 (DENSE, a separate instantiation so that
// the index-masked kernel's registers are not spent on it; in FA_TUNING builds schedule 0 when the variant asked
// for is 0).
// Schedule 1, 0 spills; 5 spilled (see "Dense mask and bias" above) and ran 0.85x-0.9x as fast with a
// bias (H200, 2026-12-02); FA_SM90_FWD_DENSE_VARIANT builds another for such comparisons.
#ifndef FA_SM90_FWD_DENSE_VARIANT
#define FA_SM90_FWD_DENSE_VARIANT 1
#endif
constexpr int kDenseVariant = FA_SM90_FWD_DENSE_VARIANT;
static_assert(kDenseVariant >= 0 && kDenseVariant <= 6, "the dense kernel: a 2-consumer schedule, one tile per CTA");
// Key tiles ahead of their use that the IDX kernel prefetches a dense mask's / bias' rows into L2
// (prefetch_dense in the consumer; 0: none, the former code).
#ifndef FA_SM90_FWD_DENSE_PREFETCH
#define FA_SM90_FWD_DENSE_PREFETCH 2
#endif
constexpr int kDensePrefetch = FA_SM90_FWD_DENSE_PREFETCH;
// Elements of a dense mask / bias that softmax_tile reads before using any.
#ifndef FA_SM90_FWD_DENSE_BATCH
#define FA_SM90_FWD_DENSE_BATCH 16
#endif
constexpr int kDenseBatch = FA_SM90_FWD_DENSE_BATCH;
static_assert(kDenseBatch > 0 && 32 % kDenseBatch == 0 && kDenseBatch % 4 == 0,
              "kDenseBatch: whole n-tiles (4 elements), dividing the D = 256 tile's 32 elements");
static_assert(kDefaultVariant >= 0 && kDefaultVariant < kNumVariants, "the default is one of kSched");
// The persistent schedule's fallback when its tile count does not fit its 32-bit tile index: the
// same schedule on the one-CTA-per-tile grid.
constexpr int kPersistentVariant = 7, kPersistentFallback = 5;
// Schedule 7 with its tiles from an atomic counter (the default of the plain D = 128 kernel with a causal
// mask, where the static stride leaves the tiles unbalanced; H200, 2026-12-02: 1.00x-1.04x schedule 5 at
// T = 2048 .. 16384, 1.08x / 1.23x at 1024 / 512, bitwise equal to schedule 0, benchmarks/RESULTS.md
// "Hopper forward kernel" (p)): a 4-byte counter in the
// workspace (fwd_workspace_bytes), zeroed by a memset before each launch; the producer thread takes
// each next tile index from it and hands it to the consumers through a 2-slot ring in shared memory
// (tile_full / tile_empty barriers), so that causal tiles balance as the hardware's dispatch of the
// grid does while the epilogue and the next tile's loads overlap as in schedule 7.
constexpr int kDynamicVariant = 10;
static_assert(kSched[kDynamicVariant].dynamic && kSched[kDynamicVariant].persistent &&
                  kSched[kDynamicVariant].stages == kSched[kPersistentFallback].stages,
              "variant 10 is variant 7 with dynamic tiles");
static_assert(kSched[kPersistentVariant].persistent && !kSched[kPersistentFallback].persistent &&
                  kSched[kPersistentVariant].stages == kSched[kPersistentFallback].stages,
              "variant 7 is variant 5 on a persistent grid");
// The schedules a release build compiles for the plain / index-masked kernel of head dim D (launch_plain): the
// ones fwd_schedule picks when none is asked for, with their fallbacks (8 and 5 at D = 64 without index masks; 7,
// 10 and 5 at D = 128 without; 5 with them), and schedule 0, the reference of the bitwise checks and the
// tma_store schedules' fallback (launch). The dense mask / bias kernel has kDenseVariant alone (launch_dense).
// The others exist for kernel work only: FA_TUNING builds compile every schedule for every kernel
// (NVCC_EXTRA=-DFA_TUNING for the harness; gpu_run.sh sm90 with SM90_TUNING=1). Schedules 1, 2, 3, 4, 6 and 9
// took over a third of this file's compile time, the build's longest (2026-12-05: the full build over 10 minutes
// on the 2-core CI machine); 7 and 10 at D = 64 or with index masks, and the dense kernel's schedule 0 at D = 64
// and 128, 16 more kernels, which only a request could reach. A release build runs a kernel's default for a
// request of a schedule that kernel lacks (TF_FLASHATTN_SM90_FWD_VARIANT; fwd_schedule); set_fwd_variant refuses,
// and TF_FLASHATTN_SM90_FWD_VARIANT ignores, one that no kernel has.
constexpr bool schedule_built_for(int v, int D, bool IDX) {
#ifdef FA_TUNING
  (void)D, (void)IDX;
  return v >= 0 && v < kNumVariants;
#else
  if (v == 0 || v == kDefaultVariant) return true;
  if (IDX) return FA_SM90_FWD_IDX64_3WG != 0 && D == 64 && v == kDefaultVariantD64;
  return D == 64 ? v == kDefaultVariantD64 : v == kPersistentVariant || v == kDynamicVariant;
#endif
}
// Some plain / index-masked kernel has schedule v.
constexpr bool schedule_built(int v) { return schedule_built_for(v, 64, false) || schedule_built_for(v, 128, false); }
// The dense kernel's schedule 0 at D = 64 and 128 (the D = 256 one always runs 0).
#ifdef FA_TUNING
constexpr bool kDenseZeroBuilt = true;
#else
constexpr bool kDenseZeroBuilt = kDenseVariant == 0;
#endif
static_assert(schedule_built_for(kPersistentFallback, 128, false) && schedule_built_for(0, 64, true) &&
                  schedule_built_for(0, 128, true) && kDropVariant == 0,
              "the fallbacks are release-built, and the dropout kernel's schedule is 0 (launch_sched)");
// Schedules 8 and 9 (8 the default of the plain D = 64 kernel; TF_FLASHATTN_SM90_FWD_VARIANT or the
// harness's set_sm90_fwd_variant picks another): FlashAttention-3's head-dim-64 tile. At D = 64 the softmax of a
// 64 x 128 S tile costs what it costs at D = 128 for half the tensor-core work (Nsight Compute on the
// H200: tensor pipe active 43 % of cycles at D = 64, 68 % at D = 128), so a third consumer warpgroup
// gives the tensor cores a third warpgroup's products to run under each softmax:
//   CTA = 4 warpgroups (512 threads): the producer (setmaxnreg.dec to kProducerRegs = 24) and 3
//   consumers (setmaxnreg.inc to kConsumerRegs3 = 160), query tile kBrOf<V> = 192 rows (64 per
//   consumer), key tiles of 128 as before. Registers: __launch_bounds__(512, 1) caps the launch at
//   65536 / 512 = 128 per thread, the CTA's pool 512 x 128 = 65536 >= 128 x 24 + 384 x 160 = 64512
//   (setmaxnreg: multiples of 8 in [24, 256]; 168 would need 67584). A consumer's peak in schedule 5's
//   overlap is S_{n+1} (64 floats) + P_n (32 words) + O (32 floats) + row state (ptxas -v: 0 spills).
//   Shared memory: Q 192 x 64 x 2 B = 24 KiB + 3 stages x (K + V) 2 x 16 KiB = 120 KiB (+ barriers,
//   1 KiB alignment slack).
//   Schedule 8 is schedule 5 (3 stages, overlap, TMA store of O) with the ping-pong made a ring:
//   consumer c waits on named barrier 1 + c (256 threads: its own 128 and its predecessor's 128) and
//   arrives on barrier 1 + (c + 1) % 3 after issuing, the last consumer opening the first turn and
//   skipping its last arrival (each barrier: N + 1 phases, at most one arrival ahead of its waiter),
//   so the issue order is 0, 1, 2, 0, 1, 2, ... (FlashAttention-3 orders its 3 warpgroups the same
//   way). Schedule 9 is 8 without the turns (schedule 2's free issue, 3 stages, TMA store), to tell
//   whether the ordering helps at 3 warpgroups. The TMA store's per-warpgroup barriers move from
//   3 + c to 1 + consumers + c (4, 5, 6) so that they do not meet the ring's 1 .. 3.
//   Masks: the query tile's key tiles are QueryTileKeys<192, 128>'s (the plain kernel: from key 0 to
//   the last row's key_end, any causal offset), ke_cta is the first of the 192 rows', each row masks
//   with its own key_end: the causal code is the 128-row tile's with the tile size changed. A row may
//   visit key tiles past its key_end that its 128-row tile did not (or fewer than it did, all of
//   them past its key_end): for such a tile every S of the row is -inf, so m is unchanged, alpha =
//   ex2(0) = 1, P = 0, l and O unchanged exactly (a row that sees no key at all keeps m = -inf, l =
//   0, O = 0 in both). Each row's arithmetic is the 128-row tile's in the same order (the same key
//   tiles, the same quad of threads by column): O and lse are expected to equal schedule 0's bit
//   for bit, as the other schedules'.
//   Only the plain kernel (no index masks, dropout, soft-cap, dense mask or bias) at D = 64, bf16 and
//   fp16: anything else asking for 8 or 9 runs kWideFallback (5); so does Tq > 2^31 - 192
//   (fwd_applies' bound is for 128-row tiles). On the H200 (2026-12-01, gpu_run.sh sm90, vbench, bf16,
//   H = 32, B*T = 16384): schedule 8 437 / 376 / 478 / 449 TFLOP/s at T = 4096 / 4096 causal / 16384 /
//   16384 causal against schedule 5's 386 / 356 / 412 / 400 and 9's 414 / 351 / 453 / 424 (cuDNN 453 /
//   414 / 453 / 440); numerics, 88 / 88 cases bitwise equal to schedule 0, memcheck clean: the default
//   (kDefaultVariantD64).
constexpr int kConsumerRegs3 = 160;
static_assert(128 * kProducerRegs + 128 * 3 * kConsumerRegs3 <= 512 * (65536 / 512),
              "register file: the pool of a 512-thread launch at 128 registers per thread");
static_assert(kConsumerRegs3 % 8 == 0 && kProducerRegs % 8 == 0, "setmaxnreg takes multiples of 8");
constexpr int kWideFallback = 5;
static_assert(schedule_built_for(kWideFallback, 64, false) && schedule_built_for(kWideFallback, 64, true),
              "the 3-consumer schedules' fallback is release-built");
// Per schedule: consumer warpgroups, query rows per CTA, threads per CTA, consumer registers.
template <int V>
constexpr int kConsumersOf = kSched[V].consumers;
template <int V>
constexpr int kBrOf = 64 * kSched[V].consumers;
template <int V>
constexpr int kThreadsOf = 128 * (1 + kSched[V].consumers);
template <int V>
constexpr int kConsumerRegsOf = kSched[V].consumers == 2 ? kConsumerRegs : kConsumerRegs3;
static_assert(kBrOf<0> == kBr && kThreadsOf<0> == kThreads && kConsumersOf<0> == kConsumers,
              "the 2-consumer schedules keep the first tile");
static_assert(kSched[kWideFallback].consumers == 2 && kSched[8].consumers == 3 && kSched[9].consumers == 3,
              "schedules 8 and 9 are the 3-consumer ones");

template <int D, int kStages = 2, int kBc = kKeyTile<D>, bool kPersistent = false, int kRows = kBr,
          bool kDynamic = false>
struct SmemLayout {
  static constexpr int kQBytes = kRows * D * 2;  // kRows: the query tile (kBrOf<V>)
  static constexpr int kKVBytes = kBc * D * 2;
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kQBytes;                     // + stage * kKVBytes
  static constexpr int kV = kK + kStages * kKVBytes;          // + stage * kKVBytes
  static constexpr int kBars = kV + kStages * kKVBytes;       // q_full, full[kStages], empty[kStages]
  static constexpr int kQEmpty = kBars + 8 * (1 + 2 * kStages);  // (persistent only) q_empty
  // (dynamic only) the tile ring: tile_full[2], tile_empty[2], then the two slots' tile indices
  static constexpr int kTileRing = kQEmpty + (kPersistent ? 8 : 0);
  static constexpr int kBytes = kTileRing + (kDynamic ? 4 * 8 + 2 * 4 : 0);
  static constexpr int kAlloc = kBytes + 1024;                // slack to align the base to 1024
};
static_assert(SmemLayout<128, 3>::kAlloc <= 227 * 1024, "3 stages at D = 128 exceed the opt-in shared memory");
static_assert(SmemLayout<128, 3, 128, true, kBr, true>::kAlloc <= 227 * 1024, "the persistent schedules exceed the opt-in shared memory");
static_assert(SmemLayout<256, 2>::kAlloc <= 227 * 1024, "2 stages of 64 keys at D = 256 exceed the opt-in shared memory");
static_assert(SmemLayout<64, 3, 128, false, 192>::kAlloc <= 227 * 1024, "schedule 8's 192-row tile at D = 64");
static_assert(SmemLayout<64, 3, 128, false, 192>::kK % 1024 == 0, "K / V tiles 1024-byte aligned after 192 Q rows");

// The persistent schedule's tiles (kSched's `persistent`): tile index t in [0, num) of the
// (m_block, head, batch) work, ordered for the L2 and for causal balance, FlashAttention-3's
// "longest processing time first" order: the (batch, head) pairs in sections of consecutive pairs
// whose K and V fit in a budget of L2 (query heads of one GQA group count once; tile_order(): 32 MiB
// for the persistent grid with a causal mask, one pair or GQA group without, kGridSectionBytes for the
// one-CTA-per-tile grid with a causal mask), balanced (ng = ceil(pairs / most pairs per section)
// sections, the first pairs % ng of them one pair larger), section after section; within a section,
// m_block from the last (the longest causal rows) to the first, the section's heads inner (common's
// grouped_tile, as the backward's tile order). Computed on the host (launch()), read from the
// kernel's parameter space (no registers in the producer's 24 until used).
struct TileOrder {
  int n_m = 1;     // query tiles per (batch, head): ceil(Tq / rows)
  int H = 1;       // heads
  int g = 1;       // (batch, head) pairs per section: the first `big` sections g + 1, the others g
  int big = 0;
  int num = 1;     // n_m * H * B (< 2^30: launch() falls back to kPersistentFallback above)
  int grid = 0;    // the one-CTA-per-tile schedules: 1 when the CTAs take their tiles in this order
                   // (the linear block index as t; causal masks, launch()), 0 from blockIdx as launched
  // The tile at index t: m_block, head h, batch b.
  __device__ __forceinline__ void at(int t, int& m_block, int& h, int& b) const {
    int q, bh;
    grouped_tile(t, n_m, g, big, q, bh);
    m_block = n_m - 1 - q;
    b = bh / H;
    h = bh - b * H;
  }
};

// One query tile (m_block, head h, batch b; its key tiles `keys`) of the consumer warpgroups: the
// main loop and the epilogue (the body of the one-CTA-per-tile kernel, unchanged but for the K / V
// ring's position and the Q barrier's parity). kv0: the K / V tiles this CTA consumed before this
// tile (the ring's stage and phase run on across a persistent CTA's tiles; 0 otherwise); q_parity:
// the phase parity of q_full for this tile (the persistent kernel loads Q once per tile that has
// key tiles). Persistent: every consumer thread arrives on q_empty when this tile's Q rows (and O,
// stored through them) are no longer read, so that the producer may load the next tile's Q.
// kBr below is the schedule's query tile (kBrOf<V>: 128, or 192 with 3 consumers), kC its consumer
// warpgroups; the 2-consumer schedules' code is the same as before either existed.
template <typename T, int D, bool IDX, bool DROP, int V, bool DENSE>
__device__ __forceinline__ void fwd_tile_consumer(const CUtensorMap& tm_o, const FlashFwdParams& p, uint32_t base,
                                                  int m_block, int h, int b,
                                                  const QueryTileKeys<kBrOf<V>, kKeyTile<D>>& keys, uint32_t kv0,
                                                  uint32_t q_parity) {
  constexpr Sched kS = kSched[V];
  constexpr int kStages = kS.stages;
  constexpr int kBc = kKeyTile<D>;
  constexpr int kBr = kBrOf<V>;  // (shadows the namespace's 128)
  constexpr int kC = kConsumersOf<V>;
  using L = SmemLayout<D, kStages, kBc, kS.persistent, kBr, kS.dynamic>;
  const uint32_t q_full = base + L::kBars;
  const uint32_t full0 = q_full + 8, empty0 = q_full + 8 * (1 + kStages);
  const uint32_t q_empty = base + L::kQEmpty;
  const AttnShape& sh = p.shape;
  const int64_t Tq = sh.Tq;
  const int64_t m0 = static_cast<int64_t>(m_block) * kBr;
  const int n_tiles = keys.ntiles;
  const int j_first = static_cast<int>(keys.jstart);
  const int wg = threadIdx.x / 128;
  // Stage and phase parity of this tile's n-th K / V tile in the ring (kv0 tiles before it).
  auto stage = [&](int n) {
    if constexpr (kSched[V].persistent) return static_cast<int>((kv0 + n) % kStages);
    else return n % kStages;
  };
  auto phase = [&](int n) {
    if constexpr (kSched[V].persistent) return static_cast<int>(((kv0 + n) / kStages) & 1);
    else return (n / kStages) & 1;
  };

  // ---- Consumer warpgroups: 64 query rows each. ----
  const int c = wg - 1;
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t wrow0 = m0 + c * 64 + warp * 16;  // this warp's 16 rows
  const int64_t row[2] = {wrow0 + g, wrow0 + g + 8};
  const float scale_log2 = p.score.scale * 1.4426950408889634f;
  // IDX: soft-cap (Gemma's logit cap), s = c tanh(scale S / c) before the softmax, as sm80's
  // (common/flash_cuda_common.cuh, tile_logit: tanhf, not an approximation). CTA-uniform; the
  // tile's values are then in base-2 units already (cap_log2), so the masking multiplies by 1.
  const float softcap = IDX ? p.score.softcap : 0.f;
  const float inv_cap = softcap != 0.f ? 1.f / softcap : 0.f;
  const float cap_log2 = softcap * 1.4426950408889634f;
  // DENSE: a dense [B, H, Tq, Tk] mask and an additive bias (both broadcast through their strides;
  // column stride 1 or 0, fwd_applies), element by element as sm80's score_elem: x = log2e
  // (softcap(scale S) + bias), -inf where the mask is false. Row pointers of this thread's two rows,
  // once (softmax_tile reads kDenseBatch elements at a time from them).
  // Not in the dropout kernel (its registers are spoken for: it spilled at D = 128): with dropout,
  // a dense mask or bias take sm80's kernels (fwd_applies).
  constexpr bool kDense = IDX && !DROP && DENSE;
  static_assert(!DENSE || (IDX && !DROP), "the dense kernel is an index-masked one without dropout");
  // Where the two forward candidates take effect. In the index-masked kernels the pair made the forward slower on the
  // H200 (with dropout 0.87x-0.94x, a causal window at D = 64 0.96x; benchmarks/RESULTS.md "Hopper forward kernel"
  // (ad)), so the skipped rescale's vote and the softmax under P V are the plain kernel's only. The kept max (level 2)
  // changes the rounding, so it is in every kernel without dropout, the index-masked ones too: an all-true key mask
  // still gives the no-mask output bit for bit (sm90_check.py's nomask_bitwise cases); it costs a compare and a
  // select per row and tile. The dropout kernels keep the former code bit for bit.
  constexpr bool kSkipRescaleK = kSkipRescale && !IDX;
  constexpr bool kKeepMaxK = FA_SM90_FWD_SKIP_RESCALE >= 2 && !DROP;
  constexpr bool kSoftmaxUnderPvK = kSoftmaxUnderPv && (!IDX || (kIdxUnderPv<D> && !DROP));
  constexpr bool kFfma = kFfmaSoftmax<D>;  // FA_SM90_FWD_FFMA_SOFTMAX for this head dim
  const bool* mrow[2] = {nullptr, nullptr};
  const T* brow[2] = {nullptr, nullptr};
  int64_t mstride = 0, bstride = 0;
  if constexpr (kDense) {
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) dense_row_ptrs(p.mask, p.score, Tq, b, h, row[h2], mrow[h2], brow[h2]);
    mstride = p.mask.mask_stride[3];
    bstride = p.score.bias_stride[3];
  }
  const bool has_mask = kDense && p.mask.mask != nullptr, has_bias = kDense && p.score.bias != nullptr;
  const bool dense = has_mask || has_bias;  // CTA-uniform
  // Column pairs (8 jn + 2 t, + 1; even offsets from the row) in one load where the rows are contiguous
  // and aligned for it (per thread: both of its rows).
  const bool mpair = mstride == 1 && ((reinterpret_cast<uintptr_t>(mrow[0]) | reinterpret_cast<uintptr_t>(mrow[1])) & 1u) == 0;
  const bool bpair = bstride == 1 && ((reinterpret_cast<uintptr_t>(brow[0]) | reinterpret_cast<uintptr_t>(brow[1])) & 3u) == 0;
  const bool pairs_ok = (!has_mask || mpair) && (!has_bias || bpair);
  // Each row's first element (a tensor broadcast over the keys, column stride 0, has no other; see
  // softmax_tile), once: the row pointers are inside the tensors (Tk >= 1, rows below Tq).
  unsigned char mval[2] = {0, 0};
  T bval[2] = {Elem<T>::from_f(0.f), Elem<T>::from_f(0.f)};
  if constexpr (kDense) {
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      if (has_mask) mval[h2] = *reinterpret_cast<const unsigned char*>(mrow[h2]);
      if (has_bias) bval[h2] = brow[h2][0];
    }
  }
  // Keys [kb, ke) each of this thread's two rows sees (row_info: causal / window / lengths; an
  // invalid row or one past q_lengths sees none, so it ends with O = 0 and lse = -inf). Rows past
  // Tq are never written: live = false, they take no part in the masking decision.
  // Without IDX (no window, lengths or validity masks: klim = Tk, every row starts at key 0): the
  // keys of row i are [0, key_end(i)), key_end non-decreasing in i, so a tile [j0, j0 + kBc) is
  // seen whole by every row of the CTA when it is by its first row m0 (ke_cta; CTA-uniform, as at
  // dab104b, so the branch on it is a uniform one); rows past Tq (never written) need no care.
  int kb[2], ke[2];
  bool live[2];
  int ke_cta = 0;
  if constexpr (IDX) {
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const RowInfo ri = row_info(p.mask, sh, b, row[h2], keys.qlim, keys.klim);
      const int64_t e = ri.ke < keys.klim ? ri.ke : keys.klim;
      const int64_t s0 = ri.kb < e ? ri.kb : e;  // kb in [0, ke]: an empty range stays empty
      kb[h2] = ri.ok ? static_cast<int>(s0) : 0;
      ke[h2] = ri.ok ? static_cast<int>(e) : 0;
      live[h2] = row[h2] < Tq;
    }
  } else {
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) ke[h2] = static_cast<int>(p.mask.key_end(row[h2], sh.Tk));  // <= Tk
    ke_cta = static_cast<int>(p.mask.key_end(m0, sh.Tk));
  }
  const bool* k_valid = IDX && p.mask.k_valid ? p.mask.k_valid + static_cast<int64_t>(b) * sh.Tk : nullptr;
  const int klim = static_cast<int>(keys.klim);
  DropTile drop{};
  if constexpr (DROP) drop = drop_tile(p.dropout, b, h);  // the Philox key, once

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  const uint32_t q_tile = base + L::kQ + c * 64 * 128;  // this warpgroup's 64 rows in each panel
  // S = Q K^T for the tile at k_tile: [64 x kBc], contraction over D in k16 steps (issue only).
  auto issue_qk = [&](float (&sacc)[kBc / 2], uint32_t k_tile) {
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      const uint32_t koff = (k % 4) * 32;  // k16 step within the 128-byte row
      const uint64_t da = wgmma_desc(q_tile + (k / 4) * kBr * 128 + koff, 16, 1024);
      const uint64_t db = wgmma_desc(k_tile + (k / 4) * kBc * 128 + koff, 16, 1024);
      if constexpr (kBc == 128) wgmma_ss_m64n128k16(WgmmaType<T>{}, sacc, da, db, k > 0);
      else wgmma_ss_m64n64k16<0, 0>(WgmmaType<T>{}, sacc, da, db, k > 0);
    }
  };
  // O += P V: contraction over the tile's keys in k16 steps (16 rows of V = 2048 bytes; issue only).
  auto issue_pv = [&](const uint32_t (&pa)[kBc / 16][4], uint32_t v_tile) {
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk)
      wgmma_rs_m64nDk16_tb<T, D>(o, pa[kk], wgmma_desc(v_tile + kk * 16 * 128, kBc * 128, 1024));
  };
  // k_valid's bytes of the tile at j0, kKeysPerLane consecutive keys per lane (lane L: keys j0 +
  // kKeysPerLane L + e in kv.b[e]; the warp covers the tile's kBc keys, one 128- or 64-byte span),
  // issued before the waits for the stage and for S (by the caller) so that their latency hides
  // under them; softmax_tile votes on them ("all keys of the tile valid": a vote instead of the
  // per-thread kBc / 4 byte loads on the critical path). Byte loads, each kept in its own register
  // until softmax_tile tests it: a word load would need 4-byte alignment, which the row base
  // k_valid + b Tk lacks for odd Tk, and combining bytes here would wait for them here. All zero
  // (not all valid: softmax_tile loads the per-thread bits) without k_valid or when the tile
  // reaches past klim (keys invalid there; the row may end before the tile does).
  constexpr int kKeysPerLane = kBc / 32;  // 4 at kBc = 128, 2 at kBc = 64
  struct KeyBytes {
    uint32_t b[kKeysPerLane];
  };
  auto load_key_bytes = [&](int j0) {
    KeyBytes kv{};
    if constexpr (IDX) {
      if (k_valid && j0 + kBc <= klim) {
        const unsigned char* kp = reinterpret_cast<const unsigned char*>(k_valid) + j0 + kKeysPerLane * lane;
#pragma unroll
        for (int e = 0; e < kKeysPerLane; ++e) kv.b[e] = __ldg(kp + e);  // read-only in the kernel
      }
    }
    return kv;
  };
  // Dense mask / bias rows of the key tile at j0 into L2 (prefetch_l2; kDensePrefetch tiles ahead of
  // their use, FA_SM90_FWD_DENSE_PREFETCH): each thread's two rows are shared by its 4 lanes t, so lane
  // t takes row h2 = t / 2 and the half (t % 2) of the tile's kBc keys, one line of each tensor (the
  // elements themselves are read in softmax_tile, every one inside the tensors, those not visible
  // discarded: the same values). Only rows below Tq and keys below Tk, tiles this CTA visits (j0 < j_end).
  const int j_end = j_first + n_tiles * kBc;
  auto prefetch_dense = [&](int j0) {
    if constexpr (kDense && kDensePrefetch > 0) {
      // Selects, not live[t >> 1]: a run-time index would put the arrays in local memory.
      const bool upper = (t & 2) != 0;
      const T* const br = upper ? brow[1] : brow[0];
      const bool* const mr = upper ? mrow[1] : mrow[0];
      const int64_t col = j0 + (t & 1) * (kBc / 2);
      if (dense && j0 < j_end && (upper ? live[1] : live[0]) && col < sh.Tk) {
        if (br) prefetch_l2(br + col * bstride);
        if (mr) prefetch_l2(mr + col * mstride);
      }
    }
  };
  // Masks, scale and online softmax of the S tile of keys j0 .. j0 + kBc - 1 (kv: its
  // load_key_bytes): sacc becomes the unnormalized P, m and l move on, and alpha[h2] is the factor
  // O's rows h2 must be scaled by.
  auto softmax_tile = [&](float (&sacc)[kBc / 2], int j0, const KeyBytes& kv, float (&alpha)[2]) {
    // FA_SM90_FWD_FFMA_SOFTMAX: S left unscaled where the scale is positive, but for a dense mask, bias or soft-cap
    // (the plain kernel has none), and mul_exp, what P's exponent multiplies S by, applies it (1 where S is scaled
    // already). CTA-uniform.
    const bool defer = kFfma && scale_log2 > 0.f && !dense && softcap == 0.f;
    const float mul_exp = defer ? scale_log2 : 1.f;
    // Masks (sm80's fwd_tile_scores, decided per warp): element (row, col) is visible when
    // kb(row) <= col < ke(row) and k_valid[col]. Only warps with a live row whose range does not
    // cover the whole tile, or with a key of the tile invalid, mask per element; the others take
    // the plain kernel's instruction stream (S * scale only; with FA_SM90_FWD_FFMA_SOFTMAX the scale deferred to P's
    // exponent, as the plain kernel's).
    // An all-true padding mask costs
    // kKeysPerLane byte loads per lane (load_key_bytes) and a vote per tile.
    if constexpr (IDX) {
      float mul = defer ? 1.f : scale_log2;  // what the masking below multiplies S by (defer: S * 1, exactly S)
      if (softcap != 0.f) {
#pragma unroll
        for (int i = 0; i < kBc / 2; ++i) sacc[i] = cap_log2 * tanhf((sacc[i] * p.score.scale) * inv_cap);
        mul = 1.f;
      }
      // All kBc / 4 bits set (32 at kBc = 128, 16 at kBc = 64): every key of this thread's columns valid.
      constexpr uint32_t kAllKeys = kBc >= 128 ? 0xffffffffu : (1u << (kBc / 4)) - 1u;
      uint32_t kv_bits = kAllKeys;  // bit 2 jn + e: key j0 + 8 jn + 2 t + e passes k_valid
      if (k_valid) {
        bool lane_valid = true;  // this lane's kKeysPerLane keys all valid
#pragma unroll
        for (int e = 0; e < kKeysPerLane; ++e) lane_valid &= kv.b[e] != 0;
        if (!__all_sync(0xffffffffu, lane_valid)) {  // warp-uniform: some key invalid or past klim
          kv_bits = 0;
#pragma unroll
          for (int jn = 0; jn < kBc / 8; ++jn)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int col = j0 + 8 * jn + 2 * t + e;
              kv_bits |= static_cast<uint32_t>(col < klim && k_valid[col]) << (2 * jn + e);
            }
        }
      }
      bool partial = false;
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) partial |= live[h2] && !(kb[h2] <= j0 && ke[h2] >= j0 + kBc);
      // Warp-uniform (a vote), so that the branch is taken once per tile around the two loops rather
      // than per element inside one (which ptxas 13.0 kept as 64 branches per 128-key tile). The same
      // values either way: x = S * mul (S * scale_log2; S itself where defer; the capped S with soft-cap), then
      // -inf where not visible.
      if (dense) {  // a dense mask or bias: every element through score_elem's rule
        // kDenseBatch elements at a time: their mask bytes and bias values loaded first, then used,
        // each load predicated on its column being below Tk (rows past Tq read row Tq - 1: see
        // brow) and addressed from one pointer per row and tile plus an immediate. A tensor
        // broadcast over the keys (column stride 0) loads nothing here: its row's value (mval /
        // bval) stands for every element. Elements that are not visible discard what was read.
        // The former code branched around each element's dependent loads (mask byte, then bias),
        // which ptxas kept in order: 2 x 64 memory round trips one after another per tile and thread
        // (SASS of the D = 128 kernel, 2026-12-02); the values are the same.
        const int lim = static_cast<int>(sh.Tk - j0) - 2 * t;  // column 8 jn + e of the pair base is < Tk
        const int lim_m = mstride != 0 ? lim : 0, lim_b = bstride != 0 ? lim : 0;
        const unsigned char* mq[2];
        const T* bq[2];
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2) {
          mq[h2] = has_mask ? reinterpret_cast<const unsigned char*>(mrow[h2]) + j0 + 2 * t : nullptr;
          bq[h2] = has_bias ? brow[h2] + j0 + 2 * t : nullptr;
        }
        // Paired: columns off, off + 1 of a row (elements u, u + 1) read as one 2-byte mask / 4-byte bias
        // load, on tiles whose columns are all below Tk when every thread's rows allow it (mpair /
        // bpair; a warp-uniform choice, so that the branch is taken once per tile).
        auto batches = [&](auto paired_c) {
          constexpr bool kPaired = decltype(paired_c)::value;
#pragma unroll
          for (int i0 = 0; i0 < kBc / 2; i0 += kDenseBatch) {
            unsigned char mv[kDenseBatch];
            T bv[kDenseBatch];
#pragma unroll
            for (int u = 0; u < kDenseBatch; u += 2) {
              const int i = i0 + u, h2 = (i / 2) & 1, off = 8 * (i / 4);
              mv[u] = mv[u + 1] = mval[h2];
              bv[u] = bv[u + 1] = bval[h2];
              if constexpr (kPaired) {
                if (has_mask) {
                  const unsigned short w = __ldg(reinterpret_cast<const unsigned short*>(mq[h2] + off));
                  mv[u] = static_cast<unsigned char>(w & 0xffu);
                  mv[u + 1] = static_cast<unsigned char>(w >> 8);
                }
                if (has_bias) {
                  const uint32_t w = *reinterpret_cast<const uint32_t*>(bq[h2] + off);
                  const unsigned short lo = static_cast<unsigned short>(w & 0xffffu);
                  const unsigned short hi = static_cast<unsigned short>(w >> 16);
                  memcpy(&bv[u], &lo, 2);
                  memcpy(&bv[u + 1], &hi, 2);
                }
              } else {
                if (has_mask && off < lim_m) mv[u] = __ldg(mq[h2] + off);
                if (has_mask && off + 1 < lim_m) mv[u + 1] = __ldg(mq[h2] + off + 1);
                if (has_bias && off < lim_b) bv[u] = bq[h2][off];
                if (has_bias && off + 1 < lim_b) bv[u + 1] = bq[h2][off + 1];
              }
            }
#pragma unroll
            for (int u = 0; u < kDenseBatch; ++u) {
              const int i = i0 + u, h2 = (i / 2) & 1;
              const int jl = 8 * (i / 4) + 2 * t + (i & 1);  // column within the tile
              bool vis = jl >= kb[h2] - j0 && jl < ke[h2] - j0 && ((kv_bits >> (2 * (i / 4) + (i & 1))) & 1u);
              if (has_mask) vis = vis && mv[u] != 0;
              float x = sacc[i] * mul;
              if (has_bias) x += Elem<T>::to_f(bv[u]) * 1.4426950408889634f;
              sacc[i] = vis ? x : -INFINITY;
            }
          }
        };
        if (__all_sync(0xffffffffu, pairs_ok) && j0 + kBc <= sh.Tk) batches(std::true_type{});
        else batches(std::false_type{});
      } else if (__any_sync(0xffffffffu, partial || kv_bits != kAllKeys)) {
        // kFfma: without the multiply where mul is 1 (defer, soft-cap: S * 1 is S exactly), a CTA-uniform branch
        // around two copies of the loop (one FMUL per element less on masked tiles; not yet timed on a GPU).
        auto mask_pass = [&](auto unit_c) {
#pragma unroll
          for (int i = 0; i < kBc / 2; ++i) {
            const int h2 = (i / 2) & 1;
            const int jl = 8 * (i / 4) + 2 * t + (i & 1);  // column within the tile
            const bool vis = jl >= kb[h2] - j0 && jl < ke[h2] - j0 && ((kv_bits >> (2 * (i / 4) + (i & 1))) & 1u);
            const float x = decltype(unit_c)::value ? sacc[i] : sacc[i] * mul;
            sacc[i] = vis ? x : -INFINITY;
          }
        };
        if (kFfma && mul == 1.f)
          mask_pass(std::true_type{});
        else
          mask_pass(std::false_type{});
      } else if (!defer) {
#pragma unroll
        for (int i = 0; i < kBc / 2; ++i) sacc[i] *= mul;
      }
    } else {
      // The same values as the IDX branch (x = S * scale_log2, -inf where key j0 + jl >= ke(row)),
      // with one CTA-uniform branch per tile around the masking instead of one per element.
      // (defer: S left unscaled, as the IDX branch without a dense mask, bias or soft-cap; mul_exp applies it below.)
      if (!defer) {
#pragma unroll
        for (int i = 0; i < kBc / 2; ++i) sacc[i] *= scale_log2;
      }
      if (j0 + kBc > ke_cta) {
        // lim[h2]: the first column (within the tile, less 2 t) that row h2 does not see.
        const int lim[2] = {ke[0] - j0 - 2 * t, ke[1] - j0 - 2 * t};
#pragma unroll
        for (int i = 0; i < kBc / 2; ++i)
          if (8 * (i / 4) + (i & 1) >= lim[(i / 2) & 1]) sacc[i] = -INFINITY;
      }
    }
    // Online softmax, per row half h2 (rows g and g + 8 of this warp).
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kBc / 8; ++j) mx = fmaxf(mx, fmaxf(sacc[4 * j + 2 * h2], sacc[4 * j + 2 * h2 + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      if constexpr (kFfma) mx *= mul_exp;  // (deferred: the max of the unscaled S, scaled; mul_exp > 0 or 1)
      float m_new = fmaxf(m[h2], mx);
      // FA_SM90_FWD_SKIP_RESCALE 2: the running max stays unless passed by more than the slack (-inf: never stays;
      // a difference, not m + slack, which rounds to m + 16 where |m| >= 2^27). Not with dropout (kKeepMaxK: those
      // kernels keep the former code bit for bit; in fp16 at D > 64 P times the keep scale could also pass 65504).
      if constexpr (kKeepMaxK)
        if (!(mx - m[h2] > kRescaleSlack)) m_new = m[h2];
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // rows with nothing visible yet
      alpha[h2] = fast_exp2(m[h2] - m_use);
      m[h2] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kBc / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = kFfma ? fast_exp2(fmaf(sacc[4 * j + 2 * h2 + e], mul_exp, -m_use))
                                        : fast_exp2(sacc[4 * j + 2 * h2 + e] - m_use);
          sacc[4 * j + 2 * h2 + e] = pv;
          sum += pv;
        }
      }
      l[h2] = l[h2] * alpha[h2] + sum;  // this thread's partial sum; the quad reduces at the end
    }
  };
  auto rescale_o = [&](const float (&alpha)[2]) {
    if constexpr (kSkipRescaleK)
      if (!__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) return;  // O * 1 = O
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        o[4 * j + 2 * h2] *= alpha[h2];
        o[4 * j + 2 * h2 + 1] *= alpha[h2];
      }
  };
  // P as the A fragments of m64k16: k16 step kk covers S columns 16kk .. 16kk + 15.
  auto pack_p = [&](uint32_t (&pa)[kBc / 16][4], const float (&sacc)[kBc / 2]) {
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk) {
      pa[kk][0] = Elem<T>::pack(sacc[8 * kk + 0], sacc[8 * kk + 1]);
      pa[kk][1] = Elem<T>::pack(sacc[8 * kk + 2], sacc[8 * kk + 3]);
      pa[kk][2] = Elem<T>::pack(sacc[8 * kk + 4], sacc[8 * kk + 5]);
      pa[kk][3] = Elem<T>::pack(sacc[8 * kk + 6], sacc[8 * kk + 7]);
    }
  };

  // Where dropout's keep_scale goes: on P (an FSEL and an FMUL per element) or, at D = 64, into the
  // epilogue's 1 / l (an FSEL per element). On the H200 (kernel harness, dropout 0.1, bf16, T = 4096
  // and 16384, causal and not) the epilogue form made the D = 64 forward 1.03x-1.05x faster and the
  // D = 128 one 0.95x-1.02x as fast, slower in three shapes of four (benchmarks/RESULTS.md, "Dropout
  // cost" (y)).
  constexpr bool kDropScaleInEpilogue = DROP && D == 64;

  // Dropout on P after the row sum (sm80's fwd_tile_dropout): the m64nN accumulator gives warp w
  // rows 16 w + g, 16 w + g + 8 and columns 8 jn + 2 t + e as sacc[4 jn + 2 h2 + e], i.e. the
  // m16n8 fragment of flash_dropout.cuh with n-tile jn and element 2 h2 + e: one Philox call per 8
  // elements (rows {g, g + 8} x keys 2 t + e of 4 n-tiles), the mask of the CPU and sm80. Every
  // schedule applies it between the tile's softmax and packing P (the same bits in each).
  // One element: kept (times keep_scale, unless kDropScaleInEpilogue) or 0.
  auto drop_elem = [&](float& x, bool keep) {
    if constexpr (kDropScaleInEpilogue)
      x = keep ? x : 0.f;  // keep_scale: in the epilogue
    else
      x *= keep ? drop.scale : 0.f;
  };
  auto apply_dropout = [&](float (&sacc)[kBc / 2], int j0) {
    if constexpr (DROP)
      drop_rows_visit<kBc / 8, true>(drop, wrow0, j0, g, t,
                                     [&](int nt, int e, bool keep) { drop_elem(sacc[4 * nt + e], keep); });
  };

  // FA_SM90_FWD_DROP_UNDER: the tile's keep bits (bit 4 nt + e of word (4 nt + e) / 32 for sacc[4 nt + e]) drawn
  // under its S product (draw_bits), then applied (apply_bits) where apply_dropout would draw them.
  constexpr bool kDrawUnder = DROP && FA_SM90_FWD_DROP_UNDER != 0;
  constexpr int kBitWords = (kBc / 2 + 31) / 32;
  auto draw_bits = [&](uint32_t (&bits)[kBitWords], int j0) {  // word w: the tile's keys 64 w .. 64 w + 63
#pragma unroll
    for (int w = 0; w < kBitWords; ++w)
      bits[w] = drop_rows_bits<kBc / 8 / kBitWords, true>(drop, wrow0, j0 + 64 * w, g, t);
  };
  auto apply_bits = [&](float (&sacc)[kBc / 2], const uint32_t (&bits)[kBitWords]) {
#pragma unroll
    for (int x = 0; x < kBc / 2; ++x) drop_elem(sacc[x], (bits[x / 32] >> (x % 32)) & 1u);
  };

  if (n_tiles > 0) mbar_wait(q_full, q_parity);
  // The ping-pong turns of the overlapped loop below (kS.pingpong), N + 1 rounds (N = n_tiles, the CTA's: the same for
  // every consumer): warpgroup c waits on named barrier 1 + c (256 threads: its own 128 and the other's 128
  // arrivals) before issuing a round, and arrives on the other's barrier after issuing it. Consumer 1 opens consumer
  // 0's first turn (turn_open) and skips its own last arrival, so that each barrier gets exactly N + 1 phases of 256
  // threads. Three consumers (schedule 8): a ring, consumer c arriving on its successor's barrier 1 + (c + 1) % 3,
  // consumer 2 opening consumer 0's first turn and skipping its last arrival (the same count per barrier; see
  // schedule 8's comment). (kSched[V], not kS: a lambda cannot read the enclosing constexpr local.)
  auto turn_open = [&]() {
    if constexpr (kSched[V].pingpong)
      if (c == kC - 1) named_bar_arrive(1, 256);
  };
  auto turn_begin = [&]() {
    if constexpr (kSched[V].pingpong) named_bar_sync(1 + c, 256);
  };
  auto turn_end = [&](int r) {
    if constexpr (kSched[V].pingpong) {
      if constexpr (kC == 2) {
        if (!(c == 1 && r == n_tiles)) named_bar_arrive(2 - c, 256);
      } else {  // successor c + 1, or consumer 0 after the last
        if (!(c == kC - 1 && r == n_tiles)) named_bar_arrive(c == kC - 1 ? 1 : 2 + c, 256);
      }
    }
  };
  // Round 0 of the overlapped loop below: the dense prefetches and tile 0's key bytes started, then S_0 issued and
  // committed in this consumer's first turn (not waited for); returns the key bytes.
  auto round0_issue_s0 = [&](float (&sacc)[kBc / 2]) {
    turn_open();
    for (int k = 0; k <= kDensePrefetch; ++k) prefetch_dense(j_first + k * kBc);
    KeyBytes kv = load_key_bytes(j_first);  // in flight during the waits below
    mbar_wait(full0 + 8 * stage(0), phase(0));
    turn_begin();
    wgmma_fence();
    issue_qk(sacc, base + L::kK + stage(0) * L::kKVBytes);
    wgmma_commit();
    turn_end(0);
    return kv;
  };
  if constexpr (!kS.overlap) {
    // One tile at a time: S, softmax, O += P V, each waited for before the next.
    for (int k = 0; k < kDensePrefetch; ++k) prefetch_dense(j_first + k * kBc);
    for (int n = 0; n < n_tiles; ++n) {
      const int s = stage(n);
      prefetch_dense(j_first + (n + kDensePrefetch) * kBc);
      const KeyBytes kv = load_key_bytes(j_first + n * kBc);  // in flight during the waits below
      mbar_wait(full0 + 8 * s, phase(n));
      float sacc[kBc / 2];
      wgmma_fence();
      issue_qk(sacc, base + L::kK + s * L::kKVBytes);
      wgmma_commit();
      const int j0 = j_first + n * kBc;
      uint32_t keep_bits[kBitWords];  // (not kb: the rows' first visible keys)
      if constexpr (kDrawUnder) {
        // Behind a branch (n_tiles > 0, always true here): ptxas moves a WARPGROUP.DEPBAR up within its basic block.
        // With it the SASS has the draws between the product's HGMMAs and its wait (ptxas 13.0, D = 64); an opaque
        // condition (sh.Tk > 0) spilled 4 bytes at D = 128.
        if (n_tiles > 0) draw_bits(keep_bits, j0);
      }
      wgmma_wait<0>();
      fence_regs(sacc);
      float alpha[2];
      softmax_tile(sacc, j0, kv, alpha);
      rescale_o(alpha);
      if constexpr (kDrawUnder)
        apply_bits(sacc, keep_bits);
      else
        apply_dropout(sacc, j0);
      uint32_t pa[kBc / 16][4];
      pack_p(pa, sacc);
      fence_regs(o);
      wgmma_fence();
      issue_pv(pa, base + L::kV + s * L::kKVBytes);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(o);
      mbar_arrive(empty0 + 8 * s);  // this thread is done reading stage s
    }
  } else if (n_tiles > 0) {
    // Round 0 issues S_0; round n (1 <= n < N) issues S_n and O += P_{n-1} V_{n-1} together, then
    // runs the softmax of S_n while the P V product is still on the tensor cores; round N issues
    // the last P V. Ping-pong: turn_open / turn_begin / turn_end above.
    float sacc[kBc / 2];
    uint32_t pa[kBc / 16][4];
    float alpha[2];
    KeyBytes kv = round0_issue_s0(sacc);
    wgmma_wait<0>();
    fence_regs(sacc);
    softmax_tile(sacc, j_first, kv, alpha);  // O is still zero: nothing to rescale
    apply_dropout(sacc, j_first);
    pack_p(pa, sacc);
    for (int n = 1; n < n_tiles; ++n) {
      const int s = stage(n), sp = stage(n - 1);
      prefetch_dense(j_first + (n + kDensePrefetch) * kBc);
      kv = load_key_bytes(j_first + n * kBc);
      mbar_wait(full0 + 8 * s, phase(n));
      turn_begin();
      fence_regs(o);
      wgmma_fence();
      issue_qk(sacc, base + L::kK + s * L::kKVBytes);
      wgmma_commit();
      issue_pv(pa, base + L::kV + sp * L::kKVBytes);
      wgmma_commit();
      turn_end(n);
      wgmma_wait<1>();  // S_n is done (groups complete in order); P_{n-1} V_{n-1} may still run
      fence_regs(sacc);
      // FA_SM90_FWD_SOFTMAX_UNDER_PV: the softmax behind an always-taken branch on a value the compiler cannot fold
      // (sh.Tk > 0), so that the wait below is in another basic block, which ptxas does not hoist above it. (The wait
      // itself behind such a branch made ptxas serialize the wgmmas: C7514.) Without it the condition folds away.
      if (!kSoftmaxUnderPvK || sh.Tk > 0) {
        softmax_tile(sacc, j_first + n * kBc, kv, alpha);
        apply_dropout(sacc, j_first + n * kBc);  // (overlaps P_{n-1} V_{n-1} too)
      }
      wgmma_wait<0>();
      fence_regs(o);
      fence_regs(pa);  // P_{n-1} stays allocated until its product is done
      mbar_arrive(empty0 + 8 * sp);  // this thread is done reading stage sp
      rescale_o(alpha);
      pack_p(pa, sacc);
    }
    const int sl = stage(n_tiles - 1);
    turn_begin();
    fence_regs(o);
    wgmma_fence();
    issue_pv(pa, base + L::kV + sl * L::kKVBytes);
    wgmma_commit();
    turn_end(n_tiles);  // round N, the last
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(pa);
    mbar_arrive(empty0 + 8 * sl);
  }

  // Epilogue: O / l into o [B, Tq, H, D]; lse [B, H, Tq].
  float inv[2];
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    float lt = l[h2];
    lt += __shfl_xor_sync(0xffffffffu, lt, 1);
    lt += __shfl_xor_sync(0xffffffffu, lt, 2);
    const bool any = lt > 0.f || lt != lt;  // l = 0: no key visible (O = 0, lse = -inf)
    inv[h2] = any ? (kDropScaleInEpilogue ? drop.scale : 1.f) / lt : 0.f;  // (apply_dropout)
    const int64_t i = row[h2];
    if (i < Tq && t == 0)
      p.lse[(static_cast<int64_t>(b) * sh.H + h) * Tq + i] =
          any ? (m[h2] + log2f(lt)) * 0.6931471805599453f : -INFINITY;
  }
  // Persistent: a tile without key tiles (its Q not loaded, no q_full / q_empty phase) stores its
  // zeros directly, as the other schedules do: its Q rows in shared memory may be the next tile's
  // already (the producer waits on q_empty only for the tiles that load Q).
  if (kS.tma_store && (!kS.persistent || n_tiles > 0)) {
    // Through shared memory: this warpgroup's 64 rows of the Q tile are idle now (its last S product
    // is done; the other warpgroup reads only its own rows), so O goes there in the swizzled layout
    // and one thread stores each 64-column panel with TMA (rows past Tq are clipped by the copy
    // engine). Bank-conflict free: a warp's 8 rows g land in 8 distinct 16-byte chunks.
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const int r = c * 64 + warp * 16 + g + 8 * h2;  // row within the CTA's kBr
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        st_shared_u32(base + L::kQ + swz128_offset(kBr, r, 8 * j + 2 * t),
                      Elem<T>::pack(o[4 * j + 2 * h2] * inv[h2], o[4 * j + 2 * h2 + 1] * inv[h2]));
    }
    fence_proxy_async();
    named_bar_sync(1 + kC + c, 128);  // 3 + c with 2 consumers (past the ping-pong's 1 .. kC)
    if (tid == 0 && m0 + c * 64 < Tq) {
#pragma unroll
      for (int j = 0; j < D / 64; ++j)  // (a panel wholly past Dv, padded up: nothing to store)
        if (64 * j < sh.Dv) tma_store_4d(&tm_o, q_tile + j * kBr * 128, 64 * j, h, static_cast<int>(m0) + c * 64, b);
      bulk_commit();
      // Shared memory stays until the copy engine has read it. Persistent: only until then (the
      // next tile's Q may overwrite it; the kernel waits for the writes once, at its end).
      if constexpr (kS.persistent) bulk_wait_read<0>();
      else bulk_wait<0>();
    }
  } else {
    T* out = static_cast<T*>(p.o);
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const int64_t i = row[h2];
      if (i < Tq) {
        T* orow = out + b * sh.o_stride[0] + i * sh.o_stride[1] + h * sh.o_stride[2];
        const int dv = static_cast<int>(sh.Dv);  // <= D; even (fwd_applies: a multiple of 8)
#pragma unroll
        for (int j = 0; j < D / 8; ++j)
          if (8 * j + 2 * t < dv)
            *reinterpret_cast<uint32_t*>(orow + 8 * j + 2 * t) =
                Elem<T>::pack(o[4 * j + 2 * h2] * inv[h2], o[4 * j + 2 * h2 + 1] * inv[h2]);
      }
    }
  }
  // This thread no longer reads Q's rows (its warpgroup's products are done; thread 0 of each
  // warpgroup after the copy engine has read O from them).
  if constexpr (kS.persistent)
    if (n_tiles > 0) mbar_arrive(q_empty);
}

// q [B, Tq, H, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, D] through tm_q / tm_k / tm_v (rank 4:
// d, head, time, batch; boxes {64, 1, 128, 1} for q, {64, 1, kBc, 1} for k / v); o [B, Tq, H, D] and
// lse [B, H, Tq] from p.
// Grid (ceil(Tq / kBr), H, B), one query tile per CTA, longest causal rows first (with a causal mask
// in sections of a few (batch, head) pairs: order.grid, the linear block index through TileOrder,
// kGridSectionBytes' comment; else from blockIdx: each pair's rows longest first); the persistent
// schedule: grid (min(order.num, SMs)), CTA i takes tiles i, i + gridDim.x, ... of `order` (a
// static stride: see TileOrder and launch()). IDX: the index masks (causal, window, lengths,
// [B, Tq] / [B, Tk] validity) at run time, decided per warp and tile (row_info, k_valid loads,
// votes); without IDX only causal and Tk (no window, lengths or validity masks: the host's
// needs_idx() below), the CTA masking the tiles that its first row does not see whole, with no
// k_valid loads, row ranges or votes (see "Plain instantiation" in the header).
// DROP (with IDX only): dropout (a second instantiation, so that the kernel without it carries no
// Philox code). V: the schedule (kSched; with DROP only 0, kDropVariant or a candidate's: launch_sched). tm_o
// (box {64, 1, 64, 1}) is used only by the tma_store schedules.
// Persistent (FlashAttention-3's producer / consumer loop over tiles): the producer thread walks
// the CTA's tiles, the K / V ring's stage and phase running on from tile to tile (kv: K / V tiles
// loaded so far); for each tile with key tiles it first loads the K / V tiles that fit in the ring
// (their stages were released by the previous tile's main loop, before its epilogue), then waits on
// q_empty (256 consumer arrivals: the previous tile's Q rows and the O stored through them are
// free) and loads Q, then the rest of the K / V tiles. So the next tile's K / V arrive while the
// consumers finish the previous tile's last products and epilogue; Q's load is what remains
// exposed (Q and O share the rows: no room for a second Q buffer next to 3 stages at D = 128).
// Tiles without key tiles (causal rows before the keys, Tk past them) load nothing and take no
// q_full / q_empty phase on either side (so neither barrier can run two phases ahead of its
// waiter); their consumers write O = 0 and lse = -inf directly.
// Dynamic (schedule 10; the plain D = 128 kernel's default with a causal mask): the producer thread takes its CTA's first tile
// from blockIdx and each next one from the workspace's counter (atomicAdd + gridDim.x, zeroed by
// launch()), and hands every index, the final one (>= order.num) included, to the consumers through
// a 2-slot ring in shared memory: slot k % 2 written, then tile_full[k % 2] arrived on (1 arrival);
// the consumers wait on it, read the index, arrive on tile_empty[k % 2] (128 kC arrivals), which the
// producer waits for before it writes that slot again (index k + 2).
// Schedules 8 and 9: 4 warpgroups (512 threads), 192-row query tiles (kBrOf<V>; see their comment).
template <typename T, int D, bool IDX, bool DROP, int V, bool DENSE>
__global__ void __launch_bounds__(kThreadsOf<V>, 1)
    flash_fwd_sm90_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                          const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
                          const __grid_constant__ FlashFwdParams p, const __grid_constant__ TileOrder order) {
  constexpr Sched kS = kSched[V];
  constexpr int kStages = kS.stages;
  constexpr int kBc = kKeyTile<D>;
  static_assert(!DROP || V == 0 || V == kDropVariant || (FA_SM90_FWD_DROP64_3WG != 0 && V == 11 && D == 64),
                "the dropout kernel runs schedule 0 or kDropVariant (FA_SM90_FWD_DROP64_3WG: 11 at D = 64)");
  static_assert(!kS.pingpong || kS.overlap, "ping-pong with overlap only");
  static_assert(!DROP || IDX, "dropout runs the index-masked kernel");
  static_assert(D == 64 || D == 128 || (D == 256 && (V == 0 || V == kD256Sched<IDX, DROP, DENSE>)),
                "D = 256 runs schedule 0 only (FA_SM90_FWD_D256_SCHED / _IDX_SCHED too: kD256Sched)");
  static_assert(!kS.persistent || (kS.overlap && kS.pingpong), "the persistent schedule is schedule 5's");
  static_assert(!kS.dynamic || kS.persistent, "dynamic tiles are a persistent grid's");
  static_assert(kS.consumers == 2 ||
                    (kS.consumers == 3 && D == 64 && (!IDX || FA_SM90_FWD_IDX64_3WG != 0) && !DROP && !DENSE &&
                     !kS.persistent && kS.overlap) ||
                    (kS.consumers == 3 && D == 64 && DROP && !kS.persistent && !kS.overlap),
                "3 consumer warpgroups: the plain D = 64 kernel (and FA_SM90_FWD_IDX64_3WG's index-masked one), one "
                "tile per CTA, overlap schedules only (and FA_SM90_FWD_DROP64_3WG's dropout kernel)");
  constexpr int kBr = kBrOf<V>;  // (shadows the namespace's 128)
  constexpr int kC = kConsumersOf<V>;
  using L = SmemLayout<D, kStages, kBc, kS.persistent, kBr, kS.dynamic>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t q_full = base + L::kBars;
  const uint32_t full0 = q_full + 8, empty0 = q_full + 8 * (1 + kStages);
  const uint32_t q_empty = base + L::kQEmpty;
  // Dynamic: the tile ring (tile_full[2], tile_empty[2], two tile indices; flash_fwd_sm90_kernel's comment).
  const uint32_t tile_full0 = base + L::kTileRing, tile_empty0 = tile_full0 + 16, tile_idx0 = tile_full0 + 32;

  const AttnShape& sh = p.shape;
  // This CTA's tiles: [first, end) in steps of `stride` (one tile, from blockIdx, but persistent;
  // dynamic: the first from blockIdx, the others from the counter).
  const int first = kS.persistent ? static_cast<int>(blockIdx.x) : 0;
  const int end = kS.persistent ? order.num : 1;
  const int stride = kS.persistent ? static_cast<int>(gridDim.x) : 1;
  auto tile_at = [&](int t, int& m_block, int& h, int& b) {
    if constexpr (kSched[V].persistent) {  // (kS is not a constant inside a lambda)
      order.at(t, m_block, h, b);
    } else if (order.grid) {  // causal: grouped longest-first (launch()), from the dispatch order
      order.at(static_cast<int>(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)), m_block, h, b);
    } else {
      m_block = gridDim.x - 1 - blockIdx.x;  // longest causal rows first
      h = blockIdx.y;
      b = blockIdx.z;
    }
  };

  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full0 + 8 * s, 1);
      mbar_init(empty0 + 8 * s, 128 * kC);
    }
    if constexpr (kS.persistent) mbar_init(q_empty, 128 * kC);
    if constexpr (kS.dynamic)
      for (int s = 0; s < 2; ++s) {
        mbar_init(tile_full0 + 8 * s, 1);
        mbar_init(tile_empty0 + 8 * s, 128 * kC);
      }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ---- Producer warpgroup: one thread issues every TMA load. ----
    setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      uint32_t kv = 0;      // K / V tiles loaded so far (the ring's position; 32 bits: a CTA
                            // would need 2^32 K / V tiles, hours of one kernel, to wrap it)
      uint32_t q_loads = 0;  // tiles whose Q was loaded so far (q_empty's phases)
      // Dynamic: every tile index, the last (>= end) included, goes to the consumers through the
      // ring (slot handed % 2) before its loads; the next comes from the counter.
      uint32_t handed = 0;
      auto hand = [&](int t) {
        const uint32_t slot = handed & 1;
        if (handed >= 2) mbar_wait(tile_empty0 + 8 * slot, ((handed >> 1) - 1) & 1);
        st_shared_u32(tile_idx0 + 4 * slot, static_cast<uint32_t>(t));
        mbar_arrive(tile_full0 + 8 * slot);  // (release: the index is visible to the waiters)
        ++handed;
        return t;
      };
      auto first_tile = [&]() { return kS.dynamic ? hand(first) : first; };
      auto next_tile = [&](int t) {
        return kS.dynamic ? hand(atomicAdd(static_cast<int*>(p.workspace), 1) + static_cast<int>(gridDim.x))
                                 : t + stride;
      };
      for (int tile = first_tile(); tile < end; tile = next_tile(tile)) {
        int m_block, h, b;
        tile_at(tile, m_block, h, b);
        const int hkv = h / static_cast<int>(sh.H / sh.Hkv);
        const int64_t m0 = static_cast<int64_t>(m_block) * kBr;
        // The key tiles this query tile visits (sm80's rule: the union of its rows' causal / window /
        // length ranges, in kBc-key tiles from j_first); producer and consumers loop over the same
        // ones, tiles outside are neither loaded nor computed.
        const QueryTileKeys<kBr, kBc> keys(p.mask, sh, b, m0);
        const int n_tiles = keys.ntiles;
        const int j_first = static_cast<int>(keys.jstart);
        if (n_tiles == 0) continue;
        if (q_loads == 0) {
          tma_prefetch_map(&tm_k);
          tma_prefetch_map(&tm_v);
        }
        auto load_kv = [&](int n) {
          const uint32_t u = kv + n;  // the ring's use number
          const int s = static_cast<int>(u % kStages);
          if (u >= kStages) mbar_wait(empty0 + 8 * s, ((u / kStages) - 1) & 1);
          const uint32_t bar = full0 + 8 * s;
          mbar_arrive_expect_tx(bar, 2 * L::kKVBytes);
#pragma unroll
          for (int j = 0; j < D / 64; ++j) {
            tma_load_4d(base + L::kK + s * L::kKVBytes + j * kBc * 128, &tm_k, bar, 64 * j, hkv, j_first + n * kBc, b);
            tma_load_4d(base + L::kV + s * L::kKVBytes + j * kBc * 128, &tm_v, bar, 64 * j, hkv, j_first + n * kBc, b);
          }
        };
        // Persistent: the K / V tiles whose stages the previous tiles' main loops release, before
        // the wait for the previous tile's epilogue (q_empty).
        const int pre = kS.persistent ? (n_tiles < kStages ? n_tiles : kStages) : 0;
        for (int n = 0; n < pre; ++n) load_kv(n);
        if constexpr (kS.persistent)
          if (q_loads > 0) mbar_wait(q_empty, (q_loads - 1) & 1);
        mbar_arrive_expect_tx(q_full, L::kQBytes);
#pragma unroll
        for (int j = 0; j < D / 64; ++j)
          tma_load_4d(base + L::kQ + j * kBr * 128, &tm_q, q_full, 64 * j, h, static_cast<int>(m0), b);
        for (int n = pre; n < n_tiles; ++n) load_kv(n);
        kv += n_tiles;
        ++q_loads;
      }
    }
    return;
  }

  setmaxnreg_inc<kConsumerRegsOf<V>>();
  uint32_t kv = 0, q_loads = 0;  // as the producer's: K / V tiles and Q loads consumed so far
  uint32_t taken = 0;            // (dynamic) tile indices taken from the ring
  auto take = [&]() {
    const uint32_t slot = taken & 1;
    mbar_wait(tile_full0 + 8 * slot, (taken >> 1) & 1);
    const int t = static_cast<int>(ld_shared_u32(tile_idx0 + 4 * slot));
    mbar_arrive(tile_empty0 + 8 * slot);
    ++taken;
    return t;
  };
  for (int tile = kS.dynamic ? take() : first; tile < end; tile = kS.dynamic ? take() : tile + stride) {
    int m_block, h, b;
    tile_at(tile, m_block, h, b);
    const QueryTileKeys<kBr, kBc> keys(p.mask, sh, b, static_cast<int64_t>(m_block) * kBr);
    fwd_tile_consumer<T, D, IDX, DROP, V, DENSE>(tm_o, p, base, m_block, h, b, keys, kv, q_loads & 1);
    if (keys.ntiles > 0) {
      kv += keys.ntiles;
      ++q_loads;
    }
  }
  // Persistent: the O stores waited only for their reads of shared memory; their writes, here.
  if constexpr (kS.persistent && kS.tma_store)
    if (threadIdx.x % 128 == 0) bulk_wait<0>();
}

// ---- Host side ---------------------------------------------------------------------------------
// Tensor maps and the compute-capability check: sm90_host.cuh (shared with the backward).
std::atomic<int64_t> g_launches{0};
std::atomic<int> g_override{-1};
std::atomic<int> g_variant_override{-1};
std::atomic<int> g_last_variant{-1};

// A check's or measurement's switch: the environment variable `name` as a whole decimal number in
// [1, 2^20), else 0 (unset, empty, or anything else).
int64_t env_count(const char* name) {
  const char* v = getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long x = strtol(v, &end, 10);
  return *end == '\0' && x > 0 && x < (1 << 20) ? static_cast<int64_t>(x) : 0;
}

// The persistent schedule's L2 budget for one section's K and V (TileOrder; FlashAttention-3's 32
// MiB of the H100 / H200's 50 MB L2).
constexpr int64_t kL2SectionBytes = 32ll << 20;

// The persistent schedule walks its tile order (TileOrder) with a static stride (CTA i takes tiles
// i, i + grid, ...), not an atomic tile counter: a counter in global memory needs zeroing per launch (a
// memset, or a self-resetting counter that two launches in flight on different streams, or two replays
// of a captured graph, would share: silent wrong output) and the forward's work per tile is known in
// advance. The cost: a model of the H200 (132 CTAs, a tile's time = its key tiles + 1; benchmarks-free,
// a few lines of Python) puts the busiest CTA 3% above the mean without a causal mask (as the
// one-CTA-per-tile grid) but 3-16% above with one where the sections are few (H = 16 and B*T = 16384:
// 12-16% at T >= 2048, against 1-7% for the hardware's dynamic dispatch of the one-CTA-per-tile grid,
// 0-1% for an atomic counter in this order); 3% at H = 32. A strict longest-first order over all heads
// balances to 0-6% but reads every head's K / V at once (no L2 reuse: as many bytes from HBM as the
// tensor cores' rate). Measure first; the atomic counter is the next step if the causal rows show it.
// (They did: 0.74x-0.91x schedule 5 at T = 16384 causal; causal calls run the one-CTA-per-tile grid.)
//
// The one-CTA-per-tile grid with a causal mask: the hardware dispatches the CTAs in linear block index
// order, and blockIdx's order (each pair's query tiles longest first, pair after pair) ends with the
// heavy tiles of the last pairs still running when the light ones are done: a model of the H200 (132
// SMs, tile cost = its key tiles + 1.4, dynamic dispatch; a few lines of Python) puts the makespan
// 6.6 % / 5.6 % / 6.8 % over the ideal at D = 128, B*T = 16384, H = 16, T = 4096 / 8192 / 2048, 0.3 % at
// 16384. The grid takes the TileOrder with sections of pairs whose K and V fit kGridSectionBytes (4
// pairs at D = 128, T = 4096; 2 at 8192; 8 at 2048: in the model 0.2 %, 0.1 %, 1.6 %), few
// enough that the running CTAs read the K / V of a few pairs, as blockIdx's order does. On the H200
// (2026-12-02, harness vbench, causal, bf16, B*T = 16384, two processes each against blockIdx's order):
// D = 128 schedule 5 1.02x-1.04x at T = 2048, 4096 and 8192, 0.99x-1.00x at 16384; D = 64 schedule 8
// 1.00x-1.05x; 4 and 32 MiB sections gave less at D = 128, T = 4096 and 8192. O and lse are each tile's
// as before (the order changes which CTA computes a tile, not how).
constexpr int64_t kGridSectionBytes = 8ll << 20;

// The tile order (TileOrder) for shape p.shape in query tiles of `rows`, sections of the pairs whose K
// and V (16-bit) fit `budget` bytes (at least one pair, one GQA group), or false when its tile count
// needs more than the kernel's 32-bit tile index (< 2^30, so that tile + gridDim.x cannot overflow).
// TF_FLASHATTN_SM90_L2_SECTION_MB=n (a measurement's switch) sets every budget to n MiB;
// TF_FLASHATTN_SM90_TILE_GROUP=n (a check's switch) sets n pairs per section (n GQA groups), so that
// small cases run several, uneven sections.
template <int D>
bool tile_order(const FlashFwdParams& p, int rows, int64_t budget, TileOrder* o) {
  const AttnShape& s = p.shape;
  const int64_t n_m = (s.Tq + rows - 1) / rows, hb = s.H * s.B;
  if (n_m * hb >= (1ll << 30)) return false;
  const int64_t kv_head = s.Tk * D * 2 * 2;  // one kv head's K and V, 16-bit
  static const int64_t env_budget = env_count("TF_FLASHATTN_SM90_L2_SECTION_MB") << 20;
  static const int64_t env_group = env_count("TF_FLASHATTN_SM90_TILE_GROUP");
  if (env_budget > 0) budget = env_budget;
  int64_t sec = env_group > 0 ? env_group : kv_head >= budget ? 1 : budget / kv_head;
  sec *= s.H / s.Hkv;  // the query heads of a GQA group share their K / V
  if (sec > hb) sec = hb;
  const int64_t ng = (hb + sec - 1) / sec;  // balanced sections
  o->n_m = static_cast<int>(n_m);
  o->H = static_cast<int>(s.H);
  o->g = static_cast<int>(hb / ng);
  o->big = static_cast<int>(hb % ng);
  o->num = static_cast<int>(n_m * hb);
  return true;
}

template <typename T, int D, bool IDX, bool DROP, int V = 0, bool DENSE = false>
cudaError_t launch(const FlashFwdParams& p, cudaStream_t stream) {
  constexpr Sched kS = kSched[V];
  constexpr int kBc = kKeyTile<D>;
  constexpr int kBr = kBrOf<V>;  // (shadows the namespace's 128)
  const AttnShape& s = p.shape;
  TileOrder order;
  if constexpr (kS.dynamic) {
    // The counter lives in the workspace (fwd_workspace_bytes); the tiles are taken in the grid's
    // order (kGridSectionBytes' sections with a causal mask), so no static balance is needed.
    if (p.workspace == nullptr || !tile_order<D>(p, kBr, p.mask.causal ? kGridSectionBytes : 0, &order))
      return launch<T, D, IDX, DROP, kPersistentFallback, DENSE>(p, stream);
  } else if constexpr (kS.persistent) {
    // Without a causal mask the tiles cost the same and need no balancing: sections of one (batch,
    // head) pair (GQA group), blockIdx's order. 32 MiB sections there read 3.3x the HBM bytes (H200,
    // D = 128, T = 4096, B = 4, H = 16: 674 MB against 201, L2 hit rate 77 % against 88 %; ncu) and
    // ran slower than the one-CTA-per-tile grid.
    if (!tile_order<D>(p, kBr, p.mask.causal ? kL2SectionBytes : 0, &order))
      return launch<T, D, IDX, DROP, kPersistentFallback, DENSE>(p, stream);
  } else if (p.mask.causal && tile_order<D>(p, kBr, kGridSectionBytes, &order)) {
    order.grid = 1;  // grouped longest-first (kGridSectionBytes' comment)
  }
  // The maps' inner dims are the real D (q, k) and Dv (v, o), at most the kernel's D (fwd_applies): the
  // columns past them load as zeros, and O's past Dv are clipped from the stores (header comment).
  static_assert(D == 64 || D == 128 || D == 256, "a head-dim bucket");
  if (padded_head_dim(s) != D) return cudaErrorNotSupported;
  CUtensorMap tq, tk, tv, to;
  if (!tma_map_rows(&tq, p.dtype, p.q, s.B, s.Tq, s.H, s.D, s.q_stride, kBr) ||
      !tma_map_rows(&tk, p.dtype, p.k, s.B, s.Tk, s.Hkv, s.D, s.k_stride, kBc) ||
      !tma_map_rows(&tv, p.dtype, p.v, s.B, s.Tk, s.Hkv, s.Dv, s.v_stride, kBc))
    return cudaErrorNotSupported;  // the dispatch falls back to sm80
  if constexpr (kS.tma_store) {
    // o [B, Tq, H, Dv] in boxes of one warpgroup's 64 rows; the default schedule when the map fails.
    if (!tma_map_rows(&to, p.dtype, p.o, s.B, s.Tq, s.H, s.Dv, s.o_stride, 64)) return launch<T, D, IDX, DROP, 0, DENSE>(p, stream);
  } else {
    to = tq;  // unused
  }
  auto kernel = flash_fwd_sm90_kernel<T, D, IDX, DROP, V, DENSE>;
  const int smem = SmemLayout<D, kS.stages, kBc, kS.persistent, kBr, kS.dynamic>::kAlloc;
  cudaError_t err = set_dynamic_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  dim3 grid(static_cast<unsigned>((s.Tq + kBr - 1) / kBr), static_cast<unsigned>(s.H), static_cast<unsigned>(s.B));
  if constexpr (kS.persistent) {
    // One CTA per SM (227 KB of shared memory each), no more than there are tiles.
    // TF_FLASHATTN_SM90_PERSISTENT_CTAS=n (a check's switch, not a tuning one) caps the grid at n
    // CTAs, so that small cases run many tiles per CTA: the q_empty phases, key-less tiles inside
    // a CTA's walk and the ring's phases across tiles are then exercised (sm90_check.py's vcap).
    static const int cap = static_cast<int>(env_count("TF_FLASHATTN_SM90_PERSISTENT_CTAS"));
    int sms = current_device_sm_count();
    if (sms <= 0) return cudaErrorUnknown;
    if (cap > 0 && cap < sms) sms = cap;
    grid = dim3(static_cast<unsigned>(order.num < sms ? order.num : sms), 1, 1);
  }
  if constexpr (kS.dynamic) {
    err = cudaMemsetAsync(p.workspace, 0, sizeof(int), stream);  // the tile counter
    if (err != cudaSuccess) return err;
  }
  kernel<<<grid, kThreadsOf<V>, smem, stream>>>(tq, tk, tv, to, p, order);
  err = cudaGetLastError();
  if (err == cudaSuccess) {
    g_launches.fetch_add(1, std::memory_order_relaxed);
    g_last_variant.store(V, std::memory_order_relaxed);
  }
  return err;
}

// The plain (no-dropout) kernel at D = 64 or 128 with schedule v (kSched; fwd_variant() keeps v in
// range), IDX: with the index masks (needs_idx()). Schedules 8 and 9 exist for the kernel without
// IDX at D = 64 only (with IDX too under FA_SM90_FWD_IDX64_3WG); elsewhere, and past the 192-row tiles' Tq bound,
// they run kWideFallback.
template <typename T, int D, bool IDX>
cudaError_t launch_plain(const FlashFwdParams& p, cudaStream_t stream, int v) {
  static_assert(kNumVariants == 11 + (FA_SM90_FWD_DROP64_3WG != 0), "one case per schedule (11: dropout only)");
  static_assert(D == 64 || D == 128, "D = 256 runs schedule 0 only");
  // (fwd_schedule passes only schedules built for this kernel: the `break`s are not reached; were one reached,
  // nothing is queued and cudaErrorNotSupported sends the call to sm80.)
  switch (v) {
    case 1: if constexpr (schedule_built_for(1, D, IDX)) return launch<T, D, IDX, false, 1>(p, stream); break;
    case 2: if constexpr (schedule_built_for(2, D, IDX)) return launch<T, D, IDX, false, 2>(p, stream); break;
    case 3: if constexpr (schedule_built_for(3, D, IDX)) return launch<T, D, IDX, false, 3>(p, stream); break;
    case 4: if constexpr (schedule_built_for(4, D, IDX)) return launch<T, D, IDX, false, 4>(p, stream); break;
    case 5: return launch<T, D, IDX, false, 5>(p, stream);
    case 6: if constexpr (schedule_built_for(6, D, IDX)) return launch<T, D, IDX, false, 6>(p, stream); break;
    case 7: if constexpr (schedule_built_for(7, D, IDX)) return launch<T, D, IDX, false, 7>(p, stream); break;
    case kDynamicVariant:
      if constexpr (schedule_built_for(kDynamicVariant, D, IDX)) return launch<T, D, IDX, false, kDynamicVariant>(p, stream);
      break;
    case 8:
    case 9:
      if constexpr (D == 64 && (!IDX || FA_SM90_FWD_IDX64_3WG != 0)) {
        if (p.shape.Tq <= (1ll << 31) - kBrOf<8>) {
          if (v == 8) return launch<T, D, IDX, false, 8>(p, stream);
          if constexpr (schedule_built_for(9, D, IDX)) return launch<T, D, IDX, false, 9>(p, stream);
          break;
        }
      }
      return launch<T, D, IDX, false, kWideFallback>(p, stream);
    default: return launch<T, D, IDX, false, 0>(p, stream);  // v == 0
  }
  return cudaErrorNotSupported;
}

}  // namespace

bool enabled() {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return o != 0;
  static const bool env_on = [] {
    const char* v = getenv("TF_FLASHATTN_SM90");
    return !(v && v[0] == '0' && v[1] == '\0');
  }();
  return env_on;
}

void set_enabled(int mode) { g_override.store(mode < 0 ? -1 : (mode ? 1 : 0), std::memory_order_relaxed); }

int fwd_variants() { return kNumVariants; }

int fwd_default_variant() { return kDefaultVariant; }

int fwd_variant() { return fwd_variant_for(128); }

// The schedule asked for (set_fwd_variant, else TF_FLASHATTN_SM90_FWD_VARIANT), -1 when none.
static int asked_fwd_variant() {
  const int o = g_variant_override.load(std::memory_order_relaxed);
  if (o >= 0) return o;
  // TF_FLASHATTN_SM90_FWD_VARIANT: a whole decimal number in [0, kNumVariants) selects that
  // schedule, 0 included; unset, empty or anything else is the head dim's default.
  static const int env_v = [] {
    const char* v = getenv("TF_FLASHATTN_SM90_FWD_VARIANT");
    if (!v || !*v) return -1;
    char* end = nullptr;
    const long x = strtol(v, &end, 10);
    return *end == '\0' && x >= 0 && x < kNumVariants && schedule_built(static_cast<int>(x)) ? static_cast<int>(x)
                                                                                               : -1;
  }();
  return env_v;
}

// Whether a call needs the index-masked kernel (IDX): a window, lengths or a validity mask (causal
// alone does not). Dropout always runs it (fwd()). The one place that picks the instantiation.
static bool needs_idx(const MaskParams& m) { return m.has_index_masks(); }

int fwd_variant_for(int d) {
  const int v = asked_fwd_variant();
  return v >= 0 ? v : d == 64 ? kDefaultVariantD64 : kDefaultVariant;
}

// The schedule a 16-bit call at D = 64 or 128 runs (launch_sched; the dense kernel has its own): the one
// asked for where this build has it for the call's kernel (schedule_built_for: the plain kernel, or the
// index-masked one that soft-cap and the index masks run), else at D = 128 for the plain kernel (no index
// masks, soft-cap, dropout, dense mask or bias: fwd()'s dispatch) the persistent schedule, kPersistentVariant
// without a causal mask (its tile order then follows the heads, see tile_order()) and kDynamicVariant with
// one (its tiles from a counter; schedule 5 when the caller passed no workspace: fwd_workspace_bytes),
// otherwise the head dim's default (5; 8 at D = 64). The persistent grid's static tile order would leave causal
// tiles unbalanced (H200, 2026-12-02: schedule 7 0.74x-0.91x schedule 5 at T = 16384 causal), and the index
// masks' tiles may differ in length too.
static int fwd_schedule(const FlashFwdParams& p) {
  const bool plain = !needs_idx(p.mask) && p.score.softcap == 0.f && !(p.dropout.rate > 0.f) && !p.mask.mask &&
                     !p.score.bias;
  const int hd = padded_head_dim(p.shape);
  const int asked = asked_fwd_variant();
  // 8 and 9 pass whatever the kernel: launch_plain runs kWideFallback (5) for them outside the plain D = 64 kernel,
  // as before release builds left schedules out (9 is asked for only where built: asked_fwd_variant).
  if (asked >= 0 && (schedule_built_for(asked, hd, !plain) || asked == 8 || asked == 9)) return asked;
  if (hd == 128 && plain) return p.mask.causal ? kDynamicVariant : kPersistentVariant;
  return hd == 64 ? kDefaultVariantD64 : kDefaultVariant;
}

// Schedule 10's tile counter, for the calls that run it (fwd_schedule). XLA asks at compile time, without
// the lengths / validity masks' pointers: never fewer bytes than the call needs then.
size_t fwd_workspace_bytes(const FlashFwdParams& p) {
  const bool b16 = p.dtype == DType::kFloat16 || p.dtype == DType::kBFloat16;
  return b16 && fwd_schedule(p) == kDynamicVariant ? 256 : 0;
}

bool fwd_variant_built(int v) { return schedule_built(v); }

bool fwd_idx64_wide() { return FA_SM90_FWD_IDX64_3WG != 0; }

int fwd_d256_schedule(bool idx) { return idx ? FA_SM90_FWD_D256_IDX_SCHED : FA_SM90_FWD_D256_SCHED; }

bool set_fwd_variant(int v) {
  if (v >= kNumVariants || (v >= 0 && !schedule_built(v))) return false;
  g_variant_override.store(v < 0 ? -1 : v, std::memory_order_relaxed);
  return true;
}

int last_fwd_variant() { return g_last_variant.load(std::memory_order_relaxed); }

int64_t fwd_launches() { return g_launches.load(std::memory_order_relaxed); }

bool fwd_applies(const FlashFwdParams& p) {
  const AttnShape& s = p.shape;
  if (p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16) return false;
  // Head dims 64, 128, 256, and any other D, Dv <= 256 padded up to head_dim_bucket(max(D, Dv)) (multiples
  // of 8: vec8 below).
  if (s.D <= 0 || s.Dv <= 0 || padded_head_dim(s) == 0) return false;
  if (s.Tk <= 0 || s.Tq <= 0 || s.Tq > (1ll << 31) - kBr || s.Tk > (1ll << 31) - kBcMax) return false;
  if (s.H > 65535 || s.B > 65535 || s.Hkv <= 0 || s.H % s.Hkv != 0) return false;
  // Index masks (causal, window, lengths, [B, Tq] / [B, Tk] validity), and in the IDX kernel soft-cap,
  // a dense mask and bias (element by element; not with dropout), and dropout run here.
  if (!std::isfinite(p.score.softcap)) return false;
  if (p.dropout.rate > 0.f && (p.mask.mask || p.score.bias)) return false;
  // A dense mask / bias: contiguous along the keys, or broadcast over them (column stride 1 or 0, what
  // the op's broadcasting gives; the DENSE kernel's reads assume it).
  if (p.mask.mask && p.mask.mask_stride[3] != 0 && p.mask.mask_stride[3] != 1) return false;
  if (p.score.bias && p.score.bias_stride[3] != 0 && p.score.bias_stride[3] != 1) return false;
  if (p.dropout.rate > 0.f && !p.dropout.seed) return false;
  // TMA: 16-byte aligned bases and strides (o is written with 4-byte stores: vec8 covers it too).
  if (!vec8(s, p.q, p.k, p.v, p.o)) return false;
  for (int i = 0; i < 3; ++i)
    if (s.q_stride[i] < 0 || s.k_stride[i] < 0 || s.v_stride[i] < 0) return false;
  return current_device_is_sm90();
}

// Head dim 64 or 128, on the schedules: the plain and index-masked kernels on fwd_schedule(p), the
// dropout kernel on kDropVariant (FA_SM90_FWD_DROP64_3WG: 11 at D = 64)
// unless schedule 0 is asked for (the reference of the checks).
template <typename T, int D, bool IDX, bool DROP>
cudaError_t launch_sched(const FlashFwdParams& p, cudaStream_t stream) {
  const int v = fwd_schedule(p);
  if constexpr (!DROP) {
    return launch_plain<T, D, IDX>(p, stream, v);
  } else {
#if FA_SM90_FWD_DROP64_3WG
    if constexpr (D == 64)
      if (v != 0 && p.shape.Tq <= (1ll << 31) - kBrOf<11>) return launch<T, D, IDX, DROP, 11>(p, stream);
#endif
    return v != 0 ? launch<T, D, IDX, DROP, kDropVariant>(p, stream) : launch<T, D, IDX, DROP>(p, stream);
  }
}

template <typename T, bool IDX, bool DROP>
cudaError_t fwd_typed(const FlashFwdParams& p, cudaStream_t stream) {
  const int hd = padded_head_dim(p.shape);  // (fwd_applies)
  if (hd == 256) {  // schedule 0 (64-key tiles), but kD256Sched (FA_SM90_FWD_D256_SCHED / _IDX_SCHED) unless 0 is asked
    constexpr int kV = kD256Sched<IDX, DROP, false>;
    if constexpr (kV != 0) {
      if (fwd_variant_for(256) != 0) return launch<T, 256, IDX, DROP, kV>(p, stream);
    }
    return launch<T, 256, IDX, DROP>(p, stream);
  }
  return hd == 128 ? launch_sched<T, 128, IDX, DROP>(p, stream) : launch_sched<T, 64, IDX, DROP>(p, stream);
}

// A dense mask or bias (DENSE, the index-masked kernel without dropout): kDenseVariant; schedule 0 when asked
// for in FA_TUNING builds (the reference of the checks; kDenseZeroBuilt); D = 256 schedule 0.
template <typename T, int D>
cudaError_t launch_dense(const FlashFwdParams& p, cudaStream_t stream) {
  if constexpr (D == 256) {
    return launch<T, D, true, false, 0, true>(p, stream);
  } else {
    if constexpr (kDenseZeroBuilt) {
      if (fwd_variant_for(D) == 0) return launch<T, D, true, false, 0, true>(p, stream);
    }
    return launch<T, D, true, false, kDenseVariant, true>(p, stream);
  }
}
template <typename T>
cudaError_t fwd_dense_typed(const FlashFwdParams& p, cudaStream_t stream) {
  const int hd = padded_head_dim(p.shape);  // (fwd_applies)
  if (hd == 256) return launch_dense<T, 256>(p, stream);
  return hd == 128 ? launch_dense<T, 128>(p, stream) : launch_dense<T, 64>(p, stream);
}

template <bool IDX, bool DROP>
cudaError_t fwd_drop(const FlashFwdParams& p, cudaStream_t stream) {
  static_assert(!DROP || IDX, "dropout runs the index-masked kernel");
  return p.dtype == DType::kBFloat16 ? fwd_typed<__nv_bfloat16, IDX, DROP>(p, stream)
                                     : fwd_typed<__half, IDX, DROP>(p, stream);
}

cudaError_t fwd(const FlashFwdParams& p, cudaStream_t stream) {
  if (p.dropout.rate > 0.f) {
    // The dropout kernel has no dense mask / bias code (fwd_applies keeps those calls away; this
    // guards against a silent drop if that ever changes): sm80's kernels then.
    if (p.mask.mask || p.score.bias) return cudaErrorNotSupported;
    return fwd_drop<true, true>(p, stream);
  }
  // A dense mask or bias: the DENSE instantiation of the index-masked kernel (soft-cap and the index
  // masks too); soft-cap alone runs the index-masked kernel (a CTA-uniform branch there).
  if (p.mask.mask || p.score.bias)
    return p.dtype == DType::kBFloat16 ? fwd_dense_typed<__nv_bfloat16>(p, stream) : fwd_dense_typed<__half>(p, stream);
  return needs_idx(p.mask) || p.score.softcap != 0.f ? fwd_drop<true, false>(p, stream) : fwd_drop<false, false>(p, stream);
}

// ---- Self-test of the building blocks --------------------------------------------------------
namespace {

// Test 0: two TMA boxes {64, 1, 128, 1} (both column panels of rows t0 .. t0+127 of head h, batch
// b) of a [B, T, H, 128] bfloat16 tensor into one swizzled tile, read back through swz128_offset.
// out [128, 128] float32.
__global__ void selftest_tma_kernel(const __grid_constant__ CUtensorMap tm, float* out, int h, int t0, int b) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t bar = base + 128 * 128 * 2;
  if (threadIdx.x == 0) {
    mbar_init(bar, 1);
    mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(bar, 128 * 128 * 2);
    for (int j = 0; j < 2; ++j) tma_load_4d(base + j * 128 * 128, &tm, bar, 64 * j, h, t0, b);
  }
  mbar_wait(bar, 0);
  const uint8_t* tile = smem_raw + (base - raw);
  for (int i = threadIdx.x; i < 128 * 128; i += blockDim.x) {
    const int r = i / 128, col = i % 128;
    out[i] = __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(tile + swz128_offset(128, r, col)));
  }
}

// Tests 1-4: one warpgroup, operands stored into swizzled tiles by ordinary stores.
//   mode 1: C [64, 128] = A [64, 128] B^T, B [128 (n), 128 (k)]: wgmma_ss, both K-major.
//   mode 2 / 3: C [64, N] = A [64, 128] V, V [128 (k), N]: A from registers, V MN-major
//     (mode 3 with LBO and SBO swapped). mode 4: N = 64. mode 5: N = 256 (the D = 256 P V form: B
//     [128 (k), 256] in 4 column panels). The S = Q K^T form of D = 256 (m64n64k16 SS, K-major) is
//     the backward's bwd_selftest(0).
template <int N>
__global__ void selftest_wgmma_kernel(const __nv_bfloat16* a, const __nv_bfloat16* bm, float* c, int mode) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* tile = smem_raw + (base - raw);
  const uint32_t a_tile = base, b_tile = base + 64 * 128 * 2;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  for (int i = tid; i < 64 * 128; i += 128)
    *reinterpret_cast<__nv_bfloat16*>(tile + swz128_offset(64, i / 128, i % 128)) = a[i];
  const int brow = 128, bcols = mode == 1 ? 128 : N;  // B tile: rows x cols (row-major in gmem)
  for (int i = tid; i < brow * bcols; i += 128)
    *reinterpret_cast<__nv_bfloat16*>(tile + 64 * 128 * 2 + swz128_offset(brow, i / bcols, i % bcols)) = bm[i];
  fence_proxy_async();
  __syncthreads();
  float acc[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.f;
  if (mode == 1) {
    if constexpr (N == 128) {
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < 8; ++k)
        wgmma_ss_m64n128k16(WgmmaType<__nv_bfloat16>{}, acc,
                            wgmma_desc(a_tile + (k / 4) * 64 * 128 + (k % 4) * 32, 16, 1024),
                            wgmma_desc(b_tile + (k / 4) * 128 * 128 + (k % 4) * 32, 16, 1024), k > 0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(acc);
    }
  } else {
    const int r0 = warp * 16 + g;
    uint32_t pa[8][4];
    auto pk = [&](int r, int k) {
      __nv_bfloat162 v = __halves2bfloat162(a[r * 128 + k], a[r * 128 + k + 1]);
      return *reinterpret_cast<uint32_t*>(&v);
    };
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      pa[kk][0] = pk(r0, 16 * kk + 2 * t);
      pa[kk][1] = pk(r0 + 8, 16 * kk + 2 * t);
      pa[kk][2] = pk(r0, 16 * kk + 2 * t + 8);
      pa[kk][3] = pk(r0 + 8, 16 * kk + 2 * t + 8);
    }
    const uint32_t lbo = mode == 3 ? 1024 : 128 * 128, sbo = mode == 3 ? 128 * 128 : 1024;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      if constexpr (N == 256) wgmma_rs_m64n256k16_tb(WgmmaType<__nv_bfloat16>{}, acc, pa[kk], wgmma_desc(b_tile + kk * 2048, lbo, sbo), 1);
      else if constexpr (N == 128) wgmma_rs_m64n128k16_tb(WgmmaType<__nv_bfloat16>{}, acc, pa[kk], wgmma_desc(b_tile + kk * 2048, lbo, sbo), 1);
      else wgmma_rs_m64n64k16_tb(WgmmaType<__nv_bfloat16>{}, acc, pa[kk], wgmma_desc(b_tile + kk * 2048, lbo, sbo), 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc);
  }
  store_acc_rows<N>(acc, c, tid);
}

// Small exact values (multiples of 1/8 in [-0.75, 0.75]): bfloat16 holds them and float32 sums them
// exactly, so the tests compare with a tight tolerance.
float test_value(int i, int j, int salt) { return static_cast<float>(((i * 7 + j * 3 + salt) % 13) - 6) * 0.125f; }

uint16_t to_bf16_bits(float x) {  // exact for the values above
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace

int selftest(int which, double* max_err, char* msg, int msg_len) {
  auto say = [&](const char* fmt, auto... args) {
    if (msg && msg_len > 0) std::snprintf(msg, msg_len, fmt, args...);
  };
  *max_err = 0.0;
  if (!selftest_device_is_sm90(msg, msg_len)) return -1;
  DeviceBuffers buf;
  cudaError_t err = cudaSuccess;
  if (which == 0) {
    const int B = 2, T = 200, H = 3, D = 128, h = 2, t0 = 128, b = 1;
    std::vector<uint16_t> x(static_cast<size_t>(B) * T * H * D);
    auto val = [&](int bb, int tt, int hh, int dd) { return static_cast<float>((bb * 7 + tt * 3 + hh * 5 + dd) % 256 - 128); };
    for (int bb = 0; bb < B; ++bb)
      for (int tt = 0; tt < T; ++tt)
        for (int hh = 0; hh < H; ++hh)
          for (int dd = 0; dd < D; ++dd) x[((static_cast<size_t>(bb) * T + tt) * H + hh) * D + dd] = to_bf16_bits(val(bb, tt, hh, dd));
    void* dx = buf.alloc(x.size() * 2);
    float* dout = static_cast<float*>(buf.alloc(128 * 128 * 4));
    if (!dx || !dout) { say("cudaMalloc failed"); return -1; }
    cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice);
    cudaMemset(dout, 0xff, 128 * 128 * 4);  // NaN
    CUtensorMap tm;
    const int64_t st[3] = {static_cast<int64_t>(T) * H * D, H * D, D};
    if (!tma_map_rows(&tm, DType::kBFloat16, dx, B, T, H, D, st, 128)) {
      say("cuTensorMapEncodeTiled failed (or no driver entry point)");
      return -1;
    }
    const int smem = 128 * 128 * 2 + 8 + 1024;
    err = cudaFuncSetAttribute(selftest_tma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err == cudaSuccess) {
      selftest_tma_kernel<<<1, 128, smem>>>(tm, dout, h, t0, b);
      err = cudaDeviceSynchronize();
    }
    if (err != cudaSuccess) { say("kernel failed: %s", cudaGetErrorString(err)); return 0; }
    std::vector<float> out(128 * 128);
    cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost);
    int bad = 0, first = -1;
    for (int r = 0; r < 128; ++r)
      for (int col = 0; col < 128; ++col) {
        const float want = t0 + r < T ? val(b, t0 + r, h, col) : 0.f;  // rows past T: zero fill
        const float got = out[r * 128 + col];
        const double e = std::fabs(static_cast<double>(got) - want);
        if (!(e == 0.0)) {
          if (first < 0) first = r * 128 + col;
          ++bad;
          *max_err = std::isnan(e) ? INFINITY : std::max(*max_err, e);
        }
      }
    if (bad) {
      const int r = first / 128, col = first % 128;
      say("%d of 16384 elements differ; first at row %d col %d: got %g want %g", bad, r, col, out[first],
          t0 + r < T ? val(b, t0 + r, h, col) : 0.f);
      return 0;
    }
    say("TMA 2 x {64,1,128,1} boxes, 128B swizzle, rows %d..%d zero-filled past T=%d: exact", T, t0 + 127, T);
    return 1;
  }
  if (which < 1 || which >= kFwdSelftests) { say("no test %d", which); return -1; }
  const int N = which == 4 ? 64 : which == 5 ? 256 : 128;
  const int bcols = which == 1 ? 128 : N;
  std::vector<uint16_t> a(64 * 128), bm(128 * bcols);
  std::vector<float> af(a.size()), bf(bm.size());
  for (int i = 0; i < 64; ++i)
    for (int k = 0; k < 128; ++k) a[i * 128 + k] = to_bf16_bits(af[i * 128 + k] = test_value(i, k, 1));
  for (int i = 0; i < 128; ++i)
    for (int j = 0; j < bcols; ++j) bm[i * bcols + j] = to_bf16_bits(bf[i * bcols + j] = test_value(i, j * 5, 4));
  std::vector<double> ref(64 * N, 0.0);
  for (int i = 0; i < 64; ++i)
    for (int n = 0; n < N; ++n) {
      double sacc = 0;
      for (int k = 0; k < 128; ++k)
        sacc += static_cast<double>(af[i * 128 + k]) * (which == 1 ? bf[n * 128 + k] : bf[k * bcols + n]);
      ref[i * N + n] = sacc;
    }
  void* da = buf.alloc(a.size() * 2);
  void* db = buf.alloc(bm.size() * 2);
  float* dc = static_cast<float*>(buf.alloc(64 * N * 4));
  if (!da || !db || !dc) { say("cudaMalloc failed"); return -1; }
  cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db, bm.data(), bm.size() * 2, cudaMemcpyHostToDevice);
  cudaMemset(dc, 0xff, 64 * N * 4);
  const int smem = 64 * 128 * 2 + 128 * (N > 128 ? N : 128) * 2 + 1024;
  auto run = [&](auto kernel) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    kernel<<<1, 128, smem>>>(static_cast<const __nv_bfloat16*>(da), static_cast<const __nv_bfloat16*>(db), dc, which);
    return cudaDeviceSynchronize();
  };
  err = N == 256   ? run(selftest_wgmma_kernel<256>)
        : N == 128 ? run(selftest_wgmma_kernel<128>)
                   : run(selftest_wgmma_kernel<64>);
  if (err != cudaSuccess) { say("kernel failed: %s", cudaGetErrorString(err)); return 0; }
  std::vector<float> c(64 * N);
  cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost);
  int bad = 0, first = -1;
  for (int i = 0; i < 64 * N; ++i) {
    const double e = std::fabs(c[i] - ref[i]);
    if (!(e <= 1e-3)) {
      if (first < 0) first = i;
      ++bad;
      *max_err = std::isnan(e) ? INFINITY : std::max(*max_err, e);
    }
  }
  const char* what[] = {"", "wgmma m64n128k16 SS, A and B K-major (S = Q K^T form)",
                        "wgmma m64n128k16 RS, B MN-major, LBO = panel, SBO = 1024 (O += P V form)",
                        "wgmma m64n128k16 RS, B MN-major, LBO/SBO swapped (diagnostic)",
                        "wgmma m64n64k16 RS, B MN-major (D = 64 P V form)",
                        "wgmma m64n256k16 RS, B MN-major, 4 panels (D = 256 P V form)"};
  if (bad) {
    say("%s: %d of %d differ; first at (%d, %d): got %g want %g", what[which], bad, 64 * N, first / N, first % N,
        c[first], ref[first]);
    return 0;
  }
  say("%s: exact (64 x %d, K = 128)", what[which], N);
  return 1;
}

}  // namespace sm90
}  // namespace cuda
}  // namespace flashattn
