#include "text/text_clean.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstring>

namespace fp8s::text {
namespace {

struct Entity {
  const char* name;
  const char* text;
};
const Entity kEntities[] = {
#include "text/html_entities.inc"
};

const char* find_entity(const std::string& name) {
  auto it = std::lower_bound(std::begin(kEntities), std::end(kEntities), name,
                             [](const Entity& e, const std::string& n) { return std::strcmp(e.name, n.c_str()) < 0; });
  if (it != std::end(kEntities) && name == it->name) return it->text;
  return nullptr;
}

bool is_ascii_alnum(char32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// cp1252 bytes 0x80-0x9F ("sloppy": undefined bytes stay as the C1 code point).
char32_t cp1252_c1(char32_t c) {
  static const char32_t table[32] = {
      0x20AC, 0x81,   0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
      0x2039, 0x0152, 0x8D,   0x017D, 0x8F,   0x90,   0x2018, 0x2019, 0x201C, 0x201D, 0x2022,
      0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D,   0x017E, 0x0178};
  return table[c - 0x80];
}

std::u32string normalize(const std::u32string& s, int options) {
  const std::string in = u32_to_utf8(s);
  utf8proc_uint8_t* out = nullptr;
  auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(in.c_str()),
                        static_cast<utf8proc_ssize_t>(in.size()), &out,
                        static_cast<utf8proc_option_t>(options | UTF8PROC_STABLE));
  if (n < 0) return s;
  std::string r(reinterpret_cast<char*>(out), static_cast<std::size_t>(n));
  std::free(out);
  return utf8_to_u32(r);
}

bool is_ligature(char32_t c) {
  static const char32_t lig[] = {0x0132, 0x0133, 0x0149, 0x01C4, 0x01C5, 0x01C6, 0x01C7,
                                 0x01C8, 0x01C9, 0x01CA, 0x01CB, 0x01CC, 0x01F1, 0x01F2,
                                 0x01F3, 0xFB00, 0xFB01, 0xFB02, 0xFB03, 0xFB04, 0xFB05, 0xFB06};
  return std::find(std::begin(lig), std::end(lig), c) != std::end(lig);
}

bool is_deleted_control(char32_t c) {
  return c <= 0x08 || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
         (c >= 0x206A && c <= 0x206F) || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFC);
}

// ftfy's unescape_html for one line segment: `&name;` references of the HTML5 table, plus the
// upper-case spellings of single-letter Latin ones (`&EACUTE;` -> `É`).
std::u32string unescape_semicolon_entities(const std::u32string& s) {
  std::u32string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '&') {
      std::size_t j = i + 1;
      while (j < s.size() && j - i <= 32 && (is_ascii_alnum(s[j]) || s[j] == '#')) ++j;
      if (j < s.size() && s[j] == ';' && j > i + 1 && s[i + 1] != '#') {
        std::string name(s.begin() + i + 1, s.begin() + j);
        const char* text = find_entity(name + ";");
        if (!text) {
          std::string lowered = name;
          std::transform(lowered.begin(), lowered.end(), lowered.begin(), ::tolower);
          const bool upper = std::all_of(name.begin(), name.end(), [](char c) { return !std::islower(static_cast<unsigned char>(c)); });
          if (upper && lowered != name) {
            if (const char* t = find_entity(lowered + ";")) {
              auto u = utf8_to_u32(t);
              if (u.size() == 1 && u[0] < 0x250) {
                out += static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(u[0])));
                i = j;
                continue;
              }
            }
          }
        }
        if (text) {
          out += utf8_to_u32(text);
          i = j;
          continue;
        }
      }
    }
    out += s[i];
  }
  return out;
}

std::u32string fix_segment(std::u32string s, bool unescape) {
  if (unescape) s = unescape_semicolon_entities(s);
  std::u32string t;
  for (std::size_t i = 0; i < s.size(); ++i) {
    // Terminal escapes ESC [ digits/; letter
    if (s[i] == 0x1B && i + 1 < s.size() && s[i + 1] == '[') {
      std::size_t j = i + 2;
      while (j < s.size() && ((s[j] >= '0' && s[j] <= '9') || s[j] == ';')) ++j;
      if (j < s.size() && s[j] < 0x80 && std::isalpha(static_cast<int>(s[j]))) {
        i = j;
        continue;
      }
    }
    t += s[i];
  }
  std::u32string u;
  for (char32_t c : t) {
    if (c >= 0x80 && c <= 0x9F) c = cp1252_c1(c);
    if (c == 0xFB05) {  // ftfy's table keeps the long s: ﬅ -> ſt (NFKC would give "st")
      u += U"\u017Ft";
      continue;
    }
    if (is_ligature(c)) {
      u += normalize(std::u32string(1, c), UTF8PROC_COMPAT | UTF8PROC_COMPOSE);
      continue;
    }
    if (c == 0x3000) c = ' ';
    if (c >= 0xFF01 && c <= 0xFFEF) {
      u += normalize(std::u32string(1, c), UTF8PROC_COMPAT | UTF8PROC_COMPOSE);
      continue;
    }
    if (c == 0x02BC || (c >= 0x2018 && c <= 0x201B)) c = '\'';
    if (c >= 0x201C && c <= 0x201F) c = '"';
    u += c;
  }
  std::u32string v;
  for (std::size_t i = 0; i < u.size(); ++i) {
    char32_t c = u[i];
    if (c == '\r') {
      if (i + 1 < u.size() && u[i + 1] == '\n') ++i;
      c = '\n';
    }
    if (c == 0x2028 || c == 0x2029 || c == 0x85) c = '\n';
    if (is_deleted_control(c)) continue;
    v += c;
  }
  return normalize(v, UTF8PROC_COMPOSE);
}

}  // namespace

std::u32string utf8_to_u32(const std::string& s) {
  std::u32string out;
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    auto n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) {
      out += U'\uFFFD';
      n = 1;
    } else {
      out += static_cast<char32_t>(cp);
    }
    p += n;
    left -= n;
  }
  return out;
}

std::string u32_to_utf8(const std::u32string& s) {
  std::string out;
  utf8proc_uint8_t buf[4];
  for (char32_t c : s) {
    auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
    out.append(reinterpret_cast<char*>(buf), static_cast<std::size_t>(n));
  }
  return out;
}

std::u32string fix_text(const std::u32string& s) {
  // ftfy fixes each line segment (ending after '\n') separately; HTML unescaping stops for good at
  // the first segment containing '<'. Repeat until nothing changes.
  std::u32string current = s;
  for (int round = 0; round < 4; ++round) {
    std::u32string out;
    bool unescape = true;
    std::size_t start = 0;
    while (start < current.size()) {
      std::size_t end = current.find(U'\n', start);
      end = end == std::u32string::npos ? current.size() : end + 1;
      std::u32string seg = current.substr(start, end - start);
      if (seg.find(U'<') != std::u32string::npos) unescape = false;
      out += fix_segment(seg, unescape);
      start = end;
    }
    if (out == current) break;
    current = out;
  }
  return current;
}

std::u32string html_unescape(const std::u32string& s) {
  std::u32string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    if (s[i + 1] == '#') {
      std::size_t j = i + 2;
      const bool hex = j < s.size() && (s[j] == 'x' || s[j] == 'X');
      if (hex) ++j;
      const std::size_t digits_start = j;
      while (j < s.size() && (hex ? std::isxdigit(static_cast<int>(s[j] < 128 ? s[j] : 0)) : (s[j] >= '0' && s[j] <= '9'))) ++j;
      if (j == digits_start) {
        out += s[i];
        continue;
      }
      std::string digits(s.begin() + digits_start, s.begin() + j);
      unsigned long long v = digits.size() > 8 ? 0x110000ull : std::stoull(digits, nullptr, hex ? 16 : 10);
      // Python's html: cp1252 for 0x80-0x9F (and U+FFFD for 0), U+FFFD for surrogates and
      // out-of-range values, nothing for the invalid code points, the character otherwise.
      if (v >= 0x80 && v <= 0x9F) {
        out += cp1252_c1(static_cast<char32_t>(v));
      } else if (v == 0 || (v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF) {
        out += U'\uFFFD';
      } else {
        const bool invalid = (v >= 0x1 && v <= 0x8) || (v >= 0xE && v <= 0x1F) || v == 0x7F ||
                             (v >= 0xFDD0 && v <= 0xFDEF) || v == 0xB || (v & 0xFFFE) == 0xFFFE;
        if (!invalid) out += static_cast<char32_t>(v);
      }
      if (j < s.size() && s[j] == ';') ++j;
      i = j - 1;
      continue;
    }
    // named: up to 32 characters other than whitespace, '<', '&', '#', ';', optionally ';'
    std::size_t j = i + 1;
    while (j < s.size() && j - (i + 1) < 32 && s[j] != '\t' && s[j] != '\n' && s[j] != '\f' &&
           s[j] != ' ' && s[j] != '<' && s[j] != '&' && s[j] != '#' && s[j] != ';') {
      ++j;
    }
    if (j == i + 1) {
      out += s[i];
      continue;
    }
    if (j < s.size() && s[j] == ';') ++j;
    const std::string name = u32_to_utf8(s.substr(i + 1, j - i - 1));
    if (const char* t = find_entity(name)) {
      out += utf8_to_u32(t);
      i = j - 1;
      continue;
    }
    bool replaced = false;
    for (std::size_t x = name.size() - 1; x > 1; --x) {
      if (const char* t = find_entity(name.substr(0, x))) {
        out += utf8_to_u32(t) + utf8_to_u32(name.substr(x));
        replaced = true;
        break;
      }
    }
    if (!replaced) out += U'&' + utf8_to_u32(name);
    i = j - 1;
  }
  return out;
}

bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::u32string strip(const std::u32string& s) {
  auto py_space = [](char32_t c) { return is_whitespace(c) || (c >= 0x1C && c <= 0x1F); };
  std::size_t b = 0, e = s.size();
  while (b < e && py_space(s[b])) ++b;
  while (e > b && py_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::u32string collapse_whitespace(const std::u32string& s) {
  std::u32string out;
  bool in_space = false;
  for (char32_t c : s) {
    if (is_whitespace(c)) {
      if (!in_space) out += U' ';
      in_space = true;
    } else {
      out += c;
      in_space = false;
    }
  }
  return strip(out);
}

bool is_letter(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}

bool is_number(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO;
}

std::u32string lower(const std::u32string& s) {
  std::u32string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char32_t c = s[i];
    if (c == 0x0130) {  // İ -> i + combining dot above
      out += U"i\u0307";
      continue;
    }
    if (c == 0x03A3) {  // final sigma: after a letter and not before one
      const bool after = i > 0 && is_letter(s[i - 1]);
      const bool before = i + 1 < s.size() && is_letter(s[i + 1]);
      out += (after && !before) ? char32_t(0x03C2) : char32_t(0x03C3);
      continue;
    }
    out += static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
  }
  return out;
}

std::u32string clean_for_clip(const std::string& utf8) {
  auto s = fix_text(utf8_to_u32(utf8));
  s = strip(html_unescape(html_unescape(s)));
  s = collapse_whitespace(s);
  return lower(s);
}

}  // namespace fp8s::text
