// Byte-pair merging by rank, as GPT-2's and CLIP's `bpe()` and Hugging Face's BPE model run it:
// the adjacent pair of lowest rank is merged everywhere in the word, until no pair has a rank.
// Shared by the CLIP and Qwen tokenizers.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

namespace fp8s::text {

class BpeRanks {
 public:
  void add(const std::string& a, const std::string& b, int32_t rank) { ranks_[a + " " + b] = rank; }
  std::size_t size() const { return ranks_.size(); }

  std::vector<std::string> merge(std::vector<std::string> word) const {
    while (word.size() > 1) {
      int32_t best = std::numeric_limits<int32_t>::max();
      std::size_t at = 0;
      for (std::size_t i = 0; i + 1 < word.size(); ++i) {
        const auto it = ranks_.find(word[i] + " " + word[i + 1]);
        if (it != ranks_.end() && it->second < best) best = it->second, at = i;
      }
      if (best == std::numeric_limits<int32_t>::max()) break;
      const std::string a = word[at], b = word[at + 1];
      std::vector<std::string> merged;
      for (std::size_t i = 0; i < word.size();) {
        if (i + 1 < word.size() && word[i] == a && word[i + 1] == b) {
          merged.push_back(a + b);
          i += 2;
        } else {
          merged.push_back(word[i++]);
        }
      }
      word = std::move(merged);
    }
    return word;
  }

 private:
  std::unordered_map<std::string, int32_t> ranks_;  // "a b" -> rank
};

}  // namespace fp8s::text
