// A1111's prompt syntax: emphasis `(x)`, `[x]`, `(x:1.3)`, escapes, BREAK; `<lora:NAME:W>` tags;
// and the SD 77-token windows with per-token weights (clip/README.md is the contract).
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "text/clip_tokenizer.h"

namespace fp8s {

struct WeightedText {
  std::string text;
  double weight = 1.0;  // exactly -1 with text "BREAK" marks a chunk break
};

// A1111 `parse_prompt_attention`. Throws InputError for an unparsable weight such as `(a:1.3.4)`.
std::vector<WeightedText> parse_prompt_attention(const std::string& prompt);
// The prompt as a text encoder without per-token weights reads it (T5, Qwen3, Mistral): the
// emphasis markup removed, BREAK a space.
std::string plain_prompt(const std::string& prompt);

struct LoraTag {
  std::string name;
  double te_multiplier = 1.0;
  double unet_multiplier = 1.0;
  std::optional<std::string> weight_text;  // the first weight as written (A1111's `loras` list)
  std::string error;  // non-empty when a weight is not a number (reported when the tag is used)
};

struct ExtraNetworks {
  std::string prompt_without_tags;  // A1111's: the tags cut out, the spaces around them kept
  // What the text encoders read: also without the space a tag leaves at either end of the prompt
  // or doubled between two words ("a photo <lora:x:1>" -> "a photo"), which CLIP and T5 drop
  // anyway and a Qwen or Mistral tokenizer would read as a token.
  std::string prompt_for_encoders;
  std::vector<LoraTag> loras;  // `lora` and `lyco` tags, grouped by type in order of appearance
  std::vector<std::pair<std::string, std::vector<std::vector<std::string>>>> tags;  // type -> args
};

// Removes `<type:args>` tags (A1111 `extra_networks.parse_prompt`). A LoRA weight that is not a
// number leaves the tag's `error` set rather than throwing: callers report it when they apply it.
ExtraNetworks parse_extra_networks(const std::string& prompt);

constexpr int kChunkTokens = 75;
// The most 75-token chunks a prompt may take (tokenize_prompt refuses more).
constexpr std::size_t kMaxPromptChunks = 150;

// A textual-inversion embedding as the tokenizer sees it: its name's token ids and how many
// vectors (tokens of a chunk) it takes.
struct TokenEmbedding {
  std::vector<int32_t> name_ids;
  int vectors = 1;
};

// An embedding placed in a chunk: its vectors start at `position` of the 77-token window.
struct EmbeddingFix {
  int position = 0;
  int embedding = 0;  // index into the list given to tokenize_prompt
};

struct PromptChunks {
  std::vector<std::array<int32_t, 77>> ids;
  std::vector<std::array<float, 77>> multipliers;
  std::vector<std::vector<EmbeddingFix>> fixes;  // per chunk
  int token_count = 0;  // A1111's counter
};

// A1111 `tokenize_line`: windows of BOS + 75 ids + EOS padded with `pad_id`, comma backtracking
// of 20 tokens, BREAK; every fragment is tokenized on its own.
// `embeddings`: where their names' token ids appear, their vectors take as many places (token id 0
// there), moved whole to the next chunk when they do not fit (A1111's embedding fixes).
PromptChunks tokenize_prompt(const ClipTokenizer& tokenizer, const std::string& prompt,
                             const std::vector<TokenEmbedding>& embeddings = {});
// open_clip padding: every id after the first EOS of each chunk becomes 0 (SDXL's CLIP-G).
void pad_with_zeros_after_eos(PromptChunks& chunks, int32_t eos);

}  // namespace fp8s
