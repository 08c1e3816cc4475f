// libFuzzer target: the prompt parser (emphasis, BREAK, <lora:> tags) and the CLIP tokenizer with
// the project's demo vocabulary, checking the 77-token window invariants.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/error.h"
#include "text/prompt_parser.h"

namespace {

const fp8s::ClipTokenizer& tokenizer() {
  static const auto t = std::make_unique<fp8s::ClipTokenizer>(fp8s::ClipTokenizer::load(FP8S_FUZZ_VOCAB));
  return *t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string prompt(reinterpret_cast<const char*>(data), size);
  try {
    // emphasis weights are finite and within FP32 (issue 54: an overflow made a one-colour picture)
    for (const auto& w : fp8s::parse_prompt_attention(prompt)) {
      if (!(std::abs(w.weight) <= 3.4028234663852886e38)) std::abort();
    }
  } catch (const fp8s::InputError&) {
  }
  const auto extra = fp8s::parse_extra_networks(prompt);
  for (const auto& l : extra.loras) {
    if (l.error.empty() && (!std::isfinite(l.te_multiplier) || !std::isfinite(l.unet_multiplier))) std::abort();
  }
  try {
    auto chunks = fp8s::tokenize_prompt(tokenizer(), extra.prompt_without_tags);
    if (chunks.ids.empty() || chunks.ids.size() != chunks.multipliers.size()) std::abort();
    const int32_t bos = tokenizer().bos(), eos = tokenizer().eos();
    if (chunks.ids.size() > fp8s::kMaxPromptChunks) std::abort();
    for (const auto& m : chunks.multipliers) {
      for (float v : m) {
        if (!std::isfinite(v)) std::abort();
      }
    }
    for (const auto& ids : chunks.ids) {
      if (ids[0] != bos) std::abort();
      for (int32_t id : ids) {
        if (id < 0 || static_cast<std::size_t>(id) >= tokenizer().vocab_size()) std::abort();
      }
    }
    fp8s::pad_with_zeros_after_eos(chunks, eos);
  } catch (const fp8s::InputError&) {
  }
  return 0;
}
