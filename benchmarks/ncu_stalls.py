#!/usr/bin/env python3
"""Warp-stall samples per SASS instruction from Nsight Compute's source page (no GPU needed).

Reads the CSV that `ncu -i <report>.ncu-rep --page source --print-source sass --csv` writes (plain or gzipped;
a report taken with `--set full`, which samples warp states) and prints the samples' total, their split by stall
reason, and the N instructions with the most samples (index in the listing, address, samples, share, times
executed, the instruction, its three largest reasons). RESULTS.md's stall figures from (v) on come from it.

  python3 benchmarks/ncu_stalls.py src_bwd64c.csv.gz [N]
"""
import collections
import csv
import gzip
import sys


def read_rows(path):
  opener = gzip.open if path.endswith('.gz') else open
  with opener(path, 'rt', newline='') as f:
    rows = list(csv.reader(f))
  # The first row names the kernel; the second is the header.
  return rows[1], rows[2:]


def summarize(path, n=40):
  hdr, data = read_rows(path)
  col = {h: i for i, h in enumerate(hdr)}
  reasons = [h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
  samples = col['Warp Stall Sampling (All Samples)']

  def num(r, i):
    return int(r[i] or 0)

  total = sum(num(r, samples) for r in data)
  lines = ['total samples %d' % total]
  by_reason = collections.Counter()
  for r in data:
    for h in reasons:
      by_reason[h] += num(r, col[h])
  for h, v in by_reason.most_common(12):
    lines.append('  %-30s %8d %5.1f%%' % (h, v, 100.0 * v / max(total, 1)))
  lines.append('top instructions (index, address, samples, share, executed, instruction, largest reasons):')
  order = sorted(range(len(data)), key=lambda j: -num(data[j], samples))
  for j in order[:n]:
    r = data[j]
    top = sorted(((num(r, col[h]), h[len('stall_'):]) for h in reasons), reverse=True)[:3]
    lines.append('  %5d %s %7d %5.1f%% %9s %-60s %s' % (
        j, r[col['Address']][-5:], num(r, samples), 100.0 * num(r, samples) / max(total, 1),
        r[col['Instructions Executed']], r[col['Source']].strip()[:60], top))
  return '\n'.join(lines)


def main():
  if len(sys.argv) < 2:
    sys.exit(__doc__)
  print(summarize(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40))


if __name__ == '__main__':
  try:
    main()
  except BrokenPipeError:
    pass
