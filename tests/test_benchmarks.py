"""The benchmark scripts, smoke-tested on the CPU at tiny sizes (their runs in fresh processes see no GPU, also on a
GPU machine): a device call is too scarce to find out there that a row is missing or mislabelled."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_env(**extra):
    """The environment for a benchmark script's smoke run: this process's, with no GPU visible (on a GPU machine the
    scripts would time GPU rows the checks below do not expect, and the fresh process would need GPU memory beside
    the suite's), plus `extra`."""
    return dict(os.environ, CUDA_VISIBLE_DEVICES="", **extra)


@pytest.fixture(scope="module")
def bench_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "ours.json"
    env = cpu_env(BENCH_TOKENS="512", BENCH_HIDDEN="64", BENCH_T="64,256",
                  BENCH_D="32,16", BENCH_KERAS_D="16,64", BENCH_INNER="2",
                  BENCH_IMPLS="keras,keras_nofold,keras_xla", BENCH_FOLD_MAX=str(8 * 4 * 64 * 64))
    subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_attention.py"), str(out)],
                   check=True, env=env, cwd=ROOT, capture_output=True, timeout=600)
    return json.loads(out.read_text()), out


def test_bench_writes_every_row_with_its_shape(bench_rows):
    rows, _ = bench_rows
    ours = [r for r in rows if r["impl"] == "tf_flashattn"]
    # Ours first, at every shape; then the comparisons at BENCH_KERAS_D only.
    assert [(r["D"], r["T"], r["causal"]) for r in ours] == [
        (D, T, c) for D in (32, 16) for T in (64, 256) for c in (False, True)]
    assert rows[:len(ours)] == ours
    theirs = rows[len(ours):]
    assert [(r["impl"], r["T"], r["causal"]) for r in theirs] == [
        (name, T, c) for T in (64, 256) for c in (False, True)
        for name in ("keras", "keras_nofold", "keras_xla")]
    for r in rows:
        assert (r["H"], r["B"]) == (64 // r["D"], 512 // r["T"]), r
        if "error" in r:
            continue
        assert r["fwd_ms"] > 0 and r["wall_s"] >= 0, r
        if r["impl"] == "tf_flashattn":  # also a steady stream of calls, and no GPU time on the CPU
            assert {"fwd_ms_steady", "bwd_ms_steady"} <= set(r), r
            assert r.get("fwd_gpu_ms") is None and r.get("bwd_gpu_ms") is None, r
        # Ours: the gradient op timed alone. Theirs: (forward+backward) - forward, None when timing
        # noise makes it non-positive (dispatch-bound at these sizes on a busy CPU).
        if r["impl"] == "tf_flashattn":
            assert r["bwd_ms"] > 0, r
        else:
            assert r["fwd_bwd_ms"] > 0, r
            assert (r["bwd_ms"] is None) == (r["fwd_bwd_ms"] <= r["fwd_ms"]), r
        # Constant folding off for keras_nofold only, and on again for every row after it.
        assert r["constant_folding"] == (r["impl"] != "keras_nofold"), r


def test_bench_skips_folded_causal_keras_rows_above_the_limit(bench_rows):
    rows, _ = bench_rows
    skipped = {(r["T"], r["causal"]) for r in rows if "error" in r}
    # B*H*T*T: 8*4*64*64 at T=64 (the limit itself: timed), 2*4*256*256 at T=256 (above: skipped).
    assert skipped == {(256, True)}
    (row,) = [r for r in rows if "error" in r]
    assert row["impl"] == "keras" and "BENCH_FOLD_MAX" in row["error"]


def test_results_table_has_a_line_per_shape(bench_rows, tmp_path):
    _, ours = bench_rows
    anchors = tmp_path / "anchors.json"
    anchors.write_text("[]")
    table = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "results_table.py"),
                            str(anchors), str(ours)], check=True, capture_output=True, text=True,
                           cwd=os.path.join(ROOT, "benchmarks")).stdout.splitlines()
    # The table, then (ours carry *_steady / *_gpu figures) ours timed three ways: a caption, the table.
    main, caption, other = table[:10], table[11], table[13:]
    assert table[10] == table[12] == "" and caption.startswith("Ours timed three ways")
    assert len(main) == 2 + 8 and len(other) == 2 + 8
    for t in (main, other):
        assert all(line.count("|") == t[0].count("|") for line in t)
    # D=16, T=256, causal: Keras skipped, the no-folding and XLA rows timed.
    last = [c.strip() for c in main[-1].strip("|").split("|")]
    assert last[:3] == ["16", "256", "yes"] and last[8] == "skipped"
    assert last[9] != "-" and last[10] != "-"
    rows = {(r["D"], r["T"], r["causal"]): r for r in bench_rows[0] if r["impl"] == "tf_flashattn"}
    for line in other[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        r = rows[(int(cells[0]), int(cells[1]), cells[2] == "yes")]
        assert cells[3] == f"{r['fwd_tflops']:.1f} / {r['bwd_tflops']:.1f}"
        steady = [r[f"{d}_tflops_steady"] for d in ("fwd", "bwd")]
        assert cells[4] == " / ".join(f"{x:.1f}" if x is not None else "-" for x in steady)
        assert cells[5] == "- / -"  # no GPU calls here: no GPU times
        assert cells[7:] == ["-"] * 3  # no anchors


def test_folding_is_restored_after_an_exception():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import gpu_attention
    finally:
        sys.path.pop(0)
    import tensorflow as tf

    before = tf.config.optimizer.get_experimental_options().get("constant_folding", True)
    with pytest.raises(RuntimeError):
        with gpu_attention._folding(False):
            assert tf.config.optimizer.get_experimental_options()["constant_folding"] is False
            raise RuntimeError("a row failed")
    assert tf.config.optimizer.get_experimental_options().get("constant_folding", True) == before


def test_steady_leaves_out_what_each_timing_pays_once(monkeypatch):
    """gpu_attention.steady: a call of 2 ms and a sync after the calls of 20 ms (what a timing pays
    once): bench's 10 calls give 4 ms each, the steady stream 2. On a simulated clock (each call and
    sync advances it), so that a loaded machine's late wake-ups from sleep cannot move the figures."""
    import types
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import gpu_attention
    finally:
        sys.path.pop(0)
    now = [100.0]

    def advance(ms):
        now[0] += ms / 1e3
    monkeypatch.setattr(gpu_attention, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(gpu_attention, "_sync", lambda r: advance(20))

    def call():
        advance(2)
        return []
    loop = gpu_attention.bench(call, reps=10, inner=1)
    assert loop == pytest.approx(4.0), loop
    assert gpu_attention.bench(call, reps=10, inner=2) == pytest.approx(2.0)  # inner calls per fn share the time
    assert gpu_attention.steady(call, reps=10, inner=1) == pytest.approx(2.0)
    assert gpu_attention.steady(call, reps=10, inner=1, loop_ms=loop) == pytest.approx(2.0)  # the loop timed already
    assert gpu_attention.steady(call, reps=10, inner=1, loop_ms=7.0) == pytest.approx((4 * 2.5 - 7.0) / 3)


def test_bench_dtype_float32_rows_say_their_dtype_and_tf32(tmp_path):
    """BENCH_DTYPE=float32 (the TF32 rows): inputs and rows in float32, each row saying whether
    TensorFlow's TF32 setting was on while it ran."""
    out = tmp_path / "f32.json"
    env = cpu_env(BENCH_TOKENS="128", BENCH_HIDDEN="32", BENCH_T="64", BENCH_D="16",
                  BENCH_KERAS_D="16", BENCH_INNER="1", BENCH_IMPLS="keras_xla", BENCH_DTYPE="float32")
    subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_attention.py"), str(out)],
                   check=True, env=env, cwd=ROOT, capture_output=True, timeout=600)
    rows = json.loads(out.read_text())
    assert [(r["impl"], r["causal"]) for r in rows] == [
        ("tf_flashattn", False), ("tf_flashattn", True), ("keras_xla", False), ("keras_xla", True)]
    assert all(r["dtype"] == "float32" and r["tf32"] is True and r["fwd_ms"] > 0 for r in rows)


def _script_rows(tmp_path, script, *args):
    """Runs benchmarks/<script> with args and --json into tmp_path; returns the rows it wrote."""
    out = tmp_path / (os.path.splitext(script)[0] + ".json")
    res = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", script), *args, "--json", str(out)],
                         env=cpu_env(), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(out.read_text())


def test_gpu_decode_times_every_impl_per_row(tmp_path):
    """The serving-loop script: ours, ours under XLA (the op as a custom call) and Keras under XLA
    at each (shape, Tq), each with a time, on the CPU's small shape."""
    rows = _script_rows(tmp_path, "gpu_decode.py", "--tq", "1,3", "--steps", "2", "--dtypes", "float32")
    assert [(r["Tq"], r["impl"]) for r in rows] == [
        (tq, impl) for tq in (1, 3) for impl in ("ours", "ours_xla", "keras_xla")]
    assert all("error" not in r and r["us"] > 0 and r["gbps"] > 0 for r in rows)


def test_gpu_decode_loop_runs_the_steps_in_one_call(tmp_path):
    """--loop N: N chained steps per function call (each step's query the previous output), the
    time per step; the loop itself applies the step N times."""
    import tensorflow as tf
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from gpu_decode import loop
    x = tf.constant([1.0, 3.0])
    assert loop(lambda q: q * 2.0, 0)(x).numpy().tolist() == [2.0, 6.0]
    assert tf.function(loop(lambda q: q * 2.0, 3))(x).numpy().tolist() == [8.0, 24.0]
    rows = _script_rows(tmp_path, "gpu_decode.py", "--tq", "2", "--steps", "6", "--loop", "3",
                        "--repeats", "1", "--dtypes", "float32")
    assert [(r["impl"], r["loop"]) for r in rows] == [
        (impl, 3) for impl in ("ours", "ours_xla", "keras_xla")]
    assert all("error" not in r and r["us"] > 0 for r in rows)


def test_host_overhead_pairs_each_case_with_its_control(tmp_path):
    """Each case is timed in turns with the control of its own kind: the matmul (forward,
    forward + backward), and for Keras' own next() the matmul followed by next()."""
    cases = "eager_fwd_dropout_keras_next,graph_fwd_bwd_causal,xla_fwd_key_mask,graph_control_fwd"
    rows = {r["case"]: r for r in _script_rows(tmp_path, "host_overhead.py", "--calls", "2", "--repeats",
                                               "1", "--seq", "64", "--cases", cases)}
    assert {n: r["control"] for n, r in rows.items()} == {
        "eager_fwd_dropout_keras_next": "eager_control_keras_next",
        "graph_fwd_bwd_causal": "graph_control_fwd_bwd", "xla_fwd_key_mask": "xla_control_fwd",
        "graph_control_fwd": None}
    assert all("error" not in r and r["enqueue_ms"] > 0 for r in rows.values())
    assert all(r["control_ratio"] > 0 for n, r in rows.items() if r["control"])


def test_eager_probe_times_every_case(tmp_path):
    rows = _script_rows(tmp_path, "eager_probe.py", "--calls", "2", "--repeats", "1")
    assert [r["case"] for r in rows] == ["control_mm2", "control_mm1", "read_var", "wrapper_var",
                                         "wrapper", "raw", "raw_absent_cpu", "raw_absent_gpu"]
    assert all(r["host_us"] > 0 for r in rows)


def test_decode_host_probe_times_every_case(tmp_path):
    rows = _script_rows(tmp_path, "decode_host_probe.py", "--calls", "2", "--repeats", "1")
    assert [r["case"] for r in rows] == ["graph_ours", "graph_raw", "graph_mm", "xla_ours", "xla_keras",
                                         "xla_mm", "eager_raw", "eager_mm"]
    assert all("error" not in r and r["us"] > 0 for r in rows)


def test_train_throughput_table_with_one_layer_measured():
    """`--only flash` leaves the Keras column unmeasured: the table shows '-' there (it raised a
    KeyError before, after the measurements, losing them)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import train_throughput
    flash = dict(context=1024, batch=16, dtype="mixed_bfloat16", device="GPU", tokens_per_s=2.5e5,
                 loss=5.0, jit=False, peak_gib=4.9)
    text = train_throughput.table([({"context": 1024}, flash)])
    row = text.splitlines()[-1]
    assert "| - | 250,000 | n/a |" in row and "5.0000" in row
    keras_only = dict(flash, tokens_per_s=1e5)
    assert "| 100,000 | 100,000 | 1.00x |" in train_throughput.table([(keras_only, keras_only)])


def _kerashub_train():
    pytest.importorskip("keras_hub")
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import kerashub_train
    finally:
        sys.path.pop(0)
    return kerashub_train


def test_kerashub_train_fit_smoke(tmp_path):
    """kerashub_train.py at a tiny size on the CPU under XLA: `fit` runs for each variant in its
    own process, the losses agree (same weights and data), our op is in the traced step exactly
    when enabled, and the table has its row."""
    _kerashub_train()
    out = tmp_path / "kh.json"
    env = cpu_env(PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "kerashub_train.py"), "--contexts", "64",
         "--layers", "1", "--dim", "64", "--heads", "4", "--kv-heads", "2", "--vocab", "100",
         "--dtype", "float32", "--tokens-per-step", "128", "--warmup", "1", "--steps", "2",
         "--jit", "true", "--variants", "keras,flash", "--json", str(out)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["variant"]: r for r in json.loads(out.read_text())}
    assert set(rows) == {"keras", "flash"}
    for name, r in rows.items():
        assert "error" not in r, r
        assert r["jit"] is True and r["batch"] == 2 and r["tokens_per_s"] > 0, r
        assert len(r["step_seconds"]) == 2, r
        assert r["has_flash_op"] == (name != "keras"), r
        assert r["has_flash_grad"] == (name != "keras"), r
        assert r["loss"] == pytest.approx(rows["keras"]["loss"], rel=1e-4), r
        assert r["first_loss"] == pytest.approx(rows["keras"]["first_loss"], rel=1e-4), r
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert len(table) == 3 and table[0].count("|") == table[1].count("|") == table[2].count("|")
    assert table[2].startswith("| 64 | 2 |") and "| no / yes |" in table[2]


def test_kerashub_train_max_context_search(monkeypatch):
    """The longest-context search without processes: doubling while tries train, halving after a
    first out-of-memory try (not down to a context known to train), the limit and the budget."""
    kt = _kerashub_train()
    tried = []

    def fake(fits):
        def run(cfg, timeout):
            tried.append((cfg["variant"], cfg["context"]))
            assert cfg["batch"] == 1 and cfg["probe"]
            if cfg["context"] <= fits[cfg["variant"]]:
                return dict(cfg, tokens_per_s=1.0, seconds_per_step=1.0)
            return dict(cfg, oom=True)
        return run

    monkeypatch.setattr(kt, "run", fake({"keras": 8192, "flash": 65536}))
    got = kt.max_context({}, ["keras", "flash"], {"keras": 8192, "flash": 32768},
                         {"keras": 8192}, 1e9, 10, [], log=lambda s: None,
                         floor={"keras": 4096, "flash": 16384})
    assert got == {"keras": 8192, "flash": 65536}
    assert tried == [("keras", 8192), ("flash", 32768), ("flash", 65536), ("flash", 131072)]
    tried.clear()
    monkeypatch.setattr(kt, "run", fake({"keras": 2048, "flash": 16384}))
    got = kt.max_context({}, ["keras", "flash"], {"keras": 8192, "flash": 65536}, {}, 1e9, 10, [],
                         log=lambda s: None, floor={"flash": 16384})
    assert got == {"keras": 2048, "flash": 16384}
    assert tried == [("keras", 8192), ("keras", 4096), ("keras", 2048), ("flash", 65536),
                     ("flash", 32768)]
    tried.clear()
    lines = []
    got = kt.max_context({}, ["flash"], {"flash": 4096}, {}, 30.0, 10, [], log=lines.append)
    assert got == {"flash": None} and tried == [] and "budget" in lines[-1]


def test_gpu_run_refuses_unknown_modes_and_gpu_pair_packs_both_queues(tmp_path):
    """gpu_run.sh exits 2 naming a mode its header does not list (a misspelt mode used to run
    nothing and exit 0, which costs a device call); gpu_pair.sh runs one queue per GPU and packs
    both queues' logs into OUT/pair.tgz."""
    import tarfile
    env = dict(os.environ, OUT=str(tmp_path))
    bad = subprocess.run(["bash", "benchmarks/gpu_run.sh", "hdecode,sm09"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown mode 'sm09'" in bad.stderr, bad.stderr
    pair = subprocess.run(["bash", "benchmarks/gpu_pair.sh", "sm09", "tets"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert pair.returncode == 0, pair.stderr
    assert "== gpu 0: sm09" in pair.stdout and "== gpu 1: tets" in pair.stdout
    assert pair.stdout.count("rc=2") == 2
    with tarfile.open(tmp_path / "pair.tgz") as t:
        names = t.getnames()
    assert "./gpu0/sm09.log" in names and "./gpu1/tets.log" in names, names


def test_features_step_runs_the_dtype_asked_for(tmp_path):
    """benchmarks/tf32_features_step.py's STEP_DTYPE: with bfloat16 every row's step runs in bfloat16 (the dtype of the
    loss its attention output makes), one row per (feature, impl) with a positive time; an unknown dtype is refused
    by the variable's name."""
    out = tmp_path / "step.json"
    env = cpu_env(STEP_DTYPE="bfloat16", STEP_D="32", STEP_T="64", STEP_TOKENS="128", STEP_HIDDEN="64", STEP_STEPS="1",
                  STEP_FEATURES="none,dropout", STEP_LABEL="mine")
    subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "tf32_features_step.py"), str(out)],
                   check=True, env=env, cwd=ROOT, capture_output=True, timeout=600)
    rows = json.loads(out.read_text())
    assert [(r["impl"], r["feature"], r["B"], r["H"]) for r in rows] == [
        ("mine", "none", 2, 2), ("keras_xla", "none", 2, 2), ("mine", "dropout", 2, 2), ("keras_xla", "dropout", 2, 2)]
    for r in rows:
        assert r["dtype"] == "bfloat16" and r["step_ms"] > 0, r
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "tf32_features_step.py")], cwd=ROOT,
                         env=cpu_env(STEP_DTYPE="int32"), capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and "STEP_DTYPE" in bad.stderr, bad.stderr[-500:]


def test_dense_tf_bench_times_each_feature(tmp_path):
    """benchmarks/dense_tf_bench.py (a dense mask and a bias through TensorFlow): a row per (T, feature) with the
    three timings, and Keras under XLA only on the bias row when asked for, at a tiny shape on the CPU."""
    out = tmp_path / "dense.json"
    env = cpu_env(BENCH_T="32", BENCH_TOKENS="64", BENCH_DENSE_KERAS="1")
    subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "dense_tf_bench.py"), str(out)],
                   check=True, env=env, cwd=ROOT, capture_output=True, timeout=600)
    rows = json.loads(out.read_text())
    assert [(r["T"], r["B"], r["feature"]) for r in rows] == [(32, 2, f) for f in ("none", "bias", "mask")]
    for r in rows:
        assert r["fwd_ms_inner1"] > 0 and r["fwd_ms_inner8"] > 0 and r["fwd_bwd_ms_inner1"] > 0
        assert ("keras_xla_fwd_ms_inner1" in r) == (r["feature"] == "bias")


def test_dense_tf_bench_key_mask_rows_and_head_dim(tmp_path):
    """dense_tf_bench.py's key padding-mask rows (BENCH_DENSE_FEATURES, BENCH_DENSE_D): the rows asked for, in order,
    at the head dim asked for (H = 2048 / D), the causal one counted with half the FLOPs; an unknown
    feature is refused by name."""
    out = tmp_path / "pad.json"
    env = cpu_env(BENCH_T="32", BENCH_TOKENS="64", BENCH_DENSE_KERAS="1", BENCH_DENSE_D="64",
                  BENCH_DENSE_FEATURES="key_mask,key_mask_causal")
    subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "dense_tf_bench.py"), str(out)],
                   check=True, env=env, cwd=ROOT, capture_output=True, timeout=600)
    rows = json.loads(out.read_text())
    assert [(r["T"], r["B"], r["H"], r["D"], r["feature"]) for r in rows] == [
        (32, 2, 32, 64, "key_mask"), (32, 2, 32, 64, "key_mask_causal")]
    for r in rows:
        full = 4 * r["B"] * r["H"] * r["T"] ** 2 * r["D"] / (2 if r["feature"].endswith("_causal") else 1)
        assert r["fwd_flops"] == full and r["fwd_ms_inner1"] > 0 and r["fwd_bwd_ms_inner1"] > 0, r
        assert "keras_xla_fwd_ms_inner1" not in r
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "dense_tf_bench.py")], cwd=ROOT,
                         env=cpu_env(BENCH_DENSE_FEATURES="none,padding"), capture_output=True, text=True,
                         timeout=600)
    assert bad.returncode != 0 and "padding" in bad.stderr, bad.stderr[-500:]


def _sass_line(addr, op, wbar=7, rbar=7, wait=0):
    """One instruction as cuobjdump -sass prints it: the instruction with its first 64-bit word, then the
    second word (control bits: 46-48 the write barrier, 49-51 the read barrier, 52-57 the wait mask)."""
    hi = (wbar << 46) | (rbar << 49) | (wait << 52)
    return (f"        /*{addr:04x}*/                   {op} ;   /* 0x0000000000000000 */\n"
            f"                                                   /* 0x{hi:016x} */\n")


@pytest.mark.parametrize("wait_at, expected", [(0, "0x00010,   0 instructions"), (2, "0x00030,   2 instructions")])
def test_sass_order_redg_finds_the_first_wait_for_the_atomics(tmp_path, wait_at, expected):
    """sass_order.py --redg: the REDGs' read barrier (2 here) and the first instruction after the loop's top that
    waits for it; an instruction that waits for another barrier does not count."""
    body = [(0x10, "S2UR UR6, SR_CgaCtaId"), (0x20, "IMAD.SHL.U32 R4, R2, 0x40, RZ"),
            (0x30, "LOP3.LUT R4, R4, 0x1, RZ")]
    text = "\t\tFunction : _ZN9flashattn4cuda4sm9050_GLOBAL__N__c23acdb5_17_flash_bwd_sm90_cu_2369a6a621" \
           "flash_bwd_sm90_kernelI13__nv_bfloat16Li64ELb0ELb0ELb0ELb0EEEv14CUtensorMap_st\n"
    text += _sass_line(0x0, "MOV R2, RZ")
    for k, (a, op) in enumerate(body):
        text += _sass_line(a, op, wait=(1 << 2) if k == wait_at else (1 << 0))
    text += _sass_line(0x40, "HGMMA.64x64x16.F32.BF16 R56, gdesc[UR16], RZ, !UPT")
    text += _sass_line(0x50, "REDG.E.ADD.F32x4.FTZ.RN.STRONG.GPU desc[UR28][R4.64], R24", rbar=2)
    text += _sass_line(0x60, "REDG.E.ADD.F32x4.FTZ.RN.STRONG.GPU desc[UR28][R4.64+0x800], R28", rbar=2)
    text += _sass_line(0x70, "@!P0 BRA 0x10")
    text += _sass_line(0x80, "EXIT")
    path = tmp_path / "k.sass"
    path.write_text(text)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "sass_order.py"), str(path), "--redg"],
                         check=True, capture_output=True, text=True).stdout
    assert "flash_bwd_sm90_kernel 13__nv_bfloat16Li64ELb0ELb0ELb0ELb0" in out, out
    assert "2 REDG (read barrier 2)" in out and "loop 0x00010-0x00070" in out, out
    assert f"first wait for it at {expected}" in out, out


def test_sass_order_check_counts_exp2_and_rcp_before_the_pv_wait(tmp_path):
    """sass_order.py --check: the MUFU.EX2, SHFL and MUFU.RCP (soft-cap's tanhf) between the wait for S
    (DEPBAR.LE gsb0, 0x1) and the wait for P V (0x0); those after the second wait are not counted."""
    text = "\t\tFunction : _ZN9flashattn4cuda4sm9050_GLOBAL__N__c23acdb5_17_flash_fwd_sm90_cu_2369a6a621" \
           "flash_fwd_sm90_kernelI13__nv_bfloat16Li128ELb1ELb0ELi5ELb0EEEv14CUtensorMap_st\n"
    ops = ["WARPGROUP.DEPBAR.LE gsb0, 0x1", "MUFU.EX2 R4, R4", "MUFU.RCP R5, R5", "@P1 MUFU.EX2 R6, R6",
           "SHFL.BFLY PT, R7, R6, 0x1, 0x1f", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "MUFU.EX2 R8, R8",
           "MUFU.RCP R9, R9", "@!P0 BRA 0x0", "EXIT"]
    for k, op in enumerate(ops):
        text += _sass_line(0x10 * k, op)
    path = tmp_path / "k.sass"
    path.write_text(text)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "sass_order.py"), str(path), "--check"],
                         check=True, capture_output=True, text=True).stdout
    assert "13__nv_bfloat16Li128ELb1ELb0ELi5ELb0" in out, out
    assert "2 MUFU.EX2,  1 SHFL,  1 MUFU.RCP before the P V wait (DEPBAR 0x50)" in out, out


def test_harness_calls_helpers_pass_their_arguments_on(tmp_path):
    """benchmarks/harness_calls.sh: harness_ab runs gpu_run.sh ab with the candidate as A, the reference ($AB_REF,
    default /tmp/hR) as B and the shape set, into $OUT/NAME, and prints its table; harness_check runs
    sm90_check.py's phase on the library into $OUT/NAME and prints its summary and failures, not the rest. Run
    against stand-ins for gpu_run.sh and sm90_check.py that record what they were given."""
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "harness_calls.sh").write_text(open(os.path.join(ROOT, "benchmarks", "harness_calls.sh")).read())
    (bench / "gpu_run.sh").write_text('echo "mode=$1 A=$AB_A B=$AB_B set=$AB_LOOP_SET checks=$AB_CHECKS" '
                                      '> "$OUT/ab_summary.log"\n')
    (bench / "sm90_check.py").write_text("import sys\nprint('args', sys.argv[1:])\nprint('numerics: 3 / 3 pass')\n"
                                         "print('FAIL case_x')\n")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    script = ". benchmarks/harness_calls.sh; harness_ab abx /tmp/hC fwdkeyfrac; AB_REF=/tmp/hZ harness_ab aby /tmp/hD fwd; " \
             "harness_check chk numerics /tmp/hC 30"
    res = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=dict(os.environ, OUT=str(out_dir)),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "mode=ab A=/tmp/hC B=/tmp/hR set=fwdkeyfrac checks=loop" in res.stdout, res.stdout
    assert "mode=ab A=/tmp/hD B=/tmp/hZ set=fwd checks=loop" in res.stdout, res.stdout
    assert (out_dir / "abx" / "ab_summary.log").exists() and (out_dir / "aby" / "ab_summary.log").exists()
    assert "chk rc=0" in res.stdout and "numerics: 3 / 3 pass" in res.stdout and "FAIL case_x" in res.stdout
    assert "args" not in res.stdout, res.stdout  # only the summary and failure lines are printed
    log = (out_dir / "chk.log").read_text()
    assert "'--phase', 'numerics', '--lib', '/tmp/hC', '--out', '%s'" % (out_dir / "chk") in log, log


def test_ncu_stalls_totals_reasons_and_ranks_instructions(tmp_path):
    """ncu_stalls.py on a source-page CSV (gzipped): the samples' total, the reasons' shares, the instructions
    ranked by samples with their largest reasons; the 'Not Issued' columns are not counted twice."""
    import gzip
    hdr = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
           "Instructions Executed", "stall_long_sb", "stall_wait", "stall_long_sb (Not Issued)"]
    rows = [["0x7f00000b1d80", "  S2UR UR6, SR_CgaCtaId", "30", "29", "100", "27", "3", "27"],
            ["0x7f00000b1d90", "  UMOV UR5, 0x400", "10", "9", "100", "0", "10", "0"]]
    path = tmp_path / "src.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write('"Kernel Name","k"\n')
        for r in [hdr] + rows:
            f.write(",".join('"%s"' % x for x in r) + "\n")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "ncu_stalls.py"), str(path), "2"],
                         check=True, capture_output=True, text=True).stdout.splitlines()
    assert out[0] == "total samples 40", out
    assert out[1].split() == ["stall_long_sb", "27", "67.5%"] and out[2].split() == ["stall_wait", "13", "32.5%"], out
    top = [line for line in out if "SR_CgaCtaId" in line or "UMOV" in line]
    assert "S2UR" in top[0] and "75.0%" in top[0] and "(27, 'long_sb')" in top[0], top
    assert "UMOV" in top[1] and "25.0%" in top[1], top


def test_harness_loop_ab_summary_pairs_the_builds_per_shape(tmp_path):
    """harness_loop_ab.py summary: per shape the medians over processes of A's and B's loop and do_bench times and
    B / A; a shape that one build lacks is named, not divided; lines other than ABLOOP ones are skipped."""
    def line(tag, D, T, causal, loop, db):
        return "ABLOOP " + json.dumps(dict(tag=tag, D=D, T=T, causal=causal, loop_ms=loop, loops=[loop],
                                           dobench_ms=db, tflops_loop=1.0, order_g=8 if causal else 0))
    lines = [line("A1", 64, 4096, True, 2.0, 2.1), line("B1", 64, 4096, True, 2.2, 2.2),
             line("A2", 64, 4096, True, 1.0, 2.0), line("B2", 64, 4096, True, 2.4, 2.3),
             line("A3", 64, 4096, True, 3.0, 1.9), line("B3", 64, 4096, True, 2.3, 2.4),
             "Traceback (most recent call last):", line("A1", 128, 4096, False, 1.0, 1.0),
             line("A1", 64, 4096, False, 2.0, 2.0).replace('"tag"', '"feature": "key_mask", "tag"'),
             line("B1", 64, 4096, False, 3.0, 2.0).replace('"tag"', '"feature": "key_mask", "tag"'),
             # a forward row of a shape the backward has too: its own row, not pooled with the backward's
             line("A1", 64, 4096, True, 1.0, 1.0).replace('"tag"', '"direction": "fwd", "tag"'),
             line("B1", 64, 4096, True, 1.1, 1.2).replace('"tag"', '"direction": "fwd", "tag"')]
    path = tmp_path / "ab_loop.log"
    path.write_text("\n".join(lines) + "\n")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "harness_loop_ab.py"), "summary",
                          str(path)], check=True, capture_output=True, text=True).stdout.splitlines()
    assert len(out) == 5, out
    assert out[1].startswith("64 4096 0 key_mask | 2.000 / 3.000 1.500 | 2.000 / 2.000 1.000 | 0 0"), out
    assert out[2].startswith("64 4096 1 | 2.000 / 2.300 1.150 | 2.000 / 2.300 1.150 | 8 8"), out
    assert out[3] == "128 4096 0 | missing: B", out
    assert out[4].startswith("fwd 64 4096 1 | 1.000 / 1.100 1.100 | 1.000 / 1.200 1.200"), out


def test_clock_probe_summary_reads_each_series_clock_samples(tmp_path):
    """clock_probe.py summary: each series gets the nvidia-smi samples taken between its start and end (min / median
    SM MHz, max watts, the throttle reasons seen), no sample is "no sample"; per T and timer, ours against cuDNN's
    speed from the medians over rounds; malformed clock lines are skipped."""
    from datetime import datetime

    def stamp(t):
        return datetime.fromtimestamp(t).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]

    def line(kernel, rnd, timer, ms, t0, t1):
        return "PROBE " + json.dumps(dict(T=4096, kernel=kernel, round=rnd, timer=timer, ms=ms, tflops=1.0,
                                          t0=t0, t1=t1))
    base = 1.8e9
    log = tmp_path / "probe.log"
    log.write_text("\n".join([line("ours", 0, "loop10", 1.0, base, base + 1), "noise",
                               line("cudnn", 0, "loop10", 1.2, base + 2, base + 3),
                               line("ours", 1, "loop10", 3.0, base + 4, base + 5),
                               line("cudnn", 1, "loop10", 1.4, base + 6, base + 7),
                               line("ours", 0, "do_bench", 2.0, base + 8, base + 9)]) + "\n")
    clocks = tmp_path / "clocks.csv"
    clocks.write_text("\n".join([f"{stamp(base + 0.2)}, 1980 MHz, 500.0 W, 40, 0x0000000000000000",
                                  f"{stamp(base + 0.7)}, 1900 MHz, 640.5 W, 41, 0x0000000000000004",
                                  f"{stamp(base + 0.9)}, 1800 MHz, 600.0 W, 41, 0x0000000000000004",
                                  "garbled, line", f"{stamp(base + 2.5)}, 1755 MHz, 690.0 W, 45, 0x04"]) + "\n")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "clock_probe.py"), "summary", str(log),
                          str(clocks)], check=True, capture_output=True, text=True).stdout.splitlines()
    assert out[1] == ("4096 ours 0 loop10 | 1.0000 | 1 | 1800 / 1900 (3) | 640 | reasons 0x0000000000000000 "
                      "0x0000000000000004"), out
    assert out[2] == "4096 cudnn 0 loop10 | 1.2000 | 1 | 1755 / 1755 (1) | 690 | reasons 0x04", out
    assert out[3].endswith("| no sample | -"), out
    # loop10: ours median (1.0, 3.0) = 2.0 against cuDNN's median (1.2, 1.4) = 1.3; do_bench has no cuDNN row
    assert out[6:] == ["T=4096 loop10: ours / cudnn speed 0.650x"], out


def test_harness_loop_ab_sets_name_only_known_features():
    """harness_loop_ab.py: every shape of every set names a feature that time_build knows how to set up (a typo would
    only fail on the GPU, after the lease's earlier checks), and each set passes through the command line's check."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import harness_loop_ab as ab
    finally:
        sys.path.pop(0)
    assert {"plain", "mask", "feat", "fwd"} <= set(ab.SETS) and ab.FWD_SETS <= set(ab.SETS)
    for name, shapes in ab.SETS.items():
        for D, T, causal, feature in shapes:
            assert feature in ab.FEATURES, (name, feature)
            assert D in (64, 128, 256) and T % 128 == 0 and isinstance(causal, bool), (name, D, T, causal)
    assert ab.FEATURES["dropout"]["dropout"] == 0.1 and ab.FEATURES["window"] == {"wl": 1024}
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "harness_loop_ab.py"), "time", "lib",
                          "A1", "nosuchset"], capture_output=True, text=True)
    assert out.returncode != 0 and "harness_loop_ab.py time" in out.stderr, out


def test_sm90_tf32_fwd_model_passes_and_catches_its_mutants():
    """benchmarks/sm90_tf32_model.py (host model of the Hopper TF32 forward: descriptor and TMA layouts, the register
    fragments, the pre-pass workspace, the mbarrier protocols under random interleavings, and the head-dim-256 kernel's
    shared memory with one and two consumer warpgroups): every check right and every hazard mutant caught; the one
    mutant that is no hazard with one V^T stage not flagged (the script exits 1 otherwise)."""
    res = subprocess.run([sys.executable, "sm90_tf32_model.py", "--schedules", "600"],
                         cwd=os.path.join(ROOT, "benchmarks"), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "ALL OK" in res.stdout, res.stdout + res.stderr
    one = "variant 3, 1 V^T stage (head dim 256, two warpgroups)"
    assert f"protocol ({one}): 600 / 600 random interleavings" in res.stdout, res.stdout
    assert f"protocol ({one}) mutant v3_producer_no_k_empty_wait: caught in 0 / 300" in res.stdout, res.stdout
    for mutant in ("v3_producer_no_vt_empty_wait", "v3_consumer_no_k_full_wait", "v3_consumer_no_vt_full_wait"):
        line = next(x for x in res.stdout.splitlines() if x.startswith(f"protocol ({one}) mutant {mutant}:"))
        assert " caught in 0 /" not in line, line
    assert "head dim 256, 2 consumer warpgroup(s): Q 128 KiB, K 2 x 32, raw V 0, V^T 1 x 32 KiB, 230488 bytes: OK" \
        in res.stdout, res.stdout


def test_sm90_tf32_bwd_layout_and_mask_model_passes_and_catches_its_mutants():
    """benchmarks/sm90_tf32_bwd_model.py (host model of the Hopper TF32 backward's layouts, index-mask rule,
    deterministic dQ order, dense mask / bias / dbias elements, the head-dim-128 kernel's K^T row-address form and the
    head-dim-256 kernel's layouts):
    every check exact and every mutant caught (the script exits 1 otherwise)."""
    res = subprocess.run([sys.executable, "sm90_tf32_bwd_model.py"], cwd=os.path.join(ROOT, "benchmarks"),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "index masks: 300 / 300" in res.stdout and "ALL CHECKS PASS" in res.stdout
    assert res.stdout.count("caught") >= 10 and "NOT CAUGHT" not in res.stdout
    assert "dQ fragment-ordered accumulator, head dim 128: OK" in res.stdout
    assert "dQ fragment-ordered accumulator, head dim 256: OK" in res.stdout
    assert "deterministic dQ order, 128-key tiles: 300 / 300" in res.stdout
    assert "deterministic dQ order, 64-key tiles: 300 / 300" in res.stdout
    assert "dense mask / bias / dbias elements: 40 / 40" in res.stdout and res.stdout.count("dense mutant") == 6
    assert "d128 dQ mode 4 (K^T from row addresses + 1024 k) seed 1: d128 S^T SS OK" in res.stdout
    assert "d256 plan seed 1: d256 plan S^T SS OK" in res.stdout and res.stdout.count("d256 plan mutant") == 2


def test_sm90_check_expected_variant_models_the_forward_dispatch():
    """benchmarks/sm90_check.py's expected_variant (what the variants / vsanitize phases require each case to have run):
    in a release build a D = 64 / 128 kernel runs its default for a schedule it lacks (7 / 10 for the plain D = 128
    one, by its causal mask; 8 for the plain D = 64 one; 5 for the index-masked ones), 8 and 9 run 5 outside the plain
    D = 64 kernel (and, with FA_SM90_FWD_IDX64_3WG, the index-masked one), the dense kernel its own schedule; head
    dim 256 runs 0 whatever is asked for. Checked in a
    subprocess with torch and triton stubbed (the module imports them; this needs neither)."""
    code = r'''
import sys, json, unittest.mock as m
for name in ("torch", "torch.nn", "torch.nn.functional", "triton", "triton.testing"):
    sys.modules[name] = m.MagicMock()
sys.path.insert(0, sys.argv[1])
import sm90_check as s
cases = {c["name"]: c for c in s.NUM_CASES}
out = {n: [[s.expected_variant(cases[n], v, release) for v in range(11)] for release in (False, True)]
       for n in ("odd_d256", "pad_d192_dv128_causal", "odd_d128", "odd_d128_causal_br", "qk_valid_d128", "odd_d64",
                 "mask_bias_softcap_gqa")}
out["dense"] = s.DENSE_VARIANT
# FA_SM90_FWD_IDX64_3WG (sm90_info()['fwd_idx64_wide']): the D = 64 index-masked kernel has schedule 8 too
for n in ("k_valid_all_true_d64", "softcap_causal_window_d64", "odd_d64", "qk_valid_d128", "bias_d64_causal"):
    out.setdefault(n, [[s.expected_variant(cases[n], v, release) for v in range(11)] for release in (False, True)])
    out[n + "/wide"] = [[s.expected_variant(cases[n], v, release, True) for v in range(11)] for release in (False, True)]
out["drop64/wide"] = s.expected_variant(dict(name="d", B=1, Tq=9, Tk=9, H=1, D=64, dropout=0.1), 8, True, True)
out["w3i"] = [c["name"] for c in s.VARIANT_CASES if c["name"].startswith("w3i_")]
# FA_SM90_FWD_D256_SCHED (sm90_info()['fwd_d256_schedule']): the plain D = 256 kernel's schedule unless 0 is asked for
for n in ("odd_d256", "pad_d192_dv128_causal"):
    out[n + "/d256"] = [[s.expected_variant(cases[n], v, release, False, 3) for v in range(11)] for release in (False, True)]
out["d256_idx"] = [s.expected_variant(dict(name="x", B=1, Tq=9, Tk=9, H=1, D=256, kvalid=True), v, True, False, 3)
                   for v in range(11)]
# FA_SM90_FWD_D256_IDX_SCHED (['fwd_d256_idx_schedule']): the index-masked D = 256 kernel without dropout
idx256 = dict(name="x", B=1, Tq=9, Tk=9, H=1, D=256, kvalid=True)
out["d256_idx2"] = [s.expected_variant(idx256, v, True, False, 3, 2) for v in range(11)]
out["d256_idx2_softcap"] = s.expected_variant(dict(idx256, kvalid=False, softcap=20.0), 5, True, False, 0, 2)
out["d256_idx2_drop"] = s.expected_variant(dict(idx256, dropout=0.1), 5, True, False, 3, 2)
out["d256_idx2_dense"] = s.expected_variant(dict(idx256, mask=(1, 0)), 5, True, False, 3, 2)
out["d256_idx2_plain"] = s.expected_variant(dict(idx256, kvalid=False), 5, True, False, 0, 2)
out["d256_cases"] = [c["name"] for c in s.D256_VARIANT_CASES]
# the defaults phase's expectation (default_schedule) and the flags it reads from sm90_info (schedule_flags)
out["defaults"] = {n: [s.default_schedule(cases[n]), s.default_schedule(cases[n], True, 3, 2)]
                   for n in ("k_valid_all_true_d64", "edges_d256_127_129_causal", "odd_d128", "odd_d64", "qk_valid_d128",
                             "dropout_masks", "mask_bias_softcap_gqa")}
h = m.MagicMock()
h.m.sm90_info.return_value = {"fwd_idx64_wide": True, "fwd_d256_schedule": 3, "fwd_d256_idx_schedule": 2}
out["flags"] = s.schedule_flags(h)
h.m.sm90_info.return_value = {}
out["flags_old"] = s.schedule_flags(h)
out["d256_idx_cases"] = [c["name"] for c in s.D256_IDX_VARIANT_CASES]
print(json.dumps(out))
'''
    res = subprocess.run([sys.executable, "-c", code, os.path.join(ROOT, "benchmarks")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    tuning, release = 0, 1
    for n in ("odd_d256", "pad_d192_dv128_causal"):  # (192 is padded up to 256)
        assert out[n][tuning] == [0] * 11 and out[n][release] == [0] * 11, (n, out[n])
    assert out["odd_d128"][tuning] == [0, 1, 2, 3, 4, 5, 6, 7, 5, 5, 10], out
    assert out["odd_d128"][release] == [0, 7, 7, 7, 7, 5, 7, 7, 5, 5, 10], out
    assert out["odd_d128_causal_br"][release] == [0, 10, 10, 10, 10, 5, 10, 7, 5, 5, 10], out
    assert out["qk_valid_d128"][release] == [0, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5], out
    assert out["odd_d64"][release][:9] == [0, 8, 8, 8, 8, 5, 8, 8, 8], out
    assert out["mask_bias_softcap_gqa"][tuning] == [0] + [out["dense"]] * 10, out
    # With the D = 64 index-masked kernel on schedule 8 (idx64_wide): its cases (a key mask, soft-cap with a window)
    # run 8 as the plain D = 64 kernel does, and 9 in a tuning build; D = 128, the dense kernel and dropout as before.
    for n in ("k_valid_all_true_d64", "softcap_causal_window_d64"):
        assert out[n][release][:9] == [0, 5, 5, 5, 5, 5, 5, 5, 5], (n, out[n])
        assert out[n + "/wide"][release][:9] == [0, 8, 8, 8, 8, 5, 8, 8, 8], (n, out[n + "/wide"])
        assert out[n + "/wide"][tuning] == list(range(11)), (n, out[n + "/wide"])
    assert out["odd_d64/wide"] == out["odd_d64"] and out["qk_valid_d128/wide"] == out["qk_valid_d128"], out
    assert out["bias_d64_causal/wide"] == out["bias_d64_causal"] and out["bias_d64_causal"][release] == [out["dense"]] * 11, out
    assert out["drop64/wide"] == 5, out
    assert len(out["w3i"]) == 5, out  # the index-masked cases around the 192-row tile are in the variants phase
    # With the plain D = 256 kernel on schedule 3 (d256 = 3): 3 whatever is asked for but 0; its index-masked kernel 0.
    for n in ("odd_d256", "pad_d192_dv128_causal"):
        assert out[n + "/d256"][tuning] == [0] + [3] * 10 and out[n + "/d256"][release] == [0] + [3] * 10, out
    assert out["d256_idx"] == [0] * 11, out
    # With the index-masked D = 256 kernel on schedule 2 (d256_idx = 2): index masks and soft-cap run 2 unless 0 is
    # asked for; dropout and the dense kernel keep 0; the plain kernel follows d256 alone.
    assert out["d256_idx2"] == [0] + [2] * 10 and out["d256_idx2_softcap"] == 2, out
    assert out["d256_idx2_drop"] == 0 and out["d256_idx2_dense"] == 0 and out["d256_idx2_plain"] == 0, out
    assert out["d256_idx_cases"] and not set(out["d256_idx_cases"]) & set(out["d256_cases"]), out
    # The defaults phase: DEFAULT_SCHEDULES, but 8 for the D = 64 index-masked case with idx64_wide and the plain
    # D = 256 case's d256; the other kernels keep theirs.
    d = out["defaults"]
    assert d["k_valid_all_true_d64"] == [5, 8] and d["edges_d256_127_129_causal"] == [0, 3], d
    assert d["odd_d128"] == [7, 7] and d["odd_d64"] == [8, 8] and d["qk_valid_d128"] == [5, 5], d
    assert d["dropout_masks"][0] == d["dropout_masks"][1] and d["mask_bias_softcap_gqa"] == [out["dense"]] * 2, d
    assert out["flags"] == {"idx64_wide": True, "d256": 3, "d256_idx": 2}, out
    assert out["flags_old"] == {"idx64_wide": False, "d256": 0, "d256_idx": 0}, out  # a harness without the keys
    assert not any("dropout" in n or "mask_bias" in n for n in out["d256_idx_cases"]), out
    assert "odd_d256" in out["d256_cases"] and "pad_d192_dv128_causal" in out["d256_cases"], out
    assert not any("kvalid" in n or "dropout" in n or "softcap" in n or "mask" in n for n in out["d256_cases"]), out
