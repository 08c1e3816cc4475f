// OpenAI CLIP's byte-level BPE tokenizer (SimpleTokenizer), loading the vocabulary from
// `bpe_simple_vocab_16e6.txt.gz` or `vocab.json` + `merges.txt`, found as docs/architecture.md, "Text, noise and files" says.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/bpe.h"

namespace fp8s {

// OpenAI CLIP's bytes_to_unicode(): (byte, symbol) in vocabulary order — the printable bytes stand
// for themselves, the other 68 take U+0100, U+0101, ... — as the first 256 vocabulary entries.
std::vector<std::pair<int, std::string>> clip_byte_symbols();

// OpenAI CLIP's vocabulary file, where it is published and its sha256 (scripts/install-deps.sh and
// the GUI's download offer fetch it from there).
inline constexpr const char* kClipVocabFile = "bpe_simple_vocab_16e6.txt.gz";
inline constexpr const char* kClipVocabUrl =
    "https://raw.githubusercontent.com/openai/CLIP/main/clip/bpe_simple_vocab_16e6.txt.gz";
inline constexpr const char* kClipVocabSha256 = "924691ac288e54409236115652ad4aa250f48203de50a9e4722a6ecd48d6804a";

class ClipTokenizer {
 public:
  // PATH: a .txt.gz merge list, a vocab.json (merges.txt beside it), or a folder holding either.
  static ClipTokenizer load(const std::string& path);
  // Finds the vocabulary: `explicit_path`, then a `tokenizer/` or `clip/` folder beside the
  // checkpoint, $FP8S_CLIP_VOCAB, $XDG_DATA_HOME/fp8studio/clip, <prefix>/share/fp8studio/clip.
  // Throws InputError listing every place looked at and how to obtain the file.
  static ClipTokenizer find(const std::string& explicit_path, const std::string& checkpoint);

  // BPE ids of a text after CLIP's clean-up, without BOS/EOS.
  std::vector<int32_t> encode(const std::string& text) const;
  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  int32_t comma() const { return comma_; }
  std::size_t vocab_size() const { return vocab_.size(); }
  const std::string& source() const { return source_; }

 private:
  std::vector<int32_t> bpe(const std::string& piece_symbols_utf8) const;

  std::unordered_map<std::string, int32_t> vocab_;   // token (byte symbols, UTF-8) -> id
  text::BpeRanks ranks_;
  std::string byte_symbol_[256];                     // byte -> its symbol (UTF-8)
  int32_t bos_ = -1, eos_ = -1, comma_ = -1;
  std::string source_;
  // Merged pieces already seen. encode() is const and called from several threads at once (the
  // GUI's token counter while a generation encodes its prompt): the cache has its own lock, and
  // copies of a tokenizer share it.
  struct BpeCache {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>> ids;
  };
  std::shared_ptr<BpeCache> cache_ = std::make_shared<BpeCache>();
};

}  // namespace fp8s
