// The LoRA folder as the GUI's LoRA panel shows it: each file's name and training metadata, read
// from the safetensors header only (no tensor data). No LibTorch types here.
#pragma once

#include <string>
#include <vector>

namespace fp8s {

struct LoraInfo {
  std::string path;
  std::string name;          // file stem: what <lora:NAME:W> refers to
  std::string base_model;    // ss_base_model_version, else guessed from the keys ("sd1", "sdxl")
  int rank = 0;              // ss_network_dim, else the first lora_down's rows
  double alpha = 0;          // ss_network_alpha, else the rank
  int modules = 0;           // LoRA modules in the file
  std::vector<std::string> trigger_words;  // most frequent tags of ss_tag_frequency, at most 8
  std::string error;         // non-empty when the file cannot be used (then the rest may be empty)
};

// Reads one LoRA file's header. Never throws for a bad file: the reason goes into `error`.
LoraInfo describe_lora(const std::string& path);

// Every *.safetensors file directly inside `dir`, sorted by name. Throws InputError when `dir` is
// not a readable folder.
std::vector<LoraInfo> list_loras(const std::string& dir);

// Validates a <lora:NAME:W> name and returns dir/NAME.safetensors. Throws InputError for names with
// path separators, "..", or nothing, and when the folder or the file is missing.
std::string resolve_lora_name(const std::string& dir, const std::string& name);

}  // namespace fp8s
