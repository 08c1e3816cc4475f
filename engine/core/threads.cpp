#include "core/threads.h"

#include "core/logging.h"

#include <ATen/Parallel.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <fstream>
#include <sstream>
#include <thread>

namespace {
std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

std::optional<long long> to_number(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  while (end && (*end == ' ' || *end == '\n' || *end == '\t')) ++end;
  if (!end || *end != '\0') return std::nullopt;
  return v;
}

std::optional<int> quota_cores(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  return static_cast<int>(std::max<long long>(1, (quota + period - 1) / period));
}

bool env_has(char** envp, const char* prefix) {
  const std::size_t n = std::strlen(prefix);
  for (char** e = envp; e && *e; ++e) {
    if (std::strncmp(*e, prefix, n) == 0) return true;
  }
  return false;
}
}  // namespace

extern "C" void fp8s_preinit_waits(int, char** argv, char** envp) {
  // plain C only: this runs from .preinit_array, before any library's initialiser (libc's too)
  if (!envp || env_has(envp, "FP8S_DEFAULT_WAITS=")) return;  // done, or the user opted out
  static char spin[64], blas[64], marker[128];
  static char* env[4096];
  std::size_t n = 0;
  for (char** e = envp; *e; ++e) {
    if (n + 4 >= sizeof(env) / sizeof(env[0])) return;  // an absurd environment: leave it be
    env[n++] = *e;
  }
  std::snprintf(marker, sizeof(marker), "FP8S_DEFAULT_WAITS=");
  if (!env_has(envp, "OMP_WAIT_POLICY=") && !env_has(envp, "GOMP_SPINCOUNT=")) {
    std::snprintf(spin, sizeof(spin), "GOMP_SPINCOUNT=%s", fp8s::kDefaultGompSpinCount);
    env[n++] = spin;
    std::strncat(marker, "GOMP_SPINCOUNT ", sizeof(marker) - std::strlen(marker) - 1);
  }
  if (!env_has(envp, "OPENBLAS_THREAD_TIMEOUT=")) {
    std::snprintf(blas, sizeof(blas), "OPENBLAS_THREAD_TIMEOUT=%s", fp8s::kDefaultOpenblasTimeout);
    env[n++] = blas;
    std::strncat(marker, "OPENBLAS_THREAD_TIMEOUT", sizeof(marker) - std::strlen(marker) - 1);
  }
  if (n == 0 || (env[n - 1] != spin && env[n - 1] != blas)) return;  // the user set them all
  env[n++] = marker;  // the started copy does not come here again
  env[n] = nullptr;
  execve("/proc/self/exe", argv, env);
  // nothing to add, or the exec failed: go on with the environment as it is
}

namespace fp8s {

std::optional<int> cgroup_v2_cores(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota, period;
  if (!(in >> quota >> period) || quota == "max") return std::nullopt;
  const auto q = to_number(quota), p = to_number(period);
  if (!q || !p) return std::nullopt;
  return quota_cores(*q, *p);
}

std::optional<int> cgroup_v1_cores(const std::string& quota_us, const std::string& period_us) {
  const auto q = to_number(quota_us), p = to_number(period_us);
  if (!q || !p) return std::nullopt;
  return quota_cores(*q, *p);
}

UsableCores usable_cores() {
  UsableCores u;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) u.affinity = CPU_COUNT(&set);
  if (const auto v2 = read_first_line("/sys/fs/cgroup/cpu.max"); !v2.empty()) {
    u.quota = cgroup_v2_cores(v2);
  } else {
    u.quota = cgroup_v1_cores(read_first_line("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
                              read_first_line("/sys/fs/cgroup/cpu/cpu.cfs_period_us"));
  }
  int n = u.affinity > 0 ? u.affinity : static_cast<int>(std::thread::hardware_concurrency());
  if (u.quota) n = std::min(n, *u.quota);
  u.cores = std::max(1, n);
  return u;
}

ThreadChoice init_threads(int requested) {
  ThreadChoice c;
  c.cores = usable_cores();
  if (requested > 0) {
    c.threads = requested;
    c.from = "--threads";
  } else if (const char* env = std::getenv("OMP_NUM_THREADS"); env && std::atoi(env) > 0) {
    c.threads = std::atoi(env);
    c.from = "OMP_NUM_THREADS";
  } else {
    c.threads = c.cores.cores;
    c.from = "auto";
  }
  if (c.threads > c.cores.cores) {
    // more threads than cores only wait for each other at every barrier (4096 on 2 cores made no
    // progress in a minute)
    log().warn("{} {} threads, but this process may use {} cores: using {}", c.from, c.threads, c.cores.cores, c.cores.cores);
    c.threads = c.cores.cores;
  }
  at::set_num_threads(c.threads);
  c.threads = at::get_num_threads();
  if (const char* policy = std::getenv("OMP_WAIT_POLICY")) {
    c.wait = std::string("OMP_WAIT_POLICY=") + policy;
  } else if (const char* spin = std::getenv("GOMP_SPINCOUNT")) {
    const char* defaulted = std::getenv("FP8S_DEFAULT_WAITS");
    const bool ours = defaulted && std::strstr(defaulted, "GOMP_SPINCOUNT");
    c.wait = std::string("GOMP_SPINCOUNT=") + spin + (ours ? " (default)" : "");
  } else {
    c.wait = "libgomp's default (spins 300000 times: this executable did not set its default)";
  }
  return c;
}

std::string describe(const ThreadChoice& c) {
  std::ostringstream s;
  s << c.threads << (c.threads == 1 ? " thread" : " threads") << " (" << c.from << "; this process may use "
    << c.cores.cores << (c.cores.cores == 1 ? " core" : " cores") << ": affinity " << c.cores.affinity;
  if (c.cores.quota) s << ", cgroup quota " << *c.cores.quota;
  s << "); OpenMP wait " << c.wait;
  return s.str();
}

}  // namespace fp8s
