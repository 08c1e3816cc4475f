// Mistral's Tekken tokenizer (mistral-common's `tekken.json`, v7; ../shared/reference/flux2/README.md,
// "Tokenizers"): the text split by the file's pattern (hand-derived below, as QwenTokenizer's is),
// then byte-level BPE on the raw UTF-8 bytes by rank (no byte mapping, no normalisation); id = rank +
// 1000, ids under 1000 special. Special strings typed in a prompt are text. LibTorch-free.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace fp8s {

class TekkenTokenizer {
 public:
  static constexpr int32_t kBos = 1, kInst = 3, kEndInst = 4, kPad = 11, kSystem = 17, kEndSystem = 18;

  // From the JSON text of a tekken.json (`label` names it in errors).
  static TekkenTokenizer parse(const std::string& json, const std::string& label);
  // From a tekken.json, a tekken.json.gz, or a folder holding one.
  static TekkenTokenizer load(const std::string& path);

  std::vector<int32_t> encode(const std::string& text) const;
  // The instruct prompt FLUX.2 [dev] encodes: [BOS][SYSTEM_PROMPT]{its system prompt}[/SYSTEM_PROMPT][INST]{prompt}[/INST], no EOS.
  std::vector<int32_t> instruct_prompt(const std::string& prompt) const;
  // The pre-tokenizer's pieces of `text` (the file's regex, derived by hand).
  static std::vector<std::u32string> split(const std::u32string& text);

 private:
  std::vector<int32_t> bpe(const std::string& piece) const;
  std::unordered_map<std::string, int32_t> ranks_;  // token bytes -> rank
  std::string source_;
};

}  // namespace fp8s
