"""Host-side models of the Hopper TF32 backward (cc/kernels/sm90/flash_bwd_sm90_tf32.cu), no GPU needed:

  python3 benchmarks/sm90_tf32_bwd_model.py [--schedules N]

1. Layouts: the shared-memory addresses every wgmma .tf32 form of the kernel reads through its
   descriptors (K-major, 128-byte swizzle: start address with the k8 step's + 32 bytes, SBO = 1024 to the
   next 8 rows, row r of an 8-row group at r * 128, address bits [4:6] XORed with [7:9]; the reading
   sm90_tf32_model.py uses for the forward) against what TMA writes (boxes {32 floats, rows}) and what the
   kernel's own stores write (transpose_round_tile with and without the k8 permutation, store_ds):
     S^T = K Q^T, dP^T = V dO^T   A = K / V [64 x D] (R = 64), B = Q / dO [32 x D] (R = 32)
     dV += P^T dO, dK += dS^T Q   B = dO^T / Q^T [D x 32] from the transposers (queries permuted)
     dQ^T = K^T dS^T             A = K^T [D x 64] (two panels, M block m at row 64 m), B = dS [32 x 64]
2. Register mappings multiplied out on random integers: S^T accumulators (lane 4g + t of warp w holds
   d[4j + 2h + e] = S^T[16w + g + 8h][8j + 2t + e]) -> pack_step {c0, c2, c1, c3} -> the m64k8 .tf32 A
   fragment (a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)) times B read through the dO^T
   descriptors = P^T dO (the other order {c0, c1, c2, c3} must fail); store_ds + the dQ^T descriptors =
   (dS K)^T; store_dq_staging = the [32 x D] row-major block the bulk reduce-add adds.
3. The barrier protocol (with one and two Q^T / dO^T stages; producer thread, TMA engine, transposer threads, consumer threads with their
   named barriers, the bulk reduce-add engine) under random interleavings: no deadlock, every read sees
   the version it expects completely written (and rounded where the kernel rounds), no buffer written
   while a read of its previous version is pending, no wait on a phase the barrier has run past. Three
   mutants (transposers not waiting for t_empty; the consumer arriving on empty[s] before its S^T / dP^T
   reads are done; one ready barrier for two Q^T stages) must be caught.
4. The kernel's algorithm at tile level in float64 (numpy): the CTA grid, the units each CTA visits
   (qb_lo for causal), TMA's zero rows past Tq / Tk, lse2 = +inf past Tq, the need_mask rule and the
   element selection, Dsum with d_lse, the dQ accumulator's [B, H, tq_pad, D] blocks and the conversion,
   the epilogue's key rows, against the analytic gradients of masked softmax attention on odd shapes
   (causal both alignments with rows that see no key, GQA, MQA, Tq = 1, Tk = 1): the index logic, not the
   MMA layouts (parts 1 and 2).
The constants and formulas mirror the kernel's; change them together.
"""
import argparse
import random
import sys

import numpy as np

KBK, KBQ = 64, 32


# ---- Layouts (the kernel's functions, transcribed) -------------------------------------------------
def swz128_offset_f32(R, r, col):
    return (col >> 5) * R * 128 + r * 128 + ((((col & 31) >> 2) ^ (r & 7)) << 4) + (col & 3) * 4


def kperm(j):
    return (j & ~7) | ((j & 1) << 2) | ((j & 7) >> 1)


def swizzle_addr(a):
    return a ^ (((a >> 7) & 7) << 4)


def tstages(D):
    """bwd_tf32_tstages<D>: stages of Q^T / dO^T."""
    return 2 if D == 64 else 1


def smem_layout(D):
    kv, qb = KBK * D * 4, KBQ * D * 4
    ts = tstages(D)
    L = {}
    L["K"] = 0
    L["V"] = L["K"] + kv
    L["KT"] = L["V"] + kv
    L["Q"] = L["KT"] + kv
    L["DO"] = L["Q"] + 2 * qb
    L["QT"] = L["DO"] + 2 * qb
    L["DOT"] = L["QT"] + ts * qb
    L["DS"] = L["DOT"] + ts * qb
    L["STAGE"] = L["DS"] + KBQ * KBK * 4
    L["ROWS"] = L["STAGE"] + qb
    L["BARS"] = L["ROWS"] + 512
    L["BYTES"] = L["BARS"] + 48 + 16 + 16
    L["ALLOC"] = L["BYTES"] + 1024
    return L, kv, qb


def tma_write(mem, dst, rows, D, value):
    for j in range(D // 32):
        panel = dst + j * rows * 128
        assert panel % 1024 == 0
        for r in range(rows):
            for c in range(32):
                mem[swizzle_addr(panel + r * 128 + c * 4)] = value(r, 32 * j + c)


def descriptor_read(mem, start, rows, k8=8, sbo=1024):
    return {(r, k): mem.get(swizzle_addr(start + (r // 8) * sbo + (r % 8) * 128 + k * 4))
            for r in range(rows) for k in range(k8)}


def transpose_round_tile(mem, dst, src, ROWS, COLS, perm):
    """transpose_round_tile<ROWS, COLS, PERM>: work items (rg, cb), lane = column c; the rounded values
    back into src, and two 16-byte chunks into dst row c."""
    for rg in range(ROWS // 8):
        for c in range(COLS):
            x = []
            for e in range(8):
                a = src + swz128_offset_f32(ROWS, 8 * rg + e, c)
                x.append(mem[a])
                mem[a] = x[-1]  # (rounded in place; the tag stays)
            a0 = dst + swz128_offset_f32(COLS, c, 8 * rg)
            a1 = dst + swz128_offset_f32(COLS, c, 8 * rg + 4)
            assert a0 % 16 == 0 and a1 % 16 == 0
            order = (x[0], x[2], x[4], x[6], x[1], x[3], x[5], x[7]) if perm else tuple(x)
            for i in range(4):
                mem[a0 + 4 * i] = order[i]
                mem[a1 + 4 * i] = order[4 + i]


def check_layouts():
    fails = 0
    for D in (64, 128):
        L, kv, qb = smem_layout(D)
        assert L["ALLOC"] == {128: 222800, 64: 132688}[D], L["ALLOC"]
        for name in ("K", "V", "KT", "Q", "DO", "QT", "DOT", "DS", "STAGE"):
            assert L[name] % 1024 == 0, name
        base = 1024 * 5
        mem = {}
        tma_write(mem, base + L["K"], KBK, D, lambda r, c: ("K", r, c))
        tma_write(mem, base + L["V"], KBK, D, lambda r, c: ("V", r, c))
        for s in range(2):
            tma_write(mem, base + L["Q"] + s * qb, KBQ, D, lambda r, c, s=s: ("Q", s, r, c))
            tma_write(mem, base + L["DO"] + s * qb, KBQ, D, lambda r, c, s=s: ("DO", s, r, c))
        transpose_round_tile(mem, base + L["KT"], base + L["K"], KBK, D, False)
        s = 1
        ts = tstages(D) - 1
        transpose_round_tile(mem, base + L["QT"] + ts * qb, base + L["Q"] + s * qb, KBQ, D, True)
        transpose_round_tile(mem, base + L["DOT"] + ts * qb, base + L["DO"] + s * qb, KBQ, D, True)
        # S^T / dP^T: mma_rows_x_queries<D>
        for nm, bn in (("K", "Q"), ("V", "DO")):
            a_t, b_t = base + L[nm], base + L[bn] + s * qb
            for k in range(D // 8):
                koff = (k % 4) * 32
                A = descriptor_read(mem, a_t + (k // 4) * KBK * 128 + koff, 64)
                B = descriptor_read(mem, b_t + (k // 4) * KBQ * 128 + koff, 32)
                fails += sum(v != (nm, r, 8 * k + kk) for (r, kk), v in A.items())
                fails += sum(v != (bn, s, n, 8 * k + kk) for (n, kk), v in B.items())
        # dV / dK: B = dO^T / Q^T, N = D rows, step kk: column u of the step = query 8kk + (2u or 2(u-4)+1)
        for bn, tt in (("DOT", "DO"), ("QT", "Q")):
            for kk in range(KBQ // 8):
                B = descriptor_read(mem, base + L[bn] + ts * qb + kk * 32, D)
                for (n, u), v in B.items():
                    q = 8 * kk + (2 * u if u < 4 else 2 * (u - 4) + 1)
                    fails += v != (tt, s, q, n)
        # dQ^T: A = K^T rows d (M block m), K = keys; B = dS [32 x 64] as store_ds writes it
        ds = base + L["DS"]
        for q in range(KBQ):
            for key in range(KBK):
                mem[ds + swz128_offset_f32(KBQ, q, key)] = ("dS", q, key)
        for m in range(D // 64):
            for kk in range(KBK // 8):
                A = descriptor_read(mem, base + L["KT"] + (kk // 4) * D * 128 + m * 64 * 128 + (kk % 4) * 32, 64)
                B = descriptor_read(mem, ds + (kk // 4) * KBQ * 128 + (kk % 4) * 32, 32)
                fails += sum(v != ("K", 8 * kk + k, 64 * m + r) for (r, k), v in A.items())
                fails += sum(v != ("dS", n, 8 * kk + k) for (n, k), v in B.items())
        print(f"layouts D={D}: smem {L['ALLOC']} B, {'ok' if fails == 0 else f'{fails} mismatches'}")
    return fails


# ---- Register mappings -----------------------------------------------------------------------------
def acc_index(w, g, t, i):
    """Accumulator d[i] of lane 4g + t, warp w (m64nN): (row, col)."""
    return 16 * w + g + 8 * ((i // 2) & 1), 8 * (i // 4) + 2 * t + (i & 1)


def check_register_a(rng, order=(0, 2, 1, 3)):
    bad = 0
    for D in (64, 128):
        L, kv, qb = smem_layout(D)
        st = rng.integers(-4, 5, size=(64, KBQ))
        do = rng.integers(-4, 5, size=(KBQ, D))
        base = 0
        mem = {}
        tma_write(mem, base + L["DO"], KBQ, D, lambda r, c: int(do[r, c]))
        transpose_round_tile(mem, base + L["DOT"], base + L["DO"], KBQ, D, True)
        out = np.zeros((64, D), dtype=np.int64)
        for kk in range(KBQ // 8):
            A = np.zeros((64, 8), dtype=np.int64)
            for w in range(4):
                for g in range(8):
                    for t in range(4):
                        c4 = [st[acc_index(w, g, t, 4 * kk + x)] for x in range(4)]
                        a = [c4[order[0]], c4[order[1]], c4[order[2]], c4[order[3]]]  # pack_step
                        A[16 * w + g, t], A[16 * w + g + 8, t] = a[0], a[1]
                        A[16 * w + g, t + 4], A[16 * w + g + 8, t + 4] = a[2], a[3]
            Bd = descriptor_read(mem, base + L["DOT"] + kk * 32, D)
            B = np.array([[Bd[(n, k)] for n in range(D)] for k in range(8)], dtype=np.int64)
            out += A @ B
        bad += int((out != st @ do).sum())
    return bad


def check_dq_staging(rng):
    """store_ds + dQ^T descriptors + store_dq_staging = dS K as [32 x D] row-major."""
    bad = 0
    D = 128
    L, kv, qb = smem_layout(D)
    dst_t = rng.integers(-4, 5, size=(64, KBQ))  # dS^T [keys x queries] accumulators
    k = rng.integers(-4, 5, size=(64, D))
    mem = {}
    tma_write(mem, L["K"], KBK, D, lambda r, c: int(k[r, c]))
    transpose_round_tile(mem, L["KT"], L["K"], KBK, D, False)
    for w in range(4):  # store_ds from packed {c0, c2, c1, c3}
        for g in range(8):
            for t in range(4):
                for kk in range(4):
                    c4 = [dst_t[acc_index(w, g, t, 4 * kk + x)] for x in range(4)]
                    pd = [c4[0], c4[2], c4[1], c4[3]]
                    for x in range(4):
                        key, q = 16 * w + g + 8 * (x & 1), 8 * kk + 2 * t + (x >> 1)
                        if pd[x] != dst_t[key, q]:
                            bad += 1
                        mem[L["DS"] + swz128_offset_f32(KBQ, q, key)] = int(pd[x])
    dqt = np.zeros((D, KBQ), dtype=np.int64)
    for m in range(D // 64):
        for kk in range(8):
            A = descriptor_read(mem, L["KT"] + (kk // 4) * D * 128 + m * 64 * 128 + (kk % 4) * 32, 64)
            B = descriptor_read(mem, L["DS"] + (kk // 4) * KBQ * 128 + (kk % 4) * 32, 32)
            Am = np.array([[A[(r, c)] for c in range(8)] for r in range(64)], dtype=np.int64)
            Bm = np.array([[B[(n, c)] for n in range(KBQ)] for c in range(8)], dtype=np.int64)
            dqt[64 * m:64 * m + 64] += Am @ Bm
    staging = np.full(KBQ * D, 10 ** 9, dtype=np.int64)
    for m in range(D // 64):  # store_dq_staging
        for w in range(4):
            for g in range(8):
                for t in range(4):
                    for i in range(16):
                        r, q = acc_index(w, g, t, i)
                        staging[q * D + 64 * m + r] = dqt[64 * m + r, q]
    want = (dst_t.T @ k).reshape(-1)  # dS [queries x keys] K
    bad += int((staging != want).sum())
    return bad


# ---- Barrier protocol ------------------------------------------------------------------------------
class Hazard(Exception):
    pass


class Bar:
    def __init__(self, name, count):
        self.name, self.count, self.arrived, self.tx, self.done = name, count, 0, 0, 0

    def arrive(self, tx=0):
        self.arrived += 1
        self.tx += tx
        self._check()

    def complete_tx(self, n=1):
        self.tx -= n
        self._check()

    def _check(self):
        if self.arrived > self.count:
            raise Hazard(f"{self.name}: too many arrivals")
        if self.arrived == self.count and self.tx == 0:
            self.done += 1
            self.arrived = 0

    def ready(self, phase):
        """try_wait.parity (phase & 1): passes when the barrier's current phase parity differs."""
        if self.done >= phase + 2:
            raise Hazard(f"{self.name}: wait for phase {phase} after {self.done} phases (parity ambiguity)")
        return self.done == phase + 1


class Buf:
    """Parts (one per writer thread, or 'all') with (version, state); active readers per version."""

    def __init__(self, name):
        self.name, self.parts, self.readers = name, {}, {}

    def write(self, part, version, state, who):
        if self.readers.get("active"):
            raise Hazard(f"{who} writes {self.name} v{version} while {sorted(self.readers['active'])} read it")
        self.parts[part] = (version, state)

    def check(self, version, state, who, parts):
        for p in parts:
            if self.parts.get(p) != (version, state):
                raise Hazard(f"{who} reads {self.name} part {p}: {self.parts.get(p)} != {(version, state)}")

    def begin(self, who, version, state, parts):
        self.check(version, state, who, parts)
        self.readers.setdefault("active", set()).add(who)

    def end(self, who, version, state, parts):
        self.check(version, state, who, parts)
        self.readers["active"].discard(who)


def simulate(rng, n_units, n_tr=2, n_cons=2, mutant=None, tst=1):
    """tst: the Q^T / dO^T stages (bwd_tf32_tstages: 1 at D = 128, 2 at D = 64)."""
    bars = {"kv_full": Bar("kv_full", 1), "kv_ready": Bar("kv_ready", n_tr), "full0": Bar("full0", 1),
            "full1": Bar("full1", 1), "empty0": Bar("empty0", n_cons), "empty1": Bar("empty1", n_cons)}
    for ts in range(tst):
        bars[f"ready{ts}"] = Bar(f"ready{ts}", n_tr)
        bars[f"t_empty{ts}"] = Bar(f"t_empty{ts}", n_cons)
    bufs = {n: Buf(n) for n in ("K", "V", "KT", "Q0", "Q1", "DO0", "DO1", "ROWS0", "ROWS1", "STAGE")
            + tuple(f"{b}{ts}" for b in ("QT", "DOT") for ts in range(tst))}
    tparts = list(range(n_tr))
    tma_q = []       # pending TMA loads: (bufs, version, barrier)
    bulk_q = []      # pending bulk reduce-adds: version of the staging block
    named = {1: set(), 2: set()}
    named_gen = {1: 0, 2: 0}

    def producer():
        tma_q.append((("K", "V"), 0, "kv_full"))
        bars["kv_full"].arrive(tx=1)
        yield
        for n in range(n_units):
            s = n & 1
            while n >= 2 and not bars[f"empty{s}"].ready((n >> 1) - 1):
                yield
            bars[f"full{s}"].arrive(tx=1)
            tma_q.append(((f"Q{s}", f"DO{s}"), n, f"full{s}"))
            yield

    def transposer(x):
        while not bars["kv_full"].ready(0):
            yield
        for nm in ("K", "V"):
            bufs[nm].check(0, "tma", f"tr{x}", ["all"])
        bufs["KT"].write(x, 0, "t", f"tr{x}")
        yield
        for nm in ("K", "V"):
            bufs[nm].write(("r", x), 0, "rounded", f"tr{x}")
        bars["kv_ready"].arrive()
        yield
        for n in range(n_units):
            s, ts = n & 1, n % tst
            while not bars[f"full{s}"].ready(n >> 1):
                yield
            while n >= tst and mutant != "no_t_empty" and not bars[f"t_empty{ts}"].ready(n // tst - 1):
                yield
            for nm in (f"Q{s}", f"DO{s}"):
                bufs[nm].check(n, "tma", f"tr{x}", ["all"])
            for nm in (f"QT{ts}", f"DOT{ts}"):
                bufs[nm].write(x, n, "t", f"tr{x}")
            yield
            for nm in (f"Q{s}", f"DO{s}"):
                bufs[nm].write(("r", x), n, "rounded", f"tr{x}")
            bufs[f"ROWS{s}"].write(x, n, "rows", f"tr{x}")
            bars["ready0" if mutant == "shared_ready" else f"ready{ts}"].arrive()
            yield

    def named_sync(i, who):
        gen = named_gen[i]
        named[i].add(who)
        if len(named[i]) == n_cons:
            named[i] = set()
            named_gen[i] += 1
        while named_gen[i] == gen:
            yield

    def consumer(c):
        who = f"c{c}"
        rparts = [("r", x) for x in tparts]
        if n_units:
            while not bars["kv_ready"].ready(0):
                yield
        for n in range(n_units):
            s, ts = n & 1, n % tst
            while not (bars["ready0"].ready(n) if mutant == "shared_ready" else bars[f"ready{ts}"].ready(n // tst)):
                yield
            for nm in ("K", "V", f"Q{s}", f"DO{s}"):
                bufs[nm].begin(who, n if nm[0] in "QD" else 0, "rounded", rparts)
            bufs["KT"].check(0, "t", who, tparts)
            if mutant == "early_empty":
                bars[f"empty{s}"].arrive()
            yield
            for nm in ("K", "V", f"Q{s}", f"DO{s}"):
                bufs[nm].end(who, n if nm[0] in "QD" else 0, "rounded", rparts)
            bufs[f"ROWS{s}"].check(n, "rows", who, tparts)
            if mutant != "early_empty":
                bars[f"empty{s}"].arrive()
            for nm in (f"QT{ts}", f"DOT{ts}"):
                bufs[nm].begin(who, n, "t", tparts)
            yield
            if c == 0 and n > 0:
                while bulk_q:  # bulk_wait_read<0>
                    yield
            yield from named_sync(1, who)
            yield
            for nm in (f"QT{ts}", f"DOT{ts}"):
                bufs[nm].end(who, n, "t", tparts)
            bars[f"t_empty{ts}"].arrive()
            yield
            bufs["STAGE"].write(c, n, "dq", who)
            yield from named_sync(2, who)
            if c == 0:
                bufs["STAGE"].check(n, "dq", who, list(range(n_cons)))
                bulk_q.append(n)
            yield

    def tma_engine():
        while True:
            if tma_q:
                names, v, bar = tma_q.pop(0)
                for nm in names:
                    bufs[nm].write("all", v, "tma", "TMA")
                    for k in list(bufs[nm].parts):
                        if k != "all":
                            del bufs[nm].parts[k]
                bars[bar].complete_tx()
            yield

    def bulk_engine():
        while True:
            if bulk_q:
                v = bulk_q[0]
                bufs["STAGE"].check(v, "dq", "bulk", list(range(n_cons)))
                bulk_q.pop(0)
            yield

    actors = {"producer": producer(), "tma": tma_engine(), "bulk": bulk_engine()}
    for x in range(n_tr):
        actors[f"tr{x}"] = transposer(x)
    for c in range(n_cons):
        actors[f"c{c}"] = consumer(c)
    finite = {k for k in actors if k not in ("tma", "bulk")}
    live = set(actors)
    steps = 0
    while finite & live:
        k = rng.choice(sorted(live))
        try:
            next(actors[k])
        except StopIteration:
            live.discard(k)
        steps += 1
        if steps > 200000:
            raise Hazard(f"deadlock or livelock: live {sorted(finite & live)}")
    return steps


# ---- Tile-level emulation -------------------------------------------------------------------------
def reference_grads(q, k, v, do, dlse, scale, causal, off):
    B, Tq, H, D = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    G = H // Hkv
    kk = np.repeat(k, G, axis=2)
    vv = np.repeat(v, G, axis=2)
    s = np.einsum("bihd,bjhd->bhij", q, kk) * scale
    i = np.arange(Tq)[:, None]
    j = np.arange(Tk)[None, :]
    vis = np.broadcast_to((j <= i + off) if causal else np.ones((Tq, Tk), bool), (B, H, Tq, Tk))
    sm = np.where(vis, s, -np.inf)
    mx = sm.max(-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    e = np.where(vis, np.exp(sm - mx), 0.0)
    den = e.sum(-1, keepdims=True)
    p = e / np.where(den > 0, den, 1.0)
    lse = np.where(den[..., 0] > 0, np.log(np.where(den > 0, den, 1.0))[..., 0] + mx[..., 0], -np.inf)
    o = np.einsum("bhij,bjhd->bihd", p, vv)
    dp = np.einsum("bihd,bjhd->bhij", do, vv)
    dsum = np.einsum("bihd,bihd->bhi", do, o) - dlse
    ds = p * (dp - dsum[..., None])
    dq = np.einsum("bhij,bjhd->bihd", ds, kk) * scale
    dk = np.einsum("bhij,bihd->bjhd", ds, q).reshape(B, Tk, Hkv, G, D).sum(3) * scale
    dv = np.einsum("bhij,bihd->bjhd", p, do).reshape(B, Tk, Hkv, G, D).sum(3)
    return o, lse, dsum, dq, dk, dv, vis


def emulate(q, k, v, do, lse, dsum, scale, causal, off):
    """flash_bwd_sm90_tf32_kernel's index logic at tile level (float64 products)."""
    B, Tq, H, D = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    G = H // Hkv
    tq_pad = (Tq + 127) // 128 * 128
    dq_acc = np.zeros(B * H * tq_pad * D)
    dk = np.full(k.shape, np.nan)
    dv = np.full(v.shape, np.nan)
    nqb = (Tq + KBQ - 1) // KBQ
    log2e = 1.4426950408889634
    for b in range(B):
        for hk in range(Hkv):
            for kt in range((Tk + KBK - 1) // KBK):
                j0 = kt * KBK
                qb_lo = 0
                if causal:
                    i_min = j0 - off if j0 - off > 0 else 0
                    qb_lo = nqb if i_min >= Tq else i_min // KBQ
                per_head = nqb - qb_lo
                kb = np.zeros((KBK, D))
                vb = np.zeros((KBK, D))
                nk = min(KBK, Tk - j0)
                kb[:nk] = k[b, j0:j0 + nk, hk]
                vb[:nk] = v[b, j0:j0 + nk, hk]
                acc_k = np.zeros((KBK, D))
                acc_v = np.zeros((KBK, D))
                tile_cut = j0 + KBK > Tk
                for n in range(G * per_head):
                    h = hk * G + n // per_head
                    i0 = (qb_lo + n % per_head) * KBQ
                    nq = min(KBQ, Tq - i0)
                    qb = np.zeros((KBQ, D))
                    dob = np.zeros((KBQ, D))
                    qb[:nq] = q[b, i0:i0 + nq, h]
                    dob[:nq] = do[b, i0:i0 + nq, h]
                    lse2 = np.full(KBQ, np.inf)
                    dsr = np.zeros(KBQ)
                    lse2[:nq] = lse[b, h, i0:i0 + nq] * log2e
                    dsr[:nq] = dsum[b, h, i0:i0 + nq]
                    st = kb @ qb.T
                    with np.errstate(over="ignore", invalid="ignore"):
                        pt = np.exp2(st * scale * log2e - lse2[None, :])
                    need_mask = tile_cut or (causal and j0 + KBK > i0 + off + 1)
                    if need_mask:
                        key = j0 + np.arange(KBK)[:, None]
                        qq = i0 + np.arange(KBQ)[None, :]
                        visk = (key < Tk) & ((key <= qq + off) if causal else True)
                        pt = np.where(visk, pt, 0.0)
                    dpt = vb @ dob.T
                    dst = pt * (dpt - dsr[None, :])
                    acc_v += pt @ dob
                    acc_k += dst @ qb
                    dqt = kb.T @ dst  # [D x 32]
                    assert i0 + KBQ <= tq_pad
                    o0 = ((b * H + h) * tq_pad + i0) * D
                    dq_acc[o0:o0 + KBQ * D] += dqt.T.reshape(-1)
                for r in range(KBK):
                    if j0 + r < Tk:
                        dk[b, j0 + r, hk] = acc_k[r] * scale
                        dv[b, j0 + r, hk] = acc_v[r]
    dq = np.empty(q.shape)
    for b in range(B):
        for h in range(H):
            for i in range(Tq):
                o0 = ((b * H + h) * tq_pad + i) * D
                dq[b, i, h] = scale * dq_acc[o0:o0 + D]
    return dq, dk, dv


EMU_CASES = [
    dict(B=2, Tq=45, Tk=77, H=3, Hkv=3, D=8),
    dict(B=1, Tq=31, Tk=65, H=2, Hkv=1, D=8),
    dict(B=2, Tq=70, Tk=50, H=4, Hkv=2, D=8, causal=True, off=0),
    dict(B=2, Tq=50, Tk=130, H=2, Hkv=2, D=8, causal=True, off=80),
    dict(B=1, Tq=150, Tk=40, H=2, Hkv=1, D=8, causal=True, off=40 - 150),  # rows that see no key
    dict(B=1, Tq=1, Tk=100, H=4, Hkv=2, D=8, causal=True, off=99),
    dict(B=2, Tq=66, Tk=1, H=2, Hkv=1, D=8),
    dict(B=1, Tq=33, Tk=129, H=2, Hkv=2, D=8, dlse=True, scale=0.3),
    dict(B=1, Tq=96, Tk=200, H=2, Hkv=2, D=8, causal=True, off=-10, dlse=True),
]


def check_emulation(rng):
    bad = 0
    for c in EMU_CASES:
        B, Tq, Tk, H, Hkv, D = c["B"], c["Tq"], c["Tk"], c["H"], c["Hkv"], c["D"]
        q = rng.standard_normal((B, Tq, H, D))
        k = rng.standard_normal((B, Tk, Hkv, D))
        v = rng.standard_normal((B, Tk, Hkv, D))
        do = rng.standard_normal((B, Tq, H, D))
        dlse = rng.standard_normal((B, H, Tq)) if c.get("dlse") else np.zeros((B, H, Tq))
        scale = c.get("scale", D ** -0.5)
        causal, off = c.get("causal", False), c.get("off", 0)
        o, lse, dsum, rdq, rdk, rdv, vis = reference_grads(q, k, v, do, dlse, scale, causal, off)
        dq, dk, dv = emulate(q, k, v, do, lse, dsum, scale, causal, off)
        errs = [float(np.abs(a - r).max()) if a.size else 0.0 for a, r in ((dq, rdq), (dk, rdk), (dv, rdv))]
        dead_q = ~vis.any(-1)  # [B, H, Tq]
        dead_k = ~vis[:, 0].any(1)  # [B, Tk] (the same for every head)
        zeros = bool((dq.transpose(0, 2, 1, 3)[dead_q] == 0).all()) and \
            all(bool((x[b][dead_k[b]] == 0).all()) for x in (dk, dv) for b in range(B))
        ok = max(errs) < 1e-9 and zeros and np.isfinite(dq).all() and np.isfinite(dk).all() and np.isfinite(dv).all()
        bad += not ok
        print(f"emulation {c}: max err dq/dk/dv {errs[0]:.1e}/{errs[1]:.1e}/{errs[2]:.1e}, dead rows/keys "
              f"{int(dead_q.sum())}/{int(dead_k.sum())} exact zeros {zeros}: {'ok' if ok else 'FAIL'}")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--schedules", type=int, default=300)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    fails = check_layouts()
    ra = check_register_a(rng)
    print(f"register A (pack_step {{c0, c2, c1, c3}}) x dO^T descriptors = P^T dO: {'ok' if ra == 0 else f'{ra} wrong'}")
    fails += ra
    alt = check_register_a(rng, order=(0, 1, 2, 3))
    print(f"other order {{c0, c1, c2, c3}} (must fail): {'fails as expected' if alt else 'DID NOT FAIL'}")
    fails += alt == 0
    dq = check_dq_staging(rng)
    print(f"store_ds + dQ^T descriptors + staging = dS K: {'ok' if dq == 0 else f'{dq} wrong'}")
    fails += dq
    fails += check_emulation(rng)
    r = random.Random(7)
    bad = 0
    for i in range(args.schedules):
        n_units = r.choice([0, 1, 2, 3, 5, 8])
        try:
            simulate(r, n_units, n_tr=r.choice([1, 2, 3]), n_cons=r.choice([1, 2, 3]), tst=1 + i % 2)
        except Hazard as e:
            bad += 1
            if bad <= 3:
                print(f"protocol schedule {i}: {e}")
    print(f"protocol: {args.schedules - bad} / {args.schedules} random schedules clean")
    fails += bad
    for mutant in ("no_t_empty", "early_empty", "shared_ready"):
        caught = 0
        for i in range(args.schedules):
            try:
                simulate(r, 6, n_tr=2, n_cons=2, mutant=mutant, tst=2 if mutant == "shared_ready" else 1 + i % 2)
            except Hazard:
                caught += 1
        print(f"mutant {mutant}: caught in {caught} / {args.schedules} schedules {'(ok)' if caught else '(NOT CAUGHT)'}")
        fails += caught == 0
    print("PASS" if fails == 0 else f"FAIL ({fails})")
    return 0 if fails == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
