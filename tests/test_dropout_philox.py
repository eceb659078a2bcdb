"""The two forms of Philox4x32-10 in cc/kernels/common/flash_params.h (philox4x32_10<false>, 64-bit
products, which the CPU kernels and most CUDA kernels use; philox4x32_10<true>, 32-bit halves, the Hopper
forward's) give the words of tests/reference.py's Philox on random counters and keys. Compiled on the host
with g++ (the device form differs only in taking the high word from __umulhi)."""
import os
import shutil
import subprocess

import numpy as np
import pytest

from reference import philox4x32_10

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = r"""
#include <cstdio>
#include "cc/kernels/common/flash_params.h"
int main() {
  unsigned c[4], k0, k1;
  while (std::scanf("%u %u %u %u %u %u", &c[0], &c[1], &c[2], &c[3], &k0, &k1) == 6) {
    uint32_t a[4] = {c[0], c[1], c[2], c[3]}, b[4] = {c[0], c[1], c[2], c[3]};
    flashattn::philox4x32_10<false>(a, k0, k1);
    flashattn::philox4x32_10<true>(b, k0, k1);
    std::printf("%u %u %u %u %u %u %u %u\n", a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]);
  }
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_both_philox_forms_give_the_reference_words(tmp_path):
    src, exe = tmp_path / "philox.cc", tmp_path / "philox"
    src.write_text(PROGRAM)
    subprocess.run(["g++", "-std=c++17", "-O2", "-I", ROOT, str(src), "-o", str(exe)], check=True)
    rng = np.random.default_rng()
    keys = rng.integers(0, 2**32, size=(8, 2), dtype=np.uint64)
    ctrs = rng.integers(0, 2**32, size=(8, 512, 4), dtype=np.uint64)
    ctrs[0, :8] = 0                        # counters at the edges of the range too
    ctrs[0, 8:16] = 2**32 - 1
    rows = [(*ctr, *key) for key, block in zip(keys, ctrs) for ctr in block]
    stdin = "\n".join(" ".join(str(int(x)) for x in row) for row in rows) + "\n"
    out = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, check=True).stdout
    got = np.array([line.split() for line in out.strip().split("\n")], dtype=np.uint64)
    assert got.shape == (len(rows), 8)
    want = np.concatenate([np.stack(philox4x32_10(*block.T, int(key[0]), int(key[1])), axis=1)
                           for key, block in zip(keys, ctrs)])
    np.testing.assert_array_equal(got[:, :4], want)
    np.testing.assert_array_equal(got[:, 4:], want)
