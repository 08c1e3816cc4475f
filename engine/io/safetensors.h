// safetensors files: a validating reader (mmap views plus pread copies) and an atomic streaming writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/types.h"

namespace fp8s {

// F8_E8M0 is MXFP8's block-scale type: known so that such a file is refused by name (models/fp8_files).
enum class Dtype { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2, F8_E8M0 };

std::size_t dtype_size(Dtype dtype);
const char* dtype_name(Dtype dtype);  // the safetensors spelling: "F16", "F8_E4M3", ...
std::optional<Dtype> parse_dtype(const std::string& name);
bool is_float_dtype(Dtype dtype);
// F8_E4M3 / F8_E5M2, the FP8 formats a weight can be stored in, and their mapping to the codec's.
bool is_fp8_dtype(Dtype dtype);
Fp8Format fp8_format_of(Dtype dtype);  // E5M2 for F8_E5M2, E4M3FN otherwise
Dtype fp8_dtype(Fp8Format format);

struct TensorRecord {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<int64_t> shape;  // empty = 0-d scalar (one element)
  uint64_t begin = 0;          // byte range inside the data area (after the header)
  uint64_t end = 0;

  uint64_t numel() const;
  uint64_t nbytes() const { return end - begin; }
};

// The parsed, validated header of a safetensors file.
struct SafetensorsIndex {
  uint64_t header_bytes = 0;  // length of the JSON header (without the 8-byte length prefix)
  uint64_t data_bytes = 0;    // size of the data area
  std::vector<TensorRecord> tensors;  // ordered by byte range
  std::map<std::string, std::string> metadata;
};

// Validates the first bytes of a safetensors file (`available` bytes of it, `file_size` in total:
// the header must be inside `available`) and returns its index. `label` names the file in errors.
// Throws InputError for every malformation; never reads outside [bytes, bytes + available).
SafetensorsIndex parse_safetensors(const uint8_t* bytes, uint64_t available, uint64_t file_size,
                                   const std::string& label);

// A tensor of a model folder as this app reads it (io/safetensors_folder.cpp): `name` with `shape`,
// its bytes those of `sources` in order (each a folder tensor, or rows of one), i.e. the sources
// concatenated along dim 0: diffusers keeps Z-Image's and Flux's fused q/k/v as three tensors.
struct FolderSource {
  std::string name;
  int64_t row_start = 0;
  int64_t rows = -1;  // -1: all of it
};
struct FolderTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<FolderSource> sources;
};
// A family's reading of a folder's tensors in its own layout (diffusers' names onto the released
// files' names): nullopt when the tensors are not that layout. The families' (FamilyTools::
// folder_names) are asked in order; a folder none recognises keeps its names.
using FolderRenamer = std::function<std::optional<std::vector<FolderTensor>>(const std::map<std::string, TensorRecord>& tensors)>;
// Where the renamers come from: pipeline/family_registry.cpp sets its collector before main().
void set_folder_renamer_source(std::vector<FolderRenamer> (*source)());

// A read-only safetensors file. Opening validates the whole layout; tensor data is read lazily.
class SafetensorsFile {
 public:
  // Throws InputError when the file is missing, unreadable, a pickle checkpoint, or malformed.
  // A folder opens as one file: a diffusers model folder (model_index.json) as its transformer/
  // (or unet/), a component folder as its shards (*.safetensors.index.json, or its .safetensors),
  // renamed by the families' FolderRenamers, its config.json as metadata "config.json"; its tensors
  // are read piece by piece from the shards.
  explicit SafetensorsFile(const std::string& path);
  // A file read under another layout's names: `rename` (a FolderRenamer) gives them (a file it
  // does not recognise keeps its names); read piece by piece as a folder is.
  static SafetensorsFile renamed(const std::string& path, const FolderRenamer& rename);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;

  const std::string& path() const { return path_; }
  bool is_folder() const { return !parts_.empty(); }
  uint64_t file_size() const { return file_size_; }
  const SafetensorsIndex& index() const { return index_; }
  const std::vector<TensorRecord>& tensors() const { return index_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return index_.metadata; }
  const TensorRecord* find(const std::string& name) const;
  // Like find, but throws InputError naming the file when the tensor is absent.
  const TensorRecord& at(const std::string& name) const;

  // Zero-copy view into the mapping. Valid while the file is open and the mapping not released.
  // Reading it after the file was truncated by another process faults: prefer read() for loading.
  const uint8_t* view(const TensorRecord& record) const;

  // Copies the tensor's bytes into `dst` (record.nbytes() bytes) with pread: a file truncated or
  // replaced after it was opened gives an InputError, not a crash. Works without the mapping.
  void read(const TensorRecord& record, void* dst) const;

  // Drops the memory mapping (after loading); read() keeps working.
  void release_mapping();
  // Streaming (models/streaming.h): InputError when the file's size or modification time differ
  // from when it was opened (replaced or rewritten under a loaded model); and a tensor's pages
  // dropped from the page cache after it was read, so that streaming stays inside its budget.
  void check_unchanged() const;
  void drop_cached_pages(const TensorRecord& record) const;

  // How many headers were parsed (files opened) in this process: a request after load reads none
  // (docs/architecture.md, "Headers are read once"; tests count them).
  static uint64_t headers_read();

 private:
  SafetensorsFile() = default;
  void open_folder(const std::string& dir);
  // The parts' tensors under the first renamer's names that recognises them (else their own).
  void assemble(const std::string& dir, const std::vector<FolderRenamer>& renamers);
  struct Piece {
    std::size_t part;
    TensorRecord record;  // the part's record, narrowed to the rows used
  };
  std::vector<std::unique_ptr<SafetensorsFile>> parts_;  // a folder's shards
  std::vector<std::vector<Piece>> pieces_;               // per tensor of index_, for a folder
  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  int64_t mtime_ns_ = 0;
  const uint8_t* map_ = nullptr;
  SafetensorsIndex index_;
  std::map<std::string, std::size_t> by_name_;
};

struct TensorSpec {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<int64_t> shape;
  uint64_t nbytes() const;
};

// Writes a safetensors file tensor by tensor, in the order of `specs`, into a temporary file beside
// `path`; commit() renames it into place. Destroyed without commit(), it removes the temporary file,
// so a failed or cancelled write never leaves a partial file. Refuses to replace an existing file
// unless `overwrite` is set.
class SafetensorsWriter {
 public:
  SafetensorsWriter(std::string path, std::vector<TensorSpec> specs,
                    const std::map<std::string, std::string>& metadata, bool overwrite = false);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Appends bytes of the current tensor; a tensor may be written in several pieces.
  void append(const void* bytes, std::size_t n);
  // Name and spec of the tensor that append() writes next (throws when all are written).
  const TensorSpec& next() const;
  bool done() const { return current_ == specs_.size(); }
  void commit();

 private:
  void write_all(const void* bytes, std::size_t n);

  std::string path_;
  std::string temp_path_;
  std::vector<TensorSpec> specs_;
  bool overwrite_ = false;
  int fd_ = -1;
  std::size_t current_ = 0;
  uint64_t written_in_current_ = 0;
  bool committed_ = false;
};

// Refuses checkpoint formats other than safetensors (pickle: .ckpt, .pt, .pth, .bin) with a message
// saying why and what to do. Called before opening any model file.
void refuse_pickle_checkpoint(const std::string& path);

}  // namespace fp8s
