#include "text/qwen_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "core/logging.h"
#include "core/sha256.h"
#include "text/clip_tokenizer.h"
#include "text/text_clean.h"

namespace fp8s {
namespace {

bool is_crlf(char32_t c) { return c == U'\r' || c == U'\n'; }
bool is_space(char32_t c) { return text::is_whitespace(c); }
bool is_letter(char32_t c) { return text::is_letter(c); }
bool is_number(char32_t c) { return text::is_number(c); }
// [^\s\p{L}\p{N}]
bool is_other(char32_t c) { return !is_space(c) && !is_letter(c) && !is_number(c); }
char32_t fold(char32_t c) { return c == 0x017F ? U's' : c < 0x80 ? static_cast<char32_t>(std::tolower(static_cast<int>(c))) : c; }

std::string nfc(const std::string& s) {
  if (s.empty()) return s;
  utf8proc_uint8_t* out = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(s.c_str()));
  if (!out) return s;  // invalid UTF-8: left as it is (its bytes still tokenize)
  std::string r(reinterpret_cast<const char*>(out));
  std::free(out);
  return r;
}

}  // namespace

// The pre-tokenizer regex of Qwen's tokenizer.json, alternative by alternative at each position
// (the first that matches wins, each greedy with the regex's backtracking):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N} | ' '?[^\s\p{L}\p{N}]+[\r\n]*
//   | \s*[\r\n]+ | \s+(?!\S) | \s+
std::vector<std::u32string> QwenTokenizer::split(const std::u32string& s) {
  std::vector<std::u32string> out;
  const std::size_t n = s.size();
  std::size_t i = 0;
  auto run = [&](std::size_t from, bool (*pred)(char32_t)) {
    while (from < n && pred(s[from])) ++from;
    return from;
  };
  while (i < n) {
    std::size_t end = i;
    // contractions
    if (s[i] == U'\'' && i + 1 < n) {
      static const std::u32string kTails[] = {U"s", U"t", U"re", U"ve", U"m", U"ll", U"d"};
      for (const auto& tail : kTails) {
        bool same = i + 1 + tail.size() <= n;
        for (std::size_t k = 0; same && k < tail.size(); ++k) same = fold(s[i + 1 + k]) == tail[k];
        if (same) {
          end = i + 1 + tail.size();
          break;
        }
      }
    }
    // an optional leading non-letter/number (not CR/LF), then letters
    if (end == i) {
      if (is_letter(s[i])) end = run(i, is_letter);
      else if (!is_crlf(s[i]) && !is_number(s[i]) && i + 1 < n && is_letter(s[i + 1])) end = run(i + 1, is_letter);
    }
    if (end == i && is_number(s[i])) end = i + 1;
    // an optional space, punctuation, trailing CR/LF
    if (end == i) {
      const std::size_t from = s[i] == U' ' && i + 1 < n && is_other(s[i + 1]) ? i + 1 : i;
      if (is_other(s[from])) end = run(run(from, is_other), is_crlf);
    }
    if (end == i && is_space(s[i])) {
      const std::size_t spaces = run(i, is_space);
      std::size_t last_crlf = spaces;
      for (std::size_t k = i; k < spaces; ++k) {
        if (is_crlf(s[k])) last_crlf = k;
      }
      if (last_crlf < spaces) end = last_crlf + 1;                    // \s*[\r\n]+
      else if (spaces == n || spaces - i == 1) end = spaces;          // \s+(?!\S), or \s+ of one
      else end = spaces - 1;                                          // \s+(?!\S): the last space goes with what follows
    }
    if (end == i) end = i + 1;  // not reached: every character is in some class
    out.push_back(s.substr(i, end - i));
    i = end;
  }
  return out;
}

QwenTokenizer QwenTokenizer::load(const std::string& path_in) {
  const std::string path = is_dir(path_in) ? path_in + "/" + kQwenTokenizerFile : path_in;
  if (!is_file(path)) throw InputError(path + ": Qwen tokenizer (tokenizer.json) not found");
  const std::string what = path + ": not a Qwen byte-level BPE tokenizer.json";
  QwenTokenizer t;
  t.source_ = path;
  for (const auto& [b, symbol] : clip_byte_symbols()) t.byte_symbol_[b] = symbol;  // GPT-2's bytes_to_unicode
  try {
    const auto j = nlohmann::json::parse(read_file(path));
    const auto& model = j.at("model");
    if (model.at("type") != "BPE") throw InputError(what + " (its model is " + model.at("type").get<std::string>() + ")");
    for (const auto& [token, id] : model.at("vocab").items()) t.vocab_[token] = id.get<int32_t>();
    int32_t rank = 0;
    for (const auto& m : model.at("merges")) {
      if (m.is_array()) {
        t.ranks_.add(m.at(0).get<std::string>(), m.at(1).get<std::string>(), rank++);
      } else {
        const auto line = m.get<std::string>();
        const auto space = line.find(' ');
        if (space == std::string::npos) throw InputError(what + " (a merge without a space: '" + line + "')");
        t.ranks_.add(line.substr(0, space), line.substr(space + 1), rank++);
      }
    }
    for (const auto& a : j.at("added_tokens")) t.added_.emplace_back(a.at("content").get<std::string>(), a.at("id").get<int32_t>());
  } catch (const nlohmann::json::exception& e) {
    throw InputError(what + " (" + e.what() + ")");
  }
  std::stable_sort(t.added_.begin(), t.added_.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  for (const auto& [content, id] : t.added_) {
    if (content == "<|endoftext|>") t.pad_ = id;
  }
  if (t.pad_ < 0 || t.vocab_.empty() || t.ranks_.size() == 0) throw InputError(what + " (no vocabulary, merges or <|endoftext|>)");
  warn_unless_sha256(path, kQwenTokenizerSha256, "Qwen3 tokenizer.json");
  return t;
}

QwenTokenizer QwenTokenizer::find(const std::string& explicit_path, const std::string& model) {
  static const VocabularySearch search{
      "Qwen tokenizer (tokenizer.json)", "tokenizer", {"qwen_tokenizer", "tokenizer"}, "FP8S_QWEN_TOKENIZER", "qwen",
      "Get tokenizer/tokenizer.json from the Z-Image-Turbo (or Qwen3-4B) repository and pass --qwen-tokenizer PATH"};
  return load(find_vocabulary(search, explicit_path, model,
                              [](const std::string& p) { return is_file(p) || is_file(p + "/" + kQwenTokenizerFile); }));
}

std::string QwenTokenizer::chat_template(const std::string& prompt, bool thinking_off) {
  return "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n" + (thinking_off ? "<think>\n\n</think>\n\n" : "");
}

void QwenTokenizer::encode_text(const std::string& raw, std::vector<int32_t>& ids) const {
  for (const auto& piece : split(text::utf8_to_u32(nfc(raw)))) {
    const std::string utf8 = text::u32_to_utf8(piece);
    std::vector<std::string> word;
    for (const char c : utf8) word.push_back(byte_symbol_[static_cast<unsigned char>(c)]);
    for (const auto& token : ranks_.merge(std::move(word))) {
      const auto it = vocab_.find(token);
      if (it == vocab_.end()) throw RuntimeFailure(source_ + ": the Qwen vocabulary lacks the token '" + token + "'");
      ids.push_back(it->second);
    }
  }
}

std::vector<int32_t> QwenTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  std::size_t start = 0, i = 0;
  while (i < text.size()) {
    const std::pair<std::string, int32_t>* hit = nullptr;
    for (const auto& a : added_) {  // longest first
      if (!a.first.empty() && text[i] == a.first[0] && text.compare(i, a.first.size(), a.first) == 0) {
        hit = &a;
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    encode_text(text.substr(start, i - start), ids);
    ids.push_back(hit->second);
    i += hit->first.size();
    start = i;
  }
  encode_text(text.substr(start), ids);
  return ids;
}

}  // namespace fp8s
