// Textual-inversion embeddings (A1111's modules/textual_inversion): `.safetensors` files in the
// embeddings folder whose file stem, written in a prompt, stands for their vectors. SD1 files hold
// `emb_params` or `string_to_param.*` ([n, 768]); SDXL files `clip_l` [n, 768] and `clip_g`
// [n, 1280]. Pickled `.pt`/`.bin` embeddings are refused. Vectors stay FP32.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

namespace fp8s {

struct TextualInversion {
  std::string name;   // the file stem: the word in the prompt
  std::string path;
  std::string hash;   // sha256 of the file, first 12 hex digits (A1111's "TI hashes")
  at::Tensor clip_l;  // [n, 768] (SD1: the only one)
  at::Tensor clip_g;  // [n, 1280] (SDXL), undefined for SD1 files
  int vectors() const { return static_cast<int>(clip_l.size(0)); }
};

class EmbeddingLibrary {
 public:
  explicit EmbeddingLibrary(std::string folder) : folder_(std::move(folder)) {}
  // The embeddings whose names are words of `texts` (loaded on first use and kept), checked
  // against the text encoders' widths (`widths[0]` CLIP-L, `widths[1]` CLIP-G for SDXL). Throws
  // InputError for a pickled file, an unreadable one or one of another model's width.
  std::vector<const TextualInversion*> used_by(const std::vector<std::string>& texts, const std::vector<int>& widths);
  const std::string& folder() const { return folder_; }

 private:
  std::string folder_;
  std::map<std::string, TextualInversion> loaded_;  // by path
};

// Reads one embedding file (InputError naming it when it is not one).
TextualInversion read_embedding(const std::string& path);
// `TI hashes: "name: hash, ..."` for the infotext ("" when none).
std::string ti_hashes_field(const std::vector<const TextualInversion*>& used);

}  // namespace fp8s
