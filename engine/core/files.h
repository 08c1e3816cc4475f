// Small file-system helpers the vocabulary finders share (CLIP BPE, T5 Unigram).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace fp8s {

bool is_file(const std::string& p);
bool is_dir(const std::string& p);
std::string dirname_of(const std::string& p);
// The names (not paths) of the entries of `dir` whose names end in `suffix`, sorted; empty when it
// cannot be read.
std::vector<std::string> names_in(const std::string& dir, const std::string& suffix);
// The names (not paths) of the .safetensors files in `dir`, sorted; empty when it cannot be read.
std::vector<std::string> safetensors_in(const std::string& dir);
// InputError when `path` exists but is not a regular file (a FIFO, a device, a socket, a folder):
// opening a FIFO for reading blocks until a writer comes, so it is refused before open().
void refuse_special_file(const std::string& path);
// The whole file; InputError naming it when it cannot be read or is not a regular file.
std::string read_file(const std::string& path);
// The per-user and installed data folders for `sub` (e.g. "clip"): $XDG_DATA_HOME/fp8studio/sub
// (or ~/.local/share/fp8studio/sub), then <prefix>/share/fp8studio/sub.
std::vector<std::string> data_dirs(const std::string& sub);

// Where a tokenizer or vocabulary is looked for: the explicit path; beside the model, its diffusers
// folder's `folder` when the model is a folder, then each of `beside` next to the model file; $`env`;
// the data folders of `data` (data_dirs).
struct VocabularySearch {
  std::string name;                 // "Qwen tokenizer (tokenizer.json)"
  std::string folder;               // a diffusers model folder's: "tokenizer"
  std::vector<std::string> beside;  // {"qwen_tokenizer", "tokenizer"}
  std::string env;                  // "FP8S_QWEN_TOKENIZER"
  std::string data;                 // "qwen"
  std::string hint;                 // "Get ... and pass --qwen-tokenizer PATH"
};
// The first path of the search that `holds`. MissingVocabulary naming the explicit path when it does
// not hold it; else naming every path looked in, the hint and the data folder to put it in.
std::string find_vocabulary(const VocabularySearch& search, const std::string& explicit_path, const std::string& model,
                            const std::function<bool(const std::string&)>& holds);

}  // namespace fp8s
