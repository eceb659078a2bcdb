// Hopper-native FlashAttention backward (sm_90a only): float16 / bfloat16, head dims 64 and 128
// (and 256 without a mask, causal or with the index masks, and dropout: its own kernel and
// header comment below, "Head dim 256"; that kernel templated on the head dim also serves bias / dbias
// at D = 128 and soft-cap, the dense mask, bias / dbias at D = 256 (TF_FLASHATTN_SM90_BWD_SPLITD=0 sends
// them back to sm80): "Split kernel at D = 128, and the score options" below; the rest of
// this comment is about D = 64 / 128). Any other D and Dv <= 256 (multiples of 8) run the kernels of
// head_dim_bucket(max(D, Dv)), padded up as the forward (flash_fwd_sm90.cu): the tensor maps carry the real
// D (q, k) and Dv (v, dO), so the columns past them load as zeros and add nothing to S, dP, dS, and the
// columns of dQ, dK, dV past D / Dv are zero and not stored (the epilogues and the dQ conversion check the
// column; at head dims 64 / 128 such calls run the IDX kernel: the kernels without IDX carry no checks, and
// their machine code stayed as it was (with checks it had moved, the head-dim-64 backward 2-3 % slower on the
// H200: RESULTS.md "Other head dims on the Hopper kernels")),
// no mask, causal (any causal_offset) and the other index masks the Hopper forward takes (sliding
// window, q / k lengths, [B, Tq] / [B, Tk] validity masks; sm80's rules, below), and dropout (with
// any of those or none; below), soft-cap and a dense mask (in the IDX kernel, not with dropout), an
// additive bias with its gradient dbias (the same, D = 64 only; below); GQA
// allowed; TensorFlow's
// op determinism too (the DET instantiations, below, bwd_det_mode; at D = 256 and for the split kernel's score
// options its DET instantiations, checked on the H200 2026-12-02). The index masks, dropout and the deterministic
// mode were checked on the H200 on 2026-12-01 (benchmarks/sm90_bwd_check.py: 138 numerics rows, 56
// deterministic ones (repeat-bitwise, dK / dV bitwise equal to the default), memcheck; RESULTS.md
// "Hopper backward kernel"); the dQ accumulation by bulk reduce-add at D = 128 (below, "dQacc += dQ_c")
// on 2026-12-01 too (RESULTS.md "(g)"). Deterministic mode costs 1.02x the default at D = 128 without a mask,
// 1.74x with a causal one (the ordered dQ reduction waits along the diagonal), and at D = 64 with a
// causal mask it was slower than sm80's deterministic backward (4.96 ms against 4.17, T = 4096, B =
// 4, H = 32, bf16; benchmarks/sm90_bwd_check.py's bench_det; both measured before the bulk dQ
// reduce-add of D = 128's default); since 2026-12-02 it is 1.3x faster there (bwd_det_mode). Taken by flash_cuda_dispatch.cu where bwd_applies(): on
// by default on compute capability 9.0; TF_FLASHATTN_SM90_BWD=0 (or TF_FLASHATTN_SM90=0, which
// turns off both Hopper kernels) or set_bwd_enabled(0) keep the sm80 backward; everything else
// runs sm80/flash_bwd.cu. bwd_selftest() (below, exposed by the kernel harness) checks the wgmma
// forms one at a time; benchmarks/sm90_bwd_check.py checks the whole backward against torch and our
// sm80 one, the index masks and dropout included (`bash benchmarks/gpu_run.sh sm90bwd`).
//
// Building blocks: the hand-written PTX of sm90_ptx.cuh (as the forward, flash_fwd_sm90.cu).
//
// Design (FlashAttention-3's backward, simplified):
//   Grid (ceil(Tk / 128), Hkv, B): one CTA per key tile of kBk = 128 keys of one kv head. CTA = 3
//   warpgroups (384 threads): warpgroup 0 produces (setmaxnreg.dec to 24), warpgroups 1 and 2
//   consume (setmaxnreg.inc to 240); consumer c owns keys 64c .. 64c+63 of the tile.
//   The CTA walks "units" (query head hl of the kv head's group, query tile of kBq = 64 rows) that
//   see the key tile (causal: query tiles from the first row that sees key j0 on; index masks:
//   sm80's KeyTileUnits, below).
//   Producer: thread 0 loads the K and V tiles once (TMA, kv_full), then per unit the Q and dO tiles
//   into a kStages = 2 ring (TMA, full[s] with expect_tx); warp 1 copies the unit's 64 lse2 and
//   dsum values (precomputed by sm80's pre-pass) into the ring's row arrays with ordinary loads and
//   stores and arrives on full[s] too (full[s] counts 1 + 32 arrivals). Consumers release a stage
//   by arriving on empty[s] (256 arrivals). The lagged D = 64 kernel (FA_SM90_BWD_D64_LAG) has two
//   more pairs, ds_full[2] and ds_free[2] (256 arrivals each): a dS^T buffer stored, and read by dQ.
//   Per unit, consumer c (rows of its matrices = its 64 keys, so P and dS stay in registers for
//   dV and dK; only dS also goes to shared memory, for dQ):
//     S^T  = K_c Q^T       [64 keys x 64 queries]  D/16 wgmma m64n64k16 SS, both K-major
//     dP^T = V_c dO^T      [64 x 64]               D/16 wgmma m64n64k16 SS, both K-major (its own
//                          commit group: P^T below is computed while it runs, then waited for)
//     P^T  = 2^(S^T scale log2e - lse2[q]),  dS^T = P^T (dP^T - dsum[q]); masked elements (outside
//            the causal diagonal, past Tk or past Tq; IDX below: any index mask) get P = 0 by
//            selection, so dS = 0 too (only in tiles that cross a limit: the rest is unchanged)
//     dV  += P^T dO        [64 keys x D]  4 wgmma m64nDk16, A = P^T from registers (the S^T
//                          accumulators repacked, as the forward's P), B = dO MN-major; issued
//                          (own commit group) before the dS^T pass, so it runs under it (as
//                          FlashAttention-3; <DROP, D = 128>: with dK below, registers)
//     dS^T -> shared memory (16-bit, [128 keys][64 queries], 128-byte swizzle, two buffers)
//     dK  += dS^T Q        [64 x D]       the same with dS^T and Q
//     (named barrier: D = 128 and the D = 64 kernels that split dQ by columns without the lag (the plain ORD
//     kernel, its IDX twin with FA_SM90_BWD_D64_COLS_IDX_ORD, the launch-order ones with FA_SM90_BWD_D64_LAG=0),
//     both consumers' halves of dS^T are in shared memory; the D = 64 kernels that split it by keys, this
//     consumer's own half, the only one its dQ reads: its warpgroup alone; the lagged D = 64 kernels in the launch
//     order (FA_SM90_BWD_D64_LAG: the plain one, the index-masked ones without bias, dropout included
//     (FA_SM90_BWD_D64_COLS_DROP), and with FA_SM90_BWD_D64_COLS_BIAS=1 the bias one): no barrier, their
//     dQ_c below is issued at the next unit's start, after the mbarrier ds_full of this unit's dS^T buffer)
//     dQ_c = dS K          D = 128: columns 64c .. 64c+63 over all 128 keys (8 k16 steps);
//                          D = 64 split by columns (FA_SM90_BWD_D64_COLS, the default; kCols64: the
//                          plain kernels and the index-masked ones without bias: the launch order's
//                          (dropout too) and the grouped order's (FA_SM90_BWD_D64_COLS_IDX_ORD);
//                          columns 32c .. 32c+31 over all 128 keys (8 steps, m64n32k16);
//                          the index-masked ones with bias (FA_SM90_BWD_D64_COLS_BIAS=0) and the DET ones
//                          (and all with FA_SM90_BWD_D64_COLS=0): all 64 columns over the consumer's own
//                          64 keys (4 steps);
//                          wgmma m64n64k16 (m64n32k16) SS with A = dS read transposed (MN-major) from the dS^T
//                          buffer and B = K MN-major
//     (D = 128 without DET (with dropout at FA_SM90_BWD_DROP128 >= 2), kRotate: the next unit's S^T and dP^T are
//     issued here, after
//     dQ_c's staging stores below, and run under its fence, barrier and bulk reduce-add)
//     dQacc += dQ_c        into the workspace's dQ accumulator, in this file's fragment order
//                          (below; the stage released first, its last reader done). The consumer's
//                          64 x 64 block is one contiguous 16 KiB of it. D = 128 without DET
//                          (dq_bulk_reduce; FlashAttention-3's way): each thread stores its 8
//                          float4 to the consumer's staging block in shared memory (the same order,
//                          conflict-free), fence.proxy.async, the warpgroup's named barrier 7 + c,
//                          then thread 0 adds the block to global memory with one bulk reduce-add
//                          of the copy engine (cp.reduce.async.bulk .add.f32, 16 KiB; SASS
//                          UBLKRED.G.S.ADD.F32.RN), instead of 1024 float4 atomics per consumer on
//                          the consumers' load / store pipe. Before the next unit's stores, thread 0
//                          waits for the copy engine's read of the block (wait_group.read, after
//                          the dS^T stores) and the barrier before dQ (1) passes that on; it waits
//                          for the writes too (wait_group 0) at the kernel's end. D = 64 without
//                          DET: 4 float4 atomicAdd per thread where dQ is split by columns (a 64 x 32
//                          block), 8 where by keys (64 x 64). DET: 8, in the ordered protocol
//                          below. Checked on the H200 (2026-12-01, with the bulk
//                          reduce-add at D = 64 too: benchmarks/sm90_bwd_check.py numerics 166 /
//                          166, deterministic 62 / 62, memcheck clean; RESULTS.md "(g)").
//   Epilogue: dK * scale and dV from registers to global memory (4-byte stores); rows past Tk
//   skipped; a CTA with no unit writes zeros, and so do keys no row sees (their P and dS are 0).
//   After the kernel: bwd_dq_sm90_convert_kernel writes dQ = scale * dQacc.
//   Shared memory (D = 128): K, V 2 x 32 KiB, Q and dO rings 2 x 2 x 16 KiB, dS^T 2 x 16 KiB, rows
//   1 KiB, barriers: 161 KiB (+1 KiB alignment), and the dQ staging blocks 2 x 16 KiB (kernels
//   without DET, after the barriers, 128-byte aligned): 193 KiB (198,784 bytes allocated, IDX
//   199,296, of the 227 KiB opt-in; DET 165,928 / 166,456). D = 64: 97 KiB (no staging blocks).
//   One CTA per SM either way (registers).
//   Named barriers: 0 __syncthreads (setup); 1 both consumers before dQ (D = 128, and the D = 64 ORD kernel
//   that splits dQ by columns, its IDX twin with FA_SM90_BWD_D64_COLS_IDX_ORD, and the launch-order one with
//   FA_SM90_BWD_D64_LAG=0); 5 + c consumer c before dQ (the other D = 64 kernels); 7 + c consumer c
//   before its bulk reduce-add (D = 128 without DET); 2, 3, 4 the DET ordered reduction (below). 9..15
//   unused.
//   Registers per consumer thread (D = 128): dK, dV 64 + 64, S^T and dP^T 32 + 32 (then P and dS
//   16 + 16 packed), dQ 32.
// Index masks (the <IDX = true> instantiation, taken when a window, lengths or a validity mask is
// set; no mask and causal alone keep the first kernel, whose code is unchanged): the rules are
// sm80's, from common/flash_cuda_common.cuh, as in sm80/flash_bwd.cu:
//   units     KeyTileUnits<64>: the query tiles whose rows' causal / window / length ranges reach
//             the key tile (bisection once per CTA), as one range [lo, hi) per head, the trailing
//             tiles that see no key at all dropped (sees()); a tile in it that saw none of the
//             tile's keys would only add zeros.
//   rows      producer warp 2, per unit, with row_info(): each row's keys within the tile
//             [kb - j0, ke - j0) clipped to [0, 128], empty for rows that see no key (q_valid
//             false, past q_lengths or Tq, empty causal / window range), into shared memory beside
//             lse2 / dsum (full[s] then counts 1 + 64 arrivals); and a per-unit flag: some row does
//             not see the whole tile, or some key of the tile is past k_lengths / Tk or fails
//             k_valid (key_visible, checked once per CTA).
//   elements  only in flagged units (the forward's need_mask idea): P = 0 unless
//             kb <= key < ke for the query's range and the key passes k_lengths / k_valid (each
//             consumer thread checks its two keys once per CTA). Fully masked rows have lse = -inf
//             (lse2 = -inf): 2^(S - lse2) = +inf there is discarded by the selection, never
//             multiplied, so no NaN; their dsum is finite (the pre-pass's rowsum(dO O) - d_lse
//             with O = 0), so dS = 0 (dP - dsum) = 0.
//   results   as sm80: dQ rows that see no key 0 (never accumulated, or only zeros); dK, dV rows
//             of keys that no row sees 0 (written by the epilogue from zero accumulators, or by a
//             CTA with no unit).
//   Shared memory: + 0.5 KiB (ranges) + 16 bytes (flags). Units that need no mask run the same
//   element-wise code as the first kernel.
// Dropout (the <IDX = true, DROP = true> instantiation, whenever rate > 0: "dropout runs the
// index-masked kernel", as in sm80, with or without index masks; the IDX kernel without dropout
// and the first kernel carry no Philox code and are unchanged). The keep mask is flash_params.h's
// rule (row = query, col = key), so it is the forward's bit for bit: the element (key k, query q)
// of S^T is draw 4 ((q / 8) % 2) + (k / 8) % 4 of the Philox call with counter
// (8 (k / 32) + k % 8, 8 (q / 16) + q % 8, h, b). In the m64n64 accumulator, warp w of consumer c
// holds keys j0 + 64 c + 16 w + {g, g + 8} (a 16-key m-tile) and queries i0 + 8 j + 2 t + e
// (n-tiles j = 0..7): one call covers this thread's 2 keys x queries {q, q + 8} (q % 16 < 8), i.e.
// 4 of its 8 draws (the other 4 are keys 16 apart, in warp w ^ 1), so 8 calls per unit per thread
// give its 32 keep bits (drop_cols_bits<1, 8> of common/flash_dropout.cuh, the helper sm80's key-
// tile backward uses: bit 4 j + 2 h2 + e = the accumulator index x). They are drawn per unit before
// waiting for its Q / dO tiles (only b, h, i0 and the keys are needed), so that the Philox
// temporaries are not live in the element-wise phase, the register peak (S^T, dP^T, dK, dV). The
// arithmetic is sm80's: Z = keep_scale where kept, else 0; Pd = P Z (the A operand of dV += Pd^T
// dO), dS = P (dP Z - dsum) (dK, dQ), dsum = rowsum(dO O) - d_lse from the same pre-pass (O is the
// forward's dropped output). Masked elements keep P = 0 whatever Z.
// Bias and dbias (the BIAS instantiations <T, 64, IDX = true, DROP = false, DET, BIAS = true>,
// which bwd_pick takes whenever bias or dbias is set at D = 64; bwd_applies sends bias / dbias with
// dropout to sm80, at D = 128 without dropout to the split kernel ("Split kernel at D = 128" below;
// sm80 with TF_FLASHATTN_SM90_BWD_SPLITD=0); checked on the H200 2026-12-01, as part of the IDX kernel and again as its
// own instantiation (session 16): sm90_bwd_check.py's five bias cases, deterministic included,
// memcheck / synccheck clean). The bias
// [B, H, Tq, Tk] (q's dtype, any strides, 0 for broadcast dims) enters the P pass as in the
// forward's IDX kernel (flash_fwd_sm90.cu): x = S^T pmul + log2e b (pmul = scale log2e, or 1 after
// the in-place soft-cap), P = 2^(x - lse2), so P is the forward's up to its own rounding (the
// forward normalizes by its running max and l, we by lse2; sm80's score_elem rounds log2e
// (softcap(scale S) + b) instead: ulps); every unit then takes the masked P pass (a third copy of
// it), and b is read (one 2-byte load per element) only where the index ranges and the dense mask
// let the element through; P = 0 where x = -inf (sm80's rule: a bias of -inf, on every key of a row
// too, whose lse2 is then -inf). dbias [B, H, Tq, Tk] float32 (compact; the op reduces the
// broadcast dims) is sm80's dlogit = P (dP - dsum), the gradient of softcap(scale S) + b (before
// the soft-cap factor), stored in the dS pass where P != 0 (4-byte stores, scattered: one warp
// store covers 8 keys x 4 queries, 4 x 32 bytes); launch() zeroes dbias first, as sm80's bwd()
// does, so the elements that are masked, past an index limit, or in tiles no unit visits read 0
// (sm80 stores P (dP - dsum) = +-0 for the masked elements of the tiles it visits: equal values,
// maybe the sign of a zero). Each element has one writer (its key tile's CTA, its head's unit, one
// consumer thread): no atomics, deterministic. Under soft-cap, dS = dlogit (1 - tanh^2) with tanh =
// (log2 P + lse2 - log2e b) / (c log2e), the bias read again where P > 0. The bias' and dbias'
// element offsets within a unit are 32-bit (UnitElems; bwd_applies: their query and key strides
// below 2^23), computed per pass from strides made opaque (bias_at, dbias_at). Why D = 64 only
// (ptxas 13.0): at D = 128 the bias code spilled (112 bytes with 32-bit offsets; 700 with 64-bit
// ones hoisted out of the unit loop) with dV issued before the dS pass, and issuing dV with dK in
// the bias units (as <DROP, D = 128>) or computing the soft-cap factors and the dense mask's
// addresses per pass removed the spills but made ptxas serialize the IDX kernel's wgmmas (C7511 /
// C7512, "insufficient register resources"), for every unit; so there is no BIAS kernel at D = 128
// (the opt-in split kernel carries bias / dbias there instead, with 64 of the 128 dims per consumer).
// A separate instantiation because the bias code, carried by the D = 64 IDX kernel and skipped at
// run time, made it slower without a bias (H200, B = 4, T = 4096, H = 32, bf16: 4.119 ms against
// 3.926, +4.9 %, with an all-true key mask; +2.8 % with a padded one; RESULTS.md); the kernels
// without BIAS carry none of it.
// Workspace: sm80's layout and size (flash_cuda.h, bwd_workspace_parts): dsum, lse2, then the dQ
// accumulator [B, H, tq_pad, D] float32, each 64-row query tile's block of 64 x D floats in
// fragment order: column group cg = col / 64, then for a 64 x 64 sub-block, float4 index
// (j * 128 + tid) holds rows {16 w + g, 16 w + g + 8} x columns {64 cg + 8 j + 2 t, +1}
// (tid = 32 w + 4 g + t: the m64nN accumulator layout, sm90_ptx.cuh), so that each warp's atomics
// cover 512 contiguous bytes, and each consumer's 64 x 64 sub-block is 16 contiguous KiB (the unit
// of the default's bulk reduce-add; 16-byte aligned as the copy engine needs: dq_acc is, launch()
// checks, and sub-blocks start at multiples of 16 KiB). Deterministic mode: the same, and the counters after dq_acc (below;
// flash_bwd_workspace_bytes adds dq_acc and them in deterministic mode for D = Dv in {64, 128, 256}).
// Deterministic mode (the DET instantiations of all four kernels, when p.deterministic; the
// others are unchanged, SASS included): float4 atomics into dq_acc (the former default's, not the
// bulk reduce-add of the kernels without DET, which has no order to keep), but each (b, h,
// 64-row query tile) block receives its contributions in one fixed order, so dQ is bitwise
// reproducible (dK, dV are sums in registers in a fixed order anyway):
//   order     across CTAs: increasing key tile x (bwd_tile); within a CTA: consumer 0, then
//             consumer 1 (D = 64 both add to the whole block: keys 0..63, then 64..127; D = 128
//             disjoint column panels, the same protocol); the 8 float4 adds of a thread touch
//             distinct addresses.
//   counters  one int per block after dq_acc in the workspace ([B, H, tq_pad / 64],
//             bwd_workspace_parts' dq_sem), zeroed by the same memset; a contributor publishes
//             x + 1 (red.release.gpu.max) after its adds, so "counter >= x" means key tile x - 1
//             has added.
//   who waits key tile x waits only when tile x - 1 visits the same query tile (qb < prev_hi
//             below); otherwise it is the block's first contributor. That is exact because the
//             key tiles visiting a query tile are one contiguous range of x: Units' [lo, hi')
//             has both ends non-decreasing in the key tile (no mask: hi = nqb; causal, any
//             offset: lo = (j0 - off) / 64 grows with j0; IDX: KeyTileUnits' hi and lo are
//             bisections of predicates monotone in j0 (key_begin, key_end non-decreasing), and
//             the trimmed hi' = max(lo, 1 + the last tile below hi that sees(), a property of
//             the query tile alone) is non-decreasing too), so {x : lo(x) <= qb < hi'(x)} is a
//             prefix-suffix intersection. Only actual contributors (every unit of the walk adds,
//             zeros included) are in the chain; a CTA never passes a counter it does not add to.
//   roles     the producer's warp 3 (idle otherwise) does the polling and publishing, so the
//             consumers' unit loop only gains named barriers (counter addresses or polling there
//             made ptxas spill at D = 128): per unit, warp 3's lane 0 polls (acquire) the block's
//             counter, barrier 2 (warp 3 + consumer 0) lets consumer 0 add, barrier 3 (both
//             consumers) lets consumer 1 add after it, barrier 4 (consumer 1 + warp 3), then lane
//             0 publishes. Barriers order the adds within the CTA; acquire / release the CTAs.
//   deadlock  CTA (x, hk, b) waits only on CTA (x - 1, hk, b), whose linear block index is one
//             less (grid x = key tiles, y = kv head, z = batch): CTAs are dispatched in linear
//             order, so it is running or done, and the lowest-index unfinished CTA never waits
//             on an unfinished one (tile orders 1 and 2, below: x - 1 has the index less by the
//             group's size, the same argument). GQA: a CTA covers the G query heads of its kv head; the
//             counters are per query head h, and CTAs of other kv heads or batches share none.
//   cost      a no-mask walk (every tile from query tile 0) starts as a wavefront: tile x adds
//             its first block x units after tile 0 (first wave only); causal walks start
//             at their own diagonal and wait about 2 units.
// Tile order (TF_FLASHATTN_SM90_BWD_ORDER, read once, default 1, or the harness's set_sm90_bwd_order;
// bwd_tile_order, bwd_tile). Order 1 is the default since 2026-12-01: on the H200 its numerics equal
// order 0's (dK / dV bitwise, dQ bitwise in deterministic mode, sm90_bwd_check.py --phase order, 133 / 133)
// and, orders 0 and 1 alternated four times per shape (bf16, causal, B*T = 16384), order 1 took
// 1.03x order 0's speed at D = 128, T = 4096 / 8192, 1.03x at D = 256, T = 4096, 1.00x-1.02x elsewhere
// (T 2048-16384, D 64 / 128 / 256), never below 0.997x. Which CTA gets which (key tile x, kv head hk, batch
// b). CTAs are dispatched in linear block index order (blockIdx.x fastest), one per SM at a time.
//   0         (TF_FLASHATTN_SM90_BWD_ORDER=0) the launch order: x = blockIdx.x, hk = blockIdx.y, b = blockIdx.z,
//             the index x + nx (hk + Hkv b), nx = the key tiles. With a causal mask (Tq = Tk) key tile
//             x has nqb - x kBk / 64 units, so each wave holds the heavy and light tiles of about 132 /
//             nx pairs and the last wave ends with heavy ones (benchmarks/bwd_order_model.py: makespan
//             1.03x-1.07x of total work / 132 SMs at T = 2048..8192, B*T = 16384).
//   1         grouped longest-first: the pairs (hk + Hkv b, the launch order's pair order) in ng = ceil(pairs / G)
//             groups of consecutive pairs, balanced (the first pairs % ng groups have pairs / ng + 1,
//             the others pairs / ng); within a group of gs pairs, index = (CTAs of the groups before)
//             + gs x + (pair - the group's first pair): x slowest, increasing, so each group runs its
//             heaviest tiles first and the launch ends with the last group's lightest. G:
//             TF_FLASHATTN_SM90_BWD_ORDER_G (read once) or set_sm90_bwd_order's group, else
//             bwd_auto_group: the pairs whose Q + dO (16-bit), lse2 + dsum and dQ accumulator
//             (float32) fit 20 MiB (Gq Tq (8 D + 8) bytes per pair), about 40 % of the H200's L2,
//             so that a group's reused rows stay in L2 while it runs next to the end of the one
//             before (a causal key tile re-reads the pair's query tiles from its diagonal on, so
//             the reuse spans the pair's whole run).
//   2         pure longest-first: order 1 with one group of all pairs (x slowest over all pairs:
//             the best tail, but the running CTAs spread over up to 132 pairs, whose Q / dO / dQ
//             accumulators then compete for L2).
// Where it applies: causal masks only (p.mask.causal; with or without the index masks); without one
// every key tile has the same units, so no order shortens the tail, and the launch order keeps the
// fewest pairs running at once (best for L2). Also the launch order with one pair, a group of one pair
// (G = 1 from bwd_auto_group: same order), 2^31 CTAs or more (bwd_tile's 32-bit index), and in the
// kernels with dropout or bias (no ORD instantiation: add them if the orders pay). Any (causal)
// offset: the causal units of key tile x are [max(0, (x kBk - off) / 64), nqb): non-increasing in x
// for every offset (top-left, bottom-right, negative: rows that see no key), so x increasing is
// heavy first. The index masks: with a window the counts are about constant (the band) except at
// the ends, with q / k lengths per batch they fall to 0 past the lengths (non-increasing within a
// pair), [B, Tk] validity does not change them (units are ranges); where they are not monotone
// (a non-causal window: never ordered) the order is only a worse or better guess. Correctness
// never depends on the order: each CTA's work is a function of (x, hk, b) alone, the map from the
// linear index to (x, hk, b) is a bijection onto the grid's triples, and the deterministic mode's
// chain is by x within (hk, b).
//   DET       deadlock freedom needs, for every pair, x - 1 at a lower linear index than x: in a
//             group of gs pairs the index is base + gs x + q with q = pair - first pair fixed, so
//             x - 1 is at index - gs < index (order 2: gs = all pairs); order 0's argument then holds
//             unchanged (the lowest unfinished index waits on nothing unfinished). The dQ order
//             itself (key tile x after x - 1 per block) does not depend on the dispatch order, so
//             dQ stays bitwise equal to order 0's in deterministic mode.
//   kernels   flash_bwd_sm90_ord_kernel / flash_bwd_sm90_d256_ord_kernel: the same CTA body
//             (bwd_cta<..., ORD = true>) with bwd_tile's map (a few integer divisions once per CTA),
//             taken only when order 1 or 2 applies; the plain kernels (bwd_cta<..., ORD = false>)
//             read blockIdx as before, their SASS unchanged (cuobjdump -sass, 2026-12-01, every
//             function of this file identical). ptxas 13.0 for the 20 ORD kernels (D = 64 / 128:
//             no mask / causal and IDX, with and without DET; D = 256: no mask / causal and IDX):
//             168 registers, 0 spills, no C75xx warnings, the same HGMMA / UTMALDG / SYNCS / BAR /
//             global and shared memory instruction counts as their order-0 twins, the consumers'
//             highest register R237 at D = 128 as before. An explicitly set G = 1 runs the ORD
//             kernel in the launch order (order_g = 1: bwd_tile's map is then the identity), a
//             control for the ORD kernels' own code. (Since FA_SM90_BWD_D64_LAG the plain D = 64 pair
//             differs in more than the map: the launch-order kernel lags its dQ, the ORD one does not.)
// Not yet here: the two consumers' ping-pong at D = 128 (both meet on named barrier 1 before dQ every unit;
// deferring unit n's dQ past unit n + 1's S^T / dP^T issue would keep its 32 accumulators live
// through the P pass, over the 240 registers at D = 128) and any overlap of the P pass with the
// next unit's products, the rotated loop (kRotate) in the D = 256 one (in the D = 128 kernel with dropout since
// FA_SM90_BWD_DROP128; in the plain D = 64 kernels, dQ by atomics, it ran 0.96x-0.99x: branch sm90-bwd-rotate64, RESULTS.md
// "Hopper backward kernel" (u)), dK / dV stored by TMA,
// a persistent causal-balancing scheduler; bias / dbias with dropout (at D = 128 without: only the opt-in split
// kernel), coalesced dbias stores.
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cc/kernels/common/flash_cuda_common.cuh"  // fast_exp2, Elem<T>::pack, grouped_tile
#include "cc/kernels/common/flash_dropout.cuh"      // DropTile, drop_cols_bits (DROP)
#include "cc/kernels/common/flash_cuda_internal.h"
#include "cc/kernels/common/flash_params.h"
#include "cc/kernels/sm90/sm90_host.cuh"
#include "cc/kernels/sm90/sm90_ptx.cuh"

// The first array if A, else the second (the D <= 128 kernel's S^T / dP^T accumulators: kRotate's, which
// live across the unit loop's back edge, or the loop body's own).
template <bool A, typename X, typename Y>
__device__ __forceinline__ auto& pick_array(X& a, Y& b) {
  if constexpr (A)
    return a;
  else
    return b;
}

// n-tiles (4 elements each of a thread's 32 per unit) of the D <= 128 kernel's bias copy of the P pass
// (the BIAS instantiation) and dense-mask copy (the IDX kernel with a dense mask) whose mask bytes and
// bias values are read before any is used (0: the former code, element by element in the bias and the
// masked copies). On the H200 (2026-12-02, benchmarks/RESULTS.md "(l)", "(m)"): dK, dV, dbias bit for
// bit the former code's; bias at D = 64 1.04x-1.08x, a dense mask 2.4x (D = 128) and 2.7x (D = 64);
// the index masks' copy, without the dense-mask code, 1.49x with a [B, Tk] key mask at D = 128.
#ifndef FA_SM90_BWD_BIAS_BATCH
#define FA_SM90_BWD_BIAS_BATCH 2
#endif
constexpr int kBiasBatch = FA_SM90_BWD_BIAS_BATCH;
static_assert(kBiasBatch >= 0 && 8 % (kBiasBatch > 0 ? kBiasBatch : 1) == 0, "kBiasBatch divides the unit's 8 n-tiles");
// The split kernel's bias read ahead at D = 128 (bwd_cta_split, kBiasAhead). 0 builds the former code
// (each bias element loaded in the P pass), the reference of sm90_bwd_check.py's phase splitdsave.
#ifndef FA_SM90_BWD_BIAS_AHEAD
#define FA_SM90_BWD_BIAS_AHEAD 1
#endif
// The D = 128 kernel's unit loop rotated (kRotate in bwd_cta; plain and index-masked, with dropout at
// FA_SM90_BWD_DROP128 >= 2): unit
// n + 1's S^T and dP^T products issued right after unit n's dQ staging stores, so that they run under the proxy
// fence, the warpgroup's barrier and the bulk reduce-add of dQ instead of after them. 0: off (the loop as before,
// the reference); 1 (default): the iteration then waits for both products, so nothing is in flight across the
// loop's back edge (the P pass no longer runs under dP^T); 2: it waits for S^T only (dP^T in flight across the
// back edge, under the next P pass; ptxas adds a wait at the loop's exit, C7517). On the H200 (2026-12-02,
// benchmarks/RESULTS.md "Hopper backward kernel" (u), (v)): dK, dV bit for bit 0's, numerics 168 / 168 and
// memcheck clean for 1 and 2; D = 128, T = 4096, bf16: 1.033x / 1.037x 0's speed (1: no mask / causal, do_bench)
// and 1.030x / 1.052x (2), 1.05x-1.06x without a mask timed in a loop (both); the other kernels' SASS unchanged.
// 1 and 2 are within the spread; 1 has no compiler-made wait. In the index-masked kernel too since (v): 1.039x
// with a [B, Tk] key mask (do_bench), 1.06x-1.11x timed in a loop.
#ifndef FA_SM90_BWD_ROTATE
#define FA_SM90_BWD_ROTATE 1
#endif
// FA_SM90_BWD_KEEP64 (1, or 0 for the former code; only with FA_SM90_BWD_D64_COLS=0, below): the ORD kernel at
// D = 64 without a mask (the causal
// D = 64 backward: flash_bwd_sm90_ord_kernel<T, 64, no IDX>) keeps the previous unit's dQ values, their
// atomics' address and the dS^T stores' shared-memory pointer live across the loop's back edge (kKeep64 in
// bwd_cta), so that the 8 REDGs' source registers are not the first ones the next unit writes. On the H200
// (2026-12-02, benchmarks/RESULTS.md "Hopper backward kernel" (w)): dK, dV bit for bit the former code's (268 / 268
// outputs; the tile orders' 160 / 160), numerics 168 / 168, memcheck clean; causal D = 64, T = 2048 .. 16384, bf16:
// 1.017x-1.029x the former speed timed in a loop, 1.013x-1.026x by do_bench; the other 79 kernels' SASS unchanged.
// Since FA_SM90_BWD_D64_COLS became the default (2026-12-06) that ORD kernel splits dQ by columns and leaves kKeep64
// off (the columns' gain was measured against it); FA_SM90_BWD_KEEP64 acts only with FA_SM90_BWD_D64_COLS=0.
// FA_SM90_BWD_KEEP64_IDX (1, or 0): the same in the index-masked D = 64 kernel in the launch order without dropout
// or bias (masks, lengths, windows, a dense mask or soft-cap without a causal mask: the tile orders take causal
// calls to the ORD kernel), there with st.shared stores of dS^T and the named
// barrier's id kept too (that BAR.SYNC's id register shared the REDGs' read scoreboard). Measured in (w): D = 64,
// [B, Tk] key mask, T = 4096 / 16384: 1.009x / 1.016x timed in a loop and 1.017x / 1.021x in another call;
// with the generic-pointer stores of the ORD kernel instead, 0.97x-0.99x; in the ORD index-masked kernel (causal
// with a key mask or window) 0.99x-1.00x, so not there.
#ifndef FA_SM90_BWD_KEEP64
#define FA_SM90_BWD_KEEP64 1
#endif
#ifndef FA_SM90_BWD_KEEP64_IDX
#define FA_SM90_BWD_KEEP64_IDX 1
#endif
// FA_SM90_BWD_D64_COLS (1, the default; 0 gives the former kernels back for an A/B): the plain D = 64 kernels (no
// IDX, no DET; the launch-order and ORD ones) split dQ between the consumers by columns, as D = 128 does: consumer c
// takes columns 32c .. 32c+31 over all 128 keys of the tile (8 wgmma m64n32k16, B = K MN-major from byte 64c of its
// 128-byte rows, both consumers' halves of dS^T: barrier 1; in the launch-order kernel FA_SM90_BWD_D64_LAG's
// mbarriers instead), and adds a 64 x 32 block (4 float4 atomics per thread,
// n8 tiles 4c .. 4c+3 of the accumulator's fragment order, so the conversion kernel is unchanged). Each unit then
// adds 2 x 8 KiB to dQacc instead of 2 x 16 KiB (each consumer's 64 keys' partial dQ over all 64 columns): the dQ
// atomics per FLOP halve, to D = 128's level. The price is D = 128's meeting of the two consumers before dQ, once per
// unit, which the D = 64 kernels left out (barrier 5 + c, header comment); FA_SM90_BWD_D64_LAG removes it again from
// the launch-order kernel. kKeep64 is off with it (dq_prev is 32
// floats). Measured on the H100 (2026-12-06, RESULTS.md "Hopper backward kernel" (x); the harness's backward, this
// build against FA_SM90_BWD_D64_COLS=0, three processes each): causal 2.0-5.8 % faster at T = 2048-16384; no mask
// mixed, by the loop +0.5 % at T = 4096 and -2.1 % at 16384, by do_bench +2.3 % to +5.7 %; D = 128 unchanged; dK / dV
// bitwise equal, dQ within 1e-2 (268 outputs), numerics 168 / 168, memcheck clean, bwd_selftest 10 / 11 exact.
#ifndef FA_SM90_BWD_D64_COLS
#define FA_SM90_BWD_D64_COLS 1
#endif
// FA_SM90_BWD_D64_LAG (default 1; 0 gives the former code): with FA_SM90_BWD_D64_COLS, the plain D = 64 kernel in
// the launch order (no mask; causal where bwd_tile_order keeps the launch order: the ORD kernel keeps the former
// code) computes unit
// n - 1's dQ during unit n instead of at the end of unit n. Split by columns, each consumer's dQ needs both
// consumers' halves of dS^T, so without it both meet at named barrier 1 once per unit and run in step (their
// element-wise passes at the same time, the tensor pipe idle then). Lagged, each consumer arrives on an mbarrier
// (ds_full[buffer]) after storing its half and waits on it a unit later, when the other's half is almost always
// there: the consumers may drift apart by up to a unit, and dQ's products run under the P pass. A second pair
// (ds_free[buffer]) keeps a dS^T buffer from being written again before both consumers' dQ products read it.
// Measured on the H100 (2026-12-06, RESULTS.md "Hopper backward kernel" (z)): no mask T = 4096 / 16384 1.058x /
// 1.071x (harness loop), causal (then also lagged) 0.98x-1.02x, so not in the ORD kernel.
#ifndef FA_SM90_BWD_D64_LAG
#define FA_SM90_BWD_D64_LAG 1
#endif
// FA_SM90_BWD_D64_COLS_IDX (default 1; 0 gives the former code): the same split by columns and lag in the
// index-masked D = 64 kernel in the launch order without dropout or bias (key / query masks, lengths, windows in the
// launch order, soft-cap, a dense mask, padded head dims), which at 0 splits dQ by keys (8 atomics per thread, each
// consumer's own barrier 5 + c) and keeps its dQ registers (kKeep64). Measured on the H100 (2026-12-06, RESULTS.md
// "Hopper backward kernel" (aa)): a [B, T] key mask without causal T = 4096 / 16384 1.042x / 1.057x (harness loop);
// the causal key-mask and window cases (the ORD kernel, unchanged) 0.99x-1.01x.
#ifndef FA_SM90_BWD_D64_COLS_IDX
#define FA_SM90_BWD_D64_COLS_IDX 1
#endif
// FA_SM90_BWD_D64_COLS_IDX_ORD (default 1; 0 gives the split by keys back): the split by columns in the index-masked
// D = 64 kernel in the grouped tile order (ORD: causal with padding masks, lengths or a window) without dropout or
// bias, meeting at barrier 1 once per unit as the plain ORD kernel does (no lag: it measured 0.98x-1.02x there,
// RESULTS.md "Hopper backward kernel" (z)). Measured on the H100 (2026-12-06, RESULTS.md "Hopper backward kernel"
// (ab), harness loop / do_bench against 0): causal [B, T] key mask T = 4096 1.051x / 1.077x, T = 16384 1.041x /
// 1.058x; causal window T = 4096 1.043x / 1.038x.
#ifndef FA_SM90_BWD_D64_COLS_IDX_ORD
#define FA_SM90_BWD_D64_COLS_IDX_ORD 1
#endif
// FA_SM90_BWD_D64_COLS_DROP (default 1), FA_SM90_BWD_D64_COLS_BIAS (default 0): the split by columns and the lag of
// FA_SM90_BWD_D64_COLS_IDX also in the D = 64 kernels with dropout, and with bias / dbias (both index-masked, always
// in the launch order). At 1 each: HGMMA 20 -> 32, BAR.SYNC 2 -> 1, 168 registers, no spills. They take effect only
// with FA_SM90_BWD_D64_COLS_IDX and FA_SM90_BWD_D64_LAG at 1 (the defaults). Measured on the H100 (2026-12-06,
// RESULTS.md "Hopper backward kernel" (ab), harness loop against 0): dropout 0.1 T = 4096 / 16384 / causal 4096
// 1.032x / 1.034x / 1.033x, so on; bias with dbias T = 4096 0.977x (and 0.984x through TensorFlow), so off.
#ifndef FA_SM90_BWD_D64_COLS_DROP
#define FA_SM90_BWD_D64_COLS_DROP 1
#endif
#ifndef FA_SM90_BWD_D64_COLS_BIAS
#define FA_SM90_BWD_D64_COLS_BIAS 0
#endif
// FA_SM90_BWD_DESC_ADD (default 1; 0 gives the former code back): the D = 128 kernels' wgmma descriptors (S^T,
// dP^T, dV, dK, dQ products) built once per operand tile and stepped by adding each k16 step's offset
// (wgmma_desc_add) instead of built whole per step (mask, shift, or): the same descriptors, so the same outputs.
// Not with dropout (those kernels spilled 72-88 bytes with it, ptxas 13.0; FA_SM90_BWD_DROP128 steps the dV, dK, dQ
// products' only) and not at D = 64. Measured on the H100
// (2026-12-06, RESULTS.md "Hopper backward kernel" (ad), harness loop / do_bench against 0, both head dims on):
// D = 128 without a mask T = 4096 1.065x / 1.080x, T = 16384 1.070x / 1.036x, causal T = 4096 1.017x-1.037x,
// T = 16384 1.067x / 1.129x, a key mask 1.006x; D = 64 without a mask 0.953x / 0.954x (the lagged kernel), causal
// 1.004x-1.015x, so D = 64 keeps the former code. Its unit loop: 830 -> 748 instructions at D = 128 (uniform
// datapath and R2UR 225 -> 175).
#ifndef FA_SM90_BWD_DESC_ADD
#define FA_SM90_BWD_DESC_ADD 1
#endif
// FA_SM90_BWD_DROP128 (0 gives the former code back): the D = 128 kernel with dropout (<IDX, DROP>), whose registers
// kept it from several of the plain kernel's forms (ptxas 13.0, 240 per consumer thread).
//   1: the P pass as the other kernels take it, one copy per mask setting chosen once per unit (need_mask), in place
//      of one copy testing need_mask at run time (37 branches in the unit loop, one per S^T element, against 7), and
//      FA_SM90_BWD_DESC_ADD's stepped descriptors for the dV, dK and dQ products (those of S^T and dP^T, built whole,
//      spilled 24-40 bytes with it, as the whole of DESC_ADD 72-88 and the early dV issue 56-88). No spills.
//   2: 1, plus FA_SM90_BWD_ROTATE's rotated loop, the next unit's keep bits drawn while its S^T and dP^T run (between
//      their issue and the wait at the unit's end; one register, kbits_next, across the back edge).
//   3: 2, plus the early dV issue (kEarlyDv below), which spills 64 bytes (72 in the DET kernel; ptxas 13.0). The same
//      bits as 2, but slower: 0.965x-0.993x its speed (H100, RESULTS.md "Dropout cost, kernel harness" (ae)).
// The same operations on the same values in every form, so dK, dV, dQ equal the former code's. Measured on the H100
// (2026-12-06, RESULTS.md "Dropout cost, kernel harness" (ad)): O, lse, dQ (deterministic), dK, dV bit for bit 0's on 9
// dropout cases x 2 dtypes (bwd_bitwise.py, since folded into sm90_bwd_check.py splitdsave / splitdcmp), numerics 168 /
// 168, det 112 / 112; 2: memcheck and racecheck clean. The backward with dropout 0.1 against 0 (harness_loop_ab.py set
// drop128, loop / do_bench, two runs): 2 1.063x-1.140x at T = 4096 / 16384, causal and not; 1 1.058x-1.105x; the
// unchanged key-mask kernel read 1.017x-1.053x in the same runs, so about 5-10 % of it is the change.
#ifndef FA_SM90_BWD_DROP128
#define FA_SM90_BWD_DROP128 2
#endif
// FA_SM90_BWD_DROP_UNDER (default 0: the draws before the wait for the unit's tiles): in the kernels with dropout
// that do not rotate their loop (D = 64, and D = 128 in deterministic mode), the unit's keep bits drawn after its
// S^T and dP^T products (and, lagged, the dQ products of the unit before) are issued, while they run, instead of
// before the wait for the unit's tiles, when nothing of this warpgroup is on the tensor cores. The same bits, no
// faster: 0.99x-1.01x of 0 at D = 64 (H100, RESULTS.md "Dropout cost, kernel harness" (ae)); ptxas already places the
// default's draws between the HGMMA issues.
#ifndef FA_SM90_BWD_DROP_UNDER
#define FA_SM90_BWD_DROP_UNDER 0
#endif
// FA_SM90_BWD_DROP_PAIR (default 1; 0: each warp draws all 8 calls of its unit): the D = 64 / 128 kernels with dropout
// draw each Philox call once per warp pair instead of once per warp. A call covers 32 keys, the m-tiles of warps 2 k
// and 2 k + 1, and each warp used half of it: now each warp draws the calls of one column parity (4 instead of 8 per
// unit, unit_keep_bits_pair) and hands the other warp its half through shared memory (BwdSmem's kXchg, two buffers by
// unit parity) and a 64-thread named barrier (9 + 2 c + warp / 2). The same bits. ptxas 13.0: no spills; the D = 128
// dropout kernel 3,720 -> 3,456 instructions, D = 64 2,904 -> 2,768. Measured on the H100 (2026-12-06, RESULTS.md
// "Dropout cost, kernel harness" (ae)): O, lse, dK, dV and dQ (deterministic) bit for bit 0's on 64 outputs (16 dropout
// cases, atomic and deterministic dQ, 2 dtypes: sm90_bwd_check.py splitdsave / splitdcmp), numerics 168 / 168, det 112
// / 112, memcheck and racecheck clean; the backward with dropout 0.1, 1 against 0 (harness_loop_ab.py sets drop128 /
// drop64, loop / do_bench): 1.06x-1.12x faster at D = 128 and 1.07x-1.11x at D = 64, T = 4096 / 16384, causal and not
// (the unchanged key-mask kernel 0.98x-1.00x).
#ifndef FA_SM90_BWD_DROP_PAIR
#define FA_SM90_BWD_DROP_PAIR 1
#endif

namespace flashattn {
namespace cuda {
namespace sm90 {
namespace {

constexpr int kBq = 64;        // query rows per streamed tile
constexpr int kBk = 128;       // keys per CTA (64 per consumer warpgroup)
constexpr int kStages = 2;     // Q / dO / rows ring depth
constexpr int kConsumers = 2;  // consumer warpgroups
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kProducerRegs = 24;
constexpr int kConsumerRegs = 240;
static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= 65536, "register file");
// The switch of the dQ accumulation, per head dim and determinism: true, each consumer stages its
// 64 x 64 dQ block in shared memory and one thread adds it to the workspace with one bulk reduce-add
// of the copy engine (cp.reduce.async.bulk ... add.f32, FlashAttention-3's way; header comment);
// false, float4 atomicAdd (8 per thread; 4 in the plain D = 64 kernels, FA_SM90_BWD_D64_COLS). The DET kernels keep
// their ordered atomics. Measured on the H200 (2026-12-01, RESULTS.md "(g)"): at D = 128 the bulk reduce-add is
// 5-8 % faster (T 4096 / 16384, causal or not, dropout), at D = 64 5 % slower (each consumer then added a block per
// 64 keys, twice as often per FLOP, before the plain kernels split dQ by columns). Split by columns (8 KiB per
// consumer and unit, D = 128's rate per FLOP) it was slower still on the H100 (2026-12-06, RESULTS.md "(y)": causal
// T 2048-16384 0.89x-0.91x, no mask 0.97x-0.98x by the harness loop; that build was removed): so D = 128
// only. Here, not in the kernel, because launch() sizes the shared
// memory from it too (BwdSmem's DQS).
__host__ __device__ constexpr bool dq_bulk_reduce(int d, bool det) { return d == 128 && !det; }

// IDX: the index-masked kernel (window / lengths / validity), which also keeps each row's visible
// keys and a per-unit "mask needed" flag beside lse2 and dsum; without it the layout is the first
// version's. DQS: the dQ staging blocks of the bulk reduce-add (dq_bulk_reduce: D = 128 without
// DET), after the barriers so that the layout before them (and the DET kernels' code) is unchanged.
template <int D, bool IDX, bool DQS = false>
struct BwdSmem {
  static constexpr int kKBytes = kBk * D * 2;   // K or V tile [128 x D]
  static constexpr int kQBytes = kBq * D * 2;   // Q or dO tile [64 x D]
  static constexpr int kDsBytes = kBk * kBq * 2;  // dS^T [128 keys x 64 queries]
  static constexpr int kK = 0;
  static constexpr int kV = kK + kKBytes;
  static constexpr int kQ = kV + kKBytes;                  // + stage * kQBytes
  static constexpr int kDo = kQ + kStages * kQBytes;       // + stage * kQBytes
  static constexpr int kDs = kDo + kStages * kQBytes;      // + buffer * kDsBytes
  static constexpr int kRows = kDs + 2 * kDsBytes;         // float [kStages][2][kBq]: lse2, dsum
  static constexpr int kRange = kRows + kStages * 2 * kBq * 4;  // IDX: int [kStages][kBq] key ranges
  static constexpr int kFlag = kRange + kStages * kBq * 4;      // IDX: int [kStages] mask flags
  static_assert(kStages * 4 <= 16, "mask flags");
  static constexpr int kBars = IDX ? kFlag + 16 : kRange;  // kv_full, full[kStages], empty[kStages]
  // FA_SM90_BWD_D64_LAG: ds_full[2], ds_free[2] after empty[] (D = 64, IDX too with FA_SM90_BWD_D64_COLS_IDX; the
  // kernels that do not lag (DET, ORD, and bias with FA_SM90_BWD_D64_COLS_BIAS=0) leave them unused).
  static constexpr int kLagBars = FA_SM90_BWD_D64_LAG != 0 && D == 64 && (!IDX || FA_SM90_BWD_D64_COLS_IDX != 0) ? 4 : 0;
  static constexpr int kBarsEnd = kBars + 8 * (1 + 2 * kStages + kLagBars);
  // DQS: float [kConsumers][64 x 64] in fragment order (consumer c's block at kDq + c * kDqBytes),
  // 128-byte aligned (the copy engine needs 16).
  static constexpr int kDqBytes = 64 * 64 * 4;
  static constexpr int kDq = (kBarsEnd + 127) & ~127;
  static constexpr int kBytes0 = DQS ? kDq + kConsumers * kDqBytes : kBarsEnd;
  // FA_SM90_BWD_DROP_PAIR (IDX: the layouts that dropout uses): uint32 [2][kConsumers][128], the keep bits handed
  // between the warps of a pair.
  static constexpr int kXchg = (kBytes0 + 15) & ~15;
  static constexpr int kBytes = FA_SM90_BWD_DROP_PAIR != 0 && IDX ? kXchg + 2 * kConsumers * 128 * 4 : kBytes0;
  static constexpr int kAlloc = kBytes + 1024;             // slack to align the base to 1024
};
static_assert(BwdSmem<128, true, true>::kAlloc <= 227 * 1024, "the dQ staging blocks exceed the opt-in shared memory");

struct BwdSm90Args {
  FlashBwdParams p;
  const float* dsum;  // [B, H, Tq]
  const float* lse2;  // [B, H, Tq] log2e * lse
  float* dq_acc;      // [B, H, tq_pad, D], 64-row blocks in fragment order (header comment)
  int64_t tq_pad;
  int* dq_sem;        // DET: [B, H, tq_pad / 64] ordered-reduction counters (zeroed with dq_acc)
  // The tile order (header comment, "Tile order"; bwd_tile): order_g 0, the launch order (blockIdx as is); else
  // grouped longest-first, the (b, kv head) pairs in groups of order_g pairs, the first order_big
  // groups with one more.
  int order_g = 0, order_big = 0;
};

// This CTA's key tile x, kv head hk and batch b under the launch's tile order (header comment, "Tile
// order"). order_g 0: (blockIdx.x, blockIdx.y, blockIdx.z), the launch order. Else the linear block index
// (x fastest, then y, then z: the order the CTAs are dispatched in; below 2^31, bwd_tile_order) walks the
// pairs (hk + Hkv b, as the launch order) in groups: order_big groups of order_g + 1 pairs, then groups of
// order_g; within a group of gs pairs the index is gs * x + (pair - first pair of the group), so x is
// slowest and increasing (the causal work is non-increasing in x: heavy tiles first), and for one pair,
// x - 1 always has the lower linear index (the deterministic mode's deadlock freedom).
struct BwdTile {
  unsigned x;  // unsigned as blockIdx.x, so that the plain kernels keep their code (j0's zero extension)
  int hk, b;
};
template <bool ORD>
__device__ __forceinline__ BwdTile bwd_tile(int order_g, int order_big) {
  if (!ORD) return {0u, 0, 0};  // unused: the !ORD kernels read blockIdx themselves (bwd_cta)
  if (order_g == 0) return {blockIdx.x, static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z)};
  const int nx = gridDim.x;
  const int lin = blockIdx.x + nx * (blockIdx.y + gridDim.y * blockIdx.z);
  int x, pair;
  grouped_tile(lin, nx, order_g, order_big, x, pair);
  return {static_cast<unsigned>(x), pair % static_cast<int>(gridDim.y), pair / static_cast<int>(gridDim.y)};
}

// DET: the counters of the ordered dQ reduction (header comment, "Deterministic mode") are polled and
// published by one thread of the producer's warp 3 (ld_acquire_gpu, red_release_gpu_max: sm90_ptx.cuh).

// The query tiles that key tile [j0, j0 + KB) visits (KB = kBk, or kBk256 for the D = 256 kernel): [qb_lo, qb_lo + nq) for each of the G
// heads (units n = hl * nq + (qb - qb_lo)).
//   Without IDX (no mask, causal): [qb_lo, nqb), causal from the first row that sees key j0.
//   IDX: sm80's rule (KeyTileUnits, common/flash_cuda_common.cuh: the tiles whose rows' causal /
//   window / length ranges reach the key tile), as one contiguous range [lo, hi') with hi' = hi
//   less the trailing tiles that see no key at all (KeyTileUnits::sees; at most the two whose
//   first row starts past k_lengths). Any tile in it that saw none of the tile's keys would only
//   add zeros (every element masked: P = 0, dS = 0).
template <bool IDX, int KB = kBk>
struct Units {
  int qb_lo = 0, nq = 0, n = 0;
  __device__ Units(const AttnShape& sh, bool causal, int64_t off, int64_t j0, const MaskParams& m, int64_t b) {
    const int64_t nqb = (sh.Tq + kBq - 1) / kBq;
    if constexpr (!IDX) {
      int64_t lo = 0;
      if (causal && j0 - off > 0) lo = (j0 - off) / kBq;  // row i sees key j0 when i >= j0 - off
      if (lo > nqb) lo = nqb;
      qb_lo = static_cast<int>(lo);
      nq = static_cast<int>(nqb - lo);
    } else {
      const int G = static_cast<int>(sh.H / sh.Hkv);
      const KeyTileUnits<kBq> u(m, static_cast<int>(nqb), q_limit(m, sh, b), k_limit(m, sh, b), j0, KB, G);
      int hi = u.hi;
      while (hi > u.lo && !u.sees(hi - 1)) --hi;
      qb_lo = u.lo;
      nq = hi - u.lo;
    }
    n = nq * static_cast<int>(sh.H / sh.Hkv);
  }
};

// Elements of one unit's rows of a [B, H, Tq, Tk] tensor (the bias, dbias): (q, h2) is query
// i0 + q and key j0 + key_l[h2] = key_l[0] + 8 h2 (ptr at q = 0, h2 = 0; 32-bit offsets).
template <typename E>
struct UnitElems {
  E* ptr;
  int qs, ks8;  // query stride, 8 x key stride (elements)
  __device__ __forceinline__ E& operator()(int q, int h2) const { return ptr[q * qs + (h2 ? ks8 : 0)]; }
};

// ---- The score options per element (soft-cap, the dense mask, bias / dbias; header comment "Bias and
// dbias"), for the D <= 128 kernel's passes (bwd_cta) and the split kernel's SCORE instantiations
// (bwd_cta_split): the same operations in the same order, so that both compute the same values for the
// same element. bwd_cta calls bias_unit, dbias_unit, softcap_log2, softcap_ds and (its batched bias
// copy, kBiasBatch) bias_p_of; its element-by-element BIAS copy (kBiasBatch = 0) keeps its own
// (identical) text of idx_visible + bias_p, and its dS pass that of bias_ds, because calling those two from
// bwd_cta changed the SASS of its BIAS kernels (nvcc 13.0: a different schedule and register assignment,
// 6,330 against 6,418 instructions), and the kernels without SCORE must stay bit for bit what they were
// (cuobjdump -sass, every function of this file identical). ----

// The bias elements of one unit as UnitElems: queries i0 + q, keys j0 + key0 + 8 h2 (key0: the
// thread's first key in the tile; bias [B, H, Tq, Tk], any strides; 32-bit offsets: bwd_applies keeps the query and
// key strides below 2^23). The strides go through an empty asm at each call (once per pass, on a
// non-null tensor), so that nothing derived from them is hoisted out of the unit loop (the
// loop-invariant element offsets, 32 per tensor, spilled: 204 bytes at D = 64).
template <typename T>
__device__ __forceinline__ UnitElems<const T> bias_unit(const ScoreParams& sp, const T* bias, int b, int64_t h,
                                                        int64_t i0, int64_t j0, int key0) {
  int64_t s0 = sp.bias_stride[0], s1 = sp.bias_stride[1], s2 = sp.bias_stride[2], s3 = sp.bias_stride[3];
  asm volatile("" : "+l"(s0), "+l"(s1), "+l"(s2), "+l"(s3));
  return UnitElems<const T>{bias + b * s0 + h * s1 + i0 * s2 + (j0 + key0) * s3, static_cast<int>(s2),
                            8 * static_cast<int>(s3)};
}
// dbias [B, H, Tq, Tk] float32 (compact) of one unit, as bias_unit (key stride 1, query stride Tk,
// opaque for the same reason).
__device__ __forceinline__ UnitElems<float> dbias_unit(float* dbias, const AttnShape& sh, int b, int64_t h, int64_t i0,
                                                       int64_t j0, int key0) {
  int64_t tk = sh.Tk;
  asm volatile("" : "+l"(tk));
  return UnitElems<float>{dbias + ((static_cast<int64_t>(b) * sh.H + h) * sh.Tq + i0) * tk + j0 + key0,
                          static_cast<int>(tk), 8};
}
// IDX: whether element (key key_l of the tile, query row qi) is visible: the key passes k_lengths /
// k_valid (key_ok), lies in the row's range r = lo | hi << 16 (the producer's warp 2), and, with a
// dense mask (dmask_u: the unit's [b, h] plane, non-null), the mask's element at qi * dmask_q + dmask_k
// (dmask_k: the key's column offset) is true. The mask is read only for elements the ranges let through.
__device__ __forceinline__ bool idx_visible(bool key_ok, int key_l, int r, const bool* dmask_u, int64_t qi,
                                            int64_t dmask_q, int64_t dmask_k) {
  bool vis = key_ok && key_l >= (r & 0xffff) && key_l < (r >> 16);
  if (vis && dmask_u) vis = dmask_u[qi * dmask_q + dmask_k];
  return vis;
}
// P of one element under a bias (the masked P pass' bias copy): x = s pmul + log2e bias as the
// forward's IDX kernel (x = s mul, then x += log2e bias; pmul: scale log2e, or 1 after the in-place
// soft-cap), the bias element (ba(q, h2)) read only where the element is visible; P = 2^(x - l2), 0
// where not visible or x = -inf (a bias of -inf, maybe on every key a row sees: then l2 = -inf too,
// and 2^(x - l2) would be NaN; sm80's rule).
// bias_p_of: the same with the bias element bv already read (0 where not visible; the split kernel's
// bias read ahead, FA_SM90_BWD_BIAS_AHEAD).
__device__ __forceinline__ float bias_p_of(float s, float pmul, float l2, bool vis, float bv) {
  float z = s * pmul;
  z += bv * 1.4426950408889634f;
  return vis && z != -INFINITY ? fast_exp2(z - l2) : 0.f;
}
template <typename T>
__device__ __forceinline__ float bias_p(float s, float pmul, float l2, bool vis, UnitElems<const T> ba, int q, int h2) {
  float bv = 0.f;
  if (vis) bv = Elem<T>::to_f(ba(q, h2));
  return bias_p_of(s, pmul, l2, vis, bv);
}
// softcap_log2, softcap_ds: common/flash_cuda_common.cuh (the Hopper TF32 backwards use them too).
// dS of one element with dbias and / or under soft-cap with a bias (the dS pass' bias copy): dlogit =
// P (dP - dsum) (sm80's order), stored to dbias (dba(q, h2), when has_dbias) where P != 0 (the rest
// stays launch()'s 0); then, kCap, dS = dlogit (1 - tanh^2) with tanh recovered from P less the bias'
// log2e b (the bias re-read where P > 0: visible elements only, the P pass' load again).
template <typename T, bool kCap>
__device__ __forceinline__ float bias_ds(float pv, float dp, float dsm, float l2, float inv_cap_log2,
                                         UnitElems<float> dba, bool has_dbias, UnitElems<const T> ba, bool has_bias,
                                         int q, int h2) {
  float dl = pv * (dp - dsm);
  if (has_dbias && pv != 0.f) dba(q, h2) = dl;
  if constexpr (kCap) {
    float bv = 0.f;
    if (has_bias && pv > 0.f) bv = Elem<T>::to_f(ba(q, h2));
    const float th = ((__log2f(pv) + l2) - bv * 1.4426950408889634f) * inv_cap_log2;
    dl *= pv > 0.f ? 1.f - th * th : 1.f;
  }
  return dl;
}

// unit_keep_bits: common/flash_dropout.cuh (the Hopper TF32 backwards use it too).

// The mbarriers of both backward kernels (thread 0; then the whole CTA waits): kv_full (K, V: thread
// 0's expect_tx), full[s] (thread 0's expect_tx and warp 1's arrival; IDX: warp 2's too), empty[s]
// (every consumer thread); NLAG: FA_SM90_BWD_D64_LAG's ds_full[2], ds_free[2] after empty[] (every consumer thread).
template <bool IDX, int NLAG = 0>
__device__ __forceinline__ void bwd_init_barriers(uint32_t kv_full, uint32_t full0, uint32_t empty0) {
  if (threadIdx.x == 0) {
    mbar_init(kv_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full0 + 8 * s, 1 + 32 * (IDX ? 2 : 1));  // thread 0's expect_tx, warp 1 (IDX: and 2)
      mbar_init(empty0 + 8 * s, 128 * kConsumers);
    }
    for (int i = 0; i < NLAG; ++i) mbar_init(empty0 + 8 * (kStages + i), 128 * kConsumers);
    mbar_fence_init();
  }
  __syncthreads();
}

// The producer warpgroup of both backward kernels (flash_bwd_sm90_kernel: KB = kBk keys per CTA, D = 64 /
// 128; flash_bwd_sm90_d256_kernel: KB = kBk256, D = 256): thread 0 issues the TMA loads (K, V once;
// Q, dO per unit into the kStages ring), warp 1 copies each unit's lse2 / dsum rows, IDX: warp 2
// writes the rows' key ranges and the unit's mask flag, DET: warp 3 runs the ordered dQ reduction's
// waits and publications. Called by the kernel's producer branch, which returns after it.
// L: the kernel's shared-memory layout (kK, kV, kQ, kDo, kKBytes, kQBytes); U: its Units; ORD: the
// CTA's key tile is tile.x (the tile order), else blockIdx.x. DB: the first of the DET chain's three
// named barriers (DB: warp 3 + consumer 0, DB + 1: the consumers, DB + 2: consumer 1 + warp 3; 2 in
// flash_bwd_sm90_kernel, 3 in the split kernel, whose consumers use 1 and 2).
template <int KB, int D, bool IDX, bool DET, bool ORD, class L, int DB = 2, class U>
__device__ __forceinline__ void bwd_producer(const CUtensorMap* tm_q, const CUtensorMap* tm_k,
                                             const CUtensorMap* tm_v, const CUtensorMap* tm_do,
                                             const BwdSm90Args& a, const U& units, uint32_t base,
                                             uint32_t kv_full, uint32_t full0, uint32_t empty0, float* rows_f,
                                             int* range_i, int* flag_i, int hk, int b, int G, int64_t j0,
                                             const BwdTile& tile, int prev_hi) {
  const FlashBwdParams& p = a.p;
  const AttnShape& sh = p.shape;
  setmaxnreg_dec<kProducerRegs>();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == 0 && lane == 0 && units.n > 0) {
    tma_prefetch_map(tm_q);
    tma_prefetch_map(tm_do);
    mbar_arrive_expect_tx(kv_full, 2 * L::kKBytes);
#pragma unroll
    for (int j = 0; j < D / 64; ++j) {
      tma_load_4d(base + L::kK + j * KB * 128, tm_k, kv_full, 64 * j, hk, static_cast<int>(j0), b);
      tma_load_4d(base + L::kV + j * KB * 128, tm_v, kv_full, 64 * j, hk, static_cast<int>(j0), b);
    }
    for (int n = 0; n < units.n; ++n) {
      const int s = n % kStages;
      if (n >= kStages) mbar_wait(empty0 + 8 * s, ((n / kStages) - 1) & 1);
      const int h = hk * G + n / units.nq, i0 = (units.qb_lo + n % units.nq) * kBq;
      const uint32_t bar = full0 + 8 * s;
      mbar_arrive_expect_tx(bar, 2 * L::kQBytes);
#pragma unroll
      for (int j = 0; j < D / 64; ++j) {
        tma_load_4d(base + L::kQ + s * L::kQBytes + j * kBq * 128, tm_q, bar, 64 * j, h, i0, b);
        tma_load_4d(base + L::kDo + s * L::kQBytes + j * kBq * 128, tm_do, bar, 64 * j, h, i0, b);
      }
    }
  } else if (warp == 1) {
    for (int n = 0; n < units.n; ++n) {
      const int s = n % kStages;
      if (n >= kStages) mbar_wait(empty0 + 8 * s, ((n / kStages) - 1) & 1);
      const int64_t h = hk * G + n / units.nq, i0 = static_cast<int64_t>(units.qb_lo + n % units.nq) * kBq;
#pragma unroll
      for (int r = lane; r < kBq; r += 32) {
        const int64_t i = i0 + r;
        const int64_t row = (b * sh.H + h) * sh.Tq + i;
        // Rows past Tq: any finite values (their elements are masked to 0).
        rows_f[(2 * s) * kBq + r] = i < sh.Tq ? a.lse2[row] : 0.f;
        rows_f[(2 * s + 1) * kBq + r] = i < sh.Tq ? a.dsum[row] : 0.f;
      }
      mbar_arrive(full0 + 8 * s);  // release: the stores above are visible to the waiting consumers
    }
  } else if (IDX && warp == 2) {
    // The masking rules of sm80 (common/flash_cuda_common.cuh): row i sees key j when
    // row_info(i).ok, kb(i) <= j < ke(i) (causal / window / lengths) and key_visible(j) (k_valid).
    // Per unit: each row's keys of the tile (rows that see none: invalid, past q_lengths or Tq,
    // or an empty range, get an empty one; their lse2 may be -inf and is never used, P = 0 by
    // selection), and whether the unit needs the per-element mask: a row that does not see
    // every key of the tile, or a key of the tile past k_lengths / Tk or failing k_valid.
    // (KB keys per tile: kBk, or kBk256 in the D = 256 kernel.)
    const int64_t qlim = q_limit(p.mask, sh, b), klim = k_limit(p.mask, sh, b);
    bool keys_ok = true;
#pragma unroll
    for (int x = lane; x < KB; x += 32) {
      const int64_t j = j0 + x;
      keys_ok &= j < klim && key_visible(p.mask, sh, b, j);
    }
    keys_ok = __all_sync(0xffffffffu, keys_ok);
    for (int n = 0; n < units.n; ++n) {
      const int s = n % kStages;
      if (n >= kStages) mbar_wait(empty0 + 8 * s, ((n / kStages) - 1) & 1);
      const int64_t i0 = static_cast<int64_t>(units.qb_lo + n % units.nq) * kBq;
      bool partial = false;
#pragma unroll
      for (int r = lane; r < kBq; r += 32) {
        const RowInfo ri = row_info(p.mask, sh, b, i0 + r, qlim, klim);
        int lo = 0, hi = 0;
        if (ri.ok) {
          const int64_t kb = ri.kb - j0, ke = ri.ke - j0;
          lo = kb <= 0 ? 0 : kb >= KB ? KB : static_cast<int>(kb);
          hi = ke <= 0 ? 0 : ke >= KB ? KB : static_cast<int>(ke);
        }
        range_i[s * kBq + r] = lo | (hi << 16);
        partial |= lo != 0 || hi != KB;
      }
      const bool need = !keys_ok || __any_sync(0xffffffffu, partial);
      if (lane == 0) flag_i[s] = need ? 1 : 0;
      mbar_arrive(full0 + 8 * s);
    }
  } else if (DET && warp == 3) {
    // The ordered dQ reduction, per unit (the consumers' order): lane 0 waits until key tile
    // x - 1 has published its contribution to the unit's dQ block (counter >= x) when it visits
    // the query tile (qb < prev_hi; else this CTA is the block's first contributor), lets
    // consumer 0 add (barrier DB), waits until consumer 1 has added after it (barrier DB + 2), and
    // publishes x + 1 with release semantics. The poll runs while the consumers compute the
    // unit's products; only the adds wait for it.
    const int x = static_cast<int>(ORD ? tile.x : blockIdx.x);
    for (int n = 0; n < units.n; ++n) {
      const int64_t h = hk * G + n / units.nq;
      const int qb = units.qb_lo + n % units.nq;
      int* sem = a.dq_sem + (static_cast<int64_t>(b) * sh.H + h) * (a.tq_pad / kBq) + qb;
      if (lane == 0 && qb < prev_hi)
        while (ld_acquire_gpu(sem) < x) {
        }
      __syncwarp();
      named_bar_sync_unaligned(DB, 128 + 32);
      named_bar_sync_unaligned(DB + 2, 128 + 32);
      if (lane == 0) red_release_gpu_max(sem, x + 1);
    }
  }
}

// q, d_o [B, Tq, H, D] through tm_q / tm_do (boxes {64, 1, 64, 1}); k, v [B, Tk, Hkv, D] through
// tm_k / tm_v (boxes {64, 1, 128, 1}); dk, dv [B, Tk, Hkv, D] and the dQ accumulator from a.
// Grid (ceil(Tk / kBk), Hkv, B). IDX: the index masks (window, lengths, [B, Tq] / [B, Tk]
// validity; causal too); without it only causal (the first version's code). DROP (with IDX only):
// dropout (header comment), a third instantiation so that the other two carry no Philox code. DET:
// TensorFlow's op determinism, the dQ contributions added in key-tile order (header comment); the
// instantiations without it are unchanged. BIAS (IDX without dropout, D = 64 only): the additive
// bias and dbias (header comment), a fourth instantiation so that the IDX kernel carries no bias code.
// ORD: the CTA's tile from bwd_tile<true> (the launch's tile order), else blockIdx (the kernels below).
template <typename T, int D, bool IDX, bool DROP, bool DET, bool BIAS, bool ORD>
__device__ __forceinline__ void bwd_cta(const CUtensorMap& tm_q, const CUtensorMap& tm_k, const CUtensorMap& tm_v,
                                        const CUtensorMap& tm_do, const BwdSm90Args& a) {
  static_assert(!DROP || IDX, "dropout runs the index-masked kernel");
  static_assert(!BIAS || (IDX && !DROP && D == 64), "bias / dbias: the IDX kernel without dropout, D = 64");
  // The dQ accumulation through shared memory and the copy engine's reduce-add (dq_bulk_reduce).
  constexpr bool kDqBulk = dq_bulk_reduce(D, DET);
  using L = BwdSmem<D, IDX, kDqBulk>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  float* rows_f = reinterpret_cast<float*>(smem_raw + (base - smem_u32(smem_raw)) + L::kRows);
  // IDX: per stage and row, the keys of the tile the row sees, lo | hi << 16 ([lo, hi) within
  // [0, kBk]; empty for rows that see no key), and per stage whether the unit needs the per-element
  // mask (both written by the producer's warp 2 while warp 1 copies lse2 and dsum).
  int* range_i = reinterpret_cast<int*>(smem_raw + (base - smem_u32(smem_raw)) + L::kRange);
  int* flag_i = reinterpret_cast<int*>(smem_raw + (base - smem_u32(smem_raw)) + L::kFlag);
  const uint32_t kv_full = base + L::kBars;
  const uint32_t full0 = kv_full + 8, empty0 = kv_full + 8 * (1 + kStages);

  const FlashBwdParams& p = a.p;
  const AttnShape& sh = p.shape;
  const bool causal = p.mask.causal;
  const int64_t off = p.mask.causal_offset;
  // Key tile, kv head, batch: ORD, from the tile order (bwd_tile); else blockIdx, read where the plain
  // kernels read it, so that their code stays unchanged.
  const BwdTile tile = bwd_tile<ORD>(a.order_g, a.order_big);
  const int hk = ORD ? tile.hk : blockIdx.y, b = ORD ? tile.b : blockIdx.z;
  const int G = static_cast<int>(sh.H / sh.Hkv);
  const int64_t j0 = static_cast<int64_t>(ORD ? tile.x : blockIdx.x) * kBk;
  const Units<IDX> units(sh, causal, off, j0, p.mask, b);
  // DET: key tile x - 1 (same kv head and batch) visits query tiles [lo', hi') with
  // lo' <= units.qb_lo (both ends grow with the key tile: header comment), so the tiles of this CTA
  // that it visits too, whose dQ blocks wait for its contribution, are those below prev_hi = hi'
  // (0: none). Computed here, before the producer's setmaxnreg.dec, for its warp 3.
  int prev_hi = 0;
  if constexpr (DET) {
    if ((ORD ? tile.x : blockIdx.x) > 0 && units.n > 0) {
      const Units<IDX> prev(sh, causal, off, j0 - kBk, p.mask, b);
      prev_hi = prev.qb_lo + prev.nq;
    }
  }

  const int wg = threadIdx.x / 128;
  bwd_init_barriers<IDX, L::kLagBars>(kv_full, full0, empty0);

  if (wg == 0) {
    // ---- Producer warpgroup (bwd_producer: TMA loads, lse2 / dsum rows, IDX: key ranges). ----
    bwd_producer<kBk, D, IDX, DET, ORD, L>(&tm_q, &tm_k, &tm_v, &tm_do, a, units, base, kv_full, full0, empty0,
                                           rows_f, range_i, flag_i, hk, b, G, j0, tile, prev_hi);
    return;
  }

  // ---- Consumer warpgroups: keys 64c .. 64c+63 of the tile. ----
  setmaxnreg_inc<kConsumerRegs>();
  const int c = wg - 1;
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const float sl2 = p.score.scale * 1.4426950408889634f;
  // IDX without dropout: soft-cap (s = c tanh(scale S / c), sm80's score_elem). S^T is capped in
  // place in base-2 units before the P pass (which then multiplies by pmul = 1), and the dS pass
  // multiplies by d softcap / d(scale S) = 1 - tanh^2, tanh recovered from P itself:
  // tanh = (log2 P + lse2) / (c log2e), exact up to ex2 / lg2's rounding, so no 32 more registers
  // carry it through dP's wait and the dV product (a P of 0, masked or underflowed, has dS = 0
  // whatever the factor). CTA-uniform.
  const float softcap = IDX && !DROP ? p.score.softcap : 0.f;
  const float cap_log2 = softcap * 1.4426950408889634f;
  const float inv_cap = softcap != 0.f ? 1.f / softcap : 0.f;
  const float inv_cap_log2 = softcap != 0.f ? 1.f / cap_log2 : 0.f;
  const float pmul = softcap != 0.f ? 1.f : sl2;
  // Key of accumulator rows h2 = 0 / 1 (local to the tile).
  const int key_l[2] = {64 * c + 16 * warp + g, 64 * c + 16 * warp + g + 8};
  // IDX without dropout: a dense [B, H, Tq, Tk] mask (broadcast through its strides), in the P pass'
  // dense-mask copy (every unit takes it; the BIAS copy with a bias): P = 0 where the mask is false,
  // so dS = 0 there too. This thread's two keys' column offsets once; the mask bytes of kBiasBatch
  // n-tiles read before any is used, each load predicated on the element lying inside the tensor
  // (query below Tq, key below Tk: key_in). With kBiasBatch = 0 (the former code) the masked copy
  // reads it element by element, only where the index ranges let the element through.
  const bool* dmask = IDX && !DROP ? p.mask.mask : nullptr;
  const bool* dmask_bh = nullptr;
  int64_t dmask_q = 0, dmask_k[2] = {0, 0};
  if (dmask) {
    const MaskParams& mk = p.mask;
    dmask_bh = dmask + b * mk.mask_stride[0];  // + h * mask_stride[1] per unit
    dmask_q = mk.mask_stride[2];
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) dmask_k[h2] = (j0 + key_l[h2]) * mk.mask_stride[3];
  }
  // BIAS (the IDX kernel without dropout, D = 64 only): an additive bias [B, H, Tq, Tk] (q's
  // dtype, broadcast through its strides) and its gradient dbias [B, H, Tq, Tk] (float32, compact);
  // header comment "Bias and dbias". The bias enters the masked P pass (every unit then takes it) as
  // in the forward's IDX kernel: x = S^T pmul + log2e b (pmul: scale log2e, or 1 after the soft-cap,
  // base-2 units), read in batches (kBiasBatch: every element inside the tensor, below Tq and Tk,
  // those the index ranges or the dense mask hide discarded; with kBiasBatch = 0 only the visible
  // ones, never past Tq / q_lengths or Tk / k_lengths). dbias = d loss / d(softcap(scale S) + b) = P (dP - dsum)
  // (sm80's dlogit: before the soft-cap factor), stored in the dS pass for elements with P != 0;
  // launch() zeroes dbias beforehand, so every other element (masked, past the index limits, in units
  // no CTA visits) reads 0, as after sm80's memset. Addressed per unit (bias_at / dbias_at in the
  // unit loop). Either may be null here (bias without its gradient, or dbias alone); without BIAS
  // both are null constants, so none of the bias copies below is compiled in. Not at D = 128: there
  // the bias code made ptxas spill or serialize the kernel's wgmmas (C7511, "insufficient register
  // resources") in every arrangement tried (header comment; bwd_applies sends bias / dbias at D =
  // 128 to the split kernel, or to sm80 with TF_FLASHATTN_SM90_BWD_SPLITD=0 or dropout).
  const T* const bias = BIAS ? static_cast<const T*>(p.score.bias) : nullptr;
  float* const dbias = BIAS ? p.dbias : nullptr;
  // BIAS, or IDX without dropout (a dense mask): whether those keys are below Tk (the batched reads'
  // bound; kBiasBatch).
  bool key_in[2] = {true, true};
  if constexpr (BIAS || (IDX && !DROP)) {
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) key_in[h2] = j0 + key_l[h2] < sh.Tk;
  }
  // IDX: whether those keys are below k_lengths (and Tk) and pass k_valid (key_visible).
  bool key_ok[2] = {true, true};
  if constexpr (IDX) {
    if (units.n > 0) {
      const int64_t klim = k_limit(p.mask, sh, b);
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        const int64_t key = j0 + key_l[h2];
        key_ok[h2] = key < klim && key_visible(p.mask, sh, b, key);
      }
    }
  }

  // DROP: the Philox key of the seed, once per CTA; the warp's accumulator rows are keys
  // drop_k0 .. drop_k0 + 15 (keys g, g + 8 of that m16 block for this thread).
  uint32_t drop_key[2] = {0u, 0u};
  if constexpr (DROP) {
    if (units.n > 0) dropout_key(p.dropout, drop_key);
  }
  const int64_t drop_k0 = j0 + 64 * c + 16 * warp;

  float dv[D / 2], dk[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dv[i] = dk[i] = 0.f;

  if (units.n > 0) mbar_wait(kv_full, 0);
  const uint32_t k_rows = base + L::kK + c * 64 * 128;  // this consumer's 64 keys in each panel
  const uint32_t v_rows = base + L::kV + c * 64 * 128;
  // dQ split between the consumers: D = 128 by columns (panel c of K, all 128 keys); D = 64 by columns too in the
  // plain kernels and the index-masked one in the launch order without dropout or bias (kCols64,
  // FA_SM90_BWD_D64_COLS, _COLS_IDX: 32 each, from byte 64c of K's 128-byte rows), by keys in the DET ones and the
  // other index-masked ones (the causal one in the grouped tile order split by columns only with
  // FA_SM90_BWD_D64_COLS_IDX_ORD, those with dropout or bias only with FA_SM90_BWD_D64_COLS_DROP / _COLS_BIAS).
  constexpr bool kCols64 =
      FA_SM90_BWD_D64_COLS != 0 && D == 64 && !DET &&
      (!IDX || ((!DROP || FA_SM90_BWD_D64_COLS_DROP != 0) && (!BIAS || FA_SM90_BWD_D64_COLS_BIAS != 0) &&
                ((FA_SM90_BWD_D64_COLS_IDX != 0 && FA_SM90_BWD_D64_LAG != 0 && !ORD) ||
                 (FA_SM90_BWD_D64_COLS_IDX_ORD != 0 && ORD))));
  constexpr bool kSplitCols = D == 128 || kCols64;
  constexpr int kDqN = kCols64 ? 32 : 64;  // dQ columns per consumer (wgmma N)
  // (the bulk reduce-add, the kept dQ values and the ordered DET adds below assume 32 dQ floats per thread)
  static_assert(!kCols64 || (!kDqBulk && !DET), "FA_SM90_BWD_D64_COLS: the float4 atomics only");
  // FA_SM90_BWD_D64_LAG (the macro's comment): unit n's dQ products issued in unit n + 1, after its S^T and dP^T, and
  // added there; the last unit's after the loop. ds_full[i]: both consumers' halves of dS^T buffer i stored (256
  // arrivals); ds_free[i]: both consumers' dQ products have read it (256). lag_blk: the previous unit's dQ block.
  constexpr bool kLag = FA_SM90_BWD_D64_LAG != 0 && kCols64 && !ORD;
  static_assert(!kLag || L::kLagBars == 4, "FA_SM90_BWD_D64_LAG: the layout's ds_full / ds_free barriers");
  const uint32_t ds_full0 = empty0 + 8 * kStages, ds_free0 = ds_full0 + 16;
  float* lag_blk = a.dq_acc;
  // dS^T buffer of unit u (two, alternating).
  auto ds_buffer = [&](int u) { return base + L::kDs + (u & 1) * L::kDsBytes; };
  constexpr int kDqSteps = kSplitCols ? kBk / 16 : 64 / 16;
  const int dq_key0 = kSplitCols ? 0 : 64 * c;
  const uint32_t dq_b0 = base + L::kK + (D == 128 ? c * kBk * 128 : kCols64 ? c * 64 : 0) + dq_key0 * 128;
  const int dq_cg = D == 128 ? c : 0;
  // The dQ atomics' address kept live into the next unit: the plain kernel at D = 64 without DET in the
  // launch order (no mask, or causal where the tile order is off). The REDGs of a unit (8 when this was measured;
  // 4 with FA_SM90_BWD_D64_COLS) read their address
  // register only as the memory pipe takes them, and ptxas reused that register for the next unit's first
  // instructions (a shared-memory descriptor at the loop top), which then waited for all 8 (the D = 64
  // profile's largest stall, 8.4 % of the samples, long scoreboard: RESULTS.md "Hopper backward kernel"
  // (p)). A use of the previous unit's address after the next unit's S^T wait (a store under a condition
  // never true, opaque to the compiler; an empty asm reading it was dropped by ptxas) keeps that register
  // out of the loop top. Only there: in all the D = 64 kernels and the split kernel (branch
  // sm90-bwd-d64-keep-addr, RESULTS (s)) it gained 2.6-4.0 % without a mask but lost 2.6-3.8 % at D = 64
  // causal (the ORD kernel) and 2.4-4.1 % at D = 256 causal; with dropout ptxas gave the use a register of its
  // own and the loop top's Philox code still reused the REDGs'.
  constexpr bool kKeepDqAddr = !kDqBulk && !DET && !IDX && !ORD;
  float* dq_addr_prev = a.dq_acc;
  // kKeep64 (FA_SM90_BWD_KEEP64, _IDX): the counterpart in the causal D = 64 kernel (ORD, no IDX; only with
  // FA_SM90_BWD_D64_COLS=0) and the index-masked one in the launch order. There ptxas rewrote one of the REDGs'
  // source registers at the loop's first instruction (an S2UR recomputing the shared-memory window for the dS^T
  // stores; in the IDX kernel the BAR.SYNC id's register, on the same scoreboard), which waited for all 8 (the causal
  // D = 64 profile: 7.5 % of the samples on that instruction; benchmarks/sass_order.py --redg names it). Here the
  // previous unit's dQ values (dq_prev) and address stay live up to the same never-taken store as above, and the dS^T
  // stores' address (IDX: a shared-space address for st.shared; ORD: the generic pointer, which measured faster
  // there) and IDX's barrier id are loop-carried (opaque at the end of each unit), so not recomputed.
  constexpr bool kKeep64 = FA_SM90_BWD_KEEP64 != 0 && D == 64 && !kDqBulk && !DET && !kCols64 &&
                         ((ORD && !IDX) || (FA_SM90_BWD_KEEP64_IDX != 0 && IDX && !ORD && !DROP && !BIAS));
  static_assert(!(kCols64 && kKeep64), "FA_SM90_BWD_D64_COLS: kKeep64 keeps 32 dQ floats");
  float dq_prev[32];  // kKeep64: the previous unit's dQ (unused otherwise)
#pragma unroll
  for (int x = 0; x < 32; ++x) dq_prev[x] = 0.f;
  uint32_t ds_s0 = base + L::kDs;  // kKeep64: dS^T's stage 0 (shared address), loop-carried
  uint8_t* ds_gen = smem_raw + (base - smem_u32(smem_raw)) + L::kDs;  // kKeep64: dS^T's stage 0, generic
  constexpr bool kSts = IDX;  // kKeep64: dS^T stored with st.shared (IDX) or through the generic pointer
  int ds_bar = 5 + c;  // kKeep64 with IDX: the named barrier's id below, loop-carried
  // kRotate (FA_SM90_BWD_ROTATE): unit nn's S^T and dP^T (as in the loop below) issued at the end of unit
  // nn - 1, after the wait for its Q / dO stage, into accumulators that live across the loop's back edge.
  constexpr bool kRotate = FA_SM90_BWD_ROTATE != 0 && kDqBulk && (!DROP || FA_SM90_BWD_DROP128 >= 2);
  // S^T = K_c Q^T and dP^T = V_c dO^T: [64 keys x 64 queries], contraction over D in k16 steps, from the Q /
  // dO tiles at q_s / do_s; S^T in its own commit group, so that P^T is computed while dP^T runs.
  // One of them: acc = A B^T, A this consumer's 64 rows of the K or V tile (a_rows), B the Q or dO tile (b_s).
  // The descriptor of the operand tile at `tile`, `offset` bytes on (FA_SM90_BWD_DESC_ADD at D = 128: the tile's plus
  // the offset).
  // kStepS: S^T's and dP^T's; kStep: the dV, dK and dQ products' (FA_SM90_BWD_DROP128 >= 1: with dropout too).
  constexpr bool kStepS = FA_SM90_BWD_DESC_ADD != 0 && D == 128 && !DROP;
  constexpr bool kStep = FA_SM90_BWD_DESC_ADD != 0 && D == 128 && (!DROP || FA_SM90_BWD_DROP128 >= 1);
  auto desc_at = [](uint32_t tile, uint32_t offset, uint32_t lbo) { return wgmma_desc_at<kStep>(tile, offset, lbo); };
  auto product = [&](float(&acc)[32], uint32_t a_rows, uint32_t b_s) {
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      const uint32_t koff = (k / 4) * kBk * 128 + (k % 4) * 32, qoff = (k / 4) * kBq * 128 + (k % 4) * 32;
      wgmma_ss_m64n64k16<0, 0>(WgmmaType<T>{}, acc, wgmma_desc_at<kStepS>(a_rows, koff, 16),
                                wgmma_desc_at<kStepS>(b_s, qoff, 16), k > 0);
    }
    wgmma_commit();
  };
  auto issue_s_dp = [&](float(&sacc)[32], float(&dpacc)[32], uint32_t q_s, uint32_t do_s) {
    wgmma_fence();
    product(sacc, k_rows, q_s);
    product(dpacc, v_rows, do_s);
  };
  // dQ_c = dS K in its own commit group: A = dS [64 queries x keys] read transposed from the dS^T buffer at ds_buf,
  // B = K [keys x kDqN cols].
  auto issue_dq = [&](float(&acc)[kDqN / 2], uint32_t ds_buf) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kDqSteps; ++kk) {
      const uint64_t da = desc_at(ds_buf, (dq_key0 + 16 * kk) * 128, kBk * 128);
      const uint64_t db = desc_at(dq_b0, kk * 2048, kBk * 128);
      if constexpr (kCols64)
        wgmma_ss_m64n32k16<1, 1>(WgmmaType<T>{}, acc, da, db, kk > 0);
      else
        wgmma_ss_m64n64k16<1, 1>(WgmmaType<T>{}, acc, da, db, kk > 0);
    }
    wgmma_commit();
  };
  // The dQ atomics (no DET): this consumer's kDqN / 8 float4 from acc, thread tid's at addr + j * 128.
  auto add_dq = [&](float4* addr, const float(&acc)[kDqN / 2]) {
#pragma unroll
    for (int j = 0; j < kDqN / 8; ++j)
      atomicAdd(addr + j * 128, make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]));
  };
  // kRotate: what the end of a unit waits for (1: both products; 2: S^T only).
  constexpr int kRotateWait = FA_SM90_BWD_ROTATE == 1 ? 0 : 1;
  float sacc_r[32], dpacc_r[32];  // (unused without kRotate)
  // kRotate: unit nn's S^T and dP^T into the accumulators that live across the back edge (sacc_r, dpacc_r).
  auto issue_next = [&](int nn) {
    const int ss = nn % kStages;
    // Issued after the last unit too (their results unused, reading the stage of the unit before it, which
    // no copy engine writes any more), without waiting: a conditional issue left ptxas a copy into the
    // accumulators on the path without it, and it serialized every wgmma (C7515).
    if (nn < units.n) mbar_wait(full0 + 8 * ss, (nn / kStages) & 1);
    issue_s_dp(sacc_r, dpacc_r, base + L::kQ + ss * L::kQBytes, base + L::kDo + ss * L::kQBytes);
  };
  // DROP: unit nn's keep bits (the loop's comment below); kRotate: unit nn's drawn while its S^T and dP^T run, kept
  // in kbits_next across the back edge (also after the last unit, for no unit: the draws touch no memory).
  auto draw_bits = [&](int nn) {
    const int64_t hh = hk * G + nn / units.nq, ii0 = static_cast<int64_t>(units.qb_lo + nn % units.nq) * kBq;
    if constexpr (FA_SM90_BWD_DROP_PAIR != 0) {
      // The pair's 32 keys from drop_k0 less this warp's 16 (warp 2 k + 1); the partner is thread tid ^ 32.
      uint32_t other;
      uint32_t own = unit_keep_bits_pair<8>(drop_key, p.dropout, hh, b, drop_k0 - 16 * (warp & 1), ii0, g, t, warp & 1,
                                            other);
      const uint32_t xchg = base + L::kXchg + ((nn & 1) * kConsumers * 128 + c * 128) * 4;
      st_shared_u32(xchg + (tid ^ 32) * 4, other);
      named_bar_sync(9 + 2 * c + (warp >> 1), 64);
      return own | ld_shared_u32(xchg + tid * 4);
    } else {
      return unit_keep_bits<8>(drop_key, p.dropout, hh, b, drop_k0, ii0, g, t);
    }
  };
  uint32_t kbits_next = 0u;
  if constexpr (kRotate) {
    if (units.n > 0) {
      issue_next(0);
      if constexpr (DROP) kbits_next = draw_bits(0);
      wgmma_wait<kRotateWait>();
    }
  }
  for (int n = 0; n < units.n; ++n) {
    const int s = n % kStages;
    const int64_t h = hk * G + n / units.nq, i0 = static_cast<int64_t>(units.qb_lo + n % units.nq) * kBq;
    // DROP: the unit's keep bits, bit x for element x of S^T below (drop_cols_bits<1, 8>: n-tile j,
    // element 2 h2 + e -> bit 4 j + 2 h2 + e = x); 8 Philox calls of 4 draws each (they need only b, h and the
    // indices), drawn outside the element-wise phase, where S^T, dP^T, dK and dV are all live, so that the Philox
    // temporaries stay out of it: with kRotate (FA_SM90_BWD_DROP128 >= 2, the default) at the end of the unit
    // before, under this unit's S^T and dP^T (draw_bits, kbits_next); with FA_SM90_BWD_DROP_UNDER under them too
    // (draw_under below); else here, before the wait for the unit's tiles.
    constexpr bool kDrawUnder = DROP && !kRotate && FA_SM90_BWD_DROP_UNDER != 0;
    uint32_t kbits = 0u;
    if constexpr (DROP && kRotate) {
      kbits = kbits_next;
    } else if constexpr (DROP && !kDrawUnder) {
      kbits = draw_bits(n);
      asm volatile("" : "+r"(kbits)::"memory");  // drawn before the wait below
    }
    // Behind a branch that is always taken (tq_pad >= 0), as the rotated loop's draw: ptxas would otherwise move the
    // wait that follows ahead of the draws (it moves a WARPGROUP.DEPBAR up within its basic block).
    auto draw_under = [&]() {
      if constexpr (kDrawUnder) {
        if (a.tq_pad >= 0) kbits = draw_bits(n);
      }
    };
    if constexpr (!kRotate) mbar_wait(full0 + 8 * s, (n / kStages) & 1);
    const uint32_t q_t = base + L::kQ + s * L::kQBytes;
    const uint32_t do_t = base + L::kDo + s * L::kQBytes;
    const uint32_t ds_t = ds_buffer(n);
    uint8_t* ds_ptr = kKeep64 && !kSts ? ds_gen + (n & 1) * L::kDsBytes : smem_raw + (ds_t - smem_u32(smem_raw));

    // S^T and dP^T (kRotate: issued at the end of the unit before, issue_next).
    float sacc_l[32], dpacc_l[32];
    float(&sacc)[32] = pick_array<kRotate>(sacc_r, sacc_l);
    float(&dpacc)[32] = pick_array<kRotate>(dpacc_r, dpacc_l);
    float dq[kDqN / 2];  // dQ_c of this unit (kLag: of the unit before)
    if constexpr (!kRotate) {
      issue_s_dp(sacc, dpacc, q_t, do_t);
      if constexpr (kLag) {
        // Unit n - 1's dQ_c (below, "dQ_c = dS K"), once both halves of its dS^T are stored; unit 0 issues the same
        // products from the K tile (read-only here) and drops the result, so that the issue is unconditional (issued
        // under a condition, ptxas serialized every wgmma: C7515, kRotate's comment).
        // (issue_dq's wgmma fence: without it ptxas injects one for dq's registers, C7519)
        if (n > 0) mbar_wait(ds_full0 + 8 * ((n - 1) & 1), ((n - 1) >> 1) & 1);
        const uint32_t ds_prev = n > 0 ? ds_buffer(n - 1) : base + L::kK;
        issue_dq(dq, ds_prev);
        draw_under();
        wgmma_wait<2>();  // S^T done; dP^T and the dQ products may still run
      } else {
        draw_under();
        wgmma_wait<1>();  // S^T done (groups complete in order); dP^T may still run
      }
    }
    fence_regs(sacc);
    if constexpr (kKeepDqAddr) {
      if (a.tq_pad < 0) *dq_addr_prev = 0.f;  // never taken (tq_pad >= 0): a use of the register that ptxas keeps
    }
    if constexpr (kKeep64) {
      if (a.tq_pad < 0) {  // never taken, as above: the previous unit's dQ values and address used here
#pragma unroll
        for (int x = 0; x < 32; ++x) dq_addr_prev[x] = dq_prev[x];
      }
    }
    if (softcap != 0.f) {
#pragma unroll
      for (int x = 0; x < 32; ++x) sacc[x] = softcap_log2(sacc[x], p.score.scale, inv_cap, cap_log2);
    }

    // P^T, then dS^T, in place: element i = 4j + 2h2 + e is (key key_l[h2], query 8j + 2t + e).
    const float* lse2_s = rows_f + (2 * s) * kBq;
    const float* dsum_s = rows_f + (2 * s + 1) * kBq;
    // IDX: the producer's flag (a row of the unit that does not see every key of the tile, or a
    // key of the tile past k_lengths / Tk or invalid); the mask then selects P = 0 (never a
    // product with 2^(S - lse2): fully masked rows have lse2 = -inf) and dS = 0 * (dP - dsum) = 0.
    const bool* dmask_u = dmask ? dmask_bh + h * p.mask.mask_stride[1] : nullptr;  // this unit's head
    const T* const bias_u = bias;  // non-null: this unit takes the bias copies of the passes below
    float* const dbias_u = dbias;
    // The bias / dbias elements of queries i0 + q (q < 64) and keys j0 + key_l[h2] of this unit:
    // a pointer to (q 0, key_l[0]) and 32-bit offsets (bwd_applies: strides below 2^23), the strides
    // opaque at each call (bias_unit / dbias_unit, shared with the split kernel).
    auto bias_at = [&]() { return bias_unit<T>(p.score, bias, b, h, i0, j0, key_l[0]); };
    auto dbias_at = [&]() { return dbias_unit(dbias, sh, b, h, i0, j0, key_l[0]); };
    const bool need_mask = IDX ? flag_i[s] != 0 || dmask != nullptr || bias_u != nullptr
                               : i0 + kBq > sh.Tq || j0 + kBk > sh.Tk || (causal && j0 + kBk - 1 > i0 + off);
    const int* range_s = range_i + s * kBq;
    // P^T = 2^(S^T scale log2e - lse2) (0 where masked) into sacc, under the dP^T product; with or
    // without the mask's selections (masked). need_mask is CTA-uniform (IDX: the producer's
    // per-unit flag; else indices only), so the branch is taken once per unit around two
    // straight-line copies of the pass: an `if (need_mask)` inside the unrolled per-element loop
    // compiled (ptxas 13.0, sm_90a) to one branch per S^T element (32 per unit and thread, every
    // instantiation), as the forward's softmax did (sm90-fwd-idx-fast). That branch also keeps
    // dP^T's wait below the pass: ptxas moves a WARPGROUP.DEPBAR up within its basic block
    // (sm90-fwd-overlap), not across the join. A bias (bias_c, BIAS, masked) is a third copy:
    // x = S^T pmul + log2e bias as the forward (its IDX kernel: x = sacc mul, then x += log2e bias),
    // the bias value used only where the element is visible (read in batches, kBiasBatch); P = 0 where
    // x = -inf (a bias of -inf, maybe on every key a row sees: then lse2 = -inf too, and 2^(x - lse2)
    // would be NaN). A dense mask without bias (dense_c) is a fourth copy, the batched reads without
    // the bias; the masked copy's own dense-mask test below is then unreachable (the dispatch takes
    // the dense copy whenever dmask_u is set), and ptxas drops it: that copy, which the index masks
    // take, has 10-13 branches in the loop instead of 72-75 (benchmarks/sass_order.py's loop_stats).
    auto p_pass = [&](auto mask_c, auto bias_c, auto dense_c) {
      bool masked;  // a constant (std::true_type / false_type), but for <DROP, D = 128> with FA_SM90_BWD_DROP128 0
      if constexpr (std::is_same_v<decltype(mask_c), bool>)
        masked = mask_c;
      else
        masked = decltype(mask_c)::value;
      constexpr bool kBias = BIAS && decltype(bias_c)::value;
      // The dense mask's copy (IDX without dropout or bias, a dense mask given): the batched reads
      // below without the bias.
      constexpr bool kDenseMask = IDX && !DROP && !kBias && decltype(dense_c)::value;
      UnitElems<const T> ba{nullptr, 0, 0};
      if constexpr (kBias) ba = bias_at();
      if constexpr ((kBias || kDenseMask) && kBiasBatch > 0) {
        // The bias and dense-mask copies, kBiasBatch n-tiles j (4 elements each) at a time: the mask
        // bytes and bias values of a batch loaded first, each load predicated on the element lying
        // inside the tensors (query below Tq, key below Tk), then used; elements that are not visible
        // discard what was read (bv = 0 there, as before), so the values are the per-element code's
        // (below) bit for bit. That code read the mask byte and then, where it was true, the bias
        // element, each behind a branch, one element after the other.
        const int qlim = sh.Tq - i0 < kBq ? static_cast<int>(sh.Tq - i0) : kBq;  // rows of this unit < Tq
        int64_t mq = dmask_q;
        asm volatile("" : "+l"(mq));  // (opaque per unit: nothing derived from it hoisted, as bias_unit)
        const bool* const mb = dmask_u ? dmask_u + i0 * mq + dmask_k[0] : nullptr;
        const int64_t mk8 = dmask_k[1] - dmask_k[0];
#pragma unroll
        for (int j0b = 0; j0b < 8; j0b += kBiasBatch) {
          unsigned char mv[kBiasBatch][4];
          T bvr[kBiasBatch][4];
#pragma unroll
          for (int jj = 0; jj < kBiasBatch; ++jj)
#pragma unroll
            for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int q = 8 * (j0b + jj) + 2 * t + e;
                const bool in = q < qlim && key_in[h2];
                mv[jj][2 * h2 + e] = 1;
                bvr[jj][2 * h2 + e] = Elem<T>::from_f(0.f);
                if (in && mb) mv[jj][2 * h2 + e] = *reinterpret_cast<const unsigned char*>(mb + q * mq + (h2 ? mk8 : 0));
                if constexpr (kBias)
                  if (in) bvr[jj][2 * h2 + e] = ba(q, h2);
              }
#pragma unroll
          for (int jj = 0; jj < kBiasBatch; ++jj) {
            const int j = j0b + jj;
            const float2 l2 = *reinterpret_cast<const float2*>(lse2_s + 8 * j + 2 * t);
            const int2 rg = *reinterpret_cast<const int2*>(range_s + 8 * j + 2 * t);
#pragma unroll
            for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int x = 4 * j + 2 * h2 + e;
                const int r = e ? rg.y : rg.x;
                bool vis = key_ok[h2] && key_l[h2] >= (r & 0xffff) && key_l[h2] < (r >> 16);
                if (dmask_u) vis = vis && mv[jj][2 * h2 + e] != 0;
                if constexpr (kBias) {
                  const float bv = vis ? Elem<T>::to_f(bvr[jj][2 * h2 + e]) : 0.f;
                  sacc[x] = bias_p_of(sacc[x], pmul, e ? l2.y : l2.x, vis, bv);
                } else {  // the masked copy's value: 2^(S^T pmul - lse2) where visible, else 0
                  const float pv = fast_exp2(sacc[x] * pmul - (e ? l2.y : l2.x));
                  sacc[x] = vis ? pv : 0.f;
                }
              }
          }
        }
      } else {  // element by element (kBiasBatch = 0, and the masked and unmasked copies)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float2 l2 = *reinterpret_cast<const float2*>(lse2_s + 8 * j + 2 * t);
        int2 rg = make_int2(0, 0);  // IDX: the key ranges of queries 8j + 2t, +1
        if (IDX && (masked || kBias)) rg = *reinterpret_cast<const int2*>(range_s + 8 * j + 2 * t);
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int x = 4 * j + 2 * h2 + e;
            if constexpr (kBias) {
              const int r = e ? rg.y : rg.x, q = 8 * j + 2 * t + e;
              bool vis = key_ok[h2] && key_l[h2] >= (r & 0xffff) && key_l[h2] < (r >> 16);
              if (vis && dmask_u) vis = dmask_u[(i0 + q) * dmask_q + dmask_k[h2]];
              float bv = 0.f;
              if (vis) bv = Elem<T>::to_f(ba(q, h2));
              float z = sacc[x] * pmul;
              z += bv * 1.4426950408889634f;
              // z = -inf (a bias of -inf): P = 0, as sm80's (its row may see nothing else: lse2 = -inf).
              sacc[x] = vis && z != -INFINITY ? fast_exp2(z - (e ? l2.y : l2.x)) : 0.f;
            } else {
              float pv = fast_exp2(sacc[x] * pmul - (e ? l2.y : l2.x));
              if (masked) {
                if constexpr (IDX) {
                  const int r = e ? rg.y : rg.x;
                  if (!(key_ok[h2] && key_l[h2] >= (r & 0xffff) && key_l[h2] < (r >> 16))) pv = 0.f;
                  else if (dmask_u && !dmask_u[(i0 + 8 * j + 2 * t + e) * dmask_q + dmask_k[h2]]) pv = 0.f;
                } else {
                  const int64_t key = j0 + key_l[h2], qi = i0 + 8 * j + 2 * t + e;
                  if (key >= sh.Tk || qi >= sh.Tq || (causal && key > qi + off)) pv = 0.f;
                }
              }
              sacc[x] = pv;
            }
          }
      }
      }
    };
    if constexpr (DROP && D == 128 && FA_SM90_BWD_DROP128 == 0)
      p_pass(need_mask, std::false_type{}, std::false_type{});
    else if (BIAS && bias_u != nullptr)
      p_pass(std::true_type{}, std::true_type{}, std::false_type{});
    else if (kBiasBatch > 0 && IDX && !DROP && dmask_u != nullptr)
      p_pass(std::true_type{}, std::false_type{}, std::true_type{});
    else if (need_mask)
      p_pass(std::true_type{}, std::false_type{}, std::false_type{});
    else
      p_pass(std::false_type{}, std::false_type{}, std::false_type{});
    wgmma_wait<kLag ? 1 : 0>();  // dP^T done (kLag: the dQ products may still run)
    fence_regs(dpacc);
    // dV += P^T dO (DROP: Pd^T dO, Pd = P Z) issued here, in its own commit group, so that the dV
    // product runs under the dS^T pass below (FlashAttention-3's order) instead of after it with
    // dK. The same 4 k16 products into dv in the same order as before (only their issue point
    // moved), so dV is bit-identical; DROP: Pd = P Z is the same single multiply the dS^T pass did
    // in place (sacc keeps the unscaled P for dS^T). The cost: the 16 registers of P^T's A
    // fragments are live through the dS^T pass (with S^T, dP^T, dK and dV), which spills in
    // <DROP, D = 128> (88 bytes, ptxas 13.0; its keep bits and keep_scale are live too; 64 at FA_SM90_BWD_DROP128 3,
    // a candidate), so that one keeps the former order (dV issued with dK) below level 3. Waiting for dP^T before the issue (above, as
    // before) rather than after it: waiting after it spilled the first kernel at D = 128 (units.n,
    // reloaded once per unit).
    constexpr bool kEarlyDv = !(DROP && D == 128) || FA_SM90_BWD_DROP128 >= 3;
    // As the A fragments of m64k16 (k16 step kk = queries 16kk .. 16kk+15): element 8 kk + 2 x, +1.
    uint32_t pa[4][4], da[4][4];
    if constexpr (kEarlyDv) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int x0 = 8 * kk + 2 * x;
          if constexpr (DROP) {
            const float z0 = ((kbits >> x0) & 1u) ? p.dropout.keep_scale : 0.f;
            const float z1 = ((kbits >> (x0 + 1)) & 1u) ? p.dropout.keep_scale : 0.f;
            pa[kk][x] = Elem<T>::pack(sacc[x0] * z0, sacc[x0 + 1] * z1);
          } else {
            pa[kk][x] = Elem<T>::pack(sacc[x0], sacc[x0 + 1]);
          }
        }
      fence_regs(dv);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_rs_m64nDk16_tb<T, D>(dv, pa[kk], desc_at(do_t, kk * 2048, kBq * 128));
      wgmma_commit();
    }
    // dS^T = P^T (dP^T - dsum) (DROP: sm80's rule, Pd = P Z, dS = P (dPd Z - dsum), Z = keep_scale
    // or 0). The same operations on the same values as the former single pass. Soft-cap (CTA-uniform,
    // not with DROP): times 1 - tanh^2 (see softcap above).
    // BIAS, units with dbias, or with a bias under soft-cap (CTA-uniform, one branch per unit
    // around a copy of the pass per soft-cap setting): dlogit = P^T (dP^T - dsum) (sm80's
    // order), stored to dbias where P != 0 (the rest stays launch()'s 0), then dS = dlogit (1 -
    // tanh^2) under soft-cap, tanh recovered from P as below less the bias' log2e b (re-read where P
    // > 0: visible elements only, the P pass' load again).
    auto ds_pass_bias = [&](auto cap_c) {
      constexpr bool kCap = decltype(cap_c)::value;
      UnitElems<float> dba{nullptr, 0, 0};
      if (dbias_u) dba = dbias_at();
      UnitElems<const T> ba{nullptr, 0, 0};
      if constexpr (kCap) ba = bias_at();
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float2 dsm = *reinterpret_cast<const float2*>(dsum_s + 8 * j + 2 * t);
        float2 l2 = make_float2(0.f, 0.f);
        if constexpr (kCap) l2 = *reinterpret_cast<const float2*>(lse2_s + 8 * j + 2 * t);
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int x = 4 * j + 2 * h2 + e, q = 8 * j + 2 * t + e;
            const float pv = sacc[x];
            float dl = pv * (dpacc[x] - (e ? dsm.y : dsm.x));
            if (dbias_u && pv != 0.f) dba(q, h2) = dl;
            if constexpr (kCap) {
              float bv = 0.f;
              if (bias_u && pv > 0.f) bv = Elem<T>::to_f(ba(q, h2));
              const float th = ((__log2f(pv) + (e ? l2.y : l2.x)) - bv * 1.4426950408889634f) * inv_cap_log2;
              dl *= pv > 0.f ? 1.f - th * th : 1.f;
            }
            dpacc[x] = dl;
          }
      }
    };
    if (BIAS && (dbias_u != nullptr || (softcap != 0.f && bias_u != nullptr))) {
      if (softcap != 0.f)
        ds_pass_bias(std::true_type{});
      else
        ds_pass_bias(std::false_type{});
    } else if (softcap != 0.f) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float2 dsm = *reinterpret_cast<const float2*>(dsum_s + 8 * j + 2 * t);
        const float2 l2 = *reinterpret_cast<const float2*>(lse2_s + 8 * j + 2 * t);
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int x = 4 * j + 2 * h2 + e;
            dpacc[x] = softcap_ds(sacc[x], dpacc[x], e ? dsm.y : dsm.x, e ? l2.y : l2.x, inv_cap_log2);
          }
      }
    } else
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 dsm = *reinterpret_cast<const float2*>(dsum_s + 8 * j + 2 * t);
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int x = 4 * j + 2 * h2 + e;
          if constexpr (DROP) {
            const float z = ((kbits >> x) & 1u) ? p.dropout.keep_scale : 0.f;
            dpacc[x] = sacc[x] * (dpacc[x] * z - (e ? dsm.y : dsm.x));
            if constexpr (!kEarlyDv) sacc[x] = sacc[x] * z;
          } else {
            dpacc[x] = sacc[x] * (dpacc[x] - (e ? dsm.y : dsm.x));
          }
        }
    }
    // As the A fragments, and dS^T to shared memory ([key][query], one 128-byte-swizzled panel of
    // 128 rows). kLag: buffer n & 1 once both consumers' dQ products of unit n - 2 have read it.
    if constexpr (kLag) {
      if (n >= 2) mbar_wait(ds_free0 + 8 * (n & 1), ((n >> 1) - 1) & 1);
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        if constexpr (!kEarlyDv) pa[kk][x] = Elem<T>::pack(sacc[8 * kk + 2 * x], sacc[8 * kk + 2 * x + 1]);
        da[kk][x] = Elem<T>::pack(dpacc[8 * kk + 2 * x], dpacc[8 * kk + 2 * x + 1]);
        // x = 2 (j & 1) + h2 with j = 2 kk + x / 2: rows key_l[x & 1], queries 8j + 2t, +1.
        const int j = 2 * kk + x / 2;
        if constexpr (kKeep64 && kSts)  // st.shared from the loop-carried address (no generic pointer to rebuild)
          st_shared_u32(ds_s0 + (n & 1) * L::kDsBytes + swz128_offset(kBk, key_l[x & 1], 8 * j + 2 * t), da[kk][x]);
        else
          *reinterpret_cast<uint32_t*>(ds_ptr + swz128_offset(kBk, key_l[x & 1], 8 * j + 2 * t)) = da[kk][x];
      }
    fence_proxy_async();  // dS^T stores before the wgmma (async proxy) reads below
    if constexpr (kLag) mbar_arrive(ds_full0 + 8 * (n & 1));  // (release: the stores above, for the other consumer)
    // kDqBulk: this consumer's dQ staging block is written again after this unit's dQ product
    // (below); the thread that issued the previous unit's bulk reduce-add from it waits here until
    // the copy engine has read it (wait_group.read: long done, most likely, a whole unit ran since),
    // and the barrier before the dQ product (1: D = 128 only), which it reaches after this, tells the
    // rest of its warpgroup. Here rather than just before that barrier: there, ptxas 13.0 spilled
    // 4 bytes in <DROP, D = 128> (also after the P pass, and at the unit's start).
    if constexpr (kDqBulk) {
      if (tid == 0) bulk_wait_read<0>();
    }

    // dK += dS^T Q (and, !kEarlyDv, dV += P^T dO first, as before): contraction over the 64 queries
    // in k16 steps (16 rows = 2 KiB).
    if constexpr (!kEarlyDv) fence_regs(dv);
    fence_regs(dk);
    wgmma_fence();
    if constexpr (!kEarlyDv) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_rs_m64nDk16_tb<T, D>(dv, pa[kk], desc_at(do_t, kk * 2048, kBq * 128));
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_rs_m64nDk16_tb<T, D>(dk, da[kk], desc_at(q_t, kk * 2048, kBq * 128));
    wgmma_commit();

    // dS^T written (and fenced) before the dQ product reads it. D = 128 and the plain D = 64 ORD kernel
    // (kSplitCols; the launch-order one with FA_SM90_BWD_D64_LAG=0, the IDX ORD one with
    // FA_SM90_BWD_D64_COLS_IDX_ORD): each consumer's dQ columns take both consumers' halves (all 128 keys):
    // barrier 1, both consumers; the lagged kernels (kLag: plain, and index-masked with _COLS_IDX (with dropout or
    // bias only with _COLS_DROP / _COLS_BIAS), in the launch order): ds_full, at the next unit's start. The other
    // index-masked and the DET D = 64 kernels: each consumer's dQ takes its own 64 keys only, so only its own
    // warpgroup meets (barrier 5 + c, one BAR.SYNC with the id in a register): the two consumers are no longer held
    // in step once per unit, and one's element-wise pass can run while the other's products do (the Q / dO ring's
    // empty barriers, 256 arrivals, still keep them within kStages units of each other).
    if constexpr (kLag) {
      // (no barrier: ds_full, above)
    } else if constexpr (kSplitCols) {
      named_bar_sync(1, 128 * kConsumers);
    } else {
      named_bar_sync(kKeep64 && IDX ? ds_bar : 5 + c, 128);
    }

    // dQ_c = dS K (kLag: issued at the next unit's start).
    if constexpr (!kLag) issue_dq(dq, ds_t);
    wgmma_wait<0>();  // dQ, and dV / dK before it (complete in order; kLag: the unit before's dQ, issued first)
    fence_regs(dv);
    fence_regs(dk);
    fence_regs(dq);
    mbar_arrive(empty0 + 8 * s);  // Q, dO and the rows of stage s are no longer read
    if constexpr (kLag) {
      if (n > 0) mbar_arrive(ds_free0 + 8 * ((n - 1) & 1));  // dS^T of unit n - 1 read
    }

    // dQacc block of (b, h, query tile): [64 x D] in fragment order (kLag: the atomics below add the previous
    // unit's dQ, to lag_blk; this unit's block becomes lag_blk).
    const int64_t blk_row = (static_cast<int64_t>(b) * sh.H + h) * a.tq_pad + i0;
    // (kCols64: this consumer's n8 tiles 4c .. 4c+3 of the 64 x 64 block, its float4 4c * 128 on.)
    float* blk = a.dq_acc + blk_row * D + dq_cg * 64 * 64 + (kCols64 ? c * 4 * 128 * 4 : 0);
    if constexpr (kDqBulk) {
      // This consumer's 64 x 64 block is one contiguous 16 KiB of the accumulator (fragment order,
      // 16-byte aligned: dq_acc is, launch() checks, and blocks start at multiples of 16 KiB): the
      // 8 float4 go to the staging block in the same order (float4 j * 128 + tid: conflict-free, a
      // warp's 32 consecutive float4), each thread fences them for the async proxy, the warpgroup
      // meets (barrier 7 + c, its own; the previous unit's reads of the block were waited for
      // before barrier 1 above), and thread 0 adds the block to blk with one bulk
      // reduce-add (element-wise atomic adds in an unspecified order, as the atomics: the same float
      // adds, dQ equal up to their order, and denormals: REDG flushes them, UBLKRED does not
      // say it does). No wait here: the next unit's
      // wait_group.read (above) or the kernel's end (wait_group 0) waits for it.
      const uint32_t stage = base + L::kDq + c * L::kDqBytes;
#pragma unroll
      for (int j = 0; j < 8; ++j)
        st_shared_v4_f32(stage + (j * 128 + tid) * 16, dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]);
      if constexpr (kRotate) issue_next(n + 1);
      fence_proxy_async();  // the stores above before the copy engine's (async proxy) read
      named_bar_sync(7 + c, 128);
      if (tid == 0) {
        bulk_reduce_add_f32(blk, stage, L::kDqBytes);
        bulk_commit();
      }
      // DROP: the next unit's keep bits while its products run (after the barrier: the bulk add is not held back),
      // behind a branch that is always taken (tq_pad >= 0): ptxas moves a WARPGROUP.DEPBAR up within its basic
      // block, and without the branch it placed the wait below ahead of the draws.
      if constexpr (kRotate && DROP) {
        if (a.tq_pad >= 0) kbits_next = draw_bits(n + 1);
      }
      if constexpr (kRotate) wgmma_wait<kRotateWait>();  // (unconditional: ptxas pairs it)
    } else if constexpr (!DET) {
      // (kLag: the unit before's block, none at unit 0)
      float4* const dq_addr = reinterpret_cast<float4*>(kLag ? lag_blk : blk) + tid;  // the REDGs' one address register
      if (!kLag || n > 0) add_dq(dq_addr, dq);
      dq_addr_prev = reinterpret_cast<float*>(dq_addr);  // kKeepDqAddr, kKeep64
      if constexpr (kLag) lag_blk = blk;
      if constexpr (kKeep64) {
#pragma unroll
        for (int x = 0; x < 32; ++x) dq_prev[x] = dq[x];
        if constexpr (kSts) asm volatile("" : "+r"(ds_s0));  // loop-carried: not recomputed at the next unit's start
        else asm volatile("" : "+l"(ds_gen));
        if constexpr (IDX) asm volatile("" : "+r"(ds_bar));
      }
    } else {
      // Ordered (header comment, "Deterministic mode"): the producer's warp 3 has seen key tile
      // x - 1's contribution to this block (barrier 2), consumer 0 adds, then consumer 1
      // (barrier 3; D = 64: the same elements, so the order within the CTA matters; D = 128:
      // disjoint columns, the same protocol), then warp 3 publishes (barrier 4). Only barriers here:
      // the counters' addresses and polling in the consumers made ptxas spill at D = 128.
      // One bar.sync each with the barrier and count in registers (c is warpgroup-uniform): written
      // as `if (c == 0) ... else ...`, ptxas made two predicated BAR.SYNCs of each pair, and
      // compute-sanitizer's synccheck reported "Divergent thread(s) in block" at the first
      // (flash_bwd_sm90_kernel<bf16, 64, no IDX, DET>, 2026-12-01), and again at the register form
      // (offset 0x4a20 of that kernel, threads 160-191, second H200 run of 2026-12-01). Now
      // barrier.sync without .aligned (this file's DET barriers only), which does not require the
      // warp's threads to arrive together: synccheck 0 errors on the H200 (2026-12-01, session 15).
      named_bar_sync_unaligned(c == 0 ? 2 : 3, c == 0 ? 128 + 32 : 128 * kConsumers);
#pragma unroll
      for (int j = 0; j < 8; ++j)
        atomicAdd(reinterpret_cast<float4*>(blk) + j * 128 + tid,
                  make_float4(dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]));
      named_bar_sync_unaligned(c == 0 ? 3 : 4, c == 0 ? 128 * kConsumers : 128 + 32);
    }
  }

  // kLag: the last unit's dQ_c, as the loop's next unit would have issued it.
  if constexpr (kLag) {
    if (units.n > 0) {
      const int nl = units.n;
      mbar_wait(ds_full0 + 8 * ((nl - 1) & 1), ((nl - 1) >> 1) & 1);
      float dq[kDqN / 2];
      issue_dq(dq, ds_buffer(nl - 1));
      wgmma_wait<0>();
      fence_regs(dq);
      add_dq(reinterpret_cast<float4*>(lag_blk) + tid, dq);
    }
  }

  // Epilogue: dK = scale * sum dS^T Q, dV = sum P^T dO (zeros when no unit saw the tile).
  const float scale = p.score.scale;
  T* dkp = static_cast<T*>(p.dk);
  T* dvp = static_cast<T*>(p.dv);
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    const int64_t key = j0 + key_l[h2];
    if (key >= sh.Tk) continue;
    T* dkr = dkp + b * sh.k_stride[0] + key * sh.k_stride[1] + hk * sh.k_stride[2];
    T* dvr = dvp + b * sh.v_stride[0] + key * sh.v_stride[1] + hk * sh.v_stride[2];
    // Padded up (D or Dv below the kernel's D; bwd_pick sends those calls to the IDX kernels): the columns past
    // them are not stored. The kernels without IDX carry no column checks (their code as before the padding).
    const int dd = static_cast<int>(sh.D), dv_ = static_cast<int>(sh.Dv);  // <= D, even (bwd_applies)
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      if (!IDX || 8 * j + 2 * t < dd)
        *reinterpret_cast<uint32_t*>(dkr + 8 * j + 2 * t) =
            Elem<T>::pack(dk[4 * j + 2 * h2] * scale, dk[4 * j + 2 * h2 + 1] * scale);
      if (!IDX || 8 * j + 2 * t < dv_)
        *reinterpret_cast<uint32_t*>(dvr + 8 * j + 2 * t) = Elem<T>::pack(dv[4 * j + 2 * h2], dv[4 * j + 2 * h2 + 1]);
    }
  }
  // kDqBulk: the bulk reduce-adds complete (wait_group 0: their global writes done, not only their
  // reads of shared memory) before the issuing thread, and so its CTA, exits. The end of the kernel
  // should already imply that for the bulk async operations it issued (bwd_dq_sm90_convert_kernel,
  // next on the stream, reads dq_acc after this kernel's completion); waiting here makes it
  // explicit, after the epilogue's stores so that they overlap the last unit's reduce-add, and
  // keeps the staging block in place (the CTA's shared memory) until the copy engine has read it.
  if constexpr (kDqBulk) {
    if (tid == 0) bulk_wait<0>();
  }
}

// The kernels: the CTA body above, in the launch order (flash_bwd_sm90_kernel, its code unchanged
// by the tile orders: bwd_tile<false> is blockIdx) or in the launch's (flash_bwd_sm90_ord_kernel, taken
// only when bwd_tile_order picked order 1 or 2; header comment, "Tile order").
template <typename T, int D, bool IDX, bool DROP = false, bool DET = false, bool BIAS = false>
__global__ void __launch_bounds__(kThreads, 1)
    flash_bwd_sm90_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                          const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                          const __grid_constant__ BwdSm90Args a) {
  bwd_cta<T, D, IDX, DROP, DET, BIAS, false>(tm_q, tm_k, tm_v, tm_do, a);
}
template <typename T, int D, bool IDX, bool DROP = false, bool DET = false, bool BIAS = false>
__global__ void __launch_bounds__(kThreads, 1)
    flash_bwd_sm90_ord_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                              const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                              const __grid_constant__ BwdSm90Args a) {
  bwd_cta<T, D, IDX, DROP, DET, BIAS, true>(tm_q, tm_k, tm_v, tm_do, a);
}

// dQ [B, Tq, H, D] = scale * dQacc, dQacc [B, H, tq_pad, D] in the kernel's fragment order: one
// float4 (rows r, r + 8 x columns c, c + 1) per step. A block per chunk of 64 rows x 64 columns (query tile,
// column group cg: 1024 float4 in a row of the accumulator): the float4 read in order, their 4-byte pairs
// written to a shared [64][72] tile (the 8 padding columns put a warp's 32 writes on 32 banks), then the
// rows stored in 16-byte pieces (bwd_applies: dq 16-byte aligned, strides of 8 elements). The same values
// as storing each pair from its float4 (the former kernel, 2 x 4 bytes per 16 read, whose half-used sectors
// took 89 µs against cuDNN's 55 at D = 128, B = 4, T = 4096, H = 16 on the H200: RESULTS.md "Hopper backward
// kernel" (p)).
template <typename T, int D>
__global__ void __launch_bounds__(256) bwd_dq_sm90_convert_kernel(const FlashBwdParams p, const float* dq_acc,
                                                                 int64_t tq_pad) {
  constexpr int kPitch = 64 + 8;
  __shared__ __align__(16) T tile[kBq][kPitch];
  const AttnShape& sh = p.shape;
  const int64_t tiles_per_bh = tq_pad / kBq;
  const int64_t chunks = sh.B * sh.H * tiles_per_bh * (D / 64);
  const float s = p.score.scale;
  for (int64_t ch = blockIdx.x; ch < chunks; ch += gridDim.x) {
    const int64_t qt = ch / (D / 64);  // (b * H + h) * tiles_per_bh + query tile
    const int cg = static_cast<int>(ch % (D / 64));
    const float4* src = reinterpret_cast<const float4*>(dq_acc) + qt * (kBq * D / 4) + cg * 1024;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int w = k * 256 + static_cast<int>(threadIdx.x);  // n8 tile j = w / 128 of consumer thread w % 128
      const int j = w / 128, tid = w % 128;
      const int r = 16 * (tid / 32) + (tid % 32) / 4, c = 8 * j + 2 * (tid % 4);
      const float4 v = src[w];
      *reinterpret_cast<uint32_t*>(&tile[r][c]) = Elem<T>::pack(s * v.x, s * v.y);
      *reinterpret_cast<uint32_t*>(&tile[r + 8][c]) = Elem<T>::pack(s * v.z, s * v.w);
    }
    __syncthreads();
    const int64_t bh = qt / tiles_per_bh, h = bh % sh.H, b = bh / sh.H;
    const int64_t i0 = (qt % tiles_per_bh) * kBq;
    T* dq = static_cast<T*>(p.dq) + b * sh.q_stride[0] + h * sh.q_stride[2] + 64 * cg;
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const int x = m * 256 + static_cast<int>(threadIdx.x), r = x / 8, c = 8 * (x % 8);
      if (i0 + r < sh.Tq && 64 * cg + c < sh.D)  // (columns past D, padded up: not stored; D % 8 == 0)
        *reinterpret_cast<uint4*>(dq + (i0 + r) * sh.q_stride[1] + c) = *reinterpret_cast<const uint4*>(&tile[r][c]);
    }
    __syncthreads();  // the tile is written again for the next chunk
  }
}

// One block per chunk of the accumulator (bwd_dq_sm90_convert_kernel), at most 2^20 blocks (grid-stride).
template <typename T, int D>
cudaError_t launch_dq_convert(const FlashBwdParams& p, const float* dq_acc, int64_t tq_pad, cudaStream_t stream) {
  const int64_t chunks = p.shape.B * p.shape.H * (tq_pad / kBq) * (D / 64);
  const unsigned blocks = static_cast<unsigned>(chunks < (1 << 20) ? chunks : (1 << 20));
  bwd_dq_sm90_convert_kernel<T, D><<<blocks, 256, 0, stream>>>(p, dq_acc, tq_pad);
  return cudaGetLastError();
}

// ---- Head dim 256 (flash_bwd_sm90_d256_kernel) ------------------------------------------------
// Compiled for sm_90a only (ptxas figures below); on by default, TF_FLASHATTN_SM90_BWD_D256=0
// (bwd_d256_enabled, read once) keeps D = 256 on sm80's backward. Checked on the H200 on 2026-12-01
// (benchmarks/sm90_bwd_check.py: self-tests 5..7 of its wgmma forms exact, numerics 72 / 72 rows,
// memcheck, racecheck and synccheck clean on its sanitize cases; the GPU tests through TensorFlow;
// 1.6x-1.7x sm80's backward in the harness, 0.85x-1.08x cuDNN from T = 4096 through TensorFlow:
// RESULTS.md "Hopper backward kernel" and "Attention through TensorFlow", (h)).
// Scope: float16 / bfloat16, D == Dv == 256, no mask or causal (any causal_offset), and the index
// masks (window, q / k lengths, [B, Tq] / [B, Tk] validity: the <IDX = true> instantiation, the
// D <= 128 IDX kernel's rules and code, "Index masks" above, for 64-key tiles: Units<IDX, 64>, the
// producer's warp 2 writing each row's key range within [0, 64] and the unit's flag, the masked P
// pass selecting by range and key_ok); GQA; dropout; deterministic (the DET instantiations: bwd_cta's ordered
// dQ reduction, the producer's warp 3 polling and publishing, named barriers 3 .. 5 around the consumers'
// atomics; checked on the H200 2026-12-02: RESULTS.md (s)); no soft-cap, dense mask or
// bias in this kernel (bwd_applies sends those without dropout to the
// SCORE instantiation of the same CTA body: "Split kernel at D = 128, and the score options" below). Dropout (<IDX, DROP = true>, whenever rate > 0, as
// "Dropout" above): the keep bits of the thread's S^T_c elements by drop_cols_bits<1, 4> (keys
// j0 + 16 warp + g (+ 8), queries i0 + 32c + 8j + 2t + e), drawn per unit before its wait; Pd = P Z
// goes to the P^T buffer (dV += Pd^T dO), dS = P (dP Z - dsum) (sm80's arithmetic).
// FlashAttention-3's head-dim-256 tiling, written anew for this file's conventions:
//   Grid (ceil(Tk / 64), Hkv, B): one CTA per key tile of kBk256 = 64 keys of one kv head (the
//   D <= 128 kernel's 128 keys would need 128 x 256 floats of dK and as many of dV in the
//   consumers' registers). CTA = 3 warpgroups (384 threads), the same roles and register split as
//   above: warpgroup 0 produces (setmaxnreg.dec 24), warpgroups 1 and 2 consume (setmaxnreg.inc
//   240). Units as above (Units<false>: query head of the group x 64-row query tile, causal from
//   the first tile with a row that sees key j0).
//   Producer: thread 0 loads K and V [64 x 256] once (TMA, 4 panels each, kv_full), then per unit Q
//   and dO [64 x 256] into the kStages = 2 ring (TMA, full[s] with expect_tx 64 KiB); warp 1 copies
//   the unit's lse2 / dsum rows and arrives on full[s] (1 + 32 arrivals). Consumers release stage s
//   by arriving on empty[s] (256 arrivals).
//   Per unit, consumer c (c = 0, 1) splits every product with the other consumer:
//     S^T_c  = K Q_c^T     [64 keys x 32 queries (32c .. 32c+31)]  16 wgmma m64n32k16 SS, both
//                          K-major (own commit group)
//     dP^T_c = V dO_c^T    [64 x 32]                                16 wgmma m64n32k16 SS (own group)
//     P^T_c = 2^(S^T scale log2e - lse2[q]) (0 where masked: tiles that cross the causal diagonal,
//            Tk or Tq, by selection, as above), computed while dP^T_c runs
//     P^T_c -> shared memory (16-bit, columns 32c .. 32c+31 of the [64 keys][64 queries] P^T buffer,
//            128-byte swizzle; two buffers by unit parity), named barrier 1 (both consumers)
//     dV_c  += P^T dO[:, 128c ..]   [64 keys x 128 dims]  4 wgmma m64n128k16 SS, A = P^T K-major,
//                                   B = dO MN-major (panels 2c, 2c + 1); own commit group, issued
//                                   before the dS^T pass so that it runs under it (and under the
//                                   wait for dP^T_c)
//     dS^T_c = P^T_c (dP^T_c - dsum[q]) -> the dS^T buffer (as P^T), named barrier 2
//     dQ_c   = dS K[:, 128c ..]     [64 queries x 128]    4 wgmma m64n128k16 SS, A = dS read
//                                   transposed (MN-major) from the dS^T buffer, B = K MN-major
//                                   (panels 2c, 2c + 1); own commit group
//     dK_c  += dS^T Q[:, 128c ..]   [64 x 128]            as dV with dS^T and Q; own commit group
//     dQacc += dQ_c        once dQ's group is done, while dK runs (then it is waited for and
//                          empty[s] arrived on): 16 float4 atomicAdd per thread into the
//                          workspace's accumulator, in this file's fragment order (column groups
//                          2c, 2c + 1 of the 64-row tile's block; float4 j holds columns
//                          128c + 8j + 2t, +1 of rows 16w + g, + 8),
//                          so bwd_dq_sm90_convert_kernel<T, 256> converts it unchanged. Not the
//                          bulk reduce-add of D = 128: its staging (2 x 32 KiB) does not fit beside
//                          a two-stage Q / dO ring (below).
//   The two buffers of P^T / dS^T: consumer c writes unit n + 2's into the buffers unit n's products
//   of the other consumer read; it does so after barriers 1 and 2 of unit n + 1, which the other
//   consumer reaches only after waiting for all of unit n's products.
//   Epilogue: dK * scale and dV from registers (dims 128c .. 128c+127 of the tile's 64 keys; 4-byte
//   stores; keys past Tk skipped); a CTA with no unit writes zeros. Then bwd_dq_sm90_convert_kernel.
//   Shared memory (BwdSmem256): K, V 2 x 32 KiB, Q and dO rings 2 x 2 x 32 KiB, P^T and dS^T 2 x 2 x
//   8 KiB, rows 1 KiB, barriers 40 bytes: 230,440 bytes, + 1 KiB alignment slack = 231,464 bytes
//   allocated, of the 232,448 (227 KiB) opt-in; IDX + 0.5 KiB of ranges and 16 bytes of flags:
//   231,992. One CTA per SM.
//   Registers per consumer thread: dV, dK 64 + 64 (their wgmma accumulators, the epilogue's
//   values), S^T and dP^T 16 + 16 (dead once stored), dQ 64 (live from its issue to its atomics):
//   peak 192 accumulators + addresses, within the 240 of setmaxnreg (ptxas 13.0: registers up to
//   R217, 0 spills; 44 HGMMA, 16 UTMALDG, 16 REDG.E.ADD.F32x4 per kernel).
//   Named barriers: 0 __syncthreads (setup), 1 both consumers after the P^T stores, 2 both consumers
//   after the dS^T stores; DET: 3 warp 3 + consumer 0, 4 the consumers, 5 consumer 1 + warp 3
//   (bwd_producer's DB = 3). mbarriers: kv_full (1 arrival + tx), full[s] (1 + 32, IDX 1 + 64),
//   empty[s] (256).
// Not yet here (first version): overlap of the P pass with products (both consumers meet on
// barriers 1 and 2 every unit, so the tensor cores idle during the P pass and the P^T stores),
// the next unit's S^T issued before this unit's dK finishes (tried 2026-12-01 as a variant, with P in
// registers of its own: ptxas 13.0 serialized those kernels' wgmmas, C7515, and spilled 128 bytes,
// with S^T / dP^T in flight across the unit loop's back edge), dQ by the bulk reduce-add, dK / dV
// stored by TMA, determinism with soft-cap, a dense mask or bias (the SCORE instantiation, below).
// ---- Split kernel at D = 128, and the score options -------------------------------------------------
// The CTA body above is bwd_cta_split<T, D, IDX, DROP, SCORE, ORD, DET>, templated on the head dim: D = 256
// as described (flash_bwd_sm90_d256_kernel / _ord_kernel, their SASS unchanged by the templating:
// cuobjdump -sass, every function of this file identical to before), and, in new instantiations only
// (flash_bwd_sm90_split_score_kernel<T, D>, SCORE = true with IDX, without DROP, no ORD), D = 128 and 256
// with the score options. bwd_applies sends bias / dbias at D == Dv == 128 and soft-cap, a dense mask,
// bias / dbias at D == Dv == 256 here, without dropout (deterministic too: the DET instantiations,
// checked on the H200 2026-12-02, RESULTS.md (s)) (the D <= 128 kernel keeps
// soft-cap and the dense mask at D = 128 without a bias); TF_FLASHATTN_SM90_BWD_SPLITD=0 (bwd_splitd_enabled,
// read once) sends them to sm80's backward instead. Checked on the H200 2026-12-01 (session 19,
// benchmarks/RESULTS.md (j)): bwd_selftest 8, 9 (the D = 128 wgmma forms) exact, sm90_bwd_check.py's
// phase splitd (numerics, bf16 / fp16) 76 / 76, memcheck of the sanitize cases (sd128_* / sd256_*
// included) 0 errors, GPU tests 400 + 7 with it on; splitdbench 2.2x-2.9x faster than sm80's backward for
// those calls (bias + dbias at D = 128, causal or not; soft-cap, bias at D = 256).
//   D = 128: the same tiling as D = 256 with each consumer holding 64 of the 128 dims: K, V [64 x 128]
//   (2 panels each), Q / dO ring [64 x 128] x 2 stages, S^T_c / dP^T_c [64 keys x 32 queries] by 8 wgmma
//   m64n32k16 each (bwd_selftest 5's form over two panels), dV_c / dK_c [64 keys x 64 dims] by 4 wgmma
//   m64n64k16 SS <0, 1> each (A = P^T / dS^T K-major from the shared buffers, B = dO / Q panel c
//   MN-major; bwd_selftest 8), dQ_c [64 queries x 64 dims] by 4 m64n64k16 SS <1, 1> (A = dS read
//   transposed, B = K panel c; bwd_selftest 9), 8 float4 atomics per thread into column group c of the
//   accumulator block (the fragment order above, so bwd_dq_sm90_convert_kernel<T, 128> converts it
//   unchanged). Registers per consumer thread: dK, dV 32 + 32, dQ 32, S^T / dP^T 16 + 16 (the D <= 128
//   kernel: 64 + 64 + 32 + 32 + 32), which leaves room for the score code. Shared memory (BwdSmemSplit<128,
//   true>): K, V 2 x 16 KiB, Q and dO rings 2 x 2 x 16 KiB, P^T and dS^T 2 x 2 x 8 KiB, rows 1 KiB, ranges
//   and flags, barriers: 132,664 bytes, 133,688 allocated. Grid (ceil(Tk / 64), Hkv, B): twice the D <= 128
//   kernel's CTAs, each reading every query tile it visits (its Q / dO / lse2 / dsum) for 64 keys instead
//   of 128 (more L2 traffic per FLOP; splitdbench measures what that costs against sm80).
//   Score options (SCORE; the D <= 128 kernel's semantics and arithmetic, element by element through the
//   shared helpers above bwd_cta: bias_unit, dbias_unit, idx_visible, bias_p, bias_ds; softcap_log2 and
//   softcap_ds from common/flash_cuda_common.cuh).
//   Element x = 4j + 2h2 + e of S^T_c is (key j0 + key_l[h2], key_l = 16 warp + g (+ 8), query i0
//   + 32c + 8j + 2t + e): the m64n32 accumulator layout, as the D = 256 kernel's P pass and dropout use it.
//   soft-cap   S^T_c capped in place after its wait (softcap_log2: c log2e tanh(scale S / c)), the P pass
//              with pmul = 1; dS = P (1 - tanh^2) (dP - dsum), tanh from P (softcap_ds).
//   dense mask every unit takes the masked P pass; P = 0 where the index ranges or the mask element (read
//              only where the ranges let the element through; this thread's two keys' column offsets
//              once per CTA, the [b, h] plane per unit) say so (idx_visible).
//   bias       every unit takes the masked P pass' bias copy: x = S^T pmul + log2e b, the bias read where
//              visible, P = 0 where not visible or x = -inf (bias_p; a row whose visible keys all have a
//              bias of -inf has lse2 = -inf, and every P of it is 0 by that rule).
//   dbias      dlogit = P (dP - dsum) stored where P != 0 (bias_ds; 4-byte stores, generic ST.E in the
//              SASS: the pointer comes from the params struct), dS = dlogit (1 - tanh^2) under soft-cap with
//              the bias' log2e b taken out of the recovered tanh; launch_split zeroes dbias first, so
//              masked elements and tiles no unit visits read 0. One writer per element (its 64-key tile's
//              CTA, its head's unit, the consumer of its query, one thread): deterministic, no atomics.
//   offsets    bias / dbias element offsets within a unit 32-bit (UnitElems; bwd_applies' stride limits,
//              the same as D = 64's), addressed per pass from opaque strides (bias_unit / dbias_unit).
//   read ahead D = 128 (kBiasAhead, FA_SM90_BWD_BIAS_AHEAD): the P pass' bias elements of unit n + 1 are
//              loaded into 16 registers right after unit n's P pass (unit 0's before the loop), so that
//              their latency runs under dV, the dS pass, dQ and dK. On the H200 2026-12-01 (session 20,
//              RESULTS.md "Hopper backward kernel" (k)): dk, dv, dbias bit for bit the former code's on
//              SPLITD_CASES, 1.38x-1.50x faster (B = 4, T = 4096, H = 16: 160 TFLOP/s with dbias, 201
//              without), racecheck / memcheck clean. Not at D = 256 (registers at R233 of 240).
//   The pass copies, one branch per unit as in bwd_cta: P with the bias, P masked, P unmasked; dS with
//   dbias or (soft-cap and bias), with soft-cap alone, plain. The kernels without SCORE carry none of it
//   (softcap, the dense mask and the bias are the constants 0 / null there).
//   ptxas 13.0 (sm_90a): flash_bwd_sm90_split_score_kernel<T, 128> and <T, 256>, bf16 and fp16: 168
//   registers (the launch bound; the consumers' highest register R207 at D = 128 (R186 without the bias
//   read ahead), R233 at D = 256, of the 240 of setmaxnreg), 0 spills, no C7510-C7515 (wgmma
//   serialization) warnings; 28 / 44 HGMMA, 8 / 16 REDG.E.ADD.F32x4. Dynamic shared memory 133,688 (D = 128) and 231,992 bytes (D = 256, the IDX layout).
constexpr int kBk256 = 64;  // keys per CTA of the split kernel (rows of every consumer accumulator but dQ's)
// The split kernel's shared memory at head dim D (256; 128 in the SCORE instantiations): K, V, the
// Q / dO ring, two P^T and two dS^T buffers, the rows; IDX: the key ranges and flags; the barriers.
template <int D, bool IDX>
struct BwdSmemSplit {
  static constexpr int kD = D;
  static constexpr int kKBytes = kBk256 * kD * 2;   // K or V tile [64 x D]: D = 256 32 KiB, 4 panels
  static constexpr int kQBytes = kBq * kD * 2;      // Q or dO tile [64 x D]: D = 256 32 KiB, 4 panels
  static constexpr int kPBytes = kBk256 * kBq * 2;  // P^T or dS^T [64 keys x 64 queries]: 8 KiB, 1 panel
  static constexpr int kK = 0;
  static constexpr int kV = kK + kKBytes;
  static constexpr int kQ = kV + kKBytes;             // + stage * kQBytes
  static constexpr int kDo = kQ + kStages * kQBytes;  // + stage * kQBytes
  static constexpr int kP = kDo + kStages * kQBytes;  // + buffer * kPBytes (unit parity)
  static constexpr int kDs = kP + 2 * kPBytes;        // + buffer * kPBytes
  static constexpr int kRows = kDs + 2 * kPBytes;     // float [kStages][2][kBq]: lse2, dsum
  static constexpr int kRange = kRows + kStages * 2 * kBq * 4;  // IDX: int [kStages][kBq] key ranges
  static constexpr int kFlag = kRange + kStages * kBq * 4;      // IDX: int [kStages] mask flags
  static constexpr int kBars = IDX ? kFlag + 16 : kRange;       // kv_full, full[kStages], empty[kStages]
  static constexpr int kBytes = kBars + 8 * (1 + 2 * kStages);
  static constexpr int kAlloc = kBytes + 1024;        // slack to align the base to 1024
};
template <bool IDX>
using BwdSmem256 = BwdSmemSplit<256, IDX>;
static_assert(BwdSmem256<false>::kRows % 1024 == 0, "every tile starts 1024-byte aligned (the swizzle's period)");
static_assert(BwdSmemSplit<128, true>::kRows % 1024 == 0, "every tile starts 1024-byte aligned (the swizzle's period)");
static_assert(BwdSmem256<false>::kBytes == 230440 && BwdSmem256<false>::kAlloc == 231464 &&
                  BwdSmem256<true>::kAlloc == 231992, "the layout of the header comment");
static_assert(BwdSmem256<true>::kAlloc <= 227 * 1024, "D = 256 backward: over the opt-in shared memory");
static_assert(BwdSmemSplit<128, true>::kAlloc == 133688, "the D = 128 split layout of the header comment");

// The split kernel's dV / dK / dQ products, N = D / 2 (each consumer's half of the head dims): D = 256
// wgmma m64n128k16 (wgmma_ss_m64n128k16_tr, B over two 64-column panels), D = 128 m64n64k16 (one panel;
// the same descriptors: LBO, the panel stride, then unused). TA / TB as wgmma_ss_m64n64k16's.
template <typename T, int D, int TA, int TB>
__device__ __forceinline__ void wgmma_ss_split_half(float (&d)[D / 4], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  static_assert(D == 256 || D == 128, "split kernel: D = 128 or 256");
  if constexpr (D == 256)
    wgmma_ss_m64n128k16_tr<TA, TB>(WgmmaType<T>{}, d, desc_a, desc_b, accumulate);
  else
    wgmma_ss_m64n64k16<TA, TB>(WgmmaType<T>{}, d, desc_a, desc_b, accumulate);
}

// q, d_o [B, Tq, H, D] through tm_q / tm_do (boxes {64, 1, 64, 1}); k, v [B, Tk, Hkv, D] through
// tm_k / tm_v (boxes {64, 1, 64, 1}); dk, dv [B, Tk, Hkv, D] and the dQ accumulator [B, H, tq_pad, D]
// from a; SCORE: bias [B, H, Tq, Tk] (p.score.bias, q's dtype, any strides), dbias [B, H, Tq, Tk]
// float32 compact (p.dbias, zeroed by launch_split), the dense mask [B, H, Tq, Tk] (p.mask.mask, bool,
// any strides). Grid (ceil(Tk / 64), Hkv, B). D = 256 or 128 (header comments "Head dim 256" and
// "Split kernel at D = 128, and the score options"). Without IDX no mask or causal; IDX: the index
// masks (window, lengths, [B, Tq] / [B, Tk] validity; causal too), the D <= 128 IDX kernel's rules and
// code; DROP (with IDX only): dropout (header comment above, "Head dim 256"); SCORE (with IDX, without
// DROP; checked on the H200 2026-12-01, session 19): soft-cap, the dense mask, bias / dbias, the D <= 128
// kernels' arithmetic (the score helpers above). ORD: as bwd_cta's. DET: TensorFlow's op determinism,
// bwd_cta's ordered dQ reduction (header comment "Deterministic mode") with named barriers 3, 4, 5 (dbias has
// one writer per element anyway); the instantiations without it are unchanged.
template <typename T, int D, bool IDX, bool DROP, bool SCORE, bool ORD, bool DET = false>
__device__ __forceinline__ void bwd_cta_split(const CUtensorMap& tm_q, const CUtensorMap& tm_k, const CUtensorMap& tm_v,
                                              const CUtensorMap& tm_do, const BwdSm90Args& a) {
  static_assert(!DROP || IDX, "dropout runs the index-masked kernel");
  static_assert(!SCORE || (IDX && !DROP), "soft-cap, dense mask, bias: the IDX kernel without dropout");
  static_assert(D == 256 || (D == 128 && SCORE), "the split kernel: D = 256, and D = 128 for the score options");
  constexpr int kNcg = D / 128;  // 64-column groups of each consumer's half of the head dims
  using L = BwdSmemSplit<D, IDX>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  uint8_t* const tile_ptr = smem_raw + (base - smem_u32(smem_raw));
  float* rows_f = reinterpret_cast<float*>(tile_ptr + L::kRows);
  // IDX: per stage and row, the tile's keys the row sees (lo | hi << 16, [lo, hi) within [0, 64]),
  // and per stage the unit's "mask needed" flag (the producer's warp 2).
  int* range_i = reinterpret_cast<int*>(tile_ptr + L::kRange);
  int* flag_i = reinterpret_cast<int*>(tile_ptr + L::kFlag);
  const uint32_t kv_full = base + L::kBars;
  const uint32_t full0 = kv_full + 8, empty0 = kv_full + 8 * (1 + kStages);

  const FlashBwdParams& p = a.p;
  const AttnShape& sh = p.shape;
  const bool causal = p.mask.causal;
  const int64_t off = p.mask.causal_offset;
  // Key tile, kv head, batch: ORD, from the tile order (bwd_tile); else blockIdx, read where the plain
  // kernels read it, so that their code stays unchanged.
  const BwdTile tile = bwd_tile<ORD>(a.order_g, a.order_big);
  const int hk = ORD ? tile.hk : blockIdx.y, b = ORD ? tile.b : blockIdx.z;
  const int G = static_cast<int>(sh.H / sh.Hkv);
  const int64_t j0 = static_cast<int64_t>(ORD ? tile.x : blockIdx.x) * kBk256;
  const Units<IDX, kBk256> units(sh, causal, off, j0, p.mask, b);
  // DET: the query tiles below prev_hi are visited by key tile x - 1 too (bwd_cta's comment).
  int prev_hi = 0;
  if constexpr (DET) {
    if ((ORD ? tile.x : blockIdx.x) > 0 && units.n > 0) {
      const Units<IDX, kBk256> prev(sh, causal, off, j0 - kBk256, p.mask, b);
      prev_hi = prev.qb_lo + prev.nq;
    }
  }

  const int wg = threadIdx.x / 128;
  bwd_init_barriers<IDX>(kv_full, full0, empty0);

  if (wg == 0) {
    // ---- Producer warpgroup (bwd_producer: TMA loads, lse2 / dsum rows, IDX: key ranges, DET: the
    // ordered dQ reduction's waits and publications, barriers 3 .. 5). ----
    bwd_producer<kBk256, D, IDX, DET, ORD, L, 3>(&tm_q, &tm_k, &tm_v, &tm_do, a, units, base, kv_full, full0,
                                                 empty0, rows_f, range_i, flag_i, hk, b, G, j0, tile, prev_hi);
    return;
  }

  // ---- Consumer warpgroups: queries 32c .. 32c+31 of S^T / dP^T, dims (D/2)c .. (D/2)c + D/2 - 1 of dK, dV, dQ. ----
  setmaxnreg_inc<kConsumerRegs>();
  const int c = wg - 1;
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const float sl2 = p.score.scale * 1.4426950408889634f;
  // Keys (local to the tile) of accumulator rows h2 = 0 / 1: every m64 accumulator's rows are the
  // tile's 64 keys (S^T, dP^T, dK, dV); dQ's rows are the unit's 64 queries in the same places.
  const int key_l[2] = {16 * warp + g, 16 * warp + g + 8};
  const int q_c = 32 * c;  // this consumer's queries of the unit (columns of S^T_c, dP^T_c)
  // DROP: the Philox key of the seed, once per CTA (the warp's accumulator rows are keys
  // j0 + 16 warp .. + 15).
  uint32_t drop_key[2] = {0u, 0u};
  if constexpr (DROP) {
    if (units.n > 0) dropout_key(p.dropout, drop_key);
  }
  // IDX: whether this thread's two keys are below k_lengths (and Tk) and pass k_valid.
  bool key_ok[2] = {true, true};
  if constexpr (IDX) {
    if (units.n > 0) {
      const int64_t klim = k_limit(p.mask, sh, b);
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        const int64_t key = j0 + key_l[h2];
        key_ok[h2] = key < klim && key_visible(p.mask, sh, b, key);
      }
    }
  }
  // SCORE (header comment "Split kernel at D = 128, and the score options"; the D <= 128 kernel's
  // soft-cap, dense mask and BIAS code, per element through the shared score helpers): soft-cap in
  // place in base-2 units before the P pass (pmul = 1 then, else scale log2e), 1 - tanh^2 in the dS
  // pass with tanh recovered from P; the dense mask (this thread's two keys' column offsets once, the
  // unit's [b, h] plane per unit), read only where the index ranges let the element through; bias /
  // dbias (either may be null) addressed per pass (bias_unit / dbias_unit). All null / 0 without SCORE,
  // so none of their code is compiled in.
  const float softcap = SCORE ? p.score.softcap : 0.f;
  const float cap_log2 = softcap * 1.4426950408889634f;
  const float inv_cap = softcap != 0.f ? 1.f / softcap : 0.f;
  const float inv_cap_log2 = softcap != 0.f ? 1.f / cap_log2 : 0.f;
  const float pmul = softcap != 0.f ? 1.f : sl2;
  const bool* dmask = SCORE ? p.mask.mask : nullptr;
  const bool* dmask_bh = nullptr;
  int64_t dmask_q = 0, dmask_k[2] = {0, 0};
  if (dmask) {
    const MaskParams& mk = p.mask;
    dmask_bh = dmask + b * mk.mask_stride[0];  // + h * mask_stride[1] per unit
    dmask_q = mk.mask_stride[2];
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) dmask_k[h2] = (j0 + key_l[h2]) * mk.mask_stride[3];
  }
  const T* const bias = SCORE ? static_cast<const T*>(p.score.bias) : nullptr;
  float* const dbias = SCORE ? p.dbias : nullptr;
  // Bias read ahead (kBiasAhead: the D = 128 SCORE instantiation, FA_SM90_BWD_BIAS_AHEAD, default 1): the
  // P pass' 16 bias elements of unit m (element x = 4j + 2h2 + e: query i0(m) + q_c + 8j + 2t + e, key j0 +
  // key_l[h2]) loaded as raw 16-bit values into bias_next, unit 0's before the loop and unit n + 1's right
  // after unit n's P pass, so that their global-memory latency runs under the rest of unit n (dV, the dS
  // pass, dQ, dK) instead of stalling both consumers in the P pass (the former code loaded each element
  // there, after the S^T wait). Elements past Tq / Tk are not read (0); the P pass uses a value only where
  // the element is visible, as bias_p reads it, so P, dS, dbias are bit for bit the former code's. Not at
  // D = 256 (its consumers' registers reach R233 of 240; the 16 values would spill).
  constexpr bool kBiasAhead = SCORE && D == 128 && FA_SM90_BWD_BIAS_AHEAD;
  uint16_t bias_next[16];
  auto load_bias = [&](int m) {
    const int64_t hm = hk * G + m / units.nq, im = static_cast<int64_t>(units.qb_lo + m % units.nq) * kBq;
    const UnitElems<const T> ba = bias_unit<T>(p.score, bias, b, hm, im, j0, key_l[0]);
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int q = q_c + 8 * j + 2 * t + e;
          const bool in = im + q < sh.Tq && j0 + key_l[h2] < sh.Tk;
          bias_next[4 * j + 2 * h2 + e] = in ? *reinterpret_cast<const uint16_t*>(&ba(q, h2)) : uint16_t{0};
        }
  };
  if constexpr (kBiasAhead) {
    if (bias != nullptr && units.n > 0) load_bias(0);
  }

  float dv[D / 4], dk[D / 4];  // [64 keys x D/2 dims]: d[4j + 2h2 + e] = (key_l[h2], (D/2)c + 8j + 2t + e)
#pragma unroll
  for (int i = 0; i < D / 4; ++i) dv[i] = dk[i] = 0.f;

  if (units.n > 0) mbar_wait(kv_full, 0);
  const uint32_t k_t = base + L::kK, v_t = base + L::kV;
  for (int n = 0; n < units.n; ++n) {
    const int s = n % kStages;
    const int64_t h = hk * G + n / units.nq, i0 = static_cast<int64_t>(units.qb_lo + n % units.nq) * kBq;
    // DROP: the unit's keep bits, bit x for element x of S^T_c (drop_cols_bits<1, 4>: the thread's
    // keys j0 + 16 warp + g (+ 8), queries i0 + q_c + 8j + 2t + e, bit 4j + 2h2 + e = x: the forward's
    // mask, flash_params.h's rule), drawn before the wait for the unit's tiles, as the D <= 128 DROP
    // kernel does.
    uint32_t kbits = 0u;
    if constexpr (DROP) {
      kbits = unit_keep_bits<4>(drop_key, p.dropout, h, b, j0 + 16 * warp, i0 + q_c, g, t);
      asm volatile("" : "+r"(kbits)::"memory");  // drawn before the wait below
    }
    mbar_wait(full0 + 8 * s, (n / kStages) & 1);
    const uint32_t q_t = base + L::kQ + s * L::kQBytes;
    const uint32_t do_t = base + L::kDo + s * L::kQBytes;
    const uint32_t p_t = base + L::kP + (n & 1) * L::kPBytes;
    const uint32_t ds_t = base + L::kDs + (n & 1) * L::kPBytes;

    // S^T_c = K Q_c^T and dP^T_c = V dO_c^T: [64 keys x 32 queries], contraction over D in D / 16 k16
    // steps (panel k / 4, 32 bytes per step within a 128-byte row; rows 32c .. 32c+31 of Q / dO's
    // panels start at 32c * 128 bytes, a multiple of 1024).
    float sacc[16], dpacc[16];
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      const uint32_t koff = (k / 4) * kBk256 * 128 + (k % 4) * 32;
      const uint32_t qoff = (k / 4) * kBq * 128 + q_c * 128 + (k % 4) * 32;
      wgmma_ss_m64n32k16<0, 0>(WgmmaType<T>{}, sacc, wgmma_desc(k_t + koff, 16, 1024), wgmma_desc(q_t + qoff, 16, 1024),
                               k > 0);
    }
    wgmma_commit();  // S^T: its own group, so that P^T is computed while dP^T runs
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      const uint32_t koff = (k / 4) * kBk256 * 128 + (k % 4) * 32;
      const uint32_t qoff = (k / 4) * kBq * 128 + q_c * 128 + (k % 4) * 32;
      wgmma_ss_m64n32k16<0, 0>(WgmmaType<T>{}, dpacc, wgmma_desc(v_t + koff, 16, 1024),
                               wgmma_desc(do_t + qoff, 16, 1024), k > 0);
    }
    wgmma_commit();
    wgmma_wait<1>();  // S^T done (groups complete in order); dP^T may still run
    fence_regs(sacc);
    if (softcap != 0.f) {  // SCORE only (else the constant 0)
#pragma unroll
      for (int x = 0; x < 16; ++x) sacc[x] = softcap_log2(sacc[x], p.score.scale, inv_cap, cap_log2);
    }

    // P^T in place: element x = 4j + 2h2 + e is (key key_l[h2], query q_c + 8j + 2t + e). Straight-line
    // copies of the pass, one branch per unit (as the first kernel's p_pass).
    const float* lse2_s = rows_f + (2 * s) * kBq + q_c;
    const float* dsum_s = rows_f + (2 * s + 1) * kBq + q_c;
    // SCORE: this unit's dense-mask plane and bias / dbias (non-null: the bias copies of the passes).
    const bool* dmask_u = dmask ? dmask_bh + h * p.mask.mask_stride[1] : nullptr;
    // IDX: the producer's per-unit flag; the ranges select P = 0 (never a product with 2^(S - lse2):
    // fully masked rows have lse2 = -inf), so dS = 0 too. SCORE: every unit with a dense mask or a bias
    // takes the masked pass (as the D <= 128 IDX kernel).
    const bool need_mask = IDX ? flag_i[s] != 0 || dmask != nullptr || bias != nullptr
                               : i0 + kBq > sh.Tq || j0 + kBk256 > sh.Tk || (causal && j0 + kBk256 - 1 > i0 + off);
    const int* range_s = range_i + s * kBq + q_c;
    auto p_pass = [&](auto mask_c, auto bias_c) {
      constexpr bool kMasked = decltype(mask_c)::value;
      constexpr bool kBias = SCORE && decltype(bias_c)::value;
      UnitElems<const T> ba{nullptr, 0, 0};
      if constexpr (kBias && !kBiasAhead) ba = bias_unit<T>(p.score, bias, b, h, i0, j0, key_l[0]);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 l2 = *reinterpret_cast<const float2*>(lse2_s + 8 * j + 2 * t);
        int2 rg = make_int2(0, 0);  // IDX: the key ranges of queries q_c + 8j + 2t, +1
        if constexpr (IDX && kMasked) rg = *reinterpret_cast<const int2*>(range_s + 8 * j + 2 * t);
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int x = 4 * j + 2 * h2 + e;
            if constexpr (SCORE) {  // IDX: the ranges, then the dense mask; the bias (kBias)
              const int q = q_c + 8 * j + 2 * t + e;
              const float l2e = e ? l2.y : l2.x;
              if constexpr (kBias) {
                const bool vis = idx_visible(key_ok[h2], key_l[h2], e ? rg.y : rg.x, dmask_u, i0 + q, dmask_q, dmask_k[h2]);
                if constexpr (kBiasAhead) {
                  const uint16_t raw = bias_next[x];
                  sacc[x] = bias_p_of(sacc[x], pmul, l2e, vis, vis ? Elem<T>::to_f(*reinterpret_cast<const T*>(&raw)) : 0.f);
                } else {
                  sacc[x] = bias_p<T>(sacc[x], pmul, l2e, vis, ba, q, h2);
                }
              } else {
                float pv = fast_exp2(sacc[x] * pmul - l2e);
                if (kMasked && !idx_visible(key_ok[h2], key_l[h2], e ? rg.y : rg.x, dmask_u, i0 + q, dmask_q, dmask_k[h2]))
                  pv = 0.f;
                sacc[x] = pv;
              }
            } else {
              float pv = fast_exp2(sacc[x] * sl2 - (e ? l2.y : l2.x));
              if constexpr (kMasked && IDX) {
                const int r = e ? rg.y : rg.x;
                if (!(key_ok[h2] && key_l[h2] >= (r & 0xffff) && key_l[h2] < (r >> 16))) pv = 0.f;
              } else if constexpr (kMasked) {
                const int64_t key = j0 + key_l[h2], qi = i0 + q_c + 8 * j + 2 * t + e;
                if (key >= sh.Tk || qi >= sh.Tq || (causal && key > qi + off)) pv = 0.f;
              }
              sacc[x] = pv;
            }
          }
      }
    };
    if (SCORE && bias != nullptr) {
      p_pass(std::true_type{}, std::true_type{});
      if constexpr (kBiasAhead) {
        if (n + 1 < units.n) load_bias(n + 1);  // the next unit's, under the rest of this one
      }
    } else if (need_mask) {
      p_pass(std::true_type{}, std::false_type{});
    } else {
      p_pass(std::false_type{}, std::false_type{});
    }
    // P^T (16-bit; DROP: Pd^T = P^T Z, Z = keep_scale where kept, else 0, the dV operand) to this
    // consumer's 32 columns of the shared P^T buffer ([key][query], one 128-byte-swizzled panel of 64
    // rows), while dP^T may still run; then barrier 1 (both halves).
    uint8_t* const p_ptr = tile_ptr + L::kP + (n & 1) * L::kPBytes;
    uint8_t* const ds_ptr = tile_ptr + L::kDs + (n & 1) * L::kPBytes;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        const int x = 4 * j + 2 * h2;
        float p0 = sacc[x], p1 = sacc[x + 1];
        if constexpr (DROP) {
          p0 *= ((kbits >> x) & 1u) ? p.dropout.keep_scale : 0.f;
          p1 *= ((kbits >> (x + 1)) & 1u) ? p.dropout.keep_scale : 0.f;
        }
        *reinterpret_cast<uint32_t*>(p_ptr + swz128_offset(kBk256, key_l[h2], q_c + 8 * j + 2 * t)) =
            Elem<T>::pack(p0, p1);
      }
    fence_proxy_async();  // the stores above before the wgmma (async proxy) reads below
    named_bar_sync(1, 128 * kConsumers);  // both consumers' halves of P^T written

    // dV_c += P^T dO[:, (D/2)c ..] (its own commit group), issued before the dS^T pass so that it runs
    // under it: contraction over the 64 queries in k16 steps (A = P^T K-major, 32 bytes per step
    // within its rows; B = dO MN-major, 16 rows = 2 KiB per step, N = D/2 over panels kNcg c ..
    // kNcg c + kNcg - 1, LBO = the panel stride).
    fence_regs(dv);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_ss_split_half<T, D, 0, 1>(dv, wgmma_desc(p_t + kk * 32, 16, 1024),
                                      wgmma_desc(do_t + kNcg * c * kBq * 128 + kk * 2048, kBq * 128, 1024), 1);
    wgmma_commit();
    wgmma_wait<1>();  // dP^T done (groups complete in order); dV may still run
    fence_regs(dpacc);
    // dS^T = P^T (dP^T - dsum) (DROP: sm80's rule, P^T (dP^T Z - dsum)) (16-bit) to this consumer's
    // 32 columns of the dS^T buffer; barrier 2.
    if constexpr (SCORE) {
      // The D <= 128 kernel's dS pass copies, one branch per unit: with dbias, or under soft-cap with a
      // bias (bias_ds: dlogit = P (dP - dsum) stored to dbias where P != 0, then the soft-cap factor
      // with the bias' log2e b taken out of the recovered tanh); soft-cap alone (softcap_ds); neither
      // (the plain pass). In place in dpacc, then stored.
      auto ds_pass_bias = [&](auto cap_c) {
        constexpr bool kCap = decltype(cap_c)::value;
        UnitElems<float> dba{nullptr, 0, 0};
        if (dbias) dba = dbias_unit(dbias, sh, b, h, i0, j0, key_l[0]);
        UnitElems<const T> ba{nullptr, 0, 0};
        if constexpr (kCap) ba = bias_unit<T>(p.score, bias, b, h, i0, j0, key_l[0]);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 dsm = *reinterpret_cast<const float2*>(dsum_s + 8 * j + 2 * t);
          float2 l2 = make_float2(0.f, 0.f);
          if constexpr (kCap) l2 = *reinterpret_cast<const float2*>(lse2_s + 8 * j + 2 * t);
#pragma unroll
          for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int x = 4 * j + 2 * h2 + e;
              dpacc[x] = bias_ds<T, kCap>(sacc[x], dpacc[x], e ? dsm.y : dsm.x, e ? l2.y : l2.x, inv_cap_log2, dba,
                                          dbias != nullptr, ba, bias != nullptr, q_c + 8 * j + 2 * t + e, h2);
            }
        }
      };
      if (dbias != nullptr || (softcap != 0.f && bias != nullptr)) {
        if (softcap != 0.f)
          ds_pass_bias(std::true_type{});
        else
          ds_pass_bias(std::false_type{});
      } else if (softcap != 0.f) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 dsm = *reinterpret_cast<const float2*>(dsum_s + 8 * j + 2 * t);
          const float2 l2 = *reinterpret_cast<const float2*>(lse2_s + 8 * j + 2 * t);
#pragma unroll
          for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int x = 4 * j + 2 * h2 + e;
              dpacc[x] = softcap_ds(sacc[x], dpacc[x], e ? dsm.y : dsm.x, e ? l2.y : l2.x, inv_cap_log2);
            }
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 dsm = *reinterpret_cast<const float2*>(dsum_s + 8 * j + 2 * t);
#pragma unroll
          for (int x = 4 * j; x < 4 * j + 4; ++x) dpacc[x] = sacc[x] * (dpacc[x] - ((x & 1) ? dsm.y : dsm.x));
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2) {
          const int x = 4 * j + 2 * h2;
          *reinterpret_cast<uint32_t*>(ds_ptr + swz128_offset(kBk256, key_l[h2], q_c + 8 * j + 2 * t)) =
              Elem<T>::pack(dpacc[x], dpacc[x + 1]);
        }
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 dsm = *reinterpret_cast<const float2*>(dsum_s + 8 * j + 2 * t);
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2) {
          const int x = 4 * j + 2 * h2;
          float dp0 = dpacc[x], dp1 = dpacc[x + 1];
          if constexpr (DROP) {
            dp0 *= ((kbits >> x) & 1u) ? p.dropout.keep_scale : 0.f;
            dp1 *= ((kbits >> (x + 1)) & 1u) ? p.dropout.keep_scale : 0.f;
          }
          const float ds0 = sacc[x] * (dp0 - dsm.x), ds1 = sacc[x + 1] * (dp1 - dsm.y);
          *reinterpret_cast<uint32_t*>(ds_ptr + swz128_offset(kBk256, key_l[h2], q_c + 8 * j + 2 * t)) =
              Elem<T>::pack(ds0, ds1);
        }
      }
    }
    fence_proxy_async();
    named_bar_sync(2, 128 * kConsumers);  // both consumers' halves of dS^T written

    // dQ_c = dS K[:, (D/2)c ..] (own commit group): A = dS [64 queries x 64 keys] read transposed from
    // dS^T (16 key rows = 2 KiB per step), B = K [64 keys x D/2 dims] MN-major (panels kNcg c ..).
    // Then dK_c += dS^T Q[:, (D/2)c ..] (own group), as dV. dQ's atomics are issued once dQ is done,
    // while the tensor cores run dK.
    float dq[D / 4];
    fence_regs(dk);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_ss_split_half<T, D, 1, 1>(dq, wgmma_desc(ds_t + kk * 2048, kBk256 * 128, 1024),
                                      wgmma_desc(k_t + kNcg * c * kBk256 * 128 + kk * 2048, kBk256 * 128, 1024),
                                      kk > 0);
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_ss_split_half<T, D, 0, 1>(dk, wgmma_desc(ds_t + kk * 32, 16, 1024),
                                      wgmma_desc(q_t + kNcg * c * kBq * 128 + kk * 2048, kBq * 128, 1024), 1);
    wgmma_commit();
    wgmma_wait<1>();  // dV and dQ done (groups complete in order); dK may still run
    fence_regs(dq);

    // dQacc block of (b, h, query tile): [64 x D] in fragment order, column groups kNcg c ..
    // kNcg c + kNcg - 1 (float4 j: group kNcg c + j / 8, columns 8 (j % 8) + 2t, +1 of rows 16w + g, + 8).
    const int64_t blk_row = (static_cast<int64_t>(b) * sh.H + h) * a.tq_pad + i0;
    float4* blk = reinterpret_cast<float4*>(a.dq_acc + blk_row * D + kNcg * c * 64 * 64);
    // DET: in bwd_cta's order (key tile x - 1 first, then consumer 0, then consumer 1: disjoint column
    // halves here, the same protocol), barriers 3 (warp 3 + consumer 0), 4 (the consumers), 5 (consumer 1 +
    // warp 3), as bwd_cta's 2, 3, 4 (barrier.sync without .aligned, the count in a register).
    if constexpr (DET) named_bar_sync_unaligned(c == 0 ? 3 : 4, c == 0 ? 128 + 32 : 128 * kConsumers);
#pragma unroll
    for (int j = 0; j < D / 16; ++j)
      atomicAdd(blk + (j / 8) * 1024 + (j % 8) * 128 + tid, make_float4(dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]));
    if constexpr (DET) named_bar_sync_unaligned(c == 0 ? 4 : 5, c == 0 ? 128 * kConsumers : 128 + 32);
    wgmma_wait<0>();  // dK
    fence_regs(dv);
    fence_regs(dk);
    mbar_arrive(empty0 + 8 * s);  // Q, dO and the rows of stage s are no longer read
  }

  // Epilogue: dK = scale * sum dS^T Q, dV = sum P^T dO (zeros when no unit saw the tile).
  const float scale = p.score.scale;
  T* dkp = static_cast<T*>(p.dk);
  T* dvp = static_cast<T*>(p.dv);
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    const int64_t key = j0 + key_l[h2];
    if (key >= sh.Tk) continue;
    T* dkr = dkp + b * sh.k_stride[0] + key * sh.k_stride[1] + hk * sh.k_stride[2] + (D / 2) * c;
    T* dvr = dvp + b * sh.v_stride[0] + key * sh.v_stride[1] + hk * sh.v_stride[2] + (D / 2) * c;
    // This consumer's columns start at (D / 2) c; those past the real D / Dv (padded up) are not stored.
    const int dd = static_cast<int>(sh.D) - (D / 2) * c, dv_ = static_cast<int>(sh.Dv) - (D / 2) * c;
#pragma unroll
    for (int j = 0; j < D / 16; ++j) {
      if (8 * j + 2 * t < dd)
        *reinterpret_cast<uint32_t*>(dkr + 8 * j + 2 * t) =
            Elem<T>::pack(dk[4 * j + 2 * h2] * scale, dk[4 * j + 2 * h2 + 1] * scale);
      if (8 * j + 2 * t < dv_)
        *reinterpret_cast<uint32_t*>(dvr + 8 * j + 2 * t) = Elem<T>::pack(dv[4 * j + 2 * h2], dv[4 * j + 2 * h2 + 1]);
    }
  }
}

// The kernels, as flash_bwd_sm90_kernel / flash_bwd_sm90_ord_kernel above: D = 256 without the score
// options (flash_bwd_sm90_d256_kernel, on by default), and the SCORE instantiations at D = 128 and 256
// (flash_bwd_sm90_split_score_kernel; TF_FLASHATTN_SM90_BWD_SPLITD=0 leaves those calls to sm80).
template <typename T, bool IDX, bool DROP = false, bool DET = false>
__global__ void __launch_bounds__(kThreads, 1)
    flash_bwd_sm90_d256_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                               const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                               const __grid_constant__ BwdSm90Args a) {
  bwd_cta_split<T, 256, IDX, DROP, false, false, DET>(tm_q, tm_k, tm_v, tm_do, a);
}
template <typename T, bool IDX, bool DROP = false, bool DET = false>
__global__ void __launch_bounds__(kThreads, 1)
    flash_bwd_sm90_d256_ord_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                                   const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                                   const __grid_constant__ BwdSm90Args a) {
  bwd_cta_split<T, 256, IDX, DROP, false, true, DET>(tm_q, tm_k, tm_v, tm_do, a);
}
template <typename T, int D, bool DET = false>
__global__ void __launch_bounds__(kThreads, 1)
    flash_bwd_sm90_split_score_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                                      const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                                      const __grid_constant__ BwdSm90Args a) {
  bwd_cta_split<T, D, true, false, true, false, DET>(tm_q, tm_k, tm_v, tm_do, a);
}

std::atomic<int64_t> g_launches{0};
std::atomic<int> g_override{-1};

// The tile order (header comment, "Tile order"): TF_FLASHATTN_SM90_BWD_ORDER (read once; 0 the launch
// order, 2 longest-first, anything else or unset 1, grouped longest-first) and
// TF_FLASHATTN_SM90_BWD_ORDER_G (read once; order 1's pairs per group, unset or < 1: bwd_auto_group);
// set_bwd_order overrides both (-1: back to the environment).
std::atomic<int> g_order_override{-1}, g_group_override{0};
std::atomic<int> g_last_order_g{-1}, g_last_order_big{0};  // the last launch's BwdSm90Args (the harness)

int env_int(const char* name, int dflt) {
  const char* v = getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  const long x = strtol(v, &end, 10);
  return (*end == '\0' && x >= 0 && x <= (1 << 30)) ? static_cast<int>(x) : dflt;
}
int bwd_order_setting() {
  static const int env = [] {
    const int o = env_int("TF_FLASHATTN_SM90_BWD_ORDER", 1);
    return o == 0 || o == 2 ? o : 1;
  }();
  const int o = g_order_override.load(std::memory_order_relaxed);
  return o >= 0 ? o : env;
}
int bwd_group_setting() {
  static const int env = env_int("TF_FLASHATTN_SM90_BWD_ORDER_G", 0);
  const int g = g_group_override.load(std::memory_order_relaxed);
  return g > 0 ? g : env;
}

// Order 1's group size when none is set: the (b, kv head) pairs whose Q and dO (16-bit), lse2 and
// dsum (float32) and dQ accumulator (float32, read and written by every unit's reduce-add) fit in
// kGroupBytes = 20 MiB, about 40 % of the H200's 50 MB L2 (so that two groups, the end of one and the
// start of the next, can run at once): per pair (G query heads of a kv head) G Tq (2 * 2 D + 8 + 4 D)
// bytes, so floor(20 MiB / that), at least 1. B*T = 16384, no GQA: D = 128 T = 4096 4 pairs, T = 2048 9;
// D = 64 T = 4096 9; D = 256 T = 4096 2 (benchmarks/bwd_order_model.py prints the rest).
constexpr int64_t kGroupBytes = int64_t(20) << 20;
int64_t bwd_auto_group(const AttnShape& s, int D) {
  const int64_t per_pair = (s.H / s.Hkv) * s.Tq * (2 * 2 * D + 8 + 4 * D);
  const int64_t g = per_pair > 0 ? kGroupBytes / per_pair : 1;
  return g < 1 ? 1 : g;
}

// BwdSm90Args' order_g / order_big for a grid of nx key tiles x Hkv x B (header comment, "Tile order"):
// {0, 0} (the launch order) unless order 1 or 2 is set, the mask is causal, there are at least 2 pairs and
// fewer than 2^31 CTAs (bwd_tile's 32-bit index). Order 2: one group of all pairs. Order 1: groups of
// at most G pairs (bwd_group_setting, else bwd_auto_group), balanced: ng = ceil(pairs / G) groups, the
// first pairs % ng of them with pairs / ng + 1 pairs, the others pairs / ng (a last group of a few pairs
// would start its heavy tiles late: the model's makespan at D = 128, T = 2048, G = 9 went from 1.092 to
// 1.046 of the ideal with balanced groups). A group of one pair is the launch order: the plain kernel when
// bwd_auto_group gives 1, the ORD kernel with order_g = 1 (the identity map) when G = 1 is set.
// has_ord: the launcher has an ORD kernel (not with dropout or bias); else the launch order.
void bwd_tile_order(const FlashBwdParams& p, int64_t nx, int D, bool has_ord, BwdSm90Args* args) {
  const AttnShape& s = p.shape;
  const int order = bwd_order_setting();
  const int64_t pairs = s.Hkv * s.B;
  args->order_g = args->order_big = 0;
  if (has_ord && (order == 1 || order == 2) && p.mask.causal && pairs >= 2 && nx * pairs < (int64_t(1) << 31)) {
    const int set = bwd_group_setting();
    int64_t g = order == 2 ? pairs : set > 0 ? set : bwd_auto_group(s, D);
    if (g > pairs) g = pairs;
    if (g >= 2) {
      const int64_t ng = (pairs + g - 1) / g;
      args->order_g = static_cast<int>(pairs / ng);
      args->order_big = static_cast<int>(pairs % ng);
    } else if (order == 1 && set == 1) {
      args->order_g = 1;  // G = 1 set explicitly: the ORD kernel in the launch order (a control)
    }
  }
  g_last_order_g.store(args->order_g, std::memory_order_relaxed);
  g_last_order_big.store(args->order_big, std::memory_order_relaxed);
}

// The backward's four tensor maps: q and k with the real D, v and dO with the real Dv (padded up to the kernel's
// head dim by the copy engine's zero fill); boxes of kBq query rows and key_rows key rows.
inline bool bwd_tensor_maps(const FlashBwdParams& p, int key_rows, CUtensorMap* tq, CUtensorMap* tk, CUtensorMap* tv,
                            CUtensorMap* tdo) {
  const AttnShape& s = p.shape;
  return tma_map_rows(tq, p.dtype, p.q, s.B, s.Tq, s.H, s.D, s.q_stride, kBq) &&
         tma_map_rows(tk, p.dtype, p.k, s.B, s.Tk, s.Hkv, s.D, s.k_stride, key_rows) &&
         tma_map_rows(tv, p.dtype, p.v, s.B, s.Tk, s.Hkv, s.Dv, s.v_stride, key_rows) &&
         tma_map_rows(tdo, p.dtype, p.d_o, s.B, s.Tq, s.H, s.Dv, s.o_stride, kBq);
}

// IDX: the index-masked kernel (window, lengths, validity masks), else the no-mask / causal one;
// DROP: the index-masked kernel with dropout; DET: the ordered dQ reduction (deterministic mode);
// BIAS: the index-masked kernel with bias / dbias (D = 64, no dropout).
template <typename T, int D, bool IDX, bool DROP = false, bool DET = false, bool BIAS = false>
cudaError_t launch(const FlashBwdParams& p, cudaStream_t stream) {
  const AttnShape& s = p.shape;
  const BwdWorkspaceParts ws = bwd_workspace_parts(p);
  if (!ws.dsum || !ws.lse2 || !ws.dq_acc || ws.hd != D || ws.tq_pad % kBq != 0 || !aligned16(ws.dq_acc))
    return cudaErrorNotSupported;
  if (DET && !ws.dq_sem) return cudaErrorNotSupported;  // nothing queued yet: sm80's deterministic one
  // Only the BIAS kernels have bias / dbias code (bwd_pick takes them for bias / dbias, bwd_applies
  // keeps the rest away, this guards the launcher itself): nothing queued yet, sm80 takes it.
  if ((p.score.bias || p.dbias) && !BIAS) return cudaErrorNotSupported;
  // Padded up: only the IDX kernels check the columns they store (bwd_pick sends those calls there).
  if (!IDX && runs_padded(s)) return cudaErrorNotSupported;  // nothing queued yet: sm80 takes it
  CUtensorMap tq, tk, tv, tdo;
  if (!bwd_tensor_maps(p, kBk, &tq, &tk, &tv, &tdo))
    return cudaErrorNotSupported;  // nothing queued yet: the dispatch falls back to sm80
  BwdSm90Args args{p, ws.dsum, ws.lse2, ws.dq_acc, ws.tq_pad, DET ? ws.dq_sem : nullptr};
  const dim3 grid(static_cast<unsigned>((s.Tk + kBk - 1) / kBk), static_cast<unsigned>(s.Hkv),
                  static_cast<unsigned>(s.B));
  // The tile order (header comment, "Tile order"): the ORD kernel when order 1 or 2 applies (built for
  // the kernels without dropout or bias only), else the plain kernel, unchanged.
  constexpr bool kOrd = !DROP && !BIAS;
  bwd_tile_order(p, grid.x, D, kOrd, &args);
  auto kernel = flash_bwd_sm90_kernel<T, D, IDX, DROP, DET, BIAS>;
  if constexpr (kOrd) {
    if (args.order_g != 0) kernel = flash_bwd_sm90_ord_kernel<T, D, IDX, DROP, DET, BIAS>;
  }
  const int smem = BwdSmem<D, IDX, dq_bulk_reduce(D, DET)>::kAlloc;
  cudaError_t err = set_dynamic_smem(kernel, smem);
  if (err != cudaSuccess) return cudaErrorNotSupported;  // nothing queued yet: sm80 takes it

  // dbias [B, H, Tq, Tk] zeroed first, as sm80's bwd() does: the kernel stores only the elements of
  // its units with P != 0 (the others are 0 in sm80's too: masked, or in tiles no unit visits).
  if (p.dbias && (err = cudaMemsetAsync(p.dbias, 0, static_cast<size_t>(s.B * s.H * s.Tq * s.Tk) * sizeof(float),
                                        stream)) != cudaSuccess)
    return err;
  if ((err = bwd_dsum_tc(p, ws.dsum, ws.lse2, stream)) != cudaSuccess) return err;
  const size_t acc_floats = static_cast<size_t>(s.B * s.H * ws.tq_pad) * D;
  // DET: the counters [B, H, tq_pad / 64] follow the accumulator (bwd_workspace_parts): one memset.
  const size_t sem_ints = DET ? static_cast<size_t>(s.B * s.H * (ws.tq_pad / kBq)) : 0;
  if ((err = cudaMemsetAsync(ws.dq_acc, 0, (acc_floats + sem_ints) * sizeof(float), stream)) != cudaSuccess)
    return err;
  kernel<<<grid, kThreads, smem, stream>>>(tq, tk, tv, tdo, args);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  err = launch_dq_convert<T, D>(p, ws.dq_acc, ws.tq_pad, stream);
  if (err == cudaSuccess) g_launches.fetch_add(1, std::memory_order_relaxed);
  return err;
}


// The split kernel (bwd_cta_split): head dim 256 (flash_bwd_sm90_d256_kernel; bwd_applies: no mask,
// causal or the index masks, dropout), and SCORE, the score options (soft-cap, the dense mask, bias / dbias;
// no dropout) at D = 128 or 256
// (flash_bwd_sm90_split_score_kernel; off with TF_FLASHATTN_SM90_BWD_SPLITD=0): as launch(), key tiles of
// kBk256 = 64 keys; DET as launch()'s.
template <typename T, int D, bool IDX, bool DROP = false, bool SCORE = false, bool DET = false>
cudaError_t launch_split(const FlashBwdParams& p, cudaStream_t stream) {
  static_assert(D == 256 || (D == 128 && SCORE), "the split kernel's instantiations");
  const AttnShape& s = p.shape;
  const BwdWorkspaceParts ws = bwd_workspace_parts(p);
  if (!ws.dsum || !ws.lse2 || !ws.dq_acc || ws.hd != D || ws.tq_pad % kBq != 0 || !aligned16(ws.dq_acc))
    return cudaErrorNotSupported;
  if (p.deterministic != DET || (p.dropout.rate > 0.f) != DROP ||
      (!SCORE && (p.score.bias || p.dbias || p.mask.mask || p.score.softcap != 0.f)))
    return cudaErrorNotSupported;  // no code for them here
  if (DET && !ws.dq_sem) return cudaErrorNotSupported;  // nothing queued yet: sm80's deterministic one
  CUtensorMap tq, tk, tv, tdo;
  if (!bwd_tensor_maps(p, kBk256, &tq, &tk, &tv, &tdo))
    return cudaErrorNotSupported;  // nothing queued yet: the dispatch falls back to sm80
  BwdSm90Args args{p, ws.dsum, ws.lse2, ws.dq_acc, ws.tq_pad, DET ? ws.dq_sem : nullptr};
  const dim3 grid(static_cast<unsigned>((s.Tk + kBk256 - 1) / kBk256), static_cast<unsigned>(s.Hkv),
                  static_cast<unsigned>(s.B));
  constexpr bool kOrd = !DROP && !SCORE;  // as launch()'s: no ORD kernel with dropout or the score options
  bwd_tile_order(p, grid.x, D, kOrd, &args);
  void (*kernel)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const CUtensorMap, const BwdSm90Args);
  if constexpr (SCORE) {
    kernel = flash_bwd_sm90_split_score_kernel<T, D, DET>;
  } else {
    kernel = flash_bwd_sm90_d256_kernel<T, IDX, DROP, DET>;
    if constexpr (kOrd) {
      if (args.order_g != 0) kernel = flash_bwd_sm90_d256_ord_kernel<T, IDX, DROP, DET>;
    }
  }
  const int smem = BwdSmemSplit<D, IDX>::kAlloc;
  cudaError_t err = set_dynamic_smem(kernel, smem);
  if (err != cudaSuccess) return cudaErrorNotSupported;  // nothing queued yet: sm80 takes it
  // SCORE: dbias [B, H, Tq, Tk] zeroed first, as launch() and sm80's bwd() do (the kernel stores only
  // the elements of its units with P != 0).
  if (SCORE && p.dbias &&
      (err = cudaMemsetAsync(p.dbias, 0, static_cast<size_t>(s.B * s.H * s.Tq * s.Tk) * sizeof(float), stream)) !=
          cudaSuccess)
    return err;
  if ((err = bwd_dsum_tc(p, ws.dsum, ws.lse2, stream)) != cudaSuccess) return err;
  const size_t acc_floats = static_cast<size_t>(s.B * s.H * ws.tq_pad) * D;
  const size_t sem_ints = DET ? static_cast<size_t>(s.B * s.H * (ws.tq_pad / kBq)) : 0;  // as launch()'s
  if ((err = cudaMemsetAsync(ws.dq_acc, 0, (acc_floats + sem_ints) * sizeof(float), stream)) != cudaSuccess)
    return err;
  kernel<<<grid, kThreads, smem, stream>>>(tq, tk, tv, tdo, args);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  err = launch_dq_convert<T, D>(p, ws.dq_acc, ws.tq_pad, stream);
  if (err == cudaSuccess) g_launches.fetch_add(1, std::memory_order_relaxed);
  return err;
}
}  // namespace

bool bwd_enabled() {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return o != 0;
  static const bool env_on = [] {
    const char* off = "0";
    const char* v = getenv("TF_FLASHATTN_SM90_BWD");
    const char* all = getenv("TF_FLASHATTN_SM90");
    return !(v && strcmp(v, off) == 0) && !(all && strcmp(all, off) == 0);
  }();
  return env_on;
}

// The deterministic instantiations serve op determinism by default (bwd_det_mode: 0 off, else on). Their numerics,
// repeat-bitwise, memcheck / racecheck checks passed on the H200 (2026-12-01); synccheck reported
// "Divergent thread(s) in block" at the ordered reduction's barriers of <bf16, 64, no IDX, DET>
// while they were bar.sync .aligned, and 0 errors since they are barrier.sync without .aligned
// (named_bar_sync_unaligned; the sanitize phase's cases, two deterministic ones at D = 64; session
// 15). bench_det (T = 4096, B = 4, bf16): 2.19x / 1.25x / 1.38x sm80's deterministic backward at
// D = 128, D = 128 causal, D = 64, but 0.86x at D = 64 causal (4.82 ms against 4.15: the ordered dQ
// reduction waits along the diagonal), so until 2026-12-02 a deterministic call at D = 64 with a causal
// mask stayed on sm80's by default. Since the causal tile order and the later kernel changes bench_det gives
// 1.30x-1.33x sm80's there (3.06-3.18 ms against 4.08-4.16, five runs on 2026-12-02: RESULTS.md "Hopper backward
// kernel" (q), (r), (s)), so that exception is gone. The split kernel's DET instantiations (D = 256 and the
// score options at D = 128 / 256; checked on the H200 2026-12-02, RESULTS.md (s)): bench_det 1.80x / 1.20x
// sm80's at D = 256 without a mask / causal; the score options' DET copies not timed against sm80's.
// TF_FLASHATTN_SM90_BWD_DET (read once): 0 keeps every deterministic call on sm80's; anything else or unset
// (1 included, which benchmarks/sm90_bwd_check.py sets) sends every one the Hopper kernels can take.
int bwd_det_mode() {
  static const int mode = [] {
    const char* v = getenv("TF_FLASHATTN_SM90_BWD_DET");
    return v && strcmp(v, "0") == 0 ? 0 : 1;
  }();
  return mode;
}

// The head-dim-256 kernel (flash_bwd_sm90_d256_kernel), on by default since its checks on the H200
// (2026-12-01): bwd_applies takes D = Dv = 256 without a mask, causal or with the index masks, with or
// without dropout; TF_FLASHATTN_SM90_BWD_D256=0 (read once) keeps every D = 256 backward on sm80's.
namespace {
bool bwd_d256_enabled() {
  static const bool on = [] {
    const char* v = getenv("TF_FLASHATTN_SM90_BWD_D256");
    return !(v && strcmp(v, "0") == 0);
  }();
  return on;
}
}  // namespace

// The split kernel's score options (flash_bwd_sm90_split_score_kernel: bias / dbias at D = 128; soft-cap,
// the dense mask, bias / dbias at D = 256; no dropout): bwd_applies takes those calls
// unless TF_FLASHATTN_SM90_BWD_SPLITD=0 (read once), which leaves them on sm80's backward.
namespace {
bool bwd_splitd_enabled() {
  static const bool on = [] {  // on unless exactly "0"
    const char* v = getenv("TF_FLASHATTN_SM90_BWD_SPLITD");
    return !(v && strcmp(v, "0") == 0);
  }();
  return on;
}
}  // namespace

void set_bwd_enabled(int mode) { g_override.store(mode < 0 ? -1 : (mode ? 1 : 0), std::memory_order_relaxed); }

void set_bwd_order(int order, int group) {
  g_order_override.store(order < 0 ? -1 : (order == 1 || order == 2 ? order : 0), std::memory_order_relaxed);
  g_group_override.store(group > 0 ? group : 0, std::memory_order_relaxed);
}

BwdOrderInfo bwd_order_info() {
  BwdOrderInfo r;
  r.order = bwd_order_setting();
  r.group = bwd_group_setting();
  r.last_g = g_last_order_g.load(std::memory_order_relaxed);
  r.last_big = g_last_order_big.load(std::memory_order_relaxed);
  return r;
}

int64_t bwd_launches() { return g_launches.load(std::memory_order_relaxed); }

bool bwd_applies(const FlashBwdParams& p) {
  if (!bwd_enabled()) return false;
  const AttnShape& s = p.shape;
  if (p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16) return false;
  if (!p.workspace) return false;
  // Deterministic mode: the DET instantiations, unless turned off (bwd_det_mode 0), when the workspace
  // holds the counters (D = 64 / 128 / 256, builds with these kernels: bwd_workspace_parts).
  if (p.deterministic) {
    if (bwd_det_mode() == 0) return false;
    if (!bwd_workspace_parts(p).dq_sem) return false;
  }
  // The split kernel's SCORE instantiations (flash_bwd_sm90_split_score_kernel; off with
  // TF_FLASHATTN_SM90_BWD_SPLITD=0): soft-cap, the dense mask, bias / dbias at D = 256,
  // bias / dbias at D = 128; no dropout (the checks below); deterministic with their DET instantiations.
  const bool splitd = bwd_splitd_enabled();
  // Head dims 64, 128, 256, any other D, Dv <= 256 padded up to hd (multiples of 8: vec8 below).
  const int hd = s.D > 0 && s.Dv > 0 ? padded_head_dim(s) : 0;
  if (hd == 0) return false;
  if (hd == 256) {
    // flash_bwd_sm90_d256_kernel (unless TF_FLASHATTN_SM90_BWD_D256=0): no mask, causal and the index masks (window, lengths,
    // validity; its IDX instantiation), dropout (IDX with DROP; the seed is checked below); no dense
    // mask, soft-cap, bias / dbias (but with the split switch, above); deterministic with the ordered dQ
    // reduction (the DET instantiations).
    if (!bwd_d256_enabled()) return false;
    if ((p.mask.mask || p.score.softcap != 0.f || p.score.bias || p.dbias) && !splitd) return false;
  }
  if (s.Tk <= 0 || s.Tq <= 0 || s.Tq > (1ll << 31) - 2 * kBk || s.Tk > (1ll << 31) - 2 * kBk) return false;
  if (s.B <= 0 || s.H <= 0 || s.H > 65535 || s.B > 65535 || s.Hkv <= 0 || s.Hkv > 65535 || s.H % s.Hkv != 0)
    return false;
  // Index masks (causal, window, lengths, [B, Tq] / [B, Tk] validity) and dropout (with its seed;
  // the DROP kernel, D = 64 and 128) run here; a dense mask and soft-cap too, in the IDX kernel
  // without dropout, and bias / dbias there at D = 64 (with dropout, or at D = 128 without the split
  // switch: sm80's kernels).
  if (p.mask.mask && p.dropout.rate > 0.f) return false;  // a dense mask: the IDX kernel without dropout
  // BIAS kernels at D = 64; the split kernel's SCORE instantiations at D = 128 / 256 with the opt-in switch.
  if ((p.score.bias || p.dbias) && (p.dropout.rate > 0.f || (hd != 64 && !splitd))) return false;
  // The bias' and dbias' element offsets within a unit are 32-bit (UnitElems): query and key strides
  // below 2^23 (dbias: compact, key stride 1, query stride Tk).
  constexpr int64_t kOffLim = int64_t(1) << 23;
  auto small = [](int64_t x) { return x > -kOffLim && x < kOffLim; };
  if (p.score.bias && !(small(p.score.bias_stride[2]) && small(p.score.bias_stride[3]))) return false;
  if (p.dbias && !small(s.Tk)) return false;
  // Soft-cap in the IDX kernel without dropout (the dropout kernel carries no soft-cap code).
  if (p.score.softcap != 0.f && (p.dropout.rate > 0.f || !std::isfinite(p.score.softcap))) return false;
  if (p.dropout.rate > 0.f && !p.dropout.seed) return false;
  // TMA (q, k, v, d_o) and the 4-byte stores of dq / dk / dv: 16-byte bases, strides of 8 elements
  // (d_o, dq, dk, dv share the strides of o, q, k, v).
  if (!vec8(s, p.q, p.k, p.v, p.o) || !aligned16(p.d_o) || !aligned16(p.dq) || !aligned16(p.dk) ||
      !aligned16(p.dv))
    return false;
  for (int i = 0; i < 3; ++i)
    if (s.q_stride[i] < 0 || s.k_stride[i] < 0 || s.v_stride[i] < 0 || s.o_stride[i] < 0) return false;
  return current_device_is_sm90();
}

namespace {
// The kernel for these params (see bwd); DET: the deterministic instantiations.
template <bool DET>
cudaError_t bwd_pick(const FlashBwdParams& p, cudaStream_t stream) {
  const bool bf16 = p.dtype == DType::kBFloat16;
  const MaskParams& m = p.mask;
  // Soft-cap, a dense mask, bias / dbias (bwd_applies: not with TF_FLASHATTN_SM90_BWD_SPLITD=0; at D = 256,
  // and for bias / dbias at D = 128; no dropout).
  const bool score = p.score.softcap != 0.f || m.mask || p.score.bias || p.dbias;
  const int hd = padded_head_dim(p.shape);  // (bwd_applies)
  if (hd == 256) {  // bwd_applies: no mask, causal or the index masks, dropout, the score options
    if (p.dropout.rate > 0.f)  // dropout runs the index-masked kernel (any index mask, or none)
      return bf16 ? launch_split<__nv_bfloat16, 256, true, true, false, DET>(p, stream)
                  : launch_split<__half, 256, true, true, false, DET>(p, stream);
    if (score)  // the SCORE instantiation (index masks too)
      return bf16 ? launch_split<__nv_bfloat16, 256, true, false, true, DET>(p, stream)
                  : launch_split<__half, 256, true, false, true, DET>(p, stream);
    if (m.has_index_masks())
      return bf16 ? launch_split<__nv_bfloat16, 256, true, false, false, DET>(p, stream)
                  : launch_split<__half, 256, true, false, false, DET>(p, stream);
    return bf16 ? launch_split<__nv_bfloat16, 256, false, false, false, DET>(p, stream)
                : launch_split<__half, 256, false, false, false, DET>(p, stream);
  }
  if (p.dropout.rate > 0.f) {  // dropout runs the index-masked kernel (any index mask, or none)
    if (hd == 128)
      return bf16 ? launch<__nv_bfloat16, 128, true, true, DET>(p, stream)
                  : launch<__half, 128, true, true, DET>(p, stream);
    return bf16 ? launch<__nv_bfloat16, 64, true, true, DET>(p, stream) : launch<__half, 64, true, true, DET>(p, stream);
  }
  // Bias / dbias: the BIAS kernels, the only ones with bias code (bwd_applies: D = 64, no dropout;
  // launch() refuses bias / dbias in any other); at D = 128 the split kernel's SCORE instantiation
  // (bwd_applies: not with TF_FLASHATTN_SM90_BWD_SPLITD=0, no dropout; it takes the
  // soft-cap, dense mask and index masks of such a call too).
  const bool bias = p.score.bias || p.dbias;
  // Padded up (D or Dv below hd): the IDX kernel, the one with the epilogue's column checks.
  const bool padded = runs_padded(p.shape);
  if (bias && hd == 128)
    return bf16 ? launch_split<__nv_bfloat16, 128, true, false, true, DET>(p, stream)
                : launch_split<__half, 128, true, false, true, DET>(p, stream);
  if (m.has_index_masks() || p.score.softcap != 0.f || m.mask || bias || padded) {  // soft-cap, a dense mask: the IDX kernel's branches
    if (hd == 128)
      return bf16 ? launch<__nv_bfloat16, 128, true, false, DET>(p, stream)
                  : launch<__half, 128, true, false, DET>(p, stream);
    if (bias)
      return bf16 ? launch<__nv_bfloat16, 64, true, false, DET, true>(p, stream)
                  : launch<__half, 64, true, false, DET, true>(p, stream);
    return bf16 ? launch<__nv_bfloat16, 64, true, false, DET>(p, stream) : launch<__half, 64, true, false, DET>(p, stream);
  }
  if (hd == 128)
    return bf16 ? launch<__nv_bfloat16, 128, false, false, DET>(p, stream)
                : launch<__half, 128, false, false, DET>(p, stream);
  return bf16 ? launch<__nv_bfloat16, 64, false, false, DET>(p, stream) : launch<__half, 64, false, false, DET>(p, stream);
}
}  // namespace

cudaError_t bwd(const FlashBwdParams& p, cudaStream_t stream) {
  return p.deterministic ? bwd_pick<true>(p, stream) : bwd_pick<false>(p, stream);
}

// ---- Self-test of the backward's building blocks --------------------------------------------
namespace {

// One warpgroup; operands stored into 128-byte-swizzled tiles by ordinary stores, C [64 x 64]
// (mode 4: [64 x 128]) float32 row-major.
//   mode 0: C = A B^T, A [64 x 128] and B [64 (n) x 128 (k)] both K-major (S^T = K Q^T).
//   mode 1 / 2: C = At^T Bm[:, 64 pn .. 64 pn + 63], At [128 (k) x 64 (m)] stored as is (rows k,
//     m contiguous: A MN-major), Bm [128 (k) x 128] stored as is (B MN-major), pn = mode - 1
//     (dQ = dS K, D = 128, consumer pn's columns).
//   mode 3: as 1 with k from 64 to 127 only (K = 64; the D = 64 split by keys, consumer 1).
//   mode 4: C [64 x 128] = (A B^T) Bm2 with A B^T [64 x 64] computed as in mode 0, repacked in
//     registers as the A fragments (P^T), Bm2 = the first 64 rows of Bm (MN-major; dV += P^T dO).
//   mode 10 / 11: C [64 x 32] = At^T Bm[:, 32 .. 63] / Bm[:, 0 .. 31] over all 128 k, B MN-major from byte
//     64 / 0 of panel 0's 128-byte rows, wgmma_ss_m64n32k16<1, 1> (the D = 64 dQ split by columns,
//     FA_SM90_BWD_D64_COLS, consumer 1 / 0: panel 0 of Bm is laid out as the D = 64 K tile [128 keys x 64]).
__global__ void selftest_bwd_kernel(const __nv_bfloat16* am, const __nv_bfloat16* bm, float* c, int mode) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* tile = smem_raw + (base - raw);
  const uint32_t a_tile = base, b_tile = base + 128 * 128 * 2;  // 32 KiB each
  const int tid = threadIdx.x;
  using Bf = __nv_bfloat16;
  if (mode == 0 || mode == 4) {  // A [64 x 128], B [64 x 128] K-major (R = 64)
    for (int i = tid; i < 64 * 128; i += 128) {
      *reinterpret_cast<Bf*>(tile + swz128_offset(64, i / 128, i % 128)) = am[i];
      *reinterpret_cast<Bf*>(tile + 128 * 128 * 2 + swz128_offset(64, i / 128, i % 128)) = bm[i];
    }
    if (mode == 4)  // Bm2 [64 x 128] MN-major (R = 64) after B
      for (int i = tid; i < 64 * 128; i += 128)
        *reinterpret_cast<Bf*>(tile + 128 * 128 * 2 + 64 * 128 * 2 + swz128_offset(64, i / 128, i % 128)) =
            bm[64 * 128 + i];
  } else {  // At [128 x 64] (R = 128, one panel), Bm [128 x 128] (R = 128, two panels)
    for (int i = tid; i < 128 * 64; i += 128)
      *reinterpret_cast<Bf*>(tile + swz128_offset(128, i / 64, i % 64)) = am[i];
    for (int i = tid; i < 128 * 128; i += 128)
      *reinterpret_cast<Bf*>(tile + 128 * 128 * 2 + swz128_offset(128, i / 128, i % 128)) = bm[i];
  }
  fence_proxy_async();
  __syncthreads();
  if (mode == 10 || mode == 11) {
    const uint32_t b_col = mode == 10 ? 64 : 0;  // consumer 1 / 0's 32 columns
    float acc16[16];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)
      wgmma_ss_m64n32k16<1, 1>(WgmmaType<Bf>{}, acc16, wgmma_desc(a_tile + 16 * kk * 128, 128 * 128, 1024),
                               wgmma_desc(b_tile + b_col + 16 * kk * 128, 128 * 128, 1024), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc16);
    store_acc_rows<32>(acc16, c, tid);
    return;
  }
  float acc[32];
  if (mode == 0 || mode == 4) {
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < 8; ++k)
      wgmma_ss_m64n64k16<0, 0>(WgmmaType<Bf>{}, acc, wgmma_desc(a_tile + (k / 4) * 64 * 128 + (k % 4) * 32, 16, 1024),
                               wgmma_desc(b_tile + (k / 4) * 64 * 128 + (k % 4) * 32, 16, 1024), k > 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc);
  } else {
    const int pn = mode == 2 ? 1 : 0, k0 = mode == 3 ? 64 : 0, steps = mode == 3 ? 4 : 8;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)
      if (kk < steps)
        wgmma_ss_m64n64k16<1, 1>(WgmmaType<Bf>{}, acc, wgmma_desc(a_tile + (k0 + 16 * kk) * 128, 128 * 128, 1024),
                                 wgmma_desc(b_tile + pn * 128 * 128 + (k0 + 16 * kk) * 128, 128 * 128, 1024),
                                 kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc);
  }
  if (mode != 4) {
    store_acc_rows<64>(acc, c, tid);
    return;
  }
  uint32_t pa[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int x = 0; x < 4; ++x) pa[kk][x] = Elem<Bf>::pack(acc[8 * kk + 2 * x], acc[8 * kk + 2 * x + 1]);
  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  fence_regs(o);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    wgmma_rs_m64n128k16_tb(WgmmaType<Bf>{}, o, pa[kk], wgmma_desc(b_tile + 64 * 128 * 2 + kk * 2048, 64 * 128, 1024), 1);
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(o);
  store_acc_rows<128>(o, c, tid);
}

// Small exact values: multiples of 1/8 in [-0.75, 0.75] (bfloat16 holds them; the float32 sums
// of the tests are exact, and so is mode 4's intermediate when it stays within 8 bits).
float st_value(int i, int j, int salt) { return static_cast<float>(((i * 7 + j * 3 + salt) % 13) - 6) * 0.125f; }
// The self-tests' operands, row-major [rows x cols]: A's element (i, j) st_value(i, j, 1), B's st_value(i, 5 j, 4).
std::vector<float> st_operand(bool is_b, int rows, int cols) {
  std::vector<float> x(static_cast<size_t>(rows) * cols);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) x[i * cols + j] = is_b ? st_value(i, j * 5, 4) : st_value(i, j, 1);
  return x;
}

uint16_t st_bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>(u >> 16);
}

float st_bf16_round(float x) {  // round to nearest even, as __floats2bfloat162_rn
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  float y;
  std::memcpy(&y, &u, 4);
  return y;
}


// The head-dim-256 kernel's wgmma forms (bwd_selftest 5..7), one warpgroup, operands stored into
// 128-byte-swizzled tiles (R = 64 rows) by ordinary stores, C float32 row-major:
//   mode 5: C [64 x 32] = A B[32 .. 63]^T, A [64 x 128] and B [64 (n) x 128 (k)] both K-major, N = 32
//     from row 32 of B's panels (S^T_c = K Q_c^T of consumer 1, wgmma_ss_m64n32k16<0, 0>).
//   mode 6: C [64 x 128] = A Bm, A [64 x 64] K-major (one panel), Bm [64 (k) x 128] MN-major (two
//     panels: dV_c += P^T dO[:, 128c ..], wgmma_ss_m64n128k16_tr<0, 1>).
//   mode 7: C [64 x 128] = At^T Bm[:, 128 .. 255], At [64 (k) x 64 (m)] stored as is (A MN-major), Bm
//     [64 (k) x 256] (four panels; consumer 1's dQ_c = dS K[:, 128 ..], wgmma_ss_m64n128k16_tr<1, 1>).
// am: A (mode 7: At) row-major; bm: B (mode 5, [64 x 128]) or Bm ([64 x 128] / [64 x 256]) row-major.
__global__ void selftest_bwd_d256_kernel(const __nv_bfloat16* am, const __nv_bfloat16* bm, float* c, int mode) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* tile = smem_raw + (base - raw);
  const uint32_t a_tile = base, b_tile = base + 64 * 128 * 2;  // A up to 16 KiB, then B up to 32 KiB
  const int tid = threadIdx.x;
  using Bf = __nv_bfloat16;
  const int acols = mode == 5 ? 128 : 64, bcols = mode == 5 ? 128 : mode == 6 ? 128 : 256;
  for (int i = tid; i < 64 * acols; i += 128)
    *reinterpret_cast<Bf*>(tile + swz128_offset(64, i / acols, i % acols)) = am[i];
  for (int i = tid; i < 64 * bcols; i += 128)
    *reinterpret_cast<Bf*>(tile + 64 * 128 * 2 + swz128_offset(64, i / bcols, i % bcols)) = bm[i];
  fence_proxy_async();
  __syncthreads();
  if (mode == 5) {
    float acc[16];
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < 8; ++k)
      wgmma_ss_m64n32k16<0, 0>(WgmmaType<Bf>{}, acc, wgmma_desc(a_tile + (k / 4) * 64 * 128 + (k % 4) * 32, 16, 1024),
                               wgmma_desc(b_tile + (k / 4) * 64 * 128 + 32 * 128 + (k % 4) * 32, 16, 1024), k > 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc);
    store_acc_rows<32>(acc, c, tid);
    return;
  }
  float acc[64];
  wgmma_fence();
  if (mode == 6) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_ss_m64n128k16_tr<0, 1>(WgmmaType<Bf>{}, acc, wgmma_desc(a_tile + kk * 32, 16, 1024),
                                   wgmma_desc(b_tile + kk * 2048, 64 * 128, 1024), kk > 0);
  } else {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_ss_m64n128k16_tr<1, 1>(WgmmaType<Bf>{}, acc, wgmma_desc(a_tile + kk * 2048, 64 * 128, 1024),
                                   wgmma_desc(b_tile + 2 * 64 * 128 + kk * 2048, 64 * 128, 1024), kk > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(acc);
  store_acc_rows<128>(acc, c, tid);
}

// The D = 128 split kernel's wgmma forms (bwd_selftest 8, 9; flash_bwd_sm90_split_score_kernel<T, 128>,
// opt-in), one warpgroup, operands stored into 128-byte-swizzled tiles (R = 64 rows) by ordinary stores, C
// [64 x 64] float32 row-major; Bm [64 (k) x 128] row-major, two 64-column panels, B from panel 1 (consumer 1):
//   mode 8: C = A Bm[:, 64 .. 127], A [64 x 64] K-major (one panel), B MN-major (dV_c += P^T dO[:, 64 ..] and
//     dK_c += dS^T Q[:, 64 ..], wgmma_ss_m64n64k16<0, 1>, LBO the panel stride).
//   mode 9: C = At^T Bm[:, 64 .. 127], At [64 (k) x 64 (m)] stored as is (A MN-major) (dQ_c = dS K[:, 64 ..],
//     wgmma_ss_m64n64k16<1, 1> over 64-row panels).
// The S^T_c form (m64n32k16 K-major from row 32 over two panels) is bwd_selftest 5.
__global__ void selftest_bwd_split128_kernel(const __nv_bfloat16* am, const __nv_bfloat16* bm, float* c, int mode) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* tile = smem_raw + (base - raw);
  const uint32_t a_tile = base, b_tile = base + 64 * 128;  // A 8 KiB, then Bm 16 KiB
  const int tid = threadIdx.x;
  using Bf = __nv_bfloat16;
  for (int i = tid; i < 64 * 64; i += 128) *reinterpret_cast<Bf*>(tile + swz128_offset(64, i / 64, i % 64)) = am[i];
  for (int i = tid; i < 64 * 128; i += 128)
    *reinterpret_cast<Bf*>(tile + 64 * 128 + swz128_offset(64, i / 128, i % 128)) = bm[i];
  fence_proxy_async();
  __syncthreads();
  float acc[32];
  wgmma_fence();
  if (mode == 8) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_ss_m64n64k16<0, 1>(WgmmaType<Bf>{}, acc, wgmma_desc(a_tile + kk * 32, 16, 1024),
                               wgmma_desc(b_tile + 64 * 128 + kk * 2048, 64 * 128, 1024), kk > 0);
  } else {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_ss_m64n64k16<1, 1>(WgmmaType<Bf>{}, acc, wgmma_desc(a_tile + kk * 2048, 64 * 128, 1024),
                               wgmma_desc(b_tile + 64 * 128 + kk * 2048, 64 * 128, 1024), kk > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(acc);
  store_acc_rows<64>(acc, c, tid);
}

// Runs one backward self-test kernel (selftest_bwd_kernel or selftest_bwd_d256_kernel, in its mode:
// A and B as bfloat16, C [64 x N] float32 out) on operands af / bf (values exact in bfloat16) and
// compares C with the float64 reference ref within tol: 1 pass, 0 FAIL (msg says where), as
// bwd_selftest.
int run_bwd_selftest(void (*kernel)(const __nv_bfloat16*, const __nv_bfloat16*, float*, int), int mode, int smem,
                     const std::vector<float>& af, const std::vector<float>& bf, const std::vector<double>& ref,
                     int N, double tol, const char* what, double* max_err, char* msg, int msg_len) {
  auto say = [&](const char* fmt, auto... args) {
    if (msg && msg_len > 0) std::snprintf(msg, msg_len, fmt, args...);
  };
  std::vector<uint16_t> ah(af.size()), bh(bf.size());
  for (size_t i = 0; i < af.size(); ++i) ah[i] = st_bf16_bits(af[i]);
  for (size_t i = 0; i < bf.size(); ++i) bh[i] = st_bf16_bits(bf[i]);
  void *da = nullptr, *db = nullptr, *dc = nullptr;
  const size_t cbytes = 64 * N * sizeof(float);
  cudaError_t err = cudaMalloc(&da, ah.size() * 2);
  if (err == cudaSuccess) err = cudaMalloc(&db, bh.size() * 2);
  if (err == cudaSuccess) err = cudaMalloc(&dc, cbytes);
  if (err == cudaSuccess) err = cudaMemcpy(da, ah.data(), ah.size() * 2, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) err = cudaMemcpy(db, bh.data(), bh.size() * 2, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) err = cudaMemset(dc, 0xff, cbytes);  // NaN
  if (err == cudaSuccess)
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err == cudaSuccess) {
    kernel<<<1, 128, smem>>>(static_cast<const __nv_bfloat16*>(da), static_cast<const __nv_bfloat16*>(db),
                             static_cast<float*>(dc), mode);
    err = cudaDeviceSynchronize();
  }
  std::vector<float> out(64 * N);
  if (err == cudaSuccess) err = cudaMemcpy(out.data(), dc, cbytes, cudaMemcpyDeviceToHost);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  if (err != cudaSuccess) {
    say("CUDA error: %s", cudaGetErrorString(err));
    return 0;
  }
  int bad = 0, first = -1;
  for (int i = 0; i < 64 * N; ++i) {
    const double e = std::fabs(out[i] - ref[i]);
    if (!(e <= tol)) {
      if (first < 0) first = i;
      ++bad;
      *max_err = std::isnan(e) ? INFINITY : std::max(*max_err, e);
    }
  }
  if (bad) {
    say("%s: %d of %d differ; first at (%d, %d): got %g want %g", what, bad, 64 * N, first / N, first % N,
        out[first], ref[first]);
    return 0;
  }
  say("%s: exact (64 x %d)", what, N);
  return 1;
}

// bwd_selftest 5..7 (selftest_bwd_d256_kernel's modes), returns as bwd_selftest.
int bwd_selftest_d256(int which, double* max_err, char* msg, int msg_len) {
  const int acols = which == 5 ? 128 : 64, bcols = which == 7 ? 256 : 128;
  const int N = which == 5 ? 32 : 128;
  const std::vector<float> af = st_operand(false, 64, acols), bf = st_operand(true, 64, bcols);
  std::vector<double> ref(64 * N, 0.0);
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < N; ++n) {
      double x = 0;
      if (which == 5)
        for (int k = 0; k < 128; ++k) x += static_cast<double>(af[m * 128 + k]) * bf[(32 + n) * 128 + k];
      else if (which == 6)
        for (int k = 0; k < 64; ++k) x += static_cast<double>(af[m * 64 + k]) * bf[k * 128 + n];
      else
        for (int k = 0; k < 64; ++k) x += static_cast<double>(af[k * 64 + m]) * bf[k * 256 + 128 + n];
      ref[m * N + n] = x;
    }
  const char* what[] = {"wgmma m64n32k16 SS, A and B K-major, B from row 32 (S^T_c = K Q_c^T, D = 256, consumer 1)",
                        "wgmma m64n128k16 SS, A K-major, B MN-major over two panels (dV_c += P^T dO, D = 256)",
                        "wgmma m64n128k16 SS, A and B MN-major, B panels 2, 3 (dQ_c = dS K, D = 256, consumer 1)"};
  return run_bwd_selftest(selftest_bwd_d256_kernel, which, 64 * 128 * 2 + 64 * 256 * 2 + 1024, af, bf, ref, N, 1e-3,
                          what[which - 5], max_err, msg, msg_len);
}

// bwd_selftest 8, 9 (selftest_bwd_split128_kernel's modes), returns as bwd_selftest.
int bwd_selftest_split128(int which, double* max_err, char* msg, int msg_len) {
  const std::vector<float> af = st_operand(false, 64, 64), bf = st_operand(true, 64, 128);
  std::vector<double> ref(64 * 64, 0.0);
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 64; ++n) {
      double x = 0;
      for (int k = 0; k < 64; ++k)
        x += static_cast<double>(which == 8 ? af[m * 64 + k] : af[k * 64 + m]) * bf[k * 128 + 64 + n];
      ref[m * 64 + n] = x;
    }
  const char* what[] = {"wgmma m64n64k16 SS, A K-major, B MN-major panel 1 (dV_c / dK_c, split D = 128, consumer 1)",
                        "wgmma m64n64k16 SS, A and B MN-major, 64-row panels, B panel 1 (dQ_c, split D = 128, consumer 1)"};
  return run_bwd_selftest(selftest_bwd_split128_kernel, which, 64 * 128 + 64 * 128 * 2 + 1024, af, bf, ref, 64, 1e-3,
                          what[which - 8], max_err, msg, msg_len);
}

// bwd_selftest 10, 11 (selftest_bwd_kernel's modes 10, 11), returns as bwd_selftest: At [128 (k) x 64 (m)], Bm
// [128 (k) x 128] as modes 1-3 lay them out, C = At^T Bm[:, 32 .. 63] (10) or Bm[:, 0 .. 31] (11).
int bwd_selftest_cols64(int which, double* max_err, char* msg, int msg_len) {
  const int n0 = which == 10 ? 32 : 0;
  const std::vector<float> af = st_operand(false, 128, 64), bf = st_operand(true, 128, 128);
  std::vector<double> ref(64 * 32, 0.0);
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 32; ++n) {
      double x = 0;
      for (int k = 0; k < 128; ++k) x += static_cast<double>(af[k * 64 + m]) * bf[k * 128 + n0 + n];
      ref[m * 32 + n] = x;
    }
  const char* what[] = {"wgmma m64n32k16 SS, A and B MN-major, B from byte 64 (dQ_c, D = 64 split by columns, consumer 1)",
                        "wgmma m64n32k16 SS, A and B MN-major, B from byte 0 (dQ_c, D = 64 split by columns, consumer 0)"};
  return run_bwd_selftest(selftest_bwd_kernel, which, 2 * 128 * 128 * 2 + 1024, af, bf, ref, 32, 1e-3, what[which - 10],
                          max_err, msg, msg_len);
}

}  // namespace

int bwd_selftest(int which, double* max_err, char* msg, int msg_len) {
  auto say = [&](const char* fmt, auto... args) {
    if (msg && msg_len > 0) std::snprintf(msg, msg_len, fmt, args...);
  };
  *max_err = 0.0;
  if (which < 0 || which >= kBwdSelftests) {
    say("no test %d", which);
    return -1;
  }
  if (!selftest_device_is_sm90(msg, msg_len)) return -1;
  if (which >= 10) return bwd_selftest_cols64(which, max_err, msg, msg_len);  // the D = 64 dQ split by columns
  if (which >= 8) return bwd_selftest_split128(which, max_err, msg, msg_len);  // the D = 128 split kernel's forms
  if (which >= 5) return bwd_selftest_d256(which, max_err, msg, msg_len);  // the D = 256 kernel's forms
  // Host operands (float values, exact in bfloat16) and the float64 reference.
  const bool kmaj = which == 0 || which == 4;
  const int arows = kmaj ? 64 : 128, acols = kmaj ? 128 : 64;
  const int brows = kmaj ? 128 : 128, bcols = 128;  // mode 0/4: B [64 x 128] then Bm2 [64 x 128]
  const std::vector<float> af = st_operand(false, arows, acols), bf = st_operand(true, brows, bcols);
  const int N = which == 4 ? 128 : 64;
  std::vector<double> ref(64 * N, 0.0);
  if (which == 0 || which == 4) {
    std::vector<double> s(64 * 64, 0.0);
    for (int m = 0; m < 64; ++m)
      for (int n = 0; n < 64; ++n) {
        double x = 0;
        for (int k = 0; k < 128; ++k) x += static_cast<double>(af[m * 128 + k]) * bf[n * 128 + k];
        s[m * 64 + n] = x;
      }
    if (which == 0) {
      ref = s;
    } else {
      for (int m = 0; m < 64; ++m)
        for (int n = 0; n < 128; ++n) {
          double x = 0;
          for (int k = 0; k < 64; ++k)
            x += static_cast<double>(st_bf16_round(static_cast<float>(s[m * 64 + k]))) * bf[(64 + k) * 128 + n];
          ref[m * 128 + n] = x;
        }
    }
  } else {
    const int pn = which == 2 ? 1 : 0, k0 = which == 3 ? 64 : 0;
    for (int m = 0; m < 64; ++m)
      for (int n = 0; n < 64; ++n) {
        double x = 0;
        for (int k = k0; k < 128; ++k) x += static_cast<double>(af[k * 64 + m]) * bf[k * 128 + 64 * pn + n];
        ref[m * 64 + n] = x;
      }
  }
  const char* what[] = {"wgmma m64n64k16 SS, A and B K-major (S^T = K Q^T form)",
                        "wgmma m64n64k16 SS, A and B MN-major, B panel 0 (dQ = dS K, D = 128, consumer 0)",
                        "wgmma m64n64k16 SS, A and B MN-major, B panel 1 (dQ = dS K, D = 128, consumer 1)",
                        "wgmma m64n64k16 SS, A and B MN-major from key row 64, K = 64 (dQ by keys, D = 64, consumer 1)",
                        "S^T accumulators repacked as register A, wgmma m64n128k16 RS, B MN-major (dV += P^T dO)"};
  const double tol = 1e-3 * (which == 4 ? 8.0 : 1.0);
  return run_bwd_selftest(selftest_bwd_kernel, which, 2 * 128 * 128 * 2 + 1024, af, bf, ref, N, tol, what[which], max_err,
                          msg, msg_len);
}

}  // namespace sm90
}  // namespace cuda
}  // namespace flashattn
