#include "io/safetensors.h"

#include <atomic>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/files.h"

namespace fp8s {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;
// SDXL has ~2,600 tensors; a header claiming far more is not a model.
constexpr std::size_t kMaxTensors = 100000;

struct DtypeInfo {
  Dtype dtype;
  const char* name;
  std::size_t size;
  bool is_float;
};

constexpr DtypeInfo kDtypes[] = {
    {Dtype::F64, "F64", 8, true},         {Dtype::F32, "F32", 4, true},
    {Dtype::F16, "F16", 2, true},         {Dtype::BF16, "BF16", 2, true},
    {Dtype::I64, "I64", 8, false},        {Dtype::I32, "I32", 4, false},
    {Dtype::I16, "I16", 2, false},        {Dtype::I8, "I8", 1, false},
    {Dtype::U8, "U8", 1, false},          {Dtype::BOOL, "BOOL", 1, false},
    {Dtype::F8_E4M3, "F8_E4M3", 1, true}, {Dtype::F8_E5M2, "F8_E5M2", 1, true},
    {Dtype::F8_E8M0, "F8_E8M0", 1, false},
};

const DtypeInfo& info(Dtype dtype) { return kDtypes[static_cast<int>(dtype)]; }

std::string sys_error() { return std::strerror(errno); }

// Product of the dims with overflow detection; nullopt on overflow.
std::optional<uint64_t> checked_numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    const auto ud = static_cast<uint64_t>(d);
    if (ud != 0 && n > UINT64_MAX / ud) return std::nullopt;
    n *= ud;
  }
  return n;
}

TensorRecord parse_record(const std::string& name, const nlohmann::json& entry,
                          const std::string& label) {
  const std::string where = label + ": tensor '" + name + "'";
  if (!entry.is_object()) throw InputError(where + " is not a JSON object");
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field)) throw InputError(where + " has no '" + field + "'");
  }
  TensorRecord record;
  record.name = name;
  const auto& dtype = entry["dtype"];
  if (!dtype.is_string()) throw InputError(where + ": dtype is not a string");
  auto parsed = parse_dtype(dtype.get<std::string>());
  if (!parsed) {
    throw InputError(where + " has unknown dtype '" + dtype.get<std::string>() +
                     "' (known: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL F8_E4M3 F8_E5M2 F8_E8M0); 4- and 6-bit "
                     "formats (NVFP4, MXFP4) cannot run here: FP8 Studio runs FP8 E4M3/E5M2 only");
  }
  record.dtype = *parsed;
  const auto& shape = entry["shape"];
  if (!shape.is_array()) throw InputError(where + ": shape is not an array");
  for (const auto& d : shape) {
    if (!d.is_number_integer()) {
      throw InputError(where + " has a non-integer shape entry " + d.dump());
    }
    if (!d.is_number_unsigned()) {
      throw InputError(where + " has a negative shape entry " + d.dump());
    }
    const auto value = d.get<uint64_t>();
    if (value > static_cast<uint64_t>(INT64_MAX)) {
      throw InputError(where + " has a shape entry too large: " + d.dump());
    }
    record.shape.push_back(static_cast<int64_t>(value));
  }
  const auto& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    throw InputError(where + ": data_offsets must be two non-negative integers");
  }
  record.begin = offsets[0].get<uint64_t>();
  record.end = offsets[1].get<uint64_t>();
  if (record.end < record.begin) {
    throw InputError(where + ": data_offsets end before they begin");
  }
  auto numel = checked_numel(record.shape);
  if (!numel || *numel > UINT64_MAX / dtype_size(record.dtype)) {
    throw InputError(where + ": the shape's size overflows 64 bits");
  }
  const uint64_t expected = *numel * dtype_size(record.dtype);
  if (expected != record.nbytes()) {
    throw InputError(where + ": shape x dtype size is " + std::to_string(expected) +
                     " bytes but its byte range holds " + std::to_string(record.nbytes()));
  }
  return record;
}

}  // namespace

std::size_t dtype_size(Dtype dtype) { return info(dtype).size; }
const char* dtype_name(Dtype dtype) { return info(dtype).name; }
bool is_float_dtype(Dtype dtype) { return info(dtype).is_float; }
bool is_fp8_dtype(Dtype dtype) { return dtype == Dtype::F8_E4M3 || dtype == Dtype::F8_E5M2; }
Fp8Format fp8_format_of(Dtype dtype) { return dtype == Dtype::F8_E5M2 ? Fp8Format::E5M2 : Fp8Format::E4M3FN; }
Dtype fp8_dtype(Fp8Format format) { return format == Fp8Format::E5M2 ? Dtype::F8_E5M2 : Dtype::F8_E4M3; }

std::optional<Dtype> parse_dtype(const std::string& name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return d.dtype;
  }
  return std::nullopt;
}

uint64_t TensorRecord::numel() const { return checked_numel(shape).value_or(0); }

uint64_t TensorSpec::nbytes() const {
  auto n = checked_numel(shape);
  if (!n) throw InputError("tensor '" + name + "': shape size overflows");
  return *n * dtype_size(dtype);
}

SafetensorsIndex parse_safetensors(const uint8_t* bytes, uint64_t available, uint64_t file_size,
                                   const std::string& label) {
  if (file_size < 8 || available < 8) {
    throw InputError(label + ": not a safetensors file (" + std::to_string(file_size) +
                     " bytes, shorter than the 8-byte header length)");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > kMaxHeaderBytes) {
    throw InputError(label + ": header length " + std::to_string(header_len) +
                     " bytes is absurd (limit 100 MB); the file is not safetensors or is corrupt");
  }
  if (header_len > file_size - 8) {
    throw InputError(label + ": header length " + std::to_string(header_len) +
                     " exceeds the file size " + std::to_string(file_size) +
                     "; the file is truncated or not safetensors");
  }
  if (header_len > available - 8) {
    throw InputError(label + ": header is not fully readable");
  }
  const char* text = reinterpret_cast<const char*>(bytes + 8);

  // nlohmann keeps the last of duplicate keys silently; the callback sees every top-level key.
  // The tensor-count limit applies while parsing, so a huge header stops at its 100,001st entry.
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1) {
      if (seen.size() > kMaxTensors) {
        throw InputError(label + ": the header lists more than " + std::to_string(kMaxTensors + 1) + " entries (limit " +
                         std::to_string(kMaxTensors) + " tensors); the file is not a model");
      }
      auto key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + header_len, on_event);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(label + ": header is not valid UTF-8 JSON (" + std::string(e.what()) + ")");
  }
  if (!header.is_object()) throw InputError(label + ": header is not a JSON object");
  if (!duplicate.empty()) {
    throw InputError(label + ": tensor name '" + duplicate + "' appears twice in the header");
  }

  if (header.size() > kMaxTensors + 1) {
    throw InputError(label + ": the header lists " + std::to_string(header.size()) +
                     " entries (limit " + std::to_string(kMaxTensors) + " tensors); the file is not a model");
  }
  SafetensorsIndex index;
  index.header_bytes = header_len;
  index.data_bytes = file_size - 8 - header_len;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw InputError(label + ": __metadata__ is not a JSON object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          throw InputError(label + ": __metadata__ entry '" + key + "' is not a string");
        }
        index.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    index.tensors.push_back(parse_record(name, entry, label));
  }
  std::sort(index.tensors.begin(), index.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  for (const auto& t : index.tensors) {
    if (t.end > index.data_bytes) {
      throw InputError(label + ": tensor '" + t.name + "' ends at byte " + std::to_string(t.end) +
                       " beyond the data area (" + std::to_string(index.data_bytes) +
                       " bytes); the file is truncated or corrupt");
    }
    if (t.begin < cursor) {
      throw InputError(label + ": tensor '" + t.name + "' overlaps the tensor before it");
    }
    if (t.begin > cursor) {
      throw InputError(label + ": a hole of " + std::to_string(t.begin - cursor) +
                       " bytes lies before tensor '" + t.name + "'");
    }
    cursor = t.end;
  }
  if (cursor != index.data_bytes) {
    throw InputError(label + ": " + std::to_string(index.data_bytes - cursor) +
                     " bytes after the last tensor belong to no tensor");
  }
  return index;
}

void refuse_pickle_checkpoint(const std::string& path) {
  auto dot = path.find_last_of('.');
  std::string ext = dot == std::string::npos ? "" : path.substr(dot);
  std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
  if (ext == ".ckpt" || ext == ".pt" || ext == ".pth" || ext == ".bin" || ext == ".pkl") {
    throw InputError(path + ": pickle checkpoints (" + ext +
                     ") are refused because loading them can execute arbitrary code; "
                     "convert it to .safetensors (e.g. with the safetensors Python package or "
                     "a trusted tool) and open that");
  }
}

namespace {
std::atomic<uint64_t> g_headers_read{0};
}  // namespace

uint64_t SafetensorsFile::headers_read() { return g_headers_read.load(); }

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  struct stat dir {};
  if (::stat(path.c_str(), &dir) == 0 && S_ISDIR(dir.st_mode)) {
    open_folder(path);
    return;
  }
  g_headers_read.fetch_add(1);
  refuse_pickle_checkpoint(path);
  refuse_special_file(path);
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO put in place since: no wait, fstat refuses it
  if (fd_ < 0) throw InputError(path + ": cannot open (" + sys_error() + ")");
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(path + ": not a regular file");
  }
  file_size_ = static_cast<uint64_t>(st.st_size);
  mtime_ns_ = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  try {
    if (file_size_ > 0) {
      void* m = ::mmap(nullptr, file_size_, PROT_READ, MAP_PRIVATE, fd_, 0);
      if (m == MAP_FAILED) throw InputError(path + ": cannot map (" + sys_error() + ")");
      map_ = static_cast<const uint8_t*>(m);
    }
    // The header is read through pread so a concurrently truncated file cannot fault here.
    uint8_t prefix[8] = {};
    ssize_t got = file_size_ >= 8 ? ::pread(fd_, prefix, 8, 0) : 0;
    if (file_size_ >= 8 && got != 8) throw InputError(path + ": cannot read the header");
    if (file_size_ >= 4 && std::memcmp(prefix, "GGUF", 4) == 0) {
      throw InputError(path + ": a GGUF file (llama.cpp / ComfyUI-GGUF quantisation), not safetensors; "
                       "FP8 Studio runs safetensors checkpoints in FP8 E4M3/E5M2 or 16/32-bit only");
    }
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | prefix[i];
    std::vector<uint8_t> head;
    if (file_size_ >= 8 && header_len <= kMaxHeaderBytes && header_len <= file_size_ - 8) {
      head.resize(8 + header_len);
      if (::pread(fd_, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size())) {
        throw InputError(path + ": cannot read the header");
      }
    } else {
      head.assign(prefix, prefix + (file_size_ >= 8 ? 8 : 0));
    }
    index_ = parse_safetensors(head.data(), head.size(), file_size_, path);
  } catch (...) {
    if (map_) ::munmap(const_cast<uint8_t*>(map_), file_size_);
    ::close(fd_);
    fd_ = -1;
    map_ = nullptr;
    throw;
  }
  for (std::size_t i = 0; i < index_.tensors.size(); ++i) by_name_[index_.tensors[i].name] = i;
}

SafetensorsFile::~SafetensorsFile() {
  release_mapping();
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept { *this = std::move(other); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    release_mapping();
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    file_size_ = other.file_size_;
    mtime_ns_ = other.mtime_ns_;
    map_ = std::exchange(other.map_, nullptr);
    index_ = std::move(other.index_);
    by_name_ = std::move(other.by_name_);
    parts_ = std::move(other.parts_);
    pieces_ = std::move(other.pieces_);
  }
  return *this;
}

const TensorRecord* SafetensorsFile::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &index_.tensors[it->second];
}

const TensorRecord& SafetensorsFile::at(const std::string& name) const {
  const auto* r = find(name);
  if (!r) throw InputError(path_ + ": has no tensor '" + name + "'");
  return *r;
}

const uint8_t* SafetensorsFile::view(const TensorRecord& record) const {
  if (is_folder()) {
    const auto& pieces = pieces_.at(by_name_.at(record.name));
    if (pieces.size() != 1) throw RuntimeFailure(path_ + ": tensor '" + record.name + "' is assembled from several; read() it");
    return parts_[pieces[0].part]->view(pieces[0].record);
  }
  if (!map_) throw RuntimeFailure(path_ + ": the file mapping was released");
  return map_ + 8 + index_.header_bytes + record.begin;
}

void SafetensorsFile::read(const TensorRecord& record, void* dst) const {
  if (is_folder()) {
    auto* out = static_cast<uint8_t*>(dst);
    for (const auto& piece : pieces_.at(by_name_.at(record.name))) {
      parts_[piece.part]->read(piece.record, out);
      out += piece.record.nbytes();
    }
    return;
  }
  uint64_t offset = 8 + index_.header_bytes + record.begin;
  uint64_t remaining = record.nbytes();
  auto* out = static_cast<uint8_t*>(dst);
  while (remaining > 0) {
    const std::size_t chunk = static_cast<std::size_t>(std::min<uint64_t>(remaining, 1u << 30));
    ssize_t got = ::pread(fd_, out, chunk, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      throw InputError(path_ + ": tensor '" + record.name +
                       "' could not be read (the file was truncated or changed after it was "
                       "opened" + (got < 0 ? ": " + sys_error() : std::string()) + ")");
    }
    out += got;
    offset += static_cast<uint64_t>(got);
    remaining -= static_cast<uint64_t>(got);
  }
}

void SafetensorsFile::check_unchanged() const {
  for (const auto& part : parts_) part->check_unchanged();
  if (is_folder()) return;
  struct stat st {};
  const bool same = ::fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) == file_size_ &&
                    static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec == mtime_ns_;
  if (!same) {
    throw InputError(path_ + ": the file changed on disk after the model was loaded (its size or time differ); "
                     "load the model again");
  }
}

void SafetensorsFile::drop_cached_pages(const TensorRecord& record) const {
  if (is_folder()) {
    for (const auto& piece : pieces_.at(by_name_.at(record.name))) parts_[piece.part]->drop_cached_pages(piece.record);
    return;
  }
  ::posix_fadvise(fd_, static_cast<off_t>(8 + index_.header_bytes + record.begin), static_cast<off_t>(record.nbytes()),
                  POSIX_FADV_DONTNEED);
}

void SafetensorsFile::release_mapping() {
  for (const auto& part : parts_) part->release_mapping();
  if (map_) {
    ::munmap(const_cast<uint8_t*>(map_), file_size_);
    map_ = nullptr;
  }
}

}  // namespace fp8s
