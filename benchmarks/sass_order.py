#!/usr/bin/env python3
"""Order of the wgmma / softmax instructions in the SASS of the Hopper forward kernel (no GPU needed).

Reads `cuobjdump -sass` output (a .sass text file, or an object / cubin, which it disassembles with
cuobjdump on PATH or $CUOBJDUMP; cuobjdump needs nvdisasm, $NVDISASM_PATH) and prints, for one
kernel, the sequence of HGMMA issues (SS: both operands from shared memory, RS: A from registers),
WARPGROUP.ARRIVE / DEPBAR, MUFU.EX2, SHFL, FMNMX, F2FP (packing P), FMUL, SYNCS (mbarrier) and BAR
(named barrier) instructions, with runs of one kind collapsed ("MUFU.EX2 x53") and branches shown,
so that the order in the main loop's body is visible:

  python3 benchmarks/sass_order.py flash_fwd_sm90.o 'kernelI13__nv_bfloat16Li128ELb0ELb0ELi5EE'
  python3 benchmarks/sass_order.py flash_fwd_sm90.o KERNEL 0x4000 0x7200   # an address range only

--check (instead of a kernel name) summarizes every flash_fwd_sm90_kernel instantiation that has an
overlapped schedule (a WARPGROUP.DEPBAR.LE gsb0, 0x1: S_n done, O += P_{n-1} V_{n-1} still running):
the MUFU.EX2 / SHFL count between that DEPBAR and the point where the loop next waits for the P V
product (the next DEPBAR.LE gsb0, 0x0 or the loop's back edge, whichever comes first in the code).
The softmax of a 128-key tile (kBc = 128 at D = 64 and 128) has 64 + 2 EX2 per thread (P and the two
alpha), so 66 means all of it runs under the P V product, and 0 that ptxas placed the wait ahead of
it (what CUDA 13.0 did before branch sm90-fwd-overlap: 0 in all 44 overlap instantiations). MUFU.RCP
is counted too: soft-cap's tanhf brings one MUFU.EX2 and one MUFU.RCP per element (64 each in the
index-masked kernels' soft-cap branch, which a call without soft-cap skips), so EX2 - RCP are the softmax's.

  python3 benchmarks/sass_order.py flash_fwd_sm90.o --check

--branches summarizes every kernel instantiation's main loop (the backward branch whose body holds the
most HGMMA; flash_fwd_sm90_kernel's named by its template arguments, the others, e.g. flash_bwd_sm90.o's,
by name and arguments): its size, its BRA instructions (all; on a per-thread predicate @P / @!P, i.e.
divergent-capable; on a uniform one @UP), LDG (global loads: the IDX kernel's k_valid bytes and dense
mask / bias elements), VOTE, HGMMA and LDL / STL (spilled registers' loads and stores). An element-wise
`if` that ptxas kept as a branch shows as one BRA per S element (64 per 128-key tile).

  python3 benchmarks/sass_order.py flash_fwd_sm90.o --branches [NAME_FILTER]

--redg summarizes, for every kernel whose main loop (as --branches finds it) ends with REDG atomics (the
backward's dQ at D = 64 and 256), the scoreboard those REDGs hold until the memory pipe has read their
registers, and the first instruction after the loop's top that waits for that scoreboard (or reuses it): from
the control bits of each instruction (Volta and later: the second 64-bit word's bits 46-48 the write barrier,
49-51 the read barrier, 7 = none, 52-57 the mask of barriers waited for). A first wait at the loop's top means
the next unit cannot start before the memory pipe has taken all of the previous unit's REDGs.

  python3 benchmarks/sass_order.py flash_bwd_sm90.o --redg [NAME_FILTER]

The object comes from e.g. `OUTDIR=/tmp/o ARCHS=90 JOBS=2 bash benchmarks/build_harness.sh` (then
/tmp/o/flash_fwd_sm90.o), or the one nvcc command for cc/kernels/sm90/flash_fwd_sm90.cu it runs.
"""
import os
import re
import shutil
import subprocess
import sys

PAT = re.compile(r'/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;')


def read_sass(path):
  if path.endswith('.sass') or path.endswith('.txt'):
    return open(path).read()
  tool = os.environ.get('CUOBJDUMP') or shutil.which('cuobjdump')
  if not tool:
    sys.exit('cuobjdump not found: set CUOBJDUMP (and NVDISASM_PATH) or pass a .sass file')
  return subprocess.run([tool, '-sass', path], check=True, capture_output=True, text=True).stdout


def functions(text, ctrl=False):
  """{mangled name: [(address, instruction)]}; ctrl: [(address, instruction, write barrier, read barrier, wait
  mask)], the barriers 0-5 or 7 (none), from the second 64-bit word cuobjdump prints (on the line after the
  instruction's)."""
  out, name, pending = {}, None, None
  for line in text.split('\n'):
    s = line.strip()
    if s.startswith('Function :'):
      name, pending = s.split(':', 1)[1].strip(), None
      out[name] = []
      continue
    if not name:
      continue
    m = PAT.search(line)
    if m:
      pending = (int(m.group(1), 16), m.group(2).strip())
      if not ctrl:
        out[name].append(pending)
      continue
    w = re.fullmatch(r'/\*\s*0x([0-9a-f]{16})\s*\*/', s) if ctrl else None
    if w and pending:
      hi = int(w.group(1), 16)
      out[name].append(pending + ((hi >> 46) & 7, (hi >> 49) & 7, (hi >> 52) & 0x3f))
      pending = None
  return out


# The kernels of a file's anonymous namespace: <hash><name length><name>I<template arguments>EEEv.
KERNEL = re.compile(r'_cu_[0-9a-f]{8}\d+(\w+?_kernel)I(\w+?)EEEv')


def redg_waits(text, filt):
  for name, ins in sorted(functions(text, ctrl=True).items()):
    m = KERNEL.search(name)
    if not m or (filt and filt not in name):
      continue
    r = loop_stats([(a, op) for a, op, *_ in ins])
    if r is None:
      continue
    lo, hi, _ = r
    redg = [x for x in ins if lo <= x[0] <= hi and 'REDG' in x[1]]
    if not redg or redg[-1][3] == 7:
      continue
    rb = redg[-1][3]
    body = [x for x in ins if x[0] >= lo]
    # Waits for the barrier, or takes it for itself (the REDGs themselves set it).
    k = next((i for i, x in enumerate(body) if (x[4] >> rb) & 1 or (rb in (x[2], x[3]) and 'REDG' not in x[1])),
             None)
    where = ('never' if k is None else
             '0x%05x, %3d instructions after the loop top: %s' % (body[k][0], k, body[k][1][:60]))
    print('%s %s: loop 0x%05x-0x%05x, %d REDG (read barrier %d), first wait for it at %s' %
          (m.group(1), m.group(2), lo, hi, len(redg), rb, where))


def kind(op):
  o = re.sub(r'^@!?U?P\w+\s+', '', op)
  name = o.split()[0]
  if name.startswith('HGMMA'):
    rs = re.search(r'HGMMA\S*\s+R\d+,\s*R\d+', o) is not None
    return 'HGMMA(%s)' % ('RS' if rs else 'SS') + (' gsb0' if 'gsb0' in o else '')
  if name.startswith('WARPGROUP') or name.startswith('BAR') or name in ('BRA', 'EXIT'):
    return o
  if name.startswith('SYNCS'):
    return name
  for k in ('MUFU.EX2', 'SHFL', 'FMNMX', 'F2FP', 'FMUL'):
    if name.startswith(k):
      return k
  return None


def back_edges(ins):
  edges = []
  for a, op in ins:
    m = re.search(r'BRA\s+(?:\S+\s+)?0x([0-9a-f]+)', op)
    if m and int(m.group(1), 16) < a:
      edges.append((int(m.group(1), 16), a))
  return edges


def order(ins, lo=None, hi=None):
  rows, prev, cnt, first = [], None, 0, 0
  for a, op in ins:
    if (lo is not None and a < lo) or (hi is not None and a > hi):
      continue
    k = kind(op)
    if k is None:
      continue
    if k == prev and not k.startswith(('BRA', 'WARPGROUP', 'BAR', 'EXIT')):
      cnt += 1
      continue
    if prev is not None:
      rows.append((first, prev, cnt))
    prev, cnt, first = k, 1, a
  if prev is not None:
    rows.append((first, prev, cnt))
  return rows


def check(funcs):
  for name, ins in sorted(funcs.items()):
    m = re.search(r'flash_fwd_sm90_kernelI(\w+?)EEEv', name)
    if not m:
      continue
    d1 = [i for i, (a, op) in enumerate(ins) if 'WARPGROUP.DEPBAR.LE gsb0, 0x1' in op]
    if not d1:
      continue  # schedule without overlap
    i = d1[0]
    ex2 = shfl = rcp = 0
    stop = 'end'
    for a, op in ins[i + 1:]:
      k = kind(op)
      if k and k.startswith('WARPGROUP.DEPBAR'):
        stop = 'DEPBAR 0x%x' % a
        break
      if k and k.startswith('BRA') and any(b == a for _, b in back_edges(ins)):
        stop = 'back edge 0x%x' % a
        break
      ex2 += k == 'MUFU.EX2'
      shfl += k == 'SHFL'
      rcp += re.sub(r'^@!?U?P\w+\s+', '', op).startswith('MUFU.RCP')
    print('%-40s DEPBAR 0x1 at 0x%05x: %3d MUFU.EX2, %2d SHFL, %2d MUFU.RCP before the P V wait (%s)' %
          (m.group(1), ins[i][0], ex2, shfl, rcp, stop))


def loop_stats(ins):
  """(lo, hi, {counter: n}) of the loop whose body [target, branch] holds the most HGMMA (conditional
  backward branches only: an unconditional one is the jump back from an out-of-line block, e.g. an
  mbarrier wait's retry, whose span would take in the code before the loop too)."""
  conditional = {a for a, op in ins if op.startswith('@')}
  best = None
  for lo, hi in back_edges(ins):
    if hi not in conditional:
      continue
    n = sum(1 for a, op in ins if lo <= a <= hi and 'HGMMA' in op)
    if n and (best is None or n > best[0] or (n == best[0] and hi - lo > best[2] - best[1])):
      best = (n, lo, hi)
  if best is None:
    return None
  _, lo, hi = best
  c = dict(ins=0, bra=0, bra_p=0, bra_up=0, ldg=0, vote=0, hgmma=0, local=0)
  for a, op in ins:
    if not lo <= a <= hi:
      continue
    c['ins'] += 1
    o = re.sub(r'^@!?U?P\w+\s+', '', op)
    name = o.split()[0] if o else ''
    if name.startswith('BRA'):
      c['bra'] += 1
      c['bra_up'] += op.startswith(('@UP', '@!UP'))
      c['bra_p'] += op.startswith(('@P', '@!P'))
    c['ldg'] += name.startswith('LDG')
    c['vote'] += name.startswith('VOTE')
    c['hgmma'] += name.startswith('HGMMA')
    c['local'] += name.startswith(('LDL', 'STL'))  # register spills' reloads / stores
  return lo, hi, c


def branches(funcs, filt):
  for name, ins in sorted(funcs.items()):
    m = KERNEL.search(name)
    if not m or (filt and filt not in name):
      continue
    label = m.group(2) if m.group(1) == 'flash_fwd_sm90_kernel' else '%s %s' % (m.group(1), m.group(2))
    r = loop_stats(ins)
    if r is None:
      print('%-40s no loop with HGMMA' % label)
      continue
    lo, hi, c = r
    print('%-40s loop 0x%05x-0x%05x %5d ins  BRA %3d (@P %3d, @UP %2d)  LDG %3d  VOTE %2d  HGMMA %2d  LDL/STL %2d' %
          (label, lo, hi, c['ins'], c['bra'], c['bra_p'], c['bra_up'], c['ldg'], c['vote'], c['hgmma'],
           c['local']))


def main():
  if len(sys.argv) < 3:
    sys.exit(__doc__)
  if sys.argv[2] == '--redg':
    redg_waits(read_sass(sys.argv[1]), sys.argv[3] if len(sys.argv) > 3 else None)
    return
  funcs = functions(read_sass(sys.argv[1]))
  if sys.argv[2] == '--check':
    check(funcs)
    return
  if sys.argv[2] == '--branches':
    branches(funcs, sys.argv[3] if len(sys.argv) > 3 else None)
    return
  hits = [n for n in funcs if sys.argv[2] in n]
  if len(hits) != 1:
    sys.exit('%d kernels match %r' % (len(hits), sys.argv[2]))
  ins = funcs[hits[0]]
  lo = int(sys.argv[3], 16) if len(sys.argv) > 3 else None
  hi = int(sys.argv[4], 16) if len(sys.argv) > 4 else None
  print(hits[0])
  print('backward branches (target <- branch):', ', '.join('0x%x <- 0x%x' % e for e in back_edges(ins)))
  for a, k, c in order(ins, lo, hi):
    print('%05x  %s%s' % (a, k, ' x%d' % c if c > 1 else ''))


if __name__ == '__main__':
  try:
    main()
  except BrokenPipeError:
    pass
