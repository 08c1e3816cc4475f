#include "text/t5_tokenizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "core/logging.h"
#include "core/sha256.h"

namespace fp8s {
namespace {

const std::string kSpace = "\xe2\x96\x81";  // U+2581 '▁', SentencePiece's word boundary

std::string base64_decode(const std::string& in, const std::string& label) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(in.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const int v = value(c);
    if (v < 0) throw InputError(label + ": the precompiled character map is not base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

std::size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;  // a stray continuation byte: one byte at a time
}

// Rust's char::is_whitespace (the White_Space property), which the Strip normalizer uses.
bool is_white_space(utf8proc_int32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace

T5Tokenizer T5Tokenizer::load(const std::string& path_in) {
  std::string path = path_in;
  if (is_dir(path)) path += std::string("/") + kT5TokenizerFile;
  if (!is_file(path)) throw MissingVocabulary(path + ": T5 tokenizer (tokenizer.json) not found");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path + ": not a tokenizer.json (" + e.what() + ")");
  }
  const std::string what = path + ": not the T5 tokenizer.json (Unigram with a precompiled normalizer)";
  T5Tokenizer t;
  t.source_ = path;
  try {
    const auto& model = j.at("model");
    if (model.at("type") != "Unigram") throw InputError(what + ", model type " + model.at("type").dump());
    const auto& vocab = model.at("vocab");
    t.scores_.reserve(vocab.size());
    double min_score = std::numeric_limits<double>::max();
    for (const auto& entry : vocab) {
      const std::string piece = entry.at(0).get<std::string>();
      const double score = entry.at(1).get<double>();
      t.ids_.emplace(piece, static_cast<int32_t>(t.scores_.size()));
      t.scores_.push_back(score);
      t.max_piece_bytes_ = std::max(t.max_piece_bytes_, piece.size());
      min_score = std::min(min_score, score);
    }
    t.unk_score_ = min_score - 10.0;  // HF tokenizers' K_UNK_PENALTY
    t.unk_ = model.value("unk_id", 2);
    if (t.unk_ < 0 || static_cast<std::size_t>(t.unk_) >= t.scores_.size()) {
      // an id past the vocabulary would index past T5's embedding at the first unknown piece
      throw InputError(what + ": its unk_id " + std::to_string(t.unk_) + " is outside its vocabulary of " +
                       std::to_string(t.scores_.size()) + " pieces (the file is damaged: use a copy from its source)");
    }
    std::string charsmap;
    for (const auto& n : j.at("normalizer").at("normalizers")) {
      if (n.at("type") == "Precompiled") charsmap = base64_decode(n.at("precompiled_charsmap").get<std::string>(), path);
    }
    if (charsmap.size() < 4) throw InputError(what);
    const uint32_t trie_bytes = static_cast<uint32_t>(static_cast<unsigned char>(charsmap[0])) |
                                static_cast<uint32_t>(static_cast<unsigned char>(charsmap[1])) << 8 |
                                static_cast<uint32_t>(static_cast<unsigned char>(charsmap[2])) << 16 |
                                static_cast<uint32_t>(static_cast<unsigned char>(charsmap[3])) << 24;
    if (trie_bytes % 4 != 0 || trie_bytes == 0 || 4 + static_cast<std::size_t>(trie_bytes) > charsmap.size()) {
      throw InputError(path + ": the precompiled character map is damaged");
    }
    t.trie_.resize(trie_bytes / 4);
    for (std::size_t i = 0; i < t.trie_.size(); ++i) {
      const auto* b = reinterpret_cast<const unsigned char*>(charsmap.data() + 4 + 4 * i);
      t.trie_[i] = b[0] | b[1] << 8 | b[2] << 16 | static_cast<uint32_t>(b[3]) << 24;
    }
    t.normalized_ = charsmap.substr(4 + trie_bytes);
  } catch (const nlohmann::json::exception&) {
    throw InputError(what);
  }
  t.eos_ = required_entry(t.ids_, "</s>", path, "T5 vocabulary");
  t.pad_ = required_entry(t.ids_, "<pad>", path, "T5 vocabulary");
  warn_unless_sha256(path, kT5TokenizerSha256, "T5 tokenizer.json");
  return t;
}

T5Tokenizer T5Tokenizer::find(const std::string& explicit_path, const std::string& model) {
  static const VocabularySearch search{
      "T5 tokenizer (tokenizer.json)", "tokenizer_2", {"t5_tokenizer", "tokenizer_2"}, "FP8S_T5_TOKENIZER", "t5",
      "Get tokenizer_2/tokenizer.json from a Flux.1 repository (or google/t5-v1_1-xxl's tokenizer.json) and pass "
      "--t5-tokenizer PATH"};
  return load(find_vocabulary(search, explicit_path, model,
                              [](const std::string& p) { return is_file(p) || is_file(p + "/" + kT5TokenizerFile); }));
}

const char* T5Tokenizer::charsmap_lookup(const char* s, std::size_t n) const {
  // darts-clone's common prefix search; like HF's spm_precompiled, the first (shortest) match wins
  auto offset = [](uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); };
  auto label = [](uint32_t unit) { return unit & ((1u << 31) | 0xFFu); };
  auto has_leaf = [](uint32_t unit) { return ((unit >> 8) & 1u) == 1u; };
  auto value = [](uint32_t unit) { return unit & ((1u << 31) - 1); };
  std::size_t pos = 0;
  pos ^= offset(trie_[0]);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == 0) break;
    pos ^= c;
    if (pos >= trie_.size()) return nullptr;
    const uint32_t unit = trie_[pos];
    if (label(unit) != c) return nullptr;
    pos ^= offset(unit);
    if (pos >= trie_.size()) return nullptr;
    if (has_leaf(unit)) {
      const std::size_t at = value(trie_[pos]);
      return at < normalized_.size() ? normalized_.c_str() + at : nullptr;
    }
  }
  return nullptr;
}

std::string T5Tokenizer::normalize(const std::string& text) const {
  // 1. the precompiled map over extended grapheme clusters: a cluster under 6 bytes replaced
  //    whole where the map has it, else character by character (HF spm_precompiled's rule)
  std::string mapped;
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  const auto size = static_cast<utf8proc_ssize_t>(text.size());
  std::vector<std::pair<std::size_t, std::size_t>> chars;  // (offset, length) of each character
  utf8proc_ssize_t at = 0;
  while (at < size) {
    utf8proc_int32_t c = 0;
    auto len = utf8proc_iterate(bytes + at, size - at, &c);
    if (len <= 0) len = 1;  // invalid UTF-8: one byte at a time
    chars.emplace_back(static_cast<std::size_t>(at), static_cast<std::size_t>(len));
    at += len;
  }
  auto emit_chars = [&](std::size_t first, std::size_t last) {
    for (std::size_t k = first; k < last; ++k) {
      const auto [off, len] = chars[k];
      const char* r = charsmap_lookup(text.data() + off, len);
      mapped += r ? std::string(r) : text.substr(off, len);
    }
  };
  utf8proc_int32_t state = 0, previous = -1;
  std::size_t start = 0;
  auto flush = [&](std::size_t end) {
    if (end == start) return;
    const std::size_t off = chars[start].first;
    const std::size_t len = chars[end - 1].first + chars[end - 1].second - off;
    const char* r = len < 6 ? charsmap_lookup(text.data() + off, len) : nullptr;
    if (r) {
      mapped += r;
    } else {
      emit_chars(start, end);
    }
    start = end;
  };
  for (std::size_t k = 0; k < chars.size(); ++k) {
    utf8proc_int32_t c = 0;
    utf8proc_iterate(bytes + chars[k].first, static_cast<utf8proc_ssize_t>(chars[k].second), &c);
    if (c < 0) c = 0xFFFD;
    if (previous >= 0 && utf8proc_grapheme_break_stateful(previous, c, &state)) flush(k);
    previous = c;
  }
  flush(chars.size());
  // 2. strip on the right
  std::size_t end = mapped.size();
  while (end > 0) {
    std::size_t lead = end - 1;
    while (lead > 0 && (static_cast<unsigned char>(mapped[lead]) & 0xC0) == 0x80) --lead;
    utf8proc_int32_t c = 0;
    utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(mapped.data() + lead), static_cast<utf8proc_ssize_t>(end - lead), &c);
    if (!is_white_space(c)) break;
    end = lead;
  }
  mapped.resize(end);
  // 3. runs of two or more spaces become one '▁'
  std::string out;
  for (std::size_t i = 0; i < mapped.size();) {
    std::size_t j = i;
    while (j < mapped.size() && mapped[j] == ' ') ++j;
    if (j - i >= 2) {
      out += kSpace;
      i = j;
    } else {
      out += mapped[i++];
    }
  }
  return out;
}

std::vector<int32_t> T5Tokenizer::viterbi(const std::string& word) const {
  // HF tokenizers' Unigram::encode_optimized: best score ending at each byte; a character no
  // piece starts with is <unk> at min score - 10; consecutive <unk>s fuse into one
  struct Node {
    double score = 0;
    long start = -1;
    int32_t id = 0;
  };
  const std::size_t n = word.size();
  std::vector<Node> best(n + 1);
  best[0].start = 0;
  for (std::size_t s = 0; s < n;) {
    const std::size_t mblen = std::min(utf8_length(static_cast<unsigned char>(word[s])), n - s);
    const double here = best[s].score;
    bool single = false;
    for (std::size_t len = 1; len <= max_piece_bytes_ && s + len <= n; ++len) {
      auto it = ids_.find(word.substr(s, len));
      if (it == ids_.end()) continue;
      Node& target = best[s + len];
      const double candidate = here + scores_[static_cast<std::size_t>(it->second)];
      if (target.start < 0 || candidate > target.score) target = {candidate, static_cast<long>(s), it->second};
      if (len == mblen) single = true;
    }
    if (!single) {
      Node& target = best[s + mblen];
      const double candidate = here + unk_score_;
      if (target.start < 0 || candidate > target.score) target = {candidate, static_cast<long>(s), unk_};
    }
    s += mblen;
  }
  std::vector<int32_t> ids;
  for (std::size_t end = n; end > 0;) {
    const Node& node = best[end];
    if (node.start < 0) break;  // unreachable: every character has a node
    if (!(node.id == unk_ && !ids.empty() && ids.back() == unk_)) ids.push_back(node.id);
    end = static_cast<std::size_t>(node.start);
  }
  return {ids.rbegin(), ids.rend()};
}

std::vector<int32_t> T5Tokenizer::encode(const std::string& text) const {
  const std::string normalized = normalize(text);
  if (normalized.empty()) return {};
  // Metaspace: spaces become '▁', one '▁' in front, split before every '▁'
  std::string s;
  for (char c : normalized) {
    if (c == ' ') {
      s += kSpace;
    } else {
      s += c;
    }
  }
  if (s.compare(0, kSpace.size(), kSpace) != 0) s = kSpace + s;
  std::vector<int32_t> ids;
  std::size_t start = 0;
  while (start < s.size()) {
    std::size_t next = s.find(kSpace, start + kSpace.size());
    const std::string word = s.substr(start, next == std::string::npos ? std::string::npos : next - start);
    for (int32_t id : viterbi(word)) ids.push_back(id);
    if (next == std::string::npos) break;
    start = next;
  }
  return ids;
}

std::vector<int32_t> T5Tokenizer::encode_padded(const std::string& text, int length) const {
  if (length < 1) throw InputError("the T5 sequence length must be at least 1, got " + std::to_string(length));
  std::vector<int32_t> ids = encode(text);
  if (static_cast<int>(ids.size()) > length - 1) ids.resize(static_cast<std::size_t>(length - 1));
  ids.push_back(eos_);
  ids.resize(static_cast<std::size_t>(length), pad_);
  return ids;
}

}  // namespace fp8s
