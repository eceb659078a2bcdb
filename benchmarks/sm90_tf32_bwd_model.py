"""Host-side model of the Hopper TF32 backward's data layouts (cc/kernels/sm90/flash_bwd_sm90_tf32.cu), no GPU
needed:

  python3 benchmarks/sm90_tf32_bwd_model.py

One consumer's unit (64 keys x 32 queries, head dim 64), every operand placed where the kernel puts it and read
where wgmma reads it (benchmarks/sm90_tf32_model.py's models of TMA's 128-byte swizzle, K-major descriptors,
the accumulator and m64k8 .tf32 A-fragment layouts), multiplied out on random integers and compared with the
products written plainly:
  S^T = K_c Q^T       SS (variant 0: A = this consumer's K rows, B = the Qr tile) and RS (variants 1-3: A = the
                      fragments loaded from the K tile, a[x] = row key_l[x & 1], column 8k + t + 4 (x >> 1))
  dV += P^T dO        RS: A = pack_p_step of the S^T accumulators, B = the dOT tile as the pre-pass writes it
                      (queries in tf32_kperm order) and TMA lands it (box {32 queries, 64 rows})
  dQ^T = K_c^T dS^T   SS: A = the KT panels of this consumer (box {32 keys, 64 rows}), B = dS as the consumers
                      store it (swz128_offset_f32(32, q, key))
  variant 3           the staged dQ^T block (float4 j * 128 + tid) read back by tf32_dq_frag_convert_kernel's
                      mapping into dQ rows
Mutants (the other register order, unpermuted Q^T / dO^T, dS stored transposed) must fail. Then the index masks
(check_masks): on 300 random configurations (causal, offset, windows, lengths, [B, T] masks), the elements
given P != 0 (the units each key tile visits, the rows warp's [kb, ke), key_ok, need_mask) are exactly the
visible ones; four mutants must fail. And flash_bwd_sm90_tf32_d128.cu's layouts (check_d128: S^T over the K tile's
4 panels, dV with N = 128, dQ^T from K^T fragments read out of the K tile; one mutant). Deterministic mode's
ordered dQ reduction (check_det_order): on 300 random configurations per key-tile size (128 and 64 keys), the key
tiles that visit a query tile form one contiguous range and the kernels' wait rule (wait for x when key tile x - 1
visits the same query tile) orders every contributor after the one before it without waiting forever; two
mutants must fail. A dense mask, bias and dbias (check_dense): every element of every unit as the kTf32Dense
kernels compute it against P, dS and dbias written plainly, on 40 random configurations; six mutants must fail.
check_d256_plan models the layouts of the head-dim-256 kernel (flash_bwd_sm90_tf32_d256.cu, first run on an H100 on
2026-12-07: 32-query units, dV^T / dK^T / dQ^T with A fragments read from the Qr, dOr and K tiles by ld.shared, B
from tiles the threads store, one stage in 218 KiB of shared memory); two mutants must fail.
The constants and formulas mirror the kernels'; change them together.
"""
import sys

import numpy as np

from sm90_tf32_model import (a_coord, acc_coord, descriptor_read, kmajor_b, swz128_offset_f32, tf32_kperm_inv,
                             tma_box)

KD, KBK, KBQ = 64, 128, 32


def tma_rows(mem, dst, rows, cols, value):
    """A [rows x cols] float32 tile as TMA boxes {32, 1, rows, 1}: panel j at dst + j * rows * 128."""
    for j in range(cols // 32):
        tma_box(mem, dst + j * rows * 128, rows, lambda r, c, j=j: value(r, 32 * j + c))


def kmajor_a(mem, start, m=64):
    """The [m x 8] A operand of one k8 step through a K-major descriptor (SBO 1024) at start."""
    A = descriptor_read(mem, start, 1024, m, 8)
    return np.array([[A[(r, u)] for u in range(8)] for r in range(m)], dtype=np.int64)


def acc_of(M):
    """The accumulator registers (w, lane) -> {i: value} of a [64 x n] result M (m64nN layout)."""
    n = M.shape[1]
    return {(w, lane): {i: M[acc_coord(w, lane, i)] for i in range(n // 2)} for w in range(4) for lane in range(32)}


def a_from_regs(regs_of, k8):
    """The [64 x 8] A operand of k8 step kk given each thread's 4 registers (regs_of(w, lane) -> list)."""
    A = np.zeros((64, 8), dtype=np.int64)
    for w in range(4):
        for lane in range(32):
            regs = regs_of(w, lane)
            for reg in range(4):
                A[a_coord(w, lane, reg)] = regs[reg]
    return A


def check(seed, order=(0, 2, 1, 3), perm_qt=True, ds_rows_q=True):
    rng = np.random.default_rng(seed)
    r = lambda *s: rng.integers(-4, 5, size=s).astype(np.int64)
    K, Q, dO, P, dS = r(KBK, KD), r(KBQ, KD), r(KBQ, KD), r(64, KBQ), r(64, KBQ)  # P, dS: [keys x queries]
    c = int(rng.integers(0, 2))  # the consumer
    base = 1024 * 3
    kK = 0
    kKT = kK + 2 * KBK * KD * 4  # after K and V
    kSt = kKT + KD * KBK * 4
    kQr, kDOT = 0, 2 * KBQ * KD * 4 + KBQ * KD * 4
    kDs = kSt + 2 * 4 * KBQ * KD * 4 + c * KBQ * 64 * 4
    mem = {}
    tma_rows(mem, base + kK, KBK, KD, lambda row, col: int(K[row, col]))
    tma_rows(mem, base + kSt + kQr, KBQ, KD, lambda row, col: int(Q[row, col]))
    # KT [64 d x keys] in the workspace, 4 boxes of 32 keys; QT / dOT [64 d x 32 q] with queries permuted.
    for pn in range(KBK // 32):
        tma_box(mem, base + kKT + pn * KD * 128, KD, lambda d, u, pn=pn: int(K[32 * pn + u, d]))
    pos = tf32_kperm_inv if perm_qt else (lambda u: u)
    tma_box(mem, base + kSt + kDOT, KD, lambda d, u: int(dO[pos(u), d]))
    ok = {}
    Kc = K[64 * c:64 * c + 64]
    # S^T = K_c Q^T, SS and RS.
    k_rows = base + kK + c * 64 * 128
    S_ss = sum(kmajor_a(mem, k_rows + (k // 4) * KBK * 128 + (k % 4) * 32) @
               kmajor_b(mem, base + kSt + kQr + (k // 4) * KBQ * 128 + (k % 4) * 32, KBQ) for k in range(KD // 8))
    ok["S^T SS"] = (S_ss == Kc @ Q.T).all()

    def kf(w, lane, k):
        g, t = lane % 32 // 4, lane % 4
        key_l = (16 * w + g, 16 * w + g + 8)
        return [mem[k_rows + swz128_offset_f32(KBK, key_l[x & 1], 8 * k + t + 4 * (x >> 1))] for x in range(4)]
    S_rs = sum(a_from_regs(lambda w, lane, k=k: kf(w, lane, k), 8) @
               kmajor_b(mem, base + kSt + kQr + (k // 4) * KBQ * 128 + (k % 4) * 32, KBQ) for k in range(KD // 8))
    ok["S^T RS"] = (S_rs == Kc @ Q.T).all()
    # dV = P^T dO: A = pack_p_step(order) of P^T's accumulators, B = dOT.
    pacc = acc_of(P)
    dV = sum(a_from_regs(lambda w, lane, kk=kk: [pacc[(w, lane)][4 * kk + order[x]] for x in range(4)], 8) @
             kmajor_b(mem, base + kSt + kDOT + kk * 32, KD) for kk in range(KBQ // 8))
    ok["dV"] = (dV == P @ dO).all()
    # dQ^T = K_c^T dS^T: dS stored by the consumers, A = KT panels 2c, 2c + 1.
    dsacc = acc_of(dS)
    for (w, lane), regs in dsacc.items():
        g, t = lane // 4, lane % 4
        key_l = (16 * w + g, 16 * w + g + 8)
        for kk in range(KBQ // 8):
            for x in range(4):  # pack_p_step's da[kk][x] = element 4kk + (0, 2, 1, 3)[x]
                q, key = 8 * kk + 2 * t + (x >> 1), key_l[x & 1]
                v = regs[4 * kk + (0, 2, 1, 3)[x]]
                off = swz128_offset_f32(KBQ, q, key) if ds_rows_q else swz128_offset_f32(64, key, q)
                mem[base + kDs + off] = v  # swz128_offset_f32 includes the swizzle (1024-aligned tile)
    kt_c = base + kKT + 2 * c * KD * 128
    dQT = sum(kmajor_a(mem, kt_c + (k // 4) * KD * 128 + (k % 4) * 32) @
              kmajor_b(mem, base + kDs + (k // 4) * KBQ * 128 + (k % 4) * 32, KBQ) for k in range(64 // 8))
    ok["dQ^T"] = (dQT == Kc.T @ dS).all()
    # Variant 3: the staging block (float4 j * 128 + tid = dqt[4j .. 4j + 3]) and the convert kernel's reading.
    qacc = acc_of(dQT)
    stage = np.zeros(KBQ * KD, dtype=np.int64)
    for (w, lane), regs in qacc.items():
        tid = 32 * w + lane
        for j in range(KBQ // 8):
            stage[4 * (j * 128 + tid):4 * (j * 128 + tid) + 4] = [regs[4 * j + e] for e in range(4)]
    tile = np.zeros((KBQ, KD), dtype=np.int64)
    for f in range(512):
        j, tid = f // 128, f % 128
        d0, q0 = 16 * (tid // 32) + (tid % 32) // 4, 8 * j + 2 * (tid % 4)
        v = stage[4 * f:4 * f + 4]
        tile[q0, d0], tile[q0 + 1, d0], tile[q0, d0 + 8], tile[q0 + 1, d0 + 8] = v
    ok["dQ frag order"] = (tile == dQT.T).all()
    return ok


# ---- flash_bwd_sm90_tf32_d128.cu (head dim 128, 64 keys per CTA, K^T fragments loaded from the K tile) ----
def check_d128(seed, kt_swap=False, kt_rows=0):
    """One consumer's unit at head dim 128: S^T SS (A = the K tile's 4 panels of 64 rows, B = Qr's 4 panels of 32
    rows), dV RS with N = 128 (B = dOT, one panel of 128 rows), dQ^T in two M = 64 halves of d by RS with A = K^T's
    fragments read from the K tile (kt_swap: row and column of the fragment read swapped, a mutant). kt_rows: dQ
    mode 4's form (kKtRows): step k's word read at step 0's address plus kt_rows * k bytes (1024; other values are
    mutants)."""
    D, BK, BQ = 128, 64, 32
    rng = np.random.default_rng(seed)
    K = rng.integers(-8, 8, size=(BK, D))
    Q = rng.integers(-8, 8, size=(BQ, D))
    dO = rng.integers(-8, 8, size=(BQ, D))
    P = rng.integers(-8, 8, size=(BK, BQ))
    dS = rng.integers(-8, 8, size=(BK, BQ))
    base = 1 << 20
    kK, kSt = 0, 2 * BK * D * 4
    kQr, kDOT = 0, 2 * BQ * D * 4 + BQ * D * 4
    kDs = kSt + 2 * 4 * BQ * D * 4
    mem = {}
    tma_rows(mem, base + kK, BK, D, lambda row, col: int(K[row, col]))
    tma_rows(mem, base + kSt + kQr, BQ, D, lambda row, col: int(Q[row, col]))
    tma_box(mem, base + kSt + kDOT, D, lambda d, u: int(dO[tf32_kperm_inv(u), d]))
    ok = {}
    S = sum(kmajor_a(mem, base + kK + (k // 4) * BK * 128 + (k % 4) * 32) @
            kmajor_b(mem, base + kSt + kQr + (k // 4) * BQ * 128 + (k % 4) * 32, BQ) for k in range(D // 8))
    ok["d128 S^T SS"] = (S == K @ Q.T).all()
    pacc = acc_of(P)
    dV = sum(a_from_regs(lambda w, lane, kk=kk: [pacc[(w, lane)][4 * kk + (0, 2, 1, 3)[x]] for x in range(4)], 8) @
             kmajor_b(mem, base + kSt + kDOT + kk * 32, D) for kk in range(BQ // 8))
    ok["d128 dV (N = 128)"] = (dV == P @ dO).all()
    dsacc = acc_of(dS)
    for (w, lane), regs in dsacc.items():
        g, t = lane // 4, lane % 4
        key_l = (16 * w + g, 16 * w + g + 8)
        for kk in range(BQ // 8):
            for x in range(4):
                q, key = 8 * kk + 2 * t + (x >> 1), key_l[x & 1]
                mem[base + kDs + swz128_offset_f32(BQ, q, key)] = regs[4 * kk + (0, 2, 1, 3)[x]]
    halves = []
    for m in range(2):
        def af(w, lane, k, m=m):
            g, t = lane % 32 // 4, lane % 4
            key_l = (16 * w + g, 16 * w + g + 8)
            out = []
            for x in range(4):
                key, d = 8 * k + t + 4 * (x >> 1), 64 * m + key_l[x & 1]
                if kt_swap:
                    key, d = key_l[x & 1], 64 * m + 8 * k + t + 4 * (x >> 1)
                if kt_rows:
                    out.append(mem[base + kK + swz128_offset_f32(BK, t + 4 * (x >> 1), d) + kt_rows * k])
                else:
                    out.append(mem[base + kK + swz128_offset_f32(BK, key, d)])
            return out
        halves.append(sum(a_from_regs(lambda w, lane, k=k: af(w, lane, k), 8) @
                          kmajor_b(mem, base + kDs + (k // 4) * BQ * 128 + (k % 4) * 32, BQ) for k in range(BK // 8)))
    ok["d128 dQ^T (K^T fragments)"] = (np.vstack(halves) == K.T @ dS).all()
    return ok


# ---- flash_bwd_sm90_tf32_d256.cu (head dim 256; first run on an H100 on 2026-12-07): its layouts ---------------
# 64 keys per CTA, 32-query units, every product's B operand with 128-byte rows (the layouts above, which the H200 ran):
#   S^T  = K Q^T    [64 keys x 32 q]  SS over 32 k8 steps (A = K's 8 panels of 64 rows, B = Qr's 8 panels of 32 rows)
#   dP^T = V dO^T   the same with V and dOr
#   P^T, dS^T       stored by the threads from those accumulators as [64 keys x 32 q] tiles (one panel), dS as
#                   [32 q x 64 keys] (two panels, as the head-dim-128 kernel's)
#   dV^T = dO^T P   [256 d x 64 keys] in 4 M = 64 panels of d, RS: A = dO^T's fragments read from the dOr tile by
#                   ld.shared (as the head-dim-128 kernel reads K^T's from the K tile), B = the P^T tile
#   dK^T = Q^T dS   the same with Qr and the dS^T tile
#   dQ^T = K^T dS^T [256 d x 32 q] in 4 panels, A = K^T's fragments from the K tile, B = dS (as at 128)
# so no Q^T / dO^T copies (QT, dOT: 64-byte rows at 16-query units, or no room at 32) and no product computed twice
# (the two consumer warpgroups would split S^T / dP^T and the d panels of the rest). D256_PLAN_SMEM: the shared memory
# of one stage (K, V, Qr, dOr, the three thread-written tiles, the rows warp's words, 9 barriers, alignment slack).
D256_PLAN_SMEM = dict(K=64 * 256 * 4, V=64 * 256 * 4, Qr=32 * 256 * 4, dOr=32 * 256 * 4, PT=64 * 32 * 4,
                      dST=64 * 32 * 4, dS=32 * 64 * 4, rows=5 * 32 * 4, bars=9 * 8, slack=1024)


def check_d256_plan(seed, pt_as_ds=False, unswizzled_frags=False):
    """The plan's products at head dim 256, multiplied out from the addresses each operand would be read at.
    Mutants: pt_as_ds (P^T / dS^T stored in dS's [q][keys] layout), unswizzled_frags (dO^T / Q^T / K^T fragments read
    at the address without the 128-byte swizzle)."""
    D, BK, BQ = 256, 64, 32
    rng = np.random.default_rng(seed)
    r = lambda *sh: rng.integers(-8, 8, size=sh).astype(np.int64)
    K, V, Q, dO = r(BK, D), r(BK, D), r(BQ, D), r(BQ, D)
    Pt, dSt = r(BK, BQ), r(BK, BQ)  # P^T, dS^T [keys x queries]
    base = 1 << 22
    off, lay = 0, {}
    for name in ("K", "V", "Qr", "dOr", "PT", "dST", "dS"):
        lay[name] = base + off
        off += D256_PLAN_SMEM[name]
        assert lay[name] % 1024 == 0
    mem = {}
    for name, M, rows in (("K", K, BK), ("V", V, BK), ("Qr", Q, BQ), ("dOr", dO, BQ)):
        tma_rows(mem, lay[name], rows, D, lambda row, col, M=M: int(M[row, col]))
    ok = {}
    for name, A, B, want in (("S^T", "K", "Qr", K @ Q.T), ("dP^T", "V", "dOr", V @ dO.T)):
        got = sum(kmajor_a(mem, lay[A] + (k // 4) * BK * 128 + (k % 4) * 32) @
                  kmajor_b(mem, lay[B] + (k // 4) * BQ * 128 + (k % 4) * 32, BQ) for k in range(D // 8))
        ok[f"d256 plan {name} SS"] = (got == want).all()
    # The thread-written tiles, element by element from the m64n32 accumulators.
    for name, M in (("PT", Pt), ("dST", dSt)):
        for (w, lane), regs in acc_of(M).items():
            for i, v in regs.items():
                key, q = acc_coord(w, lane, i)
                mem[lay[name] + (swz128_offset_f32(BQ, q, key) if pt_as_ds else swz128_offset_f32(BK, key, q))] = v
    for (w, lane), regs in acc_of(dSt).items():
        for i, v in regs.items():
            key, q = acc_coord(w, lane, i)
            mem[lay["dS"] + swz128_offset_f32(BQ, q, key)] = v

    def frag(tile, rows, p, k):  # the m64k8 A fragment of M^T, M [rows x D] at tile: row d = 64p + m, column 8k + u
        def regs(w, lane):
            out = []
            for reg in range(4):
                m, u = a_coord(w, lane, reg)
                o = swz128_offset_f32(rows, 8 * k + u, 64 * p + m)
                if unswizzled_frags:
                    row, col = 8 * k + u, 64 * p + m
                    o = (col >> 5) * rows * 128 + row * 128 + (col & 31) * 4
                out.append(mem[tile + o])
            return out
        return a_from_regs(regs, 8)
    for name, A, rows, B, n, want in (("dV^T", "dOr", BQ, "PT", BK, dO.T @ Pt.T), ("dK^T", "Qr", BQ, "dST", BK, Q.T @ dSt.T)):
        panels = [sum(frag(lay[A], rows, p, k) @ kmajor_b(mem, lay[B] + k * 32, n) for k in range(BQ // 8)) for p in range(4)]
        ok[f"d256 plan {name} (A by ld.shared)"] = (np.vstack(panels) == want).all()
    panels = [sum(frag(lay["K"], BK, p, k) @ kmajor_b(mem, lay["dS"] + (k // 4) * BQ * 128 + (k % 4) * 32, BQ)
                  for k in range(BK // 8)) for p in range(4)]
    ok["d256 plan dQ^T (K^T by ld.shared)"] = (np.vstack(panels) == K.T @ dSt).all()
    total = sum(D256_PLAN_SMEM.values())
    ok["d256 plan shared memory (one stage) <= 227 KiB"] = total <= 227 * 1024
    ok["d256 plan: a second Qr / dOr stage does not fit"] = total + 2 * 32 * 256 * 4 > 227 * 1024
    return ok


# ---- The index masks: which units a key tile visits (Units) and the P pass's rule (the rows warp's [kb, ke),
# key_ok, a warp's need_mask = tf32_bwd_needs_mask: not all its 16 keys pass key_ok, or the rows warp's word 4
# says some row does not see the whole group), against the visibility of every element written plainly. Mutants:
# mut = "hi_j0" (window-left bound from j0, not the tile's last key), "lo_plus1" (causal bound one row late),
# "no_kvalid" (key_ok without the [B, Tk] mask), "ke_tk" (the rows' key end from Tk, not the key length, and
# key_ok without the key length), "whole_half" (word 4 checks only half of each group's keys). "tile_in_range"
# (tile_in_range per 64 keys: the head-dim-64 kernel's former rule, the head-dim-128 kernel's) must stay exact too.
def units_model(m, qlim, klim, j0, mut=None, bk=KBK):
    """Units(sh, m, qlim, klim, j0) (Tf32BwdUnits<bk, 32>): the query tiles [qb_lo, qb_lo + nq) of one head."""
    off = m["off"]
    lo, hi = 0, qlim
    if m["causal"] and j0 - off > lo:
        lo = j0 - off + (1 if mut == "lo_plus1" else 0)
    if m["wr"] >= 0 and j0 - off - m["wr"] > lo:
        lo = j0 - off - m["wr"]
    j_last = (j0 if mut == "hi_j0" else min(j0 + bk, klim) - 1)
    if m["wl"] >= 0 and m["wl"] < hi - (j_last - off + 1):
        hi = j_last - off + 1 + m["wl"]
    if j0 >= klim or hi <= lo:
        return range(0)
    return range(lo // KBQ, (hi + KBQ - 1) // KBQ)


def key_begin(m, i):
    return 0 if m["wl"] < 0 else max(0, i + m["off"] - m["wl"])


def key_end(m, i, klim):
    hi = klim
    if m["causal"]:
        hi = min(hi, i + m["off"] + 1)
    if m["wr"] >= 0:
        hi = min(hi, i + m["off"] + m["wr"] + 1)
    return max(hi, 0)


def tile_in_range(m, i0, rows, j0, cols, qlim, klim):
    if m["qvalid"] is not None or m["kvalid"] is not None:
        return False
    if i0 + rows > qlim or j0 + cols > klim:
        return False
    if not m["causal"] and m["wl"] < 0 and m["wr"] < 0:
        return True
    return key_begin(m, i0 + rows - 1) <= j0 and key_end(m, i0, klim) >= j0 + cols


def random_masks(rng, tmax, wmax):
    """(m, Tq, Tk, qlim, klim): a random configuration of one batch (T up to tmax, windows up to wmax, lengths,
    causal with any offset), without [B, T] masks (check_masks draws those next)."""
    Tq, Tk = int(rng.integers(1, tmax)), int(rng.integers(1, tmax))
    m = dict(causal=bool(rng.integers(2)), off=int(rng.integers(-Tq, Tk + 1)),
             wl=int(rng.choice([-1, rng.integers(0, wmax)])), wr=int(rng.choice([-1, rng.integers(0, wmax)])),
             qvalid=None, kvalid=None)
    qlim = int(rng.integers(0, Tq + 1)) if rng.integers(2) else Tq
    klim = int(rng.integers(0, Tk + 1)) if rng.integers(2) else Tk
    return m, Tq, Tk, qlim, klim


def check_masks(seed, mut=None):
    """One random mask configuration of one batch: the elements the kernel gives P != 0 (units visited, the
    per-element rule where need_mask) must be exactly the visible ones."""
    rng = np.random.default_rng(seed)
    m, Tq, Tk, qlim, klim = random_masks(rng, 700, 300)
    if rng.integers(2):
        m["qvalid"] = rng.random(Tq) > 0.2
    if rng.integers(2):
        m["kvalid"] = np.ones(Tk, bool) if rng.integers(2) else rng.random(Tk) > 0.2
    i = np.arange(Tq)[:, None]
    j = np.arange(Tk)[None, :]
    d = i + m["off"]
    vis = (i < qlim) & (j < klim)
    if m["causal"]:
        vis &= j <= d
    if m["wl"] >= 0:
        vis &= j >= d - m["wl"]
    if m["wr"] >= 0:
        vis &= j <= d + m["wr"]
    if m["qvalid"] is not None:
        vis &= m["qvalid"][:, None]
    if m["kvalid"] is not None:
        vis &= m["kvalid"][None, :]
    got = np.zeros((Tq, Tk), bool)
    for j0 in range(0, Tk, KBK):
        for qb in units_model(m, qlim, klim, j0, mut):
            i0 = qb * KBQ
            rows = range(i0, min(i0 + KBQ, Tq))  # rows past Tq hold nothing (an empty key range)
            kbke = {}
            for r in range(i0, i0 + KBQ):  # the rows warp: a lane per row
                kb = ke = 0
                if r < qlim and (m["qvalid"] is None or m["qvalid"][r]):
                    lo, hi = key_begin(m, r) - j0, key_end(m, r, Tk if mut == "ke_tk" else klim) - j0
                    kb, ke = min(max(lo, 0), KBK), min(max(hi, 0), KBK)
                kbke[r] = (kb, ke)
            # Word 4: key group q (keys 16 q .. 16 q + 15 of the tile) whole in every row of the unit.
            whole = [all(kb <= 16 * q and (ke >= 16 * q + (8 if mut == "whole_half" else 16))
                         for kb, ke in kbke.values()) for q in range(KBK // 16)]

            def key_ok(key):
                return (key < klim or mut == "ke_tk") and (
                    m["kvalid"] is None or mut == "no_kvalid" or key >= Tk or m["kvalid"][key])

            for q in range(KBK // 16):  # a consumer warp's 16 keys (group 4c + warp)
                keys = [j0 + kl for kl in range(16 * q, 16 * q + 16)]
                warp_keys_ok = all(key_ok(key) for key in keys)  # __all_sync over the warp's threads
                if mut == "tile_in_range":  # the former rule, per consumer's 64 keys
                    need_mask = not tile_in_range(m, i0, KBQ, j0 + 64 * (q // 4), 64, qlim, klim)
                else:
                    need_mask = not warp_keys_ok or not whole[q]
                for kl, key in zip(range(16 * q, 16 * q + 16), keys):
                    if key >= Tk:
                        continue
                    for r in rows:
                        kb, ke = kbke[r]
                        got[r, key] = (not need_mask) or (key_ok(key) and kb <= kl < ke)
    return bool((got == vis).all())


def check_det_order(seed, bk, mut=None):
    """Deterministic mode's ordered dQ reduction (sm90_tf32_bwd.cuh, tf32_dq_det_warp) on one random mask
    configuration, key tiles of bk keys (128: the head-dim-64 kernel, 64: the head-dim-128 one): for every query
    tile, its contributors (the key tiles x whose units visit it) run the protocol in dispatch order x = 0, 1, ...:
    x waits for the counter to reach x when key tile x - 1 visits the same query tile (mut "always": whenever x > 0;
    "never": never), then publishes x + 1. True when no contributor waits forever and every contributor but the
    first waits for the one before it (so the adds happen in increasing x, whatever the timing)."""
    m, Tq, Tk, qlim, klim = random_masks(np.random.default_rng(seed), 1500, 400)  # ([B, T] masks: no unit changes)
    units = [set(units_model(m, qlim, klim, j0, bk=bk)) for j0 in range(0, Tk, bk)]
    for qb in range((Tq + KBQ - 1) // KBQ):
        contributors = [x for x, u in enumerate(units) if qb in u]
        counter = 0
        for n, x in enumerate(contributors):
            waits = {"always": x > 0, "never": False}.get(mut, x > 0 and qb in units[x - 1])
            if waits and counter < x:
                return False  # waits for a publish that never comes
            if n > 0 and not (waits and contributors[n - 1] == x - 1):
                return False  # not ordered after the contributor before it
            counter = max(counter, x + 1)
    return True


def check_dq_frag(hd, seed, kernel_sub=None):
    """The fragment-ordered dQ accumulator (the head-dim-64 kernel's variant 3, the head-dim-128 kernel's dQ modes
    kVec4 / kBulk, the head-dim-256 kernel's vec4 variants, where consumer c's panel pp is m = 2c + pp) against
    tf32_dq_frag_convert_kernel<hd> (sm90_tf32_bwd.cuh): a consumer thread tid's dQ^T accumulators of panel m (d 64 m
    .. 64 m + 63; hd = 64: m = 0) are x = 4j + 2h2 + e = (d 64 m + key_l[h2], q 8j +
    2t + e) of a wgmma m64n32 (key_l[h2] = 16 warp + g + 8 h2); the kernel adds float4 j * 128 + tid of sub-block m
    (float offset m * 2048) of the query tile's block. Random dQ^T values through the kernel's writes and the
    converter's reads must give back dQ[q][d] = dQ^T[d][q]. kernel_sub: a mutant's sub-block offset in floats."""
    rng = np.random.default_rng(seed)
    dqt = rng.standard_normal((hd, 32)).tolist()  # [d][q]
    blk = [None] * (32 * hd)
    for m in range(hd // 64):
        for tid in range(128):
            warp, lane = tid // 32, tid % 32
            g, t = lane // 4, lane % 4
            key_l = (16 * warp + g, 16 * warp + g + 8)
            for j in range(4):
                for x4 in range(4):
                    h2, e = x4 // 2, x4 % 2
                    d, q = 64 * m + key_l[h2], 8 * j + 2 * t + e
                    off = (m * 2048 if kernel_sub is None else m * kernel_sub) + (j * 128 + tid) * 4 + x4
                    if blk[off] is not None:
                        return False
                    blk[off] = dqt[d][q]
    if any(v is None for v in blk):
        return False
    tile = [[None] * hd for _ in range(32)]
    for mm in range(hd // 32):  # the converter's loads: float4 f = mm * 256 + threadIdx.x
        for th in range(256):
            f = mm * 256 + th
            sub, j, tid = f // 512, (f % 512) // 128, f % 128
            d0, q0 = 64 * sub + 16 * (tid // 32) + (tid % 32) // 4, 8 * j + 2 * (tid % 4)
            v = blk[4 * f: 4 * f + 4]
            tile[q0][d0], tile[q0 + 1][d0], tile[q0][d0 + 8], tile[q0 + 1][d0 + 8] = v
    return all(tile[q][d] == dqt[d][q] for q in range(32) for d in range(hd))


# ---- A dense mask, bias and dbias (sm90_tf32_bwd.cuh's Tf32BwdDense, tf32_bwd_dense_ds; both kernels'
# kTf32Dense instantiations): every consumer thread's element x of a unit's S^T, emulated as the kernels compute it
# (the load address with rows / keys clamped, the bias in base-2 units, the P pass's index rule, hide, dlogit, dbias's
# store and soft-cap's tanh recovered with the bias taken out), against P, dS and dbias written plainly in float64.
# Random broadcast strides (stride 0 over the batch, head or key), -inf biases (random elements and whole rows, lse
# = -inf there), NaN / +inf biases where the dense mask / the index masks hide the element; every load must stay
# inside its tensor and every dbias store inside [Tq, Tk]. Mutants: "no_bias" (add_bias skipped), "cap_no_shift"
# (tanh recovered without taking the bias out), "hide_mask_only" (no zero for a -inf bias), "no_clamp" (rows / keys
# past Tq / Tk read unclamped), "dbias_unbounded" (dbias stored past Tq / Tk too), "dbias_capped" (dbias = dS, times
# 1 - tanh^2) must fail.
LOG2E = 1.4426950408889634


def dense_operand(rng, shape, fill, bcast):
    """A [B, H, Tq, Tk] operand broadcast over the dimensions in bcast (stride 0): (flat array, strides)."""
    real = [1 if d in bcast else n for d, n in enumerate(shape)]
    strides, acc = [0] * 4, 1
    for d in reversed(range(4)):
        strides[d] = 0 if d in bcast else acc
        acc *= real[d]
    return fill(real).reshape(-1).copy(), strides


# A consumer warpgroup's accumulator elements of S^T (thread (w, lane), element x), as the dense code names them:
# key_l = 16 w + g + 8 ((x >> 1) & 1), query 8 (x >> 2) + 2 t + (x & 1).
_W, _LANE, _X = (a.reshape(-1) for a in np.meshgrid(np.arange(4), np.arange(32), np.arange(16), indexing="ij"))
_KEY_L = 16 * _W + _LANE // 4 + 8 * ((_X >> 1) & 1)
_Q = 8 * (_X >> 2) + 2 * (_LANE % 4) + (_X & 1)


def check_dense(seed, mut=None):
    """One random configuration of one (b, h): the kernels' elements against the plain P, dS, dbias."""
    if any(acc_coord(int(w), int(ln), int(x)) != (int(k), int(q))
           for w, ln, x, k, q in zip(_W, _LANE, _X, _KEY_L, _Q)):
        return False  # the dense code's element naming is not the accumulator's layout
    rng = np.random.default_rng(seed)
    B, H = 2, 3
    m, Tq, Tk, qlim, klim = random_masks(rng, 150, 60)
    cap = float(rng.choice([0.0, 5.0, 20.0]))
    scale = float(rng.uniform(0.05, 0.4))
    b, h = int(rng.integers(B)), int(rng.integers(H))
    shape = (B, H, Tq, Tk)
    bcast = lambda: set(rng.choice(4, int(rng.integers(0, 3)), replace=False).tolist())
    has_mask = bool(rng.integers(3))
    mask_f, ms = dense_operand(rng, shape, lambda sh: rng.random(sh) > 0.3, bcast())
    bias_f, bs = dense_operand(rng, shape, lambda sh: rng.standard_normal(sh) * 2, bcast())
    bias_f[rng.random(bias_f.size) < 0.1] = -np.inf
    i = np.arange(Tq)[:, None]
    j = np.arange(Tk)[None, :]
    bidx = b * bs[0] + h * bs[1] + i * bs[2] + j * bs[3]
    if rng.integers(2):  # a row of this head whose biases are all -inf (lse = -inf there)
        bias_f[bidx[int(rng.integers(Tq))]] = -np.inf
    mask = mask_f[b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3]] if has_mask else np.ones((Tq, Tk), bool)
    kb = np.array([key_begin(m, int(r)) for r in range(Tq)])[:, None]
    ke = np.array([key_end(m, int(r), klim) for r in range(Tq)])[:, None]
    index_vis = (j >= kb) & (j < ke) & (i < qlim) & (j < klim)
    # NaN where the dense mask hides the element, +inf where the index masks do: never used (only at bias elements
    # that no visible element of this (b, h) shares through a stride of 0)
    used = set(bidx[index_vis & mask].tolist())
    for (ii, jj) in zip(*np.nonzero(~(index_vis & mask))):
        if bidx[ii, jj] not in used:
            bias_f[bidx[ii, jj]] = np.nan if not mask[ii, jj] else np.inf
    bias = bias_f[bidx]
    vis = index_vis & mask & (bias != -np.inf)
    tk_pad, tq_pad = (Tk + 63) // 64 * 64, (Tq + 31) // 32 * 32
    S = np.zeros((tk_pad, tq_pad))  # S^T [keys x queries]; 0 past Tk / Tq (the zero-filled tiles)
    S[:Tk, :Tq] = rng.standard_normal((Tk, Tq)) * 4
    dP = np.zeros((tk_pad, tq_pad))
    dP[:Tk, :Tq] = rng.standard_normal((Tk, Tq))
    dsum = np.zeros(tq_pad)
    dsum[:Tq] = rng.standard_normal(Tq)
    # written plainly (float64)
    sc = scale * S[:Tk, :Tq].T
    if cap:
        sc = cap * np.tanh(sc / cap)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        logit = np.where(vis, sc + np.where(vis, bias, 0.0), -np.inf)
        mx = logit.max(1, keepdims=True)
        mx = np.where(np.isfinite(mx), mx, 0.0)
        den = np.exp(logit - mx).sum(1, keepdims=True)
        lse = np.where(den > 0, np.log(np.where(den > 0, den, 1.0)) + mx, -np.inf)[:, 0]
        P = np.where(vis, np.exp(logit - lse[:, None]), 0.0)
    dl_ref = P * (dP[:Tk, :Tq].T - dsum[:Tq, None])
    dS_ref = dl_ref * ((1 - np.tanh(scale * S[:Tk, :Tq].T / cap) ** 2) if cap else 1.0)
    lse2 = np.zeros(tq_pad)
    lse2[:Tq] = lse * LOG2E  # the rows warp's lse2 (rows past Tq: any finite value)
    sl2 = 1.0 if cap else scale * LOG2E
    # as the kernels compute it, every unit (32 queries) of every key tile (64 keys)
    P_k, dS_k, dbias = np.zeros((Tq, Tk)), np.zeros((Tq, Tk)), np.zeros((Tq, Tk))
    stored = np.zeros((Tq, Tk), bool)
    qkb = np.array([key_begin(m, int(r)) for r in range(tq_pad)])
    qke = np.array([key_end(m, int(r), klim) for r in range(tq_pad)])
    for j0 in range(0, tk_pad, 64):
        for i0 in range(0, tq_pad, 32):
            kg, iq, q = j0 + _KEY_L, i0 + _Q, _Q
            r, kc = (iq, kg) if mut == "no_clamp" else (np.minimum(iq, Tq - 1), np.minimum(kg, Tk - 1))
            mi = b * ms[0] + h * ms[1] + r * ms[2] + kc * ms[3]
            bi = b * bs[0] + h * bs[1] + r * bs[2] + kc * bs[3]
            if (has_mask and not ((mi >= 0) & (mi < mask_f.size)).all()) or not ((bi >= 0) & (bi < bias_f.size)).all():
                return False  # a load outside its tensor
            mv = mask_f[mi] if has_mask else np.ones(kg.shape, bool)
            bv = bias_f[bi]
            sv = S[kg, iq]
            with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
                if cap:  # Tf32BwdCap::cap: base-2 units
                    sv = cap * LOG2E * np.tanh(sv * scale / cap)
                sv = sv * sl2 if mut == "no_bias" else bv * LOG2E + sv * sl2  # add_bias
                pv = np.exp2(sv - lse2[iq])  # the P pass (scale 1)
                # its index rule: the row's [kb, ke) relative to j0 (empty past qlim) and key_ok
                rkb = np.where(iq < qlim, np.clip(qkb[iq] - j0, 0, 64), 0)
                rke = np.where(iq < qlim, np.clip(qke[iq] - j0, 0, 64), 0)
                pv = np.where((kg < klim) & (_KEY_L >= rkb) & (_KEY_L < rke), pv, 0.0)
                pv = np.where(~mv | ((bv == -np.inf) & (mut != "hide_mask_only")), 0.0, pv)  # hide
                dl = pv * (dP[kg, iq] - dsum[iq])  # tf32_bwd_dense_ds
                inside = (q < Tq - i0) & (kg < Tk)
                st = np.ones(kg.shape, bool) if mut == "dbias_unbounded" else inside
                if (st & ~((iq < Tq) & (kg < Tk))).any():
                    return False  # a dbias store outside [Tq, Tk]
                if mut != "dbias_capped":
                    dbias[iq[st], kg[st]] = dl[st]
                    stored[iq[st], kg[st]] = True
                if cap:
                    shift = 0.0 if mut == "cap_no_shift" else LOG2E * bv
                    th = (np.log2(pv) + lse2[iq] - shift) / (cap * LOG2E)
                    dl = dl * np.where(pv > 0, 1 - th * th, 1.0)
                if mut == "dbias_capped":
                    dbias[iq[st], kg[st]] = dl[st]
                    stored[iq[st], kg[st]] = True
            if (pv[~inside] != 0).any() or not np.isfinite(dl[~inside]).all():
                return False  # a padded element with P != 0
            P_k[iq[inside], kg[inside]] = pv[inside]
            dS_k[iq[inside], kg[inside]] = dl[inside]
    close = lambda a, c: bool(np.isfinite(a).all() and np.allclose(a, c, rtol=1e-9, atol=1e-12))
    return (close(P_k, P) and close(dS_k, dS_ref) and close(dbias, dl_ref) and bool(stored.all())
            and bool((dbias[~vis] == 0).all()))


def main():
    fails = 0
    for seed in range(4):
        res = check(seed)
        bad = [k for k, v in res.items() if not v]
        fails += len(bad)
        print(f"seed {seed}: " + ", ".join(f"{k} {'OK' if v else 'WRONG'}" for k, v in res.items()))
    mutants = {"the other register order": dict(order=(0, 1, 2, 3)), "Q^T / dO^T unpermuted": dict(perm_qt=False),
               "dS stored [keys][queries]": dict(ds_rows_q=False)}
    for name, kw in mutants.items():
        res = check(0, **kw)
        caught = not all(res.values())
        fails += not caught
        print(f"mutant {name}: {'caught' if caught else 'NOT CAUGHT (model too weak)'}")
    for seed in range(2):
        res = check_d128(seed)
        fails += sum(not v for v in res.values())
        print(f"d128 seed {seed}: " + ", ".join(f"{k} {'OK' if v else 'WRONG'}" for k, v in res.items()))
    caught = not all(check_d128(0, kt_swap=True).values())
    fails += not caught
    print(f"d128 mutant K^T fragments transposed: {'caught' if caught else 'NOT CAUGHT (model too weak)'}")
    for seed in range(2):
        res = check_d128(seed, kt_rows=1024)
        fails += sum(not v for v in res.values())
        print(f"d128 dQ mode 4 (K^T from row addresses + 1024 k) seed {seed}: "
              + ", ".join(f"{k} {'OK' if v else 'WRONG'}" for k, v in res.items()))
    caught = not all(check_d128(0, kt_rows=512).values())
    fails += not caught
    print(f"d128 mutant row addresses + 512 k: {'caught' if caught else 'NOT CAUGHT (model too weak)'}")
    for seed in range(2):
        res = check_d256_plan(seed)
        fails += sum(not v for v in res.values())
        print(f"d256 plan seed {seed}: " + ", ".join(f"{k} {'OK' if v else 'WRONG'}" for k, v in res.items()))
    for name, kw in (("P^T / dS^T stored as [q][keys]", dict(pt_as_ds=True)),
                     ("fragments read unswizzled", dict(unswizzled_frags=True))):
        caught = not all(check_d256_plan(0, **kw).values())
        fails += not caught
        print(f"d256 plan mutant {name}: {'caught' if caught else 'NOT CAUGHT (model too weak)'}")
    for hd in (64, 128, 256):
        ok = all(check_dq_frag(hd, sd) for sd in range(3))
        fails += not ok
        print(f"dQ fragment-ordered accumulator, head dim {hd}: {'OK' if ok else 'WRONG'}")
    caught = not check_dq_frag(128, 0, kernel_sub=1024)
    fails += not caught
    print(f"dQ fragment mutant sub-block offset 1024: {'caught' if caught else 'NOT CAUGHT (model too weak)'}")
    nmask = 300
    bad = [sd for sd in range(nmask) if not check_masks(sd)]
    fails += len(bad)
    print(f"index masks: {nmask - len(bad)} / {nmask} random configurations exact" + (f", WRONG: {bad[:10]}" if bad else ""))
    bad = [sd for sd in range(nmask) if not check_masks(sd, "tile_in_range")]
    fails += len(bad)
    print(f"index masks, tile_in_range per 64 keys: {nmask - len(bad)} / {nmask} exact")
    for mut in ("hi_j0", "lo_plus1", "no_kvalid", "ke_tk", "whole_half"):
        caught = not all(check_masks(sd, mut) for sd in range(nmask))
        fails += not caught
        print(f"mask mutant {mut}: {'caught' if caught else 'NOT CAUGHT (model too weak)'}")
    ndet = 300
    for bk in (128, 64):
        bad = [sd for sd in range(ndet) if not check_det_order(sd, bk)]
        fails += len(bad)
        print(f"deterministic dQ order, {bk}-key tiles: {ndet - len(bad)} / {ndet} random configurations exact"
              + (f", WRONG: {bad[:10]}" if bad else ""))
        for mut in ("always", "never"):
            caught = not all(check_det_order(sd, bk, mut) for sd in range(ndet))
            fails += not caught
            print(f"deterministic order mutant {mut} ({bk}-key tiles): {'caught' if caught else 'NOT CAUGHT (model too weak)'}")
    ndense = 40
    bad = [sd for sd in range(ndense) if not check_dense(sd)]
    fails += len(bad)
    print(f"dense mask / bias / dbias elements: {ndense - len(bad)} / {ndense} random configurations exact"
          + (f", WRONG: {bad[:10]}" if bad else ""))
    for mut in ("no_bias", "cap_no_shift", "hide_mask_only", "no_clamp", "dbias_unbounded", "dbias_capped"):
        caught = not all(check_dense(sd, mut) for sd in range(ndense))
        fails += not caught
        print(f"dense mutant {mut}: {'caught' if caught else 'NOT CAUGHT (model too weak)'}")
    print("ALL CHECKS PASS" if fails == 0 else f"{fails} CHECKS FAILED")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
