#include "demo/vocab.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "io/png.h"

namespace fp8s::demo {
namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// OpenAI CLIP's bytes_to_unicode(), in its order.
std::vector<std::string> byte_symbols() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<uint32_t> cs(bs.begin(), bs.end());
  std::set<int> have(bs.begin(), bs.end());
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    if (!have.count(b)) {
      bs.push_back(b);
      cs.push_back(256 + n++);
    }
  }
  std::vector<std::string> out;
  for (auto c : cs) out.push_back(utf8(c));
  return out;
}

}  // namespace

int write_vocabulary(const std::string& dir, const std::vector<std::string>& words) {
  make_dirs(dir);
  std::vector<std::string> vocab = byte_symbols();
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
