"""What train_throughput.py and kerashub_train.py share: the timed training loops (`train_on_batch`
steps for the first, `model.fit` timed per batch for the second), running one configuration in a
fresh process, and a table cell of its result."""
import json
import os
import subprocess
import sys
import time


def timed_train_steps(model, x, y, warmup, steps, gpu):
    """Runs `warmup` then `steps` `train_on_batch` calls (each returns a number, so each waits for
    its step). Returns (warm-up seconds, [seconds of each timed step], the last loss). On a GPU the
    peak-memory counter is reset after the warm-up, so the peak is the timed steps'."""
    start = time.perf_counter()
    for _ in range(warmup):
        model.train_on_batch(x, y)
    warmed = time.perf_counter()
    if gpu:
        import tensorflow as tf
        tf.config.experimental.reset_memory_stats("GPU:0")
    times, loss = [], None
    for _ in range(steps):
        t = time.perf_counter()
        loss = model.train_on_batch(x, y)
        times.append(time.perf_counter() - t)
    return warmed - start, times, loss


def run_worker(script, cfg, timeout):
    """Runs `script --worker <cfg as JSON>` in a fresh process (memory and compilation never
    carry over) and returns the dict it printed on its `RESULT ` line, or cfg with `error` (and
    `oom` when it ran out of memory)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(script), "--worker",
                               json.dumps(cfg)], capture_output=True, text=True, timeout=timeout,
                              env=env)
    except subprocess.TimeoutExpired:
        return dict(cfg, error=f"timed out after {timeout} s")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    oom = any(w in proc.stderr for w in ("RESOURCE_EXHAUSTED", "out of memory", "OOM"))
    return dict(cfg, oom=oom, error=" | ".join(tail)[-300:])


def cell(r, key, fmt):
    """r[key] formatted, or OOM / error / - (not measured)."""
    if r.get("oom"):
        return "OOM"
    if "error" in r:
        return "error"
    if key not in r:
        return "-"
    return fmt.format(r[key])


def timed_fit(model, x, y, warmup, steps, gpu, on_warm=None):
    """`model.fit` for `warmup + steps` steps on the batch (x, y) repeated (one epoch,
    steps_per_epoch), timing each step from batch end to batch end. A callback that overrides
    `on_train_batch_end` makes Keras call it synchronously with the step's logs converted to
    numbers, so each end time follows its step's completion. Returns (seconds to the end of the
    warm-up: tracing, compilation and the warm-up steps; [seconds of each timed step]; the loss
    Keras reports at the last step (the mean over the epoch, as `fit` logs it); the first step's
    loss). On a GPU the peak-memory counter is reset after the warm-up, so the peak is the timed
    steps'. `on_warm()` is called then too (e.g. to start a profiler)."""
    import keras
    import tensorflow as tf

    ends, losses = [], []

    class Timer(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            losses.append(float(logs["loss"]))
            ends.append(time.perf_counter())
            if batch == warmup - 1:
                if gpu:
                    tf.config.experimental.reset_memory_stats("GPU:0")
                if on_warm:
                    on_warm()
                ends[-1] = time.perf_counter()

    if warmup == 0 and gpu:
        tf.config.experimental.reset_memory_stats("GPU:0")
    data = tf.data.Dataset.from_tensors((x, y)).repeat()
    start = time.perf_counter()
    model.fit(data, epochs=1, steps_per_epoch=warmup + steps, callbacks=[Timer()], verbose=0)
    marks = [start] + ends
    times = [b - a for a, b in zip(marks[warmup:], marks[warmup + 1:])]
    return marks[warmup] - start, times, losses[-1], losses[0]
