#include "models/lm/tekken_file.h"

#include "core/error.h"
#include "io/safetensors.h"

namespace fp8s {

TekkenTokenizer load_tekken(const std::string& path) {
  if (path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0) {
    const SafetensorsFile file(path);
    const auto* rec = file.find("tekken_model");
    if (!rec) throw InputError(path + ": no tekken_model tensor (the tokenizer); pass --mistral-tokenizer tekken.json");
    if (rec->dtype != Dtype::U8 || rec->nbytes() > (64u << 20)) throw InputError(path + ": tekken_model is not a tokenizer's bytes (U8, a few MB)");
    std::string bytes(rec->nbytes(), '\0');
    file.read(*rec, bytes.data());
    return TekkenTokenizer::parse(bytes, path + " (tekken_model)");
  }
  return TekkenTokenizer::load(path);
}

}  // namespace fp8s
