// The T5 v1.1 tokenizer Flux uses (google/t5-v1_1-xxl's SentencePiece Unigram model), read from
// the Hugging Face `tokenizer.json` that ships with Flux (`tokenizer_2/`): its normalizer
// (SentencePiece's precompiled NFKC character map, strip on the right, runs of spaces to `▁`),
// Metaspace pre-tokenisation and Unigram Viterbi, then `</s>`, truncation and `<pad>` padding.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace fp8s {

// The tokenizer.json this was written against, its sha256 (a different file is used with a warning).
inline constexpr const char* kT5TokenizerFile = "tokenizer.json";
inline constexpr const char* kT5TokenizerSha256 = "6cd1badb7467cdab971403bbeb1945070ca385652385a2b6549f672b08089dfc";

class T5Tokenizer {
 public:
  // PATH: a tokenizer.json or a folder holding one. InputError when it is not a T5 Unigram model.
  static T5Tokenizer load(const std::string& path);
  // Finds it: `explicit_path`, then `t5_tokenizer/`, `tokenizer_2/` beside the model file,
  // $FP8S_T5_TOKENIZER, $XDG_DATA_HOME/fp8studio/t5, <prefix>/share/fp8studio/t5. Throws
  // MissingVocabulary listing where it looked and how to get the file.
  static T5Tokenizer find(const std::string& explicit_path, const std::string& model);

  // The text after the normalizer (tests: the precompiled character map).
  std::string normalize(const std::string& text) const;
  // Piece ids of a text, without `</s>`.
  std::vector<int32_t> encode(const std::string& text) const;
  // encode + `</s>`, truncated to `length` (`</s>` kept last), padded with `<pad>` (BFL's call:
  // padding="max_length", truncation=True).
  std::vector<int32_t> encode_padded(const std::string& text, int length) const;
  std::size_t vocab_size() const { return scores_.size(); }
  int32_t eos() const { return eos_; }
  int32_t pad() const { return pad_; }
  const std::string& source() const { return source_; }

 private:
  std::vector<int32_t> viterbi(const std::string& word) const;
  // SentencePiece's precompiled character map (a darts-clone double array + the replacement strings).
  const char* charsmap_lookup(const char* s, std::size_t n) const;

  std::vector<uint32_t> trie_;
  std::string normalized_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<double> scores_;
  std::size_t max_piece_bytes_ = 0;
  double unk_score_ = 0;
  int32_t unk_ = 2, eos_ = 1, pad_ = 0;
  std::string source_;
};

}  // namespace fp8s
