// A FolderRenamer's work (io/safetensors.h): a folder's tensors in diffusers' names read as a
// released file's. Each released tensor is built from diffusers' tensors concatenated along dim 0
// (diffusers keeps a fused q/k/v as three), its weight and its bias where they exist (an RMSNorm's
// released "scale" from diffusers' "weight"); a tensor nothing used keeps its name (and a load
// refuses it by name). LibTorch-free.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace fp8s {

class FolderRenaming {
 public:
  explicit FolderRenaming(const std::map<std::string, TensorRecord>& tensors) : tensors_(tensors) {}
  // `to`.weight / .bias (a name ending "_norm": `to`.scale) from `from`'s, concatenated.
  void add(const std::string& to, const std::vector<std::string>& from);
  // `to`.weight / .bias from `from`'s with its two row halves swapped (diffusers' norm_out is
  // (scale, shift), BFL's final adaLN (shift, scale)).
  void add_swapped(const std::string& to, const std::string& from);
  // The N of every tensor "<head>N<tail>".
  std::vector<std::string> indices(const std::string& head, const std::string& tail) const;
  // What was added, then every tensor not used under its own name.
  std::vector<FolderTensor> finish();

 private:
  const std::map<std::string, TensorRecord>& tensors_;
  std::vector<FolderTensor> out_;
  std::set<std::string> used_;
};

}  // namespace fp8s
