// A model folder opened as one safetensors file (io/safetensors.h): diffusers' and transformers'
// layouts, a component's weights in shards listed by *.safetensors.index.json, under the names the
// registered FolderRenamers give them.
#include <fstream>
#include <iterator>
#include <map>
#include <atomic>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/files.h"
#include "core/strings.h"
#include "io/safetensors.h"

namespace fp8s {
namespace {

std::atomic<std::vector<FolderRenamer> (*)()> g_renamer_source{nullptr};

// The shard files of a component folder: those its index names, else its .safetensors files; and
// the index (its path, and each tensor's shard) to check against what the shards hold.
struct Shards {
  std::vector<std::string> files;
  std::string index;
  std::map<std::string, std::string> weight_map;
};

Shards shard_files(const std::string& dir) {
  const std::vector<std::string> indexes = names_in(dir, ".safetensors.index.json");
  std::vector<std::string> files;
  for (const auto& n : safetensors_in(dir)) {
    if (is_file(dir + "/" + n)) files.push_back(n);
  }
  if (indexes.size() > 1) {
    throw InputError(dir + ": holds " + std::to_string(indexes.size()) +
                     " *.safetensors.index.json files; keep one model's weights per folder");
  }
  if (indexes.empty()) {
    if (files.empty()) {
      throw InputError(dir + ": a folder without .safetensors files; pass a model file, or a diffusers model folder "
                       "(model_index.json with transformer/, text_encoder/ and vae/)");
    }
    if (files.size() > 1) {
      throw InputError(dir + ": holds " + std::to_string(files.size()) +
                       " .safetensors files and no *.safetensors.index.json to say which belong together; pass one file");
    }
    return {{dir + "/" + files[0]}, {}, {}};
  }
  const std::string index = dir + "/" + indexes[0];
  nlohmann::json j;
  try {
    std::ifstream in(index);
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw InputError(index + ": not a valid index (" + std::string(e.what()) + ")");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    throw InputError(index + ": has no weight_map; is it a safetensors index?");
  }
  std::set<std::string> shards;
  Shards out;
  out.index = index;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw InputError(index + ": weight_map entry '" + name + "' is not a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
      throw InputError(index + ": weight_map names '" + f + "', not a file in this folder");
    }
    shards.insert(f);
    out.weight_map[name] = f;
  }
  for (const auto& sh : shards) {
    if (!is_file(dir + "/" + sh)) throw InputError(index + ": names the shard " + sh + ", which is missing; download it again");
    out.files.push_back(dir + "/" + sh);
  }
  if (out.files.empty()) throw InputError(index + ": its weight_map is empty");
  return out;
}

}  // namespace

void set_folder_renamer_source(std::vector<FolderRenamer> (*source)()) { g_renamer_source.store(source); }

void SafetensorsFile::open_folder(const std::string& dir) {
  if (is_file(dir + "/model_index.json")) {  // a whole pipeline: its denoiser
    for (const char* sub : {"transformer", "unet"}) {
      if (is_dir(dir + "/" + sub)) {
        open_folder(dir + "/" + sub);
        path_ = dir;
        return;
      }
    }
    throw InputError(dir + ": a diffusers model folder without transformer/ or unet/; is the download complete?");
  }
  const Shards shards = shard_files(dir);
  for (const auto& shard : shards.files) parts_.push_back(std::make_unique<SafetensorsFile>(shard));
  // the index against the shards: a tensor it places in a shard that lacks it is named here, not
  // later as a missing part of the model (or a tokenizer) the family then looks for
  if (!shards.index.empty()) {
    std::map<std::string, const SafetensorsFile*> by_file;
    for (std::size_t i = 0; i < parts_.size(); ++i) by_file[shards.files[i].substr(dir.size() + 1)] = parts_[i].get();
    for (const auto& [name, file] : shards.weight_map) {
      const SafetensorsFile* part = by_file.at(file);
      if (!part->find(name)) {
        throw InputError(shards.index + ": places tensor '" + name + "' in " + file + ", which does not hold it (" +
                         std::to_string(part->tensors().size()) +
                         " tensors); the index and the shards are from different downloads: download the folder again");
      }
    }
  }
  std::vector<FolderRenamer> renamers;
  if (const auto source = g_renamer_source.load()) renamers = source();
  assemble(dir, renamers);
  // the folder's configuration (diffusers' and transformers' config.json) as its metadata
  if (is_file(dir + "/config.json")) {
    std::ifstream in(dir + "/config.json");
    index_.metadata["config.json"] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  path_ = dir;
}

SafetensorsFile SafetensorsFile::renamed(const std::string& path, const FolderRenamer& rename) {
  SafetensorsFile f;
  f.parts_.push_back(std::make_unique<SafetensorsFile>(path));
  f.assemble(path, {rename});
  f.path_ = path;
  return f;
}

void SafetensorsFile::assemble(const std::string& dir, const std::vector<FolderRenamer>& renamers) {
  // the parts' tensors by name
  std::map<std::string, TensorRecord> tensors;
  std::map<std::string, std::size_t> part_of;
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    const auto& part = *parts_[i];
    for (const auto& t : part.tensors()) {
      if (!tensors.emplace(t.name, t).second) {
        throw InputError(dir + ": tensor '" + t.name + "' is in two shards; the folder is inconsistent");
      }
      part_of[t.name] = i;
    }
    for (const auto& [k, v] : part.metadata()) index_.metadata.emplace(k, v);
  }
  std::optional<std::vector<FolderTensor>> layout;
  for (const auto& renamer : renamers) {
    if (renamer && (layout = renamer(tensors))) break;
  }
  if (!layout) {
    layout.emplace();
    for (const auto& [name, t] : tensors) layout->push_back({name, t.shape, {{name, 0, -1}}});
  }
  uint64_t offset = 0;
  for (const auto& ft : *layout) {
    TensorRecord r;
    r.name = ft.name;
    r.shape = ft.shape;
    std::vector<Piece> pieces;
    bool first = true;
    for (const auto& src : ft.sources) {
      const auto it = tensors.find(src.name);
      if (it == tensors.end()) throw InputError(dir + ": has no tensor '" + src.name + "' (needed for '" + ft.name + "')");
      TensorRecord piece = it->second;
      const int64_t total_rows = piece.shape.empty() ? 1 : piece.shape[0];
      const int64_t rows = src.rows < 0 ? total_rows : src.rows;
      if (src.row_start < 0 || rows < 0 || src.row_start + rows > total_rows) {
        throw InputError(dir + ": tensor '" + src.name + "' has " + std::to_string(total_rows) + " rows, fewer than '" +
                         ft.name + "' takes from it");
      }
      if (rows != total_rows) {
        const uint64_t row_bytes = piece.nbytes() / static_cast<uint64_t>(std::max<int64_t>(1, total_rows));
        piece.begin += static_cast<uint64_t>(src.row_start) * row_bytes;
        piece.end = piece.begin + static_cast<uint64_t>(rows) * row_bytes;
        piece.shape[0] = rows;
      }
      if (first) r.dtype = piece.dtype;
      else if (piece.dtype != r.dtype) throw InputError(dir + ": the parts of '" + ft.name + "' differ in type");
      first = false;
      pieces.push_back({part_of.at(src.name), piece});
    }
    uint64_t bytes = 0;
    for (const auto& p : pieces) bytes += p.record.nbytes();
    if (bytes != r.numel() * dtype_size(r.dtype)) {
      throw InputError(dir + ": the parts of '" + ft.name + "' do not make its shape; the folder is not the layout it looks like");
    }
    r.begin = offset;
    r.end = offset + bytes;
    offset = r.end;
    if (!by_name_.emplace(r.name, index_.tensors.size()).second) throw InputError(dir + ": two tensors read as '" + r.name + "'");
    index_.tensors.push_back(std::move(r));
    pieces_.push_back(std::move(pieces));
  }
  index_.data_bytes = offset;
  for (const auto& part : parts_) file_size_ += part->file_size();
}

}  // namespace fp8s
