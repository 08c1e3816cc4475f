#include "text/tekken_tokenizer.h"

#include <utf8proc.h>
#include <zlib.h>

#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "text/text_clean.h"

namespace fp8s {
namespace {

constexpr int32_t kSpecialIds = 1000;
const char* const kFlux2System =
    "You are an AI that reasons about image descriptions. You give structured responses focusing on object relationships, "
    "object\nattribution and actions without speculation.";

bool is_crlf(char32_t c) { return c == U'\r' || c == U'\n'; }
bool is_space(char32_t c) { return text::is_whitespace(c); }
bool is_letter(char32_t c) { return text::is_letter(c); }
bool is_number(char32_t c) { return text::is_number(c); }
bool is_mark(utf8proc_category_t k) { return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME; }
utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }
// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}]
bool is_upperish(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LT || k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_LO || is_mark(k);
}
bool is_lowerish(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_LO || is_mark(k);
}
// [^\r\n\p{L}\p{N}]: the optional lead of a word
bool is_lead(char32_t c) { return !is_crlf(c) && !is_letter(c) && !is_number(c); }
// [^\s\p{L}\p{N}]
bool is_other(char32_t c) { return !is_space(c) && !is_letter(c) && !is_number(c); }

std::string base64_decode(const std::string& in) {
  static const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -8;
  for (const char c : in) {
    if (c == '=') break;
    const auto p = chars.find(c);
    if (p == std::string::npos) throw std::invalid_argument("not base64");
    val = (val << 6) + static_cast<int>(p);
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((val >> bits) & 0xFF));
      bits -= 8;
    }
  }
  return out;
}

std::string gunzip(const std::string& data, const std::string& label) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw RuntimeFailure(label + ": zlib could not start");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buf[1 << 16];
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
    if (out.size() > (256u << 20)) rc = Z_MEM_ERROR;  // a tokenizer is a few MB
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END) throw InputError(label + ": not a readable gzip file (a damaged download?)");
  return out;
}

}  // namespace

std::vector<std::u32string> TekkenTokenizer::split(const std::u32string& s) {
  std::vector<std::u32string> out;
  const std::size_t n = s.size();
  auto run = [&](std::size_t from, bool (*pred)(char32_t)) {
    while (from < n && pred(s[from])) ++from;
    return from;
  };
  // [\p{Lu}…\p{M}]*[\p{Ll}…\p{M}]+ from j, as a backtracking engine finds it: the longest upper run
  // that still leaves one lower-ish character, then the lower run (0: no match)
  auto word_lower = [&](std::size_t j) -> std::size_t {
    const std::size_t u = run(j, is_upperish);
    for (std::size_t q = u + 1; q-- > j;) {
      if (q < n && is_lowerish(s[q])) return run(q, is_lowerish);
    }
    return 0;
  };
  std::size_t i = 0;
  while (i < n) {
    std::size_t end = 0;
    const bool lead = is_lead(s[i]) && i + 1 < n;
    // 1. [^\r\n\p{L}\p{N}]? upper* lower+   2. [^\r\n\p{L}\p{N}]? upper+ lower*
    if (lead) end = word_lower(i + 1);
    if (!end) end = word_lower(i);
    if (!end && lead && is_upperish(s[i + 1])) end = run(run(i + 1, is_upperish), is_lowerish);
    if (!end && is_upperish(s[i])) end = run(run(i, is_upperish), is_lowerish);
    // 3. \p{N}
    if (!end && is_number(s[i])) end = i + 1;
    // 4. ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
    if (!end) {
      const std::size_t from = s[i] == U' ' && i + 1 < n && is_other(s[i + 1]) ? i + 1 : i;
      if (is_other(s[from])) {
        end = run(from, is_other);
        while (end < n && (is_crlf(s[end]) || s[end] == U'/')) ++end;
      }
    }
    // 5. \s*[\r\n]+   6. \s+(?!\S)   7. \s+
    if (!end && is_space(s[i])) {
      const std::size_t spaces = run(i, is_space);
      std::size_t last_crlf = spaces;
      for (std::size_t k = i; k < spaces; ++k) {
        if (is_crlf(s[k])) last_crlf = k;
      }
      if (last_crlf < spaces) end = last_crlf + 1;
      else if (spaces == n || spaces - i == 1) end = spaces;
      else end = spaces - 1;
    }
    if (!end) end = i + 1;  // a lone CR/LF-free character no branch takes (not reached)
    out.push_back(s.substr(i, end - i));
    i = end;
  }
  return out;
}

TekkenTokenizer TekkenTokenizer::parse(const std::string& text, const std::string& label) {
  const std::string what = label + ": not a Tekken tokenizer (tekken.json)";
  TekkenTokenizer t;
  t.source_ = label;
  try {
    const auto j = nlohmann::json::parse(text);
    const auto& config = j.at("config");
    const int64_t usable = config.value("num_vocab_tokens", int64_t{0});
    const auto& vocab = j.at("vocab");
    if (!vocab.is_array() || vocab.size() < 256) throw InputError(what + " (its vocab has fewer than 256 entries)");
    for (const auto& v : vocab) {
      const int64_t rank = v.at("rank").get<int64_t>();
      if (usable > 0 && rank >= usable) continue;
      if (rank < 0 || rank > std::numeric_limits<int32_t>::max() - kSpecialIds) throw InputError(what + " (a rank out of range)");
      t.ranks_.emplace(base64_decode(v.at("token_bytes").get<std::string>()), static_cast<int32_t>(rank));
    }
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError(what + " (" + e.what() + ")");
  }
  for (int b = 0; b < 256; ++b) {
    if (!t.ranks_.count(std::string(1, static_cast<char>(b)))) throw InputError(what + " (byte " + std::to_string(b) + " has no rank)");
  }
  return t;
}

TekkenTokenizer TekkenTokenizer::load(const std::string& path_in) {
  std::string path = path_in;
  if (is_dir(path)) path = is_file(path + "/tekken.json") ? path + "/tekken.json" : path + "/tekken.json.gz";
  if (!is_file(path)) throw InputError(path + ": Mistral's Tekken tokenizer (tekken.json) not found");
  std::string data = read_file(path);
  if (data.size() > 2 && static_cast<unsigned char>(data[0]) == 0x1f && static_cast<unsigned char>(data[1]) == 0x8b) data = gunzip(data, path);
  return parse(data, path);
}

std::vector<int32_t> TekkenTokenizer::bpe(const std::string& piece) const {
  std::vector<std::string> parts;
  for (const char c : piece) parts.emplace_back(1, c);
  while (parts.size() > 1) {  // merge the adjacent pair of the lowest rank
    int32_t best = std::numeric_limits<int32_t>::max();
    std::size_t at = parts.size();
    for (std::size_t k = 0; k + 1 < parts.size(); ++k) {
      const auto it = ranks_.find(parts[k] + parts[k + 1]);
      if (it != ranks_.end() && it->second < best) best = it->second, at = k;
    }
    if (at == parts.size()) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  std::vector<int32_t> ids;
  for (const auto& p : parts) ids.push_back(ranks_.at(p) + kSpecialIds);
  return ids;
}

std::vector<int32_t> TekkenTokenizer::encode(const std::string& text_in) const {
  std::vector<int32_t> ids;
  for (const auto& piece : split(text::utf8_to_u32(text_in))) {
    const auto part = bpe(text::u32_to_utf8(piece));
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

std::vector<int32_t> TekkenTokenizer::instruct_prompt(const std::string& prompt) const {
  std::vector<int32_t> ids{kBos, kSystem};
  const auto system = encode(kFlux2System);
  ids.insert(ids.end(), system.begin(), system.end());
  ids.push_back(kEndSystem);
  ids.push_back(kInst);
  const auto p = encode(prompt);
  ids.insert(ids.end(), p.begin(), p.end());
  ids.push_back(kEndInst);
  return ids;
}

}  // namespace fp8s
