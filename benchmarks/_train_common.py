"""The timed training loop shared by train_throughput.py and kerashub_train.py."""
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
