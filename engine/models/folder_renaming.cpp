#include "models/folder_renaming.h"

#include "core/strings.h"

namespace fp8s {

void FolderRenaming::add(const std::string& to, const std::vector<std::string>& from) {
  const bool norm = ends_with(to, "_norm");
  for (const std::string kind : {"weight", "bias"}) {
    FolderTensor ft{to + "." + (norm ? std::string("scale") : kind), {}, {}};
    for (const auto& f : from) {
      const auto it = tensors_.find(f + "." + kind);
      if (it == tensors_.end()) break;
      if (ft.shape.empty()) ft.shape = it->second.shape, ft.shape[0] = 0;
      ft.shape[0] += it->second.shape.at(0);
      ft.sources.push_back({it->first, 0, -1});
    }
    if (ft.sources.size() != from.size()) continue;
    for (const auto& src : ft.sources) used_.insert(src.name);
    out_.push_back(std::move(ft));
    if (norm) break;
  }
}

void FolderRenaming::add_swapped(const std::string& to, const std::string& from) {
  for (const char* kind : {".weight", ".bias"}) {
    const auto it = tensors_.find(from + kind);
    if (it == tensors_.end()) continue;
    const int64_t half = it->second.shape.at(0) / 2;
    out_.push_back({to + kind, it->second.shape, {{it->first, half, half}, {it->first, 0, half}}});
    used_.insert(it->first);
  }
}

std::vector<std::string> FolderRenaming::indices(const std::string& head, const std::string& tail) const {
  std::vector<std::string> n;
  for (const auto& [name, t] : tensors_) {
    if (starts_with(name, head) && ends_with(name, tail) && name.size() > head.size() + tail.size()) {
      n.push_back(name.substr(head.size(), name.size() - head.size() - tail.size()));
    }
  }
  return n;
}

std::vector<FolderTensor> FolderRenaming::finish() {
  for (const auto& [name, t] : tensors_) {
    if (!used_.count(name)) out_.push_back({name, t.shape, {{name, 0, -1}}});
  }
  return std::move(out_);
}

}  // namespace fp8s
