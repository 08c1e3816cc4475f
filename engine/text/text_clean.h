// Text clean-up before CLIP tokenization: the parts of ftfy.fix_text that change tokens, Python's
// html.unescape, Unicode whitespace folding and Python's str.lower() (clip/README.md, steps 1-4).
#pragma once

#include <string>


namespace fp8s::text {

std::u32string utf8_to_u32(const std::string& s);  // invalid bytes become U+FFFD
std::string u32_to_utf8(const std::u32string& s);

// ftfy.fix_text's repairs with default options, except mojibake re-decoding (not ported).
std::u32string fix_text(const std::u32string& s);
// Python's html.unescape (lenient: `&amp` without `;` too).
std::u32string html_unescape(const std::u32string& s);
bool is_whitespace(char32_t c);  // Unicode White_Space (the `regex` module's \s)
// `\s+` -> one space, then strip (Python str.strip()).
std::u32string collapse_whitespace(const std::u32string& s);
std::u32string strip(const std::u32string& s);
// Python's str.lower() (full case mapping for U+0130 and final sigma).
std::u32string lower(const std::u32string& s);
bool is_letter(char32_t c);  // \p{L}
bool is_number(char32_t c);  // \p{N}

// The whole clean-up: fix_text, html.unescape twice, strip, whitespace folding, lower-case.
std::u32string clean_for_clip(const std::string& utf8);

}  // namespace fp8s::text
