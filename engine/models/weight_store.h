// One owner for a layer's weight (ComfyUI's ops.py keeps weight casting in one place the same
// way): how it is stored (dense 16/32-bit values, FP8 codes with their format and scale, or either
// of those packed in oneDNN's blocked convolution order with its layout), what it takes in memory,
// and its decode into the compute type. Every network family's Linear and Conv2d layers
// (models/nn.h) hold one; the loader (models/loader.cpp) fills it; LoRA (lora/lora_apply.h)
// merges through it or adds an output term beside it.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

#include "backend/backend.h"
#include "core/types.h"
#include "fp8/quant_formats.h"

namespace fp8s {

// A convolution's geometry, which the packed order depends on.
struct ConvGeometry {
  int64_t stride = 1;
  int64_t padding = 0;
};

// A Linear weight kept in one of ComfyUI's integer or block formats beside FP8 (comfy_quant:
// int8_tensorwise with or without ConvRot, mxfp8, nvfp4, convrot_w4a4, awq_w4a16, svdquant_w4a4),
// as its file stores it, on the CPU (fp8/quant_formats.h has the formulas).
struct BlockWeight {
  QuantLayerConf conf;
  int64_t rows = 0, cols = 0;  // the logical [N, K]
  at::Tensor data;             // .weight as stored: I8 or U8, padded and packed
  at::Tensor scale;            // int8 / w4a4: F32 [1] or [N]; mxfp8 / nvfp4: the tiled U8 bytes; awq / svdquant: F32 [K/G, N]
  float scale_2 = 1.0f;        // nvfp4's global scale
  at::Tensor zeros;            // awq: F32 [K/G, N]
  at::Tensor down, up, smooth;  // svdquant: F32 [K, R], [N, R], [K]
  uint64_t bytes() const;
  // The weight in FP32, [N, K] row-major, into `out`.
  void dequantize(float* out) const;
};

// `w` (FP32 [N, K]) quantised into INT8 (per-row scales), MXFP8 or NVFP4 (`type`), by the
// quantisers that match comfy-kitchen's bytes (fp8/quant_formats.h).
std::shared_ptr<BlockWeight> quantise_block_weight(const at::Tensor& w, WeightType type);

class WeightStore {
 public:
  enum class Kind { Dense, Fp8, PackedDense, PackedFp8, Blocks };

  // The tensor the module registered as its parameter "weight" (the loader replaces its data):
  // dense values, FP8 codes (uint8 on the CPU, native float8 on a GPU), or, when packed, a
  // placeholder of the logical shape and storage dtype that owns no memory.
  at::Tensor weight;
  // The FP8 scale, [1] (per tensor) or [out] (per output channel), F32; the module's buffer
  // "scale_weight" once registered. Undefined: none.
  at::Tensor scale;
  // The file's activation scale (`.scale_input`/`.input_scale`), for FP8 compute.
  at::Tensor input_scale;
  bool fp8 = false;
  Fp8Format format = Fp8Format::E4M3FN;
  // A CPU convolution's elements in oneDNN's blocked order (16-bit values; FP8 codes permuted as
  // BF16 values 0..255 are; FP16 bits as BF16 bit patterns), and that order.
  at::Tensor packed;
  backend::PackedLayout layout;
  // A comfy_quant integer or block format (weight then stays the placeholder of the logical shape).
  std::shared_ptr<const BlockWeight> blocks;

  Kind kind() const;
  bool per_channel_scale() const { return fp8 && scale.defined() && scale.numel() > 1; }
  // The weight as stored, in its logical shape ([out, in] or [out, in, kh, kw]): values or codes,
  // unpacked when packed (a copy then).
  at::Tensor logical() const;
  // The bytes it holds: the packed elements or the weight, plus the scale.
  uint64_t bytes() const;

  // The weight in `dtype`, logical shape: the stored values when they are already `dtype`, else a
  // cast or an FP8 decode (times the scale) into a per-thread scratch buffer that the next layer's
  // decode reuses, so a forward holds one decoded weight at a time. On a GPU: the device's cast.
  at::Tensor decode(at::ScalarType dtype) const;
  // The same into `out` (FP32, BF16 or FP16, the logical shape, any strides).
  void decode_into(at::Tensor& out) const;
  // A packed weight's elements as BF16 in the packed order, ready for backend::packed_conv2d: as
  // stored (BF16), cast (FP16) or decoded times a per-tensor scale (FP8; a per-channel scale is
  // for the caller to apply to the output channels).
  at::Tensor packed_bf16() const;

  // Puts `stored` (values, or FP8 codes as uint8 with `scale`) in place on `device`: FP8 as the
  // device keeps it, a CPU convolution (`conv` set) packed where the build packs and the run's
  // KernelOptions allow, else a 16-bit or FP8 convolution weight channels_last. Returns the
  // scale as placed (on `device`) for the module to register.
  at::Tensor place(const at::Tensor& stored, bool is_fp8, Fp8Format fmt, const at::Tensor& scale_in,
                   const at::Device& device, std::optional<ConvGeometry> conv);
};

// FP8 codes decoded into `out` (FP32, BF16 or FP16, the codes' shape): decode(code) times the
// per-tensor scale, or times the per-channel scale along the first dimension (undefined: none).
void decode_fp8_into(const at::Tensor& codes, Fp8Format format, const at::Tensor& scale, at::Tensor& out);

// Time spent decoding FP8 weights (for `bench`: GB/s and share of the step time).
struct DecodeStats {
  uint64_t nanoseconds = 0;
  uint64_t weights = 0;  // decoded elements
};
DecodeStats decode_stats();
void reset_decode_stats();

}  // namespace fp8s
