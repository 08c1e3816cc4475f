#include "models/convert.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/strings.h"
#include "models/architecture.h"
#include "models/fp8_files.h"
#include "models/tensor_roles.h"

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

std::string comfy_quant_json(Fp8Format format) {
  return nlohmann::json{{"format", format == Fp8Format::E4M3FN ? "float8_e4m3fn" : "float8_e5m2"}}.dump();
}

namespace {

// The output's layout: each input tensor's spec (and the scale and comfy_quant of a scaled layer),
// whether it is written in another type, its FP8 scaling.
struct ConvertPlan {
  std::vector<TensorSpec> specs;
  std::vector<bool> cast;          // per input tensor: written in another type (else copied as it is)
  std::vector<Fp8Scale> scale_of;  // per input tensor: its FP8 scaling
  std::string source_dtype;        // of the quantised weights
};

}  // namespace

bool is_linear_weight(const TensorRecord& t) {
  if (t.shape.size() != 2 || !ends_with(t.name, ".weight") || !is_float_dtype(t.dtype) || component_of(t.name) == Component::Vae) return false;
  for (const char* table : {"embed_tokens.", "token_embedding.", "position_embedding.", "shared.weight", "wte.", "wpe."}) {
    if (t.name.find(table) != std::string::npos) return false;
  }
  return t.shape[0] > 0 && t.shape[1] > 0;
}

namespace {

QuantLayerConf block_conf(WeightType type) {
  QuantLayerConf c;
  c.format = type == WeightType::INT8 ? QuantFormat::Int8 : type == WeightType::MXFP8 ? QuantFormat::Mxfp8 : QuantFormat::Nvfp4;
  return c;
}

// The comfy_quant layer's tensors after its weight: scale(s) and the description.
void plan_block_layer(ConvertPlan& plan, const TensorRecord& t, WeightType type) {
  const QuantLayerConf conf = block_conf(type);
  const StoredShape st = stored_shape(conf, t.shape[0], t.shape[1]);
  const std::string layer = t.name.substr(0, t.name.size() - 7), json = comfy_quant_json(conf);
  const Dtype data = conf.format == QuantFormat::Int8 ? Dtype::I8 : conf.format == QuantFormat::Mxfp8 ? Dtype::F8_E4M3 : Dtype::U8;
  plan.specs.push_back({t.name, data, {st.data_rows, st.data_cols}});
  if (conf.format == QuantFormat::Int8) {
    plan.specs.push_back({layer + ".weight_scale", Dtype::F32, {t.shape[0], 1}});
  } else {
    plan.specs.push_back({layer + ".weight_scale", conf.format == QuantFormat::Mxfp8 ? Dtype::F8_E8M0 : Dtype::F8_E4M3,
                          {st.scale_rows, st.scale_cols}});
  }
  if (conf.format == QuantFormat::Nvfp4) plan.specs.push_back({layer + ".weight_scale_2", Dtype::F32, {}});
  plan.specs.push_back({layer + ".comfy_quant", Dtype::U8, {static_cast<int64_t>(json.size())}});
}

ConvertPlan plan_convert(const SafetensorsFile& in, const ConvertOptions& options, const std::string& conf) {
  ConvertPlan plan;
  const Dtype f8 = fp8_dtype(options.format);
  for (const auto& t : in.tensors()) {
    if (options.blocks) {
      const bool q = is_linear_weight(t);
      plan.cast.push_back(q);
      plan.scale_of.push_back(Fp8Scale::None);
      if (q) {
        plan_block_layer(plan, t, *options.blocks);
        plan.source_dtype = dtype_name(t.dtype);
      } else {
        plan.specs.push_back({t.name, t.dtype, t.shape});
      }
      continue;
    }
    if (options.float16) {
      const bool c = is_float_dtype(t.dtype) && t.dtype != *options.float16;
      plan.cast.push_back(c);
      plan.scale_of.push_back(Fp8Scale::None);
      plan.specs.push_back({t.name, c ? *options.float16 : t.dtype, t.shape});
      continue;
    }
    const bool q = is_float_dtype(t.dtype) && !t.shape.empty() && t.shape[0] > 0 &&
                   is_quantisable(t.name, t.shape, options.fp8_vae);
    plan.cast.push_back(q);
    // Scaled layers follow ComfyUI's comfy_quant (comfy/ops.py MixedPrecisionOps: Linear layers of
    // the diffusion model, `<layer>.weight_scale` and `<layer>.comfy_quant`), so ComfyUI decodes
    // them as we do; what its rules do not scale (convolutions, whose scale Forge and ComfyUI
    // ignore, the text encoders, open_clip's fused in_proj) is written unscaled FP8.
    const bool scaled = q && options.scale != Fp8Scale::None && t.shape.size() == 2 &&
                        ends_with(t.name, ".weight") && component_of(t.name) == Component::UNet;
    plan.scale_of.push_back(scaled ? options.scale : Fp8Scale::None);
    plan.specs.push_back({t.name, q ? f8 : t.dtype, t.shape});
    if (q) plan.source_dtype = dtype_name(t.dtype);
    if (scaled) {
      const std::string layer = t.name.substr(0, t.name.size() - 7);
      const std::vector<int64_t> scale_shape = options.scale == Fp8Scale::Tensor ? std::vector<int64_t>{}
                                                                                 : std::vector<int64_t>{t.shape[0], 1};
      plan.specs.push_back({layer + ".weight_scale", Dtype::F32, scale_shape});
      plan.specs.push_back({layer + ".comfy_quant", Dtype::U8, {static_cast<int64_t>(conf.size())}});
    }
  }
  return plan;
}

std::string quantization_metadata(const ConvertOptions& options, const std::string& source_dtype) {
  return nlohmann::json{{"format", fp8_format_name(options.format)},
                        {"scale", fp8_scale_name(options.scale)},
                        {"source_dtype", source_dtype},
                        {"fp8_vae", options.fp8_vae},
                        {"layout", options.scale == Fp8Scale::None ? "plain F8" : "ComfyUI comfy_quant"},
                        {"scaled_layers", options.scale == Fp8Scale::None
                                              ? "none"
                                              : "Linear layers of the UNet (.weight_scale, .comfy_quant); convolutions "
                                                "and text encoders unscaled F8"}}
      .dump();
}

// One cast tensor (`wide`: its values in FP32) in the output type: 16-bit, or FP8 codes with their
// scales and comfy_quant after them.
void write_cast(SafetensorsWriter& writer, const ConvertOptions& options, const TensorRecord& t, Fp8Scale scale,
                const std::vector<float>& wide, const std::string& conf) {
  const std::size_t n = wide.size();
  if (options.blocks) {  // the comfy_quant layer, in plan_block_layer's order
    const QuantLayerConf c = block_conf(*options.blocks);
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const StoredShape st = stored_shape(c, rows, cols);
    std::vector<uint8_t> data(static_cast<std::size_t>(st.data_rows * st.data_cols));
    if (c.format == QuantFormat::Int8) {
      std::vector<float> scales(static_cast<std::size_t>(rows));
      quantize_int8(wide.data(), rows, cols, true, reinterpret_cast<int8_t*>(data.data()), scales.data());
      writer.append(data.data(), data.size());
      writer.append(scales.data(), scales.size() * 4);
    } else {
      std::vector<uint8_t> scales(static_cast<std::size_t>(st.scale_rows * st.scale_cols));
      float s2 = 0.0f;
      if (c.format == QuantFormat::Mxfp8) quantize_mxfp8(wide.data(), rows, cols, data.data(), scales.data());
      else s2 = quantize_nvfp4(wide.data(), rows, cols, data.data(), scales.data());
      writer.append(data.data(), data.size());
      writer.append(scales.data(), scales.size());
      if (c.format == QuantFormat::Nvfp4) writer.append(&s2, 4);
    }
    const std::string json = comfy_quant_json(c);
    writer.append(json.data(), json.size());
    return;
  }
  if (options.float16) {
    std::vector<uint16_t> half(n);
    if (*options.float16 == Dtype::F16) {
      f32_to_f16(wide.data(), half.data(), n);
    } else {
      f32_to_bf16(wide.data(), half.data(), n);
    }
    writer.append(half.data(), n * 2);
    return;
  }
  std::vector<uint8_t> codes(n);
  const auto scales = quantize_weight(wide.data(), t.shape[0], static_cast<int64_t>(n), options.format, scale, codes.data());
  writer.append(codes.data(), n);
  if (!scales.empty()) {
    writer.append(scales.data(), scales.size() * 4);
    writer.append(conf.data(), conf.size());
  }
}

}  // namespace

ConvertSummary convert_checkpoint(const ConvertOptions& options,
                                  const std::function<void(std::size_t, std::size_t)>& progress) {
  SafetensorsFile in(options.in);
  const Fp8FileScheme scheme = read_fp8_scheme(in);  // refuses what cannot run, by name
  if (!scheme.formats.empty()) {
    std::string formats;
    for (const auto& [label, layers] : scheme.formats) formats += (formats.empty() ? "" : ", ") + std::to_string(layers) + " " + label;
    throw InputError(options.in + " is already stored quantised (ComfyUI comfy_quant layers: " + formats +
                     "); convert from the 16/32-bit original instead");
  }
  for (const auto& t : in.tensors()) {
    if (is_fp8_dtype(t.dtype)) {
      throw InputError(options.in + " is already stored in FP8 (tensor '" + t.name +
                       "'); convert from the 16/32-bit original instead");
    }
  }
  if (options.float16 && *options.float16 != Dtype::F16 && *options.float16 != Dtype::BF16) {
    throw InputError("convert: the 16-bit target must be F16 or BF16");
  }
  const std::string conf = comfy_quant_json(options.format);
  const ConvertPlan plan = plan_convert(in, options, conf);
  auto metadata = in.metadata();
  if (options.blocks) {
    metadata["fp8s.quantization"] = nlohmann::json{{"format", weight_type_name(*options.blocks)},
                                                   {"source_dtype", plan.source_dtype},
                                                   {"layout", "ComfyUI comfy_quant"},
                                                   {"quantised_layers", "Linear weights outside the autoencoder, embeddings excepted"}}
                                        .dump();
  } else if (!options.float16) {
    metadata["fp8s.quantization"] = quantization_metadata(options, plan.source_dtype);
  }
  SafetensorsWriter writer(options.out, plan.specs, metadata, options.overwrite);
  ConvertSummary summary;
  summary.bytes_in = in.file_size();
  std::vector<uint8_t> raw;
  std::vector<float> wide;
  for (std::size_t i = 0; i < in.tensors().size(); ++i) {
    const auto& t = in.tensors()[i];
    raw.resize(t.nbytes());
    in.read(t, raw.data());
    if (!plan.cast[i]) {
      writer.append(raw.data(), raw.size());
    } else {
      const std::size_t n = static_cast<std::size_t>(t.numel());
      wide.resize(n);
      widen_to_f32(raw.data(), t.dtype, n, wide.data(), options.in + ": tensor '" + t.name + "'");
      write_cast(writer, options, t, plan.scale_of[i], wide, conf);
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
