#include "core/threads.h"

#include <ATen/Parallel.h>

#include <cstdlib>
#include <thread>

namespace fp8s {

int init_threads(int requested) {
  int n = requested;
  if (n <= 0) {
    if (const char* env = std::getenv("OMP_NUM_THREADS"); env && std::atoi(env) > 0) {
      n = std::atoi(env);
    } else {
      n = static_cast<int>(std::thread::hardware_concurrency());
    }
  }
  if (n <= 0) n = 1;
  at::set_num_threads(n);
  return at::get_num_threads();
}

}  // namespace fp8s
