#include "lora/lora_library.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "io/safetensors.h"

namespace fp8s {
namespace fs = std::filesystem;
namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// ss_tag_frequency is {"dataset": {"tag": count, ...}, ...}: sum over datasets, most frequent first.
std::vector<std::string> trigger_words(const std::string& tag_frequency) {
  std::map<std::string, double> counts;
  const auto j = nlohmann::json::parse(tag_frequency, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return {};
  for (const auto& [dataset, tags] : j.items()) {
    if (!tags.is_object()) continue;
    for (const auto& [tag, count] : tags.items()) {
      if (count.is_number()) counts[tag] += count.get<double>();
    }
  }
  std::vector<std::pair<std::string, double>> sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> out;
  for (const auto& [tag, count] : sorted) {
    if (out.size() == 8) break;
    out.push_back(tag);
  }
  return out;
}

int to_int(const std::string& s) {
  try {
    return static_cast<int>(std::stod(s));
  } catch (...) {
    return 0;
  }
}

}  // namespace

LoraInfo describe_lora(const std::string& path) {
  LoraInfo info;
  info.path = path;
  info.name = fs::path(path).stem().string();
  try {
    SafetensorsFile file(path);
    const auto& meta = file.metadata();
    bool te1 = false, te = false, sdxl_unet = false;
    for (const auto& t : file.tensors()) {
      const auto& k = t.name;
      if (contains(k, ".lora_down.weight") || contains(k, ".lora_A.weight") || contains(k, ".lora.down.weight")) {
        ++info.modules;
        if (info.rank == 0 && !t.shape.empty()) info.rank = static_cast<int>(t.shape[0]);
      }
      te1 = te1 || k.rfind("lora_te1_", 0) == 0 || k.rfind("lora_te2_", 0) == 0 || k.rfind("text_encoder_2.", 0) == 0;
      te = te || k.rfind("lora_te_", 0) == 0;
      sdxl_unet = sdxl_unet || contains(k, "label_emb") || contains(k, "add_embedding");
    }
    if (info.modules == 0) info.error = "holds no LoRA modules (lora_down/lora_up tensors)";
    if (auto it = meta.find("ss_base_model_version"); it != meta.end()) {
      info.base_model = it->second;
    } else if (te1 || sdxl_unet) {
      info.base_model = "sdxl";
    } else if (te || info.modules > 0) {
      info.base_model = "sd1";
    }
    if (auto it = meta.find("ss_network_dim"); it != meta.end() && to_int(it->second) > 0) info.rank = to_int(it->second);
    info.alpha = info.rank;
    if (auto it = meta.find("ss_network_alpha"); it != meta.end()) {
      try {
        info.alpha = std::stod(it->second);
      } catch (...) {
      }
    }
    if (auto it = meta.find("ss_tag_frequency"); it != meta.end()) info.trigger_words = trigger_words(it->second);
  } catch (const std::exception& e) {
    info.error = e.what();
  }
  return info;
}

std::vector<LoraInfo> list_loras(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw InputError("LoRA folder " + dir + " does not exist or is not a folder");
  std::vector<std::string> paths;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".safetensors" && it->is_regular_file(ec)) paths.push_back(it->path().string());
  }
  if (ec) throw InputError("LoRA folder " + dir + " cannot be read: " + ec.message());
  std::sort(paths.begin(), paths.end());
  std::vector<LoraInfo> out;
  out.reserve(paths.size());
  for (const auto& p : paths) out.push_back(describe_lora(p));
  return out;
}

std::string resolve_lora_name(const std::string& dir, const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name.find('\\') != std::string::npos ||
      name.find("..") != std::string::npos || name.find('\0') != std::string::npos) {
    throw InputError("prompt: <lora:" + name + ":...> must name a file in the LoRA folder (no paths)");
  }
  if (dir.empty()) throw InputError("prompt: <lora:" + name + ":...> needs a LoRA folder (--lora-dir)");
  const std::string path = (fs::path(dir) / (name + ".safetensors")).string();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    throw InputError("prompt: <lora:" + name + ":...>: " + path + " does not exist in the LoRA folder");
  }
  return path;
}

}  // namespace fp8s
