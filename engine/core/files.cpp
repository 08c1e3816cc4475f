#include "core/files.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/install_prefix.h"

namespace fp8s {

bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string dirname_of(const std::string& p) {
  auto slash = p.find_last_of('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

std::vector<std::string> names_in(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        out.push_back(name);
      }
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> safetensors_in(const std::string& dir) { return names_in(dir, ".safetensors"); }

void refuse_special_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    throw InputError(path + ": not a regular file (" + (S_ISDIR(st.st_mode) ? "a folder" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket") +
                     "); give the path of a file");
  }
}

std::string read_file(const std::string& path) {
  refuse_special_file(path);
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path + ": cannot open");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> data_dirs(const std::string& sub) {
  std::vector<std::string> dirs;
  std::string data_home;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) {
    data_home = x;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    data_home = std::string(h) + "/.local/share";
  }
  if (!data_home.empty()) dirs.push_back(data_home + "/fp8studio/" + sub);
  const std::string prefix = install_prefix();
  if (!prefix.empty()) dirs.push_back(prefix + "/share/fp8studio/" + sub);
  return dirs;
}

}  // namespace fp8s
