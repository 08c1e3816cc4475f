#include "backend/backend.h"

#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>

#include "core/error.h"
#include "core/logging.h"

#if TORCH_VERSION_MAJOR >= 2
#define FP8S_TORCH2 1
#else
#define FP8S_TORCH2 0
#endif

// The oneDNN operators behind packed convolution weights (PyTorch's own prepacking for its CPU
// compiler): LibTorch >= 2.4.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define FP8S_PACKED_CONV_API 1
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#else
#define FP8S_PACKED_CONV_API 0
#endif

#ifdef FP8S_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace fp8s::backend {

std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

bool built_with_cuda() {
#ifdef FP8S_WITH_CUDA
  return true;
#else
  return false;
#endif
}

std::string build_summary() {
  std::string s = "LibTorch " + torch_version();
#ifdef FP8S_WITH_CUDA
  const std::string cuda = FP8S_TORCH_CUDA, archs = FP8S_CUDA_ARCHS;
  s += ", CUDA " + (cuda.empty() ? std::string("(version unknown)") : cuda);
  s += archs.empty() ? std::string(", GPU architectures unknown") : ", GPU architectures " + archs;
#else
  s += ", CPU only";
#endif
  return s;
}

int cuda_device_count() {
#ifdef FP8S_WITH_CUDA
  try {
    return static_cast<int>(c10::cuda::device_count());
  } catch (const std::exception&) {
    return 0;  // no driver
  }
#else
  return 0;
#endif
}

at::Device resolve_device(const std::string& choice) {
  const int count = cuda_device_count();
  if (choice == "auto") {
    if (count > 0) return at::Device(at::kCUDA, 0);
    if (built_with_cuda()) log().info("--device auto: no CUDA device was found (no NVIDIA GPU or driver); running on the CPU");
    return at::Device(at::kCPU);
  }
  if (choice == "cpu") return at::Device(at::kCPU);
  int index = -1;
  if (choice == "cuda") {
    index = 0;
  } else if (choice.rfind("cuda:", 0) == 0 && choice.size() > 5 && choice.size() < 8 &&
             choice.find_first_not_of("0123456789", 5) == std::string::npos) {
    index = std::stoi(choice.substr(5));
  } else {
    throw InputError("--device: unknown device '" + choice + "'; use auto, cpu, cuda or cuda:N");
  }
  if (!built_with_cuda()) {
    throw InputError("--device " + choice + ": this build of FP8 Studio has no CUDA support (LibTorch " +
                     torch_version() + ", CPU only); build it with scripts/build-cuda.sh or use --device cpu");
  }
  if (index >= count) {
    throw InputError("--device " + choice + ": " +
                     (count == 0 ? std::string("no CUDA device was found (no NVIDIA GPU or driver)")
                                 : std::to_string(count) + " CUDA device(s) found (cuda:0.." +
                                       std::to_string(count - 1) + ")") +
                     "; use --device cpu");
  }
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
}

std::string describe_device(const at::Device& device) {
#ifdef FP8S_WITH_CUDA
  if (device.is_cuda()) {
    const auto* p = at::cuda::getDeviceProperties(device.index());
    char buf[256];
    std::snprintf(buf, sizeof buf, "CUDA %d: %.180s, %.1f GiB, compute capability %d.%d", int(device.index()),
                  p->name, double(p->totalGlobalMem) / (1ull << 30), p->major, p->minor);
    return buf;
  }
#endif
  if (!device.is_cpu()) return device.str();
  // a CUDA build on a machine without a GPU or driver says so wherever the device is shown
  return built_with_cuda() && cuda_device_count() == 0 ? "CPU (no CUDA GPU found)" : "CPU";
}

uint64_t device_total_bytes(const at::Device& device) {
#ifdef FP8S_WITH_CUDA
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index())->totalGlobalMem;
#endif
  (void)device;
  return 0;
}

int compute_capability(const at::Device& device) {
#ifdef FP8S_WITH_CUDA
  if (device.is_cuda()) {
    const auto* p = at::cuda::getDeviceProperties(device.index());
    return p->major * 10 + p->minor;
  }
#endif
  (void)device;
  return 0;
}

void synchronize(const at::Device& device) {
#ifdef FP8S_WITH_CUDA
  // this device's compute stream only: not another GPU, and not the copy stream's next prefetch
  // (a streamed step's time would include it)
  if (device.is_cuda()) c10::cuda::getCurrentCUDAStream(device.index()).synchronize();
#endif
  (void)device;
}

bool has_native_fp8() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  return true;
#else
  return false;
#endif
}

at::ScalarType native_fp8_dtype(Fp8Format format) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  return format == Fp8Format::E4M3FN ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
#else
  (void)format;
  throw RuntimeFailure("native float8 tensors need LibTorch 2.1 or newer (this build: " + torch_version() + ")");
#endif
}

at::Tensor codes_as_native_fp8(const at::Tensor& codes, Fp8Format format) {
  return codes.view(native_fp8_dtype(format));
}

at::Tensor encode_native_fp8(const at::Tensor& x, Fp8Format format) {
  const double max = fp8_max_finite(format);
  auto clamped = x.clamp(-max, max);
  // E5M2 has infinities, and the codec keeps them (it saturates finite overflow only)
  if (format == Fp8Format::E5M2) clamped = at::where(x.isinf(), x, clamped);
  return clamped.to(native_fp8_dtype(format));
}

bool has_fused_attention() { return FP8S_TORCH2 != 0; }
bool has_mixed_type_norms() { return FP8S_TORCH2 != 0; }

at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                           const at::Tensor& mask) {
#if FP8S_TORCH2
  std::optional<at::Tensor> m;
  if (mask.defined()) m = mask.to(q.scalar_type());
  return at::scaled_dot_product_attention(q, k, v, m, 0.0, false, scale);
#else
  (void)q, (void)k, (void)v, (void)scale, (void)mask;
  throw RuntimeFailure("fused attention needs LibTorch 2.0 or newer (this build: " + torch_version() + ")");
#endif
}

namespace {
// The oneDNN operators the packed path calls boxed, each with the schema types it was written
// against (PyTorch 2.4-2.15's): found and checked once; any one missing or different, and
// has_packed_conv() is false (unpacked convolutions) instead of a call with the wrong arguments.
enum class MkldnnOp { Reorder, ConvPointwise, SerializedMd, DataPtr, Nbytes, Bf16Supported };
struct OpSpec {
  const char* name;
  std::vector<std::string> types;
};
const std::vector<OpSpec>& op_specs() {
  static const std::vector<OpSpec> specs = {
      {"mkldnn::_reorder_convolution_weight", {"Tensor", "int[]", "int[]", "int[]", "int", "int[]?", "->", "Tensor"}},
      {"mkldnn::_convolution_pointwise",
       {"Tensor", "Tensor", "Tensor?", "int[]", "int[]", "int[]", "int", "str", "Scalar?[]", "str?", "->", "Tensor"}},
      {"mkldnn::_get_mkldnn_serialized_md", {"Tensor", "->", "Tensor"}},
      {"mkldnn::data_ptr", {"Tensor", "->", "int"}},
      {"mkldnn::_nbytes", {"Tensor", "->", "int"}},
      {"mkldnn::_is_mkldnn_bf16_supported", {"->", "bool"}},
  };
  return specs;
}

}  // namespace

#if FP8S_PACKED_CONV_API
namespace {

// The checked handles, or nullopt when an operator is missing or its schema differs.
const std::optional<std::vector<c10::OperatorHandle>>& checked_ops() {
  static const auto ops = []() -> std::optional<std::vector<c10::OperatorHandle>> {
    std::vector<c10::OperatorHandle> handles;
    for (const auto& spec : op_specs()) {
      auto handle = c10::Dispatcher::singleton().findSchema({spec.name, ""});
      if (!handle || !matches_packed_conv_spec(handle->schema())) return std::nullopt;
      handles.push_back(*handle);
    }
    return handles;
  }();
  return ops;
}

// Calls a checked operator with boxed arguments; returns its outputs.
torch::jit::Stack call_op(MkldnnOp op, torch::jit::Stack args) {
  (*checked_ops())[static_cast<std::size_t>(op)].callBoxed(&args);
  return args;
}

std::vector<int64_t> pair(int64_t v) { return {v, v}; }

// The reorder reads any dense layout (OIHW from a file, channels_last): copy only what is not dense.
at::Tensor dense(const at::Tensor& t) { return t.is_non_overlapping_and_dense() ? t : t.contiguous(); }

// at::native::mkldnn_tensor_from_data_ptr: an oneDNN tensor over `data` (no copy) in the layout
// of a serialized descriptor. libtorch_cpu exports it (AOTInductor loads its packed weights with
// it) but no installed header declares it, so it is looked up by its mangled name: a LibTorch
// without it, or with another signature, has no packed convolutions instead of failing to link.
using FromDataPtr = at::Tensor (*)(void*, c10::IntArrayRef, c10::ScalarType, c10::Device, const uint8_t*, int64_t);
FromDataPtr mkldnn_tensor_from_data_ptr() {
  static const auto fn = reinterpret_cast<FromDataPtr>(
      dlsym(RTLD_DEFAULT, "_ZN2at6native27mkldnn_tensor_from_data_ptrEPvN3c108ArrayRefIlEENS2_10ScalarTypeENS2_6DeviceEPKhl"));
  return fn;
}

at::Tensor packed_view(const at::Tensor& elements, const PackedLayout& layout) {
  if (elements.scalar_type() != at::kBFloat16 || elements.numel() != layout.elements || !elements.is_contiguous()) {
    throw RuntimeFailure("packed convolution weight: " + std::to_string(elements.numel()) +
                         " elements where the layout holds " + std::to_string(layout.elements));
  }
  return mkldnn_tensor_from_data_ptr()(elements.data_ptr(), layout.sizes, at::kBFloat16, at::kCPU,
                                      layout.desc.data_ptr<uint8_t>(), layout.desc.numel());
}

}  // namespace
#endif

std::vector<std::string> schema_types(const c10::FunctionSchema& schema) {
  std::function<std::string(const c10::TypePtr&)> spell = [&](const c10::TypePtr& t) -> std::string {
    switch (t->kind()) {
      case c10::TypeKind::OptionalType: return spell(t->containedType(0)) + "?";
      case c10::TypeKind::ListType: return spell(t->containedType(0)) + "[]";
      case c10::TypeKind::TensorType: return "Tensor";
      case c10::TypeKind::IntType: return "int";
      case c10::TypeKind::FloatType: return "float";
      case c10::TypeKind::BoolType: return "bool";
      case c10::TypeKind::StringType: return "str";
      case c10::TypeKind::NumberType: return "Scalar";
      default: return t->str();
    }
  };
  std::vector<std::string> out;
  for (const auto& a : schema.arguments()) out.push_back(spell(a.type()));
  out.push_back("->");
  for (const auto& r : schema.returns()) out.push_back(spell(r.type()));
  return out;
}

bool matches_packed_conv_spec(const c10::FunctionSchema& schema) {
  for (const auto& spec : op_specs()) {
    if (schema.name() == spec.name) return schema.overload_name().empty() && schema_types(schema) == spec.types;
  }
  return false;
}

bool has_packed_conv() {
#if FP8S_PACKED_CONV_API
  static const bool available = [] {
    if (!at::globalContext().userEnabledMkldnn() || !mkldnn_tensor_from_data_ptr() || !checked_ops()) return false;
    try {
      return call_op(MkldnnOp::Bf16Supported, {})[0].toBool();
    } catch (const c10::Error&) {
      return false;
    }
  }();
  return available;
#else
  return false;
#endif
}

std::pair<at::Tensor, PackedLayout> pack_conv_weight(const at::Tensor& w, int64_t stride, int64_t padding) {
#if FP8S_PACKED_CONV_API
  if (!has_packed_conv()) throw RuntimeFailure("packed convolution weights are not available in this build");
  const at::Tensor packed = call_op(MkldnnOp::Reorder,
                                    {dense(w.to(at::kCPU, at::kBFloat16)), pair(padding), pair(stride),
                                     pair(1), int64_t{1}, c10::IValue()})[0].toTensor();
  PackedLayout layout;
  layout.desc = call_op(MkldnnOp::SerializedMd, {packed})[0].toTensor().clone();
  layout.sizes = w.sizes().vec();
  const int64_t bytes = call_op(MkldnnOp::Nbytes, {packed})[0].toInt();
  const auto* data = reinterpret_cast<const void*>(call_op(MkldnnOp::DataPtr, {packed})[0].toInt());
  layout.elements = bytes / 2;
  at::Tensor elements = at::empty({layout.elements}, at::kBFloat16);
  std::memcpy(elements.data_ptr(), data, static_cast<std::size_t>(bytes));
  return {elements, layout};
#else
  (void)w, (void)stride, (void)padding;
  throw RuntimeFailure("packed convolution weights need LibTorch 2.4 or newer (this build: " + torch_version() + ")");
#endif
}

at::Tensor unpack_conv_weight(const at::Tensor& elements, const PackedLayout& layout) {
#if FP8S_PACKED_CONV_API
  return packed_view(elements, layout).to_dense().contiguous(at::MemoryFormat::ChannelsLast);
#else
  (void)elements, (void)layout;
  throw RuntimeFailure("packed convolution weights need LibTorch 2.4 or newer (this build: " + torch_version() + ")");
#endif
}

at::Tensor packed_conv2d(const at::Tensor& x, const at::Tensor& elements, const PackedLayout& layout,
                         const at::Tensor& bias, int64_t stride, int64_t padding) {
#if FP8S_PACKED_CONV_API
  return call_op(MkldnnOp::ConvPointwise,
                 {x, packed_view(elements, layout), bias.defined() ? c10::IValue(bias) : c10::IValue(),
                  pair(padding), pair(stride), pair(1), int64_t{1}, std::string("none"),
                  c10::List<std::optional<at::Scalar>>(), c10::IValue()})[0]
      .toTensor();
#else
  (void)x, (void)elements, (void)layout, (void)bias, (void)stride, (void)padding;
  throw RuntimeFailure("packed convolution weights need LibTorch 2.4 or newer (this build: " + torch_version() + ")");
#endif
}

bool supports_fp8_compute(const at::Device& device) {
  return has_native_fp8() && device.is_cuda() && compute_capability(device) >= 89;
}

Fp8MmPlan plan_fp8_mm(bool fp8, Fp8Format format, int64_t scale_numel, int64_t n, int64_t k, at::ScalarType out) {
  Fp8MmPlan p;
  if (!fp8) return p.reason = "not FP8", p;
  if (format != Fp8Format::E4M3FN) return p.reason = "E5M2 weights", p;
  if (n % 16 != 0 || k % 16 != 0) return p.reason = "sizes not multiples of 16", p;
  p.rowwise = scale_numel > 1;
  if (p.rowwise && (scale_numel != n || out != at::kBFloat16)) {
    p.rowwise = false;
    return p.reason = "per-channel scales need BF16 compute", p;
  }
  p.scaled_mm = true;
  p.bias_after = out == at::kFloat;
  return p;
}

at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& w_fp8, const at::Tensor& w_scale,
                      const at::Tensor& bias, const at::Tensor& input_scale, const Fp8MmPlan& plan) {
#if (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)) && defined(FP8S_WITH_CUDA)
  const double max = fp8_max_finite(Fp8Format::E4M3FN);
  const auto x2 = x.reshape({-1, x.size(-1)});
  const int64_t rows = x2.size(0);
  // the file's calibrated activation scale when it has one (ComfyUI's input_scale), else the
  // input's largest magnitude (one reduction: the infinity norm) over E4M3's largest value
  const at::Tensor a_scale =
      input_scale.defined() ? input_scale.to(x.device(), at::kFloat).reshape({})
                            : (at::linalg_vector_norm(x2, INFINITY, std::nullopt, false, at::kFloat) / max).clamp_min(1e-12);
  // x / a_scale in x's type (a 0-dim FP32 factor keeps it), clamped (a calibrated scale can be
  // exceeded), cast: three element-wise kernels
  at::Tensor xq = x2.mul(a_scale.reciprocal());
  if (input_scale.defined()) xq.clamp_(-max, max);
  xq = xq.to(native_fp8_dtype(Fp8Format::E4M3FN));
  thread_local at::Tensor one;  // a per-tensor weight scale of 1 for unscaled FP8 weights, made once
  if (!w_scale.defined() && (!one.defined() || one.device() != x.device())) one = at::ones({}, x.options().dtype(at::kFloat));
  at::Tensor ws = w_scale.defined() ? w_scale.to(at::kFloat) : one;
  at::Tensor as = a_scale;
  if (plan.rowwise) {  // _scaled_mm's row-wise form: [M,1] and [1,N], both FP32
    as = a_scale.reshape({1, 1}).expand({rows, 1}).contiguous();
    ws = ws.reshape({1, -1});
  } else {
    ws = ws.reshape({});
  }
  std::optional<at::Tensor> b;
  if (bias.defined() && !plan.bias_after) b = bias.to(x.scalar_type());
  // _scaled_mm wants the second operand column-major: wᵀ of a row-major [N, K] weight is that.
  auto y = at::_scaled_mm(xq, w_fp8.t(), as, ws, b, {}, x.scalar_type(), /*use_fast_accum=*/false);
  if (bias.defined() && plan.bias_after) y.add_(bias.to(y.scalar_type()));
  auto sizes = x.sizes().vec();
  sizes.back() = w_fp8.size(0);
  return y.reshape(sizes);
#else
  (void)x, (void)w_fp8, (void)w_scale, (void)bias, (void)input_scale, (void)plan;
  throw RuntimeFailure("FP8 compute needs a CUDA build of LibTorch 2.4 or newer (this build: " +
                       torch_version() + (built_with_cuda() ? ", CUDA" : ", CPU only") + ")");
#endif
}

}  // namespace fp8s::backend
