#include "models/inspect.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/strings.h"

namespace fp8s {
namespace {

std::string with_commas(uint64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

std::string human_bytes(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f GB", static_cast<double>(b) / 1e9);
  return buf;
}

void accumulate(ComponentStats& into, const ComponentStats& c) {
  into.tensors += c.tensors;
  into.params += c.params;
  into.buffer_elements += c.buffer_elements;
  into.stored_bytes += c.stored_bytes;
  into.quantisable_tensors += c.quantisable_tensors;
  into.quantisable_params += c.quantisable_params;
  into.fp8_in_file += c.fp8_in_file;
  into.bytes_fp32 += c.bytes_fp32;
  into.bytes_16bit += c.bytes_16bit;
  into.bytes_fp8 += c.bytes_fp8;
  for (const auto& [k, v] : c.dtype_tensors) into.dtype_tensors[k] += v;
}

}  // namespace

std::string component_label(const std::string& name) {
  if (starts_with(name, kUNetPrefix)) return "unet";
  if (starts_with(name, kVaePrefix)) return "vae";
  if (starts_with(name, "cond_stage_model.transformer.")) return "clip_l";
  if (starts_with(name, "cond_stage_model.model.")) return "open_clip_h";
  if (starts_with(name, "conditioner.embedders.")) {
    const auto rest = name.substr(std::string("conditioner.embedders.").size());
    const auto dot = rest.find('.');
    const std::string tail = dot == std::string::npos ? "" : rest.substr(dot + 1);
    if (starts_with(tail, "transformer.")) return "clip_l";
    if (starts_with(tail, "model.")) return "open_clip_g";
    return "embedder_" + rest.substr(0, dot);
  }
  return "other";
}

uint64_t predicted_bytes(const ComponentStats& c, const StorageSpec& storage) {
  switch (storage.weights) {
    case WeightType::FP32: return c.bytes_fp32;
    case WeightType::FP16:
    case WeightType::BF16: return c.bytes_16bit;
    case WeightType::INT8:
    case WeightType::MXFP8:
    case WeightType::NVFP4:
      // the quantisable weights at the type's bytes, the rest 16-bit (the VAE stays 16-bit)
      if (c.name == "vae") return c.bytes_16bit;
      return c.bytes_16bit - 2 * c.quantisable_params +
             static_cast<uint64_t>(static_cast<double>(c.quantisable_params) * stored_bytes_per_weight(storage.weights));
    default:
      if (c.name != "vae") return c.bytes_fp8;
      // quantisable VAE weights in one byte, the rest 16-bit
      return storage.fp8_vae ? c.bytes_16bit - c.quantisable_params : c.bytes_16bit;
  }
}

namespace {

// Which component a tensor belongs to and whether FP8 storage quantises it: by the prefixes the
// family names (the longest matching prefix wins: an all-in-one file nests nothing, a component
// file has ""), else by SD's names.
class PartLookup {
 public:
  explicit PartLookup(const std::vector<InspectPart>& parts) : parts_(parts) {}

  std::string label(const std::string& name) const {
    if (parts_.empty()) return component_label(name);
    const auto* p = part_of(name);
    return p ? p->label : "other";
  }
  bool quantisable(const TensorRecord& t) const {
    if (parts_.empty()) return is_quantisable(t.name, t.shape, false);
    const bool embedding = t.name.find("embed_tokens") != std::string::npos || t.name.find("token_embedding") != std::string::npos ||
                           t.name.find("position_embedding") != std::string::npos || ends_with(t.name, "shared.weight") ||
                           t.name.find("relative_attention_bias") != std::string::npos;
    const auto* p = part_of(t.name);
    return p && p->quantisable && ends_with(t.name, ".weight") && (t.shape.size() == 2 || (p->conv && t.shape.size() == 4)) &&
           !embedding;
  }

 private:
  const InspectPart* part_of(const std::string& name) const {
    const InspectPart* best = nullptr;
    for (const auto& p : parts_) {
      if (starts_with(name, p.prefix) && (!best || p.prefix.size() > best->prefix.size())) best = &p;
    }
    return best;
  }
  const std::vector<InspectPart>& parts_;
};

// One tensor into its component's counts (`weight_dtypes`: the census of quantisable weights).
void count_tensor(ComponentStats& c, const TensorRecord& t, bool quantisable, std::map<std::string, uint64_t>& weight_dtypes) {
  const TensorRole role = role_of(t.name, t.shape);
  const uint64_t n = t.numel();
  c.tensors += 1;
  c.stored_bytes += t.nbytes();
  c.dtype_tensors[dtype_name(t.dtype)] += 1;
  if (role == TensorRole::Fp8Scale) {
    c.bytes_fp8 += t.nbytes();  // scales and markers exist only in FP8 storage
    return;
  }
  if (!is_float_dtype(t.dtype) || role == TensorRole::Buffer) {
    c.buffer_elements += n;
    const uint64_t b = is_float_dtype(t.dtype) ? 4 * n : t.nbytes();
    c.bytes_fp32 += b;
    c.bytes_16bit += b;
    c.bytes_fp8 += b;
    return;
  }
  c.params += n;
  c.bytes_fp32 += 4 * n;
  c.bytes_16bit += 2 * n;
  if (!quantisable) {
    c.bytes_fp8 += 2 * n;
    return;
  }
  c.quantisable_tensors += 1;
  c.quantisable_params += n;
  c.bytes_fp8 += n;
  weight_dtypes[dtype_name(t.dtype)] += 1;
  if (is_fp8_dtype(t.dtype)) c.fp8_in_file += 1;
}

// The file's own storage from the census of its quantisable weights' types.
void describe_storage(InspectReport& r, std::map<std::string, uint64_t> weight_dtypes) {
  const uint64_t e4m3 = weight_dtypes["F8_E4M3"], e5m2 = weight_dtypes["F8_E5M2"];
  weight_dtypes.erase("F8_E4M3");
  weight_dtypes.erase("F8_E5M2");
  if (e4m3 + e5m2 > 0) {
    // FP8 weights in the file, all or some (a UNet in FP8 beside 16-bit text encoders): `auto`
    // keeps them one byte, in their format and scaling as the scale tensors show it.
    const WeightType type = e4m3 >= e5m2 ? WeightType::FP8_E4M3 : WeightType::FP8_E5M2;
    const Fp8Scale scale = r.fp8.channel_scaled ? Fp8Scale::Channel : r.fp8.scaled_weights ? Fp8Scale::Tensor : Fp8Scale::None;
    r.own_storage = StorageSpec{type, scale, false};
    r.storage = std::string(weight_type_name(type)) + " (scale " + fp8_scale_name(scale) + ")";
    if (e4m3 && e5m2) r.storage += ", " + std::to_string(e5m2) + " layers E5M2";
    uint64_t others = 0;
    for (const auto& [d, count] : weight_dtypes) others += count;
    if (others) {
      r.storage += " in " + std::to_string(e4m3 + e5m2) + " of " + std::to_string(e4m3 + e5m2 + others) + " layers;";
      for (const auto& [d, count] : weight_dtypes) r.storage += " " + d + "x" + std::to_string(count);
    }
  } else if (weight_dtypes.size() == 1) {
    const std::string d = weight_dtypes.begin()->first;
    r.storage = d == "F32" ? "fp32" : d == "F16" ? "fp16" : d == "BF16" ? "bf16" : d;
    if (const auto w = parse_weight_type(r.storage)) r.own_storage = StorageSpec{*w, Fp8Scale::None, false};
  } else if (weight_dtypes.empty()) {
    r.storage = "no quantisable weights";
  } else {
    r.storage = "mixed:";
    for (const auto& [d, count] : weight_dtypes) r.storage += " " + d + "x" + std::to_string(count);
  }
}

}  // namespace

InspectReport inspect_checkpoint(const SafetensorsFile& file, const InspectParts& family_parts) {
  InspectReport r;
  r.path = file.path();
  r.file_size = file.file_size();
  r.detection = detect_architecture(file);
  r.family = family_parts.family;
  if (auto it = file.metadata().find("fp8s.quantization"); it != file.metadata().end()) {
    r.quantization_metadata = it->second;
  }
  if (auto it = file.metadata().find("fp8s.demo"); it != file.metadata().end()) r.demo = it->second;
  r.fp8 = read_fp8_scheme(file);
  std::map<std::string, ComponentStats> by_label;
  std::map<std::string, uint64_t> weight_dtypes;  // dtype census of quantisable weights
  const PartLookup parts(family_parts.parts);
  std::map<std::string, uint64_t> block_census;  // the comfy_quant block layers' weights: not a storage type
  std::map<std::string, uint64_t> plain_census;  // the quantisable weights outside comfy_quant layers
  for (const auto& t : file.tensors()) {
    const std::string label = parts.label(t.name);
    auto& c = by_label[label];
    c.name = label;
    const auto conf = !r.fp8.formats.empty() && ends_with(t.name, ".weight") ? comfy_quant_layer(file, t.name) : std::nullopt;
    if (conf) {
      const std::string format = quant_format_label(*conf), base = t.name.substr(0, t.name.size() - 6);
      c.quant_layers[format] += 1;
      c.quant_bytes[format] += t.nbytes();
      for (const auto& part : comfy_quant_parts()) {
        if (const auto* p = file.find(base + part)) c.quant_bytes[format] += p->nbytes();
      }
    }
    count_tensor(c, t, parts.quantisable(t), conf && is_block_format(conf->format) ? block_census : weight_dtypes);
    if (!conf && parts.quantisable(t)) plain_census[dtype_name(t.dtype)] += 1;
  }
  if (!r.fp8.formats.empty()) {
    r.formats_summary = "mixed:";
    const char* sep = " ";
    for (const auto& [format, layers] : r.fp8.formats) {
      r.formats_summary += sep + std::to_string(layers) + (sep[0] == ' ' ? " layers " : " ") + format;
      sep = ", ";
    }
    for (const auto& [dtype, count] : plain_census) r.formats_summary += ", " + std::to_string(count) + " " + dtype;
  }
  for (const char* order : {"unet", "transformer", "controlnet", "t5xxl", "clip_l", "text_encoder", "open_clip_h", "open_clip_g", "vae", "other"}) {
    if (auto it = by_label.find(order); it != by_label.end()) {
      r.components.push_back(it->second);
      by_label.erase(it);
    }
  }
  for (auto& [label, c] : by_label) r.components.push_back(c);
  r.total.name = "total";
  for (const auto& c : r.components) accumulate(r.total, c);
  describe_storage(r, std::move(weight_dtypes));
  return r;
}

StorageSpec default_storage(const InspectReport& report) {
  if (!report.own_storage || report.own_storage->weights == WeightType::FP32) {
    return StorageSpec{WeightType::FP16, Fp8Scale::None, false};
  }
  return *report.own_storage;
}

std::string format_inspect_report(const InspectReport& r) {
  std::ostringstream o;
  o << r.path << "\n";
  o << "  architecture: " << r.architecture() << "\n";
  if (!r.demo.empty()) o << "  model:        " << r.demo << "\n";
  o << "  file size:    " << with_commas(r.file_size) << " bytes\n";
  o << "  weights:      " << r.storage << "\n";
  if (!r.formats_summary.empty()) o << "  layers:       " << r.formats_summary << "\n";
  if (!r.fp8.layout.empty()) {
    o << "  FP8 layout:   " << r.fp8.layout << "; FP8 layers in the file:";
    for (const auto& c : r.components) {
      if (c.quantisable_tensors) o << " " << c.name << " " << c.fp8_in_file << "/" << c.quantisable_tensors;
    }
    o << "\n";
  }
  for (const auto& c : r.components) {  // a mixed file's formats: "transformer: 3 NVFP4 (12.3 kB), ..."
    if (c.quant_layers.empty()) continue;
    o << "  comfy_quant:  " << c.name << ":";
    const char* sep = " ";
    for (const auto& [format, layers] : c.quant_layers) {
      o << sep << layers << " " << format << " (" << human_bytes(c.quant_bytes.at(format)) << ")";
      sep = ", ";
    }
    o << "\n";
  }
  char line[256];
  std::snprintf(line, sizeof line, "  %-12s %8s %15s %12s %15s %12s %12s %12s %12s\n", "component",
                "tensors", "parameters", "buffers", "fp8-quantised", "stored", "fp32", "fp16/bf16",
                "fp8");
  o << line;
  auto row = [&](const ComponentStats& c) {
    std::snprintf(line, sizeof line, "  %-12s %8s %15s %12s %15s %12s %12s %12s %12s\n",
                  c.name.c_str(), with_commas(c.tensors).c_str(), with_commas(c.params).c_str(),
                  with_commas(c.buffer_elements).c_str(), with_commas(c.quantisable_params).c_str(),
                  human_bytes(c.stored_bytes).c_str(), human_bytes(c.bytes_fp32).c_str(),
                  human_bytes(c.bytes_16bit).c_str(), human_bytes(c.bytes_fp8).c_str());
    o << line;
  };
  for (const auto& c : r.components) row(c);
  row(r.total);
  o << "  FP8 limit:    " << with_commas(r.fp8_limit_bytes()) << " bytes ("
    << human_bytes(r.fp8_limit_bytes()) << "; " << with_commas(r.total.quantisable_tensors)
    << " quantisable Linear/Conv2d weights in one byte, the rest 16-bit)\n";
  o << "  FP8 saves:    " << human_bytes(r.total.bytes_16bit - r.total.bytes_fp8)
    << " against fp16 storage\n";
  return o.str();
}

nlohmann::json inspect_report_json(const InspectReport& r) {
  auto comp = [](const ComponentStats& c) {
    return nlohmann::json{{"name", c.name},
                          {"tensors", c.tensors},
                          {"params", c.params},
                          {"buffer_elements", c.buffer_elements},
                          {"stored_bytes", c.stored_bytes},
                          {"quantisable_tensors", c.quantisable_tensors},
                          {"quantisable_params", c.quantisable_params},
                          {"fp8_in_file", c.fp8_in_file},
                          {"bytes", {{"fp32", c.bytes_fp32}, {"fp16", c.bytes_16bit},
                                     {"bf16", c.bytes_16bit}, {"fp8", c.bytes_fp8}}},
                          {"dtypes", c.dtype_tensors}};
  };
  nlohmann::json j{{"path", r.path},
                   {"file_size", r.file_size},
                   {"architecture", arch_name(r.detection.arch)},
                   {"family", r.family},
                   {"variant", r.detection.variant},
                   {"storage", r.storage},
                   {"fp8_limit_bytes", r.fp8_limit_bytes()},
                   {"total", comp(r.total)}};
  j["components"] = nlohmann::json::array();
  for (const auto& c : r.components) j["components"].push_back(comp(c));
  if (!r.quantization_metadata.empty()) j["quantization"] = r.quantization_metadata;
  if (!r.fp8.layout.empty()) j["fp8_layout"] = r.fp8.layout;
  return j;
}

}  // namespace fp8s
