"""tf_flashattn: FlashAttention ops for TensorFlow and Keras.

Set-up, in a fresh virtual environment (installs TensorFlow, Keras and the test dependencies, and
builds the op library against the TensorFlow pinned in pyproject.toml):
    pip install -v -e ".[test]"
Rebuild in place after changing cc/: python build_ops.py
"""
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_ops  # noqa: E402

ALL_SOURCES = (build_ops.CPU_KERNEL_SOURCES + build_ops.CUDA_KERNEL_SOURCES +
               build_ops.OP_SOURCES)


class BuildOps(build_ext):
    """Builds the op library with TensorFlow's own compile and link flags."""

    def build_extension(self, ext):
        out = os.path.abspath(self.get_ext_fullpath(ext.name))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        build_ops.build(out, build_dir=os.path.join(os.path.abspath(self.build_temp), "ops"))


setup(
    name="tf_flashattn",
    ext_modules=[Extension("tf_flashattn._tf_flashattn_ops", sources=ALL_SOURCES,
                           depends=build_ops.HEADERS)],
    cmdclass={"build_ext": BuildOps},
    zip_safe=False,
)
