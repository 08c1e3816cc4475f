// What this LibTorch build and machine can do, decided in this one place: Debian's LibTorch 1.13
// (CPU only, no float8 dtypes, no fused attention) or the official LibTorch 2.x with CUDA. The rest
// of the engine asks these functions instead of testing versions or #ifdef-ing on CUDA itself.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/function_schema.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fp8/codec.h"

namespace fp8s::backend {

// "1.13.0", "2.15.0" (the LibTorch headers this build was compiled against).
std::string torch_version();
// Whether this build links LibTorch's CUDA backend (the official 2.x build).
bool built_with_cuda();
// "LibTorch 2.15.0, CUDA 13.2, GPU architectures sm_75 sm_80 ..." or "LibTorch 1.13.0, CPU only".
std::string build_summary();
// The number of CUDA devices the driver reports (0 without a driver, a GPU or CUDA support).
int cuda_device_count();

// Parses a device choice: "auto" (the first CUDA device when there is one, else the CPU), "cpu",
// "cuda" or "cuda:N". Throws InputError naming what was asked for and what this machine has.
at::Device resolve_device(const std::string& choice);
// "CPU" or "CUDA 0: NVIDIA H200, 139.8 GiB, compute capability 9.0".
std::string describe_device(const at::Device& device);
// Total memory of a CUDA device (0 for the CPU).
uint64_t device_total_bytes(const at::Device& device);
// Compute capability major*10+minor of a CUDA device (0 for the CPU).
int compute_capability(const at::Device& device);
// Waits for the device's queued work (no-op on the CPU): step times read the clock after it.
void synchronize(const at::Device& device);

// The CUDA caching allocator's counters for a device (all zero on the CPU).
struct DeviceMemory {
  uint64_t allocated = 0, allocated_peak = 0;
  uint64_t reserved = 0, reserved_peak = 0;
  uint64_t used = 0;  // cudaMemGetInfo's total - free now (context, pools, other processes)
};
DeviceMemory device_memory(const at::Device& device);
// Starts a new peak measurement (per phase).
void reset_device_peak(const at::Device& device);
// Returns the CUDA caching allocator's unused blocks to the driver, once the work queued on the
// current device is done (between the modes of a compare); nothing without a CUDA device.
void empty_device_cache();
// What the weights and working memory of a run may take on `device`: on a GPU its free memory
// (cudaMemGetInfo, after the CUDA context) plus what the caching allocator holds unused, capped by
// $FP8S_AVAILABLE_VRAM (a size such as 8G: run as if the card had that much free; it also stands
// for a GPU in plans made on a machine without one). 0 where unknown (the CPU: see
// available_memory_bytes).
uint64_t device_available_bytes(const at::Device& device);
// $FP8S_AVAILABLE_VRAM as bytes (nullopt: unset); InputError for a value that is not a size.
std::optional<uint64_t> simulated_vram_bytes();

// Page-locks existing host memory for asynchronous copies to the GPU (cudaHostRegister), and
// unlocks it; false where it failed (or on a build without CUDA): the memory stays pageable.
bool register_host_memory(void* data, std::size_t bytes);
void unregister_host_memory(void* data);

// LibTorch >= 2.1: tensors of dtype float8_e4m3fn / float8_e5m2.
bool has_native_fp8();
// The native dtype of a format; throws RuntimeFailure on a build without it.
at::ScalarType native_fp8_dtype(Fp8Format format);
// The codec's codes (uint8) seen as the native dtype (the same bits; no copy).
at::Tensor codes_as_native_fp8(const at::Tensor& codes, Fp8Format format);
// x (any float dtype, any device) encoded as the codec encodes it: the native cast rounds to
// nearest even but does not saturate, so finite values are clamped to the format's largest finite
// first (E5M2 keeps ±inf, as the codec does).
at::Tensor encode_native_fp8(const at::Tensor& x, Fp8Format format);

// LibTorch >= 2.0: CPU group_norm/layer_norm take BF16 input with FP32 weights (FP32 inside);
// 1.13 refuses the mix ("expected scalar type BFloat16 but found Float").
bool has_mixed_type_norms();

// Convolution weights packed once, at load, into oneDNN's blocked layout (LibTorch >= 2.4 with
// oneDNN, BF16 on this CPU): a call then runs on them as they are, where at::conv2d reorders its
// dense weight on every call (about a tenth of a 512² step). Whether a run packs is its
// KernelOptions' (kernel_options.h: FP8S_PACKED_CONV=0 turns it off, for alternated
// measurements). The engine keeps the packed elements itself, as a 1-D tensor of the layout's
// element count (zero padding included), so its memory is tracked like every tensor's.
bool has_packed_conv();
// The type list of an operator schema as "Tensor", "Tensor?", "int[]", "Scalar?[]", ... per
// argument, then "->" and the returns: how has_packed_conv checks each operator it calls boxed
// against the signature this code was written for (a LibTorch that changes one runs unpacked).
std::vector<std::string> schema_types(const c10::FunctionSchema& schema);
// Whether `schema` is one of those operators with exactly the types this code passes.
bool matches_packed_conv_spec(const c10::FunctionSchema& schema);
struct PackedLayout {
  at::Tensor desc;              // oneDNN's serialized memory descriptor (uint8)
  std::vector<int64_t> sizes;   // the logical weight's [O, I, kh, kw]
  int64_t elements = 0;         // packed elements, padding included (>= the logical count)
};
// A BF16 weight [O, I, kh, kw] for a convolution of this stride and padding: its packed
// elements (1-D BF16) and their layout. Throws RuntimeFailure where !has_packed_conv().
std::pair<at::Tensor, PackedLayout> pack_conv_weight(const at::Tensor& w, int64_t stride, int64_t padding);
// The logical BF16 weight (channels_last) of packed elements.
at::Tensor unpack_conv_weight(const at::Tensor& elements, const PackedLayout& layout);
// conv2d(x, w, bias) for BF16 x (channels_last in, channels_last out) and w's packed elements.
at::Tensor packed_conv2d(const at::Tensor& x, const at::Tensor& elements, const PackedLayout& layout,
                         const at::Tensor& bias, int64_t stride, int64_t padding);

// LibTorch >= 2.0: at::scaled_dot_product_attention (fused flash/memory-efficient kernels).
bool has_fused_attention();
// softmax(q kᵀ · scale + mask) v over [B, heads, N, d]; mask additive (broadcast), may be undefined.
// Throws RuntimeFailure on a build without it.
at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                           const at::Tensor& mask);

// FP8 compute (ComfyUI's fp8_e4m3fn_fast): needs CUDA compute capability >= 8.9 and LibTorch >= 2.1.
bool supports_fp8_compute(const at::Device& device);

// How one FP8 layer multiplies under --fp8-compute (pure: tested on any build). _scaled_mm takes an
// E4M3 weight whose N and K are multiples of 16 (cuBLASLt; M is free), with a per-tensor scale, or
// per-channel (row-wise scales, [M,1] and [1,N]) where the output is BF16. It refuses a bias with an
// FP32 output: that bias is added afterwards.
struct Fp8MmPlan {
  bool scaled_mm = false;   // false: the weight is decoded and multiplied in the compute type
  bool rowwise = false;     // per-channel weight scales
  bool bias_after = false;  // FP32 output: y + bias after the product
  const char* reason = "";  // why not, when not
};
Fp8MmPlan plan_fp8_mm(bool fp8, Fp8Format format, int64_t scale_numel, int64_t n, int64_t k, at::ScalarType out);
// y = (x · a_scale) (w · w_scale)ᵀ + bias through at::_scaled_mm, as `plan` says: x [M, K] is
// quantised to E4M3 with a per-tensor scale (the file's input scale, else amax / 448: one reduction,
// one multiply, one cast), w [N, K] is native float8 with its per-tensor or per-channel scale.
// Accumulation keeps Hopper's periodic FP32 promotion (use_fast_accum off, as ComfyUI). Output in
// x's dtype. Throws RuntimeFailure where unsupported.
at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& w_fp8, const at::Tensor& w_scale,
                      const at::Tensor& bias, const at::Tensor& input_scale, const Fp8MmPlan& plan);

}  // namespace fp8s::backend
