"""The CPU kernels' scratch pool (cc/kernels/cpu/flash_cpu_scratch.cc): calls after the first take
their O(N) buffers from blocks earlier calls used, without page-faulting them in again, and a
reused block changes no result (each run in a fresh process: the pool's size is read once)."""
import os
import subprocess
import sys
import textwrap

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Minor page faults of ten forward + backward calls at the last shape given (argv: shapes as
# B,T,H,D), after three warm-up calls at each shape in turn, and the scratch blocks / bytes the pool allocated
# afresh during those ten calls (_ops.cpu_scratch_fresh).
FAULTS = textwrap.dedent("""
    import resource, sys
    import tensorflow as tf
    import tf_flashattn as fa
    from tf_flashattn import _ops
    def make(shape):
        q, k, v, do = (tf.random.normal(shape, seed=i) for i in range(4))
        @tf.function
        def step():
            with tf.GradientTape() as tape:
                tape.watch([q, k, v])
                o = fa.dot_product_attention(q, k, v)
            return tape.gradient(o, [q, k, v], output_gradients=do)
        return step
    steps = [make([int(x) for x in a.split(",")]) for a in sys.argv[1:]]
    for step in steps:
        for _ in range(3):
            step()
    fresh0 = _ops.cpu_scratch_fresh()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        steps[-1]()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    fresh1 = _ops.cpu_scratch_fresh()
    print("FAULTS", faults, fresh1[0] - fresh0[0], fresh1[1] - fresh0[1])
""")


def _faults(*shapes, mb=None):
    """(minor page faults, fresh scratch blocks, their bytes) of FAULTS' ten calls."""
    out = _run(FAULTS, *shapes, mb=mb)
    return tuple(int(x) for x in [l for l in out.splitlines() if l.startswith("FAULTS")][0].split()[1:])


# Calls of different shapes and features one after the other, so that later calls get blocks that
# earlier ones filled: odd lengths and head dims (padded tiles), GQA, masks, dropout, bias, float32,
# bfloat16 and float64, the decoding path (few query rows) and both backward schedules (B x Hkv
# below and above twice the thread count).
SEQUENCE = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    import tf_flashattn as fa
    out = {}
    cases = [
        dict(B=2, Tq=77, Tk=77, H=4, Hkv=2, D=40, dtype=tf.float32, causal=True),
        dict(B=1, Tq=300, Tk=203, H=3, Hkv=3, D=96, dtype=tf.float32, kmask=True, dropout=0.2),
        dict(B=3, Tq=5, Tk=333, H=8, Hkv=2, D=64, dtype=tf.float32),
        dict(B=1, Tq=129, Tk=129, H=2, Hkv=1, D=17, dtype=tf.bfloat16, bias=True),
        dict(B=8, Tq=65, Tk=130, H=6, Hkv=6, D=64, dtype=tf.float32, causal=True),
        dict(B=2, Tq=33, Tk=47, H=2, Hkv=2, D=24, dtype=tf.float64),
        dict(B=2, Tq=77, Tk=77, H=4, Hkv=2, D=40, dtype=tf.float32, causal=True),
    ]
    for n, c in enumerate(cases):
        g = tf.random.Generator.from_seed(n)
        r = lambda *s: tf.cast(g.normal(s), c["dtype"])
        q, k, v = r(c["B"], c["Tq"], c["H"], c["D"]), r(c["B"], c["Tk"], c["Hkv"], c["D"]), r(c["B"], c["Tk"], c["Hkv"], c["D"])
        do = r(c["B"], c["Tq"], c["H"], c["D"])
        kw = dict(is_causal=c.get("causal", False))
        if c.get("kmask"):
            kw["key_mask"] = g.uniform([c["B"], c["Tk"]]) > 0.3
        if c.get("dropout"):
            kw.update(dropout_rate=c["dropout"], seed=tf.constant([3, n], tf.int64))
        bias = r(1, c["H"], c["Tq"], c["Tk"]) if c.get("bias") else None
        with tf.GradientTape() as tape:
            tape.watch([q, k, v] + ([bias] if bias is not None else []))
            o = fa.dot_product_attention(q, k, v, bias=bias, **kw)
        grads = tape.gradient(o, [q, k, v] + ([bias] if bias is not None else []), output_gradients=do)
        for name, t in zip(("o", "dq", "dk", "dv", "dbias"), [o] + grads):
            out[f"{n}_{name}"] = tf.cast(t, tf.float64).numpy()
    np.savez(sys.argv[1], **out)
""")


def _run(code, *args, mb=None, poison=False):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TF_FLASHATTN_CPU_SCRATCH_MB", None)
    env.pop("TF_FLASHATTN_CPU_SCRATCH_POISON", None)
    if mb is not None:
        env["TF_FLASHATTN_CPU_SCRATCH_MB"] = str(mb)
    if poison:
        env["TF_FLASHATTN_CPU_SCRATCH_POISON"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU kernels
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                         timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def test_repeated_backward_calls_do_not_fault_their_scratch_in_again():
    """Ten calls after the warm-up take their packed operands' scratch blocks from the pool: none allocated afresh (so
    none faulted in again), where the pool off (TF_FLASHATTN_CPU_SCRATCH_MB=0) allocates every block of every call
    afresh.
    (Page-fault counts were the measure before; they also count TensorFlow's own tensors and depend on the
    machine's allocator: one 2-core machine gave 97 with the pool, another 12,289 with it and 15,614-23,764 without,
    where ten plain elementwise steps with the same outputs faulted 9,216.)"""
    faults, fresh_blocks, fresh_bytes = _faults("8,128,12,64")
    # One call's scratch at this shape: seven packed operands (two in the forward, five in the backward) of
    # 8 * 12 * 128 * 64 floats, 3 MiB each in 4 MiB blocks, and D (a 64 KiB block). The thread pool's tasks also
    # take small blocks of their own (4-64 KiB, about 300 KiB per backward task), as many at once as tasks overlap:
    # where more overlap than in the warm-up, those are new (10 blocks of 32 KiB with eight test processes on a
    # 16-core machine, 2026-12-06). So the bound is one packed operand's block: any of them afresh fails it (the pool
    # off: about 280 MiB); D's block afresh would not.
    assert fresh_bytes < (4 << 20), (fresh_blocks, fresh_bytes, faults)
    _, fresh0, fresh0_bytes = _faults("8,128,12,64", mb=0)
    assert fresh0 >= 10 * 5 and fresh0_bytes >= 10 * 5 * (3 << 20), (fresh0, fresh0_bytes)


def test_a_full_pool_makes_room_for_the_current_shape():
    """A pool too small for two shapes' buffers at once (TF_FLASHATTN_CPU_SCRATCH_MB=24): after calls
    of a larger shape fill it (5 packed operands of 4 MiB), the new shape's blocks (2 MiB classes)
    must displace them, or all but one of its packed operands would be allocated afresh each call."""
    # (The pool's own count of fresh blocks: page faults also count TensorFlow's tensors, 4,608 on one machine.)
    # The new shape's packed operands take 2 MiB blocks: one afresh would show as 2 MiB or more (a pool that kept the
    # old shape's blocks: about 100 MiB). Less may be the tasks' own small blocks (the test above).
    faults, fresh_blocks, fresh_bytes = _faults("8,256,8,64", "4,128,12,64", mb=24)
    assert fresh_bytes < (2 << 20), (fresh_blocks, fresh_bytes, faults)


def test_reused_and_poisoned_blocks_change_no_result(tmp_path):
    """Blocks that earlier calls filled, and blocks filled with NaN (TF_FLASHATTN_CPU_SCRATCH_POISON:
    a kernel that read scratch it had not written, e.g. a tile's padding, would turn results NaN),
    give the results of fresh blocks bit for bit."""
    fresh = tmp_path / "fresh.npz"
    _run(SEQUENCE, str(fresh), mb=0)
    b = np.load(fresh)
    assert len(b.files) == 7 * 4 + 1
    for name in b.files:
        assert np.isfinite(b[name]).all(), name
    for label, kw in (("pooled", {}), ("poisoned", dict(poison=True))):
        path = tmp_path / f"{label}.npz"
        _run(SEQUENCE, str(path), **kw)
        a = np.load(path)
        assert sorted(a.files) == sorted(b.files), label
        for name in a.files:
            assert np.array_equal(a[name], b[name]), (label, name)
