// The demo model's own CLIP-format vocabulary: vocab.json + merges.txt built from the grammar's
// words, so the ordinary CLIP BPE tokenizer reads it (BOS and EOS are the last two ids).
#pragma once

#include <string>
#include <vector>

namespace fp8s::demo {

// Writes `dir`/vocab.json and `dir`/merges.txt. Every byte symbol is in the vocabulary (any text
// tokenizes); each grammar word is built by merges, left to right. Returns the vocabulary size.
int write_vocabulary(const std::string& dir, const std::vector<std::string>& words);

}  // namespace fp8s::demo
