#include "text/clip_tokenizer.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <sys/stat.h>

#include "core/error.h"
#include "core/files.h"
#include "core/logging.h"
#include "core/sha256.h"
#include "text/text_clean.h"

namespace fp8s {
namespace {

constexpr int kMerges = 49152 - 256 - 2;  // CLIP uses the first 48894 merges of the file
constexpr std::size_t kMaxVocabTextBytes = 32u << 20;

std::string read_gzip(const std::string& path) {
  refuse_special_file(path);
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw InputError(path + ": cannot open the CLIP vocabulary");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) {
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > kMaxVocabTextBytes) {  // a gzip bomb stops here, not at the machine's memory
      gzclose(f);
      throw InputError(path + ": decompresses to more than 32 MB; CLIP's vocabulary is 3.2 MB (get "
                       "bpe_simple_vocab_16e6.txt.gz from openai/CLIP)");
    }
  }
  const bool failed = n < 0;
  gzclose(f);
  if (failed || out.empty()) throw InputError(path + ": the CLIP vocabulary is not a valid gzip file");
  return out;
}

// Which of a folder's files form a vocabulary, if any.
std::string vocab_in(const std::string& dir) {
  for (const char* name : {"bpe_simple_vocab_16e6.txt.gz", "vocab.json"}) {
    const std::string p = dir + "/" + name;
    if (is_file(p)) return p;
  }
  return {};
}

}  // namespace

std::vector<std::pair<int, std::string>> clip_byte_symbols() {
  std::vector<bool> printable(256, false);
  for (int b = 0; b < 256; ++b) printable[b] = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  std::vector<std::pair<int, std::string>> out;
  for (int b = 0; b < 256; ++b) {
    if (printable[b]) out.emplace_back(b, text::u32_to_utf8(std::u32string(1, static_cast<char32_t>(b))));
  }
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    if (!printable[b]) out.emplace_back(b, text::u32_to_utf8(std::u32string(1, static_cast<char32_t>(256 + extra++))));
  }
  return out;
}

ClipTokenizer ClipTokenizer::load(const std::string& path_in) {
  std::string path = path_in;
  if (is_dir(path)) {
    path = vocab_in(path_in);
    if (path.empty()) {
      throw InputError(path_in + ": holds neither bpe_simple_vocab_16e6.txt.gz nor vocab.json");
    }
  }
  if (!is_file(path)) throw InputError(path + ": CLIP vocabulary not found");
  ClipTokenizer t;
  t.source_ = path;
  std::vector<int> order;  // bytes in vocabulary order
  for (const auto& [b, symbol] : clip_byte_symbols()) {
    t.byte_symbol_[b] = symbol;
    order.push_back(b);
  }
  const bool json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  std::vector<std::pair<std::string, std::string>> merges;
  auto parse_merges = [&](const std::string& text, int skip_lines, int limit) {
    std::istringstream in(text);
    std::string line;
    int lineno = 0;
    while (std::getline(in, line) && static_cast<int>(merges.size()) < limit) {
      if (lineno++ < skip_lines || line.empty()) continue;
      const auto space = line.find(' ');
      if (space == std::string::npos) throw InputError(path + ": malformed merge line " + std::to_string(lineno));
      merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    }
  };
  if (json) {
    const std::string merges_path = dirname_of(path) + "/merges.txt";
    if (!is_file(merges_path)) throw InputError(path + ": merges.txt is missing beside vocab.json");
    try {
      auto j = nlohmann::json::parse(read_file(path));
      for (const auto& [tok, id] : j.items()) t.vocab_[tok] = id.get<int32_t>();
    } catch (const nlohmann::json::exception& e) {
      throw InputError(path + ": not a valid vocab.json (" + e.what() + ")");
    }
    parse_merges(read_file(merges_path), 1, std::numeric_limits<int>::max());
    // CLIP's own vocabulary (49408 tokens) needs all its merges, or words split into pieces
    if (t.vocab_.size() >= 49408 && static_cast<int>(merges.size()) < kMerges) {
      throw InputError(merges_path + ": holds " + std::to_string(merges.size()) + " merges for a vocabulary of " +
                       std::to_string(t.vocab_.size()) + " tokens; CLIP's has " + std::to_string(kMerges) +
                       " (the file is cut short: use the tokenizer/ folder of a CLIP model)");
    }
  } else {
    parse_merges(read_gzip(path), 1, kMerges);
    if (static_cast<int>(merges.size()) < kMerges) {
      throw InputError(path + ": holds " + std::to_string(merges.size()) + " merges, CLIP's vocabulary " + std::to_string(kMerges) +
                       " (the file is cut short or another tokenizer's: get bpe_simple_vocab_16e6.txt.gz from openai/CLIP)");
    }
    warn_unless_sha256(path, kClipVocabSha256, "CLIP vocabulary");
    int id = 0;
    for (int b : order) t.vocab_[t.byte_symbol_[b]] = id++;
    for (int b : order) t.vocab_[t.byte_symbol_[b] + "</w>"] = id++;
    for (const auto& [a, b] : merges) t.vocab_[a + b] = id++;
    t.vocab_["<|startoftext|>"] = id++;
    t.vocab_["<|endoftext|>"] = id++;
  }
  for (std::size_t r = 0; r < merges.size(); ++r) t.ranks_.add(merges[r].first, merges[r].second, static_cast<int32_t>(r));
  t.bos_ = required_entry(t.vocab_, "<|startoftext|>", path, "vocabulary");
  t.eos_ = required_entry(t.vocab_, "<|endoftext|>", path, "vocabulary");
  t.comma_ = required_entry(t.vocab_, ",</w>", path, "vocabulary");
  return t;
}

ClipTokenizer ClipTokenizer::find(const std::string& explicit_path, const std::string& checkpoint) {
  static const VocabularySearch search{
      "CLIP vocabulary (bpe_simple_vocab_16e6.txt.gz or vocab.json + merges.txt)", "tokenizer", {"tokenizer", "clip"},
      "FP8S_CLIP_VOCAB", "clip",
      "Get bpe_simple_vocab_16e6.txt.gz from the openai/CLIP repository (clip/ folder) and pass --vocab PATH"};
  return load(find_vocabulary(search, explicit_path, checkpoint,
                              [](const std::string& p) { return is_file(p) || (is_dir(p) && !vocab_in(p).empty()); }));
}

std::vector<int32_t> ClipTokenizer::bpe(const std::string& symbols_key) const {
  {
    const std::lock_guard<std::mutex> lock(cache_->mutex);
    if (auto it = cache_->ids.find(symbols_key); it != cache_->ids.end()) return it->second;
  }
  // symbols_key: the piece's byte symbols separated by '\x01' ('</w>' already on the last one)
  std::vector<std::string> word;
  std::size_t start = 0;
  while (true) {
    auto sep = symbols_key.find('\x01', start);
    word.push_back(symbols_key.substr(start, sep - start));
    if (sep == std::string::npos) break;
    start = sep + 1;
  }
  word = ranks_.merge(std::move(word));
  std::vector<int32_t> ids;
  for (const auto& w : word) {
    auto it = vocab_.find(w);
    if (it == vocab_.end()) throw RuntimeFailure("CLIP vocabulary lacks the token '" + w + "'");
    ids.push_back(it->second);
  }
  const std::lock_guard<std::mutex> lock(cache_->mutex);
  cache_->ids.emplace(symbols_key, ids);
  return ids;
}

std::vector<int32_t> ClipTokenizer::encode(const std::string& text_in) const {
  const std::u32string s = text::clean_for_clip(text_in);
  std::vector<int32_t> ids;
  auto emit_piece = [&](const std::u32string& piece) {
    const std::string utf8 = text::u32_to_utf8(piece);
    if (utf8 == "<|startoftext|>") return ids.push_back(bos_);
    if (utf8 == "<|endoftext|>") return ids.push_back(eos_);
    std::string key;
    for (std::size_t i = 0; i < utf8.size(); ++i) {
      if (i) key += '\x01';
      key += byte_symbol_[static_cast<unsigned char>(utf8[i])];
    }
    key += "</w>";
    for (int32_t id : bpe(key)) ids.push_back(id);
  };
  static const std::u32string kSpecials[] = {U"<|startoftext|>", U"<|endoftext|>"};
  static const std::u32string kContractions[] = {U"'s", U"'t", U"'re", U"'ve", U"'m", U"'ll", U"'d"};
  std::size_t i = 0;
  while (i < s.size()) {
    bool matched = false;
    for (const auto* group : {kSpecials, kContractions}) {
      const std::size_t count = group == kSpecials ? 2 : 7;
      for (std::size_t g = 0; g < count && !matched; ++g) {
        const auto& lit = group[g];
        // The pattern is IGNORECASE: after lower-casing only the long s (ſ) still folds to 's'.
        bool same = i + lit.size() <= s.size();
        for (std::size_t k = 0; same && k < lit.size(); ++k) {
          same = s[i + k] == lit[k] || (lit[k] == U's' && s[i + k] == 0x017F);
        }
        if (same) {
          emit_piece(s.substr(i, lit.size()));
          i += lit.size();
          matched = true;
        }
      }
      if (matched) break;
    }
    if (matched) continue;
    const char32_t c = s[i];
    if (text::is_letter(c)) {
      std::size_t j = i;
      while (j < s.size() && text::is_letter(s[j])) ++j;
      emit_piece(s.substr(i, j - i));
      i = j;
    } else if (text::is_number(c)) {
      emit_piece(s.substr(i, 1));
      ++i;
    } else if (text::is_whitespace(c)) {
      ++i;
    } else {
      std::size_t j = i;
      while (j < s.size() && !text::is_whitespace(s[j]) && !text::is_letter(s[j]) &&
             !text::is_number(s[j])) {
        ++j;
      }
      emit_piece(s.substr(i, j - i));
      i = j;
    }
  }
  return ids;
}

}  // namespace fp8s
