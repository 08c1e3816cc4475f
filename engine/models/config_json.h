// A network's configuration from a file's metadata JSON (`flux.config`, `t5.config`): the fields
// it has override the released defaults.
#pragma once

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

// Each integer field takes its key's value where the object has the key.
inline void read_int_fields(const nlohmann::json& j, std::initializer_list<std::pair<const char*, int*>> fields) {
  for (const auto& [key, field] : fields) *field = j.value(key, *field);
}

}  // namespace fp8s
