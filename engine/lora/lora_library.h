// The LoRA folder as the GUI's LoRA panel shows it: each file's name and training metadata, read
// from the safetensors header only (no tensor data). No LibTorch types here.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/architecture.h"

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

// Writes a kohya LoRA (LoCon for 3x3 convs) for every mapped UNet and text-encoder layer of
// `config`, with random factors: down ~ U with variance 1/fan_in, up scaled so that at multiplier 1
// rms(ΔW) ≈ `strength` · rms(W) for weights of variance 1/fan_in. F16, alpha = `alpha`.
void make_synthetic_lora(const ModelConfig& config, int rank, double alpha, double strength,
                         uint64_t seed, const std::string& out, bool overwrite);
// The same for every Linear layer of a Flux transformer file (kohya's lora_unet_<BFL path> names).
void make_synthetic_flux_lora(const std::string& transformer, int rank, double alpha, double strength, uint64_t seed,
                              const std::string& out, bool overwrite);
// The writer both use: one module per (kohya name, weight shape).
void write_synthetic_lora(const std::vector<std::pair<std::string, std::vector<int64_t>>>& modules, int rank,
                          double alpha, double strength, uint64_t seed, const std::string& base_model,
                          const std::string& out, bool overwrite);

}  // namespace fp8s
