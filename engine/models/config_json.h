// A network's configuration from a file's metadata JSON (`flux.config`, `t5.config`): the fields
// it has override the released defaults.
#pragma once

#include <cstdio>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "core/error.h"

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

// Each integer field takes its key's value where the object has the key.
inline void read_int_fields(const nlohmann::json& j, std::initializer_list<std::pair<const char*, int*>> fields) {
  for (const auto& [key, field] : fields) *field = j.value(key, *field);
}

}  // namespace fp8s
