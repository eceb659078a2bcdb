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
Mutants (the other register order, unpermuted Q^T / dO^T, dS stored transposed) must fail. The constants and
formulas mirror the kernel's; change them together.
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
    print("ALL CHECKS PASS" if fails == 0 else f"{fails} CHECKS FAILED")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
