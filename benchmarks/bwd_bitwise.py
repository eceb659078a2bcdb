"""Two harness builds' backward outputs compared bit for bit, for a change that must not move any value (no GPU
for `compare`). `save` runs each case of CASES (sm90_bwd_check.py's, by name; the D = 128 dropout kernel's by
default) with fresh random inputs from a fixed seed, bf16 and float16, the deterministic dQ reduction on and off,
and saves dQ, dK, dV (and the forward's O, lse) to one .pt file; `compare` reports, per case and tensor, whether two
such files are equal bit for bit. dK and dV are computed on chip per key tile in a fixed order, so they must be
equal; dQ only in deterministic mode (its atomics and bulk adds run in any order otherwise).

  python3 benchmarks/bwd_bitwise.py save LIBDIR OUT.pt [CASE,CASE,...]
  python3 benchmarks/bwd_bitwise.py compare A.pt B.pt
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DEFAULT = ("drop01_d128,drop05_d128_causal_br,drop01_tiles_63_127,drop01_tq1,drop05_empty_rows,drop01_window,"
           "drop01_lengths,drop01_all_masks_dlse,drop01_big_d128_causal")


def save(lib, out, names):
    import sm90_bwd_check as sc
    cases = {c["name"]: c for c in sc.DROP_CASES + sc.NUM_CASES + sc.MASK_CASES}
    h = sc.Harness(lib)
    res = {}
    for name in names:
        for dtype in (torch.bfloat16, torch.float16):
            for det in (False, True):
                c = dict(cases[name], deterministic=det)
                gen = torch.Generator(device=sc.DEV)
                gen.manual_seed(7)
                t = sc.bwd_inputs(c, dtype, gen)
                sc.forward(h, c, t)
                grads, took = sc.backward(h, c, t, True)
                torch.cuda.synchronize()
                key = f"{name}/{str(dtype)[6:]}/{'det' if det else 'atomic'}"
                res[key] = dict({k: t[k].detach().cpu() for k in ("o", "lse")},
                                **{k: grads[k].detach().cpu() for k in ("dq", "dk", "dv")}, sm90=int(took))
    torch.save(res, out)
    print(f"saved {len(res)} runs to {out} (sm90 backward launched in {sum(r['sm90'] for r in res.values())})")


def compare(a_path, b_path):
    a, b = torch.load(a_path), torch.load(b_path)
    bad = 0
    for key in a:
        row = []
        for k in ("o", "lse", "dq", "dk", "dv"):
            x, y = a[key][k], b[key][k]
            same = x.shape == y.shape and torch.equal(x.view(torch.uint8) if x.dtype != torch.float32 else
                                                      x.view(torch.int32), y.view(torch.uint8) if y.dtype !=
                                                      torch.float32 else y.view(torch.int32))
            must = k != "dq" or key.endswith("/det")
            if must and not same:
                bad += 1
            row.append(f"{k} {'equal' if same else ('DIFFERS' if must else 'differs (atomics)')}")
        if not (a[key]["sm90"] and b[key]["sm90"]):
            bad += 1
            row.append("the sm90 backward did not run")
        print(f"{key}: " + ", ".join(row))
    print(f"bitwise: {len(a) * 5 - bad} / {len(a) * 5} outputs as required ({bad} differ that must not)")
    return bad


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "save":
        save(sys.argv[2], sys.argv[3], (sys.argv[4] if len(sys.argv) > 4 else DEFAULT).split(","))
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(1 if compare(sys.argv[2], sys.argv[3]) else 0)
    else:
        sys.exit(__doc__)
