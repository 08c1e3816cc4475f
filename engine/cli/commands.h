// The subcommands of fp8studio-cli; each registers itself on the app with its options.
#pragma once

#include <CLI/CLI.hpp>

#include "pipeline/lora_request.h"

namespace fp8s::cli {

// --lora FILE[:MULT] flags -> LoRA requests (multiplier 1 when absent).
std::vector<LoraRequest> parse_lora_flags(const std::vector<std::string>& flags);

// Options every subcommand has.
struct CommonOptions {
  std::string log_level = "info";
  bool json = false;
};
void add_common_options(CLI::App& sub, CommonOptions& common, bool reports);

void register_make_synthetic(CLI::App& app);
void register_inspect(CLI::App& app);
void register_convert(CLI::App& app);
void register_probe(CLI::App& app);
void register_bench(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_generate(CLI::App& app);

}  // namespace fp8s::cli
