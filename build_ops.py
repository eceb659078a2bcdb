"""Builds tf_flashattn's op library against the installed TensorFlow.

One list of sources (also declared in BUILD for Bazel; tests/test_build.py checks that they
agree). The CPU kernel is always built; the CUDA kernels when nvcc is found (set
TF_FLASHATTN_CUDA=0 to skip them). Used by setup.py; runnable on its own:

    python build_ops.py [output.so]
"""
import concurrent.futures
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time

ROOT = os.path.dirname(os.path.abspath(__file__))

# Kernels: no TensorFlow headers. flash_cpu.cc is compiled once per instruction set below.
CPU_KERNEL_SOURCES = ["cc/kernels/cpu/flash_cpu.cc", "cc/kernels/cpu/flash_cpu_dispatch.cc",
                      "cc/kernels/cpu/flash_cpu_scratch.cc"]
CPU_ISA_FLAGS = {
    "avx2": ["-mavx2", "-mfma", "-mf16c"],
    "avx512": ["-mavx512f", "-mavx512vl", "-mavx2", "-mfma", "-mf16c"],
}
CPU_MULTI_ISA = {"cc/kernels/cpu/flash_cpu.cc"}
CUDA_KERNEL_SOURCES = ["cc/kernels/flash_cuda_dispatch.cu", "cc/kernels/sm80/flash_fwd.cu", "cc/kernels/sm80/flash_bwd.cu",
                       "cc/kernels/sm80/flash_bwd_dq.cu", "cc/kernels/sm80/flash_fwd_simt.cu",
                       "cc/kernels/sm80/flash_bwd_simt.cu", "cc/kernels/sm80/flash_fwd_tf32.cu",
                       "cc/kernels/sm80/flash_bwd_tf32.cu", "cc/kernels/sm80/flash_decode.cu"]
# Hopper-only kernels (cc/kernels/sm90/, wgmma / TMA): compiled for sm_90a alone, and only when
# "90" is among CUDA_ARCHS; the other sources then see FA_HAS_SM90=1 (the dispatch in
# cc/kernels/flash_cuda_dispatch.cu takes them on compute capability 9.0).
SM90_KERNEL_SOURCES = ["cc/kernels/sm90/flash_fwd_sm90.cu", "cc/kernels/sm90/flash_fwd_sm90_tf32.cu",
                       "cc/kernels/sm90/flash_bwd_sm90.cu", "cc/kernels/sm90/flash_bwd_sm90_tf32.cu",
                       "cc/kernels/sm90/flash_bwd_sm90_tf32_d128.cu", "cc/kernels/sm90/flash_bwd_sm90_tf32_d256.cu"]
# Compile seconds per source on the 2-core machine (2026-12-05, every CUDA target), for the build's order: longest
# first, so that the two jobs end together (in the listed order the build took ~35 s longer on that machine);
# flash_fwd_sm90.cu scaled by 153 / 236 s for its tuning-only schedules left out of release builds; sm80's
# flash_bwd.cu, flash_bwd_tf32.cu, flash_fwd.cu and flash_fwd_tf32.cu by their compile times on that machine with
# and without the kernel bodies each target's devices never run (SmemClass in cc/kernels/common/flash_cuda_common.cuh:
# 158.6 -> 106.3 s, 120.8 -> 79.7, 127.0 -> 114.7, 49.7 -> 42.4, both targets); flash_fwd_sm90.cu and
# flash_fwd_sm90_tf32.cu by 153.6 / 191.3 and 45.8 / 60.1 s for the schedules only a request reached, now in tuning
# builds alone (schedule_built_for, tf32_variant_built).
COMPILE_SECONDS = {"cc/kernels/sm90/flash_fwd_sm90.cu": 101, "cc/kernels/sm80/flash_bwd.cu": 112,
                   "cc/kernels/sm80/flash_fwd.cu": 119, "cc/kernels/sm90/flash_bwd_sm90.cu": 129,
                   "cc/kernels/sm80/flash_bwd_tf32.cu": 80, "cc/ops/flash_attention_xla.cc": 83,
                   "cc/kernels/sm90/flash_fwd_sm90_tf32.cu": 51, "cc/kernels/sm80/flash_bwd_dq.cu": 62,
                   "cc/kernels/sm90/flash_bwd_sm90_tf32_d128.cu": 58, "cc/kernels/sm80/flash_decode.cu": 55,
                   "cc/kernels/sm80/flash_fwd_tf32.cu": 45, "cc/kernels/sm90/flash_bwd_sm90_tf32.cu": 45,
                   "cc/kernels/sm90/flash_bwd_sm90_tf32_d256.cu": 5,
                   "cc/kernels/cpu/flash_cpu.cc": 18, "cc/ops/flash_attention_kernels.cc": 17,
                   "cc/ops/flash_attention_ops.cc": 12, "cc/kernels/sm80/flash_bwd_simt.cu": 12,
                   "cc/kernels/sm80/flash_fwd_simt.cu": 8, "cc/kernels/flash_cuda_dispatch.cu": 8,
                   "cc/kernels/cpu/flash_cpu_scratch.cc": 1, "cc/kernels/cpu/flash_cpu_dispatch.cc": 1}
# TensorFlow op definitions, kernel glue and the XLA lowering (custom calls through the XLA FFI).
OP_SOURCES = ["cc/ops/flash_attention_ops.cc", "cc/ops/flash_attention_kernels.cc",
              "cc/ops/flash_attention_xla.cc"]
HEADERS = ["cc/kernels/common/flash_params.h", "cc/kernels/cpu/flash_cpu.h", "cc/kernels/flash_cuda.h",
           "cc/kernels/common/flash_cuda_common.cuh", "cc/kernels/common/flash_cuda_internal.h",
           "cc/kernels/sm80/flash_fwd_tile.cuh", "cc/kernels/sm80/flash_bwd_tile.cuh",
           "cc/kernels/common/flash_dropout.cuh",
           "cc/kernels/sm90/sm90_ptx.cuh", "cc/kernels/sm90/sm90_host.cuh", "cc/kernels/sm90/sm90_tf32.cuh",
           "cc/ops/flash_attention_common.h"]
# Third-party headers that TensorFlow's XLA headers include, shipped in its include/external.
XLA_EXTERNAL_INCLUDES = ["external/highwayhash", "external/farmhash_archive/src"]

# Each sm80/ kernel that the dispatch launches only on GPUs with >= 210 KiB of shared memory per SM (or only on the
# others) has its body in the sm_90 SASS (or in the sm_80 one) alone; elsewhere a trap (SmemClass).
# sm_86 and sm_89 GPUs (RTX 30xx / 40xx, A10, L4, L40) run the sm_80 code: cubins are binary compatible
# within compute capability 8.x. Their own targets doubled the sm_80 kernels' compile time (the full
# build took 754 s on the 2-core CI host with 80, 86, 89 and 90) for code that differs only in
# ptxas' scheduling, which no measurement here could weigh (no such GPU on hand).
CUDA_ARCHS = ["80", "90"]
# TF_FLASHATTN_CUDA_ARCHS="90" (space or comma separated) builds fewer targets, e.g. for a quick
# build for one GPU; the default builds all of CUDA_ARCHS.
_ARCHS_ENV = os.environ.get("TF_FLASHATTN_CUDA_ARCHS", "").replace(",", " ").split()
if _ARCHS_ENV:
    CUDA_ARCHS = _ARCHS_ENV


def cuda_defines(value=None):
    """TF_FLASHATTN_CUDA_DEFINES (space or comma separated, e.g. "FA_SM90_TF32_D256_FEAT=1"): the CUDA kernels'
    build-time switches (`#ifndef FA_...` in cc/kernels/, README "For maintainers"), to build a candidate or a former
    code path without editing a source. Each must be a switch some kernel source reads, set to an integer or left
    bare (1), so that a misspelt one fails here instead of building the defaults unnoticed. They go to nvcc as -D
    flags and into _build_info.py (CUDA_DEFINES)."""
    value = os.environ.get("TF_FLASHATTN_CUDA_DEFINES", "") if value is None else value
    known = set()
    for dirpath, _, files in os.walk(os.path.join(ROOT, "cc", "kernels")):
        if os.path.basename(dirpath) == "cpu":  # g++'s (FA_CPU_ISA), not nvcc's
            continue
        for f in files:
            with open(os.path.join(dirpath, f)) as fh:
                known |= set(re.findall(r"^#ifndef (FA_[A-Z0-9_]+)$", fh.read(), re.M))
    out = []
    for d in value.replace(",", " ").split():
        m = re.fullmatch(r"(FA_[A-Z0-9_]+)(=-?[0-9]+)?", d)
        if not m:
            raise ValueError(f"TF_FLASHATTN_CUDA_DEFINES: {d!r} is not of the form FA_NAME or FA_NAME=<integer>")
        if m.group(1) not in known:
            raise ValueError(f"TF_FLASHATTN_CUDA_DEFINES: {m.group(1)} is not a switch of cc/kernels/ "
                             f"(known: {', '.join(sorted(known))})")
        out.append(d)
    return out


CXX_FLAGS = ["-std=c++17", "-O3", "-fPIC", "-Wno-deprecated-declarations"]
# fp-contract: let the tile products use fused multiply-adds.
CPU_KERNEL_FLAGS = ["-ffp-contract=fast"]


def find_nvcc():
    if os.environ.get("TF_FLASHATTN_CUDA", "1") == "0":
        return None
    for cand in [os.environ.get("NVCC"),
                 os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc"),
                 shutil.which("nvcc")]:
        if cand and os.path.exists(cand):
            return cand
    return None


def tf_flags():
    import tensorflow as tf
    inc = tf.sysconfig.get_include()
    return (tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags(), inc, tf.__version__)


def _run(cmd):
    t = time.time()
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError("command failed:\n  " + " ".join(cmd) + "\n" + res.stdout + res.stderr)
    return time.time() - t


def _linker_flags():
    """-fuse-ld=gold where the gold linker is installed: on the 2-core machine it links the library in about 2 s,
    the default (bfd) in about 11 s, at the end of the build where nothing else runs. Same objects, same device
    code (the .nv_fatbin section byte for byte) and the same exported symbols."""
    return ["-fuse-ld=gold"] if shutil.which("ld.gold") else []


def _link(cmd):
    """Runs the link command `cmd` (["g++", "-shared", ...]) with _linker_flags(), and again without them if that
    fails (a gold that cannot link here); returns its seconds."""
    fast = _linker_flags()
    try:
        return _run(cmd[:2] + fast + cmd[2:])
    except RuntimeError as e:
        if not fast:
            raise
        print(f"tf_flashattn: linking with {fast[0]} failed, linking again with the default linker:\n{e}", flush=True)
        return _run(cmd)


def build(output, build_dir=None, jobs=None, verbose=True):
    """Compiles and links the op library into `output`; returns the list of backends built."""
    start = time.time()
    build_dir = build_dir or os.path.join(ROOT, "build", "ops")
    os.makedirs(build_dir, exist_ok=True)
    if importlib.util.find_spec("tensorflow") is None:
        raise RuntimeError("tf_flashattn builds against the installed TensorFlow: pip install tensorflow first")
    nvcc = find_nvcc()
    cuda = bool(nvcc and CUDA_KERNEL_SOURCES)
    cuda_home = os.path.dirname(os.path.dirname(nvcc)) if nvcc else None
    defines = cuda_defines()  # before any compile: a bad value stops the build at once
    jobs = jobs or os.cpu_count() or 2
    # Importing TensorFlow for its flags takes about 13 s here; the kernels (no TensorFlow headers) compile
    # meanwhile, and only the op sources and the link wait for it.
    side = concurrent.futures.ThreadPoolExecutor(1)
    tf_future = side.submit(tf_flags)
    side.shutdown(wait=False)

    def obj(src, tag=""):
        return os.path.join(build_dir, src.replace("/", "_") + tag + ".o")

    def op_cmd(src):
        compile_flags, _, tf_inc, _ = tf_future.result()
        op_defs = ["-DGOOGLE_CUDA=1", "-I" + os.path.join(tf_inc, "third_party/gpus/cuda/include")] if cuda else []
        xla_inc = ["-I" + os.path.join(tf_inc, d) for d in XLA_EXTERNAL_INCLUDES]
        return ["g++", *CXX_FLAGS, "-I.", *compile_flags, *xla_inc, *op_defs, "-c", src, "-o", obj(src)]

    jobs_list, objs = [], []  # (source, the command or a function that returns it)
    for src in CPU_KERNEL_SOURCES:
        variants = CPU_ISA_FLAGS.items() if src in CPU_MULTI_ISA else [("", [])]
        for isa, flags in variants:
            defs = [f"-DFA_CPU_ISA={isa}"] if isa else []
            jobs_list.append((src, ["g++", *CXX_FLAGS, *CPU_KERNEL_FLAGS, *flags, *defs, "-I.", "-c", src,
                                    "-o", obj(src, isa)]))
            objs.append(obj(src, isa))
    for src in OP_SOURCES:
        jobs_list.append((src, lambda src=src: op_cmd(src)))
    sm90 = []
    if cuda:
        gencode = []
        for a in CUDA_ARCHS:
            gencode += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
        nvcc_flags = [nvcc, "-std=c++17", "-O3", "-Xcompiler", "-fPIC", "-I.", "-Xptxas=-O3",
                      *("-D" + d for d in defines)]
        sm90 = SM90_KERNEL_SOURCES if "90" in CUDA_ARCHS else []
        has_sm90 = ["-DFA_HAS_SM90=1"] if sm90 else []
        for src in CUDA_KERNEL_SOURCES:
            jobs_list.append((src, [*nvcc_flags, *gencode, *has_sm90, "-c", src, "-o", obj(src)]))
        for src in sm90:
            jobs_list.append((src, [*nvcc_flags, "-gencode", "arch=compute_90a,code=sm_90a", *has_sm90, "-c", src,
                                    "-o", obj(src)]))
    # Longest jobs first so that the cores finish together (COMPILE_SECONDS; unknown sources first of all).
    jobs_list.sort(key=lambda j: -COMPILE_SECONDS.get(j[0], 1e9))

    def run_job(job):
        return _run(job[1]() if callable(job[1]) else job[1])

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for (src, _), secs in zip(jobs_list, pool.map(run_job, jobs_list)):
            if verbose:
                print(f"  compiled {src} in {secs:.1f}s", flush=True)
    _, link_flags, _, tf_version = tf_future.result()
    objs += [obj(s) for s in OP_SOURCES + (CUDA_KERNEL_SOURCES + sm90 if cuda else [])]
    link = ["g++", "-shared", "-o", output, *objs]
    if cuda:
        # cudart goes in statically BEFORE TensorFlow's flags; after them the linker would take
        # TensorFlow's CUDA stubs instead.
        link += ["-L" + os.path.join(cuda_home, "lib64"), "-l:libcudart_static.a",
                 "-Wl,--exclude-libs,libcudart_static.a"]
    # libtensorflow_cc holds the tf2xla registry (XlaOpKernel, XlaOpRegistrar) the XLA lowering uses.
    link += [*link_flags, "-l:libtensorflow_cc.so.2", "-lpthread", "-ldl", "-lrt"]
    secs = _link(link)
    if verbose:
        print(f"  linked in {secs:.1f}s", flush=True)
    backends = ["CPU"] + (["CUDA (sm_" + ", sm_".join(CUDA_ARCHS) + ")"] if cuda else [])
    # Beside the library, and in the source package (an editable install copies only the
    # library back into the source tree).
    write_build_info({os.path.dirname(os.path.abspath(output)), os.path.join(ROOT, "tf_flashattn")}, tf_version,
                     backends, defines if cuda else [])
    if verbose:
        why = ""
        if not cuda:
            why = (" (CUDA skipped: TF_FLASHATTN_CUDA=0)" if os.environ.get("TF_FLASHATTN_CUDA") == "0"
                   else " (CUDA skipped: nvcc not found)" if not nvcc else " (no CUDA sources)")
        if cuda and defines:
            why += f" with {' '.join(defines)}"
        print(f"tf_flashattn: built backends {', '.join(backends)}{why} against TensorFlow "
              f"{tf_version} in {time.time() - start:.1f}s -> {output}", flush=True)
    return backends


def write_build_info(dirs, tf_version, backends, defines):
    """_build_info.py in each of `dirs`: what the library was built against and with (tf_flashattn._ops reads it)."""
    for pkg_dir in dirs:
        with open(os.path.join(pkg_dir, "_build_info.py"), "w") as f:
            f.write("# Written by build_ops.py.\n")
            f.write(f"TF_VERSION = {tf_version!r}\nBACKENDS = {backends!r}\n")
            f.write(f"CUDA_DEFINES = {defines!r}  # TF_FLASHATTN_CUDA_DEFINES; [] the defaults\n")


def default_output():
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return os.path.join(ROOT, "tf_flashattn", "_tf_flashattn_ops" + suffix)


if __name__ == "__main__":
    build(sys.argv[1] if len(sys.argv) > 1 else default_output())
