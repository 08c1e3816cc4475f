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
                   "; FP8 Studio reads FP8 E4M3/E5M2 (plain, or scaled per tensor or per output channel) and "
                   "ComfyUI's comfy_quant layers (int8, mxfp8, nvfp4, 4-bit): use such a file of this model");
}

// The header's `_quantization_metadata` parsed and checked: its "layers" object.
nlohmann::json quantization_header_layers(const std::string& text, const std::string& label) {
  const auto meta = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object() || !meta.contains("layers") || !meta["layers"].is_object()) {
    throw InputError(label + ": the _quantization_metadata header entry is not ComfyUI's {\"layers\": {...}}; the file is damaged");
  }
  return meta["layers"];
}

// The comfy_quant layers of a parsed header: `<layer>.comfy_quant` tensors first, then the
// header's _quantization_metadata entries (ComfyUI's convert_old_quants overwrites the tensors with
// these; the files carry the same in both or one alone).
std::map<std::string, QuantLayerConf> comfy_layers(const SafetensorsIndex& index,
                                                   const std::function<std::vector<uint8_t>(const TensorRecord&)>& bytes,
                                                   const std::string& label) {
  std::map<std::string, QuantLayerConf> out;
  for (const auto& t : index.tensors) {
    if (!ends_with(t.name, ".comfy_quant")) continue;
    if (t.nbytes() > 65536) throw InputError(label + ": '" + t.name + "' is " + std::to_string(t.nbytes()) + " bytes, not a layer description; the file is damaged");
    const auto raw = bytes(t);
    out[layer_of(t.name)] = parse_comfy_quant(std::string(raw.begin(), raw.end()), label, layer_of(t.name));
  }
  if (const auto it = index.metadata.find("_quantization_metadata"); it != index.metadata.end()) {
    const nlohmann::json layers = quantization_header_layers(it->second, label);  // alive through the loop
    for (const auto& [layer, conf] : layers.items()) out[layer] = parse_comfy_quant(conf.dump(), label, layer);
  }
  return out;
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

const std::vector<std::string>& comfy_quant_parts() {
  static const std::vector<std::string> parts{"weight_scale", "weight_scale_2", "weight_zeros", "weight_proj_down", "weight_proj_up",
                                              "weight_smooth_factor", "input_scale", "pre_quant_scale", "comfy_quant"};
  return parts;
}

std::optional<QuantLayerConf> comfy_quant_layer(const SafetensorsFile& file, const std::string& weight_key) {
  if (!ends_with(weight_key, ".weight")) return std::nullopt;
  const std::string layer = weight_key.substr(0, weight_key.size() - 7);
  // the header's entry wins, as ComfyUI's convert_old_quants overwrites the tensors with it
  if (const auto it = file.metadata().find("_quantization_metadata"); it != file.metadata().end()) {
    // parsed once per file content and thread (a load asks once per layer)
    thread_local std::string parsed_text;
    thread_local nlohmann::json layers;
    if (parsed_text != it->second) {
      parsed_text.clear();  // a damaged header throws before it is taken as parsed
      layers = quantization_header_layers(it->second, file.path());
      parsed_text = it->second;
    }
    if (layers.contains(layer)) return parse_comfy_quant(layers[layer].dump(), file.path(), layer);
  }
  const auto* t = file.find(layer + ".comfy_quant");
  if (!t) return std::nullopt;
  if (t->nbytes() > 65536) throw InputError(file.path() + ": '" + t->name + "' is not a layer description; the file is damaged");
  std::string text(t->nbytes(), '\0');
  file.read(*t, text.data());
  return parse_comfy_quant(text, file.path(), layer);
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
  const auto comfy = comfy_layers(index, bytes, label);
  for (const auto& [layer, conf] : comfy) s.formats[quant_format_label(conf)] += 1;
  bool marker = false, weight_scale = false, own_scale = false;
  const bool comfy_quant = !comfy.empty() || index.metadata.count("_quantization_metadata");
  for (const auto& t : index.tensors) {
    const std::string layer = layer_of(t.name);
    if (ends_with(t.name, ".weight_scale")) weight_scale = true;
    if (ends_with(t.name, "scale_weight")) own_scale = true;
    if (is_input_scale_name(t.name)) s.input_scales += 1;
    if (t.name == "scaled_fp8" || ends_with(t.name, ".scaled_fp8")) marker = true;
    if (comfy.count(layer)) continue;  // a comfy_quant layer's tensors are its format's
    if (t.dtype == Dtype::F8_E8M0) refuse(label, layer, "mxfp8 (F8_E8M0 block scales) without a comfy_quant description");
    if (ends_with(t.name, ".weight_scale_2")) refuse(label, layer, "nvfp4 (two-level FP4 scales, ModelOpt) without a comfy_quant description");
    if (t.name.find(".quant_state.bitsandbytes__") != std::string::npos || ends_with(t.name, ".absmax") ||
        ends_with(t.name, ".quant_map")) {
      refuse(label, layer, "bitsandbytes 4-bit (nf4/fp4)");
    }
    if (ends_with(t.name, ".weight") && t.shape.size() >= 2 && (t.dtype == Dtype::I8 || t.dtype == Dtype::U8)) {
      refuse(label, layer, t.dtype == Dtype::I8 ? "int8 (I8 weights) without a comfy_quant description" : "4-bit (weights packed in U8) without a comfy_quant description");
    }
  }
  // FP8 weights and their scales, once every format that names itself has been refused
  for (const auto& t : index.tensors) {
    const std::string layer = layer_of(t.name);
    if (!is_fp8_dtype(t.dtype)) continue;
    if (const auto it = comfy.find(layer); it != comfy.end() && is_block_format(it->second.format)) continue;
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
