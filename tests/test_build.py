"""The build (the Bazel BUILD file and setup.py/build_ops.py build the same sources) and the
README's set-up, snippets and links."""
import glob
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import build_ops  # noqa: E402


def bazel_sources():
    text = open(os.path.join(ROOT, "BUILD")).read()
    return set(re.findall(r'"(cc/[^"]+\.(?:cc|cu))"', text))


def test_build_and_setup_name_the_same_sources():
    setup_sources = set(build_ops.CPU_KERNEL_SOURCES + build_ops.CUDA_KERNEL_SOURCES +
                        build_ops.OP_SOURCES)
    assert bazel_sources() == setup_sources


def test_every_source_file_is_built():
    on_disk = {os.path.relpath(p, ROOT) for ext in ("cc", "cu")
               for p in glob.glob(os.path.join(ROOT, "cc", "**", "*." + ext), recursive=True)}
    on_disk = {p for p in on_disk if not p.startswith("cc/harness/")}
    listed = set(build_ops.CPU_KERNEL_SOURCES + build_ops.CUDA_KERNEL_SOURCES +
                 build_ops.SM90_KERNEL_SOURCES + build_ops.OP_SOURCES)
    assert on_disk == listed


def test_kernels_are_laid_out_per_target():
    """cc/kernels/: the public CUDA header and the one dispatch point at the top, every other
    file in a target's folder (cpu, sm80, sm90) or in common/; Hopper-only sources in sm90/."""
    top = {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "cc", "kernels", "*"))
           if os.path.isfile(p)}
    assert top == {"flash_cuda.h", "flash_cuda_dispatch.cu"}
    folders = {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "cc", "kernels", "*"))
               if os.path.isdir(p)}
    assert folders <= {"common", "cpu", "sm80", "sm90"}, folders
    assert all(s.startswith("cc/kernels/sm90/") for s in build_ops.SM90_KERNEL_SOURCES)
    assert not any(s.startswith("cc/kernels/sm90/") for s in build_ops.CUDA_KERNEL_SOURCES)


def test_kernels_include_no_tensorflow_header():
    for path in glob.glob(os.path.join(ROOT, "cc", "kernels", "**", "*.*"), recursive=True):
        text = open(path).read()
        assert not re.search(r'#include\s*[<"](tensorflow|tsl|xla|third_party)/', text), path


def test_link_uses_gold_where_installed_and_falls_back(monkeypatch):
    """build_ops links with gold where ld.gold is on the PATH (about 2 s against 11 s for bfd on the 2-core machine),
    and links again with the default linker if gold fails; without gold, the default linker alone."""
    ran = []

    def fake_run(cmd):
        ran.append(cmd)
        if "-fuse-ld=gold" in cmd and fail_gold:
            raise RuntimeError("command failed: gold")
        return 1.0

    monkeypatch.setattr(build_ops, "_run", fake_run)
    cmd = ["g++", "-shared", "-o", "lib.so", "a.o"]
    gold_cmd = ["g++", "-shared", "-fuse-ld=gold", "-o", "lib.so", "a.o"]
    for gold, fail_gold, expected in [("/usr/bin/ld.gold", False, [gold_cmd]),
                                      ("/usr/bin/ld.gold", True, [gold_cmd, cmd]),
                                      (None, False, [cmd])]:
        ran.clear()
        monkeypatch.setattr(build_ops.shutil, "which", lambda name, gold=gold: gold if name == "ld.gold" else None)
        assert build_ops._link(cmd) == 1.0
        assert ran == expected
    # Without gold, a failing link is the error.
    monkeypatch.setattr(build_ops, "_run", lambda c: (_ for _ in ()).throw(RuntimeError("bfd fails too")))
    with pytest.raises(RuntimeError, match="bfd fails too"):
        build_ops._link(cmd)


def test_cuda_defines_name_kernel_switches():
    """TF_FLASHATTN_CUDA_DEFINES takes the kernels' FA_* switches (space or comma separated, bare or = an integer) and
    refuses, naming the variable, a malformed entry or a name no CUDA kernel source reads (a misspelt switch would
    otherwise build the defaults unnoticed)."""
    assert build_ops.cuda_defines("") == []
    assert build_ops.cuda_defines("FA_SM90_TF32_D256_FEAT=1, FA_SM90_FWD_SKIP_RESCALE=0 FA_SM90_TF32_D256") == [
        "FA_SM90_TF32_D256_FEAT=1", "FA_SM90_FWD_SKIP_RESCALE=0", "FA_SM90_TF32_D256"]
    for bad, why in [("FA_SM90_TF32_D256_FEET=1", "not a switch of cc/kernels/"),
                     ("FA_CPU_ISA=avx2", "not of the form"), ("FA_CPU_ISA", "not a switch of cc/kernels/"),
                     ("-DFA_SM90_TF32_D256=0", "not of the form"), ("FA_SM90_TF32_D256=x", "not of the form")]:
        with pytest.raises(ValueError, match="TF_FLASHATTN_CUDA_DEFINES: .*" + why):
            build_ops.cuda_defines(bad)


def test_build_passes_cuda_defines_to_every_nvcc_call_and_records_them(monkeypatch, tmp_path):
    """build() with TF_FLASHATTN_CUDA_DEFINES set: each nvcc command carries the -D flags, g++ commands do not, and
    _build_info.py records them (CUDA_DEFINES); a bad value stops the build before any compile. The compiles and the
    link are recorded, not run."""
    ran, info, write_build_info = [], {}, build_ops.write_build_info
    monkeypatch.setattr(build_ops, "_run", lambda cmd: ran.append(cmd) or 0.0)
    monkeypatch.setattr(build_ops, "_link", lambda cmd: ran.append(cmd) or 0.0)
    monkeypatch.setattr(build_ops, "find_nvcc", lambda: "/opt/cuda/bin/nvcc")
    monkeypatch.setattr(build_ops, "tf_flags", lambda: ([], [], "/tf/include", "2.21.0"))
    monkeypatch.setattr(build_ops, "write_build_info", lambda dirs, tf, backends, defines: info.update(
        tf=tf, backends=backends, defines=defines))
    monkeypatch.setenv("TF_FLASHATTN_CUDA_DEFINES", "FA_SM90_TF32_D256_FEAT=1")
    build_ops.build(str(tmp_path / "lib.so"), build_dir=str(tmp_path), verbose=False)
    nvcc = [c for c in ran if c[0] == "/opt/cuda/bin/nvcc"]
    assert len(nvcc) == len(build_ops.CUDA_KERNEL_SOURCES) + len(build_ops.SM90_KERNEL_SOURCES)
    assert all("-DFA_SM90_TF32_D256_FEAT=1" in c for c in nvcc)
    assert not any("-DFA_SM90_TF32_D256_FEAT=1" in c for c in ran if c[0] != "/opt/cuda/bin/nvcc")
    assert info["defines"] == ["FA_SM90_TF32_D256_FEAT=1"] and info["backends"][1].startswith("CUDA")
    ran.clear()
    monkeypatch.setenv("TF_FLASHATTN_CUDA_DEFINES", "FA_SM90_TF32_D256_FEET=1")
    with pytest.raises(ValueError, match="FA_SM90_TF32_D256_FEET"):
        build_ops.build(str(tmp_path / "lib.so"), build_dir=str(tmp_path), verbose=False)
    assert ran == []
    # Written out, the record reads back.
    write_build_info([str(tmp_path)], "2.21.0", ["CPU"], ["FA_SM90_FWD_SKIP_RESCALE=0"])
    ns = {}
    exec((tmp_path / "_build_info.py").read_text(), ns)
    assert ns["CUDA_DEFINES"] == ["FA_SM90_FWD_SKIP_RESCALE=0"] and ns["BACKENDS"] == ["CPU"]


def test_built_library_has_the_backends_this_machine_can_build():
    """CUDA must be in the library wherever nvcc is found (CI compiles every CUDA source)."""
    import tf_flashattn
    backends = tf_flashattn.backends()
    assert "CPU" in backends
    if build_ops.find_nvcc() and build_ops.CUDA_KERNEL_SOURCES:
        assert any(b.startswith("CUDA") for b in backends), backends


# ---------------------------------------------------------------------------------------------
# The README: its set-up commands are what CI runs, its snippets run, its links resolve.

README = os.path.join(ROOT, "README.md")
# A ```python block may be preceded by one of these notes (the test honours them):
#   <!-- snippet: not run (reason) -->                 the block is not run
#   <!-- snippet: needs tf_flashattn.NAME -->          skipped while the package lacks NAME
_BLOCK = re.compile(r"(?:<!-- snippet: (?P<note>[^>]*?) -->\n)?```(?P<lang>\w*)\n(?P<code>.*?)```",
                    re.S)


def readme_blocks(lang):
    text = open(README).read()
    return [(m.group("note") or "", m.group("code")) for m in _BLOCK.finditer(text)
            if m.group("lang") == lang]


def readme_set_up_commands():
    """The commands of the README's first bash block (the set-up), comments stripped."""
    _, code = readme_blocks("bash")[0]
    return [line.split("  #")[0].strip() for line in code.splitlines() if line.strip()]


def test_readme_set_up_is_install_then_tests():
    commands = readme_set_up_commands()
    assert len(commands) == 2, commands
    assert commands[0].startswith("pip install ") and "[test]" in commands[0], commands
    assert commands[1].startswith("python -m pytest"), commands


def test_ci_runs_the_readme_set_up_commands_in_a_fresh_venv():
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    lines = [line.strip() for line in ci.splitlines() if not line.strip().startswith("#")]
    assert any(re.search(r"-m venv ", line) for line in lines), "CI must create a fresh venv"
    for command in readme_set_up_commands():
        # As written in the README, as a whole command of its own (timed by CI's helper `t`).
        assert any(re.fullmatch(r"(t )?" + re.escape(command), line) for line in lines), command
    assert any("examples/train_char_lm.py" in line for line in lines)


PY_BLOCKS = readme_blocks("python")


def test_readme_has_python_snippets_with_known_notes():
    assert len(PY_BLOCKS) >= 4
    for note, _ in PY_BLOCKS:
        assert note == "" or note.startswith("not run (") or re.fullmatch(
            r"needs tf_flashattn\.\w+", note), note


@pytest.mark.parametrize("index", range(len(PY_BLOCKS)))
def test_readme_python_snippet_runs(index, tmp_path):
    import tf_flashattn
    note, code = PY_BLOCKS[index]
    if note.startswith("not run"):
        pytest.skip(note)
    needs = re.fullmatch(r"needs tf_flashattn\.(\w+)", note)
    if needs and not hasattr(tf_flashattn, needs.group(1)):
        pytest.skip(f"the README documents tf_flashattn.{needs.group(1)}, not in the package yet")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
        TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, f"README snippet {index} failed:\n{code}\n{res.stderr[-3000:]}"


def _linked_paths(path, text):
    """Relative paths the document links to or names in backticks, resolved against its folder."""
    here = os.path.dirname(path)
    found = set(re.findall(r"\]\(([^)#\s]+)\)", text))
    found |= set(re.findall(r"`((?:benchmarks|examples|tests|cc|tf_flashattn|results)/[\w./-]*)",
                            text))
    resolved = set()
    for p in found:
        if "://" in p:
            continue
        for base in (here, ROOT):
            if os.path.exists(os.path.join(base, p)):
                break
        else:
            resolved.add(p)
    return resolved


@pytest.mark.parametrize("doc", ["README.md", "benchmarks/RESULTS.md"])
def test_docs_name_only_files_that_exist(doc):
    path = os.path.join(ROOT, doc)
    assert _linked_paths(path, open(path).read()) == set()


def test_results_folders_are_all_cited():
    """RESULTS.md holds the current figures: a results folder it does not cite is a leftover."""
    text = open(os.path.join(ROOT, "benchmarks", "RESULTS.md")).read()
    results = os.path.join(ROOT, "benchmarks", "results")
    for name in sorted(os.listdir(results)):
        assert f"results/{name}" in text, name


def test_readme_names_every_switch_the_kernels_read():
    """Every TF_FLASHATTN_* environment switch named in the C++ sources is documented in the README."""
    names = set()
    for dirpath, _, files in os.walk(os.path.join(ROOT, "cc")):
        for f in files:
            with open(os.path.join(dirpath, f)) as fh:
                names |= set(re.findall(r'"(TF_FLASHATTN_[A-Z0-9_]+)"', fh.read()))
    with open(os.path.join(ROOT, "README.md")) as fh:
        readme = fh.read()
    assert len(names) >= 20, names  # the sources' switches were found
    missing = sorted(n for n in names if not re.search(r"\b%s\b" % n, readme))
    assert not missing, f"switches read by the kernels but not in README.md: {missing}"


def test_kernel_launch_counters():
    """tf_flashattn._ops.kernel_launches() reads the library's Hopper launch counters through ctypes
    (tf_flashattn_kernel_launches, cc/kernels/flash_cuda.h; test_gpu.py's expect_launches checks the
    sm_90 dispatch with it): a dict of the six families in a build with sm_90 among its targets, None in
    one without; calls on the CPU launch none of them."""
    import numpy as np
    import tensorflow as tf

    import tf_flashattn as fa
    from tf_flashattn import _ops

    counts = _ops.kernel_launches()
    if not any("sm_90" in b for b in _ops.backends()):
        assert counts is None
        return
    assert counts is not None, "the library has sm_90 kernels but no tf_flashattn_kernel_launches"
    assert set(counts) == set(_ops.KERNEL_LAUNCH_NAMES) and all(v >= 0 for v in counts.values())
    with tf.device("/CPU:0"):
        x = tf.constant(np.random.default_rng(0).standard_normal((1, 8, 2, 16)), tf.float32)
        fa.dot_product_attention(x, x, x, is_causal=True)
    assert _ops.kernel_launches() == counts
