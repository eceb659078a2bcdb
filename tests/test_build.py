"""The Bazel BUILD file and setup.py/build_ops.py build the same sources."""
import glob
import os
import re
import sys

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
               for p in glob.glob(os.path.join(ROOT, "cc", "*", "*." + ext))}
    on_disk = {p for p in on_disk if not p.startswith("cc/harness/")}
    listed = set(build_ops.CPU_KERNEL_SOURCES + build_ops.CUDA_KERNEL_SOURCES +
                 build_ops.OP_SOURCES)
    assert on_disk == listed


def test_kernels_include_no_tensorflow_header():
    for path in glob.glob(os.path.join(ROOT, "cc", "kernels", "*")):
        text = open(path).read()
        assert not re.search(r'#include\s*[<"](tensorflow|tsl|xla|third_party)/', text), path


def test_built_library_has_the_backends_this_machine_can_build():
    """CUDA must be in the library wherever nvcc is found (CI compiles every CUDA source)."""
    import tf_flashattn
    backends = tf_flashattn.backends()
    assert "CPU" in backends
    if build_ops.find_nvcc() and build_ops.CUDA_KERNEL_SOURCES:
        assert any(b.startswith("CUDA") for b in backends), backends
