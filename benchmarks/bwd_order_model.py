"""Host-side model of the Hopper backward's CTA dispatch (cc/kernels/sm90/flash_bwd_sm90.cu, "Tile
order"): which key-tile order ends a causal backward with the shortest tail. No GPU needed:

  python3 benchmarks/bwd_order_model.py [--sms 132] [--overhead 0 1]

The machine: `sms` SMs, one CTA each (the kernels' shared memory and registers allow one), CTAs dispatched
in linear block order to the first SM that is free (greedy list scheduling, as the block scheduler does
when every CTA needs a whole SM). A CTA's duration is its unit count (query head x 64-row query tile, the
kernels' Units: causal with Tq = Tk, key tile x of kb keys visits query tiles x kb / 64 .. T / 64 - 1) plus
`overhead` units (its K / V loads and dK / dV epilogue). Shapes: the measured ones, B*T = 16384, H = 2048 / D
(no GQA), D = 64 / 128 (128-key tiles), 256 (64-key tiles). Orders (the kernel's bwd_tile):
  0  today's: linear block index = x + nx (hk + Hkv b), key tile fastest
  1  grouped longest-first: (b, hk) pairs in balanced groups of at most G consecutive pairs, key tile
     slowest within a group (G from bwd_auto_group's L2 budget, flash_bwd_sm90.cu; or the --groups given)
  2  pure longest-first: key tile slowest over all pairs (order 1 with G = all pairs)
--check verifies the transcribed map (bwd_tile) instead: a bijection, x - 1 dispatched before x.
Prints, per shape and order, the makespan against the ideal (total units / sms, the makespan of a
perfectly divisible load) and the idle fraction of the SMs (1 - ideal / makespan). It models neither L2
(order 2 spreads the running CTAs over many heads) nor the CTAs' unequal speed (memory-bound light tiles).
"""
import argparse
import heapq

L2_BUDGET = 20 << 20  # bytes per group: bwd_auto_group's kGroupBytes (flash_bwd_sm90.cu)


def auto_group(T, D, G_q=1, pairs=None):
    """bwd_auto_group (flash_bwd_sm90.cu): the pairs whose Q + dO (16-bit), lse2 + dsum and dQ accumulator
    (float32) fit in L2_BUDGET, at least 1, at most all pairs."""
    per_pair = G_q * T * (2 * 2 * D + 8 + 4 * D)
    g = max(1, L2_BUDGET // per_pair)
    return min(g, pairs) if pairs else g


def tiles(T, D, causal=True):
    """Units of each key tile x (one (b, hk) pair, Tq = Tk = T, causal_offset 0)."""
    kb = 64 if D == 256 else 128
    nx, nqb = (T + kb - 1) // kb, (T + 63) // 64
    return [nqb - (x * kb // 64 if causal else 0) for x in range(nx)]


def order_args(pairs, group):
    """flash_bwd_sm90.cu's bwd_tile_order: (order_g, order_big) for groups of at most `group` pairs, balanced
    (0: today's order; a group of one pair is today's order)."""
    g = min(group, pairs)
    if g < 2:
        return 0, 0
    ng = -(-pairs // g)
    return pairs // ng, pairs % ng


def bwd_tile(lin, nx, pairs, order_g, order_big):
    """flash_bwd_sm90.cu's bwd_tile, transcribed (32-bit integer math, C division): (x, pair) of linear block
    index lin = blockIdx.x + nx (blockIdx.y + Hkv blockIdx.z), pair = hk + Hkv b."""
    if order_g == 0:
        return lin % nx, lin // nx
    big = order_big * (order_g + 1) * nx
    if lin < big:
        gs = order_g + 1
        p0 = lin // (gs * nx) * gs
    else:
        gs = order_g
        p0 = order_big * (order_g + 1) + (lin - big) // (gs * nx) * gs
    r = lin - p0 * nx
    x = r // gs
    return x, p0 + (r - x * gs)


def order_list(nx, pairs, group):
    """The (x, pair) of each linear block index: group 0 today's order, else grouped longest-first with
    balanced groups of at most `group` pairs (the kernel's map)."""
    og, ob = order_args(pairs, group) if group else (0, 0)
    return [bwd_tile(lin, nx, pairs, og, ob) for lin in range(nx * pairs)]


def check_map(max_nx=24, max_pairs=24):
    """bwd_tile's map for every nx, pairs <= the bounds and every group size: a bijection onto (x, pair), and
    for every pair x - 1 at a lower linear index than x (the deterministic mode's deadlock freedom)."""
    n = 0
    for nx in range(1, max_nx + 1):
        for pairs in range(1, max_pairs + 1):
            for group in range(0, pairs + 1):
                m = order_list(nx, pairs, group)
                assert sorted(m) == [(x, p) for x in range(nx) for p in range(pairs)], (nx, pairs, group)
                at = {xp: i for i, xp in enumerate(m)}
                assert all(at[(x - 1, p)] < at[(x, p)] for x in range(1, nx) for p in range(pairs)), (nx, pairs, group)
                n += 1
    return n


def makespan(durations, sms):
    free = [0.0] * sms
    heapq.heapify(free)
    end = 0.0
    for d in durations:
        t = heapq.heappop(free) + d
        end = max(end, t)
        heapq.heappush(free, t)
    return end


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--overhead", type=float, nargs="+", default=[0.0, 1.0])
    ap.add_argument("--T", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    ap.add_argument("--groups", type=int, nargs="*", default=None, help="order-1 group sizes (default: auto, 4 x auto)")
    ap.add_argument("--noncausal", action="store_true", help="also the non-causal shapes (equal tiles)")
    ap.add_argument("--check", action="store_true", help="only check bwd_tile's map (bijection, x - 1 first)")
    args = ap.parse_args()
    if args.check:
        print(f"bwd_tile map: {check_map()} (nx, pairs, group) combinations: bijective, x - 1 before x for every pair")
        return
    print(f"SMs {args.sms}, one CTA per SM, greedy dispatch in linear order; CTA = units + overhead")
    print("D    T      causal ovh  CTAs   waves  order        makespan  ideal     make/ideal idle")
    for D in (64, 128, 256):
        H = 2048 // D
        for T in args.T:
            B = max(1, 16384 // T)
            pairs = B * H
            for causal in ((True, False) if args.noncausal else (True,)):
                u = tiles(T, D, causal)
                nx = len(u)
                ga = auto_group(T, D, 1, pairs)
                groups = args.groups if args.groups is not None else sorted({ga, min(pairs, 4 * ga)})
                orders = [("0", 0)] + [(f"1 G={g}", g) for g in groups if 1 < g < pairs] + [("2", pairs)]
                for ovh in args.overhead:
                    total = sum(u) * pairs + ovh * nx * pairs
                    ideal = total / args.sms
                    for name, g in orders:
                        d = [u[x] + ovh for x, _ in order_list(nx, pairs, g)]
                        m = makespan(d, args.sms)
                        print(f"{D:<4} {T:<6} {int(causal):<6} {ovh:<4g} {nx * pairs:<6} {nx * pairs / args.sms:<6.1f} "
                              f"{name:<12} {m:<9.1f} {ideal:<9.1f} {m / ideal:<10.3f} {1 - ideal / m:.3f}")


if __name__ == "__main__":
    main()
