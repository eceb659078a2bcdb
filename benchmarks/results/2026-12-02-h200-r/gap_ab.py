"""One-off (session 24): our backward op alone through TensorFlow, the absent inputs captured from eager GPU
tensors (gpu_attention.py before this session) against made inside the function, alternated, 10 calls per
timing (gpu_attention.bench), T = 4096, bf16."""
import json, os, sys
sys.path.insert(0, "benchmarks")
os.environ["BENCH_INNER"] = "1"
import tensorflow as tf
import gpu_attention as ga
import tf_flashattn as fa
from tf_flashattn import _ops
lib = _ops.load()
T = int(os.environ.get("GAP_T", "4096"))
rows = []
for D in (64, 128):
    for causal in (False, True):
        B, H, qs, k, v = ga._inputs(D, T)
        q = qs[0]
        out, lse = tf.function(lambda: fa.dot_product_attention(q, k, v, is_causal=causal, return_lse=True))()
        do = tf.random.normal(out.shape, dtype=out.dtype)
        attrs = dict(scale=float(D) ** -0.5, causal=causal)
        eb, ei, em = tf.zeros([0], q.dtype), tf.zeros([0], tf.int32), tf.zeros([0], tf.bool)

        @tf.function
        def captured():
            return lib.flash_attn_flash_attention_grad(q, k, v, em, eb, ei, ei, em, em, tf.zeros([2], tf.int64),
                                                       out, lse, do, tf.zeros([0], tf.float32), **attrs)[:3]

        @tf.function
        def ingraph():
            eb2, ei2, em2 = tf.zeros([0], q.dtype), tf.zeros([0], tf.int32), tf.zeros([0], tf.bool)
            return lib.flash_attn_flash_attention_grad(q, k, v, em2, eb2, ei2, ei2, em2, em2, tf.zeros([2], tf.int64),
                                                       out, lse, do, tf.zeros([0], tf.float32), **attrs)[:3]

        @tf.function
        def tape():  # the user's path: forward and backward by the registered gradient
            with tf.GradientTape() as t:
                t.watch([q, k, v])
                o = fa.dot_product_attention(q, k, v, is_causal=causal)
            return t.gradient(o, [q, k, v], output_gradients=do)

        @tf.function
        def fwd():
            return fa.dot_product_attention(q, k, v, is_causal=causal)
        res = {"captured": [], "ingraph": [], "tape": [], "fwd": []}
        for _ in range(3):
            for name, f in (("captured", captured), ("ingraph", ingraph), ("tape", tape), ("fwd", fwd)):
                res[name].append(round(ga.bench(f, reps=10, inner=1), 4))
        r = dict(D=D, T=T, B=B, H=H, causal=causal, **res)
        print(json.dumps(r), flush=True)
        rows.append(r)
json.dump(rows, open(sys.argv[1], "w"), indent=0)
