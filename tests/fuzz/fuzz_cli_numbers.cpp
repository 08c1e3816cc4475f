// libFuzzer target: the CLI's request flags as fp8studio-cli generate/compare/bench parse them
// (CLI11 with our validators: sizes WxH, crops, numbers, LoRA FILE:MULT), then the request checks.
// The input is the argument list, one argument per line.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  std::vector<std::string> args;
  for (std::string line; std::getline(in, line) && args.size() < 64;) args.push_back(line);
  CLI::App app{"fuzz"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  fp8s::GenerationRequest r;
  fp8s::cli::RequestFlags flags;
  std::vector<std::string> loras;
  fp8s::cli::add_request_options(app, r, flags);
  app.add_option("--lora", loras)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses a reversed vector
  try {
    app.parse(reversed);
  } catch (const CLI::Error&) {
    return 0;
  }
  try {
    fp8s::cli::finish_request(r, flags);  // reads --init-image / --mask: InputError when unreadable
    r.loras = fp8s::cli::parse_lora_flags(loras);
    fp8s::validate_request(r, 512);
  } catch (const fp8s::InputError&) {
  }
  int a = -1, b = -1;
  for (const auto& s : args) {
    if (fp8s::cli::parse_size_pair(s, 'x', a, b).empty() && (a < 0 || b < 0)) std::abort();
  }
  return 0;
}
