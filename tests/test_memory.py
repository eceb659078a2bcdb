"""Extra memory is O(N): forward and backward at T = 32768 on the CPU stay far below one T x T
float32 matrix (4 GiB). Runs in a fresh process so the peak resident size is this work's."""
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import resource, sys
    import tensorflow as tf
    import tf_flashattn as fa
    T, D = int(sys.argv[1]), 64
    q, k, v = (tf.random.normal([1, T, 1, D], seed=i) for i in range(3))
    def step(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out = fa.dot_product_attention(q, k, v, is_causal=False)
            loss = tf.reduce_sum(out * out)
        return out, tape.gradient(loss, [q, k, v])
    small = [t[:, :256] for t in (q, k, v)]
    step(*small)  # load kernels, warm allocator
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out, grads = step(q, k, v)
    float(tf.reduce_sum(out)) + sum(float(tf.reduce_sum(g)) for g in grads)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    io = 4 * T * D * 4 * 2  # out + 3 grads, and the loss temporaries of the same size
    print("GROWTH", after - before, "IO", io)
""")


@pytest.mark.slow
def test_forward_backward_at_32k_stays_o_n():
    T = 32768
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")  # the CPU kernels
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(T)], capture_output=True, text=True,
                         env=env, timeout=1800)
    assert res.returncode == 0, res.stderr[-3000:]
    line = [l for l in res.stdout.splitlines() if l.startswith("GROWTH")][0]
    growth, io = int(line.split()[1]), int(line.split()[3])
    print(f"peak RSS growth {growth / 2**20:.1f} MiB for T={T} (one TxT float32: "
          f"{T * T * 4 / 2**30:.0f} GiB)")
    assert growth - io < 256 * 2**20
