"""What train_throughput.py and kerashub_train.py share: the timed training loop, running one
configuration in a fresh process, and a table cell of its result."""
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
