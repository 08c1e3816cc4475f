#include "demo/vocab.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>

#include "core/error.h"
#include "io/png.h"
#include "text/clip_tokenizer.h"

namespace fp8s::demo {

int write_vocabulary(const std::string& dir, const std::vector<std::string>& words) {
  make_dirs(dir);
  std::vector<std::string> vocab;
  for (const auto& [byte, symbol] : clip_byte_symbols()) vocab.push_back(symbol);
  const std::size_t base = vocab.size();
  for (std::size_t i = 0; i < base; ++i) vocab.push_back(vocab[i] + "</w>");
  // merges: simulate CLIP's BPE on every word and, while a word is still several tokens, append
  // the merge of its first two tokens (appended merges rank last, so the existing ones cannot
  // preempt it); repeat over all words until each is one token.
  std::vector<std::pair<std::string, std::string>> merges;
  std::map<std::string, int> ranks;
  auto bpe = [&](const std::string& w) {
    std::vector<std::string> parts;
    for (std::size_t i = 0; i < w.size(); ++i) parts.push_back(w.substr(i, 1) + (i + 1 == w.size() ? "</w>" : ""));
    while (parts.size() > 1) {
      int best = -1;
      std::size_t at = 0;
      for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
        auto it = ranks.find(parts[i] + " " + parts[i + 1]);
        if (it != ranks.end() && (best < 0 || it->second < best)) {
          best = it->second;
          at = i;
        }
      }
      if (best < 0) break;
      const std::string a = parts[at], b = parts[at + 1];
      std::vector<std::string> next;
      for (std::size_t i = 0; i < parts.size(); ++i) {
        if (i + 1 < parts.size() && parts[i] == a && parts[i + 1] == b) {
          next.push_back(a + b);
          ++i;
        } else {
          next.push_back(parts[i]);
        }
      }
      parts = std::move(next);
    }
    return parts;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& w : words) {
      const auto parts = bpe(w);
      if (parts.size() < 2) continue;
      const std::string key = parts[0] + " " + parts[1];
      ranks[key] = static_cast<int>(merges.size());
      merges.emplace_back(parts[0], parts[1]);
      vocab.push_back(parts[0] + parts[1]);
      changed = true;
    }
  }
  vocab.push_back("<|startoftext|>");
  vocab.push_back("<|endoftext|>");
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < vocab.size(); ++i) {
    if (!j.contains(vocab[i])) j[vocab[i]] = static_cast<int>(i);
  }
  std::ofstream v(dir + "/vocab.json", std::ios::trunc);
  v << j.dump() << "\n";
  std::ofstream m(dir + "/merges.txt", std::ios::trunc);
  m << "#version: 0.2\n";
  for (const auto& [a, b] : merges) m << a << " " << b << "\n";
  if (!v || !m) throw RuntimeFailure("cannot write the vocabulary into " + dir);
  return static_cast<int>(vocab.size());
}

}  // namespace fp8s::demo
