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

std::string find_vocabulary(const VocabularySearch& search, const std::string& explicit_path, const std::string& model,
                            const std::function<bool(const std::string&)>& holds) {
  if (!explicit_path.empty()) {
    if (holds(explicit_path)) return explicit_path;
    throw MissingVocabulary(explicit_path + ": " + search.name + " not found");
  }
  std::vector<std::string> paths;
  if (!model.empty()) {
    if (is_dir(model)) paths.push_back(model + "/" + search.folder);
    for (const auto& b : search.beside) paths.push_back(dirname_of(model) + "/" + b);
  }
  if (const char* env = std::getenv(search.env.c_str()); env && *env) paths.push_back(env);
  const auto data = data_dirs(search.data);
  paths.insert(paths.end(), data.begin(), data.end());
  std::string looked;
  for (const auto& p : paths) {
    if (holds(p)) return p;
    looked += (looked.empty() ? "" : ", ") + p;
  }
  throw MissingVocabulary("the " + search.name + " was not found; looked in: " + looked + ". " + search.hint +
                          " or put it in " + (data.empty() ? "~/.local/share/fp8studio/" + search.data : data.front()));
}

}  // namespace fp8s
