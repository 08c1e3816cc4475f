#include "text/prompt_parser.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/error.h"
#include "text/text_clean.h"

namespace fp8s {
namespace {

bool is_py_space(char32_t c) { return text::is_whitespace(c) || (c >= 0x1C && c <= 0x1F); }
bool is_word_char(char32_t c) { return c == '_' || text::is_letter(c) || text::is_number(c); }

// re.split(r"\s*\bBREAK\b\s*", text)
std::vector<std::u32string> split_break(const std::u32string& s) {
  std::vector<std::u32string> parts;
  std::size_t piece_start = 0, pos = 0;
  const std::u32string kw = U"BREAK";
  while ((pos = s.find(kw, pos)) != std::u32string::npos) {
    const bool left_ok = pos == 0 || !is_word_char(s[pos - 1]);
    const bool right_ok = pos + 5 >= s.size() || !is_word_char(s[pos + 5]);
    if (!left_ok || !right_ok || pos < piece_start) {
      ++pos;
      continue;
    }
    std::size_t b = pos, e = pos + 5;
    while (b > piece_start && is_py_space(s[b - 1])) --b;
    while (e < s.size() && is_py_space(s[e])) ++e;
    parts.push_back(s.substr(piece_start, b - piece_start));
    piece_start = e;
    pos = e;
  }
  parts.push_back(s.substr(piece_start));
  return parts;
}

constexpr std::size_t kMaxEmphasisDepth = 256;

bool is_digit(char32_t c) {
  return c >= '0' && c <= '9';
}

// A1111's parse_prompt_attention as a scanner over the prompt's code points: the fragments with
// their weights, the open brackets' positions in them.
class AttentionParser {
 public:
  explicit AttentionParser(const std::string& prompt) : s_(text::utf8_to_u32(prompt)) {}

  std::vector<WeightedText> parse() {
    while (i_ < s_.size()) step();
    for (std::size_t pos : round_) multiply(pos, 1.1);
    for (std::size_t pos : square_) multiply(pos, 1 / 1.1);
    if (res_.empty()) res_.push_back({"", 1.0});
    check_weights();
    merge_equal_neighbours();
    return std::move(res_);
  }

 private:
  void multiply(std::size_t start, double m) {
    for (std::size_t p = start; p < res_.size(); ++p) res_[p].weight *= m;
  }
  // text, its BREAKs apart
  void add_text(const std::u32string& t) {
    auto parts = split_break(t);
    for (std::size_t p = 0; p < parts.size(); ++p) {
      if (p) res_.push_back({"BREAK", -1});
      res_.push_back({text::u32_to_utf8(parts[p]), 1.0});
    }
  }

  void step() {
    const char32_t c = s_[i_];
    if (c == '\\') return escape();
    if ((c == '(' || c == '[') && round_.size() + square_.size() >= kMaxEmphasisDepth) {
      // each fragment is multiplied once per bracket open around it: the bound keeps the parse
      // linear, and 1.1^256 is far past any emphasis that draws
      throw InputError("prompt: brackets nested more than " + std::to_string(kMaxEmphasisDepth) +
                       " deep; write the weight instead, e.g. (word:1.5), or escape literal brackets as \\( \\)");
    }
    if (c == '(' || c == '[') {
      (c == '(' ? round_ : square_).push_back(res_.size());
      ++i_;
      return;
    }
    if (c == ':') return colon();
    if ((c == ')' && !round_.empty()) || (c == ']' && !square_.empty())) {
      auto& open = c == ')' ? round_ : square_;
      multiply(open.back(), c == ')' ? 1.1 : 1 / 1.1);
      open.pop_back();
      ++i_;
      return;
    }
    std::size_t j = i_ + 1;  // an unmatched closing bracket is text
    if (c != ')' && c != ']') {
      j = i_;
      while (j < s_.size() && s_[j] != '\\' && s_[j] != '(' && s_[j] != ')' && s_[j] != '[' && s_[j] != ']' && s_[j] != ':') {
        ++j;
      }
    }
    add_text(s_.substr(i_, j - i_));
    i_ = j;
  }

  // \( \) \[ \] \\ -> the character; a lone backslash -> nothing
  void escape() {
    const char32_t n = i_ + 1 < s_.size() ? s_[i_ + 1] : 0;
    if (n == '(' || n == ')' || n == '[' || n == ']' || n == '\\') {
      res_.push_back({text::u32_to_utf8(s_.substr(i_ + 1, 1)), 1.0});
      i_ += 2;
    } else {
      res_.push_back({"", 1.0});
      i_ += 1;
    }
  }

  // :\s*([+-]?[.\d]+)\s*\) closes the innermost round bracket with that weight
  void colon() {
    std::size_t j = i_ + 1;
    while (j < s_.size() && is_py_space(s_[j])) ++j;
    const std::size_t num_start = j;
    if (j < s_.size() && (s_[j] == '+' || s_[j] == '-')) ++j;
    const std::size_t digits = j;
    while (j < s_.size() && (is_digit(s_[j]) || s_[j] == '.')) ++j;
    const std::size_t num_end = j;
    while (j < s_.size() && is_py_space(s_[j])) ++j;
    if (num_end <= digits || j >= s_.size() || s_[j] != ')') {
      res_.push_back({":", 1.0});
      ++i_;
      return;
    }
    if (round_.empty()) {  // no open bracket: the whole `:W)` is plain text
      add_text(s_.substr(i_, j + 1 - i_));
      i_ = j + 1;
      return;
    }
    const std::string number = text::u32_to_utf8(s_.substr(num_start, num_end - num_start));
    char* end = nullptr;
    const double w = std::strtod(number.c_str(), &end);
    if (end != number.c_str() + number.size() || number.find('.') != number.rfind('.') || !std::isfinite(w)) {
      throw InputError("prompt: the emphasis weight '" + number + "' is not a number; write e.g. (word:1.3)");
    }
    multiply(round_.back(), w);
    round_.pop_back();
    i_ = j + 1;
  }

  void check_weights() const {
    for (const auto& r : res_) {
      // the multipliers are applied as FP32: a weight beyond its range would be Inf, a one-colour picture
      if (r.weight != -1 && !(std::abs(r.weight) <= std::numeric_limits<float>::max())) {
        throw InputError("prompt: the emphasis around '" + r.text.substr(0, 40) + "' gives a weight of " +
                         std::to_string(r.weight) + ", beyond what a weight can be; use weights like (word:1.3)");
      }
    }
  }
  // neighbours of equal weight merge (in place: one pass)
  void merge_equal_neighbours() {
    std::size_t kept = 0;
    for (std::size_t k = 1; k < res_.size(); ++k) {
      if (res_[k].weight == res_[kept].weight) {
        res_[kept].text += res_[k].text;
      } else if (++kept != k) {
        res_[kept] = std::move(res_[k]);
      }
    }
    res_.resize(kept + 1);
  }

  const std::u32string s_;
  std::size_t i_ = 0;
  std::vector<WeightedText> res_;
  std::vector<std::size_t> round_, square_;
};

}  // namespace

std::vector<WeightedText> parse_prompt_attention(const std::string& prompt) { return AttentionParser(prompt).parse(); }

std::string plain_prompt(const std::string& prompt) {
  std::string out;
  for (const auto& part : parse_prompt_attention(prompt)) out += part.weight == -1 && part.text == "BREAK" ? " " : part.text;
  return out;
}

namespace {

// A tag's arguments, split at every ':' (A1111's args.split(":")).
std::vector<std::string> split_colons(const std::string& args) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (true) {
    const auto colon = args.find(':', start);
    items.push_back(args.substr(start, colon - start));
    if (colon == std::string::npos) return items;
    start = colon + 1;
  }
}

}  // namespace

ExtraNetworks parse_extra_networks(const std::string& prompt) {
  const std::u32string s = text::utf8_to_u32(prompt);
  ExtraNetworks out;
  std::u32string kept, tidy;
  std::size_t i = 0;
  while (i < s.size()) {
    // <(\w+):([^>]+)>
    if (s[i] == '<') {
      std::size_t j = i + 1;
      while (j < s.size() && is_word_char(s[j])) ++j;
      if (j > i + 1 && j < s.size() && s[j] == ':') {
        std::size_t k = j + 1;
        while (k < s.size() && s[k] != '>') ++k;
        if (k > j + 1 && k < s.size()) {
          const std::string type = text::u32_to_utf8(s.substr(i + 1, j - i - 1));
          const std::string args = text::u32_to_utf8(s.substr(j + 1, k - j - 1));
          const auto items = split_colons(args);
          auto group = std::find_if(out.tags.begin(), out.tags.end(),
                                    [&](const auto& g) { return g.first == type; });
          if (group == out.tags.end()) {
            out.tags.push_back({type, {}});
            group = out.tags.end() - 1;
          }
          group->second.push_back(items);
          i = k + 1;
          if (tidy.empty() || is_py_space(tidy.back())) {
            while (i < s.size() && is_py_space(s[i])) kept += s[i++];
          }
          if (i == s.size()) {
            while (!tidy.empty() && is_py_space(tidy.back())) tidy.pop_back();
          }
          continue;
        }
      }
    }
    kept += s[i];
    tidy += s[i];
    ++i;
  }
  out.prompt_without_tags = text::u32_to_utf8(kept);
  out.prompt_for_encoders = text::u32_to_utf8(tidy);
  auto number = [](const std::string& v, LoraTag& tag) {
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(d)) {
      tag.error = "prompt: <lora:" + tag.name + ":...> has the weight '" + v + "', which is not a " +
                  (v.empty() || end != v.c_str() + v.size() ? "number" : "finite number") + "; write e.g. <lora:" +
                  tag.name + ":0.8>";
      return 1.0;
    }
    return d;
  };
  for (const auto& [type, entries] : out.tags) {
    if (type != "lora" && type != "lyco") continue;
    for (const auto& items : entries) {
      std::vector<std::string> positional;
      std::map<std::string, std::string> named;
      for (const auto& item : items) {
        auto eq = item.find('=');
        if (eq == std::string::npos) {
          positional.push_back(item);
        } else {
          named[item.substr(0, eq)] = item.substr(eq + 1);
        }
      }
      LoraTag tag;
      tag.name = positional.empty() ? "" : positional[0];
      if (positional.size() > 1) tag.weight_text = positional[1];
      tag.te_multiplier = positional.size() > 1 ? number(positional[1], tag) : 1.0;
      if (named.count("te")) tag.te_multiplier = number(named["te"], tag);
      tag.unet_multiplier = positional.size() > 2 ? number(positional[2], tag) : tag.te_multiplier;
      if (named.count("unet")) tag.unet_multiplier = number(named["unet"], tag);
      out.loras.push_back(tag);
    }
  }
  return out;
}

PromptChunks tokenize_prompt(const ClipTokenizer& tokenizer, const std::string& prompt,
                             const std::vector<TokenEmbedding>& embeddings) {
  const auto parsed = parse_prompt_attention(prompt);
  PromptChunks out;
  std::vector<int32_t> tokens;
  std::vector<float> mults;
  std::vector<EmbeddingFix> fixes;
  int last_comma = -1;
  // the longest embedding name starting at `at` of `ids` (-1: none)
  auto embedding_at = [&](const std::vector<int32_t>& ids, std::size_t at) {
    int best = -1;
    for (std::size_t e = 0; e < embeddings.size(); ++e) {
      const auto& name = embeddings[e].name_ids;
      if (name.empty() || at + name.size() > ids.size() || !std::equal(name.begin(), name.end(), ids.begin() + static_cast<std::ptrdiff_t>(at))) continue;
      if (best < 0 || name.size() > embeddings[static_cast<std::size_t>(best)].name_ids.size()) best = static_cast<int>(e);
    }
    return best;
  };
  auto next_chunk = [&](bool is_last) {
    if (out.ids.size() >= kMaxPromptChunks) {
      // A1111 has no cap; 150 chunks (11,250 tokens) is far past any use, and each costs a text-encoder pass
      throw InputError("prompt: more than " + std::to_string(kMaxPromptChunks) + " chunks of 75 tokens (" +
                       std::to_string(kMaxPromptChunks * kChunkTokens) + " tokens, each BREAK starting a chunk); shorten it");
    }
    out.token_count += is_last ? static_cast<int>(tokens.size()) : kChunkTokens;
    std::array<int32_t, 77> ids{};
    std::array<float, 77> m{};
    ids[0] = tokenizer.bos();
    m[0] = 1.0f;
    for (int k = 0; k < kChunkTokens; ++k) {
      const bool real = k < static_cast<int>(tokens.size());
      ids[k + 1] = real ? tokens[k] : tokenizer.eos();
      m[k + 1] = real ? mults[k] : 1.0f;
    }
    ids[76] = tokenizer.eos();
    m[76] = 1.0f;
    out.ids.push_back(ids);
    out.multipliers.push_back(m);
    out.fixes.push_back(fixes);
    tokens.clear();
    mults.clear();
    fixes.clear();
    last_comma = -1;
  };
  for (const auto& frag : parsed) {
    if (frag.text == "BREAK" && frag.weight == -1) {
      next_chunk(false);
      continue;
    }
    const auto frag_ids = tokenizer.encode(frag.text);
    for (std::size_t position = 0; position < frag_ids.size();) {
      const int32_t token = frag_ids[position];
      if (token == tokenizer.comma()) {
        last_comma = static_cast<int>(tokens.size());
      } else if (static_cast<int>(tokens.size()) == kChunkTokens && last_comma != -1 &&
                 kChunkTokens - last_comma <= 20) {
        const std::size_t cut = static_cast<std::size_t>(last_comma) + 1;
        std::vector<int32_t> moved_t(tokens.begin() + cut, tokens.end());
        std::vector<float> moved_m(mults.begin() + cut, mults.end());
        std::vector<EmbeddingFix> moved_f;  // embeddings in the moved part move with it
        for (auto it = fixes.begin(); it != fixes.end();) {
          if (static_cast<std::size_t>(it->position - 1) >= cut) {
            moved_f.push_back({it->position - static_cast<int>(cut), it->embedding});
            it = fixes.erase(it);
          } else {
            ++it;
          }
        }
        tokens.resize(cut);
        mults.resize(cut);
        next_chunk(false);
        tokens = moved_t;
        mults = moved_m;
        fixes = moved_f;
      }
      if (static_cast<int>(tokens.size()) == kChunkTokens) next_chunk(false);
      const int e = embedding_at(frag_ids, position);
      if (e < 0) {
        tokens.push_back(token);
        mults.push_back(static_cast<float>(frag.weight));
        ++position;
        continue;
      }
      const int n = std::min(embeddings[static_cast<std::size_t>(e)].vectors, kChunkTokens);
      if (static_cast<int>(tokens.size()) + n > kChunkTokens) next_chunk(false);
      fixes.push_back({static_cast<int>(tokens.size()) + 1, e});  // + 1: after BOS
      tokens.insert(tokens.end(), static_cast<std::size_t>(n), 0);
      mults.insert(mults.end(), static_cast<std::size_t>(n), static_cast<float>(frag.weight));
      position += embeddings[static_cast<std::size_t>(e)].name_ids.size();
    }
  }
  if (!tokens.empty() || out.ids.empty()) next_chunk(true);
  return out;
}

void pad_with_zeros_after_eos(PromptChunks& chunks, int32_t eos) {
  for (auto& ids : chunks.ids) {
    bool seen = false;
    for (auto& id : ids) {
      if (seen) id = 0;
      if (id == eos) seen = true;
    }
  }
}

}  // namespace fp8s
