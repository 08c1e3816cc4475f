// CPU threads on a shared machine (issue 44).
//
// The intra-op thread count is chosen on purpose: the cores this process may use (its affinity
// mask, and a cgroup CPU quota when one is set), not nproc alone. LibTorch's own default here is one
// thread (cpuinfo sees one physical core on these VMs).
//
// OpenMP's threads must not spin away another process's time at their barriers: libgomp spins
// 300,000 times (about 0.1 s at a barrier where the others are late) before it sleeps, and
// OpenBLAS's pthreads spin 2^28 cycles. Both read their settings once, in their own initialisers,
// before main() runs; so each executable includes core/openmp_preinit.h, whose function runs from
// .preinit_array, before any shared library's initialiser, and gives them bounded waits unless the
// user set them (OMP_WAIT_POLICY, GOMP_SPINCOUNT, OPENBLAS_THREAD_TIMEOUT).
#pragma once

#include <optional>
#include <string>

namespace fp8s {

// The bounded waits the preinit function gives (core/openmp_preinit.h), when the user set none.
inline constexpr const char* kDefaultGompSpinCount = "3000";  // tens of µs of PAUSE, then the futex
inline constexpr const char* kDefaultOpenblasTimeout = "4";     // 2^4 cycles, OpenBLAS's least

// A cgroup CPU quota as a core count, rounded up: cgroup v2's cpu.max ("max 100000" → none,
// "150000 100000" → 2) or v1's cfs_quota_us and cfs_period_us (-1 → none). nullopt when unlimited
// or unreadable.
std::optional<int> cgroup_v2_cores(const std::string& cpu_max);
std::optional<int> cgroup_v1_cores(const std::string& quota_us, const std::string& period_us);

struct UsableCores {
  int cores = 1;           // min(affinity, quota), at least 1
  int affinity = 0;        // CPUs in the affinity mask (0: unknown)
  std::optional<int> quota;  // the cgroup quota in cores, when limited
};
// The cores this process may use, read from sched_getaffinity and /sys/fs/cgroup (v2, else v1).
UsableCores usable_cores();

struct ThreadChoice {
  int threads = 1;
  UsableCores cores;
  std::string from;  // "--threads", "OMP_NUM_THREADS" or "auto" (the usable cores)
  std::string wait;  // the OpenMP wait in effect, e.g. "GOMP_SPINCOUNT=10000 (default)"
};

// Sets the intra-op thread count: `requested` when > 0, else $OMP_NUM_THREADS when set, else the
// usable cores. Applies to the calling thread and to threads that have not run a parallel op yet
// (a worker thread calls it again to change its own count). Returns the choice.
ThreadChoice init_threads(int requested = 0);

// One line for the start-up log: "4 threads (auto; this process may use 4 cores: affinity 8,
// cgroup quota 4); OpenMP wait GOMP_SPINCOUNT=10000 (default)".
std::string describe(const ThreadChoice& choice);

}  // namespace fp8s

// The .preinit_array function (core/openmp_preinit.h): when the user set none of the waits, it
// starts this executable again (execve of /proc/self/exe, before any library has initialised:
// about 20 ms of the dynamic loader) with the defaults added to its environment. It cannot set
// them in place: libc's own initialiser, which runs after it, resets the environment to the
// kernel's. FP8S_DEFAULT_WAITS names what it added; set it (to anything) to opt out.
extern "C" void fp8s_preinit_waits(int argc, char** argv, char** envp);
