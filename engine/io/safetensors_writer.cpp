// SafetensorsWriter: a safetensors file written tensor by tensor into a temporary file beside its
// path, renamed into place on commit (io/safetensors.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "core/error.h"
#include "io/safetensors.h"

namespace fp8s {
namespace {

std::string sys_error() { return std::strerror(errno); }

}  // namespace

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<TensorSpec> specs,
                                     const std::map<std::string, std::string>& metadata,
                                     bool overwrite)
    : path_(std::move(path)), specs_(std::move(specs)), overwrite_(overwrite) {
  std::set<std::string> names;
  for (const auto& s : specs_) {
    if (!names.insert(s.name).second) {
      throw InputError("cannot write " + path_ + ": tensor '" + s.name + "' is listed twice");
    }
  }
  if (!overwrite_ && ::access(path_.c_str(), F_OK) == 0) {
    throw InputError(path_ + " already exists; choose another --out or remove it first");
  }
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  uint64_t offset = 0;
  for (const auto& s : specs_) {
    const uint64_t n = s.nbytes();
    header[s.name] = {{"dtype", dtype_name(s.dtype)},
                      {"shape", s.shape},
                      {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // align the data area to 8 bytes

  temp_path_ = path_ + ".partial-XXXXXX";
  std::vector<char> tmpl(temp_path_.begin(), temp_path_.end());
  tmpl.push_back('\0');
  fd_ = ::mkstemp(tmpl.data());
  if (fd_ < 0) throw InputError("cannot write " + path_ + " (" + sys_error() + ")");
  temp_path_ = tmpl.data();
  ::fchmod(fd_, 0644);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t(text.size()) >> (8 * i));
  write_all(len, 8);
  write_all(text.data(), text.size());
  while (current_ < specs_.size() && specs_[current_].nbytes() == 0) ++current_;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
}

const TensorSpec& SafetensorsWriter::next() const {
  if (done()) throw RuntimeFailure(path_ + ": every tensor was already written");
  return specs_[current_];
}

void SafetensorsWriter::write_all(const void* bytes, std::size_t n) {
  const auto* p = static_cast<const uint8_t*>(bytes);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      throw RuntimeFailure("writing " + path_ + " failed (" + sys_error() +
                           "); no file was left behind");
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void SafetensorsWriter::append(const void* bytes, std::size_t n) {
  const auto* p = static_cast<const uint8_t*>(bytes);
  while (n > 0) {
    const auto& spec = next();
    const uint64_t room = spec.nbytes() - written_in_current_;
    const std::size_t take = static_cast<std::size_t>(std::min<uint64_t>(room, n));
    write_all(p, take);
    p += take;
    n -= take;
    written_in_current_ += take;
    if (written_in_current_ == spec.nbytes()) {
      written_in_current_ = 0;
      ++current_;
      while (current_ < specs_.size() && specs_[current_].nbytes() == 0) ++current_;
    }
  }
}

void SafetensorsWriter::commit() {
  if (!done()) {
    throw RuntimeFailure(path_ + ": commit before tensor '" + specs_[current_].name +
                         "' was written");
  }
  if (::fsync(fd_) != 0) throw RuntimeFailure("writing " + path_ + " failed (" + sys_error() + ")");
  ::close(fd_);
  fd_ = -1;
  if (overwrite_) {
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
      throw RuntimeFailure("cannot move the new file to " + path_ + " (" + sys_error() + ")");
    }
  } else {
    // link() fails if the target appeared meanwhile: never replace a file we did not own.
    if (::link(temp_path_.c_str(), path_.c_str()) != 0) {
      throw InputError("cannot create " + path_ + " (" + sys_error() + ")");
    }
    ::unlink(temp_path_.c_str());
  }
  committed_ = true;
}

}  // namespace fp8s
