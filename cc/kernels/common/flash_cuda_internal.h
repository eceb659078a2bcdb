// Internal launchers shared between the CUDA translation units (not part of the public API).
#ifndef TF_FLASHATTN_KERNELS_FLASH_CUDA_INTERNAL_H_
#define TF_FLASHATTN_KERNELS_FLASH_CUDA_INTERNAL_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <map>
#include <utility>

#include "cc/kernels/common/flash_params.h"

namespace flashattn {
namespace cuda {

// Returns cudaSuccess when the current device is sm_80 or newer (cached per device); big_smem
// (optional) tells whether an SM has >= 210 KiB of shared memory: true on compute 9.0 (228 KiB), false on
// compute 8.x (at most 164 KiB), so it follows the SASS target a device runs (SmemClass in flash_cuda_common.cuh).
cudaError_t check_device(bool* big_smem = nullptr);

// Makes `kernel`'s dynamic shared-memory limit at least `bytes` on the current device. The limit
// belongs to the device's context, so it is raised once (and again only for a larger size):
// a cudaFuncSetAttribute at every launch costs host time at every call of the op.
template <typename Kernel>
cudaError_t set_dynamic_smem(Kernel kernel, int bytes) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> limit;  // (kernel, device) -> bytes set
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  const auto key = std::make_pair(reinterpret_cast<const void*>(kernel), dev);
  std::lock_guard<std::mutex> lock(mu);
  auto it = limit.find(key);
  if (it != limit.end() && it->second >= bytes) return cudaSuccess;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) limit[key] = bytes;
  return err;
}

inline bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

// Whether every stride of q, k, v and o is non-negative and a multiple of 4 elements (16 bytes of float32: what TMA
// needs of the TF32 kernels' tensor maps).
inline bool strides_mult4(const AttnShape& s) {
  for (int i = 0; i < 3; ++i) {
    if (s.q_stride[i] < 0 || s.k_stride[i] < 0 || s.v_stride[i] < 0 || s.o_stride[i] < 0) return false;
    if (s.q_stride[i] % 4 || s.k_stride[i] % 4 || s.v_stride[i] % 4 || s.o_stride[i] % 4) return false;
  }
  return true;
}

// Whether q, k, v and o (strides from shape) can move in 16-byte vectors of 16-bit elements:
// every stride and head dim a multiple of 8 elements, every base pointer 16-byte aligned.
inline bool vec8(const AttnShape& s, const void* q, const void* k, const void* v, const void* o) {
  bool ok = s.D % 8 == 0 && s.Dv % 8 == 0;
  for (int i = 0; i < 3; ++i)
    ok = ok && s.q_stride[i] % 8 == 0 && s.k_stride[i] % 8 == 0 && s.v_stride[i] % 8 == 0 &&
         s.o_stride[i] % 8 == 0;
  return ok && aligned16(q) && aligned16(k) && aligned16(v) && aligned16(o);
}

// Padded head dim the tensor-core kernels use: 64, 128 or 256 (0: too large).
inline int head_dim_bucket(int64_t d) { return d <= 64 ? 64 : d <= 128 ? 128 : d <= 256 ? 256 : 0; }
// The head dim of the kernels a call runs: head_dim_bucket(max(D, Dv)) (0: too large); other head dims and
// Dv != D are padded up to it.
inline int padded_head_dim(const AttnShape& s) { return head_dim_bucket(s.D > s.Dv ? s.D : s.Dv); }
// True when the call runs padded up (D or Dv below padded_head_dim): only kernels that check the columns they
// store take such calls.
inline bool runs_padded(const AttnShape& s) { const int hd = padded_head_dim(s); return s.D != hd || s.Dv != hd; }
// The head dims the Hopper TF32 kernels of head dim kd (64 or 128) take: D, Dv multiples of 4 (TMA's 16 bytes of
// float32) whose padded_head_dim is kd.
inline bool tf32_head_dims_apply(const AttnShape& s, int kd) {
  return s.D > 0 && s.Dv > 0 && s.D % 4 == 0 && s.Dv % 4 == 0 && padded_head_dim(s) == kd;
}

// Tuning builds (-DFA_TUNING, benchmarks/tune_configs.py) pick other tile configurations at run
// time: tuning_cfg(var) reads the environment variable var (0 when unset), and
// FA_TUNE(n, launch) returns launch when it is n. Normal builds neither read the environment nor
// instantiate the variants.
#ifdef FA_TUNING
inline int tuning_cfg(const char* var) {
  const char* v = getenv(var);
  return v ? atoi(v) : 0;
}
#define FA_TUNE(n, ...) \
  if (tune == (n)) return __VA_ARGS__
#else
#define FA_TUNE(n, ...)
#endif

// Decoding path (sm80/flash_decode.cu): whether flash_fwd_cuda takes it for these params (decode
// setting, dtype, no dropout, head dims, Tq <= 16 unless forced), and its launcher (uses
// params.workspace for several splits, falls back to one split when it is null).
bool decode_applies(const FlashFwdParams& p);
cudaError_t fwd_decode(const FlashFwdParams& p, cudaStream_t stream);
// Its workspace (the key splits' partial results) when decode_applies(p), else 0: flash_fwd_workspace_bytes
// (flash_cuda_dispatch.cu) adds the Hopper TF32 forward's.
size_t decode_workspace_bytes(const FlashFwdParams& p);
// What fwd_decode would launch on the current device (for the kernel harness and tuning):
// applies = decode_applies(p); splits as chosen when a workspace is given (without one: 1).
struct DecodePlan {
  bool applies = false;
  int splits = 0, warps = 0, stages = 0, smem_bytes = 0, ctas_per_sm = 0, sms = 0;
  int head_dim_bucket = 0;
  int64_t row_tiles = 0, ctas = 0;
};
cudaError_t decode_plan(const FlashFwdParams& p, DecodePlan* plan);

// The sm_80 family's kernels (cc/kernels/sm80/), which run on every GPU from sm_80 on.
// Forward on tensor cores for float16 / bfloat16 (flash_fwd.cu); vec: see vec8.
cudaError_t fwd_tc(const FlashFwdParams& p, bool vec, bool big_smem, cudaStream_t stream);
// Backward for every dtype but float64 (flash_bwd.cu), and its workspace size
// (see flash_bwd_workspace_bytes).
cudaError_t bwd(const FlashBwdParams& p, bool big_smem, cudaStream_t stream);
size_t bwd_workspace_bytes(const FlashBwdParams& p);
// The parts of that workspace for the float16 / bfloat16 path (for sm90/flash_bwd_sm90.cu, which
// uses the same workspace): dsum and lse2 [B, H, Tq], the dQ accumulator [B, H, tq_pad, hd] (null
// in deterministic mode unless dq_sem is set; tq_pad = Tq rounded up to 128, hd =
// head_dim_bucket(max(D, Dv))), and the pre-pass that fills dsum = rowsum(dO * O) - d_lse and
// lse2 = log2e * lse. dq_sem: deterministic mode only, in builds with the Hopper kernels, float16 /
// bfloat16 with D, Dv <= 256, multiples of 8 (else null): the dQ accumulator and, right after it, one int
// per (b, h, 64-row query tile) [B, H, tq_pad / 64], the ordered reduction's counters of sm90's
// deterministic backward (sm80's deterministic backward uses neither).
struct BwdWorkspaceParts {
  float* dsum = nullptr;
  float* lse2 = nullptr;
  float* dq_acc = nullptr;
  int* dq_sem = nullptr;
  int64_t tq_pad = 0;
  int hd = 0;
};
BwdWorkspaceParts bwd_workspace_parts(const FlashBwdParams& p);
cudaError_t bwd_dsum_tc(const FlashBwdParams& p, float* dsum, float* lse2, cudaStream_t stream);
// The float32 TF32 workspace's parts (for sm90/flash_bwd_sm90_tf32.cu and _d128.cu): dsum [B, H, Tq], the dQ
// accumulator (null in deterministic mode unless a Hopper TF32 backward may run: its ordered reduction uses it) and
// where the Hopper pre-pass's room starts after it (extra; there only
// when sm90::bwd_tf32_workspace_floats(p) or bwd_tf32_d128_workspace_floats(p) > 0 was counted in the size: the
// caller checks workspace_bytes); all
// null without a workspace or for other dtypes. bwd_dsum_tf32: sm80's TF32 dsum pre-pass (dsum = rowsum(dO O)
// - d_lse).
struct Tf32BwdWorkspaceParts {
  float* dsum = nullptr;
  float* dq_acc = nullptr;   // [B, H, dq_rows, head_dim_bucket] floats
  float* extra = nullptr;
  int64_t dq_rows = 0;       // Tq rounded up to 128
};
Tf32BwdWorkspaceParts bwd_tf32_workspace_parts(const FlashBwdParams& p);
cudaError_t bwd_dsum_tf32(const FlashBwdParams& p, float* dsum, cudaStream_t stream);

// float32 / any dtype, SIMT, full float32 arithmetic (flash_fwd_simt.cu).
cudaError_t fwd_simt(const FlashFwdParams& p, cudaStream_t stream);
// dQ (and dbias when non-null) per query row, no atomics (flash_bwd_simt.cu). dsum: [B, H, Tq].
cudaError_t bwd_dq_simt(const FlashBwdParams& p, const float* dsum, cudaStream_t stream);
// dQ (and dbias when non-null) on tensor cores without atomics, for float16 / bfloat16
// (flash_bwd_dq.cu). lse2: [B, H, Tq] log2e * lse; hd: head_dim_bucket(max(D, Dv)).
cudaError_t bwd_dq_tc(const FlashBwdParams& p, const float* dsum, const float* lse2, bool vec, int hd,
                      cudaStream_t stream);
// dK, dV per key row, no atomics (flash_bwd_simt.cu).
cudaError_t bwd_dkdv_simt(const FlashBwdParams& p, const float* dsum, cudaStream_t stream);

// float32 on TF32 tensor cores (params.allow_tf32). Forward (flash_fwd_tf32.cu); big_smem: see
// check_device.
cudaError_t fwd_tf32(const FlashFwdParams& p, bool big_smem, cudaStream_t stream);
// Backward (flash_bwd_tf32.cu): dq_acc [B, H, Tq, head_dim_bucket(max(D, Dv))] float32 workspace
// for dQ atomics, or null for the deterministic schedule (a separate dQ kernel, no atomics).
// dsum: [B, H, Tq]. big_smem: see check_device.
cudaError_t bwd_tf32(const FlashBwdParams& p, const float* dsum, float* dq_acc, bool big_smem,
                     cudaStream_t stream);
// dq = scale * dq_acc (dq_acc [B, H, Tq, hd] row-major; dq float32, q's strides): the TF32 backwards' last step
// (flash_bwd_tf32.cu; also sm90/flash_bwd_sm90_tf32.cu).
cudaError_t bwd_dq_convert_tf32(const FlashBwdParams& p, const float* dq_acc, int hd, cudaStream_t stream);

// Hopper-only kernels (cc/kernels/sm90/, compiled for sm_90a alone; declared always, defined
// only in builds with FA_HAS_SM90 = 1).
namespace sm90 {
// Whether the sm_90a forward (flash_fwd_sm90.cu) takes these params: compute capability 9.0,
// float16 / bfloat16, D, Dv <= 256 and multiples of 8 (kernels for 64, 128 and 256 (64-key tiles,
// schedule 0); other head dims and Dv != D padded up to padded_head_dim), index masks (causal,
// window, lengths, validity), soft-cap, a dense mask and bias (not with dropout) and dropout, 16-byte
// aligned tensors and strides.
bool fwd_applies(const FlashFwdParams& p);
// Its launcher; cudaErrorNotSupported when the tensor maps cannot be made (the caller falls back).
cudaError_t fwd(const FlashFwdParams& p, cudaStream_t stream);
// The switch: TF_FLASHATTN_SM90=0 in the environment turns the sm90 path off (read once);
// set_enabled(0 / 1) overrides it in this process, set_enabled(-1) goes back to the environment.
bool enabled();
void set_enabled(int mode);
// Launches of the sm90 forward so far in this process (to check which path ran).
int64_t fwd_launches();
// Schedules of the plain (no-dropout) D = 64 and D = 128 forward (flash_fwd_sm90.cu's kSched; 0 is
// the first schedule, the reference of the bitwise checks; fwd_default_variant(), 5, the default at
// D = 128, but for the plain D = 128 kernel 7 (the persistent grid) without a causal mask and 10 (its tiles
// from a counter) with one when no schedule is asked for; the plain D = 64 kernel's default is 8, its other kernels run 5): fwd_variants() of them. fwd_variant_for(d) is TF_FLASHATTN_SM90_FWD_VARIANT (read once;
// any of 0 .. fwd_variants() - 1, 0 included; head dim d's default when unset, empty, not a number
// or out of range) unless set_fwd_variant(v) overrides it (v < 0: back to the environment; false,
// nothing changed, when v >= fwd_variants() or v is not fwd_variant_built: schedules 1, 2, 3, 4, 6 and 9 are
// compiled in FA_TUNING builds only, and the environment's value is then ignored as an out-of-range one is;
// a release build has schedule 0 and the defaults alone, 5, 7 and 10 for the plain D = 128 kernel, 8 for the plain
// D = 64 one, and the dense kernel's schedule 1 alone at D = 64 and 128; a call whose kernel lacks the schedule asked
// for runs its default, but 8 runs 5 outside the plain D = 64 kernel, as in every build);
// fwd_variant() is fwd_variant_for(128). D = 256 always
// takes variant 0; dropout at D = 64 / 128 takes variant 0 when fwd_variant_for(d) is 0, else
// flash_fwd_sm90.cu's kDropVariant (0: schedule 0 either way). Variants 8 and 9 (3 consumer warpgroups) exist for the plain
// D = 64 kernel only (and the D = 64 index-masked one with FA_SM90_FWD_IDX64_3WG: fwd_idx64_wide); other calls asking
// for them run 5. last_fwd_variant(): the schedule of the last
// launch (-1 before any).
int fwd_variants();
// Bytes of workspace the 16-bit forward needs for params p: 256 (schedule 10's tile counter) when the call
// runs that schedule (asked for, or the causal plain kernel's default at padded head dim 128), else 0;
// flash_fwd_workspace_bytes returns it for 16-bit calls.
size_t fwd_workspace_bytes(const FlashFwdParams& p);
int fwd_default_variant();
int fwd_variant();
int fwd_variant_for(int d);
bool set_fwd_variant(int v);
bool fwd_variant_built(int v);
// The D = 64 index-masked kernel (no dropout, dense mask or bias) has schedule 8 and runs it by default
// (flash_fwd_sm90.cu's FA_SM90_FWD_IDX64_3WG; otherwise 8 runs 5 there, as outside the plain D = 64 kernel).
bool fwd_idx64_wide();
// The plain (idx: the index-masked, without dropout) D = 256 kernel's schedule (flash_fwd_sm90.cu's
// FA_SM90_FWD_D256_SCHED / FA_SM90_FWD_D256_IDX_SCHED; 0 by default), run unless schedule 0 is asked for.
int fwd_d256_schedule(bool idx);
int last_fwd_variant();
// Self-test of the building blocks, one at a time (which: 0 TMA load into a 128-byte-swizzled
// tile, 1 wgmma m64n128k16 with both operands K-major in shared memory, 2 wgmma m64n128k16 with A
// from registers and B MN-major (the P V form), 3 the same with LBO / SBO swapped (diagnostic: one
// of 2 and 3 should pass), 4 wgmma m64n64k16 register-A form (D = 64), 5 wgmma m64n256k16
// register-A form (D = 256)). Runs on the current device (synchronizes);
// returns 1 pass, 0 fail, -1 could not run; max_err and msg (msg_len bytes, NUL-terminated) say more.
int selftest(int which, double* max_err, char* msg, int msg_len);
constexpr int kFwdSelftests = 6;

// The sm_90a forward for float32 on TF32 tensor cores (flash_fwd_sm90_tf32.cu), on by default:
// tf32_enabled() is false with TF_FLASHATTN_SM90_TF32=0 (read once; exactly "0"), else true, unless
// set_tf32_enabled(0 / 1) overrides it (-1: back to the environment); the dispatch also needs
// enabled() (TF_FLASHATTN_SM90 not 0). fwd_tf32_applies: compute capability 9.0, float32 with
// allow_tf32, D, Dv <= 128 and multiples of 4 (64 and 128, others padded up), GQA, no mask or causal (any
// offset), windows, lengths, [B, T] validity, soft-cap, dropout, a dense mask and bias (not with dropout; its
// index-masked kernels); 16-byte aligned tensors, strides multiples of 4.
// fwd_tf32: its launcher (cudaErrorNotSupported when the tensor maps cannot be made: the caller
// falls back to sm80's fwd_tf32). fwd_tf32_launches(): its launches so far in this process.
// tf32_selftest(which, ...): its building blocks one at a time (0 TMA of a float32 tile, 1 the V
// transpose and K rounding, 2 wgmma m64n64k8 .tf32 SS K-major, 3 / 4 wgmma m64n128k8 / m64n64k8 .tf32
// RS with A from the S accumulators and B = V^T, 5 a diagnostic expected to fail: test 3 with the
// other register order, 6 wgmma m64n64k8 .tf32 RS with A = Q's fragments from shared memory (variants
// 1 / 2's S = Q K^T), and its P V, 7 variant 3's pre-pass (K rounded, V rounded and transposed into a
// workspace) and a TMA load of a V^T tile from it, against the transposer's V^T bit for bit);
// returns as selftest().
bool tf32_enabled();
void set_tf32_enabled(int mode);
bool fwd_tf32_applies(const FlashFwdParams& p);
cudaError_t fwd_tf32(const FlashFwdParams& p, cudaStream_t stream);
int64_t fwd_tf32_launches();
// The sm_90a backward for float32 on TF32 tensor cores (flash_bwd_sm90_tf32.cu, head dim 64): bwd_tf32_enabled()
// is true unless TF_FLASHATTN_SM90_TF32_BWD=0 or TF_FLASHATTN_SM90=0 (read once), or set_bwd_tf32_enabled(0)
// (1 .. 7: on with variant 0 .. 6, -1 back to the environment).
// bwd_tf32_workspace_floats: the floats its pre-pass needs beyond sm80's TF32 workspace (shape, flags and the
// current device: float32, allow_tf32, D, Dv multiples of 4 with padded_head_dim 64 (64 itself or padded up),
// enabled, compute capability 9.0; in deterministic mode with the ordered reduction's counters; else
// 0). bwd_tf32_applies: those, a workspace_bytes that holds them, the index masks (causal, window, lengths,
// [B, T] validity), soft-cap and dropout, a dense mask, bias / dbias where bwd_tf32_dense_enabled (not with
// dropout), TMA's alignment (strides multiples of 4).
// bwd_tf32: the whole backward (sm80's dsum pre-pass, its own pre-pass, the kernel, dQ's conversion) in the
// workspace's parts (bwd_tf32_workspace_parts); cudaErrorNotSupported before any work is queued when it
// cannot run (the caller falls back to sm80).
bool bwd_tf32_enabled();
void set_bwd_tf32_enabled(int mode);
int64_t bwd_tf32_launches();
// A dense mask, bias and dbias on both Hopper TF32 backwards (their kTf32Dense instantiations, not with dropout):
// on by default; off with TF_FLASHATTN_SM90_TF32_BWD_DENSE=0 (read once) or set_bwd_tf32_dense(0) (sm80's TF32
// backward then takes those calls; 1 on, -1 back to the environment).
bool bwd_tf32_dense_enabled();
void set_bwd_tf32_dense(int mode);
size_t bwd_tf32_workspace_floats(const FlashBwdParams& p);
bool bwd_tf32_applies(const FlashBwdParams& p);
cudaError_t bwd_tf32(const FlashBwdParams& p, cudaStream_t stream);
// The same at head dim 128 (flash_bwd_sm90_tf32_d128.cu; D, Dv padded up to 128 too): on where bwd_tf32_enabled()
// is, unless set_bwd_tf32_d128_enabled overrides it (0 off, 1 + i on with its dQ mode i, -1: back to that); index
// masks or none, soft-cap, dropout, a dense mask and bias / dbias as the head-dim-64 one, deterministic mode too;
// its pre-pass room (Qr, dOr, QT, dOT) after sm80's TF32 parts.
void set_bwd_tf32_d128_enabled(int mode);
int64_t bwd_tf32_d128_launches();
size_t bwd_tf32_d128_workspace_floats(const FlashBwdParams& p);
bool bwd_tf32_d128_applies(const FlashBwdParams& p);
cudaError_t bwd_tf32_d128(const FlashBwdParams& p, cudaStream_t stream);
// Head dim 256 (flash_bwd_sm90_tf32_d256.cu; D == Dv == 256, index masks or none): on unless
// TF_FLASHATTN_SM90_TF32_BWD_D256=0 or set_bwd_tf32_d256_enabled(0) (1 + i on with variant i, -1 back to the
// environment, else the build's FA_SM90_TF32_BWD_D256, default 1); its pre-pass room (Qr, dOr) after sm80's TF32
// parts.
void set_bwd_tf32_d256_enabled(int mode);
int64_t bwd_tf32_d256_launches();
size_t bwd_tf32_d256_workspace_floats(const FlashBwdParams& p);
bool bwd_tf32_d256_applies(const FlashBwdParams& p);
cudaError_t bwd_tf32_d256(const FlashBwdParams& p, cudaStream_t stream);
// Its variants (flash_fwd_sm90_tf32.cu's kTf32Sched: 0 Q in shared memory, K rounded; 1 Q in registers;
// 2 as 1 with K truncated by the tensor cores instead of rounded; 3 as 1 with K and V^T prepared by a
// pre-pass into the workspace): tf32_variants() of them; tf32_variant() is set_tf32_variant(v)'s override
// (v < 0: back to the environment; false, nothing changed, when v >= tf32_variants()), else
// TF_FLASHATTN_SM90_TF32_VARIANT (read once; 0 .. tf32_variants() - 1), else 1 (the default below the
// pre-pass threshold). tf32_default_variant(shape, dense): 0 for a call with a dense mask or bias (dense) at
// head dim 128, 3 at head dim 256 (FA_SM90_TF32_D256, on by default), else 3 when each K / V tile has at least 8
// readers (ceil(Tq / 128) H / Hkv >= 8), else 1.
// tf32_variant_for(shape, dense): what a launch runs: the variant set explicitly (the override or the
// environment) where this build has it for the call's kernel (a release build: 1 and 3, and 0 for a dense mask or
// bias at head dim 128; FA_TUNING builds all), else tf32_default_variant (fwd_tf32 runs 1 instead of 3 when
// params.workspace is null).
// last_tf32_variant(): the variant of the last launch (-1 before any).
int tf32_variants();
int tf32_variant();
int tf32_default_variant(const AttnShape& shape, bool dense = false);
int tf32_variant_for(const AttnShape& shape, bool dense = false);
bool set_tf32_variant(int v);
int last_tf32_variant();
// Bytes of workspace fwd_tf32 needs (variant 3's K and V^T, flash_fwd_sm90_tf32.cu "Variant 3"): non-zero
// only for params fwd_tf32_applies would take, whatever their pointers and the device (the size is
// asked at XLA compile time), when tf32_variant_for(shape, dense) is 3. flash_fwd_workspace_bytes returns it when
// the dispatch would reach fwd_tf32 (not the decoding path; enabled() and tf32_enabled()).
size_t fwd_tf32_workspace_bytes(const FlashFwdParams& p);
int tf32_selftest(int which, double* max_err, char* msg, int msg_len);
constexpr int kFwdTf32Selftests = 9;  // 8: FA_SM90_TF32_D256 builds only ("not run" otherwise)

// The sm_90a backward (flash_bwd_sm90.cu), on by default: bwd_applies is false when
// TF_FLASHATTN_SM90_BWD=0 or TF_FLASHATTN_SM90=0 (read once) or after set_bwd_enabled(0); else for
// float16 / bfloat16, head dims 64 and 128 (any D, Dv <= 256, multiples of 8, padded up to padded_head_dim, the
// padded calls on the index-masked kernels), the index masks (causal, window, lengths, [B, Tq] /
// [B, Tk] validity; sm80's rules) or none, dropout (rate > 0 with a seed; sm80's keep mask and
// arithmetic) or none, soft-cap, a dense mask, bias / dbias (those three not with dropout; bias /
// dbias at D = 64 only, their query / key strides below 2^23), deterministic mode (the ordered
// dQ reduction, unless bwd_det_mode is 0, and when the
// workspace holds its counters: BwdWorkspaceParts::dq_sem) or not, 16-byte
// aligned tensors and strides, a workspace, compute capability 9.0; and, unless
// TF_FLASHATTN_SM90_BWD_D256=0 (read once), padded head dim 256 without a mask, causal or with the index
// masks (window, lengths, validity), with or without dropout, deterministic or not; and unless
// TF_FLASHATTN_SM90_BWD_SPLITD=0 (read once; the split kernel's SCORE instantiations), bias / dbias at padded head
// dim 128 and soft-cap, a dense mask, bias / dbias at 256, without dropout, deterministic or not (with the index masks or none; the same stride limits). It
// uses flash_bwd_workspace_bytes' workspace as the sm80 backward does (same size).
bool bwd_applies(const FlashBwdParams& p);
// Its launcher; cudaErrorNotSupported (before any work is queued) when the tensor maps cannot be
// made: the caller falls back to sm80.
cudaError_t bwd(const FlashBwdParams& p, cudaStream_t stream);
bool bwd_enabled();
// TF_FLASHATTN_SM90_BWD_DET (read once): 0 off (every deterministic call on sm80's), else 1 (every
// deterministic call the Hopper kernels can take).
int bwd_det_mode();
void set_bwd_enabled(int mode);  // 1 on, 0 off, -1 back to the environment
int64_t bwd_launches();
// The key-tile order of the D = 64 / 128 / 256 kernels (flash_bwd_sm90.cu, "Tile order"; causal
// masks only): TF_FLASHATTN_SM90_BWD_ORDER (read once: 0 the launch order, 1 / unset grouped
// longest-first, 2 longest-first) and TF_FLASHATTN_SM90_BWD_ORDER_G (order 1's pairs per group;
// unset: from the L2 budget). set_bwd_order overrides them: order -1 back to the environment, group
// 0 back to the environment's (or the automatic) group size.
void set_bwd_order(int order, int group);
struct BwdOrderInfo {
  int order = 0;      // the order set now (override, else the environment)
  int group = 0;      // order 1's group size set now (0: automatic)
  int last_g = -1;    // the last launch's pairs per group (0: the launch order; -1: no launch yet)
  int last_big = 0;   // the last launch's groups with last_g + 1 pairs
};
BwdOrderInfo bwd_order_info();
// Self-test of the backward's building blocks (which: 0 wgmma m64n64k16 SS K-major (S^T = K Q^T),
// 1 / 2 wgmma m64n64k16 SS with A and B MN-major (dQ = dS K; B from column panel 0 / 1), 3 the
// same from key row 64 with K = 64 (the D = 64 split by keys: index-masked and DET kernels), 4 the
// P^T dO form: A from the S^T accumulators of test 0 repacked in registers, B MN-major [64 x 128]; the
// head-dim-256 kernel's forms:
// 5 wgmma m64n32k16 SS K-major with B from row 32, 6 m64n128k16 SS with A K-major and B MN-major
// (dV += P^T dO), 7 m64n128k16 SS with A and B MN-major, B panels 2 and 3 (dQ = dS K); the D = 128 split
// kernel's forms: 8 m64n64k16 SS with A K-major and B MN-major from
// panel 1 (dV_c, dK_c), 9 m64n64k16 SS with A and B MN-major over 64-row panels, B panel 1 (dQ_c); the D = 64
// kernels' dQ split by columns (FA_SM90_BWD_D64_COLS): 10 / 11 m64n32k16 SS with A and B MN-major, B from byte
// 64 / 0 of its 128-byte rows (consumer 1 / 0's 32 columns)); returns as selftest().
int bwd_selftest(int which, double* max_err, char* msg, int msg_len);
constexpr int kBwdSelftests = 12;
}  // namespace sm90

}  // namespace cuda
}  // namespace flashattn

#endif  // TF_FLASHATTN_KERNELS_FLASH_CUDA_INTERNAL_H_
