// The cancel flag of the work running on this thread, so that long work deep inside a step (a
// transformer block, a text-encoder layer, a VAE level or tile, a tensor being loaded) can stop
// without every function taking the flag: run_generation, compare and bench open a scope, and
// those loops call cancel_point().
#pragma once

#include <atomic>

#include "core/error.h"

namespace fp8s {

class CancelScope {
 public:
  explicit CancelScope(const std::atomic<bool>* flag) : previous_(current()) { current() = flag; }
  ~CancelScope() { current() = previous_; }
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

  // The flag of the innermost scope on this thread (nullptr: none).
  static const std::atomic<bool>*& current() {
    thread_local const std::atomic<bool>* flag = nullptr;
    return flag;
  }

 private:
  const std::atomic<bool>* previous_;
};

// Throws Cancelled when this thread's scope has been cancelled; costs one load otherwise.
inline void cancel_point() {
  const auto* flag = CancelScope::current();
  if (flag && flag->load(std::memory_order_relaxed)) throw Cancelled();
}

}  // namespace fp8s
