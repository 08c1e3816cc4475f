// FP8 checkpoints of other tools: scale spellings, markers, and what is refused (fp8_files.h).
#include "models/fp8_files.h"

#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/strings.h"

namespace fp8s {
namespace {

constexpr const char* kScaleSuffixes[] = {"scale_weight", "weight_scale", "weight_scale_inv", "weight_scale_2",
                                          "scale_input", "input_scale"};

// The layer a tensor belongs to: its name without the last component.
std::string layer_of(const std::string& name) {
  const auto dot = name.find_last_of('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

[[noreturn]] void refuse(const std::string& label, const std::string& layer, const std::string& what) {
  throw InputError(label + ": layer '" + layer + "' is " + what +
                   "; FP8 Studio runs FP8 E4M3/E5M2 only (plain, or scaled per tensor or per output "
                   "channel): use the FP8 or 16-bit file of this model");
}

// A comfy_quant layer configuration: {"format": F, ...} (or, in some writers' metadata, F alone).
void check_comfy_format(const nlohmann::json& conf, const std::string& label, const std::string& layer) {
  std::string format;
  if (conf.is_string()) format = conf.get<std::string>();
  if (conf.is_object() && conf.contains("format") && conf["format"].is_string()) format = conf["format"].get<std::string>();
  if (format.empty()) {
    throw InputError(label + ": layer '" + layer + "' has a comfy_quant description without a format; the file is damaged");
  }
  if (format != "float8_e4m3fn" && format != "float8_e5m2") refuse(label, layer, format + " (ComfyUI comfy_quant)");
}

}  // namespace

std::string find_scale_key(const std::function<bool(const std::string&)>& has, const std::string& weight_key) {
  std::vector<std::string> candidates;
  if (ends_with(weight_key, ".weight")) {
    const std::string base = weight_key.substr(0, weight_key.size() - 6);  // "<m>."
    candidates = {base + "scale_weight", base + "weight_scale", base + "weight_scale_inv"};
  } else if (ends_with(weight_key, "_weight")) {
    const std::string stem = weight_key.substr(0, weight_key.size() - 6);  // "<m>.in_proj_"
    candidates = {stem + "scale_weight", weight_key + "_scale"};
  } else {
    candidates = {weight_key + ".scale_weight"};
  }
  for (const auto& c : candidates) {
    if (has(c)) return c;
  }
  return "";
}

std::string find_input_scale_key(const std::function<bool(const std::string&)>& has, const std::string& weight_key) {
  const std::string module = layer_of(weight_key);
  for (const std::string& c : {module + ".scale_input", module + ".input_scale"}) {
    if (has(c)) return c;
  }
  return "";
}

bool is_scale_name(const std::string& name) {
  for (const std::string s : kScaleSuffixes) {
    if (!ends_with(name, s)) continue;
    const std::size_t before = name.size() - s.size();  // the suffix starts a name component or follows '_'
    if (before == 0 || name[before - 1] == '.' || name[before - 1] == '_') return true;
  }
  return false;
}

bool is_input_scale_name(const std::string& name) {
  return ends_with(name, ".scale_input") || ends_with(name, ".input_scale");
}

bool is_quantisation_marker(const std::string& name) {
  return ends_with(name, ".comfy_quant") || name == "scaled_fp8" || ends_with(name, ".scaled_fp8");
}

Fp8FileScheme read_fp8_scheme(const SafetensorsIndex& index,
                              const std::function<std::vector<uint8_t>(const TensorRecord&)>& bytes,
                              const std::string& label) {
  std::map<std::string, const TensorRecord*> by_name;
  for (const auto& t : index.tensors) by_name[t.name] = &t;
  const auto has = [&](const std::string& n) { return by_name.count(n) > 0; };
  Fp8FileScheme s;
  bool marker = false, comfy_quant = false, weight_scale = false, own_scale = false;
  for (const auto& t : index.tensors) {
    const std::string layer = layer_of(t.name);
    if (t.dtype == Dtype::F8_E8M0) refuse(label, layer, "mxfp8 (F8_E8M0 block scales, OCP MX / ComfyUI comfy_quant)");
    if (ends_with(t.name, ".weight_scale_2")) refuse(label, layer, "nvfp4 (two-level FP4 scales, ModelOpt / ComfyUI comfy_quant)");
    if (t.name.find(".quant_state.bitsandbytes__") != std::string::npos || ends_with(t.name, ".absmax") ||
        ends_with(t.name, ".quant_map")) {
      refuse(label, layer, "bitsandbytes 4-bit (nf4/fp4)");
    }
    if (ends_with(t.name, ".weight") && t.shape.size() >= 2 && (t.dtype == Dtype::I8 || t.dtype == Dtype::U8)) {
      refuse(label, layer, t.dtype == Dtype::I8 ? "int8 (I8 weights)" : "4-bit (weights packed in U8)");
    }
    if (t.name == "scaled_fp8" || ends_with(t.name, ".scaled_fp8")) marker = true;
    if (ends_with(t.name, ".comfy_quant")) {
      comfy_quant = true;
      if (t.nbytes() > 65536) throw InputError(label + ": '" + t.name + "' is " + std::to_string(t.nbytes()) + " bytes, not a layer description; the file is damaged");
      const auto raw = bytes(t);
      const auto conf = nlohmann::json::parse(raw.begin(), raw.end(), nullptr, /*allow_exceptions=*/false);
      if (conf.is_discarded()) throw InputError(label + ": '" + t.name + "' is not JSON; the file is damaged");
      check_comfy_format(conf, label, layer);
    }
    if (ends_with(t.name, ".weight_scale")) weight_scale = true;
    if (ends_with(t.name, "scale_weight")) own_scale = true;
    if (is_input_scale_name(t.name)) s.input_scales += 1;
  }
  // FP8 weights and their scales, once every format that names itself has been refused
  for (const auto& t : index.tensors) {
    const std::string layer = layer_of(t.name);
    if (!is_fp8_dtype(t.dtype)) continue;
    s.fp8_tensors += 1;
    const std::string scale_key = find_scale_key(has, t.name);
    if (scale_key.empty()) continue;
    const TensorRecord& sc = *by_name.at(scale_key);
    const uint64_t out = t.shape.empty() ? 1 : static_cast<uint64_t>(t.shape[0]);
    const bool channel_shape = sc.shape.size() == 1 || (sc.shape.size() == 2 && sc.shape[1] == 1);
    if (sc.numel() != 1 && !(channel_shape && sc.numel() == out)) {
      refuse(label, layer, "block-scaled FP8 ('" + scale_key + "' has " + std::to_string(sc.numel()) +
                               " scales for " + std::to_string(out) + " output channels)");
    }
    if (!is_float_dtype(sc.dtype) || is_fp8_dtype(sc.dtype)) {
      throw InputError(label + ": scale '" + scale_key + "' has dtype " + dtype_name(sc.dtype) +
                       "; expected F32, BF16 or F16");
    }
    s.scaled_weights += 1;
    s.channel_scaled += sc.numel() > 1 ? 1 : 0;
  }
  if (const auto it = index.metadata.find("_quantization_metadata"); it != index.metadata.end()) {
    comfy_quant = true;
    const auto meta = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
    if (meta.is_discarded() || !meta.is_object() || !meta.contains("layers") || !meta["layers"].is_object()) {
      throw InputError(label + ": the _quantization_metadata header entry is not ComfyUI's {\"layers\": {...}}; the file is damaged");
    }
    for (const auto& [layer, conf] : meta["layers"].items()) check_comfy_format(conf, label, layer);
  }
  if (s.fp8_tensors == 0 && !comfy_quant && !marker) return s;
  s.layout = marker ? "ComfyUI scaled_fp8"
             : comfy_quant ? "ComfyUI comfy_quant"
             : weight_scale ? "ModelOpt / compressed-tensors (weight_scale)"
             : own_scale ? (index.metadata.count("fp8s.quantization") ? "FP8 Studio (scale_weight)" : "scaled FP8 (scale_weight)")
                         : "plain F8";
  return s;
}

Fp8FileScheme read_fp8_scheme(const SafetensorsFile& file) {
  return read_fp8_scheme(
      file.index(),
      [&](const TensorRecord& r) {
        std::vector<uint8_t> v(r.nbytes());
        file.read(r, v.data());
        return v;
      },
      file.path());
}

}  // namespace fp8s
