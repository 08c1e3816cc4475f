// Qwen's byte-level BPE tokenizer (Qwen2Tokenizer over Qwen3's `tokenizer.json`), which Z-Image's
// Qwen3 text encoder reads: added tokens matched literally first, NFC, the pre-tokenizer regex of
// the file (contractions, letters, single digits, punctuation runs, newlines, spaces), GPT-2's
// byte-to-unicode symbols merged by rank. No BOS/EOS; `<|endoftext|>` pads.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "text/bpe.h"

namespace fp8s {

// The tokenizer.json this was written against and its sha256 (a different file is used with a warning).
inline constexpr const char* kQwenTokenizerFile = "tokenizer.json";
inline constexpr const char* kQwenTokenizerSha256 = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4";

class QwenTokenizer {
 public:
  // PATH: a tokenizer.json or a folder holding one. InputError when it is not a byte-level BPE.
  static QwenTokenizer load(const std::string& path);
  // Finds it: `explicit_path`, then `qwen_tokenizer/`, `tokenizer/` beside the model file,
  // $FP8S_QWEN_TOKENIZER, $XDG_DATA_HOME/fp8studio/qwen, <prefix>/share/fp8studio/qwen. Throws
  // MissingVocabulary listing where it looked and how to get the file.
  static QwenTokenizer find(const std::string& explicit_path, const std::string& model);

  // The ids of a text (added tokens in it are matched as such).
  std::vector<int32_t> encode(const std::string& text) const;
  // The prompt in Qwen's chat template: a user turn, then the assistant's (`thinking_off`: with the
  // empty think block apply_chat_template(enable_thinking=False) writes, as FLUX.2 klein uses it;
  // Z-Image's has none).
  static std::string chat_template(const std::string& prompt, bool thinking_off = false);
  // The pre-tokenizer's pieces of a (normalised) text, before byte-level BPE (tests).
  static std::vector<std::u32string> split(const std::u32string& text);
  int32_t pad() const { return pad_; }  // <|endoftext|>
  std::size_t vocab_size() const { return vocab_.size() + added_.size(); }
  const std::string& source() const { return source_; }

 private:
  void encode_text(const std::string& text, std::vector<int32_t>& ids) const;

  std::unordered_map<std::string, int32_t> vocab_;  // token (byte symbols, UTF-8) -> id
  text::BpeRanks ranks_;
  std::vector<std::pair<std::string, int32_t>> added_;  // literal -> id, longest first
  std::string byte_symbol_[256];
  int32_t pad_ = -1;
  std::string source_;
};

}  // namespace fp8s
