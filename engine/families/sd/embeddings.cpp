#include "families/sd/embeddings.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/error.h"
#include "core/sha256.h"
#include "io/safetensors.h"
#include "models/nn.h"

namespace fp8s {
namespace {

namespace fs = std::filesystem;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Whether `w` stands in `t` as a word (not inside a longer name); both lower-case.
bool has_word(const std::string& t, const std::string& w) {
  for (std::size_t at = t.find(w); at != std::string::npos; at = t.find(w, at + 1)) {
    auto part = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; };
    const bool left = at == 0 || !part(t[at - 1]);
    const bool right = at + w.size() >= t.size() || !part(t[at + w.size()]);
    if (left && right) return true;
  }
  return false;
}

at::Tensor as_vectors(const SafetensorsFile& file, const TensorRecord& rec) {
  auto t = read_tensor(file, rec).to(at::kFloat);
  if (t.dim() == 1) t = t.unsqueeze(0);
  if (t.dim() != 2 || t.size(0) < 1 || t.size(0) > 75) {
    throw InputError(file.path() + ": '" + rec.name + "' is not a list of 1..75 embedding vectors");
  }
  if (!at::isfinite(t).all().item<bool>()) {
    throw InputError(file.path() + ": the embedding '" + rec.name + "' holds NaN or Inf (the file is damaged: use a copy from its source)");
  }
  return t.contiguous();
}

}  // namespace

TextualInversion read_embedding(const std::string& path) {
  SafetensorsFile file(path);
  TextualInversion ti;
  ti.path = path;
  ti.name = fs::path(path).stem().string();
  for (const auto& rec : file.tensors()) {
    if (rec.name == "emb_params" || rec.name.rfind("string_to_param.", 0) == 0 || rec.name == "clip_l") {
      ti.clip_l = as_vectors(file, rec);
    } else if (rec.name == "clip_g") {
      ti.clip_g = as_vectors(file, rec);
    }
  }
  if (!ti.clip_l.defined()) {
    throw InputError(path + ": not a textual-inversion embedding (no emb_params, string_to_param or clip_l tensor)");
  }
  if (ti.clip_g.defined() && ti.clip_g.size(0) != ti.clip_l.size(0)) {
    throw InputError(path + ": clip_l and clip_g hold different numbers of vectors");
  }
  ti.hash = sha256_file(path).substr(0, 12);
  return ti;
}

std::vector<const TextualInversion*> EmbeddingLibrary::used_by(const std::vector<std::string>& texts,
                                                             const std::vector<int>& widths) {
  std::vector<const TextualInversion*> out;
  std::error_code ec;
  if (folder_.empty() || !fs::is_directory(folder_, ec)) return out;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(folder_, ec)) {
    if (entry.is_regular_file(ec)) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> lowered;
  for (const auto& t : texts) lowered.push_back(lower(t));
  for (const auto& p : files) {
    const std::string ext = lower(p.extension().string()), stem = lower(p.stem().string());
    if (ext != ".safetensors" && ext != ".pt" && ext != ".bin" && ext != ".ckpt") continue;
    if (std::none_of(lowered.begin(), lowered.end(), [&](const std::string& t) { return has_word(t, stem); })) continue;
    if (ext != ".safetensors") {
      throw InputError(p.string() + ": pickled embeddings are refused (loading them can run code); use a .safetensors embedding");
    }
    auto it = loaded_.find(p.string());
    if (it == loaded_.end()) it = loaded_.emplace(p.string(), read_embedding(p.string())).first;
    const auto& ti = it->second;
    const int l = static_cast<int>(ti.clip_l.size(1));
    const bool sdxl = widths.size() > 1;
    if (l != widths.at(0) || (sdxl && (!ti.clip_g.defined() || ti.clip_g.size(1) != widths[1]))) {
      throw InputError(ti.path + ": an embedding of width " + std::to_string(l) +
                       (ti.clip_g.defined() ? "+" + std::to_string(ti.clip_g.size(1)) : std::string()) +
                       " does not fit this model (its text encoders are " + std::to_string(widths[0]) +
                       (sdxl ? "+" + std::to_string(widths[1]) : std::string()) + " wide): it was made for another model");
    }
    out.push_back(&ti);
  }
  return out;
}

std::string ti_hashes_field(const std::vector<const TextualInversion*>& used) {
  if (used.empty()) return "";
  std::string s = "TI hashes: \"";
  for (std::size_t i = 0; i < used.size(); ++i) s += (i ? ", " : "") + used[i]->name + ": " + used[i]->hash;
  return s + "\"";
}

}  // namespace fp8s
