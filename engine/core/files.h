// Small file-system helpers the vocabulary finders share (CLIP BPE, T5 Unigram).
#pragma once

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

}  // namespace fp8s
