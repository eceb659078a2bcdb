"""Host-side models of the Hopper TF32 forward (cc/kernels/sm90/flash_fwd_sm90_tf32.cu), no GPU needed:

  python3 benchmarks/sm90_tf32_model.py [--schedules N]

1. Shared-memory addresses of every wgmma .tf32 form the kernel issues (S = Q K^T: A = Q, B = K; O += P V:
   B = V^T) as the hardware reads a K-major 128-byte-swizzled operand from a descriptor (start address
   with the k8 step's +32 bytes, SBO = 1024 to the next 8 rows; row r of an 8-row group at r * 128, the
   16-byte chunk bits [4:6] of the address XORed with bits [7:9]; the same reading of the descriptor
   that the 16-bit kernels' k16 steps rely on and that the H200 confirmed for them) against what TMA
   writes (box {32 floats, rows}, 1024-aligned panels) and what the transposer warps write
   (transpose_v_tile: keys permuted by tf32_kperm).
2. The register A fragment of O += P V (and of S = Q K^T in variants 1 / 2, Q's fragments loaded by
   load_q_frags): the S accumulator layout (lane 4g + t holds d[4j + 2h + e] =
   S[16w + g + 8h][8j + 2t + e]), pack_p_step's order {c0, c2, c1, c3}, the m64k8 .tf32 A layout (a0
   (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)) and the V^T descriptor reads, multiplied out
   on random integers against P V; the other register order {c0, c1, c2, c3} must fail (the self-test's
   diagnostic).
3. The mbarrier protocol of producer / transposers / consumers under random interleavings: no deadlock,
   no buffer (raw V, K[s], V^T[s]) written before every read of its previous tile is done, no read of
   a tile before all its writes are done, no wait on a phase the barrier has already run past (parity
   ambiguity). Mutant protocols (each with one wait left out) must be caught.
4. Variant 3 (opt-in, UNTESTED ON A GPU): the pre-pass's workspace layout (Kr [B, Tk, Hkv, D]; VT [B, Hkv,
   D, tk_pad] with keys permuted by tf32_kperm within 8-key groups, 0 past Tk) and the producer's TMA
   boxes {32 positions, D rows, 1, 1} of VT (tf32_prepass_maps): the V^T tile in shared memory must equal, address for
   address, what the transposer writes from variant 0's TMA-loaded raw V (ragged Tk included); K's
   tile from Kr must equal variant 0's K tile after its in-place rounding (same addresses). And its
   barrier protocol (producer: K_n after k_empty of n - 2, V_n^T after vt_empty of n - 2; consumers:
   k_full before S, vt_full before P V) under random interleavings, with mutants. (Variant 3 has run on the H200
   and H100 since; the note above is this model's first use.)
5. Head dim 256 with two consumer warpgroups (FA_SM90_TF32_D256_WG=2, the default since its H100 run in session 66): variant 3's protocol
   with one V^T stage (V_n^T after vt_empty of n - 1), the same checks and mutants (leaving out the producer's
   k_empty wait is no hazard there: its V^T wait of the tile before implies it, and the model must not flag it), and
   Tf32Smem<256>'s layout for one and two warpgroups (aligned, disjoint, 230,488 bytes).
The constants and formulas mirror the kernel's; change them together. --cxx FILE compares them with the
kernel file's own functions (the output of benchmarks/sm90_tf32_xcheck.cu, which says how to build it).
"""
import argparse
import random
import sys

import numpy as np

KBR, KBC, STAGES = 128, 64, 2


# ---- Layouts (the kernel's functions, transcribed) -------------------------------------------------
def swz128_offset_f32(R, r, col):
    return (col >> 5) * R * 128 + r * 128 + ((((col & 31) >> 2) ^ (r & 7)) << 4) + (col & 3) * 4


def tf32_kperm(j):
    return (j & ~7) | ((j & 1) << 2) | ((j & 7) >> 1)


def swizzle_addr(a):
    """The 128-byte swizzle on an absolute shared-memory byte address (1024-aligned atoms)."""
    return a ^ (((a >> 7) & 7) << 4)


def tma_write(mem, dst, rows, D, value):
    """TMA of a [rows x D] float32 tile as boxes {32, 1, rows, 1}: panel j at dst + j * rows * 128, each
    box row 128 contiguous bytes before the swizzle; mem: dict byte address -> value tag."""
    for j in range(D // 32):
        panel = dst + j * rows * 128
        assert panel % 1024 == 0
        for r in range(rows):
            for c in range(32):
                mem[swizzle_addr(panel + r * 128 + c * 4)] = value(r, 32 * j + c)


def descriptor_read(mem, start, sbo, rows, k8):
    """What wgmma reads for a K-major operand: element (row r, k) of a k8 step whose descriptor starts at
    `start` (32-bit elements)."""
    out = {}
    for r in range(rows):
        for k in range(k8):
            a = start + (r // 8) * sbo + (r % 8) * 128 + k * 4
            out[(r, k)] = mem.get(swizzle_addr(a), None)
    return out


def kmajor_b(mem, start, n):
    """The [8 x n] B operand (k, column) of one k8 step read through a K-major descriptor (SBO 1024) at
    `start`, as a matrix."""
    B = descriptor_read(mem, start, 1024, n, 8)
    return np.array([[B[(col, u)] for col in range(n)] for u in range(8)], dtype=np.int64)


def transpose_v_tile(mem, vt, vraw, DV):
    """transpose_v_tile<DV>: reads the raw tile at vraw + swz128_offset_f32(KBC, key, d), stores keys
    (0, 2, 4, 6) of each 8-key group at positions 0..3 and (1, 3, 5, 7) at 4..7 (two 16-byte chunks)."""
    for kg in range(KBC // 8):
        for d in range(DV):
            x = [mem[vraw + swz128_offset_f32(KBC, 8 * kg + e, d)] for e in range(8)]
            a0 = vt + swz128_offset_f32(DV, d, 8 * kg)
            a1 = vt + swz128_offset_f32(DV, d, 8 * kg + 4)
            assert a0 % 16 == 0 and a1 % 16 == 0
            for i in range(4):
                mem[a0 + 4 * i] = x[2 * i]
                mem[a1 + 4 * i] = x[2 * i + 1]


def check_layouts():
    fails = 0
    for D in (64, 128):
        # Tf32Smem<D>
        qb, kvb = KBR * D * 4, KBC * D * 4
        kQ, kK = 0, qb
        kVRaw = kK + STAGES * kvb
        kVT = kVRaw + kvb
        base = 1024 * 7  # any 1024-aligned base
        mem = {}
        tma_write(mem, base + kQ, KBR, D, lambda r, c: ("Q", r, c))
        for s in range(STAGES):
            tma_write(mem, base + kK + s * kvb, KBC, D, lambda r, c, s=s: ("K", s, r, c))
        tma_write(mem, base + kVRaw, KBC, D, lambda r, c: ("V", r, c))
        # The raw tile as the transposer reads it (swz128_offset_f32 from the tile's base) equals TMA's.
        for key in range(KBC):
            for d in range(D):
                if mem[base + kVRaw + swz128_offset_f32(KBC, key, d)] != ("V", key, d):
                    fails += 1
        for s in range(STAGES):
            transpose_v_tile(mem, base + kVT + s * kvb, base + kVRaw, D)
        # S = Q K^T: the k-th k8 step of consumer c.
        for c in range(2):
            q_tile = base + kQ + c * 64 * 128
            for k in range(D // 8):
                koff = (k % 4) * 32
                A = descriptor_read(mem, q_tile + (k // 4) * KBR * 128 + koff, 1024, 64, 8)
                for (r, kk), v in A.items():
                    if v != ("Q", c * 64 + r, 8 * k + kk):
                        fails += 1
        for s in range(STAGES):
            k_tile = base + kK + s * kvb
            for k in range(D // 8):
                B = descriptor_read(mem, k_tile + (k // 4) * KBC * 128 + (k % 4) * 32, 1024, KBC, 8)
                for (n, kk), v in B.items():
                    if v != ("K", s, n, 8 * k + kk):
                        fails += 1
        # O += P V: B = V^T, step kk; A column u is key 8kk + 2u (u < 4) or 8kk + 2(u - 4) + 1.
        for s in range(STAGES):
            vt = base + kVT + s * kvb
            for kk in range(KBC // 8):
                B = descriptor_read(mem, vt + (kk // 4) * D * 128 + (kk % 4) * 32, 1024, D, 8)
                for (n, u), v in B.items():
                    key = 8 * kk + (2 * u if u < 4 else 2 * (u - 4) + 1)
                    if v != ("V", key, n):
                        fails += 1
        # vt_offset (the self-test's read-back) is where the transposer put (d, key).
        for d in range(D):
            for key in range(KBC):
                if mem[base + kVT + swz128_offset_f32(D, d, tf32_kperm(key))] != ("V", key, d):
                    fails += 1
        # The buffers do not overlap and fit.
        total = kVT + STAGES * kvb + 24 + 8 * 4 * STAGES + 1024
        print(f"layout D={D}: shared memory {total} B ({'fits' if total <= 227 * 1024 else 'DOES NOT FIT'} 232448)")
        fails += total > 227 * 1024
    print(f"layouts: {'OK' if fails == 0 else f'{fails} MISMATCHES'} (TMA tiles, transposer, every descriptor of "
          "S = Q K^T and O += P V, D = 64 and 128)")
    return fails == 0


# ---- Variant 3: the pre-pass's workspace and its TMA boxes -------------------------------------------
def tf32_kperm_inv(pos):
    return (pos & ~7) | ((pos & 3) << 1) | ((pos >> 2) & 1)


def prepass_layout(B, Tk, Hkv, D):
    """tf32_prepass_layout: (tk_pad, vt_off, bytes)."""
    tk_pad = (Tk + KBC - 1) // KBC * KBC
    vt_off = (B * Tk * Hkv * D * 4 + 255) // 256 * 256
    return tk_pad, vt_off, vt_off + B * Hkv * D * tk_pad * 4


def tma_box(mem, dst, rows, value):
    """One TMA box of `rows` rows of 32 floats (128 bytes each, 128-byte swizzle) at dst (1024-aligned): row r's 32
    floats value(r, c); VT's box {32 positions, D, 1, 1} lands as K's {32, 1, 64, 1} does."""
    assert dst % 1024 == 0
    for r in range(rows):
        for c in range(32):
            mem[swizzle_addr(dst + r * 128 + c * 4)] = value(r, c)


def check_prepass_layout():
    """Variant 3's V^T and K tiles against variant 0's, for ragged and whole key counts."""
    fails = 0
    for D in (64, 128):
        for Tk in (100, 128, 203, 64, 1):
            B, Hkv = 2, 3
            tk_pad, vt_off, nbytes = prepass_layout(B, Tk, Hkv, D)
            assert tk_pad % 8 == 0 and (tk_pad * 4) % 16 == 0 and vt_off % 256 == 0
            V = {(t, d): ("V", t, d) for t in range(Tk) for d in range(D)}
            K = {(t, d): ("K", t, d) for t in range(Tk) for d in range(D)}
            rna = lambda x: None if x is None else ("rna",) + x
            # The pre-pass (tf32_prepass_kernel): VT[b][h][d][pos] = rna(V[kperm_inv(pos)][d]) or 0 past Tk
            # (written for every pos < tk_pad); Kr = rna(K).
            VT = {}
            for d in range(D):
                for pos in range(tk_pad):
                    key = tf32_kperm_inv(pos)
                    VT[(d, pos)] = rna(V[(key, d)]) if key < Tk else 0
            kvb = KBC * D * 4
            for key0 in range(0, Tk, KBC):
                # Variant 0: raw V by TMA (zero past Tk), transposer -> V^T; K by TMA, rounded in place.
                m0 = {}
                vraw, vt0, k0 = 0, kvb, 2 * kvb
                tma_write(m0, vraw, KBC, D, lambda r, c: V.get((key0 + r, c), 0))
                transpose_v_tile(m0, vt0, vraw, D)
                tma_write(m0, k0, KBC, D, lambda r, c: K.get((key0 + r, c), 0))
                for a in range(k0, k0 + kvb, 4):
                    m0[a] = rna(m0[a]) if m0[a] != 0 else 0
                # transpose_v_tile keeps the raw values: apply the transposer's rounding (to_tf32).
                for a in range(vt0, vt0 + kvb, 4):
                    m0[a] = rna(m0[a]) if m0[a] != 0 else 0
                # Variant 3: two VT boxes (key panels j) into V^T, K's boxes from Kr.
                m3 = {}
                for j in range(KBC // 32):
                    tma_box(m3, vt0 + j * D * 128, D,
                            lambda r, c, j=j: VT.get((r, key0 + 32 * j + c), 0) if key0 + 32 * j + c < tk_pad else 0)
                tma_write(m3, k0, KBC, D, lambda r, c: rna(K[(key0 + r, c)]) if key0 + r < Tk else 0)
                for a in range(vt0, k0 + kvb, 4):
                    fails += m0.get(a) != m3.get(a)
    print(f"variant 3 (pre-pass): {'OK' if fails == 0 else f'{fails} MISMATCHES'} (its V^T and K tiles, TMA-loaded "
          "from the workspace, equal variant 0's transposed / rounded tiles address for address; D = 64 and 128, "
          "Tk = 100, 128, 203, 64, 1)")
    return fails == 0


# ---- Register A fragment of P V ----------------------------------------------------------------------
def acc_coord(w, lane, i):
    g, t = lane // 4, lane % 4
    j, h, e = i // 4, (i // 2) & 1, i & 1
    return 16 * w + g + 8 * h, 8 * j + 2 * t + e


def a_coord(w, lane, reg):
    """m64k8 .tf32 register A: (row, column u of the k8 step)."""
    g, t = lane // 4, lane % 4
    return 16 * w + g + 8 * (reg & 1), t + 4 * (reg >> 1)


def check_fragments(DV=128, order=(0, 2, 1, 3), seed=0):
    rng = np.random.default_rng(seed)
    P = rng.integers(-8, 9, size=(64, KBC)).astype(np.int64)
    V = rng.integers(-8, 9, size=(KBC, DV)).astype(np.int64)
    # V^T in shared memory as the transposer writes it, read through the descriptor model.
    mem = {}
    base = 0
    vraw, vt = base, base + KBC * DV * 4
    for key in range(KBC):
        for d in range(DV):
            mem[vraw + swz128_offset_f32(KBC, key, d)] = int(V[key, d])
    transpose_v_tile(mem, vt, vraw, DV)
    O = np.zeros((64, DV), dtype=np.int64)
    for kk in range(KBC // 8):
        Bm = kmajor_b(mem, vt + (kk // 4) * DV * 128 + (kk % 4) * 32, DV)  # [u, n]
        A = np.zeros((64, 8), dtype=np.int64)
        for w in range(4):
            for lane in range(32):
                sacc = {}
                for i in range(KBC // 2):
                    r, col = acc_coord(w, lane, i)
                    sacc[i] = P[r, col]
                regs = [sacc[4 * kk + order[x]] for x in range(4)]  # pack_p_step
                for reg in range(4):
                    r, u = a_coord(w, lane, reg)
                    A[r, u] = regs[reg]
        O += A @ Bm
    return bool((O == P @ V).all())


def check_q_frags(D=128, seed=0):
    """Variants 1 / 2: S = Q K^T with A = load_q_frags' registers (rows r0, r0 + 8, columns 8k + t, + 4 of
    the Q tile, TMA's layout, R = 128 rows, consumer c's rows from 64 c) and B = K through the K-major
    descriptor, multiplied out against Q K^T."""
    rng = np.random.default_rng(seed)
    Q = rng.integers(-8, 9, size=(KBR, D)).astype(np.int64)
    K = rng.integers(-8, 9, size=(KBC, D)).astype(np.int64)
    mem = {}
    q0, k0 = 0, KBR * D * 4
    tma_write(mem, q0, KBR, D, lambda r, c: int(Q[r, c]))
    tma_write(mem, k0, KBC, D, lambda r, c: int(K[r, c]))
    ok = True
    for c in range(2):
        S = np.zeros((64, KBC), dtype=np.int64)
        for k in range(D // 8):
            Bm = kmajor_b(mem, k0 + (k // 4) * KBC * 128 + (k % 4) * 32, KBC)  # [u, n]
            A = np.zeros((64, 8), dtype=np.int64)
            for w in range(4):
                for lane in range(32):
                    g, t = lane // 4, lane % 4
                    r0 = c * 64 + w * 16 + g
                    for e in range(4):  # load_q_frags
                        val = mem[q0 + swz128_offset_f32(KBR, r0 + 8 * (e & 1), 8 * k + t + 4 * (e >> 1))]
                        r, u = a_coord(w, lane, e)
                        A[r, u] = val
            S += A @ Bm
        ok &= bool((S == Q[64 * c:64 * c + 64] @ K.T).all())
    return ok


# ---- Barrier protocol --------------------------------------------------------------------------------
class Deadlock(Exception):
    pass


class Violation(Exception):
    pass


class MBar:
    def __init__(self, name, count):
        self.name, self.count, self.pending, self.tx, self.done = name, count, count, 0, 0

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.done += 1
            self.pending = self.count

    def arrive(self):
        self.pending -= 1
        assert self.pending >= 0
        self._maybe_complete()

    def arrive_expect_tx(self, b):
        self.tx += b
        self.arrive()

    def complete_tx(self, b):
        self.tx -= b
        self._maybe_complete()

    def ready(self, phase):
        """try_wait.parity for phase index `phase` (parity phase & 1); the model also asserts the barrier
        has not run past it (a parity wait would then read the wrong phase)."""
        if self.done > phase + 1:
            raise Violation(f"{self.name}: waiting for phase {phase} but {self.done} completed (parity ambiguous)")
        return self.done % 2 != phase % 2


def interleave(live, pending_tma, buf, bars, rng, n_tiles):
    """Runs the threads' generators (live: name -> generator yielding ("wait", ...) while blocked, anything
    else on progress) and the pending TMA copies (pending_tma: (buffer, tile, barrier, bytes); each completes
    its barrier's bytes and marks the buffer written, Q excepted) in a random order until all are done;
    Deadlock when every thread keeps waiting with no copy in flight."""
    blocked_rounds = 0
    while live or pending_tma:
        choices = list(live.keys()) + (["tma"] if pending_tma else [])
        who = rng.choice(choices)
        if who == "tma":
            name, tile, bar, b = pending_tma.pop(rng.randrange(len(pending_tma)))
            if name != "q":
                buf[name]["written"] = True
            bars[bar].complete_tx(b)
            blocked_rounds = 0
            continue
        try:
            ev = next(live[who])
        except StopIteration:
            del live[who]
            blocked_rounds = 0
            continue
        if ev[0] == "wait":
            blocked_rounds += 1
            if blocked_rounds > 2000 and not pending_tma:
                raise Deadlock(f"n_tiles={n_tiles}: every thread waits ({sorted(live)})")
        else:
            blocked_rounds = 0
    return True


def run_protocol(n_tiles, rng, n_tr=3, n_cons=4, mutant=None):
    """One random interleaving of the kernel's protocol for one CTA with n_tiles key tiles. Thread counts
    scaled down (transposers 96 -> n_tr, consumers 256 -> n_cons); barrier counts scaled alike."""
    bars = {"q_full": MBar("q_full", 1), "v_full": MBar("v_full", 1), "v_empty": MBar("v_empty", n_tr)}
    for s in range(STAGES):
        bars[f"k_full{s}"] = MBar(f"k_full{s}", 1)
        bars[f"kv_ready{s}"] = MBar(f"kv_ready{s}", n_tr)
        bars[f"k_empty{s}"] = MBar(f"k_empty{s}", n_cons)
        bars[f"vt_empty{s}"] = MBar(f"vt_empty{s}", n_cons)
    # Buffer state: tile held, whether its write finished, the reads done of it.
    buf = {"vraw": dict(tile=None, written=True, reads=set(), parts=set())}
    for s in range(STAGES):
        buf[f"k{s}"] = dict(tile=None, written=True, reads=set(), parts=set())
        buf[f"vt{s}"] = dict(tile=None, written=True, reads=set(), parts=set())
    pending_tma = []  # (buffer, tile, barrier, bytes)

    def overwrite(name, tile, need_reads):
        b = buf[name]
        if b["tile"] is not None and not need_reads <= b["reads"]:
            raise Violation(f"{name}: tile {tile} written while tile {b['tile']} still has readers "
                            f"{sorted(need_reads - b['reads'])}")
        b.update(tile=tile, written=False, reads=set(), parts=set())

    def read(name, tile, who, need_parts=None):
        b = buf[name]
        if b["tile"] != tile or not b["written"] or (need_parts and not need_parts <= b["parts"]):
            raise Violation(f"{name}: {who} reads tile {tile} but it holds {b['tile']} "
                            f"(written={b['written']}, parts={sorted(b['parts'])})")
        b["reads"].add(who)

    def wait(bar, phase):
        while not bars[bar].ready(phase):
            yield ("wait", bar)

    cons_ids = {f"c{i}" for i in range(n_cons)}
    tr_ids = {f"t{i}" for i in range(n_tr)}

    def producer():
        if n_tiles == 0:
            return
        bars["q_full"].arrive_expect_tx(1)
        pending_tma.append(("q", None, "q_full", 1))
        yield ("step",)
        for n in range(n_tiles):
            s = n % STAGES
            if n >= STAGES and mutant != "producer_no_k_empty_wait":
                yield from wait(f"k_empty{s}", n // STAGES - 1)
            # K[s]'s previous tile: rounded by every transposer, read by every consumer's S.
            overwrite(f"k{s}", n, {f"S{c}" for c in cons_ids} | {f"R{t}" for t in tr_ids})
            bars[f"k_full{s}"].arrive_expect_tx(1)
            pending_tma.append((f"k{s}", n, f"k_full{s}", 1))
            yield ("step",)
            if n >= 1 and mutant != "producer_no_v_empty_wait":
                yield from wait("v_empty", n - 1)
            overwrite("vraw", n, tr_ids)
            bars["v_full"].arrive_expect_tx(1)
            pending_tma.append(("vraw", n, "v_full", 1))
            yield ("step",)

    def transposer(me):
        for n in range(n_tiles):
            s = n % STAGES
            yield from wait(f"k_full{s}", n // STAGES)
            kb = buf[f"k{s}"]
            if kb["tile"] != n or not kb["written"]:
                raise Violation(f"k{s}: transposer {me} rounds tile {n}, holds {kb['tile']} written={kb['written']}")
            kb["reads"].add(f"R{me}")
            kb["parts"].add(me)
            yield ("step",)
            yield from wait("v_full", n)
            if n >= STAGES and mutant != "no_vt_empty_wait":
                yield from wait(f"vt_empty{s}", n // STAGES - 1)
            read("vraw", n, me)
            yield ("step",)
            vt = buf[f"vt{s}"]
            if vt["tile"] != n:  # the first transposer to write tile n into V^T[s]
                overwrite(f"vt{s}", n, {f"P{c}" for c in cons_ids})
            vt["parts"].add(me)
            if vt["parts"] == tr_ids:
                vt["written"] = True
            yield ("step",)
            bars["v_empty"].arrive()
            yield ("step",)
            bars[f"kv_ready{s}"].arrive()
            yield ("step",)

    def consumer(me):
        if n_tiles == 0:
            return
        yield from wait("q_full", 0)
        for n in range(n_tiles):
            s = n % STAGES
            if mutant != "consumer_no_kv_ready_wait":
                yield from wait(f"kv_ready{s}", n // STAGES)
            read(f"k{s}", n, f"S{me}", need_parts=tr_ids)  # K rounded by every transposer
            yield ("step",)
            bars[f"k_empty{s}"].arrive()
            yield ("step",)
            read(f"vt{s}", n, f"P{me}", need_parts=tr_ids)
            yield ("step",)
            bars[f"vt_empty{s}"].arrive()
            yield ("step",)

    threads = {"producer": producer()}
    threads.update({t: transposer(t) for t in tr_ids})
    threads.update({c: consumer(c) for c in cons_ids})
    return interleave(dict(threads), pending_tma, buf, bars, rng, n_tiles)


def run_protocol_v3(n_tiles, rng, n_cons=4, mutant=None, vt_stages=STAGES):
    """Variant 3's protocol (no transposers): producer K_n -> K[s] (k_full[s]) after k_empty[s] of n - 2,
    V_n^T -> V^T[sv] (vt_full[sv], the kv_ready slot) after vt_empty[sv] of n - vt_stages; consumers: k_full[s],
    S, arrive k_empty[s], vt_full[sv], P V, arrive vt_empty[sv] (s = n % 2, sv = n % vt_stages). vt_stages = 1: the
    head-dim-256 kernel with two consumer warpgroups (FA_SM90_TF32_D256_WG=2, Tf32Tiles' kVTStages), one V^T buffer."""
    bars = {"q_full": MBar("q_full", 1)}
    for s in range(STAGES):
        for name, cnt in (("k_full", 1), ("vt_full", 1), ("k_empty", n_cons), ("vt_empty", n_cons)):
            bars[f"{name}{s}"] = MBar(f"{name}{s}", cnt)
    buf = {}
    for s in range(STAGES):
        buf[f"k{s}"] = dict(tile=None, written=True, reads=set())
    for s in range(vt_stages):
        buf[f"vt{s}"] = dict(tile=None, written=True, reads=set())
    pending_tma = []
    cons_ids = {f"c{i}" for i in range(n_cons)}

    def overwrite(name, tile, need_reads):
        b = buf[name]
        if b["tile"] is not None and not need_reads <= b["reads"]:
            raise Violation(f"{name}: tile {tile} written while tile {b['tile']} still has readers "
                            f"{sorted(need_reads - b['reads'])}")
        b.update(tile=tile, written=False, reads=set())

    def read(name, tile, who):
        b = buf[name]
        if b["tile"] != tile or not b["written"]:
            raise Violation(f"{name}: {who} reads tile {tile} but it holds {b['tile']} (written={b['written']})")
        b["reads"].add(who)

    def wait(bar, phase):
        while not bars[bar].ready(phase):
            yield ("wait", bar)

    def producer():
        if n_tiles == 0:
            return
        bars["q_full"].arrive_expect_tx(1)
        pending_tma.append(("q", None, "q_full", 1))
        yield ("step",)
        for n in range(n_tiles):
            s, sv = n % STAGES, n % vt_stages
            if n >= STAGES and mutant != "v3_producer_no_k_empty_wait":
                yield from wait(f"k_empty{s}", n // STAGES - 1)
            overwrite(f"k{s}", n, {f"S{c}" for c in cons_ids})
            bars[f"k_full{s}"].arrive_expect_tx(1)
            pending_tma.append((f"k{s}", n, f"k_full{s}", 1))
            yield ("step",)
            if n >= vt_stages and mutant != "v3_producer_no_vt_empty_wait":
                yield from wait(f"vt_empty{sv}", n // vt_stages - 1)
            overwrite(f"vt{sv}", n, {f"P{c}" for c in cons_ids})
            bars[f"vt_full{sv}"].arrive_expect_tx(1)
            pending_tma.append((f"vt{sv}", n, f"vt_full{sv}", 1))
            yield ("step",)

    def consumer(me):
        if n_tiles == 0:
            return
        yield from wait("q_full", 0)
        for n in range(n_tiles):
            s, sv = n % STAGES, n % vt_stages
            if mutant != "v3_consumer_no_k_full_wait":
                yield from wait(f"k_full{s}", n // STAGES)
            read(f"k{s}", n, f"S{me}")
            yield ("step",)
            bars[f"k_empty{s}"].arrive()
            yield ("step",)
            if mutant != "v3_consumer_no_vt_full_wait":
                yield from wait(f"vt_full{sv}", n // vt_stages)
            read(f"vt{sv}", n, f"P{me}")
            yield ("step",)
            bars[f"vt_empty{sv}"].arrive()
            yield ("step",)

    live = {"producer": producer()}
    live.update({c: consumer(c) for c in cons_ids})
    return interleave(live, pending_tma, buf, bars, rng, n_tiles)


def check_protocol_v3(schedules, vt_stages=STAGES):
    rng = random.Random(3 + vt_stages)
    what = "variant 3" if vt_stages == STAGES else f"variant 3, {vt_stages} V^T stage (head dim 256, two warpgroups)"
    bad = 0
    for i in range(schedules):
        try:
            run_protocol_v3(i % 9, rng, vt_stages=vt_stages)
        except (Deadlock, Violation) as e:
            bad += 1
            if bad < 5:
                print("  protocol v3:", e)
    print(f"protocol ({what}): {schedules - bad} / {schedules} random interleavings (0..8 key tiles) without "
          "deadlock, early overwrite, early read or parity ambiguity")
    every = True
    for mutant in ("v3_producer_no_k_empty_wait", "v3_producer_no_vt_empty_wait", "v3_consumer_no_k_full_wait",
                   "v3_consumer_no_vt_full_wait"):
        caught = 0
        for i in range(300):
            try:
                run_protocol_v3(2 + i % 6, rng, mutant=mutant, vt_stages=vt_stages)
            except (Deadlock, Violation):
                caught += 1
        if vt_stages == 1 and mutant == "v3_producer_no_k_empty_wait":
            # Implied there: before loading K_n the producer waited (tile n - 1's turn) for vt_empty of tile n - 2,
            # i.e. for every consumer's P V of tile n - 2, which follows its S of tile n - 2. Not a hazard.
            every &= caught == 0
            print(f"protocol ({what}) mutant {mutant}: caught in {caught} / 300 interleavings (none expected: the "
                  "V^T wait of the tile before implies it)")
            continue
        every &= caught > 0
        print(f"protocol ({what}) mutant {mutant}: caught in {caught} / 300 interleavings")
    return bad == 0 and every


def check_wide_smem():
    """Tf32Smem<256> as flash_fwd_sm90_tf32.cu lays it out for FA_SM90_TF32_D256_WG = 1 and 2 (Tf32Tiles: 64 or 128
    query rows, 32-key tiles; two K stages; a raw V buffer and two V^T stages with one warpgroup, neither raw V nor a
    second V^T stage with two): every tile 1024-byte aligned, the allocation the kernel's static_assert names
    (230,488 bytes, as at head dim 128) and within the 227 KiB opt-in limit, the buffers disjoint."""
    ok = True
    for wg in (1, 2):
        br, bc, D = 64 * wg, 32, 256
        raw_v, vt_stages = (True, STAGES) if wg == 1 else (False, 1)
        q_bytes, kv_bytes = br * D * 4, bc * D * 4
        k = q_bytes
        v_raw = k + STAGES * kv_bytes
        vt = v_raw + (kv_bytes if raw_v else 0)
        bars = vt + vt_stages * kv_bytes
        alloc = bars + 24 + 4 * 8 * STAGES + 1024
        spans = [(0, q_bytes)] + [(k + s * kv_bytes, k + (s + 1) * kv_bytes) for s in range(STAGES)]
        spans += [(v_raw, v_raw + kv_bytes)] if raw_v else []
        spans += [(vt + s * kv_bytes, vt + (s + 1) * kv_bytes) for s in range(vt_stages)]
        spans.sort()
        disjoint = all(a[1] <= b[0] for a, b in zip(spans, spans[1:])) and spans[-1][1] <= bars
        aligned = all(a % 1024 == 0 for a, _ in spans)
        good = disjoint and aligned and alloc == 230488 and alloc <= 227 * 1024
        print(f"head dim 256, {wg} consumer warpgroup(s): Q {q_bytes // 1024} KiB, K 2 x {kv_bytes // 1024}, "
              f"raw V {'1' if raw_v else '0'}, V^T {vt_stages} x {kv_bytes // 1024} KiB, {alloc} bytes: "
              f"{'OK' if good else 'WRONG'}")
        ok &= good
    return ok


def check_protocol(schedules):
    rng = random.Random(1)
    bad = 0
    for i in range(schedules):
        n = i % 9
        try:
            run_protocol(n, rng)
        except (Deadlock, Violation) as e:
            bad += 1
            if bad < 5:
                print("  protocol:", e)
    print(f"protocol: {schedules - bad} / {schedules} random interleavings (0..8 key tiles) without deadlock, "
          "early overwrite, early read or parity ambiguity")
    every = True
    for mutant in ("no_vt_empty_wait", "producer_no_v_empty_wait", "producer_no_k_empty_wait",
                   "consumer_no_kv_ready_wait"):
        caught = 0
        for i in range(300):
            try:
                run_protocol(2 + i % 6, rng, mutant=mutant)
            except (Deadlock, Violation):
                caught += 1
        every &= caught > 0
        print(f"protocol mutant {mutant}: caught in {caught} / 300 interleavings (the model sees the hazard)")
    return bad == 0 and every


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--schedules", type=int, default=3000)
    ap.add_argument("--cxx", default=None, help="output of benchmarks/sm90_tf32_xcheck.cu")
    args = ap.parse_args()
    ok = check_layouts()
    if args.cxx:
        bad = n = 0
        for line in open(args.cxx):
            f = line.split()
            if f[0] == "S":
                R, r, c, v = map(int, f[1:])
                want = swz128_offset_f32(R, r, c)
            elif f[0] == "P":
                j, v = map(int, f[1:])
                want = tf32_kperm(j)
            elif f[0] == "I":
                j, v = map(int, f[1:])
                want = tf32_kperm_inv(j)
            elif f[0] == "W":
                tk, d, tk_pad, vt_off, nbytes = map(int, f[1:])
                v, want = (tk_pad, vt_off, nbytes), prepass_layout(3, tk, 5, d)
            else:
                dv, d, key, v = map(int, f[1:])
                want = swz128_offset_f32(dv, d, tf32_kperm(key))
            n += 1
            bad += v != want
        print(f"C++ layout functions (flash_fwd_sm90_tf32.cu) vs this model: {n - bad} / {n} equal")
        ok &= bad == 0 and n > 0
    f128 = all(check_fragments(128, seed=s) for s in range(3))
    f64 = all(check_fragments(64, seed=s) for s in range(3))
    alt = check_fragments(128, order=(0, 1, 2, 3))
    print(f"register A of P V (pack {{c0,c2,c1,c3}}, V^T keys permuted): D=128 {'OK' if f128 else 'WRONG'}, "
          f"D=64 {'OK' if f64 else 'WRONG'}; the other order {{c0,c1,c2,c3}} {'WRONG as expected' if not alt else 'ALSO RIGHT (model too weak)'}")
    ok &= f128 and f64 and not alt
    qf = all(check_q_frags(D, seed=s) for D in (64, 128) for s in range(2))
    print(f"register A of S = Q K^T from load_q_frags (variants 1 / 2), D = 64 and 128: {'OK' if qf else 'WRONG'}")
    ok &= qf
    ok &= check_prepass_layout()
    ok &= check_protocol(args.schedules)
    ok &= check_protocol_v3(args.schedules)
    ok &= check_protocol_v3(args.schedules, vt_stages=1)
    ok &= check_wide_smem()
    print("ALL OK" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
