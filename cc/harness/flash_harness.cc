// Kernel-level harness: the pybind11 module `flash_harness` over the CUDA launchers
// (cc/kernels/flash_cuda.h). Tensors come in through DLPack (any object with __dlpack__, e.g. a
// torch CUDA tensor, or a "dltensor" capsule), so the kernels can be checked and timed against
// PyTorch on the same buffers in one process, without TensorFlow.
//
// Build: bash benchmarks/build_harness.sh (-> .harness_build/flash_harness<EXT_SUFFIX>).
// Used by benchmarks/kernel_harness_check.py, profile_one.py, tune_configs.py, sm90_check.py,
// sm90_bwd_check.py, dropout_speed.py, decode_sweep.py.
//
//   fwd(q, k, v, o, lse, *, scale, softcap=0, causal=False, causal_offset=0, window_left=-1,
//       window_right=-1, mask=None, bias=None, q_lengths=None, k_lengths=None, q_valid=None,
//       k_valid=None, dropout=0.0, seed=(1234, 5678), allow_tf32=False, decode=0, num_splits=0,
//       workspace=None, stream=0)
//     decode: -1 off, 0 auto, 1 on (the decoding path, sm80/flash_decode.cu); num_splits: 0 auto, n
//     forced; workspace: any dtype, compact, 256-byte aligned, >= fwd_workspace_bytes bytes, or
//     None (an internal per-device buffer, grown on demand)
//   fwd_workspace_bytes(q, k, v, *, <the same options>, decode=0, num_splits=0) -> int
//   decode_plan(q, k, v, *, <the same options>, decode=0, num_splits=0) -> dict (splits, warps,
//       stages, ... that the decoding path would launch on the tensors' device)
//   bwd(q, k, v, o, lse, d_o, dq, dk, dv, *, <the same options>, dbias=None, workspace=None,
//       d_lse=None, deterministic=False, stream=0)
//   bwd_workspace_bytes(q, k, v, *, <the same options>, deterministic=False) -> int
//   dropout_mask(B, H, Tq, Tk, rate, seed, out=None) -> bytearray [B, H, Tq, Tk] (1 keep, 0 drop),
//       or fills `out` (host uint8/bool, B*H*Tq*Tk elements, compact) and returns it
//   sm90_info() -> dict(compiled, enabled, fwd_launches); set_sm90(mode) (1 on, 0 off, -1 env);
//   sm90_selftest() -> list of dicts (Hopper building blocks, cc/kernels/sm90/flash_fwd_sm90.cu)
//   set_sm90_bwd(mode) (1 on, 0 off, -1 env: on unless TF_FLASHATTN_SM90_BWD=0); sm90_bwd_selftest() (the
//   backward's wgmma forms, cc/kernels/sm90/flash_bwd_sm90.cu); sm90_info() has bwd_enabled and
//   bwd_launches too, and fwd_variant / fwd_variants / fwd_default_variant / last_fwd_variant:
//   set_sm90_fwd_variant(v) picks the schedule of the plain D = 128 forward (0 .. fwd_variants - 1;
//   -1 env TF_FLASHATTN_SM90_FWD_VARIANT, unset: fwd_default_variant); set_sm90_bwd_order(order,
//   group=0) the backward's key-tile order with a causal mask (0 the launch order, 1 grouped longest-first with
//   `group` pairs per group (0 automatic), 2 longest-first; -1 env TF_FLASHATTN_SM90_BWD_ORDER /
//   _ORDER_G), shown in sm90_info() as bwd_order, bwd_order_group, last_bwd_order_g / _big;
//   set_sm90_tf32(mode) (1 on, 0 off, -1 env: on unless TF_FLASHATTN_SM90_TF32=0): the float32 TF32
//   forward on Hopper (cc/kernels/sm90/flash_fwd_sm90_tf32.cu, allow_tf32 calls); sm90_info() has
//   tf32_enabled, tf32_fwd_launches, tf32_variant(s), last_tf32_variant; set_sm90_tf32_variant(v) (0 ..
//   tf32_variants - 1, -1 env TF_FLASHATTN_SM90_TF32_VARIANT; unset: 3 from 8 query tiles per K / V tile,
//   else 1 (tf32_default_variant); variant 3 needs fwd_workspace_bytes of workspace, which fwd provides
//   when none is passed); sm90_tf32_selftest() its building blocks
//   set_sm90_tf32_bwd(mode) (0 off, 1 .. 7 on with variant 0 .. 6, -1 env: on unless
//   TF_FLASHATTN_SM90_TF32_BWD=0 or TF_FLASHATTN_SM90=0; set_sm90(0) turns it off too): the float32 TF32 backward on Hopper (cc/kernels/sm90/flash_bwd_sm90_tf32.cu,
//   D = 64); sm90_info() has
//   tf32_bwd_enabled and tf32_bwd_launches
//
// Layouts and dtypes as in cc/kernels/common/flash_params.h: q [B, Tq, H, D], k [B, Tk, Hkv, D],
// v [B, Tk, Hkv, Dv], o / d_o [B, Tq, H, Dv] (float32 / float16 / bfloat16, one dtype; the last
// dim contiguous, other strides free; d_o, dq, dk, dv share the strides of o, q, k, v),
// lse / d_lse [B, H, Tq] float32 compact, mask [B, H, Tq, Tk] bool and bias [B, H, Tq, Tk]
// (q's dtype), each dim either full or 1 (broadcast), q_lengths / k_lengths [B] int32,
// q_valid [B, Tq] / k_valid [B, Tk] bool compact, dbias [B, H, Tq, Tk] float32 compact,
// workspace float32 compact, at least bwd_workspace_bytes, 256-byte aligned.
// `stream` is a cudaStream_t as an integer (torch.cuda.current_stream().cuda_stream; 0: the
// legacy default stream). The launch runs on the tensors' device; the caller orders the work
// (the capsules are requested with stream=-1: no synchronization by the producer).
//
// DLPack: the module borrows the tensors. A capsule is read, never consumed (not renamed to
// "used_dltensor", its deleter not called): the capsule, held until the call returns, stays
// responsible for the DLManagedTensor, and the caller's reference keeps the producer alive.
// The structs below are written from the DLPack specification (https://dmlc.github.io/dlpack).
#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "cc/kernels/flash_cuda.h"
#include "cc/kernels/common/flash_cuda_internal.h"  // decode_plan

namespace py = pybind11;

namespace {

// ---------------------------------------------------------------------------------------------
// DLPack ABI (C layout).
namespace dlpack {

enum : int32_t { kCPU = 1, kCUDA = 2, kCUDAHost = 3, kCUDAManaged = 13 };
enum : uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kBool = 6 };

struct Device {
  int32_t device_type;  // DLDeviceType (a C enum: int-sized)
  int32_t device_id;
};

struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; NULL: compact row-major
  uint64_t byte_offset;
};

struct ManagedTensor {  // capsule "dltensor"
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor*);
};

struct Version {
  uint32_t major;
  uint32_t minor;
};

struct ManagedTensorVersioned {  // capsule "dltensor_versioned" (DLPack >= 1.0)
  Version version;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned*);
  uint64_t flags;
  Tensor dl_tensor;
};

constexpr uint64_t kFlagReadOnly = 1;

static_assert(sizeof(Device) == 8 && sizeof(DataType) == 4, "DLPack layout");
static_assert(offsetof(Tensor, device) == 8 && offsetof(Tensor, ndim) == 16 &&
                  offsetof(Tensor, dtype) == 20 && offsetof(Tensor, shape) == 24 &&
                  offsetof(Tensor, strides) == 32 && offsetof(Tensor, byte_offset) == 40 &&
                  sizeof(Tensor) == 48,
              "DLTensor layout");
static_assert(offsetof(ManagedTensor, manager_ctx) == 48 && offsetof(ManagedTensor, deleter) == 56,
              "DLManagedTensor layout");
static_assert(offsetof(ManagedTensorVersioned, flags) == 24 &&
                  offsetof(ManagedTensorVersioned, dl_tensor) == 32,
              "DLManagedTensorVersioned layout");

}  // namespace dlpack

const char* device_name(int32_t t) {
  switch (t) {
    case dlpack::kCPU: return "CPU";
    case dlpack::kCUDA: return "CUDA";
    case dlpack::kCUDAHost: return "CUDA host (pinned)";
    case 4: return "OpenCL";
    case 7: return "Vulkan";
    case 8: return "Metal";
    case 10: return "ROCm";
    case dlpack::kCUDAManaged: return "CUDA managed";
    default: return "other";
  }
}

std::string dtype_name(const dlpack::DataType& d) {
  std::string s;
  switch (d.code) {
    case dlpack::kInt: s = "int" + std::to_string(d.bits); break;
    case dlpack::kUInt: s = "uint" + std::to_string(d.bits); break;
    case dlpack::kFloat: s = "float" + std::to_string(d.bits); break;
    case dlpack::kBfloat: s = "bfloat" + std::to_string(d.bits); break;
    case dlpack::kBool: s = d.bits == 8 ? "bool" : "bool" + std::to_string(d.bits); break;
    default: s = "dtype(code=" + std::to_string(d.code) + ", bits=" + std::to_string(d.bits) + ")";
  }
  if (d.lanes != 1) s += "x" + std::to_string(d.lanes);
  return s;
}

std::string shape_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

[[noreturn]] void fail(const std::string& name, const std::string& msg) {
  throw py::value_error(name + ": " + msg);
}

// A borrowed tensor: what the DLTensor says, plus the capsule that owns it for the call.
struct View {
  std::string name;
  py::object capsule;  // keeps the DLManagedTensor alive (its destructor calls the deleter)
  char* ptr = nullptr;  // data + byte_offset
  dlpack::DataType dtype{0, 0, 0};
  int32_t device_type = 0, device_id = 0;
  bool read_only = false;
  std::vector<int64_t> shape, strides;  // element strides; size-1 dims normalized (see below)

  int64_t ndim() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t x : shape) n *= x;
    return n;
  }
};

// Borrows obj (an object with __dlpack__, or a "dltensor" / "dltensor_versioned" capsule).
// cuda: a CUDA tensor is expected (checked by the caller on the DLTensor's device).
View borrow(py::handle obj, const std::string& name, bool cuda = true) {
  View v;
  v.name = name;
  py::object cap;
  py::object fn;
  if (PyCapsule_CheckExact(obj.ptr())) {
    cap = py::reinterpret_borrow<py::object>(obj);
  } else if (!(fn = py::getattr(obj, "__dlpack__", py::none())).is_none()) {
    if (cuda) {
      // stream=-1: the producer synchronizes nothing; the caller orders the work on `stream`.
      // (No __dlpack_device__ call up front: it costs as much as __dlpack__ itself in torch.)
      try {
        cap = fn(py::arg("stream") = -1);
      } catch (py::error_already_set& e) {
        // Host producers may refuse a stream (stream must be None there): say where it is.
        const std::string what = e.what();
        int32_t dev_type = -1;
        try {
          py::tuple d = obj.attr("__dlpack_device__")();
          dev_type = d[0].cast<int32_t>();
        } catch (const std::exception&) {  // no (usable) __dlpack_device__: the first error says it
        }
        if (dev_type >= 0 && dev_type != dlpack::kCUDA && dev_type != dlpack::kCUDAManaged)
          fail(name, std::string("expected a CUDA device tensor, got a tensor on DLPack device type ") +
                         std::to_string(dev_type) + " (" + device_name(dev_type) + ")");
        fail(name, "__dlpack__(stream=-1) failed: " + what);
      }
    } else {
      try {
        cap = fn();  // host tensors: stream must be None
      } catch (py::error_already_set& e) {
        fail(name, std::string("__dlpack__() failed: ") + e.what());
      }
    }
  } else {
    throw py::type_error(name + ": expected a DLPack tensor (an object with __dlpack__, e.g. a "
                         "torch CUDA tensor) or a \"dltensor\" capsule, got " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))));
  }
  const dlpack::Tensor* t = nullptr;
  PyObject* c = cap.ptr();
  if (PyCapsule_IsValid(c, "dltensor")) {
    auto* m = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
    t = &m->dl_tensor;
  } else if (PyCapsule_IsValid(c, "dltensor_versioned")) {
    auto* m = static_cast<dlpack::ManagedTensorVersioned*>(
        PyCapsule_GetPointer(c, "dltensor_versioned"));
    if (m->version.major != 1)
      fail(name, "unsupported DLPack major version " + std::to_string(m->version.major));
    t = &m->dl_tensor;
    v.read_only = (m->flags & dlpack::kFlagReadOnly) != 0;
  } else if (PyCapsule_CheckExact(c)) {
    const char* n = PyCapsule_GetName(c);
    PyErr_Clear();
    fail(name, std::string("expected a capsule named \"dltensor\", got one named \"") +
                   (n ? n : "(null)") + "\"" +
                   (n && std::strncmp(n, "used_", 5) == 0 ? " (already consumed)" : ""));
  } else {
    throw py::type_error(name + ": __dlpack__() did not return a capsule");
  }
  v.capsule = std::move(cap);
  v.ptr = static_cast<char*>(t->data) + t->byte_offset;
  v.dtype = t->dtype;
  v.device_type = t->device.device_type;
  v.device_id = t->device.device_id;
  if (t->ndim < 0 || (t->ndim > 0 && t->shape == nullptr)) fail(name, "malformed DLTensor");
  v.shape.assign(t->shape, t->shape + t->ndim);
  v.strides.resize(t->ndim);
  // Size-1 dims: any stride addresses the same element, and producers differ (torch exports 1).
  // They get the compact stride of the dims inside them, which keeps the kernels' alignment
  // checks (strides % 8) as for a compact tensor.
  int64_t inner = 1;
  for (int64_t d = t->ndim - 1; d >= 0; --d) {
    const int64_t st = t->strides ? t->strides[d] : inner;
    v.strides[d] = v.shape[d] == 1 ? inner : st;
    inner = v.shape[d] == 1 ? inner : v.strides[d] * v.shape[d];
  }
  return v;
}

// -------------------------------------------------------------------------------------------
// Checks.
enum class Kind { kFloat, kBool, kInt32, kFloat32, kByte };

flashattn::DType float_dtype(const View& v) {
  const auto& d = v.dtype;
  if (d.lanes == 1) {
    if (d.code == dlpack::kFloat && d.bits == 32) return flashattn::DType::kFloat32;
    if (d.code == dlpack::kFloat && d.bits == 16) return flashattn::DType::kFloat16;
    if (d.code == dlpack::kBfloat && d.bits == 16) return flashattn::DType::kBFloat16;
  }
  fail(v.name, "expected dtype float32, float16 or bfloat16, got " + dtype_name(d));
}

void check_kind(const View& v, Kind k) {
  const auto& d = v.dtype;
  bool ok = d.lanes == 1;
  const char* want = "";
  switch (k) {
    case Kind::kFloat: float_dtype(v); return;
    case Kind::kBool:  // torch exports bool as kDLBool/8; older producers as uint8
      ok = ok && d.bits == 8 && (d.code == dlpack::kBool || d.code == dlpack::kUInt);
      want = "bool";
      break;
    case Kind::kByte:
      ok = ok && d.bits == 8 && (d.code == dlpack::kBool || d.code == dlpack::kUInt);
      want = "uint8 or bool";
      break;
    case Kind::kInt32:
      ok = ok && d.code == dlpack::kInt && d.bits == 32;
      want = "int32";
      break;
    case Kind::kFloat32:
      ok = ok && d.code == dlpack::kFloat && d.bits == 32;
      want = "float32";
      break;
  }
  if (!ok) fail(v.name, std::string("expected dtype ") + want + ", got " + dtype_name(d));
}

void check_cuda(const View& v) {
  if (v.device_type != dlpack::kCUDA && v.device_type != dlpack::kCUDAManaged)
    fail(v.name, std::string("expected a CUDA device tensor, got a tensor on DLPack device type ") +
                     std::to_string(v.device_type) + " (" + device_name(v.device_type) + ")");
}

void check_writable(const View& v) {
  if (v.read_only) fail(v.name, "is read-only (DLPack flag), but it is an output");
}

// Shape equal to `want` (named dims for the message, e.g. "[B, Tq, H, D]").
void check_shape(const View& v, const std::vector<int64_t>& want, const char* dims) {
  if (v.shape != want)
    fail(v.name, std::string("expected shape ") + dims + " = " + shape_str(want) + ", got " +
                     shape_str(v.shape));
}

bool is_compact(const View& v) {
  int64_t inner = 1;
  for (int64_t d = v.ndim() - 1; d >= 0; --d) {
    if (v.shape[d] != 1 && v.strides[d] != inner) return false;
    inner *= v.shape[d];
  }
  return true;
}

void check_compact(const View& v) {
  if (!is_compact(v))
    fail(v.name, "must be compact (row-major contiguous), got strides " + shape_str(v.strides) +
                     " for shape " + shape_str(v.shape));
}

void check_last_contiguous(const View& v) {
  if (v.shape.back() > 1 && v.strides.back() != 1)
    fail(v.name, "the last (head) dim must be contiguous (stride 1), got strides " +
                     shape_str(v.strides));
}

// `v` (dq, dk, dv, d_o) is addressed with the strides of `ref` (q, k, v, o).
void check_same_strides(const View& v, const View& ref) {
  for (int64_t d = 0; d < v.ndim(); ++d)
    if (v.shape[d] > 1 && v.strides[d] != ref.strides[d])
      fail(v.name, "must have the strides of " + ref.name + " " + shape_str(ref.strides) +
                       ", got " + shape_str(v.strides));
}

void copy3(int64_t dst[3], const View& v) {
  for (int x = 0; x < 3; ++x) dst[x] = v.strides[x];
}

// mask / bias: rank 4, each dim full or 1 (broadcast: stride 0).
void broadcast_strides(const View& v, const int64_t full[4], int64_t out[4]) {
  const std::vector<int64_t> f(full, full + 4);
  if (v.ndim() != 4)
    fail(v.name, "must be rank 4 and broadcastable to [B, H, Tq, Tk] = " + shape_str(f) +
                     ", got shape " + shape_str(v.shape));
  for (int d = 0; d < 4; ++d) {
    if (v.shape[d] != 1 && v.shape[d] != full[d])
      fail(v.name, "shape " + shape_str(v.shape) + " does not broadcast to [B, H, Tq, Tk] = " +
                       shape_str(f) + " (dim " + std::to_string(d) + ")");
    out[d] = v.shape[d] == 1 ? 0 : v.strides[d];
  }
}

// -------------------------------------------------------------------------------------------
// Arguments shared by fwd / bwd / bwd_workspace_bytes.
struct Options {
  double scale = 1.0, softcap = 0.0;
  bool causal = false;
  int64_t causal_offset = 0, window_left = -1, window_right = -1;
  py::object mask, bias, q_lengths, k_lengths, q_valid, k_valid;
  double dropout = 0.0;
  std::pair<int64_t, int64_t> seed{1234, 5678};
  bool allow_tf32 = false;
};

#define FA_OPTION_PARAMS                                                                       \
  double scale, double softcap, bool causal, int64_t causal_offset, int64_t window_left,       \
      int64_t window_right, py::object mask, py::object bias, py::object q_lengths,            \
      py::object k_lengths, py::object q_valid, py::object k_valid, double dropout,            \
      std::pair<int64_t, int64_t> seed, bool allow_tf32
#define FA_OPTION_VALUES                                                                       \
  Options{scale,     softcap,   causal,  causal_offset, window_left, window_right, mask, bias, \
          q_lengths, k_lengths, q_valid, k_valid,       dropout,     seed,         allow_tf32}
#define FA_OPTION_ARGS                                                                         \
  py::kw_only(), py::arg("scale"), py::arg("softcap") = 0.0, py::arg("causal") = false,        \
      py::arg("causal_offset") = 0, py::arg("window_left") = -1, py::arg("window_right") = -1, \
      py::arg("mask") = py::none(), py::arg("bias") = py::none(),                              \
      py::arg("q_lengths") = py::none(), py::arg("k_lengths") = py::none(),                    \
      py::arg("q_valid") = py::none(), py::arg("k_valid") = py::none(),                        \
      py::arg("dropout") = 0.0, py::arg("seed") = std::pair<int64_t, int64_t>(1234, 5678),     \
      py::arg("allow_tf32") = false

// Borrowed views of one call; they live until the launch returned (a deque: references to
// its elements stay valid as views are added).
struct Call {
  std::deque<View> views;
  int device = -1;

  const View& add(py::handle obj, const char* name) {
    views.push_back(borrow(obj, name));
    View& v = views.back();
    check_cuda(v);
    if (device < 0) device = v.device_id;
    else if (v.device_id != device)
      fail(name, "is on CUDA device " + std::to_string(v.device_id) + ", but " + views[0].name +
                     " is on device " + std::to_string(device));
    return v;
  }
};

// `v` has the dtype of q.
void check_dtype_of_q(const View& v, const View& q) {
  if (float_dtype(v) != float_dtype(q))
    fail(v.name, "dtype " + dtype_name(v.dtype) + " differs from q's " + dtype_name(q.dtype));
}

// The kernels read the dropout seed from device memory (no host round trip in the ops). The
// harness keeps one small device buffer per (device, seed), made on first use; a synchronous
// copy then, none afterwards.
const int64_t* device_seed(std::pair<int64_t, int64_t> seed) {
  static std::mutex mu;
  static std::map<std::tuple<int, int64_t, int64_t>, int64_t*> buffers;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) throw std::runtime_error("cudaGetDevice failed");
  std::lock_guard<std::mutex> lock(mu);
  int64_t*& buf = buffers[std::make_tuple(dev, seed.first, seed.second)];
  if (buf == nullptr) {
    const int64_t host[2] = {seed.first, seed.second};
    if (cudaMalloc(reinterpret_cast<void**>(&buf), sizeof(host)) != cudaSuccess ||
        cudaMemcpy(buf, host, sizeof(host), cudaMemcpyHostToDevice) != cudaSuccess) {
      buf = nullptr;
      throw std::runtime_error("could not place the dropout seed in device memory");
    }
  }
  return buf;
}

template <typename P>
void fill_common(P* p, Call* call, py::handle q_, py::handle k_, py::handle v_, const Options& o) {
  const View& q = call->add(q_, "q");
  const View& k = call->add(k_, "k");
  const View& v = call->add(v_, "v");
  p->dtype = float_dtype(q);
  check_dtype_of_q(k, q);
  check_dtype_of_q(v, q);
  if (q.ndim() != 4) fail("q", "expected rank 4 [B, Tq, H, D], got shape " + shape_str(q.shape));
  if (k.ndim() != 4) fail("k", "expected rank 4 [B, Tk, Hkv, D], got shape " + shape_str(k.shape));
  if (v.ndim() != 4) fail("v", "expected rank 4 [B, Tk, Hkv, Dv], got shape " + shape_str(v.shape));
  flashattn::AttnShape& s = p->shape;
  s.B = q.shape[0]; s.Tq = q.shape[1]; s.H = q.shape[2]; s.D = q.shape[3];
  s.Tk = k.shape[1]; s.Hkv = k.shape[2]; s.Dv = v.shape[3];
  check_shape(k, {s.B, s.Tk, s.Hkv, s.D}, "[B, Tk, Hkv, D]");
  check_shape(v, {s.B, s.Tk, s.Hkv, s.Dv}, "[B, Tk, Hkv, Dv]");
  if (s.Hkv <= 0 ? s.H != 0 : s.H % s.Hkv != 0)
    fail("k", "the number of query heads H = " + std::to_string(s.H) +
                  " must be a multiple of the number of key/value heads Hkv = " + std::to_string(s.Hkv));
  for (const View* t : {&q, &k, &v}) check_last_contiguous(*t);
  copy3(s.q_stride, q);
  copy3(s.k_stride, k);
  copy3(s.v_stride, v);
  p->q = q.ptr;
  p->k = k.ptr;
  p->v = v.ptr;

  flashattn::MaskParams& m = p->mask;
  m.causal = o.causal;
  m.causal_offset = o.causal_offset;
  if (o.window_left < -1 || o.window_right < -1)
    throw py::value_error("window_left and window_right must be >= 0 (or -1 for unbounded), got " +
                          std::to_string(o.window_left) + " and " + std::to_string(o.window_right));
  m.window_left = o.window_left;
  m.window_right = o.window_right;
  const int64_t full[4] = {s.B, s.H, s.Tq, s.Tk};
  if (!o.mask.is_none()) {
    const View& t = call->add(o.mask, "mask");
    check_kind(t, Kind::kBool);
    broadcast_strides(t, full, m.mask_stride);
    m.mask = reinterpret_cast<const bool*>(t.ptr);
  }
  if (!o.bias.is_none()) {
    const View& t = call->add(o.bias, "bias");
    check_dtype_of_q(t, q);
    broadcast_strides(t, full, p->score.bias_stride);
    p->score.bias = t.ptr;
  }
  if (!o.q_lengths.is_none()) {
    const View& t = call->add(o.q_lengths, "q_lengths");
    check_kind(t, Kind::kInt32);
    check_shape(t, {s.B}, "[B]");
    check_compact(t);
    m.q_lengths = reinterpret_cast<const int32_t*>(t.ptr);
  }
  if (!o.k_lengths.is_none()) {
    const View& t = call->add(o.k_lengths, "k_lengths");
    check_kind(t, Kind::kInt32);
    check_shape(t, {s.B}, "[B]");
    check_compact(t);
    m.k_lengths = reinterpret_cast<const int32_t*>(t.ptr);
  }
  if (!o.q_valid.is_none()) {
    const View& t = call->add(o.q_valid, "q_valid");
    check_kind(t, Kind::kBool);
    check_shape(t, {s.B, s.Tq}, "[B, Tq]");
    check_compact(t);
    m.q_valid = reinterpret_cast<const bool*>(t.ptr);
  }
  if (!o.k_valid.is_none()) {
    const View& t = call->add(o.k_valid, "k_valid");
    check_kind(t, Kind::kBool);
    check_shape(t, {s.B, s.Tk}, "[B, Tk]");
    check_compact(t);
    m.k_valid = reinterpret_cast<const bool*>(t.ptr);
  }

  p->score.scale = static_cast<float>(o.scale);
  p->score.softcap = static_cast<float>(o.softcap);
  if (!(o.dropout >= 0.0 && o.dropout < 1.0))
    throw py::value_error("dropout must be in [0, 1), got " + std::to_string(o.dropout));
  flashattn::DropoutParams& dp = p->dropout;
  flashattn::dropout_set_rate(dp, static_cast<float>(o.dropout));
  if (dp.rate > 0.f) dp.seed = device_seed(o.seed);
  p->allow_tf32 = o.allow_tf32;
}

// o / d_o [B, Tq, H, Dv]; lse / d_lse [B, H, Tq] float32 compact.
const View& add_o(Call* call, py::handle obj, const char* name, const flashattn::AttnShape& s) {
  const View& t = call->add(obj, name);
  check_dtype_of_q(t, call->views[0]);
  check_shape(t, {s.B, s.Tq, s.H, s.Dv}, "[B, Tq, H, Dv]");
  check_last_contiguous(t);
  return t;
}

const View& add_rows(Call* call, py::handle obj, const char* name, const flashattn::AttnShape& s) {
  const View& t = call->add(obj, name);
  check_kind(t, Kind::kFloat32);
  check_shape(t, {s.B, s.H, s.Tq}, "[B, H, Tq]");
  check_compact(t);
  return t;
}

// Sets the tensors' device current for the launch, restores the previous one after.
struct DeviceGuard {
  int prev = -1;
  bool changed = false;
  explicit DeviceGuard(int dev) {
    cudaError_t e = cudaGetDevice(&prev);
    if (e == cudaSuccess && prev != dev) {
      e = cudaSetDevice(dev);
      changed = e == cudaSuccess;
    }
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("CUDA device ") + std::to_string(dev) + ": " +
                               cudaGetErrorString(e));
  }
  ~DeviceGuard() {
    if (changed) cudaSetDevice(prev);
  }
};

void check_cuda_status(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(err) + ": " +
                             cudaGetErrorString(err));
}

cudaStream_t as_stream(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

// -------------------------------------------------------------------------------------------
// The forward's decoding-path settings: FlashFwdParams.decode (-1 off, 0 auto, 1 on) and
// num_splits (0 auto, n >= 1 forced).
void set_decode(flashattn::FlashFwdParams* p, int decode, int num_splits) {
  if (decode < -1 || decode > 1)
    throw py::value_error("decode must be -1 (off), 0 (auto) or 1 (on), got " + std::to_string(decode));
  if (num_splits < 0)
    throw py::value_error("num_splits must be >= 0 (0: chosen from the shape), got " +
                          std::to_string(num_splits));
  p->decode = decode;
  p->num_splits = num_splits;
}

// fwd's workspace when the caller passes none: one device buffer per device, grown on demand
// (cudaFree / cudaMalloc, which synchronize the device), never shrunk. One stream at a time.
void* fwd_scratch(size_t bytes) {
  static std::mutex mu;
  static std::map<int, std::pair<void*, size_t>> buffers;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) throw std::runtime_error("cudaGetDevice failed");
  std::lock_guard<std::mutex> lock(mu);
  std::pair<void*, size_t>& buf = buffers[dev];
  if (buf.second < bytes) {
    if (buf.first != nullptr) cudaFree(buf.first);
    buf = {nullptr, 0};
    if (cudaMalloc(&buf.first, bytes) != cudaSuccess) {
      buf.first = nullptr;
      throw std::runtime_error("could not allocate " + std::to_string(bytes) +
                               " bytes of forward workspace");
    }
    buf.second = bytes;
  }
  return buf.first;
}

void fwd(py::handle q, py::handle k, py::handle v, py::handle o, py::handle lse, FA_OPTION_PARAMS,
         int decode, int num_splits, py::object workspace, uintptr_t stream) {
  flashattn::FlashFwdParams p;
  Call call;
  fill_common(&p, &call, q, k, v, FA_OPTION_VALUES);
  set_decode(&p, decode, num_splits);
  const View& to = add_o(&call, o, "o", p.shape);
  check_writable(to);
  for (int x = 0; x < 3; ++x) p.shape.o_stride[x] = to.strides[x];
  const View& tl = add_rows(&call, lse, "lse", p.shape);
  check_writable(tl);
  p.o = to.ptr;
  p.lse = reinterpret_cast<float*>(tl.ptr);
  const size_t need = flashattn::flash_fwd_workspace_bytes(p);
  if (!workspace.is_none()) {
    const View& t = call.add(workspace, "workspace");
    check_writable(t);
    check_compact(t);
    const size_t have = static_cast<size_t>(t.numel()) * ((t.dtype.bits * t.dtype.lanes + 7) / 8);
    if (have < need)
      fail("workspace", "has " + std::to_string(have) + " bytes, needs " + std::to_string(need) +
                            " (fwd_workspace_bytes)");
    if (reinterpret_cast<uintptr_t>(t.ptr) % 256 != 0) fail("workspace", "must be 256-byte aligned");
    p.workspace = t.ptr;
  }
  DeviceGuard guard(call.device);
  if (workspace.is_none() && need > 0) p.workspace = fwd_scratch(need);
  check_cuda_status(flashattn::flash_fwd_cuda(p, as_stream(stream)), "fwd");
}

size_t fwd_workspace_bytes(py::handle q, py::handle k, py::handle v, FA_OPTION_PARAMS, int decode,
                           int num_splits) {
  flashattn::FlashFwdParams p;
  Call call;
  fill_common(&p, &call, q, k, v, FA_OPTION_VALUES);
  set_decode(&p, decode, num_splits);
  return flashattn::flash_fwd_workspace_bytes(p);
}

// What the forward's decoding path would launch for these tensors on their device (with a
// workspace): {"applies": bool, "splits", "warps", "stages", "smem_bytes", "ctas_per_sm", "sms",
// "head_dim_bucket", "row_tiles", "ctas"}.
py::dict decode_plan(py::handle q, py::handle k, py::handle v, FA_OPTION_PARAMS, int decode,
                     int num_splits) {
  flashattn::FlashFwdParams p;
  Call call;
  fill_common(&p, &call, q, k, v, FA_OPTION_VALUES);
  set_decode(&p, decode, num_splits);
  DeviceGuard guard(call.device);
  flashattn::cuda::DecodePlan plan;
  check_cuda_status(flashattn::cuda::decode_plan(p, &plan), "decode_plan");
  py::dict d;
  d["applies"] = plan.applies;
  d["splits"] = plan.splits;
  d["warps"] = plan.warps;
  d["stages"] = plan.stages;
  d["smem_bytes"] = plan.smem_bytes;
  d["ctas_per_sm"] = plan.ctas_per_sm;
  d["sms"] = plan.sms;
  d["head_dim_bucket"] = plan.head_dim_bucket;
  d["row_tiles"] = plan.row_tiles;
  d["ctas"] = plan.ctas;
  return d;
}

// q, k, v and the options: what bwd_workspace_bytes reads.
void make_bwd(flashattn::FlashBwdParams* p, Call* call, py::handle q, py::handle k, py::handle v,
              const Options& opt, bool deterministic) {
  fill_common(p, call, q, k, v, opt);
  p->deterministic = deterministic;
}

size_t bwd_workspace_bytes(py::handle q, py::handle k, py::handle v, FA_OPTION_PARAMS,
                           bool deterministic) {
  flashattn::FlashBwdParams p;
  Call call;
  make_bwd(&p, &call, q, k, v, FA_OPTION_VALUES, deterministic);
  return flashattn::flash_bwd_workspace_bytes(p);
}

void bwd(py::handle q, py::handle k, py::handle v, py::handle o, py::handle lse, py::handle d_o,
         py::handle dq, py::handle dk, py::handle dv, FA_OPTION_PARAMS, py::object dbias,
         py::object workspace, py::object d_lse, bool deterministic, uintptr_t stream) {
  flashattn::FlashBwdParams p;
  Call call;
  make_bwd(&p, &call, q, k, v, FA_OPTION_VALUES, deterministic);
  const flashattn::AttnShape& s = p.shape;
  const View& tq = call.views[0];
  const View& tk = call.views[1];
  const View& tv = call.views[2];
  const View& to = add_o(&call, o, "o", s);
  for (int x = 0; x < 3; ++x) p.shape.o_stride[x] = to.strides[x];
  p.o = to.ptr;
  p.lse = reinterpret_cast<const float*>(add_rows(&call, lse, "lse", s).ptr);
  const View& tdo = add_o(&call, d_o, "d_o", s);
  check_same_strides(tdo, to);
  p.d_o = tdo.ptr;
  struct Grad { py::handle obj; const char* name; const View* like; void** out; };
  const Grad grads[3] = {{dq, "dq", &tq, &p.dq}, {dk, "dk", &tk, &p.dk}, {dv, "dv", &tv, &p.dv}};
  for (const Grad& g : grads) {
    const View& t = call.add(g.obj, g.name);
    check_writable(t);
    check_dtype_of_q(t, tq);
    if (t.shape != g.like->shape)
      fail(g.name, "expected the shape of " + g.like->name + " " + shape_str(g.like->shape) +
                       ", got " + shape_str(t.shape));
    check_same_strides(t, *g.like);
    *g.out = t.ptr;
  }
  if (!dbias.is_none()) {
    const View& t = call.add(dbias, "dbias");
    check_writable(t);
    check_kind(t, Kind::kFloat32);
    check_shape(t, {s.B, s.H, s.Tq, s.Tk}, "[B, H, Tq, Tk]");
    check_compact(t);
    p.dbias = reinterpret_cast<float*>(t.ptr);
  }
  if (!d_lse.is_none()) p.d_lse = reinterpret_cast<const float*>(add_rows(&call, d_lse, "d_lse", s).ptr);
  const size_t need = flashattn::flash_bwd_workspace_bytes(p);
  if (!workspace.is_none()) {
    const View& t = call.add(workspace, "workspace");
    check_writable(t);
    check_kind(t, Kind::kFloat32);
    check_compact(t);
    if (static_cast<size_t>(t.numel()) * 4 < need)
      fail("workspace", "has " + std::to_string(t.numel() * 4) + " bytes, needs " +
                            std::to_string(need) + " (bwd_workspace_bytes)");
    if (reinterpret_cast<uintptr_t>(t.ptr) % 256 != 0) fail("workspace", "must be 256-byte aligned");
    p.workspace = reinterpret_cast<float*>(t.ptr);
    p.workspace_bytes = static_cast<size_t>(t.numel()) * 4;
  } else if (need > 0) {
    throw py::value_error("workspace: required, " + std::to_string(need) +
                          " bytes (bwd_workspace_bytes), float32");
  }
  DeviceGuard guard(call.device);
  check_cuda_status(flashattn::flash_bwd_cuda(p, as_stream(stream)), "bwd");
}

// Host keep mask [B, H, Tq, Tk] (1 keep, 0 drop) from the shared Philox code.
py::object dropout_mask(int64_t B, int64_t H, int64_t Tq, int64_t Tk, double rate,
                        std::pair<int64_t, int64_t> seed, py::object out) {
  if (B < 0 || H < 0 || Tq < 0 || Tk < 0) throw py::value_error("dropout_mask: negative size");
  if (!(rate >= 0.0 && rate < 1.0))
    throw py::value_error("dropout_mask: rate must be in [0, 1), got " + std::to_string(rate));
  const int64_t n = B * H * Tq * Tk;
  flashattn::DropoutParams dp;
  flashattn::dropout_set_rate(dp, static_cast<float>(rate));
  const int64_t host_seed[2] = {seed.first, seed.second};
  dp.seed = host_seed;  // the host-side Philox below reads it
  py::object result;
  uint8_t* dst = nullptr;
  View view;
  if (out.is_none()) {
    PyObject* ba = PyByteArray_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(n));
    if (!ba) throw py::error_already_set();
    result = py::reinterpret_steal<py::object>(ba);
    dst = reinterpret_cast<uint8_t*>(PyByteArray_AsString(ba));
  } else {
    view = borrow(out, "out", /*cuda=*/false);
    if (view.device_type != dlpack::kCPU && view.device_type != dlpack::kCUDAHost)
      fail("out", std::string("expected a host (CPU) tensor, got DLPack device type ") +
                      std::to_string(view.device_type) + " (" + device_name(view.device_type) + ")");
    check_writable(view);
    check_kind(view, Kind::kByte);
    check_compact(view);
    if (view.numel() != n)
      fail("out", "expected " + std::to_string(n) + " elements (B*H*Tq*Tk), got shape " +
                      shape_str(view.shape));
    result = out;
    dst = reinterpret_cast<uint8_t*>(view.ptr);
  }
  int64_t x = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i)
        for (int64_t j = 0; j < Tk; ++j) dst[x++] = flashattn::dropout_keep(dp, b, h, i, j) ? 1 : 0;
  return result;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The Hopper path (cc/kernels/sm90/; present when built with FA_HAS_SM90, i.e. ARCHS has 90).
namespace {

py::dict sm90_info() {
  py::dict d;
#if FA_HAS_SM90
  d["compiled"] = true;
  d["enabled"] = flashattn::cuda::sm90::enabled();
  d["fwd_launches"] = flashattn::cuda::sm90::fwd_launches();
  d["fwd_variant"] = flashattn::cuda::sm90::fwd_variant();
  d["fwd_variants"] = flashattn::cuda::sm90::fwd_variants();
  d["fwd_default_variant"] = flashattn::cuda::sm90::fwd_default_variant();
  py::list built;
  for (int v = 0; v < flashattn::cuda::sm90::fwd_variants(); ++v)
    if (flashattn::cuda::sm90::fwd_variant_built(v)) built.append(v);
  d["fwd_variants_built"] = built;
  d["fwd_idx64_wide"] = flashattn::cuda::sm90::fwd_idx64_wide();
  d["fwd_d256_schedule"] = flashattn::cuda::sm90::fwd_d256_schedule(false);
  d["fwd_d256_idx_schedule"] = flashattn::cuda::sm90::fwd_d256_schedule(true);
  d["last_fwd_variant"] = flashattn::cuda::sm90::last_fwd_variant();
  d["bwd_enabled"] = flashattn::cuda::sm90::bwd_enabled();
  d["bwd_launches"] = flashattn::cuda::sm90::bwd_launches();
  const flashattn::cuda::sm90::BwdOrderInfo o = flashattn::cuda::sm90::bwd_order_info();
  d["bwd_order"] = o.order;
  d["bwd_order_group"] = o.group;
  d["last_bwd_order_g"] = o.last_g;
  d["last_bwd_order_big"] = o.last_big;
  d["tf32_enabled"] = flashattn::cuda::sm90::tf32_enabled();
  d["tf32_fwd_launches"] = flashattn::cuda::sm90::fwd_tf32_launches();
  d["tf32_variant"] = flashattn::cuda::sm90::tf32_variant();
  d["tf32_variants"] = flashattn::cuda::sm90::tf32_variants();
  d["last_tf32_variant"] = flashattn::cuda::sm90::last_tf32_variant();
  d["tf32_bwd_enabled"] = flashattn::cuda::sm90::bwd_tf32_enabled();
  d["tf32_bwd_launches"] = flashattn::cuda::sm90::bwd_tf32_launches();
  d["tf32_bwd_dense_enabled"] = flashattn::cuda::sm90::bwd_tf32_dense_enabled();
  d["tf32_bwd128_launches"] = flashattn::cuda::sm90::bwd_tf32_d128_launches();
  d["tf32_bwd256_launches"] = flashattn::cuda::sm90::bwd_tf32_d256_launches();
#else
  d["tf32_bwd_enabled"] = false;
  d["tf32_bwd_launches"] = 0;
  d["tf32_bwd_dense_enabled"] = false;
  d["tf32_bwd128_launches"] = 0;
  d["tf32_bwd256_launches"] = 0;
  d["bwd_order"] = 0;
  d["bwd_order_group"] = 0;
  d["last_bwd_order_g"] = -1;
  d["last_bwd_order_big"] = 0;
  d["tf32_variant"] = 0;
  d["tf32_variants"] = 1;
  d["last_tf32_variant"] = -1;
  d["tf32_enabled"] = false;
  d["tf32_fwd_launches"] = 0;
  d["bwd_enabled"] = false;
  d["bwd_launches"] = 0;
  d["compiled"] = false;
  d["enabled"] = false;
  d["fwd_launches"] = 0;
  d["fwd_variant"] = 0;
  d["fwd_variants"] = 1;
  d["fwd_default_variant"] = 0;
  py::list built0;
  built0.append(0);
  d["fwd_variants_built"] = built0;
  d["fwd_idx64_wide"] = false;
  d["fwd_d256_schedule"] = 0;
  d["fwd_d256_idx_schedule"] = 0;
  d["last_fwd_variant"] = -1;
#endif
  return d;
}

void set_sm90_fwd_variant(int v) {
#if FA_HAS_SM90
  if (v >= 0 && v < flashattn::cuda::sm90::fwd_variants() && !flashattn::cuda::sm90::fwd_variant_built(v))
    throw py::value_error("set_sm90_fwd_variant: schedule " + std::to_string(v) +
                          " is compiled in FA_TUNING builds only (NVCC_EXTRA=-DFA_TUNING; sm90_info()"
                          "['fwd_variants_built'] lists this build's)");
  if (!flashattn::cuda::sm90::set_fwd_variant(v))
    throw py::value_error("set_sm90_fwd_variant: " + std::to_string(v) + " is not a schedule (0 .. " +
                          std::to_string(flashattn::cuda::sm90::fwd_variants() - 1) + ", or -1)");
#else
  if (v > 0) throw py::value_error("set_sm90_fwd_variant: this harness was built without the sm90 kernels");
#endif
}

void set_sm90(int mode) {
#if FA_HAS_SM90
  flashattn::cuda::sm90::set_enabled(mode);
#else
  if (mode > 0) throw py::value_error("set_sm90: this harness was built without the sm90 kernels");
#endif
}

#if FA_HAS_SM90
// One dict per building-block self-test of the sm90 kernels: name, pass / FAIL / not run (no
// sm_90 device), max_err, detail. run(i, &max_err, msg, msg_len) is selftest or bwd_selftest.
py::list selftest_rows(const char* const* names, int n, int (*run)(int, double*, char*, int)) {
  py::list out;
  for (int i = 0; i < n; ++i) {
    char msg[512] = {0};
    double err = 0;
    int rc;
    // A line before each test reaches the log even if the test hangs (the rows print only at the end).
    std::fprintf(stderr, "RUNNING selftest %d %s\n", i, names[i]);
    std::fflush(stderr);
    {
      py::gil_scoped_release nogil;
      rc = run(i, &err, msg, sizeof(msg));
    }
    py::dict d;
    d["name"] = names[i];
    d["result"] = rc == 1 ? "pass" : rc == 0 ? "FAIL" : "not run";
    d["max_err"] = err;
    d["detail"] = std::string(msg);
    out.append(d);
  }
  return out;
}
#endif

py::list sm90_selftest() {
#if FA_HAS_SM90
  const char* names[] = {"tma_load_swizzled_tile", "wgmma_ss_kmajor", "wgmma_rs_mnmajor",
                         "wgmma_rs_mnmajor_swapped_lbo_sbo", "wgmma_rs_n64", "wgmma_rs_n256"};
  static_assert(sizeof(names) / sizeof(names[0]) == flashattn::cuda::sm90::kFwdSelftests, "names");
  return selftest_rows(names, flashattn::cuda::sm90::kFwdSelftests, flashattn::cuda::sm90::selftest);
#else
  return py::list();
#endif
}

// The float32 TF32 backward on Hopper (flash_bwd_sm90_tf32.cu; on unless TF_FLASHATTN_SM90_TF32_BWD=0).
void set_sm90_tf32_bwd(int mode) {
#if FA_HAS_SM90
  flashattn::cuda::sm90::set_bwd_tf32_enabled(mode);
#else
  if (mode > 0) throw py::value_error("set_sm90_tf32_bwd: this harness was built without the sm90 kernels");
#endif
}

// The float32 TF32 backward at head dim 128 on Hopper (flash_bwd_sm90_tf32_d128.cu; on where the head-dim-64
// one is): 0 off, 1 + i on with dQ mode i (its kDqModes), -1 back to that rule.
void set_sm90_tf32_bwd128(int mode) {
#if FA_HAS_SM90
  flashattn::cuda::sm90::set_bwd_tf32_d128_enabled(mode);
#else
  if (mode > 0) throw py::value_error("set_sm90_tf32_bwd128: this harness was built without the sm90 kernels");
#endif
}

// The head-dim-256 Hopper TF32 backward (flash_bwd_sm90_tf32_d256.cu): 0 off, 1 + i on with variant i (kVariants:
// 1 the first form, 2 early release, 3 early release with float4 dQ adds, 4 that with each panel's loads and adds
// under the other panel's products (the default)), -1 back to the environment and the build's default (on, variant 3).
void set_sm90_tf32_bwd256(int mode) {
#if FA_HAS_SM90
  flashattn::cuda::sm90::set_bwd_tf32_d256_enabled(mode);
#else
  if (mode > 0) throw py::value_error("set_sm90_tf32_bwd256: this harness was built without the sm90 kernels");
#endif
}

// The dense mask / bias / dbias instantiations of both Hopper TF32 backwards (on unless
// TF_FLASHATTN_SM90_TF32_BWD_DENSE=0): 1 on, 0 off, -1 back to the environment.
void set_sm90_tf32_bwd_dense(int mode) {
#if FA_HAS_SM90
  flashattn::cuda::sm90::set_bwd_tf32_dense(mode);
#else
  if (mode > 0) throw py::value_error("set_sm90_tf32_bwd_dense: this harness was built without the sm90 kernels");
#endif
}

// The float32 TF32 forward (flash_fwd_sm90_tf32.cu; on unless TF_FLASHATTN_SM90_TF32=0).
void set_sm90_tf32(int mode) {
#if FA_HAS_SM90
  flashattn::cuda::sm90::set_tf32_enabled(mode);
#else
  if (mode > 0) throw py::value_error("set_sm90_tf32: this harness was built without the sm90 kernels");
#endif
}

void set_sm90_tf32_variant(int v) {
#if FA_HAS_SM90
  if (!flashattn::cuda::sm90::set_tf32_variant(v))
    throw py::value_error("set_sm90_tf32_variant: " + std::to_string(v) + " is not a variant (0 .. " +
                          std::to_string(flashattn::cuda::sm90::tf32_variants() - 1) + ", or -1)");
#else
  if (v > 0) throw py::value_error("set_sm90_tf32_variant: this harness was built without the sm90 kernels");
#endif
}

py::list sm90_tf32_selftest() {
#if FA_HAS_SM90
  const char* names[] = {"tf32_tma_load_f32_tile", "tf32_v_transpose_and_k_round", "tf32_wgmma_ss_n64_kmajor",
                         "tf32_wgmma_rs_n128_from_acc", "tf32_wgmma_rs_n64_from_acc",
                         "tf32_diag_rs_other_a_order_expect_FAIL", "tf32_wgmma_rs_n64_q_frags",
                         "tf32_prepass_and_vt_tma_load", "tf32_wgmma_rs_n256_from_acc"};
  static_assert(sizeof(names) / sizeof(names[0]) == flashattn::cuda::sm90::kFwdTf32Selftests, "names");
  return selftest_rows(names, flashattn::cuda::sm90::kFwdTf32Selftests, flashattn::cuda::sm90::tf32_selftest);
#else
  return py::list();
#endif
}

void set_sm90_bwd(int mode) {
#if FA_HAS_SM90
  flashattn::cuda::sm90::set_bwd_enabled(mode);
#else
  if (mode > 0) throw py::value_error("set_sm90_bwd: this harness was built without the sm90 kernels");
#endif
}

void set_sm90_bwd_order(int order, int group) {
#if FA_HAS_SM90
  flashattn::cuda::sm90::set_bwd_order(order, group);
#else
  if (order > 0) throw py::value_error("set_sm90_bwd_order: this harness was built without the sm90 kernels");
#endif
}

py::list sm90_bwd_selftest() {
#if FA_HAS_SM90
  const char* names[] = {"bwd_wgmma_ss_n64_kmajor", "bwd_wgmma_ss_n64_mnmajor_panel0",
                         "bwd_wgmma_ss_n64_mnmajor_panel1", "bwd_wgmma_ss_n64_mnmajor_k64",
                         "bwd_wgmma_rs_from_accumulators", "bwd_d256_wgmma_ss_n32_kmajor_row32",
                         "bwd_d256_wgmma_ss_n128_kmajor_mnmajor", "bwd_d256_wgmma_ss_n128_mnmajor_panels23", "bwd_split128_wgmma_ss_n64_kmajor_mnmajor_panel1",
                         "bwd_split128_wgmma_ss_n64_mnmajor_panel1", "bwd_d64cols_wgmma_ss_n32_mnmajor_byte64",
                         "bwd_d64cols_wgmma_ss_n32_mnmajor_byte0"};
  static_assert(sizeof(names) / sizeof(names[0]) == flashattn::cuda::sm90::kBwdSelftests, "names");
  return selftest_rows(names, flashattn::cuda::sm90::kBwdSelftests, flashattn::cuda::sm90::bwd_selftest);
#else
  return py::list();
#endif
}

}  // namespace

PYBIND11_MODULE(flash_harness, m) {
  m.doc() = "FlashAttention CUDA launchers over DLPack tensors (kernel harness, no TensorFlow). "
            "See cc/harness/flash_harness.cc.";
  m.def("fwd", &fwd, "Forward: writes o [B, Tq, H, Dv] and lse [B, H, Tq].", py::arg("q"),
        py::arg("k"), py::arg("v"), py::arg("o"), py::arg("lse"), FA_OPTION_ARGS,
        py::arg("decode") = 0, py::arg("num_splits") = 0, py::arg("workspace") = py::none(),
        py::arg("stream") = 0);
  m.def("fwd_workspace_bytes", &fwd_workspace_bytes,
        "Bytes of device workspace fwd needs for these tensors and options (the decoding path's "
        "partial results; 0 when it does not split).",
        py::arg("q"), py::arg("k"), py::arg("v"), FA_OPTION_ARGS, py::arg("decode") = 0,
        py::arg("num_splits") = 0);
  m.def("decode_plan", &decode_plan,
        "What fwd's decoding path would launch on the tensors' device: a dict (applies, splits, "
        "warps, stages, smem_bytes, ctas_per_sm, sms, head_dim_bucket, row_tiles, ctas).",
        py::arg("q"), py::arg("k"), py::arg("v"), FA_OPTION_ARGS, py::arg("decode") = 0,
        py::arg("num_splits") = 0);
  m.def("bwd", &bwd, "Backward: writes dq, dk, dv (and dbias when given).", py::arg("q"),
        py::arg("k"), py::arg("v"), py::arg("o"), py::arg("lse"), py::arg("d_o"), py::arg("dq"),
        py::arg("dk"), py::arg("dv"), FA_OPTION_ARGS, py::arg("dbias") = py::none(),
        py::arg("workspace") = py::none(), py::arg("d_lse") = py::none(),
        py::arg("deterministic") = false, py::arg("stream") = 0);
  m.def("bwd_workspace_bytes", &bwd_workspace_bytes,
        "Bytes of float32 device workspace bwd needs for these tensors and options.", py::arg("q"),
        py::arg("k"), py::arg("v"), FA_OPTION_ARGS, py::arg("deterministic") = false);
  m.def("dropout_mask", &dropout_mask,
        "Host keep mask [B, H, Tq, Tk] (1 keep, 0 drop): a bytearray, or written into `out`.",
        py::arg("B"), py::arg("H"), py::arg("Tq"), py::arg("Tk"), py::arg("rate"),
        py::arg("seed") = std::pair<int64_t, int64_t>(1234, 5678), py::arg("out") = py::none());
  m.def("sm90_info", &sm90_info,
        "The Hopper forward: dict(compiled, enabled (TF_FLASHATTN_SM90 / set_sm90), fwd_launches, "
        "fwd_variant (the schedule set now), fwd_variants (how many), fwd_variants_built (those this build has: "
        "all in FA_TUNING builds), fwd_idx64_wide (the D = 64 index-masked kernel has schedule 8: "
        "FA_SM90_FWD_IDX64_3WG), fwd_d256_schedule / fwd_d256_idx_schedule (the plain / "
        "index-masked D = 256 kernel's: FA_SM90_FWD_D256_SCHED / _IDX_SCHED), "
        "fwd_default_variant (the one when "
        "nothing is set), last_fwd_variant (of the last launch), bwd_enabled, bwd_launches, tf32_enabled "
        "(TF_FLASHATTN_SM90_TF32 / set_sm90_tf32), tf32_fwd_launches, tf32_variant, tf32_variants, "
        "last_tf32_variant, tf32_bwd_enabled (TF_FLASHATTN_SM90_TF32_BWD / set_sm90_tf32_bwd), tf32_bwd_launches).");
  m.def("set_sm90", &set_sm90, "Hopper forward switch: 1 on, 0 off (sm80 kernels), -1 back to the "
        "environment (TF_FLASHATTN_SM90).", py::arg("mode"));
  m.def("set_sm90_fwd_variant", &set_sm90_fwd_variant,
        "Schedule of the plain D = 128 Hopper forward (flash_fwd_sm90.cu's kSched): 0 .. fwd_variants - 1 "
        "(0 the first schedule, fwd_default_variant the default), -1 back to the environment "
        "(TF_FLASHATTN_SM90_FWD_VARIANT; unset: the default).",
        py::arg("v"));
  m.def("sm90_selftest", &sm90_selftest,
        "Hopper building blocks one at a time (TMA tile load, wgmma forms): a list of dicts "
        "(name, result pass / FAIL / not run, max_err, detail); empty without the sm90 kernels.");
  m.def("set_sm90_tf32_bwd", &set_sm90_tf32_bwd, "Hopper float32 TF32 backward switch (flash_bwd_sm90_tf32.cu, "
        "head dim 64): 0 off (sm80's TF32 backward), 1 .. 7 on with variant 0 .. 6, -1 back to the environment "
        "(on with variant 3 unless TF_FLASHATTN_SM90_TF32_BWD=0). The head-dim-128 kernel follows it (on / off) "
        "unless set_sm90_tf32_bwd128 overrides.", py::arg("mode"));
  m.def("set_sm90_tf32_bwd128", &set_sm90_tf32_bwd128, "Hopper float32 TF32 backward at head dim 128 "
        "(flash_bwd_sm90_tf32_d128.cu): 0 off, 1 + i on with mode i (0 scalar atomics, 1 float4 atomics, 2 bulk "
        "reduce-adds), -1 back to the rule: on with mode 2 where the head-dim-64 kernel is on (set_sm90_tf32_bwd, "
        "TF_FLASHATTN_SM90_TF32_BWD).", py::arg("mode"));
  m.def("set_sm90_tf32_bwd256", &set_sm90_tf32_bwd256, "Hopper float32 TF32 backward at head dim 256 "
        "(flash_bwd_sm90_tf32_d256.cu: D == Dv == 256, index masks or none, not deterministic): 0 off, 1 + i "
        "on with variant i (1 the first form, 2 early release, 3 early release with float4 dQ adds, 4 that "
        "with the panels pipelined: the default), -1 back to the environment and the build's default (on, "
        "variant 3).", py::arg("mode"));
  m.def("set_sm90_tf32_bwd_dense", &set_sm90_tf32_bwd_dense, "Hopper float32 TF32 backwards' dense mask / bias / "
        "dbias kernels: 1 on, 0 off (sm80's TF32 backward takes those calls), -1 back to "
        "TF_FLASHATTN_SM90_TF32_BWD_DENSE.", py::arg("mode"));
  m.def("set_sm90_tf32", &set_sm90_tf32, "Hopper float32 TF32 forward switch (flash_fwd_sm90_tf32.cu): "
        "1 on, 0 off (sm80's TF32 kernel), -1 back to the environment (on unless TF_FLASHATTN_SM90_TF32=0; "
        "TF_FLASHATTN_SM90=0 / set_sm90(0) turn it off too).", py::arg("mode"));
  m.def("set_sm90_tf32_variant", &set_sm90_tf32_variant,
        "Variant of the Hopper TF32 forward (flash_fwd_sm90_tf32.cu's kTf32Sched: 0 Q in shared memory, 1 Q in "
        "registers, 2 as 1 with K truncated, 3 as 1 with K and V^T from a pre-pass into the workspace), -1 back to the "
        "environment (TF_FLASHATTN_SM90_TF32_VARIANT; unset: by shape, 3 when ceil(Tq / 128) H / Hkv >= 8, "
        "else 1).",
        py::arg("v"));
  m.def("sm90_tf32_selftest", &sm90_tf32_selftest,
        "The Hopper TF32 forward's building blocks (float32 TMA tile, V transpose, wgmma .tf32 forms) one at a "
        "time, as sm90_selftest; number 5 is a diagnostic expected to FAIL.");
  m.def("set_sm90_bwd", &set_sm90_bwd, "Hopper backward switch: 1 on, 0 off (sm80 backward), "
        "-1 back to the environment (on unless TF_FLASHATTN_SM90_BWD=0 or TF_FLASHATTN_SM90=0).", py::arg("mode"));
  m.def("set_sm90_bwd_order", &set_sm90_bwd_order,
        "Key-tile order of the Hopper backward with a causal mask (flash_bwd_sm90.cu, \"Tile order\"): "
        "order 0 the launch order, 1 grouped longest-first (group: pairs per group, 0 automatic), 2 longest-first; "
        "order -1 back to the environment (TF_FLASHATTN_SM90_BWD_ORDER, TF_FLASHATTN_SM90_BWD_ORDER_G). "
        "sm90_info() shows bwd_order, bwd_order_group and the last launch's last_bwd_order_g (0: the launch "
        "order) and last_bwd_order_big.",
        py::arg("order"), py::arg("group") = 0);
  m.def("sm90_bwd_selftest", &sm90_bwd_selftest,
        "The Hopper backward's building blocks (wgmma forms) one at a time, as sm90_selftest.");
}
