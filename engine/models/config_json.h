// A network's configuration from a file's metadata JSON (`flux.config`, `t5.config`): the fields
// it has override the released defaults.
#pragma once

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/fp8_files.h"

namespace fp8s {

// Calls `read` with the parsed object (nothing for an empty text); malformed JSON or a field of
// the wrong type is an InputError naming the file (`label`) and the metadata key.
template <class Read>
void read_config_json(const std::string& text, const std::string& label, const char* key, Read read) {
  if (text.empty()) return;
  try {
    read(nlohmann::json::parse(text));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(label + ": malformed " + key + " metadata (" + e.what() + ")");
  }
}

// A configuration value inside [lo, hi] (NaN is outside), else an InputError naming the file
// (`label`) and the field: every family's metadata and config.json values pass here before a
// network is built from them.
inline void check_config_value(double value, double lo, double hi, const std::string& label, const std::string& what) {
  if (value >= lo && value <= hi) return;
  char text[160];
  std::snprintf(text, sizeof text, " is %g, outside %g..%g", value, lo, hi);
  throw InputError(label + ": " + what + text + " (the model's configuration is damaged: use the files from its source)");
}

// A whole number in an int's range. nlohmann's get<int>() casts a float or a wider integer without
// a check (2e52 into an int is undefined behaviour: fuzz_ldm_config found it in ldm.config).
inline int config_int(const nlohmann::json& v, const std::string& label, const std::string& what) {
  if (v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > INT32_MAX) &&
      v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX) {
    return static_cast<int>(v.get<int64_t>());
  }
  throw InputError(label + ": " + what + " is " + v.dump().substr(0, 40) +
                   ", not a whole number in an int's range (the model's configuration is damaged: use the files from its source)");
}

// A list of whole numbers (`fallback` where the key is absent).
inline std::vector<int> config_int_list(const nlohmann::json& j, const char* key, const std::vector<int>& fallback,
                                        const std::string& label, const std::string& what) {
  if (!j.contains(key)) return fallback;
  const auto& v = j[key];
  if (!v.is_array()) throw InputError(label + ": " + what + " is not a list");
  std::vector<int> out;
  for (const auto& e : v) out.push_back(config_int(e, label, what + " entry"));
  return out;
}

// A float field (`fallback` where absent): read as a double and kept inside ±1e30 before the cast
// (a double beyond float's range cast to float is undefined behaviour); NaN stays NaN, for the
// range checks to refuse.
inline float config_float(const nlohmann::json& j, const char* key, float fallback) {
  if (!j.contains(key)) return fallback;
  const double v = j[key].get<double>();
  return static_cast<float>(v > 1e30 ? 1e30 : v < -1e30 ? -1e30 : v);
}

// Dimension `d` of the tensor `key`: what a network's configuration reads off a file's shapes.
// InputError naming the file when the tensor is absent (it is not `what`, "a Z-Image transformer")
// or has fewer dimensions.
// A comfy_quant layer's packed 4-bit weight (two columns a byte: nvfp4, convrot_w4a4, awq,
// svdquant) counts its columns unpacked; padding (mxfp8 to 32, nvfp4 to 16) cannot be told apart
// from the shape, so a family reads such a size elsewhere when it may be padded.
inline int64_t tensor_dim(const SafetensorsFile& f, const std::string& key, std::size_t d, const std::string& what) {
  const auto* rec = f.find(key);
  if (!rec) throw InputError(f.path() + ": not " + what + " (no '" + key + "')");
  if (rec->shape.size() <= d) throw InputError(f.path() + ": tensor '" + key + "' has an unexpected shape");
  if (d == 1 && rec->shape.size() == 2 && (rec->dtype == Dtype::U8 || rec->dtype == Dtype::I8)) {
    if (const auto conf = comfy_quant_layer(f, key); conf && conf->format != QuantFormat::Int8 && is_block_format(conf->format)) {
      return 2 * rec->shape[1];
    }
  }
  return rec->shape[d];
}

// RoPE axes as a configuration gives them: 1 to 8 axes of 2 to 4096 dimensions each.
inline void check_rope_axes(const std::vector<int>& axes, const std::string& label, const std::string& what) {
  check_config_value(static_cast<double>(axes.size()), 1, 8, label, what + "'s length");
  for (const int a : axes) check_config_value(a, 2, 4096, label, what + " entry");
}

// Each integer field takes its key's value where the object has the key.
inline void read_int_fields(const nlohmann::json& j, const std::string& label, const char* source,
                            std::initializer_list<std::pair<const char*, int*>> fields) {
  for (const auto& [key, field] : fields) {
    if (j.contains(key)) *field = config_int(j[key], label, std::string(source) + " " + key);
  }
}

}  // namespace fp8s
