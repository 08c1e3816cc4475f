#include "models/convert.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/architecture.h"

namespace fp8s {

void widen_to_f32(const void* raw, Dtype dtype, std::size_t n, float* out, const std::string& what) {
  switch (dtype) {
    case Dtype::F32: std::memcpy(out, raw, n * 4); return;
    case Dtype::F16: f16_to_f32(static_cast<const uint16_t*>(raw), out, n); return;
    case Dtype::BF16: bf16_to_f32(static_cast<const uint16_t*>(raw), out, n); return;
    default:
      throw InputError(what + " has dtype " + dtype_name(dtype) + "; expected F32, F16 or BF16");
  }
}

ConvertSummary convert_checkpoint(const ConvertOptions& options,
                                  const std::function<void(std::size_t, std::size_t)>& progress) {
  SafetensorsFile in(options.in);
  for (const auto& t : in.tensors()) {
    if (t.dtype == Dtype::F8_E4M3 || t.dtype == Dtype::F8_E5M2) {
      throw InputError(options.in + " is already stored in FP8 (tensor '" + t.name +
                       "'); convert from the 16/32-bit original instead");
    }
  }
  const Dtype f8 = options.format == Fp8Format::E4M3FN ? Dtype::F8_E4M3 : Dtype::F8_E5M2;
  std::vector<TensorSpec> specs;
  std::vector<bool> quantise;
  std::string source_dtype;
  if (options.float16 && *options.float16 != Dtype::F16 && *options.float16 != Dtype::BF16) {
    throw InputError("convert: the 16-bit target must be F16 or BF16");
  }
  for (const auto& t : in.tensors()) {
    if (options.float16) {
      const bool cast = is_float_dtype(t.dtype) && t.dtype != *options.float16;
      quantise.push_back(cast);
      specs.push_back({t.name, cast ? *options.float16 : t.dtype, t.shape});
      continue;
    }
    const bool q = is_float_dtype(t.dtype) && !t.shape.empty() && t.shape[0] > 0 &&
                   is_quantisable(t.name, t.shape, options.fp8_vae);
    quantise.push_back(q);
    specs.push_back({t.name, q ? f8 : t.dtype, t.shape});
    if (q) {
      source_dtype = dtype_name(t.dtype);
      if (options.scale == Fp8Scale::Tensor) {
        specs.push_back({scale_key_for(t.name), Dtype::F32, {1}});
      } else if (options.scale == Fp8Scale::Channel) {
        specs.push_back({scale_key_for(t.name), Dtype::F32, {t.shape[0]}});
      }
    }
  }
  auto metadata = in.metadata();
  if (!options.float16) metadata["fp8s.quantization"] = nlohmann::json{{"format", fp8_format_name(options.format)},
                                                 {"scale", fp8_scale_name(options.scale)},
                                                 {"source_dtype", source_dtype},
                                                 {"fp8_vae", options.fp8_vae}}
                                      .dump();
  SafetensorsWriter writer(options.out, specs, metadata, options.overwrite);
  ConvertSummary summary;
  summary.bytes_in = in.file_size();
  std::vector<uint8_t> raw;
  std::vector<float> wide;
  std::vector<uint8_t> codes;
  for (std::size_t i = 0; i < in.tensors().size(); ++i) {
    const auto& t = in.tensors()[i];
    raw.resize(t.nbytes());
    in.read(t, raw.data());
    if (!quantise[i]) {
      writer.append(raw.data(), raw.size());
    } else {
      const std::size_t n = static_cast<std::size_t>(t.numel());
      wide.resize(n);
      widen_to_f32(raw.data(), t.dtype, n, wide.data(), options.in + ": tensor '" + t.name + "'");
      if (options.float16) {
        std::vector<uint16_t> half(n);
        if (*options.float16 == Dtype::F16) {
          f32_to_f16(wide.data(), half.data(), n);
        } else {
          f32_to_bf16(wide.data(), half.data(), n);
        }
        writer.append(half.data(), n * 2);
      } else {
        codes.resize(n);
        const auto scales =
            quantize_weight(wide.data(), t.shape[0], static_cast<int64_t>(n), options.format,
                            options.scale, codes.data());
        writer.append(codes.data(), n);
        if (!scales.empty()) writer.append(scales.data(), scales.size() * 4);
      }
      summary.quantised_tensors += 1;
      summary.quantised_params += n;
    }
    if (progress) progress(i + 1, in.tensors().size());
  }
  writer.commit();
  summary.bytes_out = SafetensorsFile(options.out).file_size();
  return summary;
}

}  // namespace fp8s
