"""Static check of the Hopper TF32 forward's SASS (cc/kernels/sm90/flash_fwd_sm90_tf32.cu), no GPU needed:

  python3 benchmarks/sm90_tf32_sass_check.py OBJECT [--expect-bug]

OBJECT: an sm_90a object of flash_fwd_sm90_tf32.cu (the harness's flash_fwd_sm90_tf32.o, or
`nvcc -c` of the file alone); cuobjdump on PATH (else CUDA_HOME/bin or /usr/local/cuda/bin).

Why: in the variants that hold Q's A fragments in registers (S = Q K^T by wgmma RS: variants 1, 2 and 3),
those registers are written once, before the key-tile loop, and must survive every iteration. ptxas
13.0 broke that at D = 64 (found 2026-12-01 from the SASS, after the H200 showed variants 1 / 2 wrong in
9 of 9 D = 64 cases): the loop's P packing (cvt.rna of the softmax output) was allocated to the very
registers R88..R119 that the S HGMMAs read as Q, so every key tile after the first computed S = P_{n-1}
K^T. The PTX was right (distinct virtual registers); Q's fragments were defined only on the path
`n_tiles > 0`, and ptxas did not keep their live range through the loop (a value undefined on one
entry path). A GPU self-test of the wgmma form alone (self-test 6) cannot see this: it is a property of
the whole kernel's register allocation. This check reads it from the SASS:

For every flash_fwd_sm90_tf32_kernel<D, V> whose S = Q K^T chain is RS (HGMMA with a register A and a
first instruction that does not accumulate: `RZ, !UPT`): the loop that contains that chain (the
backward branch around it), and every instruction in the loop that writes one of the chain's A
registers (destination operand; 64- / 128-bit forms and HGMMA accumulators counted by width). Any such
write is a clobber: FAIL. Exit 0 when no kernel has one (or, with --expect-bug, when some has: to show
that the check catches the old object).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

INS = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def cuobjdump():
    """cuobjdump on PATH, else CUDA_HOME's or /usr/local/cuda's."""
    for c in (shutil.which("cuobjdump"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "cuobjdump"),
              "/usr/local/cuda/bin/cuobjdump"):
        if c and os.path.exists(c):
            return c
    sys.exit("cuobjdump not found (PATH, CUDA_HOME/bin, /usr/local/cuda/bin)")


def functions(obj):
    out = subprocess.run([cuobjdump(), "-sass", obj], capture_output=True, text=True, check=True).stdout
    parts = re.split(r"\n\s+Function : (\S+)\n", out)
    for i in range(1, len(parts), 2):
        ins = []
        for line in parts[i + 1].split("\n"):
            m = INS.match(line)
            if m:
                ins.append((int(m.group(1), 16), m.group(2)))
        yield parts[i], ins


def split(text):
    """(predicate, opcode, operands) of one SASS instruction."""
    pred = None
    if text.startswith("@"):
        pred, text = text.split(None, 1)
    op, _, rest = text.partition(" ")
    return pred, op, [x.strip() for x in rest.split(",")] if rest else []


def reg_num(x):
    m = re.match(r"^-?\|?R(\d+)", x)
    return int(m.group(1)) if m else None


def dest_regs(op, operands):
    """Registers an instruction writes (its first operand), by width; empty for stores, branches,
    barriers and the like (no register destination)."""
    if not operands:
        return set()
    base = op.split(".")[0]
    if base in ("ST", "STS", "STG", "STL", "STSM", "RED", "BRA", "BAR", "EXIT", "SYNCS", "UTMALDG", "UTMAPF",
                "UTMACCTL", "MEMBAR", "FENCE", "WARPSYNC", "WARPGROUP", "NOP", "CALL", "RET", "BSYNC", "BSSY",
                "DEPBAR", "ERRBAR", "CCTL", "UBLKCP", "ELECT"):
        return set()
    first = operands[0]
    # A predicate result first, then the register one: SHFL.BFLY PT, R12, R17, 0x1, 0x1f (the softmax's
    # row reductions, inside the loop) and LOP3.LUT P0, R4, ... (FSETP / ISETP have a predicate second).
    if base in ("SHFL", "LOP3", "LOP") and re.match(r"^!?(P\d|PT)$", first) and len(operands) > 1:
        first = operands[1]
    r = reg_num(first)
    if r is None:
        return set()
    if base == "HGMMA":
        n = int(re.search(r"HGMMA\.64x(\d+)x", op).group(1))
        return set(range(r, r + n // 2))
    # 64-bit results (CS2R zeroes a register pair; F2I.U64, I2F.F64, ...: counted wide, conservatively).
    wide = (".64" in op or ".WIDE" in op or base in ("CS2R", "DADD", "DMUL", "DFMA", "DMNMX") or
            re.search(r"\.[USF]64", op) is not None)
    width = 4 if ".128" in op else 2 if wide else 1
    return set(range(r, r + width))


def parser_selftest():
    """dest_regs on instruction forms of the kernel's SASS (ptxas 13.0): a parser regression must not
    turn the check into a silent pass."""
    cases = [("SHFL.BFLY PT, R12, R17, 0x1, 0x1f", {12}), ("CS2R R116, SRZ", {116, 117}),
             ("LOP3.LUT P0, RZ, R3, 0x1, RZ, 0xc0, !PT", set()), ("LOP3.LUT P1, R4, R3, R5, RZ, 0xc0, !PT", {4}),
             ("FSETP.GEU.AND P0, PT, |R88|, +INF , PT", set()), ("LDS.128 R8, [R2]", {8, 9, 10, 11}),
             ("IMAD.WIDE.U32 R4, R2, R3, RZ", {4, 5}), ("@!P0 IMAD.IADD.U32 R88, R88, 0x1, R6", {88}),
             ("MUFU.EX2 R93, R30", {93}), ("HGMMA.64x64x8.F32.TF32 R24, R88, gdesc[UR8], RZ, !UPT", set(range(24, 56))),
             ("STS.128 [R2], R8", set()), ("R2UR UR4, R5", set())]
    for text, want in cases:
        _, op, ops = split(text)
        got = dest_regs(op, ops)
        assert got == want, f"dest_regs({text!r}) = {sorted(got)}, expected {sorted(want)}"


def check(obj, verbose=True):
    results = {}
    for name, ins in functions(obj):
        m = re.search(r"flash_fwd_sm90_tf32_kernelILi(\d+)ELi(\d+)E(?:Lb([01])E)?", name)
        if not m:
            continue
        D, V, idx = int(m.group(1)), int(m.group(2)), m.group(3) == "1"  # IDX: the index-masked kernels (Lb1E)
        # The S chain: from an HGMMA with a register A that does not accumulate (RZ, !UPT) to its gsb0.
        chain, regs = [], set()
        for k, (addr, text) in enumerate(ins):
            _, op, ops = split(text)
            if op.startswith("HGMMA") and len(ops) >= 4 and reg_num(ops[1]) is not None and ops[3] == "RZ":
                j = k
                while True:
                    _, op2, ops2 = split(ins[j][1])
                    if op2.startswith("HGMMA"):
                        chain.append(ins[j][0])
                        a = reg_num(ops2[1])
                        if a is not None:
                            regs |= set(range(a, a + 4))
                        if "gsb0" in ins[j][1]:
                            break
                    j += 1
                break
        if not chain:
            results[(D, V, idx)] = None  # S by SS (Q in shared memory): nothing to check
            if verbose:
                print(f"D={D} V={V}{' IDX' if idx else ''}: S = Q K^T by SS (no register Q): not applicable")
            continue
        # The loop around the chain: a backward branch whose target is at or before the chain's start.
        loops = []
        for addr, text in ins:
            _, op, ops = split(text)
            if op.startswith("BRA") and ops:
                t = re.search(r"0x([0-9a-f]+)", ops[-1])
                if t:
                    target = int(t.group(1), 16)
                    if target <= chain[0] and addr >= chain[-1]:
                        loops.append((target, addr))
        if not loops:
            print(f"D={D} V={V}{' IDX' if idx else ''}: S chain at {chain[0]:#x} in no loop (one key tile per CTA?): cannot check")
            results[(D, V, idx)] = False
            continue
        lo, hi = min(loops, key=lambda x: x[1] - x[0])  # the innermost
        clob = []
        for addr, text in ins:
            if lo <= addr <= hi:
                _, op, ops = split(text)
                w = dest_regs(op, ops) & regs
                if w:
                    clob.append((addr, text, sorted(w)))
        ok = not clob
        results[(D, V, idx)] = ok
        if verbose:
            print(f"D={D} V={V}{' IDX' if idx else ''}: S chain {len(chain)} HGMMA, Q's A registers R{min(regs)}..R{max(regs)} "
                  f"({len(regs)}), loop {lo:#x}..{hi:#x}: "
                  + ("no write to them in the loop: OK" if ok else f"{len(clob)} writes to them in the loop: CLOBBERED"))
            for addr, text, w in clob[:4]:
                print(f"    {addr:#06x}  {text}   (writes R{w[0]}{'..' if len(w) > 1 else ''})")
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("obj")
    ap.add_argument("--expect-bug", action="store_true", help="exit 0 only if some kernel is clobbered")
    args = ap.parse_args()
    parser_selftest()
    res = check(args.obj)
    checked = [v for v in res.values() if v is not None]
    bad = sum(1 for v in checked if not v)
    print(f"{len(checked)} register-Q kernels checked, {bad} with Q's registers written in the key-tile loop")
    if args.expect_bug:
        sys.exit(0 if bad else 1)
    sys.exit(0 if checked and not bad else 1)


if __name__ == "__main__":
    main()
